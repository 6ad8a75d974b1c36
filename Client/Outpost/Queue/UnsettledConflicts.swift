import Foundation
import OutpostCore

/// A conflict the resolver left for a person (`Resolution.leaveForPerson`): the record shows
/// the local edit, marked in conflict, and nothing of it is sent until the app settles it
/// (`OutpostStore.settleConflict(in:id:_:)`). Every other record syncs on meanwhile.
public struct UnsettledConflict: Sendable, Hashable {
    /// The record's collection and id.
    public let collection: String
    public let id: String
    /// The local edit the record shows; nil for a delete.
    public let local: JSONObject?
    /// The server's newest copy the store holds (pulls go on while the conflict waits);
    /// nil when it is a tombstone.
    public let server: JSONObject?
    /// That copy's version.
    public let serverVersion: Version?
    /// What the app showed when it made the local edit, from the conflict journal while it
    /// keeps the decision (`Configuration.conflictRetention`); nil without one.
    public let base: JSONObject?
    /// When the resolver left it (the journal's time; the edit's when the journal no longer
    /// has it).
    public let since: Date

    /// The local edit decoded as the app's type; nil for a delete.
    public func local<T: Decodable>(as type: T.Type, decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> T? {
        try local.map { try ConflictEntry.decode($0, as: type, decoder: decoder, collection: collection, id: id) }
    }

    /// The server's copy decoded as the app's type; nil for a tombstone.
    public func server<T: Decodable>(as type: T.Type, decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> T? {
        try server.map { try ConflictEntry.decode($0, as: type, decoder: decoder, collection: collection, id: id) }
    }

    /// The base decoded as the app's type; nil without one.
    public func base<T: Decodable>(as type: T.Type, decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> T? {
        try base.map { try ConflictEntry.decode($0, as: type, decoder: decoder, collection: collection, id: id) }
    }
}

extension OutpostStore {
    /// The conflicts waiting for a person, in queue order; of one collection, or all.
    /// They survive restarts; `status().conflicts` counts them and `observeConflicts()`
    /// tells each as the resolver leaves it.
    public func unsettledConflicts(in collection: String? = nil) throws -> [UnsettledConflict] {
        try read { d in
            var out: [UnsettledConflict] = []
            for key in try d.keysInConflict(collection) {
                guard let model = try d.model(key), let held = model.edits.first(where: { $0.inConflict && $0.delivery == .queued }) else { continue }
                let left = try d.leftForPerson(key)
                out.append(UnsettledConflict(collection: key.collection, id: key.id, local: held.body.data.flatMap { try? decodeObject($0) },
                                             server: model.server?.body?.data.flatMap { try? decodeObject($0) }, serverVersion: model.server?.version,
                                             base: left?.base, since: Date(milliseconds: left?.decidedAt ?? held.createdAt)))
            }
            return out
        }
    }

    /// Settles the conflict of `collection`/`id` left for a person: `.keepLocal` sends the
    /// local edit, `.keepServer` drops it (the server's copy stands), `.write(data)` sends a
    /// value the person merged, `.delete` a delete. What is sent is an ordinary edit made on
    /// the server's copy the app showed (`UnsettledConflict.server`), under a new change id;
    /// if the server's copy moved on before it arrives, it meets the resolver again.
    /// Returns false when no conflict waits there (`.leaveForPerson` settles nothing).
    @discardableResult
    public func settleConflict(in collection: String, id: String, _ resolution: Resolution) throws -> Bool {
        let key = try OutpostTransaction.key(collection, id)
        if case .write(let data) = resolution { try OutpostTransaction.check(data) }
        let time = serverNow()
        var ids = rng
        let changeId = Identifiers.changeID(nowMs: time, using: &ids)
        rng = ids
        let settled = try write { d in
            guard try d.model(key)?.edits.contains(where: { $0.inConflict && $0.delivery == .queued }) == true else { return false }
            let (_, after) = try transition(key, .settle(resolution, changeId: changeId, time: time), d)
            return !after.edits.contains { $0.inConflict && $0.delivery == .queued }
        }
        if settled { notify(StoreEvent(origin: .local, keys: [key])) }
        return settled
    }

    /// Settles the conflict with a value the person merged, encoded as `save` encodes.
    @discardableResult
    public func settleConflict<T: Encodable & OutpostSendableMetatype>(in collection: String, id: String, with value: T,
                                                                       encoder: JSONEncoder = RecordCoder.standardEncoder()) throws -> Bool {
        try settleConflict(in: collection, id: id, .write(OutpostTransaction.object(encoding: value, encoder: encoder)))
    }
}

extension OutpostCollection {
    /// The collection's conflicts waiting for a person.
    public func unsettledConflicts(isolation: isolated (any Actor)? = #isolation) async throws -> [UnsettledConflict] {
        try await store.unsettledConflicts(in: name)
    }

    /// Settles the conflict of record `id` (see `OutpostStore.settleConflict(in:id:_:)`).
    @discardableResult
    public func settleConflict(_ id: String, _ resolution: Resolution, isolation: isolated (any Actor)? = #isolation) async throws -> Bool {
        try await store.settleConflict(in: name, id: id, resolution)
    }
}

extension OutpostCollection where Value: Encodable {
    /// Settles the conflict of record `id` with a value the person merged.
    @discardableResult
    public func settleConflict(_ id: String, with value: Value, isolation: isolated (any Actor)? = #isolation) async throws -> Bool {
        let object = try OutpostTransaction.object(encoding: value, encoder: coder.encoder)
        return try await store.settleConflict(in: name, id: id, .write(object))
    }
}

extension LocalDatabase {
    /// The records with an edit waiting for a person, in queue order.
    func keysInConflict(_ collection: String?) throws -> [RecordKey] {
        let filter = collection == nil ? "" : " AND collection = ?"
        return try db.query("""
            SELECT collection, id, min(position) AS p FROM edits WHERE delivery = 'queued' AND in_conflict = 1\(filter)
            GROUP BY collection, id ORDER BY p
            """, collection.map { [.text($0)] } ?? []) { RecordKey(collection: $0.text(0), id: $0.text(1)) }
    }

    /// The journal's newest decision to leave `key` for a person: its base and time.
    func leftForPerson(_ key: RecordKey) throws -> (base: JSONObject?, decidedAt: Int64)? {
        try db.queryOne("""
            SELECT base, decided_at FROM conflict_journal WHERE collection = ? AND id = ? AND resolution = 'leaveForPerson'
            ORDER BY number DESC LIMIT 1
            """, [.text(key.collection), .text(key.id)]) { row in
            (base: row.optionalBlob(0).flatMap { try? decodeObject($0) }, decidedAt: row.int64(1))
        }
    }
}
