import Foundation
import OutpostCore
import OutpostHTTP

/// The admin console (docs/operating.md, "Admin console"): its page and assets at `/admin`
/// and `/admin/{asset}`, and the admin routes it reads beside `/metrics`,
/// `/v1/admin/spaces` and `/v1/admin/devices` (docs/protocol.md section 7):
///
/// - `GET /v1/admin/status`: epoch, server version, store, uptime.
/// - `GET /v1/admin/errors`: the last error answers (`RecentErrors`).
/// - `GET /v1/admin/spaces/{space}/collections`, `…/collections/{collection}/records`
///   and `…/collections/{collection}/record`: a space's records (`RecordBrowser`).
/// - `GET /v1/admin/spaces/{space}/media` and `…/media/{mediaId}`: its files.
/// - `POST /v1/admin/tokens`: a token for one space, shown once.
/// - `POST /v1/admin/spaces/{space}/explain` and `…/view`: a record's rules explained
///   for a subject, and what that subject's pull returns (`SubjectInspection.swift`).
///
/// Every `/v1/admin/…` route checks for an admin token before anything else. The console
/// sends it as `Authorization: Bearer` from `sessionStorage`; there are no cookies, so a
/// request another site makes the browser send carries no credential.
public final class AdminService: Sendable {
    let browser: RecordBrowser
    /// The sync service whose rules, view index and pager the subject inspections use.
    let sync: SyncService
    let media: MediaService
    let authorizer: Authorizer
    let metrics: Metrics
    let errors: RecentErrors
    /// Signs the tokens `POST /v1/admin/tokens` issues, with the server's signing key.
    let sign: @Sendable (Claims) -> String
    /// `sqlite` or `postgresql`.
    let storeKind: String
    /// Server time (ms since 1970) when the application was built.
    let startedAt: Int64
    private let started = ContinuousClock.now

    /// The shortest and longest life of a token the console issues, and its default.
    static let minTokenSeconds: Int64 = 60
    static let maxTokenSeconds: Int64 = 30 * 86_400
    static let defaultTokenSeconds: Int64 = 3600
    /// The largest body of `POST /v1/admin/tokens`.
    static let tokenBodyLimit = 4096
    /// The longest subject of an issued token, in characters.
    static let maxSubjectCharacters = 256
    /// The most errors `GET /v1/admin/errors` lists, and its default.
    static let maxErrorsListed = 200
    static let defaultErrorsListed = 50
    /// The most files one page of `GET /v1/admin/spaces/{space}/media` lists, and its default.
    static let maxMediaPerPage = 500
    static let defaultMediaPerPage = 50
    /// The longest id, cursor or prefix a query may give, in characters (an id is at
    /// most 256 bytes, so never more characters).
    static let maxIDCharacters = 256

    init(browser: RecordBrowser, sync: SyncService, media: MediaService, authorizer: Authorizer, metrics: Metrics, errors: RecentErrors,
         storeKind: String, startedAt: Int64, sign: @escaping @Sendable (Claims) -> String) {
        self.browser = browser
        self.sync = sync
        self.media = media
        self.authorizer = authorizer
        self.metrics = metrics
        self.errors = errors
        self.storeKind = storeKind
        self.startedAt = startedAt
        self.sign = sign
        metrics.declare("outpost_admin_tokens_issued_total", help: "Tokens the admin console issued (POST /v1/admin/tokens), by scope.", kind: "counter")
    }

    func stop() {
        browser.stop()
    }

    public func register(_ router: inout Router) {
        router.add(.GET, "/admin", bodyLimit: 0, inline: { request in ConsoleAssets.response(ConsoleAssets.page, request.head) })
        // The console is `/admin`; a typed or linked `/admin/` is sent there.
        router.add(.GET, "/admin/", bodyLimit: 0, inline: { request in ConsoleAssets.redirectToPage(request.head) })
        router.add(.GET, "/admin/{asset}", bodyLimit: 0, inline: { request in
            guard let asset = request.parameter("asset").flatMap(ConsoleAssets.named) else {
                throw HTTPError.notFound("no such file of the admin console")
            }
            return ConsoleAssets.response(asset, request.head)
        })
        let admin: HTTPPreBodyCheck = { [authorizer] head, _ in _ = try await authorizer.authorizeAdmin(head) }
        router.add(.GET, "/v1/admin/status", bodyLimit: 0, preBody: admin, inline: { [self] _ in status() })
        router.add(.GET, "/v1/admin/errors", bodyLimit: 0, preBody: admin, inline: { [self] request in try recentErrors(request.head) })
        let space = "/v1/admin/spaces/{space}"
        router.add(.GET, space + "/collections", bodyLimit: 0, preBody: admin, handler: { [self] request in try await collections(request) })
        router.add(.GET, space + "/collections/{collection}/records", bodyLimit: 0, preBody: admin,
                   handler: { [self] request in try await records(request) })
        router.add(.GET, space + "/collections/{collection}/record", bodyLimit: 0, preBody: admin,
                   handler: { [self] request in try await record(request) })
        router.add(.GET, space + "/media", bodyLimit: 0, preBody: admin, handler: { [self] request in try await mediaFiles(request) })
        router.add(.GET, space + "/media/{mediaId}", bodyLimit: 0, preBody: admin, handler: { [self] request in try await mediaBytes(request) })
        router.add(.POST, "/v1/admin/tokens", bodyLimit: Self.tokenBodyLimit, preBody: admin,
                   handler: { [self] request in try await issueToken(request) })
        router.add(.POST, space + "/explain", bodyLimit: Self.inspectionBodyLimit, preBody: admin,
                   handler: { [self] request in try await explain(request) })
        router.add(.POST, space + "/view", bodyLimit: Self.inspectionBodyLimit, preBody: admin,
                   handler: { [self] request in try await viewAs(request) })
    }

    // MARK: Overview

    /// `GET /v1/admin/status`.
    func status() -> HTTPResponse {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let uptime = (ContinuousClock.now - started).components.seconds
        return Self.json(.object([
            "server": .string("outpost/\(OutpostProtocol.productVersion)"),
            "protocolVersion": .string(OutpostProtocol.revision),
            "epoch": .string(browser.epoch.rawValue),
            "store": .string(storeKind),
            "startedAt": .number(JSONNumber(startedAt)),
            "uptimeSeconds": .number(JSONNumber(uptime)),
            "now": .number(JSONNumber(now)),
        ]))
    }

    /// `GET /v1/admin/errors?limit=N`: the newest error answers first.
    func recentErrors(_ head: HTTPRequestHead) throws -> HTTPResponse {
        let limit = try head.integerQuery("limit", min: 1, max: Self.maxErrorsListed) ?? Self.defaultErrorsListed
        let entries: [JSONValue] = errors.latest(limit).map { e in
            .object([
                "at": .number(JSONNumber(e.at)),
                "method": e.method.map { .string($0) } ?? .null,
                "route": e.route.map { .string($0) } ?? .null,
                "status": .number(JSONNumber(e.status)),
                "code": .string(e.code),
                "message": .string(e.message),
                "requestId": .string(e.requestID),
            ])
        }
        return Self.json(.object(["errors": .array(entries), "capacity": .number(JSONNumber(errors.capacity))]))
    }

    // MARK: Records

    /// `GET /v1/admin/spaces/{space}/collections?after=C&limit=N`.
    func collections(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try SyncService.space(request.pathParameters)
        let after = request.head.query("after") ?? ""
        guard after.isEmpty || Names.isValidCollection(after) else { throw HTTPError.invalidQuery("after", "must be a collection name") }
        let limit = try request.head.integerQuery("limit", min: 1, max: RecordBrowser.maxCollectionsPerPage) ?? RecordBrowser.defaultCollectionsPerPage
        let found = try await storeCall { try await browser.collections(space: space, after: after, limit: limit + 1) }
        let page = found.prefix(limit)
        return Self.json(.object([
            "collections": .array(page.map { .object(["name": .string($0)]) }),
            "next": found.count > limit ? .string(page.last!) : .null,
        ]))
    }

    /// `GET /v1/admin/spaces/{space}/collections/{collection}/records?after=ID&prefix=P&limit=N&maxBytes=B`.
    func records(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try SyncService.space(request.pathParameters)
        let collection = try Self.collection(request.pathParameters)
        let after = try Self.idQuery(request.head, "after") ?? ""
        let prefix = try Self.idQuery(request.head, "prefix").flatMap { $0.isEmpty ? nil : $0 }
        let limit = try request.head.integerQuery("limit", min: 1, max: RecordBrowser.maxRecordsPerPage) ?? RecordBrowser.defaultRecordsPerPage
        let maxBytes = try request.head.integerQuery("maxBytes", min: RecordBrowser.minPageBytes, max: RecordBrowser.maxPageBytes)
            ?? RecordBrowser.defaultPageBytes
        let page = try await storeCall {
            try await browser.records(space: space, collection: collection, after: after, prefix: prefix, limit: limit, maxBytes: maxBytes)
        }
        var out = Array(#"{"epoch":"#.utf8)
        out += JSONValue.string(browser.epoch.rawValue).encoded()
        out += Array(#","records":"#.utf8)
        out += page.recordsJSON
        out += Array(#","next":"#.utf8)
        out += (page.next.map { JSONValue.string($0) } ?? .null).encoded()
        out.append(UInt8(ascii: "}"))
        return HTTPResponse(json: out, headers: Self.privateHeaders)
    }

    /// `GET /v1/admin/spaces/{space}/collections/{collection}/record?id=ID`: the record
    /// (its tombstone included) in its wire form; `404 record_not_found` when none.
    func record(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try SyncService.space(request.pathParameters)
        let collection = try Self.collection(request.pathParameters)
        guard let id = try Self.idQuery(request.head, "id"), !id.isEmpty else { throw HTTPError.invalidQuery("id", "is required") }
        let found = try await storeCall { try await browser.record(space: space, collection: collection, id: id) }
        guard let found else {
            throw HTTPError(HTTPStatus(code: 404), .recordNotFound, "no record \(collection)/\(id.prefix(80)) in space \(space)")
        }
        var out: [UInt8] = []
        found.append(to: &out, epoch: browser.epoch)
        return HTTPResponse(json: out, headers: Self.privateHeaders)
    }

    // MARK: Media

    /// `GET /v1/admin/spaces/{space}/media?after=ID&limit=N`: a page of the space's files
    /// in id order.
    func mediaFiles(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try MediaService.space(request.pathParameters)
        let after = request.head.query("after") ?? ""
        guard after.isEmpty || Names.isValidMediaID(after) else { throw HTTPError.invalidQuery("after", "must be a media id (64 lowercase hex)") }
        let limit = try request.head.integerQuery("limit", min: 1, max: Self.maxMediaPerPage) ?? Self.defaultMediaPerPage
        let found = try await storeCall { try await media.store.files(space: space, after: after, limit: limit + 1) }
        let page = found.prefix(limit)
        let files: [JSONValue] = page.map { f in
            .object([
                "mediaId": .string(f.id.rawValue), "size": .number(JSONNumber(f.size)), "contentType": .string(f.contentType),
                "filename": f.filename.map { .string($0) } ?? .null, "createdAt": .number(JSONNumber(f.createdAt)),
                "url": .string("/v1/admin/spaces/\(space.rawValue)/media/\(f.id.rawValue)"),
            ])
        }
        return Self.json(.object(["media": .array(files), "next": found.count > limit ? .string(page.last!.id.rawValue) : .null]))
    }

    /// `GET /v1/admin/spaces/{space}/media/{mediaId}`: the file's bytes for an admin token,
    /// answered by the media download itself (ranges, `ETag`, `304`). The bytes are never
    /// run as a page: a sandboxing policy and `nosniff` go with them.
    func mediaBytes(_ request: HTTPRequest) async throws -> HTTPResponse {
        // The download's own fields already sandbox it (`ServedMedia`).
        try await media.download(request)
    }

    // MARK: Tokens

    /// `POST /v1/admin/tokens` with `{"sub", "space", "scope"?, "ttlSeconds"?}`: a token
    /// for one space, never an admin token; `201 {"token", "sub", "spaces", "scope",
    /// "expiresAt"}`. The token is in this answer only (`Cache-Control: no-store`); the log
    /// line names who asked and for what, never the token.
    func issueToken(_ request: HTTPRequest) async throws -> HTTPResponse {
        let asker = try await authorizer.authorizeAdmin(request.head)
        guard case .object(let body) = try parseJSONBody(request.body, maxDepth: 4) else {
            throw Self.badField("body", "must be a JSON object")
        }
        guard case .string(let sub)? = body["sub"], (1...Self.maxSubjectCharacters).contains(sub.unicodeScalars.count) else {
            throw Self.badField("sub", "must be a string of 1 to \(Self.maxSubjectCharacters) characters")
        }
        guard case .string(let space)? = body["space"], Names.isValidSpace(space) else {
            throw Self.badField("space", "must be a space name")
        }
        var scope = Claims.Scope.read
        if let value = body["scope"] {
            guard case .string(let text) = value, let parsed = Claims.Scope(rawValue: text) else {
                throw Self.badField("scope", "must be read or write")
            }
            scope = parsed
        }
        var ttl = Self.defaultTokenSeconds
        if let value = body["ttlSeconds"] {
            guard let seconds = value.int64Value, (Self.minTokenSeconds...Self.maxTokenSeconds).contains(seconds) else {
                throw Self.badField("ttlSeconds", "must be an integer from \(Self.minTokenSeconds) to \(Self.maxTokenSeconds)")
            }
            ttl = seconds
        }
        let now = Int64(Date().timeIntervalSince1970)
        let claims = Claims(sub: sub, exp: now + ttl, spaces: [space], scope: scope)
        if let claim = claims.claimWithControlCharacter { throw Self.badField(claim, "must not hold a control character") }
        let token = sign(claims)
        metrics.increment("outpost_admin_tokens_issued_total", .init([("scope", scope.rawValue)]))
        Log.info("admin console issued a token", ["sub": sub, "space": space, "scope": scope.rawValue, "ttlSeconds": String(ttl), "by": asker.sub])
        var headers = HTTPHeaders()
        headers.add(name: "Cache-Control", value: "no-store")
        return HTTPResponse(status: HTTPStatus(code: 201), json: JSONValue.object([
            "token": .string(token), "sub": .string(sub), "spaces": .array([.string(space)]), "scope": .string(scope.rawValue),
            "expiresAt": .number(JSONNumber(claims.exp * 1000)),
        ]).encoded(), headers: headers)
    }

    // MARK: Helpers

    /// Admin answers hold record data and names: never kept by a cache.
    static var privateHeaders: HTTPHeaders {
        var headers = HTTPHeaders()
        headers.add(name: "Cache-Control", value: "no-store")
        return headers
    }

    static func json(_ value: JSONValue) -> HTTPResponse {
        HTTPResponse(json: value.encoded(), headers: privateHeaders)
    }

    /// `422 invalid_request` for a field of a request body.
    static func badField(_ field: String, _ message: String) -> HTTPError {
        .invalidRequest(WireError(field: field, message: message))
    }

    /// The path's collection: `422 invalid_request` when it is not a collection name.
    static func collection(_ parameters: [String: String]) throws(HTTPError) -> String {
        guard let name = parameters["collection"], Names.isValidCollection(name) else {
            throw .invalidQuery("collection", "must be a collection name")
        }
        return name
    }

    /// A query value that names an id or a part of one: at most `maxIDCharacters`
    /// characters and no control character (C0, DEL, C1), as no id holds one.
    static func idQuery(_ head: HTTPRequestHead, _ name: String) throws(HTTPError) -> String? {
        guard let value = head.query(name) else { return nil }
        let scalars = value.unicodeScalars
        let control = scalars.contains { $0.value < 0x20 || $0.value == 0x7F || ($0.value >= 0x80 && $0.value <= 0x9F) }
        guard scalars.count <= maxIDCharacters, !control else {
            throw .invalidQuery(name, "must be at most \(maxIDCharacters) characters with no control character")
        }
        return value
    }

    /// A store call; a failure of the store becomes `503 unavailable` with `Retry-After`.
    func storeCall<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await HTTPError.fromStore("admin console read failed", "the store cannot answer now", body)
    }
}
