/// A request body that parsed as JSON but does not have the protocol's shape: a missing
/// required field or a wrong type. The server answers `422 invalid_request` with
/// `details.field` naming the first bad field (docs/protocol.md section 2).
public struct WireError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The path of the first bad field, e.g. `changes[3].changeId`.
    public let field: String
    /// What is wrong with it, for people.
    public let message: String
    /// `field` as the server keeps it where operators read errors: without the member
    /// names the client chose (`collectionVersions.…`), so no client text is stored.
    public let keptField: String

    public init(field: String, message: String, keptField: String? = nil) {
        self.field = field
        self.message = message
        self.keptField = keptField ?? field
    }

    public var description: String { "\(field): \(message)" }
}

/// Reads typed fields out of a JSON object, naming the field path in every error.
/// Unknown fields are ignored, as the protocol requires.
public struct FieldReader: Sendable {
    public let object: JSONObject
    /// The path of this object inside the request (empty at the top level).
    public let path: String

    public init(_ value: JSONValue, path: String = "") throws(WireError) {
        guard case .object(let object) = value else {
            throw WireError(field: path.isEmpty ? "body" : path, message: "must be a JSON object")
        }
        self.object = object
        self.path = path
    }

    public init(object: JSONObject, path: String = "") {
        self.object = object
        self.path = path
    }

    /// The path of `key` in this object.
    public func fieldPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// True when the key is present (even with a null value).
    public func has(_ key: String) -> Bool { object[key] != nil }

    public func string(_ key: String) throws(WireError) -> String {
        guard let value = object[key] else { throw missing(key) }
        guard case .string(let s) = value else { throw wrongType(key, "a string") }
        return s
    }

    public func optionalString(_ key: String) throws(WireError) -> String? {
        guard let value = object[key], !value.isNull else { return nil }
        guard case .string(let s) = value else { throw wrongType(key, "a string") }
        return s
    }

    public func int64(_ key: String) throws(WireError) -> Int64 {
        guard let value = object[key] else { throw missing(key) }
        guard let n = value.int64Value else { throw wrongType(key, "an integer") }
        return n
    }

    public func optionalInt64(_ key: String) throws(WireError) -> Int64? {
        guard let value = object[key], !value.isNull else { return nil }
        guard let n = value.int64Value else { throw wrongType(key, "an integer") }
        return n
    }

    public func int(_ key: String) throws(WireError) -> Int {
        Int(try int64(key))
    }

    public func bool(_ key: String) throws(WireError) -> Bool {
        guard let value = object[key] else { throw missing(key) }
        guard case .bool(let b) = value else { throw wrongType(key, "a boolean") }
        return b
    }

    public func optionalBool(_ key: String) throws(WireError) -> Bool? {
        guard let value = object[key], !value.isNull else { return nil }
        guard case .bool(let b) = value else { throw wrongType(key, "a boolean") }
        return b
    }

    public func array(_ key: String) throws(WireError) -> [JSONValue] {
        guard let value = object[key] else { throw missing(key) }
        guard case .array(let a) = value else { throw wrongType(key, "an array") }
        return a
    }

    public func optionalObject(_ key: String) throws(WireError) -> JSONObject? {
        guard let value = object[key], !value.isNull else { return nil }
        guard case .object(let o) = value else { throw wrongType(key, "an object") }
        return o
    }

    public func object(_ key: String) throws(WireError) -> JSONObject {
        guard let value = object[key] else { throw missing(key) }
        guard case .object(let o) = value else { throw wrongType(key, "an object") }
        return o
    }

    public func nested(_ key: String) throws(WireError) -> FieldReader {
        FieldReader(object: try object(key), path: fieldPath(key))
    }

    public func missing(_ key: String) -> WireError {
        WireError(field: fieldPath(key), message: "is required")
    }

    public func wrongType(_ key: String, _ expected: String) -> WireError {
        WireError(field: fieldPath(key), message: "must be \(expected)")
    }

    public func invalid(_ key: String, _ message: String) -> WireError {
        WireError(field: fieldPath(key), message: message)
    }
}

/// A wire type that decodes from and encodes to JSON.
public protocol JSONWireType: Sendable {
    init(json: JSONValue) throws(WireError)
    var json: JSONValue { get }
}

extension JSONWireType {
    /// Parses and decodes bytes. A body that is not JSON throws `JSONError`; a body of the
    /// wrong shape throws `WireError`.
    public static func decode(_ bytes: [UInt8]) throws -> Self {
        try Self(json: JSONParser.parse(bytes))
    }

    /// The compact JSON encoding.
    public func encoded() -> [UInt8] { json.encoded() }
}

extension Optional where Wrapped == JSONValue {
    var orNull: JSONValue { self ?? .null }
}
