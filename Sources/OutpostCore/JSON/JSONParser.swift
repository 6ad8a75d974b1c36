/// A strict RFC 8259 JSON parser that builds a `JSONValue`.
///
/// Refused: trailing commas, comments, leading zeros, `NaN`/`Infinity`, `+1`, `.5`, `1.`,
/// raw control characters in strings, bytes that are not well-formed UTF-8 (overlong forms,
/// encoded surrogates, code points past U+10FFFF), unknown escapes, a `\u` surrogate without
/// its pair, a leading byte order mark, whitespace other than space, tab, LF and CR,
/// anything but whitespace after the value, objects that repeat a key (compared byte for
/// byte after unescaping: a repeated key is ambiguous, and ambiguity is how data is lost),
/// and nesting deeper than `maxDepth`.
///
/// The parser is iterative: nesting costs heap, not native stack, so a hostile
/// `[[[[…` of any length ends in a `.tooDeep` error, never a crash.
///
/// ```swift
/// let value = try JSONParser().parse(Array(#"{"title":"Buy milk"}"#.utf8))
/// ```
///
/// Why no "raw span" mode for the push hot path (docs/protocol.md section 4): the server must
/// hash a canonical (key-sorted) form of every change's `data`, which needs the parsed tree
/// anyway; keeping the sender's bytes would only save the compact write of `data`.
/// `outpost-bench json` measured that write at 11-14% of parse + store + fingerprint
/// (500 changes of ~200-byte `data`: about 180,000-200,000 changes/s on one core, parsing
/// 40-46% of it), too little to justify a second parse mode and a span field on every
/// object. So the server parses the body once and writes `data` with `JSONWriter`: stored
/// bytes are compact and normalized (`\u0061` and `\/` become `a` and `/`), never the
/// sender's whitespace.
public struct JSONParser: Sendable {
    /// The deepest nesting of arrays and objects accepted; `[]` is depth 1, a scalar 0.
    /// At most 1,000 (values are released and written recursively, so trees must stay
    /// shallow enough for any thread's stack).
    public let maxDepth: Int

    /// The hard upper bound for `maxDepth`.
    public static let depthCeiling = 1_000

    /// A parser accepting nesting up to `maxDepth` (default 64, the depth records may have).
    public init(maxDepth: Int = 64) {
        precondition((0...JSONParser.depthCeiling).contains(maxDepth),
                     "JSONParser.maxDepth must be in 0...\(JSONParser.depthCeiling), got \(maxDepth)")
        self.maxDepth = maxDepth
    }

    /// Parses one JSON text from raw bytes.
    public func parse(_ bytes: UnsafeRawBufferPointer) throws(JSONError) -> JSONValue {
        let result: Result<JSONValue, JSONError> = bytes.withMemoryRebound(to: UInt8.self) { typed in
            guard let base = typed.baseAddress, typed.count > 0 else {
                return .failure(JSONError(.unexpectedEnd, at: 0))
            }
            var state = ParseState(base: base, count: typed.count, maxDepth: maxDepth)
            do throws(JSONError) {
                return .success(try state.parseDocument())
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Parses one JSON text from an array of bytes.
    public func parse(_ bytes: [UInt8]) throws(JSONError) -> JSONValue {
        let result: Result<JSONValue, JSONError> = bytes.withUnsafeBytes { raw in
            Result { () throws(JSONError) in try parse(raw) }
        }
        return try result.get()
    }

    /// Parses one JSON text from a slice of bytes; error offsets count from the slice's start.
    public func parse(_ bytes: ArraySlice<UInt8>) throws(JSONError) -> JSONValue {
        let result: Result<JSONValue, JSONError> = bytes.withUnsafeBytes { raw in
            Result { () throws(JSONError) in try parse(raw) }
        }
        return try result.get()
    }

    /// Parses one JSON text from a string's UTF-8.
    public func parse(_ text: String) throws(JSONError) -> JSONValue {
        var text = text
        let result: Result<JSONValue, JSONError> = text.withUTF8 { utf8 in
            Result { () throws(JSONError) in try parse(UnsafeRawBufferPointer(utf8)) }
        }
        return try result.get()
    }
}

extension JSONParser {
    /// Parses one JSON text from bytes with the default limits (`maxDepth` 64).
    public static func parse(_ bytes: [UInt8]) throws(JSONError) -> JSONValue {
        try JSONParser().parse(bytes)
    }

    /// Parses one JSON text from a slice of bytes with the default limits.
    public static func parse(_ bytes: ArraySlice<UInt8>) throws(JSONError) -> JSONValue {
        try JSONParser().parse(bytes)
    }

    /// Parses one JSON text from raw bytes with the default limits.
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(JSONError) -> JSONValue {
        try JSONParser().parse(bytes)
    }

    /// Parses one JSON text from a string's UTF-8 with the default limits.
    public static func parse(_ text: String) throws(JSONError) -> JSONValue {
        try JSONParser().parse(text)
    }
}

// MARK: - Machinery

/// A stack whose elements can be moved out in bulk into an exactly-sized array, so building
/// a container costs one allocation and no reference-count traffic for its elements.
struct MoveStack<Element>: ~Copyable {
    private var base: UnsafeMutablePointer<Element>
    private(set) var count = 0
    private var capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        base = .allocate(capacity: capacity)
    }

    deinit {
        base.deinitialize(count: count)
        base.deallocate()
    }

    @inline(__always)
    mutating func push(_ element: consuming Element) {
        if count == capacity { grow() }
        (base + count).initialize(to: element)
        count += 1
    }

    private mutating func grow() {
        let newCapacity = capacity * 2
        let newBase = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        newBase.moveInitialize(from: base, count: count)
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    /// Calls `body` with the elements from `start` to the top, borrowed.
    @inline(__always)
    func withElements<R>(from start: Int, _ body: (UnsafeBufferPointer<Element>) -> R) -> R {
        body(UnsafeBufferPointer(start: base + start, count: count - start))
    }

    /// Pops the elements from `start` to the top without deinitializing them: the caller
    /// must move every one of them out of the returned buffer before the next `push`.
    @inline(__always)
    mutating func detach(from start: Int) -> UnsafeMutableBufferPointer<Element> {
        let detached = UnsafeMutableBufferPointer(start: base + start, count: count - start)
        count = start
        return detached
    }

    /// Moves the elements from `start` to the top into an array.
    mutating func popArray(from start: Int) -> [Element] {
        let moved = count - start
        let source = base + start
        count = start
        return Array(unsafeUninitializedCapacity: moved) { buffer, initialized in
            if moved > 0 { buffer.baseAddress!.moveInitialize(from: source, count: moved) }
            initialized = moved
        }
    }

}

/// The enclosing container while a nested one is parsed.
private struct Frame {
    var inObject: Bool
    var valuesStart: Int
    var keysStart: Int
    var keyIndex: [UTF8Key: Int]?
}

private let quote = UInt8(ascii: "\"")
private let backslash = UInt8(ascii: "\\")

struct ParseState: ~Copyable {
    let base: UnsafePointer<UInt8>
    let end: Int
    let maxDepth: Int
    var position = 0
    var values = MoveStack<JSONValue>(capacity: 64)
    var keys = MoveStack<String>(capacity: 32)
    /// Decoded bytes of a string that has escapes.
    var scratch: [UInt8] = []

    init(base: UnsafePointer<UInt8>, count: Int, maxDepth: Int) {
        self.base = base
        self.end = count
        self.maxDepth = maxDepth
    }

    @inline(__always)
    mutating func skipWhitespace() {
        while position < end {
            let byte = base[position]
            // Space, tab, LF, CR (RFC 8259 section 2) and nothing else.
            guard byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 else { return }
            position += 1
        }
    }

    mutating func parseDocument() throws(JSONError) -> JSONValue {
        if end >= 3 && base[0] == 0xEF && base[1] == 0xBB && base[2] == 0xBF {
            throw JSONError(.byteOrderMark, at: 0)
        }
        var frames: [Frame] = []
        var depth = 0
        // The container being filled.
        var inObject = false
        var valuesStart = 0
        var keysStart = 0
        var keyIndex: [UTF8Key: Int]? = nil

        valueLoop: while true {
            skipWhitespace()
            guard position < end else { throw JSONError(.unexpectedEnd, at: position) }
            var value: JSONValue
            let byte = base[position]
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                if depth > maxDepth { throw JSONError(.tooDeep(limit: maxDepth), at: position) }
                let opensObject = byte == UInt8(ascii: "{")
                position += 1
                skipWhitespace()
                if position < end && base[position] == (opensObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    position += 1
                    depth -= 1
                    value = opensObject ? .object(JSONObject()) : .array([])
                } else {
                    frames.append(Frame(inObject: inObject, valuesStart: valuesStart, keysStart: keysStart,
                                        keyIndex: keyIndex))
                    inObject = opensObject
                    valuesStart = values.count
                    keysStart = keys.count
                    keyIndex = nil
                    if inObject { try parseKey(keysStart: keysStart, keyIndex: &keyIndex) }
                    continue valueLoop
                }
            default:
                value = try parseScalar(byte)
            }

            // A value is complete: place it, then close every container that ends here.
            while true {
                if depth == 0 {
                    skipWhitespace()
                    if position != end { throw JSONError(.trailingCharacters, at: position) }
                    return value
                }
                values.push(value)
                skipWhitespace()
                guard position < end else { throw JSONError(.unexpectedEnd, at: position) }
                let next = base[position]
                if next == UInt8(ascii: ",") {
                    position += 1
                    if inObject {
                        skipWhitespace()
                        try parseKey(keysStart: keysStart, keyIndex: &keyIndex)
                    }
                    continue valueLoop
                }
                if inObject && next == UInt8(ascii: "}") {
                    position += 1
                    value = closeObject(valuesStart: valuesStart, keysStart: keysStart, keyIndex: keyIndex)
                } else if !inObject && next == UInt8(ascii: "]") {
                    position += 1
                    value = .array(values.popArray(from: valuesStart))
                } else {
                    throw JSONError(.unexpectedCharacter, at: position)
                }
                depth -= 1
                let parent = frames.removeLast()
                inObject = parent.inObject
                valuesStart = parent.valuesStart
                keysStart = parent.keysStart
                keyIndex = parent.keyIndex
            }
        }
    }

    /// A value that is not a container: a string, `true`, `false`, `null` or a number,
    /// starting with `byte`.
    @inline(__always)
    mutating func parseScalar(_ byte: UInt8) throws(JSONError) -> JSONValue {
        switch byte {
        case quote:
            return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return .number(try parseNumber())
        default:
            throw JSONError(.unexpectedCharacter, at: position)
        }
    }

    /// The object whose members were pushed since `valuesStart` and `keysStart`, moved out
    /// of the parser's stacks in order.
    @inline(__always)
    mutating func closeObject(valuesStart: Int, keysStart: Int, keyIndex: [UTF8Key: Int]?) -> JSONValue {
        let memberValues = values.detach(from: valuesStart)
        let memberKeys = keys.detach(from: keysStart)
        let members = [JSONObject.Member](unsafeUninitializedCapacity: memberValues.count) { buffer, initialized in
            for index in memberValues.indices {
                buffer.initializeElement(at: index, to: JSONObject.Member(
                    key: memberKeys.moveElement(from: index), value: memberValues.moveElement(from: index)))
            }
            initialized = memberValues.count
        }
        return .object(JSONObject(uncheckedMembers: members, index: keyIndex))
    }

    /// Reads `"key"` and `:`, refusing a key the object already has.
    @inline(__always)
    mutating func parseKey(keysStart: Int, keyIndex: inout [UTF8Key: Int]?) throws(JSONError) {
        guard position < end else { throw JSONError(.unexpectedEnd, at: position) }
        guard base[position] == quote else { throw JSONError(.unexpectedCharacter, at: position) }
        let keyOffset = position
        let key = try parseString()
        let existing = keys.count - keysStart
        if keyIndex != nil {
            if keyIndex!.updateValue(existing, forKey: UTF8Key(key)) != nil {
                throw JSONError(.duplicateKey(key), at: keyOffset)
            }
        } else {
            let duplicate = keys.withElements(from: keysStart) { others in
                others.contains { utf8Equal($0, key) }  // compares lengths first
            }
            if duplicate { throw JSONError(.duplicateKey(key), at: keyOffset) }
            if existing + 1 > JSONObject.indexThreshold {
                var index = [UTF8Key: Int](minimumCapacity: 2 * JSONObject.indexThreshold)
                keys.withElements(from: keysStart) { others in
                    for position in others.indices { index[UTF8Key(others[position])] = position }
                }
                index[UTF8Key(key)] = existing
                keyIndex = index
            }
        }
        keys.push(key)
        skipWhitespace()
        guard position < end else { throw JSONError(.unexpectedEnd, at: position) }
        guard base[position] == UInt8(ascii: ":") else { throw JSONError(.unexpectedCharacter, at: position) }
        position += 1
    }

    @inline(__always)
    mutating func expectLiteral(_ literal: StaticString) throws(JSONError) {
        let length = literal.utf8CodeUnitCount
        let text = literal.utf8Start
        for offset in 0..<length {
            guard position + offset < end else { throw JSONError(.unexpectedEnd, at: position + offset) }
            guard base[position + offset] == text[offset] else {
                throw JSONError(.unexpectedCharacter, at: position + offset)
            }
        }
        position += length
    }

    // MARK: Numbers (RFC 8259 section 6)

    @inline(__always)
    static func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }

    mutating func parseNumber() throws(JSONError) -> JSONNumber {
        let start = position
        var index = position
        let negative = base[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < end else { throw JSONError(.invalidNumber, at: index) }
        var magnitude: UInt64 = 0
        var digits = 0
        if base[index] == UInt8(ascii: "0") {
            index += 1
            digits = 1
            if index < end && ParseState.isDigit(base[index]) { throw JSONError(.invalidNumber, at: start) }
        } else if ParseState.isDigit(base[index]) {
            while index < end, ParseState.isDigit(base[index]) {
                magnitude = magnitude &* 10 &+ UInt64(base[index] &- UInt8(ascii: "0"))
                digits += 1
                index += 1
            }
        } else {
            throw JSONError(.invalidNumber, at: index)
        }
        var isInteger = true
        if index < end && base[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let first = index
            while index < end, ParseState.isDigit(base[index]) { index += 1 }
            if index == first { throw JSONError(.invalidNumber, at: index) }
        }
        if index < end && base[index] | 0x20 == UInt8(ascii: "e") {
            isInteger = false
            index += 1
            if index < end && (base[index] == UInt8(ascii: "+") || base[index] == UInt8(ascii: "-")) { index += 1 }
            let first = index
            while index < end, ParseState.isDigit(base[index]) { index += 1 }
            if index == first { throw JSONError(.invalidNumber, at: index) }
        }
        position = index
        // Up to 18 digits always fit in Int64; "-0" keeps its text.
        if isInteger && digits <= 18 && !(negative && magnitude == 0) {
            return JSONNumber(storage: .int(negative ? -Int64(magnitude) : Int64(magnitude)))
        }
        return JSONNumber(storage: JSONNumber.storage(validLexeme: UnsafeBufferPointer(start: base + start,
                                                                                          count: index - start)))
    }

    // MARK: Strings (RFC 8259 sections 7 and 8)

    /// Reads a string starting at its opening quote; leaves `position` after the closing one.
    mutating func parseString() throws(JSONError) -> String {
        let start = position + 1
        var index = start
        // Fast path: printable ASCII without escapes, eight bytes at a time.
        while index + 8 <= end {
            let word = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
            if ParseState.wordNeedsAttention(word) { break }
            index += 8
        }
        while index < end {
            let byte = base[index]
            if byte == quote {
                position = index + 1
                return String(decoding: UnsafeBufferPointer(start: base + start, count: index - start), as: UTF8.self)
            }
            if byte == backslash || byte < 0x20 || byte >= 0x80 { break }
            index += 1
        }
        return try parseStringSlowly(start: start, from: index)
    }

    /// Whether any of the eight bytes is `"`, `\`, below 0x20 or above 0x7F.
    @inline(__always)
    static func wordNeedsAttention(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        // A byte b has its high bit set in (b - n) & ~b & 0x80 when b < n (for b < 0x80).
        let control = (word &- ones &* 0x20) & ~word
        let quotes = word ^ (ones &* 0x22)
        let backslashes = word ^ (ones &* 0x5C)
        let hasQuote = (quotes &- ones) & ~quotes
        let hasBackslash = (backslashes &- ones) & ~backslashes
        return (control | hasQuote | hasBackslash | word) & highs != 0
    }

    /// Handles escapes and non-ASCII from `index` on; bytes from `start` to `index` are plain.
    mutating func parseStringSlowly(start: Int, from index: Int) throws(JSONError) -> String {
        var index = index
        var runStart = start
        var escaped = false
        while index < end {
            let byte = base[index]
            if byte == quote {
                position = index + 1
                if !escaped {
                    return String(decoding: UnsafeBufferPointer(start: base + start, count: index - start), as: UTF8.self)
                }
                scratch.append(contentsOf: UnsafeBufferPointer(start: base + runStart, count: index - runStart))
                return String(decoding: scratch, as: UTF8.self)
            } else if byte == backslash {
                if !escaped {
                    escaped = true
                    scratch.removeAll(keepingCapacity: true)
                }
                scratch.append(contentsOf: UnsafeBufferPointer(start: base + runStart, count: index - runStart))
                index = try decodeEscape(at: index)
                runStart = index
            } else if byte < 0x20 {
                throw JSONError(.controlCharacterInString, at: index)
            } else if byte < 0x80 {
                index += 1
            } else {
                index = try validateUTF8Sequence(at: index)
            }
        }
        throw JSONError(.unexpectedEnd, at: end)
    }

    /// Checks one multi-byte UTF-8 sequence (Unicode 15, table 3-7) and returns the index after it.
    @inline(__always)
    func validateUTF8Sequence(at index: Int) throws(JSONError) -> Int {
        let lead = base[index]
        let length: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0          // no overlong three-byte forms
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F         // no encoded surrogates
        case 0xF0: length = 4; low = 0x90          // no overlong four-byte forms
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F         // nothing past U+10FFFF
        default: throw JSONError(.invalidUTF8, at: index)  // 80...C1, F5...FF
        }
        guard index + length <= end else { throw JSONError(.unexpectedEnd, at: end) }
        let second = base[index + 1]
        guard second >= low && second <= high else { throw JSONError(.invalidUTF8, at: index) }
        for offset in 2..<max(2, length) where base[index + offset] & 0xC0 != 0x80 {
            throw JSONError(.invalidUTF8, at: index)
        }
        return index + length
    }

    /// Decodes the escape at `index` (a backslash) into `scratch`; returns the index after it.
    mutating func decodeEscape(at index: Int) throws(JSONError) -> Int {
        guard index + 1 < end else { throw JSONError(.unexpectedEnd, at: end) }
        let decoded: UInt8
        switch base[index + 1] {
        case quote: decoded = quote
        case backslash: decoded = backslash
        case UInt8(ascii: "/"): decoded = UInt8(ascii: "/")
        case UInt8(ascii: "b"): decoded = 0x08
        case UInt8(ascii: "f"): decoded = 0x0C
        case UInt8(ascii: "n"): decoded = 0x0A
        case UInt8(ascii: "r"): decoded = 0x0D
        case UInt8(ascii: "t"): decoded = 0x09
        case UInt8(ascii: "u"):
            var scalar = try hex4(at: index + 2)
            var next = index + 6
            if scalar >= 0xD800 && scalar <= 0xDBFF {
                // A high surrogate must be followed by an escaped low one (RFC 8259 section 7).
                guard next + 1 < end, base[next] == backslash, base[next + 1] == UInt8(ascii: "u") else {
                    throw JSONError(.invalidUnicodeEscape, at: index)
                }
                let low = try hex4(at: next + 2)
                guard low >= 0xDC00 && low <= 0xDFFF else { throw JSONError(.invalidUnicodeEscape, at: index) }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                next += 6
            } else if scalar >= 0xDC00 && scalar <= 0xDFFF {
                throw JSONError(.invalidUnicodeEscape, at: index)
            }
            appendUTF8(scalar)
            return next
        default:
            throw JSONError(.invalidEscape, at: index)
        }
        scratch.append(decoded)
        return index + 2
    }

    func hex4(at index: Int) throws(JSONError) -> UInt32 {
        guard index + 4 <= end else { throw JSONError(.invalidUnicodeEscape, at: index - 2) }
        var value: UInt32 = 0
        for offset in 0..<4 {
            let byte = base[index + offset]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw JSONError(.invalidUnicodeEscape, at: index - 2)
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    mutating func appendUTF8(_ scalar: UInt32) {
        switch scalar {
        case 0..<0x80:
            scratch.append(UInt8(scalar))
        case 0x80..<0x800:
            scratch.append(UInt8(0xC0 | scalar >> 6))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            scratch.append(UInt8(0xE0 | scalar >> 12))
            scratch.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        default:
            scratch.append(UInt8(0xF0 | scalar >> 18))
            scratch.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            scratch.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        }
    }
}
