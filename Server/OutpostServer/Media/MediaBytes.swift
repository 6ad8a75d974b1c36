import OutpostCrypto
import OutpostHTTP

/// Where media bytes live: the blocking operations the media store runs on its file
/// threads (`MediaStore`). Two implementations: a directory (`MediaFiles`, the default,
/// shared over a network file system by several instances) and an S3 bucket
/// (`S3MediaBytes`, docs/media.md, "Media in S3"). Metadata (uploads, chunks received,
/// published files) lives in `MediaMetadata` either way; these hold only bytes.
///
/// An upload's bytes are staged until finalize checks them against the declared SHA-256
/// and publishes them under `spaces/<space>/<aa>/<sha256>`; nothing is published with
/// other bytes. Every method blocks: never call one on Swift's concurrency pool.
protocol MediaBytes: Sendable {
    /// Makes the place ready, and proves it usable: the server refuses to start otherwise.
    func prepare() throws
    /// Stages bytes at `offset` of an upload (a chunk at its index × chunk size). Not yet
    /// counted: the caller records the chunk's digest in the metadata after this returns.
    func writeChunk(_ id: UploadID, offset: Int64, bytes: [UInt8]) throws
    /// Makes a tus upload hold no byte past `offset`, its stored offset; returns how many
    /// bytes it holds from the start (`offset`, or fewer when some were lost).
    func settleTusPart(_ id: UploadID, offset: Int64) throws -> Int64
    /// Appends a tus upload's bytes at `offset`, durably before returning.
    func appendTusPart(_ id: UploadID, offset: Int64, bytes: [UInt8]) throws
    /// The SHA-256 (lowercase hex) of an upload's first `length` bytes; nil when it holds
    /// fewer.
    func hashPart(_ id: UploadID, length: Int64) throws -> String?
    /// `length` staged bytes at `offset` (read back for a running hash).
    func readPart(_ id: UploadID, offset: Int64, length: Int) throws -> [UInt8]
    /// Starts writing an upload's staged bytes back to durable storage, when that means
    /// anything for the place.
    func flush(_ id: UploadID)
    /// Removes an upload's staged bytes (and anything a finalize left half done).
    func removePart(_ id: UploadID) throws
    /// The ids of every upload with staged bytes.
    func partFileIDs() throws -> [UploadID]
    /// Checks an upload's staged bytes against `media` and the chunk digests, then
    /// publishes them atomically; see `MediaFiles.FinalizeOutcome`.
    func finalize(_ id: UploadID, space: SpaceName, media: MediaID, size: Int64, chunkSize: Int,
                  digests: [[UInt8]], prefix: ResumableSHA256?) throws -> MediaFiles.FinalizeOutcome
    /// What names this place for every instance that shares it (checked against the
    /// database's record when instances share PostgreSQL), and how messages name it.
    func identity() throws -> String
    var placeName: String { get }
    /// Where a published file's bytes are read from.
    func source(space: SpaceName, id: MediaID) -> MediaSource
    /// Whether the store may keep running hashes of uploads in progress: only where staged
    /// bytes are cheap to read back and one process owns the uploads (`RunningHashes`).
    var keepsRunningHashes: Bool { get }
    /// Whether a chunk that arrived before the ones ahead of it is read back to advance the
    /// running hash once they are in: cheap from a local file, a request per chunk in the
    /// chunk's answer path from a bucket (there the hash waits, and finalize reads what it
    /// does not cover).
    var readsBackChunks: Bool { get }
    /// Bytes read back from staged uploads to hash them.
    var readBack: ByteCounter { get }
}

/// How a published file's bytes are sent.
enum MediaSource: Sendable {
    /// A file on disk, sent with `sendfile(2)`.
    case file(path: String)
    /// An object, read in ranged pieces on the media store's file threads.
    case object(S3MediaBytes, key: String)
}
