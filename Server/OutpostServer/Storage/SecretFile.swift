import Foundation
import OutpostCrypto

/// A secret of the server that an environment variable gives, or else a file in the data
/// directory holds: created on first use with 32 random bytes in hex, mode 0600, and
/// refused when others may read it. The JWT secret (`jwt-secret`) and the webhook signing
/// secret (`webhook-secret`) are kept this way.
///
/// Every such secret is an HMAC-SHA256 key, so it keeps RFC 7518 section 3.2's rule for
/// HS256: a key of at least 256 bits. Its bits are those of the bytes the server uses as the
/// key, the UTF-8 bytes of the variable or file (the file without its trailing white space):
/// at least `minimumBytes`. A file the server creates holds 64 hex digits (64 bytes, 256 bits
/// of randomness).
enum SecretFile {
    /// The fewest bytes a secret may have: 32 bytes, 256 bits (RFC 7518 section 3.2).
    static let minimumBytes = 32

    /// How to make a secret that keeps the rule, for the messages that refuse one.
    static let howToMake = "make one with `openssl rand -base64 32`"

    /// The environment value when set and not empty, else the file's content (created when
    /// absent), without trailing white space. `variable` names the environment variable in
    /// the message that refuses a secret too short.
    static func load(environmentValue: String?, dataDirectory: String, fileName: String, variable: String) throws -> [UInt8] {
        if let value = environmentValue, !value.isEmpty {
            let secret = Array(value.utf8)
            try checkStrength(secret, name: variable)
            return secret
        }
        let path = (dataDirectory as NSString).appendingPathComponent(fileName)
        if let existing = try read(path) { return existing }
        try DataDirectory.makePrivateDirectory(dataDirectory)
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

    /// Refuses a secret shorter than `minimumBytes`; `name` says where it came from.
    static func checkStrength(_ secret: [UInt8], name: String) throws {
        guard secret.count >= minimumBytes else {
            throw Settings.Invalid(description: "\(name) is \(secret.count) bytes; an HS256 secret needs at least \(minimumBytes) bytes "
                + "(256 bits, RFC 7518 section 3.2): \(howToMake)")
        }
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
        try checkStrength(bytes, name: path)
        return bytes
    }
}
