import Foundation
import OutpostPostgres
import OutpostSQLite

/// The seam under rules written once in SQL for both stores (the media metadata of
/// `SQLMediaMetadata`): a connection that runs statements written with `?` placeholders
/// and answers rows through `SQLRow`. Each store implements the few things its dialect
/// does differently:
///
/// | | SQLite | PostgreSQL |
/// |---|---|---|
/// | placeholders | `?` as written | `?` rewritten as `$1…$n` |
/// | a list parameter (`anyOf`) | `IN (SELECT value FROM json_each(?))`, bound as JSON text | `= ANY(?)`, bound as an array |
/// | `lock(_:)` inside a transaction | nothing: one writer connection per file, and `BEGIN IMMEDIATE` | `pg_advisory_xact_lock`, for other instances |
/// | a `.durable` commit | `synchronous` raised to the server's setting for it | every commit is durable |
/// | a lost connection | cannot happen (a file) | reconnected before the next job |
///
/// Upserts need no seam: both speak `INSERT … ON CONFLICT (…) DO NOTHING | DO UPDATE SET
/// … = excluded.…` (SQLite since 3.24). Every statement text is fixed, whatever the length
/// of a list, so PostgreSQL's prepared-statement cache stays bounded.
protocol SQLSession: AnyObject {
    /// The rows of `sql`, each mapped by `row`.
    func query<T>(_ sql: String, _ values: [SQLValue], _ row: (any SQLRow) throws -> T) throws -> [T]
    /// Runs `sql`; the number of rows it changed.
    @discardableResult
    func run(_ sql: String, _ values: [SQLValue]) throws -> Int
    /// Runs `script`, one or more statements without parameters, as written (a migration).
    func execute(_ script: String) throws
    /// Runs `body` in one write transaction, committed with `durability`.
    func transaction<T>(_ durability: SQLDurability, _ body: () throws -> T) throws -> T
    /// Inside a transaction, waits until no other process holds `key` and holds it to the
    /// end of the transaction.
    func lock(_ key: String) throws
    /// A condition that `column` equals one of the elements of a list parameter
    /// (`.texts` or `.integers`), written where its `?` goes.
    func anyOf(_ column: String) -> String
    /// Makes the connection usable again after it was lost (a database restart).
    func reconnectIfNeeded() throws
    func close()
}

/// A parameter of a `SQLSession` statement.
enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case text(String)
    case bytes([UInt8])
    /// A list, for the `?` of `anyOf`.
    case texts([String])
    /// A list, for the `?` of `anyOf`.
    case integers([Int64])

    static func optionalText(_ value: String?) -> SQLValue { value.map { .text($0) } ?? .null }
}

/// How a commit must survive.
enum SQLDurability: Sendable {
    /// Survives a crash of the process; a power loss may lose it (chunk receipts: a lost
    /// one costs a resend that the upload's state then asks for).
    case process
    /// Survives a power loss, with the server's configured `synchronous` setting.
    case durable
}

/// A row of a query, by column index: the seam under SQL written once for both stores
/// (`SQLSession`) and under the row codecs (`RecordRow`), over SQLite's statement
/// (`SQLiteRow`) and PostgreSQL's result (`PostgresRow`).
protocol SQLRow {
    func int64(_ column: Int) -> Int64
    func optionalInt64(_ column: Int) -> Int64?
    /// NULL reads as the empty string.
    func text(_ column: Int) -> String
    func optionalText(_ column: Int) -> String?
    func bytes(_ column: Int) -> [UInt8]
    func isNull(_ column: Int) -> Bool
    /// A true-or-false column: an integer 0 or 1 in SQLite, a boolean in PostgreSQL.
    func flag(_ column: Int) -> Bool
    /// Calls `body` with the column's bytes (empty for NULL) without copying them; the
    /// buffer is valid only during the call.
    func withBytes<T>(_ column: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T
}

/// A `SQLRow` on the current row of an SQLite statement.
struct SQLiteRow: SQLRow {
    let statement: Statement
    func int64(_ column: Int) -> Int64 { statement.int64(Int32(column)) }
    func optionalInt64(_ column: Int) -> Int64? { statement.optionalInt64(Int32(column)) }
    func text(_ column: Int) -> String { statement.text(Int32(column)) }
    func optionalText(_ column: Int) -> String? { statement.optionalText(Int32(column)) }
    func bytes(_ column: Int) -> [UInt8] { statement.blob(Int32(column)) }
    func isNull(_ column: Int) -> Bool { statement.isNull(Int32(column)) }
    func flag(_ column: Int) -> Bool { statement.int64(Int32(column)) != 0 }
    func withBytes<T>(_ column: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try statement.withBytes(Int32(column), body)
    }
}

/// A `SQLRow` on one row of a PostgreSQL result.
struct PostgresRow: SQLRow {
    let rows: PostgresRows
    let index: Int
    func int64(_ column: Int) -> Int64 { rows.int64(index, column) }
    func optionalInt64(_ column: Int) -> Int64? { rows.optionalInt64(index, column) }
    func text(_ column: Int) -> String { rows.text(index, column) }
    func optionalText(_ column: Int) -> String? { rows.optionalText(index, column) }
    func bytes(_ column: Int) -> [UInt8] { rows.bytes(index, column) }
    func isNull(_ column: Int) -> Bool { rows.isNull(index, column) }
    func flag(_ column: Int) -> Bool { rows.bool(index, column) }
    func withBytes<T>(_ column: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try rows.withBytes(index, column, body)
    }
}

extension SQLRow {
    func int(_ column: Int) -> Int { Int(int64(column)) }
    /// NULL reads as nil.
    func optionalInt64(_ column: Int) -> Int64? { isNull(column) ? nil : int64(column) }
}

extension SQLSession {
    /// The first row of `sql`, if any.
    func queryOne<T>(_ sql: String, _ values: [SQLValue], _ row: (any SQLRow) throws -> T) throws -> T? {
        try query(sql, values, row).first
    }
}

// MARK: - SQLite

/// A `SQLSession` on an SQLite connection in WAL mode, committing at `synchronous=NORMAL`
/// and at `durableSynchronous` for `.durable` commits.
final class SQLiteSession: SQLSession {
    let db: Connection
    private let durableSynchronous: Connection.Synchronous
    /// The level the connection is at between transactions.
    private let level: Connection.Synchronous

    init(path: String, flags: Connection.OpenFlags = [.readWrite, .create], durableSynchronous: Connection.Synchronous) throws {
        db = try Connection(path: path, flags: flags)
        if !flags.contains(.readOnly) { try db.enableWAL(synchronous: .normal) }
        self.durableSynchronous = durableSynchronous
        level = .normal
    }

    /// A session over a connection its owner keeps (and closes): the sync store's writer,
    /// for rules written once for both stores (`Compaction.slice`). Every transaction
    /// commits at the connection's own level.
    init(borrowing db: Connection) {
        self.db = db
        durableSynchronous = .normal
        level = .normal
    }

    /// A session over a connection its owner keeps, which is at `level` (the sync store's
    /// writer at the store's `synchronous`): `.durable` transactions commit at that level,
    /// `.process` ones at NORMAL, and the connection is put back at `level` after each.
    init(borrowing db: Connection, at level: Connection.Synchronous) {
        self.db = db
        durableSynchronous = level
        self.level = level
    }

    func query<T>(_ sql: String, _ values: [SQLValue], _ row: (any SQLRow) throws -> T) throws -> [T] {
        try db.query(sql, values.map(Self.bind)) { try row(SQLiteRow(statement: $0)) }
    }

    func run(_ sql: String, _ values: [SQLValue]) throws -> Int {
        try db.run(sql, values.map(Self.bind))
        return db.changes
    }

    func execute(_ script: String) throws {
        try db.execute(script)
    }

    func transaction<T>(_ durability: SQLDurability, _ body: () throws -> T) throws -> T {
        let wanted = durability == .durable ? durableSynchronous : .normal
        let change = wanted != level
        if change { try db.execute("PRAGMA synchronous=\(wanted.rawValue)") }
        defer { if change { try? db.execute("PRAGMA synchronous=\(level.rawValue)") } }
        return try db.transaction(.immediate, body)
    }

    /// One process owns the file (`DataDirectory`'s lock) and it writes through one
    /// connection in `BEGIN IMMEDIATE` transactions: there is nobody else to exclude.
    func lock(_ key: String) throws {}

    func anyOf(_ column: String) -> String { "\(column) IN (SELECT value FROM json_each(?))" }

    func reconnectIfNeeded() throws {}

    func close() { db.close() }

    private static func bind(_ value: SQLValue) -> SQLiteValue {
        switch value {
        case .null: return .null
        case .integer(let v): return .integer(v)
        case .text(let s): return .text(s)
        case .bytes(let b): return .blob(b)
        case .texts(let list): return .text("[" + list.map(jsonString).joined(separator: ",") + "]")
        case .integers(let list): return .text("[" + list.map(String.init).joined(separator: ",") + "]")
        }
    }

    /// `s` as a JSON string literal.
    private static func jsonString(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

// MARK: - PostgreSQL

/// A `SQLSession` on a PostgreSQL connection.
final class PostgresSession: SQLSession {
    let db: PostgresConnection
    /// The `$n` form of each statement text seen, by its `?` form.
    private var rewritten: [String: String] = [:]

    init(db: PostgresConnection) {
        self.db = db
    }

    func query<T>(_ sql: String, _ values: [SQLValue], _ row: (any SQLRow) throws -> T) throws -> [T] {
        let rows = try db.query(dollar(sql), values.map(Self.bind))
        return try (0..<rows.count).map { try row(PostgresRow(rows: rows, index: $0)) }
    }

    func run(_ sql: String, _ values: [SQLValue]) throws -> Int {
        try db.run(dollar(sql), values.map(Self.bind))
    }

    func execute(_ script: String) throws {
        try db.execute(script)
    }

    /// PostgreSQL commits durably (`synchronous_commit` on), whatever is asked.
    func transaction<T>(_ durability: SQLDurability, _ body: () throws -> T) throws -> T {
        try db.transaction("", body)
    }

    /// A transaction advisory lock on `key`'s hash, in a namespace of its own.
    func lock(_ key: String) throws {
        try db.query("SELECT pg_advisory_xact_lock($1::int4, hashtext($2))", [.int(Int64(Self.lockNamespace)), .text(key)])
    }

    /// The namespace of `lock(_:)` (ASCII "begi", from the media `begin` it first served).
    static let lockNamespace: Int32 = 0x6265_6769

    func anyOf(_ column: String) -> String { "\(column) = ANY(?)" }

    func reconnectIfNeeded() throws { try db.reconnectIfNeeded() }

    func close() { db.close() }

    /// `sql` with its `?` placeholders numbered `$1…$n` (none sits inside a string literal
    /// or identifier of the statements written for this seam; quoted text is skipped).
    private func dollar(_ sql: String) -> String {
        if let done = rewritten[sql] { return done }
        var out = ""
        var n = 0
        var quote: Character?
        for c in sql {
            if let q = quote {
                if c == q { quote = nil }
                out.append(c)
            } else if c == "'" || c == "\"" {
                quote = c
                out.append(c)
            } else if c == "?" {
                n += 1
                out += "$\(n)"
            } else {
                out.append(c)
            }
        }
        rewritten[sql] = out
        return out
    }

    private static func bind(_ value: SQLValue) -> PostgresValue {
        switch value {
        case .null: return .null
        case .integer(let v): return .int(v)
        case .text(let s): return .text(s)
        case .bytes(let b): return .bytes(b)
        case .texts(let list): return .textArray(list)
        case .integers(let list): return .intArray(list)
        }
    }
}
