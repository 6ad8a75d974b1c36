import CCrypto

/// AES-256-GCM (NIST SP 800-38D) through libcrypto's EVP interface (`EVP_aes_256_gcm`),
/// with 96-bit nonces and 128-bit tags.
///
/// Sealed bytes are the ciphertext followed by the tag, so a sealed value is always
/// `plaintext.count + 16` bytes. A nonce must never be used twice under one key: GCM
/// loses both confidentiality and authenticity when it is.
///
/// Each call here sets up a fresh EVP context and key schedule; for many small records
/// under one key, `AESGCMKey` keeps the context and sets only the nonce per call.
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

/// One key's AES-256-GCM contexts, reused across calls: the key schedule is computed once
/// in `init`, and each call sets only the nonce. For many small records (a few hundred
/// bytes each) this avoids an `EVP_CIPHER_CTX_new` and a key expansion per record.
///
/// Not thread-safe, and deliberately not `Sendable`: a call mutates the EVP context, so
/// one instance belongs to one thread, task or actor (an actor may keep it as a stored
/// property). The contexts, and the key schedule in them, are freed and cleansed by
/// libcrypto when the instance is deinitialized.
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

/// One EVP_CIPHER_CTX set up for AES-256-GCM in one direction, with the IV length set to
/// 12 bytes and the key installed; each operation installs only its nonce.
struct GCMContext: ~Copyable {
    private let ctx: OpaquePointer
    private let encrypts: Bool

    /// libcrypto takes lengths as `int`; longer inputs are fed in pieces of this size.
    private static let maxPiece = 1 << 30

    init(key: [UInt8], encrypt: Bool) throws {
        guard key.count == AESGCM.keyByteCount else { throw CryptoError.invalidKeyLength(key.count) }
        guard let ctx = EVP_CIPHER_CTX_new() else { throw CryptoError.library("EVP_CIPHER_CTX_new") }
        let initName = encrypt ? "EVP_EncryptInit_ex" : "EVP_DecryptInit_ex"
        // The cipher first, then the IV length (the default is 12 already, but it is set
        // here so that nothing depends on the default), then the key without an IV.
        guard Self.initialize(ctx, encrypt: encrypt, cipher: EVP_aes_256_gcm(), key: nil, iv: nil) else {
            EVP_CIPHER_CTX_free(ctx)
            throw CryptoError.library(initName)
        }
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, Int32(AESGCM.nonceByteCount), nil) == 1 else {
            EVP_CIPHER_CTX_free(ctx)
            throw CryptoError.library("EVP_CIPHER_CTX_ctrl(EVP_CTRL_GCM_SET_IVLEN)")
        }
        let keyed = key.withUnsafeBufferPointer {
            Self.initialize(ctx, encrypt: encrypt, cipher: nil, key: $0.baseAddress, iv: nil)
        }
        guard keyed else {
            EVP_CIPHER_CTX_free(ctx)
            throw CryptoError.library(initName)
        }
        self.ctx = ctx
        self.encrypts = encrypt
    }

    deinit {
        EVP_CIPHER_CTX_free(ctx)
    }

    private static func initialize(
        _ ctx: OpaquePointer, encrypt: Bool, cipher: OpaquePointer?,
        key: UnsafePointer<UInt8>?, iv: UnsafePointer<UInt8>?
    ) -> Bool {
        encrypt
            ? EVP_EncryptInit_ex(ctx, cipher, nil, key, iv) == 1
            : EVP_DecryptInit_ex(ctx, cipher, nil, key, iv) == 1
    }

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
        precondition(encrypts, "GCMContext: seal on a decryption context")
        guard nonce.count == AESGCM.nonceByteCount else { throw CryptoError.invalidNonceLength(nonce.count) }
        let (needed, overflow) = plaintext.count.addingReportingOverflow(AESGCM.tagByteCount)
        guard !overflow else { throw CryptoError.invalidInput("plaintext too long") }
        guard output.count >= needed, let out = output.baseAddress?.assumingMemoryBound(to: UInt8.self) else {
            throw CryptoError.invalidInput("output has room for \(output.count) bytes, sealing needs \(needed)")
        }
        guard EVP_EncryptInit_ex(ctx, nil, nil, nil, nonce.baseAddress?.assumingMemoryBound(to: UInt8.self)) == 1 else {
            throw CryptoError.library("EVP_EncryptInit_ex")
        }
        try feed(aad, into: nil, function: "EVP_EncryptUpdate")
        try feed(plaintext, into: out, function: "EVP_EncryptUpdate")
        // GCM is a stream mode in libcrypto: Update has written every byte, Final writes none.
        var finalLength: Int32 = 0
        guard EVP_EncryptFinal_ex(ctx, out + plaintext.count, &finalLength) == 1, finalLength == 0 else {
            throw CryptoError.library("EVP_EncryptFinal_ex")
        }
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, Int32(AESGCM.tagByteCount), out + plaintext.count) == 1 else {
            throw CryptoError.library("EVP_CIPHER_CTX_ctrl(EVP_CTRL_GCM_GET_TAG)")
        }
        return needed
    }

    func open(
        _ sealed: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws -> Int {
        precondition(!encrypts, "GCMContext: open on an encryption context")
        guard nonce.count == AESGCM.nonceByteCount else { throw CryptoError.invalidNonceLength(nonce.count) }
        guard sealed.count >= AESGCM.tagByteCount, let sealedBase = sealed.baseAddress else {
            throw Self.shorterThanTag(sealed.count)
        }
        let length = sealed.count - AESGCM.tagByteCount
        guard output.count >= length else {
            throw CryptoError.invalidInput("output has room for \(output.count) bytes, opening needs \(length)")
        }
        let out = output.baseAddress?.assumingMemoryBound(to: UInt8.self)
        guard EVP_DecryptInit_ex(ctx, nil, nil, nil, nonce.baseAddress?.assumingMemoryBound(to: UInt8.self)) == 1 else {
            throw CryptoError.library("EVP_DecryptInit_ex")
        }
        let tag = UnsafeMutableRawPointer(mutating: sealedBase + length)
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, Int32(AESGCM.tagByteCount), tag) == 1 else {
            throw CryptoError.library("EVP_CIPHER_CTX_ctrl(EVP_CTRL_GCM_SET_TAG)")
        }
        let unverified = UnsafeMutableRawBufferPointer(rebasing: output[0..<length])
        do {
            try feed(aad, into: nil, function: "EVP_DecryptUpdate")
            try feed(UnsafeRawBufferPointer(rebasing: sealed[0..<length]), into: out, function: "EVP_DecryptUpdate")
        } catch {
            cleanse(unverified)
            throw error
        }
        // Final compares the tag (in constant time) and writes no bytes; it is given a
        // scratch buffer because `output` may be empty.
        let verified = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: AESGCM.tagByteCount) { scratch in
            var finalLength: Int32 = 0
            return EVP_DecryptFinal_ex(ctx, scratch.baseAddress, &finalLength) == 1 && finalLength == 0
        }
        guard verified else {
            cleanse(unverified)
            ERR_clear_error()
            throw CryptoError.authenticationFailed
        }
        return length
    }

    /// Passes `input` through the context: as associated data when `out` is nil, else as
    /// text whose result goes to `out` (which must have room for `input.count` bytes).
    private func feed(_ input: UnsafeRawBufferPointer, into out: UnsafeMutablePointer<UInt8>?, function: String) throws {
        guard let base = input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count > 0 else { return }
        var offset = 0
        while offset < input.count {
            let piece = min(Self.maxPiece, input.count - offset)
            var written: Int32 = 0
            let ok = encrypts
                ? EVP_EncryptUpdate(ctx, out.map { $0 + offset }, &written, base + offset, Int32(piece))
                : EVP_DecryptUpdate(ctx, out.map { $0 + offset }, &written, base + offset, Int32(piece))
            guard ok == 1, out == nil || Int(written) == piece else { throw CryptoError.library(function) }
            offset += piece
        }
    }

    private static func shorterThanTag(_ count: Int) -> CryptoError {
        .invalidInput("sealed text of \(count) bytes is shorter than the \(AESGCM.tagByteCount)-byte tag")
    }
}
