import Foundation
import Observation
import OutpostCore

/// A store's sync state as an `@Observable` model, for SwiftUI views and anything else
/// that uses Observation: the pending, rejected and quarantined counts, the last sync and
/// its error, the phase, and the running pull's progress.
///
/// ```swift
/// let model = SyncStatusModel(store: store)
/// await model.start()
/// // in a view: Text("\(model.pending) to send"); ProgressView(value: model.progress?.fraction ?? 0)
/// ```
///
/// It follows the store from `start()` until `stop()` or the store closes, reading the
/// store's `status()` after every sync and every change of its records.
@MainActor @Observable
public final class SyncStatusModel {
    /// What the store's sync is doing.
    public enum Phase: Sendable, Hashable {
        /// No sync is running.
        case idle
        /// A sync is running.
        case syncing
        /// The store is pulling a new history of the server (after a restore, a data loss or
        /// a rotated epoch); local edits wait for it and are offered again after.
        case rePulling
    }

    /// Changes waiting to be sent, or sent and not yet answered.
    public private(set) var pending = 0
    /// Changes the server refused for good (`OutpostStore.rejectedChanges()`).
    public private(set) var rejected = 0
    /// Changes of `pending` held until the app is updated (`upgrade_required`;
    /// `SyncStatus.upgradeRequired`): the app can ask its user to update.
    public private(set) var upgradeRequired = 0
    /// Pulled records that could not be decoded (`OutpostStore.quarantinedRecords()`).
    public private(set) var quarantined = 0
    /// When the last sync succeeded.
    public private(set) var lastSyncAt: Date?
    /// The last sync's failure, nil after a success.
    public private(set) var lastError: String?
    /// The epoch the store follows.
    public private(set) var epoch: Epoch?
    /// What the sync is doing now.
    public private(set) var phase: Phase = .idle
    /// The running sync's pull progress; nil when no sync runs or it has pulled nothing yet.
    public private(set) var progress: SyncProgress?
    /// The whole state in one value, for a status line (`switch` over it), and
    /// `state.message` for a person: syncing with progress, failed (offline, unauthorized,
    /// the server unavailable…), changes held for an app update, changes waiting, up to
    /// date since a time, never synced.
    public private(set) var state: SyncState = .neverSynced
    /// `state.message`: a sentence for a status line.
    public var message: String { state.message }

    @ObservationIgnored private let store: OutpostStore
    @ObservationIgnored private var tasks: [Task<Void, Never>] = []
    @ObservationIgnored private var syncing = false
    @ObservationIgnored private var rebasing = false
    /// A refresh is reading the store's status; another asked meanwhile reads it again after.
    @ObservationIgnored private var refreshing = false
    @ObservationIgnored private var refreshAgain = false
    @ObservationIgnored private var status: SyncStatus?

    public init(store: OutpostStore) {
        self.store = store
    }

    /// Reads the store's state now and follows it from here on.
    public func start() async {
        guard tasks.isEmpty else { return }
        let activity = await store.syncActivity()
        let events = await store.observeAll()
        tasks.append(Task { [weak self] in
            for await step in activity {
                guard let self else { return }
                await self.apply(step)
            }
        })
        tasks.append(Task { [weak self] in
            for await _ in events {
                guard let self else { return }
                await self.refresh()
            }
        })
        await refresh()
    }

    /// Stops following the store.
    public func stop() {
        for task in tasks { task.cancel() }
        tasks.removeAll()
    }

    private func apply(_ step: SyncActivity) async {
        switch step {
        case .started:
            syncing = true
            progress = nil
        case .pulled(let p):
            progress = p
        case .finished, .failed:
            syncing = false
            progress = nil
        }
        showState()
        await refresh()
    }

    /// Reads the store's status and shows it. Refreshes never overlap: one asked while another
    /// reads is folded into a second read after it, so a status read earlier can never land
    /// after (and over) one read later. The phase follows the sync's activity even when the
    /// status cannot be read.
    private func refresh() async {
        if refreshing { refreshAgain = true; return }
        refreshing = true
        defer { refreshing = false }
        repeat {
            refreshAgain = false
            if let status = try? await store.status() {
                if pending != status.pending { pending = status.pending }
                if rejected != status.rejected { rejected = status.rejected }
                if upgradeRequired != status.upgradeRequired { upgradeRequired = status.upgradeRequired }
                if quarantined != status.quarantined { quarantined = status.quarantined }
                if lastSyncAt != status.lastSyncAt { lastSyncAt = status.lastSyncAt }
                if lastError != status.lastError { lastError = status.lastError }
                if epoch != status.epoch { epoch = status.epoch }
                rebasing = status.rebasing
                self.status = status
            }
            let now: Phase = rebasing ? .rePulling : (syncing ? .syncing : .idle)
            if phase != now { phase = now }
            showState()
        } while refreshAgain
    }

    /// Sets `state` from the last status read and the sync's activity.
    private func showState() {
        let now = SyncState(status: status, syncing: syncing, progress: progress)
        if state != now { state = now }
    }
}
