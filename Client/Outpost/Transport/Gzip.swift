// A small gzip (RFC 1952) writer for request bodies: DEFLATE (RFC 1951) with the fixed
// Huffman code and LZ77 over a 32 KiB window. The SDK may not link zlib (it depends on
// OutpostCore, OutpostSQLite and OutpostCrypto only), and push bodies are JSON whose keys
// repeat every change, so even the fixed code shrinks them several times.

enum Gzip {
    /// `bytes` as a gzip member.
    static func compress(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF]  // no name, no time, unknown OS
        var writer = BitWriter()
        writer.write(1, bits: 1)  // BFINAL
        writer.write(1, bits: 2)  // BTYPE 01: fixed Huffman codes
        bytes.withUnsafeBufferPointer { deflate($0, into: &writer) }
        writer.writeLiteralOrLength(256)  // end of block
        writer.flush()
        out += writer.bytes
        let crc = crc32(bytes)
        for shift in stride(from: 0, to: 32, by: 8) { out.append(UInt8(truncatingIfNeeded: crc >> UInt32(shift))) }
        let size = UInt32(truncatingIfNeeded: bytes.count)
        for shift in stride(from: 0, to: 32, by: 8) { out.append(UInt8(truncatingIfNeeded: size >> UInt32(shift))) }
        return out
    }

    private static let window = 32_768
    private static let minMatch = 3
    private static let maxMatch = 258
    private static let maxChain = 48
    private static let hashBits = 15

    private static func deflate(_ input: UnsafeBufferPointer<UInt8>, into writer: inout BitWriter) {
        let n = input.count
        var head = [Int32](repeating: -1, count: 1 << hashBits)
        var previous = [Int32](repeating: -1, count: window)
        func hash(_ i: Int) -> Int {
            let v = (UInt32(input[i]) << 16) | (UInt32(input[i + 1]) << 8) | UInt32(input[i + 2])
            return Int((v &* 2_654_435_761) >> UInt32(32 - hashBits))
        }
        func insert(_ i: Int) {
            guard i + minMatch <= n else { return }
            let h = hash(i)
            previous[i & (window - 1)] = head[h]
            head[h] = Int32(i)
        }
        var i = 0
        while i < n {
            var bestLength = 0, bestDistance = 0
            if i + minMatch <= n {
                var candidate = Int(head[hash(i)])
                var chain = maxChain
                let limit = min(maxMatch, n - i)
                while candidate >= 0, i - candidate <= window, chain > 0 {
                    if input[candidate + bestLength] == input[i + bestLength] {
                        var length = 0
                        while length < limit && input[candidate + length] == input[i + length] { length += 1 }
                        if length > bestLength {
                            bestLength = length
                            bestDistance = i - candidate
                            if length == limit { break }
                        }
                    }
                    let next = Int(previous[candidate & (window - 1)])
                    if next >= candidate { break }  // the slot was reused by a newer position
                    candidate = next
                    chain -= 1
                }
            }
            if bestLength >= minMatch {
                writer.writeMatch(length: bestLength, distance: bestDistance)
                for k in 0..<bestLength { insert(i + k) }
                i += bestLength
            } else {
                writer.writeLiteralOrLength(Int(input[i]))
                insert(i)
                i += 1
            }
        }
    }

    private static let crcTable: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    /// CRC-32 (ISO 3309), as gzip's trailer holds it.
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in bytes { c = crcTable[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }
}

/// Bits, least significant first, as DEFLATE packs them.
private struct BitWriter {
    var bytes: [UInt8] = []
    private var buffer: UInt64 = 0
    private var count = 0

    mutating func write(_ value: Int, bits: Int) {
        buffer |= UInt64(value) << UInt64(count)
        count += bits
        while count >= 8 {
            bytes.append(UInt8(truncatingIfNeeded: buffer))
            buffer >>= 8
            count -= 8
        }
    }

    /// A Huffman code: its bits go most significant first.
    mutating func writeCode(_ code: Int, bits: Int) {
        var reversed = 0
        for k in 0..<bits where code & (1 << k) != 0 { reversed |= 1 << (bits - 1 - k) }
        write(reversed, bits: bits)
    }

    /// A symbol of the fixed literal/length code (RFC 1951 section 3.2.6).
    mutating func writeLiteralOrLength(_ symbol: Int) {
        switch symbol {
        case 0...143: writeCode(0x30 + symbol, bits: 8)
        case 144...255: writeCode(0x190 + symbol - 144, bits: 9)
        case 256...279: writeCode(symbol - 256, bits: 7)
        default: writeCode(0xC0 + symbol - 280, bits: 8)
        }
    }

    private static let lengthBase = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258]
    private static let lengthExtra = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0]
    private static let distanceBase = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073,
                                       4097, 6145, 8193, 12289, 16385, 24577]
    private static let distanceExtra = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13]

    mutating func writeMatch(length: Int, distance: Int) {
        var l = Self.lengthBase.count - 1
        while Self.lengthBase[l] > length { l -= 1 }
        writeLiteralOrLength(257 + l)
        if Self.lengthExtra[l] > 0 { write(length - Self.lengthBase[l], bits: Self.lengthExtra[l]) }
        var d = Self.distanceBase.count - 1
        while Self.distanceBase[d] > distance { d -= 1 }
        writeCode(d, bits: 5)
        if Self.distanceExtra[d] > 0 { write(distance - Self.distanceBase[d], bits: Self.distanceExtra[d]) }
    }

    mutating func flush() {
        if count > 0 { bytes.append(UInt8(truncatingIfNeeded: buffer)) }
        buffer = 0
        count = 0
    }
}
