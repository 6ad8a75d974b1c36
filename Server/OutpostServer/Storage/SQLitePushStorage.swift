import OutpostCore
import OutpostSyncRules
import OutpostSQLite

/// `PushStorage` on the SQLite writer's connection, inside its transaction for one push
/// of one space. Rows are read and written one statement each: the file is in process,
/// so a set costs no more as single rows, and each statement is prepared once per
/// connection (`Connection.cached`).
struct SQLitePushStorage: PushStorage {
    let db: Connection
    let spaceID: Int64
    let epoch: Epoch
    /// While webhooks are configured, the push's time: every record written also gets a
    /// row in `webhook_outbox`, in the same transaction (`WebhookOutbox`).
    var outboxAt: Int64? = nil

    func applied(_ changeIds: [String]) throws -> [String: PushRules.Applied] {
        let find = try db.cached("SELECT fingerprint, epoch, seq, applied_at FROM applied_changes WHERE space_id = ? AND change_id = ?")
        var out: [String: PushRules.Applied] = [:]
        for changeId in changeIds where out[changeId] == nil {
            try find.bind(int: spaceID, at: 1)
            try find.bind(text: changeId, at: 2)
            defer { find.reset() }
            guard try find.step() else { continue }
            guard let e = Epoch(find.text(1)) else { throw StoreError("the idempotency row of \(changeId) names no valid epoch") }
            out[changeId] = PushRules.Applied(fingerprint: find.blob(0), version: Version(epoch: e, seq: find.int64(2)), appliedAt: find.int64(3))
        }
        return out
    }

    func heads(_ keys: [PushRules.Key]) throws -> [PushRules.Key: PushRules.Head] {
        let find = try db.cached("SELECT seq, lineage, same_as, coalesce(length(data), 0) FROM records WHERE space_id = ? AND collection = ? AND id = ?")
        var out: [PushRules.Key: PushRules.Head] = [:]
        out.reserveCapacity(keys.count)
        for key in keys {
            try find.bind(int: spaceID, at: 1)
            try find.bind(text: key.collection, at: 2)
            try find.bind(text: key.id, at: 3)
            defer { find.reset() }
            guard try find.step() else { continue }
            out[key] = PushRules.Head(seq: find.int64(0), lineage: find.optionalText(1).flatMap(Version.init),
                                      sameAs: find.optionalText(2).flatMap(Version.init), dataBytes: find.int64(3))
        }
        return out
    }

    func currents(_ keys: [PushRules.Key]) throws -> [PushRules.Key: RecordState] {
        let find = try db.cached("SELECT \(RecordRow.pullColumns) FROM records WHERE space_id = ? AND collection = ? AND id = ?")
        var out: [PushRules.Key: RecordState] = [:]
        for key in keys {
            try find.bind(int: spaceID, at: 1)
            try find.bind(text: key.collection, at: 2)
            try find.bind(text: key.id, at: 3)
            defer { find.reset() }
            guard try find.step() else { continue }
            out[key] = try RecordRow().state(SQLiteRow(statement: find), epoch: epoch)
        }
        return out
    }

    /// The space's counters are stored by the writer at its commit (`SQLiteWriter`).
    func write(_ writes: [PushRules.Write], remember: [PushRules.Remember], space: PushRules.Space) throws {
        let upsert = try db.cached(RecordRow.sqliteUpsert)
        for w in writes {
            try upsert.bind(int: spaceID, at: 1)
            try RecordRow.bind(w, to: upsert)
            while try upsert.step() {}
            upsert.reset()
        }
        let insert = try db.cached("INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES (?, ?, ?, ?, ?, ?)")
        for r in remember {
            try insert.bind(int: spaceID, at: 1)
            try insert.bind(text: r.changeId, at: 2)
            try insert.bind(blob: r.fingerprint, at: 3)
            try insert.bind(text: epoch.rawValue, at: 4)
            try insert.bind(int: r.seq, at: 5)
            try insert.bind(int: r.appliedAt, at: 6)
            while try insert.step() {}
            insert.reset()
        }
        if let outboxAt { try queue(writes, at: outboxAt) }
        try bindClients(writes)
    }

    /// Binds each client id written under to the subject of its newest write (writes are
    /// in seq order), for the device's telemetry.
    private func bindClients(_ writes: [PushRules.Write]) throws {
        var subjects: [String: String] = [:]
        for w in writes { subjects[w.updatedBy] = w.subject }
        let upsert = try db.cached("""
            INSERT INTO client_subjects(space_id, client_id, subject) VALUES (?, ?, ?)
            ON CONFLICT(space_id, client_id) DO UPDATE SET subject = excluded.subject WHERE client_subjects.subject <> excluded.subject
            """)
        for (client, subject) in subjects {
            try upsert.bind(int: spaceID, at: 1)
            try upsert.bind(text: client, at: 2)
            try upsert.bind(text: subject, at: 3)
            while try upsert.step() {}
            upsert.reset()
        }
    }

    /// One outbox row per record written, in seq order.
    private func queue(_ writes: [PushRules.Write], at committedAt: Int64) throws {
        let insert = try db.cached(OutboxRow.sqliteInsert)
        for w in writes {
            try insert.bind(int: spaceID, at: 1)
            try insert.bind(text: epoch.rawValue, at: 2)
            try insert.bind(int: committedAt, at: 3)
            try RecordRow.bind(w, to: insert, from: 4)
            while try insert.step() {}
            insert.reset()
        }
    }

    func epochHistory() throws -> PushRules.EpochHistory {
        try SQLiteSyncStore.epochHistory(db)
    }

    func deletedCopies(_ tombstones: [PushRules.Key: Int64]) throws -> [PushRules.Key: [UInt8]] {
        let find = try db.cached("SELECT data FROM departures WHERE space_id = ? AND collection = ? AND id = ? AND seq = ?")
        var out: [PushRules.Key: [UInt8]] = [:]
        for (key, seq) in tombstones {
            try find.bind(int: spaceID, at: 1)
            try find.bind(text: key.collection, at: 2)
            try find.bind(text: key.id, at: 3)
            try find.bind(int: seq, at: 4)
            defer { find.reset() }
            if try find.step() { out[key] = find.blob(0) }
        }
        return out
    }

    func depart(_ departures: [PushRules.Departure]) throws {
        let insert = try db.cached("INSERT OR REPLACE INTO departures(space_id, collection, id, seq, data) VALUES (?, ?, ?, ?, ?)")
        for d in departures {
            try insert.bind(int: spaceID, at: 1)
            try insert.bind(text: d.key.collection, at: 2)
            try insert.bind(text: d.key.id, at: 3)
            try insert.bind(int: d.seq, at: 4)
            try insert.bind(blob: d.data, at: 5)
            while try insert.step() {}
            insert.reset()
        }
    }

    func reindex(removing: [PushRules.IndexEntry], adding: [PushRules.IndexEntry]) throws {
        let remove = try db.cached("DELETE FROM view_index WHERE space_id = ? AND scope = ? AND path = ? AND key = ? AND seq = ?")
        for entry in removing {
            try remove.bind(int: spaceID, at: 1)
            try remove.bind(text: entry.key.scope, at: 2)
            try remove.bind(text: entry.key.path, at: 3)
            try remove.bind(text: entry.key.key, at: 4)
            try remove.bind(int: entry.seq, at: 5)
            while try remove.step() {}
            remove.reset()
        }
        let insert = try db.cached("INSERT OR IGNORE INTO view_index(space_id, scope, path, key, seq, collection) VALUES (?, ?, ?, ?, ?, ?)")
        for entry in adding {
            try insert.bind(int: spaceID, at: 1)
            try insert.bind(text: entry.key.scope, at: 2)
            try insert.bind(text: entry.key.path, at: 3)
            try insert.bind(text: entry.key.key, at: 4)
            try insert.bind(int: entry.seq, at: 5)
            try insert.bind(text: entry.collection, at: 6)
            while try insert.step() {}
            insert.reset()
        }
    }
}
