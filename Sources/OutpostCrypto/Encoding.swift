/// Lowercase hexadecimal.
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Encodes bytes as lowercase hex.
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes hex (either case); nil when the text is not hex of even length.
    public static func decode(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(utf8.count / 2)
        var i = 0
        while i < utf8.count {
            guard let hi = value(utf8[i]), let lo = value(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    /// True when `text` is exactly `length` lowercase hex characters.
    public static func isLowercaseHex(_ text: String, length: Int) -> Bool {
        let utf8 = text.utf8
        return utf8.count == length && utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }

    private static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        case 0x41...0x46: return c - 0x41 + 10
        default: return nil
        }
    }
}

/// Base64 and base64url (RFC 4648), without Foundation so the module stays small.
public enum Base64 {
    private static let standard = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let url = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Standard base64 with padding.
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        encode(Array(bytes), alphabet: standard, pad: true)
    }

    /// base64url without padding (as JWT uses, RFC 7515 section 2).
    public static func encodeURL<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        encode(Array(bytes), alphabet: url, pad: false)
    }

    /// Decodes standard base64 (padding required when the length needs it).
    public static func decode(_ text: String) -> [UInt8]? {
        decode(Array(text.utf8), urlSafe: false)
    }

    /// Decodes base64url, padded or not.
    public static func decodeURL(_ text: String) -> [UInt8]? {
        decode(Array(text.utf8), urlSafe: true)
    }

    /// Decodes base64url, padded or not, from its ASCII bytes (a part of a larger buffer,
    /// such as one segment of a compact JWS) without making a string of them.
    public static func decodeURL(bytes: ArraySlice<UInt8>) -> [UInt8]? {
        bytes.withUnsafeBufferPointer { decode($0, urlSafe: true) }
    }

    /// Decodes base64url in its one canonical form, from its ASCII bytes: no padding and
    /// zero leftover bits (what RFC 7515 section 2 makes every part of a compact JWS). Nil
    /// for anything else, so no two spellings of one part are accepted.
    public static func decodeCanonicalURL(bytes: ArraySlice<UInt8>) -> [UInt8]? {
        if bytes.contains(UInt8(ascii: "=")) { return nil }
        return decodeURL(bytes: bytes)
    }

    private static func encode(_ input: [UInt8], alphabet: [UInt8], pad: Bool) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((input.count + 2) / 3 * 4)
        var i = 0
        while i + 3 <= input.count {
            let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            out.append(alphabet[Int(n & 63)])
            i += 3
        }
        let rest = input.count - i
        if rest == 1 {
            let n = UInt32(input[i]) << 16
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            if pad { out.append(UInt8(ascii: "=")); out.append(UInt8(ascii: "=")) }
        } else if rest == 2 {
            let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            if pad { out.append(UInt8(ascii: "=")) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The value of each byte in the two alphabets (0xFF: not in it).
    private static let standardValues = values(standard)
    private static let urlValues = values(url)

    private static func values(_ alphabet: [UInt8]) -> [UInt8] {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }

    private static func decode(_ input: [UInt8], urlSafe: Bool) -> [UInt8]? {
        input.withUnsafeBufferPointer { decode($0, urlSafe: urlSafe) }
    }

    private static func decode(_ input: UnsafeBufferPointer<UInt8>, urlSafe: Bool) -> [UInt8]? {
        // Strip padding; standard base64 must be padded to a multiple of 4.
        if !urlSafe && input.count % 4 != 0 { return nil }
        var count = input.count
        var padding = 0
        while count > 0 && input[count - 1] == UInt8(ascii: "=") {
            count -= 1
            padding += 1
        }
        if padding > 2 || count % 4 == 1 { return nil }
        let table = urlSafe ? urlValues : standardValues
        let whole = count / 4 * 4
        let tail = count - whole
        return [UInt8](unsafeUninitializedCapacity: whole / 4 * 3 + max(0, tail - 1)) { out, written in
            written = 0
            let chars = input
            let ok = table.withUnsafeBufferPointer { t -> Bool in
                var o = 0
                var i = 0
                while i < whole {
                    let a = t[Int(chars[i])], b = t[Int(chars[i + 1])], c = t[Int(chars[i + 2])], d = t[Int(chars[i + 3])]
                    if (a | b | c | d) & 0xC0 != 0 { return false }
                    let n = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[o] = UInt8(truncatingIfNeeded: n >> 16)
                    out[o + 1] = UInt8(truncatingIfNeeded: n >> 8)
                    out[o + 2] = UInt8(truncatingIfNeeded: n)
                    o += 3
                    i += 4
                }
                if tail >= 2 {
                    let a = t[Int(chars[i])], b = t[Int(chars[i + 1])]
                    let c = tail == 3 ? t[Int(chars[i + 2])] : 0
                    if (a | b | c) & 0xC0 != 0 { return false }
                    let n = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                    // Non-zero leftover bits mean a non-canonical encoding.
                    if tail == 2 && n & 0xFFFF != 0 { return false }
                    if tail == 3 && n & 0xFF != 0 { return false }
                    out[o] = UInt8(truncatingIfNeeded: n >> 16)
                    o += 1
                    if tail == 3 {
                        out[o] = UInt8(truncatingIfNeeded: n >> 8)
                        o += 1
                    }
                }
                written = o
                return true
            }
            if !ok { written = 0 }
        }.nilIfInvalid(count: whole / 4 * 3 + max(0, tail - 1))
    }
}

private extension [UInt8] {
    /// Nil when the decoder wrote fewer bytes than a valid input gives (it stopped at an
    /// invalid character).
    func nilIfInvalid(count expected: Int) -> [UInt8]? {
        self.count == expected ? self : nil
    }
}
