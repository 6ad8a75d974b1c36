import Foundation
import Testing
import OutpostCore
import OutpostPostgres
import OutpostSQLite
import OutpostTestSupport
@testable import OutpostServer

/// The webhook outbox's rules (`WebhookOutbox`, written once over `SQLSession`) on each
/// store, on a real SQLite file and a real PostgreSQL database, with the clock given to each
/// call: rows written by pushes in their own transaction, batches bounded in changes, bytes
/// and epoch, leases, retries, dead letters, pruning, forgetting; and the schema upgrades
/// that brought the tables.
@Suite struct WebhookOutboxTests {
    static let first = WebhookTarget("http://a.example/hook")!
    static let second = WebhookTarget("https://user:pw@b.example:8443/h?token=x")!
    static let settings: WebhookSettings = {
        var s = WebhookSettings()
        s.attempts = 3
        s.retryDelayMs = 1000
        return s
    }()

    /// A thread with a session of its own on the fixture's database, as the server's
    /// webhook thread has.
    static func session(_ f: StoreFixture) throws -> WorkerThread<SQLSessionJob> {
        switch f.kind {
        case .sqlite:
            let path = f.path
            return try SQLSessionJob.thread(name: "test-webhooks") { try SQLiteSession(path: path, durableSynchronous: .full) }
        case .postgres:
            let url = f.url!
            return try SQLSessionJob.thread(name: "test-webhooks") { PostgresSession(db: try PostgresSyncStore.open(url)) }
        }
    }

    static func withOutbox(_ kind: StoreKind, _ body: (StoreFixture, WorkerThread<SQLSessionJob>) async throws -> Void) async throws {
        try await withStore(kind) { f in
            f.outbox = true
            try await f.reopen()
            let db = try session(f)
            do {
                try await body(f, db)
            } catch {
                try? await blocking { db.stop() }
                throw error
            }
            try await blocking { db.stop() }
        }
    }

    static func count(_ db: WorkerThread<SQLSessionJob>, space: String? = nil) async throws -> Int64 {
        try await db.run("test") { db in
            if let space {
                return try db.queryOne("SELECT count(*) FROM webhook_outbox o JOIN spaces s ON s.space_id = o.space_id WHERE s.name = ?", [.text(space)]) { $0.int64(0) } ?? 0
            }
            return try db.queryOne("SELECT count(*) FROM webhook_outbox", []) { $0.int64(0) } ?? 0
        }
    }

    static func claim(_ db: WorkerThread<SQLSessionJob>, _ target: WebhookTarget, _ space: String, owner: String, now: Int64,
                      changes: Int = 2, bytes: Int = 1 << 20) async throws -> WebhookOutbox.Claim {
        let bounds = WebhookOutbox.Bounds(changes: changes, bytes: bytes, leaseMs: 10_000)
        return try await db.run("test") { db in try WebhookOutbox.claim(db, webhook: target.key, space: space, owner: owner, now: now, bounds: bounds) }
    }

    static func run(_ claim: WebhookOutbox.Claim, sourceLocation: SourceLocation = #_sourceLocation) throws -> WebhookOutbox.Run {
        guard case .run(let r) = claim else {
            Issue.record("expected a run of batches, got \(claim)", sourceLocation: sourceLocation)
            throw StoreError("no run")
        }
        return r
    }

    /// The `index`th batch of the claim's run, its rows read as the deliverer reads them.
    static func batch(_ db: WorkerThread<SQLSessionJob>, _ claim: WebhookOutbox.Claim, _ index: Int = 0,
                      sourceLocation: SourceLocation = #_sourceLocation) async throws -> WebhookOutbox.Batch {
        let run = try Self.run(claim, sourceLocation: sourceLocation)
        guard index < run.batches.count else {
            Issue.record("the run has \(run.batches.count) batches, not \(index + 1)", sourceLocation: sourceLocation)
            throw StoreError("no batch")
        }
        guard let batch = try await db.run("test", { db in try WebhookOutbox.load(db, run, index) }) else {
            Issue.record("the batch's rows are gone", sourceLocation: sourceLocation)
            throw StoreError("no rows")
        }
        return batch
    }

    static func delivered(_ db: WorkerThread<SQLSessionJob>, _ batch: WebhookOutbox.Batch, owner: String, now: Int64) async throws -> Bool {
        try await db.run("test") { db in try WebhookOutbox.delivered(db, batch, owner: owner, now: now, leaseMs: 10_000) }
    }

    static func failed(_ db: WorkerThread<SQLSessionJob>, _ batch: WebhookOutbox.Batch, owner: String, now: Int64, random: Double = 0.5) async throws -> WebhookOutbox.Failure {
        let body = try WebhookOutbox.body(batch)
        return try await db.run("test") { db in
            try WebhookOutbox.failed(db, batch, webhookName: first.name, body: body, error: "the receiver answered HTTP 500", owner: owner, now: now,
                                     settings: settings, leaseMs: 10_000, random: random)
        }
    }

    @Test(arguments: StoreKind.allCases) func batchesGoOutInOrderUnderALeaseAndRetriesEndInADeadLetter(kind: StoreKind) async throws {
        try await Self.withOutbox(kind) { f, db in
            try await db.run("test") { try WebhookOutbox.register($0, [Self.first, Self.second], now: 1_000) }
            // Pushes write one row per record they write, in their own transaction; a
            // conflict writes none.
            _ = try await f.store.push(space: "s", clientId: "p", items: [prepared("c1", id: "a", base: nil), prepared("c2", id: "b", base: nil),
                                                                          prepared("c3", id: "c", base: nil)], now: 10)
            let e = f.store.epoch
            let r = try await f.store.push(space: "s", clientId: "p", items: [prepared("c4", id: "a", base: Version(epoch: e, seq: 1)),
                                                                              prepared("c5", id: "b", op: .delete, base: Version(epoch: e, seq: 2)),
                                                                              prepared("c6", id: "c", base: Version(epoch: e, seq: 1))], now: 20)
            #expect(r.map(\.status) == [.applied, .applied, .conflict])
            _ = try await f.store.push(space: "t", clientId: "p", items: [prepared("c7", id: "z", base: nil)], now: 30)
            #expect(try await Self.count(db) == 6)
            #expect(try await Self.count(db, space: "s") == 5)

            // A takes the space: the first two rows. B may not while A's lease holds; A
            // asking again gets the same batch under the same delivery id.
            let b1 = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "A", now: 2_000))
            #expect(b1.changes.map(\.seq) == [1, 2] && b1.failures == 0 && b1.deliveryID.count == 32)
            #expect(b1.changes[0].committedAt == 10 && b1.changes[0].updatedBy == "p" && b1.changes[0].data == Array(#"{"t":"x"}"#.utf8))
            #expect(try await Self.claim(db, Self.first, "s", owner: "B", now: 2_001) == .notBefore(12_000))
            #expect(try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "A", now: 2_002)) == b1)

            // A failure: due again after the first delay less its jitter; nobody before.
            guard case .retry(let at) = try await Self.failed(db, b1, owner: "A", now: 3_000, random: 0.5) else { Issue.record("no retry"); return }
            #expect(at == 3_750)
            #expect(try await Self.claim(db, Self.first, "s", owner: "A", now: 3_749) == .notBefore(3_750))
            // Then anyone: B gets the same batch, its failure counted.
            let b2 = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "B", now: 3_750))
            #expect(b2.deliveryID == b1.deliveryID && b2.changes == b1.changes && b2.failures == 1)
            // A's late news of a delivery does not move B's cursor.
            #expect(try await Self.delivered(db, b1, owner: "A", now: 3_800) == false)
            guard case .retry(let at2) = try await Self.failed(db, b2, owner: "B", now: 4_000, random: 0) else { Issue.record("no retry"); return }
            #expect(at2 == 6_000)
            let b3 = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "B", now: at2))
            #expect(b3.failures == 2)
            // The third failure makes it a dead letter, and the next batch is due at once.
            #expect(try await Self.failed(db, b3, owner: "B", now: 6_100) == .deadLettered)
            let letters = try await db.run("test") { try WebhookOutbox.deadLetters($0, after: 0, limit: 10) }
            #expect(letters.count == 1)
            let letter = try #require(letters.first)
            #expect(letter.space == "s" && letter.firstSeq == 1 && letter.lastSeq == 2 && letter.changes == 2 && letter.attempts == 3)
            #expect(letter.deliveryID == b1.deliveryID && letter.name == "http://a.example/hook" && letter.failedAt == 6_100)
            let kept = try #require(try await db.run("test") { try WebhookOutbox.deadLetter($0, id: letter.id) })
            #expect(kept.body == (try WebhookOutbox.body(b1)) && letter.bytes == Int64(kept.body.count))

            let b4 = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "B", now: 6_200))
            #expect(b4.changes.map(\.seq) == [3, 4] && b4.deliveryID != b1.deliveryID && b4.failures == 0)
            #expect(b4.changes.map(\.recordID) == ["c", "a"] && !b4.changes[1].deleted)
            #expect(try await Self.delivered(db, b4, owner: "B", now: 6_300))
            // The second webhook has had nothing yet, so nothing is pruned.
            #expect(try await Self.count(db, space: "s") == 5)
            // The rest of the run b1 was cut in: the last row, under its own delivery id.
            let b5 = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "B", now: 6_400, changes: 10, bytes: 1))
            #expect(b5.changes.map(\.seq) == [5] && b5.changes[0].deleted && b5.changes[0].data == nil && b5.deliveryID != b4.deliveryID)
            #expect(try await Self.delivered(db, b5, owner: "B", now: 6_500))
            #expect(try await Self.claim(db, Self.first, "s", owner: "B", now: 6_600) == .idle)

            // The second webhook gets the whole space in one batch; then every webhook has
            // had the space's rows and they are pruned. The other space's row stays.
            #expect(try await db.run("test") { try WebhookOutbox.pending($0, webhook: Self.second.key) }.map(\.space).sorted() == ["s", "t"])
            let w2 = try await Self.batch(db, try await Self.claim(db, Self.second, "s", owner: "A", now: 7_000, changes: 10))
            #expect(w2.changes.map(\.seq) == [1, 2, 3, 4, 5])
            #expect(try await Self.delivered(db, w2, owner: "A", now: 7_100))
            #expect(try await Self.count(db, space: "s") == 0)
            #expect(try await Self.count(db, space: "t") == 1)
            let pending = try await db.run("test") { try WebhookOutbox.pending($0, webhook: Self.first.key) }
            #expect(pending.map(\.space) == ["t"] && pending.first?.oldest == 30)

            // A stopping server gives its leases up.
            _ = try await Self.batch(db, try await Self.claim(db, Self.first, "t", owner: "A", now: 8_000))
            #expect(try await Self.claim(db, Self.first, "t", owner: "B", now: 8_001) == .notBefore(18_000))
            try await db.run("test") { try WebhookOutbox.release($0, owner: "A") }
            let t = try await Self.batch(db, try await Self.claim(db, Self.first, "t", owner: "B", now: 8_002))
            // A lapsed lease can be taken, and its old holder's news is then refused.
            let taken = try await Self.batch(db, try await Self.claim(db, Self.first, "t", owner: "C", now: 18_003))
            #expect(taken.deliveryID == t.deliveryID)
            #expect(try await Self.delivered(db, t, owner: "B", now: 18_004) == false)
            #expect(try await Self.delivered(db, taken, owner: "C", now: 18_005))
            // The second webhook is named no more: forgotten, and the rows only it needed go.
            #expect(try await Self.count(db, space: "t") == 1)
            try await db.run("test") { try WebhookOutbox.register($0, [Self.first], now: 20_000) }
            #expect(try await db.run("test") { try WebhookOutbox.forget($0, seenBefore: 10_000) } == 1)
            #expect(try await Self.count(db) == 0)
            #expect(try await db.run("test") { try WebhookOutbox.pending($0, webhook: Self.second.key) }.isEmpty)
        }
    }

    /// One claim takes everything the space committed after the cursor, as a run of batches
    /// cut by the bounds, each recorded with its delivery id; a later claim returns them
    /// as they were, and cuts what was committed since after them. Recording a later batch delivered records the ones before it (the
    /// deliverer records a run's last delivered batch with its next write); so does a
    /// failure of a later batch, whose retries send it as it was; a dead letter lets the
    /// next batch go. A claim cuts at most `maxBatchesPerClaim` batches.
    @Test(arguments: StoreKind.allCases) func oneClaimTakesEverythingPendingAsARunOfBatches(kind: StoreKind) async throws {
        try await Self.withOutbox(kind) { f, db in
            try await db.run("test") { try WebhookOutbox.register($0, [Self.first], now: 1_000) }
            // A commit of seven changes, then one of two.
            _ = try await f.store.push(space: "s", clientId: "p", items: (1...7).map { prepared("c\($0)", id: "r\($0)", base: nil) }, now: 10)
            _ = try await f.store.push(space: "s", clientId: "p", items: (8...9).map { prepared("c\($0)", id: "r\($0)", base: nil) }, now: 20)
            let claim = try await Self.claim(db, Self.first, "s", owner: "A", now: 2_000, changes: 2)
            let run = try Self.run(claim)
            #expect(run.batches.count == 5 && run.failures == 0)
            #expect(zip(run.batches, run.batches.dropFirst()).allSatisfy { $0.last == $1.after }, "\(run.batches)")
            #expect(Set(run.batches.map(\.deliveryID)).count == 5 && run.batches.allSatisfy { $0.deliveryID.count == 32 })
            var batches: [WebhookOutbox.Batch] = []
            for i in 0..<5 { batches.append(try await Self.batch(db, claim, i)) }
            #expect(batches.map { $0.changes.map(\.seq) } == [[1, 2], [3, 4], [5, 6], [7, 8], [9]])
            #expect(batches.map(\.failures) == [0, 0, 0, 0, 0])
            #expect(try await db.run("test") { try $0.queryOne("SELECT count(*) FROM webhook_batches", []) { $0.int64(0) } } == 5)
            // Asking again gives the same run, and cuts the commits made since into batches
            // after it.
            _ = try await f.store.push(space: "s", clientId: "p", items: [prepared("c10", id: "r10", base: nil)], now: 30)
            let longer = try Self.run(try await Self.claim(db, Self.first, "s", owner: "A", now: 2_001, changes: 2))
            #expect(Array(longer.batches.prefix(5)) == run.batches && longer.batches.count == 6 && longer.batches[5].after == run.batches[4].last)
            #expect(try await Self.claim(db, Self.first, "s", owner: "B", now: 2_002) == .notBefore(12_001))

            // The third batch delivered, recorded without the first two: all three are past.
            #expect(try await Self.delivered(db, batches[2], owner: "A", now: 2_100))
            #expect(try await Self.delivered(db, batches[1], owner: "A", now: 2_101) == false)
            let rest = try Self.run(try await Self.claim(db, Self.first, "s", owner: "A", now: 2_200, changes: 2))
            #expect(rest.batches == Array(longer.batches.suffix(3)))
            #expect(try await Self.count(db, space: "s") == 4)

            // The fifth fails before the fourth was recorded: the fourth is recorded with the
            // failure, and the fifth is sent again as it was.
            guard case .retry(let at) = try await Self.failed(db, batches[4], owner: "A", now: 3_000, random: 0) else { Issue.record("no retry"); return }
            #expect(try await Self.count(db, space: "s") == 2)
            let again = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "B", now: at, changes: 2))
            #expect(again.deliveryID == batches[4].deliveryID && again.changes == batches[4].changes && again.failures == 1)
            #expect(try WebhookOutbox.body(again) == WebhookOutbox.body(batches[4]))
            #expect(try Self.run(try await Self.claim(db, Self.first, "s", owner: "B", now: at + 1, changes: 2)).batches.count == 2)
            // Out of attempts, it is a dead letter, and the next batch goes.
            guard case .retry(let at2) = try await Self.failed(db, again, owner: "B", now: at + 2, random: 0) else { Issue.record("no retry"); return }
            let third = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "B", now: at2, changes: 2))
            #expect(try await Self.failed(db, third, owner: "B", now: at2 + 1) == .deadLettered)
            let next = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "B", now: at2 + 2, changes: 2))
            #expect(next.changes.map(\.seq) == [10] && next.failures == 0 && next.deliveryID == longer.batches[5].deliveryID)
            #expect(try await Self.delivered(db, next, owner: "B", now: at2 + 3))
            #expect(try await Self.claim(db, Self.first, "s", owner: "B", now: at2 + 4) == .idle)
            #expect(try await db.run("test") { try $0.queryOne("SELECT count(*) FROM webhook_batches", []) { $0.int64(0) } } == 0)

            // The byte bound: a batch always holds one change, however small the bound.
            _ = try await f.store.push(space: "b", clientId: "p", items: (1...3).map { prepared("b\($0)", id: "r\($0)", base: nil) }, now: 40)
            let small = try Self.run(try await Self.claim(db, Self.first, "b", owner: "A", now: 30_000, changes: 10, bytes: 1))
            #expect(small.batches.count == 3)
            // At most maxBatchesPerClaim batches in one claim; the rest in the next run.
            let many = WebhookOutbox.maxBatchesPerClaim + 3
            _ = try await f.store.push(space: "m", clientId: "p", items: (1...many).map { prepared("m\($0)", id: "r\($0)", base: nil) }, now: 50)
            let capped = try await Self.claim(db, Self.first, "m", owner: "A", now: 30_001, changes: 1)
            #expect(try Self.run(capped).batches.count == WebhookOutbox.maxBatchesPerClaim)
            let lastOfCapped = try await Self.batch(db, capped, WebhookOutbox.maxBatchesPerClaim - 1)
            #expect(lastOfCapped.changes.map(\.seq) == [Int64(WebhookOutbox.maxBatchesPerClaim)])
            #expect(try await Self.delivered(db, lastOfCapped, owner: "A", now: 30_002))
            let after = try Self.run(try await Self.claim(db, Self.first, "m", owner: "A", now: 30_003, changes: 1))
            #expect(after.batches.count == 3 && after.batches.first?.after == lastOfCapped.last)
        }
    }

    /// A store from before runs of batches kept the batch in flight on the cursor: the
    /// migration that brings `webhook_batches` makes it the first batch of the space's run,
    /// with its range, delivery id and failures, so it goes out as it went before; the rows
    /// after it are cut into the next batches.
    @Test(arguments: StoreKind.allCases) func theMigrationKeepsTheBatchInFlightAsTheFirstOfItsRun(kind: StoreKind) async throws {
        try await Self.withOutbox(kind) { f, db in
            try await db.run("test") { try WebhookOutbox.register($0, [Self.first], now: 1_000) }
            _ = try await f.store.push(space: "s", clientId: "p", items: (1...5).map { prepared("c\($0)", id: "r\($0)", base: nil) }, now: 10)
            let key = Self.first.key
            let inFlight = String(repeating: "ab", count: 16)
            // The state such a store was in: the rows after the cursor's first up to its
            // third in flight, failed twice.
            let ids = try await db.run("test") { db -> [Int64] in
                let ids = try db.query("SELECT id FROM webhook_outbox ORDER BY id", []) { $0.int64(0) }
                try db.run("""
                    INSERT INTO webhook_cursors(webhook, space_id, delivered_id, batch_last, delivery_id, attempts)
                    SELECT ?, space_id, ?, ?, ?, 2 FROM spaces WHERE name = 's'
                    """, [.text(key), .integer(ids[0]), .integer(ids[2]), .text(inFlight)])
                try db.execute("DROP TABLE webhook_batches")
                try db.run("DELETE FROM migrations WHERE name = 'webhook_batches'", [])
                return ids
            }
            try await f.reopen()
            let claim = try await Self.claim(db, Self.first, "s", owner: "A", now: 2_000, changes: 10)
            let run = try Self.run(claim)
            #expect(run.batches.map(\.deliveryID).first == inFlight && run.failures == 2 && run.batches.count == 2)
            #expect(run.batches.map(\.after) == [ids[0], ids[2]] && run.batches.map(\.last) == [ids[2], ids[4]])
            #expect(try await Self.batch(db, claim).changes.map(\.seq) == [2, 3])
            #expect(try await Self.batch(db, claim, 1).changes.map(\.seq) == [4, 5])
            #expect(try await db.run("test") { try $0.queryOne("SELECT count(*) FROM webhook_cursors WHERE batch_last IS NOT NULL", []) { $0.int64(0) } } == 0)
        }
    }

    /// A batch never spans two epochs; and a webhook registered later starts after the
    /// rows already written (commits before it was configured are not its).
    @Test(arguments: StoreKind.allCases) func aBatchHoldsOneEpochAndAWebhookStartsAtItsRegistration(kind: StoreKind) async throws {
        try await Self.withOutbox(kind) { f, db in
            try await db.run("test") { try WebhookOutbox.register($0, [Self.first], now: 1_000) }
            _ = try await f.store.push(space: "s", clientId: "p", items: [prepared("c1", id: "a", base: nil), prepared("c2", id: "b", base: nil)], now: 10)
            let old = f.store.epoch
            let new = try await f.rotateEpoch()
            _ = try await f.store.push(space: "s", clientId: "p", items: [prepared("c3", id: "n", base: nil)], now: 20)
            try await db.run("test") { try WebhookOutbox.register($0, [Self.second], now: 1_000) }
            let b1 = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "A", now: 2_000, changes: 10))
            #expect(b1.changes.map(\.epoch) == [old.rawValue, old.rawValue])
            let body = try JSONParser.parse(try WebhookOutbox.body(b1))
            #expect(body["epoch"]?.stringValue == old.rawValue && body["space"]?.stringValue == "s")
            #expect(body["changes"]?[0]?["version"]?.stringValue == "\(old.rawValue).1" && body["changes"]?[0]?["seq"]?.int64Value == 1)
            #expect(try await Self.delivered(db, b1, owner: "A", now: 2_100))
            let b2 = try await Self.batch(db, try await Self.claim(db, Self.first, "s", owner: "A", now: 2_200, changes: 10))
            #expect(b2.changes.map(\.epoch) == [new.rawValue] && b2.changes.map(\.seq) == [3])
            #expect(try await Self.claim(db, Self.second, "s", owner: "A", now: 2_300) == .idle)
        }
    }

    @Test func theRetryDelayDoublesUpToItsCapLessAtMostHalf() {
        #expect(WebhookOutbox.retryDelay(failures: 1, firstMs: 1000, capMs: 300_000, random: 0) == 1000)
        #expect(WebhookOutbox.retryDelay(failures: 2, firstMs: 1000, capMs: 300_000, random: 0) == 2000)
        #expect(WebhookOutbox.retryDelay(failures: 4, firstMs: 1000, capMs: 300_000, random: 0.5) == 6000)
        #expect(WebhookOutbox.retryDelay(failures: 9, firstMs: 1000, capMs: 300_000, random: 0) == 256_000)
        #expect(WebhookOutbox.retryDelay(failures: 10, firstMs: 1000, capMs: 300_000, random: 0) == 300_000)
        #expect(WebhookOutbox.retryDelay(failures: 100, firstMs: 1000, capMs: 300_000, random: 0.999_999) == 150_000)
        var seeded = SplitMix(seed: 42)
        for failures in 1...30 {
            let d = WebhookOutbox.retryDelay(failures: failures, firstMs: 20, capMs: 300_000, random: Double.random(in: 0..<1, using: &seeded))
            let full = min(20 * Int64(1 << min(failures - 1, 30)), 300_000)
            #expect(d >= full / 2 && d <= full, "failure \(failures): \(d) outside (\(full / 2), \(full)]")
        }
    }

    /// A schema-7 SQLite file of its release (before the webhook tables) opens with its
    /// records as they were, and its pushes write the outbox.
    @Test func aSchemaSevenSQLiteFileIsUpgradedAndKeepsItsRecords() async throws {
        try await withStore(.sqlite) { f in
            f.outbox = true
            try await f.replaceWithFixture("s7-m2")
            let e = f.store.epoch
            let check = try Connection(path: f.path)
            defer { check.close() }
            #expect(try check.scalarInt("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'webhook%'") == 5)
            let records = try await pageRecords(f.store)
            #expect(records.map(\.id) == ["a", "b", "c"] && records.map(\.version) == [Version(epoch: e, seq: 1), Version(epoch: e, seq: 3), Version(epoch: e, seq: 5)])
            _ = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c3", id: "d", base: nil)], now: 20)
            #expect(try check.scalarInt("SELECT seq FROM webhook_outbox") == 6)
        }
    }

    /// A PostgreSQL database at migration 8 (before the webhook tables) gets migration 9 at
    /// start, with its records as they were, and its pushes write the outbox.
    @Test func aPostgresDatabaseAtMigrationEightIsMigratedAndKeepsItsRecords() async throws {
        let url = try await PostgresCluster.database()
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        for version in 1...8 { try db.execute(PostgresSchema.migrations.list[version - 1].sql) }
        try db.run("INSERT INTO meta(key, value) VALUES ('epoch', 'OLDEPOCH')")
        try db.run("INSERT INTO spaces(name, head_seq) VALUES ('sp', 2)")
        try db.run("""
            INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time)
            SELECT space_id, 'todos', v.id, v.seq, false, '{"t":"x"}'::bytea, 10, 'p', NULL FROM spaces, (VALUES ('a', 1), ('b', 2)) AS v(id, seq)
             WHERE name = 'sp'
            """)
        #expect(try db.query("SELECT to_regclass('webhook_outbox') IS NULL").bool(0, 0))
        var configuration = PostgresSyncStore.Configuration(url: url)
        configuration.outbox = true
        let store = try PostgresSyncStore(configuration: configuration)
        #expect(try PostgresSchema.pending(db) == [])
        let records = try await pageRecords(store)
        #expect(records.map(\.id) == ["a", "b"] && records.map(\.version) == [Version("OLDEPOCH.1"), Version("OLDEPOCH.2")])
        let r = try await store.push(space: "sp", clientId: "d", items: [prepared("c3", id: "c", base: nil)], now: 20)
        #expect(r.map(\.version) == [Version("OLDEPOCH.3")])
        let rows = try db.query("SELECT seq, record_id, committed_at FROM webhook_outbox")
        #expect(rows.count == 1 && rows.int64(0, 0) == 3 && rows.text(0, 1) == "c" && rows.int64(0, 2) == 20)
        await store.close()
    }

    func pageRecords(_ store: any SyncStore) async throws -> [RecordState] {
        try decodePage(try await store.page(PageRequest(space: "sp", afterSeq: 0, limit: 100, maxBytes: 1 << 20, collections: nil)))
    }
}

/// A small seeded generator (SplitMix64) for the jitter's draws.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
