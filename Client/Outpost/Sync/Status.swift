import Foundation
import OutpostCore

// The sync state as the app reads it (`SyncStatus`), in one snapshot beside the actor.
extension OutpostStore {
    /// The sync state (read like `get`, beside the store's actor, in one snapshot).
    public func status(isolation: isolated (any Actor)? = #isolation) async throws -> SyncStatus {
        let clientId = clientId, space = configuration.space, versions = configuration.versions, restoredFrom = restoredFrom
        return try await appRead { d in
            let session = try d.session()
            var status = SyncStatus(
                clientId: clientId, space: space, epoch: session.phase.epoch,
                cursor: session.cursor?.version,
                pending: try d.count(deliveries: ["queued", "sent"]),
                rejected: try d.count(deliveries: ["rejected"]), quarantined: try d.quarantineCount(),
                lastSyncAt: try d.meta(.lastSyncAt).flatMap { Int64($0) }.map(Date.init(milliseconds:)), lastError: try d.meta(.lastError),
                retiredEpochs: try d.retiredEpochs(), rebasing: session.phase.isRePulling, restoredFrom: restoredFrom)
            status.upgradeRequired = try d.heldCount(versions)
            status.conflicts = try d.conflictCount()
            // A failure kept by an SDK before `SyncProblem` has its text only: one to retry.
            status.lastProblem = try d.meta(.lastProblem).flatMap(SyncProblem.init(rawValue:)) ?? (status.lastError == nil ? nil : .serverUnavailable)
            return status
        }
    }

    /// The earliest `nextAttemptAt` of a failed or in-doubt change, if any (schedulers
    /// sync again then; pending changes go with the next sync anyway). A retry time stored
}
