import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One store per file: an exclusive `flock` on `<file>-lock` (held by the open file
/// description, so released by the kernel when the process dies, even by SIGKILL) plus a
/// registry of the paths this process has open (so a second open in the same process fails
/// with the same clear error and never touches the file).
///
/// A store holds it while it is open and not suspended: `OutpostStore.suspend()` releases
/// it (iOS stops an app that holds a file lock in a shared container while suspended,
/// 0xdead10cc) and `resume()` takes it again. Readers (`OutpostStore.reader`) never take it.
final class StoreLock: Sendable {
    /// Canonical paths open in this process.
    private static let registry = Mutex<Set<String>>([])

    let path: String
    private let fd: Int32

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    /// Takes the lock for the database at `databasePath`, or throws `storeInUse`. The lock
    /// file gets the store's protection class, so it opens while the device is locked
    /// whenever the database does.
    static func acquire(databasePath: String, protection: OutpostStore.FileProtection) throws -> StoreLock {
        let canonical = canonicalPath(databasePath)
        let registered = registry.withLock { open in open.insert(canonical).inserted }
        guard registered else { throw OutpostError.storeInUse(path: databasePath) }
        let fd = open(canonical + "-lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            _ = registry.withLock { $0.remove(canonical) }
            throw OutpostError.storage("cannot open \(canonical)-lock: \(String(cString: strerror(errno)))")
        }
        let lock = StoreLock(path: canonical, fd: fd)
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { throw OutpostError.storeInUse(path: databasePath) }
        do { try Platform.protect(canonical + "-lock", protection) } catch {
            throw OutpostError.storage("cannot set the protection of \(canonical)-lock: \(error)")
        }
        return lock
    }

    deinit {
        flock(fd, LOCK_UN)
        close(fd)
        _ = Self.registry.withLock { $0.remove(path) }
    }

    /// The absolute path with the directory's symbolic links resolved (the file itself may
    /// not exist yet).
    static func canonicalPath(_ path: String) -> String {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        let directory = url.deletingLastPathComponent().resolvingSymlinksInPath()
        return directory.appendingPathComponent(url.lastPathComponent).path
    }
}
