// The file-system primitives whose behaviour differs between Apple platforms and Linux, in
// one place (docs/client.md, "Platforms"). Everything that uses them is portable and runs
// on Linux through the same code; the `#if` branches below are the Apple side, which only
// an Apple build compiles.
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

enum Platform {
    /// Pushes `fd`'s bytes to stable storage. On Darwin `fsync` only hands them to the
    /// drive, which may keep them in its cache across a power loss; `F_FULLFSYNC` asks the
    /// drive to flush it (falling back to `fsync` on file systems that refuse it).
    /// Elsewhere `fsync`.
    static func fullSync(_ fd: Int32) -> Bool {
        #if canImport(Darwin)
        if fcntl(fd, F_FULLFSYNC) == 0 { return true }
        #endif
        return fsync(fd) == 0
    }

    /// Syncs the directory `path`, so that a rename or a new name in it survives a power
    /// loss (POSIX leaves a directory's entries to its own sync).
    static func syncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw PlatformError(path: path) }
        defer { close(fd) }
        guard fullSync(fd) else { throw PlatformError(path: path) }
    }

    /// Writes `bytes` to `path` so that a crash or a power loss leaves the old file or the
    /// new one, whole: a temporary file of mode `mode` beside it, synced, renamed over it,
    /// and the directory synced after the rename.
    static func writeDurably(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600) throws {
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw PlatformError(path: temporary) }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            written += n
        }
        let failure = written == bytes.count && fullSync(fd) ? nil : PlatformError(path: temporary)
        close(fd)
        if let failure {
            unlink(temporary)
            throw failure
        }
        guard rename(temporary, path) == 0 else {
            let failure = PlatformError(path: path)
            unlink(temporary)
            throw failure
        }
        try syncDirectory(directory(of: path))
    }

    /// The directory that holds `path`.
    static func directory(of path: String) -> String {
        URL(fileURLWithPath: path).deletingLastPathComponent().path
    }

    /// Creates the directory that will hold the store file `path` when it is missing (an
    /// app's Application Support directory does not exist at its first launch), with the
    /// store's protection class.
    static func createDirectory(holding path: String, protection: OutpostStore.FileProtection) throws {
        let directory = directory(of: path)
        guard !FileManager.default.fileExists(atPath: directory) else { return }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: attributes(protection))
        } catch {
            throw OutpostError.storage("cannot create the store's directory \(directory): \(error.localizedDescription)")
        }
    }

    // MARK: Data protection (iOS family)

    /// The flags that make SQLite create the database and its `-wal` and `-shm` files in the
    /// protection class (Apple's SQLite reads them: `SQLITE_OPEN_FILEPROTECTION_*`); none
    /// elsewhere, where those bits mean nothing.
    static func sqliteOpenFlags(_ protection: OutpostStore.FileProtection) -> Int32 {
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
        switch protection {
        case .complete: return 0x0010_0000  // SQLITE_OPEN_FILEPROTECTION_COMPLETE
        case .completeUnlessOpen: return 0x0020_0000  // SQLITE_OPEN_FILEPROTECTION_COMPLETEUNLESSOPEN
        case .completeUntilFirstUserAuthentication: return 0x0030_0000  // SQLITE_OPEN_FILEPROTECTION_COMPLETEUNTILFIRSTUSERAUTHENTICATION
        case .none: return 0x0040_0000  // SQLITE_OPEN_FILEPROTECTION_NONE
        }
        #else
        return 0
        #endif
    }

    /// Gives the file or directory at `path` the protection class (the store's lock file,
    /// its device marker). Nothing elsewhere.
    static func protect(_ path: String, _ protection: OutpostStore.FileProtection) throws {
        guard let attributes = attributes(protection) else { return }
        try FileManager.default.setAttributes(attributes, ofItemAtPath: path)
    }

    private static func attributes(_ protection: OutpostStore.FileProtection) -> [FileAttributeKey: Any]? {
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
        let type: FileProtectionType
        switch protection {
        case .complete: type = .complete
        case .completeUnlessOpen: type = .completeUnlessOpen
        case .completeUntilFirstUserAuthentication: type = .completeUntilFirstUserAuthentication
        case .none: type = .none
        }
        return [.protectionKey: type]
        #else
        return nil
        #endif
    }

    // MARK: The app's container

    /// The directory an app's files live in, by default (`Configuration.baseDirectory`): on
    /// Apple platforms the app's home, its data container, which every app update moves, so
    /// that uploads kept relative to it survive the move; nil on Linux, where no container
    /// moves and paths stay absolute.
    static var defaultBaseDirectory: URL? {
        #if canImport(Darwin)
        return URL(fileURLWithPath: NSHomeDirectory(), isDirectory: true)
        #else
        return nil
        #endif
    }

    // MARK: Backups

    /// Keeps the file at `path` out of the device's backups (iCloud, the computer's, Time
    /// Machine) and out of a migration to a new device. Linux has no such mark: nothing.
    static func excludeFromBackup(_ path: String) throws {
        #if canImport(Darwin)
        var url = URL(fileURLWithPath: path)
        var values = URLResourceValues()
        values.isExcludedFromBackup = true
        try url.setResourceValues(values)
        #endif
    }
}

/// A failed system call on a path, with `errno`'s text.
struct PlatformError: Error, CustomStringConvertible {
    let path: String
    let reason: String

    init(path: String, code: Int32 = errno) {
        self.path = path
        reason = String(cString: strerror(code))
    }

    var description: String { "\(path): \(reason)" }
}
