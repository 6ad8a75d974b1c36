/// Suspends and resumes a store with the app's life: the store is suspended while the app
/// is in the background and no background work holds it open, and open otherwise.
///
/// The app (or `AppLifecycleSuspension` on iOS, which does this from UIKit's notifications
/// under a background-task assertion) reports the moves; background work runs inside
/// `whileOpen`:
///
/// ```swift
/// let lifecycle = StoreLifecycle(store: store)
/// // didEnterBackground, inside a background task:
/// await lifecycle.enteredBackground()          // waits for the running sync, then suspends
/// // willEnterForeground:
/// try await lifecycle.enteringForeground()     // resumes
/// // a background task's launch handler:
/// let report = try await lifecycle.whileOpen { try await $0.sync() }
/// ```
///
/// Calls may arrive in any order (each comes from a task of its own): after each call to
/// the store it checks the wanted state again, so the store ends in the state of the
/// latest report.
///
/// A `SyncScheduler` given to it is stopped once the store is suspended and started again
/// once it is resumed, so the app's first sync back in the foreground is at once, not
/// after the backoff its syncs refused while suspended would have built.
///
/// Until the app reports a move, the lifecycle does not assume the foreground: it asks
/// `appState` at every entry point, and a background launch tells it the state it was
/// launched in (`whileOpen(launchedIn:_:)`, which `BackgroundSync` calls). So a cold
/// launch for a background task, before any report, leaves the store suspended after the
/// task, never open while the app is suspended (in an App Group container iOS would end
/// the app for holding the file's lock: 0xdead10cc).
public actor StoreLifecycle {
    /// The store it suspends and resumes.
    public nonisolated let store: OutpostStore
    /// The app's scheduler of the store, if any.
    public nonisolated let scheduler: SyncScheduler?
    /// Where the app is, as last reported (`enteredBackground`, `enteringForeground`, or a
    /// background launch); nil before any report, when `appState` is asked.
    private var inBackground: Bool?
    private var holds = 0
    private let appState: @Sendable () async -> AppState

    /// Where an app is.
    public enum AppState: Sendable, Hashable {
        case foreground
        case background
    }

    /// A lifecycle for `store` (and its `scheduler`). `appState` tells where the app is
    /// until it reports a move (on iOS, `StoreLifecycle.applicationState` reads UIKit's);
    /// by default the foreground.
    public init(store: OutpostStore, scheduler: SyncScheduler? = nil,
                appState: @escaping @Sendable () async -> AppState = { .foreground }) {
        self.store = store
        self.scheduler = scheduler
        self.appState = appState
    }

    /// The app moved to the background: the store is suspended once no `whileOpen` holds
    /// it, after the sync in progress (see `OutpostStore.suspend()`). Cancel the calling
    /// task, as a background task's expiration handler does, to cancel that sync and
    /// suspend at once.
    public func enteredBackground() async {
        inBackground = true
        try? await settle()
    }

    /// The app is returning to the foreground: the store is resumed (a suspension still
    /// waiting for a sync is called off).
    ///
    /// - Throws: `OutpostError.storeInUse` while another process (an extension) has the
    ///   store open; call it again later.
    public func enteringForeground() async throws {
        inBackground = false
        try await settle()
    }

    /// `whileOpen` for work the system launched the app for, in `state` (a background
    /// task's launch: the background): the state counts as reported unless the app
    /// reported one already, so the store is suspended again after the work.
    public func whileOpen<T: Sendable>(launchedIn state: AppState, _ body: @Sendable (OutpostStore) async throws -> T) async throws -> T {
        if inBackground == nil { inBackground = state == .background }
        return try await whileOpen(body)
    }

    /// Runs `body` with the store open, in the background too (a background task's sync),
    /// and suspends the store again after it when the app is in the background.
    public func whileOpen<T: Sendable>(_ body: @Sendable (OutpostStore) async throws -> T) async throws -> T {
        holds += 1
        let result: Result<T, any Error>
        do {
            try await settle()
            result = .success(try await body(store))
        } catch {
            result = .failure(error)
        }
        holds -= 1
        try? await settle()
        return try result.get()
    }

    /// Brings the store to the wanted state, again as long as the wanted state changed
    /// while it waited for the store.
    private func settle() async throws {
        while true {
            let background = await isInBackground()
            let suspend = background && holds == 0
            if suspend {
                await store.suspend()
                await scheduler?.stop()
            } else {
                try await store.resume()
                await scheduler?.start()
            }
            if suspend == (await isInBackground() && holds == 0) { return }
        }
    }

    /// The last report, or else what `appState` says now.
    private func isInBackground() async -> Bool {
        if let inBackground { return inBackground }
        return await appState() == .background
    }
}
