import Foundation
import OutpostCrypto

/// A secret of the server that an environment variable gives, or else a file in the data
/// directory holds: created on first use with 32 random bytes in hex, mode 0600, and
/// refused when others may read it. The JWT secret (`jwt-secret`) and the webhook signing
/// secret (`webhook-secret`) are kept this way.
enum SecretFile {
    /// The environment value when set and not empty, else the file's content (created when
    /// absent), without trailing white space.
    static func load(environmentValue: String?, dataDirectory: String, fileName: String) throws -> [UInt8] {
        if let value = environmentValue, !value.isEmpty { return Array(value.utf8) }
        let path = (dataDirectory as NSString).appendingPathComponent(fileName)
        if let existing = try read(path) { return existing }
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let secret = Array(Hex.encode(SecureRandom.bytes(32)).utf8)
        // O_EXCL: when two processes race to create it, exactly one secret wins and the
        // loser reads the winner's.
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd < 0 {
            if errno == EEXIST, let existing = try read(path) { return existing }
            throw StoreError("cannot create \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let written = secret.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == secret.count, fsync(fd) == 0 else {
            unlink(path)
            throw StoreError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
        return secret
    }

    private static func read(_ path: String) throws -> [UInt8]? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        var info = stat()
        if stat(path, &info) == 0, info.st_mode & 0o077 != 0 {
            throw StoreError("\(path) must be readable by its owner only (chmod 600)")
        }
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        var bytes = Array(data)
        while let last = bytes.last, last == 0x0A || last == 0x0D || last == 0x20 { bytes.removeLast() }
        guard !bytes.isEmpty else { throw StoreError("\(path) is empty") }
        return bytes
    }
}
