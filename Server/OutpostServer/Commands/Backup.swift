import Foundation
import OutpostCore
import OutpostSQLite

/// `manifest.json` of a backup made by `outpost-server backup` (docs/operating.md).
///
/// A backup is a directory:
///
/// ```
/// PATH/
///   manifest.json                   this file
///   outpost.sqlite                  the store: one consistent snapshot (SQLite online backup)
///   media/spaces/<space>/<aa>/<sha256>   every published file the snapshot's `media` rows name
///   jwt-secret                      only with --include-secret
/// ```
public struct BackupManifest: Codable, Sendable, Equatable {
    /// The value of `format`.
    public static let formatName = "outpost-backup"
    /// The layout version this server writes and the newest it restores.
    public static let currentVersion = 1

    /// Always `outpost-backup`.
    public var format: String
    /// The layout version (1).
    public var version: Int
    /// The server that made it: `outpost/<version>`.
    public var server: String
    /// When the snapshot was taken, in ms since 1970: every change acknowledged before is in it.
    public var createdAt: Int64
    /// The store's epoch at the snapshot. A restore gives the store a later one.
    public var epoch: String
    /// `meta.schema_version` of the snapshot.
    public var schemaVersion: Int
    /// `meta.media_schema_version` of the snapshot.
    public var mediaSchemaVersion: Int
    /// The store file of the backup.
    public var store: StoreFile
    /// What the snapshot holds.
    public var counts: Counts
    /// Every media file, in the order of the store's `media` table.
    public var media: [MediaFile]
    /// Whether `jwt-secret` was copied (`--include-secret`).
    public var includesSecret: Bool
    /// Open uploads at the snapshot, left out of the backup (their clients start them again).
    public var openUploadsLeftOut: Int
    /// With media in S3 (`--media-store s3`): the bucket and prefix that hold the media
    /// bytes (`s3:<bucket>/<prefix>`). The backup then copies no bytes: every object its
    /// rows name was checked to be in the bucket with its size, and the bucket's own
    /// versioning or replication is the bytes' backup. Nil: the files are in `media/`.
    public var mediaBucket: String?

    /// The backup's store file.
    public struct StoreFile: Codable, Sendable, Equatable {
        /// Relative to the backup: always `outpost.sqlite`.
        public var path: String
        /// Bytes.
        public var size: Int64
        /// SHA-256 of the file, lowercase hex; restore compares it before using the file.
        public var sha256: String
    }

    /// Counts of the snapshot.
    public struct Counts: Codable, Sendable, Equatable {
        /// Spaces that hold records.
        public var spaces: Int64
        /// Records, tombstones included.
        public var records: Int64
        /// Media files (one per space and SHA-256).
        public var media: Int64
        /// Their bytes in all.
        public var mediaBytes: Int64
    }

    /// One media file: `media/spaces/<space>/<aa>/<sha256>`.
    public struct MediaFile: Codable, Sendable, Equatable {
        /// The space that holds it.
        public var space: String
        /// Its SHA-256, lowercase hex: its media id and its file name.
        public var sha256: String
        /// Bytes.
        public var size: Int64

        /// Its path relative to the media directory (`media/` of a backup or a data directory).
        public var relativePath: String { "spaces/\(space)/\(sha256.prefix(2))/\(sha256)" }
    }

    /// The manifest of the backup directory at `path`, checked for format and version.
    public static func read(backup path: String) throws -> BackupManifest {
        let file = OperatorFiles.join(path, "manifest.json")
        guard let data = FileManager.default.contents(atPath: file) else {
            throw OperatorError("\(path) is not an outpost backup: \(file) is missing or unreadable")
        }
        let manifest: BackupManifest
        do {
            manifest = try JSONDecoder().decode(BackupManifest.self, from: data)
        } catch {
            throw OperatorError("\(file) is not a valid backup manifest: \(error)")
        }
        guard manifest.format == formatName else { throw OperatorError("\(file): format is \"\(manifest.format)\", not \(formatName)") }
        guard manifest.version <= currentVersion else {
            throw OperatorError("\(file): backup layout version \(manifest.version) is newer than this server's (\(currentVersion)); restore with a newer outpost-server")
        }
        return manifest
    }

    func encoded() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return Array(try encoder.encode(self)) + [0x0A]
    }
}

/// `outpost-server backup --data DIR [--media-dir DIR] --out PATH [--include-secret]`: a consistent copy of
/// a data directory, taken while a server runs on it (docs/operating.md, "Backup").
///
/// - The store is copied with SQLite's online backup API in one step: one read transaction
///   on a WAL snapshot, so the copy is exactly the store as of one commit, and the server
///   keeps committing meanwhile (a WAL reader never blocks the writer; the log only grows
///   until the copy ends). In steps, every commit of a busy server would restart the copy.
/// - The directory's lock is *not* taken: the server holds it, and the backup writes
///   nothing in the data directory.
/// - Media files are copied after the snapshot, for the snapshot's `media` rows only. A
///   file is published (renamed into place) before its row commits and never changes or
///   goes away after, so every row in the snapshot has its whole file. Each copied file is
///   hashed and compared with its name and row; a missing or damaged one fails the backup.
/// - Open uploads are left out: their rows are deleted from the copy and their bytes are
///   not copied (see docs/operating.md for why).
/// - Everything is written to a hidden directory beside `PATH`, fsynced, and renamed to
///   `PATH` at the end: `PATH` either does not exist or holds a whole backup.
public enum BackupCommand {
    /// Parses the command line and runs the backup; prints a one-line summary.
    public static func main(arguments: [String], environment: [String: String]) -> Int32 {
        runOperatorCommand {
            let options = try OperatorArguments(arguments, valued: Set(["--data", "--media-dir", "--store", "--out"] + MediaStoreSettings.flags), switches: ["--include-secret"])
            let (data, media) = try options.directories(environment, command: "backup")
            let bucket = try options.mediaStore(environment).s3()
            let out = try options.required("--out", "PATH")
            let manifest = try run(dataDirectory: data, output: out, includeSecret: options.switches.contains("--include-secret"), mediaDirectory: media, bucket: bucket)
            print("backup \(out): epoch \(manifest.epoch), \(manifest.counts.records) records in \(manifest.counts.spaces) spaces, "
                + "\(manifest.counts.media) media files (\(manifest.counts.mediaBytes) bytes)"
                + (manifest.openUploadsLeftOut > 0 ? ", \(manifest.openUploadsLeftOut) open uploads left out" : "")
                + (manifest.includesSecret ? ", jwt-secret included" : ""))
            return 0
        }
    }

    /// Backs up `dataDirectory` (with its media in `mediaDirectory`, by default
    /// `DATA/media`) into the new directory `output` and returns its manifest.
    /// With `bucket`, the media bytes stay in it (`BackupManifest.mediaBucket`).
    public static func run(dataDirectory: String, output: String, includeSecret: Bool = false, mediaDirectory: String? = nil,
                           bucket: S3MediaSettings? = nil) throws -> BackupManifest {
        let storePath = OperatorFiles.join(dataDirectory, "outpost.sqlite")
        guard OperatorFiles.isRegularFile(storePath) else { throw AdminCommands.Usage("no store at \(storePath)") }
        guard !OperatorFiles.exists(output) else { throw AdminCommands.Usage("\(output) already exists; back up into a new path") }
        let parent = (output as NSString).deletingLastPathComponent.isEmpty ? "." : (output as NSString).deletingLastPathComponent
        try OperatorFiles.makeDirectories(parent)
        let staging = OperatorFiles.join(parent, ".\((output as NSString).lastPathComponent).partial-\(UUID().uuidString.prefix(8))")
        guard mkdir(staging, 0o700) == 0 else { throw OperatorFiles.ioError("mkdir", staging) }
        do {
            let manifest = try fill(staging, from: dataDirectory, media: mediaDirectory ?? OperatorFiles.join(dataDirectory, "media"),
                                    bucket: bucket, storePath: storePath, includeSecret: includeSecret)
            try OperatorFiles.sync(staging)
            try OperatorFiles.rename(staging, output)
            try OperatorFiles.sync(parent)
            return manifest
        } catch {
            try? OperatorFiles.remove(staging)
            throw error
        }
    }

    private static func fill(_ staging: String, from dataDirectory: String, media mediaDirectory: String, bucket: S3MediaSettings?,
                             storePath: String, includeSecret: Bool) throws -> BackupManifest {
        // 1. The store, as of one commit.
        let copyPath = OperatorFiles.join(staging, "outpost.sqlite")
        let createdAt = Int64(Date().timeIntervalSince1970 * 1000)
        // Owner-only, like the data directory: SQLite keeps the mode of a file that exists.
        let created = open(copyPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard created >= 0 else { throw OperatorFiles.ioError("create", copyPath) }
        close(created)
        do {
            let source = try Connection(path: storePath, flags: [.readOnly], busyTimeoutMs: 30_000)
            defer { source.close() }
            let destination = try Connection(path: copyPath)
            defer { destination.close() }
            // -1: every page in one step, inside one read transaction (see the type's comment).
            try source.backup(into: destination, pagesPerStep: -1)
        } catch {
            throw OperatorError("cannot copy the store \(storePath): \(error)")
        }

        // 2. Read the copy; leave out open uploads; make it a self-contained file.
        var manifest: BackupManifest
        do {
            let db = try Connection(path: copyPath)
            defer { db.close() }
            try db.execute("PRAGMA journal_mode=DELETE")
            let meta = try StoreMeta(db)
            guard let epoch = meta.epoch else { throw OperatorError("the store has no valid epoch; run outpost-server check --data \(dataDirectory)") }
            let leftOut = meta.hasMediaTables ? try leaveOutOpenUploads(db) : 0
            let media: [BackupManifest.MediaFile] = meta.hasMediaTables
                ? try db.query("SELECT space, media_id, size FROM media ORDER BY space, media_id") {
                    BackupManifest.MediaFile(space: $0.text(0), sha256: $0.text(1), size: $0.int64(2))
                }
                : []
            let counts = BackupManifest.Counts(
                spaces: try db.scalarInt("SELECT count(*) FROM spaces") ?? 0,
                records: try db.scalarInt("SELECT count(*) FROM records") ?? 0,
                media: Int64(media.count),
                mediaBytes: media.reduce(0) { $0 + $1.size })
            let integrity = try db.integrityCheck()
            guard integrity == ["ok"] else {
                throw OperatorError("the copied store fails PRAGMA integrity_check: \(integrity.prefix(5).joined(separator: "; "))")
            }
            manifest = BackupManifest(
                format: BackupManifest.formatName, version: BackupManifest.currentVersion,
                server: "outpost/\(OutpostProtocol.productVersion)", createdAt: createdAt, epoch: epoch.rawValue,
                schemaVersion: meta.schemaVersion ?? 0, mediaSchemaVersion: meta.mediaSchemaVersion ?? 0,
                store: .init(path: "outpost.sqlite", size: 0, sha256: ""), counts: counts, media: media,
                includesSecret: includeSecret, openUploadsLeftOut: leftOut)
        } catch let error as SQLiteError {
            throw OperatorError("cannot read the copied store: \(error)")
        }
        let stored = try OperatorFiles.hash(path: copyPath)
        manifest.store.size = stored.size
        manifest.store.sha256 = stored.sha256
        try OperatorFiles.sync(copyPath)

        // 3. The media files the snapshot names, each checked against its name and row; in
        // a bucket, each object checked to be there with its size, and not copied.
        if let bucket {
            let bytes = S3MediaBytes(settings: bucket)
            try bytes.requireObjects(manifest.media, what: "the backup")
            manifest.mediaBucket = try bytes.identity()
        } else {
            try copyMedia(manifest.media, from: mediaDirectory, to: OperatorFiles.join(staging, "media"), what: "the media directory \(mediaDirectory)")
        }

        // 4. The secret, only when asked for.
        if includeSecret {
            let secret = OperatorFiles.join(dataDirectory, JWTSecret.fileName)
            guard OperatorFiles.isRegularFile(secret) else {
                throw OperatorError("--include-secret: \(secret) does not exist (a server given OUTPOST_JWT_SECRET keeps no file; keep that secret with your other secrets)")
            }
            _ = try OperatorFiles.copy(from: secret, to: OperatorFiles.join(staging, JWTSecret.fileName), mode: 0o600)
        }

        try OperatorFiles.write(try manifest.encoded(), to: OperatorFiles.join(staging, "manifest.json"), mode: 0o600)
        return manifest
    }

    /// Deletes the open uploads from the copy (their bytes live in upload files a backup
    /// does not hold); returns how many.
    private static func leaveOutOpenUploads(_ db: Connection) throws -> Int {
        var leftOut = Int(try db.scalarInt("SELECT count(*) FROM uploads WHERE state = 'open'") ?? 0)
        // tus uploads (media schema 2) hold their bytes in upload files too.
        let tus = try db.scalarInt("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tus_uploads'") == 1
        if tus { leftOut += Int(try db.scalarInt("SELECT count(*) FROM tus_uploads WHERE state = 'open'") ?? 0) }
        try db.transaction {
            try db.execute("""
                DELETE FROM upload_chunks WHERE upload_id IN (SELECT upload_id FROM uploads WHERE state = 'open');
                DELETE FROM uploads WHERE state = 'open';
                """)
            if tus { try db.execute("DELETE FROM tus_uploads WHERE state = 'open'") }
        }
        return leftOut
    }

    /// Copies every file of `media` from the media directory `source` to the same place
    /// under the media directory `destination`, checking each file's SHA-256 against its name and its size against
    /// the row, then fsyncs the directories it created.
    static func copyMedia(_ media: [BackupManifest.MediaFile], from source: String, to destination: String, what: String) throws {
        var created: [String] = []
        var parents: Set<String> = []
        for file in media {
            guard SpaceName(file.space) != nil, MediaID(file.sha256) != nil else {
                throw OperatorError("a media row names space \"\(file.space)\" and id \"\(file.sha256)\", which cannot be a file; run outpost-server check")
            }
            let from = OperatorFiles.join(source, file.relativePath)
            let to = OperatorFiles.join(destination, file.relativePath)
            guard OperatorFiles.isRegularFile(from) else {
                throw OperatorError("media file \(from) is missing from \(what) (space \(file.space)); run outpost-server check")
            }
            let directory = (to as NSString).deletingLastPathComponent
            if !parents.contains(directory) {
                created += try OperatorFiles.makeDirectories(directory)
                parents.insert(directory)
            }
            let copied = try OperatorFiles.copy(from: from, to: to)
            guard copied.sha256 == file.sha256, copied.size == file.size else {
                throw OperatorError("media file \(from) is damaged: \(copied.size) bytes with SHA-256 \(copied.sha256), expected \(file.size) bytes named by its SHA-256; run outpost-server check")
            }
        }
        // Deepest first, then each created directory's parent, so every new entry is durable.
        var toSync = Set(parents)
        for directory in created { toSync.insert((directory as NSString).deletingLastPathComponent) }
        for directory in toSync.sorted(by: { $0.count > $1.count }) { try OperatorFiles.sync(directory) }
    }
}

/// The `meta` values the operator commands read from a store file.
struct StoreMeta {
    var schemaVersion: Int?
    var mediaSchemaVersion: Int?
    var epochText: String?
    var hasMediaTables: Bool

    var epoch: Epoch? { epochText.flatMap(Epoch.init) }

    init(_ db: Connection) throws {
        let tables = Set(try db.query("SELECT name FROM sqlite_master WHERE type = 'table'") { $0.text(0) })
        hasMediaTables = tables.isSuperset(of: ["media", "uploads", "upload_chunks"])
        guard tables.contains("meta") else { return }
        schemaVersion = try db.scalarText("SELECT value FROM meta WHERE key = 'schema_version'").flatMap { Int($0) }
        mediaSchemaVersion = try db.scalarText("SELECT value FROM meta WHERE key = 'media_schema_version'").flatMap { Int($0) }
        epochText = try db.scalarText("SELECT value FROM meta WHERE key = 'epoch'")
    }
}

/// Runs an operator command's body: a usage mistake exits 64, any other failure 1.
func runOperatorCommand(_ body: () throws -> Int32) -> Int32 {
    do {
        return try body()
    } catch let usage as AdminCommands.Usage {
        FileHandle.standardError.write(Data("outpost-server: \(usage)\n".utf8))
        return 64
    } catch {
        FileHandle.standardError.write(Data("outpost-server: \(error)\n".utf8))
        return 1
    }
}
