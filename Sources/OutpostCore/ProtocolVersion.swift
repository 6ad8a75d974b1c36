/// The version of the Outpost sync protocol this code speaks (PROTOCOL.md, "version 1").
public enum OutpostProtocol {
    /// The `protocol` number in `GET /v1/info`.
    public static let version = 1
    /// The product version, reported as `outpost/<version>` in `GET /v1/info`.
    public static let productVersion = "0.1.0"
}
