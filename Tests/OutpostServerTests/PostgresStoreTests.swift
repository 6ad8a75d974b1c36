import Foundation
import Synchronization
import Testing
import OutpostCore
import OutpostSyncRules
import OutpostCrypto
import OutpostPostgres
@testable import OutpostServer
import OutpostTestSupport

/// What only the PostgreSQL store has to prove: several instances on one database (here,
/// several `PostgresSyncStore`s in one process, each with its own connections, exactly as
/// separate processes would have), the visibility of late commits, cross-instance long
/// polls, migrations under the advisory lock, the epoch in the database, and the libpq
/// wrapper itself. The contract shared with SQLite is `SyncStoreContractTests`.
@Suite struct PostgresStoreTests {
    /// Parameters of every type, arrays with nulls, binary results, SQLSTATE errors and a
    /// notification round trip through `OutpostPostgres`.
    @Test func connectionRoundTripsValuesErrorsAndNotifications() async throws {
        let url = try await PostgresCluster.database()
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        let text = "héllo \"quoted\" \\ back, {brace}"
        let rows = try db.query("SELECT $1::bigint, $2::text, $3::bytea, $4::boolean, $5::bigint[], $6::text[], $7::bytea[], $8::text, 42::int4, (-7)::int2", [
            .int(-9_007_199_254_740_991), .text(text), .bytes([0, 1, 255]), .bool(true),
            .intArray([1, nil, -3]), .textArray(["a", nil, text]), .bytesArray([[9], nil, []]), .null,
        ])
        #expect(rows.count == 1)
        #expect(rows.int64(0, 0) == -9_007_199_254_740_991)
        #expect(rows.text(0, 1) == text)
        #expect(rows.bytes(0, 2) == [0, 1, 255])
        #expect(rows.bool(0, 3))
        #expect(rows.isNull(0, 7) && rows.optionalText(0, 7) == nil)
        #expect(rows.int64(0, 8) == 42 && rows.int64(0, 9) == -7)
        let arrays = try db.query("SELECT array_to_string($1::bigint[], ',', 'N'), array_to_string($2::text[], '|', 'N'), cardinality($3::bytea[]), cardinality($4::text[])",
                                  [.intArray([1, nil, -3]), .textArray(["a", nil, text]), .bytesArray([[9], nil, []]), .textArray([])])
        #expect(arrays.text(0, 0) == "1,N,-3")
        #expect(arrays.text(0, 1) == "a|N|" + text)
        #expect(arrays.int64(0, 2) == 3 && arrays.int64(0, 3) == 0)

        try db.execute("CREATE TABLE t(k text PRIMARY KEY)")
        #expect(try db.run("INSERT INTO t VALUES ($1), ($2)", [.text("x"), .text("y")]) == 2)
        let duplicate: PostgresError? = {
            do {
                try db.run("INSERT INTO t VALUES ($1)", [.text("x")])
                return nil
            } catch {
                return error as? PostgresError
            }
        }()
        #expect(duplicate?.sqlState == PostgresError.uniqueViolation)
        #expect(duplicate?.sql?.contains("INSERT INTO t") == true)
        // A failed statement inside a transaction rolls it back.
        #expect(throws: PostgresError.self) {
            try db.transaction {
                try db.run("INSERT INTO t VALUES ($1)", [.text("z")])
                try db.run("INSERT INTO t VALUES ($1)", [.text("x")])
            }
        }
        #expect(!db.isInTransaction)
        #expect(try db.query("SELECT count(*) FROM t").int64(0, 0) == 2)

        let listener = try PostgresConnection(url: url)
        defer { listener.close() }
        try listener.execute("LISTEN outpost_test")
        try db.query("SELECT pg_notify('outpost_test', $1)", [.text("payload 1")])
        var received: [PostgresConnection.Notification] = []
        let deadline = Date().addingTimeInterval(10)
        while received.isEmpty && Date() < deadline { received += try listener.waitForNotifications(timeoutMs: 200) }
        #expect(received.map(\.payload) == ["payload 1"])
        #expect(received.first?.senderPID == db.backendPID)
        #expect(PostgresConnection.redacted("postgres://u:secret@h/db") == "postgres://u:***@h/db")
    }

    /// The visibility problem of the issue: a transaction holds the space's next seq but
    /// has not committed; another instance pushes to the same space. The second must not
    /// commit a larger seq before the first commits — otherwise a puller could read the
    /// larger one, move its cursor past the smaller one, and never see it.
    @Test func aPullerNeverSkipsASeqCommittedLate() async throws {
        let url = try await PostgresCluster.database()
        let a = try PostgresSyncStore(configuration: .init(url: url))
        let b = try PostgresSyncStore(configuration: .init(url: url))
        let epoch = a.epoch
        #expect(b.epoch == epoch)
        _ = try await a.push(space: "sp", clientId: "seed", items: [prepared("s1", id: "seed", base: nil)], now: 1)

        // "Instance C": a raw connection that applies a push the way a writer does,
        // allocating seq 2, and keeps its transaction open.
        let raw = try PostgresConnection(url: url)
        try raw.execute("BEGIN")
        var (storage, space) = try PostgresPushStorage.locking("sp", on: raw, epoch: epoch)
        let late = Change(changeId: "late", collection: "todos", id: "late", op: .put, data: ["t": "late"], baseVersion: nil)
        let held = try PushRules.apply([PushRules.Input(change: late, fingerprint: [1], data: Array(#"{"t":"late"}"#.utf8))],
                                       context: PushRules.Context(epoch: epoch, clientId: "slow", subject: "slow", now: 2), space: &space, storage: &storage)
        #expect(held == [.applied("late", version: Version(epoch: epoch, seq: 2), updatedAt: 2)])

        // Instance B pushes meanwhile: it must wait for the space's lock.
        let done = Mutex<[PushResult]?>(nil)
        let pusher = Task {
            let r = try await b.push(space: "sp", clientId: "fast", items: [prepared("early", id: "early", base: nil)], now: 3)
            done.withLock { $0 = r }
        }
        // B's push is waiting for the lock that the raw transaction holds: PostgreSQL shows
        // a lock not granted in this database.
        let observer = try PostgresConnection(url: url)
        defer { observer.close() }
        try await eventually("instance B's push waits for the space's row lock") {
            try observer.query("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database()").int64(0, 0) > 0
        }
        #expect(done.withLock { $0 } == nil, "a larger seq committed while a smaller one was in flight")
        // A puller sees neither, and the head does not move past the seq in flight.
        let before = try await a.page(PageRequest(space: "sp", afterSeq: 1, limit: 100, maxBytes: 1 << 20, collections: nil))
        #expect(before.count == 0 && before.head == 1)

        try raw.execute("COMMIT")
        raw.close()
        try await pusher.value
        #expect(done.withLock { $0 } == [.applied("early", version: Version(epoch: epoch, seq: 3), updatedAt: 3)])
        let after = try await a.page(PageRequest(space: "sp", afterSeq: 1, limit: 100, maxBytes: 1 << 20, collections: nil))
        #expect(try decodePage(after).map(\.id) == ["late", "early"])
        #expect(after.head == 3)
        await a.close()
        await b.close()
    }

    /// Many writers on three instances, pullers on all three following the head: every
    /// seq is unique, gap-free, and every puller sees every record exactly once.
    @Test func threeInstancesHandOutUniqueSeqsAndPullersSkipNothing() async throws {
        let url = try await PostgresCluster.database()
        var stores: [PostgresSyncStore] = []
        for _ in 0..<3 { stores.append(try PostgresSyncStore(configuration: .init(url: url))) }
        let all = stores
        let writers = 6, pushes = 15, perPush = 10
        let total = writers * pushes * perPush
        let seqs = try await withThrowingTaskGroup(of: [Int64].self) { group in
            for w in 0..<writers {
                group.addTask {
                    var mine: [Int64] = []
                    for p in 0..<pushes {
                        let items = (0..<perPush).map { prepared("w\(w)-\(p)-\($0)", id: "r\(w)-\(p)-\($0)", base: nil) }
                        let results = try await all[(w + p) % 3].push(space: "sp", clientId: "w\(w)", items: items, now: 1)
                        mine += results.compactMap { $0.version?.seq }
                    }
                    return mine
                }
            }
            for r in 0..<3 {
                group.addTask {
                    // A puller with small pages, following from instance r while writes go on.
                    var seen: [Int64] = []
                    var cursor: Int64 = 0
                    let stop = ContinuousClock.now + .seconds(120)
                    while seen.count < total && ContinuousClock.now < stop {
                        let page = try await all[r].page(PageRequest(space: "sp", afterSeq: cursor, limit: 7, maxBytes: 1 << 20, collections: nil))
                        let records = try decodePage(page)
                        seen += records.map(\.version.seq)
                        if let last = page.lastSeq { cursor = last } else { _ = await all[r].waitForCommit(space: "sp", afterSeq: page.head, deadline: .now + .seconds(2)) }
                    }
                    return seen.map { -$0 }   // negative: a puller's list
                }
            }
            var written: [Int64] = []
            var pulled: [[Int64]] = []
            for try await list in group {
                if list.first.map({ $0 < 0 }) == true { pulled.append(list.map { -$0 }) } else { written += list }
            }
            return (written, pulled)
        }
        #expect(seqs.0.count == total)
        #expect(Set(seqs.0) == Set(1...Int64(total)), "seqs are unique and gap-free")
        for list in seqs.1 {
            #expect(list == Array(1...Int64(total)), "a puller missed, repeated or reordered a record")
        }
        for s in stores { await s.close() }
    }

    /// A commit on one instance wakes a long poll waiting on another (LISTEN/NOTIFY).
    @Test func aCommitOnOneInstanceWakesALongPollOnAnother() async throws {
        let url = try await PostgresCluster.database()
        let a = try PostgresSyncStore(configuration: .init(url: url))
        let b = try PostgresSyncStore(configuration: .init(url: url))
        // The waiter is registered before the commit (`startedTask` returns once the wait's
        // first step, which registers it, has run), so only a notification can wake it
        // (true); its deadline would answer false. A's listener ran `LISTEN` before the
        // store's init returned, so the notification cannot be missed.
        let waiter = await startedTask { await a.waitForCommit(space: "sp", afterSeq: 0, deadline: .now + .seconds(30)) }
        #expect(a.notifier.waitingCount == 1, "the long poll waits on instance A")
        _ = try await b.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 1)
        #expect(await waiter.value, "woken by B's commit, not by its deadline")
        #expect(a.notifier.waitingCount == 0)
        await a.close()
        await b.close()
    }

    /// Instances that start together on an empty database migrate it once, under the
    /// advisory lock, and agree on one epoch.
    @Test func instancesStartingTogetherMigrateOnceAndShareTheEpoch() async throws {
        let url = try await PostgresCluster.database()
        let epochs = try await withThrowingTaskGroup(of: Epoch.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    try await blocking {
                        let db = try PostgresConnection(url: url)
                        defer { db.close() }
                        return try PostgresSchema.migrate(db)
                    }
                }
            }
            var out: [Epoch] = []
            for try await e in group { out.append(e) }
            return out
        }
        #expect(Set(epochs).count == 1)
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        #expect(try db.query("SELECT count(*) FROM migrations").int64(0, 0) == Int64(PostgresSchema.migrations.list.count))
        #expect(try PostgresSchema.pending(db) == [])
        // A database newer than this server is refused.
        try db.run("INSERT INTO migrations(name, applied_at) VALUES ('a migration of a newer server', 1)")
        #expect(try PostgresSchema.pending(db) == nil)
        #expect(throws: StoreError.self) { try PostgresSchema.migrate(db) }
    }

    /// `rotate-epoch --store` while an instance runs: the instance notices, stops taking
    /// requests, and reports it (outpost-server then shuts down to restart).
    @Test func aRotatedEpochStopsARunningInstance() async throws {
        let url = try await PostgresCluster.database()
        let called = Watched<(Bool, Epoch?)>((false, nil))
        var configuration = PostgresSyncStore.Configuration(url: url)
        configuration.onEpochChange = { epoch in called.update { $0 = (true, epoch) } }
        let store = try PostgresSyncStore(configuration: configuration)
        _ = try await store.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 1)
        // The listener ran `LISTEN outpost_epoch` before the store's init returned: the
        // rotation's notification reaches it.
        let rotated = try await blocking { try PostgresSyncStore.rotateEpoch(url: url) }
        #expect(store.epoch < rotated)
        #expect(try await called.until("the store reports the rotated epoch") { $0.0 }.1 == rotated)
        #expect(await store.isWritable() == false)
        await #expect(throws: StoreError.self) {
            _ = try await store.push(space: "sp", clientId: "p", items: [prepared("c2", id: "b", base: nil)], now: 2)
        }
        await store.close()
        // Started again, the instance serves the new epoch, with the history kept.
        let again = try PostgresSyncStore(configuration: .init(url: url))
        #expect(again.epoch == rotated)
        let page = try await again.page(PageRequest(space: "sp", afterSeq: 0, limit: 10, maxBytes: 1 << 20, collections: nil))
        #expect(page.count == 1 && page.epoch == rotated)
        await again.close()
    }

    /// PostgreSQL closes every connection of the store (a restart, a failover, an
    /// administrator's pg_terminate_backend): pushes and pages go on over new connections,
    /// the listener reconnects and wakes the waiting pulls (they read again), and long
    /// polls are woken across instances again afterwards.
    @Test func theStoreReconnectsAfterItsConnectionsAreClosed() async throws {
        let url = try await PostgresCluster.database()
        let a = try PostgresSyncStore(configuration: .init(url: url))
        let b = try PostgresSyncStore(configuration: .init(url: url))
        _ = try await a.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 1)
        // A pull waits on each instance; no commit comes until both are woken, so only a
        // listener that reconnected (and wakes every waiting pull) can wake them.
        let waiting = await startedTask { await a.waitForCommit(space: "sp", afterSeq: 1, deadline: .now + .seconds(30)) }
        let waitingOnB = await startedTask { await b.waitForCommit(space: "sp", afterSeq: 1, deadline: .now + .seconds(30)) }
        #expect(a.notifier.waitingCount == 1 && b.notifier.waitingCount == 1, "a pull waits on each instance")
        let admin = try PostgresConnection(url: url)
        let killed = try admin.query("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        admin.close()
        #expect(killed.int64(0, 0) >= 8)
        // Each listener's new connection wakes its pull, which would read again.
        #expect(await waiting.value)
        #expect(await waitingOnB.value)
        let r = try await a.push(space: "sp", clientId: "p", items: [prepared("c2", id: "b", base: nil)], now: 2)
        #expect(r == [.applied("c2", version: Version(epoch: a.epoch, seq: 2), updatedAt: 2)])
        let page = try await b.page(PageRequest(space: "sp", afterSeq: 0, limit: 10, maxBytes: 1 << 20, collections: nil))
        #expect(page.count == 2)
        // Long polls across instances work again: B's listener is back (it woke its pull
        // after `LISTEN` on its new connection).
        let again = await startedTask { await b.waitForCommit(space: "sp", afterSeq: 2, deadline: .now + .seconds(30)) }
        #expect(b.notifier.waitingCount == 1, "a pull waits on instance B again")
        _ = try await a.push(space: "sp", clientId: "p", items: [prepared("c3", id: "c", base: nil)], now: 3)
        #expect(await again.value)
        await a.close()
        await b.close()
    }
}
