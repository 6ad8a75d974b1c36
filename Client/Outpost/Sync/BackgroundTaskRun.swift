import Dispatch
import Synchronization

/// The rules of one background task's run, kept apart from the framework that starts it
/// (`BackgroundSync` calls `BGTaskScheduler`; this is what it decides, tested on Linux):
///
/// - the work runs in a task of its own as soon as the run is made;
/// - the system's task is completed exactly once: `true` when the work returned, `false`
///   when it threw or the time ran out, whichever comes first;
/// - when the time runs out (`expire`), the work is cancelled (a sync unwinds and the store
///   suspends again) and waited for, at most `grace`, so that the app is not suspended
///   while it still holds the store's file; then the task is completed with `false`.
final class BackgroundTaskRun: Sendable {
    private let done = Atomic(false)
    private let finished = DispatchSemaphore(value: 0)
    private let completion: @Sendable (Bool) -> Void
    private let work = Mutex<Task<Void, Never>?>(nil)

    /// Starts `body`; `complete` is the system's completion (called once).
    init(complete: @escaping @Sendable (Bool) -> Void, _ body: @escaping @Sendable () async throws -> Void) {
        completion = complete
        let task = Task { [self] in
            let succeeded: Bool
            do {
                try await body()
                succeeded = true
            } catch {
                succeeded = false
            }
            self.complete(success: succeeded)
            finished.signal()
        }
        work.withLock { $0 = task }
    }

    /// The time is up: cancels the work, waits for it at most `grace` (on the calling
    /// thread: the system's expiration handler), and completes the task with `false`
    /// unless the work completed it first.
    func expire(grace: DispatchTimeInterval = .seconds(1)) {
        work.withLock { $0 }?.cancel()
        _ = finished.wait(timeout: .now() + grace)
        complete(success: false)
    }

    /// Completes the system's task, the first time only.
    private func complete(success: Bool) {
        guard done.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        completion(success)
    }
}
