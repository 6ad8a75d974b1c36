import CCrypto

/// SHA-256 (FIPS 180-4) through libcrypto's EVP interface.
///
/// One-shot: `SHA256.hash(bytes)`. Streaming, for files that must never be held in memory
/// whole: `var h = SHA256(); h.update(chunk); ...; let digest = h.finalize()`.
public struct SHA256: ~Copyable {
    /// Digest length in bytes.
    public static let byteCount = 32

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

    /// Feeds any contiguous bytes into the hash.
    public mutating func update<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        let handled: Void? = bytes.withContiguousStorageIfAvailable { buf in
            update(UnsafeRawBufferPointer(buf))
        }
        if handled == nil {
            Array(bytes).withUnsafeBytes { update($0) }
        }
    }

    /// Finishes the hash and returns the 32-byte digest. The value is consumed.
    public consuming func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.byteCount)
        var length: UInt32 = 0
        let ok = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
        guard ok == 1, length == UInt32(Self.byteCount) else { fatalError("EVP_DigestFinal_ex failed") }
        return out
    }

    /// The SHA-256 digest of `bytes`.
    public static func hash<Bytes: Sequence>(_ bytes: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalize()
    }

    /// The SHA-256 digest of `bytes` as 64 lowercase hex characters.
    public static func hex<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        Hex.encode(hash(bytes))
    }
}
