import Foundation
import Synchronization

/// Runs blocking work (socket reads, child processes) on a thread of its own and awaits
/// it. Blocking calls must never run on Swift's cooperative pool: it has one thread per
/// core, and a test that blocks them starves the in-process server it is talking to.
public func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.stackSize = 1 << 20
        thread.start()
    }
}

/// Blocking work started on a thread of its own at once, awaited later through `value`:
/// unlike `Task.detached { try await blocking { ... } }`, nothing waits for a thread of the
/// cooperative pool before the work starts (a request a test sends and then holds, a long
/// poll, is on the wire when this returns, or soon after on a busy machine).
public final class OnThread<T: Sendable>: Sendable {
    private struct State {
        var result: Result<T, any Error>?
        var waiter: CheckedContinuation<T, any Error>?
    }

    private let state = Mutex(State())

    public init(_ body: @escaping @Sendable () throws -> T) {
        let thread = Thread { [self] in
            let result = Result { try body() }
            let waiter = state.withLock { s -> CheckedContinuation<T, any Error>? in
                s.result = result
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume(with: result)
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// The work's result, once it has ended.
    public var value: T {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                let done = state.withLock { s -> Result<T, any Error>? in
                    if let result = s.result { return result }
                    s.waiter = continuation
                    return nil
                }
                if let done { continuation.resume(with: done) }
            }
        }
    }
}
