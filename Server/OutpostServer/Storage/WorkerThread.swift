import OutpostCLinux
import Foundation
import Synchronization

/// A dedicated OS thread that owns a resource (an SQLite connection) and handles jobs
/// queued for it, a batch at a time.
///
/// Why a thread and not an actor on the global pool: SQLite calls block (a commit waits
/// for `fsync`), and Swift's cooperative pool has only as many threads as cores. Blocking
/// work therefore runs on threads of its own, and async callers suspend — holding no
/// thread — until their job is done. The resource is created on the thread and never
/// leaves it, which is what keeps a non-`Sendable` `Connection` safe.
final class WorkerThread<Job: Sendable>: Sendable {
    private struct State {
        var jobs: [Job] = []
        var stopping = false
    }

    private let state = Mutex(State())
    private let wakeup = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    /// The most jobs handed to one `handle` call.
    private let maxBatch: Int

    /// Starts the thread. `setup` runs on it first and creates the resource; if it throws,
    /// `init` throws the same error and no thread is left behind. `handle` receives every
    /// batch of queued jobs, in order.
    init<Resource>(
        name: String, maxBatch: Int = 1,
        setup: @escaping @Sendable () throws -> Resource,
        handle: @escaping @Sendable (Resource, [Job]) -> Void,
        teardown: @escaping @Sendable (Resource) -> Void = { _ in }
    ) throws {
        self.maxBatch = max(1, maxBatch)
        let ready = DispatchSemaphore(value: 0)
        let setupError = Mutex<(any Error)?>(nil)
        let thread = Thread { [self] in
            // Foundation does not name the OS thread on Linux; perf and top -H show this.
            outpost_set_thread_name(String(name.prefix(15)))
            let resource: Resource
            do {
                resource = try setup()
            } catch {
                setupError.withLock { $0 = error }
                ready.signal()
                finished.signal()
                return
            }
            ready.signal()
            loop(resource, handle)
            teardown(resource)
            finished.signal()
        }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
        ready.wait()
        if let error = setupError.withLock({ $0 }) { throw error }
    }

    private func loop<Resource>(_ resource: Resource, _ handle: (Resource, [Job]) -> Void) {
        while true {
            wakeup.wait()
            let (batch, stop): ([Job], Bool) = state.withLock { s in
                let n = min(s.jobs.count, maxBatch)
                let batch = Array(s.jobs.prefix(n))
                s.jobs.removeFirst(n)
                return (batch, s.stopping && s.jobs.isEmpty)
            }
            if !batch.isEmpty {
                handle(resource, batch)
                // The semaphore counted one signal per job; consume the ones for the jobs
                // this batch took beyond the first.
                for _ in 1..<batch.count { wakeup.wait() }
            }
            if stop { return }
        }
    }

    /// Jobs queued and not yet taken by the thread (the batch it is handling is not counted).
    var queued: Int { state.withLock { $0.jobs.count } }

    /// Queues a job. Returns false when the thread is stopping and the job was not queued.
    @discardableResult
    func submit(_ job: Job) -> Bool {
        let accepted = state.withLock { s -> Bool in
            guard !s.stopping else { return false }
            s.jobs.append(job)
            return true
        }
        if accepted { wakeup.signal() }
        return accepted
    }

    /// Lets queued jobs finish, then ends the thread and runs `teardown`. Blocks the caller
    /// until the thread has ended; call it from shutdown paths, not from the async pool.
    func stop() {
        let first = state.withLock { s -> Bool in
            if s.stopping { return false }
            s.stopping = true
            return true
        }
        guard first else { return }
        wakeup.signal()
        finished.wait()
    }
}
