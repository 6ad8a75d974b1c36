/// A JSON number that keeps its exact text.
///
/// RFC 8259 numbers are decimal text of any length; converting them to `Double` on the way
/// in loses digits (`12345678901234567890`) and form (`1.50`). `JSONNumber` keeps the lexeme
/// as it was validated, and converts only when asked: `int64Value` when the value is exactly
/// an integer that fits, `doubleValue` always (rounded to nearest).
///
/// Two numbers are equal when their lexemes are equal byte for byte: `1`, `1.0` and `1e0` are
/// three different numbers here, as they are three different encodings, so equal values
/// always encode to equal bytes (which is what change fingerprints rely on). Compare
/// `int64Value` or `doubleValue` for numeric equality.
///
/// ```swift
/// let n = JSONNumber(lexeme: "1.50")!
/// n.lexeme       // "1.50"
/// n.doubleValue  // 1.5
/// ```
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
    /// Integers whose lexeme is exactly `String(value)` (the common case: ids, times, counts)
    /// are kept as `Int64` so they cost no allocation; everything else keeps its text.
    /// Invariant: `.text` never holds such a lexeme, so storage equality is lexeme equality.
    @usableFromInline
    package enum Storage: Sendable, Hashable {
        case int(Int64)
        case text(String)
    }

    @usableFromInline
    package let storage: Storage

    @inlinable
    init(storage: Storage) { self.storage = storage }

    /// A number whose lexeme is the decimal form of `value`, e.g. `-42`.
    @inlinable
    public init(_ value: Int64) { storage = .int(value) }

    /// A number whose lexeme is the decimal form of `value`, e.g. `-42`.
    @inlinable
    public init(_ value: Int) { storage = .int(Int64(value)) }

    /// A number whose lexeme is Swift's shortest round-tripping form of `value`,
    /// e.g. `1.5`, `1.0`, `1e-05`, `1.7976931348623157e+308`.
    ///
    /// JSON has no NaN or infinity: passing one is a programming error and traps.
    public init(_ value: Double) {
        precondition(value.isFinite, "JSONNumber(\(value)): JSON has no NaN or infinity")
        let text = value.description
        assert(JSONNumber.isValidLexeme(Array(text.utf8)), "Double.description gave \(text)")
        storage = .text(text)
    }

    /// A number with the given text, or `nil` when `lexeme` is not an RFC 8259 number
    /// (`"01"`, `"+1"`, `"1."`, `".5"`, `"NaN"` and surrounding whitespace are refused).
    public init?(lexeme: String) {
        var text = lexeme
        let parsed: Storage? = text.withUTF8 { bytes in
            guard JSONNumber.isValidLexeme(bytes) else { return nil }
            return JSONNumber.storage(validLexeme: bytes)
        }
        guard let parsed else { return nil }
        storage = parsed
    }

    /// The number's text exactly as it will be written, e.g. `"1.50"`.
    public var lexeme: String {
        switch storage {
        case .int(let value): String(value)
        case .text(let text): text
        }
    }

    /// The lexeme.
    public var description: String { lexeme }

    /// The value as an `Int64` when it is exactly an integer in range, else `nil`.
    ///
    /// `42`, `-0`, `4.20e1` and `1.0` give integers; `1.5`, `1e-1` and
    /// `12345678901234567890` (out of range) give `nil`.
    public var int64Value: Int64? {
        switch storage {
        case .int(let value): return value
        case .text(var text): return text.withUTF8 { JSONNumber.exactInt64(lexeme: $0) }
        }
    }

    /// The value as the nearest `Double`; magnitudes beyond `Double`'s range become
    /// infinity, and tiny ones zero.
    public var doubleValue: Double {
        switch storage {
        case .int(let value): return Double(value)
        case .text(let text): return Double(text) ?? .nan  // never nil: the lexeme is valid
        }
    }

    /// Whether the lexeme has neither a fraction nor an exponent (`-12`, `12345678901234567890`).
    public var isIntegerLexeme: Bool {
        switch storage {
        case .int: return true
        case .text(let text): return !text.utf8.contains { $0 == UInt8(ascii: ".") || $0 | 0x20 == UInt8(ascii: "e") }
        }
    }
}

extension JSONNumber: ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral {
    /// `let n: JSONNumber = 42`
    public init(integerLiteral value: Int64) { self.init(value) }
    /// `let n: JSONNumber = 1.5` (lexeme `1.5`).
    public init(floatLiteral value: Double) { self.init(value) }
}

// MARK: - Lexeme rules (RFC 8259 section 6)

extension JSONNumber {
    /// Storage for bytes already known to match the number grammar.
    @usableFromInline
    static func storage(validLexeme bytes: UnsafeBufferPointer<UInt8>) -> Storage {
        if let value = canonicalInt64(bytes) { return .int(value) }
        return .text(String(decoding: bytes, as: UTF8.self))
    }

    /// The value when `bytes` are exactly `String(value)` for some `Int64`: only digits after
    /// an optional `-`, no `-0`, in range. Assumes the grammar was checked (no leading zeros).
    @inline(__always)
    static func canonicalInt64(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        var index = 0
        let negative = bytes.count > 0 && bytes[0] == UInt8(ascii: "-")
        if negative { index = 1 }
        let digits = bytes.count - index
        guard digits > 0, digits <= 19 else { return nil }
        if negative && digits == 1 && bytes[1] == UInt8(ascii: "0") { return nil }  // "-0"
        var magnitude: UInt64 = 0
        while index < bytes.count {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            magnitude = magnitude &* 10 &+ UInt64(digit)  // 19 digits < 2^64: no overflow
            index += 1
        }
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { return nil }
            return magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude)
        }
        guard magnitude <= UInt64(Int64.max) else { return nil }
        return Int64(magnitude)
    }

    /// Whether `bytes` are exactly one RFC 8259 number:
    /// `-? (0 | [1-9][0-9]*) (\.[0-9]+)? ([eE][+-]?[0-9]+)?`.
    static func isValidLexeme(_ bytes: some Collection<UInt8>) -> Bool {
        var iterator = Array(bytes)[...]
        func digits(_ s: inout ArraySlice<UInt8>) -> Int {
            var n = 0
            while let b = s.first, b &- UInt8(ascii: "0") < 10 { s.removeFirst(); n += 1 }
            return n
        }
        if iterator.first == UInt8(ascii: "-") { iterator.removeFirst() }
        if iterator.first == UInt8(ascii: "0") {
            iterator.removeFirst()
        } else if digits(&iterator) == 0 {
            return false
        }
        if iterator.first == UInt8(ascii: ".") {
            iterator.removeFirst()
            if digits(&iterator) == 0 { return false }
        }
        if let e = iterator.first, e | 0x20 == UInt8(ascii: "e") {
            iterator.removeFirst()
            if let sign = iterator.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") {
                iterator.removeFirst()
            }
            if digits(&iterator) == 0 { return false }
        }
        return iterator.isEmpty
    }

    /// The exact integer value of a valid lexeme with a fraction and/or exponent, if it is
    /// one and fits in `Int64`: the significant digits, shifted by the exponent, must leave
    /// no non-zero digit after the decimal point.
    static func exactInt64(lexeme bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        let parts = DecimalParts(lexeme: bytes)
        if parts.digits.isEmpty { return 0 }
        guard parts.exponent >= 0, parts.digits.count + parts.exponent <= 19 else { return nil }
        var magnitude: UInt64 = 0
        for digit in parts.digits { magnitude = magnitude * 10 + UInt64(digit) }
        for _ in 0..<parts.exponent { magnitude *= 10 }  // at most 19 digits in all: no overflow
        if parts.negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { return nil }
            return magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude)
        }
        return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
    }
}

/// A valid RFC 8259 lexeme's exact value, `digits × 10^exponent`, with no leading or
/// trailing zero digit (no digit at all for zero, whose sign is then dropped), so equal
/// values have equal parts: what exact integer conversion and exact comparison read.
/// Exponents saturate at ±10^15, far beyond any value a double or an `Int64` holds.
package struct DecimalParts {
    package let negative: Bool
    package let digits: [UInt8]
    package let exponent: Int

    package init(lexeme bytes: UnsafeBufferPointer<UInt8>) {
        var index = 0
        let negative = bytes.first == UInt8(ascii: "-")
        if negative { index = 1 }
        // Significant digits (integer part then fraction, leading zeros dropped) and the
        // number of fraction digits among them.
        var digits: [UInt8] = []
        var fractionDigits = 0
        var inFraction = false
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: ".") {
                inFraction = true
            } else if byte | 0x20 == UInt8(ascii: "e") {
                break
            } else {
                let digit = byte &- UInt8(ascii: "0")
                if !(digits.isEmpty && digit == 0) { digits.append(digit) }
                if inFraction { fractionDigits += 1 }
            }
            index += 1
        }
        var exponent = 0
        if index < bytes.count {  // at 'e'
            index += 1
            var exponentNegative = false
            if bytes[index] == UInt8(ascii: "-") || bytes[index] == UInt8(ascii: "+") {
                exponentNegative = bytes[index] == UInt8(ascii: "-")
                index += 1
            }
            while index < bytes.count {
                exponent = min(exponent * 10 + Int(bytes[index] &- UInt8(ascii: "0")), 1_000_000_000_000_000)
                index += 1
            }
            if exponentNegative { exponent = -exponent }
        }
        exponent -= fractionDigits
        // Trailing zeros raise the exponent instead.
        while let last = digits.last, last == 0 {
            digits.removeLast()
            exponent += 1
        }
        self.negative = negative && !digits.isEmpty
        self.digits = digits
        self.exponent = digits.isEmpty ? 0 : exponent
    }
}
