import Foundation
import OutpostCore
import OutpostSQLite

/// `outpost-server restore --from PATH --data DIR [--media-dir DIR] [--force]`: puts a backup made by
/// `outpost-server backup` into a data directory and gives the store a new epoch
/// (docs/operating.md, "Restore").
///
/// - The directory's lock is taken for the whole restore, so a server running on `DIR`
///   makes the restore fail, and no server can start on `DIR` halfway through.
/// - A directory that holds a store (or media) already is refused unless `--force`.
/// - Everything is checked before anything in `DIR` is replaced: the store file's SHA-256
///   against the manifest, `PRAGMA integrity_check`, every media file's SHA-256 against its
///   name, and the store's `media` rows against the manifest's files.
/// - The new epoch sorts after both the backup's epoch and the epoch the directory's store
///   had before: devices that saw the replaced (perhaps newer) history must see the
///   restored one as newer still, pull everything again and offer back what they hold.
/// - The store and media are prepared beside their final places (`outpost.sqlite.restoring`,
///   `media.restoring`), fsynced, and then renamed into place. An interrupted restore
///   leaves the old store or a mix the next `restore --force` repairs; run it again.
public enum RestoreCommand {
    /// What a restore did.
    public struct Report: Sendable, Equatable {
        /// The restored store's new epoch.
        public var epoch: Epoch
        /// The backup's epoch.
        public var backupEpoch: Epoch
        /// The epoch of the store the restore replaced, if there was one and it was readable.
        public var replacedEpoch: Epoch?
        /// The backup's manifest.
        public var manifest: BackupManifest
        /// True when the backup's `jwt-secret` was written into the directory.
        public var restoredSecret: Bool
    }

    /// Parses the command line and restores; prints the new epoch (alone, on standard
    /// output, like `rotate-epoch`) and a summary on standard error.
    public static func main(arguments: [String], environment: [String: String]) -> Int32 {
        runOperatorCommand {
            let options = try OperatorArguments(arguments, valued: Set(["--from", "--data", "--media-dir", "--store"] + MediaStoreSettings.flags), switches: ["--force"])
            let from = try options.required("--from", "PATH")
            let (data, media) = try options.directories(environment, command: "restore")
            let report = try run(backup: from, dataDirectory: data, force: options.switches.contains("--force"), mediaDirectory: media,
                                 bucket: try options.mediaStore(environment).s3())
            print(report.epoch.rawValue)
            var summary = "restored \(from) into \(data): \(report.manifest.counts.records) records in \(report.manifest.counts.spaces) spaces, "
                + "\(report.manifest.counts.media) media files; epoch \(report.backupEpoch)"
            if let replaced = report.replacedEpoch { summary += " (replacing a store at epoch \(replaced))" }
            summary += " -> \(report.epoch)"
            if report.restoredSecret { summary += "; jwt-secret restored" }
            FileHandle.standardError.write(Data((summary + "\n").utf8))
            return 0
        }
    }

    /// Restores the backup at `backup` into `dataDirectory` (its media into
    /// `mediaDirectory`, by default `DATA/media`); returns what it did.
    /// A backup of media in a bucket (`BackupManifest.mediaBucket`) restores with `bucket`
    /// only: its rows come back, and every object they name must be in the bucket.
    public static func run(backup: String, dataDirectory: String, force: Bool = false, mediaDirectory: String? = nil,
                           bucket: S3MediaSettings? = nil) throws -> Report {
        let manifest = try BackupManifest.read(backup: backup)
        switch (manifest.mediaBucket, bucket) {
        case (let named?, nil):
            throw OperatorError("the backup's media are in the bucket \(named); restore with --media-store s3 and the settings of that bucket (or of its replica)")
        case (nil, _?) where !manifest.media.isEmpty:
            throw OperatorError("the backup holds its media files in \(backup)/media; restore into a media directory (without --media-store s3), then copy them to the bucket")
        case (_?, let bucket?):
            try S3MediaBytes(settings: bucket).requireObjects(manifest.media, what: "the backup's store")
        default:
            break
        }
        let copiesMedia = bucket == nil
        guard let backupEpoch = Epoch(manifest.epoch) else { throw OperatorError("the backup's manifest names an invalid epoch \"\(manifest.epoch)\"") }
        let backupStore = OperatorFiles.join(backup, manifest.store.path)
        guard manifest.store.path == "outpost.sqlite", OperatorFiles.isRegularFile(backupStore) else {
            throw OperatorError("the backup's store \(backupStore) is missing")
        }

        // The lock: a server on this directory holds it, and none can start until we are done.
        let directory: DataDirectory
        do {
            directory = try DataDirectory(path: dataDirectory)
        } catch {
            throw OperatorError("cannot restore into \(dataDirectory): \(error)")
        }
        let storePath = directory.storePath
        let mediaPath = mediaDirectory ?? directory.mediaPath
        let hasStore = OperatorFiles.exists(storePath)
        let hasMedia = copiesMedia && !OperatorFiles.list(OperatorFiles.join(mediaPath, "spaces")).isEmpty
        if (hasStore || hasMedia) && !force {
            throw OperatorError("\(dataDirectory) already holds a \(hasStore ? "store" : "media directory"); pass --force to replace it (the replaced data is deleted)")
        }

        let (replacedEpoch, replacedHistory) = hasStore ? replacedEpochs(storePath) : (nil, [])

        // Prepare the new store beside the old one.
        let stagingStore = storePath + ".restoring"
        let stagingMedia = mediaPath + ".restoring"
        for leftover in [stagingStore, stagingStore + "-wal", stagingStore + "-shm", stagingStore + "-journal", stagingMedia] {
            try OperatorFiles.remove(leftover)
        }
        do {
            let copied = try OperatorFiles.copy(from: backupStore, to: stagingStore)
            guard copied.sha256 == manifest.store.sha256, copied.size == manifest.store.size else {
                throw OperatorError("the backup's store \(backupStore) is damaged: \(copied.size) bytes with SHA-256 \(copied.sha256), the manifest says \(manifest.store.size) bytes with \(manifest.store.sha256)")
            }
            let epoch = try prepareStore(stagingStore, backupEpoch: backupEpoch, after: replacedEpoch, history: replacedHistory, manifest: manifest)

            // The media files, each checked against its name (in a bucket they stay there).
            let replacedMedia = mediaPath + ".replaced"
            if copiesMedia {
                try OperatorFiles.makeDirectories(OperatorFiles.join(stagingMedia, "spaces"))
                try OperatorFiles.makeDirectories(OperatorFiles.join(stagingMedia, "uploads"))
                try BackupCommand.copyMedia(manifest.media, from: OperatorFiles.join(backup, "media"), to: stagingMedia, what: "the backup \(backup)")
                try OperatorFiles.sync(stagingMedia)

                // Into place: old media aside, new media in, new store over the old one.
                try OperatorFiles.remove(replacedMedia)
                if OperatorFiles.exists(mediaPath) { try OperatorFiles.rename(mediaPath, replacedMedia) }
                try OperatorFiles.rename(stagingMedia, mediaPath)
            }
            // The old store was closed cleanly above, so it has no log; a stray one must not
            // be replayed into the restored file.
            for sidecar in ["-wal", "-shm", "-journal"] { try OperatorFiles.remove(storePath + sidecar) }
            try OperatorFiles.rename(stagingStore, storePath)

            let restoredSecret = try restoreSecret(from: backup, into: dataDirectory)
            try OperatorFiles.sync(dataDirectory)
            if copiesMedia { try OperatorFiles.remove(replacedMedia) }
            withExtendedLifetime(directory) {}
            return Report(epoch: epoch, backupEpoch: backupEpoch, replacedEpoch: replacedEpoch, manifest: manifest, restoredSecret: restoredSecret)
        } catch {
            try? OperatorFiles.remove(stagingStore)
            try? OperatorFiles.remove(stagingMedia)
            throw error
        }
    }

    /// The epoch of the store being replaced, and the epochs it had ended: the restored
    /// epoch must sort after it, and they join the restored store's history, since devices
    /// may hold copies of them to offer again. Unreadable, the new epoch is made from the
    /// clock alone.
    private static func replacedEpochs(_ storePath: String) -> (Epoch?, [(Epoch, Int64)]) {
        do {
            // Read-write, so that a WAL left by a killed server is recovered and, at close,
            // folded into the file and removed (nothing else can have the store open now).
            let old = try Connection(path: storePath, flags: [.readWrite])
            defer { old.close() }
            let epoch = try StoreMeta(old).epoch
            guard try old.scalarInt("SELECT count(*) FROM sqlite_master WHERE name = 'epoch_history'") == 1 else { return (epoch, []) }
            return (epoch, try SQLiteSyncStore.endedEpochs(old))
        } catch {
            FileHandle.standardError.write(Data("outpost-server: warning: cannot read the epoch of the store being replaced (\(error)); the new epoch is made from the clock alone\n".utf8))
            return (nil, [])
        }
    }

    /// The secret, restored last, when the backup has one and the directory none of its
    /// own; returns whether it was.
    private static func restoreSecret(from backup: String, into dataDirectory: String) throws -> Bool {
        let backupSecret = OperatorFiles.join(backup, JWTSecret.fileName)
        let secret = OperatorFiles.join(dataDirectory, JWTSecret.fileName)
        guard OperatorFiles.isRegularFile(backupSecret), !OperatorFiles.exists(secret) else { return false }
        _ = try OperatorFiles.copy(from: backupSecret, to: secret, mode: 0o600)
        return true
    }

    /// Checks and upgrades the staged store and gives it its new epoch; returns the epoch.
    private static func prepareStore(_ path: String, backupEpoch: Epoch, after replaced: Epoch?, history: [(Epoch, Int64)],
                                     manifest: BackupManifest) throws -> Epoch {
        do {
            let db = try Connection(path: path)
            defer { db.close() }
            let integrity = try db.integrityCheck()
            guard integrity == ["ok"] else {
                throw OperatorError("the backup's store fails PRAGMA integrity_check: \(integrity.prefix(5).joined(separator: "; "))")
            }
            let meta = try StoreMeta(db)
            guard meta.epoch == backupEpoch else {
                throw OperatorError("the backup's store has epoch \(meta.epochText ?? "none"), its manifest \(backupEpoch)")
            }
            try SQLiteSyncStore.migrate(db)
            try MediaStore.migrate(db)
            let rows = Set(try db.query("SELECT space, media_id, size FROM media") { "\($0.text(0))/\($0.text(1))/\($0.int64(2))" })
            let listed = Set(manifest.media.map { "\($0.space)/\($0.sha256)/\($0.size)" })
            guard rows == listed else {
                throw OperatorError("the backup's store and manifest disagree on media: \(rows.subtracting(listed).count) rows without a listed file, \(listed.subtracting(rows).count) files without a row")
            }
            let epoch = try rotateEpoch(db, after: replaced, history: history)
            // A self-contained file: no -wal to carry along when it is renamed into place.
            try db.execute("PRAGMA journal_mode=DELETE")
            return epoch
        } catch let error as SQLiteError {
            throw OperatorError("cannot prepare the restored store: \(error)")
        }
    }

    /// Gives the store at `db` a new epoch that sorts after its own and after `floor` (the
    /// replaced store's), adds both to its history as ended now (with `history`, the
    /// epochs the replaced store had ended), and gives every record its lineage. The same
    /// rule as `SQLiteSyncStore.rotateEpoch`, with a second epoch to stay ahead of.
    static func rotateEpoch(_ db: Connection, after floor: Epoch?, history: [(Epoch, Int64)] = []) throws -> Epoch {
        try db.transaction {
            let own = try db.scalarText("SELECT value FROM meta WHERE key = 'epoch'").flatMap(Epoch.init)
            let previous = [own, floor].compactMap { $0 }.max()
            var rng = SystemRandomNumberGenerator()
            let now = SQLiteSyncStore.systemClock()
            let epoch = Epoch.generate(nowMs: now, after: previous, using: &rng)
            try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('epoch', ?)", [.text(epoch.rawValue)])
            try SQLiteSyncStore.endEpochs(history + [floor, own].compactMap { $0 }.map { ($0, now) }, in: db)
            // The records' versions were the backup's epoch's, so that is the history
            // their lineage names.
            if let own { try SQLiteSyncStore.recordLineage(db, endingEpoch: own) }
            return epoch
        }
    }
}
