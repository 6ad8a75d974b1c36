/// The version of the Outpost sync protocol this code speaks (docs/protocol.md, "version 1.1").
public enum OutpostProtocol {
    /// The `protocol` number in `GET /v1/info`.
    public static let version = 1
    /// The `protocolVersion` in `GET /v1/info`: 1.1 adds re-offer lineage (docs/protocol.md
    /// sections 4 and 5); every 1.0 message means what it meant.
    public static let revision = "1.1"

    /// True when a server that reports `revision` keeps re-offer lineage.
    public static func keepsLineage(_ revision: String) -> Bool {
        let parts = revision.split(separator: ".").compactMap { Int($0) }
        guard let major = parts.first else { return false }
        return major > 1 || (major == 1 && (parts.dropFirst().first ?? 0) >= 1)
    }
    /// The product version, reported as `outpost/<version>` in `GET /v1/info`.
    public static let productVersion = "0.1.0"
}
