import Foundation
import OutpostCore
import OutpostPostgres
import OutpostSQLite
import OutpostTestSupport
import Synchronization
import Testing
@testable import OutpostServer

/// Group commit's failure rule (`GroupCommit`, docs/architecture.md "Group commit"): a
/// commit that fails fails every push of its group, none is answered `applied`, nothing of
/// the group is kept, and the writer goes on from the state before it. On both stores.
@Suite(.serverLogs) struct GroupCommitTests {
    /// A writer held while three pushes queue behind it, so the three make one group; a
    /// trigger fails that group's commit because one of them writes the record "poison".
    /// The test waits on signals: the writer is held (a job it runs, or a lock wait the
    /// database reports), and the store's queue holds the three (`queuedWrites`).
    @Test(arguments: StoreKind.allCases) func aFailedCommitFailsEveryPushOfItsGroupAndAnswersNoneApplied(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let store = f.store!
            let e = store.epoch
            _ = try await store.push(space: "g", clientId: "d", items: [prepared("w0", id: "w0", base: nil)], now: 1)
            // What the writer commits before the group, and how it is let go.
            let before: [String]
            let release: () async throws -> Void
            switch kind {
            case .sqlite:
                // A job on the writer's own thread creates the trigger and holds the thread:
                // the writer stores the group's counters in `spaces` just before COMMIT, and
                // the trigger fails that statement at the commit of a group that wrote
                // "poison". (A second connection holding SQLite's write lock cannot be told
                // apart from a writer still on its way, and contends with the store's own.)
                let sqlite = try #require(store as? SQLiteSyncStore)
                let holding = Watched(false)
                let gate = DispatchSemaphore(value: 0)
                let hold = Task {
                    try await sqlite.write { db in
                        try db.execute("""
                            CREATE TRIGGER poison BEFORE UPDATE ON spaces WHEN EXISTS (SELECT 1 FROM records WHERE id = 'poison')
                            BEGIN SELECT RAISE(ABORT, 'poisoned commit'); END;
                            """)
                        holding.update { $0 = true }
                        gate.wait()
                    }
                }
                try await holding.until("the writer runs the job that holds it") { $0 }
                before = ["w0"]
                release = {
                    gate.signal()
                    try await hold.value
                }
            case .postgres:
                // A deferred constraint trigger: it runs at COMMIT. Another connection locks
                // the space's row, and the writer's transaction for "x0" waits for it.
                let db = try PostgresConnection(url: f.url!)
                try db.execute("""
                    CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN IF NEW.id = 'poison' THEN RAISE EXCEPTION 'poisoned commit'; END IF; RETURN NULL; END $$;
                    CREATE CONSTRAINT TRIGGER poison AFTER INSERT OR UPDATE ON records DEFERRABLE INITIALLY DEFERRED
                        FOR EACH ROW EXECUTE FUNCTION poison();
                    """)
                try db.execute("BEGIN")
                _ = try db.query("SELECT 1 FROM spaces WHERE name = 'g' FOR UPDATE")
                let first = Task { try await store.push(space: "g", clientId: "d", items: [prepared("x0", id: "x0", base: nil)], now: 2) }
                try await eventually("the writer waits for the space's row lock") {
                    try db.query("""
                        SELECT count(*) FROM pg_stat_activity
                        WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
                        """).int64(0, 0) == 1
                }
                before = ["w0", "x0"]
                release = {
                    try db.execute("COMMIT")
                    db.close()
                    #expect(try await first.value == [.applied("x0", version: Version(epoch: e, seq: 2), updatedAt: 2)])
                }
            }
            // Each push queues its job in its first step: started one after the other, the
            // three wait for the writer in this order.
            var group: [Task<[PushResult], any Error>] = []
            for id in ["a", "poison", "b"] {
                group.append(await startedThrowingTask { try await store.push(space: "g", clientId: id, items: [prepared("c-\(id)", id: id, base: nil)], now: 3) })
            }
            #expect(store.queuedWrites == 3, "the three pushes wait for the writer")
            try await release()

            for (id, push) in zip(["a", "poison", "b"], group) {
                switch await push.result {
                case .success(let results): Issue.record("the push of \(id) in the failed group was answered \(results)")
                case .failure(let error): #expect("\(error)".contains("poisoned commit"), "\(id): \(error)")
                }
            }
            // Nothing of the group was kept, and the writer goes on from before it: the
            // next write takes the next seq.
            let head = Int64(before.count)
            #expect(try await store.head(space: "g") == head)
            let page = try decodePage(try await store.page(PageRequest(space: "g", afterSeq: 0, limit: 100, maxBytes: 1 << 20, collections: nil)))
            #expect(page.map(\.id) == before)
            #expect(try await store.push(space: "g", clientId: "a", items: [prepared("c-a", id: "a", base: nil)], now: 4)
                    == [.applied("c-a", version: Version(epoch: e, seq: head + 1), updatedAt: 4)])
        }
    }
}
