import Foundation
import OutpostCore
import OutpostCrypto
import OutpostPostgres
import OutpostSQLite
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// A resolved write's mark (`Change.resolves`, docs/protocol.md section 4, "Resolutions";
/// added without a version change), kept by each store with the state the write stored and
/// served as `resolved` wherever that state goes on the wire: pull pages (with and without
/// rules), a conflict's `current`, the admin console and webhooks. Over a real socket on
/// SQLite and on PostgreSQL.
@Suite(.serverLogs, .serialized) struct ResolutionMarkTests {
    static let resolver = "mergeFields(lastWriteWins)"

    static func resolving(_ changeId: String, _ id: String, _ data: JSONObject = ["t": "merged"], op: ChangeOp = .put, base: Version?,
                          resolver: String = ResolutionMarkTests.resolver, outcome: ResolutionMark.Outcome = .write) -> Change {
        Change(changeId: changeId, collection: "todos", id: id, op: op, data: op == .put ? data : nil, baseVersion: base, clientTime: 1_764_430_000_000,
               resolves: ResolutionMark(resolver: resolver, outcome: outcome))
    }

    /// The results of a push that must answer 200.
    static func pushed(_ s: TestServer, _ changes: [Change], clientId: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> [PushResult] {
        let r = try await s.push("sp", changes, clientId: clientId)
        #expect(r.status == 200, "\(r.text)", sourceLocation: sourceLocation)
        return try PushResponse.decode(r.body).results
    }

    /// The space's records from the start, by id, and the page's text as sent.
    static func pulled(_ s: TestServer, _ space: String = "sp") async throws -> (records: [String: RecordState], text: String) {
        let r = try await s.pull(space)
        #expect(r.status == 200, "\(r.text)")
        let page = try PullPage.decode(r.body)
        #expect(!page.hasMore)
        return (Dictionary(uniqueKeysWithValues: page.changes.map { ($0.id, $0) }), r.text)
    }

    /// A server on `store` whose data directory is `data` (so it can be stopped and started
    /// again on the same store); nil `url` for SQLite.
    static func withServerOn(data: String, url: String?, _ body: (TestServer) async throws -> Void) async throws {
        try await withServer(configure: { settings in
            settings.dataDirectory = data
            if let url { settings.store = url }
            // The server compacts at start, in the background: the fixtures' tombstones are
            // older than the default retention, and a pull must find them whenever it runs.
            settings.tombstoneRetentionDays = 36_500
        }, body)
    }

    /// `outpost-server rotate-epoch` on the stopped store.
    static func rotateEpoch(data: String, url: String?) async throws -> Epoch {
        try await blocking { try AdminCommands.rotateEpoch(arguments: url.map { ["--store", $0] } ?? ["--data", data], environment: [:]) }
    }

    static func url(_ store: StoreKind, _ prefix: String) async throws -> String? {
        store == .postgres ? try await PostgresCluster.database(prefix: prefix) : nil
    }

    // MARK: Pages, conflicts, later writes, replays, creates

    /// (a) A resolved write over B's version X is served with `resolved` {over X, resolver,
    /// outcome} in a pull from the start and in the admin console; (f) its replay is
    /// `replayed` and leaves the mark as it is; (b) a stale write's conflict shows it in
    /// `current`; (c) a later plain write clears it, and a replay then does not bring it back.
    @Test(arguments: StoreKind.allCases) func aResolvedWriteIsServedWithItsMarkUntilTheNextWrite(store: StoreKind) async throws {
        let url = try await Self.url(store, "resolved")
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let e = s.epoch
            let made = try await Self.pushed(s, [put("b1", "r", ["t": "from B"])], clientId: "device-b")
            let x = try #require(made[0].version)
            #expect(x == Version(epoch: e, seq: 1))

            let resolvedChange = Self.resolving("a1", "r", base: x)
            let applied = try await Self.pushed(s, [resolvedChange], clientId: "device-a")
            #expect(applied.map(\.status) == [.applied], "\(applied)")
            let y = try #require(applied[0].version)
            let mark = Resolved(over: x, mark: ResolutionMark(resolver: Self.resolver, outcome: .write))

            // (a) A pull from the start.
            var (records, text) = try await Self.pulled(s)
            #expect(records["r"]?.version == y && records["r"]?.data == ["t": "merged"] && records["r"]?.resolved == mark, "\(text)")
            // As a store keeps it: compact, keys sorted.
            #expect(text.contains(#","resolved":{"outcome":"write","over":"\#(x.text)","resolver":"mergeFields(lastWriteWins)"}"#), "\(text)")

            // The admin console's record and records routes.
            let admin = s.token(spaces: [], admin: true)
            let one = try await s.request("GET", "/v1/admin/spaces/sp/collections/todos/record?id=r", token: admin)
            #expect(one.status == 200, "\(one.text)")
            #expect(try RecordState(json: try json(one)).resolved == mark, "\(one.text)")
            let list = try await s.request("GET", "/v1/admin/spaces/sp/collections/todos/records", token: admin)
            #expect(list.status == 200 && list.text.contains(#""resolved":{"outcome":"write","over":"\#(x.text)""#), "\(list.text)")

            // (f) The replay answers the original version and changes nothing, also when it
            // names another resolution (the mark, like clientTime, is not fingerprinted).
            let replay = try await Self.pushed(s, [resolvedChange], clientId: "device-a")
                + Self.pushed(s, [Self.resolving("a1", "r", base: x, resolver: "person", outcome: .keepLocal)], clientId: "device-a")
            #expect(replay.map(\.status) == [.applied, .applied] && replay.allSatisfy { $0.replayed && $0.version == y }, "\(replay)")
            let afterReplay = try await Self.pulled(s)
            #expect(afterReplay.records["r"] == records["r"] && afterReplay.text == text)

            // (b) B's write from its stale X is a conflict whose current carries the mark.
            let stale = try await Self.pushed(s, [put("b2", "r", ["t": "B again"], base: x)], clientId: "device-b")
            #expect(stale.map(\.status) == [.conflict], "\(stale)")
            #expect(stale[0].current?.version == y && stale[0].current?.resolved == mark, "\(stale)")

            // (c) A plain write on the resolved state stores no mark.
            let plain = try await Self.pushed(s, [put("b3", "r", ["t": "B on top"], base: y)], clientId: "device-b")
            #expect(plain.map(\.status) == [.applied], "\(plain)")
            (records, text) = try await Self.pulled(s)
            #expect(records["r"]?.version == plain[0].version && records["r"]?.resolved == nil && !text.contains("resolved"), "\(text)")
            let conflict = try await Self.pushed(s, [put("b4", "r", base: y)], clientId: "device-b")
            #expect(conflict[0].status == .conflict && conflict[0].current != nil && conflict[0].current?.resolved == nil, "\(conflict)")
            // Its replay brings nothing back.
            let late = try await Self.pushed(s, [resolvedChange], clientId: "device-a")
            #expect(late.map(\.replayed) == [true] && late[0].version == y)
            #expect(try await Self.pulled(s).records["r"]?.resolved == nil)

            // A resolved delete leaves a tombstone with its mark.
            let z = try #require(plain[0].version)
            let deleted = try await Self.pushed(s, [Self.resolving("a2", "r", op: .delete, base: z, resolver: "person", outcome: .delete)], clientId: "device-a")
            #expect(deleted.map(\.status) == [.applied], "\(deleted)")
            let tombstone = try #require(try await Self.pulled(s).records["r"])
            #expect(tombstone.deleted && tombstone.resolved == Resolved(over: z, mark: ResolutionMark(resolver: "person", outcome: .delete)))
        }
    }

    /// (d) A resolved write that creates the record replaced nothing: no mark. (e) A
    /// malformed `resolves` is `rejected` `invalid_change` for that change alone, and
    /// nothing stored changes.
    @Test(arguments: StoreKind.allCases) func aCreateStoresNoMarkAndAMalformedMarkIsRejectedAlone(store: StoreKind) async throws {
        let url = try await Self.url(store, "resolvedbad")
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let created = try await Self.pushed(s, [Self.resolving("n1", "new", base: nil)], clientId: "device-a")
            #expect(created.map(\.status) == [.applied], "\(created)")
            var (records, text) = try await Self.pulled(s)
            #expect(records["new"] != nil && records["new"]?.resolved == nil && !text.contains("resolved"), "\(text)")

            let x = try #require(created[0].version)
            let before = try await Self.pulled(s)
            let head = try PullPage.decode(try await s.pull("sp").body).next
            func change(_ changeId: String, _ resolves: JSONValue) -> JSONValue {
                .object(["changeId": .string(changeId), "collection": "todos", "id": "new", "op": "put", "data": .object(["t": "bad"]),
                         "baseVersion": .string(x.text), "resolves": resolves])
            }
            let malformed: [JSONValue] = [
                change("m1", .object(["resolver": .string(Self.resolver), "outcome": "bogus"])),
                change("m2", .object(["resolver": "", "outcome": "write"])),
                change("m3", .object(["resolver": .string(String(repeating: "r", count: 200)), "outcome": "write"])),
                change("m4", "write"),
                change("m5", .array([.string(Self.resolver), "write"])),
                change("m6", .object(["resolver": .string(Self.resolver)])),
                change("m7", .object(["resolver": .number(JSONNumber(Int64(7))), "outcome": "write"])),
            ]
            // Beside them, a valid change of another record applies.
            let valid = put("v1", "other").json
            let body = JSONValue.object(["clientId": "device-a", "changes": .array(malformed + [valid])]).encoded()
            let r = try await s.request("POST", "/v1/spaces/sp/push", token: s.token(spaces: ["sp"]), body: body)
            #expect(r.status == 200, "\(r.text)")
            let results = try PushResponse.decode(r.body).results
            #expect(results.map(\.changeId) == ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "v1"])
            #expect(results.map(\.status) == Array(repeating: .rejected, count: 7) + [.applied], "\(r.text)")
            for result in results.prefix(7) { #expect(result.error?.code == "invalid_change", "\(result)") }
            (records, text) = try await Self.pulled(s)
            #expect(records["new"] == before.records["new"] && records["other"]?.resolved == nil)
            #expect(records.count == 2 && !text.contains("resolved"), "\(text)")
            // Nothing of the rejected ones was remembered: the ids apply once well formed.
            let page = try PullPage.decode(try await s.pull("sp", query: "since=\(head.text)").body)
            #expect(page.changes.map(\.id) == ["other"])
            let fixed = try await Self.pushed(s, [Self.resolving("m1", "new", base: x, outcome: .keepLocal)], clientId: "device-a")
            #expect(fixed.map(\.status) == [.applied] && fixed[0].replayed == false, "\(fixed)")
            #expect(try await Self.pulled(s).records["new"]?.resolved == Resolved(over: x, mark: ResolutionMark(resolver: Self.resolver, outcome: .keepLocal)))
        }
    }

    // MARK: Rotation and migration

    /// (g) After `rotate-epoch` no record carries a mark: the version it named is of the
    /// history that ended. The records are kept with their lineage in it.
    @Test(arguments: StoreKind.allCases) func aRotationClearsEveryMark(store: StoreKind) async throws {
        let url = try await Self.url(store, "resolvedrotate")
        try await withTemporaryDirectory(prefix: "resolved-rotate") { dir in
            let data = dir.appending("data")
            var old: Epoch?
            var seqs: [String: Int64] = [:]
            try await Self.withServerOn(data: data, url: url) { s in
                old = s.epoch
                let made = try await Self.pushed(s, [put("b1", "r"), put("b2", "q")], clientId: "device-b")
                let resolved = try await Self.pushed(s, [Self.resolving("a1", "r", base: made[0].version), Self.resolving("a2", "q", base: made[1].version, outcome: .keepLocal)],
                                                     clientId: "device-a")
                #expect(resolved.map(\.status) == [.applied, .applied], "\(resolved)")
                let records = try await Self.pulled(s).records
                #expect(records.values.allSatisfy { $0.resolved != nil }, "\(records)")
                seqs = records.mapValues(\.version.seq)
            }
            let ended = try #require(old)
            let new = try await Self.rotateEpoch(data: data, url: url)
            #expect(ended < new)
            try await Self.withServerOn(data: data, url: url) { s in
                #expect(s.epoch == new)
                let (records, text) = try await Self.pulled(s)
                #expect(records.count == 2 && !text.contains("resolved"), "\(text)")
                for (id, record) in records {
                    #expect(record.resolved == nil && record.version == Version(epoch: new, seq: seqs[id]!))
                    #expect(record.lineage == Version(epoch: ended, seq: seqs[id]!) && record.sameAs == record.lineage)
                }
                // A resolution in the new history is kept again, over the new version.
                let base = try #require(records["r"]?.version)
                let again = try await Self.pushed(s, [Self.resolving("a3", "r", base: base)], clientId: "device-a")
                #expect(again.map(\.status) == [.applied], "\(again)")
                #expect(try await Self.pulled(s).records["r"]?.resolved?.over == base)
            }
        }
    }

    /// (h) A store of the last release of each backend's fixtures (Tests/server-schemas,
    /// made by the DDL of that release) upgrades with the new migration, keeps its records
    /// (none with a mark), and then keeps the mark of a resolved write.
    @Test(arguments: StoreKind.allCases) func aStoreOfAnEarlierReleaseUpgradesAndKeepsItsRecords(store: StoreKind) async throws {
        let url = try await Self.url(store, "resolvedmigrate")
        try await withTemporaryDirectory(prefix: "resolved-migrate") { dir in
            let data = dir.appending("data")
            if let url {
                let db = try PostgresConnection(url: url)
                defer { db.close() }
                try db.execute(try String(contentsOfFile: SchemaMigrationTests.repositoryPath("Tests/server-schemas/postgres-p12-m2.sql"), encoding: .utf8))
                #expect(try db.query("SELECT count(*) FROM information_schema.columns WHERE table_name = 'records' AND column_name = 'resolved'").int64(0, 0) == 0)
            } else {
                try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
                let path = (data as NSString).appendingPathComponent(DataDirectory.storeFileName)
                try FileManager.default.copyItem(atPath: SchemaMigrationTests.repositoryPath("Tests/server-schemas/sqlite-s11-m2.sqlite"), toPath: path)
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
                let db = try Connection(path: path)
                defer { db.close() }
                #expect(try db.scalarInt("SELECT count(*) FROM pragma_table_info('records') WHERE name = 'resolved'") == 0)
            }
            try await Self.withServerOn(data: data, url: url) { s in
                #expect(s.epoch == SchemaMigrationTests.e1)
                let (records, text) = try await Self.pulled(s)
                #expect(records.keys.sorted() == ["a", "b", "c"] && records.values.allSatisfy { $0.resolved == nil } && !text.contains("resolved"), "\(text)")
                #expect(records["a"]?.data == ["t": "x"] && records["b"]?.data == ["t": "y"] && records["c"]?.deleted == true)
                let base = try #require(records["b"]?.version)
                let resolved = try await Self.pushed(s, [Self.resolving("a1", "b", base: base, resolver: "person")], clientId: "device-a")
                #expect(resolved.map(\.status) == [.applied], "\(resolved)")
                #expect(try await Self.pulled(s).records["b"]?.resolved == Resolved(over: base, mark: ResolutionMark(resolver: "person", outcome: .write)))
            }
            // The migration is recorded, and the columns are there.
            if let url {
                let db = try PostgresConnection(url: url)
                defer { db.close() }
                #expect(try PostgresSchema.pending(db) == [])
                #expect(try db.query("SELECT count(*) FROM information_schema.columns WHERE column_name = 'resolved' AND table_name IN ('records', 'webhook_outbox')").int64(0, 0) == 2)
            } else {
                let db = try Connection(path: (data as NSString).appendingPathComponent(DataDirectory.storeFileName))
                defer { db.close() }
                #expect(try SQLiteSchema.pending(db) == [])
                #expect(try db.scalarInt("SELECT count(*) FROM pragma_table_info('webhook_outbox') WHERE name = 'resolved'") == 1)
            }
        }
    }

    // MARK: Rules and webhooks

    /// Under rules, pages are chosen in Swift from the stored rows (`SyncStore.scan` and the
    /// view index): the mark goes with the record to every token that may read it.
    @Test(arguments: StoreKind.allCases) func aPullUnderRulesCarriesTheMark(store: StoreKind) async throws {
        let rules = RulesHTTPTests()
        try await rules.withRulesServer(store) { s, _ in
            let boss = rules.token(s, "boss", supervisor: true), w1 = rules.token(s, "w1")
            let made = try await rules.pushed(s, boss, [rules.job("s1", "j1", "Fix the pump", "w1")])
            let x = try #require(made[0].version)
            var change = rules.job("w1a", "j1", "Fixed the pump", "w1", base: x)
            change.resolves = ResolutionMark(resolver: Self.resolver, outcome: .write)
            let applied = try await rules.pushed(s, w1, [change])
            #expect(applied.map(\.status) == [.applied], "\(applied)")
            let mark = Resolved(over: x, mark: ResolutionMark(resolver: Self.resolver, outcome: .write))
            for token in [w1, boss] {
                let page = try await rules.pull(s, token)
                #expect(page.changes.first { $0.id == "j1" }?.resolved == mark, "\(page.changes)")
            }
            // w2 never could read j1: its conflict shows nothing of the record.
            let w2 = try await s.push("team", [rules.job("w2a", "j1", "Mine", "w2")], token: rules.token(s, "w2"))
            #expect(w2.status == 200 && !w2.text.contains("resolved"), "\(w2.text)")
        }
    }

    /// The webhook outbox keeps the mark with the row of the write, and a delivery's body
    /// carries it as a pull page does.
    @Test(arguments: StoreKind.allCases) func aWebhookDeliveryCarriesTheMark(kind: StoreKind) async throws {
        try await WebhookOutboxTests.withOutbox(kind) { f, db in
            func item(_ change: Change) -> PushItem {
                .change(PreparedChange(change: change, fingerprint: SHA256.hash(change.fingerprintMaterial()), data: change.canonicalData()))
            }
            try await db.run("test") { try WebhookOutbox.register($0, [WebhookOutboxTests.first], now: 1_000) }
            let e = f.store.epoch
            _ = try await f.store.push(space: "s", clientId: "b", items: [item(put("c1", "r"))], now: 10)
            let x = Version(epoch: e, seq: 1)
            let r = try await f.store.push(space: "s", clientId: "a", items: [item(Self.resolving("c2", "r", base: x, outcome: .keepLocal)),
                                                                               item(put("c3", "plain"))], now: 20)
            #expect(r.map(\.status) == [.applied, .applied], "\(r)")
            let batch = try await WebhookOutboxTests.batch(db, try await WebhookOutboxTests.claim(db, WebhookOutboxTests.first, "s", owner: "A", now: 2_000, changes: 10))
            let mark = Resolved(over: x, mark: ResolutionMark(resolver: Self.resolver, outcome: .keepLocal))
            #expect(batch.changes.map(\.resolved) == [nil, mark.stored, nil])
            let body = try JSONParser.parse(try WebhookOutbox.body(batch))
            let changes = body["changes"]?.arrayValue ?? []
            #expect(changes.count == 3)
            #expect(changes.map { $0["resolved"] } == [nil, mark.json, nil], "\(body)")
            // Each change still reads as a record of a pull page.
            if changes.count == 3 { #expect(try RecordState(json: changes[1]).resolved == mark) }
        }
    }
}
