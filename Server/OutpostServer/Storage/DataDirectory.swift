import Foundation
import Synchronization

/// The server's data directory and its layout:
///
/// ```
/// DATA/
///   outpost.lock        held (flock) by the one process that owns the directory
///   outpost.sqlite      the store (with -wal and -shm while open)
///   jwt-secret          the HS256 secret when OUTPOST_JWT_SECRET is not set (mode 0600)
///   media/              media bytes (docs/media.md; `MediaFiles`):
///     uploads/<uploadId>            an open upload's bytes, chunk i at i × chunkSize;
///                                   renamed into spaces/ by finalize once its hash is checked
///     spaces/<space>/<aa>/<sha256>  published files (aa: the first two hex digits)
/// ```
///
/// Media metadata (`media`, `uploads`, `upload_chunks`) lives in `outpost.sqlite` beside
/// the sync tables (`MediaStore`).
///
/// Only one server may own a data directory: two writers on one SQLite history, or an
/// epoch rotated under a running server, would break the protocol's guarantees. The lock
/// is released by `release()` (the application calls it once its store is closed), and by
/// the kernel when the process ends, also after `kill -9`.
public final class DataDirectory: Sendable {
    public let path: String
    /// The lock file's descriptor while the lock is held; nil once released.
    private let lockDescriptor: Mutex<Int32?>

    /// The store file's name inside the directory.
    public static let storeFileName = "outpost.sqlite"
    /// The store file.
    public var storePath: String { (path as NSString).appendingPathComponent(Self.storeFileName) }
    /// The media directory.
    public var mediaPath: String { (path as NSString).appendingPathComponent("media") }

    /// A failure to take the directory.
    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Creates the directory when absent (mode 0700) and takes its lock.
    public init(path: String) throws {
        self.path = path
        do {
            try Self.makePrivateDirectory(path)
        } catch {
            throw Unavailable(description: "cannot create data directory \(path): \(error)")
        }
        try Self.requireWritable(path)
        let lockPath = (path as NSString).appendingPathComponent("outpost.lock")
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Unavailable(description: "cannot open \(lockPath): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw Unavailable(description: "data directory \(path) is in use by another outpost-server process; stop it first")
        }
        lockDescriptor = Mutex(fd)
    }

    /// Refuses a directory this process cannot write, and existing files in it that the
    /// server writes but may not: a volume or host directory owned by another user (a
    /// container's unprivileged user on a directory made by root), or one mounted
    /// read-only. The refusal names the user, the owner and the mode, so the operator
    /// fixes the ownership once instead of reading a lock or SQLite error at each start.
    static func requireWritable(_ path: String) throws {
        let written = ["outpost.lock", storeFileName, storeFileName + "-wal", storeFileName + "-shm", "media"]
        for entry in [path] + written.map({ (path as NSString).appendingPathComponent($0) }) {
            var info = stat()
            // An absent file is created by the server, in the directory checked first.
            guard stat(entry, &info) == 0 else { continue }
            let isDirectory = info.st_mode & S_IFMT == S_IFDIR
            guard access(entry, isDirectory ? W_OK | X_OK : R_OK | W_OK) != 0 else { continue }
            let reason = String(cString: strerror(errno))
            let owner = "owned by uid \(info.st_uid), gid \(info.st_gid), mode \(String(info.st_mode & 0o7777, radix: 8))"
            let what = entry == path ? "\(path) is" : "\(entry) in it is"
            throw Unavailable(description: "data directory \(path) is not writable by this process (uid \(getuid()), gid \(getgid())): \(what) \(owner) (\(reason)); "
                + "give it to this user (chown -R \(getuid()):\(getgid()) on the host directory or volume), or mount it read-write")
        }
    }

    /// Gives the directory up, so that another server (or a command) may take it. Call it
    /// only once the store and media files are closed. Releasing twice is harmless.
    public func release() {
        lockDescriptor.withLock { fd in
            guard let held = fd else { return }
            flock(held, LOCK_UN)
            close(held)
            fd = nil
        }
    }

    deinit {
        release()
    }
}

// MARK: - Private files

extension DataDirectory {
    /// Creates `path` and its missing parents, each with mode 0700. A umask only takes bits
    /// away, so whatever it is, no one but the owner can list or enter what this creates.
    static func makePrivateDirectory(_ path: String) throws {
        try OperatorFiles.makeDirectories(path)
    }

    /// Makes the SQLite store at `path` and its `-wal` and `-shm` readable by their owner
    /// only, before SQLite opens it: SQLite creates a database with mode 0644 less the umask,
    /// and its `-wal` and `-shm` with the database's mode (whatever the umask), so a store
    /// created here empty with mode 0600 keeps all three private. A store an earlier version
    /// (or an operator) left open to the group or others loses those bits, with a log line.
    static func makePrivateStore(_ path: String) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError("cannot open \(path): \(String(cString: strerror(errno)))") }
        close(fd)
        for file in [path, path + "-wal", path + "-shm"] {
            var info = stat()
            guard lstat(file, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_mode & 0o077 != 0 else { continue }
            guard chmod(file, info.st_mode & 0o700) == 0 else {
                throw StoreError("cannot make \(file) private (chmod): \(String(cString: strerror(errno)))")
            }
            Log.info("made a store file readable by its owner only", ["path": file, "was": String(info.st_mode & 0o777, radix: 8)])
        }
    }
}
