import OutpostCore
import OutpostPostgres
import OutpostSQLite
import OutpostSyncRules

/// A column of `records` that holds a record's state, in the order every read and write
/// of a state lists them, for both stores: a column's name and its place in a row are
/// written here once, and no caller indexes a record's columns by number.
enum RecordColumn: Int, CaseIterable {
    case seq, collection, id, deleted, data, updatedAt, updatedBy, clientTime, lineage, sameAs, resolved
    /// The authenticated subject of the push that wrote the state: an operator's read and
    /// the writes list it, a pull never reads it (`RecordRow.subject`).
    case subject

    var name: String {
        switch self {
        case .seq: "seq"
        case .collection: "collection"
        case .id: "id"
        case .deleted: "deleted"
        case .data: "data"
        case .updatedAt: "updated_at"
        case .updatedBy: "updated_by"
        case .clientTime: "client_time"
        case .lineage: "lineage"
        case .sameAs: "same_as"
        case .resolved: "resolved"
        case .subject: "subject"
        }
    }

    /// The column's type, which names PostgreSQL's array of it in a write's `unnest`.
    var kind: RecordField.Kind {
        switch self {
        case .seq, .updatedAt, .clientTime: .integer
        case .collection, .id, .updatedBy, .lineage, .sameAs, .resolved, .subject: .text
        case .deleted: .flag
        case .data: .bytes
        }
    }

    /// The column's value in `write`.
    func value(of write: PushRules.Write) -> RecordField {
        switch self {
        case .seq: .integer(write.seq)
        case .collection: .text(write.key.collection)
        case .id: .text(write.key.id)
        case .deleted: .flag(write.deleted)
        case .data: .bytes(write.data)
        case .updatedAt: .integer(write.updatedAt)
        case .updatedBy: .text(write.updatedBy)
        case .clientTime: .integer(write.clientTime)
        case .lineage: .text(write.lineage?.text)
        case .sameAs: .text(write.sameAs?.text)
        case .resolved: .text(write.resolved?.stored)
        case .subject: .text(write.subject)
        }
    }
}

/// One column's value of a write, as both stores bind it.
enum RecordField {
    case integer(Int64?)
    case text(String?)
    case bytes([UInt8]?)
    /// `deleted`: 0 or 1 in SQLite, a boolean in PostgreSQL.
    case flag(Bool)

    enum Kind {
        case integer, text, bytes, flag

        /// The PostgreSQL type of an array of the kind.
        var postgresArray: String {
            switch self {
            case .integer: "bigint[]"
            case .text: "text[]"
            case .bytes: "bytea[]"
            case .flag: "boolean[]"
            }
        }
    }

    var integer: Int64? { if case .integer(let v) = self { v } else { nil } }
    var text: String? { if case .text(let v) = self { v } else { nil } }
    var bytes: [UInt8]? { if case .bytes(let v) = self { v } else { nil } }
    var flag: Bool { if case .flag(let v) = self { v } else { false } }
}

/// The row codec of `records` for both stores: the SQL that lists a state's columns
/// (`RecordColumn`) and the one decoding of a row holding them, from where they start in
/// the row (`base`) through the `SQLRow` seam, into a `StoredRecord`, a `RecordState`,
/// or straight into a page's JSON. Column indices are fixed by `RecordColumn`'s order,
/// so a read resolves no name.
struct RecordRow {
    /// The index in the row of the first column (`seq`).
    var base = 0
    /// Whether the row holds `subject` after the others (an operator's read).
    var subject = false

    /// The select list of a state's columns, each prefixed by `alias.` when given, with
    /// `subject` only when asked.
    static func select(_ alias: String? = nil, subject: Bool = false) -> String {
        let prefix = alias.map { $0 + "." } ?? ""
        return RecordColumn.allCases.filter { subject || $0 != .subject }.map { prefix + $0.name }.joined(separator: ", ")
    }

    /// A pull's select list (no `subject`), made once.
    static let pullColumns = select()

    /// The columns a write inserts, after `space_id`: every one.
    static let insertColumns = select(subject: true)

    /// An upsert's `SET` list: every column but the key takes the inserted value.
    static let updateSet = RecordColumn.allCases.filter { $0 != .collection && $0 != .id }
        .map { "\($0.name) = excluded.\($0.name)" }.joined(separator: ", ")

    private func index(_ column: RecordColumn) -> Int { base + column.rawValue }

    func seq<Row: SQLRow>(_ row: Row) -> Int64 { row.int64(index(.seq)) }

    /// The state in `row`.
    func record<Row: SQLRow>(_ row: Row) -> StoredRecord {
        let deleted = row.flag(index(.deleted))
        return StoredRecord(collection: row.text(index(.collection)), id: row.text(index(.id)), seq: row.int64(index(.seq)), deleted: deleted,
                            data: deleted ? nil : row.bytes(index(.data)), updatedAt: row.int64(index(.updatedAt)),
                            updatedBy: row.text(index(.updatedBy)), clientTime: row.optionalInt64(index(.clientTime)),
                            lineage: row.optionalText(index(.lineage)), sameAs: row.optionalText(index(.sameAs)),
                            resolved: row.optionalText(index(.resolved)), subject: subject ? row.optionalText(index(.subject)) : nil)
    }

    /// Appends the wire form of the state in `row` (`RecordJSON`) to `out`, its data
    /// written from the row's buffer without a copy.
    func appendJSON<Row: SQLRow>(_ row: Row, to out: inout [UInt8], epoch: Epoch) {
        let deleted = row.flag(index(.deleted))
        row.withBytes(index(.data)) { data in
            RecordJSON.append(
                to: &out, collection: row.text(index(.collection)), id: row.text(index(.id)), epoch: epoch, seq: row.int64(index(.seq)),
                deleted: deleted, data: deleted ? nil : data, updatedAt: row.int64(index(.updatedAt)), updatedBy: row.text(index(.updatedBy)),
                clientTime: row.optionalInt64(index(.clientTime)), lineage: row.optionalText(index(.lineage)),
                sameAs: row.optionalText(index(.sameAs)), resolved: row.optionalText(index(.resolved)),
                subject: subject ? row.optionalText(index(.subject)) : nil)
        }
    }

    /// The state in `row` as a push judges it, its data parsed.
    func state<Row: SQLRow>(_ row: Row, epoch: Epoch) throws -> RecordState {
        let collection = row.text(index(.collection)), id = row.text(index(.id))
        let deleted = row.flag(index(.deleted))
        var data: JSONObject?
        if !deleted {
            guard case .object(let o) = try JSONParser.parse(row.bytes(index(.data))) else { throw PushRulesError.notAnObject(collection, id) }
            data = o
        }
        return RecordState(collection: collection, id: id, version: Version(epoch: epoch, seq: row.int64(index(.seq))), deleted: deleted,
                           data: data, updatedAt: row.int64(index(.updatedAt)), updatedBy: row.text(index(.updatedBy)),
                           clientTime: row.optionalInt64(index(.clientTime)), lineage: row.optionalText(index(.lineage)).flatMap(Version.init),
                           sameAs: row.optionalText(index(.sameAs)).flatMap(Version.init),
                           resolved: row.optionalText(index(.resolved)).flatMap(Resolved.init(stored:)))
    }

    // MARK: Writes

    /// SQLite's upsert of one state, its parameters `?1` (the space id) and then the
    /// columns in order (`bind`).
    static let sqliteUpsert = """
        INSERT INTO records(space_id, \(insertColumns))
        VALUES (\((1...RecordColumn.allCases.count + 1).map { "?\($0)" }.joined(separator: ", ")))
        ON CONFLICT(space_id, collection, id) DO UPDATE SET \(updateSet)
        """

    /// Binds `write`'s columns to `statement` in column order from parameter `first` on
    /// (`sqliteUpsert`'s 2, `OutboxRow.sqliteInsert`'s 4).
    static func bind(_ write: PushRules.Write, to statement: Statement, from first: Int32 = 2) throws {
        for column in RecordColumn.allCases {
            let at = first + Int32(column.rawValue)
            switch column.value(of: write) {
            case .integer(let v?): try statement.bind(int: v, at: at)
            case .text(let v?): try statement.bind(text: v, at: at)
            case .bytes(let v?): try statement.bind(blob: v, at: at)
            case .flag(let v): try statement.bind(int: v ? 1 : 0, at: at)
            case .integer(nil), .text(nil), .bytes(nil): try statement.bindNull(at: at)
            }
        }
    }

    /// PostgreSQL's `unnest` of the columns of a set of writes, one typed array parameter
    /// each from `$first` on, in column order (`postgresArrays`).
    static func postgresUnnest(first: Int) -> String {
        RecordColumn.allCases.map { "$\(first + $0.rawValue)::\($0.kind.postgresArray)" }.joined(separator: ", ")
    }

    /// The arrays of `postgresUnnest`: each column's values of `writes`.
    static func postgresArrays(_ writes: [PushRules.Write]) -> [PostgresValue] {
        RecordColumn.allCases.map { column in
            switch column.kind {
            case .integer: .intArray(writes.map { column.value(of: $0).integer })
            case .text: .textArray(writes.map { column.value(of: $0).text })
            case .bytes: .bytesArray(writes.map { column.value(of: $0).bytes })
            case .flag: .boolArray(writes.map { column.value(of: $0).flag })
            }
        }
    }
}

/// The row codec of `webhook_outbox`: the space, the epoch and the commit's time, then a
/// record's state as the push wrote it, in `RecordColumn`'s order and names (its `id` is
/// the outbox's `record_id`), so the outbox's rows are written and read by the records'
/// codec.
enum OutboxRow {
    /// A record column's name in the outbox.
    static func name(_ column: RecordColumn) -> String { column == .id ? "record_id" : column.name }

    /// The columns a write inserts: `space_id`, `epoch`, `committed_at`, then the record's.
    static let insertColumns = "space_id, epoch, committed_at, " + RecordColumn.allCases.map(name).joined(separator: ", ")

    /// SQLite's insert of one row: `?1` the space id, `?2` the epoch, `?3` the commit's
    /// time, then the record's columns (`RecordRow.bind(_:to:from:)` from 4).
    static let sqliteInsert = """
        INSERT INTO webhook_outbox(\(insertColumns))
        VALUES (\((1...RecordColumn.allCases.count + 3).map { "?\($0)" }.joined(separator: ", ")))
        """

    /// The select list of a row to send: `id`, `epoch`, `committed_at`, then the record's
    /// columns (`change`).
    static let selectColumns = "id, epoch, committed_at, " + RecordColumn.allCases.map(name).joined(separator: ", ")

    private static let codec = RecordRow(base: 3, subject: true)

    /// The change in a row of `selectColumns`.
    static func change<Row: SQLRow>(_ row: Row) -> WebhookOutbox.Change {
        let r = codec.record(row)
        return WebhookOutbox.Change(id: row.int64(0), epoch: row.text(1), seq: r.seq, collection: r.collection, recordID: r.id,
                                    deleted: r.deleted, data: r.data, updatedAt: r.updatedAt, updatedBy: r.updatedBy,
                                    clientTime: r.clientTime, lineage: r.lineage, sameAs: r.sameAs, resolved: r.resolved,
                                    committedAt: row.int64(2), subject: r.subject)
    }
}
