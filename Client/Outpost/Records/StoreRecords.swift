import Foundation
import OutpostCore

// The records part of the store's surface: saving and reading records. A save is a block
// of one write (`Queue/Transaction.swift`); the app's reads run beside the actor on the
// read pool (`Store/ReadPool.swift`).
extension OutpostStore {
    /// Saves a Codable value as the record `collection`/`id` (a put). Local only: the
    /// record and its queue entry are written in one transaction; the network is not
    /// touched. Returns the record as stored.
    ///
    /// Fields the app's type does not know survive: the put is `value` encoded, plus every
    /// field of the record as the store shows it now that `T` never reads, at every level
    /// of nested objects; a field `T` reads and `value` leaves out is removed
    /// (docs/client.md, "Fields an app does not know"). What `T` reads is learned from the
    /// store's first decode of it in `collection` (`get`, `all`, `values`,
    /// `StoredRecord.decode`); before any, the save decodes the stored record as `T` with
    /// `decoder` to learn it (pass the decoder the app reads with when it sets strategies).
    /// The default coder is `RecordCoder.standard`'s: dates as RFC 3339 text (docs/client.md,
    /// "Dates"). A typed collection (`collection(_:of:coder:)`) names its coder once.
    @discardableResult
    public func save<T: Encodable & OutpostSendableMetatype>(_ value: T, in collection: String, id: String, encoder: JSONEncoder = RecordCoder.standardEncoder(),
                                   decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> StoredRecord {
        var tx = OutpostTransaction()
        try tx.save(value, in: collection, id: id, encoder: encoder, decoder: decoder)
        return try committedRecord(tx)
    }

    /// Saves raw JSON as the record `collection`/`id` (a put). See `save(_:in:id:)`.
    @discardableResult
    public func put(_ data: JSONObject, in collection: String, id: String) throws -> StoredRecord {
        var tx = OutpostTransaction()
        try tx.put(data, in: collection, id: id)
        return try committedRecord(tx)
    }

    /// Deletes the record (a tombstone: the delete syncs like any edit). Returns false when
    /// there was nothing to delete.
    @discardableResult
    public func delete(from collection: String, id: String) throws -> Bool {
        var tx = OutpostTransaction()
        try tx.delete(from: collection, id: id)
        return try !commit(tx.writes).isEmpty
    }

    /// Commits a block of one put; the record as stored.
    private func committedRecord(_ tx: OutpostTransaction) throws -> StoredRecord {
        guard let shown = try commit(tx.writes).first?.shown else { throw OutpostError.storage("the saved record is not in the store") }
        return try Self.storedRecord(shown)
    }

    // MARK: - Reading

    /// The record decoded as `type`; nil when absent or deleted.
    ///
    /// The reads of the app (`get`, `all`, `record`, `records`, `status`) run on a
    /// read-only connection of their own, on its own thread, with the caller (the main
    /// actor, for a screen) suspended meanwhile: they never wait for the store's actor,
    /// which may be applying a pulled page, and never hold the caller's thread while they
    /// read the rows and parse their JSON. They see every save that returned before them,
    /// and a pulled page whole or not at all (docs/client.md, "Reads beside the writer").
    /// Only the last step, `T`'s `Decodable` initializer, runs with the caller's isolation:
    /// an app type's conformance may be isolated to the main actor (an app target's
    /// default), and then must not run anywhere else.
    public func get<T: Decodable>(_ type: T.Type, from collection: String, id: String, decoder: JSONDecoder = RecordCoder.standardDecoder(),
                                  isolation: isolated (any Actor)? = #isolation) async throws -> T? {
        guard let record = try await record(in: collection, id: id), !record.deleted else { return nil }
        return try record.decode(T.self, decoder: decoder)
    }

    /// Every live record of `collection` decoded as `type`, ordered by id.
    public func all<T: Decodable>(_ type: T.Type, in collection: String, decoder: JSONDecoder = RecordCoder.standardDecoder(),
                                  isolation: isolated (any Actor)? = #isolation) async throws -> [T] {
        try await records(in: collection).map { try $0.decode(T.self, decoder: decoder) }
    }

    /// The record (tombstones included), or nil when the store has never held it.
    public func record(in collection: String, id: String, isolation: isolated (any Actor)? = #isolation) async throws -> StoredRecord? {
        let key = RecordKey(collection: collection, id: id)
        return try await appRead { try $0.shown(key).map(Self.storedRecord) }
    }

    /// The live records of `collection` (all collections when nil), ordered by collection
    /// and id; tombstones only with `includeDeleted`.
    public func records(in collection: String? = nil, includeDeleted: Bool = false,
                        isolation: isolated (any Actor)? = #isolation) async throws -> [StoredRecord] {
        try await appRead { d in
            try d.shown(collection: collection).filter { includeDeleted || !$0.body.deleted }.map(Self.storedRecord)
        }
    }

    /// Runs one of the app's reads on a read-only connection (`ReadPool`), the caller
    /// suspended; on the store's actor when the store has no such connections (in memory,
    /// a reader store) or all of them are in use.
    func appRead<T>(_ body: @escaping @Sendable (LocalDatabase) throws -> T,
                    isolation: isolated (any Actor)? = #isolation) async throws -> T {
        if let readers, let read = try await readers.read(body) { return read.value }
        return try await readOnActor(body).value
    }

    /// `read`, with its result handed over to a caller on another actor.
    private func readOnActor<T>(_ body: @Sendable (LocalDatabase) throws -> T) throws -> ReadPool.Handover<T> {
        ReadPool.Handover(value: try read(body))
    }

    static func storedRecord(_ shown: LocalDatabase.Shown) throws -> StoredRecord {
        StoredRecord(collection: shown.key.collection, id: shown.key.id, data: try shown.body.data.map(decodeObject),
                     deleted: shown.body.deleted, version: shown.version, pending: shown.pending,
                     updatedAt: shown.updatedAt.map(Date.init(milliseconds:)), updatedBy: shown.updatedBy)
    }
}
