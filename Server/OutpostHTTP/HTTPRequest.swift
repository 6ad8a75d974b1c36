// Value types a handler receives.

/// One `name=value` pair of a query string.
public struct HTTPQueryItem: Sendable, Hashable {
    /// The decoded name.
    public var name: String
    /// The decoded value (`""` when the item had no `=`).
    public var value: String
    /// Creates an item.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// A request's method, target and header fields: everything known before the body.
/// Pre-body checks (auth, limits) receive this.
public struct HTTPRequestHead: Sendable {
    /// The request method.
    public var method: HTTPMethod
    /// The request-target as sent (RFC 9112 section 3.2), e.g. `/v1/spaces/a/pull?since=x`.
    public var target: String
    /// The path component of the target, still percent-encoded as sent (`/v1/spaces/a/pull`).
    /// Route parameters are decoded; see `HTTPRequest.pathParameters`.
    public var path: String
    /// The query string parsed as `application/x-www-form-urlencoded` (`+` is a space),
    /// decoded, in order. Empty when the target has no `?`.
    public var query: [HTTPQueryItem]
    /// HTTP/1.0 or HTTP/1.1.
    public var version: HTTPVersion
    /// The header fields in the order received.
    public var headers: HTTPHeaders
    /// The request's id: the client's `X-Request-ID` when it is 1 to 128 characters of
    /// `[A-Za-z0-9._:-]`, otherwise one the server made. Echoed on the response.
    public var requestID: String
    /// The peer as `"ip:port"` (`"[ip6]:port"` for IPv6).
    public var remoteAddress: String

    /// Creates a head (tests and in-process callers; the engine builds these from the wire).
    public init(
        method: HTTPMethod, target: String, version: HTTPVersion = .http1_1,
        headers: HTTPHeaders = HTTPHeaders(), requestID: String = "test", remoteAddress: String = "127.0.0.1:0"
    ) {
        self.method = method
        self.target = target
        let (path, query) = splitTarget(target)
        self.path = path
        self.query = query.map(parseQuery) ?? []
        self.version = version
        self.headers = headers
        self.requestID = requestID
        self.remoteAddress = remoteAddress
    }

    /// The engine's initializer: path and query already split from the target.
    init(
        method: HTTPMethod, target: String, path: String, query: [HTTPQueryItem], version: HTTPVersion,
        headers: HTTPHeaders, requestID: String, remoteAddress: String
    ) {
        self.method = method
        self.target = target
        self.path = path
        self.query = query
        self.version = version
        self.headers = headers
        self.requestID = requestID
        self.remoteAddress = remoteAddress
    }

    /// The first query value named `name`, decoded.
    public func query(_ name: String) -> String? {
        query.first { $0.name == name }?.value
    }

    /// Every query value named `name`, in order.
    public func queryValues(_ name: String) -> [String] {
        query.filter { $0.name == name }.map(\.value)
    }
}

/// A complete request: head, body and the route's path parameters.
public struct HTTPRequest: Sendable {
    /// Method, target, headers, request id.
    public var head: HTTPRequestHead
    /// The body, already de-chunked and, when it came with `Content-Encoding: gzip`,
    /// decompressed (and then no larger than the route's limit).
    public var body: [UInt8]
    /// Values of the route pattern's `{name}` segments, percent-decoded.
    public var pathParameters: [String: String]
    /// The pattern of the route that matched, e.g. `/v1/spaces/{space}/pull`.
    public var routePattern: String?

    /// Creates a request.
    public init(head: HTTPRequestHead, body: [UInt8] = [], pathParameters: [String: String] = [:], routePattern: String? = nil) {
        self.head = head
        self.body = body
        self.pathParameters = pathParameters
        self.routePattern = routePattern
    }

    /// The request method.
    public var method: HTTPMethod { head.method }
    /// The raw path.
    public var path: String { head.path }
    /// The header fields.
    public var headers: HTTPHeaders { head.headers }
    /// The request id (echoed as `X-Request-ID`).
    public var requestID: String { head.requestID }
    /// The first query value named `name`.
    public func query(_ name: String) -> String? { head.query(name) }
    /// The path parameter named `name` (from a `{name}` pattern segment).
    public func parameter(_ name: String) -> String? { pathParameters[name] }
    /// The first header value named `name`.
    public func header(_ name: String) -> String? { head.headers[name] }
}

// MARK: Target parsing

/// The path and query of a request-target in origin-form (`/p?q`) or absolute-form
/// (`http://host/p?q`, which servers must accept, RFC 9112 section 3.2.2). Nil for the
/// authority and asterisk forms, which no route serves.
func originPathAndQuery(_ target: String) -> (path: String, query: String?)? {
    let utf8 = target.utf8
    if utf8.first == UInt8(ascii: "/") { return splitTarget(target) }
    let lowered = target.lowercased()
    for scheme in ["http://", "https://"] where lowered.hasPrefix(scheme) {
        let rest = target.dropFirst(scheme.count)
        guard let slash = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) else { return ("/", nil) }
        let remainder = String(rest[slash...])
        return remainder.hasPrefix("?") ? ("/", String(remainder.dropFirst())) : splitTarget(remainder)
    }
    return nil
}

/// Splits a request-target into path and query (without the `?`).
func splitTarget(_ target: String) -> (path: String, query: String?) {
    if let q = target.utf8.firstIndex(of: UInt8(ascii: "?")) {
        return (String(target[..<q]), String(target[target.index(after: q)...]))
    }
    return (target, nil)
}

/// Parses `a=1&b=two+words&c` (the URL standard's form-urlencoded parser: `+` is a space,
/// bad `%` escapes are kept literally, decoding never fails).
func parseQuery(_ query: String) -> [HTTPQueryItem] {
    var items: [HTTPQueryItem] = []
    for part in query.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
        let bytes = Array(part)
        if let eq = bytes.firstIndex(of: UInt8(ascii: "=")) {
            items.append(HTTPQueryItem(
                name: formDecode(bytes[..<eq]),
                value: formDecode(bytes[(eq + 1)...])))
        } else {
            items.append(HTTPQueryItem(name: formDecode(bytes[...]), value: ""))
        }
    }
    return items
}

private func formDecode(_ bytes: ArraySlice<UInt8>) -> String {
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count)
    var i = bytes.startIndex
    while i < bytes.endIndex {
        let c = bytes[i]
        if c == UInt8(ascii: "+") {
            out.append(0x20)
        } else if c == UInt8(ascii: "%"), i + 2 < bytes.endIndex,
                  let h = hexValue(bytes[i + 1]), let l = hexValue(bytes[i + 2]) {
            out.append(h << 4 | l)
            i += 3
            continue
        } else {
            out.append(c)
        }
        i += 1
    }
    return String(decoding: out, as: UTF8.self)
}

@inline(__always) func hexValue(_ c: UInt8) -> UInt8? {
    switch c {
    case 0x30...0x39: c - 0x30
    case 0x41...0x46: c - 0x41 + 10
    case 0x61...0x66: c - 0x61 + 10
    default: nil
    }
}

/// Percent-decodes one path segment (RFC 3986 section 2.1). Nil when an escape is
/// malformed or the result is not UTF-8. `+` stays `+` (it is a space only in queries).
func percentDecodePathSegment<S: Collection>(_ bytes: S) -> String? where S.Element == UInt8, S.Index == Int {
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count)
    var i = bytes.startIndex
    while i < bytes.endIndex {
        let c = bytes[i]
        if c == UInt8(ascii: "%") {
            guard i + 2 < bytes.endIndex,
                  let h = hexValue(bytes[i + 1]), let l = hexValue(bytes[i + 2]) else { return nil }
            out.append(h << 4 | l)
            i += 3
        } else {
            out.append(c)
            i += 1
        }
    }
    return String(validating: out, as: UTF8.self)
}
