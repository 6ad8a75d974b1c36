/// Writes JSON text as UTF-8 into a byte buffer (RFC 8259), with no whitespace.
///
/// Strings escape only what RFC 8259 section 7 requires: `"`, `\` and the control
/// characters below U+0020 (as `\b \f \n \r \t` or `\u00XX`). `/` and non-ASCII text are
/// written as they are. Numbers are written as their lexeme.
///
/// Canonical mode also sorts every object's members by the UTF-8 bytes of their keys, so two
/// values that differ only in key order encode to the same bytes: change fingerprints
/// (PROTOCOL.md section 4, idempotency) hash this form.
///
/// The server writes pull pages piece by piece, without building a `JSONValue`:
/// ```swift
/// var page: [UInt8] = []
/// page.append(UInt8(ascii: "{"))
/// JSONWriter.appendKey("collection", to: &page)
/// JSONWriter.appendString("todos", to: &page)
/// page.append(UInt8(ascii: ","))
/// JSONWriter.appendKey("data", to: &page)
/// JSONWriter.appendRaw(storedDataBytes, to: &page)  // already-encoded JSON
/// page.append(UInt8(ascii: "}"))
/// ```
public enum JSONWriter {
    /// Appends `value`'s JSON text. With `canonical`, object members are sorted by key bytes
    /// at every level.
    public static func append(_ value: JSONValue, to bytes: inout [UInt8], canonical: Bool = false) {
        switch value {
        case .null:
            appendNull(to: &bytes)
        case .bool(let flag):
            appendBool(flag, to: &bytes)
        case .number(let number):
            appendNumber(number, to: &bytes)
        case .string(let string):
            appendString(string, to: &bytes)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { bytes.append(UInt8(ascii: ",")) }
                first = false
                append(element, to: &bytes, canonical: canonical)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let object):
            append(object, to: &bytes, canonical: canonical)
        }
    }

    /// Appends `object`'s JSON text (see `append(_:to:canonical:)`).
    public static func append(_ object: JSONObject, to bytes: inout [UInt8], canonical: Bool = false) {
        bytes.append(UInt8(ascii: "{"))
        let members = canonical && !isSortedByKey(object.members) ? object.sortedMembers : object.members
        var first = true
        for (key, value) in members {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            appendString(key, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
            append(value, to: &bytes, canonical: canonical)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    private static func isSortedByKey(_ members: [JSONObject.Element]) -> Bool {
        var index = 1
        while index < members.count {
            if !utf8Less(members[index - 1].key, members[index].key) { return false }
            index += 1
        }
        return true
    }

    /// Appends `string` as a quoted, escaped JSON string.
    public static func appendString(_ string: String, to bytes: inout [UInt8]) {
        var string = string
        string.withUTF8 { appendEscaped($0, to: &bytes) }
    }

    /// Appends `string` as a quoted, escaped JSON string (the same as `appendString(_:to:)`).
    public static func writeString(_ string: String, into bytes: inout [UInt8]) {
        appendString(string, to: &bytes)
    }

    /// Appends text given as UTF-8 bytes (for instance an SQLite text column) as a quoted,
    /// escaped JSON string, without making a `String`.
    ///
    /// The bytes must be valid UTF-8, as all text the parser produced is; they are not
    /// checked here, and invalid bytes would make the output invalid JSON.
    public static func appendString(utf8: UnsafeRawBufferPointer, to bytes: inout [UInt8]) {
        appendEscaped(utf8.assumingMemoryBound(to: UInt8.self), to: &bytes)
    }

    /// Appends `"key":`.
    public static func appendKey(_ key: String, to bytes: inout [UInt8]) {
        appendString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// Appends the number's lexeme.
    public static func appendNumber(_ number: JSONNumber, to bytes: inout [UInt8]) {
        switch number.storage {
        case .int(let value):
            appendInt(value, to: &bytes)
        case .text(var text):
            text.withUTF8 { bytes.append(contentsOf: $0) }
        }
    }

    /// Appends `value` in decimal, e.g. `-42`.
    public static func appendInt(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        if magnitude < 10 {
            bytes.append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude))
            return
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = 20
            repeat {
                start -= 1
                let (quotient, remainder) = magnitude.quotientAndRemainder(dividingBy: 10)
                digits[start] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: remainder)
                magnitude = quotient
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start..<20]))
        }
    }

    /// Appends `value` in decimal, e.g. `-42`.
    public static func appendInt(_ value: Int, to bytes: inout [UInt8]) {
        appendInt(Int64(value), to: &bytes)
    }

    /// Appends `true` or `false`.
    public static func appendBool(_ value: Bool, to bytes: inout [UInt8]) {
        appendLiteral(value ? "true" : "false", to: &bytes)
    }

    /// Appends `null`.
    public static func appendNull(to bytes: inout [UInt8]) {
        appendLiteral("null", to: &bytes)
    }

    @inline(__always)
    private static func appendLiteral(_ literal: StaticString, to bytes: inout [UInt8]) {
        literal.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// Appends bytes that are already JSON text (for instance a record's stored `data`),
    /// unchanged and unchecked.
    public static func appendRaw(_ json: UnsafeRawBufferPointer, to bytes: inout [UInt8]) {
        bytes.append(contentsOf: json)
    }

    /// Appends bytes that are already JSON text, unchanged and unchecked.
    public static func appendRaw(_ json: [UInt8], to bytes: inout [UInt8]) {
        bytes.append(contentsOf: json)
    }

    /// Appends bytes that are already JSON text, unchanged and unchecked.
    public static func appendRaw(_ json: ArraySlice<UInt8>, to bytes: inout [UInt8]) {
        bytes.append(contentsOf: json)
    }

    // MARK: - Escaping

    /// The two-character escapes of RFC 8259 section 7, by byte; 0 where `\u00XX` is used
    /// (for a control character) or no escape is needed.
    private static let shortEscape: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 256)
        table[0x08] = UInt8(ascii: "b")
        table[0x09] = UInt8(ascii: "t")
        table[0x0A] = UInt8(ascii: "n")
        table[0x0C] = UInt8(ascii: "f")
        table[0x0D] = UInt8(ascii: "r")
        table[0x22] = UInt8(ascii: "\"")
        table[0x5C] = UInt8(ascii: "\\")
        return table
    }()

    static func appendEscaped(_ utf8: UnsafeBufferPointer<UInt8>, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        var runStart = 0
        var index = 0
        let count = utf8.count
        while index < count {
            let byte = utf8[index]
            // Everything from 0x20 up is written as is, except `"` (0x22) and `\` (0x5C).
            if byte >= 0x20 && byte != 0x22 && byte != 0x5C {
                index += 1
                continue
            }
            if runStart < index {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
            }
            let short = shortEscape[Int(byte)]
            if short != 0 {
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(short)
            } else {
                // Only control characters get here: 0x00 to 0x1F.
                appendLiteral(byte < 0x10 ? "\\u000" : "\\u001", to: &bytes)
                let low = byte & 0xF
                bytes.append(low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") + low - 10)
            }
            index += 1
            runStart = index
        }
        if runStart < count {
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<count]))
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
