import OutpostCore

// The transition function of a record (docs/client.md has its table, which
// EngineTests checks against this code).

/// What happened to a record.
enum RecordEvent: Hashable, Sendable {
    /// The app saved `body` (a put, or a tombstone for a delete) at `time`.
    case edit(Body, changeId: String, time: Int64)
    /// A pull brought this copy of the followed history (during a re-pull, of the new one).
    case pulled(Copy)
    /// The head edit goes out in a push now.
    case sending(changeId: String)
    /// The server applied the change at this copy's version (a replay included). A
    /// version of another epoch is a replay from a history the store left.
    case applied(changeId: String, Copy)
    /// The server did not apply the change: `current` is the record now (nil: it has none).
    case conflict(changeId: String, current: Copy?)
    /// The server refused the change for good.
    case rejected(changeId: String, code: String, message: String)
    /// The server applied nothing, and takes the change only from an app of version
    /// `minimum` or later (`upgrade_required`): it is held until the app is that version.
    case upgradeRequired(changeId: String, minimum: Int, message: String)
    /// The followed history never applied it: its base names another epoch
    /// (`epoch_mismatch`). It goes again, as a new change, on what it was made on.
    case notInHistory(changeId: String, message: String)
    /// No answer was read: the request may have applied the change.
    case noAnswer(changeId: String, retryAt: Int64, message: String)
    /// The request carrying the change certainly did not apply it: it never reached the
    /// server, or the server refused it whole (a 413). `sentBefore`: an earlier request
    /// carried the change, which may have applied it.
    case refused(changeId: String, sentBefore: Bool, retryAt: Int64, message: String)
    /// An answer from an epoch the store does not follow: it settles nothing.
    case foreignAnswer(changeId: String, message: String)
    /// The store now pulls a new history from its start.
    case historyConfirmed
    /// The re-pull reached the end of the new history, which does not hold what the record
    /// still has to meet.
    case rePullFinished
    /// The app discarded a rejected change.
    case discard(changeId: String)
    /// A person settles the record's conflict left for them (`OutpostStore.settleConflict`).
    case settle(Resolution, changeId: String, time: Int64)
    /// The app dropped what it knows of left histories (`leaveEpoch(discardingCopies:)`).
    case dropCopies
}

/// What the store does after a transition, besides storing the new state.
enum Effect: Hashable, Sendable {
    /// What the app sees of the record changed: tell observers.
    case show
    /// A pulled copy the app now sees.
    case pulledShown
    /// The server applied a change.
    case pushed
    /// A conflict was settled (by adopting the server's copy or by the resolver).
    case conflict
    /// The resolver decided a conflict: the store keeps the decision in its conflict
    /// journal, in the transaction that stores the record (Journal/ConflictJournal.swift).
    case resolved(ConflictDecision)
    /// Another device's resolution replaced a write of this device that the server had
    /// acknowledged: the store keeps it in its conflict journal too (`Engine.lostWrite`).
    case overwritten(LostWrite)
    /// A change was rejected for good.
    case rejected
    /// A change is held until the app is updated.
    case upgradeRequired
    /// A copy of a left history was queued to be offered again.
    case reoffered
    /// The store should sync again soon: something was queued that this sync may not send.
    case syncAgain
    /// Send this change now.
    case send(Change)
}

/// What a transition needs besides the record: the phase, the resolver, the clock and a
/// source of change ids (a seeded generator, so a transition is a function of its inputs).
struct EngineContext {
    var phase: Phase
    var resolver: ConflictResolver
    /// The server's field kinds, which `.mergeFields` merges by (`Conflict.fields`).
    var fieldKinds = FieldKinds()
    /// The device's clock (retry times, when a re-offer was queued).
    var now: Int64
    /// The server's clock as the device estimates it (`OutpostStore.serverNow`): the
    /// reference the resolvers compare edit times with.
    var serverNow: Int64
    var clientId: String
    var backoff: (Int) -> Int64
    var newChangeId: () -> String
    /// The versions the app was built for (`Configuration.appVersion`): a held edit goes
    /// once its collection's version reaches what the server wants.
    var versions = AppVersions()
}

enum Engine {
    /// The one transition function: the record after `event`, and what the store then does.
    static func reduce(_ record: RecordModel, _ event: RecordEvent, _ context: EngineContext) -> (RecordModel, [Effect]) {
        var r = record
        var effects: [Effect] = []
        let viewBefore = record.view
        switch event {
        case .edit(let body, let changeId, let time):
            edit(&r, body, changeId: changeId, time: time)
        case .pulled(let copy):
            pulled(&r, copy, context)
            if !r.pending, r.view != viewBefore { effects.append(.pulledShown) }
        case .sending(let changeId):
            if let change = sending(&r, changeId, context) { effects.append(.send(change)) }
        case .applied(let changeId, let copy):
            if applied(&r, changeId, copy, context) { effects.append(.pushed) }
        case .conflict(let changeId, let current):
            var decision: ConflictDecision?
            if conflict(&r, changeId, current, context, decided: &decision) { effects.append(.conflict) }
            if let decision { effects.append(.resolved(decision)) }
        case .rejected(let changeId, let code, let message):
            if let i = r.index(of: changeId), r.edits[i].delivery.isUnsettled {
                r.edits[i].delivery = .rejected(code: code, message: message)
                r.edits[i].lastError = message
                effects.append(.rejected)
            }
        case .upgradeRequired(let changeId, let minimum, let message):
            if let i = r.index(of: changeId), r.edits[i].delivery.isUnsettled {
                // The server applied nothing: the edit is queued again, as it was, and held
                // (it absorbs the app's next edit, which this app version makes too).
                r.edits[i].delivery = .queued
                r.edits[i].upgradeTo = minimum
                r.edits[i].lastError = message
                effects.append(.upgradeRequired)
            }
        case .notInHistory(let changeId, let message):
            if notInHistory(&r, changeId, message, context) { effects.append(.syncAgain) }
        case .noAnswer(let changeId, let retryAt, let message):
            if let i = r.index(of: changeId), r.edits[i].delivery.isUnsettled {
                r.edits[i].nextAttemptAt = retryAt
                r.edits[i].lastError = message
            }
        case .refused(let changeId, let sentBefore, let retryAt, let message):
            if let i = r.index(of: changeId), r.edits[i].delivery.isUnsettled {
                // No request carrying it was applied: it is queued again (and then absorbs
                // the app's next edit).
                if !sentBefore { r.edits[i].delivery = .queued }
                r.edits[i].nextAttemptAt = retryAt
                r.edits[i].lastError = message
            }
        case .foreignAnswer(let changeId, let message):
            if let i = r.index(of: changeId), r.edits[i].delivery.isUnsettled {
                r.edits[i].nextAttemptAt = 0
                r.edits[i].lastError = message
                effects.append(.syncAgain)
            }
        case .historyConfirmed:
            historyConfirmed(&r, context)
        case .rePullFinished:
            break
        case .discard(let changeId):
            discard(&r, changeId)
        case .settle(let resolution, let changeId, let time):
            settleByPerson(&r, resolution, changeId: changeId, time: time)
        case .dropCopies:
            r.server = nil
            r.left = nil
            r.edits.removeAll { $0.isReoffer && !isSent($0) }
        }
        // A left copy meets the history's copy as soon as that is known, so a store that
        // follows a history holds no left copy.
        if meet(&r, context, historyLacksRecord: event == .rePullFinished) { effects.append(.reoffered) }
        if let lost = lostWrite(r.key, before: record.server, after: r.server, context) { effects.append(.overwritten(lost)) }
        normalize(&r)
        if r.view != viewBefore { effects.append(.show) }
        return (r, effects)
    }

    /// The rule of a lost write: the record's copy moves from a state this device wrote to
    /// one that another device's resolution wrote over exactly that state (its `resolved`
    /// names the version). Whatever brought the copy (a pull, a conflict's answer), the
    /// device learns that its acknowledged write was decided against. Both copies must be
    /// readable: the journal shows the two contents.
    static func lostWrite(_ key: RecordKey, before: Copy?, after: Copy?, _ context: EngineContext) -> LostWrite? {
        guard let mine = before, let theirs = after, let resolved = theirs.resolved, resolved.over == mine.version,
              mine.updatedBy == context.clientId, let by = theirs.updatedBy, by != context.clientId,
              mine.body != nil, theirs.body != nil else { return nil }
        return LostWrite(key: key, mine: mine, theirs: theirs, resolved: resolved)
    }

    // MARK: Local edits

    /// A new edit. The record's newest edit, when it is an app edit still queued, absorbs it
    /// (put+put is the latest put, delete+put a put, put+delete a delete), keeping what it
    /// was made on and its place. A create never sent that a delete undoes leaves nothing:
    /// no server ever saw it, and no copy of it exists elsewhere.
    static func edit(_ r: inout RecordModel, _ body: Body, changeId: String, time: Int64) {
        if let last = r.edits.last, last.delivery == .queued, !last.isReoffer {
            let i = r.edits.count - 1
            let unsettled = r.edits.filter { $0.delivery.isUnsettled }.count
            if body.deleted, last.madeOn == .nothing, unsettled == 1, last.attempts == 0, r.server == nil, r.left == nil {
                r.edits.remove(at: i)
                return
            }
            r.edits[i].changeId = changeId
            r.edits[i].body = body
            r.edits[i].clientTime = time
            return
        }
        let shown = r.shownEdit
        let madeOn: MadeOn
        if let shown, let carried = shown.carried {
            // A re-offer shows a copy of a left history: the edit is made on that copy.
            madeOn = .copy(carried)
        } else if let shown {
            madeOn = .edit(shown.localId)
        } else if let copy = r.server ?? r.left, copy.body != nil {
            madeOn = .copy(copy)
        } else {
            // The app saw no record it could read: a copy it cannot read was never shown,
            // so an edit goes as a create and meets that copy as a conflict.
            madeOn = .nothing
        }
        r.edits.append(Edit(changeId: changeId, kind: .app, body: body, clientTime: time, createdAt: time, madeOn: madeOn))
    }

    // MARK: Pulls

    /// A pulled copy replaces an older one of its history, never a newer one; the same
    /// version fills in what an answer did not say.
    static func pulled(_ r: inout RecordModel, _ copy: Copy, _ context: EngineContext) {
        if let s = r.server, s.version.epoch == copy.version.epoch {
            if s.version == copy.version {
                r.server = s.filled(from: copy)
                return
            }
            guard copy.version.seq > s.version.seq else { return }
        } else if let s = r.server {
            // A copy of another history than the pulled one is a left copy.
            keepLeft(&r, s, context)
        }
        r.server = copy
    }

    /// Keeps `copy` as the left copy when it is later than the one kept.
    /// Keeps `copy` as the record's left copy. Of two left copies, the one that holds the
    /// other is kept; two that do not descend from one another (copies of two histories
    /// the store left in turn) are both offered: the one kept before goes now as a re-offer
    /// made on nothing, and meets whatever the history holds as a conflict.
    static func keepLeft(_ r: inout RecordModel, _ copy: Copy, _ context: EngineContext) {
        guard let l = r.left else {
            r.left = copy
            return
        }
        if l.holds(copy) { return }
        if !copy.holds(l), l.body != nil { queueReoffer(&r, l, madeOn: .nothing, context) }
        r.left = copy
    }

    /// Queues a re-offer of `copy` on `madeOn`. Of two re-offers waiting, one whose copy holds
    /// the other's replaces it; otherwise both go. Returns false when a waiting re-offer
    /// already holds the copy.
    @discardableResult
    static func queueReoffer(_ r: inout RecordModel, _ copy: Copy, madeOn: MadeOn, _ context: EngineContext) -> Bool {
        guard let body = copy.body else { return false }
        for waiting in r.edits where waiting.isReoffer && waiting.delivery == .queued {
            if let carried = waiting.carried, carried.holds(copy) { return false }
        }
        r.edits.removeAll { e in e.isReoffer && e.delivery == .queued && e.carried.map { copy.holds($0) } == true }
        let lineage = Lineage(version: copy.version, updatedAt: copy.updatedAt ?? 0)
        r.edits.append(Edit(changeId: context.newChangeId(), kind: .reoffer(lineage, descendsFrom: copy.lineage), body: body, clientTime: copy.clientTime ?? lineage.updatedAt,
                            createdAt: context.now, madeOn: madeOn))
        return true
    }

    /// The left copy meets the followed history's copy: when that copy holds it, it is
    /// done; otherwise (or when the history lacks the record) it is queued to be offered
    /// again, on what the history holds. A copy the device cannot read is not offered.
    /// Returns true when it queued a re-offer.
    @discardableResult
    static func meet(_ r: inout RecordModel, _ context: EngineContext, historyLacksRecord: Bool = false) -> Bool {
        guard let left = r.left, let epoch = context.phase.epoch, left.version.epoch != epoch else { return false }
        let current = r.server.flatMap { $0.version.epoch == epoch ? $0 : nil }
        if current == nil && !historyLacksRecord {
            // Met only once the history's copy is known: pulled, or known absent.
            guard case .following = context.phase else { return false }
        }
        r.left = nil
        if let current, current.isState(left) {
            // The same state: what the device knew of it stays known (the content of its own
            // write, which the app's validator refuses in a pulled copy).
            r.server = current.filled(from: left)
            return false
        }
        if let current, current.holds(left) { return false }
        return queueReoffer(&r, left, madeOn: current.map { .copy($0) } ?? .nothing, context)
    }

    // MARK: Pushes

    static func isSent(_ e: Edit) -> Bool {
        if case .sent = e.delivery { return true }
        return false
    }

    /// The head edit goes out: a queued one gets its wire base now; a sent one goes again
    /// as it was. Returns the change to send.
    static func sending(_ r: inout RecordModel, _ changeId: String, _ context: EngineContext) -> Change? {
        guard let change = outgoing(r, context), change.changeId == changeId, let i = r.index(of: changeId) else { return nil }
        r.edits[i].delivery = .sent(base: change.baseVersion)
        r.edits[i].attempts += 1
        r.edits[i].upgradeTo = nil
        return change
    }

    /// The change the next push sends for the record, if any: its head edit, with the base
    /// it was sent with before, or else the one computed now. Nothing goes out of a store
    /// that does not follow a history.
    static func outgoing(_ r: RecordModel, _ context: EngineContext) -> Change? {
        guard case .following(let epoch) = context.phase, let head = r.head, !isHeld(head, r.key, context) else { return nil }
        let base: Version?
        switch head.delivery {
        case .sent(let sentBase): base = sentBase
        default: base = wireBase(r, head, epoch: epoch)
        }
        let lineage: Lineage?
        if case .reoffer(let l, _) = head.kind { lineage = l } else { lineage = nil }
        // A resolution's mark goes only with a base: a write that creates the record
        // replaces no device's write.
        return Change(changeId: head.changeId, collection: r.key.collection, id: r.key.id, op: head.body.deleted ? .delete : .put,
                      data: try? head.body.data.map(decodeObject), baseVersion: base, clientTime: head.clientTime, lineage: lineage,
                      resolves: base == nil ? nil : head.resolves)
    }

    /// True while the edit is held from the server: it waits for a person to settle its
    /// conflict, or for an app of the version the server wants.
    static func isHeld(_ e: Edit, _ key: RecordKey, _ context: EngineContext) -> Bool {
        guard e.delivery == .queued else { return false }
        if e.inConflict { return true }
        guard let needed = e.upgradeTo else { return false }
        return context.versions.version(for: key.collection) < needed
    }

    /// The base a change is sent with: the version, in the followed history, of the state
    /// the edit was made on. An edit made on a state that history does not hold goes as a
    /// create: the server applies it where the history lacks the record, and otherwise
    /// answers a conflict, so the resolver sees both.
    static func wireBase(_ r: RecordModel, _ edit: Edit, epoch: Epoch) -> Version? {
        guard let made = r.state(edit.madeOn) else { return nil }
        if made.version.epoch == epoch { return made.version }
        if let s = r.server, s.version.epoch == epoch, s.isState(made) { return s.version }
        return nil
    }

    /// Returns true when the answer settled the edit.
    static func applied(_ r: inout RecordModel, _ changeId: String, _ answer: Copy, _ context: EngineContext) -> Bool {
        guard let i = r.index(of: changeId), r.edits[i].delivery.isUnsettled else { return false }
        let edit = r.edits[i]
        var copy = answer
        copy.body = edit.body
        copy.changeId = changeId
        copy.clientTime = edit.clientTime
        copy.updatedBy = copy.updatedBy ?? context.clientId
        if case .reoffer(let lineage, _) = edit.kind {
            copy.lineage = lineage.version
            copy.sameAs = lineage.version
        } else if case .sent(let base?) = edit.delivery, let s = r.server, s.version == base {
            copy.lineage = s.lineage
        }
        r.edits[i].delivery = .acknowledged(copy)
        r.edits[i].lastError = nil
        if let epoch = context.phase.epoch, copy.version.epoch != epoch {
            // Applied in a history the store left (a replay): a left copy, which the
            // followed history may lack.
            keepLeft(&r, copy, context)
        } else if let s = r.server, s.version == copy.version {
            // Pulled before the answer was read: the answer says what the pull left out
            // (the content of a write the app's validator refuses in a pulled copy).
            r.server = s.filled(from: copy)
        } else if r.server.map({ copy.isLater(than: $0) }) ?? true {
            r.server = copy
        }
        return true
    }

    /// A conflict. For a re-offer: a history that already descends from its copy settles
    /// it; one that holds an unwritten ancestor of the copy takes it again on that state;
    /// otherwise the resolver decides, and its decision replaces the re-offer and the app's
    /// waiting edits. For an app edit, the decision is about the app's waiting edits only
    /// (a re-offer waiting behind them meets the server by its own rule). Either way the
    /// server's copy is adopted without a resolver when it holds what the edits want, and
    /// the resolver sees the newest app edit (or the re-offer's copy), the newest copy, and
    /// the state the first of the decided edits was made on. Returns true when settled;
    /// `decided` is the resolver's decision, when the resolver was asked.
    static func conflict(_ r: inout RecordModel, _ changeId: String, _ current: Copy?, _ context: EngineContext, decided decision: inout ConflictDecision?) -> Bool {
        guard let head = r.head, head.changeId == changeId else { return false }
        if let current, r.server.map({ current.isLater(than: $0) || current.version.epoch != $0.version.epoch }) ?? true {
            if let s = r.server, s.version.epoch != current.version.epoch { keepLeft(&r, s, context) }
            r.server = current
        }
        // Decided: the head and the app's waiting edits (another re-offer waiting meets the
        // server by its own rule).
        let decided = r.edits.filter { $0.delivery.isUnsettled && ($0.localId == head.localId || !$0.isReoffer) }
        let latest = decided.last { !$0.isReoffer } ?? head
        let decidedIds = Set(decided.map(\.localId))
        var kept = r.edits.filter { !decidedIds.contains($0.localId) }
        // The resolved write counts the conflict as an attempt of the record, so a server that
        // answers every push with a conflict meets a growing backoff.
        @discardableResult
        func settle(_ body: Body?, madeOn: MadeOn, kind: EditKind = .app, resolves: ResolutionMark.Outcome? = nil) -> String? {
            var written: String?
            if let body {
                written = context.newChangeId()
                kept.append(Edit(changeId: written!, kind: kind, body: body, clientTime: latest.clientTime, createdAt: latest.createdAt,
                                 madeOn: madeOn, attempts: head.attempts + 1, nextAttemptAt: context.now + context.backoff(head.attempts + 1),
                                 lastError: "conflict; resolved", resolves: resolves.map { ResolutionMark(resolver: context.resolver.markName, outcome: $0) }))
            }
            r.edits = kept
            return written
        }
        guard let server = r.server, current != nil else {
            // The history has no such record: the edits go as a create (a lone re-offer stays
            // one).
            r.server = nil
            settle(latest.body, madeOn: .nothing, kind: decided.count == 1 ? head.kind : .app)
            return true
        }
        // Unless the collection declares field kinds: two devices that took a counter from
        // 10 to 9 made two changes, which only the resolver's merge counts (8).
        if let body = server.body, latest.body.sameContent(as: body), context.fieldKinds.kinds(of: r.key.collection).isEmpty {
            settle(nil, madeOn: .nothing)
            return true
        }
        if settledByHistory(&r, head, server, context) { return true }
        guard let local = try? LocalEdit(data: latest.body.data.map(decodeObject), deleted: latest.body.deleted, clientTime: latest.clientTime,
                                         changeId: latest.changeId, clientId: context.clientId),
              server.body != nil, let serverState = try? server.recordState(r.key, fallbackTime: context.serverNow) else {
            // The server's copy cannot be read here: the edits go again on it.
            settle(latest.body, madeOn: .copy(server))
            return true
        }
        let conflict = Conflict(collection: r.key.collection, id: r.key.id, local: local, server: serverState,
                                serverChangeId: server.changeId, base: mergeBase(r, decided), fields: context.fieldKinds.kinds(of: r.key.collection))
        let resolution = context.resolver.resolve(conflict, now: context.serverNow)
        let written: String?
        switch resolution {
        case .keepServer: written = settle(nil, madeOn: .nothing)
        case .keepLocal: written = settle(latest.body, madeOn: .copy(server), resolves: .keepLocal)
        case .write(let object): written = settle(Body(data: encodeObject(object)), madeOn: .copy(server), resolves: .write)
        case .delete: written = settle(.tombstone, madeOn: .copy(server), resolves: .delete)
        case .leaveForPerson:
            // The local edit stays, shown, made on the server's copy and held from the server
            // until a person settles it (`settleByPerson`); nothing is written for now.
            if let held = settle(latest.body, madeOn: .copy(server)), let i = r.index(of: held) {
                r.edits[i].inConflict = true
                r.edits[i].lastError = "conflict; left for a person"
            }
            written = nil
        }
        decision = ConflictDecision(conflict: conflict, resolution: resolution, resolver: context.resolver.name, writtenChangeId: written)
        return true
    }

    /// A re-offer's conflict that the history settles without a resolver: one that already
    /// descends from the re-offered copy is done (edits made on it meet the history's copy
    /// when they go); one that holds an older state of the copy (a restore from an earlier
    /// backup) takes the copy again on that state, as the server's rule allows. Returns
    /// true when settled so.
    private static func settledByHistory(_ r: inout RecordModel, _ head: Edit, _ server: Copy, _ context: EngineContext) -> Bool {
        guard let carried = head.carried else { return false }
        if server.holds(carried) {
            r.edits.removeAll { $0.localId == head.localId }
            return true
        }
        guard server.isAncestor(of: carried) else { return false }
        r.edits.removeAll { $0.localId == head.localId }
        r.edits.append(Edit(changeId: context.newChangeId(), kind: head.kind, body: head.body, clientTime: head.clientTime,
                            createdAt: head.createdAt, madeOn: .copy(server), attempts: head.attempts + 1))
        return true
    }

    /// The merge's base: what the app saw when it made the first of the decided app edits
    /// (a re-offer carries a copy whose common ancestor with the server's is unknown). Its
    /// version is nil when it was the device's own edit, not yet settled or rejected.
    private static func mergeBase(_ r: RecordModel, _ decided: [Edit]) -> ConflictBase? {
        guard let chainStart = decided.first(where: { !$0.isReoffer }), let content = r.content(chainStart.madeOn),
              let data = try? content.data.map(decodeObject) else { return nil }
        let ownEdit: Bool
        if case .edit(let id) = chainStart.madeOn, let earlier = r.edit(local: id), earlier.delivery.isUnsettled || isRejected(earlier) { ownEdit = true } else { ownEdit = false }
        return ConflictBase(data: data, deleted: content.deleted, version: ownEdit ? nil : r.state(chainStart.madeOn)?.version)
    }

    /// A person settles a conflict left for them: the held edit goes as an edit made on the
    /// server's copy the app showed beside it (`r.server`, the newest pulled), under a new
    /// change id and time (`keepLocal` its content, `write` and `delete` theirs), or leaves
    /// (`keepServer`: the server's copy stands). Nothing when no conflict waits.
    static func settleByPerson(_ r: inout RecordModel, _ resolution: Resolution, changeId: String, time: Int64) {
        guard let i = r.edits.firstIndex(where: { $0.inConflict && $0.delivery == .queued }) else { return }
        let held = r.edits[i]
        func replace(_ body: Body, _ outcome: ResolutionMark.Outcome) {
            r.edits[i] = Edit(position: held.position, localId: held.localId, changeId: changeId, kind: .app, body: body, clientTime: time,
                              createdAt: held.createdAt, madeOn: r.server.map { .copy($0) } ?? .nothing, delivery: .queued,
                              attempts: held.attempts, nextAttemptAt: 0, lastError: nil, upgradeTo: held.upgradeTo,
                              resolves: ResolutionMark(resolver: ConflictResolver.personName, outcome: outcome))
        }
        switch resolution {
        case .keepServer: r.edits.remove(at: i)
        case .keepLocal: replace(held.body, .keepLocal)
        case .write(let object): replace(Body(data: encodeObject(object)), .write)
        case .delete: replace(.tombstone, .delete)
        case .leaveForPerson: return
        }
    }

    /// `epoch_mismatch`: the followed history never applied the change. An app edit goes
    /// again as a new change (its base is computed again when sent); a re-offer's copy is a
    /// left copy again, met anew. Returns true when something was queued.
    static func notInHistory(_ r: inout RecordModel, _ changeId: String, _ message: String, _ context: EngineContext) -> Bool {
        guard let i = r.index(of: changeId), r.edits[i].delivery.isUnsettled else { return false }
        if let carried = r.edits[i].carried {
            r.edits.remove(at: i)
            keepLeft(&r, carried, context)
            return true
        }
        r.edits[i].changeId = context.newChangeId()
        r.edits[i].delivery = .queued
        r.edits[i].nextAttemptAt = 0
        r.edits[i].lastError = message
        return true
    }

    /// A new history: the record's copy becomes a left copy, to be met in it. A re-offer
    /// waiting goes to the new history as it is: made on a copy that history does not hold,
    /// it goes as a create and meets whatever the history holds as a conflict.
    static func historyConfirmed(_ r: inout RecordModel, _ context: EngineContext) {
        if let s = r.server {
            keepLeft(&r, s, context)
            r.server = nil
        }
    }

    /// A discarded rejected change leaves the list; an edit made on it is made on what it
    /// was made on (the same chain of states).
    static func discard(_ r: inout RecordModel, _ changeId: String) {
        guard let i = r.index(of: changeId), case .rejected = r.edits[i].delivery else { return }
        let gone = r.edits.remove(at: i)
        r.edits = r.edits.map { e in
            guard e.madeOn == .edit(gone.localId) else { return e }
            return Edit(position: e.position, localId: e.localId, changeId: e.changeId, kind: e.kind, body: e.body, clientTime: e.clientTime,
                        createdAt: e.createdAt, madeOn: gone.madeOn, delivery: e.delivery, attempts: e.attempts, nextAttemptAt: e.nextAttemptAt,
                        lastError: e.lastError, upgradeTo: e.upgradeTo, inConflict: e.inConflict, resolves: e.resolves)
        }
    }

    // MARK: Order

    /// The edits in the order they go out: a sent edit first (its answer decides what the
    /// others meet), then a re-offer (an edit the server rejects must never take the copy
    /// with it), then the rest in the order they were made. Acknowledged edits stay only
    /// while a later edit was made on them.
    static func normalize(_ r: inout RecordModel) {
        let referenced = Set(r.edits.compactMap { e -> String? in
            guard e.delivery.isUnsettled || isRejected(e), case .edit(let id) = e.madeOn else { return nil }
            return id
        })
        r.edits.removeAll { e in
            if case .acknowledged = e.delivery { return !referenced.contains(e.localId) }
            return false
        }
        func rank(_ e: Edit) -> Int {
            if isSent(e) { return 0 }
            if e.isReoffer && e.delivery == .queued { return 1 }
            return 2
        }
        let ranked = r.edits.enumerated().sorted { a, b in
            let ra = rank(a.element), rb = rank(b.element)
            return ra != rb ? ra < rb : a.offset < b.offset
        }
        r.edits = ranked.map(\.element)
    }

    static func isRejected(_ e: Edit) -> Bool {
        if case .rejected = e.delivery { return true }
        return false
    }
}

extension Copy {
    /// This copy with what `other`, the same version, knows and this one does not.
    func filled(from other: Copy) -> Copy {
        var c = self
        c.body = body ?? other.body
        c.updatedAt = updatedAt ?? other.updatedAt
        c.updatedBy = updatedBy ?? other.updatedBy
        c.clientTime = clientTime ?? other.clientTime
        c.lineage = lineage ?? other.lineage
        c.sameAs = sameAs ?? other.sameAs
        c.changeId = changeId ?? other.changeId
        return c
    }

    /// As a `RecordState` (for resolvers); an unknown `updatedAt` reads as `fallbackTime`.
    func recordState(_ key: RecordKey, fallbackTime: Int64) throws -> RecordState {
        RecordState(collection: key.collection, id: key.id, version: version, deleted: body?.deleted ?? false,
                    data: try body?.data.map(decodeObject), updatedAt: updatedAt ?? fallbackTime,
                    updatedBy: updatedBy ?? "", clientTime: clientTime, lineage: lineage)
    }
}
