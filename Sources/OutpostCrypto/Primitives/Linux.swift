// The primitives on Linux, through libcrypto's EVP interface: AES-256-GCM, SHA-256 and
// PBKDF2-HMAC-SHA256. Everything else in OutpostCrypto is Swift that runs the same on every
// platform; Primitives/Apple.swift is this file's counterpart over CryptoKit and
// CommonCrypto. Package.swift links libcrypto on Linux only, so this module exists there alone.
#if os(Linux)
import OutpostCCrypto

// MARK: AES-256-GCM

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

    /// Writes ciphertext || tag (`plaintext.count + 16` bytes) to `out`; the lengths and
    /// the room were checked by the caller (AESGCM.swift).
    func primitiveSeal(
        _ plaintext: UnsafeRawBufferPointer, into out: UnsafeMutablePointer<UInt8>,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws {
        precondition(encrypts, "GCMContext: seal on a decryption context")
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
    }

    /// Decrypts `ciphertext` into `out` (room for all of it; nil when it is empty) and
    /// returns whether `tag` verifies. The bytes are written before the tag is checked:
    /// the caller zeroes them when it does not verify.
    func primitiveOpen(
        _ ciphertext: UnsafeRawBufferPointer, tag: UnsafeRawBufferPointer, into out: UnsafeMutablePointer<UInt8>?,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws -> Bool {
        precondition(!encrypts, "GCMContext: open on an encryption context")
        guard EVP_DecryptInit_ex(ctx, nil, nil, nil, nonce.baseAddress?.assumingMemoryBound(to: UInt8.self)) == 1 else {
            throw CryptoError.library("EVP_DecryptInit_ex")
        }
        guard let tagBase = tag.baseAddress,
              EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, Int32(tag.count), UnsafeMutableRawPointer(mutating: tagBase)) == 1 else {
            throw CryptoError.library("EVP_CIPHER_CTX_ctrl(EVP_CTRL_GCM_SET_TAG)")
        }
        try feed(aad, into: nil, function: "EVP_DecryptUpdate")
        try feed(ciphertext, into: out, function: "EVP_DecryptUpdate")
        // Final compares the tag (in constant time) and writes no bytes; it is given a
        // scratch buffer because `out` may be nil.
        let verified = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: AESGCM.tagByteCount) { scratch in
            var finalLength: Int32 = 0
            return EVP_DecryptFinal_ex(ctx, scratch.baseAddress, &finalLength) == 1 && finalLength == 0
        }
        if !verified { ERR_clear_error() }
        return verified
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
}

// MARK: SHA-256

/// SHA-256 through an EVP_MD_CTX; SHA256.swift has what is built on it.
public struct SHA256: ~Copyable {
    private let context: OpaquePointer

    /// Starts a new hash.
    public init() {
        guard let ctx = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed: out of memory") }
        guard EVP_DigestInit_ex(ctx, EVP_sha256(), nil) == 1 else {
            EVP_MD_CTX_free(ctx)
            fatalError("EVP_DigestInit_ex(sha256) failed")
        }
        self.context = ctx
    }

    deinit {
        EVP_MD_CTX_free(context)
    }

    /// Feeds bytes into the hash.
    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        guard buffer.count > 0, let base = buffer.baseAddress else { return }
        guard EVP_DigestUpdate(context, base, buffer.count) == 1 else { fatalError("EVP_DigestUpdate failed") }
    }

    /// Finishes the hash and returns the 32-byte digest. The value is consumed.
    public consuming func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.byteCount)
        var length: UInt32 = 0
        let ok = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
        guard ok == 1, length == UInt32(Self.byteCount) else { fatalError("EVP_DigestFinal_ex failed") }
        return out
    }
}

// MARK: PBKDF2-HMAC-SHA256

enum PBKDF2Primitive {
    /// PBKDF2 (RFC 8018) with HMAC-SHA256 through `PKCS5_PBKDF2_HMAC` and `EVP_sha256()`:
    /// fills `out` after `iterations` rounds. The caller (KDF.swift) has checked that every
    /// length and the count fit in an `Int32`.
    static func derive(password: UnsafeRawBufferPointer, salt: UnsafeRawBufferPointer, iterations: Int, into out: UnsafeMutableRawBufferPointer) throws {
        // libcrypto wants valid pointers even for empty inputs; an empty array may have none.
        let empty = UnsafeRawPointer(bitPattern: 1)!
        let ok = PKCS5_PBKDF2_HMAC(
            (password.baseAddress ?? empty).assumingMemoryBound(to: CChar.self), Int32(password.count),
            (salt.baseAddress ?? empty).assumingMemoryBound(to: UInt8.self), Int32(salt.count),
            Int32(iterations), EVP_sha256(), Int32(out.count), out.baseAddress?.assumingMemoryBound(to: UInt8.self))
        guard ok == 1 else { throw CryptoError.library("PKCS5_PBKDF2_HMAC") }
    }
}

// MARK: Errors

extension CryptoError {
    /// A `.libraryFailure` naming `function`, with the oldest error libcrypto queued on this
    /// thread; the queue is then cleared so that a later failure does not report this one.
    /// OutpostSignatures reports its libcrypto failures through it too.
    package static func library(_ function: String) -> CryptoError {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0 else { return .libraryFailure("\(function) failed") }
        var text = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &text, text.count)
        let message = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return .libraryFailure("\(function) failed: \(message)")
    }
}
#endif
