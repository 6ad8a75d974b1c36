/// Just enough gzip (RFC 1952) and DEFLATE (RFC 1951) for the checks, with no C library:
/// the suite depends on nothing a server under test might share a bug with.
///
/// - `gzip` writes stored (uncompressed) blocks: valid gzip that any decoder reads.
/// - `bomb` writes a tiny stream that inflates to `count` copies of one byte (fixed
///   Huffman codes: one literal, then 258-byte back-references of distance 1).
/// - `gunzip` is a complete inflater (stored, fixed and dynamic blocks) in the manner of
///   zlib's `contrib/puff`, with an output cap.
public enum GzipCodec {
    /// A gzip stream that is not valid, or inflates past the cap.
    public struct Failure: Error, CustomStringConvertible {
        /// What is wrong.
        public let description: String
        init(_ description: String) { self.description = description }
    }

    private static let header: [UInt8] = [0x1F, 0x8B, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0xFF]

    /// `data` as a gzip member of stored blocks.
    public static func gzip(_ data: [UInt8]) -> [UInt8] {
        var out = header
        var offset = 0
        repeat {
            let n = min(65535, data.count - offset)
            let final: UInt8 = offset + n == data.count ? 1 : 0
            out.append(final)  // BFINAL, BTYPE=00, then padding to the byte boundary
            out.append(UInt8(n & 0xFF))
            out.append(UInt8(n >> 8))
            out.append(UInt8(~n & 0xFF))
            out.append(UInt8((~n >> 8) & 0xFF))
            out.append(contentsOf: data[offset..<(offset + n)])
            offset += n
        } while offset < data.count
        appendTrailer(&out, crc: crc32(data), size: data.count)
        return out
    }

    /// A gzip member that inflates to `prefix` followed by `count` copies of `byte`
    /// (about 1000:1), for checking that a server stops decompressing at its limit.
    public static func bomb(prefix: [UInt8] = [], byte: UInt8, count: Int) -> [UInt8] {
        precondition(count >= 1)
        var bits = BitWriter()
        bits.write(1, count: 1)  // BFINAL
        bits.write(1, count: 2)  // BTYPE = 01, fixed Huffman
        func literal(_ value: UInt8) {
            if value < 144 {
                bits.writeCode(0x30 + UInt32(value), length: 8)
            } else {
                bits.writeCode(0x190 + UInt32(value) - 144, length: 9)
            }
        }
        for b in prefix { literal(b) }
        literal(byte)
        var remaining = count - 1
        var crc = CRC32()
        crc.update(prefix)
        crc.update(byte, repeating: count)
        while remaining >= 258 {
            bits.writeCode(0xC5, length: 8)  // length code 285: 258 bytes
            bits.writeCode(0, length: 5)  // distance code 0: distance 1
            remaining -= 258
        }
        for _ in 0..<remaining { literal(byte) }
        bits.writeCode(0, length: 7)  // end of block (256)
        var out = header
        out.append(contentsOf: bits.finish())
        appendTrailer(&out, crc: crc.value, size: prefix.count + count)
        return out
    }

    /// Inflates one gzip member; fails when it is invalid or would exceed `limit` bytes.
    public static func gunzip(_ input: [UInt8], limit: Int) throws(Failure) -> [UInt8] {
        guard input.count >= 18, input[0] == 0x1F, input[1] == 0x8B, input[2] == 8 else { throw Failure("not a gzip member") }
        let flags = input[3]
        var position = 10
        if flags & 0x04 != 0 {  // FEXTRA
            guard position + 2 <= input.count else { throw Failure("truncated") }
            position += 2 + Int(input[position]) + Int(input[position + 1]) << 8
        }
        for flag in [UInt8(0x08), 0x10] where flags & flag != 0 {  // FNAME, FCOMMENT
            while position < input.count && input[position] != 0 { position += 1 }
            position += 1
        }
        if flags & 0x02 != 0 { position += 2 }  // FHCRC
        guard position < input.count else { throw Failure("truncated header") }
        var inflater = Inflater(input: input, position: position, limit: limit)
        try inflater.run()
        let end = inflater.bytePosition
        guard end + 8 <= input.count else { throw Failure("missing gzip trailer") }
        let crc = UInt32(input[end]) | UInt32(input[end + 1]) << 8 | UInt32(input[end + 2]) << 16 | UInt32(input[end + 3]) << 24
        let size = UInt32(input[end + 4]) | UInt32(input[end + 5]) << 8 | UInt32(input[end + 6]) << 16 | UInt32(input[end + 7]) << 24
        guard crc == crc32(inflater.output) else { throw Failure("CRC-32 does not match") }
        guard size == UInt32(truncatingIfNeeded: inflater.output.count) else { throw Failure("ISIZE does not match") }
        return inflater.output
    }

    private static func appendTrailer(_ out: inout [UInt8], crc: UInt32, size: Int) {
        for shift in stride(from: 0, to: 32, by: 8) { out.append(UInt8(truncatingIfNeeded: crc >> UInt32(shift))) }
        let isize = UInt32(truncatingIfNeeded: size)
        for shift in stride(from: 0, to: 32, by: 8) { out.append(UInt8(truncatingIfNeeded: isize >> UInt32(shift))) }
    }

    /// CRC-32 (ISO 3309, as gzip uses it).
    public static func crc32(_ data: [UInt8]) -> UInt32 {
        var crc = CRC32()
        crc.update(data)
        return crc.value
    }
}

/// Running CRC-32.
struct CRC32 {
    private static let table: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }
    private var crc: UInt32 = 0xFFFF_FFFF

    mutating func update(_ data: [UInt8]) {
        for b in data { crc = Self.table[Int((crc ^ UInt32(b)) & 0xFF)] ^ (crc >> 8) }
    }

    mutating func update(_ byte: UInt8, repeating count: Int) {
        for _ in 0..<count { crc = Self.table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
    }

    var value: UInt32 { crc ^ 0xFFFF_FFFF }
}

/// DEFLATE's bit order: values least significant bit first, Huffman codes most
/// significant bit first.
private struct BitWriter {
    var bytes: [UInt8] = []
    var accumulator: UInt32 = 0
    var count: UInt32 = 0

    mutating func write(_ value: UInt32, count n: UInt32) {
        accumulator |= value << count
        count += n
        while count >= 8 {
            bytes.append(UInt8(truncatingIfNeeded: accumulator))
            accumulator >>= 8
            count -= 8
        }
    }

    mutating func writeCode(_ code: UInt32, length: UInt32) {
        var reversed: UInt32 = 0
        for i in 0..<length where code & (1 << i) != 0 { reversed |= 1 << (length - 1 - i) }
        write(reversed, count: length)
    }

    mutating func finish() -> [UInt8] {
        if count > 0 { bytes.append(UInt8(truncatingIfNeeded: accumulator)) }
        accumulator = 0
        count = 0
        return bytes
    }
}

/// A canonical Huffman code as counts per length and symbols in code order (puff.c).
private struct Huffman {
    var counts = [Int](repeating: 0, count: 16)
    var symbols: [Int]

    init(lengths: ArraySlice<Int>) throws(GzipCodec.Failure) {
        symbols = [Int](repeating: 0, count: lengths.count)
        for l in lengths { counts[l] += 1 }
        var left = 1
        for len in 1..<16 {
            left <<= 1
            left -= counts[len]
            if left < 0 { throw GzipCodec.Failure("over-subscribed Huffman code") }
        }
        var offsets = [Int](repeating: 0, count: 16)
        for len in 1..<15 { offsets[len + 1] = offsets[len] + counts[len] }
        for (symbol, l) in lengths.enumerated() where l != 0 {
            symbols[offsets[l]] = symbol
            offsets[l] += 1
        }
    }
}

private struct Inflater {
    let input: [UInt8]
    var bytePosition: Int
    var bitBuffer: UInt32 = 0
    var bitCount: UInt32 = 0
    let limit: Int
    var output: [UInt8] = []

    init(input: [UInt8], position: Int, limit: Int) {
        self.input = input
        self.bytePosition = position
        self.limit = limit
    }

    static let lengthBase = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258]
    static let lengthExtra = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0]
    static let distanceBase = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577]
    static let distanceExtra = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13]
    static let codeLengthOrder = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]

    mutating func bits(_ n: UInt32) throws(GzipCodec.Failure) -> Int {
        var value = bitBuffer
        while bitCount < n {
            guard bytePosition < input.count else { throw GzipCodec.Failure("unexpected end of deflate data") }
            value |= UInt32(input[bytePosition]) << bitCount
            bytePosition += 1
            bitCount += 8
        }
        bitBuffer = n == 32 ? 0 : value >> n
        bitCount -= n
        return Int(value & ((1 << n) - 1))
    }

    mutating func decode(_ h: Huffman) throws(GzipCodec.Failure) -> Int {
        var code = 0, first = 0, index = 0
        for len in 1..<16 {
            code |= try bits(1)
            let count = h.counts[len]
            if code - count < first { return h.symbols[index + (code - first)] }
            index += count
            first += count
            first <<= 1
            code <<= 1
        }
        throw GzipCodec.Failure("invalid Huffman code")
    }

    mutating func emit(_ byte: UInt8) throws(GzipCodec.Failure) {
        guard output.count < limit else { throw GzipCodec.Failure("inflates past \(limit) bytes") }
        output.append(byte)
    }

    mutating func run() throws(GzipCodec.Failure) {
        var last = 0
        repeat {
            last = try bits(1)
            switch try bits(2) {
            case 0: try stored()
            case 1: try codes(Self.fixedLengths, Self.fixedDistances)
            case 2: try dynamic()
            default: throw GzipCodec.Failure("invalid block type")
            }
        } while last == 0
        // The trailer starts at the next byte boundary.
        bitBuffer = 0
        bitCount = 0
    }

    mutating func stored() throws(GzipCodec.Failure) {
        bitBuffer = 0
        bitCount = 0
        guard bytePosition + 4 <= input.count else { throw GzipCodec.Failure("truncated stored block") }
        let len = Int(input[bytePosition]) | Int(input[bytePosition + 1]) << 8
        let nlen = Int(input[bytePosition + 2]) | Int(input[bytePosition + 3]) << 8
        guard len == ~nlen & 0xFFFF else { throw GzipCodec.Failure("stored block length check failed") }
        bytePosition += 4
        guard bytePosition + len <= input.count else { throw GzipCodec.Failure("truncated stored block") }
        guard output.count + len <= limit else { throw GzipCodec.Failure("inflates past \(limit) bytes") }
        output.append(contentsOf: input[bytePosition..<(bytePosition + len)])
        bytePosition += len
    }

    static let fixedLengths: Huffman = {
        var lengths = [Int](repeating: 8, count: 288)
        for i in 144..<256 { lengths[i] = 9 }
        for i in 256..<280 { lengths[i] = 7 }
        return try! Huffman(lengths: lengths[...])
    }()
    static let fixedDistances: Huffman = try! Huffman(lengths: [Int](repeating: 5, count: 30)[...])

    mutating func codes(_ lengths: Huffman, _ distances: Huffman) throws(GzipCodec.Failure) {
        while true {
            let symbol = try decode(lengths)
            if symbol < 256 {
                try emit(UInt8(symbol))
            } else if symbol == 256 {
                return
            } else {
                let s = symbol - 257
                guard s < 29 else { throw GzipCodec.Failure("invalid length symbol") }
                let length = Self.lengthBase[s] + (try bits(UInt32(Self.lengthExtra[s])))
                let d = try decode(distances)
                guard d < 30 else { throw GzipCodec.Failure("invalid distance symbol") }
                let distance = Self.distanceBase[d] + (try bits(UInt32(Self.distanceExtra[d])))
                guard distance <= output.count else { throw GzipCodec.Failure("distance too far back") }
                guard output.count + length <= limit else { throw GzipCodec.Failure("inflates past \(limit) bytes") }
                let start = output.count - distance
                for i in 0..<length { output.append(output[start + i]) }
            }
        }
    }

    mutating func dynamic() throws(GzipCodec.Failure) {
        let nlen = try bits(5) + 257
        let ndist = try bits(5) + 1
        let ncode = try bits(4) + 4
        guard nlen <= 286, ndist <= 30 else { throw GzipCodec.Failure("bad counts") }
        var codeLengths = [Int](repeating: 0, count: 19)
        for i in 0..<ncode { codeLengths[Self.codeLengthOrder[i]] = try bits(3) }
        let lencode = try Huffman(lengths: codeLengths[...])
        var lengths = [Int](repeating: 0, count: nlen + ndist)
        var index = 0
        while index < nlen + ndist {
            var symbol = try decode(lencode)
            if symbol < 16 {
                lengths[index] = symbol
                index += 1
            } else {
                var len = 0
                if symbol == 16 {
                    guard index > 0 else { throw GzipCodec.Failure("repeat with no first length") }
                    len = lengths[index - 1]
                    symbol = 3 + (try bits(2))
                } else if symbol == 17 {
                    symbol = 3 + (try bits(3))
                } else {
                    symbol = 11 + (try bits(7))
                }
                guard index + symbol <= nlen + ndist else { throw GzipCodec.Failure("too many lengths") }
                for _ in 0..<symbol {
                    lengths[index] = len
                    index += 1
                }
            }
        }
        guard lengths[256] != 0 else { throw GzipCodec.Failure("no end-of-block code") }
        try codes(try Huffman(lengths: lengths[0..<nlen]), try Huffman(lengths: lengths[nlen...]))
    }
}
