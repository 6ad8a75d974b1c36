import Foundation
import OutpostCore

/// What a record keeps to point at a media file: its id (the file's SHA-256) and what a
/// reader needs before downloading it. Records refer to media by `mediaId` (docs/protocol.md
/// section 6); the bytes travel through `MediaUploader`, never inside a record.
///
/// ```swift
/// struct Photo: Codable { var caption: String; var image: MediaReference }
/// let media = try await uploader.upload(file: url, contentType: "image/jpeg")
/// try await store.save(Photo(caption: "Roof", image: MediaReference(media)), in: "photos", id: "p1")
/// ```
///
/// Encodes as `{"mediaId": "<64 hex>", "contentType": "image/jpeg", "size": 1234}` (plus
/// `"filename"` when given, and `"encryption"` for a sealed file).
public struct MediaReference: Codable, Sendable, Hashable {
    /// The file's SHA-256, 64 lowercase hex characters: the server names the file by it.
    public var mediaId: String
    /// The media type declared at upload (`image/jpeg`).
    public var contentType: String
    /// The file's size in bytes.
    public var size: Int64
    /// The file's name, for display; optional.
    public var filename: String?
    /// How the file was sealed, for a file of an end-to-end encrypted store (then
    /// `mediaId` names the sealed bytes, and `size` and `contentType` are the file's own,
    /// kept inside the encrypted record); nil for a file stored as it is.
    public var encryption: MediaEncryption?

    /// A reference to the file `media` describes.
    public init(_ media: MediaInfo, filename: String? = nil) {
        self.init(mediaId: media.mediaId, contentType: media.contentType, size: media.size, filename: filename)
    }

    /// A reference from its parts.
    public init(mediaId: String, contentType: String, size: Int64, filename: String? = nil, encryption: MediaEncryption? = nil) {
        self.mediaId = mediaId
        self.contentType = contentType
        self.size = size
        self.filename = filename
        self.encryption = encryption
    }
}

/// How far one upload is. `bytesSent` counts the bytes of the chunks the server has
/// acknowledged, including those it held before this run (an upload that resumes starts
/// where the server is, not at zero).
public struct MediaProgress: Sendable, Hashable {
    /// What the uploader is doing.
    public enum Phase: String, Sendable, Hashable {
        /// Reading the file to compute its SHA-256 (`bytesHashed` grows).
        case hashing
        /// Sending the chunks the server lacks (`bytesSent` grows).
        case uploading
        /// Asking the server to join and check the file.
        case finalizing
        /// The server holds the file.
        case complete
    }

    /// The current phase.
    public var phase: Phase
    /// Bytes of the file hashed so far (equals `totalBytes` once hashing is done).
    public var bytesHashed: Int64
    /// Bytes of acknowledged chunks (the server holds them).
    public var bytesSent: Int64
    /// The file's size.
    public var totalBytes: Int64
    /// How many times the upload started over because the file changed under it (a new
    /// hash, a new upload). 0 normally.
    public var restarts: Int

    /// A progress value.
    public init(phase: Phase, bytesHashed: Int64, bytesSent: Int64, totalBytes: Int64, restarts: Int = 0) {
        self.phase = phase
        self.bytesHashed = bytesHashed
        self.bytesSent = bytesSent
        self.totalBytes = totalBytes
        self.restarts = restarts
    }

    /// `bytesSent / totalBytes`, 1 for an empty file.
    public var fractionSent: Double { totalBytes == 0 ? 1 : Double(bytesSent) / Double(totalBytes) }
}

/// An upload kept in the store until the server holds the file: what `resumeUploads()`
/// continues after a crash or a lost network.
public struct PendingUpload: Sendable, Hashable {
    /// Where it stands.
    public enum State: String, Sendable, Hashable {
        /// To be sent (or resumed) by the next `resumeUploads()` at or after `nextAttemptAt`.
        case waiting
        /// Failed for good (the server refused the file, or it is gone): `lastError` says
        /// why. Kept until `discardUpload(path:)`, or until `upload(file:)` of the same path
        /// starts over (hashing the file again).
        case failed
    }

    /// The file's absolute path.
    public var path: String
    /// The file's SHA-256 as hashed (the media id it will have).
    public var mediaId: String
    /// The file's size.
    public var size: Int64
    /// The declared media type.
    public var contentType: String
    /// The file name sent to the server, if any.
    public var filename: String?
    /// The server's upload id, once an init answered.
    public var uploadId: String?
    /// The chunk size the server gave, once known.
    public var chunkSize: Int?
    /// Chunks the server acknowledged (as last known here).
    public var chunksAcknowledged: Int
    /// Chunks in all (0 until the chunk size is known, and for an empty file).
    public var chunkCount: Int
    /// The state.
    public var state: State
    /// Failed attempts since the last progress.
    public var attempts: Int
    /// When `resumeUploads()` tries it again (the store's clock).
    public var nextAttemptAt: Date
    /// The last failure, for people.
    public var lastError: String?
    /// The last failure's code (`MediaError.code`).
    public var errorCode: String?

    /// A reference to the file, for a record (the media id is known before any byte is sent).
    public var reference: MediaReference {
        MediaReference(mediaId: mediaId, contentType: contentType, size: size, filename: filename)
    }
}

/// Why an upload or a download failed.
///
/// `isPermanent` tells the two kinds apart: a permanent failure is kept with its upload
/// (`PendingUpload.State.failed`) and not retried; any other leaves the upload waiting,
/// and `resumeUploads()` (or `upload(file:)` again) continues with the chunks the server
/// lacks. Store failures (`OutpostError.closed`, `.storage`) are thrown as they are.
public enum MediaError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The file cannot be read (missing, a directory, not a regular file). Permanent.
    case fileUnreadable(path: String, reason: String)
    /// The file cannot be opened now: it is protected while the device is locked (data
    /// protection: `EPERM` or `EACCES`). Not permanent: the upload waits, and continues once
    /// the device is unlocked (`resumeUploads()`, e.g. on
    /// `protectedDataDidBecomeAvailableNotification`).
    case fileProtected(path: String, reason: String)
    /// The file kept changing while it was uploaded (each change starts the upload over
    /// with a new hash; this is thrown after `MediaUploader.Options.maxRestarts`).
    case fileChanged(path: String)
    /// The server joined the chunks and their SHA-256 is not the declared one (`422
    /// checksum_mismatch`): the server discarded the upload. Permanent.
    case checksumMismatch(expected: String, actual: String?)
    /// The file is larger than the server stores (`413`, `limit` in bytes when given). Permanent.
    case tooLarge(size: Int64, limit: Int64?)
    /// The server refused the upload for good (`400`/`422` other than the above, e.g. an
    /// invalid content type). Permanent.
    case refused(TransportError)
    /// The network or the server failed, `MediaUploader.Options.maxAttempts` times in a row
    /// without progress, or the server refused for now (`401`, `403`). Not permanent.
    case transport(TransportError)
    /// The server's answers contradict the protocol (a chunk size or file size that does
    /// not match, an index it was not asked for). Not permanent: a later run asks again.
    case protocolViolation(String)
    /// The downloaded bytes' SHA-256 is not the media id: nothing was written.
    case downloadCorrupt(mediaId: String, actual: String)
    /// The server does not have the media (`404 media_not_found`): not uploaded yet, or
    /// another space's.
    case mediaNotFound(mediaId: String)
    /// Not a media id (64 lowercase hex characters) or not a content type (`type/subtype`).
    case invalidArgument(String)
    /// The destination of a download cannot be written.
    case destinationUnwritable(path: String, reason: String)

    /// True for failures a retry cannot fix (see the type's documentation).
    public var isPermanent: Bool {
        switch self {
        case .fileUnreadable, .checksumMismatch, .tooLarge, .refused, .invalidArgument: true
        case .fileChanged, .fileProtected, .transport, .protocolViolation, .downloadCorrupt, .mediaNotFound, .destinationUnwritable: false
        }
    }

    /// A short snake_case code.
    public var code: String {
        switch self {
        case .fileUnreadable: "file_unreadable"
        case .fileProtected: "file_protected"
        case .fileChanged: "file_changed"
        case .checksumMismatch: "checksum_mismatch"
        case .tooLarge: "payload_too_large"
        case .refused(let t): t.code
        case .transport(let t): t.code
        case .protocolViolation: "protocol_violation"
        case .downloadCorrupt: "download_corrupt"
        case .mediaNotFound: "media_not_found"
        case .invalidArgument: "invalid_argument"
        case .destinationUnwritable: "destination_unwritable"
        }
    }

    /// A sentence for people.
    public var description: String {
        switch self {
        case .fileUnreadable(let path, let reason): "cannot read \(path): \(reason)"
        case .fileProtected(let path, let reason): "cannot read \(path) now (protected while the device is locked?): \(reason)"
        case .fileChanged(let path): "\(path) kept changing while it was uploaded"
        case .checksumMismatch(let expected, let actual):
            "the server found SHA-256 \(actual ?? "?") for the joined chunks, not the declared \(expected); the upload was discarded"
        case .tooLarge(let size, let limit): "the file (\(size) bytes) is larger than the server stores\(limit.map { " (\($0) bytes)" } ?? "")"
        case .refused(let t): "the server refused the upload: \(t)"
        case .transport(let t): t.description
        case .protocolViolation(let m): "protocol violation: \(m)"
        case .downloadCorrupt(let id, let actual): "the downloaded bytes hash to \(actual), not \(id); nothing was written"
        case .mediaNotFound(let id): "the server has no media \(id)"
        case .invalidArgument(let m): m
        case .destinationUnwritable(let path, let reason): "cannot write \(path): \(reason)"
        }
    }
}
