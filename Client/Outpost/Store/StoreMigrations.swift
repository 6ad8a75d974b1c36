import OutpostCore
import OutpostSQLite

// The store file's schema, as a list of named migrations (the model of GRDB's
// `DatabaseMigrator`): each runs once, in the list's order; the ones a file lacks run
// together in one transaction, and each name is recorded in `migrations` as it runs.
//
// A released migration is frozen: never edited again, and a change of the schema is a new
// migration at the end of the list. So its body is only what it was at its release: SQL
// written inline (never built from the live code's constants), and, where data must be
// transformed in Swift, a helper of Store/Migrations/ that works on the tables as they were
// then and that no live code uses. A migration gets only the file's `Connection`, never the
// `LocalDatabase`, so it cannot call the live storage code. `MigrationTests` pins each
// migration's frozen text (`StoreMigration.frozenText`) and each helper's source by SHA-256,
// and opens files of every released schema (Tests/OutpostTests/Fixtures) to check what they
// held survives.

/// One step of the schema.
struct StoreMigration: Sendable {
    /// A part of a migration's body; the parts run in order.
    enum Part: Sendable {
        /// SQL, as released.
        case sql(String)
        /// SQL, as released, run only on a file that had a schema before this open.
        case sqlOnOlderFile(String)
        /// A data transformation in Swift: a frozen helper of Store/Migrations/, named by a
        /// version string bumped by hand with any change to it.
        case swift(version: String, run: @Sendable (Connection) throws -> Void)
    }

    let name: String
    let parts: [Part]

    init(_ name: String, _ parts: Part...) {
        self.name = name
        self.parts = parts
    }

    /// What is pinned by SHA-256 once released: each part's SQL, and a Swift part's version.
    var frozenText: String {
        parts.map { part in
            switch part {
            case .sql(let sql): return "sql\n" + sql
            case .sqlOnOlderFile(let sql): return "sql on an older file\n" + sql
            case .swift(let version, _): return "swift " + version
            }
        }.joined(separator: "\n")
    }

    /// Runs inside the migration transaction. `newFile`: the file had no schema before this
    /// open.
    func run(_ db: Connection, newFile: Bool) throws {
        for part in parts {
            switch part {
            case .sql(let sql): try db.execute(sql)
            case .sqlOnOlderFile(let sql): if !newFile { try db.execute(sql) }
            case .swift(_, let run): try run(db)
            }
        }
    }
}

extension LocalDatabase {
    /// Every migration, in order. Append only.
    static let migrations: [StoreMigration] = [
        StoreMigration("1 records, queue, aside, quarantine, retired epochs", .sql("""
                CREATE TABLE records(
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    data BLOB,
                    deleted INTEGER NOT NULL DEFAULT 0,
                    pending INTEGER NOT NULL DEFAULT 0,
                    version TEXT,
                    server_data BLOB,
                    server_deleted INTEGER NOT NULL DEFAULT 0,
                    updated_at INTEGER,
                    updated_by TEXT,
                    client_time INTEGER,
                    own_change_id TEXT,
                    epoch_check INTEGER NOT NULL DEFAULT 0,
                    PRIMARY KEY(collection, id)) WITHOUT ROWID;
                CREATE INDEX records_epoch_check ON records(epoch_check) WHERE epoch_check = 1;
                CREATE TABLE queue(
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    change_id TEXT NOT NULL UNIQUE,
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    op TEXT NOT NULL,
                    data BLOB,
                    base_version TEXT,
                    client_time INTEGER NOT NULL,
                    state TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at INTEGER NOT NULL DEFAULT 0,
                    last_error TEXT,
                    error_code TEXT,
                    origin TEXT NOT NULL DEFAULT 'local',
                    origin_updated_at INTEGER,
                    created_at INTEGER NOT NULL);
                CREATE INDEX queue_record ON queue(collection, id, position);
                CREATE INDEX queue_state ON queue(state);
                CREATE TABLE aside(
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    version TEXT NOT NULL,
                    deleted INTEGER NOT NULL,
                    data BLOB,
                    updated_at INTEGER NOT NULL,
                    updated_by TEXT NOT NULL,
                    client_time INTEGER,
                    PRIMARY KEY(collection, id)) WITHOUT ROWID;
                CREATE TABLE quarantine(
                    number INTEGER PRIMARY KEY AUTOINCREMENT,
                    collection TEXT,
                    id TEXT,
                    version TEXT,
                    raw BLOB NOT NULL,
                    reason TEXT NOT NULL,
                    quarantined_at INTEGER NOT NULL);
                CREATE TABLE retired_epochs(
                    number INTEGER PRIMARY KEY AUTOINCREMENT,
                    epoch TEXT NOT NULL);
                """)),
        // Uploads kept until the server holds their file (Media/UploadRows.swift).
        StoreMigration("2 media uploads", .sql("""
                CREATE TABLE media_uploads(
                    number INTEGER PRIMARY KEY AUTOINCREMENT,
                    path TEXT NOT NULL UNIQUE,
                    size INTEGER NOT NULL,
                    modified_ns INTEGER NOT NULL,
                    device INTEGER NOT NULL,
                    inode INTEGER NOT NULL,
                    sha256 TEXT NOT NULL,
                    content_type TEXT NOT NULL,
                    filename TEXT,
                    upload_id TEXT,
                    chunk_size INTEGER,
                    received BLOB NOT NULL DEFAULT x'',
                    state TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at INTEGER NOT NULL DEFAULT 0,
                    last_error TEXT,
                    error_code TEXT,
                    created_at INTEGER NOT NULL);
                """)),
        // One model per record (Engine/RecordModel.swift): schema 2's `records`, `aside` and
        // `queue` become `records` and `edits` (Migrations/Migration3.swift converts the rows).
        StoreMigration("3 record models", .sql("""
                ALTER TABLE records RENAME TO records_v2; ALTER TABLE queue RENAME TO queue_v2;
                DROP INDEX IF EXISTS records_epoch_check; DROP INDEX IF EXISTS queue_record; DROP INDEX IF EXISTS queue_state;
                CREATE TABLE records(
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    shows INTEGER NOT NULL,
                    view_data BLOB,
                    view_deleted INTEGER NOT NULL DEFAULT 0,
                    pending INTEGER NOT NULL DEFAULT 0,
                    s_version, s_data, s_deleted, s_readable, s_updated_at, s_updated_by, s_client_time, s_lineage, s_change_id, s_same_as,
                    l_version, l_data, l_deleted, l_readable, l_updated_at, l_updated_by, l_client_time, l_lineage, l_change_id, l_same_as,
                    PRIMARY KEY(collection, id)) WITHOUT ROWID;
                CREATE INDEX records_left ON records(l_version) WHERE l_version IS NOT NULL;
                CREATE TABLE edits(
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    change_id TEXT NOT NULL UNIQUE,
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    local_id TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    lineage_version TEXT,
                    lineage_updated_at INTEGER,
                    carried_lineage TEXT,
                    deleted INTEGER NOT NULL,
                    data BLOB,
                    client_time INTEGER NOT NULL,
                    created_at INTEGER NOT NULL,
                    made_on TEXT NOT NULL,
                    made_on_edit TEXT,
                    m_version, m_data, m_deleted, m_readable, m_updated_at, m_updated_by, m_client_time, m_lineage, m_change_id, m_same_as,
                    delivery TEXT NOT NULL,
                    sent_base TEXT,
                    a_version, a_data, a_deleted, a_readable, a_updated_at, a_updated_by, a_client_time, a_lineage, a_change_id, a_same_as,
                    error_code TEXT,
                    last_error TEXT,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at INTEGER NOT NULL DEFAULT 0);
                CREATE INDEX edits_record ON edits(collection, id, position);
                CREATE INDEX edits_delivery ON edits(delivery);
                """),
            .swift(version: Migration3.version, run: Migration3.convert),
            .sql("DROP TABLE records_v2; DROP TABLE queue_v2; DROP TABLE aside; DELETE FROM meta WHERE key = 'rebased_through'")),
        // The records a view re-pull brought (Sync/SyncSession.swift, docs/rules.md).
        StoreMigration("4 view re-pull seen", .sql("CREATE TABLE IF NOT EXISTS view_seen(collection TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY(collection, id)) WITHOUT ROWID")),
        // The wire form of each unsettled put of an end-to-end encrypted store, sealed when
        // the edit is saved (Encryption/SealedEdits.swift), and how an upload seals its file
        // (Encryption/SealedMedia.swift). A file made before encryption existed holds records
        // in clear; a new file takes the mode of the store that opens it (OutpostStore.init).
        StoreMigration("5 sealed edits and uploads", .sql("""
                CREATE TABLE sealed(
                    change_id TEXT PRIMARY KEY,
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    data BLOB NOT NULL) WITHOUT ROWID;
                CREATE INDEX sealed_record ON sealed(collection, id);
                ALTER TABLE media_uploads ADD COLUMN seal_kid TEXT;
                ALTER TABLE media_uploads ADD COLUMN seal_prefix BLOB;
                ALTER TABLE media_uploads ADD COLUMN seal_segment INTEGER;
                """),
            .sqlOnOlderFile("INSERT OR REPLACE INTO meta(key, value) VALUES ('encryption', 'none')")),
        // The telemetry outbox (Journal/Telemetry.swift).
        StoreMigration("6 telemetry outbox", .sql("""
                CREATE TABLE IF NOT EXISTS telemetry_outbox(
                    number INTEGER PRIMARY KEY AUTOINCREMENT,
                    entry BLOB NOT NULL);
                """)),
        // Where downloads write their temporary files (Store/Compaction.swift).
        StoreMigration("7 download directories", .sql("CREATE TABLE IF NOT EXISTS download_directories(path TEXT PRIMARY KEY) WITHOUT ROWID;")),
        // The sync session's state, typed (Sync/SyncSession.swift): one row instead of the
        // meta keys `epoch`, `rebasing`, `cursor` and `view_repull` (Migrations/Migration8.swift
        // moves them).
        StoreMigration("8 sync session", .sql("""
                CREATE TABLE sync_session(
                    one INTEGER PRIMARY KEY CHECK (one = 1),
                    phase TEXT NOT NULL,
                    epoch TEXT,
                    cursor TEXT);
                """),
            .swift(version: Migration8.version, run: Migration8.moveSession),
            .sql("DELETE FROM meta WHERE key IN ('epoch', 'cursor', 'rebasing', 'view_repull')")),
        // The resolver's decisions (Journal/ConflictJournal.swift). `has_base` tells a conflict
        // without a base from one whose base was a tombstone; `merged` is a `write`'s data.
        StoreMigration("9 conflict journal", .sql("""
                CREATE TABLE conflict_journal(
                    number INTEGER PRIMARY KEY AUTOINCREMENT,
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    change_id TEXT NOT NULL,
                    local BLOB,
                    server BLOB,
                    server_version TEXT NOT NULL,
                    has_base INTEGER NOT NULL,
                    base BLOB,
                    base_deleted INTEGER NOT NULL,
                    base_version TEXT,
                    resolution TEXT NOT NULL,
                    merged BLOB,
                    resolver TEXT NOT NULL,
                    decided_at INTEGER NOT NULL,
                    written_change_id TEXT);
                CREATE INDEX conflict_journal_decided ON conflict_journal(decided_at);
                """)),
        // The app version the server wants for an edit it answered `upgrade_required`
        // (Edit.upgradeTo; docs/rules.md, "App versions").
        StoreMigration("10 edits held for an app upgrade", .sql("ALTER TABLE edits ADD COLUMN upgrade_to INTEGER")),
        // Queries (Records/): `doc`, the JSON text the app sees of a live record (NULL for a
        // tombstone or a record it cannot read), computed from the row, never stored; the
        // catalog of the indexes the app declared (Records/QueryIndexes.swift). Text, since
        // SQLite 3.45 and later read a BLOB given to a JSON function as its binary JSON.
        StoreMigration("11 queries", .sql("""
                ALTER TABLE records ADD COLUMN doc TEXT GENERATED ALWAYS AS (CAST(CASE shows WHEN 0 THEN s_data WHEN 1 THEN view_data END AS TEXT)) VIRTUAL;
                CREATE TABLE query_indexes(
                    number INTEGER PRIMARY KEY AUTOINCREMENT,
                    definition TEXT NOT NULL UNIQUE);
                """)),
        // An edit whose conflict the resolver left for a person (`Resolution.leaveForPerson`,
        // Edit.inConflict): 1 while it waits for the app to settle it, NULL otherwise.
        StoreMigration("12 conflicts left for a person", .sql("ALTER TABLE edits ADD COLUMN in_conflict INTEGER")),
        // Resolutions told both ways: the mark a resolved write carries (Edit.resolves, JSON
        // `{"resolver", "outcome"}`), and in the journal a decision made on another device that
        // replaced this device's write (ConflictEntry.decidedElsewhere).
        StoreMigration("13 resolutions told both ways", .sql("""

                ALTER TABLE edits ADD COLUMN resolves TEXT;
                ALTER TABLE conflict_journal ADD COLUMN decided_by TEXT;
                ALTER TABLE conflict_journal ADD COLUMN overwrote TEXT;
                ALTER TABLE conflict_journal ADD COLUMN remote_outcome TEXT;
                """)),
        // The session's phase stored as a code (SyncPhase.storedCode), not as the prose
        // migration 8 wrote: 0 detached (no epoch), 1 following, 2 view re-pulling,
        // 3 refreshing, 4 re-pulling, 5 re-pulling after a view change. A phase without its
        // epoch, or one no release wrote, becomes detached, as it was read before.
        StoreMigration("14 session phase as a code", .sql("""
                CREATE TABLE sync_session_coded(
                    one INTEGER PRIMARY KEY CHECK (one = 1),
                    phase INTEGER NOT NULL CHECK (phase BETWEEN 0 AND 5),
                    epoch TEXT,
                    cursor TEXT,
                    CHECK ((phase = 0) = (epoch IS NULL)));
                INSERT INTO sync_session_coded(one, phase, epoch, cursor)
                    SELECT one, code, CASE code WHEN 0 THEN NULL ELSE epoch END, cursor FROM (
                        SELECT one, epoch, cursor,
                            CASE WHEN epoch IS NULL THEN 0 ELSE CASE phase
                                WHEN 'following' THEN 1
                                WHEN 'view re-pulling' THEN 2
                                WHEN 'refreshing' THEN 3
                                WHEN 're-pulling' THEN 4
                                WHEN 're-pulling, view changed' THEN 5
                                ELSE 0 END END AS code
                        FROM sync_session);
                DROP TABLE sync_session;
                ALTER TABLE sync_session_coded RENAME TO sync_session;
                """)),
    ]

    /// Brings the file's schema up to date: the migrations it lacks, in order, in one
    /// transaction. A file of a later SDK (a migration this one does not know, or a
    /// `schema_version` past this one's) throws `schemaTooNew`. Files made before the list
    /// (schema versions 1 to 7, kept in `meta`) count their first migrations as run.
    func migrate() throws {
        // A new file frees its pages with `PRAGMA incremental_vacuum` (compaction); the
        // setting takes only before the first table.
        let newFile = try db.scalarInt("SELECT count(*) FROM sqlite_master") == 0
        if newFile { try db.execute("PRAGMA auto_vacuum = INCREMENTAL") }
        try db.transaction {
            try db.execute("""
                CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS migrations(position INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
                """)
            var applied = try db.query("SELECT name FROM migrations ORDER BY position", []) { $0.text(0) }
            let version = try meta(.schemaVersion).flatMap { Int($0) } ?? 0
            if applied.isEmpty && version > 0 {
                // A file of the releases before the list: its version counts its migrations.
                guard version <= Self.migrations.count else { throw OutpostError.schemaTooNew(version) }
                applied = Self.migrations.prefix(version).map(\.name)
                for (i, name) in applied.enumerated() { try record(name, at: i + 1) }
            }
            let known = Self.migrations.map(\.name)
            guard applied.count <= known.count, Array(known.prefix(applied.count)) == applied else {
                throw OutpostError.schemaTooNew(max(version, applied.count))
            }
            for (i, migration) in Self.migrations.enumerated().dropFirst(applied.count) {
                try migration.run(db, newFile: newFile)
                try record(migration.name, at: i + 1)
            }
            // Older SDKs read the version and refuse a file past theirs.
            try setMeta(.schemaVersion, String(Self.migrations.count))
        }
    }

    private func record(_ name: String, at position: Int) throws {
        try db.run("INSERT INTO migrations(position, name) VALUES (?, ?)", [.integer(Int64(position)), .text(name)])
    }

    /// The schema version this SDK writes: the number of its migrations.
    static var schemaVersion: Int { migrations.count }
}
