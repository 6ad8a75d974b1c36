import Foundation
import OutpostCompression
import OutpostSQLite
import OutpostTestBasics
import Testing
@testable import Outpost

/// Store files of every released schema from 3 on (`Fixtures/store-schemaN.sqlite.gz`), each as
/// the SDK of that schema would have left it: `makeSchema` runs the frozen migrations 1…N on a
/// new file with that release's bookkeeping, and `writeSampleRows` writes its rows with SQL
/// of that schema (never today's storage code). `MigrationTests` opens each with today's SDK.
/// Gzipped (a few KB each: the files are mostly empty pages); `gunzip -k` one to look inside.
///
/// Written once, when a schema is released, and committed: `OUTPOST_WRITE_STORE_FIXTURES=1
/// swift test --filter StoreFixtures` writes the fixtures that do not exist yet and never
/// rewrites one. A new migration adds its schema to `schemas` (and its rows, when it adds
/// tables or columns that hold them) before it is released.
enum StoreFixtures {
    /// The schemas with a fixture made here. Schema 2 (and 7) also have fixtures the
    /// releases themselves wrote; schema 1 differs from 2 only by the empty table migration 2
    /// creates, so the schema 2 fixture covers its path.
    static let schemas = Array(3...14)

    static let e1 = "01KB83JBW0QW2BTHPY19BCEG6R"
    /// An epoch the store left (`retired_epochs`).
    static let e0 = "01KB83ABCDEFGHJKMNPQRSTVWX"
    static let t0: Int64 = 1_764_430_000_000

    /// A new file at `path` with migrations 1…`n` run, as the release of schema `n` made it:
    /// before the list of migrations (schemas up to 7) a file kept only
    /// `meta.schema_version`; since then it records each migration in `migrations` too, and
    /// a new file frees its pages incrementally. Small pages keep the fixtures small.
    static func makeSchema(_ n: Int, at path: String) throws -> Connection {
        let db = try Connection(path: path)
        try db.execute("PRAGMA page_size = 512")
        if n >= 8 { try db.execute("PRAGMA auto_vacuum = INCREMENTAL") }
        try db.transaction {
            try db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
            if n >= 8 { try db.execute("CREATE TABLE IF NOT EXISTS migrations(position INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)") }
            for (i, migration) in LocalDatabase.migrations.prefix(n).enumerated() {
                try migration.run(db, newFile: true)
                if n >= 8 { try db.run("INSERT INTO migrations(position, name) VALUES (?, ?)", [.integer(Int64(i + 1)), .text(migration.name)]) }
            }
            try db.run("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", [.text(String(n))])
        }
        return db
    }

    /// A device of space `team` that synced epoch E1 to `E1.8` and left epoch E0. Records:
    /// `a` synced; `b` synced with a put queued; `c` synced with a delete sent and unanswered;
    /// `n` created and queued; `r` a put the server rejected. Schema 9 on: two journal entries
    /// (the server's copy kept; a merge written). Schema 10 on: `h`, a put held for app
    /// version 3. Schema 12 on: `k`, a put whose conflict waits for a person (and its journal
    /// entry). Schema 13 on: `m`, a merge queued with its resolution mark, and a journal entry
    /// of a decision made on another device.
    static func writeSampleRows(_ n: Int, _ db: Connection) throws {
        let e1 = e1, t0 = t0
        func json(_ title: String) -> String { "CAST('{\"title\":\"\(title)\",\"done\":false}' AS BLOB)" }
        var sql = """
            INSERT INTO meta(key, value) VALUES ('space', 'team'), ('client_id', 'fixture-phone'), ('last_sync_at', '\(t0)');
            INSERT INTO retired_epochs(epoch) VALUES ('\(e0)');
            INSERT INTO records(collection, id, shows, view_data, view_deleted, pending,
                                s_version, s_data, s_deleted, s_readable, s_updated_at, s_updated_by, s_client_time, s_change_id) VALUES
                ('todos', 'a', 0, NULL, 0, 0, '\(e1).1', \(json("a")), 0, 1, \(t0), 'fixture-phone', \(t0), 'ch-a'),
                ('todos', 'b', 1, \(json("b pending")), 0, 1, '\(e1).2', \(json("b")), 0, 1, \(t0), 'fixture-phone', \(t0), 'ch-b0'),
                ('todos', 'c', 1, NULL, 1, 1, '\(e1).3', \(json("c")), 0, 1, \(t0), 'laptop', \(t0), NULL),
                ('todos', 'n', 1, \(json("new")), 0, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
                ('todos', 'r', 2, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
            INSERT INTO edits(position, change_id, collection, id, local_id, kind, deleted, data, client_time, created_at, made_on, made_on_edit,
                              m_version, m_data, m_deleted, m_readable, m_updated_at, m_updated_by, m_client_time, m_change_id,
                              delivery, sent_base, error_code, last_error, attempts, next_attempt_at) VALUES
                (1, 'ch-b', 'todos', 'b', 'ch-b', 'app', 0, \(json("b pending")), \(t0 + 100), \(t0 + 100), 'copy', NULL,
                 '\(e1).2', \(json("b")), 0, 1, \(t0), 'fixture-phone', \(t0), 'ch-b0', 'queued', NULL, NULL, NULL, 0, 0),
                (2, 'ch-c', 'todos', 'c', 'ch-c', 'app', 1, NULL, \(t0 + 200), \(t0 + 200), 'copy', NULL,
                 '\(e1).3', \(json("c")), 0, 1, \(t0), 'laptop', \(t0), NULL, 'sent', '\(e1).3', NULL, 'request not sent: connection refused', 1, \(t0 + 2200)),
                (3, 'ch-n', 'todos', 'n', 'ch-n', 'app', 0, \(json("new")), \(t0 + 300), \(t0 + 300), 'nothing', NULL,
                 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'queued', NULL, NULL, NULL, 0, 0),
                (4, 'ch-r', 'todos', 'r', 'ch-r', 'app', 0, \(json("too big")), \(t0 + 400), \(t0 + 400), 'nothing', NULL,
                 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'rejected', NULL, 'record_too_large', 'data is 3012 bytes encoded; the limit is 2000', 1, 0);

            """
        // The session: meta keys before migration 8, its row since.
        if n < 8 {
            sql += "INSERT INTO meta(key, value) VALUES ('epoch', '\(e1)'), ('cursor', '\(e1).8');\n"
        } else {
            // Prose until migration 14, a code since.
            let following = n < 14 ? "'following'" : "1"
            sql += "INSERT OR REPLACE INTO sync_session(one, phase, epoch, cursor) VALUES (1, \(following), '\(e1)', '\(e1).8');\n"
        }
        // A new file takes the encryption mode of the store that opens it (migration 5 on).
        if n >= 5 { sql += "INSERT INTO meta(key, value) VALUES ('encryption', 'none');\n" }
        if n >= 9 {
            sql += """
                INSERT INTO conflict_journal(collection, id, change_id, local, server, server_version, has_base, base, base_deleted, base_version,
                                             resolution, merged, resolver, decided_at, written_change_id) VALUES
                    ('todos', 'a', 'ch-a0', \(json("a mine")), \(json("a")), '\(e1).1', 0, NULL, 0, NULL, 'keepServer', NULL, 'lastWriteWins', \(t0 - 2000), NULL),
                    ('todos', 'b', 'ch-b0', \(json("b mine")), \(json("b theirs")), '\(e1).2', 1, \(json("b base")), 0, '\(e1).1',
                     'write', \(json("b merged")), 'mergeFields(lastWriteWins)', \(t0 - 1000), 'ch-b1');

                """
        }
        if n >= 10 {
            sql += """
                INSERT INTO records(collection, id, shows, view_data, view_deleted, pending,
                                    s_version, s_data, s_deleted, s_readable, s_updated_at, s_updated_by, s_client_time) VALUES
                    ('todos', 'h', 1, \(json("h for v3")), 0, 1, '\(e1).4', \(json("h")), 0, 1, \(t0), 'laptop', \(t0));
                INSERT INTO edits(position, change_id, collection, id, local_id, kind, deleted, data, client_time, created_at, made_on,
                                  m_version, m_data, m_deleted, m_readable, m_updated_at, m_updated_by, m_client_time,
                                  delivery, attempts, next_attempt_at, upgrade_to) VALUES
                    (5, 'ch-h', 'todos', 'h', 'ch-h', 'app', 0, \(json("h for v3")), \(t0 + 500), \(t0 + 500), 'copy',
                     '\(e1).4', \(json("h")), 0, 1, \(t0), 'laptop', \(t0), 'queued', 1, 0, 3);

                """
        }
        if n >= 12 {
            sql += """
                INSERT INTO records(collection, id, shows, view_data, view_deleted, pending,
                                    s_version, s_data, s_deleted, s_readable, s_updated_at, s_updated_by, s_client_time) VALUES
                    ('todos', 'k', 1, \(json("k mine")), 0, 1, '\(e1).6', \(json("k theirs")), 0, 1, \(t0 + 50), 'laptop', \(t0 + 50));
                INSERT INTO edits(position, change_id, collection, id, local_id, kind, deleted, data, client_time, created_at, made_on,
                                  m_version, m_data, m_deleted, m_readable, m_updated_at, m_updated_by, m_client_time,
                                  delivery, attempts, next_attempt_at, in_conflict) VALUES
                    (6, 'ch-k', 'todos', 'k', 'ch-k', 'app', 0, \(json("k mine")), \(t0 + 600), \(t0 + 600), 'copy',
                     '\(e1).5', \(json("k base")), 0, 1, \(t0), 'fixture-phone', \(t0), 'queued', 1, 0, 1);
                INSERT INTO conflict_journal(collection, id, change_id, local, server, server_version, has_base, base, base_deleted, base_version,
                                             resolution, merged, resolver, decided_at, written_change_id) VALUES
                    ('todos', 'k', 'ch-k', \(json("k mine")), \(json("k theirs")), '\(e1).6', 1, \(json("k base")), 0, '\(e1).5',
                     'leaveForPerson', NULL, 'custom', \(t0 - 700), NULL);

                """
        }
        if n >= 13 {
            sql += """
                INSERT INTO records(collection, id, shows, view_data, view_deleted, pending,
                                    s_version, s_data, s_deleted, s_readable, s_updated_at, s_updated_by, s_client_time) VALUES
                    ('todos', 'm', 1, \(json("m merged")), 0, 1, '\(e1).7', \(json("m theirs")), 0, 1, \(t0 + 70), 'laptop', \(t0 + 70));
                INSERT INTO edits(position, change_id, collection, id, local_id, kind, deleted, data, client_time, created_at, made_on,
                                  m_version, m_data, m_deleted, m_readable, m_updated_at, m_updated_by, m_client_time,
                                  delivery, attempts, next_attempt_at, resolves) VALUES
                    (7, 'ch-m', 'todos', 'm', 'ch-m', 'app', 0, \(json("m merged")), \(t0 + 700), \(t0 + 700), 'copy',
                     '\(e1).7', \(json("m theirs")), 0, 1, \(t0 + 70), 'laptop', \(t0 + 70), 'queued', 1, 0,
                     '{"resolver":"mergeFields(lastWriteWins)","outcome":"write"}');
                INSERT INTO conflict_journal(collection, id, change_id, local, server, server_version, has_base, base_deleted,
                                             resolution, resolver, decided_at, decided_by, overwrote, remote_outcome) VALUES
                    ('todos', 'c', 'ch-c0', \(json("c mine")), \(json("c")), '\(e1).3', 0, 0, 'keepServer', 'mergeFields(lastWriteWins)', \(t0 - 500),
                     'laptop', '\(e1).2', 'write');

                """
        }
        try db.transaction { try db.execute(sql) }
    }

    /// Writes the fixture of schema `n` to `path`, unpacked.
    static func unpack(_ n: Int, to path: String) throws {
        try unpack("store-schema\(n).sqlite.gz", to: path)
    }

    /// Writes the gzipped fixture `name` to `path`, unpacked.
    static func unpack(_ name: String, to path: String) throws {
        let packed = try Data(contentsOf: URL(fileURLWithPath: repositoryPath("Tests/OutpostTests/Fixtures/\(name)")))
        try Data(Gzip.decompress(packed, limit: 1 << 20)).write(to: URL(fileURLWithPath: path))
    }

    /// The cases migration 3 decides between, in a file of schema 2 with a re-pull in
    /// progress (`store-schema2-cases.sqlite.gz`): a copy kept aside later or earlier than
    /// the row's, by seq and by epoch (a longer one is later); rows marked for the re-pull
    /// (left copies); versions that do not parse; a row of nothing; a pending row's server
    /// copy; empty data; a queued edit before a sent one (the sent one goes first); a sent
    /// edit whose base does not parse; a put without data; rejected edits with and without a
    /// code; edits of records without a row.
    static func writeSchemaTwoCases(_ db: Connection) throws {
        let e1 = e1, e2 = "01KB83M7E8F7NRFDXZG9TZ7XRC", longer = e1 + "Z"
        try db.transaction {
            try db.execute("""
                INSERT INTO meta(key, value) VALUES ('space', 'team'), ('client_id', 'fixture-phone'), ('epoch', '\(e2)'), ('cursor', '\(e2).3'),
                    ('rebasing', '1'), ('rebased_through', '0');
                INSERT INTO records(collection, id, data, deleted, pending, version, server_data, server_deleted, updated_at, updated_by, client_time,
                                    own_change_id, epoch_check) VALUES
                    ('notes', 'x1', '{"t":"x1 row"}', 0, 0, '\(e1).5', NULL, 0, 10, 'p', 11, 'cx1', 0),
                    ('notes', 'x2', '{"t":"x2 row"}', 0, 0, '\(e1).9', NULL, 0, 20, 'p', NULL, NULL, 1),
                    ('notes', 'x3', '{"t":"x3 row"}', 0, 0, '\(e2).1', NULL, 0, 30, 'q', 31, NULL, 0),
                    ('notes', 'x4', '{"t":"x4 row"}', 0, 0, '\(longer).1', NULL, 0, 40, 'q', 41, NULL, 1),
                    ('notes', 'x5', '{"t":"x5"}', 0, 0, 'garbage', NULL, 0, 50, 'q', 51, NULL, 0),
                    ('notes', 'x6', '{"t":"x6"}', 0, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL, 0),
                    ('notes', 'x7', '{"t":"x7 mine"}', 0, 1, '\(e1).7', NULL, 1, 70, 'r', 71, NULL, 1),
                    ('notes', 'x8', x'', 0, 0, '\(e1).2', NULL, 0, 80, 'r', 81, NULL, 0),
                    ('notes', 'x9', '{"t":"x9 q"}', 0, 1, '\(e1).3', '{"t":"x9 s"}', 0, 90, 'r', NULL, NULL, 0),
                    ('notes', 'x10', '{"t":"x10"}', 0, 1, '\(e1).05', '{"t":"x10 s"}', 0, 100, 'r', NULL, NULL, 1),
                    ('notes', 'x13', '{"t":"x13"}', 0, 0, '\(e1).13', NULL, 0, 130, 'r', NULL, NULL, 0),
                    ('notes', 'x14', NULL, 1, 0, '\(e1).14', NULL, 0, 140, 'r', NULL, NULL, 1),
                    ('notes', 'x15', '{"t":"x15 s"}', 0, 1, '\(e1).15', '{"t":"x15 s"}', 0, 150, 'r', NULL, NULL, 0),
                    ('notes', 'x19', NULL, 0, 0, '\(e1).19', NULL, 0, 190, 'r', NULL, NULL, 0);
                INSERT INTO aside(collection, id, version, deleted, data, updated_at, updated_by, client_time) VALUES
                    ('notes', 'x1', '\(e1).7', 0, '{"t":"x1 aside"}', 12, 'pa', NULL),
                    ('notes', 'x2', '\(e1).3', 0, '{"t":"x2 aside"}', 22, 'pa', 23),
                    ('notes', 'x3', '\(e1).9', 1, NULL, 32, 'pa', NULL),
                    ('notes', 'x4', '\(e2).8', 0, '{"t":"x4 aside"}', 42, 'pa', NULL),
                    ('notes', 'x11', 'not a version', 0, '{"t":"x11"}', 110, 'pa', NULL),
                    ('notes', 'x12', '\(e2).12', 0, '{"t":"x12 aside"}', 120, 'pa', 121),
                    ('notes', 'x16', '\(e1).16', 1, '{"ignored":1}', 160, 'pa', NULL);
                INSERT INTO queue(change_id, collection, id, op, data, base_version, client_time, state, attempts, next_attempt_at, last_error, error_code,
                                  origin, origin_updated_at, created_at) VALUES
                    ('q-x7', 'notes', 'x7', 'put', x'', '\(e1).7', 700, 'pending', 0, 0, NULL, NULL, 'local', NULL, 701),
                    ('q-x9a', 'notes', 'x9', 'put', '{"t":"x9 q"}', '\(e1).2', 900, 'pending', 1, 5, 'boom', NULL, 'local', NULL, 901),
                    ('q-x9b', 'notes', 'x9', 'put', '{"t":"x9 sent"}', '\(e1).3', 902, 'in_flight', 2, 6, NULL, NULL, 'local', NULL, 903),
                    ('q-x9c', 'notes', 'x9', 'delete', NULL, NULL, 904, 'failed', 3, 7, 'nope', 'c1', 'local', NULL, 905),
                    ('q-x10', 'notes', 'x10', 'put', '{"t":"x10 q"}', 'bad base', 1000, 'in_flight', 0, 0, NULL, NULL, 'local', NULL, 1001),
                    ('q-x11', 'notes', 'x11', 'put', NULL, NULL, 1100, 'pending', 0, 0, NULL, NULL, 'reoffer', 1099, 1101),
                    ('q-x13', 'notes', 'x13', 'put', '{"t":"x13 q"}', '\(e1).13', 1300, 'rejected', 4, 0, NULL, NULL, 'local', NULL, 1301),
                    ('q-x15a', 'notes', 'x15', 'put', '{"t":"x15 s"}', '\(e1).15', 1500, 'in_doubt', 1, 0, NULL, NULL, 'local', NULL, 1501),
                    ('q-x15b', 'notes', 'x15', 'put', '{"t":"x15 s2"}', '\(e1).15', 1502, 'in_flight', 1, 0, NULL, NULL, 'local', NULL, 1503),
                    ('q-x17', 'notes', 'x17', 'put', '', '', 1700, 'rejected', 0, 0, 'why', NULL, 'local', NULL, 1701),
                    ('q-x18', 'notes', 'x18', 'delete', '{"t":"gone"}', '\(e1).18', 1800, 'rejected', 0, 0, NULL, 'rc', 'local', NULL, 1801),
                    ('q-x19', 'notes', 'x19', 'put', '{"t":"x19"}', '\(e1).19', 1900, 'pending', 0, 0, NULL, NULL, 'local', NULL, 1901);
                """)
        }
    }

    /// The file's schema: every table, index and trigger with its SQL.
    static func schema(_ db: Connection) throws -> [String] {
        try db.query("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name", []) { "\($0.text(0)) \($0.text(1)) \($0.text(2)) \($0.text(3))" }
    }
}

@Suite("Store fixtures of every released schema")
struct StoreFixtureMaker {
    /// Writes each fixture that does not exist yet (OUTPOST_WRITE_STORE_FIXTURES=1).
    @Test(.enabled(if: ProcessInfo.processInfo.environment["OUTPOST_WRITE_STORE_FIXTURES"] == "1"))
    func writeTheMissingFixtures() throws {
        let dir = try TemporaryDirectory()
        for n in StoreFixtures.schemas {
            let fixture = repositoryPath("Tests/OutpostTests/Fixtures/store-schema\(n).sqlite.gz")
            guard !FileManager.default.fileExists(atPath: fixture) else { continue }
            let path = dir.path + "/schema\(n).sqlite"
            let db = try StoreFixtures.makeSchema(n, at: path)
            try StoreFixtures.writeSampleRows(n, db)
            try db.execute("VACUUM")
            db.close()
            let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            try Data(Gzip.compress(bytes, level: 9)).write(to: URL(fileURLWithPath: fixture))
        }
        let cases = repositoryPath("Tests/OutpostTests/Fixtures/store-schema2-cases.sqlite.gz")
        if !FileManager.default.fileExists(atPath: cases) {
            let path = dir.path + "/cases.sqlite"
            let db = try StoreFixtures.makeSchema(2, at: path)
            try StoreFixtures.writeSchemaTwoCases(db)
            try db.execute("VACUUM")
            db.close()
            try Data(Gzip.compress(try Data(contentsOf: URL(fileURLWithPath: path)), level: 9)).write(to: URL(fileURLWithPath: cases))
        }
    }
}
