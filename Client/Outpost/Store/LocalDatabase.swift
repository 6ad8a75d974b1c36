import Foundation
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

/// The store's SQLite file: the statements the store runs (its schema is the list of
/// migrations in Store/StoreMigrations.swift). Owned by
/// the `OutpostStore` actor and used only there (a `Connection` is never shared).
final class LocalDatabase {
    let db: Connection

    /// Seals the puts of an end-to-end encrypted store (set by the store when it opens one).
    var cipher: RecordCipher?

    /// `Configuration.baseDirectory`, absolute: uploads of files inside it are kept by
    /// their path relative to it (Media/UploadRows.swift).
    var baseDirectory: String?
    /// The file's search tables, whose notes each write transaction settles before it
    /// commits (`settleSearch`); set when the indexes are reconciled at open.
    var searchIndexes: [QueryIndex] = []
    /// The query index catalog as last read, with the schema cookie it was read at
    /// (`queryIndexes`).
    var catalog: (cookie: Int64, indexes: [QueryIndex])?

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
        let version = try meta(.schemaVersion).flatMap { Int($0) } ?? 0
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

    /// True when the store holds no record and no edit.
    func isEmpty() throws -> Bool {
        try db.scalarInt("SELECT EXISTS (SELECT 1 FROM records) OR EXISTS (SELECT 1 FROM edits)") == 0
    }

    func clearViewSeen() throws {
        try db.run("DELETE FROM view_seen", [])
    }

    // MARK: Quarantine

    /// A `quarantine` row, its columns named once.
    private enum QuarantineRow {
        static let columns = RowColumns(["number", "collection", "id", "version", "raw", "reason", "quarantined_at"])
        static let number = columns.index("number"), collection = columns.index("collection"), id = columns.index("id")
        static let version = columns.index("version"), raw = columns.index("raw"), reason = columns.index("reason")
        static let quarantinedAt = columns.index("quarantined_at")
    }

    func quarantine(_ record: UndecodableRecord, at time: Int64) throws {
        typealias Q = QuarantineRow
        var row = Q.columns.row()
        row[Q.collection] = record.collection.map { .text($0) } ?? .null
        row[Q.id] = record.id.map { .text($0) } ?? .null
        row[Q.version] = record.version.map { .text($0) } ?? .null
        row[Q.raw] = .blob(record.raw)
        row[Q.reason] = .text(record.reason)
        row[Q.quarantinedAt] = .integer(time)
        // `number` NULL: SQLite gives the row the next number.
        try db.run("INSERT INTO quarantine(\(Q.columns.list)) VALUES (\(Q.columns.placeholders))", row.values)
    }

    func quarantined() throws -> [QuarantinedRecord] {
        typealias Q = QuarantineRow
        return try db.query("SELECT \(Q.columns.list) FROM quarantine ORDER BY number", []) {
            QuarantinedRecord(number: $0.int64(Q.number), collection: $0.optionalText(Q.collection), id: $0.optionalText(Q.id),
                              version: $0.optionalText(Q.version), raw: $0.blob(Q.raw), reason: $0.text(Q.reason),
                              quarantinedAt: Date(milliseconds: $0.int64(Q.quarantinedAt)))
        }
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
