/// A failure reported by PostgreSQL or by libpq.
///
/// `sqlState` is the five-character SQLSTATE of a server error (`40P01` deadlock,
/// `23505` unique violation…), nil for failures of the connection itself. The SQL text is
/// kept for diagnosis; bound parameters never are, so record data and tokens cannot leak
/// into logs through an error's description.
public struct PostgresError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The SQLSTATE, when the server sent one.
    public let sqlState: String?
    /// The server's or libpq's message, without the trailing newline.
    public let message: String
    /// The statement that failed, when there was one.
    public let sql: String?
    /// True when the connection was lost (the statement may or may not have run).
    public let connectionLost: Bool

    /// An error with these parts.
    public init(sqlState: String?, message: String, sql: String? = nil, connectionLost: Bool = false) {
        self.sqlState = sqlState
        self.message = message
        self.sql = sql
        self.connectionLost = connectionLost
    }

    /// `40P01`: the server broke a deadlock by aborting this transaction.
    public static let deadlockDetected = "40P01"
    /// `40001`: a serialization failure.
    public static let serializationFailure = "40001"
    /// `23505`: a unique constraint was violated.
    public static let uniqueViolation = "23505"
    /// `55P03`: a lock could not be taken.
    public static let lockNotAvailable = "55P03"

    /// True when running the whole transaction again may succeed: a deadlock or a
    /// serialization failure, both of which roll the transaction back.
    public var isRetryable: Bool {
        sqlState == Self.deadlockDetected || sqlState == Self.serializationFailure
    }

    public var description: String {
        var text = "PostgreSQL error"
        if let sqlState { text += " \(sqlState)" }
        if connectionLost { text += " (connection lost)" }
        text += ": \(message)"
        if let sql { text += " (SQL: \(sql.count > 300 ? String(sql.prefix(300)) + "…" : sql))" }
        return text
    }
}
