/// A 256-bit key wrapped under a passphrase, for moving a space key between devices.
///
/// The passphrase and a random salt go through a deliberately slow KDF (scrypt by
/// default, PBKDF2-HMAC-SHA256 where scrypt's memory is not available) to a 256-bit
/// wrapping key; the space key is sealed under it with AES-256-GCM and a random nonce,
/// with the caller's `context` as associated data. Every field is needed to unwrap and
/// none is secret, so the whole value can travel in an export.
///
/// The passphrase's bytes are its UTF-8 exactly as given, without Unicode normalization:
/// a passphrase typed as composed "é" and one typed as "e" + combining accent are
/// different passphrases. Callers that want them to match normalize before calling.
///
/// The KDF parameters are checked against minimums (scrypt N ≥ 2^17 with r ≥ 8, PBKDF2
/// ≥ 600,000 iterations) when wrapping and again when unwrapping, so a crafted export
/// cannot talk a device into a cheap derivation that makes guessing the passphrase easy;
/// and against maximums when unwrapping, so that a crafted export cannot make a device
/// allocate unbounded memory or compute for hours.
public struct PassphraseWrap: Sendable, Equatable {
    /// The KDF and its parameters.
    public enum Function: Sendable, Equatable {
        case scrypt(n: UInt64, r: UInt64, p: UInt64)
        case pbkdf2SHA256(iterations: Int)
    }

    public var function: Function
    /// 16 random bytes, the KDF's salt.
    public var salt: [UInt8]
    /// 12 random bytes, the AES-256-GCM nonce.
    public var nonce: [UInt8]
    /// AES-256-GCM ciphertext || tag of the key under the derived key (48 bytes).
    public var sealed: [UInt8]

    public static let saltByteCount = 16

    /// The defaults the product uses: scrypt N = 2^17, r = 8, p = 1 (128 MiB, a few
    /// tenths of a second); PBKDF2 600,000 iterations (OWASP's figure for HMAC-SHA256).
    public static let defaultScrypt: Function = .scrypt(n: 1 << 17, r: 8, p: 1)
    public static let defaultPBKDF2: Function = .pbkdf2SHA256(iterations: 600_000)

    /// The weakest parameters accepted, on wrap and on unwrap.
    static let minimumScryptN: UInt64 = 1 << 17
    static let minimumScryptR: UInt64 = 8
    static let minimumPBKDF2Iterations = 600_000
    /// The most work accepted: a scrypt table of up to 1 GiB (N = 2^20 at r = 8) and N·r·p
    /// up to 64 times the default; PBKDF2 up to 100 times the default iterations.
    static let maximumScryptMemory: UInt64 = 1 << 30
    static let maximumScryptWork: UInt64 = 64 << 20
    static let maximumPBKDF2Iterations = 60_000_000

    /// A wrap from its stored fields, as read back from an export; `unwrap` checks them.
    public init(function: Function, salt: [UInt8], nonce: [UInt8], sealed: [UInt8]) {
        self.function = function
        self.salt = salt
        self.nonce = nonce
        self.sealed = sealed
    }

    /// Wraps the 32-byte `key` under `passphrase` with a fresh salt and nonce. `context`
    /// is authenticated as associated data (the caller passes e.g. the key id and the
    /// space), so that a wrap cannot be relabelled as another key's.
    public static func wrap(key: [UInt8], passphrase: String, context: [UInt8], function: Function = defaultScrypt) throws -> PassphraseWrap {
        try wrap(key: key, passphrase: passphrase, context: context, function: function,
                 salt: SecureRandom.bytes(saltByteCount), nonce: SecureRandom.bytes(AESGCM.nonceByteCount))
    }

    /// Wraps with the salt and nonce given: the wrap is then a function of its inputs, as
    /// the format's fixtures need (docs/encryption.md). Never reuse a nonce under one
    /// passphrase and salt.
    package static func wrap(key: [UInt8], passphrase: String, context: [UInt8], function: Function, salt: [UInt8], nonce: [UInt8]) throws -> PassphraseWrap {
        guard key.count == AESGCM.keyByteCount else { throw CryptoError.invalidKeyLength(key.count) }
        try check(function)
        guard salt.count == saltByteCount else { throw CryptoError.invalidInput("salt of \(salt.count) bytes, not \(saltByteCount)") }
        var wrappingKey = try derive(function, passphrase: passphrase, salt: salt)
        defer { cleanse(&wrappingKey) }
        let sealed = try AESGCM.seal(key, key: wrappingKey, nonce: nonce, aad: context)
        return PassphraseWrap(function: function, salt: salt, nonce: nonce, sealed: sealed)
    }

    /// The wrapped key. Throws `.authenticationFailed` for a wrong passphrase, a changed
    /// `context` or a tampered wrap, and `.invalidInput` for parameters outside the
    /// accepted range or fields of the wrong length (checked before any derivation).
    public func unwrap(passphrase: String, context: [UInt8]) throws -> [UInt8] {
        try Self.check(function)
        guard salt.count == Self.saltByteCount else { throw CryptoError.invalidInput("salt of \(salt.count) bytes, not \(Self.saltByteCount)") }
        guard nonce.count == AESGCM.nonceByteCount else { throw CryptoError.invalidNonceLength(nonce.count) }
        let sealedCount = AESGCM.keyByteCount + AESGCM.tagByteCount
        guard sealed.count == sealedCount else { throw CryptoError.invalidInput("sealed key of \(sealed.count) bytes, not \(sealedCount)") }
        var wrappingKey = try Self.derive(function, passphrase: passphrase, salt: salt)
        defer { cleanse(&wrappingKey) }
        return try AESGCM.open(sealed, key: wrappingKey, nonce: nonce, aad: context)
    }

    /// Refuses parameters weaker than the minimums or costlier than the maximums.
    static func check(_ function: Function) throws {
        switch function {
        case let .scrypt(n, r, p):
            guard n >= minimumScryptN, r >= minimumScryptR, p >= 1 else {
                throw CryptoError.invalidInput("scrypt N=\(n) r=\(r) p=\(p) is weaker than the minimum N=\(minimumScryptN) r=\(minimumScryptR) p=1")
            }
            guard n & (n - 1) == 0 else { throw CryptoError.invalidInput("scrypt N must be a power of two, not \(n)") }
            // The table of N blocks of 128·r bytes is the memory that matters.
            let (nr, o1) = n.multipliedReportingOverflow(by: r)
            let (memory, o2) = nr.multipliedReportingOverflow(by: 128)
            let (work, o3) = nr.multipliedReportingOverflow(by: p)
            guard !o1, !o2, !o3, memory <= maximumScryptMemory, work <= maximumScryptWork else {
                throw CryptoError.invalidInput("scrypt N=\(n) r=\(r) p=\(p) costs more than the accepted maximum")
            }
        case let .pbkdf2SHA256(iterations):
            guard iterations >= minimumPBKDF2Iterations else {
                throw CryptoError.invalidInput("PBKDF2 with \(iterations) iterations is weaker than the minimum \(minimumPBKDF2Iterations)")
            }
            guard iterations <= maximumPBKDF2Iterations else {
                throw CryptoError.invalidInput("PBKDF2 with \(iterations) iterations costs more than the accepted maximum \(maximumPBKDF2Iterations)")
            }
        }
    }

    /// The 32-byte wrapping key for `passphrase` under `function` and `salt`.
    private static func derive(_ function: Function, passphrase: String, salt: [UInt8]) throws -> [UInt8] {
        var password = Array(passphrase.utf8)
        defer { cleanse(&password) }
        switch function {
        case let .scrypt(n, r, p):
            return try KDF.scrypt(password: password, salt: salt, n: n, r: r, p: p, length: AESGCM.keyByteCount)
        case let .pbkdf2SHA256(iterations):
            return try KDF.pbkdf2SHA256(password: password, salt: salt, iterations: iterations, length: AESGCM.keyByteCount)
        }
    }
}
