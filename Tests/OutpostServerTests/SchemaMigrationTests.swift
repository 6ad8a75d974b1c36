import Foundation
import OutpostCore
import OutpostCrypto
import OutpostPostgres
import OutpostSQLite
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// The server's schemas as named lists of migrations (docs/architecture.md, "Schema
/// migrations"): the released migrations never change, and a database of every schema
/// state `main` shipped, made by the DDL of that release (Tests/server-schemas), opens with
/// today's server, migrates to the schema a new database gets, and keeps its rows.
@Suite(.serverLogs) struct SchemaMigrationTests {
    // MARK: The lists

    /// Each released migration by name, with the SHA-256 of its SQL. A migration is added
    /// here when it is released, and never changed: a change to what it made is a new
    /// migration at the end of the list.
    static let releasedSQLite: [(String, String)] = [
        ("sync 1: spaces, records, applied_changes", "b25ebc145d21cb8c4ac75ac838bb78a324fef64c4860eb66ecab6c18cf6f82ff"),
        ("sync 2: records.lineage", "98d025da3b343ecf80f5602c790c21a4b3ac440b23991fd77f24d07b2b6400b9"),
        ("sync 3: records.same_as", "9625bdeeb3906800a99f5180bc09987177ba2ac995bee0923a2353de251f9af9"),
        ("sync 4: departures", "5797323d2377b2c7b61192550577ae3bc742d2a67e484db026cdfbce852fd679"),
        ("sync 5: view_index", "f4b275b361333f6f1ead027867e1d4c86d5e9bcfc43a2cc58735e7273d21be18"),
        ("sync 6: spaces.horizon_seq, records_tombstones", "1d4bf6a2d7f36ffb1ea2471d12fcb8a7436b2bf62106f0d69b463cf00c69c163"),
        ("sync 7: devices, device_syncs", "88ee98adecc77e4792e2cda2ef70155645e96b06a3d8241641714dcace2c7cda"),
        ("sync 8: webhook_outbox, webhooks, webhook_cursors, webhook_dead_letters", "36b1b092c8c7ca0c3d8aca7f42e7e51edefb1e9813fac3d24eba561cabcff604"),
        ("sync 9: epoch_history", "0c22c6d2943925c35e041331f379cfef9193c0d9397a3232603c65536c068d87"),
        ("sync 10: records.subject, webhook_outbox.subject, devices.subject", "daf5726856096b8c7912427339c7f0053c8137ba1f49caa8eaa5f4d3e38d0663"),
        ("sync 11: spaces.record_bytes", "74b24e428bc9f44a3d1e25b26e3a919545bffc6386f7d8d1302d17de818f73e9"),
        ("media 1: media, uploads, upload_chunks", "b259626ca4b09f306b3ebf178f942314498b1b3902e73ff5d5895ca31b4f2750"),
        ("media 2: tus_uploads", "c2c17a0c038aa26d4b029393bce2c429424c4b9f1f296e55f7afe4a5697ca70f"),
        ("view_index without view_index_seq", "1f22e90b2f62aff1eddb6d837fd30583e21d507b56e958abf79f9049d2462b81"),
        ("devices.conflicts, devices.resolved", "81061365a99d1d69aff30f1fc04d6903a591b5b9a62cac7c299b03294da9914d"),
        ("webhook_batches", "1e59b51189541f7ad815e1f35ed94efe86b5d312fb385a15b0bface9b45097b8"),
        ("records.resolved, webhook_outbox.resolved", "7f4db100d73f4c780420c5868bb3d195f82557b06422fd8248b1959ebfbc2197"),
        ("client_subjects", "42e5dac3b60a61a237672ad4b0f26bb286f866bb0e27b05c941cc7e2a3b56505"),
        ("devices.last_push, last_pull, pull cursor and view, last_active", "5a0ff0e0d187c2f109e82c92957cb4ac3f7be8b6604cff30b01c03624cd4f0bb"),
    ]
    static let releasedPostgres: [(String, String)] = [
        ("sync 1: meta, spaces, records, applied_changes, outpost_lock_spaces, media, uploads, upload_chunks", "6bae312449cb352c7b645a00839d62a97f816bce5027375c1e168a57a774fb86"),
        ("sync 2: records.lineage", "0fe525aaf827ce80bfcff4d671fe265af4193a28243e4ade8f3bec79e7874b9f"),
        ("sync 3: records.same_as", "045567a7c0cfcbc805500eb7e9cbef02ee9c0a8319748bf31466a4f9d55c385e"),
        ("sync 4: no outpost_push", "d300616e454f15612658aa82bf056a0c074c6d12f7b3d098f9eb40b9bfc22bb4"),
        ("sync 5: departures", "ae20bc964aa32a466f57149eefff0ad58c7a3c5a78899ee7759dd839245be135"),
        ("sync 6: view_index", "e4b16b625c5e16e9e6cd607e045f67b134c529417a5b7803e1eccaeedf1be329"),
        ("sync 7: spaces.horizon_seq, records_tombstones", "df9630a74c9dc466156426402f4e1f660ed25d53b2dece646ec673ba467d0608"),
        ("sync 8: devices, device_syncs", "dd4b2a21a04418bdee016a106580d1f39e27dc455d54627c8735fa46502fc436"),
        ("sync 9: webhook_outbox, webhooks, webhook_cursors, webhook_dead_letters", "6714141d2692763a46558ee8544c3be80e1ab2dbb54f454403dc1a86188af7b4"),
        ("sync 10: epoch_history", "2bf557d89e3161ec96c3fdf23de866ba6cea7b708844b890f2d1b3205378c1a1"),
        ("sync 11: records.subject, webhook_outbox.subject, devices.subject", "4b2234fabd7461a9ec68ceb68806fd8fbb14a6fd098990b3d46fb77047fed5ff"),
        ("sync 12: spaces.record_bytes", "b0b43e7ec84b1fa6ea48cc4bcf969d69e53557627fc09df06c77fdbd53941278"),
        ("media 2: tus_uploads", "ea9e906e5f570236218a4f735e9af0c5884cd42c41720825657a1bd567c21a2e"),
        ("view_index without view_index_seq", "1f22e90b2f62aff1eddb6d837fd30583e21d507b56e958abf79f9049d2462b81"),
        ("devices.conflicts, devices.resolved", "4da750c935666216a25fd60bd17d6fc2ba5a25fc16ac2b1d760a9a397649211c"),
        ("webhook_batches", "e48948570a9432fba059f7714901dc22ed7780d8e0c34537ceaef21881563d89"),
        ("records.resolved, webhook_outbox.resolved", "b48f106035e0913c5bf93da1454e2ae9a20d033a60ce320ad6f2e0516ddcaedd"),
        ("client_subjects", "aa0b59678b6fd4895109ce4b23a95b0c3b524c2a5e413aa0aff85a688cf51308"),
        ("devices.last_push, last_pull, pull cursor and view, last_active", "cd25c6730f3f85b9a30fb27ed1b1d312cea6f721520c78baaf9a08e75f6214df"),
    ]

    /// Every migration of each list is released and pinned, in order: one edited, renamed,
    /// moved or removed fails here.
    @Test func theReleasedMigrationsAreAsReleased() {
        for (list, released) in [(SQLiteSchema.migrations.list, Self.releasedSQLite), (PostgresSchema.migrations.list, Self.releasedPostgres)] {
            let actual = list.map { ($0.name, SHA256.hex(Array($0.sql.utf8))) }
            #expect(actual.map(\.0) == released.map(\.0), "the list's names and order")
            for ((name, hash), (_, pinned)) in zip(actual, released) where hash != pinned {
                Issue.record("migration \"\(name)\" has SQL of SHA-256 \(hash), released as \(pinned)")
            }
        }
    }

    /// Each migration runs once, in order, in one transaction with its record: one that
    /// fails leaves nothing of itself, those before it stay recorded, and the next start
    /// runs it (as fixed) and what follows.
    @Test func aFailingMigrationLeavesNothingAndTheNextRunGoesOnFromIt() throws {
        let directory = try TemporaryDirectory(prefix: "migrations")
        defer { directory.remove() }
        let db = try SQLiteSession(path: directory.appending("m.sqlite"), durableSynchronous: .normal)
        defer { db.close() }
        let first = Migration(name: "one", sql: "CREATE TABLE one(x);")
        let broken = Migrations([first, Migration(name: "two", sql: "CREATE TABLE two(x); CREATE TABLE one(y);")]) { _ in [:] }
        #expect(throws: (any Error).self) { try broken.migrate(db, now: 1) }
        #expect(try db.query("SELECT name FROM migrations", []) { $0.text(0) } == ["one"])
        #expect(try db.query("SELECT name FROM sqlite_master WHERE name = 'two'", []) { $0.text(0) }.isEmpty, "the failed migration left nothing")
        let fixed = Migrations([first, Migration(name: "two", sql: "CREATE TABLE two(x);"), Migration(name: "three", sql: "CREATE TABLE three(x);")]) { _ in [:] }
        #expect(try fixed.migrate(db, now: 2) == ["two", "three"])
        #expect(try fixed.migrate(db, now: 3) == [], "nothing runs twice")
        // A database that recorded a migration this list does not hold was migrated by a
        // newer server: refused before anything runs.
        let older = Migrations([first, Migration(name: "two", sql: "CREATE TABLE two(x);"), Migration(name: "zero", sql: "CREATE TABLE zero(x);")]) { _ in [:] }
        #expect(throws: StoreError.self) { try older.migrate(db, now: 4) }
        #expect(try db.query("SELECT name FROM sqlite_master WHERE name = 'zero'", []) { $0.text(0) }.isEmpty)
    }

    /// A database that recorded a migration this server does not know was migrated by a
    /// newer one: the store refuses to open it and changes nothing, and `check` calls it
    /// damage (on SQLite), on both stores.
    @Test func aDatabaseMigratedByANewerServerIsRefused() async throws {
        try await withTemporaryDirectory(prefix: "schema-newer") { directory in
            let path = directory.appending("outpost.sqlite")
            await (try SQLiteSyncStore(configuration: .init(path: path))).close()
            #expect(try CheckCommand.run(dataDirectory: directory.path).problems.allSatisfy { !$0.contains("migration") })
            do {
                let db = try Connection(path: path)
                defer { db.close() }
                try db.run("INSERT INTO migrations(name, applied_at) VALUES ('from a newer server', 1)")
            }
            #expect(throws: StoreError.self) { try SQLiteSyncStore(configuration: .init(path: path)) }
            let problems = try CheckCommand.run(dataDirectory: directory.path).problems
            #expect(problems.contains { $0.contains("migrated by a newer outpost-server") }, "\(problems)")
        }
        let url = try await PostgresCluster.database(prefix: "schemanewer")
        await (try PostgresSyncStore(configuration: .init(url: url))).close()
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        try db.execute("INSERT INTO migrations(name, applied_at) VALUES ('from a newer server', 1)")
        #expect(try PostgresSchema.pending(db) == nil)
        #expect(throws: StoreError.self) { try PostgresSyncStore(configuration: .init(url: url)) }
    }

    // MARK: SQLite files of every release

    /// The SQLite states of `main`: (fixture, schema_version, media_schema_version).
    static let sqliteStates: [(String, Int, Int)] = [
        ("s1", 1, 0), ("s1-m1", 1, 1), ("s2-m1", 2, 1), ("s3-m1", 3, 1), ("s4-m1", 4, 1), ("s5-m1", 5, 1), ("s6-m1", 6, 1),
        ("s7-m1", 7, 1), ("s7-m2", 7, 2), ("s8-m2", 8, 2), ("s11-m2", 11, 2),
    ]

    @Test(arguments: sqliteStates.map(\.0)) func anSQLiteFileOfEveryReleaseOpensAndMigrates(_ fixture: String) async throws {
        let (_, sync, media) = Self.sqliteStates.first { $0.0 == fixture }!
        let directory = try TemporaryDirectory(prefix: "schema-\(fixture)")
        defer { directory.remove() }
        let path = directory.appending("outpost.sqlite")
        try FileManager.default.copyItem(atPath: Self.repositoryPath("Tests/server-schemas/sqlite-\(fixture).sqlite"), toPath: path)
        let opened = Self.now()
        let store = try SQLiteSyncStore(configuration: .init(path: path))
        let mediaStore = try MediaStore(configuration: .init(databasePath: path, mediaDirectory: directory.appending("media")))
        try await Self.checkRows(store, sync: sync)
        try await Self.checkMedia(mediaStore, media: media)
        await mediaStore.close()
        await store.close()

        let db = try Connection(path: path)
        defer { db.close() }
        #expect(try SQLiteSchema.pending(db) == [])
        // The numbers servers from before the list read.
        #expect(try db.scalarText("SELECT value FROM meta WHERE key = 'schema_version'") == "11")
        #expect(try db.scalarText("SELECT value FROM meta WHERE key = 'media_schema_version'") == "2")
        let history = try SQLiteSyncStore.epochHistory(db)
        #expect(Set(history.ended.keys) == [Self.e0])
        if sync < 11 {
            #expect(history.began >= opened && history.ended[Self.e0]! >= opened, "bounded by the upgrade: \(history)")
            #expect(try db.scalarText("SELECT value FROM meta WHERE key = 'retired_epochs'") == nil)
        } else {
            #expect(history.began == 1 && history.ended[Self.e0] == 25)
        }
        #expect(try db.scalarInt("SELECT count(*) FROM devices") == (sync >= 7 ? 1 : 0))
        #expect(try db.scalarInt("SELECT count(*) FROM webhook_outbox") == (sync >= 8 ? 1 : 0))

        // The schema is the one a new file gets.
        let fresh = directory.appending("fresh.sqlite")
        let new = try SQLiteSyncStore(configuration: .init(path: fresh))
        await new.close()
        let freshDB = try Connection(path: fresh)
        defer { freshDB.close() }
        #expect(try Self.schema(db) == Self.schema(freshDB))
    }

    /// Tables with their columns, and indexes with theirs, as SQLite describes them.
    static func schema(_ db: Connection) throws -> [String] {
        var out: [String] = []
        for (type, name, table) in try db.query("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_autoindex%' ORDER BY type, name", [],
                                                { ($0.text(0), $0.text(1), $0.text(2)) }) {
            switch type {
            case "table":
                let columns = try db.query("SELECT name, type, \"notnull\", coalesce(dflt_value, ''), pk FROM pragma_table_xinfo(?)", [.text(name)]) {
                    "\($0.text(0)) \($0.text(1)) \($0.int64(2)) \($0.text(3)) \($0.int64(4))"
                }
                out.append("table \(name): " + columns.joined(separator: ", "))
            case "index":
                let columns = try db.query("SELECT coalesce(name, '') FROM pragma_index_info(?)", [.text(name)]) { $0.text(0) }
                let sql = try db.scalarText("SELECT coalesce(sql, '') FROM sqlite_master WHERE name = ?", [.text(name)]) ?? ""
                let partial = sql.range(of: " WHERE ").map { String(sql[$0.upperBound...]) } ?? ""
                out.append("index \(name) on \(table)(\(columns.joined(separator: ", "))) \(sql.hasPrefix("CREATE UNIQUE") ? "unique" : "") \(partial)")
            default:
                out.append("\(type) \(name) on \(table)")
            }
        }
        return out
    }

    // MARK: PostgreSQL databases of every release

    /// The PostgreSQL states of `main`: (fixture, schema_migrations, media_schema_version).
    static let postgresStates: [(String, Int, Int)] = [
        ("p1", 1, 1), ("p2", 2, 1), ("p3", 3, 1), ("p4", 4, 1), ("p5", 5, 1), ("p6", 6, 1), ("p7", 7, 1), ("p8", 8, 1),
        ("p8-m2", 8, 2), ("p9-m2", 9, 2), ("p12-m2", 12, 2),
    ]

    @Test(arguments: postgresStates.map(\.0)) func aPostgresDatabaseOfEveryReleaseMigrates(_ fixture: String) async throws {
        let (_, sync, media) = Self.postgresStates.first { $0.0 == fixture }!
        let url = try await PostgresCluster.database(prefix: "schema")
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        try db.execute(try String(contentsOfFile: Self.repositoryPath("Tests/server-schemas/postgres-\(fixture).sql"), encoding: .utf8))
        let opened = Self.now()
        let store = try PostgresSyncStore(configuration: .init(url: url))
        #expect(store.epoch == Self.e1)
        try await Self.checkRows(store, sync: sync)
        try await withTemporaryDirectory(prefix: "schema-media") { directory in
            var configuration = MediaStore.Configuration(databasePath: directory.appending("unused.sqlite"), mediaDirectory: directory.appending("media"))
            configuration.postgresURL = url
            let config = configuration
            let mediaStore = try await blocking { try MediaStore(configuration: config) }
            try await Self.checkMedia(mediaStore, media: media)
            await mediaStore.close()
        }
        await store.close()

        #expect(try PostgresSchema.pending(db) == [])
        #expect(try db.query("SELECT max(version) FROM schema_migrations").int64(0, 0) == 12)
        #expect(try db.query("SELECT value FROM meta WHERE key = 'media_schema_version'").text(0, 0) == "2")
        let ended = try db.query("SELECT epoch, ended_at, (SELECT value FROM meta WHERE key = 'history_began_at') FROM epoch_history")
        #expect(ended.count == 1 && ended.text(0, 0) == Self.e0.rawValue)
        if sync < 12 {
            #expect(ended.int64(0, 1) >= opened && Int64(ended.text(0, 2))! >= opened)
        } else {
            #expect(ended.int64(0, 1) == 25 && ended.text(0, 2) == "1")
        }
        #expect(try db.query("SELECT count(*) FROM devices").int64(0, 0) == (sync >= 8 ? 1 : 0))
        #expect(try db.query("SELECT count(*) FROM webhook_outbox").int64(0, 0) == (sync >= 9 ? 1 : 0))
        #expect(try db.query("SELECT count(*) FROM pg_proc WHERE proname = 'outpost_push'").int64(0, 0) == 0)

        // The schema is the one a new database gets.
        let freshURL = try await PostgresCluster.database(prefix: "schemafresh")
        let fresh = try PostgresSyncStore(configuration: .init(url: freshURL))
        await fresh.close()
        let freshDB = try PostgresConnection(url: freshURL)
        defer { freshDB.close() }
        #expect(try Self.schema(db) == Self.schema(freshDB))
    }

    /// Columns, indexes and functions of the public schema, as PostgreSQL describes them.
    static func schema(_ db: PostgresConnection) throws -> [String] {
        var out: [String] = []
        let columns = try db.query("""
            SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, ''), coalesce(collation_name, ''), ordinal_position
              FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position
            """)
        for i in 0..<columns.count {
            out.append("column \(columns.text(i, 0)).\(columns.text(i, 1)) \(columns.text(i, 2)) \(columns.text(i, 3)) \(columns.text(i, 4)) \(columns.text(i, 5))")
        }
        let indexes = try db.query("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname")
        for i in 0..<indexes.count { out.append("index \(indexes.text(i, 0)): \(indexes.text(i, 1))") }
        let functions = try db.query("""
            SELECT p.proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'public' ORDER BY 1, 2
            """)
        for i in 0..<functions.count { out.append("function \(functions.text(i, 0))(\(functions.text(i, 1)))") }
        return out
    }

    // MARK: What every fixture holds (make-fixtures.py)

    static let e0 = Epoch("01JE0000000000000000000000")!
    static let e1 = Epoch("01JE1000000000000000000000")!

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// A path in the repository.
    static func repositoryPath(_ relative: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(relative).path
    }

    /// The fixture's records, change ids and counters as any server of today serves them:
    /// pages, replays of its change ids, the next seq, the spaces' record bytes.
    static func checkRows(_ store: any SyncStore, sync: Int) async throws {
        #expect(store.epoch == e1)
        let page = try await store.page(PageRequest(space: "sp", afterSeq: 0, limit: 100, maxBytes: 1 << 20, collections: nil))
        let records = try decodePage(page)
        #expect(page.head == 5)
        #expect(records.map(\.id) == ["a", "b", "c"] && records.map(\.version.seq) == [1, 3, 5] && records.map(\.deleted) == [false, false, true])
        #expect(records.map(\.data) == [["t": "x"], ["t": "y"], nil])
        #expect(records.map(\.updatedAt) == [10, 30, 50] && records.map(\.updatedBy) == ["p", "q", "q"] && records.map(\.clientTime) == [5, nil, nil])
        // The rotation gave a and b their E0 versions as lineage (from sync 2 on); a state
        // of sync 2 takes its lineage as its sameAs (sync 3), one of later releases kept its own.
        let lineage: [Version?] = sync >= 2 ? [Version(epoch: e0, seq: 1), Version(epoch: e0, seq: 2), nil] : [nil, nil, nil]
        let sameAs: [Version?] = sync == 2 ? lineage : sync >= 3 ? [Version(epoch: e0, seq: 1), nil, nil] : [nil, nil, nil]
        #expect(records.map(\.lineage) == lineage && records.map(\.sameAs) == sameAs)
        // No state of a release before resolutions were kept carries a mark.
        #expect(records.allSatisfy { $0.resolved == nil })
        let other = try decodePage(try await store.page(PageRequest(space: "other", afterSeq: 0, limit: 100, maxBytes: 1 << 20, collections: nil)))
        #expect(other.map(\.id) == ["z"] && other.first?.data == ["n": 1])
        // collection + id + data of every record, tombstones included: "notes" "z" {"n":1};
        // "todos" "a" {"t":"x"}, "todos" "b" {"t":"y"}, "todos" "c".
        let bytes = try await store.spaces(after: "", limit: 10)
        let expected: [Int64] = [13, 36]
        #expect(bytes.map(\.name) == ["other", "sp"] && bytes.map(\.recordBytes) == expected, "\(bytes)")
        // Its change ids are remembered (other content under one is refused), and the next
        // write takes the next seq.
        let results = try await store.push(space: "sp", clientId: "d", items: [prepared("c-a", id: "a", base: nil), prepared("c-d", id: "d", base: nil)], now: now())
        #expect(results.map(\.status) == [.rejected, .applied] && results[0].error?.code == "change_id_reused")
        #expect(results[1].version == Version(epoch: e1, seq: 6))
    }

    /// The media rows of the fixture, read as the media service reads them.
    static func checkMedia(_ store: MediaStore, media: Int) async throws {
        let space = SpaceName("sp")!
        let upload = try await store.upload(UploadID(String(repeating: "a", count: 32))!)
        #expect((upload != nil) == (media >= 1))
        if media >= 1 {
            #expect(upload?.chunkCount == 2 && upload?.state == .open)
            #expect(try await store.receivedChunks(UploadID(String(repeating: "a", count: 32))!) == [0])
            #expect(try await store.media(space: space, id: MediaID(SHA256.hex(Array("media".utf8)))!)?.size == 5)
        }
        let tus = try await store.tusUpload(UploadID(String(repeating: "b", count: 32))!)
        #expect(tus?.offset == (media >= 2 ? 4 : nil))
    }
}
