/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny seeded generator in which every seed
/// gives a full-period stream. The project's one deterministic source of random bits:
/// replayable tests and simulations, benchmark data, and the SDK's seeded mode. Never for
/// secrets (those come from `OutpostCrypto.SecureRandom`).
public struct SplitMix64: RandomNumberGenerator, Sendable {
    /// The generator's whole state.
    public var state: UInt64

    /// A generator whose stream is determined by `seed`.
    public init(seed: UInt64) {
        state = seed
    }

    /// The next 64 bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `count` bytes of the stream (each 64-bit word little-endian, the last one cut).
    public mutating func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(count + 8)
        while out.count < count {
            withUnsafeBytes(of: next().littleEndian) { out.append(contentsOf: $0) }
        }
        out.removeLast(out.count - count)
        return out
    }
}
