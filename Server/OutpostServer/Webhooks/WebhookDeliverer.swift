import Foundation
import OutpostCore
import OutpostCrypto
import OutpostSignatures
import Synchronization

/// Delivers one webhook's batches, in a task of its own, so a slow or failing receiver
/// never slows a push (a push only writes its outbox rows).
///
/// What it does and when is decided by a `WebhookDeliveryModel`: which spaces are due, when
/// to scan them all, the runs of claimed batches in each, the backoff after a failure. The
/// deliverer only performs the model's steps (database jobs through `store`, batches read
/// through `reads`, deliveries through `client`, waits on its doorbell) and feeds their
/// results back, with the time they ended. The commit notifier rings the doorbell with each
/// commit's space (on PostgreSQL also for other servers' commits, through `LISTEN`).
///
/// The lag metric is computed when it is scraped, from the commit time of the oldest
/// change each space still waits with (`Waiting`): the scan gives it for every space, a
/// batch about to be sent for its space (its first change is the space's oldest), a
/// commit rung in a space that had none waiting its own time, and a space a claim finds
/// idle is dropped. So the lag keeps growing while a delivery hangs or the receiver is
/// down, when the deliverer does not scan.
final class WebhookDeliverer: Sendable {
    let target: WebhookTarget
    let doorbell = Doorbell()
    private let store: any SQLRunner
    /// Where a batch's rows are read: on SQLite the store's readers, on PostgreSQL `store`.
    private let reads: any SQLRunner
    private let waiting = Waiting()
    private let client: WebhookHTTPClient
    private let settings: WebhookSettings
    private let secret: [UInt8]
    private let owner: String
    private let metrics: WebhookMetrics

    init(target: WebhookTarget, store: any SQLRunner, reads: any SQLRunner, client: WebhookHTTPClient, settings: WebhookSettings,
         secret: [UInt8], owner: String, metrics: WebhookMetrics) {
        self.target = target
        self.store = store
        self.reads = reads
        self.client = client
        self.settings = settings
        self.secret = secret
        self.owner = owner
        self.metrics = metrics
        let waiting = self.waiting
        metrics.lag(target) { waiting.lagSeconds(nowMs: Self.nowMs()) }
    }

    /// A commit in `space` (nil: any space may have commits): noted for the lag, and rung.
    func committed(_ space: String?) {
        if let space { waiting.committed(space, at: Self.nowMs()) }
        doorbell.ring(space)
    }

    /// A lease outlasts the longest delivery: the request's timeout, twice, and a margin.
    var leaseMs: Int64 { Int64(settings.timeoutSeconds) * 2_000 + 10_000 }

    private var bounds: WebhookOutbox.Bounds {
        WebhookOutbox.Bounds(changes: settings.batchChanges, bytes: settings.batchBytes, leaseMs: leaseMs)
    }

    static func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// The job started beside a delivery (`WebhookDeliveryModel.Step.send`).
    private typealias Beside = Task<WebhookDeliveryModel.Written, Never>

    /// Delivers until the task is cancelled: performs the model's steps and feeds it their
    /// results. Once cancelled, it records the batch delivered last, if it was not yet.
    func run() async {
        var model = WebhookDeliveryModel(leaseMs: leaseMs, timeoutMs: Int64(settings.timeoutSeconds) * 1000)
        var beside: Beside?
        while !Task.isCancelled {
            let now = Self.nowMs()
            let step = model.next(now: now)
            let input = await perform(step, at: now, beside: &beside)
            model.take(input, now: Self.nowMs())
        }
        if let beside { _ = await beside.value }
        if let delivered = model.unrecorded { _ = await write(recording: delivered, claim: nil, now: Self.nowMs()) }
    }

    /// Performs `step`, asked for at `now`, and returns what happened.
    private func perform(_ step: WebhookDeliveryModel.Step, at now: Int64, beside: inout Beside?) async -> WebhookDeliveryModel.Input {
        switch step {
        case .scan:
            return await scan(at: now)
        case .wait(let until):
            return .rung(await doorbell.wait(untilMs: until))
        case .claim(let space, let recording):
            return .written(await write(recording: recording, claim: space, now: now))
        case .record(let batch):
            return .written(await write(recording: batch, claim: nil, now: now))
        case .read(let run, let index):
            return .read(await read(run, index))
        case .send(let batch, let body, let job):
            if let job { beside = Task { await self.write(recording: job.recording, claim: job.space, now: now) } }
            let answer = await send(body, deliveryID: batch.deliveryID, attempt: batch.failures + 1)
            metrics.delivery(target, answer)
            if answer.delivered { metrics.delivered(target, changes: batch.changes.count) }
            return .answered(answer)
        case .collectBeside:
            let written = await beside?.value ?? .failed
            beside = nil
            return .besideWritten(written)
        case .recordFailure(let batch, let body, let answer):
            return .failureRecorded(await recordFailure(batch, body: body, answer: answer, now: now))
        }
    }

    /// Reads which spaces have commits the webhook has not had, and notes each one's oldest
    /// for the lag.
    private func scan(at now: Int64) async -> WebhookDeliveryModel.Input {
        do {
            let key = target.key
            let pending = try await store.run("webhook") { db in try WebhookOutbox.pending(db, webhook: key) }
            waiting.scanned(pending, startedAt: now)
            return .scanned(spaces: pending.map(\.space))
        } catch {
            Log.error("webhook scan failed", ["webhook": target.name, "error": "\(error)"])
            return .scanFailed
        }
    }

    /// Records `recording` as delivered (when set), then claims `space` (when set), in one
    /// job at `now`. A claim that finds the space idle drops it from the lag.
    private func write(recording: WebhookOutbox.Batch?, claim space: String?, now: Int64) async -> WebhookDeliveryModel.Written {
        let (key, owner, bounds, leaseMs) = (target.key, self.owner, self.bounds, self.leaseMs)
        let done: (recorded: Bool, claim: Result<WebhookOutbox.Claim, any Error>?)
        do {
            done = try await store.run("webhook") { db -> (Bool, Result<WebhookOutbox.Claim, any Error>?) in
                if let recording {
                    guard try WebhookOutbox.delivered(db, recording, owner: owner, now: now, leaseMs: leaseMs) else { return (false, nil) }
                }
                guard let space else { return (true, nil) }
                return (true, Result { try WebhookOutbox.claim(db, webhook: key, space: space, owner: owner, now: now, bounds: bounds) })
            }
        } catch {
            let what = recording == nil ? "webhook claim failed" : "webhook delivery could not be recorded; it will be sent again"
            Log.error(what, ["webhook": target.name, "space": space ?? recording?.space ?? "", "error": "\(error)"])
            return .failed
        }
        guard done.recorded else { return .refused }
        switch done.claim {
        case nil:
            return .recorded(nil)
        case .success(let claim)?:
            if claim == .idle, let space { waiting.idle(space) }
            return .recorded(claim)
        case .failure(let error)?:
            Log.error("webhook claim failed", ["webhook": target.name, "space": space ?? "", "error": "\(error)"])
            return .claimFailed
        }
    }

    /// The `index`th batch of `run` (on SQLite from a reader, beside the writer's commits),
    /// its first change noted as its space's oldest, with its body.
    private func read(_ run: WebhookOutbox.Run, _ index: Int) async -> WebhookDeliveryModel.Read {
        let batch: WebhookOutbox.Batch
        do {
            guard let b = try await reads.run("webhook", { db in try WebhookOutbox.load(db, run, index) }) else { return .gone }
            batch = b
        } catch {
            Log.error("webhook batch could not be read", ["webhook": target.name, "space": run.space, "error": "\(error)"])
            return .failed
        }
        if let oldest = batch.changes.first?.committedAt { waiting.oldest(run.space, oldest) }
        do {
            return .batch(batch, body: try WebhookOutbox.body(batch))
        } catch {
            Log.error("webhook batch cannot be encoded", ["webhook": target.name, "space": run.space, "error": "\(error)"])
            return .failed
        }
    }

    /// Records the failed delivery of `batch` at `now` (a retry, or a dead letter after the
    /// last attempt); nil when the job failed.
    private func recordFailure(_ batch: WebhookOutbox.Batch, body: [UInt8], answer: WebhookHTTPClient.Answer, now: Int64) async
        -> WebhookOutbox.Failure? {
        let (settings, name, owner, leaseMs) = (self.settings, target.name, self.owner, self.leaseMs)
        let failure: WebhookOutbox.Failure
        do {
            failure = try await store.run("webhook") { db in
                try WebhookOutbox.failed(db, batch, webhookName: name, body: body, error: answer.failure, owner: owner, now: now,
                                         settings: settings, leaseMs: leaseMs, random: Double.random(in: 0..<1))
            }
        } catch {
            Log.error("webhook failure could not be recorded", ["webhook": target.name, "space": batch.space, "error": "\(error)"])
            return nil
        }
        switch failure {
        case .retry:
            Log.info("webhook delivery failed; retrying", ["webhook": target.name, "space": batch.space, "attempt": String(batch.failures + 1),
                                                             "error": answer.detail])
        case .deadLettered:
            metrics.deadLettered(target)
            Log.error("webhook batch is a dead letter after its last attempt", ["webhook": target.name, "space": batch.space,
                                                                                "deliveryId": batch.deliveryID, "error": answer.detail])
        case .leaseLost:
            break
        }
        return failure
    }

    /// One signed POST of `body`.
    func send(_ body: [UInt8], deliveryID: String, attempt: Int) async -> WebhookHTTPClient.Answer {
        let timestamp = Int64(Date().timeIntervalSince1970)
        return await client.post(target.url, body: body, headers: [
            ("Content-Type", "application/json"),
            ("User-Agent", "outpost-server"),
            ("Outpost-Delivery", deliveryID),
            ("Outpost-Attempt", String(attempt)),
            ("Outpost-Signature", Self.signature(secret: secret, timestamp: timestamp, body: body)),
        ], timeout: settings.timeoutSeconds)
    }

    /// `t=<unix seconds>,v1=<hex of HMAC-SHA256(secret, "<t>.<body>")>` (docs/operating.md,
    /// "Webhooks").
    static func signature(secret: [UInt8], timestamp: Int64, body: [UInt8]) -> String {
        "t=\(timestamp),v1=\(Hex.encode(HMACSHA256.authenticate(Array("\(timestamp).".utf8) + body, key: secret)))"
    }
}

/// The commit time (ms since 1970) of the oldest change each space still waits with, as
/// far as the deliverer knows; the lag metric reads it at every scrape.
final class Waiting: Sendable {
    private let spaces = Mutex<[String: Int64]>([:])

    /// Seconds since the oldest waiting change was committed; 0 when none waits.
    func lagSeconds(nowMs: Int64) -> Double {
        guard let oldest = spaces.withLock({ $0.values.min() }) else { return 0 }
        return Double(max(0, nowMs - oldest)) / 1000
    }

    /// A commit in `space` at `at`: the space's oldest, unless one is already known.
    func committed(_ space: String, at: Int64) {
        spaces.withLock { if $0[space] == nil { $0[space] = at } }
    }

    /// The scan's answer for every space, begun at `startedAt`; a space rung since then
    /// (after the scan read the outbox) keeps what the ring noted.
    func scanned(_ pending: [(space: String, oldest: Int64)], startedAt: Int64) {
        spaces.withLock { spaces in
            var found = spaces.filter { $0.value >= startedAt }
            for (space, oldest) in pending { found[space] = oldest }
            spaces = found
        }
    }

    /// The oldest change `space` waits with was committed at `at`.
    func oldest(_ space: String, _ at: Int64) {
        spaces.withLock { $0[space] = at }
    }

    /// `space` has nothing waiting.
    func idle(_ space: String) {
        _ = spaces.withLock { $0.removeValue(forKey: space) }
    }
}

/// The webhook series of `/metrics` (docs/operating.md, "Webhooks").
struct WebhookMetrics: Sendable {
    let metrics: Metrics

    init(_ metrics: Metrics) {
        self.metrics = metrics
        metrics.declare("outpost_webhook_deliveries_total", help: "Webhook deliveries by webhook and result (delivered, failed, no_answer).", kind: "counter")
        metrics.declare("outpost_webhook_changes_delivered_total", help: "Changes in the webhook batches delivered, by webhook.", kind: "counter")
        metrics.declare("outpost_webhook_dead_letters_total", help: "Webhook batches that ran out of attempts, by webhook.", kind: "counter")
        metrics.declare("outpost_webhook_lag_seconds", help: "Age of the oldest commit a webhook has not had yet, by webhook (0: none waits).", kind: "gauge")
    }

    func delivery(_ target: WebhookTarget, _ answer: WebhookHTTPClient.Answer) {
        let result: String
        switch answer {
        case .status: result = answer.delivered ? "delivered" : "failed"
        case .noAnswer: result = "no_answer"
        }
        metrics.increment("outpost_webhook_deliveries_total", .init([("webhook", target.name), ("result", result)]))
    }

    func delivered(_ target: WebhookTarget, changes: Int) {
        metrics.increment("outpost_webhook_changes_delivered_total", .init([("webhook", target.name)]), by: Double(changes))
    }

    func deadLettered(_ target: WebhookTarget) {
        metrics.increment("outpost_webhook_dead_letters_total", .init([("webhook", target.name)]))
    }

    /// The webhook's lag series, read from `seconds` at every scrape.
    func lag(_ target: WebhookTarget, seconds: @escaping @Sendable () -> Double) {
        metrics.gauge("outpost_webhook_lag_seconds", .init([("webhook", target.name)]), read: seconds)
    }
}
