import Dispatch
import Synchronization

/// A state that tasks and threads change and a test awaits: each change (`update`) checks
/// the conditions waiting on it, and a wait resumes on the change that makes its condition
/// hold. Nothing is checked between changes: a wait is woken by the event it awaits. A
/// wait not met within its deadline throws `NotReached`, naming what it awaited and the
/// caller's line, so a test never hangs. A change only takes a lock and resumes the waits
/// it satisfied: a thread that answers a test (a proxy's, a key store's) never waits for
/// the cooperative pool through it.
public final class Watched<State: Sendable>: Sendable {
    private struct Waiter {
        let condition: @Sendable (State) -> Bool
        let continuation: CheckedContinuation<State, any Error>
    }

    private struct Box {
        var state: State
        var waiters: [Int: Waiter] = [:]
        var nextId = 0
        /// Waits ended (deadline or cancellation) before their waiter was registered.
        var ended: [Int: any Error] = [:]
        /// Waits met, whose deadline timer has not fired yet (it then finds them here).
        var met: Set<Int> = []
    }

    private let box: Mutex<Box>

    public init(_ state: State) {
        box = Mutex(Box(state: state))
    }

    /// The state now.
    public var value: State { box.withLock { $0.state } }

    /// Changes the state under the lock and resumes every wait whose condition now holds.
    @discardableResult
    public func update<T: Sendable>(_ change: (inout State) -> T) -> T {
        let (result, met) = box.withLock { b -> (T, [(CheckedContinuation<State, any Error>, State)]) in
            let result = change(&b.state)
            var met: [(CheckedContinuation<State, any Error>, State)] = []
            for (id, waiter) in b.waiters where waiter.condition(b.state) {
                b.waiters[id] = nil
                b.met.insert(id)
                met.append((waiter.continuation, b.state))
            }
            return (result, met)
        }
        for (continuation, state) in met { continuation.resume(returning: state) }
        return result
    }

    /// Waits until `condition` holds of the state (at once when it already does) and
    /// returns the state that met it; throws `NotReached` naming `what` once `limit` has
    /// passed without a change that met it.
    @discardableResult
    public func until(_ what: String, within limit: Duration = .seconds(testDeadlineSeconds), fileID: String = #fileID, line: Int = #line,
                      _ condition: @escaping @Sendable (State) -> Bool) async throws -> State {
        let id = box.withLock { b in
            b.nextId += 1
            return b.nextId
        }
        let failure = NotReached("not reached within \(limit): \(what) (\(fileID):\(line))")
        // The deadline: a timer on a Dispatch queue, off the cooperative pool, that ends
        // the wait (a wait already met or ended ignores it); never a check of the state.
        let (seconds, attoseconds) = limit.components
        let nanoseconds = max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) { [weak self] in
            self?.end(id, failure)
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<State, any Error>) in
                let now: Result<State, any Error>? = box.withLock { b in
                    if let error = b.ended.removeValue(forKey: id) { return .failure(error) }
                    if condition(b.state) {
                        b.met.insert(id)
                        return .success(b.state)
                    }
                    b.waiters[id] = Waiter(condition: condition, continuation: continuation)
                    return nil
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            end(id, CancellationError())
        }
    }

    /// Ends the wait numbered `id` with `error`, or marks it ended when it is not registered
    /// yet (its registration then throws at once).
    private func end(_ id: Int, _ error: any Error) {
        let waiter = box.withLock { b -> Waiter? in
            if let waiter = b.waiters.removeValue(forKey: id) { return waiter }
            if b.met.remove(id) != nil { return nil }
            b.ended[id] = error
            return nil
        }
        waiter?.continuation.resume(throwing: error)
    }
}

/// The elements of an `AsyncStream` as they arrive, read by a task of its own (the log is
/// then the stream's only reader) until the log is released, for a test to await.
public final class StreamLog<Element: Sendable>: Sendable {
    /// Every element so far.
    public let seen = Watched<[Element]>([])
    private let reader: Task<Void, Never>

    public init(_ stream: AsyncStream<Element>) {
        let seen = self.seen
        reader = Task {
            for await element in stream { seen.update { $0.append(element) } }
        }
    }

    deinit { reader.cancel() }

    /// Waits until `condition` holds of the elements so far; see `Watched.until`.
    @discardableResult
    public func until(_ what: String, fileID: String = #fileID, line: Int = #line, _ condition: @escaping @Sendable ([Element]) -> Bool) async throws -> [Element] {
        try await seen.until(what, fileID: fileID, line: line, condition)
    }
}

extension Watched where State == Int {
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
