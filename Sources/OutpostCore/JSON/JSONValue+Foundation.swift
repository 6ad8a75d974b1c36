// Bridges to Foundation's Codable coders for the client SDK's Codable records. This is the
// only file of the JSON layer that needs Foundation; parsing and writing do not.
import Foundation

extension JSONValue {
    /// The JSON form of a Codable value, made by `encoder` and read back by `JSONParser`.
    ///
    /// ```swift
    /// struct Todo: Codable { var title: String; var done: Bool }
    /// let data = try JSONValue(encoding: Todo(title: "Buy milk", done: false))
    /// ```
    public init(encoding value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws {
        let bytes = try encoder.encode(value)
        self = try bytes.withUnsafeBytes { raw throws(JSONError) in try JSONParser(maxDepth: JSONParser.depthCeiling).parse(raw) }
    }

    /// Decodes a Codable value from this JSON, written by `JSONWriter` and read by `decoder`.
    ///
    /// ```swift
    /// let todo = try record.decode(Todo.self)
    /// ```
    public func decode<T: Decodable>(_ type: T.Type = T.self, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        try decoder.decode(T.self, from: Data(encoded()))
    }
}

extension JSONParser {
    /// Parses one JSON text from `data`.
    public func parse(_ data: Data) throws(JSONError) -> JSONValue {
        let result: Result<JSONValue, JSONError> = data.withUnsafeBytes { raw in
            Result { () throws(JSONError) in try parse(raw) }
        }
        return try result.get()
    }
}
