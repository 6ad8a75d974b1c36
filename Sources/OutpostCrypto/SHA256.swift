/// SHA-256 (FIPS 180-4). The hash itself is a platform primitive (`SHA256` is declared in
/// Primitives/Linux.swift over libcrypto's EVP and in Primitives/Apple.swift over
/// CryptoKit); what is built on it is here, the same on every platform.
///
/// One-shot: `SHA256.hash(bytes)`. Streaming, for files that must never be held in memory
/// whole: `var h = SHA256(); h.update(chunk); ...; let digest = h.finalize()`.
extension SHA256 {
    /// Digest length in bytes.
    public static var byteCount: Int { 32 }

    /// Feeds any contiguous bytes into the hash.
    public mutating func update<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        let handled: Void? = bytes.withContiguousStorageIfAvailable { buf in
            update(UnsafeRawBufferPointer(buf))
        }
        if handled == nil {
            Array(bytes).withUnsafeBytes { update($0) }
        }
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
