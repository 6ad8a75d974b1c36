import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost

/// A small world for the sync session: the session, what it waits for, and every answer a
/// server (or the network, or another deployment behind the same URL) can give to that,
/// over three epochs E1 < E2 < E3.
struct SessionWorld: Hashable, Sendable {
    static let e1 = Epoch("E1")!, e2 = Epoch("E2")!, e3 = Epoch("E3")!
    static let limits: Limits = {
        var l = Limits()
        l.maxRequestBytes = 1_000
        l.maxChangesPerPush = 2
        return l
    }()
    static let c1 = Candidate(key: RecordKey(collection: "c", id: "1"), changeId: "c1", bytes: 100)
    static let c2 = Candidate(key: RecordKey(collection: "c", id: "2"), changeId: "c2", bytes: 100)
    static let big = Candidate(key: RecordKey(collection: "c", id: "3"), changeId: "big", bytes: 2_000)

    var session = SyncSession()
    /// The effect whose outcome the session waits for (nil: no sync runs).
    var waiting: SessionEffect?
    var syncs = 0
    /// `leaveEpoch()` and `resetSync()` calls.
    var operations = 0
    /// An epoch one request reported that the store does not follow: the next request must
    /// report it too.
    var reported: Epoch?
    /// Two requests of this sync disagreed.
    var disagreed = false

    /// The events that can happen now, by name.
    func events() -> [(String, SessionEvent)] {
        var out: [(String, SessionEvent)] = []
        switch waiting {
        case nil:
            if syncs < 2 { out += [("start", .start(dueOnly: false))] }
            if operations < 1 { out += [("leaveEpoch", .leave), ("resetSync", .reset)] }
        case .plan?:
            out += [("nothing to send", .candidates([], Self.limits, overhead: 40)),
                    ("one change", .candidates([Self.c1], Self.limits, overhead: 40)),
                    ("two changes", .candidates([Self.c1, Self.c2], Self.limits, overhead: 40)),
                    ("a change too large", .candidates([Self.big], Self.limits, overhead: 40)),
                    ("limits not read", .limitsFailed(.transport(.notSent("offline"))))]
        case .send(let batch)?:
            let ids = batch.map(\.changeId)
            let followed = session.phase.epoch ?? Self.e1
            let foreign = followed == Self.e3 ? Self.e1 : Self.e3
            out += [("applied", .pushAnswered(sent: ids, .answered(epoch: followed, batch.map { AnsweredChange(changeId: $0.changeId, answer: .applied(Version(epoch: followed, seq: 9), updatedAt: 1)) }))),
                    ("epoch_mismatch", .pushAnswered(sent: ids, .answered(epoch: followed, batch.map { AnsweredChange(changeId: $0.changeId, answer: .rejected(code: "epoch_mismatch", message: "m")) }))),
                    ("upgrade_required", .pushAnswered(sent: ids, .answered(epoch: followed, batch.map { AnsweredChange(changeId: $0.changeId, answer: .upgradeRequired(minimum: 2, message: "m")) }))),
                    ("foreign answer", .pushAnswered(sent: ids, .answered(epoch: foreign, batch.map { AnsweredChange(changeId: $0.changeId, answer: .applied(Version(epoch: foreign, seq: 9), updatedAt: 1)) }))),
                    ("answer that does not match", .pushAnswered(sent: ids, .answered(epoch: followed, [])))]
            // (Two shrinks a phase: `maxShrinks` is checked on its own, below.)
            if session.push.shrinks < 2 {
                out += [("413 too_many_changes", .pushAnswered(sent: ids, .tooLarge(code: "too_many_changes", message: "m"))),
                        ("413 payload_too_large", .pushAnswered(sent: ids, .tooLarge(code: "payload_too_large", message: "m")))]
            }
            out += [("no answer", .pushAnswered(sent: ids, .failed(.noAnswer("reset")))),
                    ("not sent", .pushAnswered(sent: ids, .failed(.notSent("offline")))),
                    ("403", .pushAnswered(sent: ids, .failed(.refused(status: 403, ErrorEnvelope(code: "forbidden", message: "m")))))]
        case .fetch(let since, let view, _, let limit)?:
            // A page of one record too large fails the sync (halving a larger limit is
            // `aPageTooLargeIsAskedAgainWithHalfAsManyRecords`: it changes nothing else).
            out.append(("page too large", .pageTooLarge(since: since, view: view, limit: limit ?? 1, cap: 1_000)))
            for epoch in [Self.e1, Self.e2, Self.e3] {
                let seq = since?.epoch == epoch ? min(since!.seq + 1, 2) : 1
                let name = epoch == session.phase.epoch ? "page" : "page of \(epoch)"
                out.append(("\(name), more", .page(PageHeader(epoch: epoch, next: Version(epoch: epoch, seq: seq), view: nil, hasMore: true), storeEmpty: false)))
                out.append(("\(name), last", .page(PageHeader(epoch: epoch, next: Version(epoch: epoch, seq: seq), view: nil, hasMore: false), storeEmpty: false)))
                if session.phase == .detached {
                    out.append(("\(name), last, store empty", .page(PageHeader(epoch: epoch, next: Version(epoch: epoch, seq: seq), view: nil, hasMore: false), storeEmpty: true)))
                }
                if epoch != session.phase.epoch {
                    out.append(("epoch_changed \(epoch)", .pullRefused(status: 409, ErrorEnvelope(code: "epoch_changed", message: "m", details: ["epoch": .string(epoch.rawValue)]))))
                }
            }
            out += [("view_changed", .pullRefused(status: 409, ErrorEnvelope(code: "view_changed", message: "m"))),
                    ("history_compacted", .pullRefused(status: 409, ErrorEnvelope(code: "history_compacted", message: "m"))),
                    ("cursor_ahead", .pullRefused(status: 409, ErrorEnvelope(code: "cursor_ahead", message: "m", details: ["head": 1]))),
                    ("pull failed", .failed(.transport(.noAnswer("reset"))))]
        case .apply?:
            out += [("applied", .applied(reoffered: false)), ("applied, re-offers queued", .applied(reoffered: true))]
        default:
            break
        }
        return out
    }

    /// The world after `event`, with the session's effects.
    func after(_ event: SessionEvent) -> (SessionWorld, [SessionEffect]) {
        var w = self
        switch event {
        case .leave, .reset: w.operations += 1
        case .start: w.syncs += 1
        default: break
        }
        switch event {
        case .leave, .reset, .start:
            w.reported = nil
            w.disagreed = false
        default: break
        }
        // What the request reported, for the disagreement invariant.
        var report: Epoch?
        switch event {
        case .page(let page, _): report = page.epoch
        case .pullRefused(_, let envelope) where envelope.code == "epoch_changed": report = envelope.details?["epoch"]?.stringValue.flatMap(Epoch.init)
        default: break
        }
        if let report {
            if let pending = w.reported {
                if report == pending { w.reported = nil } else { w.disagreed = true }
            } else if report != session.phase.epoch {
                w.reported = report
            }
        }
        let (session, effects) = SyncSession.reduce(self.session, event)
        w.session = session
        w.waiting = effects.last { e in
            switch e {
            case .plan, .send, .fetch, .apply: return true
            default: return false
            }
        }
        if effects.contains(where: { if case .succeed = $0 { true } else if case .fail = $0 { true } else { false } }) { w.waiting = nil }
        return (w, effects)
    }
}

/// The invariants the session keeps after every step (docs/client.md, "The sync session").
enum SessionInvariants {
    static func check(before: SessionWorld, event: SessionEvent, after: SessionWorld, effects: [SessionEffect]) -> [String] {
        var problems: [String] = []
        let ends = effects.filter { if case .succeed = $0 { true } else if case .fail = $0 { true } else { false } }
        // A sync never reports success after a disagreement of two requests, and applies
        // nothing after it.
        if after.disagreed {
            if ends.contains(.succeed) { problems.append("the sync succeeded after two requests disagreed") }
            if effects.contains(where: { if case .apply = $0 { true } else { false } }) { problems.append("a page was applied after two requests disagreed") }
            if ends.isEmpty { problems.append("the sync went on after two requests disagreed") }
        }
        // The cursor never moves past what was applied: it moves with the pages it follows,
        // or back to the start of its history.
        if after.session.cursor != before.session.cursor, let cursor = after.session.cursor {
            let applied = effects.contains { e in
                if case .apply(let a) = e { return a.cursor == cursor && a.pages.last?.next == cursor.version && a.pages.last?.view == cursor.view }
                if case .restartView(_, let c, _) = e { return c == cursor && c.version == Version.start(of: c.version.epoch) }
                if case .store = e, case .reset = event { return cursor.version == Version.start(of: cursor.version.epoch) }
                return false
            }
            if !applied { problems.append("the cursor moved to \(cursor) without a page that ends there") }
        }
        // The store never follows an epoch it retired.
        if let epoch = after.session.phase.epoch, after.session.retired.contains(epoch) { problems.append("the store follows \(epoch), which it retired") }
        for case .apply(let a) in effects {
            if let e = a.phase.epoch, after.session.retired.contains(e) { problems.append("pages applied under the retired \(e)") }
            if a.cursor.version.epoch != a.phase.epoch { problems.append("a cursor of \(a.cursor.version.epoch) under \(a.phase)") }
        }
        // Nothing is pushed while the store re-pulls a history.
        if before.session.phase.isRePulling, effects.contains(where: { if case .send = $0 { true } else { false } }) {
            problems.append("a push while re-pulling")
        }
        // A sync ends once: with success or a failure, and then waits for nothing.
        if ends.count > 1 { problems.append("the sync ended twice") }
        if !ends.isEmpty && after.session.step != .done { problems.append("the sync ended in \(after.session.step)") }
        let outside: Bool
        switch event {
        case .leave, .reset: outside = true
        default: outside = false
        }
        if !outside && ends.isEmpty && after.waiting == nil { problems.append("the session waits for nothing and did not end") }
        return problems
    }
}

@Suite("The sync session: states and table")
struct SyncSessionTests {
    /// The number of session states reachable from a new store in two syncs: docs/client.md
    /// gives it ("The sync session").
    static let stateCount = 194_939

    /// Every state reachable from a new store in two syncs and one `leaveEpoch()` or
    /// `resetSync()`, with every answer, keeps the invariants.
    @Test func everyReachableStateKeepsTheInvariants() async throws {
        let (seen, steps, problems) = try await blocking { Self.enumerated }
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        print("session enumeration: \(seen.count) states, \(steps) steps")
        #expect(seen.count == Self.stateCount, "the enumeration reached \(seen.count) states; docs/client.md and stateCount say \(Self.stateCount)")
        let phases = Set(seen.map { SessionTable.phaseName($0.session.phase) })
        #expect(phases == ["detached", "following", "view re-pulling", "refreshing", "re-pulling", "re-pulling, view changed"], "every phase is reached: \(phases)")
    }

    static let enumerated: (seen: Set<SessionWorld>, steps: Int, problems: [String]) = {
        var frontier = [SessionWorld()]
        var seen = Set(frontier)
        var steps = 0
        var problems: [String] = []
        while !frontier.isEmpty {
            var next: [SessionWorld] = []
            for world in frontier {
                for (name, event) in world.events() {
                    let (after, effects) = world.after(event)
                    steps += 1
                    for p in SessionInvariants.check(before: world, event: event, after: after, effects: effects) where problems.count < 20 {
                        problems.append("\(name) in \(SessionTable.describe(world)): \(p)")
                    }
                    if seen.insert(after).inserted { next.append(after) }
                }
            }
            frontier = next
        }
        return (seen, steps, problems)
    }()

    /// After `maxShrinks` 413s a shrink counts as a round, so no server keeps a push phase
    /// busy: the phase ends after its rounds.
    @Test func shrinksEndAfterTheirLimit() {
        var s = SyncSession(phase: .following(SessionWorld.e1), cursor: Cursor(Version(epoch: SessionWorld.e1, seq: 1)))
        var effects: [SessionEffect]
        (s, effects) = SyncSession.reduce(s, .start(dueOnly: false))
        var requests = 0
        while case .plan? = effects.last {
            (s, effects) = SyncSession.reduce(s, .candidates([SessionWorld.c1, SessionWorld.c2], SessionWorld.limits, overhead: 40))
            guard case .send(let batch)? = effects.last else { break }
            requests += 1
            (s, effects) = SyncSession.reduce(s, .pushAnswered(sent: batch.map(\.changeId), .tooLarge(code: "too_many_changes", message: "m")))
        }
        #expect(requests == SyncSession.maxShrinks + SyncSession.pushRounds - 1)
        #expect(effects.last == .fetch(since: Version(epoch: SessionWorld.e1, seq: 1), view: nil, holding: false, limit: nil), "the pull goes on")
    }

    /// A page larger than the transport reads is asked again, from the same place, with half
    /// as many records; the smaller limit holds for the rest of the sync, and a page of one
    /// record too large fails the sync.
    @Test func aPageTooLargeIsAskedAgainWithHalfAsManyRecords() {
        let e1 = SessionWorld.e1
        let start = Version(epoch: e1, seq: 1)
        var s = SyncSession(phase: .following(e1), cursor: Cursor(start))
        var effects: [SessionEffect]
        (s, effects) = SyncSession.reduce(s, .start(dueOnly: false))
        (s, effects) = SyncSession.reduce(s, .candidates([], SessionWorld.limits, overhead: 40))
        #expect(effects.last == .fetch(since: start, view: nil, holding: false, limit: nil))
        (s, effects) = SyncSession.reduce(s, .pageTooLarge(since: start, view: nil, limit: 100, cap: 40_000))
        #expect(effects.last == .fetch(since: start, view: nil, holding: false, limit: 50), "the same place, half as many")
        (s, effects) = SyncSession.reduce(s, .pageTooLarge(since: start, view: nil, limit: 50, cap: 40_000))
        #expect(effects.last == .fetch(since: start, view: nil, holding: false, limit: 25))
        let next = Version(epoch: e1, seq: 30)
        (s, effects) = SyncSession.reduce(s, .page(PageHeader(epoch: e1, next: next, view: nil, hasMore: true), storeEmpty: false))
        #expect(effects.contains { if case .apply = $0 { true } else { false } })
        (s, effects) = SyncSession.reduce(s, .applied(reoffered: false))
        #expect(effects.last == .fetch(since: next, view: nil, holding: false, limit: 25), "the limit holds for the rest of the sync")
        (s, effects) = SyncSession.reduce(s, .pageTooLarge(since: next, view: nil, limit: 1, cap: 40_000))
        #expect(effects.last == .fail(.transport(.answerTooLarge(limit: 40_000))), "one record too large fails the sync")

        // The next sync starts from the configured limit again.
        (s, effects) = SyncSession.reduce(s, .start(dueOnly: false))
        (s, effects) = SyncSession.reduce(s, .candidates([], SessionWorld.limits, overhead: 40))
        #expect(effects.last == .fetch(since: next, view: nil, holding: false, limit: nil))
    }

    /// `resetSync()` makes a refresh: a pull from the start that marks what it brings and
    /// at its end drops the live copies it did not bring (never the tombstones); a new epoch
    /// met during it is re-pulled as any, offering again what the new history lacks.
    @Test func aRefreshDropsUnseenLiveCopiesAndANewEpochDuringItIsAnOrdinaryRePull() {
        let e1 = SessionWorld.e1, e2 = SessionWorld.e2
        var s = SyncSession(phase: .following(e1), cursor: Cursor(Version(epoch: e1, seq: 7)))
        var effects: [SessionEffect]
        (s, effects) = SyncSession.reduce(s, .reset)
        #expect(s.phase == .refreshing(e1) && s.cursor == Cursor(Version.start(of: e1)))
        #expect(effects == [.store(retire: nil, clearSeen: true)])
        // Its last page: the store drops the live copies not seen, and follows.
        var pulled = s
        (pulled, effects) = SyncSession.reduce(pulled, .start(dueOnly: false))
        (pulled, effects) = SyncSession.reduce(pulled, .candidates([], SessionWorld.limits, overhead: 40))
        #expect(effects.last == .fetch(since: Version.start(of: e1), view: nil, holding: true, limit: nil), "a refresh keeps its copies")
        (pulled, effects) = SyncSession.reduce(pulled, .page(PageHeader(epoch: e1, next: Version(epoch: e1, seq: 9), view: nil, hasMore: false), storeEmpty: false))
        guard case .apply(let application)? = effects.last else { Issue.record("no apply: \(effects)"); return }
        #expect(application.dropUnseen == .live && application.phase == .following(e1) && !application.finishRePull)
        // A new epoch reported twice during the refresh: an ordinary re-pull, not a view change.
        (s, effects) = SyncSession.reduce(s, .start(dueOnly: false))
        (s, effects) = SyncSession.reduce(s, .candidates([], SessionWorld.limits, overhead: 40))
        (s, effects) = SyncSession.reduce(s, .pullRefused(status: 409, ErrorEnvelope(code: "epoch_changed", message: "m", details: ["epoch": .string(e2.rawValue)])))
        #expect(effects.last == .fetch(since: nil, view: nil, holding: true, limit: nil), "the confirming pull of a new history keeps the copies")
        (s, effects) = SyncSession.reduce(s, .page(PageHeader(epoch: e2, next: Version(epoch: e2, seq: 3), view: nil, hasMore: true), storeEmpty: false))
        guard case .apply(let rePull)? = effects.last else { Issue.record("no apply: \(effects)"); return }
        #expect(rePull.pulling == .rePulling(e2, viewChanged: false) && rePull.confirm && rePull.clearSeen)
        // Copies of a live record and of a tombstone, neither brought by the refresh.
        let live = RecordModel(key: SessionWorld.c1.key, server: Copy(version: Version(epoch: e1, seq: 2), body: Body(data: Array("{}".utf8)), updatedAt: 1))
        let tombstone = RecordModel(key: SessionWorld.c2.key, server: Copy(version: Version(epoch: e1, seq: 3), body: .tombstone, updatedAt: 1))
        #expect(UnseenCopies.live.drops(live) && !UnseenCopies.live.drops(tombstone))
        #expect(UnseenCopies.all.drops(live) && UnseenCopies.all.drops(tombstone))
    }

    /// docs/client.md's session table is what the session does.
    /// A detached store says `holding` when it may keep copies no cursor accounts for: those
    /// of the epoch it left, or those its push answers just gave it. A new store that pushed
    /// nothing does not, so its first sync carries no tombstone.
    @Test func aDetachedStoreSaysHoldingWhenItKeepsCopies() {
        func firstFetch(_ session: SyncSession, pushing candidates: [Candidate], answer: ChangeAnswer? = nil) -> SessionEffect? {
            var (s, effects) = SyncSession.reduce(session, .start(dueOnly: false))
            (s, effects) = SyncSession.reduce(s, .candidates(candidates, SessionWorld.limits, overhead: 40))
            if let answer, case .send(let batch)? = effects.last {
                let ids = batch.map(\.changeId)
                (s, effects) = SyncSession.reduce(s, .pushAnswered(sent: ids, .answered(epoch: SessionWorld.e1, ids.map { AnsweredChange(changeId: $0, answer: answer) })))
                (s, effects) = SyncSession.reduce(s, .candidates([], SessionWorld.limits, overhead: 40))
            }
            return effects.last
        }
        #expect(firstFetch(SyncSession(), pushing: []) == .fetch(since: nil, view: nil, holding: false, limit: nil), "a new store holds nothing")
        #expect(firstFetch(SyncSession(), pushing: [SessionWorld.c1], answer: .applied(Version(epoch: SessionWorld.e1, seq: 3), updatedAt: 1))
                == .fetch(since: nil, view: nil, holding: true, limit: nil), "an applied write left a copy")
        #expect(firstFetch(SyncSession(), pushing: [SessionWorld.c1], answer: .rejected(code: "forbidden", message: "m"))
                == .fetch(since: nil, view: nil, holding: false, limit: nil), "a rejection leaves no copy")

        let following = SyncSession(phase: .following(SessionWorld.e1), cursor: Cursor(Version(epoch: SessionWorld.e1, seq: 7)))
        let (left, _) = SyncSession.reduce(following, .leave)
        #expect(left.phase == .detached && left.retired == [SessionWorld.e1])
        #expect(firstFetch(left, pushing: []) == .fetch(since: nil, view: nil, holding: true, limit: nil), "the copies of the left epoch stay")
    }

    @Test func theSessionTableInTheDocsIsTheSessions() async throws {
        let table = try await blocking { SessionTable.render() }
        try DocsTable.check(table, marker: "session-table", environment: "OUTPOST_WRITE_SESSION_TABLE")
    }

    /// The session's decisions over a real store, one by one.
    @Test func aPushOf413sHalvesThenRejectsALoneChangeTooLarge() {
        var s = SyncSession(phase: .following(SessionWorld.e1), cursor: Cursor(Version(epoch: SessionWorld.e1, seq: 1)))
        var effects: [SessionEffect]
        (s, effects) = SyncSession.reduce(s, .start(dueOnly: false))
        #expect(effects == [.plan(dueOnly: false, refreshLimits: false, excluding: [])])
        (s, effects) = SyncSession.reduce(s, .candidates([SessionWorld.c1, SessionWorld.c2], SessionWorld.limits, overhead: 40))
        #expect(effects == [.send([SessionWorld.c1, SessionWorld.c2])])
        (s, effects) = SyncSession.reduce(s, .pushAnswered(sent: ["c1", "c2"], .tooLarge(code: "too_many_changes", message: "m")))
        #expect(effects == [.retry([SessionWorld.c1, SessionWorld.c2], mayHaveApplied: false, message: "m", now: true),
                            .plan(dueOnly: false, refreshLimits: true, excluding: [])])
        (s, effects) = SyncSession.reduce(s, .candidates([SessionWorld.c1, SessionWorld.c2], SessionWorld.limits, overhead: 40))
        #expect(effects == [.send([SessionWorld.c1])], "halved")
        (s, effects) = SyncSession.reduce(s, .pushAnswered(sent: ["c1"], .tooLarge(code: "payload_too_large", message: "m")))
        #expect(effects == [.record([KeyedEvent(key: SessionWorld.c1.key, event: .rejected(changeId: "c1", code: "payload_too_large", message: "m"))]),
                            .send([SessionWorld.c2])], "a lone change too large is rejected for good")
    }
}

/// A generated table between two markers of docs/client.md.
enum DocsTable {
    static func check(_ table: String, marker: String, environment: String, file: String = "docs/client.md") throws {
        let docs = try String(contentsOfFile: repositoryPath(file), encoding: .utf8)
        let start = "<!-- \(marker):start (generated by the tests; run `make engine-table` to rewrite) -->\n"
        let end = "<!-- \(marker):end -->"
        guard let s = docs.range(of: start), let e = docs.range(of: end) else {
            Issue.record("\(file) lacks the \(marker) markers")
            return
        }
        let current = String(docs[s.upperBound..<e.lowerBound])
        if let path = ProcessInfo.processInfo.environment[environment], current != table {
            try (String(docs[..<s.upperBound]) + table + String(docs[e.lowerBound...])).write(toFile: path, atomically: true, encoding: .utf8)
        }
        #expect(current == table, "\(file)'s \(marker) differs from the code; the code's:\n\(table)")
    }
}

/// The session's table: for each class of state (step, phase, confirmation) and event, the
/// classes it leads to and the effects, from every state the enumeration reaches.
enum SessionTable {
    static func phaseName(_ p: SyncPhase) -> String {
        switch p {
        case .detached: return "detached"
        case .following: return "following"
        case .viewRePulling: return "view re-pulling"
        case .refreshing: return "refreshing"
        case .rePulling(_, let view): return view ? "re-pulling, view changed" : "re-pulling"
        }
    }

    static func describe(_ w: SessionWorld) -> String {
        let s = w.session
        var parts: [String] = []
        switch s.step {
        case .idle: parts.append("idle")
        case .done: parts.append("done")
        case .pushing(let second): parts.append(second ? "pushing again" : "pushing")
        case .pulling(let second): parts.append(second ? "pulling again" : "pulling")
        }
        parts.append(phaseName(s.phase))
        switch s.confirmation {
        case .firstPage?: parts.append("first page held")
        case .reported?: parts.append("new epoch reported")
        case nil: break
        }
        return parts.joined(separator: "; ")
    }

    static func effectName(_ e: SessionEffect) -> String {
        switch e {
        case .plan(_, let refresh, _): return refresh ? "plan (limits read again)" : "plan"
        case .send(let batch): return "send \(batch.count)"
        case .record(let events): return "record " + events.map { name($0.event) }.joined(separator: "+")
        case .retry(_, let may, _, let now): return may ? "retry (in doubt)" : (now ? "retry now (not applied)" : "retry (not applied)")
        case .pruneSealed: return "prune sealed"
        case .fetch(let since, _, let holding, let limit):
            return (since == nil ? "fetch from start" : "fetch") + (holding ? " holding" : "") + (limit.map { " \($0) records" } ?? "")
        case .apply(let a):
            var words = ["apply \(a.pages.count)"]
            if a.retire != nil { words.append("retire") }
            if a.confirm { words.append("confirm") }
            if a.clearSeen { words.append("clear seen") }
            switch a.dropUnseen {
            case .all?: words.append("drop unseen")
            case .live?: words.append("drop unseen live")
            case nil: break
            }
            if a.finishRePull { words.append("re-offer") }
            return words.joined(separator: ", ")
        case .restartView(_, _, let compacted): return compacted ? "restart (compacted)" : "restart (view)"
        case .epochChanged: return "epoch changed"
        case .store(let retire, let clearSeen): return (retire == nil ? "store" : "retire, store") + (clearSeen ? ", clear seen" : "")
        case .succeed: return "succeed"
        case .fail(let error): return "fail (\(failureName(error)))"
        }
    }

    static func name(_ e: RecordEvent) -> String {
        switch e {
        case .applied: return "applied"
        case .conflict: return "conflict"
        case .rejected: return "rejected"
        case .notInHistory: return "notInHistory"
        case .upgradeRequired: return "upgradeRequired"
        case .foreignAnswer: return "foreignAnswer"
        default: return "\(e)"
        }
    }

    static func failureName(_ e: OutpostError) -> String {
        switch e {
        case .epochDisagreement: return "epochDisagreement"
        case .epochRefused: return "epochRefused"
        case .cursorAhead: return "cursorAhead"
        case .protocolViolation: return "protocolViolation"
        case .transport(let t):
            switch t {
            case .refused(let status, let envelope): return "\(status) \(envelope.code)"
            case .notSent: return "not sent"
            case .noAnswer: return "no answer"
            default: return "transport"
            }
        default: return "\(e)"
        }
    }

    static func render() -> String {
        let seen = SyncSessionTests.enumerated.seen
        var rows: [String: Set<String>] = [:]
        for world in seen {
            for (name, event) in world.events() {
                let (after, effects) = world.after(event)
                let key = "| \(describe(world)) | \(name) |"
                rows[key, default: []].insert("\(describe(after)) — \(effects.map(effectName).joined(separator: ", "))")
            }
        }
        var out = "| state | event | next state — effects |\n|---|---|---|\n"
        for key in rows.keys.sorted() {
            out += "\(key) \(rows[key]!.sorted().joined(separator: "<br>")) |\n"
        }
        out += "\n\(seen.count) states (\(Set(seen.map(describe)).count) classes).\n"
        return out
    }
}
