import OutpostCore

// What an end-to-end encrypted store adds to OutpostStore (docs/encryption.md).

extension OutpostStore {
    /// True when the store seals its records (`Configuration.encryption`).
    public nonisolated var isEncrypted: Bool { cipher != nil }

    /// The id of the key new writes are sealed under; nil for a store in clear.
    public nonisolated var currentKeyId: String? { cipher?.currentKeyId }

    /// A copy the server sent in a push answer (a conflict's current state), opened. One
    /// this store cannot open is quarantined and met as a copy the app cannot read.
    func openedCopy(_ state: RecordState, report: inout SyncReport) throws -> Copy {
        switch PreparedItem(state, validators: [:], cipher: cipher) {
        case .record(let record):
            return record.copy
        case .quarantine(let bad):
            try write(durability: .normal) { try $0.quarantine(bad, at: now()) }
            report.quarantined += 1
            var copy = Copy(state)
            copy.body = nil
            return copy
        case .revoked:
            return Copy(state)
        }
    }

    /// Reads the space's keyring from the key store again (after another process rotated
    /// or imported keys). Queued puts not yet sent are sealed again under the current key
    /// when next sent; sent ones go again as they were.
    public func reloadKeys() throws {
        guard let cipher, let keys = configuration.encryption?.keys else { return }
        guard let ring = try keys.keyring(space: space) else { throw EncryptionError.noKeyring(space: space) }
        cipher.use(ring)
        try write { try $0.forgetQueuedSeals() }
    }

    /// Rotates the space's key (`SpaceKeys.rotate`): new writes are sealed under a new key
    /// id, copies under the old ones still open. Returns the new key id. Other devices need
    /// the new keyring (`SpaceKeys.export`/`import`) to open what this one writes next.
    @discardableResult
    public func rotateKey() throws -> String {
        guard let keys = configuration.encryption?.keys else { throw EncryptionError.encryptionRequired(space: space) }
        let key = try SpaceKeys.rotate(space: space, in: keys)
        try reloadKeys()
        return key.id
    }

    /// Rewrites every record the app can read as an ordinary edit of the same content, so
    /// that it is sealed under the current key and syncs like any edit (after a rotation,
    /// to stop using a key that may be known elsewhere). Returns how many records were
    /// rewritten. Records whose copy the store cannot read (quarantined) are left alone:
    /// they are not this device's to rewrite.
    @discardableResult
    public func reencryptAll() throws -> Int {
        guard cipher != nil else { throw EncryptionError.encryptionRequired(space: space) }
        let shown = try read { try $0.shown(collection: nil) }.filter { !$0.body.deleted }
        // One transaction: a rotation's rewrite is all or nothing.
        return try commit(shown.map { OutpostTransaction.Write(key: $0.key, operation: .rewrite($0.body)) }, showing: false).count
    }
}
