import OutpostCSQLite

/// A failure reported by SQLite.
///
/// `code` is the *extended* result code (for example `SQLITE_CONSTRAINT_UNIQUE`, 2067);
/// `primaryCode` folds it to the primary code (`SQLITE_CONSTRAINT`, 19). The SQL text is
/// kept for diagnosis; bound arguments never are, so record data and tokens cannot leak
/// into logs through an error's description.
public struct SQLiteError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The extended result code.
    public let code: Int32
    /// SQLite's message for the failure (`sqlite3_errmsg`), or the code's generic text.
    public let message: String
    /// The statement that failed, when there was one.
    public let sql: String?

    public init(code: Int32, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    /// Extended codes used by callers (the C macros are expressions Swift does not import).
    public static let constraintUnique: Int32 = SQLITE_CONSTRAINT | (8 << 8)
    public static let constraintPrimaryKey: Int32 = SQLITE_CONSTRAINT | (6 << 8)
    public static let ioErrorFsync: Int32 = SQLITE_IOERR | (4 << 8)

    /// The primary result code (the low 8 bits of the extended code).
    public var primaryCode: Int32 { code & 0xFF }

    /// True for `SQLITE_BUSY` and `SQLITE_LOCKED`, which a caller may retry.
    public var isBusy: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }

    /// True for any constraint violation (unique, primary key, check, not null...).
    public var isConstraint: Bool { primaryCode == SQLITE_CONSTRAINT }

    public var description: String {
        var text = "SQLite error \(code): \(message)"
        if let sql { text += " (SQL: \(sql))" }
        return text
    }

    /// Builds the error for `code` from the connection's last message.
    static func from(_ code: Int32, db: OpaquePointer?, sql: String? = nil) -> SQLiteError {
        let message: String
        if let db, let cMessage = sqlite3_errmsg(db) {
            message = String(cString: cMessage)
        } else if let cMessage = sqlite3_errstr(code) {
            message = String(cString: cMessage)
        } else {
            message = "unknown error"
        }
        let extended = db.map { sqlite3_extended_errcode($0) } ?? code
        // `sqlite3_extended_errcode` describes the most recent failure; prefer it only when it
        // belongs to the same primary code, so a stale code never replaces the real one.
        let chosen = (extended & 0xFF) == (code & 0xFF) ? extended : code
        return SQLiteError(code: chosen, message: message, sql: sql)
    }
}
