// File work of the media uploader: stream hashing, chunk reads at an offset, and download
// files written beside their destination. Every call that touches the disk runs on a
// dispatch queue of its own, never on Swift's cooperative pool (a 1 GB file takes seconds to
// hash; a blocked pool thread would stall every other task of the app).
import Dispatch
import Foundation
import OutpostCrypto
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension SHA256 {
    /// The digest of `data`, hashed where it lies.
    static func hash(_ data: Data) -> [UInt8] {
        var h = SHA256()
        data.withUnsafeBytes { h.update($0) }
        return h.finalize()
    }
}

/// Lowercase hex.
func hexString(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count * 2)
    for b in bytes {
        out.append(digits[Int(b >> 4)])
        out.append(digits[Int(b & 15)])
    }
    return String(decoding: out, as: UTF8.self)
}

/// What tells one version of a file from another without reading it: size, modification
/// time (ns), device and inode. A file rewritten in place changes its size or mtime; one
/// replaced by a rename changes its inode.
struct FileIdentity: Sendable, Hashable {
    var size: Int64
    var modifiedNs: Int64
    var device: UInt64
    var inode: UInt64

    init(size: Int64, modifiedNs: Int64, device: UInt64, inode: UInt64) {
        self.size = size
        self.modifiedNs = modifiedNs
        self.device = device
        self.inode = inode
    }

    init(_ s: stat) {
        size = Int64(s.st_size)
        #if canImport(Darwin)
        modifiedNs = Int64(s.st_mtimespec.tv_sec) * 1_000_000_000 + Int64(s.st_mtimespec.tv_nsec)
        #else
        modifiedNs = Int64(s.st_mtim.tv_sec) * 1_000_000_000 + Int64(s.st_mtim.tv_nsec)
        #endif
        device = UInt64(truncatingIfNeeded: s.st_dev)
        inode = UInt64(truncatingIfNeeded: s.st_ino)
    }
}

/// The file changed while it was read (hashed or chunked): its upload must start over.
struct FileChanged: Error {}

enum MediaFiles {
    /// Runs `body` on `queue` and awaits it.
    static func run<T: Sendable>(on queue: DispatchQueue, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// The absolute, standardized form of `path` (relative paths against the current
    /// directory): the key an upload is kept under.
    static func absolutePath(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.path
    }

    static func errnoText(_ code: Int32 = errno) -> String { String(cString: strerror(code)) }

    /// What a failed open or read of `path` with `code` means for an upload: a permission
    /// error is the device's data protection while it is locked (the file opens again once
    /// it is unlocked), so the upload waits; anything else is permanent.
    static func readFailure(_ path: String, _ code: Int32 = errno) -> MediaError {
        code == EPERM || code == EACCES ? .fileProtected(path: path, reason: errnoText(code)) : .fileUnreadable(path: path, reason: errnoText(code))
    }

    /// Opens `path` for reading; a directory or anything but a regular file is refused.
    static func openForReading(_ path: String) throws -> (Int32, FileIdentity) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw readFailure(path) }
        var s = stat()
        guard fstat(fd, &s) == 0 else {
            let reason = errnoText()
            close(fd)
            throw MediaError.fileUnreadable(path: path, reason: reason)
        }
        guard (s.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw MediaError.fileUnreadable(path: path, reason: "not a regular file")
        }
        return (fd, FileIdentity(s))
    }

    /// The identity of the file at `path` now.
    static func identity(of path: String) throws -> FileIdentity {
        var s = stat()
        guard stat(path, &s) == 0 else { throw MediaError.fileUnreadable(path: path, reason: errnoText()) }
        guard (s.st_mode & S_IFMT) == S_IFREG else { throw MediaError.fileUnreadable(path: path, reason: "not a regular file") }
        return FileIdentity(s)
    }

    /// Hashes the file at `path` in 1 MiB reads (never the whole file in memory), on a queue
    /// of its own. The file must not change while it is read (size, mtime, inode before and
    /// after); when it does, it is read again, at most three times, then `FileChanged`.
    /// `progress` gets the bytes hashed so far; `cancelled` is polled between reads.
    static func hash(path: String, progress: @escaping @Sendable (Int64) -> Void, cancelled: @escaping @Sendable () -> Bool) async throws -> (FileIdentity, String) {
        let queue = DispatchQueue(label: "outpost.media.hash")
        return try await run(on: queue) {
            for _ in 0..<3 {
                let (fd, before) = try openForReading(path)
                defer { close(fd) }
                var hasher = SHA256()
                var buffer = [UInt8](repeating: 0, count: 1 << 20)
                var total: Int64 = 0
                while true {
                    if cancelled() { throw CancellationError() }
                    let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw readFailure(path)
                    }
                    if n == 0 { break }
                    buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                    total += Int64(n)
                    progress(total)
                }
                var s = stat()
                guard fstat(fd, &s) == 0 else { throw MediaError.fileUnreadable(path: path, reason: errnoText()) }
                let after = FileIdentity(s)
                let digest = hasher.finalize()
                if after == before && total == before.size { return (before, hexString(digest)) }
            }
            throw FileChanged()
        }
    }
}

/// A file opened to send its chunks: reads at an offset (`pread`, so several chunks may be
/// read at once) and checks after every read that the file is still the one that was hashed.
final class ChunkReader: Sendable {
    let path: String
    let identity: FileIdentity
    private let fd: Int32
    private let queue = DispatchQueue(label: "outpost.media.chunks")

    private init(path: String, fd: Int32, identity: FileIdentity) {
        self.path = path
        self.fd = fd
        self.identity = identity
    }

    /// Opens `path`; throws `FileChanged` when it is no longer the file of `expected`.
    static func open(_ path: String, expected: FileIdentity) async throws -> ChunkReader {
        try await MediaFiles.run(on: DispatchQueue(label: "outpost.media.open")) {
            let (fd, identity) = try MediaFiles.openForReading(path)
            guard identity == expected else {
                close(fd)
                throw FileChanged()
            }
            return ChunkReader(path: path, fd: fd, identity: identity)
        }
    }

    deinit { close(fd) }

    /// `length` bytes at `offset`; `FileChanged` when the file is shorter or was modified.
    func read(offset: Int64, length: Int) async throws -> Data {
        try await MediaFiles.run(on: queue) { [self] in
            var data = Data(count: length)
            var done = 0
            while done < length {
                let n = data.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, length - done, off_t(offset) + off_t(done)) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw MediaFiles.readFailure(path)
                }
                if n == 0 { throw FileChanged() }
                done += n
            }
            var s = stat()
            guard fstat(fd, &s) == 0 else { throw MediaError.fileUnreadable(path: path, reason: MediaFiles.errnoText()) }
            guard FileIdentity(s) == identity else { throw FileChanged() }
            return data
        }
    }
}

/// A download's bytes, written to a hidden file beside the destination and renamed into
/// place only once checked; removed otherwise.
final class DownloadFile: Sendable {
    let destination: String
    let temporary: String
    private let fd: Int32
    private let queue = DispatchQueue(label: "outpost.media.download")
    private let isOpen = Mutex(true)

    private init(destination: String, temporary: String, fd: Int32) {
        self.destination = destination
        self.temporary = temporary
        self.fd = fd
    }

    /// Creates the temporary file in the destination's directory (so the final rename stays
    /// on one file system and is atomic), with the store's protection class
    /// (`Configuration.fileProtection`) before its first byte: a downloaded photo is as
    /// protected as the records that point at it. The rename keeps the class.
    static func create(destination: String, protection: OutpostStore.FileProtection) async throws -> DownloadFile {
        try await MediaFiles.run(on: DispatchQueue(label: "outpost.media.create")) {
            let url = URL(fileURLWithPath: destination)
            let directory = url.deletingLastPathComponent().path
            var suffix = SystemRandomNumberGenerator()
            let temporary = directory + "/." + url.lastPathComponent + ".\(String(suffix.next() as UInt64, radix: 36)).outpost-download"
            let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw MediaError.destinationUnwritable(path: destination, reason: MediaFiles.errnoText()) }
            do { try Platform.protect(temporary, protection) } catch {
                close(fd)
                unlink(temporary)
                throw MediaError.destinationUnwritable(path: destination, reason: "cannot set its protection class: \(error)")
            }
            return DownloadFile(destination: destination, temporary: temporary, fd: fd)
        }
    }

    /// Appends `data`.
    func append(_ data: Data) async throws {
        try await MediaFiles.run(on: queue) { [self] in
            var done = 0
            while done < data.count {
                let n = data.withUnsafeBytes { write(fd, $0.baseAddress! + done, data.count - done) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw MediaError.destinationUnwritable(path: destination, reason: MediaFiles.errnoText())
                }
                done += n
            }
        }
    }

    /// Flushes the file to disk, renames it over the destination and syncs the directory,
    /// so that the new name survives a power loss too.
    func commit() async throws {
        try await MediaFiles.run(on: queue) { [self] in
            guard Platform.fullSync(fd) else { throw MediaError.destinationUnwritable(path: destination, reason: MediaFiles.errnoText()) }
            closeOnce()
            guard rename(temporary, destination) == 0 else {
                let reason = MediaFiles.errnoText()
                unlink(temporary)
                throw MediaError.destinationUnwritable(path: destination, reason: reason)
            }
            do { try Platform.syncDirectory(Platform.directory(of: destination)) } catch {
                throw MediaError.destinationUnwritable(path: destination, reason: "\(error)")
            }
        }
    }

    /// Removes the temporary file (nothing is left behind).
    func discard() async {
        _ = try? await MediaFiles.run(on: queue) { [self] in
            closeOnce()
            unlink(temporary)
        }
    }

    private func closeOnce() {
        if isOpen.withLock({ was in defer { was = false }; return was }) { close(fd) }
    }

    deinit { closeOnce() }
}
