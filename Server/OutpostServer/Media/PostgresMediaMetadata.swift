import Foundation
import OutpostCore
import OutpostPostgres
import Synchronization

/// Media metadata in PostgreSQL, for instances that share one database and one media
/// directory (docs/media.md, "Several instances"; docs/scaling.md).
///
/// The bytes stay files: every instance writes chunks into, and finalize renames from,
/// the same shared directory, which must be a POSIX file system that every instance
/// mounts, where `rename(2)` is atomic and a write by one instance is seen by a read on
/// another once it returned (a local disk of a single host, or NFSv4 with close-to-open
/// consistency: each chunk write opens and closes its file, and finalize opens the file
/// after every receipt was committed).
///
/// Keeping chunk writes and finalize apart across instances: `withUploadLock` holds a
/// PostgreSQL session advisory lock on the upload (shared for a chunk, exclusive for
/// finalize and abort) on a connection checked out of a small pool for the whole body.
/// Two instances racing to finalize one upload therefore run one after the other, the
/// second finding the upload complete (and answering the same), and no chunk is written
/// into a file being hashed or renamed. When an instance dies, PostgreSQL ends its
/// sessions and so releases its locks. `begin` is atomic across instances through a
/// transaction advisory lock on (space, sha256).
///
/// A directory that is not the one the other instances use (a per-instance default, a
/// forgotten mount) would split uploads between directories, so it is refused at start:
/// the first instance writes a random id into `outpost-media-id` in the directory and into
/// `meta.media_directory_id`, and every instance checks that the two match.
final class PostgresMediaMetadata: MediaMetadata {
    private let writer: WorkerThread<PostgresMediaWriteJob>
    private let reader: WorkerThread<PostgresMediaReadJob>
    private let locks: PostgresLockPool
    let largestOpenChunkSize: Int

    /// Namespace of the upload advisory locks (high 32 bits: ASCII "upld").
    static let uploadLockSpace: Int64 = 0x7570_6C64 << 32
    /// Namespace of the (space, sha256) transaction locks of `begin`.
    static let beginLockSpace: Int32 = 0x6265_6769

    init(url: String, mediaDirectory: String) throws {
        let setup = try PostgresSyncStore.open(url)
        _ = try PostgresSchema.migrate(setup)
        try Self.checkDirectory(setup, mediaDirectory)
        largestOpenChunkSize = Int(try setup.query("SELECT coalesce(max(chunk_size), 0) FROM uploads WHERE state = 'open'").int64(0, 0))
        setup.close()
        writer = try WorkerThread<PostgresMediaWriteJob>(
            name: "pg-media-writer", maxBatch: 128,
            setup: { PostgresMediaWriter(db: try PostgresSyncStore.open(url)) },
            handle: { writer, jobs in writer.handle(jobs) },
            teardown: { writer in writer.db.close() })
        reader = try PostgresMediaReadJob.thread(name: "pg-media-reader", url: url)
        locks = PostgresLockPool(url: url)
    }

    /// Refuses a media directory other than the one the database's instances use.
    static func checkDirectory(_ db: PostgresConnection, _ directory: String) throws {
        let marker = directory + "/outpost-media-id"
        var id = (try? String(contentsOfFile: marker, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        if id == nil || id!.isEmpty {
            var rng = SystemRandomNumberGenerator()
            let fresh = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &rng)) }.joined()
            let fd = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd >= 0 {
                let bytes = Array((fresh + "\n").utf8)
                let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                fsync(fd)
                Glibc.close(fd)
                guard written == bytes.count else { throw StoreError("cannot write \(marker)") }
                id = fresh
            } else {
                // Another instance created it at the same moment.
                id = (try? String(contentsOfFile: marker, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
            }
        }
        guard let id, !id.isEmpty else { throw StoreError("cannot read or create \(marker)") }
        try db.run("INSERT INTO meta(key, value) VALUES ('media_directory_id', $1) ON CONFLICT (key) DO NOTHING", [.text(id)])
        let known = try db.query("SELECT value FROM meta WHERE key = 'media_directory_id'").text(0, 0)
        guard known == id else {
            throw StoreError("media directory \(directory) is not the one the other instances of this database use (its outpost-media-id is \(id), the database's is \(known)); give every instance the same shared --media-dir")
        }
    }

    // MARK: Lookups (reader thread)

    func media(space: SpaceName, id: MediaID) async throws -> MediaRecord? {
        try await read { db in try PostgresMediaWriter.media(db, space: space.rawValue, id: id.rawValue) }
    }

    func upload(_ id: UploadID) async throws -> UploadRecord? {
        try await read { db in try PostgresMediaWriter.upload(db, id) }
    }

    func upload(_ id: UploadID, chunk index: Int) async throws -> (UploadRecord, [UInt8]?)? {
        try await read { db in
            guard let upload = try PostgresMediaWriter.upload(db, id) else { return nil }
            let rows = try db.query("SELECT sha256 FROM upload_chunks WHERE upload_id = $1 AND idx = $2", [.text(id.rawValue), .int(Int64(index))])
            return (upload, rows.count == 0 ? nil : rows.bytes(0, 0))
        }
    }

    func receivedChunks(_ id: UploadID) async throws -> [Int] {
        try await read { db in
            let rows = try db.query("SELECT idx FROM upload_chunks WHERE upload_id = $1 ORDER BY idx", [.text(id.rawValue)])
            return (0..<rows.count).map { Int(rows.int64($0, 0)) }
        }
    }

    func chunkDigests(_ id: UploadID) async throws -> [Int: [UInt8]] {
        try await read { db in
            let rows = try db.query("SELECT idx, sha256 FROM upload_chunks WHERE upload_id = $1", [.text(id.rawValue)])
            var out: [Int: [UInt8]] = [:]
            for row in 0..<rows.count { out[Int(rows.int64(row, 0))] = rows.bytes(row, 1) }
            return out
        }
    }

    func expiredUploads(now: Int64, limit: Int) async throws -> [UploadID] {
        try await read { db in
            let rows = try db.query("SELECT upload_id FROM uploads WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2", [.int(now), .int(Int64(limit))])
            return (0..<rows.count).compactMap { UploadID(rows.text($0, 0)) }
        }
    }

    func existingUploads(_ ids: [UploadID]) async throws -> Set<UploadID> {
        try await read { db in
            let rows = try db.query("SELECT upload_id FROM uploads WHERE upload_id = ANY($1)", [.textArray(ids.map(\.rawValue))])
            return Set((0..<rows.count).compactMap { UploadID(rows.text($0, 0)) })
        }
    }

    // MARK: Writes (writer thread)

    func begin(space: SpaceName, sha256: MediaID, size: Int64, now: Int64, make: @escaping @Sendable () -> UploadRecord) async throws -> MediaStore.BeginOutcome {
        try await write { db in
            try db.transaction {
                // Two instances initializing the same file take turns here.
                try db.query("SELECT pg_advisory_xact_lock($1::int4, hashtext($2))",
                             [.int(Int64(Self.beginLockSpace)), .text(space.rawValue + "/" + sha256.rawValue)])
                if let media = try PostgresMediaWriter.media(db, space: space.rawValue, id: sha256.rawValue) { return .existing(media) }
                let open = try db.query("""
                    SELECT upload_id FROM uploads WHERE space = $1 AND sha256 = $2 AND size = $3 AND state = 'open' AND expires_at > $4
                    ORDER BY created_at LIMIT 1
                    """, [.text(space.rawValue), .text(sha256.rawValue), .int(size), .int(now)])
                if open.count > 0, let id = UploadID(open.text(0, 0)), let upload = try PostgresMediaWriter.upload(db, id) {
                    let rows = try db.query("SELECT idx FROM upload_chunks WHERE upload_id = $1 ORDER BY idx", [.text(id.rawValue)])
                    return .resumed(upload, received: (0..<rows.count).map { Int(rows.int64($0, 0)) })
                }
                let upload = make()
                try db.run("""
                    INSERT INTO uploads(upload_id, space, sha256, size, content_type, filename, chunk_size, chunk_count, state, created_at, expires_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'open', $9, $10)
                    """, [.text(upload.id.rawValue), .text(upload.space.rawValue), .text(upload.sha256.rawValue), .int(upload.size),
                          .text(upload.contentType), upload.filename.map { .text($0) } ?? .null, .int(Int64(upload.chunkSize)),
                          .int(Int64(upload.chunkCount)), .int(upload.createdAt), .int(upload.expiresAt)])
                return .created(upload)
            }
        }
    }

    func recordChunk(_ id: UploadID, index: Int, digest: [UInt8], now: Int64, expiresAt: Int64) async throws -> Int? {
        try await withCheckedThrowingContinuation { continuation in
            let job = PostgresMediaWriteJob.receipt(ChunkReceiptJob(id: id, index: index, digest: digest, now: now, expiresAt: expiresAt) {
                continuation.resume(with: $0)
            })
            if !writer.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }

    func forgetChunks(_ id: UploadID, _ indexes: [Int]) async throws {
        _ = try await write { db in
            try db.run("DELETE FROM upload_chunks WHERE upload_id = $1 AND idx = ANY($2)", [.text(id.rawValue), .intArray(indexes.map { Int64($0) })])
        }
    }

    func publish(_ upload: UploadRecord, now: Int64, expiresAt: Int64) async throws -> MediaRecord {
        try await write { db in
            try db.transaction {
                try db.run("""
                    INSERT INTO media(space, media_id, size, content_type, filename, created_at) VALUES ($1, $2, $3, $4, $5, $6)
                    ON CONFLICT (space, media_id) DO NOTHING
                    """, [.text(upload.space.rawValue), .text(upload.sha256.rawValue), .int(upload.size), .text(upload.contentType),
                          upload.filename.map { .text($0) } ?? .null, .int(now)])
                try db.run("UPDATE uploads SET state = 'complete', expires_at = $1 WHERE upload_id = $2", [.int(expiresAt), .text(upload.id.rawValue)])
                try db.run("DELETE FROM upload_chunks WHERE upload_id = $1", [.text(upload.id.rawValue)])
                guard let media = try PostgresMediaWriter.media(db, space: upload.space.rawValue, id: upload.sha256.rawValue) else {
                    throw StoreError("media row of \(upload.sha256) missing right after its insert")
                }
                return media
            }
        }
    }

    func deleteUpload(_ id: UploadID, expiredAt: Int64?) async throws -> Bool {
        try await write { db in
            try db.transaction {
                let deleted: Int
                if let expiredAt {
                    deleted = try db.run("DELETE FROM uploads WHERE upload_id = $1 AND expires_at <= $2", [.text(id.rawValue), .int(expiredAt)])
                } else {
                    deleted = try db.run("DELETE FROM uploads WHERE upload_id = $1", [.text(id.rawValue)])
                }
                if deleted > 0 { try db.run("DELETE FROM upload_chunks WHERE upload_id = $1", [.text(id.rawValue)]) }
                return deleted > 0
            }
        }
    }

    // MARK: Locks

    static func lockKey(_ id: UploadID) -> Int64 {
        // The first 8 hex digits of the random id; two uploads sharing them only wait for
        // each other, which is harmless.
        uploadLockSpace | Int64(UInt32(id.rawValue.prefix(8), radix: 16) ?? 0)
    }

    func withUploadLock<T: Sendable>(_ id: UploadID, exclusive: Bool, _ body: () async throws -> T) async throws -> T {
        try await locks.withLock(key: Self.lockKey(id), exclusive: exclusive, wait: true, body)!
    }

    func tryUploadLock<T: Sendable>(_ id: UploadID, _ body: () async throws -> T) async throws -> T? {
        try await locks.withLock(key: Self.lockKey(id), exclusive: true, wait: false, body)
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

    private func read<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = PostgresMediaReadJob { db, error in
                if let error { continuation.resume(throwing: error); return }
                continuation.resume(with: Result { try body(db) })
            }
            if !reader.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }

    private func write<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = PostgresMediaWriteJob.other { db in continuation.resume(with: Result { try body(db) }) }
            if !writer.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }
}

// MARK: - Jobs

enum PostgresMediaWriteJob: Sendable {
    case receipt(ChunkReceiptJob)
    case other(@Sendable (PostgresConnection) -> Void)
}

struct PostgresMediaReadJob: Sendable {
    let run: @Sendable (PostgresConnection, (any Error)?) -> Void

    /// A thread with its own connection to `url` that runs these jobs in order, each after
    /// reconnecting if the connection was lost (the job gets the error when that fails).
    static func thread(name: String, url: String) throws -> WorkerThread<PostgresMediaReadJob> {
        try WorkerThread<PostgresMediaReadJob>(
            name: name,
            setup: { try PostgresSyncStore.open(url) },
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
final class PostgresMediaWriter {
    let db: PostgresConnection

    init(db: PostgresConnection) {
        self.db = db
    }

    func handle(_ jobs: [PostgresMediaWriteJob]) {
        var receipts: [ChunkReceiptJob] = []
        for job in jobs {
            switch job {
            case .receipt(let r):
                receipts.append(r)
            case .other(let body):
                commit(receipts)
                receipts.removeAll()
                _ = try? db.reconnectIfNeeded()
                body(db)
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
            try db.transaction {
                for r in receipts {
                    let moved = try db.run("UPDATE uploads SET expires_at = $1 WHERE upload_id = $2 AND state = 'open' AND expires_at > $3",
                                           [.int(r.expiresAt), .text(r.id.rawValue), .int(r.now)])
                    guard moved > 0 else {
                        results.append(nil)
                        continue
                    }
                    try db.run("""
                        INSERT INTO upload_chunks(upload_id, idx, sha256) VALUES ($1, $2, $3)
                        ON CONFLICT (upload_id, idx) DO UPDATE SET sha256 = excluded.sha256
                        """, [.text(r.id.rawValue), .int(Int64(r.index)), .bytes(r.digest)])
                    results.append(Int(try db.query("SELECT count(*) FROM upload_chunks WHERE upload_id = $1", [.text(r.id.rawValue)]).int64(0, 0)))
                }
            }
        } catch {
            for r in receipts { r.completion(.failure(error)) }
            return
        }
        for (r, result) in zip(receipts, results) { r.completion(.success(result)) }
    }

    static func media(_ db: PostgresConnection, space: String, id: String) throws -> MediaRecord? {
        let rows = try db.query("SELECT space, media_id, size, content_type, created_at FROM media WHERE space = $1 AND media_id = $2",
                                [.text(space), .text(id)])
        guard rows.count > 0, let space = SpaceName(rows.text(0, 0)), let id = MediaID(rows.text(0, 1)) else { return nil }
        return MediaRecord(space: space, id: id, size: rows.int64(0, 2), contentType: rows.text(0, 3), createdAt: rows.int64(0, 4))
    }

    static func upload(_ db: PostgresConnection, _ id: UploadID) throws -> UploadRecord? {
        let rows = try db.query("""
            SELECT space, sha256, size, content_type, filename, chunk_size, chunk_count, state, created_at, expires_at
            FROM uploads WHERE upload_id = $1
            """, [.text(id.rawValue)])
        guard rows.count > 0, let space = SpaceName(rows.text(0, 0)), let sha = MediaID(rows.text(0, 1)),
              let state = UploadRecord.State(rawValue: rows.text(0, 7)) else { return nil }
        return UploadRecord(id: id, space: space, sha256: sha, size: rows.int64(0, 2), contentType: rows.text(0, 3),
                            filename: rows.optionalText(0, 4), chunkSize: Int(rows.int64(0, 5)), chunkCount: Int(rows.int64(0, 6)),
                            state: state, createdAt: rows.int64(0, 8), expiresAt: rows.int64(0, 9))
    }
}

// MARK: - Lock sessions

/// Connections that hold PostgreSQL session advisory locks for async bodies. A body's
/// lock lives on one connection from lock to unlock, so each body checks a session out
/// for its whole length (a session serves one body at a time: a blocked lock request
/// must never hold up another body's unlock). Sessions are made on demand, at most
/// `maxSessions`; a body beyond that waits for a free one.
final class PostgresLockPool: Sendable {
    /// One connection on its own thread.
    final class Session: Sendable {
        let thread: WorkerThread<PostgresMediaReadJob>

        init(url: String) throws {
            thread = try PostgresMediaReadJob.thread(name: "pg-media-lock", url: url)
        }

        func run<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
            try await withCheckedThrowingContinuation { continuation in
                let job = PostgresMediaReadJob { db, error in
                    if let error { continuation.resume(throwing: error); return }
                    continuation.resume(with: Result { try body(db) })
                }
                if !thread.submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
            }
        }
    }

    private struct State {
        var idle: [Session] = []
        var all: [Session] = []
        var creating = 0
        var waiters: [CheckedContinuation<Session, Never>] = []
    }

    private let url: String
    private let maxSessions: Int
    private let state = Mutex(State())

    init(url: String, maxSessions: Int = 16) {
        self.url = url
        self.maxSessions = maxSessions
    }

    private enum Next {
        case ready(Session)
        case create
        case wait
    }

    private func checkout() async throws -> Session {
        let next: Next = state.withLock { s in
            if let session = s.idle.popLast() { return .ready(session) }
            if s.all.count + s.creating < maxSessions {
                s.creating += 1
                return .create
            }
            return .wait
        }
        switch next {
        case .ready(let session):
            return session
        case .create:
            do {
                let session = try Session(url: url)
                state.withLock { s in
                    s.creating -= 1
                    s.all.append(session)
                }
                return session
            } catch {
                state.withLock { $0.creating -= 1 }
                throw error
            }
        case .wait:
            return await withCheckedContinuation { continuation in
                let ready: Session? = state.withLock { s in
                    if let session = s.idle.popLast() { return session }
                    s.waiters.append(continuation)
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }

    private func checkin(_ session: Session) {
        let waiter: CheckedContinuation<Session, Never>? = state.withLock { s in
            if !s.waiters.isEmpty { return s.waiters.removeFirst() }
            s.idle.append(session)
            return nil
        }
        waiter?.resume(returning: session)
    }

    /// Runs `body` holding advisory lock `key` (shared or exclusive). With `wait: false`
    /// the lock is only tried, and nil is returned without running `body` when another
    /// session holds it.
    func withLock<T: Sendable>(key: Int64, exclusive: Bool, wait: Bool, _ body: () async throws -> T) async throws -> T? {
        let session = try await checkout()
        let lockSQL: String
        switch (exclusive, wait) {
        case (true, true): lockSQL = "SELECT true FROM pg_advisory_lock($1)"
        case (false, true): lockSQL = "SELECT true FROM pg_advisory_lock_shared($1)"
        case (true, false): lockSQL = "SELECT pg_try_advisory_lock($1)"
        case (false, false): lockSQL = "SELECT pg_try_advisory_lock_shared($1)"
        }
        let taken: Bool
        do {
            taken = try await session.run { db in try db.query(lockSQL, [.int(key)]).bool(0, 0) }
        } catch {
            checkin(session)
            throw error
        }
        guard taken else {
            checkin(session)
            return nil
        }
        let result: Result<T, any Error>
        do {
            result = .success(try await body())
        } catch {
            result = .failure(error)
        }
        let unlockSQL = exclusive ? "SELECT pg_advisory_unlock($1)" : "SELECT pg_advisory_unlock_shared($1)"
        do {
            _ = try await session.run { db in try db.query(unlockSQL, [.int(key)]).bool(0, 0) }
        } catch {
            // The connection is gone, and with it the session and its locks.
            Log.error("media lock release failed", ["error": "\(error)"])
        }
        checkin(session)
        return try result.get()
    }

    /// Stops every session's thread. Blocks: call it off the cooperative pool.
    func stop() {
        let all = state.withLock { s -> [Session] in
            defer { s.all.removeAll(); s.idle.removeAll() }
            return s.all
        }
        for session in all { session.thread.stop() }
    }
}
