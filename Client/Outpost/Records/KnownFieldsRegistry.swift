import Foundation
import OutpostCore
import Synchronization

// Which fields each app type reads, per collection, and the put a typed save makes from it
// (docs/client.md, "Fields an app does not know").

/// What is known of the fields one `Decodable` type reads in one collection: the union of
/// the decodes that learned it in this process (the first decode of the type there, and
/// the copies saves were made on when they had to learn), and the key strategy of the
/// decoder of the last one (to name a JSON key as the type's `CodingKey`s do).
struct TypeFields: Sendable {
    var fields: KnownFields
    var keyStrategy: JSONDecoder.KeyDecodingStrategy
}

/// The process's knowledge of the fields app types read, by (type, collection). A type's
/// reads are a property of its code, the same for every store the process opens, so one
/// registry serves them all. Thread-safe: stores and `StoredRecord.decode` record from any
/// thread.
enum KnownFieldsRegistry {
    struct Key: Hashable {
        let type: ObjectIdentifier
        let collection: String
    }

    private static let entries = Mutex<[Key: TypeFields]>([:])

    static func fields<T>(of type: T.Type, in collection: String) -> TypeFields? {
        entries.withLock { $0[Key(type: ObjectIdentifier(type), collection: collection)] }
    }

    /// Adds what one decode of `type` read to what is known.
    static func record<T>(_ type: T.Type, in collection: String, _ fields: KnownFields, keyStrategy: JSONDecoder.KeyDecodingStrategy) {
        let key = Key(type: ObjectIdentifier(type), collection: collection)
        entries.withLock { entries in
            let known = entries[key].map { $0.fields.union(fields) } ?? fields
            entries[key] = TypeFields(fields: known, keyStrategy: keyStrategy)
        }
    }

    /// Decodes `object` as `type` with `decoder`; the first decode of `type` in
    /// `collection` learns what it reads, later ones decode plainly (a recording decode
    /// costs about half as much again: docs/client.md, "Fields an app does not know").
    static func decode<T: Decodable>(_ type: T.Type, from object: JSONObject, in collection: String, decoder: JSONDecoder) throws -> T {
        guard fields(of: type, in: collection) == nil else { return try JSONValue.object(object).decode(type, decoder: decoder) }
        return try learn(type, from: object, in: collection, decoder: decoder)
    }

    /// Decodes `object` as `type` with `decoder`, adding the fields it read to what is
    /// known of `type` in `collection`.
    @discardableResult
    static func learn<T: Decodable>(_ type: T.Type, from object: JSONObject, in collection: String, decoder: JSONDecoder) throws -> T {
        let recorded = try JSONValue.object(object).decode(Recorded<T>.self, decoder: decoder)
        record(T.self, in: collection, recorded.fields, keyStrategy: decoder.keyDecodingStrategy)
        return recorded.value
    }

    /// The put of a typed save of `app` over `base`, the copy the edit was made on (see
    /// `OutpostStore.save`). A `Decodable` type whose reads are not known yet in
    /// `collection`, or not known under a key `base` holds an object for, is taught by one
    /// decode of `base`; a type that cannot be taught keeps every field of `base` that `app`
    /// lacks, beyond what is known already.
    static func put<T>(_ app: JSONObject, of type: T.Type, over base: JSONObject, in collection: String, decoder: JSONDecoder) -> JSONObject {
        var incompletePut: JSONObject?
        if let known = fields(of: type, in: collection) {
            let (object, incomplete) = known.put(app, over: base)
            guard incomplete else { return object }
            incompletePut = object
        }
        if let decodable = type as? any Decodable.Type, learns(decodable, from: base, in: collection, decoder: decoder),
           let known = fields(of: type, in: collection) {
            return known.put(app, over: base).object
        }
        return incompletePut ?? TypeFields.putKnowingNothing(app, over: base)
    }

    /// Decodes `base` as `type` to learn what it reads; false when it does not decode.
    private static func learns<D: Decodable>(_ type: D.Type, from base: JSONObject, in collection: String, decoder: JSONDecoder) -> Bool {
        (try? learn(type, from: base, in: collection, decoder: decoder)) != nil
    }
}

extension TypeFields {
    /// The put of a typed save: the app's encoded object `app`, plus every member of
    /// `base` (the copy the edit was made on) that the type never reads, at every level of
    /// nested objects. A member the type reads and the app's object lacks stays out (the
    /// app cleared it); a member the app's object has is the app's (an array is one value).
    /// `incomplete` is true when `base` holds an object under a key whose value the type
    /// was never seen to open (it was absent or null whenever it was decoded): its members
    /// were kept as unknown, and a decode of `base` would teach what the type reads there.
    func put(_ app: JSONObject, over base: JSONObject) -> (object: JSONObject, incomplete: Bool) {
        var incomplete = false
        let object = Self.merge(app, base, fields, path: [], keyStrategy, &incomplete)
        return (object, incomplete)
    }

    /// The put made when nothing is known of what the type reads (it is not `Decodable`,
    /// or `base` does not decode as it): every member of `base` the app's object lacks is
    /// kept, as a field the type never reads would be.
    static func putKnowingNothing(_ app: JSONObject, over base: JSONObject) -> JSONObject {
        var ignored = false
        return merge(app, base, .unopened, path: [], .useDefaultKeys, &ignored)
    }

    private static func merge(_ app: JSONObject, _ base: JSONObject, _ known: KnownFields, path: [String],
                              _ strategy: JSONDecoder.KeyDecodingStrategy, _ incomplete: inout Bool) -> JSONObject {
        let keys: [String: KnownFields]
        switch known {
        case .whole: return app
        case .unopened: keys = [:]
        case .keys(let k): keys = k
        }
        var out = app
        for (key, baseValue) in base {
            let name = swiftName(key, path: path, strategy)
            let child = keys[name]
            guard let appValue = app[key] else {
                if child == nil { out[key] = baseValue }
                continue
            }
            guard case .object(let appObject) = appValue, case .object(let baseObject) = baseValue else { continue }
            let below = child ?? .unopened
            if case .unopened = below, child != nil { incomplete = true }
            out[key] = .object(merge(appObject, baseObject, below, path: path + [name], strategy, &incomplete))
        }
        return out
    }

    /// The name the type's `CodingKey` has for the JSON key `key`, by the decoder's key
    /// strategy (the JSONDecoder's own conversion, documented in Foundation).
    static func swiftName(_ key: String, path: [String], _ strategy: JSONDecoder.KeyDecodingStrategy) -> String {
        switch strategy {
        case .useDefaultKeys: return key
        case .convertFromSnakeCase: return fromSnakeCase(key)
        case .custom(let convert): return convert((path + [key]).map(PathKey.init)).stringValue
        @unknown default: return key
        }
    }

    /// A coding key of a path given to a `.custom` key strategy.
    struct PathKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ name: String) { stringValue = name }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// Foundation's `convertFromSnakeCase`: leading and trailing underscores are kept; the
    /// words between underscores are joined, the first in lower case and each other
    /// capitalized; a key without an inner underscore is unchanged.
    static func fromSnakeCase(_ key: String) -> String {
        guard let first = key.firstIndex(where: { $0 != "_" }) else { return key }
        var last = key.index(before: key.endIndex)
        while last > first && key[last] == "_" { key.formIndex(before: &last) }
        let core = key[first...last]
        let words = core.split(separator: "_")
        guard words.count > 1 else { return key }
        let joined = ([words[0].lowercased()] + words.dropFirst().map { $0.capitalized }).joined()
        return String(key[..<first]) + joined + String(key[key.index(after: last)...])
    }
}
