import Dispatch
import Foundation
import OutpostCrypto
import OutpostHTTP

/// Media bytes in an S3 bucket (docs/media.md, "Media in S3"). Keys, below the location's
/// prefix:
///
/// ```
/// uploads/<uploadId>/<offset>     a staged piece: a chunk (at index × chunk size) or a tus
///                                 append (at its offset); <offset> is 16 decimal digits, so
///                                 keys list in offset order
/// uploads/<uploadId>/multipart    while a finalize runs: the multipart upload it started
///                                 (its id), so an interrupted one is aborted later
/// spaces/<space>/<aa>/<sha256>    a published file, as in the media directory
/// ```
///
/// A chunk is acknowledged only after its piece's PUT succeeded (the store answers once the
/// object is durable), so a restart, or another instance, resumes from what the metadata
/// recorded. Finalize reads the pieces in order, hashes the whole file and each chunk as the
/// bytes pass, and writes them as a multipart upload in parts of `partSize` (one part in
/// memory at a time); the upload is completed only when the file's SHA-256 is the declared
/// one, and aborted otherwise, so no object is ever published with other bytes. A file
/// smaller than one part is written with one PUT after the check.
///
/// Requests are retried with backoff and jitter (`S3RetryPolicy`) within each operation's
/// deadline; a failure that outlasts it is thrown, and the media service answers it `503`.
final class S3MediaBytes: MediaBytes {
    let bucket: S3Bucket
    let readBack = ByteCounter()
    /// Bytes of one multipart part (S3 wants at least 5 MiB but for the last).
    let partSize: Int
    /// How long one request to the store may take, retries included.
    let operationSeconds: Double
    /// Seconds a presigned download URL lasts; 0: none is made.
    let presignedDownloadSeconds: Int
    /// Names the write check's object, so instances starting together do not collide.
    private let instance: String

    /// Staged pieces are plain objects, readable back: a process that owns its uploads keeps
    /// a running hash, so a finalize whose pieces are whole parts reads nothing.
    var keepsRunningHashes: Bool { true }
    var readsBackChunks: Bool { false }

    init(bucket: S3Bucket, partSize: Int = 8 << 20, operationSeconds: Double = 60, presignedDownloadSeconds: Int = 0) {
        precondition(partSize >= 5 << 20, "S3 parts but the last are at least 5 MiB")
        self.bucket = bucket
        self.presignedDownloadSeconds = presignedDownloadSeconds
        self.partSize = partSize
        self.operationSeconds = operationSeconds
        instance = Hex.encode(SecureRandom.bytes(8))
    }

    /// The media bytes of an operator command (`check`, `backup`, `restore`).
    convenience init(settings: S3MediaSettings) {
        self.init(bucket: S3Bucket(location: settings.location, credentials: settings.credentials, counters: settings.counters,
                                   clock: { Int64(Date().timeIntervalSince1970) }),
                  partSize: settings.partSize, presignedDownloadSeconds: settings.presignedDownloadSeconds)
    }

    /// A presigned URL of the published file, when downloads are redirected.
    func presignedDownload(space: SpaceName, id: MediaID) -> String? {
        guard presignedDownloadSeconds > 0 else { return nil }
        return bucket.presignedGet(mediaKey(space: space, id: id), seconds: presignedDownloadSeconds)
    }

    /// Every published object under `spaces/`, with its size.
    func publishedObjects() throws -> [String: Int64] {
        var objects: [String: Int64] = [:]
        var token: String?
        repeat {
            let page = try bucket.list(prefix: "spaces/", after: token, deadline: deadline())
            for object in page.objects { objects[object.key] = object.size }
            token = page.next
        } while token != nil
        return objects
    }

    /// Throws, naming how many and the first, unless every file of `media` is an object
    /// of its size in the bucket.
    func requireObjects(_ media: [BackupManifest.MediaFile], what: String) throws {
        let objects = try publishedObjects()
        let missing = media.filter { file in
            guard let space = SpaceName(file.space), let id = MediaID(file.sha256) else { return true }
            return objects[mediaKey(space: space, id: id)] != file.size
        }
        if let first = missing.first {
            throw OperatorError("\(missing.count) media file(s) that \(what) names are not in \(placeName) with their size (the first: space \(first.space), \(first.sha256), \(first.size) bytes)")
        }
    }

    // MARK: Keys

    static func pieceName(_ offset: Int64) -> String {
        let digits = String(offset)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }

    func uploadPrefix(_ id: UploadID) -> String { "uploads/" + id.rawValue + "/" }
    func pieceKey(_ id: UploadID, offset: Int64) -> String { uploadPrefix(id) + Self.pieceName(offset) }
    func markerKey(_ id: UploadID) -> String { uploadPrefix(id) + "multipart" }

    /// A published file's key.
    func mediaKey(space: SpaceName, id: MediaID) -> String {
        "spaces/" + space.rawValue + "/" + id.prefix + "/" + id.rawValue
    }

    /// The bucket and prefix: instances reach one store by whatever endpoint, but must
    /// name the same bucket and prefix.
    func identity() throws -> String { "s3:\(bucket.location.bucket)/\(bucket.location.prefix)" }
    var placeName: String { "the bucket \(bucket.location.bucket) (prefix \"\(bucket.location.prefix)\")" }

    func source(space: SpaceName, id: MediaID) -> MediaSource {
        .object(self, key: mediaKey(space: space, id: id))
    }

    private func deadline() -> UInt64 {
        DispatchTime.now().uptimeNanoseconds + UInt64(operationSeconds * 1_000_000_000)
    }

    // MARK: MediaBytes

    /// The start check: the bucket exists, these credentials reach it and may write to it.
    func prepare() throws {
        try bucket.check(probeKey: "uploads/.write-check-" + instance, deadline: deadline())
    }

    func writeChunk(_ id: UploadID, offset: Int64, bytes: [UInt8]) throws {
        try bucket.put(pieceKey(id, offset: offset), bytes: bytes, deadline: deadline())
    }

    /// A staged piece: where it starts and how many bytes it holds.
    struct Piece: Equatable {
        var offset: Int64
        var size: Int64
        var end: Int64 { offset + size }
    }

    /// Every staged piece of an upload, in offset order, and whether a finalize left its
    /// multipart marker.
    func pieces(_ id: UploadID) throws -> (pieces: [Piece], marker: Bool) {
        let prefix = uploadPrefix(id)
        var pieces: [Piece] = []
        var marker = false
        var token: String?
        repeat {
            let page = try bucket.list(prefix: prefix, after: token, deadline: deadline())
            for object in page.objects {
                let name = object.key.dropFirst(prefix.count)
                if name == "multipart" {
                    marker = true
                } else if name.count == 16, let offset = Int64(name) {
                    pieces.append(Piece(offset: offset, size: object.size))
                }
            }
            token = page.next
        } while token != nil
        return (pieces.sorted { $0.offset < $1.offset }, marker)
    }

    /// The pieces that hold the upload's bytes from 0 without a gap, in order, and how far
    /// they reach. A piece that starts inside the covered range adds only what passes its
    /// end (a chunk sent again is the same key, so this does not happen for chunks).
    static func contiguous(_ pieces: [Piece]) -> (run: [Piece], covered: Int64) {
        var run: [Piece] = []
        var covered: Int64 = 0
        for piece in pieces {
            guard piece.offset <= covered else { break }
            if piece.end > covered {
                run.append(piece)
                covered = piece.end
            }
        }
        return (run, covered)
    }

    func settleTusPart(_ id: UploadID, offset: Int64) throws -> Int64 {
        let (pieces, _) = try pieces(id)
        // A piece at or past the stored offset is an append cut before its offset was
        // committed: never counted, so it goes.
        for piece in pieces where piece.offset >= offset {
            try bucket.delete(pieceKey(id, offset: piece.offset), deadline: deadline())
        }
        let (_, covered) = Self.contiguous(pieces.filter { $0.offset < offset })
        return min(covered, offset)
    }

    func appendTusPart(_ id: UploadID, offset: Int64, bytes: [UInt8]) throws {
        try bucket.put(pieceKey(id, offset: offset), bytes: bytes, deadline: deadline())
    }

    /// Reads the upload's bytes from `from` up to `length` in order, giving each run of
    /// bytes to `body`; returns how many bytes were given (fewer than `length - from` when
    /// the pieces stop short). One piece is in memory at a time.
    private func readStaged(_ id: UploadID, pieces: [Piece], from start: Int64 = 0, length: Int64, _ body: ([UInt8]) throws -> Void) throws -> Int64 {
        var done = start
        for piece in Self.contiguous(pieces).run where done < length && piece.end > done {
            let from = done - piece.offset
            let to = min(piece.end, length) - piece.offset
            guard to > from else { continue }
            let bytes = try bucket.get(pieceKey(id, offset: piece.offset), range: from...(to - 1), maxBytes: Int(to - from), deadline: deadline())
            guard Int64(bytes.count) == to - from else {
                throw S3Failure(.badAnswer, "the S3 store returned \(bytes.count) bytes of a staged piece, not \(to - from)")
            }
            readBack.add(bytes.count)
            try body(bytes)
            done += Int64(bytes.count)
        }
        return done - start
    }

    func hashPart(_ id: UploadID, length: Int64) throws -> String? {
        var hasher = SHA256()
        let read = try readStaged(id, pieces: try pieces(id).pieces, length: length) { hasher.update($0) }
        return read == length ? Hex.encode(hasher.finalize()) : nil
    }

    func readPart(_ id: UploadID, offset: Int64, length: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        var position: Int64 = 0
        let end = offset + Int64(length)
        _ = try readStaged(id, pieces: try pieces(id).pieces, length: end) { bytes in
            let start = position
            position += Int64(bytes.count)
            let from = max(offset, start), to = min(end, position)
            if to > from { out.append(contentsOf: bytes[Int(from - start)..<Int(to - start)]) }
        }
        guard out.count == length else { throw S3Failure(.badAnswer, "an upload's staged bytes end before \(end)") }
        return out
    }

    func flush(_ id: UploadID) {}

    func removePart(_ id: UploadID) throws {
        let (pieces, marker) = try pieces(id)
        if marker { try abortLeftMultipart(id) }
        for piece in pieces { try bucket.delete(pieceKey(id, offset: piece.offset), deadline: deadline()) }
    }

    /// Aborts the multipart upload a finalize started and did not finish (a kill, a fault),
    /// then removes its marker: no part is left billed.
    private func abortLeftMultipart(_ id: UploadID) throws {
        let text = String(decoding: try bucket.get(markerKey(id), maxBytes: 4096, deadline: deadline()), as: UTF8.self)
        let lines = text.split(separator: "\n").map(String.init)
        if lines.count == 2 { try bucket.abortMultipart(lines[0], upload: lines[1], deadline: deadline()) }
        try bucket.delete(markerKey(id), deadline: deadline())
    }

    func partFileIDs() throws -> [UploadID] {
        var ids: Set<UploadID> = []
        var token: String?
        repeat {
            let page = try bucket.list(prefix: "uploads/", after: token, deadline: deadline())
            for object in page.objects {
                let parts = object.key.split(separator: "/", omittingEmptySubsequences: false)
                if parts.count == 3, let id = UploadID(String(parts[1])) { ids.insert(id) }
            }
            token = page.next
        } while token != nil
        return ids.sorted { $0.rawValue < $1.rawValue }
    }

    // MARK: Finalize

    func finalize(_ id: UploadID, space: SpaceName, media: MediaID, size: Int64, chunkSize: Int,
                  digests: [[UInt8]], prefix: ResumableSHA256?) throws -> MediaFiles.FinalizeOutcome {
        let key = mediaKey(space: space, id: media)
        let (pieces, marker) = try pieces(id)
        if marker { try abortLeftMultipart(id) }
        let covered = Self.contiguous(pieces).covered
        if covered < size {
            // Published by a finalize that stopped before its row (the pieces were removed
            // after the object was complete); the size must be this upload's.
            if pieces.isEmpty, size > 0, let published = try bucket.size(of: key, deadline: deadline()) {
                return published == size ? .alreadyPublished : .damagedChunks(Array(digests.indices))
            }
            // Chunks whose bytes are not all staged must be sent again.
            let missing = digests.indices.filter { Int64($0) * Int64(chunkSize) + Int64(chunkSize) > covered && Int64($0) * Int64(chunkSize) < size }
            return .damagedChunks(missing.isEmpty ? Array(digests.indices) : missing)
        }
        if let whole = Self.wholeParts(pieces, size: size, chunkSize: chunkSize, count: digests.count) {
            return try finalizeByCopies(id, key: key, parts: whole, size: size, chunkSize: chunkSize, digests: digests, declared: media, prefix: prefix)
        }
        var check = StagedCheck(size: size, chunkSize: chunkSize, digests: digests)
        let outcome: MediaFiles.FinalizeOutcome
        if size < Int64(partSize) {
            var whole: [UInt8] = []
            whole.reserveCapacity(Int(size))
            _ = try readStaged(id, pieces: pieces, length: size) { bytes in
                check.update(bytes)
                whole.append(contentsOf: bytes)
            }
            outcome = check.outcome(declared: media)
            if outcome == .published { try bucket.put(key, bytes: whole, deadline: deadline()) }
        } else {
            outcome = try finalizeMultipart(id, key: key, pieces: pieces, size: size, declared: media, check: &check)
        }
        if outcome == .published {
            for piece in pieces { try bucket.delete(pieceKey(id, offset: piece.offset), deadline: deadline()) }
        }
        return outcome
    }

    /// The pieces, when they are exactly the upload's chunks and every chunk but the last
    /// is at least 5 MiB: then each can be a part of the published object as it is.
    static func wholeParts(_ pieces: [Piece], size: Int64, chunkSize: Int, count: Int) -> [Piece]? {
        guard count > 1, chunkSize >= 5 << 20, pieces.count == count else { return nil }
        for (index, piece) in pieces.enumerated() {
            let offset = Int64(index) * Int64(chunkSize)
            guard piece.offset == offset, piece.size == min(Int64(chunkSize), size - offset) else { return nil }
        }
        return pieces
    }

    /// Finalize when the chunks are whole parts: the file is checked (by the running hash
    /// when it covers the file, else by reading the pieces once), then published as a
    /// multipart upload whose parts are copies of the pieces made inside the store, so no
    /// byte is written again through the server.
    private func finalizeByCopies(_ id: UploadID, key: String, parts: [Piece], size: Int64, chunkSize: Int, digests: [[UInt8]],
                                  declared: MediaID, prefix: ResumableSHA256?) throws -> MediaFiles.FinalizeOutcome {
        var verified = false
        if var hasher = prefix, hasher.byteCount <= size {
            _ = try readStaged(id, pieces: parts, from: hasher.byteCount, length: size) { hasher.update($0) }
            verified = Hex.encode(hasher.digest()) == declared.rawValue
        }
        if !verified {
            var check = StagedCheck(size: size, chunkSize: chunkSize, digests: digests)
            _ = try readStaged(id, pieces: parts, length: size) { check.update($0) }
            let outcome = check.outcome(declared: declared)
            guard outcome == .published else { return outcome }
        }
        let upload = try bucket.startMultipart(key, contentType: "application/octet-stream", deadline: deadline())
        try bucket.put(markerKey(id), bytes: Array("\(key)\n\(upload)".utf8), deadline: deadline())
        var etags: [(number: Int, etag: String)] = []
        for (index, piece) in parts.enumerated() {
            etags.append((index + 1, try bucket.copyPart(key, upload: upload, number: index + 1, from: pieceKey(id, offset: piece.offset), deadline: deadline())))
        }
        try complete(key, upload: upload, parts: etags, size: size)
        try bucket.delete(markerKey(id), deadline: deadline())
        for piece in parts { try bucket.delete(pieceKey(id, offset: piece.offset), deadline: deadline()) }
        return .published
    }

    /// Completes the multipart upload; a completion whose answer was lost, sent again,
    /// finds the upload gone: the first one completed it when the object is there (only a
    /// checked file is completed under its SHA-256, so any object there has its bytes).
    private func complete(_ key: String, upload: String, parts: [(number: Int, etag: String)], size: Int64) throws {
        do {
            try bucket.completeMultipart(key, upload: upload, parts: parts, deadline: deadline())
        } catch {
            let failure = error
            guard failure.code == "NoSuchUpload", try bucket.size(of: key, deadline: deadline()) == size else { throw failure }
        }
    }

    /// Writes the staged bytes as a multipart upload while checking them; completes it only
    /// when they are the declared file, aborts it otherwise. The marker names the upload
    /// while it runs.
    private func finalizeMultipart(_ id: UploadID, key: String, pieces: [Piece], size: Int64, declared: MediaID,
                                   check: inout StagedCheck) throws -> MediaFiles.FinalizeOutcome {
        let upload = try bucket.startMultipart(key, contentType: "application/octet-stream", deadline: deadline())
        try bucket.put(markerKey(id), bytes: Array("\(key)\n\(upload)".utf8), deadline: deadline())
        var parts: [(number: Int, etag: String)] = []
        var buffer: [UInt8] = []
        buffer.reserveCapacity(partSize)
        let partSize = self.partSize
        // A failure below leaves the marker: the next finalize, or the removal of the
        // upload, aborts the multipart upload it names.
        _ = try readStaged(id, pieces: pieces, length: size) { bytes in
            check.update(bytes)
            var rest = bytes[...]
            while !rest.isEmpty {
                let take = min(partSize - buffer.count, rest.count)
                buffer.append(contentsOf: rest.prefix(take))
                rest = rest.dropFirst(take)
                if buffer.count == partSize {
                    parts.append((parts.count + 1, try bucket.putPart(key, upload: upload, number: parts.count + 1, bytes: buffer, deadline: deadline())))
                    buffer.removeAll(keepingCapacity: true)
                }
            }
        }
        let outcome = check.outcome(declared: declared)
        guard outcome == .published else {
            try bucket.abortMultipart(key, upload: upload, deadline: deadline())
            try bucket.delete(markerKey(id), deadline: deadline())
            return outcome
        }
        if !buffer.isEmpty {
            parts.append((parts.count + 1, try bucket.putPart(key, upload: upload, number: parts.count + 1, bytes: buffer, deadline: deadline())))
        }
        try complete(key, upload: upload, parts: parts, size: size)
        try bucket.delete(markerKey(id), deadline: deadline())
        return .published
    }

    // MARK: Serving

    /// Bytes of one ranged read of a download.
    static let downloadPiece: Int64 = 4 << 20

    /// Sends `length` bytes of the published file from `offset` in ranged reads of 4 MiB,
    /// each on a file thread (`read`), the next one read while this one is written: at most
    /// two pieces (8 MiB) in memory per download whatever the file's size.
    func produce(key: String, offset: Int64, length: Int64, read: @escaping @Sendable (@escaping @Sendable () throws -> [UInt8]) async throws -> [UInt8],
                 into writer: HTTPBodyWriter) async throws {
        let bucket = self.bucket, seconds = operationSeconds
        func fetch(_ from: Int64) -> Task<[UInt8], any Error> {
            let count = min(Self.downloadPiece, offset + length - from)
            return Task {
                let bytes = try await read {
                    let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1_000_000_000)
                    return try bucket.get(key, range: from...(from + count - 1), maxBytes: Int(count), deadline: deadline)
                }
                guard Int64(bytes.count) == count else {
                    throw S3Failure(.badAnswer, "the S3 store returned \(bytes.count) bytes of \(key), not \(count)")
                }
                return bytes
            }
        }
        guard length > 0 else { return }
        var from = offset
        var next = fetch(from)
        defer { next.cancel() }
        while true {
            let bytes = try await next.value
            from += Int64(bytes.count)
            let more = from < offset + length
            if more { next = fetch(from) }
            try await writer.write(bytes)
            if !more { return }
        }
    }
}

/// Finalize's check of staged bytes as they pass: the whole file's SHA-256 and each
/// chunk's, against the declared hash and the digests recorded when the chunks arrived.
struct StagedCheck: ~Copyable {
    let size: Int64
    let chunkSize: Int
    let digests: [[UInt8]]
    private var whole = SHA256()
    private var chunk = SHA256()
    private var inChunk = 0
    private var index = 0
    private var damaged: [Int] = []

    init(size: Int64, chunkSize: Int, digests: [[UInt8]]) {
        self.size = size
        self.chunkSize = chunkSize
        self.digests = digests
    }

    mutating func update(_ bytes: [UInt8]) {
        whole.update(bytes)
        var rest = bytes[...]
        while !rest.isEmpty {
            let take = min(chunkSize - inChunk, rest.count)
            chunk.update(Array(rest.prefix(take)))
            inChunk += take
            rest = rest.dropFirst(take)
            if inChunk == chunkSize { endChunk() }
        }
    }

    private mutating func endChunk() {
        let digest = exchange(&chunk, with: SHA256()).finalize()
        if index < digests.count, digest != digests[index] { damaged.append(index) }
        inChunk = 0
        index += 1
    }

    /// Published when the file is the declared one; else the chunks that differ from their
    /// digests, or a mismatch when every chunk is as recorded.
    mutating func outcome(declared: MediaID) -> MediaFiles.FinalizeOutcome {
        if inChunk > 0 { endChunk() }
        let actual = Hex.encode(exchange(&whole, with: SHA256()).finalize())
        if actual == declared.rawValue { return .published }
        return damaged.isEmpty ? .checksumMismatch(actual: actual) : .damagedChunks(damaged)
    }
}
