import Foundation
import OutpostCore

/// The media metadata rules (docs/media.md), written once in SQL over `SQLSession`: the
/// `media`, `uploads`, `upload_chunks` and `tus_uploads` tables of either store. `SQLiteMediaMetadata`
/// and `PostgresMediaMetadata` only open sessions, migrate their schema and say how
/// upload locks reach other processes.
///
/// Threads: one writer thread owns the write session and commits chunk receipts in
/// groups (every receipt queued while a commit runs goes into the next); one reader thread
/// owns a session for lookups.
///
/// Durability: receipts commit `.process` (they survive a crash of the process; a power
/// loss may cost a resend, which `received` then shows). Publishing commits `.durable`.
final class SQLMediaMetadata: MediaMetadata {
    private let writer: WorkerThread<SQLMediaWriteJob>
    private let reader: WorkerThread<SQLSessionJob>
    private let locks: any UploadLockService
    let largestOpenChunkSize: Int

    /// Starts the threads. `openWriter` and `openReader` run on them and make their
    /// sessions; the schema must exist already.
    init(name: String, largestOpenChunkSize: Int,
         openWriter: @escaping @Sendable () throws -> any SQLSession,
         openReader: @escaping @Sendable () throws -> any SQLSession,
         locks: any UploadLockService) throws {
        writer = try WorkerThread<SQLMediaWriteJob>(
            name: "\(name)-media-writer", maxBatch: 128,
            setup: { SQLMediaWriter(db: try openWriter()) },
            handle: { writer, jobs in writer.handle(jobs) },
            teardown: { writer in writer.db.close() })
        reader = try SQLSessionJob.thread(name: "\(name)-media-reader", open: openReader)
        self.locks = locks
        self.largestOpenChunkSize = largestOpenChunkSize
    }

    /// The largest chunk size of an open upload, for `largestOpenChunkSize`.
    static func largestOpenChunkSize(_ db: any SQLSession) throws -> Int {
        try db.queryOne("SELECT coalesce(max(chunk_size), 0) FROM uploads WHERE state = 'open'", []) { $0.int(0) } ?? 0
    }

    // MARK: Lookups (reader thread)

    func media(space: SpaceName, id: MediaID) async throws -> MediaRecord? {
        try await read { db in try SQLMediaWriter.media(db, space: space.rawValue, id: id.rawValue) }
    }

    func upload(_ id: UploadID) async throws -> UploadRecord? {
        try await read { db in try SQLMediaWriter.upload(db, id) }
    }

    func upload(_ id: UploadID, chunk index: Int) async throws -> (UploadRecord, [UInt8]?)? {
        try await read { db in
            guard let upload = try SQLMediaWriter.upload(db, id) else { return nil }
            let digest = try db.queryOne("SELECT sha256 FROM upload_chunks WHERE upload_id = ? AND idx = ?",
                                         [.text(id.rawValue), .integer(Int64(index))]) { $0.bytes(0) }
            return (upload, digest)
        }
    }

    func receivedChunks(_ id: UploadID) async throws -> [Int] {
        try await read { db in try SQLMediaWriter.receivedChunks(db, id) }
    }

    func chunkDigests(_ id: UploadID) async throws -> [Int: [UInt8]] {
        try await read { db in
            var out: [Int: [UInt8]] = [:]
            for (index, digest) in try db.query("SELECT idx, sha256 FROM upload_chunks WHERE upload_id = ?", [.text(id.rawValue)], { ($0.int(0), $0.bytes(1)) }) {
                out[index] = digest
            }
            return out
        }
    }

    /// Both kinds of upload: section 6's and tus's share one id space and one directory.
    func expiredUploads(now: Int64, limit: Int) async throws -> [UploadID] {
        try await read { db in
            try db.query("""
                SELECT upload_id, expires_at FROM uploads WHERE expires_at <= ?
                UNION ALL SELECT upload_id, expires_at FROM tus_uploads WHERE expires_at <= ?
                ORDER BY expires_at LIMIT ?
                """, [.integer(now), .integer(now), .integer(Int64(limit))]) { $0.text(0) }.compactMap(UploadID.init)
        }
    }

    func existingUploads(_ ids: [UploadID]) async throws -> Set<UploadID> {
        try await read { db in
            let list = SQLValue.texts(ids.map(\.rawValue))
            return Set(try db.query("""
                SELECT upload_id FROM uploads WHERE \(db.anyOf("upload_id"))
                UNION SELECT upload_id FROM tus_uploads WHERE \(db.anyOf("upload_id"))
                """, [list, list]) { $0.text(0) }.compactMap(UploadID.init))
        }
    }

    func tusUpload(_ id: UploadID) async throws -> TusUploadRecord? {
        try await read { db in try SQLMediaWriter.tusUpload(db, id) }
    }

    func files(space: SpaceName, after: String, limit: Int) async throws -> [MediaFile] {
        try await read { db in
            try db.query("""
                SELECT media_id, size, content_type, filename, created_at FROM media
                 WHERE space = ? AND media_id > ? ORDER BY media_id LIMIT ?
                """, [.text(space.rawValue), .text(after), .integer(Int64(limit))]) { row -> MediaFile? in
                guard let id = MediaID(row.text(0)) else { return nil }
                return MediaFile(id: id, size: row.int64(1), contentType: row.text(2), filename: row.optionalText(3), createdAt: row.int64(4))
            }.compactMap { $0 }
        }
    }

    func usage(spaces: [String], now: Int64) async throws -> [String: MediaUsage] {
        guard !spaces.isEmpty else { return [:] }
        return try await read { db in try Self.usage(db, spaces: spaces, now: now) }
    }

    /// The published files of each of `spaces` that has any, their bytes, and the bytes the
    /// uploads open at `now` (either kind) will add: what the space's media limit counts.
    static func usage(_ db: any SQLSession, spaces: [String], now: Int64) throws -> [String: MediaUsage] {
        // The sums are cast: PostgreSQL sums a bigint as numeric.
        let rows = try db.query("""
            SELECT space, CAST(sum(files) AS BIGINT), CAST(sum(bytes) AS BIGINT), CAST(sum(open_bytes) AS BIGINT) FROM (
                SELECT space, count(*) AS files, coalesce(sum(size), 0) AS bytes, 0 AS open_bytes FROM media WHERE \(db.anyOf("space")) GROUP BY space
                UNION ALL
                SELECT space, 0, 0, coalesce(sum(size), 0) FROM uploads
                 WHERE \(db.anyOf("space")) AND state = 'open' AND expires_at > ? GROUP BY space
                UNION ALL
                SELECT space, 0, 0, coalesce(sum(length), 0) FROM tus_uploads
                 WHERE \(db.anyOf("space")) AND state = 'open' AND expires_at > ? GROUP BY space) AS held
             GROUP BY space
            """, [.texts(spaces), .texts(spaces), .integer(now), .texts(spaces), .integer(now)]) {
            (space: $0.text(0), usage: MediaUsage(files: $0.int64(1), bytes: $0.int64(2), openBytes: $0.int64(3)))
        }
        return Dictionary(rows.map { ($0.space, $0.usage) }, uniquingKeysWith: { a, _ in a })
    }

    /// Under the space's quota lock (inside a transaction), nil when `size` more bytes keep
    /// `space` within `quota` (nil: no limit), else the bytes it holds now.
    private static func overQuota(_ db: any SQLSession, space: SpaceName, size: Int64, quota: Int64?, now: Int64) throws -> Int64? {
        guard let quota else { return nil }
        // One lock a space for every upload that would add bytes, on this instance or another,
        // so two of them never both fit in what is left.
        try db.lock("quota/" + space.rawValue)
        let used = try usage(db, spaces: [space.rawValue], now: now)[space.rawValue]?.held ?? 0
        return used + size > quota ? used : nil
    }

    // MARK: Writes (writer thread)

    /// Step 1 of section 6, in one transaction holding the file's lock, so two inits of one
    /// file (on this instance or another) cannot both create an upload: the space's file,
    /// else its open upload of the same `sha256` and `size` (not expired at `now`), else a
    /// new upload made by `make`.
    /// An upload that would take the space's media over `quota` is not created
    /// (`.overQuota`): nothing is spent on it.
    func begin(space: SpaceName, sha256: MediaID, size: Int64, now: Int64, quota: Int64?,
               make: @escaping @Sendable () -> UploadRecord) async throws -> MediaStore.BeginOutcome {
        try await write { db in
            try db.transaction(.process) {
                try db.lock(space.rawValue + "/" + sha256.rawValue)
                if let media = try SQLMediaWriter.media(db, space: space.rawValue, id: sha256.rawValue) { return .existing(media) }
                let openID = try db.queryOne("""
                    SELECT upload_id FROM uploads WHERE space = ? AND sha256 = ? AND size = ? AND state = 'open' AND expires_at > ?
                    ORDER BY created_at LIMIT 1
                    """, [.text(space.rawValue), .text(sha256.rawValue), .integer(size), .integer(now)]) { $0.text(0) }
                if let openID, let id = UploadID(openID), let upload = try SQLMediaWriter.upload(db, id) {
                    return .resumed(upload, received: try SQLMediaWriter.receivedChunks(db, id))
                }
                if let used = try Self.overQuota(db, space: space, size: size, quota: quota, now: now) { return .overQuota(used: used) }
                let upload = make()
                try db.run("""
                    INSERT INTO uploads(upload_id, space, sha256, size, content_type, filename, chunk_size, chunk_count, state, created_at, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?)
                    """, [.text(upload.id.rawValue), .text(upload.space.rawValue), .text(upload.sha256.rawValue), .integer(upload.size),
                          .text(upload.contentType), .optionalText(upload.filename), .integer(Int64(upload.chunkSize)),
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
            let job = SQLMediaWriteJob.receipt(ChunkReceiptJob(id: id, index: index, digest: digest, now: now, expiresAt: expiresAt) {
                continuation.resume(with: $0)
            })
            if !writer.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }

    /// Forgets chunks (their bytes are to be sent again).
    func forgetChunks(_ id: UploadID, _ indexes: [Int]) async throws {
        _ = try await write { db in
            try db.transaction(.process) {
                try db.run("DELETE FROM upload_chunks WHERE upload_id = ? AND \(db.anyOf("idx"))",
                           [.text(id.rawValue), .integers(indexes.map { Int64($0) })])
            }
        }
    }

    /// Publishes a finalized upload: the media row (kept when the space already had the
    /// file) and the upload marked complete until `expiresAt`, in one durable commit.
    /// Returns the space's media row.
    /// A tus upload (`tus_uploads`) is published by the same statements: its row is the
    /// one the `tus_uploads` update finds, and it records the media id there.
    func publish(_ upload: UploadRecord, now: Int64, expiresAt: Int64) async throws -> MediaRecord {
        try await write { db in
            try db.transaction(.durable) {
                try db.run("""
                    INSERT INTO media(space, media_id, size, content_type, filename, created_at) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (space, media_id) DO NOTHING
                    """, [.text(upload.space.rawValue), .text(upload.sha256.rawValue), .integer(upload.size), .text(upload.contentType),
                          .optionalText(upload.filename), .integer(now)])
                try db.run("UPDATE uploads SET state = 'complete', expires_at = ? WHERE upload_id = ?", [.integer(expiresAt), .text(upload.id.rawValue)])
                try db.run("UPDATE tus_uploads SET state = 'complete', media_id = ?, expires_at = ? WHERE upload_id = ?",
                           [.text(upload.sha256.rawValue), .integer(expiresAt), .text(upload.id.rawValue)])
                try db.run("DELETE FROM upload_chunks WHERE upload_id = ?", [.text(upload.id.rawValue)])
                guard let media = try SQLMediaWriter.media(db, space: upload.space.rawValue, id: upload.sha256.rawValue) else {
                    throw StoreError("media row of \(upload.sha256) missing right after its insert")
                }
                return media
            }
        }
    }

    /// Deletes an upload's rows; with `expiredAt`, only when it is expired at that time.
    /// Returns whether a row was deleted.
    /// Either kind of upload (a tus upload's row is in `tus_uploads`).
    func deleteUpload(_ id: UploadID, expiredAt: Int64?) async throws -> Bool {
        try await write { db in
            try db.transaction(.process) {
                var deleted = 0
                for table in ["uploads", "tus_uploads"] {
                    if let expiredAt {
                        deleted += try db.run("DELETE FROM \(table) WHERE upload_id = ? AND expires_at <= ?", [.text(id.rawValue), .integer(expiredAt)])
                    } else {
                        deleted += try db.run("DELETE FROM \(table) WHERE upload_id = ?", [.text(id.rawValue)])
                    }
                }
                if deleted > 0 { try db.run("DELETE FROM upload_chunks WHERE upload_id = ?", [.text(id.rawValue)]) }
                return deleted > 0
            }
        }
    }

    // MARK: tus uploads (writer thread)

    /// Creates a tus upload unless it would take the space's media over `quota`; then
    /// returns the bytes the space holds, and creates nothing.
    func createTusUpload(_ upload: TusUploadRecord, quota: Int64?) async throws -> Int64? {
        try await write { db in
            try db.transaction(.process) {
                if let used = try Self.overQuota(db, space: upload.space, size: upload.length, quota: quota, now: upload.createdAt) { return used }
                _ = try db.run("""
                    INSERT INTO tus_uploads(upload_id, space, length, upload_offset, metadata, content_type, filename, media_id, state,
                                            created_at, expires_at)
                    VALUES (?, ?, ?, 0, ?, ?, ?, NULL, 'open', ?, ?)
                    """, [.text(upload.id.rawValue), .text(upload.space.rawValue), .integer(upload.length), .text(upload.metadata),
                          .text(upload.contentType), .optionalText(upload.filename), .integer(upload.createdAt), .integer(upload.expiresAt)])
                return nil
            }
        }
    }

    /// Moves an open upload's offset from `from` to `to` and its expiry to `expiresAt`,
    /// when it is still open, at `from` and not expired at `now`. The caller fsynced the
    /// bytes first, so the stored offset never counts a byte the disk may not hold;
    /// `.process` durability suffices: an offset lost to a power failure is behind the
    /// bytes, which the next request truncates back to it.
    func advanceTusUpload(_ id: UploadID, from: Int64, to: Int64, now: Int64, expiresAt: Int64) async throws -> Bool {
        try await write { db in
            try db.transaction(.process) {
                try db.run("""
                    UPDATE tus_uploads SET upload_offset = ?, expires_at = ?
                    WHERE upload_id = ? AND upload_offset = ? AND state = 'open' AND expires_at > ?
                    """, [.integer(to), .integer(expiresAt), .text(id.rawValue), .integer(from), .integer(now)]) > 0
            }
        }
    }

    /// Lowers an open upload's offset to what its file holds (bytes lost on the disk).
    func lowerTusOffset(_ id: UploadID, to offset: Int64) async throws {
        try await write { db in
            try db.transaction(.process) {
                _ = try db.run("UPDATE tus_uploads SET upload_offset = ? WHERE upload_id = ? AND state = 'open' AND upload_offset > ?",
                               [.integer(offset), .text(id.rawValue), .integer(offset)])
            }
        }
    }

    /// Records the SHA-256 of a whole upload's bytes before its file is renamed into
    /// place, durably: after a crash between the rename and the publish commit, only this
    /// row still says which published file the upload became.
    func assembleTusUpload(_ id: UploadID, mediaID: MediaID?) async throws {
        try await write { db in
            try db.transaction(.durable) {
                _ = try db.run("UPDATE tus_uploads SET media_id = ? WHERE upload_id = ? AND state = 'open'",
                               [.optionalText(mediaID?.rawValue), .text(id.rawValue)])
            }
        }
    }

    // MARK: Locks

    func withUploadLock<T: Sendable>(_ id: UploadID, exclusive: Bool, _ body: () async throws -> T) async throws -> T {
        try await locks.withLock(id, exclusive: exclusive, wait: true, body)!
    }

    func tryUploadLock<T: Sendable>(_ id: UploadID, _ body: () async throws -> T) async throws -> T? {
        try await locks.withLock(id, exclusive: true, wait: false, body)
    }

    func close() async {
        let writer = self.writer, reader = self.reader, locks = self.locks
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                writer.stop()
                reader.stop()
                locks.stop()
                c.resume()
            }
        }
    }

    // MARK: Thread hops

    private func read<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = SQLSessionJob { db, error in
                if let error { continuation.resume(throwing: error); return }
                continuation.resume(with: Result { try body(db) })
            }
            if !reader.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }

    private func write<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = SQLMediaWriteJob.other { db, error in
                if let error { continuation.resume(throwing: error); return }
                continuation.resume(with: Result { try body(db) })
            }
            if !writer.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }
}

/// How `withUploadLock` reaches other processes that share the metadata.
protocol UploadLockService: Sendable {
    /// Runs `body` holding upload `id`'s lock (shared or exclusive). With `wait: false` the
    /// lock is only tried, and nil is returned without running `body` when another process
    /// holds it.
    func withLock<T: Sendable>(_ id: UploadID, exclusive: Bool, wait: Bool, _ body: () async throws -> T) async throws -> T?
    /// Releases what the service holds. Blocks: call it off the cooperative pool.
    func stop()
}

/// Upload locks for metadata that one process owns: `MediaService`'s in-process
/// `UploadLocks` already exclude every other holder, so the body just runs.
struct OneProcessUploadLocks: UploadLockService {
    func withLock<T: Sendable>(_ id: UploadID, exclusive: Bool, wait: Bool, _ body: () async throws -> T) async throws -> T? {
        try await body()
    }

    func stop() {}
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

enum SQLMediaWriteJob: Sendable {
    case receipt(ChunkReceiptJob)
    /// Runs with the session, or with the error that made it unusable.
    case other(@Sendable (any SQLSession, (any Error)?) -> Void)
}

struct SQLSessionJob: Sendable {
    /// Runs with the session, or with the error that made it unusable.
    let run: @Sendable (any SQLSession, (any Error)?) -> Void

    /// A thread with its own session, made by `open`, that runs these jobs in order, each
    /// after reconnecting if the connection was lost (the job gets the error when that fails).
    static func thread(name: String, open: @escaping @Sendable () throws -> any SQLSession) throws -> WorkerThread<SQLSessionJob> {
        try WorkerThread<SQLSessionJob>(
            name: name,
            setup: open,
            handle: { db, jobs in
                for job in jobs {
                    do {
                        try db.reconnectIfNeeded()
                        job.run(db, nil)
                    } catch {
                        job.run(db, error)
                    }
                }
            },
            teardown: { db in db.close() })
    }
}

// MARK: - Writer

/// Owned by the media writer thread; never touched elsewhere.
final class SQLMediaWriter {
    let db: any SQLSession

    init(db: any SQLSession) {
        self.db = db
    }

    func handle(_ jobs: [SQLMediaWriteJob]) {
        var receipts: [ChunkReceiptJob] = []
        for job in jobs {
            switch job {
            case .receipt(let r):
                receipts.append(r)
            case .other(let body):
                commit(receipts)
                receipts.removeAll()
                do {
                    try db.reconnectIfNeeded()
                    body(db, nil)
                } catch {
                    body(db, error)
                }
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
            try db.reconnectIfNeeded()
            try db.transaction(.process) {
                for r in receipts {
                    let moved = try db.run("UPDATE uploads SET expires_at = ? WHERE upload_id = ? AND state = 'open' AND expires_at > ?",
                                           [.integer(r.expiresAt), .text(r.id.rawValue), .integer(r.now)])
                    guard moved > 0 else {
                        results.append(nil)
                        continue
                    }
                    try db.run("""
                        INSERT INTO upload_chunks(upload_id, idx, sha256) VALUES (?, ?, ?)
                        ON CONFLICT (upload_id, idx) DO UPDATE SET sha256 = excluded.sha256
                        """, [.text(r.id.rawValue), .integer(Int64(r.index)), .bytes(r.digest)])
                    results.append(try db.queryOne("SELECT count(*) FROM upload_chunks WHERE upload_id = ?", [.text(r.id.rawValue)]) { $0.int(0) } ?? 0)
                }
            }
        } catch {
            for r in receipts { r.completion(.failure(error)) }
            return
        }
        for (r, result) in zip(receipts, results) { r.completion(.success(result)) }
    }

    // Row readers shared by the writer and reader sessions.

    static func media(_ db: any SQLSession, space: String, id: String) throws -> MediaRecord? {
        try db.queryOne("SELECT space, media_id, size, content_type, created_at FROM media WHERE space = ? AND media_id = ?",
                        [.text(space), .text(id)]) { row -> MediaRecord? in
            guard let space = SpaceName(row.text(0)), let id = MediaID(row.text(1)) else { return nil }
            return MediaRecord(space: space, id: id, size: row.int64(2), contentType: row.text(3), createdAt: row.int64(4))
        } ?? nil
    }

    static func upload(_ db: any SQLSession, _ id: UploadID) throws -> UploadRecord? {
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

    static func tusUpload(_ db: any SQLSession, _ id: UploadID) throws -> TusUploadRecord? {
        try db.queryOne("""
            SELECT space, length, upload_offset, metadata, content_type, filename, media_id, state, created_at, expires_at
            FROM tus_uploads WHERE upload_id = ?
            """, [.text(id.rawValue)]) { row -> TusUploadRecord? in
            guard let space = SpaceName(row.text(0)), let state = TusUploadRecord.State(rawValue: row.text(7)) else { return nil }
            return TusUploadRecord(id: id, space: space, length: row.int64(1), offset: row.int64(2), metadata: row.text(3),
                                   contentType: row.text(4), filename: row.optionalText(5), mediaID: row.optionalText(6).flatMap(MediaID.init),
                                   state: state, createdAt: row.int64(8), expiresAt: row.int64(9))
        } ?? nil
    }

    static func receivedChunks(_ db: any SQLSession, _ id: UploadID) throws -> [Int] {
        try db.query("SELECT idx FROM upload_chunks WHERE upload_id = ? ORDER BY idx", [.text(id.rawValue)]) { $0.int(0) }
    }
}
