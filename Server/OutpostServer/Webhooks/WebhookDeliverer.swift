import Foundation
import OutpostCore
import OutpostCrypto
import OutpostSignatures
import Synchronization

/// Delivers one webhook's batches, in a task of its own, so a slow or failing receiver
/// never slows a push (a push only writes its outbox rows).
///
/// It keeps the spaces that have commits due for the webhook, each with the time it may be
/// tried again (a retry's backoff, another server's lease), and delivers them space by
/// space: in each, run after run of batches (`WebhookOutbox.claim`), batch after batch,
/// until nothing is left or a delivery fails. Between rounds it waits on its doorbell,
/// which the commit notifier rings with each commit's space (on PostgreSQL also for other
/// servers' commits, through `LISTEN`), until the next retry is due or the next scan of
/// every space: every second while anything is waiting, every `scanIntervalMs` otherwise,
/// as a backstop.
///
/// The lag metric is computed when it is scraped, from the commit time of the oldest
/// change each space still waits with (`Waiting`): the scan gives it for every space, a
/// batch about to be sent for its space (its first change is the space's oldest), a
/// commit rung in a space that had none waiting its own time, and a space found idle is
/// dropped. So the lag keeps growing while a delivery hangs or the receiver is down, when
/// the deliverer does not scan.
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

    /// The backstop: how often every space is looked at while nothing is known to wait.
    static let scanIntervalMs: Int64 = 30_000
    /// How often the spaces are looked at, and the lag measured, while something waits.
    static let busyScanIntervalMs: Int64 = 1_000

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

    /// Delivers until the task is cancelled.
    func run() async {
        var due: [String: Int64] = [:]
        var scanAt: Int64 = 0
        while !Task.isCancelled {
            var now = Self.nowMs()
            if now >= scanAt {
                do {
                    let key = target.key
                    let pending = try await store.run("webhook") { db in try WebhookOutbox.pending(db, webhook: key) }
                    for (space, _) in pending where due[space] == nil { due[space] = now }
                    waiting.scanned(pending, startedAt: now)
                } catch {
                    Log.error("webhook scan failed", ["webhook": target.name, "error": "\(error)"])
                }
                scanAt = now + (due.isEmpty ? Self.scanIntervalMs : Self.busyScanIntervalMs)
            }
            for (space, at) in due.sorted(by: { ($0.value, $0.key) < ($1.value, $1.key) }) where at <= now {
                if Task.isCancelled { return }
                due[space] = await deliver(space: space)
            }
            now = Self.nowMs()
            let rung = await doorbell.wait(untilMs: min(due.values.min() ?? .max, scanAt))
            now = Self.nowMs()
            for space in rung.spaces where due[space] == nil { due[space] = now }
            if rung.everything { scanAt = now }
            if !due.isEmpty { scanAt = min(scanAt, now + Self.busyScanIntervalMs) }
        }
    }

    /// Batches of one space delivered (or claims made) in a row before the other spaces get
    /// their turn.
    static let batchesPerTurn = 16
    /// What a lease must have left beyond a delivery's timeout for the next batch of a run
    /// to be sent before anything is written (which renews it).
    static let leaseMarginMs: Int64 = 5_000

    /// Delivers `space`'s batches in order until none is left (nil) or the space must wait:
    /// the time it may be tried again (now, after `batchesPerTurn` batches).
    ///
    /// A claim (`WebhookOutbox.claim`) takes everything the space committed as a run of
    /// batches; each is read (on SQLite from a reader, beside the writer's commits) and sent
    /// when its turn comes, one at a time. Delivered batches are not written down one by
    /// one: the last one delivered is recorded with the next write. While the run's last
    /// batch is sent, the next claim is made (recording the batch before it), and it begins
    /// with that batch, claimed already: once it is delivered, the rest of that claim is the
    /// next run. So on SQLite, where the jobs queue behind the pushes' commits, the writer's
    /// turn is taken while a batch is on the wire, and a fast receiver waits for no commit
    /// but its own. A run is ended early (recorded, and what is left of it claimed again)
    /// when the lease might lapse during the next delivery.
    func deliver(space: String) async -> Int64? {
        let (key, owner, bounds, leaseMs) = (target.key, self.owner, self.bounds, self.leaseMs)
        let timeoutMs = Int64(settings.timeoutSeconds) * 1000
        /// Records `delivered` (when set) and claims the space again (when `claim`), in one job.
        @Sendable func recordAndClaim(_ delivered: WebhookOutbox.Batch?, claim: Bool, now: Int64) async throws
            -> (recorded: Bool, claim: Result<WebhookOutbox.Claim, any Error>?) {
            try await store.run("webhook") { db -> (Bool, Result<WebhookOutbox.Claim, any Error>?) in
                if let delivered {
                    guard try WebhookOutbox.delivered(db, delivered, owner: owner, now: now, leaseMs: leaseMs) else { return (false, nil) }
                }
                guard claim else { return (true, nil) }
                return (true, Result { try WebhookOutbox.claim(db, webhook: key, space: space, owner: owner, now: now, bounds: bounds) })
            }
        }
        var claimed: Result<WebhookOutbox.Claim, any Error>?
        var claimedAt = Self.nowMs()
        var sent = 0
        // The last batch delivered and not recorded yet.
        var unrecorded: WebhookOutbox.Batch?
        for _ in 0..<Self.batchesPerTurn {
            if Task.isCancelled { return nil }
            let claim: WebhookOutbox.Claim
            do {
                if let claimed {
                    claim = try claimed.get()
                } else {
                    let now = Self.nowMs()
                    claimedAt = now
                    let (recorded, result) = try await recordAndClaim(unrecorded, claim: true, now: now)
                    guard recorded, let result else { return now + 1000 }
                    unrecorded = nil
                    claim = try result.get()
                }
            } catch {
                Log.error("webhook claim failed", ["webhook": target.name, "space": space, "error": "\(error)"])
                return Self.nowMs() + 1000
            }
            claimed = nil
            let run: WebhookOutbox.Run
            switch claim {
            case .idle:
                waiting.idle(space)
                return nil
            case .notBefore(let at): return at
            case .run(let r): run = r
            }
            // The lease is ours until then, as far as this task knows: each write renews it.
            var leaseUntil = claimedAt + leaseMs
            // When set, the turn ends once the delivered batches are recorded.
            var endTurn: Int64?
            // The claim made while the run's last batch is sent, and when it was made.
            var following: Task<(recorded: Bool, claim: Result<WebhookOutbox.Claim, any Error>?), any Error>?
            var followingAt: Int64 = 0
            var index = 0
            batches: while index < run.batches.count, !Task.isCancelled {
                if Self.nowMs() + timeoutMs + Self.leaseMarginMs > leaseUntil { break }
                let batch: WebhookOutbox.Batch
                do {
                    let i = index
                    // Gone (pruned while the webhook was forgotten): the next claim moves past it.
                    guard let b = try await reads.run("webhook", { db in try WebhookOutbox.load(db, run, i) }) else { break }
                    batch = b
                } catch {
                    Log.error("webhook batch could not be read", ["webhook": target.name, "space": space, "error": "\(error)"])
                    endTurn = Self.nowMs() + 1000
                    break
                }
                if let oldest = batch.changes.first?.committedAt { waiting.oldest(space, oldest) }
                let body: [UInt8]
                do { body = try WebhookOutbox.body(batch) } catch {
                    Log.error("webhook batch cannot be encoded", ["webhook": target.name, "space": space, "error": "\(error)"])
                    endTurn = Self.nowMs() + 1000
                    break
                }
                if index == run.batches.count - 1 && sent + 1 < Self.batchesPerTurn {
                    let (recordable, at) = (unrecorded, Self.nowMs())
                    unrecorded = nil
                    followingAt = at
                    following = Task { try await recordAndClaim(recordable, claim: true, now: at) }
                }
                let answer = await send(body, deliveryID: batch.deliveryID, attempt: batch.failures + 1)
                if Task.isCancelled { break }
                metrics.delivery(target, answer)
                let done = Self.nowMs()
                sent += 1
                if answer.delivered {
                    metrics.delivered(target, changes: batch.changes.count)
                    unrecorded = batch
                    index += 1
                    if sent >= Self.batchesPerTurn {
                        endTurn = done
                        break
                    }
                    continue
                }
                // The failure is recorded with the batches delivered before it (after the
                // claim made meanwhile, if any: it renewed the lease).
                if let f = following {
                    following = nil
                    if let outcome = try? await f.value, !outcome.recorded { return done + 1000 }
                }
                let (settings, name) = (self.settings, target.name)
                let failure: WebhookOutbox.Failure
                do {
                    failure = try await store.run("webhook") { db in
                        try WebhookOutbox.failed(db, batch, webhookName: name, body: body, error: answer.failure, owner: owner, now: done,
                                                 settings: settings, leaseMs: leaseMs, random: Double.random(in: 0..<1))
                    }
                } catch {
                    Log.error("webhook failure could not be recorded", ["webhook": target.name, "space": space, "error": "\(error)"])
                    return done + 1000
                }
                unrecorded = nil
                switch failure {
                case .retry(let at):
                    Log.info("webhook delivery failed; retrying", ["webhook": target.name, "space": space, "attempt": String(batch.failures + 1),
                                                                     "error": answer.detail])
                    return at
                case .deadLettered:
                    metrics.deadLettered(target)
                    Log.error("webhook batch is a dead letter after its last attempt", ["webhook": target.name, "space": space,
                                                                                        "deliveryId": batch.deliveryID, "error": answer.detail])
                    leaseUntil = done + leaseMs
                    index += 1
                    if sent >= Self.batchesPerTurn {
                        endTurn = done
                        break batches
                    }
                case .leaseLost:
                    return done + 1000
                }
            }
            if let f = following {
                // The claim made while the last batch was sent: it begins with that batch.
                switch await f.result {
                case .success((false, _)):
                    return Self.nowMs() + 1000
                case .success((true, let result)):
                    if endTurn == nil, !Task.isCancelled, index == run.batches.count, let delivered = unrecorded,
                       case .success(.run(var next))? = result, let first = next.batches.first,
                       first.last == delivered.last && first.deliveryID == delivered.deliveryID && next.batches.count > 1 {
                        next.batches.removeFirst()
                        next.failures = 0
                        claimed = .success(.run(next))
                        claimedAt = followingAt
                        continue
                    }
                    leaseUntil = followingAt + leaseMs
                case .failure(let error):
                    // What it was to record is recorded with the next write.
                    Log.error("webhook claim failed", ["webhook": target.name, "space": space, "error": "\(error)"])
                }
            }
            // Records the last batch delivered and claims the next run, in one job.
            let now = Self.nowMs()
            let another = endTurn == nil && !Task.isCancelled
            if unrecorded == nil && !another { return Task.isCancelled ? nil : endTurn }
            do {
                let (recorded, next) = try await recordAndClaim(unrecorded, claim: another, now: now)
                guard recorded else { return now + 1000 }
                unrecorded = nil
                claimed = next
                claimedAt = now
            } catch {
                Log.error("webhook delivery could not be recorded; it will be sent again", ["webhook": target.name, "space": space, "error": "\(error)"])
                return now + 1000
            }
            if Task.isCancelled { return nil }
            if let endTurn { return endTurn }
        }
        // Whatever was delivered last is recorded before the other spaces' turn.
        if let delivered = unrecorded {
            let now = Self.nowMs()
            do {
                guard try await recordAndClaim(delivered, claim: false, now: now).recorded else { return now + 1000 }
            } catch {
                Log.error("webhook delivery could not be recorded; it will be sent again", ["webhook": target.name, "space": space, "error": "\(error)"])
                return now + 1000
            }
        }
        return Self.nowMs()
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
