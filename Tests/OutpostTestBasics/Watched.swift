import Dispatch
import Synchronization

/// A value that threads change and tests await a state of: every change (`update`) checks
/// the conditions of the tasks waiting on it, and resumes those that hold. A test waits on
/// what a receiver, a callback or a log reader reports, as it reports it, not by looking
/// again and again; `until` throws `NotReached`, naming what it waited for, when the
/// deadline passes first, so a test never hangs.
public final class Watched<Value: Sendable>: Sendable {
    private struct Waiter {
        let condition: @Sendable (Value) -> Bool
        let continuation: CheckedContinuation<Value, any Error>
    }

    private struct State {
        var value: Value
        var waiters: [UInt64: Waiter] = [:]
        var nextID: UInt64 = 0
    }

    private let state: Mutex<State>

    public init(_ value: Value) {
        state = Mutex(State(value: value))
    }

    /// The value now.
    public var value: Value { state.withLock { $0.value } }

    /// Changes the value and resumes every waiter whose condition now holds. `body` runs
    /// under the lock: it must not block.
    @discardableResult
    public func update<R: Sendable>(_ body: (inout Value) -> R) -> R {
        let (result, ready) = state.withLock { s -> (R, [(CheckedContinuation<Value, any Error>, Value)]) in
            let result = body(&s.value)
            var ready: [(CheckedContinuation<Value, any Error>, Value)] = []
            for (id, waiter) in s.waiters where waiter.condition(s.value) {
                ready.append((waiter.continuation, s.value))
                s.waiters[id] = nil
            }
            return (result, ready)
        }
        for (continuation, value) in ready { continuation.resume(returning: value) }
        return result
    }

    /// Waits until `condition` holds for the value (checked now and after every change) and
    /// returns the value it held for; throws `NotReached`, naming `what` and the caller's
    /// line, once `within` has passed. The limit only ends a wait that went wrong: nothing
    /// is asserted about how long the wait took.
    @discardableResult
    public func until(_ what: String, within limit: Duration = .seconds(testDeadlineSeconds), fileID: String = #fileID, line: Int = #line,
                      _ condition: @escaping @Sendable (Value) -> Bool) async throws -> Value {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
            let now: Value? = state.withLock { s in
                if condition(s.value) { return s.value }
                s.waiters[id] = Waiter(condition: condition, continuation: continuation)
                return nil
            }
            if let now {
                continuation.resume(returning: now)
                return
            }
            let (seconds, attoseconds) = limit.components
            let nanoseconds = max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) { [self] in
                let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
                waiter?.continuation.resume(throwing: NotReached("not reached within \(limit): \(what) (\(fileID):\(line))"))
            }
        }
    }
}

extension Watched where Value == Int {
    /// Adds one (an event counted).
    public func add(_ amount: Int = 1) {
        update { $0 += amount }
    }
}

/// Starts `body` as a task on a thread of its own, and returns the task once its first
/// step has run: what `body` does before it first suspends (a waiter it registers, a job
/// it queues) is done when this returns. The thread runs its jobs in the order they were
/// queued, and this function queues its own turn (`Task.yield()` on that thread) after
/// the task's first step. The task's later steps run off the cooperative pool too.
public func startedTask<T: Sendable>(_ name: String = "test-first-step", _ body: @escaping @Sendable () async -> T) async -> Task<T, Never> {
    let executor = DedicatedThreadExecutor(name: name)
    let task = Task(executorPreference: executor) { await body() }
    await withTaskExecutorPreference(executor) { await Task.yield() }
    executor.stop()
    return task
}

/// `startedTask` for a body that throws.
public func startedThrowingTask<T: Sendable>(_ name: String = "test-first-step", _ body: @escaping @Sendable () async throws -> T) async -> Task<T, any Error> {
    let executor = DedicatedThreadExecutor(name: name)
    let task = Task(executorPreference: executor) { try await body() }
    await withTaskExecutorPreference(executor) { await Task.yield() }
    executor.stop()
    return task
}
