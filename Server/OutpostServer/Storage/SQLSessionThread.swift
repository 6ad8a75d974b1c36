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
