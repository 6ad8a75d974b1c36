import OutpostCSQLite

/// A value SQLite stores in a column or takes as a parameter.
public enum SQLiteValue: Sendable, Equatable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
}

extension SQLiteValue: ExpressibleByNilLiteral, ExpressibleByIntegerLiteral, ExpressibleByStringLiteral,
    ExpressibleByFloatLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(stringLiteral value: String) { self = .text(value) }
    public init(floatLiteral value: Double) { self = .real(value) }
}

/// `SQLITE_TRANSIENT`: SQLite copies the bound bytes before the call returns.
/// (The C macro does not import into Swift.)
let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// A prepared statement. Owned by the `Connection` that prepared it and used only on that
/// connection's executor; never shared between threads.
public final class Statement {
    let handle: OpaquePointer
    /// The SQL text, for error messages.
    public let sql: String
    private unowned let connection: Connection

    init(connection: Connection, sql: String) throws(SQLiteError) {
        var stmt: OpaquePointer?
        let rc = sql.withCString { sqlite3_prepare_v3(connection.handle, $0, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil) }
        guard rc == SQLITE_OK, let stmt else {
            throw SQLiteError.from(rc, db: connection.handle, sql: sql)
        }
        self.handle = stmt
        self.sql = sql
        self.connection = connection
    }

    deinit {
        sqlite3_finalize(handle)
    }

    // MARK: Binding (1-based indexes, as in SQLite)

    /// Resets the statement and binds `values` to its parameters, in order.
    @discardableResult
    public func bind(_ values: [SQLiteValue]) throws(SQLiteError) -> Statement {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        for (offset, value) in values.enumerated() {
            try bind(value, at: Int32(offset + 1))
        }
        return self
    }

    /// Binds one value to the parameter at `index` (1-based).
    public func bind(_ value: SQLiteValue, at index: Int32) throws(SQLiteError) {
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(handle, index)
        case .integer(let v): rc = sqlite3_bind_int64(handle, index, v)
        case .real(let v): rc = sqlite3_bind_double(handle, index, v)
        case .text(let v): rc = bindText(v, at: index)
        case .blob(let v): rc = bindBlob(v, at: index)
        }
        guard rc == SQLITE_OK else { throw SQLiteError.from(rc, db: connection.handle, sql: sql) }
    }

    /// Binds UTF-8 text without building an intermediate `SQLiteValue`.
    public func bind(text: String, at index: Int32) throws(SQLiteError) {
        let rc = bindText(text, at: index)
        guard rc == SQLITE_OK else { throw SQLiteError.from(rc, db: connection.handle, sql: sql) }
    }

    /// Binds an integer.
    public func bind(int: Int64, at index: Int32) throws(SQLiteError) {
        let rc = sqlite3_bind_int64(handle, index, int)
        guard rc == SQLITE_OK else { throw SQLiteError.from(rc, db: connection.handle, sql: sql) }
    }

    /// Binds raw bytes as a blob (an empty buffer binds a zero-length blob, not NULL).
    public func bind<Bytes: Collection>(blob: Bytes, at index: Int32) throws(SQLiteError) where Bytes.Element == UInt8 {
        let rc = bindBlob(blob, at: index)
        guard rc == SQLITE_OK else { throw SQLiteError.from(rc, db: connection.handle, sql: sql) }
    }

    /// Binds raw bytes as UTF-8 text (the caller guarantees they are valid UTF-8).
    public func bind<Bytes: Collection>(utf8Text bytes: Bytes, at index: Int32) throws(SQLiteError) where Bytes.Element == UInt8 {
        let rc = bytes.withContiguousStorageIfAvailable { bindTextBuffer($0, at: index) }
            ?? Array(bytes).withUnsafeBufferPointer { bindTextBuffer($0, at: index) }
        guard rc == SQLITE_OK else { throw SQLiteError.from(rc, db: connection.handle, sql: sql) }
    }

    /// Binds NULL.
    public func bindNull(at index: Int32) throws(SQLiteError) {
        let rc = sqlite3_bind_null(handle, index)
        guard rc == SQLITE_OK else { throw SQLiteError.from(rc, db: connection.handle, sql: sql) }
    }

    private func bindText(_ text: String, at index: Int32) -> Int32 {
        var text = text
        return text.withUTF8 { bindTextBuffer($0, at: index) }
    }

    private func bindTextBuffer(_ buf: UnsafeBufferPointer<UInt8>, at index: Int32) -> Int32 {
        // A NULL pointer would bind SQL NULL; empty text needs a valid pointer.
        guard let base = buf.baseAddress, buf.count > 0 else {
            return sqlite3_bind_text(handle, index, "", 0, sqliteTransient)
        }
        return UnsafeRawPointer(base).withMemoryRebound(to: CChar.self, capacity: buf.count) {
            sqlite3_bind_text(handle, index, $0, Int32(buf.count), sqliteTransient)
        }
    }

    private func bindBlob<Bytes: Collection>(_ bytes: Bytes, at index: Int32) -> Int32 where Bytes.Element == UInt8 {
        let bindBuffer: (UnsafeBufferPointer<UInt8>) -> Int32 = { buf in
            if buf.isEmpty { return sqlite3_bind_zeroblob(self.handle, index, 0) }
            return sqlite3_bind_blob(self.handle, index, buf.baseAddress, Int32(buf.count), sqliteTransient)
        }
        if let rc = bytes.withContiguousStorageIfAvailable(bindBuffer) { return rc }
        return Array(bytes).withUnsafeBufferPointer(bindBuffer)
    }

    // MARK: Stepping

    /// Advances to the next row. Returns `true` when a row is available, `false` when done.
    @discardableResult
    public func step() throws(SQLiteError) -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = SQLiteError.from(rc, db: connection.handle, sql: sql)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// Runs the statement to completion with `values` bound, discarding rows.
    public func run(_ values: [SQLiteValue] = []) throws(SQLiteError) {
        try bind(values)
        while try step() {}
        sqlite3_reset(handle)
    }

    /// Resets the statement so it can run again (bindings stay).
    public func reset() {
        sqlite3_reset(handle)
    }

    /// Runs with `values` bound and maps every row.
    public func query<T>(_ values: [SQLiteValue] = [], _ row: (Statement) throws -> T) throws -> [T] {
        try bind(values)
        defer { sqlite3_reset(handle) }
        var out: [T] = []
        while try step() { out.append(try row(self)) }
        return out
    }

    /// Runs with `values` bound and maps the first row, if any.
    public func queryOne<T>(_ values: [SQLiteValue] = [], _ row: (Statement) throws -> T) throws -> T? {
        try bind(values)
        defer { sqlite3_reset(handle) }
        guard try step() else { return nil }
        return try row(self)
    }

    // MARK: Columns (0-based indexes, as in SQLite)

    public var columnCount: Int32 { sqlite3_column_count(handle) }

    public func columnName(_ index: Int32) -> String {
        sqlite3_column_name(handle, index).map { String(cString: $0) } ?? ""
    }

    public func isNull(_ index: Int32) -> Bool {
        sqlite3_column_type(handle, index) == SQLITE_NULL
    }

    public func int64(_ index: Int32) -> Int64 { sqlite3_column_int64(handle, index) }

    public func int(_ index: Int32) -> Int { Int(sqlite3_column_int64(handle, index)) }

    public func double(_ index: Int32) -> Double { sqlite3_column_double(handle, index) }

    public func optionalInt64(_ index: Int32) -> Int64? {
        isNull(index) ? nil : sqlite3_column_int64(handle, index)
    }

    /// The column as text; NULL reads as the empty string.
    public func text(_ index: Int32) -> String {
        guard let ptr = sqlite3_column_text(handle, index) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, index))
        return String(decoding: UnsafeBufferPointer(start: ptr, count: count), as: UTF8.self)
    }

    public func optionalText(_ index: Int32) -> String? {
        isNull(index) ? nil : text(index)
    }

    /// The column's bytes (blob or text) as an array.
    public func blob(_ index: Int32) -> [UInt8] {
        withBytes(index) { Array($0) }
    }

    public func optionalBlob(_ index: Int32) -> [UInt8]? {
        isNull(index) ? nil : blob(index)
    }

    /// Calls `body` with the column's bytes without copying them. The buffer is valid only
    /// during the call.
    public func withBytes<T>(_ index: Int32, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let ptr = sqlite3_column_blob(handle, index)
        let count = Int(sqlite3_column_bytes(handle, index))
        return try body(UnsafeRawBufferPointer(start: ptr, count: ptr == nil ? 0 : count))
    }

    /// The column as a `SQLiteValue`, by its storage class.
    public func value(_ index: Int32) -> SQLiteValue {
        switch sqlite3_column_type(handle, index) {
        case SQLITE_INTEGER: return .integer(int64(index))
        case SQLITE_FLOAT: return .real(double(index))
        case SQLITE_TEXT: return .text(text(index))
        case SQLITE_BLOB: return .blob(blob(index))
        default: return .null
        }
    }
}
