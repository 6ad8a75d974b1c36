/// Runs SQL over a session from async code, wherever the session lives: on a thread with a
/// session of its own (`WorkerThread<SQLSessionJob>`), or on a store's thread with a
/// session borrowing its connection (`SQLiteSyncStore.writerSessions`).
protocol SQLRunner: Sendable {
    /// Runs `body` with the session; the caller suspends (holding no thread of the
    /// concurrency pool) until it has run.
    func run<T: Sendable>(_ what: String, _ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T
    /// Ends what the runner owns (its thread and session); a borrowed connection is left to
    /// its owner. Blocks while a thread joins.
    func stop()
}

extension WorkerThread: SQLRunner where Job == SQLSessionJob {}

/// Runs work on a thread of `SQLSessionJob`s from async code: the caller suspends (holding
/// no thread of the concurrency pool) until the thread has run `body` with its session.
extension WorkerThread where Job == SQLSessionJob {
    func run<T: Sendable>(_ what: String, _ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = SQLSessionJob { db, error in
                if let error { continuation.resume(throwing: error); return }
                continuation.resume(with: Result { try body(db) })
            }
            if !submit(job) { continuation.resume(throwing: StoreError("the \(what) store is closed")) }
        }
    }
}
