// iOS, iPadOS, Mac Catalyst, tvOS and visionOS: BGTaskScheduler exists there only (not on
// macOS or watchOS, nor on Linux, which skip this file).
#if canImport(BackgroundTasks) && !os(macOS) && !os(watchOS)
import BackgroundTasks
import Foundation

/// Syncs a store from the system's background tasks (`BGAppRefreshTask`,
/// `BGProcessingTask`): each launch runs one `store.sync()`, stopped when the system's time
/// runs out, and asks for the next launch. docs/client.md ("The scheduler") has the whole
/// recipe.
///
/// ```swift
/// // At launch, before it finishes (App.init or application(_:didFinishLaunchingWithOptions:)):
/// BackgroundSync.register(identifier: "com.example.app.sync", store: store)
/// // When the app moves to the background:
/// try? BackgroundSync.schedule(identifier: "com.example.app.sync")
/// ```
///
/// The identifier must be listed under `BGTaskSchedulerPermittedIdentifiers` in the app's
/// Info.plist, with the Background fetch (app refresh) or Background processing mode.
public enum BackgroundSync {
    /// Which kind of background task.
    public enum Kind: Sendable, Hashable {
        /// `BGAppRefreshTask`: short (about 30 s), for fetching what changed.
        case appRefresh
        /// `BGProcessingTask`: minutes, when the device is idle; the system launches it
        /// only with a network connection, and with external power when
        /// `requiresExternalPower` is set.
        case processing(requiresExternalPower: Bool)
    }

    /// Registers the launch handler of `identifier`: it syncs `store` once, ends with
    /// `setTaskCompleted(success:)` (true when the sync succeeded), cancels the sync from
    /// the task's expiration handler, and first schedules the next launch `interval` later
    /// (nil: none). Call it once per identifier at every launch, before the app finishes
    /// launching (the system stops an app that registers an identifier twice). Syncs of the
    /// app's own scheduler and of this handler take turns on the store.
    ///
    /// - Returns: false when the system refused the identifier (it is missing from
    ///   `BGTaskSchedulerPermittedIdentifiers`).
    @discardableResult
    public static func register(identifier: String, kind: Kind = .appRefresh, store: OutpostStore,
                                interval: Duration? = .seconds(15 * 60)) -> Bool {
        BGTaskScheduler.shared.register(forTaskWithIdentifier: identifier, using: nil) { task in
            // Scheduled first, so a task the system ends early still has a successor.
            if let interval { try? BackgroundSync.schedule(identifier: identifier, kind: kind, after: interval) }
            let handle = TaskHandle(task: task)
            let sync = Task {
                let succeeded = (try? await store.sync()) != nil
                handle.task.setTaskCompleted(success: succeeded)
            }
            // Cancelling the sync cancels its request; the store keeps every change it had
            // not confirmed, and the next sync sends it again.
            task.expirationHandler = { sync.cancel() }
        }
    }

    /// Asks the system to launch `identifier` no earlier than `after` from now. A request
    /// already waiting for the same identifier is replaced.
    ///
    /// - Throws: `BGTaskScheduler.Error` (not permitted, too many pending requests, or
    ///   unavailable, as in the Simulator or with Background App Refresh off).
    public static func schedule(identifier: String, kind: Kind = .appRefresh, after: Duration = .seconds(15 * 60)) throws {
        let request: BGTaskRequest
        switch kind {
        case .appRefresh:
            request = BGAppRefreshTaskRequest(identifier: identifier)
        case .processing(let requiresExternalPower):
            let processing = BGProcessingTaskRequest(identifier: identifier)
            processing.requiresNetworkConnectivity = true
            processing.requiresExternalPower = requiresExternalPower
            request = processing
        }
        let (seconds, attoseconds) = after.components
        request.earliestBeginDate = Date(timeIntervalSinceNow: Double(seconds) + Double(attoseconds) / 1e18)
        try BGTaskScheduler.shared.submit(request)
    }

    /// The system's task, carried into the Swift task that syncs. `BGTask` is not marked
    /// `Sendable`; the sync's task only calls `setTaskCompleted(success:)` on it, once, which
    /// the framework accepts from any thread.
    private struct TaskHandle: @unchecked Sendable {
        let task: BGTask
    }
}
#endif
