import Foundation
import OutpostCore
import OutpostSQLite

// The conflict journal (docs/client.md, "The conflict journal"): every decision of the
// store's resolver is kept in the table `conflict_journal` with what the resolver saw (the
// local edit, the server's copy, the base) and what it decided. The engine reports a
// decision as `Effect.resolved`; `transition` (Queue/Transition.swift) writes its row in the
// transaction that stores the record, so there is never a decision without its row nor a
// row without its decision. A decision made on another device that replaced this device's
// acknowledged write (`Effect.overwritten`, `Engine.lostWrite`) is kept the same way, in the
// transaction that takes in the copy that says so. Entries older than `Configuration.conflictRetention` are
// pruned, a bounded batch at a time, when the store opens and after each sync. The journal
// never leaves the device: telemetry carries counts only (Journal/Telemetry.swift).

/// A resolver's decision as the engine reports it (`Effect.resolved`).
struct ConflictDecision: Hashable, Sendable {
    /// What the resolver saw.
    let conflict: Conflict
    /// What it decided.
    let resolution: Resolution
    /// `ConflictResolver.name` of the store's resolver.
    let resolver: String
    /// The change the decision queued (nil when the server's copy stands).
    let writtenChangeId: String?
}

/// A write of this device that another device's resolution replaced, as the engine
/// reports it (`Effect.overwritten`).
struct LostWrite: Hashable, Sendable {
    let key: RecordKey
    /// The copy this device wrote (the server acknowledged it).
    let mine: Copy
    /// The copy the other device's resolution wrote over it.
    let theirs: Copy
    /// The resolution's mark, as the server kept it.
    let resolved: Resolved
}

/// What another device's resolver decided, when its resolved write replaced a write of
/// this device that the server had acknowledged (`ConflictEntry.decidedElsewhere`). The
/// device learns it when it takes in the state that write stored (a pull, or a conflict's
/// answer), from a server that keeps resolutions.
public struct RemoteDecision: Sendable, Hashable {
    /// The `clientId` of the device whose resolver decided.
    public let clientId: String
    /// The version of this device's write that the resolution replaced.
    public let overwrote: Version
    /// What that device's resolver did, as it saw the conflict: kept its own edit, wrote a
    /// merge, or deleted the record.
    public let outcome: ResolutionOutcome
}

/// One decision about a conflict, as the conflict journal keeps it: the store's resolver's,
/// or (`decidedElsewhere`) another device's that replaced this device's write.
///
/// `nil` data means a delete: a local edit that deleted the record, a server copy that is
/// a tombstone, a result that leaves the record deleted.
public struct ConflictEntry: Sendable, Hashable {
    /// The entry's place in the journal: later decisions have greater numbers.
    public internal(set) var number: Int64
    /// The record's collection and id.
    public let collection: String
    public let id: String
    /// The id of the local change that met the conflict (the newest app edit decided).
    public let changeId: String
    /// The local edit's data; nil for a delete.
    public let local: JSONObject?
    /// The server's copy's data; nil for a tombstone.
    public let server: JSONObject?
    /// The server's copy's version.
    public let serverVersion: Version
    /// What the app showed when it made the local edit; nil when the resolver had no base
    /// (a create, or a copy offered again to a new history).
    public let base: ConflictBase?
    /// What the resolver decided.
    public let resolution: Resolution
    /// `ConflictResolver.name` of the resolver that decided (`mergeFields(lastWriteWins)`,
    /// `serverWins`, `custom`, …).
    public let resolver: String
    /// When it decided, by the store's clock (`Configuration.clock`).
    public let decidedAt: Date
    /// The change the decision queued to send the result (nil when the server's copy stood).
    public let writtenChangeId: String?
    /// Set when another device decided: its resolved write replaced this device's write
    /// `local`, which the server had acknowledged. Then `changeId` is this device's change
    /// that wrote `local` (empty when the device learned of its write from a pull, without
    /// the change's id), `server` and `serverVersion` are what the resolution wrote,
    /// `resolver` is the other device's resolver, `resolution` is `keepServer` (this device
    /// now shows what the server holds), `base` and `writtenChangeId` are nil.
    public let decidedElsewhere: RemoteDecision?

    /// The record's data after the decision: the server's copy, the local edit or the
    /// resolver's merge; nil when the record ends deleted. A conflict left for a person
    /// shows the local edit until it is settled.
    public var result: JSONObject? {
        switch resolution {
        case .keepServer: server
        case .keepLocal, .leaveForPerson: local
        case .write(let merged): merged
        case .delete: nil
        }
    }

    /// The local edit decoded as the app's type; nil for a delete.
    public func local<T: Decodable>(as type: T.Type, decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> T? {
        try local.map { try Self.decode($0, as: type, decoder: decoder, collection: collection, id: id) }
    }

    /// The server's copy decoded as the app's type; nil for a tombstone.
    public func server<T: Decodable>(as type: T.Type, decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> T? {
        try server.map { try Self.decode($0, as: type, decoder: decoder, collection: collection, id: id) }
    }

    /// The base decoded as the app's type; nil without a base or for a deleted one.
    public func base<T: Decodable>(as type: T.Type, decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> T? {
        try base?.data.map { try Self.decode($0, as: type, decoder: decoder, collection: collection, id: id) }
    }

    /// The result decoded as the app's type; nil when the record ends deleted.
    public func result<T: Decodable>(as type: T.Type, decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> T? {
        try result.map { try Self.decode($0, as: type, decoder: decoder, collection: collection, id: id) }
    }

    static func decode<T: Decodable>(_ object: JSONObject, as type: T.Type, decoder: JSONDecoder, collection: String, id: String) throws -> T {
        do { return try decoder.decode(T.self, from: Data(encodeObject(object))) } catch {
            throw OutpostError.decoding(collection: collection, id: id, message: "\(error)")
        }
    }

    /// `resolution`'s name: `keepServer`, `keepLocal`, `write`, `delete` or `leaveForPerson`.
    public var resolutionName: String {
        switch resolution {
        case .leaveForPerson: "leaveForPerson"
        case .keepServer: "keepServer"
        case .keepLocal: "keepLocal"
        case .write: "write"
        case .delete: "delete"
        }
    }

    /// The entry as JSON (what `outpost conflicts` prints): data fields are the object, or
    /// null for a delete; `base` is null when the resolver had none.
    public var json: JSONValue {
        func data(_ object: JSONObject?) -> JSONValue { object.map { .object($0) } ?? .null }
        let base: JSONValue = self.base.map {
            .object(["data": data($0.data), "deleted": .bool($0.deleted), "version": $0.version.map { .string($0.text) } ?? .null])
        } ?? .null
        return .object([
            "number": .number(JSONNumber(number)), "collection": .string(collection), "id": .string(id), "changeId": .string(changeId),
            "decidedAt": .number(JSONNumber(decidedAt.milliseconds)), "resolver": .string(resolver), "resolution": .string(resolutionName),
            "local": data(local), "server": data(server), "serverVersion": .string(serverVersion.text), "base": base, "result": data(result),
            "writtenChangeId": writtenChangeId.map { .string($0) } ?? .null,
            "decidedElsewhere": decidedElsewhere.map {
                .object(["clientId": .string($0.clientId), "overwrote": .string($0.overwrote.text), "outcome": .string($0.outcome.rawValue)])
            } ?? .null,
        ])
    }
}

extension LocalDatabase {
    /// Entries pruned at most per call (`pruneConflictJournal`): a cheap moment stays cheap.
    static let journalPruneBatch = 1000

    /// A `conflict_journal` row, its columns named once.
    private enum JournalRow {
        static let columns = RowColumns(["number", "collection", "id", "change_id", "local", "server", "server_version", "has_base", "base", "base_deleted",
                                         "base_version", "resolution", "merged", "resolver", "decided_at", "written_change_id", "decided_by", "overwrote",
                                         "remote_outcome"])
        static let number = columns.index("number"), collection = columns.index("collection"), id = columns.index("id")
        static let changeId = columns.index("change_id"), local = columns.index("local"), server = columns.index("server")
        static let serverVersion = columns.index("server_version"), hasBase = columns.index("has_base"), base = columns.index("base")
        static let baseDeleted = columns.index("base_deleted"), baseVersion = columns.index("base_version"), resolution = columns.index("resolution")
        static let merged = columns.index("merged"), resolver = columns.index("resolver"), decidedAt = columns.index("decided_at")
        static let written = columns.index("written_change_id"), decidedBy = columns.index("decided_by"), overwrote = columns.index("overwrote")
        static let remoteOutcome = columns.index("remote_outcome")
        /// `number` NULL: SQLite gives the row the next number.
        static let insertSQL = "INSERT INTO conflict_journal(\(columns.list)) VALUES (\(columns.placeholders))"
        static let selectSQL = "SELECT \(columns.list) FROM conflict_journal WHERE decided_at >= ? ORDER BY number"
    }

    /// Writes the journal row of `decision`, made at `time`, in the caller's transaction.
    func journal(_ decision: ConflictDecision, at time: Int64) throws -> ConflictEntry {
        let c = decision.conflict
        let local = c.local.deleted ? nil : c.local.data
        let server = c.server.deleted ? nil : c.server.data
        let base = c.base
        var entry = ConflictEntry(number: 0, collection: c.collection, id: c.id, changeId: c.local.changeId, local: local, server: server,
                                  serverVersion: c.server.version, base: base, resolution: decision.resolution, resolver: decision.resolver,
                                  decidedAt: Date(milliseconds: time), writtenChangeId: decision.writtenChangeId, decidedElsewhere: nil)
        func blob(_ object: JSONObject?) -> SQLiteValue { object.map { .blob(encodeObject($0)) } ?? .null }
        var merged: JSONObject?
        if case .write(let object) = decision.resolution { merged = object }
        typealias J = JournalRow
        var row = J.columns.row()
        row[J.collection] = .text(c.collection)
        row[J.id] = .text(c.id)
        row[J.changeId] = .text(c.local.changeId)
        row[J.local] = blob(local)
        row[J.server] = blob(server)
        row[J.serverVersion] = .text(c.server.version.text)
        row[J.hasBase] = .integer(base == nil ? 0 : 1)
        row[J.base] = blob(base?.data)
        row[J.baseDeleted] = .integer(base?.deleted == true ? 1 : 0)
        row[J.baseVersion] = base?.version.map { .text($0.text) } ?? .null
        row[J.resolution] = .text(entry.resolutionName)
        row[J.merged] = blob(merged)
        row[J.resolver] = .text(decision.resolver)
        row[J.decidedAt] = .integer(time)
        row[J.written] = decision.writtenChangeId.map { .text($0) } ?? .null
        try db.run(J.insertSQL, row.values)
        entry.number = db.lastInsertRowID
        return entry
    }

    /// Writes the journal row of `lost`, learned at `time`, in the caller's transaction.
    func journal(_ lost: LostWrite, at time: Int64) throws -> ConflictEntry {
        func object(_ copy: Copy) throws -> JSONObject? {
            guard let body = copy.body, !body.deleted else { return nil }
            return try body.data.map(decodeObject)
        }
        let local = try object(lost.mine), server = try object(lost.theirs)
        let remote = RemoteDecision(clientId: lost.theirs.updatedBy ?? "", overwrote: lost.mine.version, outcome: lost.resolved.mark.outcome)
        var entry = ConflictEntry(number: 0, collection: lost.key.collection, id: lost.key.id, changeId: lost.mine.changeId ?? "", local: local, server: server,
                                  serverVersion: lost.theirs.version, base: nil, resolution: .keepServer, resolver: lost.resolved.mark.resolver,
                                  decidedAt: Date(milliseconds: time), writtenChangeId: nil, decidedElsewhere: remote)
        func blob(_ object: JSONObject?) -> SQLiteValue { object.map { .blob(encodeObject($0)) } ?? .null }
        typealias J = JournalRow
        var row = J.columns.row()
        row[J.collection] = .text(entry.collection)
        row[J.id] = .text(entry.id)
        row[J.changeId] = .text(entry.changeId)
        row[J.local] = blob(local)
        row[J.server] = blob(server)
        row[J.serverVersion] = .text(lost.theirs.version.text)
        row[J.hasBase] = .integer(0)
        row[J.baseDeleted] = .integer(0)
        row[J.resolution] = .text(entry.resolutionName)
        row[J.resolver] = .text(entry.resolver)
        row[J.decidedAt] = .integer(time)
        row[J.decidedBy] = .text(remote.clientId)
        row[J.overwrote] = .text(remote.overwrote.text)
        row[J.remoteOutcome] = .text(remote.outcome.rawValue)
        try db.run(J.insertSQL, row.values)
        entry.number = db.lastInsertRowID
        return entry
    }

    /// The entries decided at or after `since`, in journal order.
    func conflicts(since: Int64) throws -> [ConflictEntry] {
        typealias J = JournalRow
        let rows = try db.query(J.selectSQL, [.integer(since)]) { row in
            (number: row.int64(J.number), collection: row.text(J.collection), id: row.text(J.id), changeId: row.text(J.changeId),
             local: row.optionalBlob(J.local), server: row.optionalBlob(J.server), serverVersion: row.text(J.serverVersion),
             hasBase: row.int64(J.hasBase) != 0, base: row.optionalBlob(J.base), baseDeleted: row.int64(J.baseDeleted) != 0,
             baseVersion: row.optionalText(J.baseVersion), resolution: row.text(J.resolution), merged: row.optionalBlob(J.merged),
             resolver: row.text(J.resolver), decidedAt: row.int64(J.decidedAt), written: row.optionalText(J.written),
             decidedBy: row.optionalText(J.decidedBy), overwrote: row.optionalText(J.overwrote), remoteOutcome: row.optionalText(J.remoteOutcome))
        }
        return try rows.map { r in
            guard let version = Version(r.serverVersion) else { throw OutpostError.storage("conflict journal entry \(r.number): bad version") }
            let resolution: Resolution
            switch r.resolution {
            case "keepServer": resolution = .keepServer
            case "keepLocal": resolution = .keepLocal
            case "delete": resolution = .delete
            case "leaveForPerson": resolution = .leaveForPerson
            case "write":
                guard let merged = r.merged else { throw OutpostError.storage("conflict journal entry \(r.number): no merged data") }
                resolution = .write(try decodeObject(merged))
            default: throw OutpostError.storage("conflict journal entry \(r.number): unknown resolution \(r.resolution)")
            }
            var remote: RemoteDecision?
            if let by = r.decidedBy {
                guard let overwrote = r.overwrote.flatMap(Version.init), let outcome = r.remoteOutcome.flatMap(ResolutionOutcome.init(rawValue:)) else {
                    throw OutpostError.storage("conflict journal entry \(r.number): a decision made elsewhere without its version or outcome")
                }
                remote = RemoteDecision(clientId: by, overwrote: overwrote, outcome: outcome)
            }
            let base = r.hasBase ? ConflictBase(data: try r.base.map(decodeObject), deleted: r.baseDeleted, version: r.baseVersion.flatMap(Version.init)) : nil
            return ConflictEntry(number: r.number, collection: r.collection, id: r.id, changeId: r.changeId, local: try r.local.map(decodeObject),
                                 server: try r.server.map(decodeObject), serverVersion: version, base: base, resolution: resolution,
                                 resolver: r.resolver, decidedAt: Date(milliseconds: r.decidedAt), writtenChangeId: r.written, decidedElsewhere: remote)
        }
    }

    /// True when an entry was decided before `cutoff` (one lookup in the time index).
    func hasConflicts(before cutoff: Int64) throws -> Bool {
        try db.scalarInt("SELECT 1 FROM conflict_journal WHERE decided_at < ? LIMIT 1", [.integer(cutoff)]) != nil
    }

    /// Deletes up to `journalPruneBatch` of the oldest entries decided before `cutoff`;
    /// returns how many. With nothing to delete it only reads.
    @discardableResult
    func pruneConflictJournal(before cutoff: Int64) throws -> Int {
        guard try hasConflicts(before: cutoff) else { return 0 }
        try db.run("""
            DELETE FROM conflict_journal WHERE number IN
              (SELECT number FROM conflict_journal WHERE decided_at < ? ORDER BY decided_at LIMIT ?)
            """, [.integer(cutoff), .integer(Int64(Self.journalPruneBatch))])
        return db.changes
    }
}

extension OutpostStore.Configuration {
    /// The oldest decision the conflict journal keeps at `now`.
    func conflictCutoff(now: Int64) -> Int64 {
        now &- conflictRetention.milliseconds
    }
}

extension OutpostStore {
    /// The resolver's decisions made at or after `since` (by the store's clock), oldest
    /// first, for as long as `Configuration.conflictRetention` keeps them.
    public func conflicts(since: Date = Date(timeIntervalSince1970: 0)) throws -> [ConflictEntry] {
        let ms = since.milliseconds
        return try read { try $0.conflicts(since: ms) }
    }

    /// The resolver's decisions from now on, each once its transaction has committed. Ends
    /// when the store closes or the consumer stops. Keeps the newest 256 unread.
    public func observeConflicts() -> AsyncStream<ConflictEntry> {
        subscribe(.bufferingNewest(256)) { $0.add($1, conflicts: $2) }
    }

    /// Prunes the entries past the retention, a bounded batch (after a sync); a sync with
    /// nothing to prune only reads. A failure is left for the next time: the journal is never
    /// worth failing a sync for.
    func pruneConflictJournal() {
        let cutoff = configuration.conflictCutoff(now: now())
        guard (try? read({ try $0.hasConflicts(before: cutoff) })) == true else { return }
        _ = try? write(durability: .normal) { try $0.pruneConflictJournal(before: cutoff) }
    }
}
