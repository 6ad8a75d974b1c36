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

/// What the store knows of a record's server version.
struct ServerCopy: Hashable, Sendable {
    var version: Version
    var body: Body
    /// The server's commit time; nil when known only from a push answer.
    var updatedAt: Int64?
    var updatedBy: String?
    var clientTime: Int64?
    /// The changeId that wrote it, when this device did.
    var changeId: String?

    init(version: Version, body: Body, updatedAt: Int64?, updatedBy: String?, clientTime: Int64?, changeId: String?) {
        self.version = version
        self.body = body
        self.updatedAt = updatedAt
        self.updatedBy = updatedBy
        self.clientTime = clientTime
        self.changeId = changeId
    }

    init(_ state: RecordState) {
        self.init(version: state.version, body: Body(state), updatedAt: state.updatedAt, updatedBy: state.updatedBy, clientTime: state.clientTime, changeId: nil)
    }

    /// True when `self` is a later state than `other`: a later epoch, or the same epoch and
    /// a greater seq. Versions of one history are totally ordered by seq.
    func isNewer(than other: ServerCopy) -> Bool {
        if version.epoch != other.version.epoch { return other.version.epoch < version.epoch }
        return version.seq > other.version.seq
    }

    /// As a `RecordState` (for resolvers); an unknown `updatedAt` reads as `fallbackTime`.
    func recordState(_ key: RecordKey, fallbackTime: Int64) throws -> RecordState {
        RecordState(collection: key.collection, id: key.id, version: version, deleted: body.deleted,
                    data: try body.data.map(decodeObject), updatedAt: updatedAt ?? fallbackTime,
                    updatedBy: updatedBy ?? "", clientTime: clientTime)
    }
}

/// True when a state committed at server time `a` is known to be later than one committed
/// at `b`. Across histories this is how copies are ordered (the server's own `updatedAt`);
/// an unknown time orders nothing.
func committedLater(_ a: Int64?, than b: Int64?) -> Bool {
    guard let a, let b else { return false }
    return a > b
}

/// One row of `records`. Invariants: `pending` is true exactly when unsettled queue entries
/// exist for the record; when it is false the view *is* the server copy (so a synced record
/// stores its data once), and a row without pending changes always has a server copy.
struct RecordRow: Sendable {
    var key: RecordKey
    /// What the app sees.
    var view: Body
    var pending: Bool
    var server: ServerCopy?
    /// Set while an epoch switch has not yet seen the record in the new history.
    var epochCheck: Bool
}

/// Where a queued change came from.
enum ChangeOrigin: String, Sendable {
    /// An edit of the app (or a resolver's write on its behalf): a real local change.
    case local
    /// A copy offered again to a new history (PROTOCOL.md section 5): not an edit, so its
    /// conflicts are decided by the server's `updatedAt`, never by the app's resolver.
    case reoffer
}

/// One row of `queue`.
struct QueueEntry: Sendable {
    var position: Int64
    var changeId: String
    var key: RecordKey
    var op: ChangeOp
    var data: [UInt8]?
    var baseVersion: Version?
    var clientTime: Int64
    var state: ChangeState
    var attempts: Int
    var nextAttemptAt: Int64
    var lastError: String?
    var errorCode: String?
    var origin: ChangeOrigin
    /// For re-offers: the `updatedAt` of the device's copy in the history it came from.
    var originUpdatedAt: Int64?
    var createdAt: Int64

    var body: Body { op == .delete ? .tombstone : Body(data: data) }

    var isUnsettled: Bool { state != .rejected }

    func change() throws -> Change {
        Change(changeId: changeId, collection: key.collection, id: key.id, op: op,
               data: try data.map(decodeObject), baseVersion: baseVersion, clientTime: clientTime)
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
    static let schemaVersion = 2

    /// The commit durability in force on the connection.
    private(set) var durability: OutpostStore.Durability

    init(path: String, durability: OutpostStore.Durability) throws {
        db = try Connection(path: path)
        self.durability = durability
        if path != ":memory:" {
            try db.enableWAL(synchronous: durability == .full ? .full : .normal)
        }
        try db.execute("PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY; PRAGMA cache_size=-16384")
        try migrate()
    }

    func close() { db.close() }

    /// Sets the durability of the next commits (outside a transaction). In WAL mode a
    /// `FULL` commit syncs the log with every `NORMAL` commit before it, so order is kept.
    func use(_ wanted: OutpostStore.Durability) throws {
        guard wanted != durability, !db.isInTransaction else { return }
        try db.execute("PRAGMA synchronous=\(wanted == .full ? "FULL" : "NORMAL")")
        durability = wanted
    }

    // MARK: Schema

    /// Versioned migrations: each step runs in its own transaction with the version bump.
    private func migrate() throws {
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

    // MARK: Records

    private static let rowColumns = "data, deleted, pending, version, server_data, server_deleted, updated_at, updated_by, client_time, own_change_id, epoch_check, collection, id"

    private static func readRow(_ s: Statement) -> RecordRow {
        let key = RecordKey(collection: s.text(11), id: s.text(12))
        let deleted = s.int64(1) != 0
        let view = Body(data: deleted ? nil : s.blob(0))
        let pending = s.int64(2) != 0
        var server: ServerCopy?
        if let text = s.optionalText(3), let version = Version(text) {
            let body = pending ? Body(data: s.int64(5) != 0 ? nil : s.blob(4)) : view
            server = ServerCopy(version: version, body: body, updatedAt: s.optionalInt64(6), updatedBy: s.optionalText(7),
                                clientTime: s.optionalInt64(8), changeId: s.optionalText(9))
        }
        return RecordRow(key: key, view: view, pending: pending, server: server, epochCheck: s.int64(10) != 0)
    }

    func record(_ key: RecordKey) throws -> RecordRow? {
        try db.queryOne("SELECT \(Self.rowColumns) FROM records WHERE collection = ? AND id = ?",
                        [.text(key.collection), .text(key.id)], Self.readRow)
    }

    func records(collection: String?) throws -> [RecordRow] {
        if let collection {
            return try db.query("SELECT \(Self.rowColumns) FROM records WHERE collection = ? ORDER BY id", [.text(collection)], Self.readRow)
        }
        return try db.query("SELECT \(Self.rowColumns) FROM records ORDER BY collection, id", [], Self.readRow)
    }

    func recordsNeedingEpochCheck() throws -> [RecordRow] {
        try db.query("SELECT \(Self.rowColumns) FROM records WHERE epoch_check = 1 ORDER BY collection, id", [], Self.readRow)
    }

    func markAllForEpochCheck() throws {
        try db.run("UPDATE records SET epoch_check = 1")
    }

    func recordCount() throws -> Int {
        Int(try db.scalarInt("SELECT count(*) FROM records") ?? 0)
    }

    /// Writes `row`, keeping the invariants (see `RecordRow`).
    func write(_ row: RecordRow) throws {
        precondition(row.pending || row.server != nil, "a record without pending changes needs a server copy")
        let view = row.pending ? row.view : row.server!.body
        let stmt = try db.cached("""
            INSERT OR REPLACE INTO records(collection, id, data, deleted, pending, version, server_data, server_deleted,
                                           updated_at, updated_by, client_time, own_change_id, epoch_check)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        try stmt.bind(text: row.key.collection, at: 1)
        try stmt.bind(text: row.key.id, at: 2)
        if let data = view.data { try stmt.bind(blob: data, at: 3) } else { try stmt.bindNull(at: 3) }
        try stmt.bind(int: view.deleted ? 1 : 0, at: 4)
        try stmt.bind(int: row.pending ? 1 : 0, at: 5)
        if let server = row.server {
            try stmt.bind(text: server.version.text, at: 6)
            if row.pending, let data = server.body.data { try stmt.bind(blob: data, at: 7) } else { try stmt.bindNull(at: 7) }
            try stmt.bind(int: server.body.deleted ? 1 : 0, at: 8)
            if let t = server.updatedAt { try stmt.bind(int: t, at: 9) } else { try stmt.bindNull(at: 9) }
            if let b = server.updatedBy { try stmt.bind(text: b, at: 10) } else { try stmt.bindNull(at: 10) }
            if let t = server.clientTime { try stmt.bind(int: t, at: 11) } else { try stmt.bindNull(at: 11) }
            if let c = server.changeId { try stmt.bind(text: c, at: 12) } else { try stmt.bindNull(at: 12) }
        } else {
            for i: Int32 in 6...12 where i != 8 { try stmt.bindNull(at: i) }
            try stmt.bind(int: 0, at: 8)
        }
        try stmt.bind(int: row.epochCheck ? 1 : 0, at: 13)
        while try stmt.step() {}
        stmt.reset()
    }

    /// Inserts a pulled record the store has no row for. Returns false (and writes nothing)
    /// when a row exists: the caller then takes the general path.
    func insertIfAbsent(_ record: PreparedRecord) throws -> Bool {
        let stmt = try db.cached("""
            INSERT INTO records(collection, id, data, deleted, pending, version, updated_at, updated_by, client_time)
            VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?) ON CONFLICT(collection, id) DO NOTHING
            """)
        try stmt.bind(text: record.key.collection, at: 1)
        try stmt.bind(text: record.key.id, at: 2)
        if let data = record.body.data { try stmt.bind(blob: data, at: 3) } else { try stmt.bindNull(at: 3) }
        try stmt.bind(int: record.body.deleted ? 1 : 0, at: 4)
        try stmt.bind(text: record.version.text, at: 5)
        try stmt.bind(int: record.updatedAt, at: 6)
        try stmt.bind(text: record.updatedBy, at: 7)
        if let t = record.clientTime { try stmt.bind(int: t, at: 8) } else { try stmt.bindNull(at: 8) }
        while try stmt.step() {}
        stmt.reset()
        return db.changes == 1
    }

    /// Drops what only a server's history put in the store: copies queued to be offered
    /// again and not sent yet, copies kept aside, and records without an unsettled change.
    /// A record with an unsettled change keeps the app's edit, without a server copy (its
    /// changes become creates unless the next history holds the record). Returns the keys
    /// whose record was dropped.
    func discardServerCopies() throws -> [RecordKey] {
        try db.run("DELETE FROM queue WHERE origin = 'reoffer' AND state IN ('pending', 'failed')")
        try db.run("DELETE FROM aside")
        let unsettled = "EXISTS (SELECT 1 FROM queue q WHERE q.collection = records.collection AND q.id = records.id AND q.state != 'rejected')"
        let keys = try db.query("SELECT collection, id FROM records WHERE NOT \(unsettled)") { RecordKey(collection: $0.text(0), id: $0.text(1)) }
        try db.run("DELETE FROM records WHERE NOT \(unsettled)")
        try db.run("""
            UPDATE records SET version = NULL, server_data = NULL, server_deleted = 0, updated_at = NULL, updated_by = NULL,
                client_time = NULL, own_change_id = NULL, epoch_check = 0
            """)
        try db.run("UPDATE queue SET base_version = NULL WHERE state IN ('pending', 'failed')")
        return keys
    }

    func deleteRecord(_ key: RecordKey) throws {
        try db.run("DELETE FROM records WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
    }

    // MARK: Queue

    private static let entryColumns = "position, change_id, collection, id, op, data, base_version, client_time, state, attempts, next_attempt_at, last_error, error_code, origin, origin_updated_at, created_at"

    private static func readEntry(_ s: Statement) -> QueueEntry {
        QueueEntry(
            position: s.int64(0), changeId: s.text(1), key: RecordKey(collection: s.text(2), id: s.text(3)),
            op: ChangeOp(rawValue: s.text(4)) ?? .put, data: s.optionalBlob(5), baseVersion: s.optionalText(6).flatMap(Version.init),
            clientTime: s.int64(7), state: ChangeState(rawValue: s.text(8)) ?? .inDoubt, attempts: s.int(9),
            nextAttemptAt: s.int64(10), lastError: s.optionalText(11), errorCode: s.optionalText(12),
            origin: ChangeOrigin(rawValue: s.text(13)) ?? .local, originUpdatedAt: s.optionalInt64(14), createdAt: s.int64(15))
    }

    /// The record's queue entries in order; rejected ones only with `includeRejected`.
    func entries(for key: RecordKey, includeRejected: Bool = false) throws -> [QueueEntry] {
        let all = try db.query("SELECT \(Self.entryColumns) FROM queue WHERE collection = ? AND id = ? ORDER BY position",
                               [.text(key.collection), .text(key.id)], Self.readEntry)
        return includeRejected ? all : all.filter(\.isUnsettled)
    }

    /// Every entry in `states`, in queue order.
    func entries(in states: [ChangeState]) throws -> [QueueEntry] {
        let list = states.map { "'\($0.rawValue)'" }.joined(separator: ",")
        return try db.query("SELECT \(Self.entryColumns) FROM queue WHERE state IN (\(list)) ORDER BY position", [], Self.readEntry)
    }

    func entry(changeId: String) throws -> QueueEntry? {
        try db.queryOne("SELECT \(Self.entryColumns) FROM queue WHERE change_id = ?", [.text(changeId)], Self.readEntry)
    }

    /// Keys of records with a change sent and not settled (in flight or in doubt).
    func keysWithSentChanges() throws -> Set<RecordKey> {
        Set(try db.query("SELECT DISTINCT collection, id FROM queue WHERE state IN ('in_flight', 'in_doubt')", []) {
            RecordKey(collection: $0.text(0), id: $0.text(1))
        })
    }

    func count(states: [ChangeState]) throws -> Int {
        let list = states.map { "'\($0.rawValue)'" }.joined(separator: ",")
        return Int(try db.scalarInt("SELECT count(*) FROM queue WHERE state IN (\(list))") ?? 0)
    }

    /// Inserts `entry` (its `position` is ignored unless `keepPosition`) and returns its position.
    @discardableResult
    func insert(_ entry: QueueEntry, keepPosition: Bool = false) throws -> Int64 {
        let stmt = try db.cached("""
            INSERT INTO queue(position, change_id, collection, id, op, data, base_version, client_time, state, attempts,
                              next_attempt_at, last_error, error_code, origin, origin_updated_at, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        try bindEntry(stmt, entry, position: keepPosition ? entry.position : nil)
        while try stmt.step() {}
        stmt.reset()
        return db.lastInsertRowID
    }

    /// Rewrites the entry at `entry.position` (its changeId may change).
    func update(_ entry: QueueEntry) throws {
        try db.run("DELETE FROM queue WHERE position = ?", [.integer(entry.position)])
        try insert(entry, keepPosition: true)
    }

    private func bindEntry(_ stmt: Statement, _ e: QueueEntry, position: Int64?) throws {
        if let position { try stmt.bind(int: position, at: 1) } else { try stmt.bindNull(at: 1) }
        try stmt.bind(text: e.changeId, at: 2)
        try stmt.bind(text: e.key.collection, at: 3)
        try stmt.bind(text: e.key.id, at: 4)
        try stmt.bind(text: e.op.rawValue, at: 5)
        if let d = e.data { try stmt.bind(blob: d, at: 6) } else { try stmt.bindNull(at: 6) }
        if let b = e.baseVersion { try stmt.bind(text: b.text, at: 7) } else { try stmt.bindNull(at: 7) }
        try stmt.bind(int: e.clientTime, at: 8)
        try stmt.bind(text: e.state.rawValue, at: 9)
        try stmt.bind(int: Int64(e.attempts), at: 10)
        try stmt.bind(int: e.nextAttemptAt, at: 11)
        if let m = e.lastError { try stmt.bind(text: m, at: 12) } else { try stmt.bindNull(at: 12) }
        if let c = e.errorCode { try stmt.bind(text: c, at: 13) } else { try stmt.bindNull(at: 13) }
        try stmt.bind(text: e.origin.rawValue, at: 14)
        if let t = e.originUpdatedAt { try stmt.bind(int: t, at: 15) } else { try stmt.bindNull(at: 15) }
        try stmt.bind(int: e.createdAt, at: 16)
    }

    /// The highest position in the queue (0 when empty). Positions only grow (AUTOINCREMENT).
    func lastQueuePosition() throws -> Int64 {
        try db.scalarInt("SELECT max(position) FROM queue") ?? 0
    }

    func deleteEntry(position: Int64) throws {
        try db.run("DELETE FROM queue WHERE position = ?", [.integer(position)])
    }

    func deleteEntry(changeId: String) throws -> Bool {
        try db.run("DELETE FROM queue WHERE change_id = ?", [.text(changeId)])
        return db.changes > 0
    }

    /// Changes that were being sent when the process stopped: the server may have applied
    /// them, so they are in doubt (sent again under the same changeId).
    func markInFlightInDoubt() throws {
        try db.run("UPDATE queue SET state = 'in_doubt' WHERE state = 'in_flight'")
    }

    // MARK: Kept-aside versions

    func aside(_ key: RecordKey) throws -> ServerCopy? {
        try db.queryOne("SELECT version, deleted, data, updated_at, updated_by, client_time FROM aside WHERE collection = ? AND id = ?",
                        [.text(key.collection), .text(key.id)]) { s -> ServerCopy? in
            guard let v = Version(s.text(0)) else { return nil }
            return ServerCopy(version: v, body: Body(data: s.int64(1) != 0 ? nil : s.blob(2)), updatedAt: s.int64(3),
                              updatedBy: s.text(4), clientTime: s.optionalInt64(5), changeId: nil)
        } ?? nil
    }

    func setAside(_ key: RecordKey, _ copy: ServerCopy) throws {
        let stmt = try db.cached("INSERT OR REPLACE INTO aside(collection, id, version, deleted, data, updated_at, updated_by, client_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        try stmt.bind(text: key.collection, at: 1)
        try stmt.bind(text: key.id, at: 2)
        try stmt.bind(text: copy.version.text, at: 3)
        try stmt.bind(int: copy.body.deleted ? 1 : 0, at: 4)
        if let d = copy.body.data { try stmt.bind(blob: d, at: 5) } else { try stmt.bindNull(at: 5) }
        try stmt.bind(int: copy.updatedAt ?? 0, at: 6)
        try stmt.bind(text: copy.updatedBy ?? "", at: 7)
        if let t = copy.clientTime { try stmt.bind(int: t, at: 8) } else { try stmt.bindNull(at: 8) }
        while try stmt.step() {}
        stmt.reset()
    }

    func clearAside(_ key: RecordKey) throws {
        try db.run("DELETE FROM aside WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
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
