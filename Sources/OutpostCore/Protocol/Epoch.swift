/// The name of a server's history (docs/protocol.md section 1): `^[A-Za-z0-9]{1,64}$`.
///
/// Order: a longer epoch is later; of two as long, the greater byte by byte is later.
/// The server makes epochs that sort after every earlier one: 26 characters, the time in
/// milliseconds first (10 characters of Crockford base32, upper case), then 80 random
/// bits (16 characters), like a ULID.
public struct Epoch: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The epoch's text.
    public let rawValue: String

    /// Validates `rawValue`; nil when it is not an epoch.
    public init?(_ rawValue: String) {
        let utf8 = rawValue.utf8
        guard !utf8.isEmpty, utf8.count <= 64, utf8.allSatisfy(Names.isAlphanumeric) else { return nil }
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    /// True when `lhs` is an earlier epoch than `rhs`, by the protocol's order.
    public static func < (lhs: Epoch, rhs: Epoch) -> Bool {
        let a = lhs.rawValue.utf8, b = rhs.rawValue.utf8
        if a.count != b.count { return a.count < b.count }
        return a.lexicographicallyPrecedes(b)
    }

    /// Crockford's base32 alphabet; ascending in ASCII, so text order is numeric order.
    static let crockford = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)

    /// Makes a new epoch from the time `nowMs` and random bits, guaranteed to sort after
    /// `previous` even when the clock went backwards.
    public static func generate<R: RandomNumberGenerator>(nowMs: Int64, after previous: Epoch?, using rng: inout R) -> Epoch {
        var bytes = [UInt8](repeating: 0, count: 26)
        var time = UInt64(max(0, nowMs))
        for i in stride(from: 9, through: 0, by: -1) {
            bytes[i] = crockford[Int(time & 31)]
            time >>= 5
        }
        for i in 10..<26 {
            bytes[i] = crockford[Int(rng.next() & 31)]
        }
        let candidate = Epoch(String(decoding: bytes, as: UTF8.self))!
        guard let previous, candidate <= previous else { return candidate }
        return successor(of: previous, using: &rng)
    }

    /// An epoch that sorts after `previous`: the same length with a greater value when
    /// possible, else one character longer.
    static func successor<R: RandomNumberGenerator>(of previous: Epoch, using rng: inout R) -> Epoch {
        var bytes = Array(previous.rawValue.utf8)
        if bytes.count < 64 {
            bytes.append(crockford[Int(rng.next() & 31)])
            return Epoch(String(decoding: bytes, as: UTF8.self))!
        }
        // 64 characters already: increment in place over the alphanumeric alphabet.
        let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
        var i = bytes.count - 1
        while i >= 0 {
            let index = alphabet.firstIndex(of: bytes[i])!
            if index + 1 < alphabet.count {
                bytes[i] = alphabet[index + 1]
                return Epoch(String(decoding: bytes, as: UTF8.self))!
            }
            bytes[i] = alphabet[0]
            i -= 1
        }
        preconditionFailure("no epoch sorts after \(previous)")
    }
}
