import Foundation
import OutpostCore

/// Purges old tombstones and moves the history horizon (docs/operating.md, "Compaction"):
/// every hour from the server's sweeper, and on an operator's demand
/// (`POST /v1/admin/compact`).
///
/// A tombstone tells devices that hold a copy of a record that it was deleted; once every
/// device has synced past it, it is dead weight. After the retention
/// (`--tombstone-retention-days`, default 90) it is purged, and its space's horizon moves
/// up to its seq: a device whose cursor is before the horizon may have missed a purged
/// delete, so its next pull is answered `409 history_compacted` and it pulls the space
/// from the start (which is whole: every live record, and the tombstones kept).
public final class Compactor: Sendable {
    private let store: any SyncStore
    private let metrics: Metrics
    /// The retention of tombstones, in ms.
    public let retentionMs: Int64

    public init(store: any SyncStore, metrics: Metrics, retentionDays: Int) {
        self.store = store
        self.metrics = metrics
        retentionMs = Int64(retentionDays) * 86_400_000
        metrics.declare("outpost_compactions_total", help: "Compaction runs, by result (done, failed).", kind: "counter")
        metrics.declare("outpost_tombstones_purged_total", help: "Tombstones purged by compaction.", kind: "counter")
        metrics.declare("outpost_compaction_reclaimed_bytes_total", help: "Bytes of the rows compaction purged (reused by the store's file).", kind: "counter")
        metrics.declare("outpost_history_horizon_max_seq", help: "The highest history horizon of any space after the last compaction (0: none).", kind: "gauge")
    }

    /// Purges the tombstones older than `retentionMs` (the configured retention when nil).
    @discardableResult
    public func run(retentionMs override: Int64? = nil, now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) async throws -> Compaction {
        let cutoff = now - (override ?? retentionMs)
        do {
            let done = try await store.compact(tombstonesBefore: cutoff)
            metrics.increment("outpost_compactions_total", .init([("result", "done")]))
            metrics.increment("outpost_tombstones_purged_total", by: Double(done.purged))
            metrics.increment("outpost_compaction_reclaimed_bytes_total", by: Double(done.reclaimedBytes))
            if let highest = done.horizons.values.max() { metrics.set("outpost_history_horizon_max_seq", to: Double(highest)) }
            if done.purged > 0 {
                Log.info("compaction purged tombstones", ["count": String(done.purged), "bytes": String(done.reclaimedBytes),
                                                           "spaces": String(done.horizons.count)])
            }
            return done
        } catch {
            metrics.increment("outpost_compactions_total", .init([("result", "failed")]))
            throw error
        }
    }
}
