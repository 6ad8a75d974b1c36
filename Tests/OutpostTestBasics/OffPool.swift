import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

// The test process's cooperative pool has one thread per core: two here. Whatever answers
// a test (the in-process servers, whose handlers run on their own event-loop threads; the
// proxies and receivers, on threads of their own) must never wait for it, and a test that
// keeps a core busy for long must not take a pool thread to do it, or every other test
// running beside it waits.

/// A task executor with one thread of its own: jobs run there in the order they came.
/// CPU-bound async work (a simulation slice, an enumeration) runs on one of these instead
/// of the cooperative pool; `stop()` ends the thread once its last job has run.
public final class DedicatedThreadExecutor: TaskExecutor, Sendable {
    private struct Queue {
        var jobs: [UnownedJob] = []
        var stopping = false
        var exited = false
    }

    private let queue = Mutex(Queue())
    private let wakeup = DispatchSemaphore(value: 0)

    public init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let queued = queue.withLock { q -> Bool in
            if q.exited { return false }
            q.jobs.append(job)
            return true
        }
        if queued {
            wakeup.signal()
        } else {
            // The thread has ended; a job is never dropped (its task would never finish).
            DispatchQueue.global().async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    /// Ends the thread once the jobs queued so far have run (one queued later runs on a
    /// Dispatch thread: call it once the work that prefers this executor is done).
    public func stop() {
        queue.withLock { $0.stopping = true }
        wakeup.signal()
    }

    private func run() {
        while true {
            wakeup.wait()
            let (jobs, stopping) = queue.withLock { q in
                defer { q.jobs = [] }
                return (q.jobs, q.stopping)
            }
            for job in jobs { job.runSynchronously(on: asUnownedTaskExecutor()) }
            let exit = stopping && queue.withLock { q -> Bool in
                if !q.jobs.isEmpty { return false }
                q.exited = true
                return true
            }
            if exit { return }
        }
    }
}

/// Runs CPU-bound async work on a thread of its own (SE-0417's task executor preference:
/// its nonisolated code, the default actors it calls and its child tasks run there), so it
/// holds no thread of the cooperative pool. Unstructured tasks it starts (`Task {}`) do
/// not follow it.
public func offPool<T, Failure: Error>(_ name: String = "test-cpu", isolation: isolated (any Actor)? = #isolation,
                                      _ body: () async throws(Failure) -> T) async throws(Failure) -> T {
    let executor = DedicatedThreadExecutor(name: name)
    defer { executor.stop() }
    return try await withTaskExecutorPreference(executor, isolation: isolation, operation: body)
}

/// Holds every thread of the cooperative pool with a task blocked on a semaphore while
/// `body` runs on a thread of its own, then lets them go: what a suite of CPU-bound tests
/// does to the pool, on purpose, so a test can prove that what answers it does not need
/// the pool. One test at a time holds it (two would each hold half and wait for the
/// rest). Throws `NotReached` when the holding tasks do not all start within the test
/// deadline.
public func whilePoolIsHeld<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    await poolHolders.acquire()
    defer { poolHolders.release() }
    // The pool has one thread per active core on Linux.
    let width = ProcessInfo.processInfo.activeProcessorCount
    let started = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    for _ in 0..<width {
        Task.detached { holdPoolThread(started: started, release: release) }
    }
    return try await blocking {
        defer { for _ in 0..<width { release.signal() } }
        for held in 0..<width {
            guard started.wait(timeout: .now() + .seconds(testDeadlineSeconds)) == .success else {
                throw NotReached("only \(held) of the pool's \(width) threads were held within \(testDeadlineSeconds) s")
            }
        }
        return try body()
    }
}

private let poolHolders = AsyncSlots(1)

/// Blocks the pool thread that runs it until `release` (synchronous on purpose).
private func holdPoolThread(started: DispatchSemaphore, release: DispatchSemaphore) {
    started.signal()
    release.wait()
}

/// Runs each test it marks (or each test of a suite it marks) on a thread of its own
/// through `offPool`, so it holds no thread of the cooperative pool while the rest of the
/// suite runs beside it:
/// - `.offPool`, for tests that keep a core busy (a simulation slice, scrypt, key
///   generation): as many at once as there are cores, as when they ran on the pool (44
///   simulations at once, one thread each, made the machine crawl);
/// - `.offPoolWhileBlocking`, for tests that wait in blocking calls (child processes run
///   to their end, servers started and stopped, sockets read): four per core at once. On
///   the pool, two of them held both its threads for seconds at a time, and a test beside
///   them whose server answered at once could not look for the answer before its long
///   poll ran out.
/// The others wait for a turn suspended, holding no thread.
public struct OffPoolTrait: TestTrait, SuiteTrait, TestScoping {
    let turns: AsyncSlots

    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        await turns.acquire()
        defer { turns.release() }
        try await OutpostTestBasics.offPool("test-off-pool") { try await function() }
    }

    static let computing = AsyncSlots(ProcessInfo.processInfo.activeProcessorCount)
    static let blocking = AsyncSlots(4 * ProcessInfo.processInfo.activeProcessorCount)
}

extension Trait where Self == OffPoolTrait {
    /// Runs a CPU-bound test, or each test of the suite, off the cooperative pool (`OffPoolTrait`).
    public static var offPool: Self { Self(turns: OffPoolTrait.computing) }

    /// Runs a test that blocks, or each test of the suite, off the cooperative pool (`OffPoolTrait`).
    public static var offPoolWhileBlocking: Self { Self(turns: OffPoolTrait.blocking) }
}

/// A counting semaphore for tasks: `acquire` suspends (holding no thread) until one of
/// `count` slots is free.
public final class AsyncSlots: Sendable {
    private struct State {
        var free: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Mutex<State>

    init(_ count: Int) { state = Mutex(State(free: max(1, count))) }

    func acquire() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.free > 0 {
                    s.free -= 1
                    return true
                }
                s.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty {
                s.free += 1
                return nil
            }
            return s.waiters.removeFirst()
        }
        next?.resume()
    }
}

