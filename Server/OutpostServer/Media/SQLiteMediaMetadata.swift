import Foundation
import OutpostCore
import OutpostSQLite
import Synchronization

/// Media metadata in the server's SQLite file: the `media`, `uploads` and `upload_chunks`
/// tables (docs/media.md), behind `MediaMetadata`.
///
/// Threads: one writer thread owns the media write connection and commits chunk receipts
/// in groups (every receipt queued while a commit runs goes into the next); one reader
/// thread owns a read-only connection for lookups. The sync store's writer is another
/// connection on the same file: WAL and the busy timeout settle the rare overlap.
///
/// Durability: receipts commit with `synchronous=NORMAL` (they survive a crash of the
/// process; a power loss may cost a resend, which `received` then shows). Publishing
/// commits with the server's `synchronous` setting (FULL by default).
///
/// One process owns the file (`DataDirectory`'s lock), so the upload locks of
/// `MediaService` alone keep chunk writes and finalize apart: `withUploadLock` adds nothing.
final class SQLiteMediaMetadata: MediaMetadata {
    private let writer: WorkerThread<MediaWriteJob>
    private let reader: WorkerThread<MediaReadJob>
    let largestOpenChunkSize: Int

    static let schemaVersion = 1

    /// Opens the media tables (creating them when absent).
    init(databasePath path: String, publishSynchronous: Connection.Synchronous) throws {
        let setup = try Connection(path: path)
        try setup.enableWAL(synchronous: .normal)
        try Self.migrate(setup)
        largestOpenChunkSize = Int(try setup.scalarInt("SELECT max(chunk_size) FROM uploads WHERE state = 'open'") ?? 0)
        setup.close()
        writer = try WorkerThread<MediaWriteJob>(
            name: "outpost-media-writer", maxBatch: 128,
            setup: {
                let db = try Connection(path: path)
                try db.enableWAL(synchronous: .normal)
                return MediaWriter(db: db, publishSynchronous: publishSynchronous)
            },
            handle: { writer, jobs in writer.handle(jobs) },
            teardown: { writer in writer.db.close() })
        reader = try WorkerThread<MediaReadJob>(
            name: "outpost-media-reader",
            setup: { try Connection(path: path, flags: [.readOnly]) },
            handle: { db, jobs in for job in jobs { job.run(db) } },
            teardown: { db in db.close() })
    }

    // MARK: Schema

    /// Creates or upgrades the media tables.
    static func migrate(_ db: Connection) throws {
        try db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
        let version = try db.scalarText("SELECT value FROM meta WHERE key = 'media_schema_version'").flatMap { Int($0) } ?? 0
        guard version <= schemaVersion else {
            throw StoreError("the store's media schema version \(version) is newer than this server's (\(schemaVersion)); upgrade the server")
        }
        if version < 1 {
            try db.transaction {
                try db.execute("""
                    CREATE TABLE media(
                        space TEXT NOT NULL,
                        media_id TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        content_type TEXT NOT NULL,
                        filename TEXT,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY(space, media_id)) WITHOUT ROWID;
                    CREATE TABLE uploads(
                        upload_id TEXT PRIMARY KEY,
                        space TEXT NOT NULL,
                        sha256 TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        content_type TEXT NOT NULL,
                        filename TEXT,
                        chunk_size INTEGER NOT NULL,
                        chunk_count INTEGER NOT NULL,
                        state TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE INDEX uploads_file ON uploads(space, sha256, size) WHERE state = 'open';
                    CREATE INDEX uploads_expiry ON uploads(expires_at);
                    CREATE TABLE upload_chunks(
                        upload_id TEXT NOT NULL,
                        idx INTEGER NOT NULL,
                        sha256 BLOB NOT NULL,
                        PRIMARY KEY(upload_id, idx)) WITHOUT ROWID;
                    """)
                try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('media_schema_version', '1')")
            }
        }
    }

    // MARK: Lookups (reader thread)

    /// The published file `id` of `space`, if any.
    func media(space: SpaceName, id: MediaID) async throws -> MediaRecord? {
        try await read { db in try MediaWriter.media(db, space: space.rawValue, id: id.rawValue) }
    }

    /// An upload, whatever its space or expiry (the caller checks both).
    func upload(_ id: UploadID) async throws -> UploadRecord? {
        try await read { db in try MediaWriter.upload(db, id) }
    }

    /// An upload and the recorded digest of its chunk `index`, if held.
    func upload(_ id: UploadID, chunk index: Int) async throws -> (UploadRecord, [UInt8]?)? {
        try await read { db in
            guard let upload = try MediaWriter.upload(db, id) else { return nil }
            let digest = try db.queryOne("SELECT sha256 FROM upload_chunks WHERE upload_id = ? AND idx = ?",
                                         [.text(id.rawValue), .integer(Int64(index))]) { $0.blob(0) }
            return (upload, digest)
        }
    }

    /// The indexes of the chunks held, ascending.
    func receivedChunks(_ id: UploadID) async throws -> [Int] {
        try await read { db in
            try db.query("SELECT idx FROM upload_chunks WHERE upload_id = ? ORDER BY idx", [.text(id.rawValue)]) { $0.int(0) }
        }
    }

    /// The digests of the chunks held, by index.
    func chunkDigests(_ id: UploadID) async throws -> [Int: [UInt8]] {
        try await read { db in
            var out: [Int: [UInt8]] = [:]
            for (index, digest) in try db.query("SELECT idx, sha256 FROM upload_chunks WHERE upload_id = ?", [.text(id.rawValue)], { ($0.int(0), $0.blob(1)) }) {
                out[index] = digest
            }
            return out
        }
    }

    /// Uploads (open or complete) whose time ran out at `now`, oldest first.
    func expiredUploads(now: Int64, limit: Int) async throws -> [UploadID] {
        try await read { db in
            try db.query("SELECT upload_id FROM uploads WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
                         [.integer(now), .integer(Int64(limit))]) { $0.text(0) }.compactMap(UploadID.init)
        }
    }

    /// Of `ids`, those that have an upload row.
    func existingUploads(_ ids: [UploadID]) async throws -> Set<UploadID> {
        try await read { db in
            var out: Set<UploadID> = []
            for id in ids where try db.scalarInt("SELECT 1 FROM uploads WHERE upload_id = ?", [.text(id.rawValue)]) != nil {
                out.insert(id)
            }
            return out
        }
    }

    // MARK: Writes (writer thread)

    /// Step 1 of section 6, in one transaction so two inits of one file cannot both
    /// create an upload: the space's file, else its open upload of the same `sha256` and
    /// `size` (not expired at `now`), else a new upload made by `make`.
    func begin(space: SpaceName, sha256: MediaID, size: Int64, now: Int64, make: @escaping @Sendable () -> UploadRecord) async throws -> MediaStore.BeginOutcome {
        try await write { writer in
            let db = writer.db
            return try db.transaction {
                if let media = try MediaWriter.media(db, space: space.rawValue, id: sha256.rawValue) { return .existing(media) }
                let openID = try db.scalarText("""
                    SELECT upload_id FROM uploads WHERE space = ? AND sha256 = ? AND size = ? AND state = 'open' AND expires_at > ?
                    ORDER BY created_at LIMIT 1
                    """, [.text(space.rawValue), .text(sha256.rawValue), .integer(size), .integer(now)])
                if let openID, let id = UploadID(openID), let upload = try MediaWriter.upload(db, id) {
                    let received = try db.query("SELECT idx FROM upload_chunks WHERE upload_id = ? ORDER BY idx", [.text(openID)]) { $0.int(0) }
                    return .resumed(upload, received: received)
                }
                let upload = make()
                try db.run("""
                    INSERT INTO uploads(upload_id, space, sha256, size, content_type, filename, chunk_size, chunk_count, state, created_at, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?)
                    """, [.text(upload.id.rawValue), .text(upload.space.rawValue), .text(upload.sha256.rawValue), .integer(upload.size),
                          .text(upload.contentType), upload.filename.map { .text($0) } ?? .null, .integer(Int64(upload.chunkSize)),
                          .integer(Int64(upload.chunkCount)), .integer(upload.createdAt), .integer(upload.expiresAt)])
                return .created(upload)
            }
        }
    }

    /// Records chunk `index` of an open upload with its digest and moves the upload's
    /// expiry to `expiresAt`. Returns how many distinct chunks are held, or nil when the
    /// upload is no longer open or expired at `now`. Receipts queued together share one
    /// commit.
    func recordChunk(_ id: UploadID, index: Int, digest: [UInt8], now: Int64, expiresAt: Int64) async throws -> Int? {
        try await withCheckedThrowingContinuation { continuation in
            let job = MediaWriteJob.receipt(ChunkReceiptJob(id: id, index: index, digest: digest, now: now, expiresAt: expiresAt) {
                continuation.resume(with: $0)
            })
            if !writer.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }

    /// Forgets chunks (their bytes are to be sent again).
    func forgetChunks(_ id: UploadID, _ indexes: [Int]) async throws {
        try await write { writer in
            try writer.db.transaction {
                for index in indexes {
                    try writer.db.run("DELETE FROM upload_chunks WHERE upload_id = ? AND idx = ?", [.text(id.rawValue), .integer(Int64(index))])
                }
            }
        }
    }

    /// Publishes a finalized upload: the media row (kept when the space already had the
    /// file) and the upload marked complete until `expiresAt`, in one durable commit.
    /// Returns the space's media row.
    func publish(_ upload: UploadRecord, now: Int64, expiresAt: Int64) async throws -> MediaRecord {
        try await write { writer in try writer.publish(upload, now: now, expiresAt: expiresAt) }
    }

    /// Deletes an upload's rows; with `expiredAt`, only when it is expired at that time.
    /// Returns whether a row was deleted.
    @discardableResult
    func deleteUpload(_ id: UploadID, expiredAt: Int64? = nil) async throws -> Bool {
        try await write { writer in
            try writer.db.transaction {
                if let expiredAt {
                    try writer.db.run("DELETE FROM uploads WHERE upload_id = ? AND expires_at <= ?", [.text(id.rawValue), .integer(expiredAt)])
                } else {
                    try writer.db.run("DELETE FROM uploads WHERE upload_id = ?", [.text(id.rawValue)])
                }
                let deleted = writer.db.changes > 0
                if deleted {
                    try writer.db.run("DELETE FROM upload_chunks WHERE upload_id = ?", [.text(id.rawValue)])
                }
                return deleted
            }
        }
    }

    func withUploadLock<T: Sendable>(_ id: UploadID, exclusive: Bool, _ body: () async throws -> T) async throws -> T {
        try await body()
    }

    func tryUploadLock<T: Sendable>(_ id: UploadID, _ body: () async throws -> T) async throws -> T? {
        try await body()
    }

    func close() async {
        let writer = self.writer, reader = self.reader
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                writer.stop()
                reader.stop()
                c.resume()
            }
        }
    }

    // MARK: Thread hops

    private func read<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = MediaReadJob { db in continuation.resume(with: Result { try body(db) }) }
            if !reader.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }

    private func write<T: Sendable>(_ body: @escaping @Sendable (MediaWriter) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = MediaWriteJob.other { writer in continuation.resume(with: Result { try body(writer) }) }
            if !writer.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }

}

// MARK: - Jobs

struct ChunkReceiptJob: Sendable {
    let id: UploadID
    let index: Int
    let digest: [UInt8]
    let now: Int64
    let expiresAt: Int64
    let completion: @Sendable (Result<Int?, any Error>) -> Void
}

enum MediaWriteJob: Sendable {
    case receipt(ChunkReceiptJob)
    case other(@Sendable (MediaWriter) -> Void)
}

struct MediaReadJob: Sendable {
    let run: @Sendable (Connection) -> Void
}

// MARK: - Writer

/// Owned by the media writer thread; never touched elsewhere.
final class MediaWriter {
    let db: Connection
    let publishSynchronous: Connection.Synchronous

    init(db: Connection, publishSynchronous: Connection.Synchronous) {
        self.db = db
        self.publishSynchronous = publishSynchronous
    }

    func handle(_ jobs: [MediaWriteJob]) {
        var receipts: [ChunkReceiptJob] = []
        for job in jobs {
            switch job {
            case .receipt(let r):
                receipts.append(r)
            case .other(let body):
                commit(receipts)
                receipts.removeAll()
                body(self)
            }
        }
        commit(receipts)
    }

    /// Group commit: every receipt of the batch in one transaction; no completion runs
    /// before the commit returned.
    private func commit(_ receipts: [ChunkReceiptJob]) {
        guard !receipts.isEmpty else { return }
        var results: [Int?] = []
        do {
            try db.transaction {
                for r in receipts {
                    try db.run("UPDATE uploads SET expires_at = ? WHERE upload_id = ? AND state = 'open' AND expires_at > ?",
                               [.integer(r.expiresAt), .text(r.id.rawValue), .integer(r.now)])
                    guard db.changes > 0 else {
                        results.append(nil)
                        continue
                    }
                    try db.run("INSERT OR REPLACE INTO upload_chunks(upload_id, idx, sha256) VALUES (?, ?, ?)",
                               [.text(r.id.rawValue), .integer(Int64(r.index)), .blob(r.digest)])
                    results.append(Int(try db.scalarInt("SELECT count(*) FROM upload_chunks WHERE upload_id = ?", [.text(r.id.rawValue)]) ?? 0))
                }
            }
        } catch {
            for r in receipts { r.completion(.failure(error)) }
            return
        }
        for (r, result) in zip(receipts, results) { r.completion(.success(result)) }
    }

    func publish(_ upload: UploadRecord, now: Int64, expiresAt: Int64) throws -> MediaRecord {
        let strict = publishSynchronous != .normal
        if strict { try db.execute("PRAGMA synchronous=\(publishSynchronous.rawValue)") }
        defer { if strict { try? db.execute("PRAGMA synchronous=NORMAL") } }
        return try db.transaction {
            try db.run("""
                INSERT OR IGNORE INTO media(space, media_id, size, content_type, filename, created_at) VALUES (?, ?, ?, ?, ?, ?)
                """, [.text(upload.space.rawValue), .text(upload.sha256.rawValue), .integer(upload.size), .text(upload.contentType),
                      upload.filename.map { .text($0) } ?? .null, .integer(now)])
            try db.run("UPDATE uploads SET state = 'complete', expires_at = ? WHERE upload_id = ?", [.integer(expiresAt), .text(upload.id.rawValue)])
            try db.run("DELETE FROM upload_chunks WHERE upload_id = ?", [.text(upload.id.rawValue)])
            guard let media = try Self.media(db, space: upload.space.rawValue, id: upload.sha256.rawValue) else {
                throw StoreError("media row of \(upload.sha256) missing right after its insert")
            }
            return media
        }
    }

    // Row readers shared by the writer and reader connections.

    static func media(_ db: Connection, space: String, id: String) throws -> MediaRecord? {
        try db.queryOne("SELECT space, media_id, size, content_type, created_at FROM media WHERE space = ? AND media_id = ?",
                        [.text(space), .text(id)]) { row -> MediaRecord? in
            guard let space = SpaceName(row.text(0)), let id = MediaID(row.text(1)) else { return nil }
            return MediaRecord(space: space, id: id, size: row.int64(2), contentType: row.text(3), createdAt: row.int64(4))
        } ?? nil
    }

    static func upload(_ db: Connection, _ id: UploadID) throws -> UploadRecord? {
        try db.queryOne("""
            SELECT space, sha256, size, content_type, filename, chunk_size, chunk_count, state, created_at, expires_at
            FROM uploads WHERE upload_id = ?
            """, [.text(id.rawValue)]) { row -> UploadRecord? in
            guard let space = SpaceName(row.text(0)), let sha = MediaID(row.text(1)),
                  let state = UploadRecord.State(rawValue: row.text(7)) else { return nil }
            return UploadRecord(id: id, space: space, sha256: sha, size: row.int64(2), contentType: row.text(3),
                                filename: row.optionalText(4), chunkSize: row.int(5), chunkCount: row.int(6), state: state,
                                createdAt: row.int64(8), expiresAt: row.int64(9))
        } ?? nil
    }
}
