import Foundation
import Synchronization

/// The serial executor the store's actor runs on: a thread of its own, not Swift's
/// cooperative pool.
///
/// Why: the actor does blocking work, the writing connection's SQLite calls (a pulled page
/// of up to 1,000 records and its index triggers is one transaction of tens of
/// milliseconds). On the cooperative pool, which has one thread per core, that work holds
/// a thread the app's own tasks need: a live query's consumer, a view model's task, the
/// next page's decoding waited behind it (a live query's p99 from a page's commit to its
/// update was 28 ms on two cores). On its own thread the actor's work competes for the CPU
/// as any thread does, and never takes the pool's.
///
/// Jobs run in the order they are enqueued. The thread ends when the store is released
/// (`deinit` closes the inbox; the thread drains what is left and exits).
final class StoreExecutor: SerialExecutor, @unchecked Sendable {
    private final class Inbox: @unchecked Sendable {
        let condition = NSCondition()
        var jobs: [UnownedJob] = []
        var closed = false
    }

    private let inbox = Inbox()

    init(name: String = "outpost.store") {
        let inbox = self.inbox
        // Unowned: the thread must not keep the executor alive. A queued job belongs to a
        // call on the actor, which keeps the actor, and so this executor, alive until it ran.
        let executor = UnownedSerialExecutor(ordinary: self)
        let thread = Thread {
            while true {
                inbox.condition.lock()
                while inbox.jobs.isEmpty && !inbox.closed { inbox.condition.wait() }
                if inbox.jobs.isEmpty {
                    inbox.condition.unlock()
                    return
                }
                let batch = inbox.jobs
                inbox.jobs.removeAll(keepingCapacity: true)
                inbox.condition.unlock()
                for job in batch { job.runSynchronously(on: executor) }
            }
        }
        thread.name = name
        thread.start()
    }

    deinit {
        inbox.condition.lock()
        inbox.closed = true
        inbox.condition.signal()
        inbox.condition.unlock()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        inbox.condition.lock()
        inbox.jobs.append(job)
        inbox.condition.signal()
        inbox.condition.unlock()
    }
}
