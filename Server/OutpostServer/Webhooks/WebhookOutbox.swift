import Foundation
import OutpostCore
import OutpostCrypto

/// The webhook outbox's rules, written once in SQL for both stores over `SQLSession`
/// (docs/operating.md, "Webhooks"). The stores only write the rows: while webhooks are
/// configured, every record a push writes also gets a `webhook_outbox` row in the push's
/// own transaction (`SQLitePushStorage`, `PostgresPushStorage`), so a crash between the
/// commit and its delivery loses nothing. Everything after that is here:
///
/// - **Webhooks** (`webhooks`): each configured one by its key, with the outbox id it
///   started after (commits made before it was configured are not its) and when a server
///   last named it. One that no server has named for `forgetAfterMs` is forgotten with its
///   cursors, so its backlog stops being kept.
/// - **A cursor per webhook and space** (`webhook_cursors`): the last outbox id delivered
///   (or dead-lettered), the failures of the batch after it, when it may be tried again,
///   and a lease: the server delivering the space holds it, so that servers sharing a
///   PostgreSQL database never deliver one space's batches at once.
/// - **Runs of claimed batches** (`webhook_batches`): a claim cuts everything the space
///   committed after the cursor into consecutive batches by the bounds, and records each
///   one's last outbox id and delivery id, so every delivery of a batch (a retry, after a
///   restart) sends the same changes under the same id; a later claim returns the batches
///   not yet delivered as they were, followed by what was committed since, cut the same
///   way. Within a space, outbox ids grow in commit
///   order (the space's writes are serialized by its lock), so the batches of a space go
///   out in commit order, one at a time: the deliverer sends a run's batches one after the
///   other, and records the last one delivered with its next write (a crash before that
///   sends the unrecorded ones again, as they were).
/// - **Retries**: exponential backoff with jitter (`retryDelay`); after the configured
///   attempts the batch becomes a **dead letter** (`webhook_dead_letters`, its body kept as
///   it was sent) and the space's later batches go on.
/// - **Pruning**: a row is deleted once every webhook's cursor of its space is past it.
enum WebhookOutbox {
    /// One outbox row: a record state a commit wrote.
    struct Change: Sendable, Equatable {
        var id: Int64
        var epoch: String
        var seq: Int64
        var collection: String
        var recordID: String
        var deleted: Bool
        /// The stored JSON object; nil for a tombstone.
        var data: [UInt8]?
        var updatedAt: Int64
        var updatedBy: String
        var clientTime: Int64?
        var lineage: String?
        var sameAs: String?
        /// The stored mark of a resolved write (`Resolved.stored`), nil for any other.
        var resolved: String? = nil
        /// When the push that wrote it arrived (ms since 1970).
        var committedAt: Int64
        /// The authenticated subject of that push (nil for a row written before it was kept).
        var subject: String? = nil
    }

    /// A batch as claimed: the space's rows after `after` up to `last` (all of one epoch),
    /// and the delivery id every delivery of it carries.
    struct Slot: Sendable, Equatable {
        var after: Int64
        var last: Int64
        var deliveryID: String
    }

    /// The batches of a space claimed for a webhook and not yet delivered, in commit order:
    /// the first starts after the cursor, each next one after the one before it.
    struct Run: Sendable, Equatable {
        var webhook: String
        var spaceID: Int64
        var space: String
        var batches: [Slot]
        /// Deliveries of the first batch that failed so far (the later ones were never tried
        /// since they were claimed, or were delivered and not recorded).
        var failures: Int
    }

    /// A batch loaded for delivery (`load`): its slot's rows.
    struct Batch: Sendable, Equatable {
        var webhook: String
        var spaceID: Int64
        var space: String
        var after: Int64
        var last: Int64
        var deliveryID: String
        /// Deliveries of this batch that failed so far.
        var failures: Int
        var changes: [Change]
    }

    /// What `claim` found for a webhook in a space.
    enum Claim: Sendable, Equatable {
        case run(Run)
        /// Nothing is waiting: every commit of the space was delivered or dead-lettered.
        case idle
        /// The space waits for a retry, or another server holds its lease, until this time
        /// (ms since 1970).
        case notBefore(Int64)
    }

    /// How a failed delivery was recorded.
    enum Failure: Sendable, Equatable {
        /// It will be sent again at this time (ms since 1970).
        case retry(at: Int64)
        /// It ran out of attempts: it is a dead letter, and the space's next batch is due.
        case deadLettered
        /// Another server took the lease meanwhile (it sends the batch itself).
        case leaseLost
    }

    /// The bounds of a batch and of a lease.
    struct Bounds: Sendable {
        var changes: Int
        var bytes: Int
        /// How long a claim keeps other servers off the space: longer than a delivery can take.
        var leaseMs: Int64
    }

    /// A webhook that no server has named for this long is forgotten.
    static let forgetAfterMs: Int64 = 3_600_000
    /// Rows deleted per statement when pruning.
    static let pruneSlice = 2000

    // MARK: Webhooks

    /// Records that this server delivers to `targets` at `now`: a webhook new to the store
    /// starts after the newest outbox row; a known one keeps its cursors.
    static func register(_ db: any SQLSession, _ targets: [WebhookTarget], now: Int64) throws {
        try db.transaction(.process) {
            for target in targets {
                try db.run("""
                    INSERT INTO webhooks(webhook, name, start_id, seen_at)
                    VALUES (?, ?, (SELECT coalesce(max(id), 0) FROM webhook_outbox), ?)
                    ON CONFLICT (webhook) DO UPDATE SET name = excluded.name, seen_at = excluded.seen_at
                    """, [.text(target.key), .text(target.name), .integer(now)])
            }
        }
    }

    /// Forgets the webhooks no server named since `before` (ms) with their cursors, and
    /// prunes what only they still needed. Returns how many it forgot.
    @discardableResult
    static func forget(_ db: any SQLSession, seenBefore before: Int64) throws -> Int {
        let forgotten = try db.transaction(.process) { () throws -> Int in
            try db.run("DELETE FROM webhook_batches WHERE webhook IN (SELECT webhook FROM webhooks WHERE seen_at < ?)", [.integer(before)])
            try db.run("DELETE FROM webhook_cursors WHERE webhook IN (SELECT webhook FROM webhooks WHERE seen_at < ?)", [.integer(before)])
            return try db.run("DELETE FROM webhooks WHERE seen_at < ?", [.integer(before)])
        }
        if forgotten > 0 {
            let spaces = try db.query("SELECT DISTINCT space_id FROM webhook_outbox", []) { $0.int64(0) }
            for space in spaces { try db.transaction(.process) { try prune(db, spaceID: space) } }
        }
        return forgotten
    }

    /// Deletes up to `pruneSlice` of the rows older than every webhook's start (no webhook
    /// was configured when they were written, so none will deliver them), and returns how
    /// many: the caller runs it again while that is a whole slice, each slice a job of its
    /// own, so that on SQLite the pushes queued on the writer go between them.
    @discardableResult
    static func pruneBeforeEveryStart(_ db: any SQLSession) throws -> Int {
        guard let start = try db.queryOne("SELECT min(start_id) FROM webhooks", [], { $0.optionalInt64(0) }) ?? nil else { return 0 }
        return try db.run("DELETE FROM webhook_outbox WHERE id IN (SELECT id FROM webhook_outbox WHERE id <= ? ORDER BY id LIMIT ?)",
                          [.integer(start), .integer(Int64(pruneSlice))])
    }

    /// Gives up every lease: the one process that owns an SQLite data directory calls it at
    /// start, since a lease left by a killed process has no other owner.
    static func clearLeases(_ db: any SQLSession) throws {
        try db.run("UPDATE webhook_cursors SET lease_owner = NULL, lease_until = 0 WHERE lease_owner IS NOT NULL", [])
    }

    /// Gives up the leases `owner` holds (a server stopping): its batches stay as they
    /// were, for whoever delivers next.
    static func release(_ db: any SQLSession, owner: String) throws {
        try db.run("UPDATE webhook_cursors SET lease_owner = NULL, lease_until = 0 WHERE lease_owner = ?", [.text(owner)])
    }

    // MARK: Delivery

    /// The spaces with commits `webhook` has not had, each with the commit time of the
    /// oldest of them (what the lag metric shows).
    static func pending(_ db: any SQLSession, webhook: String) throws -> [(space: String, oldest: Int64)] {
        try db.query("""
            SELECT name, oldest FROM (
              SELECT s.name AS name,
                     (SELECT o.committed_at FROM webhook_outbox o
                       WHERE o.space_id = s.space_id
                         AND o.id > coalesce((SELECT c.delivered_id FROM webhook_cursors c WHERE c.webhook = ? AND c.space_id = s.space_id),
                                             (SELECT w.start_id FROM webhooks w WHERE w.webhook = ?))
                       ORDER BY o.id LIMIT 1) AS oldest
                FROM spaces s) t
             WHERE oldest IS NOT NULL
            """, [.text(webhook), .text(webhook)]) { ($0.text(0), $0.int64(1)) }
    }

    /// The most batches one claim cuts, and the most changes it reads the sizes of: a claim
    /// runs on SQLite's writer, between group commits, so its time is bounded.
    static let maxBatchesPerClaim = 32
    static let maxChangesPerClaim = 50_000

    /// Takes `space` for `webhook` on behalf of `owner` at `now`, and returns its run: the
    /// batches already claimed and not yet delivered, followed by everything the space
    /// committed after them cut into consecutive batches (each at most `bounds.changes` rows
    /// and `bounds.bytes` bytes of them, never fewer than one, all of one epoch; at most
    /// `maxBatchesPerClaim` batches in all, and `maxChangesPerClaim` rows read), each new one
    /// recorded with its delivery id, so every delivery of a batch sends the same rows under
    /// the same id. No row's data is read: `load` reads a batch's rows when it is sent. One
    /// transaction; the lease it takes lasts `bounds.leaseMs`.
    static func claim(_ db: any SQLSession, webhook: String, space: String, owner: String, now: Int64, bounds: Bounds) throws -> Claim {
        try db.transaction(.process) {
            guard let spaceID = try db.queryOne("SELECT space_id FROM spaces WHERE name = ?", [.text(space)], { $0.int64(0) }) else { return .idle }
            let key: [SQLValue] = [.text(webhook), .integer(spaceID)]
            let cursor: Cursor
            switch try takeLease(db, key, owner: owner, now: now, leaseMs: bounds.leaseMs) {
            case .taken(let c): cursor = c
            case .notTaken(let claim): return claim
            }
            var (batches, delivered, failures) = try claimedBefore(db, key, cursor)
            if batches.count < maxBatchesPerClaim {
                // What the space committed after the claimed batches, cut into batches by
                // the sizes (no row's data is read).
                let start = batches.last?.last ?? delivered
                let sizes = try rowSizes(db, spaceID: spaceID, after: start)
                if batches.isEmpty && !sizes.isEmpty {
                    // A new run: nothing of it failed yet.
                    failures = 0
                    try db.run("UPDATE webhook_cursors SET delivered_id = ?, attempts = 0, last_error = NULL WHERE webhook = ? AND space_id = ?",
                               [.integer(delivered)] + key)
                }
                batches += try cut(db, key, sizes, after: start, room: maxBatchesPerClaim - batches.count, bounds: bounds)
            }
            guard !batches.isEmpty else {
                try db.run("UPDATE webhook_cursors SET lease_owner = NULL, lease_until = 0 WHERE webhook = ? AND space_id = ?", key)
                return .idle
            }
            return .run(Run(webhook: webhook, spaceID: spaceID, space: space, batches: batches, failures: failures))
        }
    }

    /// A webhook's cursor in a space, as a claim reads it once it holds the lease.
    private struct Cursor {
        var delivered: Int64
        var failures: Int
    }

    private enum Lease {
        case taken(Cursor)
        /// Another server holds the lease, a retry is pending, or the webhook is forgotten.
        case notTaken(Claim)
    }

    /// Takes the lease of the space's cursor (`key`: webhook and space id) for `owner` at
    /// `now`, creating the cursor when the webhook has none there yet: when the lease is
    /// free, expired or ours, and no retry is pending.
    private static func takeLease(_ db: any SQLSession, _ key: [SQLValue], owner: String, now: Int64, leaseMs: Int64) throws -> Lease {
        // A webhook forgotten by another server has no row: nothing to deliver for it
        // until this server registers it again.
        try db.run("""
            INSERT INTO webhook_cursors(webhook, space_id, delivered_id) SELECT webhook, ?, start_id FROM webhooks WHERE webhook = ?
            ON CONFLICT (webhook, space_id) DO NOTHING
            """, [key[1], key[0]])
        let taken = try db.run("""
            UPDATE webhook_cursors SET lease_owner = ?, lease_until = ?
             WHERE webhook = ? AND space_id = ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_until <= ?) AND next_attempt_at <= ?
            """, [.text(owner), .integer(now + leaseMs)] + key + [.text(owner), .integer(now), .integer(now)])
        guard let cursor = try db.queryOne("""
            SELECT delivered_id, attempts, next_attempt_at, lease_owner, lease_until
              FROM webhook_cursors WHERE webhook = ? AND space_id = ?
            """, key, { row in
                (delivered: row.int64(0), failures: row.int(1), nextAttempt: row.int64(2), leaseOwner: row.optionalText(3), leaseUntil: row.int64(4))
            }) else { return .notTaken(.idle) }
        guard taken == 1 else {
            let leased = cursor.leaseOwner != nil && cursor.leaseOwner != owner ? cursor.leaseUntil : 0
            return .notTaken(.notBefore(max(leased, cursor.nextAttempt, now + 1)))
        }
        return .taken(Cursor(delivered: cursor.delivered, failures: cursor.failures))
    }

    /// The batches claimed before and not yet delivered, after `cursor` (at most
    /// `maxBatchesPerClaim`), with the cursor as it is once batches whose rows are gone
    /// (pruned while this webhook was forgotten) are passed.
    private static func claimedBefore(_ db: any SQLSession, _ key: [SQLValue], _ cursor: Cursor) throws
        -> (batches: [Slot], delivered: Int64, failures: Int) {
        var (delivered, failures) = (cursor.delivered, cursor.failures)
        while true {
            let claimed = try db.query("""
                SELECT last_id, delivery_id FROM webhook_batches WHERE webhook = ? AND space_id = ? AND last_id > ? ORDER BY last_id LIMIT ?
                """, key + [.integer(delivered), .integer(Int64(maxBatchesPerClaim))]) { ($0.int64(0), $0.text(1)) }
            guard let first = claimed.first else { return ([], delivered, failures) }
            let rows = try db.query("SELECT 1 FROM webhook_outbox WHERE space_id = ? AND id > ? AND id <= ? LIMIT 1",
                                    [key[1], .integer(delivered), .integer(first.0)]) { $0.int64(0) }
            guard rows.isEmpty else {
                var after = delivered
                let batches = claimed.map { (last, id) in
                    defer { after = last }
                    return Slot(after: after, last: last, deliveryID: id)
                }
                return (batches, delivered, failures)
            }
            // The rows are gone: nothing is left to send of that batch.
            try db.run("""
                UPDATE webhook_cursors SET delivered_id = ?, attempts = 0, next_attempt_at = 0, last_error = NULL WHERE webhook = ? AND space_id = ?
                """, [.integer(first.0)] + key)
            try db.run("DELETE FROM webhook_batches WHERE webhook = ? AND space_id = ? AND last_id <= ?", key + [.integer(first.0)])
            delivered = first.0
            failures = 0
        }
    }

    /// The id, epoch and size of each row the space committed after `after` (at most
    /// `maxChangesPerClaim`), in commit order, measured in SQL: no row's data is read.
    private static func rowSizes(_ db: any SQLSession, spaceID: Int64, after: Int64) throws -> [(id: Int64, epoch: String, size: Int64)] {
        try db.query("""
            SELECT id, epoch, length(collection) + length(record_id) + coalesce(length(data), 0) + length(updated_by)
                              + coalesce(length(lineage), 0) + coalesce(length(same_as), 0) + coalesce(length(subject), 0)
                              + coalesce(length(resolved) + 12, 0) + length(epoch) + 172
              FROM webhook_outbox WHERE space_id = ? AND id > ? ORDER BY id LIMIT ?
            """, [.integer(spaceID), .integer(after), .integer(Int64(maxChangesPerClaim))]) { ($0.int64(0), $0.text(1), $0.int64(2)) }
    }

    /// Cuts the rows of `sizes` (committed after `start`) into at most `room` consecutive
    /// batches by the bounds, and records each in the space's cursor (`key`: webhook and
    /// space id) with a delivery id of its own.
    private static func cut(_ db: any SQLSession, _ key: [SQLValue], _ sizes: [(id: Int64, epoch: String, size: Int64)], after start: Int64,
                            room: Int, bounds: Bounds) throws -> [Slot] {
        var cut: [Slot] = []
        var (after, count, bytes, epoch) = (start, 0, Int64(0), sizes.first?.1 ?? "")
        var last: Int64? = nil
        func close() {
            guard let end = last else { return }
            cut.append(Slot(after: after, last: end, deliveryID: Hex.encode(SecureRandom.bytes(16))))
            (after, count, bytes, last) = (end, 0, 0, nil)
        }
        for (id, rowEpoch, size) in sizes {
            if last != nil && (rowEpoch != epoch || count >= bounds.changes || bytes + size > Int64(bounds.bytes)) {
                close()
                if cut.count == room { break }
            }
            (epoch, count, bytes, last) = (rowEpoch, count + 1, bytes + size, id)
        }
        if cut.count < room { close() }
        for batch in cut {
            try db.run("INSERT INTO webhook_batches(webhook, space_id, last_id, delivery_id) VALUES (?, ?, ?, ?)",
                       key + [.integer(batch.last), .text(batch.deliveryID)])
        }
        return cut
    }

    /// The rows of the `index`th batch of `run`, to send; nil when they are gone (pruned
    /// while the webhook was forgotten: the next claim moves past it). A read: on SQLite it
    /// runs on a reader, beside the writer's commits.
    static func load(_ db: any SQLSession, _ run: Run, _ index: Int) throws -> Batch? {
        let slot = run.batches[index]
        let changes = try db.query("SELECT \(OutboxRow.selectColumns) FROM webhook_outbox WHERE space_id = ? AND id > ? AND id <= ? ORDER BY id",
                                   [.integer(run.spaceID), .integer(slot.after), .integer(slot.last)]) { OutboxRow.change($0) }
        guard !changes.isEmpty else { return nil }
        return Batch(webhook: run.webhook, spaceID: run.spaceID, space: run.space, after: slot.after, last: slot.last,
                     deliveryID: slot.deliveryID, failures: index == 0 ? run.failures : 0, changes: changes)
    }

    /// Records that `batch` was delivered, and with it every batch of its run before it
    /// (the deliverer sends a run's batches one after the other and records the last one
    /// delivered with its next write): the cursor moves past it (the lease stays, for the
    /// next batch), and rows every webhook has had are pruned. False when `owner` no longer
    /// holds the lease (another server took it and sends the batch again), or the batch is
    /// no longer claimed.
    @discardableResult
    static func delivered(_ db: any SQLSession, _ batch: Batch, owner: String, now: Int64, leaseMs: Int64) throws -> Bool {
        try db.transaction(.process) {
            guard try advance(db, batch, to: batch.last, owner: owner, now: now, leaseMs: leaseMs) else { return false }
            try prune(db, spaceID: batch.spaceID)
            return true
        }
    }

    /// Records a failed delivery of `batch` (`error` says why; `body` is what was sent),
    /// after recording the batches of its run before it as delivered: the batch is due
    /// again after `retryDelay`, or, at its `attempts`th failure, becomes a dead letter and
    /// the cursor moves past it. `random` (in 0..<1) draws the jitter.
    static func failed(_ db: any SQLSession, _ batch: Batch, webhookName: String, body: [UInt8], error: String, owner: String, now: Int64,
                       settings: WebhookSettings, leaseMs: Int64, random: Double) throws -> Failure {
        try db.transaction(.process) {
            let failures = batch.failures + 1
            let error = String(error.prefix(500))
            // The batches before it in its run were delivered.
            guard try advance(db, batch, to: batch.after, owner: owner, now: now, leaseMs: leaseMs) else { return .leaseLost }
            guard failures >= settings.attempts else {
                let at = now + retryDelay(failures: failures, firstMs: settings.retryDelayMs, capMs: WebhookSettings.maxRetryDelayMs, random: random)
                let updated = try db.run("""
                    UPDATE webhook_cursors SET attempts = ?, next_attempt_at = ?, last_error = ?, lease_owner = NULL, lease_until = 0
                     WHERE webhook = ? AND space_id = ? AND lease_owner = ? AND delivered_id = ?
                    """, [.integer(Int64(failures)), .integer(at), .text(error), .text(batch.webhook), .integer(batch.spaceID),
                          .text(owner), .integer(batch.after)])
                try prune(db, spaceID: batch.spaceID)
                return updated == 1 ? .retry(at: at) : .leaseLost
            }
            guard try advance(db, batch, to: batch.last, owner: owner, now: now, leaseMs: leaseMs) else { return .leaseLost }
            try db.run("""
                INSERT INTO webhook_dead_letters(webhook, name, space, epoch, first_seq, last_seq, changes, delivery_id, body, attempts, last_error, failed_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [.text(batch.webhook), .text(webhookName), .text(batch.space), .text(batch.changes[0].epoch),
                      .integer(batch.changes.map(\.seq).min()!), .integer(batch.changes.map(\.seq).max()!), .integer(Int64(batch.changes.count)),
                      .text(batch.deliveryID), .bytes(body), .integer(Int64(failures)), .text(error), .integer(now)])
            try prune(db, spaceID: batch.spaceID)
            return .deadLettered
        }
    }

    /// Moves the cursor to `to` (`batch.after`: past the batches of its run before it;
    /// `batch.last`: past it too) while `owner` holds the lease and `batch` is claimed,
    /// renewing the lease, and forgets the claimed batches it passed. True also when the
    /// cursor is at `to` already and `batch` still claimed (`to` is `batch.after`).
    private static func advance(_ db: any SQLSession, _ batch: Batch, to: Int64, owner: String, now: Int64, leaseMs: Int64) throws -> Bool {
        let key: [SQLValue] = [.text(batch.webhook), .integer(batch.spaceID)]
        let moved = try db.run("""
            UPDATE webhook_cursors SET delivered_id = ?, attempts = 0, next_attempt_at = 0, last_error = NULL, lease_until = ?
             WHERE webhook = ? AND space_id = ? AND lease_owner = ? AND delivered_id < ? AND delivered_id <= ?
               AND EXISTS (SELECT 1 FROM webhook_batches b WHERE b.webhook = webhook_cursors.webhook AND b.space_id = webhook_cursors.space_id
                                                          AND b.last_id = ? AND b.delivery_id = ?)
            """, [.integer(to), .integer(now + leaseMs)] + key + [.text(owner), .integer(to), .integer(batch.after), .integer(batch.last), .text(batch.deliveryID)])
        if moved == 1 {
            try db.run("DELETE FROM webhook_batches WHERE webhook = ? AND space_id = ? AND last_id <= ?", key + [.integer(to)])
            return true
        }
        return try db.run("""
            UPDATE webhook_cursors SET lease_until = ?
             WHERE webhook = ? AND space_id = ? AND lease_owner = ? AND delivered_id = ?
               AND EXISTS (SELECT 1 FROM webhook_batches b WHERE b.webhook = webhook_cursors.webhook AND b.space_id = webhook_cursors.space_id
                                                          AND b.last_id = ? AND b.delivery_id = ?)
            """, [.integer(now + leaseMs)] + key + [.text(owner), .integer(to), .integer(batch.last), .text(batch.deliveryID)]) == 1
    }

    /// Deletes the space's rows that every webhook has had (delivered or dead-lettered), or
    /// that came before its start; all of them when no webhook is left.
    static func prune(_ db: any SQLSession, spaceID: Int64) throws {
        let upTo = try db.queryOne("""
            SELECT min(coalesce(c.delivered_id, w.start_id)) FROM webhooks w
              LEFT JOIN webhook_cursors c ON c.webhook = w.webhook AND c.space_id = ?
            """, [.integer(spaceID)]) { $0.optionalInt64(0) } ?? nil
        while try db.run("DELETE FROM webhook_outbox WHERE id IN (SELECT id FROM webhook_outbox WHERE space_id = ? AND id <= ? ORDER BY id LIMIT ?)",
                         [.integer(spaceID), .integer(upTo ?? Int64.max), .integer(Int64(pruneSlice))]) == pruneSlice {}
    }

    /// The wait before the delivery after the `failures`th failure: `firstMs` doubled for
    /// each failure before it, at most `capMs`, less a random part of up to half
    /// (`random` in 0..<1), so that receivers coming back are not hit by every server at once.
    static func retryDelay(failures: Int, firstMs: Int, capMs: Int, random: Double) -> Int64 {
        let doubled = Double(firstMs) * pow(2, Double(min(max(failures - 1, 0), 40)))
        let full = min(doubled, Double(capMs))
        return max(1, Int64(full * (1 - 0.5 * min(max(random, 0), 1))))
    }

    // MARK: The body

    /// The JSON body of a batch: `{"space", "epoch", "changes": [{"seq", "collection",
    /// "id", "version", "deleted", "data", "updatedAt", "updatedBy", "clientTime",
    /// "lineage", "sameAs", "resolved", "subject"}]}`, each change a record as a pull page has it
    /// (docs/protocol.md section 5) with its `seq` first and the authenticated subject of the
    /// push that wrote it last (absent for a change written before subjects were kept), in
    /// commit order. The same batch always encodes to the same bytes.
    static func body(_ batch: Batch) throws -> [UInt8] {
        guard let epoch = Epoch(batch.changes.first?.epoch ?? "") else { throw StoreError("an outbox row of \(batch.space) names no valid epoch") }
        var out: [UInt8] = []
        out.append(contentsOf: #"{"space":"#.utf8)
        JSONWriter.appendString(batch.space, to: &out)
        out.append(contentsOf: #","epoch":"#.utf8)
        JSONWriter.appendString(epoch.rawValue, to: &out)
        out.append(contentsOf: #","changes":["#.utf8)
        var record: [UInt8] = []
        for (index, change) in batch.changes.sorted(by: { $0.seq < $1.seq }).enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"seq":"#.utf8)
            JSONWriter.appendInt(change.seq, to: &out)
            out.append(UInt8(ascii: ","))
            record.removeAll(keepingCapacity: true)
            func encode(_ data: UnsafeRawBufferPointer?) {
                RecordJSON.append(to: &record, collection: change.collection, id: change.recordID, epoch: epoch, seq: change.seq,
                                  deleted: change.deleted, data: data, updatedAt: change.updatedAt, updatedBy: change.updatedBy,
                                  clientTime: change.clientTime, lineage: change.lineage, sameAs: change.sameAs, resolved: change.resolved,
                                  subject: change.subject)
            }
            if let data = change.data, !change.deleted { data.withUnsafeBytes { encode($0) } } else { encode(nil) }
            // The record's own members after its opening brace.
            out.append(contentsOf: record.dropFirst())
        }
        out.append(contentsOf: "]}".utf8)
        return out
    }

    // MARK: Dead letters

    /// A batch that ran out of attempts, as the admin list shows it.
    struct DeadLetter: Sendable, Equatable {
        var id: Int64
        var webhook: String
        var name: String
        var space: String
        var epoch: String
        var firstSeq: Int64
        var lastSeq: Int64
        var changes: Int64
        var deliveryID: String
        var bytes: Int64
        var attempts: Int64
        var lastError: String
        var failedAt: Int64
    }

    private static let deadLetterColumns = "id, webhook, name, space, epoch, first_seq, last_seq, changes, delivery_id, length(body), attempts, last_error, failed_at"

    private static func deadLetter(_ row: any SQLRow) -> DeadLetter {
        DeadLetter(id: row.int64(0), webhook: row.text(1), name: row.text(2), space: row.text(3), epoch: row.text(4), firstSeq: row.int64(5),
                   lastSeq: row.int64(6), changes: row.int64(7), deliveryID: row.text(8), bytes: row.int64(9), attempts: row.int64(10),
                   lastError: row.text(11), failedAt: row.int64(12))
    }

    /// At most `limit` dead letters with an id after `after`, oldest first.
    static func deadLetters(_ db: any SQLSession, after: Int64, limit: Int) throws -> [DeadLetter] {
        try db.query("SELECT \(deadLetterColumns) FROM webhook_dead_letters WHERE id > ? ORDER BY id LIMIT ?",
                     [.integer(after), .integer(Int64(limit))], deadLetter)
    }

    /// One dead letter with the body it was sent with.
    static func deadLetter(_ db: any SQLSession, id: Int64) throws -> (DeadLetter, body: [UInt8])? {
        try db.queryOne("SELECT \(deadLetterColumns), body FROM webhook_dead_letters WHERE id = ?", [.integer(id)]) { (deadLetter($0), $0.bytes(13)) }
    }

    /// Removes a dead letter once its replay was delivered.
    static func replayed(_ db: any SQLSession, id: Int64) throws {
        try db.run("DELETE FROM webhook_dead_letters WHERE id = ?", [.integer(id)])
    }

    /// Records a replay that failed too.
    static func replayFailed(_ db: any SQLSession, id: Int64, error: String, now: Int64) throws {
        try db.run("UPDATE webhook_dead_letters SET attempts = attempts + 1, last_error = ?, failed_at = ? WHERE id = ?",
                   [.text(String(error.prefix(500))), .integer(now), .integer(id)])
    }
}
