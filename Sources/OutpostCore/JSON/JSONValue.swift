/// A JSON value as Outpost reads and writes it (RFC 8259).
///
/// Numbers keep their exact text (`JSONNumber`), objects keep their member order
/// (`JSONObject`), and strings compare byte for byte. Parse with `JSONParser`, write with
/// `JSONWriter` or `encoded(canonical:)`.
///
/// ```swift
/// let change: JSONValue = ["op": "put", "data": ["title": "Buy milk"], "baseVersion": nil]
/// change["data"]?["title"]?.stringValue  // "Buy milk"
/// String(decoding: change.encoded(), as: UTF8.self)
/// // {"op":"put","data":{"title":"Buy milk"},"baseVersion":null}
/// ```
public enum JSONValue: Sendable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number, with its lexeme.
    case number(JSONNumber)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object.
    case object(JSONObject)
}

// MARK: - Accessors

extension JSONValue {
    /// The string, when this is a string.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The object, when this is an object.
    public var objectValue: JSONObject? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The elements, when this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The number, when this is a number.
    public var numberValue: JSONNumber? {
        if case .number(let value) = self { return value }
        return nil
    }

    /// The number as an exact `Int64` (see `JSONNumber.int64Value`), when this is one.
    public var int64Value: Int64? {
        if case .number(let value) = self { return value.int64Value }
        return nil
    }

    /// The number as the nearest `Double`, when this is a number.
    public var doubleValue: Double? {
        if case .number(let value) = self { return value.doubleValue }
        return nil
    }

    /// The Boolean, when this is `true` or `false`.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// Whether this is `null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The member named `key`, when this is an object that has one.
    public subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    /// The element at `index`, when this is an array and `index` is in range.
    public subscript(index: Int) -> JSONValue? {
        if case .array(let array) = self, array.indices.contains(index) { return array[index] }
        return nil
    }

    /// The compact (or, with `canonical`, key-sorted) JSON text of this value as UTF-8.
    public func encoded(canonical: Bool = false) -> [UInt8] {
        var output = JSONOutput(capacity: 256)
        JSONWriter.write(self, to: &output, canonical: canonical)
        return output.withBytes { Array($0) }
    }
}

extension JSONValue: CustomStringConvertible {
    /// The compact JSON text.
    public var description: String { String(decoding: encoded(), as: UTF8.self) }
}

// MARK: - Equality

extension JSONValue: Hashable {
    /// Structural equality: strings byte for byte, numbers by lexeme, objects in any order.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.string(let a), .string(let b)): utf8Equal(a, b)
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)): a == b
        default: false
        }
    }

    /// Consistent with `==`.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null:
            hasher.combine(0 as UInt8)
        case .bool(let value):
            hasher.combine(1 as UInt8)
            hasher.combine(value)
        case .number(let value):
            hasher.combine(2 as UInt8)
            hasher.combine(value)
        case .string(let value):
            hasher.combine(3 as UInt8)
            utf8Hash(value, into: &hasher)
        case .array(let value):
            hasher.combine(4 as UInt8)
            hasher.combine(value.count)
            for element in value { element.hash(into: &hasher) }
        case .object(let value):
            hasher.combine(5 as UInt8)
            value.hash(into: &hasher)
        }
    }
}

// MARK: - Literals

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    /// `nil` is `null`.
    public init(nilLiteral: ()) { self = .null }
    /// `true` / `false`.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// `42` (lexeme `42`).
    public init(integerLiteral value: Int64) { self = .number(JSONNumber(value)) }
    /// `1.5` (lexeme from `Double.description`, e.g. `1.5`).
    public init(floatLiteral value: Double) { self = .number(JSONNumber(value)) }
    /// `"text"`.
    public init(stringLiteral value: String) { self = .string(value) }
    /// `[1, "two", nil]`.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// `["a": 1, "b": 2]`, members in the order written. Keys must be distinct.
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(JSONObject(elements)) }
}
