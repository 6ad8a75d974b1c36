import Foundation
import OutpostCrypto

// Blocking file helpers shared by `backup`, `restore` and `check`. These commands run in
// their own short-lived process (never inside a serving server), so blocking calls are
// what they should make.

/// A failure of an operator command (`backup`, `restore`, `check`) that is not a mistake
/// on the command line: the executable prints it and exits 1.
public struct OperatorError: Error, CustomStringConvertible, Sendable {
    /// What failed, for the operator.
    public let description: String
    /// An error with `description` as its message.
    public init(_ description: String) { self.description = description }
}

enum OperatorFiles {
    /// The SHA-256 (lowercase hex) and size of the file at `path`, read in 1 MiB pieces.
    static func hash(path: String) throws -> (sha256: String, size: Int64) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ioError("open", path) }
        defer { close(fd) }
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        var hasher = SHA256()
        let size = try readAll(fd, path: path) { hasher.update($0) }
        return (Hex.encode(hasher.finalize()), size)
    }

    /// Copies `source` to `destination` (which must not exist; created with `mode`), hashing
    /// the bytes as they pass, and fsyncs the copy. Returns the SHA-256 and size of what was
    /// written, so the caller compares it with what it expected.
    static func copy(from source: String, to destination: String, mode: mode_t = 0o600) throws -> (sha256: String, size: Int64) {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw ioError("open", source) }
        defer { close(input) }
        _ = posix_fadvise(input, 0, 0, POSIX_FADV_SEQUENTIAL)
        let output = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard output >= 0 else { throw ioError("create", destination) }
        var closed = false
        defer { if !closed { close(output) } }
        var hasher = SHA256()
        var failure: OperatorError?
        let size = try readAll(input, path: source) { piece in
            guard failure == nil else { return }
            hasher.update(piece)
            var done = 0
            while done < piece.count {
                let n = Glibc.write(output, piece.baseAddress! + done, piece.count - done)
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = ioError("write", destination)
                    return
                }
                done += n
            }
        }
        if let failure { throw failure }
        guard fsync(output) == 0 else { throw ioError("fsync", destination) }
        closed = true
        guard close(output) == 0 else { throw ioError("close", destination) }
        return (Hex.encode(hasher.finalize()), size)
    }

    /// Reads the whole file behind `fd` in 1 MiB pieces; returns the number of bytes read.
    private static func readAll(_ fd: Int32, path: String, _ body: (UnsafeRawBufferPointer) -> Void) throws -> Int64 {
        let pieceSize = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: pieceSize, alignment: 4096)
        defer { buffer.deallocate() }
        var total: Int64 = 0
        while true {
            let n = read(fd, buffer.baseAddress, pieceSize)
            if n < 0 {
                if errno == EINTR { continue }
                throw ioError("read", path)
            }
            if n == 0 { return total }
            body(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            total += Int64(n)
        }
    }

    /// Writes `bytes` to a new file at `path` (mode `mode`) and fsyncs it.
    static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw ioError("create", path) }
        defer { close(fd) }
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ioError("write", path)
            }
            done += n
        }
        guard fsync(fd) == 0 else { throw ioError("fsync", path) }
    }

    /// fsync(2) of a file or directory: makes its contents, or the entries created and
    /// renamed in it, durable.
    static func sync(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ioError("open", path) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw ioError("fsync", path) }
    }

    /// Creates `path` and any missing parents (mode 0700); returns the directories it created,
    /// parents first, so the caller can fsync them and their parents.
    @discardableResult
    static func makeDirectories(_ path: String) throws -> [String] {
        var missing: [String] = []
        var current = path
        while !current.isEmpty, current != "/", !exists(current) {
            missing.append(current)
            current = (current as NSString).deletingLastPathComponent
        }
        for directory in missing.reversed() {
            guard mkdir(directory, 0o700) == 0 || errno == EEXIST else { throw ioError("mkdir", directory) }
        }
        return missing.reversed()
    }

    /// True when something exists at `path` (a dangling symbolic link counts).
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// True when `path` is a directory.
    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// True when `path` is a regular file.
    static func isRegularFile(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }

    /// The names in a directory, sorted; empty when it does not exist.
    static func list(_ path: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    /// Removes a file or a whole tree; a missing path is fine.
    static func remove(_ path: String) throws {
        guard exists(path) else { return }
        do {
            try FileManager.default.removeItem(atPath: path)
        } catch {
            throw OperatorError("cannot remove \(path): \(error.localizedDescription)")
        }
    }

    /// rename(2), which replaces `destination` atomically when it is a file.
    static func rename(_ source: String, _ destination: String) throws {
        guard Glibc.rename(source, destination) == 0 else {
            throw OperatorError("cannot rename \(source) to \(destination): \(String(cString: strerror(errno)))")
        }
    }

    static func ioError(_ operation: String, _ path: String, errno code: Int32 = errno) -> OperatorError {
        OperatorError("\(operation) \(path): \(String(cString: strerror(code)))")
    }

    /// `a/b` with exactly one slash between.
    static func join(_ parts: String...) -> String {
        parts.dropFirst().reduce(parts[0]) { ($0 as NSString).appendingPathComponent($1) }
    }
}

/// Reads `--flag value` options and bare `--switch`es of an operator command.
struct OperatorArguments {
    private(set) var values: [String: String] = [:]
    private(set) var switches: Set<String> = []

    /// Parses `arguments`, accepting `--flag value` and `--flag=value` for the flags in
    /// `valued` and bare flags in `switches`; anything else is a usage error.
    init(_ arguments: [String], valued: Set<String>, switches allowed: Set<String>) throws {
        var i = 0
        while i < arguments.count {
            var flag = arguments[i]
            var value: String?
            if flag.hasPrefix("--"), let eq = flag.firstIndex(of: "=") {
                value = String(flag[flag.index(after: eq)...])
                flag = String(flag[..<eq])
            }
            if valued.contains(flag) {
                if value == nil {
                    i += 1
                    guard i < arguments.count else { throw AdminCommands.Usage("\(flag) needs a value") }
                    value = arguments[i]
                }
                guard let value, !value.isEmpty else { throw AdminCommands.Usage("\(flag) needs a value") }
                values[flag] = value
            } else if allowed.contains(flag), value == nil {
                switches.insert(flag)
            } else {
                throw AdminCommands.Usage("unknown option \(arguments[i])")
            }
            i += 1
        }
    }

    /// The data directory and media directory the command works on: `--data` (or
    /// `OUTPOST_DATA`) and `--media-dir` (or `OUTPOST_MEDIA_DIR`, else `DATA/media`), as
    /// `serve` reads them. A PostgreSQL store (`--store`/`OUTPOST_STORE` with a
    /// `postgres://` URL) is refused: these commands cover the embedded SQLite store, and a
    /// PostgreSQL database is backed up with PostgreSQL's own tools (docs/operating.md).
    func directories(_ environment: [String: String], command: String) throws -> (data: String, media: String) {
        if let store = values["--store"] ?? environment["OUTPOST_STORE"], Settings.isPostgresURL(store) {
            throw AdminCommands.Usage("\(command) works on the embedded SQLite store; with a PostgreSQL store use pg_dump and copy the media directory (docs/operating.md, \"PostgreSQL\")")
        }
        let data = values["--data"] ?? environment["OUTPOST_DATA"] ?? "./outpost-data"
        let media = values["--media-dir"] ?? environment["OUTPOST_MEDIA_DIR"].flatMap { $0.isEmpty ? nil : $0 } ?? OperatorFiles.join(data, "media")
        return (data, media)
    }

    /// Where media bytes live, from the `--media-store` and `--s3-*` flags given and the
    /// environment, read by the same options as `serve` (`MediaStoreSettings`).
    func mediaStore(_ environment: [String: String]) throws -> MediaStoreSettings {
        var settings = Settings()
        for option in MediaStoreSettings.options {
            if let value = values[option.flag] ?? environment[option.env] { try option.apply(&settings, value) }
        }
        settings.mediaStore.readEnvironment(environment)
        try settings.mediaStore.validate()
        return settings.mediaStore
    }

    /// The value of `flag`, or a usage error naming it.
    func required(_ flag: String, _ what: String) throws -> String {
        guard let value = values[flag] else { throw AdminCommands.Usage("\(flag) \(what) is required") }
        return value
    }
}
