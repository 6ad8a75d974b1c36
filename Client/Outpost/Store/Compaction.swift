import Foundation
import OutpostCore
import OutpostSQLite

// Compaction of the store's file (docs/client.md, "Compaction"): what the sync no longer
// needs goes, nothing unsettled or rejected ever does, and the file gives its free pages
// back. It runs on demand (`compact()`) and after a sync once `compactionInterval` has
// passed since the last one, whose time the file keeps (meta `compacted_at`).

/// What one compaction did.
public struct CompactionReport: Sendable, Hashable {
    /// Acknowledged edits no later edit needed, removed from their records.
    public var editsPruned = 0
    /// Sealed forms of changes that are settled or gone (encrypted stores).
    public var sealedFormsPruned = 0
    /// Files a download left behind when the process stopped mid-way.
    public var temporaryFilesRemoved = 0
    /// Bytes the file gave back to the file system.
    public var bytesReclaimed: Int64 = 0
}

extension OutpostStore {
    /// A download's temporary files this old are a crash's leftovers.
    static let staleDownloadSeconds: TimeInterval = 3600

    /// Compacts the store's file now (see `CompactionReport`). Unsettled edits, rejected
    /// changes, quarantined records, unfinished uploads and unsent telemetry stay.
    @discardableResult
    public func compact() throws -> CompactionReport {
        var report = CompactionReport()
        let directories: [String] = try write { d in
            // A model is normalized when it is read (Engine.normalize drops acknowledged
            // edits nothing refers to); storing it again removes them from the file.
            for key in try d.db.query("SELECT DISTINCT collection, id FROM edits WHERE delivery = 'acknowledged'", [], {
                RecordKey(collection: $0.text(0), id: $0.text(1))
            }) {
                let before = try d.db.scalarInt("SELECT count(*) FROM edits WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)]) ?? 0
                guard let model = try d.model(key) else { continue }
                try d.save(model)
                report.editsPruned += Int(before) - model.edits.count
            }
            let sealed = try d.db.scalarInt("SELECT count(*) FROM sealed") ?? 0
            try d.pruneSealed()
            report.sealedFormsPruned = Int(sealed - (try d.db.scalarInt("SELECT count(*) FROM sealed") ?? 0))
            if try !d.session().phase.marksSeen { try d.clearViewSeen() }
            try d.setMeta(.compactedAt, String(now()))
            return try d.db.query("SELECT path FROM download_directories", []) { d.uploadPath($0.text(0)) }
        }
        report.temporaryFilesRemoved = Self.removeStaleDownloads(in: directories)
        report.bytesReclaimed = try reclaimSpace()
        return report
    }

    /// Remembers where a download writes its temporary file, so that compaction can remove
    /// what a crash leaves there (relative to the base directory when inside it, as
    /// uploads are).
    func noteDownloadDirectory(_ path: String) throws {
        try write(durability: .normal) { d in
            try d.db.run("INSERT OR IGNORE INTO download_directories(path) VALUES (?)", [.text(d.uploadKey(MediaFiles.absolutePath(path)))])
        }
    }

    /// Compacts after a sync when the interval has passed since the last compaction (never
    /// for a new file: its first compaction is due an interval after its first sync).
    func compactIfDue() {
        guard let interval = configuration.compactionInterval, life.hasDatabase else { return }
        let time = now()
        let stored: String?
        do { stored = try read { try $0.meta(.compactedAt) } } catch { return }
        guard let last = stored.flatMap({ Int64($0) }) else {
            try? write(durability: .normal) { try $0.setMeta(.compactedAt, String(time)) }
            return
        }
        // A time in the future is a clock set back: compact, and start counting again.
        if time - last >= interval.milliseconds || time < last { _ = try? compact() }
    }

    /// Removes the `.outpost-download` files older than an hour in `directories`.
    static func removeStaleDownloads(in directories: [String]) -> Int {
        var removed = 0
        let cutoff = Date().addingTimeInterval(-staleDownloadSeconds)
        for directory in directories {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { continue }
            for name in names where name.hasPrefix(".") && name.hasSuffix(".outpost-download") {
                let path = (directory as NSString).appendingPathComponent(name)
                guard let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date, modified < cutoff else { continue }
                if (try? FileManager.default.removeItem(atPath: path)) != nil { removed += 1 }
            }
        }
        return removed
    }

    /// Gives the file's free pages back (`PRAGMA incremental_vacuum`). A file made before
    /// incremental vacuum was set is rebuilt once with it (`VACUUM`). Returns the bytes.
    private func reclaimSpace() throws -> Int64 {
        try read { d in
            let size = { (try d.db.scalarInt("PRAGMA page_count") ?? 0) * (try d.db.scalarInt("PRAGMA page_size") ?? 0) }
            let before = try size()
            if try d.db.scalarInt("PRAGMA auto_vacuum") != 2 {
                try d.db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                try d.db.execute("VACUUM")
            } else {
                try d.db.execute("PRAGMA incremental_vacuum")
            }
            return max(0, before - (try size()))
        }
    }
}
