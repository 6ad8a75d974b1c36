import Foundation
import OutpostCore

/// A record as the store holds it: the local view (the last local edit, or the server's
/// copy when there is none) and what the store knows of its server version.
public struct StoredRecord: Sendable, Hashable {
    /// The record's collection.
    public let collection: String
    /// The record's id.
    public let id: String
    /// The data; nil when the record is deleted (a tombstone).
    public let data: JSONObject?
    /// True for a tombstone.
    public let deleted: Bool
    /// The server version the local copy is based on; nil before its first push or pull.
    public let version: Version?
    /// True while a local change of this record waits to be settled by the server.
    public let pending: Bool
    /// The server's commit time of `version`, when known.
    public let updatedAt: Date?
    /// The client that wrote `version`, when known.
    public let updatedBy: String?

    /// Decodes the data into `type` (with `decoder`; by default `RecordCoder.standard`'s,
    /// which reads both date forms: docs/client.md, "Dates"). The first
    /// decode of `type` in a collection notes which fields it reads, so that its saves keep
    /// the fields it does not (docs/client.md, "Fields an app does not know").
    public func decode<T: Decodable>(_ type: T.Type = T.self, decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> T {
        guard let data else { throw OutpostError.decoding(collection: collection, id: id, message: "the record is deleted") }
        do {
            return try KnownFieldsRegistry.decode(T.self, from: data, in: collection, decoder: decoder)
        } catch {
            throw OutpostError.decoding(collection: collection, id: id, message: "\(error)")
        }
    }
}

/// Names one record.
public struct RecordKey: Sendable, Hashable, CustomStringConvertible {
    /// The collection.
    public let collection: String
    /// The id.
    public let id: String

    /// The key of `collection`/`id`.
    public init(collection: String, id: String) {
        self.collection = collection
        self.id = id
    }

    /// `collection/id`.
    public var description: String { "\(collection)/\(id)" }
}

/// Where a queued change stands (docs/protocol.md section 4; the four states of a durable queue
/// plus "in doubt").
public enum ChangeState: String, Sendable, Hashable, CaseIterable {
    /// Queued, not sent yet.
    case pending
    /// Sent; the answer is awaited.
    case inFlight = "in_flight"
    /// Sent, and the answer was never read (lost, cut off, a proxy's 504, too large): the
    /// server may or may not have applied it. Retried under the same changeId; only a read
    /// answer settles it.
    case inDoubt = "in_doubt"
    /// An attempt failed without being applied (not sent, refused, or a conflict that was
    /// resolved into this change); retried at `nextAttemptAt`.
    case failed
    /// The server will never apply it (invalid, too large...). Kept with its reason for the
    /// app to show; it blocks nothing.
    case rejected
    /// The server takes it only from a later version of the app (`upgrade_required`,
    /// `QueuedChange.requiredAppVersion`): held, not sent, until the store is opened by an
    /// app of that version; then it goes with the next sync.
    case upgradeRequired = "upgrade_required"
    /// Its conflict was left for a person (`Resolution.leaveForPerson`): held, not sent,
    /// until the app settles it (`OutpostStore.settleConflict(in:id:_:)`).
    case inConflict = "in_conflict"
}

/// A change in the local queue.
public struct QueuedChange: Sendable, Hashable {
    /// Unique for ever within the space; given when the change was queued.
    public let changeId: String
    /// The record's collection.
    public let collection: String
    /// The record's id.
    public let id: String
    /// `put` or `delete`.
    public let op: ChangeOp
    /// The data of a put.
    public let data: JSONObject?
    /// The server version the change is based on (nil: the record is new to the server).
    public let baseVersion: Version?
    /// Where it stands.
    public let state: ChangeState
    /// Attempts so far (sends, and conflicts that were resolved into it).
    public let attempts: Int
    /// Not retried before this time.
    public let nextAttemptAt: Date
    /// The last failure, or the rejection's reason.
    public let lastError: String?
    /// The rejection's code (`invalid_change`, `record_too_large`...), for rejected changes.
    public let errorCode: String?
    /// The time of the edit, by the server's clock as the device estimated it then (the
    /// device's own before its first sync; docs/client.md, "The device's clock").
    public let clientTime: Date
    /// For a change held for `upgrade_required`: the app version the server wants.
    public var requiredAppVersion: Int? = nil
}

/// A pulled record the store could not decode, kept instead of stopping the pull.
public struct QuarantinedRecord: Sendable, Hashable {
    /// Local number of the entry.
    public let number: Int64
    /// The collection, when it could be read.
    public let collection: String?
    /// The id, when it could be read.
    public let id: String?
    /// The version, when it could be read.
    public let version: String?
    /// The record's JSON as it came.
    public let raw: [UInt8]
    /// Why it could not be used.
    public let reason: String
    /// When it was quarantined (the device's clock).
    public let quarantinedAt: Date
}

/// What one `sync()` did.
public struct SyncReport: Sendable, Hashable {
    /// Changes the server applied (replayed answers of in-doubt changes included).
    public var pushed = 0
    /// Pulled records applied to the store.
    public var pulled = 0
    /// Push answers that were conflicts.
    public var conflicts = 0
    /// Conflicts the resolver decided (each one kept in the conflict journal,
    /// `OutpostStore.conflicts(since:)`); the others settled without it.
    public var resolved = 0
    /// Writes of this device, acknowledged before, that another device's resolution
    /// replaced (each kept in the conflict journal with `ConflictEntry.decidedElsewhere`).
    public var overwritten = 0
    /// Changes rejected for good.
    public var rejected = 0
    /// Changes the server takes only from a later version of the app (`upgrade_required`),
    /// held in the queue until the store is opened by that version.
    public var upgradeRequired = 0
    /// Pulled records put in quarantine.
    public var quarantined = 0
    /// Changes left in the queue (not rejected).
    public var pending = 0
    /// The epoch after the sync.
    public var epoch: Epoch?
    /// True when this sync moved the store to a new epoch.
    public var epochChanged = false
    /// Records offered again to a new history (see `docs/client.md`).
    public var reoffered = 0
    /// Copies dropped because the server's rules no longer let this store's token read
    /// them (a `revoked` record, or a new view without them; docs/rules.md).
    public var revoked = 0
    /// True when this sync pulled the space again from the start because the token's view
    /// changed (`view_changed`).
    public var viewChanged = false
    /// True when this sync pulled the space again from the start because compaction purged
    /// deletes after the store's cursor (`history_compacted`; the history did not change,
    /// so nothing was offered again).
    public var historyCompacted = false

    /// An empty report.
    public init() {}
}

/// How far the pull of a sync has come: the records received so far in this sync, and
/// about how many there are in all. `approximateTotal` comes from the space's head seq
/// that each page carries (`PullPage.head`); it is an upper bound that tightens as pages
/// arrive, and nil with a server that does not send it.
public struct SyncProgress: Sendable, Hashable {
    /// Records received by this sync's pull so far.
    public let pulled: Int
    /// About how many records this sync pulls in all (never fewer than `pulled`).
    public let approximateTotal: Int?

    public init(pulled: Int, approximateTotal: Int?) {
        self.pulled = pulled
        self.approximateTotal = approximateTotal.map { max($0, pulled) }
    }

    /// `pulled / approximateTotal`, from 0 to 1; nil without a total.
    public var fraction: Double? {
        approximateTotal.map { $0 == 0 ? 1 : Double(pulled) / Double($0) }
    }
}

/// What a store's syncs are doing, as `OutpostStore.syncActivity()` tells it.
public enum SyncActivity: Sendable, Hashable {
    /// A sync began.
    case started
    /// A page of the pull was applied.
    case pulled(SyncProgress)
    /// The sync finished.
    case finished(SyncReport)
    /// The sync failed; nothing local was lost (`status().lastError` has the same text).
    case failed(String)
}

/// The store's sync state.
public struct SyncStatus: Sendable, Hashable {
    /// The client id this installation pushes with.
    public let clientId: String
    /// The space.
    public let space: String
    /// The epoch the store follows (nil before its first sync).
    public let epoch: Epoch?
    /// The pull cursor.
    public let cursor: Version?
    /// Changes not yet settled (rejected ones excluded).
    public let pending: Int
    /// Rejected changes kept for the app.
    public let rejected: Int
    /// Changes of `pending` held until the app is updated: the server takes them only from
    /// a later version of the app (`upgrade_required`; `ChangeState.upgradeRequired`).
    public var upgradeRequired = 0
    /// Quarantined records.
    public let quarantined: Int
    /// Records whose conflict waits for a person to settle it (counted in `pending` too).
    public var conflicts = 0
    /// End of the last successful sync.
    public let lastSyncAt: Date?
    /// The last sync's failure, nil after a success: the error's text, for support.
    public let lastError: String?
    /// What the last failure comes down to (offline, unauthorized, …), nil after a success.
    public var lastProblem: SyncProblem? = nil
    /// The epochs the store left, oldest first (at most 32).
    public let retiredEpochs: [Epoch]
    /// True while a new epoch's history is being pulled (local changes wait for it).
    public let rebasing: Bool
    /// The client id the file had on another device, when it was restored here from that
    /// device's backup (`OutpostStore.restoredFrom`); nil for a file made here.
    public let restoredFrom: String?
}

/// A change of the store that observers hear about.
public struct StoreEvent: Sendable, Hashable {
    /// Who made it.
    public enum Origin: Sendable, Hashable {
        /// An edit on this device.
        case local
        /// A pull, a push answer or a conflict resolution.
        case remote
    }

    /// Who made it.
    public let origin: Origin
    /// The records touched, in the order they were written.
    public let keys: [RecordKey]
}
