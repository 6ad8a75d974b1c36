import Foundation
import OutpostCore
import OutpostTestSupport
import Testing
@testable import Outpost

/// A small world for the engine: the phase, one record, and the events that can happen to
/// it, over two histories (E1, then E2 after a data loss).
struct EngineWorld: Hashable, Sendable {
    static let e1 = Epoch("E1")!
    static let e2 = Epoch("E2")!
    static let e3 = Epoch("E3")!

    var phase: Phase
    var record: RecordModel
    var nextId = 0
    var nextSeq: [Epoch: Int64] = [EngineWorld.e1: 3, EngineWorld.e2: 3, EngineWorld.e3: 3]

    init(phase: Phase = .following(EngineWorld.e1)) {
        self.phase = phase
        record = RecordModel(key: RecordKey(collection: "c", id: "r"))
    }

    static func body(_ tag: String) -> Body { Body(data: encodeObject(["v": .string(tag)])) }

    static func copy(_ epoch: Epoch, _ seq: Int64, _ tag: String?, lineage: Version? = nil, sameAs: Version? = nil) -> Copy {
        Copy(version: Version(epoch: epoch, seq: seq), body: tag.map(body) ?? .tombstone, updatedAt: 1_000 + seq, updatedBy: "other",
             lineage: lineage, sameAs: sameAs)
    }

    /// The events that can happen now, by name.
    func events() -> [(String, RecordEvent)] {
        var out: [(String, RecordEvent)] = []
        if record.edits.count < 3 {
            out.append(("edit put", .edit(Self.body("local\(nextId)"), changeId: "c\(nextId)", time: 2_000)))
            if record.view.map({ !$0.deleted }) ?? false { out.append(("edit delete", .edit(.tombstone, changeId: "c\(nextId)", time: 2_000))) }
        }
        if let epoch = phase.epoch {
            let seq = nextSeq[epoch]!
            out.append(("pulled newer", .pulled(Self.copy(epoch, seq, "pulled\(seq)"))))
            out.append(("pulled older", .pulled(Self.copy(epoch, 1, "old"))))
            out.append(("pulled unreadable", .pulled(Copy(version: Version(epoch: epoch, seq: seq), body: nil, updatedAt: 1_000 + seq))))
            if epoch != Self.e1 {
                let restored = Version(epoch: epoch == Self.e2 ? Self.e1 : Self.e2, seq: 2)
                out.append(("pulled restored", .pulled(Self.copy(epoch, 2, "restored", lineage: restored, sameAs: restored))))
                out.append(("pulled written on restored", .pulled(Self.copy(epoch, seq, "on restored", lineage: restored))))
            }
        }
        if let head = record.head {
            let id = head.changeId
            if case .following = phase { out.append(("sending", .sending(changeId: id))) }
            if case .sent = head.delivery, let epoch = phase.epoch {
                out.append(("applied", .applied(changeId: id, Copy(version: Version(epoch: epoch, seq: nextSeq[epoch]!), body: nil, updatedAt: 3_000))))
                if epoch != Self.e1 {
                    out.append(("applied in E1", .applied(changeId: id, Copy(version: Version(epoch: Self.e1, seq: 9), body: nil, updatedAt: 2_500))))
                }
                out.append(("conflict", .conflict(changeId: id, current: Self.copy(epoch, nextSeq[epoch]!, "theirs"))))
                out.append(("conflict, none", .conflict(changeId: id, current: nil)))
                out.append(("rejected", .rejected(changeId: id, code: "invalid_change", message: "no")))
                out.append(("epoch_mismatch", .notInHistory(changeId: id, message: "epoch")))
                out.append(("no answer", .noAnswer(changeId: id, retryAt: 9_000, message: "lost")))
                out.append(("refused", .refused(changeId: id, sentBefore: head.attempts > 1, retryAt: 9_000, message: "refused")))
                out.append(("foreign answer", .foreignAnswer(changeId: id, message: "foreign")))
            }
        }
        if case .following(let e) = phase, e != Self.e3 { out.append(("history confirmed", .historyConfirmed)) }
        if case .rePulling = phase { out.append(("re-pull finished", .rePullFinished)) }
        if let rejected = record.edits.first(where: Engine.isRejected) { out.append(("discard", .discard(changeId: rejected.changeId))) }
        return out
    }

    /// The world after `event`, with what the engine said.
    func after(_ event: RecordEvent, resolver: ConflictResolver = .mergeFields()) -> (EngineWorld, [Effect]) {
        var w = self
        var ids = nextId + 1
        switch event {
        case .historyConfirmed: w.phase = .rePulling(w.phase.epoch == Self.e1 ? Self.e2 : Self.e3)
        default: break
        }
        let context = EngineContext(phase: w.phase, resolver: resolver, now: 5_000, serverNow: 5_000, clientId: "me", backoff: { _ in 1_000 },
                                    newChangeId: { defer { ids += 1 }; return "n\(ids)" })
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
    static func check(before: EngineWorld, event: RecordEvent, after: EngineWorld) -> [String] {
        var problems: [String] = []
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
        // never dropped unseen: it stays left, is carried by a re-offer, is held by the
        // followed history's copy, or met the resolver as a re-offer's conflict.
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
            case .conflict, .applied, .rejected, .dropCopies: continue
            default: problems.append("the left copy \(c.version) was dropped")
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
        let context = EngineContext(phase: after.phase, resolver: .serverWins, now: 5_000, serverNow: 5_000, clientId: "me", backoff: { _ in 0 }, newChangeId: { "" })
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
    /// Every state reachable from an empty record (following E1) in up to seven events: up
    /// to three edits, every delivery state, copies of three histories (two data losses),
    /// every event. The invariants hold after every step.
    @Test func everyReachableSmallStateKeepsTheInvariants() async throws {
        // Seconds of CPU: on a thread of its own, not on the concurrency pool that other
        // tests' in-process servers answer on.
        let (seen, steps, problems) = try await blocking { Self.enumerate() }
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        #expect(seen.count > 10_000, "the enumeration reached \(seen.count) states in \(steps) steps")
        print("engine enumeration: \(seen.count) states, \(steps) steps")
        var deliveries = Set<String>()
        for w in seen { for e in w.record.edits { deliveries.insert(EngineTable.name(e.delivery)) } }
        #expect(deliveries == ["queued", "sent", "acknowledged", "rejected"], "every delivery state is reached")
    }

    private static func enumerate() -> (seen: Set<EngineWorld>, steps: Int, problems: [String]) {
        var frontier: [EngineWorld] = [EngineWorld()]
        var seen: Set<EngineWorld> = Set(frontier)
        var steps = 0
        var problems: [String] = []
        for _ in 0..<7 {
            var next: [EngineWorld] = []
            for world in frontier {
                for (name, event) in world.events() {
                    let (after, _) = world.after(event)
                    steps += 1
                    for p in EngineInvariants.check(before: world, event: event, after: after) where problems.count < 20 {
                        problems.append("\(name) on \(EngineTable.describe(world)): \(p)")
                    }
                    if seen.insert(after).inserted { next.append(after) }
                }
            }
            frontier = next
        }
        return (seen, steps, problems)
    }

    /// docs/client.md's transition table is what the engine does.
    @Test func theTransitionTableInTheDocsIsTheEngines() throws {
        let table = EngineTable.render()
        let docs = try String(contentsOfFile: repositoryPath("docs/client.md"), encoding: .utf8)
        let start = "<!-- engine-table:start (generated by EngineTests; run `make engine-table` to rewrite) -->\n"
        let end = "<!-- engine-table:end -->"
        guard let s = docs.range(of: start), let e = docs.range(of: end) else {
            Issue.record("docs/client.md lacks the engine-table markers")
            return
        }
        let current = String(docs[s.upperBound..<e.lowerBound])
        if let path = ProcessInfo.processInfo.environment["OUTPOST_WRITE_ENGINE_TABLE"], current != table {
            try (String(docs[..<s.upperBound]) + table + String(docs[e.lowerBound...])).write(toFile: path, atomically: true, encoding: .utf8)
        }
        #expect(current == table, "docs/client.md's transition table differs from the engine; the engine's table:\n\(table)")
    }

    func describe(_ w: EngineWorld) -> String { EngineTable.describe(w) }
}

/// The transition table: representative states × events, rendered from what the engine does.
enum EngineTable {
    static func name(_ d: Delivery) -> String {
        switch d {
        case .queued: return "queued"
        case .sent: return "sent"
        case .acknowledged: return "acknowledged"
        case .rejected: return "rejected"
        }
    }

    static func describe(_ w: EngineWorld) -> String {
        let r = w.record
        var parts: [String] = []
        switch w.phase {
        case .detached: parts.append("detached")
        case .following(let e): parts.append("following \(e)")
        case .rePulling(let e): parts.append("re-pulling \(e)")
        }
        if let s = r.server { parts.append("copy \(s.version)\(s.lineage.map { "←\($0)" } ?? "")") }
        if let l = r.left { parts.append("left \(l.version)") }
        let edits = r.edits.map { e in (e.isReoffer ? "re-offer " : "") + name(e.delivery) }
        parts.append(edits.isEmpty ? "no edits" : "edits [" + edits.joined(separator: ", ") + "]")
        return parts.joined(separator: "; ")
    }

    /// The states of the table, each reached from an empty record by a few events.
    static func states() -> [EngineWorld] {
        func run(_ names: [String], from start: EngineWorld = EngineWorld()) -> EngineWorld {
            var w = start
            for n in names {
                guard let event = w.events().first(where: { $0.0 == n })?.1 else { fatalError("no event \(n) in \(describe(w))") }
                w = w.after(event).0
            }
            return w
        }
        return [
            run([]),
            run(["pulled newer"]),
            run(["pulled newer", "edit put"]),
            run(["pulled newer", "edit put", "sending"]),
            run(["pulled newer", "edit put", "sending", "edit put"]),
            run(["pulled newer", "edit put", "sending", "rejected"]),
            run(["pulled newer", "edit put", "history confirmed"]),
            run(["pulled newer", "edit put", "sending", "history confirmed"]),
            run(["pulled newer", "history confirmed", "re-pull finished"]),
            run(["pulled newer", "history confirmed", "pulled newer"]),
        ]
    }

    static let eventNames = ["edit put", "edit delete", "pulled newer", "pulled older", "pulled unreadable", "pulled restored", "pulled written on restored", "sending", "applied", "applied in E1",
                             "conflict", "conflict, none", "rejected", "epoch_mismatch", "no answer", "refused", "foreign answer",
                             "history confirmed", "re-pull finished", "discard"]

    static func render() -> String {
        var out = "| state | event | next state | effects |\n|---|---|---|---|\n"
        for state in states() {
            let available = Dictionary(state.events(), uniquingKeysWith: { a, _ in a })
            for name in eventNames {
                guard let event = available[name] else { continue }
                let (after, effects) = state.after(event)
                let shown = effects.compactMap { e -> String? in
                    switch e {
                    case .show: return "show"
                    case .pulledShown: return "pulled"
                    case .pushed: return "pushed"
                    case .conflict: return "conflict settled"
                    case .rejected: return "rejected"
                    case .reoffered: return "re-offer queued"
                    case .syncAgain: return "sync again"
                    case .send(let c): return "send (base \(c.baseVersion?.text ?? "null")\(c.lineage.map { ", lineage \($0.version)" } ?? ""))"
                    }
                }
                out += "| \(describe(state)) | \(name) | \(describe(after)) | \(shown.isEmpty ? "—" : shown.joined(separator: ", ")) |\n"
            }
        }
        return out
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
