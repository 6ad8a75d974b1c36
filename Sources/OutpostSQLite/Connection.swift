import OutpostCSQLite

/// One SQLite database connection.
///
/// Concurrency rules (as in GRDB's `SerializedDatabase`): a connection is never shared.
/// Exactly one owner (an actor, or a dedicated thread) uses it, and every `Statement` it
/// prepares stays with it. That is why `Connection` is not `Sendable`. SQLite is built
/// in serialized threading mode on Debian, but we do not rely on it: ownership is what
/// keeps prepared statements and transactions consistent.
public final class Connection {
    let handle: OpaquePointer
    /// The file the connection opened (`:memory:` for an in-memory database).
    public let path: String
    private var cache: [String: Statement] = [:]
    /// The most statements `cached` keeps.
    public static let cacheLimit = 256
    private var isClosed = false

    /// How a connection opens its file.
    public struct OpenFlags: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public static let readOnly = OpenFlags(rawValue: SQLITE_OPEN_READONLY)
        public static let readWrite = OpenFlags(rawValue: SQLITE_OPEN_READWRITE)
        public static let create = OpenFlags(rawValue: SQLITE_OPEN_CREATE)
        public static let uri = OpenFlags(rawValue: SQLITE_OPEN_URI)
        public static let memory = OpenFlags(rawValue: SQLITE_OPEN_MEMORY)
    }

    /// Opens (and by default creates) the database at `path`.
    ///
    /// - Parameter busyTimeoutMs: how long a statement waits for another connection's lock
    ///   before failing with `SQLITE_BUSY`.
    public init(path: String, flags: OpenFlags = [.readWrite, .create], busyTimeoutMs: Int32 = 5000) throws(SQLiteError) {
        var db: OpaquePointer?
        // NOMUTEX: each connection has one owner (see the type's comment), so SQLite's
        // per-connection mutex is pure overhead.
        let rc = sqlite3_open_v2(path, &db, flags.rawValue | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let db else {
            let error = SQLiteError.from(rc, db: db)
            if let db { sqlite3_close_v2(db) }
            throw error
        }
        self.handle = db
        self.path = path
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, busyTimeoutMs)
    }

    /// A private in-memory database.
    public static func inMemory() throws(SQLiteError) -> Connection {
        try Connection(path: ":memory:")
    }

    deinit {
        if !isClosed {
            cache.removeAll()
            sqlite3_close_v2(handle)
        }
    }

    /// Closes the connection. Statements are finalized first. Failures while closing are
    /// not thrown: there is nothing a caller could do about them.
    public func close() {
        guard !isClosed else { return }
        cache.removeAll()
        sqlite3_close_v2(handle)
        isClosed = true
    }

    // MARK: Running SQL

    /// Runs one or more statements separated by semicolons, discarding rows.
    public func execute(_ sql: String) throws(SQLiteError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) }
            sqlite3_free(errorMessage)
            var error = SQLiteError.from(rc, db: handle, sql: sql)
            if let message { error = SQLiteError(code: error.code, message: message, sql: sql) }
            throw error
        }
    }

    /// Prepares a statement that the caller owns.
    public func prepare(_ sql: String) throws(SQLiteError) -> Statement {
        try Statement(connection: self, sql: sql)
    }

    /// Returns a prepared statement for `sql`, reused across calls (reset before each use
    /// by `bind`). For the statements a hot path runs over and over.
    ///
    /// The cache holds at most `cacheLimit` statements: SQL built at run time (a query of
    /// the app's) could otherwise grow it for ever. When full it starts again empty; a
    /// statement a caller still holds stays valid.
    public func cached(_ sql: String) throws(SQLiteError) -> Statement {
        if let stmt = cache[sql] {
            stmt.reset()
            return stmt
        }
        let stmt = try Statement(connection: self, sql: sql)
        if cache.count >= Self.cacheLimit { cache.removeAll() }
        cache[sql] = stmt
        return stmt
    }

    /// Runs `sql` with `values` bound, discarding rows (statement cached).
    public func run(_ sql: String, _ values: [SQLiteValue] = []) throws(SQLiteError) {
        try cached(sql).run(values)
    }

    /// Maps every row of `sql` (statement cached).
    public func query<T>(_ sql: String, _ values: [SQLiteValue] = [], _ row: (Statement) throws -> T) throws -> [T] {
        try cached(sql).query(values, row)
    }

    /// Maps the first row of `sql`, if any (statement cached).
    public func queryOne<T>(_ sql: String, _ values: [SQLiteValue] = [], _ row: (Statement) throws -> T) throws -> T? {
        try cached(sql).queryOne(values, row)
    }

    /// The first column of the first row as an integer, if there is a row.
    public func scalarInt(_ sql: String, _ values: [SQLiteValue] = []) throws -> Int64? {
        try queryOne(sql, values) { $0.isNull(0) ? nil : $0.int64(0) } ?? nil
    }

    /// The first column of the first row as text, if there is a row and it is not NULL.
    public func scalarText(_ sql: String, _ values: [SQLiteValue] = []) throws -> String? {
        try queryOne(sql, values) { $0.optionalText(0) } ?? nil
    }

    /// Rows changed by the most recent INSERT, UPDATE or DELETE.
    public var changes: Int { Int(sqlite3_changes64(handle)) }

    /// Rowid of the most recent successful INSERT.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// True while a transaction is open.
    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    // MARK: Transactions

    /// The kind of `BEGIN`.
    public enum TransactionKind: String, Sendable {
        /// Takes locks as statements need them.
        case deferred = "DEFERRED"
        /// Takes the write lock at once: no `SQLITE_BUSY` upgrade failure halfway through.
        case immediate = "IMMEDIATE"
        case exclusive = "EXCLUSIVE"
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    /// Nested calls become savepoints, so an inner failure rolls back only the inner part.
    public func transaction<T>(_ kind: TransactionKind = .immediate, _ body: () throws -> T) throws -> T {
        if isInTransaction {
            return try savepoint(body)
        }
        try execute("BEGIN \(kind.rawValue)")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }

    private var savepointDepth = 0

    /// Runs `body` inside a savepoint: released when it returns, rolled back when it throws.
    public func savepoint<T>(_ body: () throws -> T) throws -> T {
        savepointDepth += 1
        let name = "sp\(savepointDepth)"
        defer { savepointDepth -= 1 }
        try execute("SAVEPOINT \(name)")
        do {
            let result = try body()
            try execute("RELEASE \(name)")
            return result
        } catch {
            try? execute("ROLLBACK TO \(name)")
            try? execute("RELEASE \(name)")
            throw error
        }
    }

    // MARK: Settings

    /// The durability of commits in WAL mode (`PRAGMA synchronous`).
    public enum Synchronous: String, Sendable {
        case off = "OFF"
        /// In WAL mode: a commit survives a crash of the process, but the last commits
        /// may be lost if the machine loses power before the next checkpoint.
        case normal = "NORMAL"
        /// In WAL mode: the WAL is fsynced at every commit; a commit survives power loss.
        case full = "FULL"
    }

    /// Switches to write-ahead logging and sets the commit durability.
    public func enableWAL(synchronous: Synchronous) throws(SQLiteError) {
        let mode = try scalarTextPragma("PRAGMA journal_mode=WAL")
        guard mode?.lowercased() == "wal" || path == ":memory:" else {
            throw SQLiteError(code: SQLITE_ERROR, message: "could not enable WAL (journal_mode is \(mode ?? "unknown"))")
        }
        try execute("PRAGMA synchronous=\(synchronous.rawValue)")
    }

    /// Keeps the `-wal` and `-shm` files when the last connection closes
    /// (`SQLITE_FCNTL_PERSIST_WAL`), so that a read-only connection of another process can
    /// open the database while no writer has it open (it cannot create them itself).
    public func keepWALFiles() throws(SQLiteError) {
        var on: Int32 = 1
        let rc = sqlite3_file_control(handle, "main", SQLITE_FCNTL_PERSIST_WAL, &on)
        guard rc == SQLITE_OK else { throw SQLiteError.from(rc, db: handle) }
    }

    private func scalarTextPragma(_ sql: String) throws(SQLiteError) -> String? {
        let stmt = try prepare(sql)
        guard try stmt.step() else { return nil }
        return stmt.optionalText(0)
    }

    /// Runs `PRAGMA integrity_check` and returns its lines (`["ok"]` when sound).
    public func integrityCheck() throws -> [String] {
        try prepare("PRAGMA integrity_check").query { $0.text(0) }
    }

    /// Runs a WAL checkpoint that truncates the log.
    public func checkpoint() throws(SQLiteError) {
        try execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    // MARK: Online backup

    /// Copies this database into `destination` with SQLite's online backup API, in steps of
    /// `pagesPerStep` pages so that writers on other connections are not held up for long.
    /// The copy is a consistent snapshot.
    public func backup(into destination: Connection, pagesPerStep: Int32 = 256) throws(SQLiteError) {
        guard let backup = sqlite3_backup_init(destination.handle, "main", handle, "main") else {
            throw SQLiteError.from(sqlite3_errcode(destination.handle), db: destination.handle)
        }
        while true {
            let rc = sqlite3_backup_step(backup, pagesPerStep)
            if rc == SQLITE_DONE { break }
            if rc == SQLITE_OK { continue }
            if rc == SQLITE_BUSY || rc == SQLITE_LOCKED {
                sqlite3_sleep(5)
                continue
            }
            sqlite3_backup_finish(backup)
            throw SQLiteError.from(rc, db: destination.handle)
        }
        let rc = sqlite3_backup_finish(backup)
        guard rc == SQLITE_OK else { throw SQLiteError.from(rc, db: destination.handle) }
    }
}

/// The SQLite library's version, e.g. "3.40.1".
public var sqliteLibraryVersion: String { String(cString: sqlite3_libversion()) }
