import OutpostCore

// The sync session as a model (docs/client.md, "The sync session"), the way the record
// engine is one (Engine/Engine.swift): a value, `SyncSession`, and one pure function,
// `SyncSession.reduce(session, event) -> (session, effects)`, that makes every decision of
// a sync: which phase runs, what a pull's answer means (a page, a new epoch reported once or
// twice, a changed view, a cursor ahead), how a push is split and what a 413 or a foreign
// answer does. `OutpostStore` (Sync/Sync.swift) performs the effects and feeds back what
// came of them; it decides nothing. SyncSessionTests enumerates the states and checks the
// invariants; the table in the docs is generated from this function.

/// Which history the store follows, and how it pulls it. Kept in the file (`sync_session`).
enum SyncPhase: Hashable, Sendable {
    /// No history: before the first sync, or after `leaveEpoch`.
    case detached
    /// Following `epoch`: pushes go, pulls continue from the cursor.
    case following(Epoch)
    /// Pulling the followed history again from its start, because the view changed or
    /// compaction purged deletes after the cursor: each record the pull brings is marked
    /// seen, and at its end the copies of every record not seen are dropped, never offered
    /// again. Pushes go.
    case viewRePulling(Epoch)
    /// Pulling the followed history again from its start at the app's request
    /// (`resetSync()`): as in a view re-pull, each record the pull brings is marked seen and
    /// at its end the copies of the others are dropped, since a pull from the start carries
    /// no tombstone the device needs (under rules none; after compaction not the purged
    /// ones). Pushes go. The view did not change, so a new epoch met meanwhile is re-pulled
    /// as any other: what the new history lacks is offered again.
    case refreshing(Epoch)
    /// Pulling a new history from its start: copies meet it; nothing is pushed.
    /// `viewChanged`: a view re-pull was under way, so what the new history does not bring
    /// is dropped as well (the token may no longer read it), not offered again.
    case rePulling(Epoch, viewChanged: Bool)

    var epoch: Epoch? {
        switch self {
        case .detached: return nil
        case .following(let e), .viewRePulling(let e), .refreshing(let e), .rePulling(let e, _): return e
        }
    }

    /// The record engine's phase.
    var engine: Phase {
        switch self {
        case .detached: return .detached
        case .following(let e), .viewRePulling(let e), .refreshing(let e): return .following(e)
        case .rePulling(let e, _): return .rePulling(e)
        }
    }

    /// What a marking pull drops at its end of what it did not bring; nil for the others.
    var unseen: UnseenCopies? {
        switch self {
        case .viewRePulling, .rePulling(_, viewChanged: true): return .all
        case .refreshing: return .live
        case .detached, .following, .rePulling(_, viewChanged: false): return nil
        }
    }

    /// True while the pull marks the records it brings, to drop (`unseen`) copies of the
    /// others at its end.
    var marksSeen: Bool { unseen != nil }

    /// True while what the pull does not bring is dropped for good, never offered again: the
    /// token's view changed (or compaction purged deletes), so a new history met meanwhile
    /// is re-pulled the same way.
    var viewChanged: Bool { unseen == .all }

    var isRePulling: Bool {
        if case .rePulling = self { return true }
        return false
    }
}

/// What the session knows of a page: the records are the store's to apply.
struct PageHeader: Hashable, Sendable {
    var epoch: Epoch
    var next: Version
    var view: String?
    var hasMore: Bool
}

/// A change the push could send: its record, id and encoded size.
struct Candidate: Hashable, Sendable {
    var key: RecordKey
    var changeId: String
    var bytes: Int
}

/// How the server answered one change of a push.
enum ChangeAnswer: Hashable, Sendable {
    case applied(Version, updatedAt: Int64?)
    /// `current`: the server's copy, opened (nil: the server has none).
    case conflict(current: Copy?)
    case rejected(code: String, message: String)
    /// `upgrade_required`: nothing applied; the server takes it from an app of `minimum` on.
    case upgradeRequired(minimum: Int, message: String)
}

/// One change's answer, as the server gave it.
struct AnsweredChange: Hashable, Sendable {
    var changeId: String
    var answer: ChangeAnswer
}

/// An event for one record (`SessionEffect.record`).
struct KeyedEvent: Hashable, Sendable {
    var key: RecordKey
    var event: RecordEvent
}

/// What came of a push request.
enum PushAnswer: Hashable, Sendable {
    /// Read and decoded: the epoch it names and its answers in order (nil: nothing was sent).
    case answered(epoch: Epoch?, [AnsweredChange])
    /// A 413 (`too_many_changes` or `payload_too_large`): nothing was applied.
    case tooLarge(code: String, message: String)
    /// No answer read, or a refusal of the whole request.
    case failed(TransportError)
}

/// Pages to apply, in one transaction (`SessionEffect.apply`).
struct Application: Hashable, Sendable {
    var pages: [PageHeader]
    /// The phase the pages are applied under.
    var pulling: SyncPhase
    /// The phase and cursor stored with them.
    var phase: SyncPhase
    var cursor: Cursor
    /// Every record's copy becomes a left copy first, to be met in the new history.
    var confirm = false
    /// Retire this epoch first.
    var retire: Epoch?
    /// Forget the records marked seen first.
    var clearSeen = false
    /// At the end: drop the copies of records not seen (the end of a view re-pull or a
    /// refresh); nil: none is dropped.
    var dropUnseen: UnseenCopies?
    /// At the end: offer again the left copies the history lacks (a re-pull's end).
    var finishRePull = false
}

/// Which copies of the records a marking pull did not bring are dropped at its end.
enum UnseenCopies: Hashable, Sendable {
    /// Every one: the token may no longer read them, or the history no longer holds them
    /// (a view re-pull).
    case all
    /// The live ones: the pull did not bring a record the device holds live because it was
    /// deleted since (its tombstone is not sent from the start) or left the view by a
    /// write. A copy that is a tombstone already says what the server holds, and stays: it
    /// is what the device offers again if a new history lacks the record (a refresh).
    case live

    /// Whether the copies of `model`, a record the pull did not bring, are dropped.
    func drops(_ model: RecordModel) -> Bool {
        switch self {
        case .all: return true
        case .live: return !(model.server?.body?.deleted ?? false)
        }
    }
}

/// What happens to the session.
enum SessionEvent: Hashable, Sendable {
    /// A sync starts; `dueOnly`: the scheduler's, which sends only changes whose retry time came.
    case start(dueOnly: Bool)
    /// What the push could send now (each record's head edit, due, not yet sent in this
    /// phase), in queue order, and the server's limits.
    /// `overhead`: the bytes of a request around its changes.
    case candidates([Candidate], Limits, overhead: Int)
    /// The server's limits could not be read.
    case limitsFailed(OutpostError)
    /// The answer to the batch the session sent; `sent`: the changes the request carried
    /// (a change the store no longer had to send is not in it).
    case pushAnswered(sent: [String], PushAnswer)
    /// A page came. `storeEmpty`: the store holds no record or edit (the first epoch of a new
    /// store is followed at once; any other is re-pulled, its copies met).
    case page(PageHeader, storeEmpty: Bool)
    /// A pull was refused with this envelope (a 409: `epoch_changed`, `view_changed`,
    /// `history_compacted`, `cursor_ahead`).
    case pullRefused(status: Int, ErrorEnvelope)
    /// The page asked from `since` and `view` with `limit` records was larger than the
    /// transport reads (`cap` bytes): a server that cuts pages by count alone.
    case pageTooLarge(since: Version?, view: String?, limit: Int, cap: Int)
    /// The store applied the pages; `reoffered`: it queued copies to be offered again.
    case applied(reoffered: Bool)
    /// A request failed otherwise (the network, a 5xx), or the store could not read or write.
    case failed(OutpostError)
    /// Outside a sync: `resetSync()`.
    case reset
    /// Outside a sync: `leaveEpoch()`.
    case leave
}

/// What the store does for the session.
enum SessionEffect: Hashable, Sendable {
    /// Read the limits (fresh: after a 413) and what could be sent now (an event `candidates`).
    case plan(dueOnly: Bool, refreshLimits: Bool, excluding: Set<String>)
    /// Send these changes in one push request (marked sent first, durably); then `pushAnswered`.
    case send([Candidate])
    /// Apply these events to these records (one transaction), and count their effects.
    case record([KeyedEvent])
    /// Each change waits for its backoff (or is due at once, `now`): no answer was read.
    case retry([Candidate], mayHaveApplied: Bool, message: String, now: Bool)
    /// The sealed forms of what the push phase settled are no longer needed.
    case pruneSealed
    /// Fetch one page (`since` nil: from the start of the history) of at most `limit`
    /// records (nil: as many as the configuration and the server allow); then `page`,
    /// `pullRefused`, `pageTooLarge` or `failed`. `holding`: the store keeps copies from
    /// before the start of the history it pulls (the pull's `holding`, docs/protocol.md
    /// section 5).
    case fetch(since: Version?, view: String?, holding: Bool, limit: Int?)
    /// In one transaction: `retire` the epoch, follow `phase` (`confirm`: every record's
    /// copy becomes a left copy, to be met in the new history), apply the pages held since
    /// the last `apply` in order and store the cursor past the last; at `dropUnseen`, drop
    /// those copies of records not seen; at `finishRePull`, offer again the left copies the
    /// history lacks. Then `applied`.
    case apply(Application)
    /// The view changed (or compaction purged deletes after the cursor): store the phase and
    /// cursor and forget the records marked seen.
    case restartView(SyncPhase, Cursor, compacted: Bool)
    /// The store follows a new epoch now (the report says so).
    case epochChanged
    /// Store the phase and cursor (outside a sync), retiring `retire` first and forgetting
    /// the records marked seen at `clearSeen`.
    case store(retire: Epoch?, clearSeen: Bool)
    /// The sync ended well.
    case succeed
    /// The sync failed with this error; nothing more is done.
    case fail(OutpostError)
}

struct SyncSession: Hashable, Sendable {
    /// How many epochs the store remembers having left (docs/protocol.md section 5).
    static let retiredLimit = 32
    /// A push phase runs at most this many rounds, and shrinks its batches at most this often.
    static let pushRounds = 3, maxShrinks = 24
    /// A sync restarts a view re-pull at most this often.
    static let maxViewRestarts = 2

    // Kept in the file.
    var phase: SyncPhase
    var cursor: Cursor?
    /// The epochs the store left, oldest first (the newest `retiredLimit`).
    var retired: [Epoch]

    // Of the running sync.
    enum Step: Hashable, Sendable {
        case idle
        /// A push phase: the first of the sync, or the one after a pull that changed what
        /// can go.
        case pushing(second: Bool)
        case pulling(second: Bool)
        case done
    }

    /// Where the confirmation of an epoch stands.
    enum Confirmation: Hashable, Sendable {
        /// The first page of the first epoch the store hears of; the next request must
        /// report it too.
        case firstPage(PageHeader)
        /// The pull with the cursor reported `epoch`; the pull from the start must too.
        case reported(Epoch)
    }

    /// The push phase's progress.
    struct PushRound: Hashable, Sendable {
        var round = 0
        var cap = Int.max
        var shrinks = 0
        /// Sent in this phase: not sent again in it.
        var sent: Set<String> = []
        /// Batches still to send in this round, the first out now.
        var batches: [[Candidate]] = []
        /// Changes the server applied in this phase.
        var applied = 0
        var limits: Limits?
    }

    var step = Step.idle
    var dueOnly = false
    var confirmation: Confirmation?
    /// A new epoch was reported in this sync: a second report is a disagreement.
    var reportedEpoch = false
    var viewRestarts = 0
    var push = PushRound()
    /// The push failed; the sync fails with it after the pull (a network failure at once).
    var pushFailure: OutpostError?
    /// What the pull phase changed (it decides whether a second push phase runs).
    var epochAtPull: Epoch?
    var rePullingAtPull = false
    var epochChanged = false
    var reoffered = false
    /// The last page applied said more follows.
    var pageHadMore = false
    /// The running pull's `holding` (`holdsCopies` when it started): the same on all its
    /// pages, which a page fetched ahead relies on.
    var pullHolding = false
    /// A push answer gave the detached store a copy (an applied write, a conflict's
    /// current) since the sync or its last pull started; the pull's `holding` takes it.
    var pushGaveCopies = false
    /// `{"clientId":"…","changes":[…]}` around a push's changes, in bytes.
    var requestOverhead = 0
    /// The records a page may hold, once a page was too large for the transport: halved
    /// each time, kept for the rest of the sync. Nil: as many as allowed.
    var pageLimit: Int?

    init(phase: SyncPhase = .detached, cursor: Cursor? = nil, retired: [Epoch] = []) {
        self.phase = phase
        self.cursor = cursor
        self.retired = retired
    }

    /// The session as the next sync starts it.
    var stored: SyncSession { SyncSession(phase: phase, cursor: cursor, retired: retired) }

    // MARK: Outside a sync

    mutating func retire(_ epoch: Epoch) {
        retired.append(epoch)
        if retired.count > Self.retiredLimit { retired.removeFirst(retired.count - Self.retiredLimit) }
    }

    /// The cursor a long poll may wait on: only while following, with a cursor.
    var longPollCursor: Cursor? {
        guard case .following = phase else { return nil }
        return cursor
    }

    /// What a long poll's page, fetched from `asked` while the store was free, does to this
    /// session now: it is applied only when the session still follows that page's epoch and
    /// is where the poll asked from, and then the cursor moves to the page's end.
    func longPollVerdict(asked: Cursor, page: PageHeader) -> LongPollVerdict {
        guard case .following(let epoch) = phase, page.epoch == epoch, let cursor else { return .needsSync }
        if cursor.version != asked.version {
            // A sync ran meanwhile: when it got as far as this page, nothing is new.
            return cursor.version.epoch == epoch && cursor.version.seq >= page.next.seq ? .unchanged : .needsSync
        }
        return .apply(phase: phase, cursor: Cursor(page.next, view: page.view))
    }

    enum LongPollVerdict: Hashable, Sendable {
        /// Apply the page and store this phase and cursor with it.
        case apply(phase: SyncPhase, cursor: Cursor)
        case unchanged
        case needsSync
    }

    /// Whether a pull starting now says the store keeps copies from before the start of the
    /// history it pulls, which the server then decides as held at the start, so they
    /// learn the deletes and revocations since: a re-pull of a new history (from its
    /// confirmation on), a refresh, and a store that follows with its cursor still at the
    /// start (its copies came from push answers: an applied write, a conflict's current).
    /// A detached store has no cursor to account for anything: it holds copies when it left
    /// an epoch (`leaveEpoch()` retired one; its copies of that history stay unless it
    /// discarded them) or when this sync's push answers gave it some; a new store that
    /// pushed nothing holds nothing. A cursor past the start says what the store holds
    /// itself; a view re-pull's marks decide.
    var holdsCopies: Bool {
        if case .reported? = confirmation { return true }
        switch phase {
        case .rePulling, .refreshing: return true
        case .following: return cursor?.version.seq == 0
        case .detached: return !retired.isEmpty || pushGaveCopies
        case .viewRePulling: return false
        }
    }

    // MARK: The transition function

    /// The session after `event`, and what the store does next, in order.
    static func reduce(_ session: SyncSession, _ event: SessionEvent) -> (SyncSession, [SessionEffect]) {
        var s = session
        var effects: [SessionEffect] = []
        s.handle(event, &effects)
        return (s, effects)
    }

    private mutating func handle(_ event: SessionEvent, _ effects: inout [SessionEffect]) {
        switch (step, event) {
        case (.idle, .reset), (.done, .reset):
            // `resetSync()`: the current history again from its start at the next sync, as
            // a refresh that drops at its end the copies of the records it did not bring (a
            // pull from the start carries no tombstone the device needs). A re-pull under
            // way starts again as what it is.
            self = stored
            if case .following(let e) = phase { phase = .refreshing(e) }
            if let epoch = phase.epoch { cursor = Cursor(Version.start(of: epoch)) }
            effects.append(.store(retire: nil, clearSeen: phase.marksSeen))
        case (.idle, .leave), (.done, .leave):
            // `leaveEpoch()`: the epoch is retired, and the next sync follows the epoch two
            // requests report.
            self = stored
            let left = phase.epoch
            if let left { retire(left) }
            phase = .detached
            cursor = nil
            effects.append(.store(retire: left, clearSeen: false))
        case (.idle, .start(let dueOnly)), (.done, .start(let dueOnly)):
            self = stored
            self.dueOnly = dueOnly
            // Pushing waits while the store re-pulls a history.
            if phase.isRePulling { startPull(second: false, &effects) } else { startPush(second: false, &effects) }
        case (.pushing, .candidates(let candidates, let limits, let overhead)):
            requestOverhead = overhead
            planned(candidates, limits, &effects)
        case (.pushing, .limitsFailed(let error)):
            endPush(failure: error, &effects)
        case (.pushing, .pushAnswered(let sent, let answer)):
            answered(sent, answer, &effects)
        case (.pushing, .failed(let error)):
            fail(error, &effects)
        case (.pulling, .page(let page, let empty)):
            pulled(page, storeEmpty: empty, &effects)
        case (.pulling, .pullRefused(let status, let envelope)):
            refused(status, envelope, &effects)
        case (.pulling, .pageTooLarge(let since, let view, let limit, let cap)):
            // Half as many records from the same place, down to one; a single record too
            // large fails the sync.
            guard limit > 1 else { return fail(.transport(.answerTooLarge(limit: cap)), &effects) }
            pageLimit = limit / 2
            fetch(since: since, view: view, &effects)
        case (.pulling, .applied(let reoffered)):
            self.reoffered = self.reoffered || reoffered
            if pageHadMore { fetch(since: cursor?.version, view: cursor?.view, &effects) } else { endPull(&effects) }
        case (.pulling, .failed(let error)):
            fail(error, &effects)
        default:
            // An event the step does not expect (a bug of the store's): the sync fails.
            fail(.protocolViolation("the sync session got \(event) while \(step)"), &effects)
        }
    }

    /// Asks for the page after `since` (nil: the history's start), under the running
    /// pull's `holding` and the sync's page limit.
    private mutating func fetch(since: Version?, view: String?, _ effects: inout [SessionEffect]) {
        effects.append(.fetch(since: since, view: view, holding: pullHolding, limit: pageLimit))
    }

    private mutating func fail(_ error: OutpostError, _ effects: inout [SessionEffect]) {
        step = .done
        confirmation = nil
        effects.append(.fail(error))
    }

    // MARK: Pushing

    private mutating func startPush(second: Bool, _ effects: inout [SessionEffect]) {
        step = .pushing(second: second)
        push = PushRound()
        nextRound(&effects)
    }

    private mutating func nextRound(_ effects: inout [SessionEffect], refresh: Bool = false) {
        guard push.round < Self.pushRounds else { return endPush(failure: nil, &effects) }
        push.round += 1
        effects.append(.plan(dueOnly: dueOnly, refreshLimits: refresh, excluding: push.sent))
    }

    /// The candidates of a round: a change too large for any request is rejected for good
    /// (it could never be sent); the rest go in batches the server takes.
    private mutating func planned(_ candidates: [Candidate], _ limits: Limits, _ effects: inout [SessionEffect]) {
        push.limits = limits
        let overhead = requestOverhead
        var tooLarge: [KeyedEvent] = []
        var fitting: [Candidate] = []
        for c in candidates where !push.sent.contains(c.changeId) {
            if c.bytes + overhead > limits.maxRequestBytes {
                tooLarge.append(KeyedEvent(key: c.key, event: .rejected(changeId: c.changeId, code: ErrorCode.payloadTooLarge.rawValue,
                                                                        message: "the change is \(c.bytes) bytes encoded; the server takes requests of at most \(limits.maxRequestBytes)")))
            } else {
                fitting.append(c)
            }
        }
        if !tooLarge.isEmpty { effects.append(.record(tooLarge)) }
        guard !fitting.isEmpty else { return endPush(failure: nil, &effects) }
        push.batches = Self.batches(fitting, limits: limits, cap: push.cap, overhead: overhead)
        effects.append(.send(push.batches[0]))
    }

    /// Splits `candidates` into requests the server takes: at most `maxChangesPerPush` (and
    /// `cap`) changes, at most `maxRequestBytes` bytes.
    static func batches(_ candidates: [Candidate], limits: Limits, cap: Int, overhead: Int) -> [[Candidate]] {
        let maxCount = max(1, min(limits.maxChangesPerPush, cap))
        var batches: [[Candidate]] = []
        var current: [Candidate] = []
        var bytes = overhead
        for change in candidates {
            if !current.isEmpty && (current.count >= maxCount || bytes + change.bytes + 1 > limits.maxRequestBytes) {
                batches.append(current)
                current = []
                bytes = overhead
            }
            current.append(change)
            bytes += change.bytes + 1
        }
        if !current.isEmpty { batches.append(current) }
        return batches
    }

    private mutating func answered(_ sentIds: [String], _ answer: PushAnswer, _ effects: inout [SessionEffect]) {
        let planned = push.batches.removeFirst()
        push.sent.formUnion(planned.map(\.changeId))
        let batch = planned.filter { sentIds.contains($0.changeId) }
        switch answer {
        case .answered(let epoch, let results):
            guard !batch.isEmpty, let epoch else { break }
            guard results.map(\.changeId) == batch.map(\.changeId) else {
                let message = "the push answer does not match the request (\(results.count) results for \(batch.count) changes)"
                effects.append(.retry(batch, mayHaveApplied: true, message: message, now: false))
                return endPush(failure: .protocolViolation(message), &effects)
            }
            let events = zip(batch, results).map { KeyedEvent(key: $0.key, event: settle($0.changeId, $1.answer, epoch: epoch)) }
            effects.append(.record(events))
            // Only a detached store's pull depends on it (`holdsCopies`).
            for e in events where phase == .detached {
                switch e.event {
                case .applied, .conflict(_, current: .some): pushGaveCopies = true
                default: break
                }
            }
            if phase.epoch == epoch { push.applied += results.filter { if case .applied = $0.answer { true } else { false } }.count }
        case .tooLarge(let code, let message):
            // Not applied: the changes are as they were. A lone change too large for the
            // server is rejected for good; otherwise smaller requests follow, on limits
            // read again.
            if batch.count == 1 && code == ErrorCode.payloadTooLarge.rawValue {
                effects.append(.record([KeyedEvent(key: batch[0].key, event: .rejected(changeId: batch[0].changeId, code: code, message: message))]))
            } else {
                effects.append(.retry(batch, mayHaveApplied: false, message: message, now: true))
                push.sent.subtract(planned.map(\.changeId))
                push.cap = max(1, batch.count / 2)
                push.shrinks += 1
                push.batches = []
                // A shrink does not count as a round, up to `maxShrinks` of them.
                if push.shrinks < Self.maxShrinks { push.round -= 1 }
                return nextRound(&effects, refresh: true)
            }
        case .failed(let error):
            effects.append(.retry(batch, mayHaveApplied: error.pushMayHaveApplied, message: error.description, now: false))
            return endPush(failure: .transport(error), &effects)
        }
        if push.batches.isEmpty { nextRound(&effects) } else { effects.append(.send(push.batches[0])) }
    }

    /// What one change's answer does to its record. Only an answer of the followed history
    /// settles a change: another deployment behind the same URL (a replica, staging) may
    /// have sent it, and a new history counts only once two requests of a pull confirm it.
    func settle(_ changeId: String, _ answer: ChangeAnswer, epoch: Epoch) -> RecordEvent {
        if let followed = phase.epoch, followed != epoch {
            return .foreignAnswer(changeId: changeId, message: "an answer in epoch \(epoch), which the store does not follow (\(followed)); settled by a later sync")
        }
        switch answer {
        case .applied(let version, let updatedAt):
            return .applied(changeId: changeId, Copy(version: version, body: nil, updatedAt: updatedAt))
        case .conflict(let current):
            return .conflict(changeId: changeId, current: current)
        case .rejected(let code, let message):
            // `epoch_mismatch`: the followed history never applied it.
            if code == ErrorCode.epochMismatch.rawValue { return .notInHistory(changeId: changeId, message: "\(code): \(message)") }
            return .rejected(changeId: changeId, code: code, message: message)
        case .upgradeRequired(let minimum, let message):
            return .upgradeRequired(changeId: changeId, minimum: minimum, message: "\(ErrorCode.upgradeRequired.rawValue): \(message)")
        }
    }

    private mutating func endPush(failure: OutpostError?, _ effects: inout [SessionEffect]) {
        effects.append(.pruneSealed)
        let second = step == .pushing(second: true)
        let applied = push.applied
        push = PushRound()
        if let failure { pushFailure = pushFailure ?? failure }
        if !second {
            // A push that failed on the network would fail the pull too; one that the server
            // refused (403, a conflict storm...) does not stop the pull.
            if case .transport(let t)? = failure, !t.isServerAnswer { return fail(failure!, &effects) }
            return startPull(second: false, &effects)
        }
        // What the second push wrote comes back as the server stored it (its lineage, and
        // its commit time from a server whose answers leave it out), so the sync ends on the
        // copies the next change of history compares with.
        if applied > 0 && pushFailure == nil { return startPull(second: true, &effects) }
        finish(&effects)
    }

    // MARK: Pulling

    private mutating func startPull(second: Bool, _ effects: inout [SessionEffect]) {
        step = .pulling(second: second)
        if !second {
            epochAtPull = phase.epoch
            rePullingAtPull = phase.isRePulling
        }
        pageHadMore = false
        // Decided once for every page of this pull: the store's copies are as of its start.
        pullHolding = holdsCopies
        pushGaveCopies = false
        if let cursor, phase.epoch != nil {
            fetch(since: cursor.version, view: cursor.view, &effects)
        } else {
            // The first epoch the store hears of: the first page and the next request must
            // both report it before anything is applied.
            fetch(since: nil, view: nil, &effects)
        }
    }

    private mutating func pulled(_ page: PageHeader, storeEmpty: Bool, _ effects: inout [SessionEffect]) {
        switch confirmation {
        case .firstPage(let first)?:
            guard page.epoch == first.epoch else {
                return fail(.epochDisagreement(first: first.epoch.rawValue, second: page.epoch.rawValue), &effects)
            }
            guard !retired.contains(first.epoch) else {
                return fail(.epochRefused(epoch: first.epoch.rawValue, current: nil, reason: "the store left this epoch before"), &effects)
            }
            confirmation = nil
            let next: SyncPhase = storeEmpty ? .following(first.epoch) : .rePulling(first.epoch, viewChanged: false)
            follow(next, pages: [first, page], confirm: !storeEmpty, retire: nil, &effects)
        case .reported(let reported)?:
            guard page.epoch == reported else {
                return fail(.epochDisagreement(first: reported.rawValue, second: page.epoch.rawValue), &effects)
            }
            let current = phase.epoch!
            guard current < reported else {
                return fail(.epochRefused(epoch: reported.rawValue, current: current.rawValue, reason: "it is earlier than the store's epoch"), &effects)
            }
            guard !retired.contains(reported) else {
                return fail(.epochRefused(epoch: reported.rawValue, current: current.rawValue, reason: "the store left this epoch before"), &effects)
            }
            confirmation = nil
            epochChanged = true
            effects.append(.epochChanged)
            let viewChanged = phase.viewChanged, marked = phase.marksSeen
            retire(current)
            follow(.rePulling(reported, viewChanged: viewChanged), pages: [page], confirm: true, retire: current, clearSeen: marked, &effects)
        case nil:
            guard let epoch = phase.epoch, cursor != nil else {
                confirmation = .firstPage(page)
                return fetch(since: page.next, view: page.view, &effects)
            }
            guard page.epoch == epoch else {
                // A page of another history answered the cursor: it counts as the first report.
                return reportedNew(page.epoch, &effects)
            }
            follow(phase, pages: [page], confirm: false, retire: nil, &effects)
        }
    }

    /// Applies `pages` under `next`, and moves the cursor past the last.
    private mutating func follow(_ next: SyncPhase, pages: [PageHeader], confirm: Bool, retire: Epoch?, clearSeen: Bool = false, _ effects: inout [SessionEffect]) {
        let last = pages.last!
        let ends = !last.hasMore
        var after = next
        // At the end of a pull from the start, the store follows the history it pulled.
        if ends, case .rePulling(let e, _) = next { after = .following(e) }
        if ends, case .viewRePulling(let e) = next { after = .following(e) }
        if ends, case .refreshing(let e) = next { after = .following(e) }
        phase = after
        cursor = Cursor(last.next, view: last.view)
        pageHadMore = last.hasMore
        effects.append(.apply(Application(pages: pages, pulling: next, phase: after, cursor: cursor!, confirm: confirm, retire: retire, clearSeen: clearSeen,
                                          dropUnseen: ends ? next.unseen : nil, finishRePull: ends && next.isRePulling)))
    }

    private mutating func reportedNew(_ reported: Epoch, _ effects: inout [SessionEffect]) {
        let epoch = phase.epoch!
        guard !reportedEpoch else { return fail(.epochDisagreement(first: epoch.rawValue, second: reported.rawValue), &effects) }
        reportedEpoch = true
        confirmation = .reported(reported)
        pullHolding = holdsCopies
        fetch(since: nil, view: nil, &effects)
    }

    private mutating func refused(_ status: Int, _ envelope: ErrorEnvelope, _ effects: inout [SessionEffect]) {
        let code = envelope.code
        if case .firstPage(let first)? = confirmation, code == ErrorCode.epochChanged.rawValue {
            return fail(.epochDisagreement(first: first.epoch.rawValue, second: envelope.details?["epoch"]?.stringValue ?? "?"), &effects)
        }
        guard status == 409, confirmation == nil, let epoch = phase.epoch, let cursor else {
            return fail(.transport(.refused(status: status, envelope)), &effects)
        }
        switch code {
        case ErrorCode.epochChanged.rawValue:
            guard let reported = envelope.details?["epoch"]?.stringValue.flatMap(Epoch.init) else {
                return fail(.protocolViolation("epoch_changed without details.epoch"), &effects)
            }
            reportedNew(reported, &effects)
        case ErrorCode.viewChanged.rawValue, ErrorCode.historyCompacted.rawValue:
            // The rules or the token's claims changed, or compaction purged deletes after the
            // cursor: the same history is pulled again from the start, and what it no longer
            // holds is dropped, never offered again (a record deleted and purged elsewhere
            // must not come back from this device's copy). A second restart within one sync
            // fails it; the next sync goes on.
            guard viewRestarts < Self.maxViewRestarts else { return fail(.transport(.refused(status: status, envelope)), &effects) }
            viewRestarts += 1
            if case .rePulling(let e, _) = phase { phase = .rePulling(e, viewChanged: true) } else { phase = .viewRePulling(epoch) }
            self.cursor = Cursor(Version.start(of: epoch))
            effects.append(.restartView(phase, self.cursor!, compacted: code == ErrorCode.historyCompacted.rawValue))
            pullHolding = holdsCopies
            fetch(since: self.cursor!.version, view: nil, &effects)
        case ErrorCode.cursorAhead.rawValue:
            let head = envelope.details?["head"]?.int64Value.map { "\(envelope.details?["epoch"]?.stringValue ?? epoch.rawValue).\($0)" }
            fail(.cursorAhead(cursor: cursor.version.text, head: head), &effects)
        default:
            fail(.transport(.refused(status: status, envelope)), &effects)
        }
    }

    private mutating func endPull(_ effects: inout [SessionEffect]) {
        guard step == .pulling(second: false) else { return finish(&effects) }
        // A sync that changed what can go (a new epoch, copies to offer again, a re-pull that
        // ended: begun now, or cut short earlier by a failure or a crash) pushes it before
        // it returns.
        let finishedRePull = rePullingAtPull && !phase.isRePulling
        if epochChanged || reoffered || phase.epoch != epochAtPull || finishedRePull { return startPush(second: true, &effects) }
        finish(&effects)
    }

    private mutating func finish(_ effects: inout [SessionEffect]) {
        if let pushFailure { return fail(pushFailure, &effects) }
        step = .done
        effects.append(.succeed)
    }
}
