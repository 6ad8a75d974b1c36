// Codable conformance, so a JSONValue can sit inside Codable types and go through any coder
// (Foundation's JSONEncoder/JSONDecoder included). Codable has no notion of a number's
// text, so numbers travel as the closest Swift type: integer lexemes as Int64 (or UInt64),
// everything else as Double. Object key order is kept on encode when the encoder keeps it;
// a keyed decoding container does not promise any order.

/// A coding key for arbitrary object keys.
private struct AnyCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { return nil }
}

extension JSONValue: Codable {
    /// Decodes whatever the decoder holds: null, Bool, integer (Int64, then UInt64),
    /// floating point, string, array or keyed object, tried in that order.
    public init(from decoder: any Decoder) throws {
        if let single = try? decoder.singleValueContainer() {
            if single.decodeNil() {
                self = .null
                return
            }
            if let value = try? single.decode(Bool.self) {
                self = .bool(value)
                return
            }
            if let value = try? single.decode(Int64.self) {
                self = .number(JSONNumber(value))
                return
            }
            if let value = try? single.decode(UInt64.self) {
                self = .number(JSONNumber(lexeme: String(value))!)
                return
            }
            if let value = try? single.decode(Double.self), value.isFinite {
                self = .number(JSONNumber(value))
                return
            }
            if let value = try? single.decode(String.self) {
                self = .string(value)
                return
            }
        }
        if var unkeyed = try? decoder.unkeyedContainer() {
            var elements: [JSONValue] = []
            if let count = unkeyed.count { elements.reserveCapacity(count) }
            while !unkeyed.isAtEnd { elements.append(try unkeyed.decode(JSONValue.self)) }
            self = .array(elements)
            return
        }
        let keyed = try decoder.container(keyedBy: AnyCodingKey.self)
        var object = JSONObject()
        for key in keyed.allKeys { object[key.stringValue] = try keyed.decode(JSONValue.self, forKey: key) }
        self = .object(object)
    }

    /// Encodes as the matching Codable primitive or container.
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var single = encoder.singleValueContainer()
            try single.encodeNil()
        case .bool(let value):
            var single = encoder.singleValueContainer()
            try single.encode(value)
        case .number(let number):
            var single = encoder.singleValueContainer()
            if case .int(let value) = number.storage {
                try single.encode(value)
            } else if number.isIntegerLexeme, !number.lexeme.hasPrefix("-"), let value = UInt64(number.lexeme) {
                try single.encode(value)  // beyond Int64.max
            } else {  // fractions, exponents, "-0" (as -0.0) and integers beyond UInt64
                try single.encode(number.doubleValue)
            }
        case .string(let value):
            var single = encoder.singleValueContainer()
            try single.encode(value)
        case .array(let elements):
            var unkeyed = encoder.unkeyedContainer()
            for element in elements { try unkeyed.encode(element) }
        case .object(let object):
            try object.encode(to: encoder)
        }
    }
}

extension JSONObject: Codable {
    /// Decodes a keyed container (member order is the decoder's).
    public init(from decoder: any Decoder) throws {
        guard case .object(let object) = try JSONValue(from: decoder) else {
            throw DecodingError.typeMismatch(
                JSONObject.self,
                DecodingError.Context(codingPath: decoder.codingPath, debugDescription: "expected a JSON object"))
        }
        self = object
    }

    /// Encodes as a keyed container, members in order.
    public func encode(to encoder: any Encoder) throws {
        var keyed = encoder.container(keyedBy: AnyCodingKey.self)
        for member in members { try keyed.encode(member.value, forKey: AnyCodingKey(stringValue: member.key)) }
    }
}

extension JSONNumber: Codable {
    /// Decodes an integer (Int64, then UInt64) or a finite floating-point number.
    public init(from decoder: any Decoder) throws {
        guard case .number(let number) = try JSONValue(from: decoder) else {
            throw DecodingError.typeMismatch(
                JSONNumber.self,
                DecodingError.Context(codingPath: decoder.codingPath, debugDescription: "expected a number"))
        }
        self = number
    }

    /// Encodes as Int64 or UInt64 when the lexeme is an integer that fits, else as Double.
    public func encode(to encoder: any Encoder) throws {
        try JSONValue.number(self).encode(to: encoder)
    }
}
