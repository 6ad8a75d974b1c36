import OutpostCore
import OutpostSQLite

/// A record's content: live data (compact JSON bytes of an object) or a tombstone.
struct Body: Hashable, Sendable {
    /// The data; nil for a tombstone.
    var data: [UInt8]?
    var deleted: Bool { data == nil }

    static let tombstone = Body(data: nil)

    /// The body of a record state.
    init(_ state: RecordState) {
        data = state.deleted ? nil : state.data.map(encodeObject)
    }

    init(data: [UInt8]?) { self.data = data }

    /// Same content: both tombstones, or equal JSON objects (member order ignored).
    func sameContent(as other: Body) -> Bool {
        switch (data, other.data) {
        case (nil, nil): return true
        case (let a?, let b?): return a == b || (try? decodeObject(a)) == (try? decodeObject(b))
        default: return false
        }
    }
}

/// Compact JSON of an object.
func encodeObject(_ object: JSONObject) -> [UInt8] {
    var bytes: [UInt8] = []
    JSONWriter.append(object, to: &bytes)
    return bytes
}

/// Parses stored JSON bytes that must hold an object.
func decodeObject(_ bytes: [UInt8]) throws -> JSONObject {
    guard case .object(let o) = try JSONParser(maxDepth: JSONParser.depthCeiling).parse(bytes) else {
        throw OutpostError.storage("stored data is not a JSON object")
    }
    return o
}

/// The store's SQLite file: schema, migrations and the statements the store runs. Owned by
/// the `OutpostStore` actor and used only there (a `Connection` is never shared).
final class LocalDatabase {
    let db: Connection

    /// The schema version this SDK writes; `migrate` brings older files up to it.
    static let schemaVersion = 7

    /// Seals the puts of an end-to-end encrypted store (set by the store when it opens one).
    var cipher: RecordCipher?

    /// `Configuration.baseDirectory`, absolute: uploads of files inside it are kept by
    /// their path relative to it (Media/UploadRows.swift).
    var baseDirectory: String?

    /// The commit durability in force on the connection.
    private(set) var durability: OutpostStore.Durability

    /// Opens the store file at `path` for reading and writing (creating it, in the
    /// protection class when one is given, and bringing its schema up to date).
    init(path: String, durability: OutpostStore.Durability, protection: OutpostStore.FileProtection? = nil) throws {
        db = try Connection(path: path, flags: [.readWrite, .create, .init(rawValue: protection.map(Platform.sqliteOpenFlags) ?? 0)])
        self.durability = durability
        if path != ":memory:" {
            try db.enableWAL(synchronous: durability == .full ? .full : .normal)
            // A reader in another process (an app extension) opens the file read-only,
            // and cannot create these files while the app has the store closed.
            try db.keepWALFiles()
        }
        // Checkpoints always use F_FULLFSYNC where it exists (Darwin): they copy the log
        // into the database and then reset the log, and a drive that reordered those
        // writes across a power loss would lose committed pages, whatever the durability.
        try db.execute("PRAGMA checkpoint_fullfsync=ON; PRAGMA fullfsync=\(durability == .full ? "ON" : "OFF")")
        try db.execute("PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY; PRAGMA cache_size=-16384")
        try migrate()
    }

    /// Opens the store file at `path` for reading only: nothing is created, written or
    /// migrated, and no lock is taken beyond SQLite's own (WAL lets readers in other
    /// processes read while the app writes).
    init(readingAt path: String) throws {
        db = try Connection(path: path, flags: [.readOnly])
        durability = .normal
        try db.execute("PRAGMA temp_store=MEMORY; PRAGMA cache_size=-4096")
        guard try db.scalarInt("SELECT count(*) FROM sqlite_master WHERE name = 'meta'") == 1 else {
            throw OutpostError.storage("\(path) is not a store file")
        }
        let version = try meta("schema_version").flatMap { Int($0) } ?? 0
        guard version <= Self.schemaVersion else { throw OutpostError.schemaTooNew(version) }
        guard version == Self.schemaVersion else {
            throw OutpostError.storage("the store file has schema version \(version): the app must open it once to bring it to \(Self.schemaVersion) before it can be read here")
        }
    }

    func close() { db.close() }

    /// Sets the durability of the next commits (outside a transaction). In WAL mode a
    /// `FULL` commit syncs the log with every `NORMAL` commit before it, so order is kept.
    /// `FULL` commits use `F_FULLFSYNC` where it exists (`PRAGMA fullfsync`; Darwin).
    func use(_ wanted: OutpostStore.Durability) throws {
        guard wanted != durability, !db.isInTransaction else { return }
        let full = wanted == .full
        try db.execute("PRAGMA synchronous=\(full ? "FULL" : "NORMAL"); PRAGMA fullfsync=\(full ? "ON" : "OFF")")
        durability = wanted
    }

    // MARK: Schema

    /// Versioned migrations: each step runs in its own transaction with the version bump.
    private func migrate() throws {
        // A new file frees its pages with `PRAGMA incremental_vacuum` (compaction); the
        // setting takes only before the first table.
        if try db.scalarInt("SELECT count(*) FROM sqlite_master") == 0 { try db.execute("PRAGMA auto_vacuum = INCREMENTAL") }
        try db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
        let version = try meta("schema_version").flatMap { Int($0) } ?? 0
        guard version <= Self.schemaVersion else { throw OutpostError.schemaTooNew(version) }
        if version < 1 {
            try db.transaction {
                try db.execute("""
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
                    """)
                try setMeta("schema_version", "1")
            }
        }
        if version < 2 {
            // Uploads kept until the server holds their file (Media/UploadRows.swift).
            try db.transaction {
                try db.execute(Self.mediaUploadsSchema)
                try setMeta("schema_version", "2")
            }
        }
        if version < 3 {
            // One model per record (Engine/RecordModel.swift).
            try db.transaction {
                try migrateToModels()
                try setMeta("schema_version", "3")
            }
        }
        if version < 4 {
            // The records a view re-pull brought (Sync/Pull.swift, docs/rules.md).
            try db.transaction {
                try db.execute("CREATE TABLE IF NOT EXISTS view_seen(collection TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY(collection, id)) WITHOUT ROWID")
                try setMeta("schema_version", "4")
            }
        }
        if version < 5 {
            // The wire form of each unsettled put of an end-to-end encrypted store, sealed
            // when the edit is saved (Encryption/SealedEdits.swift), and how an upload
            // seals its file (Encryption/SealedMedia.swift).
            try db.transaction {
                try db.execute(Self.sealedSchema)
                try db.execute(Self.sealedUploadsSchema)
                // A file made before encryption existed holds records in clear; a new file
                // takes the mode of the store that opens it (OutpostStore.init).
                if version > 0 { try setMeta("encryption", "none") }
                try setMeta("schema_version", "5")
            }
        }
        if version < 6 {
            // The telemetry outbox (Sync/Telemetry.swift).
            try db.transaction {
                try db.execute(Self.telemetrySchema)
                try setMeta("schema_version", "6")
            }
        }
        if version < 7 {
            // Where downloads write their temporary files (Store/Compaction.swift).
            try db.transaction {
                try db.execute(Self.downloadDirectoriesSchema)
                try setMeta("schema_version", "7")
            }
        }
    }

    // MARK: View re-pulls

    func markSeen(_ key: RecordKey) throws {
        try db.run("INSERT OR IGNORE INTO view_seen(collection, id) VALUES (?, ?)", [.text(key.collection), .text(key.id)])
    }

    /// The records the store holds a model of that the view re-pull did not bring.
    func keysNotSeen() throws -> [RecordKey] {
        try db.query("""
            SELECT r.collection, r.id FROM records r
             WHERE NOT EXISTS (SELECT 1 FROM view_seen s WHERE s.collection = r.collection AND s.id = r.id)
             ORDER BY r.collection, r.id
            """, []) { RecordKey(collection: $0.text(0), id: $0.text(1)) }
    }

    func clearViewSeen() throws {
        try db.run("DELETE FROM view_seen", [])
    }

    // MARK: Meta

    func meta(_ key: String) throws -> String? {
        try db.scalarText("SELECT value FROM meta WHERE key = ?", [.text(key)])
    }

    func setMeta(_ key: String, _ value: String?) throws {
        if let value {
            try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", [.text(key), .text(value)])
        } else {
            try db.run("DELETE FROM meta WHERE key = ?", [.text(key)])
        }
    }

    // MARK: Quarantine

    func quarantine(_ record: UndecodableRecord, at time: Int64) throws {
        try db.run("INSERT INTO quarantine(collection, id, version, raw, reason, quarantined_at) VALUES (?, ?, ?, ?, ?, ?)", [
            record.collection.map { .text($0) } ?? .null, record.id.map { .text($0) } ?? .null,
            record.version.map { .text($0) } ?? .null, .blob(record.raw), .text(record.reason), .integer(time),
        ])
    }

    func quarantined() throws -> [QuarantinedRecord] {
        try db.query("SELECT number, collection, id, version, raw, reason, quarantined_at FROM quarantine ORDER BY number", []) {
            QuarantinedRecord(number: $0.int64(0), collection: $0.optionalText(1), id: $0.optionalText(2), version: $0.optionalText(3),
                              raw: $0.blob(4), reason: $0.text(5), quarantinedAt: $0.int64(6))
        }
    }

    /// The newest quarantined copy of `key` in `epoch` (its version and raw element), if the
    /// quarantine still holds one.
    func quarantinedCopy(_ key: RecordKey, in epoch: Epoch) throws -> (version: Version, raw: [UInt8])? {
        let rows = try db.query("SELECT version, raw FROM quarantine WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)]) {
            ($0.optionalText(0).flatMap(Version.init), $0.blob(1))
        }
        return rows.compactMap { v, raw in v.flatMap { $0.epoch == epoch ? (version: $0, raw: raw) : nil } }
            .max { $0.version.seq < $1.version.seq }
    }

    func deleteQuarantined(_ number: Int64) throws {
        try db.run("DELETE FROM quarantine WHERE number = ?", [.integer(number)])
    }

    func quarantineCount() throws -> Int {
        Int(try db.scalarInt("SELECT count(*) FROM quarantine") ?? 0)
    }

    // MARK: Epochs

    /// Epochs the store left, oldest first.
    func retiredEpochs() throws -> [Epoch] {
        try db.query("SELECT epoch FROM retired_epochs ORDER BY number", []) { $0.text(0) }.compactMap(Epoch.init)
    }

    /// Remembers `epoch` as left; keeps the last `keep`.
    func retire(_ epoch: Epoch, keep: Int) throws {
        try db.run("INSERT INTO retired_epochs(epoch) VALUES (?)", [.text(epoch.rawValue)])
        try db.run("DELETE FROM retired_epochs WHERE number NOT IN (SELECT number FROM retired_epochs ORDER BY number DESC LIMIT ?)", [.integer(Int64(keep))])
    }
}
