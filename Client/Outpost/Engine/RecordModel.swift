import OutpostCore

// The client's sync state, as values (docs/client.md, "The engine").
//
// Everything the store knows about one record is one `RecordModel`: the copy of the
// history it follows, a copy of a history it left that the followed one may lack, and the
// app's edits in order. The store's phase says which history it follows. `Engine.reduce`
// is the only code that changes a `RecordModel`; SQLite stores it (LocalDatabase).

/// One committed state of a record, as a server sent it.
struct Copy: Hashable, Sendable {
    var version: Version
    /// The content; nil when the device cannot read it (it failed to decode or the app's
    /// validator refused it: the quarantine holds the raw record).
    var body: Body?
    /// The server's commit time; nil when known only from an answer without it.
    var updatedAt: Int64?
    var updatedBy: String?
    var clientTime: Int64?
    /// The version of an earlier history this state descends from (protocol 1.1).
    var lineage: Version?
    /// The change of this device that wrote it, when known.
    var changeId: String?
    /// The state of an earlier history this state is, with nothing written since (1.1).
    var sameAs: Version?
    /// Set when another device's resolved write stored this state (as the server sent it;
    /// not kept in the file): the version it replaced and what that resolver did. Read by
    /// the transition that takes the copy in (`Engine.lostWrite`).
    var resolved: Resolved?

    init(version: Version, body: Body?, updatedAt: Int64?, updatedBy: String? = nil, clientTime: Int64? = nil, lineage: Version? = nil, changeId: String? = nil,
         sameAs: Version? = nil, resolved: Resolved? = nil) {
        self.version = version
        self.body = body
        self.updatedAt = updatedAt
        self.updatedBy = updatedBy
        self.clientTime = clientTime
        self.lineage = lineage
        self.changeId = changeId
        self.sameAs = sameAs
        self.resolved = resolved
    }

    init(_ state: RecordState) {
        self.init(version: state.version, body: Body(state), updatedAt: state.updatedAt, updatedBy: state.updatedBy,
                  clientTime: state.clientTime, lineage: state.lineage, sameAs: state.sameAs, resolved: state.resolved)
    }

    /// True when this state is `other` or descends from it: a later state of the same
    /// history (the versions of one record in one history form a chain), or a state of a
    /// later history whose lineage is `other` or a later state of `other`'s history.
    func holds(_ other: Copy) -> Bool {
        if version.epoch == other.version.epoch { return version.seq >= other.version.seq }
        guard let lineage, lineage.epoch == other.version.epoch else { return false }
        return lineage.seq >= other.version.seq
    }

    /// True when this state is `other` itself: the same version, or a state of a later
    /// history that is `other` with nothing written since (`sameAs`, 1.1).
    func isState(_ other: Copy) -> Bool {
        version == other.version || sameAs == other.version
    }

    /// True when this state is `other` or an ancestor of it, with nothing written since in a
    /// later history: `other` knew everything this state holds, so `other` may go on top of
    /// it. The server's rule for re-offers (protocol 1.1).
    func isAncestor(of other: Copy) -> Bool {
        if version.epoch == other.version.epoch { return version.seq <= other.version.seq }
        guard let sameAs, sameAs.epoch == other.version.epoch else { return false }
        return sameAs.seq <= other.version.seq
    }

    /// True when `self` is a later state than `other` in the epoch order (docs/protocol.md
    /// section 1), then by seq. Used only between copies the store may replace.
    func isLater(than other: Copy) -> Bool {
        if version.epoch != other.version.epoch { return other.version.epoch < version.epoch }
        return version.seq > other.version.seq
    }
}

/// What an edit was made on: the state the app showed when it made it. It names one
/// state for ever; the wire `baseVersion` is computed from it when the change is sent.
enum MadeOn: Hashable, Sendable {
    /// No record the app could read: it created the record.
    case nothing
    /// A server's copy.
    case copy(Copy)
    /// The record's earlier edit with this `localId`, still in the record's list.
    case edit(String)
}

/// Where an edit stands. Each state has one meaning.
enum Delivery: Hashable, Sendable {
    /// Not applied by the followed history, and not sent in its current form since: it
    /// goes with the next push (a retry time paces the scheduler's automatic syncs).
    case queued
    /// Sent with this wire base, and no answer of the followed history has been read: the
    /// server may have applied it. Sent again exactly as it was, under the same changeId.
    case sent(base: Version?)
    /// Applied; the copy it became.
    case acknowledged(Copy)
    /// The server refused it for good. Kept for the app until it discards it.
    case rejected(code: String, message: String)

    var isUnsettled: Bool {
        switch self {
        case .queued, .sent: return true
        case .acknowledged, .rejected: return false
        }
    }
}

/// An app's edit, or a copy of a left history offered again.
enum EditKind: Hashable, Sendable {
    case app
    /// A copy committed in a history the server no longer holds, offered to the followed
    /// one with its lineage; the server answers a conflict unless its copy descends from
    /// an ancestor of it (protocol 1.1).
    /// `descendsFrom` is the carried copy's own lineage: what it descends from in a history
    /// before its own.
    case reoffer(Lineage, descendsFrom: Version? = nil)
}

struct Edit: Hashable, Sendable {
    /// Its place in the queue (nil until stored). Pushes go in this order across records.
    var position: Int64?
    /// Names the edit in the store for ever (its first changeId); `changeId` changes when
    /// the edit absorbs a newer one or goes again as a new change.
    let localId: String
    var changeId: String
    var kind: EditKind
    var body: Body
    var clientTime: Int64
    var createdAt: Int64
    let madeOn: MadeOn
    var delivery: Delivery
    /// Sends so far (and conflicts resolved into it), for the backoff.
    var attempts = 0
    /// The scheduler does not retry it before this time.
    var nextAttemptAt: Int64 = 0
    /// The last failure or the rejection's reason, for the app.
    var lastError: String?
    /// The app version the server wants for this change (`upgrade_required`): a queued edit
    /// is held, not sent, while the app's version for its collection is lower. Nil: none.
    var upgradeTo: Int?
    /// True while a queued edit waits for a person to settle its conflict
    /// (`Resolution.leaveForPerson`): shown to the app, held from the server, blocking no
    /// other record. The app's next edits of the record fold into it and stay held.
    var inConflict = false
    /// Set on the write that settles a conflict (a resolver's or a person's decision): sent
    /// with it (`Change.resolves`), so the server tells the device whose write it replaces.
    var resolves: ResolutionMark?

    init(position: Int64? = nil, localId: String? = nil, changeId: String, kind: EditKind, body: Body, clientTime: Int64, createdAt: Int64, madeOn: MadeOn,
         delivery: Delivery = .queued, attempts: Int = 0, nextAttemptAt: Int64 = 0, lastError: String? = nil, upgradeTo: Int? = nil, inConflict: Bool = false,
         resolves: ResolutionMark? = nil) {
        self.position = position
        self.localId = localId ?? changeId
        self.changeId = changeId
        self.kind = kind
        self.body = body
        self.clientTime = clientTime
        self.createdAt = createdAt
        self.madeOn = madeOn
        self.delivery = delivery
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.upgradeTo = upgradeTo
        self.inConflict = inConflict
        self.resolves = resolves
    }

    var isReoffer: Bool {
        if case .reoffer = kind { return true }
        return false
    }

    /// For a re-offer, the copy it carries.
    var carried: Copy? {
        guard case .reoffer(let lineage, let descendsFrom) = kind else { return nil }
        return Copy(version: lineage.version, body: body, updatedAt: lineage.updatedAt, clientTime: clientTime, lineage: descendsFrom)
    }
}

/// Everything the store knows about one record.
struct RecordModel: Hashable, Sendable {
    let key: RecordKey
    /// The newest copy of the followed history (during a re-pull, of the history being
    /// pulled).
    var server: Copy?
    /// A copy of a history the store left, not yet met in the followed one.
    var left: Copy?
    /// Edits, in the order they go out (see `Engine.normalize`).
    var edits: [Edit]

    init(key: RecordKey, server: Copy? = nil, left: Copy? = nil, edits: [Edit] = []) {
        self.key = key
        self.server = server
        self.left = left
        self.edits = edits
    }

    var isEmpty: Bool { server == nil && left == nil && edits.isEmpty }

    /// True while an edit waits for the server.
    var pending: Bool { edits.contains { $0.delivery.isUnsettled } }

    /// What the app sees: the edit shown (`shownEdit`), else the followed copy
    /// (an acknowledged edit's copy, or a later one), else the left one. Nil when there is
    /// nothing it can read.
    var view: Body? {
        if let edit = shownEdit { return edit.body }
        if let server { return server.body }
        return left?.body
    }

    /// The edit whose content the app sees: the newest app edit waiting for the server,
    /// else a re-offer waiting (the copy it carries); nil when none waits.
    var shownEdit: Edit? {
        edits.last { $0.delivery.isUnsettled && !$0.isReoffer } ?? edits.last { $0.delivery.isUnsettled }
    }

    /// The first edit that waits for the server: the one the next push sends.
    var head: Edit? { edits.first { $0.delivery.isUnsettled } }

    func edit(_ changeId: String) -> Edit? { edits.first { $0.changeId == changeId } }

    func edit(local localId: String) -> Edit? { edits.first { $0.localId == localId } }

    func index(of changeId: String) -> Int? { edits.firstIndex { $0.changeId == changeId } }

    /// The state `madeOn` names, following earlier edits: an acknowledged one is the copy it
    /// became; a rejected one never became a state, so what it was made on. Nil: nothing.
    func state(_ madeOn: MadeOn) -> Copy? {
        switch madeOn {
        case .nothing: return nil
        case .copy(let copy): return copy
        case .edit(let id):
            guard let earlier = edit(local: id) else { return nil }
            switch earlier.delivery {
            case .acknowledged(let copy): return copy
            case .rejected, .queued, .sent: return state(earlier.madeOn)
            }
        }
    }

    /// The content the app saw when it made an edit (the three-way merge's base).
    func content(_ madeOn: MadeOn) -> Body? {
        if case .edit(let id) = madeOn, let earlier = edit(local: id) { return earlier.body }
        return state(madeOn)?.body
    }
}

/// Which history the store follows.
enum Phase: Hashable, Sendable {
    /// No history: before the first sync, or after `leaveEpoch`.
    case detached
    /// Following `epoch`: pushes go, pulls continue from the cursor.
    case following(Epoch)
    /// Pulling the new history `epoch` from its start: copies are met, nothing is pushed.
    case rePulling(Epoch)

    var epoch: Epoch? {
        switch self {
        case .detached: return nil
        case .following(let e), .rePulling(let e): return e
        }
    }
}
