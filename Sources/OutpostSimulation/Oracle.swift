import Outpost
import OutpostCore

// The harness's model of a run: every write any device made, every record state the server
// committed, what each device knows, and the fate of each local edit. The invariants are
// checked against it after every step and once more after the network heals.
//
// Writes are named by their content: every put of the simulation carries a unique tag in
// `data.t` (an edit's, or a merge's), so a change seen on the wire names the write it carries
// even after the SDK coalesced it, re-based it, or offered it again to a new history.
// Tombstones carry no data; a delete is named by its changeId (read from the queue right
// after the edit) and otherwise by the device's newest delete of that record.
//
// Knowledge: a write "knows" the writes its author had seen of the record when it was made
// (the device's server copy and its own earlier edits; for a resolver's result, also the
// server side of the conflict). A server state knows its write's knowledge. "A later write
// replaced it" means: the final state knows it.

/// A record's name.
struct Key: Hashable, Comparable, Sendable, CustomStringConvertible {
    let collection: String
    let id: String

    init(_ collection: String, _ id: String) {
        self.collection = collection
        self.id = id
    }

    static func < (a: Key, b: Key) -> Bool { (a.collection, a.id) < (b.collection, b.id) }
    var description: String { "\(collection)/\(id)" }
}

/// One of the invariants the harness checks (docs/simulation.md, "What a run checks").
public enum Invariant: String, Sendable, CaseIterable {
    /// Every acknowledged write is on the server after healing unless a later write replaced it.
    case acknowledgedWrite = "acknowledged-write"
    /// No device and no server ever replaces a newer version with an older one.
    case noRegression = "no-regression"
    /// No local edit is lost unless a later edit or a resolver replaced it.
    case localEdit = "local-edit"
    /// Every rejected change is visible to the app.
    case rejectedVisible = "rejected-visible"
    /// After healing, every device and the server hold identical records and nothing is pending.
    case convergence = "convergence"
    /// Quarantined records are reported, never dropped.
    case quarantine = "quarantine"
    /// The counter and set fields end as the sum and the set of every edit (`Ledger`).
    case fieldKinds = "field-kinds"
    /// A record held in a conflict left for a person was sent, or kept another record's
    /// change from reaching the server (runs with conflicts left for a person).
    case queueBlocked = "queue-blocked"
    /// The harness could not follow the run (an answer or state no write accounts for).
    case harness = "harness"
}

/// One broken invariant.
public struct Violation: Sendable, CustomStringConvertible {
    /// Which invariant.
    public let invariant: Invariant
    /// The step after which it was found (steps + 1 for the checks after healing).
    public let step: Int
    /// What happened.
    public let message: String

    public var description: String { "[\(invariant.rawValue)] step \(step): \(message)" }
}

/// The tag naming the write whose data this is.
func tag(of data: JSONObject?) -> String? {
    if case .string(let t)? = data?["t"] { return t }
    return nil
}

/// True for data another app version wrote, which the simulation's validator refuses.
func isBad(_ data: JSONObject?) -> Bool {
    if case .bool(true)? = data?["bad"] { return true }
    return false
}

/// True when `a` is an older version than `b` by the protocol's order: epochs first (a
/// longer one is later; of two as long, the greater byte by byte), then seq.
func isOlder(_ a: Version, than b: Version) -> Bool {
    a.epoch != b.epoch ? a.epoch < b.epoch : a.seq < b.seq
}

struct Oracle {
    struct Write {
        let id: Int
        let key: Key
        let device: Int
        let tag: String?
        let deleted: Bool
        var know: Set<Int>
        let origin: String
        /// What the app showed when the edit was made (deleted, or the tag of the data); for
        /// an edit merged into a pending one, what that one was made on. Nil: no record.
        var madeOn: Content?
    }

    /// A record's content as the app sees it.
    struct Content: Equatable {
        let deleted: Bool
        let tag: String?
    }

    struct State {
        let version: Version
        let key: Key
        let write: Int
        let updatedAt: Int64
        let deleted: Bool
        let know: Set<Int>
        let restored: Bool
        let bad: Bool
    }

    enum Fate { case pending, settled, rejected, cancelled, discarded }

    struct Local {
        var write: Int
        var fate: Fate
    }

    struct Ack {
        let device: Int
        let key: Key
        let version: Version
        let write: Int
        let step: Int
        let changeId: String
    }

    struct Rejection {
        let device: Int
        let changeId: String
        let write: Int
        let step: Int
        var discarded = false
    }

    struct StepEvents {
        var acked: Set<Int> = []
        var conflicted: [Key: RecordState?] = [:]
        var rejected: [(changeId: String, write: Int)] = []
    }

    let deviceCount: Int
    let resolver: ResolverKind
    var step = 0
    var writes: [Write] = []
    var tagToWrite: [String: Int] = [:]
    var changeToWrite: [String: Int] = [:]
    var states: [Version: State] = [:]
    var chains: [Epoch: [Key: [Version]]] = [:]
    /// The server has a rules file (a run with field kinds): its pulls follow docs/rules.md.
    var underRules = false
    var serverEpochs: [Epoch] = []
    /// What each device's server copy of a record knows.
    var knowledge: [[Key: Set<Int>]]
    var latest: [[Key: Local]]
    /// The changes each device had queued for a record when it last acted (its queue as the
    /// store listed it): the edits a resolver of that device decides with.
    var queued: [[Key: [QueuedChange]]]
    var newestDelete: [[Key: Int]]
    /// The write of the last tombstone each device held as its server copy of a record.
    var lastTombstone: [[Key: Int]]
    var maxVersion: [[Key: Version]]
    var deviceEpoch: [Epoch?]
    var acks: [Ack] = []
    /// For a committed state, the writes a device's resolver saw against it in a conflict
    /// answer: the resolver decided between them, whatever it chose.
    var decidedOver: [Version: Set<Int>] = [:]
    var rejections: [Rejection] = []
    var events: [StepEvents]
    /// The records each device holds in a conflict left for a person: its resolver left
    /// them, or the store lists them (`unsettledConflicts`) after the device acted. Nothing
    /// of them may be sent until the person settles them.
    var heldConflicts: [Set<Key>]
    var violations: [Violation] = []

    init(devices: Int, resolver: ResolverKind) {
        deviceCount = devices
        self.resolver = resolver
        knowledge = Array(repeating: [:], count: devices)
        latest = Array(repeating: [:], count: devices)
        queued = Array(repeating: [:], count: devices)
        newestDelete = Array(repeating: [:], count: devices)
        lastTombstone = Array(repeating: [:], count: devices)
        maxVersion = Array(repeating: [:], count: devices)
        deviceEpoch = Array(repeating: nil, count: devices)
        events = Array(repeating: StepEvents(), count: devices)
        heldConflicts = Array(repeating: [], count: devices)
    }

    mutating func fail(_ invariant: Invariant, _ message: String) {
        violations.append(Violation(invariant: invariant, step: step, message: message))
    }

    func describe(_ write: Int) -> String {
        let w = writes[write]
        return w.deleted ? "delete #\(w.id) (\(w.origin))" : "\(w.tag ?? "?") (\(w.origin))"
    }

    func describe(state version: Version) -> String {
        guard let s = states[version] else { return "\(version) (unknown)" }
        return "\(version) = \(describe(s.write))\(s.restored ? " restored" : "")"
    }

    // MARK: Writes

    private mutating func newWrite(key: Key, device: Int, data: JSONObject?, deleted: Bool, know: Set<Int>, origin: String) -> Int {
        let id = writes.count
        var all = know
        all.insert(id)
        let t = deleted ? nil : tag(of: data)
        writes.append(Write(id: id, key: key, device: device, tag: t, deleted: deleted, know: all, origin: origin))
        if let t { tagToWrite[t] = id }
        if deleted { newestDelete[device][key] = id }
        return id
    }

    /// What the app saw of a record: the write whose data the view shows (a tombstone is the
    /// device's pending delete, or its server copy).
    func seen(device: Int, view: StoredRecord?) -> Set<Int> {
        guard let view else { return [] }
        if !view.deleted, let t = tag(of: view.data), let w = tagToWrite[t] {
            // A committed copy knows what its state knows: more than the write did when it
            // was made, when it was written over a tombstone (see `serverApplied`).
            if !view.pending, let v = view.version, let s = states[v], s.write == w { return s.know.union(writes[w].know) }
            return writes[w].know
        }
        if view.deleted, view.pending, let local = latest[device][Key(view.collection, view.id)], writes[local.write].deleted {
            return writes[local.write].know
        }
        if view.deleted, let v = view.version, let s = states[v], s.deleted { return s.know }
        return []
    }

    /// A local edit (a put with `data`, or a delete when nil) made on `device` while the app
    /// showed `view`: the edit knows what the view showed, nothing else.
    mutating func localEdit(device: Int, key: Key, data: JSONObject?, view: StoredRecord?) -> Int {
        let know = seen(device: device, view: view)
        let id = newWrite(key: key, device: device, data: data, deleted: data == nil, know: know, origin: "d\(device) step \(step)")
        // Made on what the view showed, or, on a pending edit (merged with it in the queue,
        // keeping its base), on what that edit was made on.
        var madeOn = view.map { Content(deleted: $0.deleted, tag: $0.deleted ? nil : tag(of: $0.data)) }
        if let view, view.pending {
            if !view.deleted, let t = tag(of: view.data), let w = tagToWrite[t], w != id { madeOn = writes[w].madeOn }
            if view.deleted, let local = latest[device][key], local.write != id, writes[local.write].deleted { madeOn = writes[local.write].madeOn }
        }
        writes[id].madeOn = madeOn
        latest[device][key] = Local(write: id, fate: .pending)
        return id
    }

    /// The changeId the queue gave a delete (puts are named by their tag).
    mutating func nameChange(_ changeId: String, write: Int) {
        changeToWrite[changeId] = write
    }

    /// A merge the custom resolver wrote on `device` for a conflict whose server side is
    /// `server`: it knows both sides.
    mutating func merge(device: Int, key: Key, server: Version, data: JSONObject) {
        var know = knowledge[device][key] ?? []
        if let local = latest[device][key] {
            know.formUnion(writes[local.write].know)
            latest[device][key]!.fate = .settled
        }
        if let s = states[server] { know.formUnion(s.know) } else {
            fail(.harness, "d\(device)'s resolver saw \(key) at \(server), a version the server never committed")
        }
        let id = newWrite(key: key, device: device, data: data, deleted: false, know: know, origin: "d\(device) merge at step \(step)")
        if let s = states[server] { writes[id].madeOn = Content(deleted: s.deleted, tag: s.deleted ? nil : writes[s.write].tag) }
        latest[device][key] = Local(write: id, fate: .pending)
    }

    // MARK: Conflicts left for a person

    /// `device`'s resolver left the conflict of `key` for a person: the device keeps its
    /// local edit, shown and held (the conflict answer already made it an edit on the
    /// server's copy, in `answerRead`), and sends nothing of the record until it is settled.
    mutating func leftForPerson(device: Int, key: Key) {
        heldConflicts[device].insert(key)
    }

    /// The store's own list of `device`'s held conflicts, read after the device acted.
    mutating func held(device: Int, keys: Set<Key>) {
        heldConflicts[device] = keys
    }

    /// `device` pushes `changes`: none may be of a record it holds in conflict, except a
    /// re-offer (`lineage`): the record's server copy offered again to a new history that
    /// lacks it (an acknowledged write restored), which carries nothing of the held edit.
    mutating func pushed(device: Int, changes: [Change]) {
        for change in changes where change.lineage == nil && heldConflicts[device].contains(Key(change.collection, change.id)) {
            let content = change.op == .delete ? "a delete" : "put \(tag(of: change.data) ?? "?")"
            fail(.queueBlocked, "d\(device) sent \(change.collection)/\(change.id) (\(content), \(change.changeId)), a record it holds in a conflict left for a person")
        }
    }

    /// A person settles `device`'s held conflict of `key`, whose held edit shows `local`
    /// (nil: a delete), beside the server's copy at `serverVersion` (nil: none): an edit made
    /// on that copy, knowing it and the held edit (`keepLocal` the held edit's content, a
    /// `write` or `delete` a new write), or the held edit dropped (`keepServer`), the person
    /// having decided over it. Returns the write the store now queues, if any.
    mutating func settle(device: Int, key: Key, local: JSONObject?, serverVersion: Version?, resolution: Resolution) -> Int? {
        heldConflicts[device].remove(key)
        var held: Int?
        // A delete: the device's own, or a tombstone it offered again to a new history (a
        // re-offer decided in a conflict is held as the copy it carries).
        if let local { held = tag(of: local).flatMap { tagToWrite[$0] } } else { held = tombstoneWrite(device: device, key: key) }
        guard let held else {
            fail(.harness, "d\(device) settles \(key), whose held edit (\(local.map { tag(of: $0) ?? "?" } ?? "a delete")) carries no write the harness knows")
            return nil
        }
        var know = writes[held].know
        var shown: Content?
        if let v = serverVersion {
            if let s = states[v], s.key == key {
                know.formUnion(s.know)
                shown = Content(deleted: s.deleted, tag: s.deleted ? nil : writes[s.write].tag)
                decidedOver[v, default: []].formUnion(writes[held].know.union([held]))
            } else {
                fail(.harness, "d\(device) shows \(key) at \(v) beside its held conflict, a version the server never committed for it")
            }
        }
        let wasLatest = latest[device][key]?.write == held
        func replaced(by id: Int) -> Int {
            if wasLatest { latest[device][key]!.fate = .settled }
            writes[id].madeOn = shown
            latest[device][key] = Local(write: id, fate: .pending)
            return id
        }
        switch resolution {
        case .keepServer, .leaveForPerson:
            if wasLatest { latest[device][key]!.fate = .settled }
            return nil
        case .keepLocal:
            writes[held].know.formUnion(know)
            writes[held].madeOn = shown
            latest[device][key] = Local(write: held, fate: .pending)
            return held
        case .write(let data):
            return replaced(by: newWrite(key: key, device: device, data: data, deleted: false, know: know, origin: "d\(device) settles at step \(step)"))
        case .delete:
            return replaced(by: newWrite(key: key, device: device, data: nil, deleted: true, know: know, origin: "d\(device) settles by a delete at step \(step)"))
        }
    }

    /// The write a change carries.
    mutating func attribute(_ change: Change, device: Int) -> Int? {
        if let w = changeToWrite[change.changeId] { return w }
        let key = Key(change.collection, change.id)
        // A re-offer names the state it carries (protocol 1.1): its write, whichever device
        // made it.
        if let lineage = change.lineage, let s = states[lineage.version], s.key == key {
            changeToWrite[change.changeId] = s.write
            return s.write
        }
        let found = change.op == .put ? tag(of: change.data).flatMap { tagToWrite[$0] } : tombstoneWrite(device: device, key: key)
        if let found { changeToWrite[change.changeId] = found }
        return found
    }

    /// The write a queued change carries, when the harness can name it: by its changeId
    /// once a push carried it, else a put by its content's tag.
    func queuedWrite(_ change: QueuedChange) -> Int? {
        if let w = changeToWrite[change.changeId] { return w }
        guard change.op == .put else { return nil }
        return tag(of: change.data).flatMap { tagToWrite[$0] }
    }

    /// The write a tombstone of `key` that `device` sends or holds carries: its own pending
    /// delete, or a copy it offers again.
    func tombstoneWrite(device: Int, key: Key) -> Int? {
        var found: Int?
        if let local = latest[device][key], writes[local.write].deleted, local.fate == .pending {
            found = local.write
        } else if let version = maxVersion[device][key], let s = states[version], s.deleted {
            // A tombstone offered again to a new history: the device's copy.
            found = s.write
        } else if let w = lastTombstone[device][key] {
            // A tombstone offered again on top of the new history's copy, which the device
            // now holds as its server copy.
            found = w
        } else if let w = newestDelete[device][key] {
            found = w
        } else if let s = states.values.filter({ $0.key == key && $0.deleted && $0.version.epoch != serverEpochs.last })
                    .max(by: { isOlder($0.version, than: $1.version) }) {
            // A tombstone of an older history the device learned of while a change was in
            // doubt (kept aside, never shown), offered again when the change was rejected
            // (seed 28533): the newest one that history committed.
            found = s.write
        }
        return found
    }

    // MARK: The server

    /// The server starts a history (a new data directory, or a restored copy rotated).
    mutating func serverEpoch(_ epoch: Epoch) {
        if let last = serverEpochs.last, !(last < epoch) {
            fail(.noRegression, "the server's epoch went from \(last) to \(epoch), which does not sort after it")
        }
        serverEpochs.append(epoch)
    }

    /// The rows of a copy restored into `epoch` from a backup taken in `backupEpoch`.
    mutating func serverRestored(epoch: Epoch, backupEpoch: Epoch, rows: [ServerRow]) {
        serverEpoch(epoch)
        for row in rows.sorted(by: { $0.seq < $1.seq }) {
            guard let original = states[Version(epoch: backupEpoch, seq: row.seq)], original.key == row.key else {
                fail(.harness, "the restored copy holds \(row.key) at \(backupEpoch).\(row.seq), a state the server never committed")
                continue
            }
            let version = Version(epoch: epoch, seq: row.seq)
            states[version] = State(version: version, key: row.key, write: original.write, updatedAt: original.updatedAt,
                                    deleted: original.deleted, know: original.know, restored: true, bad: original.bad)
            chains[epoch, default: [:]][row.key, default: []].append(version)
        }
    }

    /// The server answered a push `response` (whether or not the device reads it).
    mutating func serverApplied(device: Int, request: PushRequest, response: PushResponse, time: Int64) {
        for (change, result) in zip(request.changes, response.results) where result.status == .applied && !result.replayed
            && change.collection != Ledger.collection {
            guard let version = result.version else { continue }
            let key = Key(change.collection, change.id)
            guard let w = attribute(change, device: device) else {
                fail(.harness, "the server applied d\(device)'s change \(change.changeId) of \(key) at \(version), which carries no write the harness knows")
                continue
            }
            if states[version] != nil {
                fail(.noRegression, "the server handed out \(version) twice (\(describe(state: version)), then \(describe(w)))")
                continue
            }
            if let last = chains[version.epoch]?[key]?.last, last.seq >= version.seq {
                fail(.noRegression, "the server wrote \(key) at \(version) after \(last)")
            }
            var know = writes[w].know
            know.insert(w)
            // Histories can only be compared by content: an edit written over a state with the
            // content it was made on (a tombstone is a tombstone, whichever delete made it; a
            // copy re-applied in a new history after a resolver chose it) knows that state.
            if let m = writes[w].madeOn, let below = chains[version.epoch]?[key]?.last, let p = states[below],
               p.deleted == m.deleted, p.deleted || writes[p.write].tag == m.tag {
                know.formUnion(p.know)
            }
            // An edit made on a write it knows, written right over that write's state, knows
            // what that state knew: the queue sends a record's edits as one chain on one base
            // (seed 9599: a put and then a delete, re-based over a tombstone together).
            if let below = chains[version.epoch]?[key]?.last, let p = states[below], know.contains(p.write) {
                know.formUnion(p.know)
            }
            states[version] = State(version: version, key: key, write: w, updatedAt: time, deleted: change.op == .delete,
                                    know: know, restored: false, bad: isBad(change.data))
            chains[version.epoch, default: [:]][key, default: []].append(version)
        }
    }

    /// `device` read the push answer `response`.
    mutating func answerRead(device: Int, request: PushRequest, response: PushResponse) {
        for (change, result) in zip(request.changes, response.results) where change.collection != Ledger.collection {
            let key = Key(change.collection, change.id)
            guard let w = attribute(change, device: device) else {
                fail(.harness, "d\(device) read an answer for change \(change.changeId) of \(key), which carries no write the harness knows")
                continue
            }
            switch result.status {
            case .applied:
                guard let version = result.version else { continue }
                guard let s = states[version] else {
                    fail(.acknowledgedWrite, "d\(device) read \"applied at \(version)\" for \(describe(w)) of \(key): the server never committed that version")
                    continue
                }
                if s.write != w || s.key != key {
                    fail(.acknowledgedWrite, "d\(device) read \"applied at \(version)\" for \(describe(w)) of \(key), but \(version) holds \(describe(s.write)) of \(s.key)")
                }
                if !acks.contains(where: { $0.device == device && $0.version == version }) {
                    acks.append(Ack(device: device, key: key, version: version, write: w, step: step, changeId: change.changeId))
                }
                events[device].acked.insert(w)
            case .conflict:
                events[device].conflicted[key] = result.current
                var seen = knowledge[device][key] ?? []
                if let current = result.current {
                    if let s = states[current.version] { seen.formUnion(s.know) } else {
                        fail(.harness, "a conflict answer to d\(device) names \(key) at \(current.version), a version the server never committed")
                    }
                }
                // The resolver decides with the device's newest edit of the record; an edit it
                // keeps goes again on `current`, as if made on it. That edit is the newest the
                // app made, or one the device queued that carries another write's content (a
                // resolver's write that went again to a new history).
                let shown = result.current.map { Content(deleted: $0.deleted, tag: $0.deleted ? nil : tag(of: $0.data)) }
                var deciding: Set<Int> = [w]
                if let local = latest[device][key] { deciding.insert(local.write) }
                for q in queued[device][key] ?? [] where q.changeId != change.changeId {
                    if let carried = queuedWrite(q) { deciding.insert(carried) }
                }
                for d in deciding {
                    if let current = result.current { decidedOver[current.version, default: []].formUnion(writes[d].know.union([d])) }
                    writes[d].know.formUnion(seen)
                    writes[d].madeOn = shown
                }
            case .rejected:
                guard result.error?.code != ErrorCode.epochMismatch.rawValue else { continue }
                rejections.append(Rejection(device: device, changeId: change.changeId, write: w, step: step))
                events[device].rejected.append((change.changeId, w))
            }
        }
    }

    // MARK: Checks after a device's step

    private func carries(_ write: Write, _ change: QueuedChange) -> Bool {
        guard change.collection == write.key.collection && change.id == write.key.id else { return false }
        return write.deleted ? change.op == .delete : tag(of: change.data) == write.tag
    }

    /// Checks a device after it acted: versions never go back and name what the server
    /// committed; local edits leave the queue only by an answer, a resolver or a rejection;
    /// rejections are visible.
    mutating func checkDevice(_ device: Int, records: [StoredRecord], pending: [QueuedChange], rejected: [QueuedChange], epoch: Epoch?) {
        if let before = deviceEpoch[device], let now = epoch, now != before, !(before < now) {
            fail(.noRegression, "d\(device) went from epoch \(before) back to \(now)")
        }
        if epoch != nil { deviceEpoch[device] = epoch }
        queued[device] = Dictionary(grouping: pending, by: { Key($0.collection, $0.id) })
        // An `applied` read in an epoch the store did not follow settled nothing (Push.send):
        // the change is still queued under its changeId, and the app was never told it was
        // applied. Its next answer is the one that counts (seed 49820).
        let unaccepted = acks.filter { a in a.device == device && a.step == step && pending.contains { $0.changeId == a.changeId } }
        if !unaccepted.isEmpty {
            acks.removeAll { a in a.device == device && a.step == step && pending.contains { $0.changeId == a.changeId } }
            for a in unaccepted { events[device].acked.remove(a.write) }
        }
        for record in records {
            let key = Key(record.collection, record.id)
            guard let version = record.version else { continue }
            if let max = maxVersion[device][key], isOlder(version, than: max) {
                fail(.noRegression, "d\(device) holds \(key) at \(version) after it held \(max)")
            }
            if maxVersion[device][key].map({ isOlder($0, than: version) }) ?? true { maxVersion[device][key] = version }
            guard let s = states[version], s.key == key else {
                fail(.noRegression, "d\(device) holds \(key) at \(version), a version the server never committed for it")
                continue
            }
            if !record.pending && (record.deleted != s.deleted || (!s.deleted && tag(of: record.data) != writes[s.write].tag)) {
                fail(.noRegression, "d\(device) shows \(key) at \(version) as \(record.deleted ? "deleted" : tag(of: record.data) ?? "?"), but the server committed \(describe(state: version))")
            }
            knowledge[device][key] = s.know
            if s.deleted { lastTombstone[device][key] = s.write }
        }
        let byKey = Dictionary(grouping: records, by: { Key($0.collection, $0.id) })
        for (key, local) in latest[device] where local.fate == .pending {
            let write = writes[local.write]
            // Acknowledged: from here the acknowledged-write invariant follows it (its content
            // may still be queued, offered again to a new history).
            if events[device].acked.contains(local.write) {
                latest[device][key]!.fate = .settled
                continue
            }
            if pending.contains(where: { carries(write, $0) }) { continue }
            if rejected.contains(where: { carries(write, $0) }) {
                latest[device][key]!.fate = .rejected
                continue
            }
            if let current = events[device].conflicted[key] {
                latest[device][key]!.fate = .settled
                if resolver == .clientWins {
                    // The client wins: the edit stays queued, unless the server already held it.
                    let onServer = current.map { $0.deleted == write.deleted && (write.deleted || tag(of: $0.data) == write.tag) } ?? false
                    let shown = byKey[key]?.first.map { !$0.pending && $0.deleted == write.deleted && (write.deleted || tag(of: $0.data) == write.tag) } ?? false
                    if !onServer && !shown {
                        fail(.localEdit, "d\(device)'s edit \(describe(local.write)) of \(key) was dropped after a conflict although the client wins")
                    }
                }
                continue
            }
            latest[device][key]!.fate = .settled
            fail(.localEdit, "d\(device)'s edit \(describe(local.write)) of \(key) left the queue without an answer, a resolver's decision or a rejection")
        }
        for r in events[device].rejected where !rejected.contains(where: { $0.changeId == r.changeId }) {
            if pending.contains(where: { $0.changeId == r.changeId }) {
                // Read in an epoch the store does not follow yet: it settled nothing, and the
                // change goes out again (Push.send); its next answer is the one that counts.
                rejections.removeAll { $0.device == device && $0.changeId == r.changeId }
                continue
            }
            fail(.rejectedVisible, "d\(device)'s change \(r.changeId) (\(describe(r.write))) was rejected but is not in rejectedChanges()")
        }
        events[device] = StepEvents()
    }

    /// The app discarded a rejected change.
    mutating func discarded(device: Int, changeId: String) {
        for i in rejections.indices where rejections[i].device == device && rejections[i].changeId == changeId {
            rejections[i].discarded = true
        }
        for (key, local) in latest[device] where local.fate == .rejected && changeToWrite[changeId] == local.write {
            latest[device][key]!.fate = .discarded
        }
    }

    // MARK: After healing

    /// The writes a state accounts for: those it descends from, and those a resolver saw
    /// against a state it descends from (whatever the resolver chose), to a fixed point.
    func accounted(by state: State) -> Set<Int> {
        var known = state.know
        var changed = true
        while changed {
            changed = false
            for (version, seen) in decidedOver {
                guard let s = states[version], known.contains(s.write), !seen.isSubset(of: known) else { continue }
                known.formUnion(seen)
                changed = true
            }
        }
        return known
    }

    /// The checks after the network healed and every device synced until nothing changed.
    /// True when every state the server committed of `key` after `held` up to `version` (one
    /// history) is a tombstone. Under rules a delete reaches a device only with the copy it
    /// deleted (docs/rules.md, "Pulls: a view per token"): a delete of a deleted record
    /// departs no copy, so a device keeps the tombstone it was sent (seed 15 with field kinds).
    func onlyTombstones(_ key: Key, after held: Version, upTo version: Version) -> Bool {
        guard held.epoch == version.epoch, held.seq < version.seq, let chain = chains[version.epoch]?[key] else { return false }
        return chain.filter { $0.seq > held.seq && $0.seq <= version.seq }.allSatisfy { states[$0]?.deleted == true }
            && states[held]?.deleted == true
    }

    mutating func finalCheck(serverEpoch: Epoch, server: [ServerRow], devices: [DeviceFinal]) {
        var final: [Key: ServerRow] = [:]
        for row in server {
            final[row.key] = row
            let version = Version(epoch: serverEpoch, seq: row.seq)
            guard let s = states[version], s.key == row.key else {
                fail(.harness, "the server holds \(row.key) at \(version), a state the harness never saw it commit")
                continue
            }
            if s.deleted != row.deleted || (!row.deleted && writes[s.write].tag != row.tag) {
                fail(.noRegression, "the server holds \(row.key) at \(version) as \(row.deleted ? "deleted" : row.tag ?? "?"), but committed \(describe(state: version))")
            }
        }

        checkAcknowledged(serverEpoch: serverEpoch, final: final)
        // Identical records everywhere; nothing pending; quarantined versions reported.
        for (i, device) in devices.enumerated() { checkConverged(i, device, serverEpoch: serverEpoch, final: final) }
        for r in rejections where !r.discarded && !devices[r.device].rejected.contains(where: { $0.changeId == r.changeId }) {
            fail(.rejectedVisible, "d\(r.device)'s rejected change \(r.changeId) (\(describe(r.write)), step \(r.step)) is no longer in rejectedChanges()")
        }
    }

    /// Every acknowledged write is on the server unless a later write replaced it.
    mutating func checkAcknowledged(serverEpoch: Epoch, final: [Key: ServerRow]) {
        var reported: Set<String> = []
        for ack in acks {
            guard let a = states[ack.version] else { continue }
            guard let row = final[ack.key] else {
                fail(.acknowledgedWrite, "\(ack.key): d\(ack.device) read \"applied at \(ack.version)\" (\(describe(ack.write))) at step \(ack.step), and the server no longer has the record")
                continue
            }
            let finalVersion = Version(epoch: serverEpoch, seq: row.seq)
            guard let f = states[finalVersion] else { continue }
            if f.know.contains(ack.write) { continue }
            // A resolver that saw the acknowledged write against a state the final one
            // descends from decided over it (the resolver saw both); and so on through the
            // writes that resolver saw.
            if accounted(by: f).contains(ack.write) { continue }
            // A device does not offer its copy again to a new history that holds the same
            // content (Pull.applyPulled): a tombstone restored from a backup carries an
            // acknowledged delete's effect.
            let writes = self.writes
            let sameContent = { (s: State) in s.deleted == f.deleted && (s.deleted || writes[s.write].tag == writes[f.write].tag) }
            if sameContent(a) { continue }
            let text = "\(ack.key): d\(ack.device) read \"applied at \(ack.version)\" (\(describe(ack.write))) at step \(ack.step); the server ends at \(describe(state: finalVersion)), which never saw it"
            if ack.version.epoch == serverEpoch {
                fail(.acknowledgedWrite, text)
                continue
            }
            // Another history: a write committed in it after the acknowledged one, which the
            // final state descends from, replaced it by the protocol's order (section 5).
            let chain = (chains[serverEpoch]?[ack.key] ?? []).filter { $0.seq <= row.seq }.compactMap { states[$0] }
            // (A restored copy keeps the time of its first commit, so a copy restored from a
            // backup older than the acknowledged write never qualifies.)
            if let later = chain.first(where: { $0.updatedAt > a.updatedAt && !$0.know.contains(ack.write) && f.know.contains($0.write) }) {
                // Protocol 1.1: a write of the new history that never saw the acknowledged
                // one meets it as a conflict; it never replaces it unseen.
                if reported.insert("order \(ack.key)").inserted {
                    fail(.acknowledgedWrite, text + "; replaced by \(describe(state: later.version)), committed later in the new history by a device that never saw it")
                }
            } else if states.values.contains(where: { committedAfter($0, a) && $0.know.contains(ack.write) && $0.write != ack.write && sameContent($0) }) {
                // Replaced, in a history since lost, by a write that saw it, whose content the
                // final state holds (a delete after it, the server ending on an older restored
                // tombstone; or the delete in the same push).
                continue
            } else if let later = states.values.filter({ committedAfter($0, a) && !$0.know.contains(ack.write) && sameContent($0) }).min(by: { $0.updatedAt < $1.updatedAt }) {
                if reported.insert("order \(ack.key)").inserted {
                    fail(.acknowledgedWrite, text + "; replaced by \(describe(state: later.version)), committed later by a device that never saw it, whose content the server holds")
                }
            } else {
                fail(.acknowledgedWrite, text + "; no write committed after it in the new history accounts for that")
            }
        }
    }

    /// Device `i` holds what the server holds (its view of it), in the server's epoch, with
    /// nothing pending, and quarantined only versions the validator refuses.
    mutating func checkConverged(_ i: Int, _ device: DeviceFinal, serverEpoch: Epoch, final: [Key: ServerRow]) {
        if !device.pending.isEmpty {
            fail(.convergence, "d\(i) still has \(device.pending.count) unsettled change(s) after healing: \(device.pending.map { "\($0.collection)/\($0.id) \($0.state.rawValue)" }.joined(separator: ", "))")
        }
        if device.epoch != serverEpoch {
            fail(.convergence, "d\(i) ends in epoch \(device.epoch?.rawValue ?? "none"), the server in \(serverEpoch)")
        }
        var held: [Key: StoredRecord] = [:]
        for r in device.records { held[Key(r.collection, r.id)] = r }
        for (key, row) in final {
            let version = Version(epoch: serverEpoch, seq: row.seq)
            let quarantined = device.quarantined.contains { $0.collection == key.collection && $0.id == key.id && $0.version == version.text }
            guard let r = held[key] else {
                // Under rules a page from the start sends no tombstone (docs/rules.md): a
                // device that pulled from the start holds none of the records deleted before.
                if underRules && row.deleted { continue }
                if !quarantined { fail(.convergence, "d\(i) lacks \(key), which the server holds at \(describe(state: version))") }
                continue
            }
            if r.version != version || r.deleted != row.deleted || (!row.deleted && tag(of: r.data) != row.tag) {
                if quarantined { continue }
                if underRules && r.deleted && row.deleted, let held = r.version, onlyTombstones(key, after: held, upTo: version) { continue }
                fail(.convergence, "d\(i) holds \(key) at \(r.version?.text ?? "no version") as \(r.deleted ? "deleted" : tag(of: r.data) ?? "?"); the server holds \(describe(state: version))")
            }
        }
        for key in held.keys where final[key] == nil {
            fail(.convergence, "d\(i) holds \(key), which the server does not have")
        }
        for q in device.quarantined {
            guard let text = q.version, let v = Version(text), let s = states[v], s.bad else {
                fail(.quarantine, "d\(i) quarantined \(q.collection ?? "?")/\(q.id ?? "?") at \(q.version ?? "?") (\(q.reason)), which is not a record the validator refuses")
                continue
            }
        }
        for (key, local) in latest[i] where local.fate == .pending {
            fail(.localEdit, "d\(i)'s edit \(describe(local.write)) of \(key) is still unsettled after healing")
        }
    }
}

/// True when `s` was committed after `a`: later in the same history (one push commits its
/// changes at one time), or at a later time.
private func committedAfter(_ s: Oracle.State, _ a: Oracle.State) -> Bool {
    s.version.epoch == a.version.epoch ? s.version.seq > a.version.seq : s.updatedAt > a.updatedAt
}

/// One record of the server's store, read from its SQLite file.
struct ServerRow: Sendable {
    let key: Key
    let seq: Int64
    let deleted: Bool
    let tag: String?
    let updatedAt: Int64
    /// The data (for `Ledger`'s records).
    var data: JSONObject? = nil
}

/// What a device holds after healing.
struct DeviceFinal {
    let records: [StoredRecord]
    let pending: [QueuedChange]
    let rejected: [QueuedChange]
    let quarantined: [QuarantinedRecord]
    let epoch: Epoch?
}
