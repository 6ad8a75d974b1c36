import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import Synchronization

/// Webhooks (docs/operating.md, "Webhooks"): committed changes posted to each configured
/// URL in signed batches, at least once, in commit order per space; and the dead-letter
/// list an operator sees and replays, `GET /v1/admin/webhooks/dead-letters` and
/// `POST /v1/admin/webhooks/dead-letters/{id}/replay` (docs/protocol.md section 7).
///
/// Its SQL (`WebhookOutbox`) runs on SQLite on the store's writer thread, between push
/// transactions, so claims queue with the pushes instead of contending for the write lock
/// from a second connection, and a batch's rows are read on the store's readers; on
/// PostgreSQL on one thread with a session of its own. Each
/// webhook is delivered by its own task (`WebhookDeliverer`),
/// woken by the store's commit notifier. A maintenance task keeps the webhooks registered
/// (`WebhookOutbox.register`), forgets the ones no server names any more and prunes.
public final class WebhookService: Sendable {
    /// The signing secret's file in the data directory, when `OUTPOST_WEBHOOK_SECRET` is not set.
    public static let secretFileName = "webhook-secret"

    /// The most dead letters one page lists, and its default.
    static let maxDeadLettersPerPage = 1000
    static let defaultDeadLettersPerPage = 100
    /// How often the webhooks are registered again (which keeps them from being forgotten).
    static let maintenanceIntervalMs: Int64 = 30_000

    let settings: WebhookSettings
    let targets: [WebhookTarget]
    let deliverers: [WebhookDeliverer]
    private let store: any SQLRunner
    private let client: WebhookHTTPClient
    private let authorizer: Authorizer
    private let metrics: WebhookMetrics
    /// This process's name on the leases it takes.
    private let owner: String
    /// Whether this process is the only one on the database (SQLite's data directory lock),
    /// so leases found at start are left by a process that is gone.
    private let soleOwner: Bool
    private let tasks = Mutex<[Task<Void, Never>]>([])

    /// - Parameters:
    ///   - secret: the signing secret; nil only when no webhook is configured.
    ///   - soleOwner: true on SQLite, where the data directory's lock keeps other servers out.
    ///   - store: where its SQL runs; `stop` stops it.
    ///   - reads: where a batch's rows are read (SQLite's readers); `store` when nil.
    init(settings: WebhookSettings, secret: [UInt8]?, authorizer: Authorizer, metrics: Metrics, soleOwner: Bool,
         store: any SQLRunner, reads: (any SQLRunner)? = nil) throws {
        self.settings = settings
        targets = settings.targets
        precondition(targets.isEmpty || secret != nil, "webhooks need a signing secret")
        self.authorizer = authorizer
        self.metrics = WebhookMetrics(metrics)
        self.soleOwner = soleOwner
        owner = Hex.encode(SecureRandom.bytes(8))
        self.store = store
        client = WebhookHTTPClient(policy: settings.addressPolicy)
        let (store, client, owner, webhookMetrics) = (self.store, self.client, self.owner, self.metrics)
        let reads = reads ?? store
        deliverers = targets.map {
            WebhookDeliverer(target: $0, store: store, reads: reads, client: client, settings: settings, secret: secret ?? [], owner: owner,
                             metrics: webhookMetrics)
        }
    }

    public func register(_ router: inout Router) {
        router.add(.GET, "/v1/admin/webhooks/dead-letters", bodyLimit: 0,
                   preBody: { [self] head, _ in _ = try await authorizer.authorizeAdmin(head) },
                   handler: { [self] request in try await listDeadLetters(request.head) })
        router.add(.POST, "/v1/admin/webhooks/dead-letters/{id}/replay", bodyLimit: 0,
                   preBody: { [self] head, _ in _ = try await authorizer.authorizeAdmin(head) },
                   handler: { [self] request in try await replay(request.parameter("id") ?? "") })
    }

    /// Starts delivering, when webhooks are configured: registers them, then one task per
    /// webhook, woken by `notifier`'s commits, and the maintenance task.
    func start(notifier: CommitNotifier) {
        guard !deliverers.isEmpty else { return }
        let deliverers = self.deliverers
        notifier.observe { space in for d in deliverers { d.committed(space) } }
        let task = Task.detached(priority: .utility) { [self] in
            do {
                try await maintain(first: true)
            } catch {
                Log.error("webhooks could not be registered; retrying", ["error": "\(error)"])
            }
            let delivering = deliverers.map { d in Task.detached(priority: .utility) { await d.run() } }
            await withTaskCancellationHandler {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(Self.maintenanceIntervalMs))
                    if Task.isCancelled { break }
                    do { try await maintain(first: false) } catch {
                        Log.error("webhook maintenance failed", ["error": "\(error)"])
                    }
                }
            } onCancel: {
                for t in delivering { t.cancel() }
            }
            for t in delivering { await t.value }
        }
        tasks.withLock { $0.append(task) }
    }

    /// Registers the webhooks (on the first run after clearing the leases a killed process
    /// left, when this process is the only one), forgets those no server named for an hour,
    /// and prunes what no webhook needs.
    private func maintain(first: Bool) async throws {
        let (targets, soleOwner) = (self.targets, self.soleOwner)
        let now = WebhookDeliverer.nowMs()
        try await store.run("webhook") { db in
            if first && soleOwner { try WebhookOutbox.clearLeases(db) }
            try WebhookOutbox.register(db, targets, now: now)
            let forgotten = try WebhookOutbox.forget(db, seenBefore: now - WebhookOutbox.forgetAfterMs)
            if forgotten > 0 { Log.info("forgot webhooks no server names any more", ["count": String(forgotten)]) }
        }
        while try await store.run("webhook", { db in try WebhookOutbox.pruneBeforeEveryStart(db) }) == WebhookOutbox.pruneSlice {}
        if first { for d in deliverers { d.doorbell.ring(nil) } }
    }

    /// Stops delivering (a batch in flight is sent again by whoever delivers next), gives
    /// up this process's leases and stops its SQL runner. Blocks while a thread joins.
    func stop() async {
        let running = tasks.withLock { t -> [Task<Void, Never>] in
            defer { t.removeAll() }
            return t
        }
        for t in running { t.cancel() }
        for t in running { await t.value }
        client.close()
        let owner = self.owner
        if !deliverers.isEmpty { _ = try? await store.run("webhook") { db in try WebhookOutbox.release(db, owner: owner) } }
        let store = self.store
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                store.stop()
                c.resume()
            }
        }
    }

    // MARK: Dead letters

    /// `GET /v1/admin/webhooks/dead-letters?after=ID&limit=N` (admin token): the batches that
    /// ran out of attempts, oldest first; `next` is the `after` of the following page.
    func listDeadLetters(_ head: HTTPRequestHead) async throws -> HTTPResponse {
        let after = try head.integerQuery("after", min: 0, max: 9_007_199_254_740_991) ?? 0
        let limit = try head.integerQuery("limit", min: 1, max: Self.maxDeadLettersPerPage) ?? Self.defaultDeadLettersPerPage
        let found = try await store.run("webhook") { db in try WebhookOutbox.deadLetters(db, after: Int64(after), limit: limit + 1) }
        let page = found.prefix(limit)
        let items: [JSONValue] = page.map { d in
            .object([
                "id": .number(JSONNumber(d.id)), "webhook": .string(d.name), "space": .string(d.space), "epoch": .string(d.epoch),
                "firstSeq": .number(JSONNumber(d.firstSeq)), "lastSeq": .number(JSONNumber(d.lastSeq)),
                "changes": .number(JSONNumber(d.changes)), "bytes": .number(JSONNumber(d.bytes)), "deliveryId": .string(d.deliveryID),
                "attempts": .number(JSONNumber(d.attempts)), "lastError": .string(d.lastError), "failedAt": .number(JSONNumber(d.failedAt)),
            ])
        }
        let next: JSONValue = found.count > limit ? .number(JSONNumber(page.last!.id)) : .null
        return HTTPResponse(json: JSONValue.object(["deadLetters": .array(items), "next": next]).encoded())
    }

    /// `POST /v1/admin/webhooks/dead-letters/{id}/replay` (admin token): sends the batch
    /// again, now, as it was (the same body and delivery id, a new signature), to its
    /// webhook. Delivered, the dead letter is removed; otherwise it stays with the new
    /// error. `200 {"id", "delivered", "status", "error"}` either way.
    func replay(_ idText: String) async throws -> HTTPResponse {
        guard let first = idText.utf8.first, first != UInt8(ascii: "0"), idText.utf8.count <= 16,
              idText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let id = Int64(idText) else {
            throw Self.notFound(idText)
        }
        guard let (letter, body) = try await store.run("webhook", { db in try WebhookOutbox.deadLetter(db, id: id) }) else {
            throw Self.notFound(idText)
        }
        guard let deliverer = deliverers.first(where: { $0.target.key == letter.webhook }) else {
            throw HTTPError(HTTPStatus(code: 409), .webhookNotConfigured,
                            "dead letter \(id) is for the webhook \(letter.name), which this server is not configured with",
                            details: ["webhook": .string(letter.name)])
        }
        let answer = await deliverer.send(body, deliveryID: letter.deliveryID, attempt: Int(letter.attempts) + 1)
        metrics.delivery(deliverer.target, answer)
        let now = WebhookDeliverer.nowMs()
        if answer.delivered {
            metrics.delivered(deliverer.target, changes: Int(letter.changes))
            try await store.run("webhook") { db in try WebhookOutbox.replayed(db, id: id) }
            Log.info("webhook dead letter replayed", ["webhook": letter.name, "id": String(id), "deliveryId": letter.deliveryID])
        } else {
            try await store.run("webhook") { db in try WebhookOutbox.replayFailed(db, id: id, error: answer.failure, now: now) }
            Log.info("webhook dead letter replay failed", ["webhook": letter.name, "id": String(id), "error": answer.detail])
        }
        var status: JSONValue = .null
        if case .status(let code) = answer { status = .number(JSONNumber(code)) }
        return HTTPResponse(json: JSONValue.object([
            "id": .number(JSONNumber(id)), "delivered": .bool(answer.delivered), "status": status,
            "error": answer.delivered ? .null : .string(answer.failure),
        ]).encoded())
    }

    static func notFound(_ id: String) -> HTTPError {
        HTTPError(HTTPStatus(code: 404), .deadLetterNotFound, "no dead letter \(String(id.prefix(40)))")
    }
}
