import Foundation
import OutpostCore
import OutpostCrypto
import Synchronization

/// What a running check gets: the server's address and secret, fresh names, tokens,
/// requests on new connections, and protocol-level helpers that already verify the shape
/// of what comes back.
public final class CheckContext: Sendable {
    /// The check being run.
    public let check: Check
    let server: ServerUnderTest
    private let noteStore = Mutex<[String]>([])

    init(check: Check, server: ServerUnderTest) {
        self.check = check
        self.server = server
    }

    /// The run's configuration.
    public var configuration: Configuration { server.configuration }
    /// Where the server is now.
    public var endpoint: Endpoint { server.endpoint }
    /// Signs tokens with the server's secret.
    public var signer: TokenSigner { server.signer }

    /// Adds a fact to the check's `PASS` line (a measured latency, say).
    public func note(_ text: String) {
        noteStore.withLock { $0.append(text) }
    }

    var notes: [String] { noteStore.withLock { $0 } }

    // MARK: Names and tokens

    /// A space no other check (or run) uses: `cf-<random>`.
    public func newSpace() -> String {
        "cf-" + CheckContext.randomToken(12)
    }

    /// A fresh change id, record id or client id with `prefix`.
    public func unique(_ prefix: String) -> String {
        prefix + "-" + CheckContext.randomToken(12)
    }

    static func randomToken(_ count: Int) -> String {
        let alphabet = Array("0123456789abcdefghjkmnpqrstvwxyz".utf8)
        return String(decoding: SecureRandom.bytes(count).map { alphabet[Int($0 & 31)] }, as: UTF8.self)
    }

    /// A valid token for `spaces` with `scope` (nil: no scope claim).
    public func token(_ spaces: [String], scope: String? = "write", admin: Bool? = nil) -> String {
        signer.token(TokenSigner.Claims(spaces: spaces, scope: scope, admin: admin))
    }

    /// A write token for `space`.
    public func writeToken(_ space: String) -> String { token([space]) }

    /// A read token for `space`.
    public func readToken(_ space: String) -> String { token([space], scope: "read") }

    // MARK: HTTP

    /// A new connection to the server.
    public func connect() async throws -> RawConnection {
        try await RawConnection.open(endpoint, timeout: .seconds(10))
    }

    /// The bytes of a request for the protocol path `path` (with the base URL's prefix).
    public func requestBytes(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
                             token: String? = nil) -> [UInt8] {
        var all = headers
        if let token { all.insert(("Authorization", "Bearer \(token)"), at: 0) }
        return HTTPRequestBytes.make(method, endpoint.target(path), host: endpoint.hostHeader, headers: all, body: body)
    }

    /// Sends one request on a new connection and reads its response.
    public func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
                     token: String? = nil, timeout: Duration? = nil) async throws -> RawResponse {
        let connection = try await RawConnection.open(endpoint, sending: requestBytes(method, path, headers: headers, body: body, token: token))
        defer { connection.close() }
        let response = try await connection.response(isHead: method == "HEAD", timeout: timeout ?? configuration.responseTimeout)
        try Self.checkGeneralRules(response, "\(method) \(path)")
        return response
    }

    /// `send`, and how long the server took: from the request sent in full to its answer
    /// read, both seen on the connection's own queue (never the caller's waits for an
    /// executor).
    public func timedSend(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
                          token: String? = nil, timeout: Duration? = nil) async throws -> (RawResponse, Duration) {
        let (connection, sentAt, answer) = try await RawConnection.openTimed(
            endpoint, sending: requestBytes(method, path, headers: headers, body: body, token: token),
            isHead: method == "HEAD", responseTimeout: timeout ?? configuration.responseTimeout)
        defer { connection.close() }
        let (response, arrived) = try await answer.value
        try Self.checkGeneralRules(response, "\(method) \(path)")
        return (response, arrived - sentAt)
    }

    /// Rules of section 2 every answer must keep, whatever the check: a 5xx is a bug
    /// (except 503 with Retry-After, and the engine's 501/505), and an HTTP/1.1 body is
    /// delimited by Content-Length or chunked encoding.
    static func checkGeneralRules(_ response: RawResponse, _ what: String) throws {
        if response.status >= 500 && ![501, 503, 505].contains(response.status) {
            throw CheckFailure("\(what): \(response.summary): a 5xx is a server bug (section 2): \(response.bodyPreview)")
        }
        if response.status == 503 && response.header("Retry-After") == nil {
            throw CheckFailure("\(what): 503 without Retry-After")
        }
        if response.framing == .untilClose && response.version == "HTTP/1.1" {
            throw CheckFailure("\(what): the \(response.status) answer has neither Content-Length nor chunked encoding")
        }
    }

    /// `GET path`.
    public func get(_ path: String, token: String? = nil, headers: [(String, String)] = []) async throws -> RawResponse {
        try await send("GET", path, headers: headers, token: token)
    }

    /// `POST path` with a JSON body.
    public func postJSON(_ path: String, _ json: JSONValue, token: String?, headers: [(String, String)] = []) async throws -> RawResponse {
        try await send("POST", path, headers: [("Content-Type", "application/json")] + headers, body: json.encoded(), token: token)
    }

    // MARK: Protocol

    /// `GET /v1/info`, decoded (section 3).
    public func info() async throws -> ServerInfo {
        let response = try await get("/v1/info")
        try expectStatus(response, 200, "GET /v1/info")
        let json = try response.json()
        do {
            return try ServerInfo(json: json)
        } catch {
            throw CheckFailure("GET /v1/info: \(error)")
        }
    }

    /// A push's answer, checked for shape: 200, one result per change, in order.
    public struct PushReply: Sendable {
        /// The answer as received.
        public let response: RawResponse
        /// The epoch the answer names.
        public let epoch: Epoch
        /// One result per change, in request order.
        public let results: [PushResult]
        /// The raw JSON of each result.
        public let rawResults: [JSONValue]
    }

    /// The path of a space's route.
    public static func spacePath(_ space: String, _ rest: String) -> String {
        "/v1/spaces/\(space)/\(rest)"
    }

    /// `POST /v1/spaces/{space}/push` with `changes` (a write token for the space unless
    /// `token` is given); fails unless the answer is a 200 push answer with one result per
    /// change, named in request order (section 4).
    @discardableResult
    public func push(_ space: String, _ changes: [JSONValue], token: String? = nil, clientId: String = "conformance-client",
                     extra: [(String, JSONValue)] = []) async throws -> PushReply {
        var body: JSONObject = ["clientId": .string(clientId), "changes": .array(changes)]
        for (k, v) in extra { body[k] = v }
        let response = try await postJSON(Self.spacePath(space, "push"), .object(body), token: token ?? writeToken(space))
        return try decodePush(response, changes: changes)
    }

    /// Checks and decodes a push answer for `changes`.
    public func decodePush(_ response: RawResponse, changes: [JSONValue]) throws -> PushReply {
        try expectStatus(response, 200, "push of \(changes.count) change(s)")
        let json = try response.json()
        let decoded: PushResponse
        do {
            decoded = try PushResponse(json: json)
        } catch {
            throw CheckFailure("push answer does not match section 4: \(error): \(response.bodyPreview)")
        }
        guard decoded.results.count == changes.count else {
            throw CheckFailure("push of \(changes.count) change(s) answered \(decoded.results.count) result(s)")
        }
        for (i, (result, change)) in zip(decoded.results, changes).enumerated() {
            let sent = change["changeId"]?.stringValue
            guard sent == nil || result.changeId == sent else {
                throw CheckFailure("results[\(i)] names change \(result.changeId), but change \(i) of the request is \(sent!): results must follow the request's order")
            }
        }
        return PushReply(response: response, epoch: decoded.epoch, results: decoded.results, rawResults: json["results"]?.arrayValue ?? [])
    }

    /// A pull page, checked for shape, with the exact byte length of its `changes` array.
    public struct PullReply: Sendable {
        /// The answer as received.
        public let response: RawResponse
        /// The page, decoded.
        public let page: PullPage
        /// Bytes of the encoded `changes` array exactly as the server sent it.
        public let changesByteCount: Int
        /// Each record's raw JSON (to see which keys were sent).
        public let rawChanges: [JSONValue]
    }

    /// `GET /v1/spaces/{space}/pull?…`: the raw answer.
    public func pullResponse(_ space: String, _ query: [(String, String)] = [], token: String? = nil,
                             headers: [(String, String)] = [], timeout: Duration? = nil) async throws -> RawResponse {
        try await send("GET", Self.spacePath(space, "pull") + HTTPRequestBytes.query(query), headers: headers,
                       token: token ?? readToken(space), timeout: timeout)
    }

    /// A pull that must answer a page (200, section 5 shape).
    public func pull(_ space: String, _ query: [(String, String)] = [], token: String? = nil,
                     timeout: Duration? = nil) async throws -> PullReply {
        let response = try await pullResponse(space, query, token: token, timeout: timeout)
        return try decodePull(response, query: query)
    }

    /// Checks and decodes a pull page.
    public func decodePull(_ response: RawResponse, query: [(String, String)]) throws -> PullReply {
        let what = "pull" + HTTPRequestBytes.query(query)
        try expectStatus(response, 200, what)
        let json = try response.json()
        let page: PullPage
        do {
            page = try PullPage(json: json)
        } catch {
            throw CheckFailure("\(what): page does not match section 5: \(error): \(response.bodyPreview)")
        }
        let bytes = try response.decodedBody()
        guard let span = JSONSpan.member("changes", in: bytes) else {
            throw CheckFailure("\(what): cannot find the changes array in the page")
        }
        return PullReply(response: response, page: page, changesByteCount: span.count, rawChanges: json["changes"]?.arrayValue ?? [])
    }

    /// Pulls every page from `since` (nil: the start) and returns the records in order.
    public func pullAll(_ space: String, since: String? = nil, extra: [(String, String)] = [], token: String? = nil) async throws -> (records: [RecordState], next: Version) {
        var cursor = since
        var records: [RecordState] = []
        for _ in 0..<10_000 {
            var query = extra
            if let cursor { query.append(("since", cursor)) }
            let reply = try await pull(space, query, token: token)
            records += reply.page.changes
            if !reply.page.hasMore { return (records, reply.page.next) }
            guard !reply.page.changes.isEmpty else {
                throw CheckFailure("pull\(HTTPRequestBytes.query(query)) answered an empty page with hasMore: true; a client cannot move forward")
            }
            cursor = reply.page.next.text
        }
        throw CheckFailure("more than 10000 pages; hasMore never became false")
    }

    // MARK: Server lifecycle

    /// Restarts the server on the same data with the configured hook.
    public func restartServer() async throws {
        guard let hook = configuration.restart else { throw CheckSkipped("needs --restart-command") }
        try await server.perform(hook)
    }

    /// Runs `body` against the server serving with the rules file `text`, and takes the
    /// rules away afterwards, also when `body` fails, so the checks after it meet a server
    /// without rules.
    public func withRules(_ text: String, _ body: () async throws -> Void) async throws {
        guard let hook = configuration.rules else { throw CheckSkipped("needs --rules-command") }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-conformance-rules-\(CheckContext.randomToken(8)).json").path
        defer { unlink(path) }
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        try await server.perform(ServerHook.closure("\(hook.description) (rules)") { try await hook.action(path) })
        var failure: (any Error)?
        do { try await body() } catch { failure = error }
        try await server.perform(ServerHook.closure("\(hook.description) (no rules)") { try await hook.action(nil) })
        if let failure { throw failure }
    }

    /// Replaces the rules the server serves with, inside `withRules`.
    public func replaceRules(_ text: String) async throws {
        guard let hook = configuration.rules else { throw CheckSkipped("needs --rules-command") }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-conformance-rules-\(CheckContext.randomToken(8)).json").path
        defer { unlink(path) }
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        try await server.perform(ServerHook.closure("\(hook.description) (new rules)") { try await hook.action(path) })
    }

    /// A write token for `space` with `sub` and other claims (for the rules).
    public func token(_ space: String, sub: String, claims: JSONObject = [:]) -> String {
        var c = TokenSigner.Claims(spaces: [space], scope: "write", sub: sub)
        c.extra = claims
        return signer.token(c)
    }

    /// Stops the server, gives it a new epoch and starts it again with the configured hook.
    public func rotateEpoch() async throws {
        guard let hook = configuration.rotateEpoch else { throw CheckSkipped("needs --rotate-epoch-command") }
        try await server.perform(hook)
    }
}

// MARK: - Building requests and changes

/// Request bytes, built by hand so a check controls every one.
public enum HTTPRequestBytes {
    /// `METHOD target HTTP/1.1`, `Host`, `headers`, and `Content-Length` with `body` (also
    /// `Content-Length: 0` for a POST or PUT without one, unless the headers frame it).
    public static func make(_ method: String, _ target: String, host: String, headers: [(String, String)] = [], body: [UInt8]? = nil) -> [UInt8] {
        var text = "\(method) \(target) HTTP/1.1\r\nHost: \(host)\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        let framed = headers.contains { $0.0.lowercased() == "content-length" || $0.0.lowercased() == "transfer-encoding" }
        if !framed, body != nil || method == "POST" || method == "PUT" {
            text += "Content-Length: \(body?.count ?? 0)\r\n"
        }
        text += "\r\n"
        return Array(text.utf8) + (body ?? [])
    }

    /// `?a=b&c=d` with percent-encoding, or empty.
    public static func query(_ items: [(String, String)]) -> String {
        guard !items.isEmpty else { return "" }
        return "?" + items.map { "\(percentEncode($0.0))=\(percentEncode($0.1))" }.joined(separator: "&")
    }

    /// RFC 3986 unreserved characters stay; everything else is `%XX`.
    public static func percentEncode(_ text: String) -> String {
        var out = ""
        for b in text.utf8 {
            let unreserved = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x2E || b == 0x5F || b == 0x7E
            if unreserved { out.append(Character(Unicode.Scalar(b))) } else { out += "%" + String(b, radix: 16, uppercase: true).leftPadded(2) }
        }
        return out
    }
}

extension String {
    func leftPadded(_ width: Int, with pad: Character = "0") -> String {
        count >= width ? self : String(repeating: pad, count: width - count) + self
    }
}

/// The JSON of push changes (section 4).
public enum ChangeJSON {
    /// A put of `data`; `base` nil sends `"baseVersion": null`.
    /// `lineage` makes it a re-offer (protocol 1.1): the version it carries from an earlier
    /// history and that version's commit time.
    public static func put(_ changeId: String, collection: String = "todos", id: String, data: JSONObject, base: String?,
                           force: Bool = false, clientTime: Int64? = nil, lineage: (version: String, updatedAt: Int64)? = nil) -> JSONValue {
        var o: JSONObject = [
            "changeId": .string(changeId), "collection": .string(collection), "id": .string(id), "op": "put",
            "data": .object(data), "baseVersion": base.map { .string($0) } ?? .null,
        ]
        if force { o["force"] = true }
        if let clientTime { o["clientTime"] = .number(JSONNumber(clientTime)) }
        if let lineage { o["lineage"] = lineageJSON(lineage) }
        return .object(o)
    }

    /// A delete; `base` nil sends `"baseVersion": null`; `lineage` as for `put`.
    public static func delete(_ changeId: String, collection: String = "todos", id: String, base: String?, force: Bool = false,
                              lineage: (version: String, updatedAt: Int64)? = nil) -> JSONValue {
        var o: JSONObject = [
            "changeId": .string(changeId), "collection": .string(collection), "id": .string(id), "op": "delete",
            "baseVersion": base.map { .string($0) } ?? .null,
        ]
        if force { o["force"] = true }
        if let lineage { o["lineage"] = lineageJSON(lineage) }
        return .object(o)
    }

    static func lineageJSON(_ lineage: (version: String, updatedAt: Int64)) -> JSONValue {
        .object(["version": .string(lineage.version), "updatedAt": .number(JSONNumber(lineage.updatedAt))])
    }
}

// MARK: - Expectations

/// Fails unless `condition`.
func expect(_ condition: Bool, _ message: @autoclosure () -> String) throws {
    if !condition { throw CheckFailure(message()) }
}

/// Fails unless `response` has `status`.
func expectStatus(_ response: RawResponse, _ status: Int, _ what: String) throws {
    guard response.status == status else {
        throw CheckFailure("\(what): expected \(status), got \(response.status): \(response.bodyPreview)")
    }
}

/// Fails unless `response` is the error envelope (section 2) with `status` and `code`;
/// returns its `details` (empty when absent).
@discardableResult
func expectError(_ response: RawResponse, _ status: Int, _ code: String, _ what: String) throws -> JSONObject {
    guard response.status == status else {
        throw CheckFailure("\(what): expected \(status) \(code), got \(response.summary): \(response.bodyPreview)")
    }
    let json = try response.json()
    guard let error = json["error"]?.objectValue else {
        throw CheckFailure("\(what): \(status) body is not the error envelope {\"error\": {...}}: \(response.bodyPreview)")
    }
    guard let got = error["code"]?.stringValue else { throw CheckFailure("\(what): error envelope has no string code: \(response.bodyPreview)") }
    guard got == code else { throw CheckFailure("\(what): expected error code \(code), got \(got) (status \(status))") }
    guard error["message"]?.stringValue != nil else { throw CheckFailure("\(what): error envelope has no string message") }
    let contentType = response.header("Content-Type")?.lowercased() ?? ""
    guard contentType.hasPrefix("application/json") else {
        throw CheckFailure("\(what): error answer's Content-Type is \"\(contentType)\", expected application/json")
    }
    switch error["details"] {
    case nil: return JSONObject()
    case .object(let details)?: return details
    default: throw CheckFailure("\(what): error details must be an object: \(response.bodyPreview)")
    }
}

/// The `applied` version of `result`, or a failure naming what came instead.
func expectApplied(_ result: PushResult, _ what: String) throws -> Version {
    guard result.status == .applied, let version = result.version else {
        throw CheckFailure("\(what): expected applied, got \(describe(result))")
    }
    return version
}

/// Fails unless `result` is a conflict; returns its `current`.
@discardableResult
func expectConflict(_ result: PushResult, _ what: String) throws -> RecordState? {
    guard result.status == .conflict else { throw CheckFailure("\(what): expected conflict, got \(describe(result))") }
    return result.current
}

/// Fails unless `result` is rejected with `code`.
func expectRejected(_ result: PushResult, _ code: String, _ what: String) throws {
    guard result.status == .rejected, result.error?.code == code else {
        throw CheckFailure("\(what): expected rejected \(code), got \(describe(result))")
    }
}

/// A push result in a few words.
func describe(_ result: PushResult) -> String {
    switch result.status {
    case .applied: return "applied \(result.version?.text ?? "?")\(result.replayed ? " (replayed)" : "")"
    case .conflict: return "conflict (current \(result.current.map { $0.version.text + ($0.deleted ? ", deleted" : "") } ?? "none"))"
    case .rejected: return "rejected \(result.error?.code ?? "?")"
    }
}

/// A JSON object's `details[key]` as an integer.
func detailInt(_ details: JSONObject, _ key: String) -> Int64? { details[key]?.int64Value }
