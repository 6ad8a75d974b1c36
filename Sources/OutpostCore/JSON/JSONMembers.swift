/// Reads some members of a JSON object without building the rest: the members named are
/// parsed whole, the others are stepped over byte by byte (strings, nesting and escapes
/// followed, nothing decoded). For text the store wrote itself (valid, canonical JSON),
/// where a rule reads one or two fields of each record in a page.
public enum JSONMembers {
    /// The members of the object in `bytes` whose keys are in `keys`; nil when `bytes` is
    /// not an object or a member does not parse.
    public static func pick(_ keys: Set<String>, from bytes: [UInt8]) -> JSONObject? {
        var object = JSONObject()
        let wanted = keys.map { Array($0.utf8) }
        var i = skipSpace(bytes, 0)
        guard i < bytes.count, bytes[i] == UInt8(ascii: "{") else { return nil }
        i = skipSpace(bytes, i + 1)
        while i < bytes.count, bytes[i] != UInt8(ascii: "}") {
            let keyStart = i
            let keyEnd = skipValue(bytes, i)
            guard keyEnd <= bytes.count, bytes[keyStart] == UInt8(ascii: "\""), keyEnd - keyStart >= 2 else { return nil }
            // A key without escapes is its bytes; only one with escapes is decoded.
            let raw = bytes[(keyStart + 1)..<(keyEnd - 1)]
            var key: String?
            if raw.contains(UInt8(ascii: "\\")) {
                guard case .string(let decoded)? = try? JSONParser.parse(bytes[keyStart..<keyEnd]) else { return nil }
                key = keys.contains(decoded) ? decoded : nil
            } else if let match = wanted.first(where: { $0.elementsEqual(raw) }) {
                key = String(decoding: match, as: UTF8.self)
            }
            i = skipSpace(bytes, keyEnd)
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
            i = skipSpace(bytes, i + 1)
            let valueEnd = skipValue(bytes, i)
            if let key {
                guard valueEnd <= bytes.count, let value = try? JSONParser.parse(bytes[i..<valueEnd]) else { return nil }
                object[key] = value
            }
            i = skipSpace(bytes, valueEnd)
            if i < bytes.count, bytes[i] == UInt8(ascii: ",") { i = skipSpace(bytes, i + 1) }
        }
        return object
    }

    /// The offset of the first byte at or after `start` that is not JSON white space.
    public static func skipSpace(_ bytes: [UInt8], _ start: Int) -> Int {
        var i = start
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 || bytes[i] == 0x0A || bytes[i] == 0x0D { i += 1 }
        return i
    }

    /// The offset just after the JSON value that starts at `start`.
    public static func skipValue(_ bytes: [UInt8], _ start: Int) -> Int {
        guard start < bytes.count else { return start }
        switch bytes[start] {
        case UInt8(ascii: "\""):
            var i = start + 1
            while i < bytes.count, bytes[i] != UInt8(ascii: "\"") { i += bytes[i] == UInt8(ascii: "\\") ? 2 : 1 }
            return min(i + 1, bytes.count + 1)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0, i = start
            while i < bytes.count {
                switch bytes[i] {
                case UInt8(ascii: "\""):
                    i = skipValue(bytes, i)
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return i + 1 }
                default: break
                }
                i += 1
            }
            return bytes.count + 1
        default:
            var i = start
            while i < bytes.count {
                switch bytes[i] {
                case UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x09, 0x0A, 0x0D: return i
                default: i += 1
                }
            }
            return i
        }
    }
}
