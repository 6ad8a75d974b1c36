/// Cryptographically secure random bytes from the standard library's
/// `SystemRandomNumberGenerator`: the kernel's generator on every platform (`getrandom(2)`
/// on Linux, `arc4random_buf(3)` on Apple platforms), with no library state of its own to
/// seed. The same Swift everywhere.
public enum SecureRandom {
    /// `count` random bytes.
    public static func bytes(_ count: Int) -> [UInt8] {
        guard count > 0 else { return [] }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var generator = SystemRandomNumberGenerator()
            var offset = 0
            while offset < count {
                // Eight bytes a draw, in little-endian order (any fixed order would do).
                var word = generator.next()
                let take = min(8, count - offset)
                for i in 0..<take {
                    buffer[offset + i] = UInt8(truncatingIfNeeded: word)
                    word >>= 8
                }
                offset += take
            }
            initialized = count
        }
    }

    /// A random unsigned 64-bit integer.
    public static func uint64() -> UInt64 {
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }
}

/// A `RandomNumberGenerator` over `SecureRandom`, for `Int.random(in:using:)` and the like.
public struct SecureRandomGenerator: RandomNumberGenerator {
    public init() {}
    public mutating func next() -> UInt64 { SecureRandom.uint64() }
}
