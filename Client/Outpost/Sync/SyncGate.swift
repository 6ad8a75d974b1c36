import Synchronization

/// The store's one-sync-at-a-time gate: one holder, the others wait in arrival order.
///
/// A waiter whose task is cancelled leaves the queue at once with `CancellationError`, so
/// a background task that runs out of time while a foreground sync holds the gate ends
/// when its expiration handler cancels it, instead of waiting for that sync.
final class SyncGate: Sendable {
    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var held = false
        var waiters: [Waiter] = []
        var nextId: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Tasks waiting for the gate now.
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// Takes the gate, waiting for the holder (and those before) to release it.
    ///
    /// - Throws: `CancellationError` when the task is cancelled before it got the gate.
    func acquire() async throws {
        let id = state.withLock { s in
            s.nextId += 1
            return s.nextId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // Cancellation is read under the lock: a cancel that came before this point
                // is seen here, one after it finds the waiter in the queue (below).
                let now: Result<Void, any Error>? = state.withLock { s in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if !s.held {
                        s.held = true
                        return .success(())
                    }
                    s.waiters.append(Waiter(id: id, continuation: continuation))
                    return nil
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            let waiter = state.withLock { s -> Waiter? in
                guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Hands the gate to the first waiter, or opens it.
    func release() {
        let next = state.withLock { s -> Waiter? in
            guard !s.waiters.isEmpty else {
                s.held = false
                return nil
            }
            return s.waiters.removeFirst()
        }
        next?.continuation.resume()
    }
}
