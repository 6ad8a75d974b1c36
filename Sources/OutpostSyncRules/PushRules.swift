import OutpostCore

/// The push rules of docs/protocol.md section 4, once, for every store: the SQLite and
/// PostgreSQL stores of the server and `InMemorySyncServer` (`OutpostTesting`) each
/// implement `PushStorage` (what differs: how rows are read and written) and call
/// `PushRules.apply`. They are the server's: the SDK (`Outpost`) never links this module.
///
/// The rules run set-wise, so a store with a network between it and its rows (PostgreSQL)
/// needs a fixed number of round trips per push, not per change:
/// 1. read what the push's change ids and records are now (`applied`, `heads`);
/// 2. decide every change in array order, each on its own, against those rows and the
///    writes of the changes before it in the same push (pure; no I/O);
/// 3. read the current state of the records a change conflicts with (`currents`), only
///    when there is one; then write every applied record and change id (`write`).
///
/// The store holds the space's seqs and the lock that serializes writers of a space
/// (SQLite's single writer, PostgreSQL's `spaces` row lock) and stores the new head in the
/// same transaction; `apply` takes the head and returns the new one.
public enum PushRules {
    /// A record's address in a space.
    public struct Key: Hashable, Sendable {
        public var collection: String
        public var id: String
        public init(collection: String, id: String) {
            self.collection = collection
            self.id = id
        }
    }

    /// What the rules need of a stored record state: its seq, its lineage and sameAs
    /// (protocol 1.1) to judge re-offers and carry lineage through writes, and the bytes of
    /// its stored data (0 for a tombstone), which the space's record bytes count.
    public struct Head: Hashable, Sendable {
        public var seq: Int64
        public var lineage: Version?
        public var sameAs: Version?
        public var dataBytes: Int64
        public init(seq: Int64, lineage: Version?, sameAs: Version?, dataBytes: Int64) {
            self.seq = seq
            self.lineage = lineage
            self.sameAs = sameAs
            self.dataBytes = dataBytes
        }
    }

    /// Who writes, when, and under which limit: what every write of one push is stamped
    /// with and held to.
    public struct Context: Sendable {
        /// The space's epoch.
        public var epoch: Epoch
        /// The pushing device's `clientId`: a record's `updatedBy`, which the device chooses.
        public var clientId: String
        /// The authenticated subject of the push (its token's `sub`), kept with every record
        /// state it writes: who wrote, as no device can claim it.
        public var subject: String
        /// The server's time of the push (ms since 1970).
        public var now: Int64
        /// The most record bytes (`recordBytes`) the space may hold; nil for no limit.
        public var recordQuota: Int64?
        public init(epoch: Epoch, clientId: String, subject: String, now: Int64, recordQuota: Int64? = nil) {
            self.epoch = epoch
            self.clientId = clientId
            self.subject = subject
            self.now = now
            self.recordQuota = recordQuota
        }
    }

    /// A space's counters as the store holds them, read under its lock for the space and
    /// stored with the push's writes, in the same transaction.
    public struct Space: Hashable, Sendable {
        /// The space's newest seq.
        public var head: Int64
        /// The bytes of the space's records (`recordBytes`), tombstones included.
        public var recordBytes: Int64
        public init(head: Int64, recordBytes: Int64) {
            self.head = head
            self.recordBytes = recordBytes
        }
    }

    /// The bytes a record state counts against its space's limit: its collection and id
    /// (UTF-8) and its stored data (none for a tombstone). Rows the store keeps beside it
    /// (change ids, the view index) are not counted.
    public static func recordBytes(_ key: Key, dataBytes: Int64) -> Int64 {
        Int64(key.collection.utf8.count + key.id.utf8.count) + dataBytes
    }

    /// A store's history of epochs, as far as it knows it: when it began, and each epoch it
    /// ended and when. A re-offer's lineage is judged by it (`Lineage.problem(in:)`,
    /// docs/protocol.md section 4, "Re-offers", rule 3).
    public struct EpochHistory: Hashable, Sendable {
        /// The server time the history began (a restored store's: its backup's).
        public var began: Int64
        /// Every epoch the store ended (by `rotate-epoch` or a restore), with the server time
        /// it ended, when the next began.
        public var ended: [Epoch: Int64]
        public init(began: Int64, ended: [Epoch: Int64] = [:]) {
            self.began = began
            self.ended = ended
        }

        /// The server time this history moved past `epoch`, an epoch earlier than its current
        /// one: when the first of its epochs after `epoch` began. That is when the newest of
        /// its ended epochs at or before `epoch` ended, or, before all of them, when the
        /// history began. No commit of `epoch` in this history, or in one it replaced (a
        /// restore puts a backup's history in place of epochs this store never saw, between
        /// the backup's epoch and the restored one), is later.
        public func movedPast(_ epoch: Epoch) -> Int64 {
            var newest: (epoch: Epoch, at: Int64)?
            for (ended, at) in ended where ended <= epoch {
                if newest.map({ ended > $0.epoch }) ?? true { newest = (ended, at) }
            }
            return newest?.at ?? began
        }

        /// Adds ended epochs (an epoch already there keeps the earlier time).
        public mutating func end(_ epochs: [Epoch: Int64]) {
            ended.merge(epochs) { min($0, $1) }
        }
    }

    /// A remembered applied change id (docs/protocol.md section 4, idempotency).
    public struct Applied: Hashable, Sendable {
        /// SHA-256 of the change's fingerprint material.
        public var fingerprint: [UInt8]
        /// The version the change was applied as (possibly of an earlier epoch).
        public var version: Version
        /// When the push that applied it arrived (ms since 1970): the record's updatedAt
        /// at that version for an edit, and what the sweep of old ids goes by.
        public var appliedAt: Int64
        public init(fingerprint: [UInt8], version: Version, appliedAt: Int64) {
            self.fingerprint = fingerprint
            self.version = version
            self.appliedAt = appliedAt
        }
    }

    /// One change of a push as the store received it.
    public struct Input: Sendable {
        public var change: Change
        /// SHA-256 of `change.fingerprintMaterial()`.
        public var fingerprint: [UInt8]
        /// The record's `data` as stored (canonical JSON); nil for a delete.
        public var data: [UInt8]?
        /// Why the server's rules refuse the change whatever the record's state (a schema
        /// failure, found before the store): answered where the judge's refusals are.
        public var refusal: PushResult.RejectReason?
        public init(change: Change, fingerprint: [UInt8], data: [UInt8]?, refusal: PushResult.RejectReason? = nil) {
            self.change = change
            self.fingerprint = fingerprint
            self.data = data
            self.refusal = refusal
        }
    }

    /// One entry of a push in its order: a change for the store, or one already refused
    /// before it (`check`), whose result only keeps its place.
    public enum Item: Sendable {
        case change(Input)
        case rejected(PushResult)
    }

    /// A change as the server's checks before the store leave it (`check`).
    public enum Checked: Sendable {
        /// To be applied: the change, and its `data` in canonical JSON (the form stored and
        /// fingerprinted; nil for a delete).
        case admitted(Change, data: [UInt8]?)
        /// Answered without the store.
        case refused(PushResult)
    }

    /// What a server refuses of a change whatever the record's state, before the store sees
    /// it (docs/protocol.md section 4): a change that did not decode, a lineage that a
    /// re-offer to a server at `epoch` cannot have, data over `maxRecordBytes` encoded.
    public static func check(_ decoded: DecodedChange, epoch: Epoch, maxRecordBytes: Int) -> Checked {
        switch decoded {
        case .invalid(let changeId, let message):
            return .refused(.rejected(changeId, .invalidChange, message))
        case .valid(let change):
            if let problem = Lineage.problem(of: change, serverEpoch: epoch) {
                return .refused(.rejected(change.changeId, .invalidChange, problem))
            }
            // Stored in canonical form (keys sorted): the same bytes feed the fingerprint.
            // JSON objects are unordered (RFC 8259 section 4); key order is not kept.
            let data = change.canonicalData()
            if let data, data.count > maxRecordBytes {
                return .refused(.rejected(change.changeId, .recordTooLarge, "data is \(data.count) bytes encoded; the limit is \(maxRecordBytes)"))
            }
            return .admitted(change, data: data)
        }
    }

    /// A record state to store, replacing the key's row (or creating it).
    public struct Write: Sendable {
        public var key: Key
        public var seq: Int64
        public var deleted: Bool
        /// Canonical JSON; nil for a tombstone.
        public var data: [UInt8]?
        public var updatedAt: Int64
        public var updatedBy: String
        /// The authenticated subject of the push that wrote it (`Context.subject`).
        public var subject: String
        public var clientTime: Int64?
        public var lineage: Version?
        public var sameAs: Version?
        /// Set when a resolved write (`Change.resolves`) replaces a state: that state's
        /// version and the mark.
        public var resolved: Resolved?
    }

    /// A live state replaced by a write that may take the record out of some token's view
    /// (docs/rules.md): kept with the seq of that write, so a pull from a cursor before it
    /// can tell whether the device's copy was in its view.
    public struct Departure: Sendable {
        public var key: Key
        /// The seq of the write that replaced the state.
        public var seq: Int64
        /// The replaced state's data, as JSON.
        public var data: [UInt8]
    }

    /// One key of a record state in the view index of a server with rules
    /// (docs/rules.md, "Cost"): a page under rules reads the records of a token's view by
    /// these keys, so it never reads the records the token cannot see.
    public struct IndexKey: Sendable, Hashable {
        /// The collection's name when the rules name it, "" for the collections `default` covers.
        public var scope: String
        /// The path of `data` indexed (names joined by "."); "" for the entry every record has.
        public var path: String
        /// The member's value at the path, encoded (`ViewIndex`).
        public var key: String
        public init(scope: String, path: String, key: String) {
            self.scope = scope
            self.path = path
            self.key = key
        }
    }

    /// An index key of the record state stored at `seq`.
    public struct IndexEntry: Sendable, Hashable {
        public var key: IndexKey
        public var seq: Int64
        public var collection: String
        public init(key: IndexKey, seq: Int64, collection: String) {
            self.key = key
            self.seq = seq
            self.collection = collection
        }
    }

    /// A change id to remember with the version it was applied as.
    public struct Remember: Sendable {
        public var changeId: String
        public var fingerprint: [UInt8]
        public var seq: Int64
        public var appliedAt: Int64
    }

    /// `apply` on the changes of `items`, answered in the items' order: the items refused
    /// before the store keep their places.
    public static func apply<S: PushStorage>(items: [Item], context: Context, space: inout Space,
                                             storage: inout S, judge: (any PushJudge)? = nil) throws -> [PushResult] {
        var inputs: [Input] = []
        inputs.reserveCapacity(items.count)
        for case .change(let input) in items { inputs.append(input) }
        var decided = try apply(inputs, context: context, space: &space, storage: &storage, judge: judge).makeIterator()
        return items.map { item in
            switch item {
            case .change: decided.next()!
            case .rejected(let result): result
            }
        }
    }

    /// Applies one push's changes in array order, each on its own, and returns one result
    /// per input. `space` holds the space's counters, read under the store's lock for the
    /// space; on return it holds them after the push, and the store stores them in the same
    /// transaction as the writes (`write` is given them too).
    ///
    /// With a `judge` (a server with rules), every change that is not a replay is judged
    /// against the record's state at that point of the push, before the base guard, and
    /// the states that writes replace are kept as departures where the judge says so.
    public static func apply<S: PushStorage>(_ inputs: [Input], context: Context, space: inout Space,
                                             storage: inout S, judge: (any PushJudge)? = nil) throws -> [PushResult] {
        guard !inputs.isEmpty else { return [] }
        var run = try Run(inputs, context: context, space: space, storage: &storage, judge: judge)
        for input in inputs { try run.take(input, storage: &storage) }
        try run.reportConflicts(storage: &storage)
        space = Space(head: run.head, recordBytes: run.used)
        try run.store(space: space, storage: &storage)
        return run.results
    }
}

/// A push the rules cannot apply at all (a failure of the push, not of a change).
public enum PushRulesError: Error, CustomStringConvertible, Sendable {
    /// The space has used every seq of its epoch (2^53 - 1 of them).
    case seqsExhausted
    /// A record's stored data is not a JSON object.
    case notAnObject(String, String)

    public var description: String {
        switch self {
        case .seqsExhausted: "the space has used every seq of this epoch; rotate the epoch"
        case .notAnObject(let collection, let id): "stored data of \(collection)/\(id) is not an object"
        }
    }
}

/// What a store implements for `PushRules.apply`, inside its write transaction for one
/// space. Each method is one set-wise operation, so a store may answer it with one
/// statement.
public protocol PushStorage {
    /// The remembered change ids among `changeIds` (which may repeat).
    mutating func applied(_ changeIds: [String]) throws -> [String: PushRules.Applied]
    /// The stored states of `keys` (distinct); a key with no row is absent.
    mutating func heads(_ keys: [PushRules.Key]) throws -> [PushRules.Key: PushRules.Head]
    /// The whole stored states of `keys` (distinct), for conflict answers.
    mutating func currents(_ keys: [PushRules.Key]) throws -> [PushRules.Key: RecordState]
    /// Stores `writes` (one per key, each replacing its row or creating it), remembers
    /// `remember`'s change ids, and stores the space's counters after them, `space`
    /// (a store may instead store those at its commit).
    mutating func write(_ writes: [PushRules.Write], remember: [PushRules.Remember], space: PushRules.Space) throws
    /// The store's history of epochs (`PushRules.EpochHistory`): read only for a push that
    /// holds a re-offer.
    mutating func epochHistory() throws -> PushRules.EpochHistory
    /// The live copies that the tombstones `tombstones` (key -> the tombstone's seq)
    /// deleted, as kept in the departures of a server with rules (JSON); a tombstone whose
    /// copy was not kept is absent.
    mutating func deletedCopies(_ tombstones: [PushRules.Key: Int64]) throws -> [PushRules.Key: [UInt8]]
    /// Keeps replaced states for the views of a server with rules (docs/rules.md).
    mutating func depart(_ departures: [PushRules.Departure]) throws
    /// Keeps the view index of a server with rules: removes the entries of the states this
    /// push replaced and adds those of the states it wrote.
    mutating func reindex(removing: [PushRules.IndexEntry], adding: [PushRules.IndexEntry]) throws
}

extension PushStorage {
    /// A storage that keeps no departures kept no deleted copy.
    public mutating func deletedCopies(_ tombstones: [PushRules.Key: Int64]) throws -> [PushRules.Key: [UInt8]] { [:] }

    /// A storage that keeps no departures serves no rules: `apply` with a judge must not
    /// run on it.
    public mutating func depart(_ departures: [PushRules.Departure]) throws {
        precondition(departures.isEmpty, "this storage keeps no departures; it cannot serve a server with rules")
    }

    /// A storage that keeps no view index serves no rules either.
    public mutating func reindex(removing: [PushRules.IndexEntry], adding: [PushRules.IndexEntry]) throws {
        precondition(removing.isEmpty && adding.isEmpty, "this storage keeps no view index; it cannot serve a server with rules")
    }
}

/// The rules of a server (docs/rules.md) as `PushRules.apply` asks them, inside the
/// store's write transaction, so the state a change is judged on is the one it replaces.
public protocol PushJudge: Sendable {
    /// Why `change` is refused, given the record's state now (nil when it has none), or
    /// nil when the rules admit it. For a tombstone, `deletedCopy` is the live data it
    /// deleted when the store kept it: a token that could not read that copy may not
    /// learn of the tombstone, even from a conflict's answer.
    func judge(_ change: Change, current: RecordState?, deletedCopy: JSONObject?) -> PushResult.RejectReason?
    /// Whether replacing the live data `old` by `new` (nil for a delete) can take the
    /// record out of some token's view.
    func departs(collection: String, old: JSONObject, new: JSONObject?) -> Bool
    /// The view index keys of a live state of `collection` whose data holds `data` (at
    /// least the members the read rules read).
    func indexKeys(collection: String, data: JSONObject) -> [PushRules.IndexKey]
}

extension PushRules.Write {
    /// The record state this write stores, as a conflict answer shows it.
    func state(epoch: Epoch) throws -> RecordState {
        var object: JSONObject?
        if !deleted, let data {
            guard case .object(let o) = try JSONParser.parse(data) else { throw PushRulesError.notAnObject(key.collection, key.id) }
            object = o
        }
        return RecordState(collection: key.collection, id: key.id, version: Version(epoch: epoch, seq: seq), deleted: deleted, data: object,
                           updatedAt: updatedAt, updatedBy: updatedBy, clientTime: clientTime, lineage: lineage, sameAs: sameAs, resolved: resolved)
    }
}
