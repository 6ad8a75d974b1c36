// The primitives on Apple platforms: AES-256-GCM and SHA-256 from CryptoKit,
// PBKDF2-HMAC-SHA256 from CommonCrypto; the counterpart of Primitives/Linux.swift, with the
// same declarations. Not compiled by this repository's Linux builds and CI: checked by
// scripts/check-apple.sh on a Mac (docs/client.md, "What is verified where").
#if !os(Linux) && canImport(CryptoKit) && canImport(CommonCrypto)
import CommonCrypto
import CryptoKit
import Foundation

// MARK: AES-256-GCM

/// A CryptoKit key for AES-256-GCM; CryptoKit keeps no context between calls, so one
/// value serves both directions.
struct GCMContext: ~Copyable {
    private let key: SymmetricKey

    init(key: [UInt8], encrypt: Bool) throws {
        guard key.count == AESGCM.keyByteCount else { throw CryptoError.invalidKeyLength(key.count) }
        self.key = SymmetricKey(data: key)
    }

    /// Writes ciphertext || tag (`plaintext.count + 16` bytes) to `out`; the lengths and
    /// the room were checked by the caller (AESGCM.swift).
    func primitiveSeal(
        _ plaintext: UnsafeRawBufferPointer, into out: UnsafeMutablePointer<UInt8>,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws {
        let box: AES.GCM.SealedBox
        do {
            box = try AES.GCM.seal(plaintext, using: key, nonce: AES.GCM.Nonce(data: nonce), authenticating: aad)
        } catch {
            throw CryptoError.libraryFailure("AES.GCM.seal failed: \(error)")
        }
        guard box.ciphertext.count == plaintext.count, box.tag.count == AESGCM.tagByteCount else {
            throw CryptoError.libraryFailure("AES.GCM.seal returned \(box.ciphertext.count) + \(box.tag.count) bytes for \(plaintext.count)")
        }
        box.ciphertext.copyBytes(to: out, count: plaintext.count)
        box.tag.copyBytes(to: out + plaintext.count, count: AESGCM.tagByteCount)
    }

    /// Decrypts `ciphertext` into `out` (room for all of it; nil when it is empty) and
    /// returns whether `tag` verifies. CryptoKit returns plaintext only once the tag has
    /// verified, so nothing is written to `out` when it does not.
    func primitiveOpen(
        _ ciphertext: UnsafeRawBufferPointer, tag: UnsafeRawBufferPointer, into out: UnsafeMutablePointer<UInt8>?,
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer
    ) throws -> Bool {
        let box: AES.GCM.SealedBox
        do {
            box = try AES.GCM.SealedBox(nonce: AES.GCM.Nonce(data: nonce), ciphertext: ciphertext, tag: tag)
        } catch {
            throw CryptoError.libraryFailure("AES.GCM.SealedBox failed: \(error)")
        }
        var plaintext: Data
        do {
            plaintext = try AES.GCM.open(box, using: key, authenticating: aad)
        } catch CryptoKitError.authenticationFailure {
            return false
        } catch {
            throw CryptoError.libraryFailure("AES.GCM.open failed: \(error)")
        }
        guard plaintext.count == ciphertext.count else {
            throw CryptoError.libraryFailure("AES.GCM.open returned \(plaintext.count) bytes for \(ciphertext.count)")
        }
        if let out { plaintext.copyBytes(to: out, count: plaintext.count) }
        // CryptoKit's copy of the plaintext is not kept past this call.
        plaintext.withUnsafeMutableBytes { cleanse($0) }
        return true
    }
}

// MARK: SHA-256

/// SHA-256 through CryptoKit; SHA256.swift has what is built on it.
public struct SHA256: ~Copyable {
    private var hasher = CryptoKit.SHA256()

    /// Starts a new hash.
    public init() {}

    /// Feeds bytes into the hash.
    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        hasher.update(bufferPointer: buffer)
    }

    /// Finishes the hash and returns the 32-byte digest. The value is consumed.
    public consuming func finalize() -> [UInt8] {
        Array(hasher.finalize())
    }
}

// MARK: PBKDF2-HMAC-SHA256

enum PBKDF2Primitive {
    /// PBKDF2 (RFC 8018) with HMAC-SHA256 through CommonCrypto's `CCKeyDerivationPBKDF`:
    /// fills `out` after `iterations` rounds. The caller (KDF.swift) has checked that every
    /// length and the count fit in 32 bits.
    static func derive(password: UnsafeRawBufferPointer, salt: UnsafeRawBufferPointer, iterations: Int, into out: UnsafeMutableRawBufferPointer) throws {
        // CommonCrypto wants valid pointers even for empty inputs; an empty array may have
        // none, so those point at a zero byte (never read, since their length is 0).
        var zero: UInt8 = 0
        let status = withUnsafePointer(to: &zero) { zeroPointer in
            CCKeyDerivationPBKDF(
                CCPBKDFAlgorithm(kCCPBKDF2),
                (password.baseAddress ?? UnsafeRawPointer(zeroPointer)).assumingMemoryBound(to: CChar.self), password.count,
                (salt.baseAddress ?? UnsafeRawPointer(zeroPointer)).assumingMemoryBound(to: UInt8.self), salt.count,
                CCPseudoRandomAlgorithm(kCCPRFHmacAlgSHA256), UInt32(iterations),
                out.baseAddress?.assumingMemoryBound(to: UInt8.self), out.count)
        }
        guard Int(status) == Int(kCCSuccess) else {
            throw CryptoError.libraryFailure("CCKeyDerivationPBKDF failed with status \(status)")
        }
    }
}
#endif

#if !os(Linux) && !(canImport(CryptoKit) && canImport(CommonCrypto))
#error("OutpostCrypto's primitives come from libcrypto (Linux) or from CryptoKit and CommonCrypto (Apple platforms)")
#endif
