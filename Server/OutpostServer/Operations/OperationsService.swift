import Foundation
import Synchronization
import OutpostCore
import OutpostHTTP

/// `GET /v1/info`, `/healthz`, `/readyz`, `/metrics`, `/v1/admin/spaces` and
/// `POST /v1/admin/compact` (docs/protocol.md sections 3 and 7).
public final class OperationsService: Sendable {
    let store: any SyncStore
    let metrics: Metrics
    let authorizer: Authorizer
    let metricsRequireAdmin: Bool
    let compactor: Compactor
    /// The media files, for each listed space's count and bytes of them.
    let media: MediaStore
    /// The per-space limits of record bytes and media bytes (nil: none), which the spaces
    /// list shows beside what each space holds.
    let quotas: (records: Int64?, media: Int64?)
    /// The `/v1/info` body, encoded once: it changes only with the epoch, which a running
    /// server never changes.
    let infoBody: [UInt8]
    private let draining = Atomic<Bool>(false)

    public init(store: any SyncStore, limits: Limits, metrics: Metrics, authorizer: Authorizer, metricsRequireAdmin: Bool, compactor: Compactor,
                media: MediaStore, quotas: (records: Int64?, media: Int64?) = (nil, nil)) {
        self.store = store
        self.quotas = quotas
        self.compactor = compactor
        self.media = media
        self.metrics = metrics
        self.authorizer = authorizer
        self.metricsRequireAdmin = metricsRequireAdmin
        infoBody = ServerInfo(epoch: store.epoch, limits: limits).encoded()
    }

    /// Marks the server as draining: `/readyz` answers 503 so a load balancer stops
    /// sending new work (docs/protocol.md section 7).
    public func beginDraining() { draining.store(true, ordering: .relaxed) }

    public func register(_ router: inout Router) {
        let infoBody = self.infoBody
        router.add(.GET, "/v1/info", bodyLimit: 0, inline: { _ in HTTPResponse(json: infoBody) })
        router.add(.GET, "/healthz", bodyLimit: 0, inline: { _ in HTTPResponse(json: Array(#"{"status":"ok"}"#.utf8)) })
        router.add(.GET, "/readyz", bodyLimit: 0, handler: { [self] _ in
            if draining.load(ordering: .relaxed) {
                throw HTTPError.unavailable(retryAfterSeconds: 1, "the server is shutting down")
            }
            guard await store.isWritable() else {
                throw HTTPError.unavailable(retryAfterSeconds: 5, "the store is not writable")
            }
            return HTTPResponse(json: Array(#"{"status":"ready"}"#.utf8))
        })
        router.add(.GET, "/v1/admin/spaces", bodyLimit: 0,
                   preBody: { [self] head, _ in _ = try await authorizer.authorizeAdmin(head) },
                   handler: { [self] request in try await listSpaces(request.head) })
        router.add(.POST, "/v1/admin/compact", bodyLimit: 0,
                   preBody: { [self] head, _ in _ = try await authorizer.authorizeAdmin(head) },
                   handler: { [self] request in try await compact(request.head) })
        router.add(.GET, "/metrics", bodyLimit: 0,
                   preBody: { [self] head, _ in if metricsRequireAdmin { _ = try await authorizer.authorizeAdmin(head) } },
                   handler: { [self] _ in
                       var headers = HTTPHeaders()
                       headers.add(name: "Content-Type", value: "text/plain; version=0.0.4; charset=utf-8")
                       return HTTPResponse(status: .ok, headers: headers, body: .bytes(Array(metrics.render().utf8)))
                   })
    }

    /// The most spaces one page of `GET /v1/admin/spaces` lists, and its default.
    static let maxSpacesPerPage = 1000
    static let defaultSpacesPerPage = 100

    /// `GET /v1/admin/spaces?after=NAME&limit=N` (admin token): a page of spaces in name
    /// order with their record counts, head, last write and media files; `next` is the
    /// `after` of the following page, null on the last one. An admin token lists spaces;
    /// it does not pull their records (a token names the spaces it may sync).
    func listSpaces(_ head: HTTPRequestHead) async throws -> HTTPResponse {
        let after = head.query("after") ?? ""
        guard after.isEmpty || Names.isValidSpace(after) else { throw HTTPError.invalidQuery("after", "must be a space name") }
        let limit = try head.integerQuery("limit", min: 1, max: Self.maxSpacesPerPage) ?? Self.defaultSpacesPerPage
        // One more than asked tells whether another page follows.
        let found = try await store.spaces(after: after, limit: limit + 1)
        let page = found.prefix(limit)
        let usage = try await media.usage(spaces: page.map(\.name), now: Int64(Date().timeIntervalSince1970 * 1000))
        let quota = { (limit: Int64?) -> JSONValue in limit.map { .number(JSONNumber($0)) } ?? .null }
        let spaces: [JSONValue] = page.map { space in
            let files = usage[space.name] ?? MediaUsage(files: 0, bytes: 0)
            return .object([
                "name": .string(space.name),
                "records": .number(JSONNumber(space.records)),
                "tombstones": .number(JSONNumber(space.tombstones)),
                "head": .number(JSONNumber(space.head)),
                "lastWriteAt": space.lastWriteAt.map { .number(JSONNumber($0)) } ?? .null,
                "horizon": .number(JSONNumber(space.horizon)),
                "mediaFiles": .number(JSONNumber(files.files)),
                "mediaBytes": .number(JSONNumber(files.bytes)),
                "recordBytes": .number(JSONNumber(space.recordBytes)),
                "recordBytesLimit": quota(quotas.records),
                "mediaUploadBytes": .number(JSONNumber(files.openBytes)),
                "mediaBytesLimit": quota(quotas.media),
            ])
        }
        let next: JSONValue = found.count > limit ? .string(page.last!.name) : .null
        return HTTPResponse(json: JSONValue.object(["spaces": .array(spaces), "next": next]).encoded())
    }

    /// `POST /v1/admin/compact?retentionDays=N` (admin token): runs a compaction now, with
    /// the server's retention or `N` days (0: every tombstone, whatever its age), and
    /// answers `{"purged": …, "reclaimedBytes": …, "horizons": {space: seq}}`.
    func compact(_ head: HTTPRequestHead) async throws -> HTTPResponse {
        let days = try head.integerQuery("retentionDays", min: 0, max: 36_500)
        let done = try await compactor.run(retentionMs: days.map { Int64($0) * 86_400_000 })
        return HTTPResponse(json: JSONValue.object([
            "purged": .number(JSONNumber(done.purged)), "reclaimedBytes": .number(JSONNumber(done.reclaimedBytes)),
            "horizons": .object(JSONObject(done.horizons.keys.sorted().map { ($0, JSONValue.number(JSONNumber(done.horizons[$0]!))) })),
        ]).encoded())
    }
}
