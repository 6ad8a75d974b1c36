import Foundation
import OutpostCore

// Learns which fields an app's `Decodable` type reads (docs/client.md, "Fields an app does
// not know"). The app's own `JSONDecoder` decodes the record, so every strategy it sets
// (dates, data, keys) applies as before; the type's `init(from:)` is handed a `Decoder`
// that forwards to the JSONDecoder's own and notes every key asked for: `decode`,
// `decodeIfPresent`, `decodeNil`, `contains`, nested containers. A nested value of a type
// that is not read whole is decoded through `superDecoder(forKey:)`, so its keys are noted
// under its key.

/// What a `Decodable` type reads of one JSON value, by the names its `CodingKey`s use.
indirect enum KnownFields: Sendable, Equatable {
    /// The key was asked for, but its value was never opened (it was absent or null).
    case unopened
    /// The value is read as one: a scalar, an array, a string-keyed dictionary, an object
    /// whose `allKeys` the type asks for, or a type the JSONDecoder decodes itself (`Date`,
    /// `Data`, `URL`, `Decimal`).
    case whole
    /// The value was opened as an object; the keys asked for, each with what is read below.
    case keys([String: KnownFields])

    /// What either reads: the union of two decodes of the same type.
    func union(_ other: KnownFields) -> KnownFields {
        switch (self, other) {
        case (.whole, _), (_, .whole): return .whole
        case (.unopened, let x), (let x, .unopened): return x
        case (.keys(let a), .keys(let b)): return .keys(a.merging(b) { $0.union($1) })
        }
    }
}

/// Types read as one value: a decode of one notes its key as `whole` and goes to the
/// JSONDecoder directly (which decodes dates, data, URLs, decimals and string-keyed
/// dictionaries by its own strategies, and never passes them a keyed container to note).
protocol ReadWhole {}
extension Bool: ReadWhole {}
extension String: ReadWhole {}
extension Double: ReadWhole {}
extension Float: ReadWhole {}
extension Int: ReadWhole {}
extension Int8: ReadWhole {}
extension Int16: ReadWhole {}
extension Int32: ReadWhole {}
extension Int64: ReadWhole {}
extension UInt: ReadWhole {}
extension UInt8: ReadWhole {}
extension UInt16: ReadWhole {}
extension UInt32: ReadWhole {}
extension UInt64: ReadWhole {}
extension Date: ReadWhole {}
extension Data: ReadWhole {}
extension URL: ReadWhole {}
extension Decimal: ReadWhole {}
extension Array: ReadWhole {}
extension Set: ReadWhole {}
extension Dictionary: ReadWhole where Key == String {}
extension JSONValue: ReadWhole {}
extension JSONObject: ReadWhole {}

/// The keys noted while one value decodes. Lives for one synchronous decode, on the
/// caller's thread only.
final class FieldRecorder {
    private var whole = false
    private var opened = false
    private var children: [String: FieldRecorder] = [:]

    func markWhole() { whole = true }
    func markOpened() { opened = true }

    /// The recorder of `key` (noting that the key was asked for).
    func child(_ key: any CodingKey) -> FieldRecorder { child(key.stringValue) }

    /// The recorder of the key named `name`.
    func child(_ name: String) -> FieldRecorder {
        if let existing = children[name] { return existing }
        let node = FieldRecorder()
        children[name] = node
        return node
    }

    var known: KnownFields {
        if whole { return .whole }
        guard opened || !children.isEmpty else { return .unopened }
        return .keys(children.mapValues(\.known))
    }
}

/// Decodes `T` from `decoder`'s value through a recording decoder. The entry point: a
/// JSONDecoder decodes `Recorded<T>`, whose `init(from:)` hands `T` the recording decoder.
struct Recorded<T: Decodable>: Decodable {
    let value: T
    let fields: KnownFields

    init(from decoder: any Decoder) throws {
        let node = FieldRecorder()
        if T.self is any ReadWhole.Type {
            value = try decoder.singleValueContainer().decode(T.self)
            node.markWhole()
        } else {
            value = try T(from: RecordingDecoder(base: decoder, node: node))
        }
        fields = node.known
    }
}

/// A `Decoder` that forwards to `base` and notes in `node` what is asked of it.
struct RecordingDecoder: Decoder {
    let base: any Decoder
    let node: FieldRecorder

    var codingPath: [any CodingKey] { base.codingPath }
    var userInfo: [CodingUserInfoKey: Any] { base.userInfo }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        let container = try base.container(keyedBy: type)
        node.markOpened()
        return KeyedDecodingContainer(RecordingKeyedContainer(base: container, node: node))
    }

    /// An array is one value (docs/client.md): its elements are not noted.
    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        node.markWhole()
        return try base.unkeyedContainer()
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        RecordingSingleValueContainer(decoder: self, base: try base.singleValueContainer())
    }

    /// Decodes `T` from this value: whole types by the JSONDecoder, others through `self`.
    func decodeValue<T: Decodable>(_ type: T.Type, _ container: any SingleValueDecodingContainer) throws -> T {
        if T.self is any ReadWhole.Type {
            node.markWhole()
            return try container.decode(T.self)
        }
        return try T(from: self)
    }
}

/// A single value is read whole unless it is itself a type that opens a container (a
/// wrapper around a struct, an optional struct): then that type's reads are noted here.
struct RecordingSingleValueContainer: SingleValueDecodingContainer {
    let decoder: RecordingDecoder
    let base: any SingleValueDecodingContainer

    var codingPath: [any CodingKey] { base.codingPath }

    func decodeNil() -> Bool { base.decodeNil() }
    func decode(_ type: Bool.Type) throws -> Bool { try decoder.decodeValue(type, base) }
    func decode(_ type: String.Type) throws -> String { try decoder.decodeValue(type, base) }
    func decode(_ type: Double.Type) throws -> Double { try decoder.decodeValue(type, base) }
    func decode(_ type: Float.Type) throws -> Float { try decoder.decodeValue(type, base) }
    func decode(_ type: Int.Type) throws -> Int { try decoder.decodeValue(type, base) }
    func decode(_ type: Int8.Type) throws -> Int8 { try decoder.decodeValue(type, base) }
    func decode(_ type: Int16.Type) throws -> Int16 { try decoder.decodeValue(type, base) }
    func decode(_ type: Int32.Type) throws -> Int32 { try decoder.decodeValue(type, base) }
    func decode(_ type: Int64.Type) throws -> Int64 { try decoder.decodeValue(type, base) }
    func decode(_ type: UInt.Type) throws -> UInt { try decoder.decodeValue(type, base) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try decoder.decodeValue(type, base) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try decoder.decodeValue(type, base) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try decoder.decodeValue(type, base) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try decoder.decodeValue(type, base) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(type, base) }
}

/// A keyed container that notes every key asked for. `decodeIfPresent` is the protocol's
/// own (`contains`, `decodeNil`, then `decode`), so it is noted through those.
struct RecordingKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let base: KeyedDecodingContainer<Key>
    let node: FieldRecorder

    var codingPath: [any CodingKey] { base.codingPath }

    /// A type that lists the keys reads every key at this level.
    var allKeys: [Key] {
        node.markWhole()
        return base.allKeys
    }

    func contains(_ key: Key) -> Bool {
        _ = node.child(key)
        return base.contains(key)
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        _ = node.child(key)
        return try base.decodeNil(forKey: key)
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decodeWhole(type, key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try decodeWhole(type, key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decodeWhole(type, key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try decodeWhole(type, key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decodeWhole(type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try decodeWhole(type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try decodeWhole(type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try decodeWhole(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decodeWhole(type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try decodeWhole(type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try decodeWhole(type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try decodeWhole(type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try decodeWhole(type, key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try decodeWhole(type, key) }

    private func decodeWhole<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T {
        node.child(key).markWhole()
        return try base.decode(type, forKey: key)
    }

    /// A nested value: whole types by the JSONDecoder; others through a recording decoder
    /// of the key's value. An absent key or a null goes to the JSONDecoder too, so its
    /// errors (and an optional's nil) are the JSONDecoder's own.
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        if T.self is any ReadWhole.Type { return try decodeWhole(type, key) }
        let child = node.child(key)
        guard base.contains(key), try !base.decodeNil(forKey: key) else { return try base.decode(type, forKey: key) }
        return try T(from: RecordingDecoder(base: base.superDecoder(forKey: key), node: child))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        let child = node.child(key)
        let container = try base.nestedContainer(keyedBy: type, forKey: key)
        child.markOpened()
        return KeyedDecodingContainer(RecordingKeyedContainer<NestedKey>(base: container, node: child))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        node.child(key).markWhole()
        return try base.nestedUnkeyedContainer(forKey: key)
    }

    /// The value under the key "super" (the default key of `superDecoder()`).
    func superDecoder() throws -> any Decoder {
        RecordingDecoder(base: try base.superDecoder(), node: node.child("super"))
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        RecordingDecoder(base: try base.superDecoder(forKey: key), node: node.child(key))
    }
}
