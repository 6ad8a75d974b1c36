import Foundation
import OutpostCore
import OutpostPostgres
import Synchronization

/// Media metadata in PostgreSQL, for instances that share one database and one media
/// directory (docs/media.md, "Several instances"; docs/scaling.md), kept by the rules of
/// `SQLMediaMetadata` on `PostgresSession`s.
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
/// transaction advisory lock on (space, sha256) (`PostgresSession.lock`).
///
/// A place for the bytes that is not the one the other instances use (a per-instance
/// default directory, a forgotten mount, another bucket) would split uploads between
/// places, so it is refused at start: the first instance records the place's identity
/// (`MediaBytes.identity`) in `meta.media_directory_id`, and every instance checks that
/// its place has the same.
enum PostgresMediaMetadata {
    /// Namespace of the upload advisory locks (high 32 bits: ASCII "upld").
    static let uploadLockSpace: Int64 = 0x7570_6C64 << 32
    /// The media tables' step from before the named list (`meta.media_schema_version` 2),
    /// in `PostgresSchema`'s list; "sync 1" made the tables of version 1.
    static let migrations: [Migration] = [
        Migration(name: "media 2: tus_uploads", legacy: ("media", 2), sql: #"""
            CREATE TABLE tus_uploads(
                upload_id text COLLATE "C" PRIMARY KEY,
                space text COLLATE "C" NOT NULL,
                length bigint NOT NULL,
                upload_offset bigint NOT NULL,
                metadata text NOT NULL,
                content_type text NOT NULL,
                filename text,
                media_id text COLLATE "C",
                state text NOT NULL,
                created_at bigint NOT NULL,
                expires_at bigint NOT NULL);
            CREATE INDEX tus_uploads_expiry ON tus_uploads(expires_at);
            INSERT INTO meta(key, value) VALUES ('media_schema_version', '2')
                ON CONFLICT (key) DO UPDATE SET value = excluded.value;
            """#),
    ]

    /// Opens the media metadata in the database at `url` (migrating it) for the shared
    /// place of the bytes (`MediaBytes.identity`).
    static func open(url: String, bytes: any MediaBytes) throws -> SQLMediaMetadata {
        let setup = try PostgresSyncStore.open(url)
        defer { setup.close() }
        _ = try PostgresSchema.migrate(setup)
        try checkPlace(setup, bytes)
        return try SQLMediaMetadata(
            name: "pg", largestOpenChunkSize: try SQLMediaMetadata.largestOpenChunkSize(PostgresSession(db: setup)),
            openWriter: { PostgresSession(db: try PostgresSyncStore.open(url)) },
            openReader: { PostgresSession(db: try PostgresSyncStore.open(url)) },
            locks: PostgresLockPool(url: url))
    }

    /// Refuses a place for the bytes other than the one the database's instances use: the
    /// first instance records the place's identity in `meta.media_directory_id`.
    static func checkPlace(_ db: PostgresConnection, _ bytes: any MediaBytes) throws {
        let id = try bytes.identity()
        try db.run("INSERT INTO meta(key, value) VALUES ('media_directory_id', $1) ON CONFLICT (key) DO NOTHING", [.text(id)])
        let known = try db.query("SELECT value FROM meta WHERE key = 'media_directory_id'").text(0, 0)
        guard known == id else {
            throw StoreError("\(bytes.placeName) is not where the other instances of this database keep media (its identity is \(id), the database's is \(known)); give every instance the same shared --media-dir, or the same --s3-bucket and --s3-prefix")
        }
    }

    static func lockKey(_ id: UploadID) -> Int64 {
        // The first 8 hex digits of the random id; two uploads sharing them only wait for
        // each other, which is harmless.
        uploadLockSpace | Int64(UInt32(id.rawValue.prefix(8), radix: 16) ?? 0)
    }
}

// MARK: - Lock sessions

/// Connections that hold PostgreSQL session advisory locks for async bodies. A body's
/// lock lives on one connection from lock to unlock, so each body checks a session out
/// for its whole length (a session serves one body at a time: a blocked lock request
/// must never hold up another body's unlock). Sessions are made on demand, at most
/// `maxSessions`; a body beyond that waits for a free one.
final class PostgresLockPool: UploadLockService {
    /// One connection on its own thread, reconnected before a job when it was lost.
    final class Session: Sendable {
        let thread: WorkerThread<SQLSessionJob>

        init(url: String) throws {
            thread = try SQLSessionJob.thread(name: "pg-media-lock", open: { PostgresSession(db: try PostgresSyncStore.open(url)) })
        }

        func run<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
            try await withCheckedThrowingContinuation { continuation in
                let job = SQLSessionJob { db, error in
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

    /// Runs `body` holding the advisory lock of upload `id` (shared or exclusive). With
    /// `wait: false` the lock is only tried, and nil is returned without running `body`
    /// when another session holds it.
    func withLock<T: Sendable>(_ id: UploadID, exclusive: Bool, wait: Bool, _ body: () async throws -> T) async throws -> T? {
        let key = PostgresMediaMetadata.lockKey(id)
        let session = try await checkout()
        let lockSQL: String
        switch (exclusive, wait) {
        case (true, true): lockSQL = "SELECT 1 FROM pg_advisory_lock(?)"
        case (false, true): lockSQL = "SELECT 1 FROM pg_advisory_lock_shared(?)"
        case (true, false): lockSQL = "SELECT pg_try_advisory_lock(?)::int"
        case (false, false): lockSQL = "SELECT pg_try_advisory_lock_shared(?)::int"
        }
        let taken: Bool
        do {
            taken = try await session.run { db in try db.queryOne(lockSQL, [.integer(key)]) { $0.int64(0) } == 1 }
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
        let unlockSQL = exclusive ? "SELECT pg_advisory_unlock(?)" : "SELECT pg_advisory_unlock_shared(?)"
        do {
            _ = try await session.run { db in try db.run(unlockSQL, [.integer(key)]) }
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
