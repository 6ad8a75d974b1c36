/// Where media metadata lives — uploads (section 6's and tus's), chunk receipts, published files — and how
/// instances keep chunk writes and finalize of one upload apart. `MediaStore` holds one:
/// `SQLMediaMetadata`, the rules written once over `SQLSession`, opened on the server's
/// SQLite file by `SQLiteMediaMetadata` (the embedded default, one process) or on
/// PostgreSQL by `PostgresMediaMetadata` (several instances on one database, bytes in a
/// shared directory). The bytes themselves
/// are always files under the media directory (`MediaFiles`), whichever holds the rows.
///
/// Rules every implementation keeps (docs/media.md):
/// - `begin` is atomic: two inits of one file in a space never both create an upload.
/// - A chunk counts as received only once `recordChunk` committed its receipt, and
///   `recordChunk` refuses an upload that is no longer open or has expired.
/// - `publish` commits the media row and the upload's completion together, durably.
/// - A tus upload's offset moves only forward, from the offset the caller read, and only
///   while it is open and not expired (`advanceTusUpload`).
/// - `withUploadLock` excludes, across every process that shares the metadata, an
///   exclusive holder from any other holder of the same upload; `MediaService` takes it
///   inside its own in-process `UploadLocks`.
protocol MediaMetadata: Sendable {
    /// The largest chunk size of an open upload when the store opened.
    var largestOpenChunkSize: Int { get }

    /// The published file `id` of `space`, if any.
    func media(space: SpaceName, id: MediaID) async throws -> MediaRecord?
    /// An upload, whatever its space or expiry (the caller checks both).
    func upload(_ id: UploadID) async throws -> UploadRecord?
    /// An upload and the recorded digest of its chunk `index`, if held.
    func upload(_ id: UploadID, chunk index: Int) async throws -> (UploadRecord, [UInt8]?)?
    /// The indexes of the chunks held, ascending.
    func receivedChunks(_ id: UploadID) async throws -> [Int]
    /// The digests of the chunks held, by index.
    func chunkDigests(_ id: UploadID) async throws -> [Int: [UInt8]]
    /// Uploads (open or complete) whose time ran out at `now`, oldest first.
    func expiredUploads(now: Int64, limit: Int) async throws -> [UploadID]
    /// Of `ids`, those that have an upload row.
    func existingUploads(_ ids: [UploadID]) async throws -> Set<UploadID>
    /// At most `limit` published files of `space` whose ids sort after `after`, in id
    /// order (the admin console's list).
    func files(space: SpaceName, after: String, limit: Int) async throws -> [MediaFile]
    /// The count and bytes of the published files of each of `spaces` that has any, and
    /// the bytes of its uploads open at `now`.
    func usage(spaces: [String], now: Int64) async throws -> [String: MediaUsage]

    /// Step 1 of section 6, atomically (see `MediaStore.begin`), within the space's media
    /// limit `quota` (nil: none), which every instance's uploads count against together.
    func begin(space: SpaceName, sha256: MediaID, size: Int64, now: Int64, quota: Int64?,
               make: @escaping @Sendable () -> UploadRecord) async throws -> MediaStore.BeginOutcome
    /// Records a chunk's receipt; the number of distinct chunks held, or nil when the
    /// upload is no longer open or expired at `now`.
    func recordChunk(_ id: UploadID, index: Int, digest: [UInt8], now: Int64, expiresAt: Int64) async throws -> Int?
    /// Forgets chunk receipts.
    func forgetChunks(_ id: UploadID, _ indexes: [Int]) async throws
    /// The media row and the upload marked complete, in one durable commit.
    func publish(_ upload: UploadRecord, now: Int64, expiresAt: Int64) async throws -> MediaRecord
    /// Deletes an upload's rows; with `expiredAt`, only when it is expired then.
    func deleteUpload(_ id: UploadID, expiredAt: Int64?) async throws -> Bool

    /// A tus upload, whatever its space or expiry (the caller checks both).
    func tusUpload(_ id: UploadID) async throws -> TusUploadRecord?
    /// A new tus upload at offset 0, unless it would take the space's media over `quota`:
    /// then the bytes the space holds, and nothing created.
    func createTusUpload(_ upload: TusUploadRecord, quota: Int64?) async throws -> Int64?
    /// Moves an open tus upload's offset from `from` to `to`; false when it is no longer
    /// open, at `from`, or live at `now`.
    func advanceTusUpload(_ id: UploadID, from: Int64, to: Int64, now: Int64, expiresAt: Int64) async throws -> Bool
    /// Lowers an open tus upload's offset to what its file holds.
    func lowerTusOffset(_ id: UploadID, to offset: Int64) async throws
    /// Records (durably) the SHA-256 a whole tus upload's bytes hash to, or forgets it.
    func assembleTusUpload(_ id: UploadID, mediaID: MediaID?) async throws

    /// Runs `body` holding the upload's cross-process lock, shared or exclusive.
    func withUploadLock<T: Sendable>(_ id: UploadID, exclusive: Bool, _ body: () async throws -> T) async throws -> T
    /// Runs `body` holding the upload's lock exclusively when nobody else holds it; nil
    /// (without running `body`) otherwise.
    func tryUploadLock<T: Sendable>(_ id: UploadID, _ body: () async throws -> T) async throws -> T?

    /// Lets queued work finish, then closes the connections.
    func close() async
}
