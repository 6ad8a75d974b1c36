// iOS, iPadOS, Mac Catalyst, tvOS and visionOS apps: UIKit's application notifications and
// background-task assertions. Apple builds only; never compiled in this repository (see
// docs/client.md, "Platforms"). The rule it drives is `StoreLifecycle`, tested on Linux.
#if canImport(UIKit) && !os(watchOS)
import Dispatch
import Foundation
import UIKit

/// Suspends a store while the app is in the background and resumes it when the app
/// returns, from UIKit's notifications (`StoreLifecycle` decides; see
/// `OutpostStore.suspend()` for why).
///
/// On `didEnterBackgroundNotification` it begins a background task
/// (`beginBackgroundTask(withName:expirationHandler:)`) so that a sync in progress can
/// finish before the store suspends; when the system's time runs out, the expiration
/// handler cancels that sync, waits (at most one second) for the store to release its file,
/// and ends the background task. On `willEnterForegroundNotification` it resumes the
/// store. Keep the object as long as the store is open.
///
/// ```swift
/// // Once the app has opened its store (on the main actor):
/// let lifecycle = StoreLifecycle(store: store, scheduler: scheduler)
/// let suspension = AppLifecycleSuspension(lifecycle: lifecycle)
/// ```
///
/// `@unchecked Sendable`: the notification tokens are set in `init` and only read in
/// `deinit`.
@available(iOSApplicationExtension, unavailable)
@available(tvOSApplicationExtension, unavailable)
@available(visionOSApplicationExtension, unavailable)
@available(macCatalystApplicationExtension, unavailable)
public final class AppLifecycleSuspension: @unchecked Sendable {
    /// What it reports the app's moves to.
    public let lifecycle: StoreLifecycle
    private let observers: [any NSObjectProtocol]

    /// Starts following the app's moves (suspending at once when the app is in the
    /// background already, as at a launch for a background task).
    @MainActor
    public init(lifecycle: StoreLifecycle) {
        self.lifecycle = lifecycle
        let center = NotificationCenter.default
        observers = [
            center.addObserver(forName: UIApplication.didEnterBackgroundNotification, object: nil, queue: .main) { _ in
                MainActor.assumeIsolated { AppLifecycleSuspension.suspend(lifecycle) }
            },
            center.addObserver(forName: UIApplication.willEnterForegroundNotification, object: nil, queue: .main) { _ in
                Task { try? await lifecycle.enteringForeground() }
            },
        ]
        if UIApplication.shared.applicationState == .background { AppLifecycleSuspension.suspend(lifecycle) }
    }

    deinit {
        for observer in observers { NotificationCenter.default.removeObserver(observer) }
    }

    /// Suspends under a background-task assertion, ended once the store is suspended or
    /// when the time runs out, whichever comes first (exactly once).
    @MainActor
    private static func suspend(_ lifecycle: StoreLifecycle) {
        let assertion = BackgroundAssertion()
        let done = DispatchSemaphore(value: 0)
        // Detached, so that the signal never needs the main thread, which the expiration
        // handler below may be blocking.
        let suspension = Task.detached {
            await lifecycle.enteredBackground()
            done.signal()
            await assertion.end()
        }
        assertion.begin {
            // The time is up: the cancelled suspension cancels the sync and closes the
            // file on the store's executor (never this thread), so this wait cannot
            // deadlock, and the file is closed before the app is suspended.
            suspension.cancel()
            _ = done.wait(timeout: .now() + 1)
            assertion.end()
        }
    }
}

extension StoreLifecycle {
    /// Where the app is, from UIKit (`UIApplication.applicationState`): `background` in the
    /// background, else `foreground` (active or inactive). For `init(store:scheduler:appState:)`
    /// and background launches.
    @available(iOSApplicationExtension, unavailable)
    @available(tvOSApplicationExtension, unavailable)
    @available(visionOSApplicationExtension, unavailable)
    @available(macCatalystApplicationExtension, unavailable)
    public static func applicationState() async -> AppState {
        await MainActor.run { UIApplication.shared.applicationState == .background ? .background : .foreground }
    }
}

/// One `beginBackgroundTask` … `endBackgroundTask` pair, ended at most once.
@available(iOSApplicationExtension, unavailable)
@available(tvOSApplicationExtension, unavailable)
@available(visionOSApplicationExtension, unavailable)
@available(macCatalystApplicationExtension, unavailable)
@MainActor
private final class BackgroundAssertion {
    private var id = UIBackgroundTaskIdentifier.invalid

    func begin(expiration: @escaping @MainActor @Sendable () -> Void) {
        id = UIApplication.shared.beginBackgroundTask(withName: "Outpost store suspension") {
            MainActor.assumeIsolated { expiration() }
        }
    }

    func end() {
        guard id != .invalid else { return }
        UIApplication.shared.endBackgroundTask(id)
        id = .invalid
    }
}
#endif
