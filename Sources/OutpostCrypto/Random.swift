import CCrypto

/// Cryptographically secure random bytes from libcrypto's CSPRNG (seeded from the kernel).
public enum SecureRandom {
    /// `count` random bytes.
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard count > 0 else { return out }
        let rc = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) }
        // RAND_bytes fails only when the generator cannot be seeded; continuing with
        // predictable bytes would be worse than stopping.
        precondition(rc == 1, "RAND_bytes failed: the random generator is not seeded")
        return out
    }

    /// A random unsigned 64-bit integer.
    public static func uint64() -> UInt64 {
        bytes(8).reduce(0) { ($0 << 8) | UInt64($1) }
    }
}

/// A `RandomNumberGenerator` over `SecureRandom`, for `Int.random(in:using:)` and the like.
public struct SecureRandomGenerator: RandomNumberGenerator {
    public init() {}
    public mutating func next() -> UInt64 { SecureRandom.uint64() }
}
