import OutpostCore

/// The random source of one store or server: SplitMix64 from a fixed seed when one is
/// configured (tests and simulations replay exactly), the system's generator otherwise.
struct Randomness: RandomNumberGenerator, Sendable {
    private var seeded: SplitMix64?
    private var system = SystemRandomNumberGenerator()

    /// A source seeded with `seed`, or the system's when `seed` is nil.
    init(seed: UInt64?) {
        seeded = seed.map(SplitMix64.init(seed:))
    }

    mutating func next() -> UInt64 {
        seeded != nil ? seeded!.next() : system.next()
    }

    /// A uniform value in `0..<1`.
    mutating func unit() -> Double {
        Double(next() >> 11) * (1.0 / Double(1 << 53))
    }
}

/// Identifiers the SDK makes.
enum Identifiers {
    private static let hex = Array("0123456789abcdef".utf8)

    /// A change id: a UUID version 7 (RFC 9562) in lower case, so ids made later by one
    /// device sort later, which makes the last-write-wins tie-break ("the greater changeId")
    /// agree with the order of edits on one device.
    static func changeID(nowMs: Int64, using rng: inout Randomness) -> String {
        var bytes = [UInt8](repeating: 0, count: 16)
        let ms = UInt64(max(0, nowMs)) & 0xFFFF_FFFF_FFFF
        for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: ms >> (40 - 8 * UInt64(i))) }
        let r1 = rng.next(), r2 = rng.next()
        for i in 6..<16 { bytes[i] = UInt8(truncatingIfNeeded: (i < 11 ? r1 : r2) >> (8 * UInt64(i % 8))) }
        bytes[6] = 0x70 | (bytes[6] & 0x0F)  // version 7
        bytes[8] = 0x80 | (bytes[8] & 0x3F)  // RFC 9562 variant
        var out: [UInt8] = []
        out.reserveCapacity(36)
        for (i, b) in bytes.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
            out.append(hex[Int(b >> 4)])
            out.append(hex[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A client id for a new installation: `device-` and 16 random hex characters.
    static func clientID(using rng: inout Randomness) -> String {
        let value = rng.next()
        var out = Array("device-".utf8)
        for shift in stride(from: 60, through: 0, by: -4) { out.append(hex[Int((value >> UInt64(shift)) & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Byte-wise comparison of strings (UTF-8), as the protocol orders names: never Unicode
/// collation, so every device picks the same winner.
func bytewiseLess(_ a: String, _ b: String) -> Bool {
    a.utf8.lexicographicallyPrecedes(b.utf8)
}

/// Milliseconds since 1970 from the system clock (the default clock of stores and of
/// `InMemorySyncServer`).
@Sendable public func systemMilliseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension Duration {
    /// The duration in whole milliseconds (rounded down).
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
