import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import OutpostSQLite
import Synchronization

/// Media bytes in a `MediaBytes` (the media directory, `DATA/media` or a directory shared by
/// every instance; or an S3 bucket) and media metadata in a `MediaMetadata`: the server's
/// SQLite file by default, or PostgreSQL when instances share one (docs/media.md,
/// docs/scaling.md).
///
/// Tables (created by the metadata's migrations):
/// - `media(space, media_id, size, content_type, filename, created_at)`: published files,
///   one row per space and SHA-256.
/// - `uploads(upload_id, space, sha256, size, content_type, filename, chunk_size,
///   chunk_count, state, created_at, expires_at)`: uploads, `open` or `complete` (kept
///   after finalize until it expires, so finalizing again answers the same).
/// - `upload_chunks(upload_id, idx, sha256)`: the chunks held, with their digests.
/// - `tus_uploads(upload_id, space, length, upload_offset, metadata, content_type,
///   filename, media_id, state, created_at, expires_at)`: tus uploads (docs/media.md,
///   "tus"); their bytes are upload files like the others, and they publish the same way.
///
/// Threads: database and file calls block, so none runs on Swift's concurrency pool
/// (see `WorkerThread`). The metadata has its own threads and connections; a few file
/// threads here write chunks and finalize (several uploads finalize at once); one flusher
/// thread starts disk writeback of uploads in progress.
public final class MediaStore: Sendable {
    /// Settings of the store.
    public struct Configuration: Sendable {
        /// The SQLite file (the sync store's); unused when `postgresURL` is set.
        public var databasePath: String
        /// `DATA/media`, or the directory every instance shares.
        public var mediaDirectory: String
        /// With a URL, the metadata lives in that PostgreSQL database.
        public var postgresURL: String?
        /// Durability of the publish commit.
        public var synchronous: Connection.Synchronous = .full
        /// With a bucket, media bytes live there rather than in `mediaDirectory`.
        public var s3: S3MediaSettings?
        /// Threads that write chunks and finalize uploads.
        public var fileThreads: Int = 4
        /// An upload's file is written back to disk after every this many new bytes.
        public var flushEveryBytes: Int = 32 << 20

        /// A configuration with the defaults.
        public init(databasePath: String, mediaDirectory: String) {
            self.databasePath = databasePath
            self.mediaDirectory = mediaDirectory
        }
    }

    let bytes: any MediaBytes
    let metadata: any MediaMetadata
    private let io: [WorkerThread<MediaFileJob>]
    private let flusher: WorkerThread<MediaFileJob>
    private let nextIO = Atomic<Int>(0)
    private let flushEveryBytes: Int
    /// The running hash of each open upload's in-order prefix; nil when instances share
    /// the media (see `RunningHashes`).
    let hashes: RunningHashes?
    /// Bytes written per upload since its last writeback, and whether one is queued.
    private let unflushed = Mutex<[UploadID: (bytes: Int, queued: Bool)]>([:])
    /// The largest chunk size of an open upload when the store opened: the chunk route's
    /// body limit must admit it even when the operator lowered `chunkSize` since.
    public var largestOpenChunkSize: Int { metadata.largestOpenChunkSize }

    /// The SQLite media schema version (`meta.media_schema_version`).
    static var schemaVersion: Int { SQLiteMediaMetadata.schemaVersion }

    /// Creates or upgrades the media tables of an SQLite store file.
    static func migrate(_ db: Connection) throws {
        try SQLiteMediaMetadata.migrate(db)
    }

    /// Opens the media metadata (creating its tables when absent) and the media directory.
    public init(configuration: Configuration) throws {
        if let s3 = configuration.s3 {
            bytes = S3MediaBytes(settings: s3)
        } else {
            bytes = MediaFiles(root: configuration.mediaDirectory)
        }
        try bytes.prepare()
        flushEveryBytes = configuration.flushEveryBytes
        hashes = configuration.postgresURL == nil && bytes.keepsRunningHashes ? RunningHashes() : nil
        if let url = configuration.postgresURL {
            metadata = try PostgresMediaMetadata.open(url: url, bytes: bytes)
        } else {
            metadata = try SQLiteMediaMetadata.open(databasePath: configuration.databasePath, publishSynchronous: configuration.synchronous)
        }
        var io: [WorkerThread<MediaFileJob>] = []
        for i in 0..<max(1, configuration.fileThreads) {
            io.append(try WorkerThread<MediaFileJob>(
                name: "outpost-media-io-\(i)", setup: { () },
                handle: { _, jobs in for job in jobs { job.run() } }))
        }
        self.io = io
        flusher = try WorkerThread<MediaFileJob>(
            name: "outpost-media-flush", setup: { () },
            handle: { _, jobs in for job in jobs { job.run() } })
    }

    // MARK: Metadata

    /// What `begin` found or made.
    enum BeginOutcome: Sendable {
        /// The space already has the file.
        case existing(MediaRecord)
        /// An open upload of the same file, returned again.
        case resumed(UploadRecord, received: [Int])
        /// A new upload.
        case created(UploadRecord)
        /// None: a new upload would take the space's media over its limit; `used` is what
        /// the space holds (files and open uploads).
        case overQuota(used: Int64)
    }

    /// The published file `id` of `space`, if any.
    func media(space: SpaceName, id: MediaID) async throws -> MediaRecord? {
        try await metadata.media(space: space, id: id)
    }

    /// An upload, whatever its space or expiry (the caller checks both).
    func upload(_ id: UploadID) async throws -> UploadRecord? {
        try await metadata.upload(id)
    }

    /// An upload and the recorded digest of its chunk `index`, if held.
    func upload(_ id: UploadID, chunk index: Int) async throws -> (UploadRecord, [UInt8]?)? {
        try await metadata.upload(id, chunk: index)
    }

    /// The indexes of the chunks held, ascending.
    func receivedChunks(_ id: UploadID) async throws -> [Int] {
        try await metadata.receivedChunks(id)
    }

    /// The digests of the chunks held, by index.
    func chunkDigests(_ id: UploadID) async throws -> [Int: [UInt8]] {
        try await metadata.chunkDigests(id)
    }

    /// Uploads (open or complete) whose time ran out at `now`, oldest first.
    func expiredUploads(now: Int64, limit: Int) async throws -> [UploadID] {
        try await metadata.expiredUploads(now: now, limit: limit)
    }

    /// Of `ids`, those that have an upload row.
    func existingUploads(_ ids: [UploadID]) async throws -> Set<UploadID> {
        try await metadata.existingUploads(ids)
    }

    /// At most `limit` published files of `space` whose ids sort after `after`, in id order.
    func files(space: SpaceName, after: String, limit: Int) async throws -> [MediaFile] {
        try await metadata.files(space: space, after: after, limit: limit)
    }

    /// The count and bytes of the published files of each of `spaces` that has any.
    func usage(spaces: [String], now: Int64) async throws -> [String: MediaUsage] {
        try await metadata.usage(spaces: spaces, now: now)
    }

    /// Step 1 of section 6, in one transaction so two inits of one file cannot both
    /// create an upload: the space's file, else its open upload of the same `sha256` and
    /// `size` (not expired at `now`), else a new upload made by `make`.
    func begin(space: SpaceName, sha256: MediaID, size: Int64, now: Int64, quota: Int64?,
               make: @escaping @Sendable () -> UploadRecord) async throws -> BeginOutcome {
        try await metadata.begin(space: space, sha256: sha256, size: size, now: now, quota: quota, make: make)
    }

    /// Records chunk `index` of an open upload with its digest and moves the upload's
    /// expiry to `expiresAt`. Returns how many distinct chunks are held, or nil when the
    /// upload is no longer open or expired at `now`. Receipts queued together share one
    /// commit.
    func recordChunk(_ id: UploadID, index: Int, digest: [UInt8], now: Int64, expiresAt: Int64) async throws -> Int? {
        try await metadata.recordChunk(id, index: index, digest: digest, now: now, expiresAt: expiresAt)
    }

    /// Forgets chunks (their bytes are to be sent again).
    func forgetChunks(_ id: UploadID, _ indexes: [Int]) async throws {
        try await metadata.forgetChunks(id, indexes)
    }

    /// Publishes a finalized upload: the media row (kept when the space already had the
    /// file) and the upload marked complete until `expiresAt`, in one durable commit.
    /// Returns the space's media row.
    func publish(_ upload: UploadRecord, now: Int64, expiresAt: Int64) async throws -> MediaRecord {
        try await metadata.publish(upload, now: now, expiresAt: expiresAt)
    }

    /// Deletes an upload's rows; with `expiredAt`, only when it is expired at that time.
    /// Returns whether a row was deleted.
    @discardableResult
    func deleteUpload(_ id: UploadID, expiredAt: Int64? = nil) async throws -> Bool {
        try await metadata.deleteUpload(id, expiredAt: expiredAt)
    }

    /// Runs `body` holding the upload's lock across every instance that shares the
    /// metadata (a no-op for SQLite, which one process owns).
    func withUploadLock<T: Sendable>(_ id: UploadID, exclusive: Bool, _ body: () async throws -> T) async throws -> T {
        try await metadata.withUploadLock(id, exclusive: exclusive, body)
    }

    /// Runs `body` holding the upload's lock exclusively when no instance holds it; nil
    /// otherwise.
    func tryUploadLock<T: Sendable>(_ id: UploadID, _ body: () async throws -> T) async throws -> T? {
        try await metadata.tryUploadLock(id, body)
    }

    // MARK: tus uploads

    /// A tus upload, whatever its space or expiry (the caller checks both).
    func tusUpload(_ id: UploadID) async throws -> TusUploadRecord? {
        try await metadata.tusUpload(id)
    }

    /// A new tus upload at offset 0.
    func createTusUpload(_ upload: TusUploadRecord, quota: Int64?) async throws -> Int64? {
        try await metadata.createTusUpload(upload, quota: quota)
    }

    /// Moves an open tus upload's offset from `from` to `to` (see `SQLMediaMetadata`).
    func advanceTusUpload(_ id: UploadID, from: Int64, to: Int64, now: Int64, expiresAt: Int64) async throws -> Bool {
        try await metadata.advanceTusUpload(id, from: from, to: to, now: now, expiresAt: expiresAt)
    }

    /// Lowers an open tus upload's offset to what its file holds.
    func lowerTusOffset(_ id: UploadID, to offset: Int64) async throws {
        hashes?.drop(id)
        try await metadata.lowerTusOffset(id, to: offset)
    }

    /// Records, durably, the SHA-256 of a whole tus upload's bytes (nil forgets it).
    func assembleTusUpload(_ id: UploadID, mediaID: MediaID?) async throws {
        try await metadata.assembleTusUpload(id, mediaID: mediaID)
    }

    /// `MediaFiles.settleTusPart` on a file thread.
    func settleTusPart(_ id: UploadID, offset: Int64) async throws -> Int64 {
        let files = self.bytes
        return try await onFileThread { try files.settleTusPart(id, offset: offset) }
    }

    /// `MediaFiles.appendTusPart` on a file thread: the bytes are on disk when it returns.
    func appendTusPart(_ id: UploadID, offset: Int64, bytes: [UInt8]) async throws {
        let files = self.bytes
        try await onFileThread { try files.appendTusPart(id, offset: offset, bytes: bytes) }
    }

    /// Feeds a tus append, on disk and counted, into the upload's running hash.
    func tusAppended(_ id: UploadID, offset: Int64, bytes: [UInt8]) {
        hashes?.appended(id, offset: offset, bytes: bytes)
    }

    /// The running hash of a tus upload's bytes when it covers all `length` of them.
    func tusHash(_ id: UploadID, length: Int64) -> ResumableSHA256? {
        hashes?.whole(id, length: length)
    }

    /// `MediaFiles.hashPart` on a file thread.
    func hashPart(_ id: UploadID, length: Int64) async throws -> MediaID? {
        let files = self.bytes
        return try await onFileThread { try files.hashPart(id, length: length) }.flatMap(MediaID.init)
    }

    // MARK: Files (file threads)

    /// Writes a chunk into the upload's file, and queues writeback every
    /// `flushEveryBytes`.
    func writeChunk(_ id: UploadID, offset: Int64, bytes: [UInt8]) async throws {
        let files = self.bytes
        try await onFileThread { try files.writeChunk(id, offset: offset, bytes: bytes) }
        let flushNow = unflushed.withLock { state -> Bool in
            var entry = state[id] ?? (0, false)
            entry.bytes += bytes.count
            let due = entry.bytes >= flushEveryBytes && !entry.queued
            if due {
                entry.bytes = 0
                entry.queued = true
            }
            state[id] = entry
            return due
        }
        if flushNow {
            flusher.submit(MediaFileJob { [self] in
                files.flush(id)
                unflushed.withLock { state in state[id]?.queued = false }
            })
        }
    }

    /// Called right before this process writes chunk `index` of an upload (see
    /// `RunningHashes.noteChunk`).
    func noteChunk(_ id: UploadID, index: Int, digest: [UInt8]) {
        hashes?.noteChunk(id, index: index, digest: digest)
    }

    /// Feeds a chunk this process wrote, and whose receipt is committed, into the upload's
    /// running hash (see `RunningHashes.chunkHeld`); chunks read back for it are read on a
    /// file thread, where reading back is cheap (`MediaBytes.readsBackChunks`). Elsewhere
    /// the hash stops at the first chunk that came early, and finalize reads the rest.
    func chunkHeld(_ upload: UploadRecord, index: Int, bytes: [UInt8], digest: [UInt8]) async {
        guard let hashes else { return }
        let files = self.bytes
        await hashes.chunkHeld(upload.id, index: index, bytes: bytes, digest: digest) { i in
            guard files.readsBackChunks else { throw StoreError("chunk \(i) is not read back from \(files.placeName)") }
            return try await onFileThread {
                try files.readPart(upload.id, offset: Int64(i) * Int64(upload.chunkSize), length: upload.length(ofChunk: i))
            }
        }
    }

    /// The running hash of an upload's first chunks, for its finalize (see
    /// `RunningHashes.takePrefix`).
    func hashedPrefix(_ id: UploadID, digests: [[UInt8]]) -> ResumableSHA256? {
        hashes?.takePrefix(id, digests: digests)
    }

    /// `MediaFiles.finalize` on a file thread; `prefix`, the running hash of the file's
    /// first bytes, spares reading them.
    func finalizeFile(_ upload: UploadRecord, digests: [[UInt8]], prefix: ResumableSHA256?) async throws -> MediaFiles.FinalizeOutcome {
        let files = self.bytes
        let outcome = try await onFileThread {
            try files.finalize(upload.id, space: upload.space, media: upload.sha256, size: upload.size,
                               chunkSize: upload.chunkSize, digests: digests, prefix: prefix)
        }
        forgetState(upload.id)
        return outcome
    }

    /// Removes an upload's file.
    func removeFile(_ id: UploadID) async throws {
        let files = self.bytes
        try await onFileThread { try files.removePart(id) }
        forgetState(id)
    }

    /// Forgets what this process keeps about an upload's file: its unflushed bytes and its
    /// running hash.
    private func forgetState(_ id: UploadID) {
        unflushed.withLock { _ = $0.removeValue(forKey: id) }
        hashes?.drop(id)
    }

    /// The ids of every upload file on disk.
    func uploadFileIDs() async throws -> [UploadID] {
        let files = self.bytes
        return try await onFileThread { try files.partFileIDs() }
    }

    /// Where a GET of a published file is redirected, when the bytes are in a bucket whose
    /// downloads are presigned (`--s3-presigned-downloads`); nil: the server sends them.
    func redirect(space: SpaceName, id: MediaID) -> String? {
        guard case .object(let bucket, _) = bytes.source(space: space, id: id) else { return nil }
        return bucket.presignedDownload(space: space, id: id)
    }

    /// The body that sends `length` bytes of a published file from `offset`: the file
    /// itself (`sendfile(2)`), or the object read in ranged pieces on the file threads.
    func body(space: SpaceName, id: MediaID, offset: Int64, length: Int64) -> HTTPResponseBody {
        switch bytes.source(space: space, id: id) {
        case .file(let path):
            return .file(path: path, offset: offset, length: length)
        case .object(let bucket, let key):
            return .stream(length: Int(length)) { [self] writer in
                try await bucket.produce(key: key, offset: offset, length: length, read: { read in try await self.onFileThread(read) }, into: writer)
            }
        }
    }

    /// Lets queued work finish, then stops the threads and closes the connections.
    public func close() async {
        let io = self.io, flusher = self.flusher
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                for thread in io { thread.stop() }
                flusher.stop()
                c.resume()
            }
        }
        await metadata.close()
    }

    // MARK: Thread hops

    func onFileThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        let index = nextIO.wrappingAdd(1, ordering: .relaxed).oldValue % io.count
        return try await withCheckedThrowingContinuation { continuation in
            let job = MediaFileJob { continuation.resume(with: Result { try body() }) }
            if !io[index].submit(job) { continuation.resume(throwing: StoreError("the media store is closed")) }
        }
    }
}

// MARK: - Records

/// A published file's row.
struct MediaRecord: Sendable, Equatable {
    let space: SpaceName
    let id: MediaID
    let size: Int64
    let contentType: String
    let createdAt: Int64

    /// The protocol's `<media>` object.
    var info: MediaInfo {
        MediaInfo(mediaId: id.rawValue, sha256: id.rawValue, size: size, contentType: contentType,
                  url: "/v1/spaces/\(space.rawValue)/media/\(id.rawValue)", createdAt: createdAt)
    }
}

/// A published file as the admin console lists it.
struct MediaFile: Sendable, Equatable {
    let id: MediaID
    let size: Int64
    let contentType: String
    /// The name the upload declared, if any.
    let filename: String?
    let createdAt: Int64
}

/// How many published files a space holds, and their bytes.
struct MediaUsage: Sendable, Equatable {
    /// Published files, and their bytes.
    var files: Int64
    var bytes: Int64
    /// The sizes of the space's open uploads (either kind), which they will add.
    var openBytes: Int64 = 0
    /// What the space's media limit counts: its files and its open uploads.
    var held: Int64 { bytes + openBytes }
}

/// An upload's row.
struct UploadRecord: Sendable, Equatable {
    enum State: String, Sendable {
        case open
        case complete
    }

    let id: UploadID
    let space: SpaceName
    let sha256: MediaID
    let size: Int64
    let contentType: String
    let filename: String?
    let chunkSize: Int
    let chunkCount: Int
    var state: State
    let createdAt: Int64
    var expiresAt: Int64

    /// The byte length chunk `index` must have: `chunkSize`, except the last.
    func length(ofChunk index: Int) -> Int {
        Int(min(Int64(chunkSize), size - Int64(index) * Int64(chunkSize)))
    }

    /// The protocol's upload object (section 6, steps 1 and 3).
    func state(received: [Int]) -> UploadState {
        UploadState(uploadId: id.rawValue, status: "open", size: size, sha256: sha256.rawValue, chunkSize: chunkSize,
                    chunkCount: chunkCount, received: received, expiresAt: expiresAt)
    }
}

/// A tus upload's row (docs/media.md, "tus").
struct TusUploadRecord: Sendable, Equatable {
    enum State: String, Sendable {
        case open
        case complete
    }

    let id: UploadID
    let space: SpaceName
    /// `Upload-Length`.
    let length: Int64
    /// How many bytes the server holds (fsynced before they were counted).
    var offset: Int64
    /// The `Upload-Metadata` field as the creation sent it (`""` when it sent none).
    let metadata: String
    let contentType: String
    let filename: String?
    /// The SHA-256 of the whole bytes, recorded before publishing; the media id after.
    var mediaID: MediaID?
    var state: State
    let createdAt: Int64
    var expiresAt: Int64

    /// The upload as section 6's finalize takes it, once its bytes' SHA-256 is known: one
    /// chunk of the whole length whose digest is the file's, so the per-chunk check after
    /// a mismatch checks the whole file again.
    func finalizable(sha256: MediaID) -> UploadRecord {
        UploadRecord(id: id, space: space, sha256: sha256, size: length, contentType: contentType, filename: filename,
                     chunkSize: Int(max(length, 1)), chunkCount: 1, state: .open, createdAt: createdAt, expiresAt: expiresAt)
    }
}

// MARK: - Jobs

struct MediaFileJob: Sendable {
    let run: @Sendable () -> Void
}
