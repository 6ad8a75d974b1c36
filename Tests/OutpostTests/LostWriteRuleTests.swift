import Foundation
import OutpostCore
import Testing
@testable import Outpost

/// The rule of a lost write (`Engine.lostWrite`, docs/client.md "The engine"): the record's
/// copy moves from a state this device wrote to one another device's resolution wrote over
/// exactly that state; and the mark a resolved write sends (`Change.resolves`).
@Suite("A lost write, as the engine sees it")
struct LostWriteRuleTests {
    static let e = Epoch("E1")!
    static let key = RecordKey(collection: "c", id: "r")

    static func context(_ resolver: ConflictResolver = .mergeFields()) -> EngineContext {
        var n = 0
        return EngineContext(phase: .following(e), resolver: resolver, now: 5_000, serverNow: 5_000, clientId: "me", backoff: { _ in 0 },
                             newChangeId: { n += 1; return "n\(n)" })
    }

    static func copy(_ seq: Int64, _ tag: String, by: String, resolved: Resolved? = nil) -> Copy {
        Copy(version: Version(epoch: e, seq: seq), body: Body(data: encodeObject(["v": .string(tag)])), updatedAt: 1_000 + seq, updatedBy: by,
             changeId: by == "me" ? "mine" : nil, resolved: resolved)
    }

    static func mark(over seq: Int64) -> Resolved {
        Resolved(over: Version(epoch: e, seq: seq), mark: ResolutionMark(resolver: "mergeFields(lastWriteWins)", outcome: .write))
    }

    func overwritten(from before: Copy, pulling after: Copy) -> [LostWrite] {
        let model = RecordModel(key: Self.key, server: before, left: nil, edits: [])
        let (_, effects) = Engine.reduce(model, .pulled(after), Self.context())
        return effects.compactMap { if case .overwritten(let lost) = $0 { lost } else { nil } }
    }

    @Test func aPulledResolutionOverThisDevicesWriteIsALostWrite() {
        let mine = Self.copy(4, "mine", by: "me")
        let lost = overwritten(from: mine, pulling: Self.copy(5, "merged", by: "other", resolved: Self.mark(over: 4)))
        #expect(lost.count == 1 && lost.first?.mine == mine && lost.first?.theirs.version.seq == 5)
    }

    @Test func nothingIsLostWithoutAMarkOverThatVersionOfThisDevice() {
        // A plain edit on this device's write.
        #expect(overwritten(from: Self.copy(4, "mine", by: "me"), pulling: Self.copy(5, "edit", by: "other")).isEmpty)
        // A resolution over another version (the device had not seen the one it replaced).
        #expect(overwritten(from: Self.copy(3, "mine", by: "me"), pulling: Self.copy(5, "merged", by: "other", resolved: Self.mark(over: 4))).isEmpty)
        // A resolution over another device's write.
        #expect(overwritten(from: Self.copy(4, "theirs", by: "third"), pulling: Self.copy(5, "merged", by: "other", resolved: Self.mark(over: 4))).isEmpty)
        // This device's own resolution, pulled back.
        #expect(overwritten(from: Self.copy(4, "mine", by: "me"), pulling: Self.copy(5, "merged", by: "me", resolved: Self.mark(over: 4))).isEmpty)
        // An older copy, which the pull does not take.
        #expect(overwritten(from: Self.copy(6, "mine", by: "me"), pulling: Self.copy(5, "merged", by: "other", resolved: Self.mark(over: 6))).isEmpty)
    }

    @Test func aConflictsAnswerCarryingTheResolutionIsALostWriteToo() {
        // This device wrote version 4, then edited again offline; the answer to that edit is
        // a conflict whose current state is another device's resolution over version 4.
        let mine = Self.copy(4, "mine", by: "me")
        var model = RecordModel(key: Self.key, server: mine, left: nil, edits: [])
        model = Engine.reduce(model, .edit(Body(data: encodeObject(["v": "again"])), changeId: "c2", time: 2_000), Self.context()).0
        model = Engine.reduce(model, .sending(changeId: "c2"), Self.context()).0
        let (_, effects) = Engine.reduce(model, .conflict(changeId: "c2", current: Self.copy(5, "merged", by: "other", resolved: Self.mark(over: 4))),
                                         Self.context())
        #expect(effects.contains { if case .overwritten = $0 { true } else { false } })
        #expect(effects.contains { if case .resolved = $0 { true } else { false } }, "and this device's resolver decides its own edit")
    }

    @Test func aResolvedWriteCarriesItsMarkAndACreateDoesNot() throws {
        let server = Self.copy(5, "theirs", by: "other")
        var model = RecordModel(key: Self.key, server: Self.copy(4, "base", by: "other"), left: nil, edits: [])
        model = Engine.reduce(model, .edit(Body(data: encodeObject(["v": "mine"])), changeId: "c1", time: 2_000), Self.context()).0
        model = Engine.reduce(model, .sending(changeId: "c1"), Self.context()).0
        for (resolver, outcome) in [(ConflictResolver.clientWins, ResolutionOutcome.keepLocal), (.custom(name: "") { _ in .delete }, .delete),
                                    (.custom(name: String(repeating: "x", count: 300)) { _ in .write(["v": "merged"]) }, .write)] {
            let (resolved, _) = Engine.reduce(model, .conflict(changeId: "c1", current: server), Self.context(resolver))
            let change = try #require(Engine.outgoing(resolved, Self.context(resolver)))
            #expect(change.baseVersion == server.version && change.resolves?.outcome == outcome)
            #expect(change.resolves.map { !$0.resolver.isEmpty && $0.resolver.count <= ResolutionMark.maxResolverLength } == true,
                    "a name the wire refuses would lose the write")
        }
        // The server lacks the record: the edit goes as a create, with no mark.
        let (created, _) = Engine.reduce(model, .conflict(changeId: "c1", current: nil), Self.context(.clientWins))
        #expect(try #require(Engine.outgoing(created, Self.context())).resolves == nil)
        // Server wins: nothing is written.
        let (kept, _) = Engine.reduce(model, .conflict(changeId: "c1", current: server), Self.context(.serverWins))
        #expect(Engine.outgoing(kept, Self.context()) == nil)
    }
}
