import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost

/// A small world for the engine: the phase, one record, and the events that can happen to
/// it, over three histories (E1, then E2 and E3 after data losses), with `leaveEpoch()`
/// (the store detaches; the next sync confirms a later history).
struct EngineWorld: Hashable, Sendable {
    static let e1 = Epoch("E1")!
    static let e2 = Epoch("E2")!
    static let e3 = Epoch("E3")!

    var phase: Phase
    var record: RecordModel
    var nextId = 0
    var nextSeq: [Epoch: Int64] = [EngineWorld.e1: 3, EngineWorld.e2: 3, EngineWorld.e3: 3]
    /// The epoch `leaveEpoch()` left (once a run).
    var leftEpoch: Epoch?
    /// The app's version: 1, or 2 once the app was updated (once a run). A server wants
    /// version 2 when it answers `upgrade_required`.
    var appVersion = 1

    init(phase: Phase = .following(EngineWorld.e1)) {
        self.phase = phase
        record = RecordModel(key: RecordKey(collection: "c", id: "r"))
    }

    static func body(_ tag: String) -> Body { Body(data: encodeObject(["v": .string(tag)])) }

    static func copy(_ epoch: Epoch, _ seq: Int64, _ tag: String?, lineage: Version? = nil, sameAs: Version? = nil) -> Copy {
        Copy(version: Version(epoch: epoch, seq: seq), body: tag.map(body) ?? .tombstone, updatedAt: 1_000 + seq, updatedBy: "other",
             lineage: lineage, sameAs: sameAs)
    }

    /// The history a confirmation now brings: the one after the followed (or left) one.
    var nextHistory: Epoch? {
        switch phase.epoch ?? leftEpoch {
        case Self.e1?: return Self.e2
        case Self.e2?: return Self.e3
        default: return nil
        }
    }

    /// The events that can happen now, by name; nil: `leaveEpoch()` or the app's update,
    /// which are no events of the record's (the store detaches, or opens with a later app
    /// version; the record stays as it was).
    func events() -> [(String, RecordEvent?)] {
        var out: [(String, RecordEvent?)] = []
        if record.edits.count < 3 {
            out.append(("edit (put)", .edit(Self.body("local\(nextId)"), changeId: "c\(nextId)", time: 2_000)))
            if record.view.map({ !$0.deleted }) ?? false { out.append(("edit (delete)", .edit(.tombstone, changeId: "c\(nextId)", time: 2_000))) }
        }
        if let epoch = phase.epoch {
            let seq = nextSeq[epoch]!
            out.append(("pulled (newer)", .pulled(Self.copy(epoch, seq, "pulled\(seq)"))))
            out.append(("pulled (older)", .pulled(Self.copy(epoch, 1, "old"))))
            out.append(("pulled (unreadable)", .pulled(Copy(version: Version(epoch: epoch, seq: seq), body: nil, updatedAt: 1_000 + seq))))
            if epoch != Self.e1 {
                let restored = Version(epoch: epoch == Self.e2 ? Self.e1 : Self.e2, seq: 2)
                out.append(("pulled (restored)", .pulled(Self.copy(epoch, 2, "restored", lineage: restored, sameAs: restored))))
                out.append(("pulled (written on restored)", .pulled(Self.copy(epoch, seq, "on restored", lineage: restored))))
            }
        }
        if let head = record.head {
            let id = head.changeId
            if case .following = phase { out.append(("sending", .sending(changeId: id))) }
            if case .sent = head.delivery, let epoch = phase.epoch {
                out.append(("applied", .applied(changeId: id, Copy(version: Version(epoch: epoch, seq: nextSeq[epoch]!), body: nil, updatedAt: 3_000))))
                if epoch != Self.e1 {
                    out.append(("applied (in E1)", .applied(changeId: id, Copy(version: Version(epoch: Self.e1, seq: 9), body: nil, updatedAt: 2_500))))
                }
                out.append(("conflict", .conflict(changeId: id, current: Self.copy(epoch, nextSeq[epoch]!, "theirs"))))
                out.append(("conflict (no copy)", .conflict(changeId: id, current: nil)))
                out.append(("rejected", .rejected(changeId: id, code: "invalid_change", message: "no")))
                out.append(("upgradeRequired", .upgradeRequired(changeId: id, minimum: 2, message: "upgrade")))
                out.append(("notInHistory (epoch_mismatch)", .notInHistory(changeId: id, message: "epoch")))
                out.append(("noAnswer", .noAnswer(changeId: id, retryAt: 9_000, message: "lost")))
                out.append(("refused", .refused(changeId: id, sentBefore: head.attempts > 1, retryAt: 9_000, message: "refused")))
                out.append(("foreignAnswer", .foreignAnswer(changeId: id, message: "foreign")))
            }
        }
        switch phase {
        case .following, .detached: if nextHistory != nil { out.append(("historyConfirmed", .historyConfirmed)) }
        case .rePulling: out.append(("rePullFinished", .rePullFinished))
        }
        if let rejected = record.edits.first(where: Engine.isRejected) { out.append(("discard", .discard(changeId: rejected.changeId))) }
        // The record left the token's view (a pull's revocation, a view re-pull's end, or
        // `leaveEpoch(discardingCopies:)`).
        if record.server != nil || record.left != nil || record.edits.contains(where: \.isReoffer) { out.append(("dropCopies", .dropCopies)) }
        if case .following = phase, leftEpoch == nil { out.append(("leaveEpoch", nil)) }
        // The app is updated while a change waits for it (earlier, it changes nothing).
        if appVersion == 1, record.edits.contains(where: { $0.upgradeTo != nil }) { out.append(("appUpdated", nil)) }
        return out
    }

    var versions: AppVersions { AppVersions(app: appVersion) }

    /// The world after `event` (nil: the store-level step `name`), with what the engine said.
    func after(_ name: String, _ event: RecordEvent?, resolver: ConflictResolver = .mergeFields()) -> (EngineWorld, [Effect]) {
        var w = self
        guard let event else {
            if name == "appUpdated" {
                w.appVersion = 2
            } else {
                w.leftEpoch = phase.epoch
                w.phase = .detached
            }
            return (w, [])
        }
        var ids = nextId + 1
        switch event {
        case .historyConfirmed: w.phase = .rePulling(nextHistory!)
        default: break
        }
        let context = EngineContext(phase: w.phase, resolver: resolver, now: 5_000, serverNow: 5_000, clientId: "me", backoff: { _ in 1_000 },
                                    newChangeId: { defer { ids += 1 }; return "n\(ids)" }, versions: w.versions)
        let (record, effects) = Engine.reduce(record, event, context)
        w.record = record
        w.nextId = ids
        switch event {
        case .rePullFinished: w.phase = .following(w.phase.epoch!)
        case .pulled(let c) where c.version.seq >= w.nextSeq[c.version.epoch]!: w.nextSeq[c.version.epoch]! = c.version.seq + 1
        case .applied(_, let c) where c.version.epoch != Self.e1 || w.phase.epoch == Self.e1:
            w.nextSeq[c.version.epoch]! = max(w.nextSeq[c.version.epoch]!, c.version.seq + 1)
        case .conflict(_, let c?): w.nextSeq[c.version.epoch]! = max(w.nextSeq[c.version.epoch]!, c.version.seq + 1)
        default: break
        }
        return (w, effects)
    }
}

/// The invariants the engine keeps after every step (docs/client.md, "The engine").
enum EngineInvariants {
    static func check(before: EngineWorld, event: RecordEvent?, after: EngineWorld, effects: [Effect]) -> [String] {
        var problems: [String] = []
        guard let event else {
            if after.record != before.record { problems.append("a store-level step changed the record") }
            return problems
        }
        // A change held for a later app version never goes while the app is older.
        let beforeContext = EngineContext(phase: before.phase, resolver: .serverWins, now: 5_000, serverNow: 5_000, clientId: "me", backoff: { _ in 0 },
                                          newChangeId: { "" }, versions: before.versions)
        if case .sending(let id) = event, let e = before.record.edit(id), Engine.isHeld(e, before.record.key, beforeContext), effects.contains(where: { if case .send = $0 { true } else { false } }) {
            problems.append("\(id) was sent while held for an app upgrade")
        }
        let b = before.record, a = after.record
        // No edit the app made is lost: an unsettled app edit stays (under a new changeId
        // only when its history never applied it), or an answer or the resolver settled it,
        // or a newer local edit absorbed it.
        for e in b.edits where e.delivery.isUnsettled && !e.isReoffer {
            if a.edit(e.changeId) != nil { continue }
            switch event {
            case .applied(let id, _) where id == e.changeId: continue
            case .conflict(let id, _) where b.head?.changeId == id: continue
            case .edit: if b.edits.last == e, e.delivery == .queued { continue }
            case .notInHistory(let id, _) where id == e.changeId:
                if a.edits.contains(where: { $0.body == e.body && $0.delivery == .queued && !$0.isReoffer }) { continue }
            default: break
            }
            problems.append("edit \(e.changeId) left without an answer, a resolver or a newer edit")
        }
        // A copy of a left history (an acknowledged write the new history may lack) is
        // never dropped unseen: it stays left, is carried by a re-offer, or is held by the
        // followed history's copy; or something saw it: the resolver, deciding the conflict
        // that answered the re-offer carrying it, or the server, saying the record left the
        // token's view (nothing may be offered for it then).
        func kept(_ c: Copy) -> Bool {
            if let l = a.left, l.holds(c) { return true }
            if let s = a.server, s.holds(c) { return true }
            return a.edits.contains { e in e.carried.map { $0.holds(c) } ?? false }
                || a.edits.contains { e in if case .acknowledged(let k) = e.delivery { return k.holds(c) } else { return false } }
        }
        // (A copy the device cannot read is not offered: a device that can read it does.)
        var carriedBefore: [Copy] = b.left.flatMap { $0.body == nil ? nil : [$0] } ?? []
        carriedBefore += b.edits.filter { $0.delivery.isUnsettled }.compactMap(\.carried)
        for c in carriedBefore where !kept(c) {
            switch event {
            case .conflict(let id, _) where b.edit(id)?.carried == c && effects.contains(.conflict): continue
            case .dropCopies: continue
            default: problems.append("the left copy \(c.version) was dropped unseen")
            }
        }
        // An edit is made on what the app saw.
        if case .edit = event, let made = a.edits.last, made.delivery == .queued, b.edits.last?.delivery != .queued || b.edits.last?.isReoffer == true,
           a.content(made.madeOn) != b.view {
            problems.append("an edit was made on \(a.content(made.madeOn).map { "\($0)" } ?? "nothing"), but the app saw \(b.view.map { "\($0)" } ?? "nothing")")
        }
        // Versions never go backwards within a history.
        if let s = b.server, let t = a.server, s.version.epoch == t.version.epoch, t.version.seq < s.version.seq {
            problems.append("the copy went back from \(s.version) to \(t.version)")
        }
        // A change goes on a copy only when made on that copy (or the state a later history
        // restored or re-offered from it): an acknowledged write is replaced only by a write
        // made on it, or by a resolver's write, which is made on the copy it saw.
        let context = EngineContext(phase: after.phase, resolver: .serverWins, now: 5_000, serverNow: 5_000, clientId: "me", backoff: { _ in 0 }, newChangeId: { "" },
                                    versions: after.versions)
        if let change = Engine.outgoing(a, context), let head = a.head, let base = change.baseVersion, head.delivery == .queued {
            let made = a.state(head.madeOn)
            let onIt = made?.version == base || (a.server?.version == base && made.map { a.server!.isState($0) } == true)
            if !onIt { problems.append("\(head.changeId) would go on \(base), but was made on \(made?.version.text ?? "nothing")") }
        }
        // At most one edit is out, and it is the head; re-offers go before queued app edits.
        if a.edits.filter(Engine.isSent).count > 1 { problems.append("two edits are out at once") }
        if let sent = a.edits.first(where: Engine.isSent), a.head?.changeId != sent.changeId { problems.append("a sent edit is not the head") }
        if let firstApp = a.edits.firstIndex(where: { !$0.isReoffer && $0.delivery == .queued }),
           let reoffer = a.edits.firstIndex(where: { $0.isReoffer && $0.delivery == .queued }), reoffer > firstApp {
            problems.append("a re-offer waits behind a queued edit")
        }
        // Every reference of an edit still waiting (or kept rejected) resolves; an
        // acknowledged edit is the copy it became.
        for e in a.edits where e.delivery.isUnsettled || Engine.isRejected(e) {
            if case .edit(let id) = e.madeOn, a.edit(local: id) == nil { problems.append("\(e.changeId) was made on \(id), which is gone") }
        }
        // Without an edit waiting, the app sees the copy.
        if !a.pending, a.view != (a.server ?? a.left)?.body { problems.append("the app sees an edit's content although no edit waits") }
        // A store that follows a history holds no left copy: it met the history's copy.
        if case .following = after.phase, a.left != nil { problems.append("a left copy remains while following") }
        // A copy the followed history holds of the record is of that history.
        if case .following(let epoch) = after.phase, let s = a.server, s.version.epoch != epoch {
            problems.append("the copy \(s.version) is not of the followed history \(epoch)")
        }
        return problems
    }
}

@Suite("Engine: the transition function")
struct EngineTests {
    /// The number of states reachable from an empty record (following E1) in up to seven
    /// events: docs/client.md gives it ("The engine").
    static let stateCount = 248_548

    /// Every state reachable from an empty record (following E1) in up to seven events: up
    /// to three edits, every delivery state, copies of three histories (two data losses),
    /// `leaveEpoch()`, every event. The invariants hold after every step.
    @Test func everyReachableSmallStateKeepsTheInvariants() async throws {
        // Seconds of CPU: on a thread of its own, not on the concurrency pool that other
        // tests' in-process servers answer on.
        let (seen, steps, problems, _) = try await blocking { Self.enumerated }
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        print("engine enumeration: \(seen.count) states, \(steps) steps")
        #expect(seen.count == Self.stateCount, "the enumeration reached \(seen.count) states; docs/client.md and stateCount say \(Self.stateCount)")
        var deliveries = Set<String>()
        for w in seen { for e in w.record.edits { deliveries.insert(EngineTable.name(e.delivery)) } }
        #expect(deliveries == ["queued", "sent", "acknowledged", "rejected"], "every delivery state is reached")
        #expect(seen.contains { w in w.record.edits.contains { Engine.isHeld($0, w.record.key, EngineContext(phase: w.phase, resolver: .serverWins, now: 0, serverNow: 0, clientId: "", backoff: { _ in 0 }, newChangeId: { "" }, versions: w.versions)) } },
                "a change is held for an app upgrade")
        #expect(Set(seen.map { EngineTable.phase($0.phase) }) == ["detached", "following", "re-pulling"], "every phase is reached")
    }

    /// The states, the steps taken, the invariants broken, and the table's rows: every
    /// event of every state up to six events away, and of the states seven events away
    /// whose class no closer state has (their next states are not followed further).
    static let enumerated: (seen: Set<EngineWorld>, steps: Int, problems: [String], rows: [EngineTable.Row: Set<EngineTable.Outcome>]) = {
        var frontier: [EngineWorld] = [EngineWorld()]
        var seen: Set<EngineWorld> = Set(frontier)
        var steps = 0
        var problems: [String] = []
        var rows: [EngineTable.Row: Set<EngineTable.Outcome>] = [:]
        var expanded = Set<EngineTable.StateClass>()
        for depth in 0...7 {
            var next: [EngineWorld] = []
            for world in frontier {
                let from = EngineTable.classify(world)
                if depth < 7 { expanded.insert(from) } else if expanded.contains(from) { continue }
                for (name, event) in world.events() {
                    let (after, effects) = world.after(name, event)
                    steps += 1
                    for p in EngineInvariants.check(before: world, event: event, after: after, effects: effects) where problems.count < 20 {
                        problems.append("\(name) on \(from.text): \(p)")
                    }
                    rows[EngineTable.Row(state: from, event: name), default: []]
                        .insert(EngineTable.Outcome(state: EngineTable.classify(after, before: world), effects: effects.map(EngineTable.EffectClass.init)))
                    if depth < 7, seen.insert(after).inserted { next.append(after) }
                }
            }
            frontier = next
        }
        return (seen, steps, problems, rows)
    }()

    /// docs/client-engine-table.md is what the engine does.
    @Test func theTransitionTableInTheDocsIsTheEngines() async throws {
        let table = try await blocking { EngineTable.render() }
        try DocsTable.check(table, marker: "engine-table", environment: "OUTPOST_WRITE_ENGINE_TABLE", file: "docs/client-engine-table.md")
    }
}

/// The transition table: every class of state the enumeration reaches × every event,
/// rendered from what the engine does.
enum EngineTable {
    static func name(_ d: Delivery) -> String {
        switch d {
        case .queued: return "queued"
        case .sent: return "sent"
        case .acknowledged: return "acknowledged"
        case .rejected: return "rejected"
        }
    }

    static func phase(_ p: Phase) -> String {
        switch p {
        case .detached: return "detached"
        case .following: return "following"
        case .rePulling: return "re-pulling"
        }
    }

    /// A copy's class: its history, the history its lineage names, and whether it is readable.
    struct CopyClass: Hashable {
        var epoch: Epoch, lineage: Epoch?, readable: Bool
        init(_ c: Copy) { (epoch, lineage, readable) = (c.version.epoch, c.lineage?.epoch, c.body != nil) }
        var text: String { "\(epoch)" + (lineage.map { "←\($0)" } ?? "") + (readable ? "" : " unreadable") }
    }

    /// An edit's class: its kind, delivery, what it was made on, whether it was tried, and
    /// whether it goes under a new changeId since the state before.
    struct EditClass: Hashable {
        var reoffer: Bool, delivery: String, madeOn: String, tried: Bool, newId: Bool
        var text: String { (reoffer ? "re-offer " : "") + delivery + " on " + madeOn + (tried ? " tried" : "") + (newId ? " new id" : "") }
    }

    /// A state's class: the phase and its epoch, the copies' classes, the edits' classes.
    struct StateClass: Hashable {
        var phase: String, epoch: Epoch?, server: CopyClass?, left: CopyClass?, edits: [EditClass], updated: Bool = false
        var text: String {
            var parts = [(epoch.map { "\(phase) \($0)" } ?? phase) + (updated ? " (app updated)" : "")]
            if let server { parts.append("copy " + server.text) }
            if let left { parts.append("left " + left.text) }
            parts.append(edits.isEmpty ? "no edits" : "edits [" + edits.map(\.text).joined(separator: ", ") + "]")
            return parts.joined(separator: "; ")
        }
    }

    /// `before`: the state `w` came from (its edits that now go under a new changeId are marked).
    static func classify(_ w: EngineWorld, before: EngineWorld? = nil) -> StateClass {
        let r = w.record
        return StateClass(phase: phase(w.phase), epoch: w.phase.epoch, server: r.server.map(CopyClass.init), left: r.left.map(CopyClass.init), edits: r.edits.map { e in
            let madeOn: String
            switch e.madeOn {
            case .nothing: madeOn = "nothing"
            case .copy(let c): madeOn = "\(c.version.epoch)"
            case .edit: madeOn = "an edit"
            }
            let newId = before.map { $0.record.edit(local: e.localId).map { $0.changeId != e.changeId } ?? false } ?? false
            // A queued edit the server wants a later app for: `held` while the app is older.
            let delivery = e.upgradeTo == nil || e.delivery != .queued ? name(e.delivery) : w.appVersion < e.upgradeTo! ? "held" : "queued (upgrade came)"
            return EditClass(reoffer: e.isReoffer, delivery: delivery, madeOn: madeOn, tried: e.attempts > 0, newId: newId)
        }, updated: w.appVersion > 1)
    }

    static func describe(_ w: EngineWorld) -> String { classify(w).text }

    /// An effect's class: a send shows the histories of its base and lineage.
    enum EffectClass: Hashable {
        case plain(String)
        case send(base: Epoch?, lineage: Epoch?)

        init(_ e: Effect) {
            switch e {
            case .show: self = .plain("show")
            case .pulledShown: self = .plain("pulled")
            case .pushed: self = .plain("pushed")
            case .conflict: self = .plain("conflict settled")
            case .resolved: self = .plain("journaled")
            case .overwritten: self = .plain("journaled (decided elsewhere)")
            case .rejected: self = .plain("rejected")
            case .upgradeRequired: self = .plain("held for an upgrade")
            case .reoffered: self = .plain("re-offer queued")
            case .syncAgain: self = .plain("sync again")
            case .send(let c): self = .send(base: c.baseVersion?.epoch, lineage: c.lineage?.version.epoch)
            }
        }

        var text: String {
            switch self {
            case .plain(let name): return name
            case .send(let base, let lineage): return "send (base \(base.map { "\($0)" } ?? "null")\(lineage.map { ", lineage \($0)" } ?? ""))"
            }
        }
    }

    struct Row: Hashable { var state: StateClass, event: String }
    struct Outcome: Hashable { var state: StateClass, effects: [EffectClass] }

    /// Every class of state the enumeration reaches, × every event that can happen to it,
    /// with the classes it leads to and the effects, from every state of the class.
    static func render() -> String {
        let (seen, _, _, rows) = EngineTests.enumerated
        let lines = rows.map { row, outcomes in
            let next = outcomes.map { o in "\(o.state.text) — \(o.effects.isEmpty ? "nothing" : o.effects.map(\.text).joined(separator: ", "))" }
            return "| \(row.state.text) | \(row.event) | \(Set(next).sorted().joined(separator: "<br>")) |\n"
        }
        let classes = Set(seen.map { classify($0) }).count
        return "| state | event | next state — effects |\n|---|---|---|\n" + lines.sorted().joined()
            + "\n\(seen.count) states in \(classes) classes (\(Set(rows.keys.map(\.state)).count) with rows); \(rows.count) rows.\n"
    }
}

/// A path inside the repository.
func repositoryPath(_ relative: String) -> String {
    var url = URL(fileURLWithPath: #filePath)
    while url.path != "/" {
        url.deleteLastPathComponent()
        if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url.appendingPathComponent(relative).path }
    }
    return relative
}
