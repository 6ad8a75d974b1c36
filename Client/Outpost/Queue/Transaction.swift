import Foundation
import OutpostCore

/// The edits of one write block (`OutpostStore.transaction`), in the order the block made
/// them. The block runs in the caller's isolation: each value is encoded there, with the
/// app's own `Encodable` conformance (which may be isolated to the main actor), and the
/// store then writes every edit in one SQLite transaction.
///
/// ```swift
/// try await store.transaction { tx in
///     try tx.save(inspection, in: "inspections", id: inspection.id)
///     for item in inspection.items { try tx.save(item, id: item.id, in: items) }
///     try tx.delete(from: "drafts", id: inspection.id)
/// }
/// ```
public struct OutpostTransaction: Sendable {
    /// One edit, encoded and checked.
    struct Write: Sendable {
        enum Operation: Sendable {
            /// A put of `object`, merged over the stored record by `merge` (a typed save:
            /// fields the app's type does not know survive) or written as it is (raw JSON).
            case put(JSONObject, merge: (@Sendable (JSONObject, JSONObject) -> JSONObject)?)
            /// A delete; nothing when the record is absent or deleted already.
            case delete
            /// An edit of exactly this content (a re-encryption rewrites what is stored).
            case rewrite(Body)
        }

        let key: RecordKey
        let operation: Operation
    }

    /// The edits so far, in order.
    var writes: [Write] = []

    init() {}

    /// How many edits the block holds.
    public var count: Int { writes.count }

    /// Saves `value` as the record `collection`/`id` when the block commits: as
    /// `OutpostStore.save(_:in:id:encoder:decoder:)` does, fields `T` does not know survive.
    ///
    /// - Throws: `invalidName`, or `encoding` when `value` does not encode as a JSON object
    ///   (the block then writes nothing, if the caller lets the error end it).
    public mutating func save<T: Encodable & OutpostSendableMetatype>(_ value: T, in collection: String, id: String,
                                            encoder: JSONEncoder = RecordCoder.standardEncoder(),
                                            decoder: JSONDecoder = RecordCoder.standardDecoder()) throws {
        let object = try Self.object(encoding: value, encoder: encoder)
        let key = try Self.key(collection, id)
        writes.append(Write(key: key, operation: .put(object, merge: { app, base in
            KnownFieldsRegistry.put(app, of: T.self, over: base, in: collection, decoder: decoder)
        })))
    }

    /// Saves `value` as the record `id` of a typed collection, with its coder.
    public mutating func save<Value: Encodable & OutpostSendableMetatype>(_ value: Value, id: String, in collection: OutpostCollection<Value>) throws {
        try save(value, in: collection.name, id: id, encoder: collection.coder.encoder, decoder: collection.coder.decoder)
    }

    /// Saves raw JSON as the record `collection`/`id` (a put, written as it is).
    public mutating func put(_ data: JSONObject, in collection: String, id: String) throws {
        let key = try Self.key(collection, id)
        try Self.check(data)
        writes.append(Write(key: key, operation: .put(data, merge: nil)))
    }

    /// Deletes the record `collection`/`id` when the block commits (a tombstone that syncs
    /// like any edit); nothing when it is absent or already deleted then.
    public mutating func delete(from collection: String, id: String) throws {
        writes.append(Write(key: try Self.key(collection, id), operation: .delete))
    }

    /// Deletes the record `id` of a typed collection.
    public mutating func delete<Value>(_ id: String, in collection: OutpostCollection<Value>) throws {
        try delete(from: collection.name, id: id)
    }

    // MARK: Checks (the same for a block of one, `save`, `put` and `delete`)

    static func key(_ collection: String, _ id: String) throws -> RecordKey {
        guard Names.isValidCollection(collection) else {
            throw OutpostError.invalidName("invalid collection name \"\(collection)\": ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
        }
        guard Names.isValidRecordID(id) else { throw OutpostError.invalidName("invalid record id: 1 to 256 bytes of UTF-8, no control characters") }
        return RecordKey(collection: collection, id: id)
    }

    static func object<T: Encodable>(encoding value: T, encoder: JSONEncoder) throws -> JSONObject {
        let json: JSONValue
        do { json = try JSONValue(encoding: value, encoder: encoder) } catch { throw OutpostError.encoding("\(error)") }
        guard case .object(let object) = json else { throw OutpostError.encoding("\(T.self) does not encode as a JSON object") }
        try check(object)
        return object
    }

    static func check(_ data: JSONObject) throws {
        guard JSONValue.object(data).depth <= 64 else { throw OutpostError.encoding("records nest at most 64 levels") }
    }
}

extension OutpostStore {
    /// Runs `body`, then writes every save and delete it made in one SQLite transaction:
    /// one commit (one fsync under `.full` durability), all or nothing, in the order the
    /// block made them (the queue sends them in that order), and observers told once, with
    /// every record touched. Local only, like `save`.
    ///
    /// `body` runs in the caller's isolation (the main actor, for a screen), where values
    /// are encoded; if it throws, nothing is written. Two edits of one record in a block
    /// are two edits, as two saves would be (the queue folds them as it does any two).
    ///
    /// - Returns: what `body` returned.
    /// - Throws: what `body` throws; `storage` when the transaction fails (nothing written).
    @discardableResult
    public func transaction<R>(isolation: isolated (any Actor)? = #isolation,
                                           _ body: (inout OutpostTransaction) throws -> R) async throws -> R {
        var tx = OutpostTransaction()
        let result = try body(&tx)
        let writes = tx.writes
        if !writes.isEmpty { try await commit(writes, showing: false) }
        return result
    }

    /// Writes `writes` in one transaction and tells observers once. Returns each record
    /// written, in order, with what the app sees of it after the commit when `showing` (nil
    /// for a delete); a delete of a record that was absent or deleted already writes
    /// nothing and has no entry.
    @discardableResult
    func commit(_ writes: [OutpostTransaction.Write], showing: Bool = true) throws -> [(key: RecordKey, shown: LocalDatabase.Shown?)] {
        // The edits' time by the server's clock as measured (docs/client.md, "The device's
        // clock"): what last-write-wins compares with other devices' edits.
        let time = serverNow()
        let written = try write { d in
            var written: [(key: RecordKey, shown: LocalDatabase.Shown?)] = []
            let phase = try phase(d)
            for w in writes {
                let body: Body
                switch w.operation {
                case .put(let object, let merge):
                    var data = object
                    if let merge, let bytes = try d.shown(w.key)?.body.data, let base = try? decodeObject(bytes) { data = merge(object, base) }
                    body = Body(data: encodeObject(data))
                case .delete:
                    guard let stored = try d.shown(w.key), !stored.body.deleted else { continue }
                    body = .tombstone
                case .rewrite(let content):
                    body = content
                }
                var ids = rng
                let changeId = Identifiers.changeID(nowMs: time, using: &ids)
                rng = ids
                try transition(w.key, .edit(body, changeId: changeId, time: time), d, phase: phase)
                written.append((w.key, showing ? try d.shown(w.key) : nil))
            }
            return written
        }
        var seen = Set<RecordKey>()
        notify(StoreEvent(origin: .local, keys: written.map(\.key).filter { seen.insert($0).inserted }))
        return written
    }
}
