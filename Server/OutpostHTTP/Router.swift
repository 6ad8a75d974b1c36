// Path patterns with {param} segments, matched per segment after percent-decoding.

/// Answers a request. Runs on Swift's concurrency pool; suspending (awaiting a
/// continuation for a long poll, say) holds no thread. When the client disconnects while
/// the handler runs, its task is cancelled.
public typealias HTTPHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse

/// Answers a request synchronously on the event-loop thread, with no task hop: for cheap
/// routes such as `/healthz`. **It must never block or do slow work** (no file or
/// database I/O, no locks that may be held long): while it runs, every other connection
/// on that loop waits.
public typealias HTTPInlineHandler = @Sendable (HTTPRequest) throws -> HTTPResponse

/// Runs after the head is read and the route is known, before any of the body is read
/// (and before `100 Continue` is sent): authentication, authorization, quota checks.
/// Throw an `HTTPError` (401, 403, 413...) to answer without reading the body; the
/// engine then discards what the client still sends (bounded) and closes.
public typealias HTTPPreBodyCheck = @Sendable (HTTPRequestHead, _ pathParameters: [String: String]) async throws -> Void

/// One registered route.
public struct Route: Sendable {
    enum Handler: Sendable {
        case async(HTTPHandler)
        case inline(HTTPInlineHandler)
    }

    /// The method it answers.
    public let method: HTTPMethod
    /// The pattern as registered, e.g. `/v1/spaces/{space}/push`.
    public let pattern: String
    /// The most body bytes (after gzip decompression) accepted; nil: the server default.
    public let bodyLimit: Int?
    /// Fields every answer of the route carries, whoever writes it: the handler, a
    /// pre-body check's error, or the engine's own (a body over the limit, a timeout).
    /// For protocols that require a field on every response (tus's `Tus-Resumable`).
    public let answerHeaders: HTTPHeaders
    let preBody: HTTPPreBodyCheck?
    let handler: Handler
    let parameterNames: [String]
}

/// The outcome of routing a request.
enum RouteMatch: Sendable {
    case found(Route, parameters: [String: String])
    case failed(HTTPError)
}

/// Maps method and path to routes. Build it before starting the server:
///
/// ```swift
/// var router = Router()
/// router.add(.GET, "/healthz", inline: { _ in HTTPResponse(json: Array(#"{"status":"ok"}"#.utf8)) })
/// router.add(.PUT, "/v1/spaces/{space}/media/uploads/{uploadId}/chunks/{index}",
///            bodyLimit: 512 * 1024,
///            preBody: { head, params in try auth.check(head, space: params["space"]!) }) { request in
///     let index = request.parameter("index")!
///     ...
/// }
/// ```
///
/// Matching: a path names one resource, the most literal pattern it fits: at each segment a
/// literal wins over a `{param}`, and the `{param}` is tried only when no pattern through
/// the literal fits the rest of the path. So `/media/uploads` is the uploads resource and
/// never a media id `uploads`, even for a method only `/media/{mediaId}` has. Unknown path
/// `404 not_found`; a method that resource lacks `405 method_not_allowed` with `Allow`
/// naming the resource's own methods (HEAD is allowed wherever GET is and is answered by
/// the GET route without a body, unless a route is registered for HEAD itself, as tus's
/// upload resource has without a GET). Path segments are
/// percent-decoded before matching; a segment that decodes to something containing `/`
/// or NUL, a `.` or `..` segment, or a bad escape is `400 bad_request`.
public struct Router: Sendable {
    struct Node: Sendable {
        var literals: [String: Node] = [:]
        var parameter: [Node] = []  // zero or one: Array gives the recursive struct indirection
        var routes: [HTTPMethod: Route] = [:]
    }

    var root = Node()
    /// Routes without parameters by exact path: most hot routes (`/healthz`, `/v1/info`)
    /// are matched with one hash lookup instead of a split and a tree walk.
    private var literalRoutes: [String: [HTTPMethod: Route]] = [:]

    /// An empty router.
    public init() {}

    /// Registers an async handler.
    /// - Parameters:
    ///   - bodyLimit: most body bytes accepted (decompressed); nil uses
    ///     `HTTPServerConfiguration.defaultBodyLimit`. A larger `Content-Length` is
    ///     answered `413` before the body is read.
    ///   - preBody: optional check run before the body is read.
    ///   - answerHeaders: fields added to every answer of the route (`Route.answerHeaders`).
    public mutating func add(
        _ method: HTTPMethod, _ pattern: String, bodyLimit: Int? = nil, answerHeaders: HTTPHeaders = HTTPHeaders(),
        preBody: HTTPPreBodyCheck? = nil, handler: @escaping HTTPHandler
    ) {
        insert(method, pattern, bodyLimit: bodyLimit, answerHeaders: answerHeaders, preBody: preBody, handler: .async(handler))
    }

    /// Registers a synchronous handler run on the event-loop thread (see
    /// `HTTPInlineHandler`: it must never block).
    public mutating func add(
        _ method: HTTPMethod, _ pattern: String, bodyLimit: Int? = nil,
        preBody: HTTPPreBodyCheck? = nil, inline handler: @escaping HTTPInlineHandler
    ) {
        insert(method, pattern, bodyLimit: bodyLimit, answerHeaders: HTTPHeaders(), preBody: preBody, handler: .inline(handler))
    }

    /// Middleware for one registered route: its handler is replaced by `body`, which gets
    /// each request and the handler it replaces (to call or not), and its body limit by
    /// `bodyLimit` when one is given. The pre-body check stays. For logging, caching or
    /// rewriting around a route, and for a test's deliberately broken server.
    public mutating func wrap(_ method: HTTPMethod, _ pattern: String, bodyLimit: Int? = nil,
                              _ body: @escaping @Sendable (HTTPRequest, HTTPHandler) async throws -> HTTPResponse) {
        let (kinds, _) = Router.parse(pattern)
        guard let old = Router.route(method, kinds: kinds[...], in: root) else {
            preconditionFailure("no route \(method) \(pattern) to wrap")
        }
        let next: HTTPHandler
        switch old.handler {
        case .async(let h): next = h
        case .inline(let h): next = { request in try h(request) }
        }
        let route = Route(method: method, pattern: pattern, bodyLimit: bodyLimit ?? old.bodyLimit, answerHeaders: old.answerHeaders, preBody: old.preBody,
                          handler: .async({ request in try await body(request, next) }), parameterNames: old.parameterNames)
        Router.insert(route, kinds: kinds[...], into: &root, replacing: true)
        if old.parameterNames.isEmpty { literalRoutes[pattern, default: [:]][method] = route }
    }

    private static func route(_ method: HTTPMethod, kinds: ArraySlice<String?>, in node: Node) -> Route? {
        guard let first = kinds.first else { return node.routes[method] }
        if let literal = first {
            return node.literals[literal].flatMap { route(method, kinds: kinds.dropFirst(), in: $0) }
        }
        return node.parameter.first.flatMap { route(method, kinds: kinds.dropFirst(), in: $0) }
    }

    /// A pattern's segments (nil for a `{param}` segment) and its parameter names.
    private static func parse(_ pattern: String) -> (kinds: [String?], names: [String]) {
        precondition(pattern.hasPrefix("/"), "route pattern must start with /: \(pattern)")
        let segments = pattern == "/" ? [] : pattern.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        var names: [String] = []
        var kinds: [String?] = []  // nil: parameter
        for (index, segment) in segments.enumerated() {
            // Only the last segment may be empty: `/admin/` is a resource of its own.
            precondition(!segment.isEmpty || index == segments.count - 1, "empty segment in route pattern \(pattern)")
            if segment.hasPrefix("{") && segment.hasSuffix("}") {
                let name = String(segment.dropFirst().dropLast())
                precondition(!name.isEmpty && !names.contains(name), "bad or repeated parameter in \(pattern)")
                names.append(name)
                kinds.append(nil)
            } else {
                precondition(!segment.contains("{") && !segment.contains("}"), "bad segment in route pattern \(pattern)")
                kinds.append(String(segment))
            }
        }
        return (kinds, names)
    }

    private mutating func insert(_ method: HTTPMethod, _ pattern: String, bodyLimit: Int?, answerHeaders: HTTPHeaders,
                                 preBody: HTTPPreBodyCheck?, handler: Route.Handler) {
        precondition(bodyLimit.map { $0 >= 0 } ?? true, "negative body limit for \(pattern)")
        let (kinds, names) = Router.parse(pattern)
        let route = Route(method: method, pattern: pattern, bodyLimit: bodyLimit, answerHeaders: answerHeaders, preBody: preBody,
                          handler: handler, parameterNames: names)
        Router.insert(route, kinds: kinds[...], into: &root)
        if names.isEmpty { literalRoutes[pattern, default: [:]][method] = route }
    }

    private static func insert(_ route: Route, kinds: ArraySlice<String?>, into node: inout Node, replacing: Bool = false) {
        guard let first = kinds.first else {
            precondition(replacing || node.routes[route.method] == nil, "route registered twice: \(route.method) \(route.pattern)")
            node.routes[route.method] = route
            return
        }
        if let literal = first {
            insert(route, kinds: kinds.dropFirst(), into: &node.literals[literal, default: Node()], replacing: replacing)
        } else {
            if node.parameter.isEmpty { node.parameter.append(Node()) }
            insert(route, kinds: kinds.dropFirst(), into: &node.parameter[0], replacing: replacing)
        }
    }

    /// Routes a method and raw (still percent-encoded) path.
    func match(method: HTTPMethod, path: String) -> RouteMatch {
        // Fast path: an exact literal route. Only when the path has no escapes (then it
        // is what it decodes to) and the method is served there; everything else (405,
        // parameters, dot segments) takes the full walk below.
        if let routes = literalRoutes[path], !path.utf8.contains(UInt8(ascii: "%")),
           let route = routes[method] ?? (method == .HEAD ? routes[.GET] : nil) {
            return .found(route, parameters: [:])
        }
        let segments: [String]
        switch Router.decodeSegments(path) {
        case .failure(let e): return .failed(e)
        case .success(let s): segments = s
        }
        guard let (node, values) = Router.resource(root, segments[...], []) else { return .failed(.notFound()) }
        if let route = node.routes[method] ?? (method == .HEAD ? node.routes[.GET] : nil) {
            var parameters: [String: String] = [:]
            for (name, value) in zip(route.parameterNames, values) { parameters[name] = value }
            return .found(route, parameters: parameters)
        }
        // Only this resource's methods: naming another pattern's (GET of /media/{mediaId} on
        // /media/uploads) would promise a method the resource does not have.
        var allowed = Set(node.routes.keys)
        if allowed.contains(.GET) { allowed.insert(.HEAD) }
        return .failed(.methodNotAllowed(allowed: allowed.sorted { $0.rawValue < $1.rawValue }))
    }

    /// The resource a path names, with its parameter values: the first node with routes
    /// that the whole path reaches, trying a literal segment before a parameter, so
    /// `/media/uploads` is found before `/media/{mediaId}`.
    private static func resource(_ node: Node, _ rest: ArraySlice<String>, _ values: [String]) -> (node: Node, values: [String])? {
        guard let segment = rest.first else { return node.routes.isEmpty ? nil : (node, values) }
        if let next = node.literals[segment], let found = resource(next, rest.dropFirst(), values) { return found }
        if let next = node.parameter.first, !segment.isEmpty {
            return resource(next, rest.dropFirst(), values + [segment])
        }
        return nil
    }

    /// Splits a path on `/` and percent-decodes each segment (decode-then-validate).
    static func decodeSegments(_ path: String) -> Result<[String], HTTPError> {
        let utf8 = Array(path.utf8)
        guard utf8.first == UInt8(ascii: "/") else { return .failure(.badRequest("request target must be an absolute path")) }
        if utf8.count == 1 { return .success([]) }
        var segments: [String] = []
        for raw in utf8[1...].split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            guard let decoded = percentDecodePathSegment(Array(raw)) else {
                return .failure(.badRequest("invalid percent-encoding in path"))
            }
            // An encoded slash or NUL would make the segment mean two things; dot segments
            // would walk out of the route (RFC 3986 section 5.2.4) — both refused.
            if decoded == "." || decoded == ".." || decoded.utf8.contains(UInt8(ascii: "/")) || decoded.utf8.contains(0) {
                return .failure(.badRequest("invalid path segment"))
            }
            segments.append(decoded)
        }
        return .success(segments)
    }
}
