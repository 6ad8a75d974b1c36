import Foundation
import OutpostCore
import OutpostSyncRules
import OutpostCrypto
import OutpostHTTP

/// Push and pull (docs/protocol.md sections 4 and 5) on a `SyncStore`. Knows HTTP requests
/// and responses but no sockets; knows the store only through its protocol.
public final class SyncService: Sendable {
    public let store: any SyncStore
    public let limits: Limits
    public let authorizer: Authorizer
    public let metrics: Metrics
    /// The rules file in force (docs/rules.md); without one, a space's tokens read and
    /// write everything in it.
    public let rules: RulesHolder
    /// The view index that pages under rules read once it is built for the rules in force.
    public let viewIndex: ViewIndexKeeper
    /// Server time in ms since 1970 (tests move it).
    let clock: @Sendable () -> Int64
    /// Whether each push that writes logs a `write` line: who wrote (the token's subject and
    /// the device's clientId), where, and how much (the operator's audit; with `--access-log`).
    let audit: Bool
    /// One page read for many identical pulls served at the same moment.
    let coalescer: PageCoalescer
    /// Long polls in groups that share one read and one encoded answer per commit.
    let hub: LongPollHub
    /// Series updated on every pull, resolved once.
    let pullPages, pullRecords, pullBytes, longPollsWoken: Metrics.Counter
    /// When each device last pushed and pulled, and under which cursor and view, noted in
    /// memory for the operator's device page (`TelemetryService` stores it).
    let devices = DeviceActivity()

    public init(store: any SyncStore, limits: Limits, authorizer: Authorizer, metrics: Metrics, rules: RulesHolder = RulesHolder(),
                audit: Bool = false, clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }) {
        self.store = store
        self.audit = audit
        self.rules = rules
        viewIndex = ViewIndexKeeper(store: store, metrics: metrics)
        self.limits = limits
        self.authorizer = authorizer
        self.metrics = metrics
        self.clock = clock
        metrics.declare("outpost_changes_total", help: "Changes pushed, by result (applied, replayed, conflict, rejected).", kind: "counter")
        metrics.declare("outpost_rejections_total", help: "Rejected changes by code.", kind: "counter")
        metrics.declare("outpost_pull_pages_total", help: "Pull pages served.", kind: "counter")
        metrics.declare("outpost_pull_records_total", help: "Records served in pull pages.", kind: "counter")
        metrics.declare("outpost_pull_bytes_total", help: "Encoded bytes of records served in pull pages.", kind: "counter")
        metrics.declare("outpost_long_polls_woken_total", help: "Long-poll pulls woken by a commit.", kind: "counter")
        metrics.declare("outpost_pull_pages_shared_total", help: "Pull pages served by an identical pull's read instead of a read of their own.", kind: "counter")
        pullPages = metrics.counter("outpost_pull_pages_total")
        pullRecords = metrics.counter("outpost_pull_records_total")
        pullBytes = metrics.counter("outpost_pull_bytes_total")
        longPollsWoken = metrics.counter("outpost_long_polls_woken_total")
        coalescer = PageCoalescer(shared: metrics.counter("outpost_pull_pages_shared_total"))
        hub = LongPollHub(store: store, counters: LongPollHub.Counters(woken: longPollsWoken, pages: pullPages, records: pullRecords, bytes: pullBytes))
    }

    /// Pulls held open by a long poll now.
    public var waitingPulls: Int { hub.waitingCount }

    /// The server is shutting down: long polls waiting in the hub are answered now, as at
    /// their deadline, and later ones do not wait, so the shutdown is not held until its
    /// grace period ends. (A pull under rules, `viewPull`, still waits until its deadline
    /// or the end of the grace period.)
    public func beginDraining() { hub.releaseAll() }

    /// The space named in the path: `400 invalid_space` when it cannot be a space name.
    public static func space(_ parameters: [String: String]) throws(HTTPError) -> String {
        guard let space = parameters["space"], Names.isValidSpace(space) else { throw .invalidSpace(parameters["space"]) }
        return space
    }

    // MARK: Push

    /// Checks done before a push body is read: the space name and a write token.
    public func authorizePush(_ head: HTTPRequestHead, _ parameters: [String: String]) async throws(HTTPError) {
        _ = try await authorizer.authorize(head, space: Self.space(parameters), scope: .write)
    }

    /// `POST /v1/spaces/{space}/push`.
    public func push(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let decoded = try Self.decodePush(request.body, maxChanges: limits.maxChangesPerPush)
        // The token's subject is kept with every record state the push writes: who wrote,
        // as the device cannot claim it (its clientId is what it chooses to be called).
        let claims = try await authorizer.authorize(request.head, space: space, scope: .write)
        // Under rules, every change is judged in the store's transaction, on the state it
        // would replace (PushRules), by the rules of this moment for this token.
        // The versions the push names are judged against the rules' minimums (docs/rules.md,
        // "App versions").
        let judge: RulesJudge? = rules.rules.map { RulesJudge(view: $0.view(for: claims), versions: decoded.versions) }
        let items = decoded.changes.map { prepare($0, judge: judge) }

        let results = try await storeCall {
            try await self.store.push(space: space, clientId: decoded.clientId, subject: claims.sub, items: items, now: self.clock(), judge: judge)
        }
        devices.push(DeviceActivity.Key(space: space, clientId: decoded.clientId, subject: claims.sub), now: clock())
        let applied = count(results)
        if audit && applied > 0 {
            Log.write(level: "info", "write", [
                "space": .string(space), "subject": .string(claims.sub), "clientId": .string(decoded.clientId),
                "applied": .number(JSONNumber(applied)), "changes": .number(JSONNumber(results.count)), "requestId": .string(request.head.requestID),
            ])
        }
        let response = PushResponse(epoch: store.epoch, results: results)
        return HTTPResponse(json: response.encoded())
    }

    /// Decodes a push body: `400 invalid_json`, `422 invalid_request` with `details.field`,
    /// or `413 too_many_changes` for the request as a whole; a fault of one change is left
    /// in place as `.invalid`, to be answered `rejected invalid_change`. Public so that an
    /// HTTP face over another implementation of the protocol (the SDK's in-memory server,
    /// in the conformance tests) refuses a malformed push exactly as the server does.
    public static func decodePush(_ body: [UInt8], maxChanges: Int) throws(HTTPError) -> (clientId: String, changes: [DecodedChange], versions: AppVersions) {
        // Records nest at most 64 levels; `data` sits three levels below the body's root.
        let value = try parseJSONBody(body, maxDepth: 64 + 3)
        do {
            return try PushRequest.decodeForServer(value, maxChanges: maxChanges)
        } catch {
            switch error {
            case .wire(let w): throw HTTPError.invalidRequest(w)
            case .tooManyChanges(let count, let limit):
                throw HTTPError(HTTPStatus(code: 413), .tooManyChanges, "\(count) changes in one push; the limit is \(limit)", details: ["limit": .int(limit)])
            }
        }
    }

    /// Checks one change before the store (`PushRules.check`: it decoded, its lineage,
    /// its size), and fingerprints its encoded data. Under rules (`judge`), the schema is
    /// checked here, off the store's writer, and the members of the data the judge reads
    /// stay parsed.
    func prepare(_ decoded: DecodedChange, judge: RulesJudge? = nil) -> PushItem {
        switch PushRules.check(decoded, epoch: store.epoch, maxRecordBytes: limits.maxRecordBytes) {
        case .refused(let result):
            return .rejected(result)
        case .admitted(var change, let data):
            let fingerprint = SHA256.hash(change.fingerprintMaterial(canonicalData: data))
            // The store needs the encoded bytes only; dropping the parsed tree here frees
            // it on this thread, not on the store's single writer.
            var refusal: PushResult.RejectReason?
            if let judge { refusal = judge.prepare(&change) } else { change.data = nil }
            return .change(PreparedChange(change: change, fingerprint: fingerprint, data: data, refusal: refusal))
        }
    }

    /// Counts the results in the metrics; returns how many changes were applied (not replays).
    @discardableResult
    private func count(_ results: [PushResult]) -> Int {
        var applied = 0, replayed = 0, conflicts = 0
        for r in results {
            switch r.status {
            case .applied: if r.replayed { replayed += 1 } else { applied += 1 }
            case .conflict: conflicts += 1
            case .rejected: metrics.increment("outpost_rejections_total", .init([("code", r.error?.code ?? "unknown")]))
            }
        }
        if applied > 0 { metrics.increment("outpost_changes_total", .init([("result", "applied")]), by: Double(applied)) }
        if replayed > 0 { metrics.increment("outpost_changes_total", .init([("result", "replayed")]), by: Double(replayed)) }
        if conflicts > 0 { metrics.increment("outpost_changes_total", .init([("result", "conflict")]), by: Double(conflicts)) }
        let rejected = results.count - applied - replayed - conflicts
        if rejected > 0 { metrics.increment("outpost_changes_total", .init([("result", "rejected")]), by: Double(rejected)) }
        return applied
    }

    // MARK: Pull

    /// Checks done before a pull is served: the space name and a read token.
    public func authorizePull(_ head: HTTPRequestHead, _ parameters: [String: String]) async throws(HTTPError) {
        _ = try await authorizer.authorize(head, space: Self.space(parameters), scope: .read)
    }

    /// Parses and validates the pull query (docs/protocol.md section 5): `400 invalid_cursor`, or
    /// `422 invalid_request` naming the parameter. Public for the same reason as `decodePush`.
    public static func pullQuery(_ head: HTTPRequestHead) throws(HTTPError) -> PullQuery {
        var query = PullQuery()
        if let since = head.query("since") {
            guard let cursor = Cursor(since) else {
                throw HTTPError(HTTPStatus(code: 400), .invalidCursor, "since is not a cursor (\"<epoch>.<seq>\", or \"<epoch>.<seq>.<view>\" under rules)")
            }
            query.since = cursor.version
            query.sinceView = cursor.view
        }
        query.limit = try head.integerQuery("limit", min: 1)
        query.maxBytes = try head.integerQuery("maxBytes", min: 1)
        query.waitMs = try head.integerQuery("wait", min: 0, max: PullQuery.maxWaitMs) ?? 0
        switch head.query("holding") {
        case nil, "false": query.holding = false
        case "true": query.holding = true
        default: throw .invalidQuery("holding", "must be true or false")
        }
        if let text = head.query("collections") {
            let names = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            guard names.count <= 64, names.allSatisfy(Names.isValidCollection) else {
                throw .invalidQuery("collections", "must be a comma-separated list of collection names (at most 64)")
            }
            query.collections = Array(Set(names)).sorted()
        }
        // The device names itself in a header (added without a version change), checked
        // as a push's clientId is.
        if let sent = head.headers[PullQuery.clientIdHeader] {
            let clientId = String(sent.trimmingSpacesAndTabs)
            guard Names.isValidClientID(clientId) else {
                throw HTTPError(HTTPStatus(code: 400), .invalidHeader, "\(PullQuery.clientIdHeader) must be 1 to 128 characters of [A-Za-z0-9_.:-]",
                                details: ["header": .string(PullQuery.clientIdHeader)])
            }
            query.clientId = clientId
        }
        return query
    }

    /// `GET /v1/spaces/{space}/pull`, with the long poll of `wait`: the rules of
    /// `PullRules`, around a page read by the store.
    public func pull(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let query = try Self.pullQuery(request.head)
        let epoch = store.epoch
        let since = try Self.refusing { () throws(PullRules.Refusal) in try PullRules.start(query.since, epoch: epoch) }
        if let rules = rules.rules {
            let claims = try await authorizer.authorize(request.head, space: space, scope: .read)
            let view = rules.view(for: claims)
            return try await viewPull(space: space, query: query, since: since, view: view, subject: claims.sub)
        }
        // Who pulls, when the device named itself: the token's subject, verified again (an
        // HMAC on a token the pre-body check just verified) only for such pulls.
        let puller = query.clientId == nil ? nil : try await authorizer.authorize(request.head, space: space, scope: .read).sub
        try Self.refusing { () throws(PullRules.Refusal) in try PullRules.checkView(since, sinceView: query.sinceView, view: nil) }
        let pageRequest = PageRequest(space: space, afterSeq: since.seq, limit: limits.pageLimit(requested: query.limit),
                                      maxBytes: limits.pageByteBudget(requested: query.maxBytes), collections: query.collections)
        let store = self.store
        let page = try await storeCall {
            try await self.coalescer.page(pageRequest, knownHead: store.notifier.knownHead(space: space)) { try await store.page(pageRequest) }
        }
        try Self.refusing { () throws(PullRules.Refusal) in try PullRules.check(since, head: page.head, horizon: page.horizon) }
        if page.count == 0 && query.waitMs > 0 {
            // Held until a commit after what this page saw, with every pull that would read
            // the same page (LongPollHub: one read and one encoded answer for all of them;
            // a filtered group woken by a commit to another collection waits on).
            let key = LongPollHub.Key(space: space, afterSeq: pageRequest.afterSeq, limit: pageRequest.limit, maxBytes: pageRequest.maxBytes,
                                      collections: pageRequest.collections, head: page.head)
            notePull(space: space, query: query, subject: puller, next: since, view: nil)
            return hub.hold(key, request: pageRequest, first: page, since: since, deadline: ContinuousClock.now + .milliseconds(query.waitMs))
        }
        pullPages.add()
        pullRecords.add(page.count)
        pullBytes.add(page.changesJSON.count)
        let next = page.lastSeq.map { Version(epoch: epoch, seq: $0) } ?? since
        notePull(space: space, query: query, subject: puller, next: next, view: nil)
        return HTTPResponse(json: Self.encodePage(page, next: next))
    }

    /// Notes a pull of a device that named itself (`DeviceActivity`): a lock and a
    /// dictionary update, no write.
    func notePull(space: String, query: PullQuery, subject: String?, next: Version, view: ReadView?) {
        guard let clientId = query.clientId, let subject else { return }
        devices.pull(DeviceActivity.Key(space: space, clientId: clientId, subject: subject), now: clock(), next: next, view: view)
    }

    /// Runs a check of `PullRules`; its refusal becomes the same `HTTPError`.
    @discardableResult
    static func refusing<T>(_ check: () throws(PullRules.Refusal) -> T) throws(HTTPError) -> T {
        do {
            return try check()
        } catch {
            throw HTTPError(error)
        }
    }

    /// The answer around a page the store read (`PullRules.envelope`).
    static func encodePage(_ page: PageData, next: Version) -> [UInt8] {
        PullRules.envelope(epoch: page.epoch, changes: page.changesJSON, next: Cursor(next), hasMore: page.hasMore, head: page.head)
    }

    // MARK: Pull under rules

    /// A pull under rules (docs/rules.md): pages of the token's view, read by `ViewPager`,
    /// and a long poll that waits on until a commit brings something the view admits.
    /// These pulls share no page read with others (`PageCoalescer`, `LongPollHub`): their
    /// pages differ from token to token.
    func viewPull(space: String, query: PullQuery, since: Version, view: ReadView, subject: String) async throws -> HTTPResponse {
        let pulled = PulledView(query.sinceView)
        try Self.refusing { () throws(PullRules.Refusal) in try PullRules.checkView(since, sinceView: pulled.view, view: view.id) }
        if since.seq > 0 {
            let horizon = try await storeCall { try await self.store.horizon(space: space) }
            try Self.refusing { () throws(PullRules.Refusal) in try PullRules.checkHorizon(since, horizon: horizon) }
        }
        let epoch = store.epoch
        let pager = ViewPager(store: store, view: view, indexed: viewIndex.isReady(view.rules.index))
        let limit = limits.pageLimit(requested: query.limit), maxBytes = limits.pageByteBudget(requested: query.maxBytes)
        let deadline = ContinuousClock.now + .milliseconds(query.waitMs)
        // What the device holds: the view as of where its pull began (its cursor, or the
        // beginning an earlier page's cursor carries); as of the start when it keeps copies
        // from before it (`holding`); nothing at the start otherwise.
        let heldAt = pulled.heldAt(since: since.seq, holding: query.holding)
        var after = since.seq
        while true {
            let from = after
            let page = try await storeCall {
                try await pager.page(space: space, afterSeq: from, heldAt: heldAt, limit: limit, maxBytes: maxBytes,
                                     collections: query.collections, epoch: epoch)
            }
            try Self.refusing { () throws(PullRules.Refusal) in try PullRules.checkHead(since, head: page.head) }
            after = page.lastSeq ?? after
            let done = page.count > 0 || page.hasMore || query.waitMs == 0 || ContinuousClock.now >= deadline
            var woken = false
            if !done { woken = await store.waitForCommit(space: space, afterSeq: max(page.head, after), deadline: deadline) }
            if !woken {
                pullPages.add()
                pullRecords.add(page.count)
                pullBytes.add(page.bytes)
                let nextView = PulledView.next(view: view.id, heldAt: heldAt, holding: query.holding, hasMore: page.hasMore).text
                notePull(space: space, query: query, subject: subject, next: Version(epoch: epoch, seq: after), view: view)
                return HTTPResponse(json: PullRules.envelope(epoch: epoch, changes: page.json, next: Cursor(Version(epoch: epoch, seq: after), view: nextView),
                                                             hasMore: page.hasMore, head: page.head,
                                                             fields: view.rules.fieldKindsJSON))
            }
            longPollsWoken.add()
        }
    }

    // MARK: Store failures

    /// Runs a store call; a failure of the store (disk full, I/O error, closed) becomes
    /// `503 unavailable` with `Retry-After`, never a half-answer.
    func storeCall<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        try await HTTPError.fromStore("store failure", "the store cannot serve this request now; retry", body)
    }
}
