#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Errors of the primitives.
public enum CryptoError: Error, Equatable, CustomStringConvertible {
    /// The GCM tag did not verify: the sealed bytes were tampered with, or the key, the
    /// associated data or the nonce is not the one they were sealed with.
    case authenticationFailed
    /// A key of this many bytes was given where another length is required.
    case invalidKeyLength(Int)
    /// A nonce of this many bytes was given where another length is required.
    case invalidNonceLength(Int)
    /// The input cannot be processed as given (sealed text shorter than a tag, an output
    /// buffer too small, KDF parameters out of range, ...).
    case invalidInput(String)
    /// A platform library call failed where it should not have (libcrypto on Linux,
    /// CryptoKit or CommonCrypto on Apple platforms); the text names the function and
    /// carries the library's own error text when it left one.
    case libraryFailure(String)

    public var description: String {
        switch self {
        case .authenticationFailed: return "authentication failed"
        case .invalidKeyLength(let n): return "invalid key length: \(n) bytes"
        case .invalidNonceLength(let n): return "invalid nonce length: \(n) bytes"
        case .invalidInput(let why): return "invalid input: \(why)"
        case .libraryFailure(let what): return "crypto library failure: \(what)"
        }
    }
}

/// Overwrites `buffer` with zeros, for key material and unverified plaintext that must not
/// outlive its use. The same code on every platform: a `memset` in a function that is
/// never inlined and never optimized (`@_optimize(none)`), so no optimizer sees what it
/// writes, and none can drop the stores as dead because the buffer is freed or never read
/// after it. (C's `memset` rather than Swift's `initializeMemory`, which unoptimized code
/// would run a byte at a time: scrypt zeroes its whole table, 128 MiB.)
@inline(never) @_optimize(none)
package func cleanse(_ buffer: UnsafeMutableRawBufferPointer) {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return }
    _ = memset(base, 0, buffer.count)
}

/// Overwrites the bytes of `array` with zeros. Best effort: Swift may already have made
/// copies of the array's storage that this cannot reach.
package func cleanse(_ array: inout [UInt8]) {
    array.withUnsafeMutableBytes { cleanse($0) }
}

/// Compares two byte strings in time that depends only on their lengths, never on where
/// they first differ (the defence against timing attacks on signatures and tags): every
/// byte is read, and the differences are OR-ed together before the one comparison.
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    return a.withUnsafeBufferPointer { pa in
        b.withUnsafeBufferPointer { pb in
            var difference: UInt8 = 0
            for i in 0..<pa.count { difference |= pa[i] ^ pb[i] }
            return difference == 0
        }
    }
}
