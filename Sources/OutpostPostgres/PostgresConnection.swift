import OutpostCLibPQ
#if canImport(Glibc)
import Glibc
#endif

/// One PostgreSQL connection through libpq, in blocking mode.
///
/// Concurrency rules (the same as `OutpostSQLite.Connection`): a connection is never
/// shared. Exactly one owner — in the server, a dedicated thread — uses it, with every
/// statement it prepared and every `PostgresRows` it returned. That is why it is not
/// `Sendable`. libpq calls block on the network, so the owner is never a thread of Swift's
/// cooperative pool.
///
/// Statements are prepared once per connection and SQL text (`PQprepare`), then run with
/// `PQexecPrepared`; parameters and results travel in the binary format, typed by
/// `PostgresValue`, so no value is ever spliced into SQL text.
public final class PostgresConnection {
    private var handle: OpaquePointer?
    /// The connection string or URL (`postgres://user@host:port/db`).
    public let url: String
    private var prepared: [String: String] = [:]
    private var nextStatement = 0

    /// Connects to `url` (a `postgres://` or `postgresql://` URL, or a libpq keyword string).
    public init(url: String) throws(PostgresError) {
        self.url = url
        handle = try Self.connect(url)
    }

    private static func connect(_ url: String) throws(PostgresError) -> OpaquePointer {
        guard let conn = PQconnectdb(url) else {
            throw PostgresError(sqlState: nil, message: "libpq could not allocate a connection", connectionLost: true)
        }
        guard PQstatus(conn) == CONNECTION_OK else {
            let message = Self.message(PQerrorMessage(conn))
            PQfinish(conn)
            throw PostgresError(sqlState: nil, message: "cannot connect to \(redacted(url)): \(message)", connectionLost: true)
        }
        // libpq prints server notices to standard error by default (a FATAL before a
        // terminated connection among them), outside the server's JSON log. They are
        // dropped: the error of the call that meets the failure carries its message.
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
        return conn
    }

    /// `url` with any password replaced by `***`, for messages and logs.
    public static func redacted(_ url: String) -> String {
        let chars = Array(url)
        guard let schemeEnd = (0..<max(0, chars.count - 2)).first(where: { chars[$0] == ":" && chars[$0 + 1] == "/" && chars[$0 + 2] == "/" }) else { return url }
        let start = schemeEnd + 3
        guard let at = chars[start...].firstIndex(of: "@"),
              let colon = chars[start..<at].firstIndex(of: ":") else { return url }
        return String(chars[..<(colon + 1)]) + "***" + String(chars[at...])
    }

    deinit {
        if let handle { PQfinish(handle) }
    }

    /// Closes the connection. Never throws: there is nothing a caller could do.
    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        prepared.removeAll()
    }

    /// True while the connection is usable.
    public var isConnected: Bool {
        guard let handle else { return false }
        return PQstatus(handle) == CONNECTION_OK
    }

    /// Connects again when the connection was lost (prepared statements are forgotten:
    /// the new session has none). Does nothing while the connection is fine.
    public func reconnectIfNeeded() throws(PostgresError) {
        if isConnected { return }
        if let handle { PQfinish(handle) }
        handle = nil
        prepared.removeAll()
        handle = try Self.connect(url)
    }

    /// The server process serving this connection (`pg_backend_pid()`).
    public var backendPID: Int32 {
        guard let handle else { return 0 }
        return PQbackendPID(handle)
    }

    /// True inside a transaction block (also an aborted one).
    public var isInTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    private var live: OpaquePointer {
        get throws(PostgresError) {
            guard let handle else { throw PostgresError(sqlState: nil, message: "the connection is closed", connectionLost: true) }
            return handle
        }
    }

    // MARK: Running SQL

    /// Runs one or more statements separated by semicolons (simple query protocol, no
    /// parameters), discarding rows: schema changes, `BEGIN`, `COMMIT`.
    public func execute(_ sql: String) throws(PostgresError) {
        let conn = try live
        let result = PQexec(conn, sql)
        defer { PQclear(result) }
        try check(result, conn: conn, sql: sql)
    }

    /// Runs one statement with parameters and returns its rows.
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = []) throws(PostgresError) -> PostgresRows {
        let conn = try live
        let name = try statementName(sql, parameters, conn: conn)
        let count = Int32(parameters.count)
        let encoded = parameters.map(\.binary)
        let lengths = encoded.map { Int32($0?.count ?? 0) }
        let formats = [Int32](repeating: 1, count: parameters.count)
        // Pointers into the encoded buffers must stay valid for the call: allocate them
        // as one block and copy the bytes in.
        let total = encoded.reduce(0) { $0 + ($1?.count ?? 0) }
        let storage = UnsafeMutableRawPointer.allocate(byteCount: max(total, 1), alignment: 8)
        defer { storage.deallocate() }
        var values: [UnsafePointer<CChar>?] = []
        values.reserveCapacity(parameters.count)
        var offset = 0
        for item in encoded {
            guard let item else {
                values.append(nil)
                continue
            }
            let start = storage.advanced(by: offset)
            item.withUnsafeBytes { raw in
                if let base = raw.baseAddress { start.copyMemory(from: base, byteCount: raw.count) }
            }
            values.append(UnsafePointer(start.assumingMemoryBound(to: CChar.self)))
            offset += item.count
        }
        let result = values.withUnsafeBufferPointer { valuePointers in
            lengths.withUnsafeBufferPointer { lengthPointers in
                formats.withUnsafeBufferPointer { formatPointers in
                    PQexecPrepared(conn, name, count, valuePointers.baseAddress, lengthPointers.baseAddress, formatPointers.baseAddress, 1)
                }
            }
        }
        do {
            try check(result, conn: conn, sql: sql)
        } catch {
            PQclear(result)
            throw error
        }
        return PostgresRows(result!)
    }

    /// Runs one statement with parameters and returns how many rows it changed.
    @discardableResult
    public func run(_ sql: String, _ parameters: [PostgresValue] = []) throws(PostgresError) -> Int {
        try query(sql, parameters).affectedRows
    }

    /// Runs `body` in a transaction: `BEGIN` (with `options`, e.g. `ISOLATION LEVEL
    /// REPEATABLE READ`), then `COMMIT`, or `ROLLBACK` when `body` throws.
    public func transaction<T>(_ options: String = "", _ body: () throws -> T) throws -> T {
        try execute(options.isEmpty ? "BEGIN" : "BEGIN " + options)
        let value: T
        do {
            value = try body()
        } catch {
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
        try execute("COMMIT")
        return value
    }

    private func statementName(_ sql: String, _ parameters: [PostgresValue], conn: OpaquePointer) throws(PostgresError) -> String {
        let types = parameters.map(\.oid)
        var key = sql
        key.append("\u{0}")
        for t in types { key += String(t) + "," }
        if let name = prepared[key] { return name }
        nextStatement += 1
        let name = "outpost_\(nextStatement)"
        let result = types.withUnsafeBufferPointer { oids in
            PQprepare(conn, name, sql, Int32(types.count), oids.baseAddress)
        }
        defer { PQclear(result) }
        try check(result, conn: conn, sql: sql)
        prepared[key] = name
        return name
    }

    private func check(_ result: OpaquePointer?, conn: OpaquePointer, sql: String) throws(PostgresError) {
        guard let result else {
            throw PostgresError(sqlState: nil, message: Self.message(PQerrorMessage(conn)), sql: sql, connectionLost: PQstatus(conn) != CONNECTION_OK)
        }
        let status = PQresultStatus(result)
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY { return }
        let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let message = Self.message(PQresultErrorMessage(result))
        throw PostgresError(sqlState: state, message: message, sql: sql, connectionLost: PQstatus(conn) != CONNECTION_OK)
    }

    static func message(_ text: UnsafePointer<CChar>?) -> String {
        guard let text else { return "unknown error" }
        var s = String(cString: text)
        while s.last == "\n" { s.removeLast() }
        return s.isEmpty ? "unknown error" : s
    }

    // MARK: Notifications (LISTEN/NOTIFY)

    /// One notification received on a channel this connection listens to.
    public struct Notification: Sendable, Equatable {
        /// The channel name.
        public var channel: String
        /// The payload given to `NOTIFY` / `pg_notify`.
        public var payload: String
        /// The server process that sent it.
        public var senderPID: Int32
    }

    /// Waits up to `timeoutMs` for data on the connection's socket, reads what arrived
    /// and returns the notifications received (possibly none). Throws when the
    /// connection is lost.
    public func waitForNotifications(timeoutMs: Int32) throws(PostgresError) -> [Notification] {
        let conn = try live
        var out = drainNotifications(conn)
        if !out.isEmpty { return out }
        let fd = PQsocket(conn)
        guard fd >= 0 else { throw PostgresError(sqlState: nil, message: "the connection has no socket", connectionLost: true) }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&pfd, 1, timeoutMs)
        if ready < 0 && errno != EINTR {
            throw PostgresError(sqlState: nil, message: "poll failed: \(String(cString: strerror(errno)))", connectionLost: true)
        }
        if ready > 0 {
            guard PQconsumeInput(conn) == 1 else {
                throw PostgresError(sqlState: nil, message: Self.message(PQerrorMessage(conn)), connectionLost: true)
            }
            out = drainNotifications(conn)
        }
        if PQstatus(conn) != CONNECTION_OK {
            throw PostgresError(sqlState: nil, message: "the connection was lost", connectionLost: true)
        }
        return out
    }

    private func drainNotifications(_ conn: OpaquePointer) -> [Notification] {
        var out: [Notification] = []
        while let n = PQnotifies(conn) {
            let channel = String(cString: n.pointee.relname)
            let payload = n.pointee.extra.map { String(cString: $0) } ?? ""
            out.append(Notification(channel: channel, payload: payload, senderPID: n.pointee.be_pid))
            PQfreemem(n)
        }
        return out
    }
}

/// The rows of one statement's result, in the binary format. Owned by the connection's
/// thread like the connection; the result is freed when this goes.
public final class PostgresRows {
    private let result: OpaquePointer

    init(_ result: OpaquePointer) {
        self.result = result
    }

    deinit { PQclear(result) }

    /// Number of rows.
    public var count: Int { Int(PQntuples(result)) }

    /// Rows changed by an `INSERT`, `UPDATE` or `DELETE` (0 for other statements).
    public var affectedRows: Int {
        guard let text = PQcmdTuples(result) else { return 0 }
        return Int(String(cString: text)) ?? 0
    }

    /// True when the value at (`row`, `column`) is SQL NULL.
    public func isNull(_ row: Int, _ column: Int) -> Bool {
        PQgetisnull(result, Int32(row), Int32(column)) == 1
    }

    /// The raw bytes of a value (empty for NULL), valid while `self` lives.
    public func withBytes<T>(_ row: Int, _ column: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        guard let pointer = PQgetvalue(result, Int32(row), Int32(column)), length > 0 else {
            return try body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
        return try body(UnsafeRawBufferPointer(start: UnsafeRawPointer(pointer), count: length))
    }

    /// A `bigint`, `integer` or `smallint` value (0 for NULL).
    public func int64(_ row: Int, _ column: Int) -> Int64 {
        let type = PQftype(result, Int32(column))
        return withBytes(row, column) { raw -> Int64 in
            var v: UInt64 = 0
            for byte in raw { v = v << 8 | UInt64(byte) }
            switch raw.count {
            case 8: return Int64(bitPattern: v)
            case 4: return Int64(Int32(bitPattern: UInt32(truncatingIfNeeded: v)))
            case 2: return Int64(Int16(bitPattern: UInt16(truncatingIfNeeded: v)))
            case 0: return 0
            default:
                precondition(false, "column \(column) of type \(type) is not an integer")
                return 0
            }
        }
    }

    /// An integer value, or nil for NULL.
    public func optionalInt64(_ row: Int, _ column: Int) -> Int64? {
        isNull(row, column) ? nil : int64(row, column)
    }

    /// A `text` value ("" for NULL).
    public func text(_ row: Int, _ column: Int) -> String {
        withBytes(row, column) { String(decoding: $0, as: UTF8.self) }
    }

    /// A `text` value, or nil for NULL.
    public func optionalText(_ row: Int, _ column: Int) -> String? {
        isNull(row, column) ? nil : text(row, column)
    }

    /// A `bytea` value ([] for NULL).
    public func bytes(_ row: Int, _ column: Int) -> [UInt8] {
        withBytes(row, column) { Array($0) }
    }

    /// A `bytea` value, or nil for NULL.
    public func optionalBytes(_ row: Int, _ column: Int) -> [UInt8]? {
        isNull(row, column) ? nil : bytes(row, column)
    }

    /// A `boolean` value (false for NULL).
    public func bool(_ row: Int, _ column: Int) -> Bool {
        withBytes(row, column) { $0.first.map { $0 != 0 } ?? false }
    }
}
