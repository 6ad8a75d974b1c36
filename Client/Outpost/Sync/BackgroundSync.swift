// iOS, iPadOS, Mac Catalyst, tvOS and visionOS: BGTaskScheduler exists there only (not on
// macOS or watchOS, nor on Linux, which skip this file).
#if canImport(BackgroundTasks) && !os(macOS) && !os(watchOS)
import BackgroundTasks
import Dispatch
import Foundation
import Synchronization

/// Syncs a store from the system's background tasks (`BGAppRefreshTask`,
/// `BGProcessingTask`): each launch runs one `store.sync()` with the store resumed for it
/// (`StoreLifecycle.whileOpen`), completes the task when the sync returns or the
/// moment the system's time runs out, and asks for the next launch. docs/client.md
/// ("Background tasks (iOS)") has the whole recipe. Never compiled in this repository.
///
/// ```swift
/// // At launch, before it finishes (App.init or application(_:didFinishLaunchingWithOptions:)):
/// // AppStores opens the store on first use, and keeps its StoreLifecycle.
/// BackgroundSync.register(identifier: "com.example.app.sync") { try await AppStores.shared.lifecycle() }
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

    /// Registers the launch handler of `identifier`. Call it once per identifier at every
    /// launch, before the app finishes launching (the system stops an app that registers
    /// an identifier twice); it opens nothing.
    ///
    /// The handler first schedules the next launch `interval` later (nil: none), then, in a
    /// task of its own, gets the store's lifecycle from `lifecycle` (which may open the
    /// store then, off the main thread: never at launch) and runs one sync inside
    /// `whileOpen`, so a suspended store is resumed for it and suspended again after it
    /// while the app stays in the background. `setTaskCompleted(success:)` is called once:
    /// when the sync returns (true when it succeeded), or from the expiration handler, which
    /// cancels the sync and waits at most a second for the store to suspend again; a sync
    /// still waiting for the foreground's sync to end leaves its turn at once (the sync
    /// gate is cancellable). Cancelling a sync cancels its
    /// request; every change the server did not confirm stays queued.
    ///
    /// - Returns: false when the system refused the identifier (it is missing from
    ///   `BGTaskSchedulerPermittedIdentifiers`).
    @discardableResult
    @available(iOSApplicationExtension, unavailable)
    @available(tvOSApplicationExtension, unavailable)
    @available(visionOSApplicationExtension, unavailable)
    @available(macCatalystApplicationExtension, unavailable)
    public static func register(identifier: String, kind: Kind = .appRefresh, interval: Duration? = .seconds(15 * 60),
                                lifecycle: @escaping @Sendable () async throws -> StoreLifecycle) -> Bool {
        BGTaskScheduler.shared.register(forTaskWithIdentifier: identifier, using: nil) { task in
            // Scheduled first, so a task the system ends early still has a successor.
            if let interval { try? BackgroundSync.schedule(identifier: identifier, kind: kind, after: interval) }
            // The run's rules (completed once; the expiration cancels, waits briefly and
            // completes with false) are `BackgroundTaskRun`'s, tested on Linux.
            let bgTask = UncheckedTask(task)
            let run = BackgroundTaskRun(complete: { bgTask.task.setTaskCompleted(success: $0) }) {
                // The state the system launched the app in, from UIKit: a cold launch for
                // this task is in the background, and the store must end suspended.
                let state = await StoreLifecycle.applicationState()
                _ = try await lifecycle().whileOpen(launchedIn: state) { try await $0.sync() }
            }
            task.expirationHandler = { run.expire() }
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

    /// The system's task, handed to the run's completion. `@unchecked Sendable`: `BGTask`
    /// is not marked `Sendable`; it is used for one `setTaskCompleted(success:)` (the run
    /// makes it one), which the framework accepts from any thread.
    private struct UncheckedTask: @unchecked Sendable {
        let task: BGTask
        init(_ task: BGTask) { self.task = task }
    }
}
#endif
