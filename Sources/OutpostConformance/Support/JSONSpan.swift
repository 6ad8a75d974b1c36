/// Finds where a top-level member's value lies in a JSON object's bytes, so a check can
/// measure exactly what the server sent (docs/protocol.md section 5 counts a page's budget in
/// bytes of the encoded `changes` array). Assumes the text is valid JSON (parse it first).
enum JSONSpan {
    /// The byte range of the value of `key` in the top-level object `bytes`, or nil.
    static func member(_ key: String, in bytes: [UInt8]) -> Range<Int>? {
        var i = skipSpace(bytes, 0)
        guard i < bytes.count, bytes[i] == UInt8(ascii: "{") else { return nil }
        i += 1
        while true {
            i = skipSpace(bytes, i)
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { return nil }
            let keyStart = i
            guard let keyEnd = skipValue(bytes, i) else { return nil }
            let name = (try? JSONParserBridge.string(Array(bytes[keyStart..<keyEnd]))) ?? nil
            i = skipSpace(bytes, keyEnd)
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
            i = skipSpace(bytes, i + 1)
            let valueStart = i
            guard let valueEnd = skipValue(bytes, i) else { return nil }
            if name == key { return valueStart..<valueEnd }
            i = skipSpace(bytes, valueEnd)
            guard i < bytes.count else { return nil }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            return nil
        }
    }

    /// The byte ranges of the elements of the array at `range`.
    static func elements(of range: Range<Int>, in bytes: [UInt8]) -> [Range<Int>] {
        var out: [Range<Int>] = []
        var i = skipSpace(bytes, range.lowerBound)
        guard i < range.upperBound, bytes[i] == UInt8(ascii: "[") else { return [] }
        i = skipSpace(bytes, i + 1)
        if i < range.upperBound, bytes[i] == UInt8(ascii: "]") { return [] }
        while i < range.upperBound {
            guard let end = skipValue(bytes, i) else { return out }
            out.append(i..<end)
            i = skipSpace(bytes, end)
            guard i < range.upperBound, bytes[i] == UInt8(ascii: ",") else { return out }
            i = skipSpace(bytes, i + 1)
        }
        return out
    }

    static func skipSpace(_ b: [UInt8], _ start: Int) -> Int {
        var i = start
        while i < b.count, b[i] == 0x20 || b[i] == 0x09 || b[i] == 0x0A || b[i] == 0x0D { i += 1 }
        return i
    }

    /// The index just after the value starting at `start`.
    static func skipValue(_ b: [UInt8], _ start: Int) -> Int? {
        guard start < b.count else { return nil }
        switch b[start] {
        case UInt8(ascii: "\""):
            var i = start + 1
            while i < b.count {
                if b[i] == UInt8(ascii: "\\") { i += 2; continue }
                if b[i] == UInt8(ascii: "\"") { return i + 1 }
                i += 1
            }
            return nil
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            var i = start
            while i < b.count {
                switch b[i] {
                case UInt8(ascii: "\""):
                    guard let end = skipValue(b, i) else { return nil }
                    i = end
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return i + 1 }
                default: break
                }
                i += 1
            }
            return nil
        default:
            var i = start
            while i < b.count, !(b[i] == UInt8(ascii: ",") || b[i] == UInt8(ascii: "}") || b[i] == UInt8(ascii: "]") || b[i] == 0x20 || b[i] == 0x0A || b[i] == 0x0D || b[i] == 0x09) { i += 1 }
            return i
        }
    }
}

import OutpostCore

/// Decodes a JSON string literal with OutpostCore's parser.
enum JSONParserBridge {
    static func string(_ literal: [UInt8]) throws -> String? {
        try JSONParser.parse(literal).stringValue
    }
}
