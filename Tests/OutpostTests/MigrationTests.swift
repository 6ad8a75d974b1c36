import Foundation
import OutpostCore
import OutpostCrypto
import OutpostTestBasics
import OutpostSQLite
import Testing
@testable import Outpost

@Suite("Store files of earlier schemas")
struct MigrationTests {
    // MARK: Frozen migrations

    /// Each released migration by name, with the SHA-256 of its frozen text
    /// (`StoreMigration.frozenText`: its SQL, and the version of a Swift part). A migration is
    /// added here when it is released, and never changed: a change to what it made is a new
    /// migration at the end of the list.
    static let released: [(String, String)] = [
        ("1 records, queue, aside, quarantine, retired epochs", "95605c627e66e5178882968a05c0c85e471f06cb94625ddc2bf8b98d592b1ac0"),
        ("2 media uploads", "d24957169db23dcfed28f88d9a0339e9c857c7ec612ced3705b96396de5d5d9a"),
        ("3 record models", "5624dc35670fa8f4b12079efa1dbf88a19e2fe9a08040f6f7254e116f875002d"),
        ("4 view re-pull seen", "d2a36abc553b3338a06085bc3f47bf8d66a35e53528cfbaa53ffe4500fb6ce02"),
        ("5 sealed edits and uploads", "95ee24fe8f7e732a77f730076084a3a2e939a54665994bf24618f50a1fc8d45a"),
        ("6 telemetry outbox", "536a9c7948b0a70f9ba8ea7ed553b34dba032532f1457efa61a9b7a1f6885ee2"),
        ("7 download directories", "46110d0e311f3f09a1313edfdad70d5f0b587a8ff4c216dfbf3344f08b96fab0"),
        ("8 sync session", "1786588f9b8a23543855b9af1d467bb0b1bdccc8f6f9eb37eb44f1e64ed071b6"),
        ("9 conflict journal", "0fdb9cc92450a99ebed19bdcd822f5f5d9b98f4abcbb2f27fc1f11e94daca192"),
        ("10 edits held for an app upgrade", "ec9591ebcf554e0daf5c9b2a7ba6c4551d9d994ec2cf00a46cd3dd3a404752b5"),
        ("11 queries", "b8e98f970bbe1b5eec1fc159a4bc31280f051c1257e58bb96cb29a743164cb64"),
        ("12 conflicts left for a person", "beba2218b068a6da977a7facbb38174685f54417f693f485c83a8329e35a02bf"),
        ("13 resolutions told both ways", "76b0cd3a6871cc44a73c1a9fda5d291c8d08ac2d5d8a369cb980673419534cc9"),
        ("14 session phase as a code", "d601fe03153b5f73ff76434ba1a090b0ffb4062fadc9d880e1f4c462c904b699"),
    ]

    /// The Swift parts of released migrations (Client/Outpost/Store/Migrations), with the
    /// SHA-256 of their source: frozen like the SQL, even where their version was not bumped.
    static let frozenHelpers: [(String, String)] = [
        ("Client/Outpost/Store/Migrations/Migration3.swift", "482a0650fd92ac2c3c7d8fb1d209911abec996aec504db99c076215f1b920992"),
        ("Client/Outpost/Store/Migrations/Migration8.swift", "be0d65766c1b6f841b5b048060d05396f48e0b32f27fab39d3df00e8875b2f67"),
    ]

    static let frozenRule = "migrations are frozen once released: append a new migration to LocalDatabase.migrations instead"

    /// Every migration of the list is released and pinned, in order: one edited, renamed,
    /// moved or removed fails here, and so does a change to a frozen helper.
    @Test func theReleasedMigrationsAreFrozen() throws {
        let actual = LocalDatabase.migrations.map { ($0.name, SHA256.hex(Array($0.frozenText.utf8))) }
        #expect(actual.map(\.0) == Self.released.map(\.0), "the list's names and order (\(Self.frozenRule); pin a new one here when it is released)")
        for ((name, hash), (_, pinned)) in zip(actual, Self.released) where hash != pinned {
            Issue.record("migration \"\(name)\" has frozen text of SHA-256 \(hash), released as \(pinned): \(Self.frozenRule)")
        }
        for (path, pinned) in Self.frozenHelpers {
            let hash = SHA256.hex(Array(try Data(contentsOf: URL(fileURLWithPath: repositoryPath(path)))))
            if hash != pinned { Issue.record("\(path) has SHA-256 \(hash), released as \(pinned): \(Self.frozenRule)") }
        }
    }

    /// Every phase is stored as its code and read back as itself; a code no release wrote,
    /// or a phase without its epoch, reads as detached.
    @Test func everyPhaseIsReadBackFromItsCode() throws {
        let e = Epoch(StoreFixtures.e1)!
        let phases: [SyncPhase] = [.detached, .following(e), .viewRePulling(e), .refreshing(e), .rePulling(e, viewChanged: false), .rePulling(e, viewChanged: true)]
        #expect(Set(phases.map(\.storedCode)).count == phases.count, "one code per phase")
        let dir = try TemporaryDirectory()
        let db = try LocalDatabase(path: dir.path + "/store.sqlite", durability: .normal)
        defer { db.close() }
        for phase in phases {
            try db.storeSession(phase: phase, cursor: Cursor("\(e.rawValue).3"))
            #expect(try db.sessionRow().phase == phase)
        }
        #expect(SyncPhase(storedCode: 6, epoch: e) == nil && SyncPhase(storedCode: 1, epoch: nil) == nil)
    }

    /// Migration 14 codes each phase migration 8 (and the releases after it) wrote as prose,
    /// keeping the epoch and cursor; a phase without its epoch, or prose no release wrote,
    /// becomes detached without an epoch, as the prose was read before.
    @Test(arguments: [
        ("following", true, "1 E"), ("view re-pulling", true, "2 E"), ("refreshing", true, "3 E"),
        ("re-pulling", true, "4 E"), ("re-pulling, view changed", true, "5 E"), ("detached", false, "0 -"),
        ("following", false, "0 -"), ("unheard of", true, "0 -"),
    ]) func migrationFourteenCodesThePhaseItFinds(_ prose: String, _ withEpoch: Bool, _ expected: String) throws {
        let dir = try TemporaryDirectory()
        let db = try StoreFixtures.makeSchema(13, at: dir.path + "/store.sqlite")
        defer { db.close() }
        let e1 = StoreFixtures.e1
        try db.run("INSERT OR REPLACE INTO sync_session(one, phase, epoch, cursor) VALUES (1, ?, ?, ?)",
                   [.text(prose), withEpoch ? .text(e1) : .null, .text("\(e1).8")])
        try db.transaction { try LocalDatabase.migrations[13].run(db, newFile: false) }
        let row = try db.query("SELECT phase, epoch, cursor FROM sync_session", []) { s in
            "\(s.int64(0)) \(s.optionalText(1) == e1 ? "E" : s.optionalText(1) ?? "-") \(s.optionalText(2) ?? "-")"
        }
        #expect(row == ["\(expected) \(e1).8"])
    }

    /// The rows migration 3 makes of each schema 2 fixture (`records`, `edits`, `meta`,
    /// `sqlite_sequence`), pinned by SHA-256: what the release of schema 3 wrote from them.
    static let migrationThreeRows: [(String, String)] = [
        ("store-schema2.sqlite", "ae20a34bcc93093e36fff2c2014b86390d38ad18d075e1cdfa243b99791e9c86"),
        ("store-schema2-cases.sqlite.gz", "c3c9ad50ab5444478f0951f0898ac1fc7f2d4a169814c2ea2257d1b71b107399"),
    ]

    @Test(arguments: migrationThreeRows) func migrationThreeWritesWhatItsReleaseWrote(_ fixture: String, _ pinned: String) throws {
        let dir = try TemporaryDirectory()
        let path = dir.path + "/store.sqlite"
        if fixture.hasSuffix(".gz") {
            try StoreFixtures.unpack(fixture, to: path)
        } else {
            try FileManager.default.copyItem(atPath: repositoryPath("Tests/OutpostTests/Fixtures/\(fixture)"), toPath: path)
        }
        let db = try Connection(path: path)
        defer { db.close() }
        try db.transaction { try LocalDatabase.migrations[2].run(db, newFile: false) }
        var rows: [String] = []
        for table in ["records", "edits", "meta", "sqlite_sequence"] {
            rows += try db.query("SELECT * FROM \(table) ORDER BY 1, 2", []) { s in
                table + "(" + (0..<s.columnCount).map { i -> String in
                    switch s.value(i) {
                    case .null: return "NULL"
                    case .integer(let v): return String(v)
                    case .real(let v): return String(v)
                    case .text(let v): return "'" + v + "'"
                    case .blob(let v): return "x'" + v.map { String(format: "%02x", $0) }.joined() + "'"
                    }
                }.joined(separator: ", ") + ")"
            }
        }
        let hash = SHA256.hex(Array(rows.joined(separator: "\n").utf8))
        #expect(hash == pinned, "migration 3 made other rows of \(fixture) than its release (\(Self.frozenRule)):\n\(rows.joined(separator: "\n"))")
    }

    /// A store file of every released schema from 3 on (`StoreFixtures`), opened by today's
    /// SDK: its schema is what the frozen migrations make, and its records, queue (queued,
    /// sent, rejected, held for an app upgrade, left for a person, a resolution's mark),
    /// conflict journal and session survive, and its edits reach a server.
    @Test(arguments: StoreFixtures.schemas) func aFileOfEveryReleasedSchemaOpensWithWhatItHeld(_ schema: Int) async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path + "/store.sqlite"
        try StoreFixtures.unpack(schema, to: path)
        do {
            let raw = try Connection(path: path, flags: [.readOnly])
            defer { raw.close() }
            let fresh = try StoreFixtures.makeSchema(schema, at: dir.path + "/fresh.sqlite")
            defer { fresh.close() }
            #expect(try StoreFixtures.schema(raw) == StoreFixtures.schema(fresh),
                    "migrations 1…\(schema) no longer make the schema they released (\(Self.frozenRule))")
            #expect(try raw.scalarText("SELECT value FROM meta WHERE key = 'schema_version'") == String(schema))
        }
        let e1 = StoreFixtures.e1
        let world = World()
        // The file's server is gone; this one's history is later than the file's.
        world.clock.advance(86_400_000)
        world.server.restartEmpty()
        var store: OutpostStore? = try world.device("fixture-phone", path: path)
        let phone = store!

        // Records, as the app sees them.
        var expected: [String: JSONObject?] = ["a": todo("a"), "b": todo("b pending"), "c": nil, "n": todo("new"), "r": nil]
        if schema >= 10 { expected["h"] = todo("h for v3") }
        if schema >= 12 { expected["k"] = todo("k mine") }
        if schema >= 13 { expected["m"] = todo("m merged") }
        for (id, data) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(try await phone.data("todos", id) == data, "record \(id)")
        }
        #expect(try await phone.record(in: "todos", id: "a")?.version?.text == "\(e1).1")

        // The queue.
        var queue = ["b put pending", "c delete in_doubt", "n put pending"]
        if schema >= 10 { queue.append("h put upgrade_required") }
        if schema >= 12 { queue.append("k put in_conflict") }
        if schema >= 13 { queue.append("m put failed") }
        let described = try await phone.pendingChanges().map { "\($0.id) \($0.op.rawValue) \($0.state.rawValue)" }
        #expect(described == queue)
        #expect(try await phone.pendingChanges().first { $0.id == "c" }?.baseVersion?.text == "\(e1).3", "a sent edit keeps its base")
        #expect(try await phone.rejectedChanges().map { "\($0.id) \($0.errorCode ?? "-")" } == ["r record_too_large"])
        if schema >= 12 {
            let conflicts = try await phone.unsettledConflicts()
            #expect(conflicts.map(\.id) == ["k"])
            #expect(conflicts.first?.local == todo("k mine") && conflicts.first?.server == todo("k theirs"))
            #expect(conflicts.first?.base == todo("k base"))
        }
        if schema >= 13 {
            let mark = try await phone.read { try $0.model(RecordKey(collection: "todos", id: "m")) }?.edits.first?.resolves
            #expect(mark == ResolutionMark(resolver: "mergeFields(lastWriteWins)", outcome: .write))
        }

        // The session.
        let status = try await phone.status()
        #expect(status.clientId == "fixture-phone")
        #expect(status.epoch?.rawValue == e1 && status.cursor?.text == "\(e1).8" && !status.rebasing)
        #expect(status.retiredEpochs.map(\.rawValue) == [StoreFixtures.e0])
        #expect(status.rejected == 1 && status.upgradeRequired == (schema >= 10 ? 1 : 0) && status.conflicts == (schema >= 12 ? 1 : 0))
        #expect(try await phone.read { try $0.session().phase } == .following(Epoch(e1)!))

        // The conflict journal.
        let journal = try await phone.conflicts()
        if schema >= 9 {
            #expect(journal.map { "\($0.id) \($0.changeId) \($0.resolver)" } == ["a ch-a0 lastWriteWins", "b ch-b0 mergeFields(lastWriteWins)"]
                    + (schema >= 12 ? ["k ch-k custom"] : []) + (schema >= 13 ? ["c ch-c0 mergeFields(lastWriteWins)"] : []))
            #expect(journal.first?.resolution == .keepServer && journal.first?.base == nil && journal.first?.local == todo("a mine"))
            let merge = journal.dropFirst().first
            #expect(merge?.resolution == .write(todo("b merged")) && merge?.writtenChangeId == "ch-b1" && merge?.server == todo("b theirs"))
            #expect(merge?.base == ConflictBase(data: todo("b base"), deleted: false, version: Version("\(e1).1")))
            if schema >= 13 {
                let elsewhere = journal.last?.decidedElsewhere
                #expect(elsewhere?.clientId == "laptop" && elsewhere?.overwrote.text == "\(e1).2" && elsewhere?.outcome == .write)
            }
        } else {
            #expect(journal.isEmpty)
        }

        // The file is of today's schema: every migration recorded once, in order.
        let names = try await phone.read { try $0.db.query("SELECT name FROM migrations ORDER BY position", []) { $0.text(0) } }
        #expect(names == LocalDatabase.migrations.map(\.name))
        #expect(try await phone.read { try $0.db.scalarText("SELECT value FROM meta WHERE key = 'schema_version'") } == String(LocalDatabase.migrations.count))
        #expect(try await phone.read { try $0.db.scalarText("SELECT value FROM meta WHERE key = 'encryption'") } == "none")
        #expect(try await phone.read { try $0.db.scalarInt("SELECT count(*) FROM meta WHERE key IN ('epoch', 'cursor', 'rebasing', 'view_repull')") } == 0)

        // Its edits go: this world's server is another history, which the store meets.
        try await phone.sync()
        try await phone.sync()
        for (id, data) in [("b", todo("b pending")), ("n", todo("new")), ("c", nil)] as [(String, JSONObject?)] {
            #expect(world.serverData("todos", id) == data, "server \(id)")
        }
        await phone.close()
        store = nil
        let again = try world.device("fixture-phone", path: path)
        #expect(try await again.data("todos", "b") == todo("b pending"), "opened again")
        await again.close()
    }

    /// `Fixtures/store-schema2.sqlite` was written by the release before the engine's
    /// rewrite (schema 2: `records`, `queue`, `aside`): records a, b, c, d synced; then
    /// `big` rejected as too large; b's put applied with its answer lost (in doubt) and
    /// another edit of b behind it; d in doubt after a 503; e a failed attempt (connection
    /// refused); a, n and a delete of c queued and never sent.
    @Test func aSchemaTwoFileOpensWithEveryPendingInDoubtAndRejectedEdit() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path + "/store.sqlite"
        try FileManager.default.copyItem(atPath: repositoryPath("Tests/OutpostTests/Fixtures/store-schema2.sqlite"), toPath: path)
        let world = World()
        let store = try world.device("fixture-phone", path: path)

        let pending = try await store.pendingChanges()
        let described = pending.map { "\($0.id) \($0.op.rawValue) \($0.data?["title"]?.stringValue ?? "-") \($0.state.rawValue)" }
        #expect(described == ["b put b in doubt in_doubt", "b put b behind pending", "d put d failed in_doubt", "e put e failed failed",
                              "a put a pending pending", "n put new pending", "c delete - pending"])
        let rejected = try await store.rejectedChanges()
        #expect(rejected.map(\.id) == ["big"])
        #expect(rejected.first?.errorCode == "record_too_large")
        // The sent changes keep their base, so they go again with the same fingerprint.
        #expect(pending.first { $0.data?["title"]?.stringValue == "b in doubt" }?.baseVersion?.seq == 2)
        #expect(try await store.data("todos", "a") == ["title": "a pending"])
        #expect(try await store.data("todos", "c") == nil)
        let status = try await store.status()
        #expect(status.pending == 7 && status.rejected == 1)
        #expect(status.epoch?.rawValue == "01KB83JBW0QW2BTHPY19BCEG6R")

        // The file's server is gone (this world's server has another, later history): the
        // store follows it, and every edit and copy reaches it.
        try await store.sync()
        try await store.sync()
        let expected: [String: JSONObject?] = ["a": ["title": "a pending"], "b": ["title": "b behind"], "c": nil, "d": ["title": "d failed"],
                                               "e": ["title": "e failed"], "n": ["title": "new"]]
        for (id, data) in expected {
            #expect(world.serverData("todos", id) == data, "server \(id)")
            #expect(try await store.data("todos", id) == data, "store \(id)")
        }
        #expect(try await store.pendingChanges().isEmpty)
        #expect(try await store.rejectedChanges().map(\.id) == ["big"], "a rejected edit stays until the app discards it")
        await store.close()

        // Opened again, the file is of the current schema.
        let again = try world.device("fixture-phone", path: path)
        #expect(try await again.data("todos", "b") == ["title": "b behind"])
        await again.close()
    }

    /// Copies a fixture to a temporary file.
    func fixture(_ name: String, in dir: TemporaryDirectory) throws -> String {
        let path = dir.path + "/store.sqlite"
        try FileManager.default.copyItem(atPath: repositoryPath("Tests/OutpostTests/Fixtures/\(name)"), toPath: path)
        return path
    }

    /// `Fixtures/store-schema7-repull.sqlite` was written by the release before the sync
    /// session's model (schema 7; git history: StoreFixtureMaker): records a…f synced in epoch
    /// E1 (f's newer write by another device not pulled), `bad` quarantined, b's put in doubt; the server restored from a backup (E2), and
    /// the sync that met it confirmed the new history and applied one page (a, b) before the
    /// network failed: a re-pull in progress, left copies of c…f and of `bad`. Then a put of
    /// a, a create of n and a delete of c queued, and one media upload waiting.
    @Test func aFileWithARePullInProgressOpensAndFinishesIt() async throws {
        let dir = try TemporaryDirectory()
        let path = try fixture("store-schema7-repull.sqlite", in: dir)
        let world = World()
        // The file's server is gone; this one's history is later than both of the file's.
        world.clock.advance(86_400_000)
        world.server.restartEmpty()
        var store: OutpostStore? = try world.device("fixture-phone", path: path)
        var phone = store!

        let status = try await phone.status()
        #expect(status.rebasing, "the re-pull is still in progress")
        #expect(status.epoch?.rawValue == "01KB83M7E8F7NRFDXZG9TZ7XRC" && status.cursor?.text == "01KB83M7E8F7NRFDXZG9TZ7XRC.2")
        #expect(status.retiredEpochs.map(\.rawValue) == ["01KB83JBW0QW2BTHPY19BCEG6R"])
        #expect(status.pending == 4 && status.quarantined == 1 && status.lastError == "request not sent: connection refused")
        let pending = try await phone.pendingChanges().map { "\($0.id) \($0.op.rawValue) \($0.state.rawValue)" }
        #expect(pending == ["b put in_doubt", "a put pending", "n put pending", "c delete pending"])
        // The left copies show until the new history is met.
        #expect(try await phone.data("todos", "d") == todo("d"))
        #expect(try await phone.data("todos", "f") == todo("f"))
        #expect(try await phone.data("todos", "c") == nil)
        let uploads = try await MediaUploader(store: phone, transport: HTTPMediaTransport(baseURL: URL(string: "http://127.0.0.1:9")!, token: "unused")).pendingUploads()
        #expect(uploads.count == 1 && uploads.first?.path.hasSuffix("/photo.jpg") == true && uploads.first?.size == 70_000)
        // Every migration is recorded once, in order, and the session is one typed row.
        let names = try await phone.read { try $0.db.query("SELECT name FROM migrations ORDER BY position", []) { $0.text(0) } }
        #expect(names == LocalDatabase.migrations.map(\.name))
        #expect(try await phone.read { try $0.db.scalarInt("SELECT count(*) FROM meta WHERE key IN ('epoch', 'cursor', 'rebasing', 'view_repull')") } == 0)

        // The sync meets the new history, offers the left copies again and sends the edits.
        try await phone.sync()
        try await phone.sync()
        let expected: [String: JSONObject?] = ["a": todo("a pending"), "b": todo("b in doubt"), "c": nil, "d": todo("d"), "e": todo("e"),
                                               "f": todo("f"), "n": todo("new")]
        for (id, data) in expected {
            #expect(world.serverData("todos", id) == data, "server \(id)")
            #expect(try await phone.data("todos", id) == data, "store \(id)")
        }
        #expect(try await phone.pendingChanges().isEmpty)
        #expect(try await phone.status().rebasing == false)
        await phone.close()
        store = nil
        phone = try world.device("fixture-phone", path: path)
        #expect(try await phone.data("todos", "n") == todo("new"), "opened again, the file is of the current schema")
        await phone.close()
    }

    /// `Fixtures/store-schema7-view.sqlite`, by the same release: records a…f synced; then
    /// the view changed (`view_changed`), the cursor went back to the start, the first page
    /// (a, b) was pulled and marked seen, and the next page failed: a view re-pull in
    /// progress. Then a put of d queued.
    @Test func aFileWithAViewRePullInProgressOpensAndFinishesIt() async throws {
        let dir = try TemporaryDirectory()
        let path = try fixture("store-schema7-view.sqlite", in: dir)
        // The same epoch, seen through the new view: a, b, c and e (d and f left it), c and e
        // written since.
        let world = World()
        let writer = try world.device("writer")
        for id in ["a", "b", "c", "e"] { try await writer.put(todo(id), in: "todos", id: id) }
        try await writer.sync()
        for id in ["c", "e"] { try await writer.put(todo(id + " now"), in: "todos", id: id) }
        try await writer.sync()
        let phone = try world.device("fixture-view", path: path)
        #expect(try await phone.status().rebasing == false)
        #expect(try await phone.status().cursor?.seq == 2)
        #expect(try await phone.pendingChanges().map(\.id) == ["d"])
        #expect(try await phone.read { try $0.session().phase } == .viewRePulling(Epoch("01KB83JBW0QW2BTHPY19BCEG6R")!))
        #expect(try await phone.read { try $0.db.scalarInt("SELECT count(*) FROM view_seen") } == 2)

        try await phone.sync()
        #expect(try await phone.read { try $0.session().phase } == .following(Epoch("01KB83JBW0QW2BTHPY19BCEG6R")!))
        #expect(try await phone.read { try $0.db.scalarInt("SELECT count(*) FROM view_seen") } == 0)
        // What the re-pull brought is there; f, which it did not bring, is dropped and never
        // offered again; d's own edit stays the app's.
        #expect(try await phone.data("todos", "c") == todo("c now"))
        #expect(try await phone.data("todos", "e") == todo("e now"))
        #expect(try await phone.data("todos", "f") == nil)
        #expect(world.serverData("todos", "f") == nil)
        #expect(try await phone.data("todos", "d") == todo("d pending"))
        await phone.close()
    }

    /// A file a later SDK migrated (a migration this one does not know) is refused, and
    /// nothing in it changes.
    @Test func aFileOfALaterSchemaIsRefused() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path + "/store.sqlite"
        let world = World()
        var store: OutpostStore? = try world.device("phone", path: path)
        await store!.close()
        store = nil
        let raw = try Connection(path: path, flags: [.readWrite])
        try raw.run("INSERT INTO migrations(position, name) VALUES (?, 'from the future')", [.integer(Int64(LocalDatabase.migrations.count + 1))])
        raw.close()
        #expect(throws: OutpostError.schemaTooNew(LocalDatabase.migrations.count + 1)) { try world.device("phone", path: path) }
        let check = try Connection(path: path, flags: [.readOnly])
        #expect(try check.scalarInt("SELECT count(*) FROM migrations") == Int64(LocalDatabase.migrations.count + 1))
        check.close()
    }
}
