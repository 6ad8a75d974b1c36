import Foundation
import OutpostCrypto
import Synchronization

/// The media bytes under the data directory, and the blocking file operations on them.
///
/// ```
/// DATA/media/
///   uploads/<uploadId>             an open upload's bytes: chunk i at offset i × chunkSize
///                                  (sparse until every chunk is in), or a tus upload's
///                                  bytes up to its offset; the temporary file finalize
///                                  checks, fsyncs and renames
///   spaces/<space>/<aa>/<sha256>   a published file, named by its SHA-256 (aa: its first
///                                  two hex digits, so no directory holds millions)
/// ```
///
/// Paths are built only from `SpaceName`, `MediaID` and `UploadID`, each validated when
/// made, so no request text reaches the file system. Every method blocks: call them on the
/// media store's file threads, never on Swift's concurrency pool.
struct MediaFiles: MediaBytes {
    /// `DATA/media`.
    let root: String
    /// Bytes read back from upload files to hash them (`outpost_media_bytes_read_back_total`).
    let readBack = ByteCounter()

    /// One process owns the directory's uploads unless instances share it; the store
    /// decides with that (`MediaStore`).
    var keepsRunningHashes: Bool { true }
    var readsBackChunks: Bool { true }

    var uploadsDirectory: String { root + "/uploads" }
    var spacesDirectory: String { root + "/spaces" }

    /// The temporary file that collects an upload's chunks.
    func partPath(_ id: UploadID) -> String { uploadsDirectory + "/" + id.rawValue }

    /// A published file's directory.
    func mediaDirectory(space: SpaceName, id: MediaID) -> String {
        spacesDirectory + "/" + space.rawValue + "/" + id.prefix
    }

    /// A published file.
    func mediaPath(space: SpaceName, id: MediaID) -> String {
        mediaDirectory(space: space, id: id) + "/" + id.rawValue
    }

    var placeName: String { "media directory \(root)" }

    /// The random id in `outpost-media-id`, written there by the first instance that used
    /// the directory (O_EXCL: of two instances starting at once, one id wins).
    func identity() throws -> String {
        let marker = root + "/outpost-media-id"
        func read() -> String? {
            (try? String(contentsOfFile: marker, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if let id = read(), !id.isEmpty { return id }
        let fresh = Hex.encode(SecureRandom.bytes(16))
        let fd = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd >= 0 {
            let bytes = Array((fresh + "\n").utf8)
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            fsync(fd)
            close(fd)
            guard written == bytes.count else { throw StoreError("cannot write \(marker)") }
            return fresh
        }
        // Another instance created it at the same moment.
        guard let id = read(), !id.isEmpty else { throw StoreError("cannot read or create \(marker)") }
        return id
    }

    func source(space: SpaceName, id: MediaID) -> MediaSource {
        .file(path: mediaPath(space: space, id: id))
    }

    /// Creates `media/`, `media/uploads/` and `media/spaces/` when absent (mode 0700).
    func prepare() throws {
        try ensureDirectory(root)
        try ensureDirectory(uploadsDirectory)
        try ensureDirectory(spacesDirectory)
    }

    // MARK: Chunks

    /// Writes a chunk's bytes at `offset` of the upload's file (created when absent). Not
    /// fsynced: a chunk counts as received only once recorded in the store, and finalize
    /// fsyncs the whole file (and verifies every chunk against its recorded digest if the
    /// file's hash is wrong), so a power loss costs a resend, never a bad file.
    func writeChunk(_ id: UploadID, offset: Int64, bytes: [UInt8]) throws {
        let path = partPath(id)
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw MediaIOError("open", path) }
        defer { close(fd) }
        try writeAll(fd, path: path, offset: offset, bytes: bytes)
    }

    private func writeAll(_ fd: Int32, path: String, offset: Int64, bytes: [UInt8]) throws {
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                pwrite(fd, raw.baseAddress! + written, raw.count - written, off_t(offset) + off_t(written))
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw MediaIOError("pwrite", path)
            }
            written += n
        }
    }

    // MARK: tus appends

    /// Makes a tus upload's file hold no byte past `offset`, the stored offset: bytes past
    /// it are an append that was cut before its offset was committed (a kill between the
    /// write and the commit), never counted, so they go. Returns how many bytes the file
    /// holds now: `offset`, or fewer when the file is shorter (bytes lost on the disk; 0
    /// when there is no file).
    func settleTusPart(_ id: UploadID, offset: Int64) throws -> Int64 {
        let path = partPath(id)
        var status = stat()
        guard stat(path, &status) == 0 else {
            guard errno == ENOENT else { throw MediaIOError("stat", path) }
            return 0
        }
        let size = Int64(status.st_size)
        guard size > offset else { return size }
        guard truncate(path, off_t(offset)) == 0 else { throw MediaIOError("truncate", path) }
        return offset
    }

    /// Appends `bytes` to a tus upload's file at `offset` (creating the file at offset 0)
    /// and fsyncs them, and the directory entry of a new file, before returning: the
    /// caller commits the new offset only then. The file must hold at least `offset`
    /// bytes (`settleTusPart` made it hold exactly that many).
    func appendTusPart(_ id: UploadID, offset: Int64, bytes: [UInt8]) throws {
        let path = partPath(id)
        var created = false
        var fd = open(path, O_WRONLY | O_CLOEXEC)
        if fd < 0 {
            guard errno == ENOENT, offset == 0 else { throw MediaIOError("open", path) }
            fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw MediaIOError("open", path) }
            created = true
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw MediaIOError("fstat", path) }
        guard Int64(status.st_size) >= offset else { throw MediaIOError("append", path, errno: EIO) }
        if Int64(status.st_size) > offset {
            guard ftruncate(fd, off_t(offset)) == 0 else { throw MediaIOError("ftruncate", path) }
        }
        try writeAll(fd, path: path, offset: offset, bytes: bytes)
        guard fdatasync(fd) == 0 else { throw MediaIOError("fdatasync", path) }
        if created { try syncDirectory(uploadsDirectory) }
    }

    /// The SHA-256 (lowercase hex) of an upload file's first `length` bytes, read
    /// sequentially; nil when the file holds fewer.
    func hashPart(_ id: UploadID, length: Int64) throws -> String? {
        let path = partPath(id)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            guard errno == ENOENT else { throw MediaIOError("open", path) }
            return length == 0 ? Hex.encode(SHA256.hash([UInt8]())) : nil
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw MediaIOError("fstat", path) }
        guard Int64(status.st_size) >= length else { return nil }
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        return try hashFile(fd, path: path, length: length)
    }

    /// The `length` bytes at `offset` of an upload's file: a chunk this process wrote,
    /// read back for the upload's running hash. Throws when the file holds fewer.
    func readPart(_ id: UploadID, offset: Int64, length: Int) throws -> [UInt8] {
        let path = partPath(id)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw MediaIOError("open", path) }
        defer { close(fd) }
        var out: [UInt8] = []
        out.reserveCapacity(length)
        try readRange(fd, path: path, offset: offset, length: Int64(length)) { out.append(contentsOf: $0) }
        guard out.count == length else { throw MediaIOError("read", path, errno: EIO) }
        return out
    }

    /// Starts writing the upload's file back to disk now (fdatasync), so that finalize's
    /// own fsync has little left to wait for. Missing files are ignored.
    func flush(_ id: UploadID) {
        let fd = open(partPath(id), O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fdatasync(fd)
        close(fd)
    }

    /// Removes an upload's file; a missing file is fine.
    func removePart(_ id: UploadID) {
        unlink(partPath(id))
    }

    /// Every upload file's id (names that are not upload ids are left alone).
    func partFileIDs() -> [UploadID] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: uploadsDirectory)) ?? []
        return names.compactMap(UploadID.init)
    }

    // MARK: Finalize

    /// What finalize found.
    enum FinalizeOutcome: Equatable, Sendable {
        /// The file's hash matched; it was fsynced and renamed into place.
        case published
        /// The upload's file is gone but the published file exists: an earlier finalize
        /// renamed it and stopped before its store row was written.
        case alreadyPublished
        /// Every chunk is as recorded, but the whole file's SHA-256 is `actual`, not the
        /// declared one.
        case checksumMismatch(actual: String)
        /// These chunks' bytes differ from the digests recorded when they arrived (lost in
        /// a power failure, say): they must be sent again.
        case damagedChunks([Int])
    }

    /// Checks the upload's file against the declared hash, then publishes it atomically:
    /// fsync the file, rename it to `spaces/<space>/<aa>/<sha256>`, fsync the directory.
    /// Until the rename the published path does not exist; after it, it names the whole,
    /// checked file. A kill at any point leaves one or the other.
    ///
    /// - Parameters:
    ///   - digests: each chunk's recorded SHA-256, by index (all `chunkCount` of them).
    ///   - prefix: the running hash of the file's first bytes (`RunningHashes`), when one
    ///     is kept: only the bytes past it are read. When the digest it gives is not the
    ///     declared one, the whole file is read and hashed, as without it.
    func finalize(
        _ id: UploadID, space: SpaceName, media: MediaID, size: Int64, chunkSize: Int,
        digests: [[UInt8]], prefix: ResumableSHA256? = nil
    ) throws -> FinalizeOutcome {
        let part = partPath(id)
        let final = mediaPath(space: space, id: media)
        var fd = open(part, O_RDWR | O_CLOEXEC)
        if fd < 0 {
            guard errno == ENOENT else { throw MediaIOError("open", part) }
            var published = stat()
            if stat(final, &published) == 0 {
                // Published under this hash by a finalize that stopped before its row; the
                // size must be this upload's too, or the row would describe another file.
                return Int64(published.st_size) == size ? .alreadyPublished : .damagedChunks(Array(digests.indices))
            }
            if size > 0 { return .damagedChunks(Array(digests.indices)) }
            // An empty file has no chunk that would have created its file.
            fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw MediaIOError("open", part) }
        }
        defer { if fd >= 0 { close(fd) } }
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw MediaIOError("fstat", part) }
        if Int64(status.st_size) > size {
            // Only a chunk sent for the wrong index could do this; the hash decides below,
            // but the file must not carry bytes past its end.
            guard ftruncate(fd, off_t(size)) == 0 else { throw MediaIOError("ftruncate", part) }
        }
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        var actual = ""
        if var hasher = prefix, hasher.byteCount <= size {
            try readRange(fd, path: part, offset: hasher.byteCount, length: size - hasher.byteCount) { hasher.update($0) }
            actual = Hex.encode(hasher.digest())
        }
        if actual != media.rawValue {
            actual = try hashFile(fd, path: part, length: size)
        }
        if actual != media.rawValue {
            let damaged = try damagedChunks(fd, path: part, size: size, chunkSize: chunkSize, digests: digests)
            return damaged.isEmpty ? .checksumMismatch(actual: actual) : .damagedChunks(damaged)
        }
        guard fsync(fd) == 0 else { throw MediaIOError("fsync", part) }
        close(fd)
        fd = -1
        let directory = mediaDirectory(space: space, id: media)
        try ensureDirectory(spacesDirectory + "/" + space.rawValue)
        try ensureDirectory(directory)
        // rename(2) is atomic: the published name appears whole or not at all. Replacing a
        // file published by another upload of the same content is harmless: same bytes.
        guard rename(part, final) == 0 else { throw MediaIOError("rename", part) }
        try syncDirectory(directory)
        try syncDirectory(uploadsDirectory)
        return .published
    }

    /// SHA-256 of the first `length` bytes, read sequentially in 1 MiB pieces (bounded
    /// memory; a short file hashes short and so fails the comparison).
    private func hashFile(_ fd: Int32, path: String, length: Int64) throws -> String {
        var hasher = SHA256()
        try readRange(fd, path: path, offset: 0, length: length) { hasher.update($0) }
        return Hex.encode(hasher.finalize())
    }

    /// The indexes of chunks whose bytes no longer hash to their recorded digest.
    private func damagedChunks(_ fd: Int32, path: String, size: Int64, chunkSize: Int, digests: [[UInt8]]) throws -> [Int] {
        var damaged: [Int] = []
        for (index, digest) in digests.enumerated() {
            let offset = Int64(index) * Int64(chunkSize)
            let length = min(Int64(chunkSize), size - offset)
            var hasher = SHA256()
            try readRange(fd, path: path, offset: offset, length: length) { hasher.update($0) }
            if hasher.finalize() != digest { damaged.append(index) }
        }
        return damaged
    }

    /// Reads `length` bytes from `offset` in pieces, stopping early at the end of the file.
    private func readRange(_ fd: Int32, path: String, offset: Int64, length: Int64, _ body: (UnsafeRawBufferPointer) -> Void) throws {
        let pieceSize = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: pieceSize, alignment: 4096)
        defer { buffer.deallocate() }
        var done: Int64 = 0
        while done < length {
            let want = Int(min(Int64(pieceSize), length - done))
            let n = pread(fd, buffer.baseAddress, want, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw MediaIOError("pread", path)
            }
            if n == 0 { return }
            body(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            done += Int64(n)
            readBack.add(n)
        }
    }

    // MARK: Directories

    /// Creates a directory (mode 0700) when absent; when it was created, fsyncs its parent
    /// so the new entry survives a power loss.
    private func ensureDirectory(_ path: String) throws {
        if mkdir(path, 0o700) == 0 {
            try syncDirectory((path as NSString).deletingLastPathComponent)
            return
        }
        guard errno == EEXIST else { throw MediaIOError("mkdir", path) }
    }

    /// fsync(2) on a directory: makes the entries created or renamed in it durable.
    private func syncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw MediaIOError("open", path) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw MediaIOError("fsync", path) }
    }
}

/// A count of bytes, kept across threads.
final class ByteCounter: Sendable {
    private let value = Atomic<Int>(0)
    func add(_ count: Int) { value.add(count, ordering: .relaxed) }
    var total: Int { value.load(ordering: .relaxed) }
}

/// A failed file operation, with errno. The service answers it `503 unavailable` (the
/// disk may be full or failing); the message names the path for the log only.
struct MediaIOError: Error, CustomStringConvertible {
    let operation: String
    let path: String
    let code: Int32

    init(_ operation: String, _ path: String, errno code: Int32 = errno) {
        self.operation = operation
        self.path = path
        self.code = code
    }

    var description: String { "\(operation) \(path): \(String(cString: strerror(code)))" }
}
