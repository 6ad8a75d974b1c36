import Foundation
import OutpostCore

/// Why the last sync failed, in terms an app can act on and show (docs/client.md, "The
/// sync status line"). Kept in the store file with the failure's text, so a status read
/// after a restart still knows it; cleared by the next successful sync.
public enum SyncProblem: String, Sendable, Hashable, CaseIterable {
    /// The server could not be reached: no network, no route, the name did not resolve,
    /// the connection was refused. Saves go on; the next sync sends them.
    case offline
    /// The server refused the app's token (401, or 403 `unauthorized`): the app must sign
    /// in again or refresh its token.
    case unauthorized
    /// The server, or a proxy before it, failed or asked to wait: a 5xx, a 429, no complete
    /// answer, or an answer that is not the protocol's. The scheduler retries with backoff.
    case serverUnavailable
    /// The server refused the sync itself for a reason the app cannot fix by retrying (its
    /// history was replaced beyond what the store follows, a protocol violation, a request
    /// it will not take). Support should look (`SyncStatus.lastError` has the details).
    case serverRefused
    /// The device failed: its file could not be written (disk full, storage error).
    case device

    /// Classifies a sync's failure.
    init(_ error: OutpostError) {
        switch error {
        case .transport(let t):
            switch t {
            case .notSent: self = .offline
            case .noAnswer, .badAnswer, .answerTooLarge: self = .serverUnavailable
            case .refused(let status, let envelope):
                if status == 401 || envelope.code == "unauthorized" || envelope.code == "token_expired" { self = .unauthorized }
                else if status >= 500 || status == 429 || status == 408 { self = .serverUnavailable }
                else { self = .serverRefused }
            }
        case .storage, .readOnly, .storeInUse, .schemaTooNew: self = .device
        default: self = .serverRefused
        }
    }

    /// A sentence a person can read, for a status line.
    public var message: String {
        switch self {
        case .offline: "Offline. Your changes are saved on this device and will sync when the server can be reached."
        case .unauthorized: "Signed out. Sign in again to sync; your changes are kept on this device."
        case .serverUnavailable: "The server is not answering right now. Sync will try again shortly; your changes are kept."
        case .serverRefused: "The server refused to sync. Your changes are kept on this device; contact support if this lasts."
        case .device: "This device could not save the sync's results. Free some storage; your changes are kept."
        }
    }
}

/// What a store's sync state comes down to, for a status line: one value an app can
/// `switch` over, with a sentence for a person (`message`).
public enum SyncState: Sendable, Hashable {
    /// A sync is running; `progress` once the pull has received records.
    case syncing(progress: SyncProgress?)
    /// The store is pulling a new history of the server (after a restore); local edits wait
    /// for it and are offered again after.
    case rePulling(progress: SyncProgress?)
    /// The last sync failed for this reason (`SyncProblem`); `pending` changes wait.
    case failed(SyncProblem, pending: Int)
    /// Records whose conflict waits for a person to settle it
    /// (`OutpostStore.unsettledConflicts()`).
    case conflicts(count: Int)
    /// Changes are held until the app is updated (the server takes them only from a later
    /// version of the app).
    case upgradeRequired(count: Int)
    /// Changes wait to be sent (no sync has run since they were made).
    case waiting(pending: Int)
    /// Up to date with the server since the last successful sync.
    case upToDate(since: Date)
    /// The store has never synced.
    case neverSynced

    /// What the state says, for a person.
    public var message: String {
        switch self {
        case .syncing(let p), .rePulling(let p):
            let verb = if case .rePulling = self { "Catching up with the server" } else { "Syncing" }
            guard let p, p.pulled > 0 else { return "\(verb)…" }
            if let total = p.approximateTotal, total > p.pulled { return "\(verb): \(p.pulled) of about \(total) records" }
            return "\(verb): \(p.pulled) records"
        case .failed(let problem, _): return problem.message
        case .conflicts(let n): return n == 1 ? "1 record has changes from two devices to settle." : "\(n) records have changes from two devices to settle."
        case .upgradeRequired(let n): return n == 1 ? "1 change waits for an app update." : "\(n) changes wait for an app update."
        case .waiting(let n): return n == 1 ? "1 change to send." : "\(n) changes to send."
        case .upToDate(let since):
            return "Up to date (last synced \(since.formatted(date: .abbreviated, time: .shortened)))."
        case .neverSynced: return "Not synced yet."
        }
    }

    /// The state of `status` with a sync running or not.
    init(status: SyncStatus?, syncing: Bool, progress: SyncProgress?) {
        if let status, status.rebasing, syncing { self = .rePulling(progress: progress); return }
        if syncing { self = .syncing(progress: progress); return }
        guard let status else { self = .neverSynced; return }
        if let problem = status.lastProblem { self = .failed(problem, pending: status.pending); return }
        if status.conflicts > 0 { self = .conflicts(count: status.conflicts); return }
        if status.upgradeRequired > 0 { self = .upgradeRequired(count: status.upgradeRequired); return }
        let waiting = status.pending - status.upgradeRequired - status.conflicts
        if waiting > 0 { self = .waiting(pending: waiting); return }
        if let at = status.lastSyncAt { self = .upToDate(since: at); return }
        self = .neverSynced
    }
}
