import Foundation
import Testing
import OutpostCore
import OutpostCrypto
import OutpostPostgres
import OutpostSQLite
@testable import OutpostServer
import OutpostTestSupport

/// A re-offer as the handler hands it to the store.
func reoffer(_ changeId: String, id: String, op: ChangeOp = .put, data: JSONObject = ["t": "again"], base: Version?, lineage: Version, updatedAt: Int64) -> PushItem {
    let change = Change(changeId: changeId, collection: "todos", id: id, op: op, data: op == .put ? data : nil, baseVersion: base, clientTime: 7,
                        lineage: Lineage(version: lineage, updatedAt: updatedAt))
    let dataJSON = change.data.map { JSONValue.object($0).encoded() }
    return .change(PreparedChange(change: change, fingerprint: SHA256.hash(change.fingerprintMaterial()), data: dataJSON))
}

/// Protocol 1.1's lineage rules (docs/protocol.md sections 4 and 5) on both backends: a real
/// SQLite file and a database of the test run's PostgreSQL cluster.
@Suite struct LineageStoreTests {
    func records(_ s: any SyncStore, _ space: String = "sp") async throws -> [String: RecordState] {
        let page = try await s.page(PageRequest(space: space, afterSeq: 0, limit: 1000, maxBytes: 1 << 20, collections: nil))
        return Dictionary(uniqueKeysWithValues: try decodePage(page).map { ($0.id, $0) })
    }

    @Test(arguments: StoreKind.allCases) func rotateEpochGivesEveryRecordItsVersionInTheEndingHistory(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let old = f.store.epoch
            _ = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil), prepared("c2", id: "b", base: nil)], now: 10)
            _ = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c3", id: "b", op: .delete, base: Version(epoch: old, seq: 2))], now: 11)
            var before = try await records(f.store)
            #expect(before["a"]?.lineage == nil && before["b"]?.lineage == nil)
            #expect(before["a"]?.sameAs == nil && before["b"]?.sameAs == nil)
            let new = try await f.rotateEpoch()
            before = try await records(f.store)
            #expect(before["a"]?.version == Version(epoch: new, seq: 1) && before["a"]?.lineage == Version(epoch: old, seq: 1))
            #expect(before["b"]?.deleted == true && before["b"]?.lineage == Version(epoch: old, seq: 3))
            // Nothing is written on them yet: each is that version.
            #expect(before["a"]?.sameAs == Version(epoch: old, seq: 1) && before["b"]?.sameAs == Version(epoch: old, seq: 3))
            // A second rotation replaces both with the more recent history.
            let newer = try await f.rotateEpoch()
            let after = try await records(f.store)
            #expect(after["a"]?.version == Version(epoch: newer, seq: 1) && after["a"]?.lineage == Version(epoch: new, seq: 1))
            #expect(after["b"]?.lineage == Version(epoch: new, seq: 3))
            #expect(after["a"]?.sameAs == Version(epoch: new, seq: 1) && after["b"]?.sameAs == Version(epoch: new, seq: 3))
        }
    }

    @Test(arguments: StoreKind.allCases) func aReofferOverAnAncestorAppliesWithItsOriginalTimeAndPlainWritesKeepItsLineage(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let old = f.store.epoch
            _ = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil), prepared("c2", id: "z", base: nil)], now: 10)
            let new = try await f.rotateEpoch()
            let s = f.store!
            // a's lineage is old.1; the device held old.2.
            let carried = Version(epoch: old, seq: 2)
            var r = try await s.push(space: "sp", clientId: "device", items: [reoffer("ro", id: "a", base: Version(epoch: new, seq: 1), lineage: carried, updatedAt: 5)], now: 100)
            #expect(r == [.applied("ro", version: Version(epoch: new, seq: 3), updatedAt: 5)])
            var a = try #require(try await records(s)["a"])
            #expect(a.updatedAt == 5 && a.updatedBy == "device" && a.lineage == carried && a.sameAs == carried && a.data == ["t": "again"])
            // The replay answers the same version and time, also after another write.
            r = try await s.push(space: "sp", clientId: "p", items: [prepared("e1", id: "a", data: ["t": "edited"], base: Version(epoch: new, seq: 3))], now: 200)
            #expect(r == [.applied("e1", version: Version(epoch: new, seq: 4), updatedAt: 200)])
            r = try await s.push(space: "sp", clientId: "device", items: [reoffer("ro", id: "a", base: Version(epoch: new, seq: 1), lineage: carried, updatedAt: 5)], now: 300)
            #expect(r == [.applied("ro", version: Version(epoch: new, seq: 3), replayed: true, updatedAt: 5)])
            a = try #require(try await records(s)["a"])
            // The edit keeps the lineage but ends sameAs: the state is no longer the copy.
            #expect(a.version == Version(epoch: new, seq: 4) && a.updatedAt == 200 && a.lineage == carried && a.sameAs == nil)
            // A delete and a forced put keep the lineage too, and have no sameAs.
            r = try await s.push(space: "sp", clientId: "p", items: [prepared("d1", id: "a", op: .delete, base: Version(epoch: new, seq: 4))], now: 400)
            #expect(r[0].status == .applied)
            a = try #require(try await records(s)["a"])
            #expect(a.lineage == carried && a.sameAs == nil)
            // A forced put over a state that is its copy (z, untouched since the rotation).
            #expect(try await records(s)["z"]?.sameAs == Version(epoch: old, seq: 2))
            r = try await s.push(space: "sp", clientId: "p", items: [prepared("f1", id: "a", base: nil, force: true), prepared("f2", id: "z", base: nil, force: true)], now: 500)
            #expect(r.map(\.status) == [.applied, .applied])
            let forced = try await records(s)
            #expect(forced["a"]?.lineage == carried && forced["a"]?.sameAs == nil)
            #expect(forced["z"]?.lineage == Version(epoch: old, seq: 2) && forced["z"]?.sameAs == nil)
            // A create has neither.
            _ = try await s.push(space: "sp", clientId: "p", items: [prepared("n1", id: "new", base: nil)], now: 600)
            let created = try #require(try await records(s)["new"])
            #expect(created.lineage == nil && created.sameAs == nil)
        }
    }

    @Test(arguments: StoreKind.allCases) func aReofferThatDoesNotDescendIsAConflictAndWritesNothing(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let old = f.store.epoch
            _ = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c1", id: "a", base: nil), prepared("c2", id: "b", base: nil)], now: 10)
            _ = try await f.store.push(space: "sp", clientId: "p", items: [prepared("c3", id: "b", data: ["t": "b2"], base: Version(epoch: old, seq: 2))], now: 11)
            let new = try await f.rotateEpoch()
            let s = f.store!
            _ = try await s.push(space: "sp", clientId: "p", items: [prepared("c4", id: "fresh", base: nil)], now: 20)
            let before = try await records(s)
            let r = try await s.push(space: "sp", clientId: "device", items: [
                // b descends from old.3; the device's copy old.2 is older.
                reoffer("r1", id: "b", base: Version(epoch: new, seq: 3), lineage: Version(epoch: old, seq: 2), updatedAt: 5),
                // fresh was written in the new epoch: nothing the device knew covers it.
                reoffer("r2", id: "fresh", base: Version(epoch: new, seq: 4), lineage: Version(epoch: old, seq: 9), updatedAt: 5),
                // Another earlier history than a's.
                reoffer("r3", id: "a", base: Version(epoch: new, seq: 1), lineage: Version("0.9")!, updatedAt: 5),
                // A null base over an existing record, a stale base.
                reoffer("r4", id: "a", base: nil, lineage: Version(epoch: old, seq: 9), updatedAt: 5),
                reoffer("r5", id: "b", base: Version(epoch: new, seq: 2), lineage: Version(epoch: old, seq: 9), updatedAt: 5),
                // A record the server lacks, base null: applies.
                reoffer("r6", id: "gone", base: nil, lineage: Version(epoch: old, seq: 7), updatedAt: 6),
            ], now: 30)
            #expect(r.map(\.status) == [.conflict, .conflict, .conflict, .conflict, .conflict, .applied])
            #expect(r[0].current?.version == Version(epoch: new, seq: 3) && r[0].current?.lineage == Version(epoch: old, seq: 3))
            #expect(r[1].current?.version == Version(epoch: new, seq: 4) && r[1].current?.lineage == nil)
            #expect(r[2].current?.lineage == Version(epoch: old, seq: 1))
            #expect(r[5] == .applied("r6", version: Version(epoch: new, seq: 5), updatedAt: 6))
            let after = try await records(s)
            for id in ["a", "b", "fresh"] { #expect(after[id] == before[id], "\(id) changed") }
            #expect(after["gone"]?.lineage == Version(epoch: old, seq: 7) && after["gone"]?.sameAs == Version(epoch: old, seq: 7) && after["gone"]?.updatedAt == 6)
            // Conflicts are not remembered: the same change id applies once it descends.
            let retry = try await s.push(space: "sp", clientId: "device", items: [
                reoffer("r1", id: "b", base: Version(epoch: new, seq: 3), lineage: Version(epoch: old, seq: 2), updatedAt: 5),
                reoffer("r7", id: "b", base: Version(epoch: new, seq: 3), lineage: Version(epoch: old, seq: 3), updatedAt: 8),
            ], now: 40)
            #expect(retry.map(\.status) == [.conflict, .applied])
            #expect(try await s.head(space: "sp") == 6)
        }
    }

    /// The bug `sameAs` fixes (docs/protocol.md section 4, added in 1.1): lineage is kept by a
    /// plain write, so judging a re-offer by it let a later copy of the earlier history
    /// replace a write made in the new history that the copy never saw.
    @Test(arguments: StoreKind.allCases) func aReofferOverAStateWrittenSinceItsRestoreOrReofferIsAConflict(kind: StoreKind) async throws {
        try await withStore(kind) { f in
            let old = f.store.epoch
            _ = try await f.store.push(space: "sp", clientId: "p", items: [
                prepared("c1", id: "untouched", base: nil), prepared("c2", id: "edited", base: nil), prepared("c3", id: "k0", base: nil),
            ], now: 10)
            let new = try await f.rotateEpoch()
            let s = f.store!
            // The restore gives k0 lineage and sameAs old.3; a device re-offers its old.5 copy.
            var r = try await s.push(space: "sp", clientId: "device-a", items: [reoffer("ra", id: "k0", data: ["t": "five"], base: Version(epoch: new, seq: 3), lineage: Version(epoch: old, seq: 5), updatedAt: 5)], now: 100)
            #expect(r == [.applied("ra", version: Version(epoch: new, seq: 4), updatedAt: 5)])
            var k0 = try #require(try await records(s)["k0"])
            #expect(k0.lineage == Version(epoch: old, seq: 5) && k0.sameAs == Version(epoch: old, seq: 5))
            // Another device writes on it in the new history: the lineage stays, sameAs ends.
            r = try await s.push(space: "sp", clientId: "device-b", items: [prepared("wb", id: "k0", data: ["t": "new history"], base: Version(epoch: new, seq: 4))], now: 200)
            #expect(r == [.applied("wb", version: Version(epoch: new, seq: 5), updatedAt: 200)])
            k0 = try #require(try await records(s)["k0"])
            #expect(k0.lineage == Version(epoch: old, seq: 5) && k0.sameAs == nil)
            // A third device re-offers its acknowledged old.8 delete at the current base: it
            // never saw device-b's write, so it is a conflict with that write as current.
            r = try await s.push(space: "sp", clientId: "device-c", items: [reoffer("rc", id: "k0", op: .delete, base: Version(epoch: new, seq: 5), lineage: Version(epoch: old, seq: 8), updatedAt: 8)], now: 300)
            #expect(r.map(\.status) == [.conflict])
            #expect(r[0].current == k0)
            #expect(r[0].current?.data == ["t": "new history"] && r[0].current?.lineage == Version(epoch: old, seq: 5) && r[0].current?.sameAs == nil)
            // The same on a restored state written on directly.
            r = try await s.push(space: "sp", clientId: "device-b", items: [prepared("we", id: "edited", op: .delete, base: Version(epoch: new, seq: 2))], now: 400)
            #expect(r[0].status == .applied)
            r = try await s.push(space: "sp", clientId: "device-c", items: [reoffer("re", id: "edited", base: Version(epoch: new, seq: 6), lineage: Version(epoch: old, seq: 9), updatedAt: 9)], now: 500)
            #expect(r.map(\.status) == [.conflict])
            #expect(r[0].current?.version == Version(epoch: new, seq: 6) && r[0].current?.deleted == true)
            #expect(r[0].current?.lineage == Version(epoch: old, seq: 2) && r[0].current?.sameAs == nil)
            // Over a restored state nothing was written on, a newer copy still applies.
            r = try await s.push(space: "sp", clientId: "device-c", items: [reoffer("ru", id: "untouched", base: Version(epoch: new, seq: 1), lineage: Version(epoch: old, seq: 7), updatedAt: 7)], now: 600)
            #expect(r == [.applied("ru", version: Version(epoch: new, seq: 7), updatedAt: 7)])
            let after = try await records(s)
            #expect(after["untouched"]?.sameAs == Version(epoch: old, seq: 7) && after["untouched"]?.lineage == Version(epoch: old, seq: 7))
            #expect(after["k0"] == k0 && after["edited"]?.version == Version(epoch: new, seq: 6))
            #expect(try await s.head(space: "sp") == 7)
        }
    }

    /// A schema-1 SQLite file of its release (before `records.lineage`) opens: its records
    /// have no lineage until the next rotation gives them one, which a re-offer is judged by.
    @Test func aSchemaOneSQLiteFileIsMigratedInPlace() async throws {
        try await withStore(.sqlite) { f in
            try await f.replaceWithFixture("s1")
            let e = try #require(Epoch("01JE1000000000000000000000"))
            let a = try #require(try await records(f.store)["a"])
            #expect(a.version == Version(epoch: e, seq: 1) && a.lineage == nil && a.sameAs == nil && a.updatedAt == 10)
            let new = try await f.rotateEpoch()
            #expect(try await records(f.store)["a"]?.lineage == Version(epoch: e, seq: 1))
            #expect(try await records(f.store)["a"]?.sameAs == Version(epoch: e, seq: 1))
            let r = try await f.store.push(space: "sp", clientId: "d", items: [reoffer("r", id: "a", base: Version(epoch: new, seq: 1), lineage: Version(epoch: e, seq: 1), updatedAt: 3)], now: 20)
            #expect(r == [.applied("r", version: Version(epoch: new, seq: 6), updatedAt: 3)])
        }
    }

    /// A schema-2 SQLite file of its release (lineage, no `records.same_as`) opens: the
    /// column takes the row's lineage where it has one, which errs toward admitting a
    /// re-offer (a schema-2 row cannot tell whether it was written on since).
    @Test func aSchemaTwoSQLiteFileIsMigratedInPlace() async throws {
        try await withStore(.sqlite) { f in
            try await f.replaceWithFixture("s2-m1")
            let e0 = try #require(Epoch("01JE0000000000000000000000")), e1 = f.store.epoch
            let migrated = try await records(f.store)
            #expect(migrated["a"]?.lineage == Version(epoch: e0, seq: 1) && migrated["a"]?.sameAs == Version(epoch: e0, seq: 1))
            #expect(migrated["b"]?.sameAs == Version(epoch: e0, seq: 2), "b was written on since, which schema 2 could not tell")
            #expect(migrated["c"]?.lineage == nil && migrated["c"]?.sameAs == nil)
            let r = try await f.store.push(space: "sp", clientId: "d", items: [
                reoffer("r1", id: "a", base: Version(epoch: e1, seq: 1), lineage: Version(epoch: e0, seq: 4), updatedAt: 3),
                reoffer("r2", id: "c", base: Version(epoch: e1, seq: 5), lineage: Version(epoch: e0, seq: 4), updatedAt: 3),
            ], now: 30)
            #expect(r.map(\.status) == [.applied, .conflict])
        }
    }

    /// A PostgreSQL database at migration 1 gets migration 2 at start: the column, and the
    /// push function that knows re-offers.
    @Test func aPostgresDatabaseAtMigrationOneIsMigrated() async throws {
        let url = try await PostgresCluster.database()
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        try db.execute(PostgresSchema.migrations.list[0].sql)
        try db.run("INSERT INTO meta(key, value) VALUES ('epoch', 'OLDEPOCH')")
        try db.run("INSERT INTO spaces(name, head_seq) VALUES ('sp', 1)")
        try db.run("""
            INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time)
            SELECT space_id, 'todos', 'a', 1, false, '{"t":"x"}'::bytea, 10, 'p', NULL FROM spaces WHERE name = 'sp'
            """)
        let store = try PostgresSyncStore(configuration: .init(url: url))
        #expect(try PostgresSchema.pending(db) == [])
        #expect(store.epoch == Epoch("OLDEPOCH"))
        let a = try #require(try await records(store)["a"])
        #expect(a.lineage == nil && a.updatedAt == 10)
        await store.close()
        let new = try PostgresSyncStore.rotateEpoch(url: url)
        let rotated = try PostgresSyncStore(configuration: .init(url: url))
        #expect(try await records(rotated)["a"]?.lineage == Version("OLDEPOCH.1"))
        let r = try await rotated.push(space: "sp", clientId: "d", items: [reoffer("r", id: "a", base: Version(epoch: new, seq: 1), lineage: Version("OLDEPOCH.2")!, updatedAt: 3)], now: 20)
        #expect(r == [.applied("r", version: Version(epoch: new, seq: 2), updatedAt: 3)])
        await rotated.close()
    }

    /// A PostgreSQL database at migration 2 (lineage, no same_as) gets migration 3 at
    /// start: the column, filled from the lineage where a row has one, and the push
    /// function that judges re-offers by it and returns it with a conflict's current.
    @Test func aPostgresDatabaseAtMigrationTwoIsMigrated() async throws {
        let url = try await PostgresCluster.database()
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        for version in 1...2 { try db.execute(PostgresSchema.migrations.list[version - 1].sql) }
        try db.run("INSERT INTO meta(key, value) VALUES ('epoch', 'EPOCHTWO')")
        try db.run("INSERT INTO spaces(name, head_seq) VALUES ('sp', 2)")
        try db.run("""
            INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage)
            SELECT space_id, 'todos', 'a', 1, false, '{"t":"x"}'::bytea, 10, 'p', NULL::bigint, 'EPOCHONE.1' FROM spaces WHERE name = 'sp'
            UNION ALL
            SELECT space_id, 'todos', 'fresh', 2, false, '{"t":"y"}'::bytea, 11, 'p', NULL::bigint, NULL::text FROM spaces WHERE name = 'sp'
            """)
        let store = try PostgresSyncStore(configuration: .init(url: url))
        #expect(try PostgresSchema.pending(db) == [])
        let migrated = try await records(store)
        #expect(migrated["a"]?.lineage == Version("EPOCHONE.1") && migrated["a"]?.sameAs == Version("EPOCHONE.1"))
        #expect(migrated["fresh"]?.lineage == nil && migrated["fresh"]?.sameAs == nil)
        let epoch = store.epoch
        var r = try await store.push(space: "sp", clientId: "d", items: [
            reoffer("r1", id: "a", base: Version(epoch: epoch, seq: 1), lineage: Version("EPOCHONE.4")!, updatedAt: 3),
            prepared("w1", id: "a", data: ["t": "later"], base: Version(epoch: epoch, seq: 3)),
        ], now: 20)
        #expect(r == [.applied("r1", version: Version(epoch: epoch, seq: 3), updatedAt: 3), .applied("w1", version: Version(epoch: epoch, seq: 4), updatedAt: 20)])
        r = try await store.push(space: "sp", clientId: "d", items: [reoffer("r2", id: "a", base: Version(epoch: epoch, seq: 4), lineage: Version("EPOCHONE.6")!, updatedAt: 6)], now: 30)
        #expect(r.map(\.status) == [.conflict])
        #expect(r[0].current?.lineage == Version("EPOCHONE.4") && r[0].current?.sameAs == nil && r[0].current?.data == ["t": "later"])
        await store.close()
    }
}

/// The handler's side of the 1.1 rules, over a real socket: `/v1/info` says 1.1, a lineage
/// that is not of an earlier epoch or comes with `force` is `invalid_change`, and pages and
/// conflicts carry `lineage` and `sameAs` when a state has them.
@Suite struct LineageHTTPTests {
    @Test func infoReportsProtocolOnePointOne() async throws {
        try await withServer { s in
            let json = try JSONParser.parse(try await httpRequestAsync(port: s.port, "GET", "/v1/info").body)
            #expect(json["protocol"]?.int64Value == 1)
            #expect(json["protocolVersion"]?.stringValue == "1.1")
        }
    }

    @Test func invalidLineageIsRejectedAndValidOnesAreStoredAndReturned() async throws {
        try await withServer { s in
            let earlier = Epoch(String(s.epoch.rawValue.dropLast()))!
            let later = Epoch(s.epoch.rawValue + "Z")!
            func change(_ changeId: String, _ id: String, lineage: Version, base: Version? = nil, force: Bool = false) -> Change {
                Change(changeId: changeId, collection: "todos", id: id, op: .put, data: ["t": "x"], baseVersion: base, force: force,
                       lineage: Lineage(version: lineage, updatedAt: 1_700_000_000_000))
            }
            let r = try PushResponse.decode(try await s.push("sp", [
                change("c1", "a", lineage: Version(epoch: s.epoch, seq: 1)),
                change("c2", "b", lineage: Version(epoch: later, seq: 1)),
                change("c3", "c", lineage: Version(epoch: earlier, seq: 1), force: true),
                change("c4", "d", lineage: Version(epoch: earlier, seq: 4)),
                change("c5", "d", lineage: Version(epoch: earlier, seq: 5)),
            ], clientId: "device").body)
            #expect(r.results.map(\.status) == [.rejected, .rejected, .rejected, .applied, .conflict])
            #expect(r.results.prefix(3).allSatisfy { $0.error?.code == "invalid_change" })
            #expect(r.results[3].updatedAt == 1_700_000_000_000)
            #expect(r.results[4].current?.lineage == Version(epoch: earlier, seq: 4) && r.results[4].current?.sameAs == Version(epoch: earlier, seq: 4))
            let page = try PullPage.decode(try await s.pull("sp").body)
            #expect(page.changes.map(\.id) == ["d"])
            #expect(page.changes[0].lineage == Version(epoch: earlier, seq: 4) && page.changes[0].updatedAt == 1_700_000_000_000)
            #expect(page.changes[0].sameAs == Version(epoch: earlier, seq: 4))
            #expect(page.changes[0].updatedBy == "device")
            let raw = String(decoding: try await s.pull("sp").body, as: UTF8.self)
            #expect(raw.contains(#""lineage":"\#(earlier.rawValue).4","sameAs":"\#(earlier.rawValue).4""#))
        }
    }
}
