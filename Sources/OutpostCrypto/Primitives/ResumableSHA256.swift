// SHA-256 whose state in progress can be saved and restored, on libcrypto (Linux only).
// The server hashes each upload's bytes as they arrive and keeps the state between
// requests and across restarts, so finalize reads nothing back (docs/media.md, "Hashing").
// CryptoKit has no such state to export, and the SDK has no use for it.
#if os(Linux)
import OutpostCCrypto

/// SHA-256 (FIPS 180-4) of a stream that can stop and go on later: `savedState` is the
/// hash's whole state (its eight words, the length so far and the bytes of an unfinished
/// block), from which `init?(savedState:)` goes on exactly where it stopped.
///
/// ```swift
/// var h = ResumableSHA256()
/// h.update(firstPart)
/// let saved = h.savedState                   // kept somewhere durable
/// var later = ResumableSHA256(savedState: saved)!
/// later.update(secondPart)
/// later.digest() == SHA256.hash(firstPart + secondPart)
/// ```
public struct ResumableSHA256: Sendable {
    private var context = SHA256_CTX()

    /// Starts a new hash.
    public init() {
        guard outpost_sha256_init(&context) == 1 else { fatalError("SHA256_Init failed") }
    }

    /// Bytes hashed so far.
    public var byteCount: Int64 {
        Int64((UInt64(context.Nh) << 32 | UInt64(context.Nl)) / 8)
    }

    /// Feeds bytes into the hash.
    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        guard buffer.count > 0, let base = buffer.baseAddress else { return }
        guard outpost_sha256_update(&context, base, buffer.count) == 1 else { fatalError("SHA256_Update failed") }
    }

    /// Feeds any contiguous bytes into the hash.
    public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest of everything fed so far (32 bytes); the hash itself goes on unchanged.
    public func digest() -> [UInt8] {
        var copy = context
        var out = [UInt8](repeating: 0, count: SHA256.byteCount)
        guard out.withUnsafeMutableBufferPointer({ outpost_sha256_final($0.baseAddress, &copy) }) == 1 else { fatalError("SHA256_Final failed") }
        return out
    }

    // MARK: Saved state

    /// The format's version, the first byte of `savedState`.
    private static let version: UInt8 = 1

    /// The state, portable across machines: the version, the eight words, the length in
    /// bits (low and high words) and the unfinished block's length, each little-endian,
    /// then the unfinished block's bytes (fewer than 64).
    public var savedState: [UInt8] {
        var out: [UInt8] = [Self.version]
        func put(_ word: UInt32) { withUnsafeBytes(of: word.littleEndian) { out.append(contentsOf: $0) } }
        withUnsafeBytes(of: context.h) { raw in
            for i in 0..<8 { put(raw.load(fromByteOffset: i * 4, as: UInt32.self)) }
        }
        put(context.Nl)
        put(context.Nh)
        put(UInt32(context.num))
        withUnsafeBytes(of: context.data) { out.append(contentsOf: $0.prefix(Int(context.num))) }
        return out
    }

    /// The hash `savedState` describes; nil when the bytes are not such a state (another
    /// version, a wrong length, or an unfinished block that disagrees with the length).
    public init?(savedState bytes: [UInt8]) {
        let fixed = 1 + 11 * 4
        guard bytes.count >= fixed, bytes[0] == Self.version else { return nil }
        func word(_ i: Int) -> UInt32 {
            let at = 1 + i * 4
            return UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
        }
        let num = Int(word(10))
        let bits = UInt64(word(9)) << 32 | UInt64(word(8))
        guard num < 64, bytes.count == fixed + num, bits % 8 == 0, Int((bits / 8) % 64) == num else { return nil }
        self.init()
        withUnsafeMutableBytes(of: &context.h) { raw in
            for i in 0..<8 { raw.storeBytes(of: word(i), toByteOffset: i * 4, as: UInt32.self) }
        }
        context.Nl = word(8)
        context.Nh = word(9)
        context.num = UInt32(num)
        withUnsafeMutableBytes(of: &context.data) { raw in
            for i in 0..<num { raw[i] = bytes[fixed + i] }
        }
    }
}
#endif
