/// AES-256-GCM (NIST SP 800-38D) with 96-bit nonces and 128-bit tags. The cipher is a
/// platform primitive (`GCMContext`: libcrypto's EVP on Linux, CryptoKit on Apple
/// platforms); the checks and the buffer handling around it are here, the same everywhere.
///
/// Sealed bytes are the ciphertext followed by the tag, so a sealed value is always
/// `plaintext.count + 16` bytes. A nonce must never be used twice under one key: GCM
/// loses both confidentiality and authenticity when it is.
///
/// Each call here sets up a fresh context and key schedule; for many small records under
/// one key, `AESGCMKey` keeps the context and sets only the nonce per call.
public enum AESGCM {
    public static let keyByteCount = 32
    public static let nonceByteCount = 12
    public static let tagByteCount = 16

    /// Seals `plaintext` and returns ciphertext || tag (`plaintext.count + 16` bytes).
    /// `aad` is authenticated, not encrypted, and must be given again to open.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8], aad: [UInt8] = []) throws -> [UInt8] {
        try GCMContext(key: key, encrypt: true).seal(plaintext, nonce: nonce, aad: aad)
    }

    /// Opens ciphertext || tag and returns the plaintext, or throws `.authenticationFailed`
    /// when the tag does not verify under this key, nonce and `aad`.
    public static func open(_ sealed: [UInt8], key: [UInt8], nonce: [UInt8], aad: [UInt8] = []) throws -> [UInt8] {
        try GCMContext(key: key, encrypt: false).open(sealed, nonce: nonce, aad: aad)
    }

    /// Seals `plaintext` into `output`, which needs room for `plaintext.count + 16` bytes
    /// and must not overlap the input; returns the number of bytes written.
    public static func seal(
        _ plaintext: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        key: [UInt8], nonce: [UInt8], aad: [UInt8]
    ) throws -> Int {
        try GCMContext(key: key, encrypt: true).seal(plaintext, into: output, nonce: nonce, aad: aad)
    }

    /// Opens ciphertext || tag into `output`, which needs room for `sealed.count - 16`
    /// bytes and must not overlap the input; returns the number of bytes written. When the
    /// tag does not verify, the bytes already decrypted into `output` are zeroed before
    /// `.authenticationFailed` is thrown, so no unverified plaintext is left behind.
    public static func open(
        _ sealed: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        key: [UInt8], nonce: [UInt8], aad: [UInt8]
    ) throws -> Int {
        try GCMContext(key: key, encrypt: false).open(sealed, into: output, nonce: nonce, aad: aad)
    }
}

/// One key's AES-256-GCM contexts, reused across calls: the key is set up once in `init`,
/// and each call sets only the nonce. For many small records (a few hundred bytes each)
/// this avoids a context and a key expansion per record (on Linux, an
/// `EVP_CIPHER_CTX_new`).
///
/// Not thread-safe, and deliberately not `Sendable`: a call may mutate the context, so one
/// instance belongs to one thread, task or actor (an actor may keep it as a stored
/// property). The contexts, and the key schedule in them, are freed and cleansed when the
/// instance is deinitialized.
public final class AESGCMKey {
    private let encryptor: GCMContext
    private let decryptor: GCMContext

    /// Sets up the contexts for `key`, which must be 32 bytes (`.invalidKeyLength`).
    public init(_ key: [UInt8]) throws {
        encryptor = try GCMContext(key: key, encrypt: true)
        decryptor = try GCMContext(key: key, encrypt: false)
    }

    /// Seals `plaintext` and returns ciphertext || tag (`plaintext.count + 16` bytes).
    public func seal(_ plaintext: [UInt8], nonce: [UInt8], aad: [UInt8] = []) throws -> [UInt8] {
        try encryptor.seal(plaintext, nonce: nonce, aad: aad)
    }

    /// Opens ciphertext || tag, or throws `.authenticationFailed`.
    public func open(_ sealed: [UInt8], nonce: [UInt8], aad: [UInt8] = []) throws -> [UInt8] {
        try decryptor.open(sealed, nonce: nonce, aad: aad)
    }

    /// Seals into `output` (room for `plaintext.count + 16` bytes, not overlapping the
    /// input); returns the number of bytes written.
    public func seal(
        _ plaintext: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: [UInt8], aad: [UInt8]
    ) throws -> Int {
        try encryptor.seal(plaintext, into: output, nonce: nonce, aad: aad)
    }

    /// Opens into `output` (room for `sealed.count - 16` bytes, not overlapping the
    /// input); returns the number of bytes written. On `.authenticationFailed` the bytes
    /// decrypted into `output` have been zeroed.
    public func open(
        _ sealed: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: [UInt8], aad: [UInt8]
    ) throws -> Int {
        try decryptor.open(sealed, into: output, nonce: nonce, aad: aad)
    }

    /// Seals with the nonce and associated data given as raw bytes, so that callers that
    /// build a nonce per segment need not allocate an array for it.
    func seal(
        _ plaintext: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws -> Int {
        try encryptor.seal(plaintext, into: output, nonce: nonce, aad: aad)
    }

    /// Opens with the nonce and associated data given as raw bytes.
    func open(
        _ sealed: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws -> Int {
        try decryptor.open(sealed, into: output, nonce: nonce, aad: aad)
    }
}

/// What every platform's `GCMContext` shares: arrays in and out, and the checks of lengths
/// and room before the primitive runs. The primitive (`GCMContext.init(key:encrypt:)`,
/// `primitiveSeal`, `primitiveOpen`) is in Primitives/.
extension GCMContext {
    // MARK: Arrays

    func seal(_ plaintext: [UInt8], nonce: [UInt8], aad: [UInt8]) throws -> [UInt8] {
        let (count, overflow) = plaintext.count.addingReportingOverflow(AESGCM.tagByteCount)
        guard !overflow else { throw CryptoError.invalidInput("plaintext too long") }
        return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            initialized = try plaintext.withUnsafeBytes { p in
                try seal(p, into: UnsafeMutableRawBufferPointer(buffer), nonce: nonce, aad: aad)
            }
        }
    }

    func open(_ sealed: [UInt8], nonce: [UInt8], aad: [UInt8]) throws -> [UInt8] {
        guard sealed.count >= AESGCM.tagByteCount else { throw Self.shorterThanTag(sealed.count) }
        return try [UInt8](unsafeUninitializedCapacity: sealed.count - AESGCM.tagByteCount) { buffer, initialized in
            initialized = try sealed.withUnsafeBytes { s in
                try open(s, into: UnsafeMutableRawBufferPointer(buffer), nonce: nonce, aad: aad)
            }
        }
    }

    func seal(
        _ plaintext: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: [UInt8], aad: [UInt8]
    ) throws -> Int {
        try nonce.withUnsafeBytes { n in
            try aad.withUnsafeBytes { a in try seal(plaintext, into: output, nonce: n, aad: a) }
        }
    }

    func open(
        _ sealed: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: [UInt8], aad: [UInt8]
    ) throws -> Int {
        try nonce.withUnsafeBytes { n in
            try aad.withUnsafeBytes { a in try open(sealed, into: output, nonce: n, aad: a) }
        }
    }

    // MARK: Buffers

    func seal(
        _ plaintext: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws -> Int {
        guard nonce.count == AESGCM.nonceByteCount else { throw CryptoError.invalidNonceLength(nonce.count) }
        let (needed, overflow) = plaintext.count.addingReportingOverflow(AESGCM.tagByteCount)
        guard !overflow else { throw CryptoError.invalidInput("plaintext too long") }
        guard output.count >= needed, let out = output.baseAddress?.assumingMemoryBound(to: UInt8.self) else {
            throw CryptoError.invalidInput("output has room for \(output.count) bytes, sealing needs \(needed)")
        }
        try primitiveSeal(plaintext, into: out, nonce: nonce, aad: aad)
        return needed
    }

    /// When the tag does not verify, whatever the primitive decrypted into `output` is
    /// zeroed before `.authenticationFailed` is thrown.
    func open(
        _ sealed: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws -> Int {
        guard nonce.count == AESGCM.nonceByteCount else { throw CryptoError.invalidNonceLength(nonce.count) }
        guard sealed.count >= AESGCM.tagByteCount else { throw Self.shorterThanTag(sealed.count) }
        let length = sealed.count - AESGCM.tagByteCount
        guard output.count >= length else {
            throw CryptoError.invalidInput("output has room for \(output.count) bytes, opening needs \(length)")
        }
        let unverified = UnsafeMutableRawBufferPointer(rebasing: output[0..<length])
        let verified: Bool
        do {
            verified = try primitiveOpen(
                UnsafeRawBufferPointer(rebasing: sealed[0..<length]), tag: UnsafeRawBufferPointer(rebasing: sealed[length...]),
                into: output.baseAddress?.assumingMemoryBound(to: UInt8.self), nonce: nonce, aad: aad)
        } catch {
            cleanse(unverified)
            throw error
        }
        guard verified else {
            cleanse(unverified)
            throw CryptoError.authenticationFailed
        }
        return length
    }

    private static func shorterThanTag(_ count: Int) -> CryptoError {
        .invalidInput("sealed text of \(count) bytes is shorter than the \(AESGCM.tagByteCount)-byte tag")
    }
}
