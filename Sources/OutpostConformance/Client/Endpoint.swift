/// Where the server under test listens: `http://HOST[:PORT][/PREFIX]`.
///
/// The suite speaks plain HTTP/1.1 over TCP itself (it must control every byte), so only
/// `http://` URLs are accepted. A deployment behind a TLS proxy is checked through the
/// proxy's plain-HTTP side or a local tunnel. A path prefix (a proxy that mounts Outpost
/// under `/outpost`) is put in front of every request path.
public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
    /// Host name or address literal (IPv6 without brackets).
    public let host: String
    /// TCP port.
    public let port: Int
    /// Path prefix without a trailing slash; empty for none.
    public let pathPrefix: String

    /// A failure to read a base URL.
    public struct Invalid: Error, CustomStringConvertible {
        /// What is wrong with the URL.
        public let description: String
    }

    /// Parses `http://HOST[:PORT][/PREFIX]` (port 80 when absent).
    public init(url: String) throws(Invalid) {
        guard url.hasPrefix("http://") else {
            throw Invalid(description: "\(url): only http:// URLs are supported (the suite speaks raw HTTP/1.1; check a TLS deployment through its plain-HTTP side)")
        }
        var rest = Substring(url.dropFirst("http://".count))
        var prefix = ""
        if let slash = rest.firstIndex(of: "/") {
            prefix = String(rest[slash...])
            rest = rest[..<slash]
        }
        while prefix.hasSuffix("/") { prefix.removeLast() }
        guard !prefix.contains("?"), !prefix.contains("#") else { throw Invalid(description: "\(url): the base URL cannot have a query or fragment") }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw Invalid(description: "\(url): unterminated IPv6 literal") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw Invalid(description: "\(url): bad authority") }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty, !host.contains("@") else { throw Invalid(description: "\(url): no host (user info is not supported)") }
        var port = 80
        if let portText {
            guard let p = Int(portText), p > 0, p <= 65535 else { throw Invalid(description: "\(url): bad port \(portText)") }
            port = p
        }
        self.host = String(host)
        self.port = port
        self.pathPrefix = prefix
    }

    /// The `Host` header value.
    public var hostHeader: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == 80 ? h : "\(h):\(port)"
    }

    /// The request target for a protocol path such as `/v1/info`.
    public func target(_ path: String) -> String { pathPrefix + path }

    /// The base URL.
    public var description: String { "http://\(hostHeader)\(pathPrefix)" }
}
