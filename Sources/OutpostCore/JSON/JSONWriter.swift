/// Writes JSON text as UTF-8 into a byte buffer (RFC 8259), with no whitespace.
///
/// Strings escape only what RFC 8259 section 7 requires: `"`, `\` and the control
/// characters below U+0020 (as `\b \f \n \r \t` or `\u00XX`). `/` and non-ASCII text are
/// written as they are. Numbers are written as their lexeme.
///
/// Canonical mode also sorts every object's members by the UTF-8 bytes of their keys, so two
/// values that differ only in key order encode to the same bytes: change fingerprints
/// (docs/protocol.md section 4, idempotency) hash this form.
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
        var output = JSONOutput(capacity: 256)
        write(value, to: &output, canonical: canonical)
        output.withBytes { bytes.append(contentsOf: $0) }
    }

    /// Appends `object`'s JSON text (see `append(_:to:canonical:)`).
    public static func append(_ object: JSONObject, to bytes: inout [UInt8], canonical: Bool = false) {
        var output = JSONOutput(capacity: 256)
        write(object, to: &output, canonical: canonical)
        output.withBytes { bytes.append(contentsOf: $0) }
    }

    /// Appends `string` as a quoted, escaped JSON string.
    public static func appendString(_ string: String, to bytes: inout [UInt8]) {
        withUTF8Bytes(string) { writeEscaped($0, to: &bytes) }
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
        writeEscaped(utf8.assumingMemoryBound(to: UInt8.self), to: &bytes)
    }

    /// Appends `"key":`.
    public static func appendKey(_ key: String, to bytes: inout [UInt8]) {
        appendString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// Appends the number's lexeme.
    public static func appendNumber(_ number: JSONNumber, to bytes: inout [UInt8]) {
        writeNumber(number, to: &bytes)
    }

    /// Appends `value` in decimal, e.g. `-42`.
    public static func appendInt(_ value: Int64, to bytes: inout [UInt8]) {
        writeInt(value, to: &bytes)
    }

    /// Appends `value` in decimal, e.g. `-42`.
    public static func appendInt(_ value: Int, to bytes: inout [UInt8]) {
        writeInt(Int64(value), to: &bytes)
    }

    /// Appends `true` or `false`.
    public static func appendBool(_ value: Bool, to bytes: inout [UInt8]) {
        writeLiteral(value ? "true" : "false", to: &bytes)
    }

    /// Appends `null`.
    public static func appendNull(to bytes: inout [UInt8]) {
        writeLiteral("null", to: &bytes)
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
}

// MARK: - Output

/// Where the writer puts bytes: an `[UInt8]` for the piecewise helpers, a `JSONOutput` for
/// whole values (fewer checks per byte than `Array.append`, one copy into the array at the end).
protocol JSONByteSink: ~Copyable {
    mutating func write(_ byte: UInt8)
    mutating func write(_ bytes: UnsafeBufferPointer<UInt8>)
}

extension Array: JSONByteSink where Element == UInt8 {
    @inline(__always)
    mutating func write(_ byte: UInt8) { append(byte) }
    @inline(__always)
    mutating func write(_ bytes: UnsafeBufferPointer<UInt8>) { append(contentsOf: bytes) }
}

/// A growable byte buffer owned by one write.
struct JSONOutput: ~Copyable, JSONByteSink {
    private var base: UnsafeMutablePointer<UInt8>
    private var count = 0
    private var capacity: Int

    init(capacity: Int) {
        self.capacity = max(capacity, 16)
        base = .allocate(capacity: self.capacity)
    }

    deinit { base.deallocate() }

    /// Makes room for `extra` more bytes.
    @inline(__always)
    mutating func reserve(_ extra: Int) {
        if capacity - count < extra { grow(to: count + extra) }
    }

    private mutating func grow(to needed: Int) {
        var newCapacity = capacity * 2
        while newCapacity < needed { newCapacity *= 2 }
        let newBase = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        newBase.initialize(from: base, count: count)
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    @inline(__always)
    mutating func write(_ byte: UInt8) {
        reserve(1)
        base[count] = byte
        count += 1
    }

    @inline(__always)
    mutating func write(_ bytes: UnsafeBufferPointer<UInt8>) {
        let length = bytes.count
        reserve(length)
        guard let source = bytes.baseAddress else { return }
        if length <= 16 {
            // Most runs are short keys and values: a loop beats a call to memmove.
            var index = 0
            while index < length {
                base[count + index] = source[index]
                index += 1
            }
        } else {
            (base + count).update(from: source, count: length)
        }
        count += length
    }

    /// The bytes written so far.
    func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        body(UnsafeBufferPointer(start: base, count: count))
    }
}

// MARK: - Writing

extension JSONWriter {
    static func write(_ value: JSONValue, to output: inout JSONOutput, canonical: Bool) {
        switch value {
        case .null:
            writeLiteral("null", to: &output)
        case .bool(let flag):
            writeLiteral(flag ? "true" : "false", to: &output)
        case .number(let number):
            writeNumber(number, to: &output)
        case .string(let string):
            withUTF8Bytes(string) { writeEscaped($0, to: &output) }
        case .array(let elements):
            output.write(UInt8(ascii: "["))
            elements.withUnsafeBufferPointer { elements in
                for index in elements.indices {
                    if index > 0 { output.write(UInt8(ascii: ",")) }
                    write(elements[index], to: &output, canonical: canonical)
                }
            }
            output.write(UInt8(ascii: "]"))
        case .object(let object):
            write(object, to: &output, canonical: canonical)
        }
    }

    static func write(_ object: JSONObject, to output: inout JSONOutput, canonical: Bool) {
        output.write(UInt8(ascii: "{"))
        object.members.withUnsafeBufferPointer { members in
            if canonical && members.count > 1 {
                // Write in key order through a permutation, so members are not copied.
                withUnsafeTemporaryAllocation(of: SortEntry.self, capacity: members.count) { order in
                    sortByKey(order, members)
                    for position in order.indices {
                        if position > 0 { output.write(UInt8(ascii: ",")) }
                        writeMember(members[order[position].index], to: &output, canonical: true)
                    }
                }
            } else {
                for index in members.indices {
                    if index > 0 { output.write(UInt8(ascii: ",")) }
                    writeMember(members[index], to: &output, canonical: canonical)
                }
            }
        }
        output.write(UInt8(ascii: "}"))
    }

    @inline(__always)
    private static func writeMember(_ member: JSONObject.Member, to output: inout JSONOutput, canonical: Bool) {
        withUTF8Bytes(member.key) { writeEscaped($0, to: &output) }
        output.write(UInt8(ascii: ":"))
        write(member.value, to: &output, canonical: canonical)
    }

    /// A member's position with the first eight bytes of its key, big-endian and zero-padded,
    /// so most comparisons while sorting are one integer comparison.
    struct SortEntry {
        var prefix: UInt64
        var index: Int
    }

    /// Fills `order` with every member position, sorted by key bytes: insertion sort for the
    /// usual handful of keys (and no work beyond one pass when they are already sorted), the
    /// standard library's sort beyond.
    private static func sortByKey(_ order: UnsafeMutableBufferPointer<SortEntry>,
                                  _ members: UnsafeBufferPointer<JSONObject.Member>) {
        for index in members.indices {
            let prefix = withUTF8Bytes(members[index].key) { bytes in
                var prefix: UInt64 = 0
                for offset in 0..<8 {
                    prefix = prefix << 8 | UInt64(offset < bytes.count ? bytes[offset] : 0)
                }
                return prefix
            }
            order.initializeElement(at: index, to: SortEntry(prefix: prefix, index: index))
        }
        @inline(__always)
        func less(_ a: SortEntry, _ b: SortEntry) -> Bool {
            if a.prefix != b.prefix { return a.prefix < b.prefix }
            return utf8Less(members[a.index].key, members[b.index].key)
        }
        guard order.count > 16 else {
            for index in 1..<order.count {
                let moving = order[index]
                var slot = index
                while slot > 0 && less(moving, order[slot - 1]) {
                    order[slot] = order[slot - 1]
                    slot -= 1
                }
                order[slot] = moving
            }
            return
        }
        var order = order
        order.sort(by: less)
    }

    @inline(__always)
    static func writeLiteral<Sink: JSONByteSink & ~Copyable>(_ literal: StaticString, to sink: inout Sink) {
        literal.withUTF8Buffer { sink.write($0) }
    }

    static func writeNumber<Sink: JSONByteSink & ~Copyable>(_ number: JSONNumber, to sink: inout Sink) {
        switch number.storage {
        case .int(let value):
            writeInt(value, to: &sink)
        case .text(let text):
            withUTF8Bytes(text) { sink.write($0) }
        }
    }

    static func writeInt<Sink: JSONByteSink & ~Copyable>(_ value: Int64, to sink: inout Sink) {
        if value < 0 { sink.write(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        if magnitude < 10 {
            sink.write(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude))
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
            sink.write(UnsafeBufferPointer(rebasing: digits[start..<20]))
        }
    }

    // MARK: Escaping (RFC 8259 section 7)

    /// The two-character escapes, by byte; 0 where `\u00XX` is used (the other control
    /// characters) or no escape is needed.
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

    /// Whether any of the eight bytes is `"`, `\` or below 0x20. Exact: bytes of 0x80 and up
    /// never count (their high bit is masked out by `~word`).
    @inline(__always)
    static func wordNeedsEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let control = (word &- ones &* 0x20) & ~word
        let quotes = word ^ (ones &* 0x22)
        let backslashes = word ^ (ones &* 0x5C)
        let hasQuote = (quotes &- ones) & ~quotes
        let hasBackslash = (backslashes &- ones) & ~backslashes
        return (control | hasQuote | hasBackslash) & highs != 0
    }

    @inline(__always)
    static func needsEscape(_ byte: UInt8) -> Bool { byte < 0x20 || byte == 0x22 || byte == 0x5C }

    static func writeEscaped<Sink: JSONByteSink & ~Copyable>(_ utf8: UnsafeBufferPointer<UInt8>, to sink: inout Sink) {
        sink.write(UInt8(ascii: "\""))
        var runStart = 0
        var index = 0
        let count = utf8.count
        while index < count {
            if index + 8 <= count,
               !wordNeedsEscape(UnsafeRawPointer(utf8.baseAddress! + index).loadUnaligned(as: UInt64.self)) {
                index += 8
                continue
            }
            let byte = utf8[index]
            if !needsEscape(byte) {
                index += 1
                continue
            }
            if runStart < index { sink.write(UnsafeBufferPointer(rebasing: utf8[runStart..<index])) }
            let short = shortEscape[Int(byte)]
            if short != 0 {
                sink.write(UInt8(ascii: "\\"))
                sink.write(short)
            } else {
                // Only control characters get here: 0x00 to 0x1F.
                writeLiteral(byte < 0x10 ? "\\u000" : "\\u001", to: &sink)
                let low = byte & 0xF
                sink.write(low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") + low - 10)
            }
            index += 1
            runStart = index
        }
        if runStart < count { sink.write(UnsafeBufferPointer(rebasing: utf8[runStart..<count])) }
        sink.write(UInt8(ascii: "\""))
    }
}
