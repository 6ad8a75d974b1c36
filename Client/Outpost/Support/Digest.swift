// The SDK's one use of a cryptographic hash sits behind this seam, so an Apple build can
// use CryptoKit where libcrypto is absent (`#if canImport(CryptoKit)`); only the Linux
// branch is built and tested here. The package links OutpostCrypto on every platform for
// now; an Apple build would make that dependency conditional in Package.swift.
#if canImport(CryptoKit)
import CryptoKit
#else
import OutpostCrypto
#endif

/// SHA-256 for the SDK (change fingerprints in `InMemorySyncServer`).
enum Digest {
    /// The 32-byte SHA-256 digest of `bytes`.
    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        #if canImport(CryptoKit)
        return Array(CryptoKit.SHA256.hash(data: bytes))
        #else
        return OutpostCrypto.SHA256.hash(bytes)
        #endif
    }
}
