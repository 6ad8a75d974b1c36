import Dispatch
import Foundation
import OutpostCore
import OutpostSQLite

/// `outpost-server check --data DIR [--media-dir DIR]`: checks a data directory's store and every media file,
/// read-only, with the server stopped or running (docs/operating.md, "Checking").
///
/// Damage (exit 1, one line each):
/// - the store cannot be opened or read, or `PRAGMA integrity_check` reports anything;
/// - `meta.schema_version` / `media_schema_version` missing or newer than this server's, or a
///   migration recorded that this server does not know (`SQLiteSchema`);
/// - `meta.epoch` missing or not an epoch;
/// - a space whose records carry a seq above its head (the next push would reuse a seq),
///   or records of a space that does not exist;
/// - a `media` row whose file is missing, has another size, or whose SHA-256 is not its
///   name;
/// - a media file without a row whose SHA-256 is not its name: a finalize of that hash would
///   adopt it (finalize takes a published file of the right size as its own).
///
/// Exposed (exit 1): a file or directory of the data that the group or others may read.
///
/// Warnings (exit 0): a whole media file without a row (a finalize killed between its rename
/// and its commit leaves one; a later finalize of the same file adopts it), files that
/// cannot be media in `media/spaces/`. With a server running, a file published during the
/// check may show as such an orphan.
///
/// The store has no foreign keys, so `PRAGMA foreign_key_check` has nothing to check; the
/// relations it would cover (records to spaces) are checked by the queries above.
public enum CheckCommand {
    /// What `check` found.
    public struct Report: Sendable, Equatable {
        /// Damage: each line names the file or table and what is wrong.
        public var problems: [String] = []
        /// Things worth a look that are not damage.
        public var warnings: [String] = []
        /// What was checked and found sound.
        public var checked: [String] = []
        /// Files and directories the group or others may read (or write, or enter): each
        /// line names one, its mode and the `chmod` that makes it private.
        public var exposed: [String] = []

        /// True when nothing is damaged.
        public var isSound: Bool { problems.isEmpty }
        /// True when every file and directory of the data is its owner's alone.
        public var isPrivate: Bool { exposed.isEmpty }

        /// The report as `check` prints it: `ok`, `warning` and `DAMAGED` lines, then a verdict.
        public var text: String {
            var lines = checked.map { "ok       " + $0 }
            lines += warnings.map { "warning  " + $0 }
            lines += problems.map { "DAMAGED  " + $0 }
            lines += exposed.map { "EXPOSED  " + $0 }
            lines.append(isSound
                ? "sound" + (warnings.isEmpty ? "" : " (\(warnings.count) warning\(warnings.count == 1 ? "" : "s"))")
                : "damaged: \(problems.count) problem\(problems.count == 1 ? "" : "s")")
            if !exposed.isEmpty { lines.append("exposed: \(exposed.count) file\(exposed.count == 1 ? "" : "s") others can read") }
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// Parses the command line, checks, prints the report; 0 when sound, 1 when damaged.
    public static func main(arguments: [String], environment: [String: String]) -> Int32 {
        runOperatorCommand {
            let options = try OperatorArguments(arguments, valued: Set(["--data", "--media-dir", "--store"] + MediaStoreSettings.flags), switches: [])
            let (data, media) = try options.directories(environment, command: "check")
            let bucket = try options.mediaStore(environment).s3()
            let report = try run(dataDirectory: data, mediaDirectory: media, bucket: bucket)
            FileHandle.standardOutput.write(Data(report.text.utf8))
            return report.isSound && report.isPrivate ? 0 : 1
        }
    }

    /// Checks the data directory at `dataDirectory` (its media in `mediaDirectory`, by
    /// default `DATA/media`). Throws a usage error when it is not a directory; everything
    /// else it finds is in the report.
    /// With `bucket`, the media are checked in it (`checkBucket`) instead of a directory.
    public static func run(dataDirectory: String, mediaDirectory: String? = nil, bucket: S3MediaSettings? = nil) throws -> Report {
        guard OperatorFiles.isDirectory(dataDirectory) else { throw AdminCommands.Usage("\(dataDirectory) is not a directory") }
        var report = Report()
        let storePath = OperatorFiles.join(dataDirectory, "outpost.sqlite")
        var rows: [MediaRow]?
        if OperatorFiles.isRegularFile(storePath) {
            rows = checkStore(storePath, &report)
        } else {
            report.problems.append("store \(storePath) is missing")
        }
        if let bucket {
            checkBucket(S3MediaBytes(settings: bucket), rows: rows, &report)
            checkPrivacy([dataDirectory], &report)
            return report
        }
        let media = mediaDirectory ?? OperatorFiles.join(dataDirectory, "media")
        checkMedia(media, rows: rows, &report)
        checkPrivacy([dataDirectory, media], &report)
        return report
    }

    /// Reports every file and directory under `roots` (not the roots themselves, which an
    /// operator may have made) whose mode lets the group or others read, write or enter it.
    /// The server creates each one private (mode 0600 or 0700, whatever the umask); one that
    /// is not was left by an earlier version or changed by hand. Symbolic links are not
    /// followed.
    static func checkPrivacy(_ roots: [String], _ report: inout Report) {
        var seen: Set<String> = []
        var pending = roots.filter { OperatorFiles.isDirectory($0) }
        var count = 0
        while let directory = pending.popLast() {
            guard seen.insert(directory).inserted else { continue }
            for name in OperatorFiles.list(directory) {
                let path = OperatorFiles.join(directory, name)
                var info = stat()
                guard lstat(path, &info) == 0 else { continue }
                let kind = info.st_mode & S_IFMT
                guard kind == S_IFREG || kind == S_IFDIR else { continue }
                count += 1
                if kind == S_IFDIR { pending.append(path) }
                if info.st_mode & 0o077 != 0 {
                    let mode = String(info.st_mode & 0o7777, radix: 8)
                    report.exposed.append("\(path) has mode \(mode): others can \(info.st_mode & 0o044 != 0 ? "read" : "reach") it (chmod \(kind == S_IFDIR ? "700" : "600") \(path))")
                }
            }
        }
        if report.exposed.isEmpty { report.checked.append("\(count) files and directories, each readable by its owner only") }
    }

    struct MediaRow {
        let space: String
        let id: String
        let size: Int64
    }

    /// Checks the store; returns its media rows, or nil when it could not be read.
    private static func checkStore(_ path: String, _ report: inout Report) -> [MediaRow]? {
        do {
            let db = try Connection(path: path, flags: [.readOnly], busyTimeoutMs: 30_000)
            defer { db.close() }
            // One read transaction: every query below sees the same commit.
            try db.execute("BEGIN DEFERRED")
            defer { _ = try? db.execute("COMMIT") }
            let integrity = try db.integrityCheck()
            if integrity == ["ok"] {
                report.checked.append("store \(path): PRAGMA integrity_check ok")
            } else {
                for line in integrity.prefix(50) { report.problems.append("store \(path): integrity_check: \(line)") }
                if integrity.count > 50 { report.problems.append("store \(path): integrity_check: \(integrity.count - 50) more lines") }
            }
            let meta = try StoreMeta(db)
            var header: [String] = []
            switch meta.schemaVersion {
            case nil: report.problems.append("store: meta.schema_version is missing")
            case let v? where v > SQLiteSyncStore.schemaVersion:
                report.problems.append("store: schema version \(v) is newer than this server's (\(SQLiteSyncStore.schemaVersion)); check with a newer outpost-server")
            case let v?: header.append("schema \(v)")
            }
            switch meta.mediaSchemaVersion {
            case nil: report.problems.append("store: meta.media_schema_version is missing")
            case let v? where v > MediaStore.schemaVersion:
                report.problems.append("store: media schema version \(v) is newer than this server's (\(MediaStore.schemaVersion))")
            case let v?: header.append("media schema \(v)")
            }
            switch try SQLiteSchema.pending(db) {
            case nil: report.problems.append("store: migrated by a newer outpost-server (a migration this one does not know); check with a newer outpost-server")
            case let pending? where !pending.isEmpty: header.append("\(pending.count) migrations to apply at the next start")
            default: break
            }
            if let epoch = meta.epoch {
                header.append("epoch \(epoch)")
            } else {
                report.problems.append("store: meta.epoch is \(meta.epochText.map { "\"\($0)\", not an epoch" } ?? "missing")")
            }
            if !header.isEmpty { report.checked.append("store: " + header.joined(separator: ", ")) }
            guard meta.schemaVersion != nil else { return nil }

            try checkRecords(db, &report)
            guard meta.hasMediaTables else {
                if meta.mediaSchemaVersion != nil { report.problems.append("store: the media tables are missing") }
                return nil
            }
            return try db.query("SELECT space, media_id, size FROM media ORDER BY space, media_id") {
                MediaRow(space: $0.text(0), id: $0.text(1), size: $0.int64(2))
            }
        } catch {
            report.problems.append("store \(path) cannot be read: \(error)")
            return nil
        }
    }

    /// Checks the records against their spaces: every seq under its space's head, no record
    /// without a space, and each space's history horizon under its head.
    private static func checkRecords(_ db: Connection, _ report: inout Report) throws {
        let ahead = try db.query("""
            SELECT s.name, s.head_seq, max(r.seq) FROM records r JOIN spaces s ON s.space_id = r.space_id
            GROUP BY r.space_id HAVING max(r.seq) > s.head_seq
            """) { ($0.text(0), $0.int64(1), $0.int64(2)) }
        for (space, head, top) in ahead {
            report.problems.append("space \(space): a record has seq \(top) above the space's head \(head); the next push would reuse a seq")
        }
        let strays = try db.scalarInt("SELECT count(*) FROM records WHERE space_id NOT IN (SELECT space_id FROM spaces)") ?? 0
        if strays > 0 { report.problems.append("store: \(strays) records belong to no space") }
        let spaces = try db.scalarInt("SELECT count(*) FROM spaces") ?? 0
        let records = try db.scalarInt("SELECT count(*) FROM records") ?? 0
        if ahead.isEmpty && strays == 0 {
            report.checked.append("\(records) records in \(spaces) spaces; every space's head covers its records' seqs")
        }
        // Compaction (schema 6): where each space's history is whole from.
        if try db.scalarInt("SELECT count(*) FROM pragma_table_info('spaces') WHERE name = 'horizon_seq'") == 1 {
            let compacted = try db.query("SELECT name, horizon_seq FROM spaces WHERE horizon_seq > 0 ORDER BY name") { ($0.text(0), $0.int64(1)) }
            let tombstones = try db.scalarInt("SELECT count(*) FROM records WHERE deleted = 1") ?? 0
            if compacted.isEmpty {
                report.checked.append("history horizon: no tombstone purged yet; \(tombstones) tombstones kept")
            } else {
                let list = compacted.prefix(20).map { "\($0.0) at \($0.1)" }.joined(separator: ", ")
                report.checked.append("history horizon: \(compacted.count) spaces compacted (\(list)\(compacted.count > 20 ? ", ..." : "")); \(tombstones) tombstones kept")
            }
            let free = (try db.scalarInt("PRAGMA freelist_count") ?? 0) * (try db.scalarInt("PRAGMA page_size") ?? 0)
            report.checked.append("free space: \(free) bytes of freed rows (purged tombstones, expired change ids) that new rows reuse")
            let above = try db.query("SELECT name, horizon_seq, head_seq FROM spaces WHERE horizon_seq > head_seq") { ($0.text(0), $0.int64(1), $0.int64(2)) }
            for (space, horizon, head) in above {
                report.problems.append("space \(space): history horizon \(horizon) is above the space's head \(head)")
            }
        }
    }

    /// Checks every media row's file and every file under `media/spaces`.
    private static func checkMedia(_ mediaPath: String, rows: [MediaRow]?, _ report: inout Report) {
        let spacesPath = OperatorFiles.join(mediaPath, "spaces")
        var expected: [String: MediaRow] = [:]
        var bytes: Int64 = 0
        var sound = 0
        for row in rows ?? [] {
            guard let space = SpaceName(row.space), let id = MediaID(row.id) else {
                report.problems.append("media row (space \"\(row.space)\", id \"\(row.id)\") cannot name a file")
                continue
            }
            let path = OperatorFiles.join(spacesPath, space.rawValue, id.prefix, id.rawValue)
            expected[path] = row
            guard OperatorFiles.isRegularFile(path) else {
                report.problems.append("media file \(path) is missing (space \(row.space), \(row.size) bytes)")
                continue
            }
            do {
                let found = try OperatorFiles.hash(path: path)
                if found.size != row.size {
                    report.problems.append("media file \(path) has \(found.size) bytes, its row says \(row.size)")
                } else if found.sha256 != row.id {
                    report.problems.append("media file \(path) is damaged: its SHA-256 is \(found.sha256), not its name")
                } else {
                    sound += 1
                    bytes += found.size
                }
            } catch {
                report.problems.append("media file \(path) cannot be read: \(error)")
            }
        }
        if let rows, sound == rows.count {
            report.checked.append("\(sound) media files (\(bytes) bytes): each present, its size as recorded, its SHA-256 its name")
        }

        // Files without a row.
        for space in OperatorFiles.list(spacesPath) {
            let spaceDirectory = OperatorFiles.join(spacesPath, space)
            guard OperatorFiles.isDirectory(spaceDirectory), SpaceName(space) != nil else {
                report.warnings.append("unexpected entry \(spaceDirectory) (not a space's media directory)")
                continue
            }
            for prefix in OperatorFiles.list(spaceDirectory) {
                let prefixDirectory = OperatorFiles.join(spaceDirectory, prefix)
                guard OperatorFiles.isDirectory(prefixDirectory) else {
                    report.warnings.append("unexpected entry \(prefixDirectory)")
                    continue
                }
                for name in OperatorFiles.list(prefixDirectory) {
                    let path = OperatorFiles.join(prefixDirectory, name)
                    if expected[path] != nil { continue }
                    guard let id = MediaID(name), id.prefix == prefix, OperatorFiles.isRegularFile(path) else {
                        report.warnings.append("unexpected entry \(path) (not a media file)")
                        continue
                    }
                    do {
                        let found = try OperatorFiles.hash(path: path)
                        if found.sha256 != name {
                            report.problems.append("media file \(path) is damaged: its SHA-256 is \(found.sha256), not its name\(rows == nil ? "" : " (it has no row; a finalize of that hash would adopt it)")")
                        } else if rows != nil {
                            report.warnings.append("media file \(path) has no row (left by a finalize stopped before its commit, or published during this check); a finalize of the same file adopts it")
                        }
                    } catch {
                        report.problems.append("media file \(path) cannot be read: \(error)")
                    }
                }
            }
        }
        if rows == nil {
            report.warnings.append("the store could not be read, so media files were checked against their names only")
        }
        let uploads = OperatorFiles.list(OperatorFiles.join(mediaPath, "uploads")).count
        if uploads > 0 {
            report.checked.append("\(uploads) open upload files (not checked: finalize checks every chunk and the whole file)")
        }
    }

    /// Checks every media row against the bucket (`--media-store s3`): its object exists
    /// with the recorded size (the bytes are not read: the store checked each part's
    /// signature, and finalize checked the file before completing it), and objects under
    /// `spaces/` without a row are reported. A bucket that cannot be listed is a problem.
    static func checkBucket(_ bytes: S3MediaBytes, rows: [MediaRow]?, _ report: inout Report) {
        do {
            var objects = try bytes.publishedObjects()
            var sound = 0
            var total: Int64 = 0
            for row in rows ?? [] {
                guard let space = SpaceName(row.space), let id = MediaID(row.id) else {
                    report.problems.append("media row (space \"\(row.space)\", id \"\(row.id)\") cannot name an object")
                    continue
                }
                let key = bytes.mediaKey(space: space, id: id)
                switch objects.removeValue(forKey: key) {
                case nil: report.problems.append("media object \(key) is missing from the bucket (space \(row.space), \(row.size) bytes)")
                case let size? where size != row.size: report.problems.append("media object \(key) has \(size) bytes, its row says \(row.size)")
                case let size?:
                    sound += 1
                    total += size
                }
            }
            if let rows, sound == rows.count {
                report.checked.append("\(sound) media objects in the bucket \(bytes.bucket.location.bucket) (\(total) bytes): each present, its size as recorded")
            }
            for key in objects.keys.sorted() where rows != nil {
                report.warnings.append("media object \(key) has no row (left by a finalize stopped before its commit, or published during this check); a finalize of the same file adopts it")
            }
            let staged = try bytes.partFileIDs().count
            if staged > 0 { report.checked.append("\(staged) uploads with staged pieces (not checked: finalize checks every chunk and the whole file)") }
        } catch {
            report.problems.append("the media bucket cannot be read: \(error)")
        }
    }
}
