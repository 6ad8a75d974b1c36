import Foundation
import Testing
import OutpostCore
import OutpostCrypto
@testable import OutpostServer
import OutpostTestSupport

/// The two storage backends the contract tests run against.
enum StoreKind: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite
    case postgres

    var description: String { rawValue }
}

/// A store on a real SQLite file in a temporary directory, or on a fresh database of the
/// test run's PostgreSQL cluster (`PostgresCluster.shared`).
final class StoreFixture {
    let kind: StoreKind
    let directory: URL
    var path: String { directory.appendingPathComponent("outpost.sqlite").path }
    /// The PostgreSQL database's URL (postgres only).
    let url: String?
    var store: (any SyncStore)!
    /// Whether the stores opened write the webhook outbox (`open` reads it).
    var outbox = false

    /// `url` is the PostgreSQL database to use (postgres only), made by the caller off the
    /// concurrency pool (`PostgresCluster.database`).
    init(_ kind: StoreKind = .sqlite, url: String? = nil) throws {
        self.kind = kind
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.url = url
        precondition((kind == .postgres) == (url != nil), "a PostgreSQL fixture needs its database URL")
        store = try open()
    }

    func open() throws -> any SyncStore {
        switch kind {
        case .sqlite:
            var configuration = SQLiteSyncStore.Configuration(path: path)
            configuration.outbox = outbox
            return try SQLiteSyncStore(configuration: configuration)
        case .postgres:
            var configuration = PostgresSyncStore.Configuration(url: url!)
            configuration.outbox = outbox
            return try PostgresSyncStore(configuration: configuration)
        }
    }

    func reopen() async throws {
        await store.close()
        store = try open()
    }

    /// Closes the store, gives it a new epoch as `rotate-epoch` does, and opens it again.
    func rotateEpoch() async throws -> Epoch {
        await store.close()
        let epoch: Epoch
        switch kind {
        case .sqlite: epoch = try SQLiteSyncStore.rotateEpoch(path: path)
        case .postgres: epoch = try PostgresSyncStore.rotateEpoch(url: url!)
        }
        store = try open()
        return epoch
    }

    /// Closes the store and puts the SQLite fixture `name` (Tests/server-schemas: a file of
    /// an earlier release) in place of its file, then opens it (and so migrates it).
    func replaceWithFixture(_ name: String) async throws {
        await store.close()
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        try FileManager.default.copyItem(atPath: SchemaMigrationTests.repositoryPath("Tests/server-schemas/sqlite-\(name).sqlite"), toPath: path)
        store = try open()
    }

    func cleanUp() async {
        await store.close()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Runs `body` with a fresh store and always removes it afterwards.
func withStore(_ kind: StoreKind = .sqlite, _ body: (StoreFixture) async throws -> Void) async throws {
    let url = kind == .postgres ? try await PostgresCluster.database() : nil
    let f = try StoreFixture(kind, url: url)
    do {
        try await body(f)
    } catch {
        await f.cleanUp()
        throw error
    }
    await f.cleanUp()
}

func prepared(_ changeId: String, _ collection: String = "todos", id: String, op: ChangeOp = .put, data: JSONObject? = ["t": "x"], base: Version?, force: Bool = false) -> PushItem {
    let change = Change(changeId: changeId, collection: collection, id: id, op: op, data: op == .put ? data : nil, baseVersion: base, force: force, clientTime: 7)
    let dataJSON = change.data.map { JSONValue.object($0).encoded() }
    return .change(PreparedChange(change: change, fingerprint: SHA256.hash(change.fingerprintMaterial()), data: dataJSON))
}

func decodePage(_ page: PageData) throws -> [RecordState] {
    guard case .array(let items) = try JSONParser.parse(page.changesJSON) else { throw StoreError("not an array") }
    return try items.map { try RecordState(json: $0) }
}

/// The store contract (docs/protocol.md sections 1, 4, 5), run against both backends.
@Suite struct SyncStoreContractTests {
    @Test(arguments: StoreKind.allCases) func createThenConflictOnNullBaseAndTombstonesCount(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            let e = s.epoch
            var r = try await s.push(space: "sp", clientId: "phone", items: [prepared("c1", id: "a", base: nil)], now: 100)
            #expect(r == [.applied("c1", version: Version(epoch: e, seq: 1), updatedAt: 100)])
            // null base while the record exists: conflict with the current record.
            r = try await s.push(space: "sp", clientId: "laptop", items: [prepared("c2", id: "a", data: ["t": "y"], base: nil)], now: 101)
            #expect(r[0].status == .conflict)
            #expect(r[0].current?.version == Version(epoch: e, seq: 1))
            #expect(r[0].current?.data == ["t": "x"])
            #expect(r[0].current?.updatedBy == "phone")
            #expect(r[0].current?.clientTime == 7)
            // delete, then a null base still conflicts: a tombstone exists.
            r = try await s.push(space: "sp", clientId: "phone", items: [prepared("c3", id: "a", op: .delete, base: Version(epoch: e, seq: 1))], now: 102)
            #expect(r == [.applied("c3", version: Version(epoch: e, seq: 2), updatedAt: 102)])
            r = try await s.push(space: "sp", clientId: "phone", items: [prepared("c4", id: "a", base: nil)], now: 103)
            #expect(r[0].status == .conflict)
            #expect(r[0].current?.deleted == true)
            #expect(r[0].current?.data == nil)
            // Based on the tombstone's version, a put revives it.
            r = try await s.push(space: "sp", clientId: "phone", items: [prepared("c5", id: "a", base: Version(epoch: e, seq: 2))], now: 104)
            #expect(r == [.applied("c5", version: Version(epoch: e, seq: 3), updatedAt: 104)])
        }
    }

    @Test(arguments: StoreKind.allCases) func changesApplyInOrderEachOnItsOwn(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            let e = s.epoch
            let r = try await s.push(space: "sp", clientId: "p", items: [
                prepared("c1", id: "a", base: nil),
                prepared("c2", id: "a", data: ["t": "2"], base: Version(epoch: e, seq: 1)),   // sees c1
                prepared("c3", id: "a", data: ["t": "3"], base: Version(epoch: e, seq: 1)),   // stale now: conflict
                .rejected(.rejected("c4", .invalidChange, "bad")),
                prepared("c5", id: "b", base: nil),
            ], now: 1)
            #expect(r.map(\.status) == [.applied, .applied, .conflict, .rejected, .applied])
            #expect(r[2].current?.version == Version(epoch: e, seq: 2))
            #expect(r[2].current?.data == ["t": "2"])
            #expect(r[4].version == Version(epoch: e, seq: 3))
        }
    }

    @Test(arguments: StoreKind.allCases) func forceSkipsTheBaseCheck(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            _ = try await s.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 1)
            let r = try await s.push(space: "sp", clientId: "p", items: [prepared("c2", id: "a", data: ["t": "f"], base: nil, force: true)], now: 2)
            #expect(r[0].status == .applied)
        }
    }

    @Test(arguments: StoreKind.allCases) func replaysAnswerTheOriginalResultAndReusedIDsAreRejected(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            let e = s.epoch
            _ = try await s.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 1)
            _ = try await s.push(space: "sp", clientId: "q", items: [prepared("c2", id: "a", data: ["t": "later"], base: Version(epoch: e, seq: 1))], now: 2)
            // Same id, same content: the original answer, however the record changed since.
            var r = try await s.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 3)
            #expect(r == [.applied("c1", version: Version(epoch: e, seq: 1), replayed: true, updatedAt: 1)])
            // Same id, other content.
            r = try await s.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", data: ["t": "other"], base: nil)], now: 4)
            #expect(r[0].status == .rejected)
            #expect(r[0].error?.code == "change_id_reused")
            // Twice in one push: the second is a replay.
            r = try await s.push(space: "sp", clientId: "p", items: [prepared("c9", id: "z", base: nil), prepared("c9", id: "z", base: nil)], now: 5)
            #expect(r[0] == .applied("c9", version: Version(epoch: e, seq: 3), updatedAt: 5))
            #expect(r[1] == .applied("c9", version: Version(epoch: e, seq: 3), replayed: true, updatedAt: 5))
            // The same change id in another space is another change.
            r = try await s.push(space: "other", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 6)
            #expect(r == [.applied("c1", version: Version(epoch: e, seq: 1), updatedAt: 6)])
            // Nothing moved because of the replays.
            #expect(try await s.head(space: "sp") == 3)
        }
    }

    @Test(arguments: StoreKind.allCases) func conflictsAndRejectionsAreNotRemembered(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            let e = s.epoch
            _ = try await s.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 1)
            var r = try await s.push(space: "sp", clientId: "p", items: [prepared("c2", id: "a", base: nil)], now: 2)
            #expect(r[0].status == .conflict)
            // Retried against the right base, the same change id applies.
            r = try await s.push(space: "sp", clientId: "p", items: [prepared("c2", id: "a", base: Version(epoch: e, seq: 1))], now: 3)
            #expect(r[0].status == .applied)
        }
    }

    @Test(arguments: StoreKind.allCases) func aBaseFromAnotherEpochIsAnEpochMismatch(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let r = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: Version("OLDEPOCH.4"))], now: 1)
            #expect(r[0].error?.code == "epoch_mismatch")
        }
    }

    @Test(arguments: StoreKind.allCases) func pagesAreInSeqOrderWithEachRecordOnceAtItsNewestVersion(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            let e = s.epoch
            _ = try await s.push(space: "sp", clientId: "p", items: [
                prepared("1", id: "a", base: nil), prepared("2", id: "b", base: nil), prepared("3", "notes", id: "c", base: nil),
            ], now: 1)
            _ = try await s.push(space: "sp", clientId: "p", items: [
                prepared("4", id: "a", data: ["t": "a2"], base: Version(epoch: e, seq: 1)),
                prepared("5", id: "b", op: .delete, base: Version(epoch: e, seq: 2)),
            ], now: 2)
            let all = try await s.page(PageRequest(space: "sp", afterSeq: 0, limit: 100, maxBytes: 1 << 20, collections: nil))
            let records = try decodePage(all)
            #expect(records.map(\.id) == ["c", "a", "b"])
            #expect(records.map(\.version.seq) == [3, 4, 5])
            #expect(records[1].data == ["t": "a2"])
            #expect(records[2].deleted && records[2].data == nil)
            #expect(all.lastSeq == 5 && !all.hasMore && all.head == 5)

            let first = try await s.page(PageRequest(space: "sp", afterSeq: 0, limit: 2, maxBytes: 1 << 20, collections: nil))
            #expect(first.count == 2 && first.hasMore && first.lastSeq == 4)
            let rest = try await s.page(PageRequest(space: "sp", afterSeq: 4, limit: 2, maxBytes: 1 << 20, collections: nil))
            #expect(rest.count == 1 && !rest.hasMore)

            let notes = try await s.page(PageRequest(space: "sp", afterSeq: 0, limit: 100, maxBytes: 1 << 20, collections: ["notes"]))
            #expect(try decodePage(notes).map(\.id) == ["c"])

            let empty = try await s.page(PageRequest(space: "nobody", afterSeq: 0, limit: 100, maxBytes: 1 << 20, collections: nil))
            #expect(empty.count == 0 && empty.head == 0 && String(decoding: empty.changesJSON, as: UTF8.self) == "[]")
        }
    }

    @Test(arguments: StoreKind.allCases) func theByteBudgetHoldsButAPageAlwaysHasOneRecord(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            let big = JSONObject([("blob", .string(String(repeating: "x", count: 10_000)))])
            var items: [PushItem] = []
            for i in 0..<10 { items.append(prepared("c\(i)", id: "r\(i)", data: big, base: nil)) }
            _ = try await s.push(space: "sp", clientId: "p", items: items, now: 1)
            var after: Int64 = 0
            var seen = 0
            while true {
                let page = try await s.page(PageRequest(space: "sp", afterSeq: after, limit: 100, maxBytes: 25_000, collections: nil))
                #expect(page.changesJSON.count <= 25_000)
                #expect(page.count >= 1)
                seen += page.count
                after = page.lastSeq!
                if !page.hasMore { break }
            }
            #expect(seen == 10)
            // A budget smaller than one record still yields one record per page.
            let tiny = try await s.page(PageRequest(space: "sp", afterSeq: 0, limit: 100, maxBytes: 10, collections: nil))
            #expect(tiny.count == 1 && tiny.hasMore)
        }
    }

    @Test(arguments: StoreKind.allCases) func seqsSurviveAReopenAndAreNeverHandedOutTwice(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let e = f.store.epoch
            _ = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil), prepared("c2", id: "b", base: nil)], now: 1)
            try await f.reopen()
            #expect(f.store.epoch == e)
            let r = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c3", id: "c", base: nil), prepared("c1", id: "a", base: nil)], now: 2)
            #expect(r == [.applied("c3", version: Version(epoch: e, seq: 3), updatedAt: 2), .applied("c1", version: Version(epoch: e, seq: 1), replayed: true, updatedAt: 1)])
        }
    }

    @Test(arguments: StoreKind.allCases) func concurrentPushesGetUniqueVersionsAndOneWriterWinsARecord(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            let versions = try await withThrowingTaskGroup(of: [PushResult].self) { group in
                for client in 0..<8 {
                    group.addTask {
                        var out: [PushResult] = []
                        for batch in 0..<10 {
                            let items = (0..<20).map { prepared("c\(client)-\(batch)-\($0)", id: "r\(client)-\(batch)-\($0)", base: nil) }
                            out += try await s.push(space: "sp", clientId: "client\(client)", items: items, now: 1)
                        }
                        return out
                    }
                }
                var all: [PushResult] = []
                for try await r in group { all += r }
                return all
            }
            #expect(versions.count == 1600)
            #expect(versions.allSatisfy { $0.status == .applied })
            #expect(Set(versions.map { $0.version!.seq }).count == 1600)
            #expect(try await s.head(space: "sp") == 1600)

            // Sixteen writers on one record with the same base: exactly one applies.
            _ = try await s.push(space: "sp", clientId: "seed", items: [prepared("seed", id: "hot", base: nil)], now: 2)
            let base = Version(epoch: s.epoch, seq: 1601)
            let outcomes = try await withThrowingTaskGroup(of: PushStatus.self) { group in
                for w in 0..<16 {
                    group.addTask { try await s.push(space: "sp", clientId: "w\(w)", items: [prepared("hot-\(w)", id: "hot", data: ["w": .number(JSONNumber(w))], base: base)], now: 3)[0].status }
                }
                var out: [PushStatus] = []
                for try await st in group { out.append(st) }
                return out
            }
            #expect(outcomes.filter { $0 == .applied }.count == 1)
            #expect(outcomes.filter { $0 == .conflict }.count == 15)
        }
    }

    @Test(arguments: StoreKind.allCases) func waitersAreWokenByACommitAndTimeOutOtherwise(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            // The deadline: a wait that nothing ends answers false when it passes (the 50 ms
            // are the timeout under test).
            let timedOut = await s.waitForCommit(space: "sp", afterSeq: 0, deadline: .now + .milliseconds(50))
            #expect(!timedOut)
            #expect(s.notifier.waitingCount == 0)
            // The commit: the waiter is registered before the push, so it cannot take the
            // path that answers at once for a head already passed; a commit that did not
            // wake it would leave it to its deadline, which answers false.
            // `startedTask` returns once the wait's first step, which registers it, has run.
            let woken = await startedTask { await s.waitForCommit(space: "sp", afterSeq: 0, deadline: .now + .seconds(60)) }
            #expect(s.notifier.waitingCount == 1, "the waiter is registered")
            _ = try await s.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil)], now: 1)
            #expect(await woken.value, "woken by the commit, not by its deadline")
            #expect(s.notifier.waitingCount == 0)
            // A waiter for a head already passed returns at once, without registering.
            #expect(await s.waitForCommit(space: "sp", afterSeq: 0, deadline: .now + .seconds(60)))
            // Cancellation ends a wait that is registered.
            let task = await startedTask { await s.waitForCommit(space: "sp", afterSeq: 1, deadline: .now + .seconds(60)) }
            #expect(s.notifier.waitingCount == 1, "the waiter to cancel is registered")
            task.cancel()
            #expect(await task.value == false)
            #expect(s.notifier.waitingCount == 0)
        }
    }

    @Test(arguments: StoreKind.allCases) func sweepForgetsOldChangeIDs(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let s = f.store!
            _ = try await s.push(space: "sp", clientId: "p", items: [prepared("old", id: "a", base: nil)], now: 1_000)
            _ = try await s.push(space: "sp", clientId: "p", items: [prepared("new", id: "b", base: nil)], now: 5_000)
            #expect(try await s.sweepChangeIDs(appliedBefore: 2_000) == 1)
            // The old id is forgotten: sending it again is judged anew (a conflict here).
            let r = try await s.push(space: "sp", clientId: "p", items: [prepared("old", id: "a", base: nil), prepared("new", id: "b", base: nil)], now: 6_000)
            #expect(r[0].status == .conflict)
            #expect(r[1].replayed)
        }
    }

    @Test(arguments: StoreKind.allCases) func rotateEpochMakesALaterEpochAndIsWritable(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let before = f.store.epoch
            #expect(await f.store.isWritable())
            let after = try await f.rotateEpoch()
            #expect(before < after)
            #expect(f.store.epoch == after)
            #expect(await f.store.isWritable())
        }
    }
}
