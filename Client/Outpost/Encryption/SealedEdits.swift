import OutpostCore
import OutpostSQLite

// The wire form of the puts of an end-to-end encrypted store (docs/encryption.md).
//
// A put is sealed once, when its edit is saved, and the sealed form is what every send of
// that change carries: a change sent again after a lost answer must be the same change
// (the server's idempotency compares it), and a fresh nonce would make another one. A
// changeId names one content for ever (an edit that absorbs a newer one, or is resolved
// into another content, takes a new changeId: Engine.edit, Engine.conflict), so the sealed
// form is kept by changeId. Only unsettled edits need one (a settled change is never sent
// again); the others are pruned after each push phase.

extension LocalDatabase {
    /// Seals each unsettled put of `model` that has no sealed form yet.
    func keepSealed(_ model: RecordModel, _ cipher: RecordCipher) throws {
        for edit in model.edits where edit.delivery.isUnsettled {
            guard let data = edit.body.data else { continue }
            try sealIfAbsent(edit.changeId, model.key, data, cipher)
        }
    }

    /// Drops the sealed forms of changes that are settled or gone (after a push phase:
    /// once per sync rather than once per save).
    func pruneSealed() throws {
        try db.run("""
            DELETE FROM sealed WHERE change_id NOT IN (SELECT change_id FROM edits WHERE delivery IN ('queued', 'sent'))
            """, [])
    }

    @discardableResult
    private func sealIfAbsent(_ changeId: String, _ key: RecordKey, _ data: [UInt8], _ cipher: RecordCipher) throws -> [UInt8] {
        if let stored = try db.cached("SELECT data FROM sealed WHERE change_id = ?").queryOne([.text(changeId)], { $0.blob(0) }) { return stored }
        let wire = encodeObject(try cipher.seal(collection: key.collection, id: key.id, data: data))
        try db.cached("INSERT INTO sealed(change_id, collection, id, data) VALUES (?, ?, ?, ?)")
            .run([.text(changeId), .text(key.collection), .text(key.id), .blob(wire)])
        return wire
    }

    /// `change` as it goes on the wire: a put of an encrypted store carries its sealed form
    /// (sealed now when its edit has none, as after `forgetQueuedSeals`).
    func wire(_ change: Change) throws -> Change {
        guard let cipher, change.op == .put, let data = change.data else { return change }
        var sealed = change
        let wire = try sealIfAbsent(change.changeId, RecordKey(collection: change.collection, id: change.id), encodeObject(data), cipher)
        guard case .object(let object) = try JSONParser.parse(wire) else { throw OutpostError.storage("a sealed change is not a JSON object") }
        sealed.data = object
        return sealed
    }

    /// Drops every sealed form (the keyring changed: queued puts are sealed again under the
    /// current key when next saved or sent). Sent ones are kept: they go again as they were.
    func forgetQueuedSeals() throws {
        try db.run("DELETE FROM sealed WHERE change_id IN (SELECT change_id FROM edits WHERE delivery = 'queued')", [])
    }
}
