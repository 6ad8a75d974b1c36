import OutpostCore
import Testing
@testable import Outpost
import OutpostTesting

/// `InMemorySyncServer` keeps protocol 1.1's lineage and sameAs rules (docs/protocol.md sections 4 and 5)
/// as the real stores do (`LineageStoreTests`, the conformance suite's lineage checks).
@Suite("InMemorySyncServer lineage")
struct InMemoryLineageTests {
    let server = InMemorySyncServer(clock: { 1_000_000 }, seed: 7)

    func put(_ changeId: String, _ id: String, base: Version?, lineage: Version? = nil, updatedAt: Int64 = 5, force: Bool = false) -> Change {
        Change(changeId: changeId, collection: "todos", id: id, op: .put, data: ["t": .string(changeId)], baseVersion: base, force: force,
               lineage: lineage.map { Lineage(version: $0, updatedAt: updatedAt) })
    }

    func push(_ changes: [Change], clientId: String = "device") async throws -> [PushResult] {
        try await server.push(PushRequest(clientId: clientId, changes: changes), space: "sp").results
    }

    func record(_ id: String) -> RecordState? { server.record(space: "sp", collection: "todos", id: id) }

    @Test func infoReportsOnePointOne() async throws {
        let info = try await server.serverInfo()
        #expect(info.protocolRevision == "1.1" && OutpostProtocol.keepsLineage(info.protocolRevision))
    }

    @Test func rotateEpochAndRestoreGiveEveryRecordItsVersionInTheEndingHistory() async throws {
        let old = server.epoch
        _ = try await push([put("c1", "a", base: nil), put("c2", "b", base: nil)])
        _ = try await push([Change(changeId: "c3", collection: "todos", id: "b", op: .delete, data: nil, baseVersion: Version(epoch: old, seq: 2))])
        let backup = server.snapshot()
        server.rotateEpoch()
        #expect(record("a")?.lineage == Version(epoch: old, seq: 1) && record("a")?.sameAs == Version(epoch: old, seq: 1))
        #expect(record("b")?.deleted == true && record("b")?.lineage == Version(epoch: old, seq: 3) && record("b")?.sameAs == Version(epoch: old, seq: 3))
        // A restore names the backup's history, whatever the server ran since.
        server.rotateEpoch()
        server.restore(backup)
        #expect(record("a")?.lineage == Version(epoch: old, seq: 1) && record("a")?.sameAs == Version(epoch: old, seq: 1))
    }

    @Test func reoffersAreJudgedByTheLineageOfTheStateTheyWouldReplace() async throws {
        let old = server.epoch
        _ = try await push([put("c1", "a", base: nil), put("c2", "b", base: nil)])
        server.rotateEpoch()
        let new = server.epoch
        _ = try await push([put("c3", "fresh", base: nil)])
        let before = server.records(space: "sp")
        let refused = try await push([
            // Written fresh in the new epoch; another earlier history; a null base over a
            // record; a stale base.
            put("r2", "fresh", base: Version(epoch: new, seq: 3), lineage: Version(epoch: old, seq: 9)),
            put("r3", "a", base: Version(epoch: new, seq: 1), lineage: Version("0.9")!),
            put("r4", "a", base: nil, lineage: Version(epoch: old, seq: 9)),
            put("r5", "b", base: Version(epoch: new, seq: 1), lineage: Version(epoch: old, seq: 9)),
        ])
        #expect(refused.map(\.status) == [.conflict, .conflict, .conflict, .conflict])
        #expect(refused[0].current?.lineage == nil)
        #expect(refused[1].current?.lineage == Version(epoch: old, seq: 1))
        #expect(server.records(space: "sp") == before)
        // b descends from old.2; a copy old.1 is older, old.2 itself applies.
        var r = try await push([put("r6", "b", base: Version(epoch: new, seq: 2), lineage: Version(epoch: old, seq: 1))])
        #expect(r.map(\.status) == [.conflict])
        r = try await push([put("r7", "b", base: Version(epoch: new, seq: 2), lineage: Version(epoch: old, seq: 2), updatedAt: 42)])
        #expect(r == [.applied("r7", version: Version(epoch: new, seq: 4), updatedAt: 42)])
        #expect(record("b")?.updatedAt == 42 && record("b")?.updatedBy == "device" && record("b")?.lineage == Version(epoch: old, seq: 2))
        #expect(record("b")?.sameAs == Version(epoch: old, seq: 2))
        // A re-offer of a record the server lacks, base null, applies.
        r = try await push([put("r8", "gone", base: nil, lineage: Version(epoch: old, seq: 7), updatedAt: 9)])
        #expect(r == [.applied("r8", version: Version(epoch: new, seq: 5), updatedAt: 9)])
        #expect(record("gone")?.lineage == Version(epoch: old, seq: 7) && record("gone")?.sameAs == Version(epoch: old, seq: 7))
    }

    @Test func plainWritesKeepTheLineageEndSameAsAndReplaysAnswerTheOriginalTime() async throws {
        let old = server.epoch
        _ = try await push([put("c1", "a", base: nil)])
        server.rotateEpoch()
        let new = server.epoch
        let carried = Version(epoch: old, seq: 3)
        let first = try await push([put("ro", "a", base: Version(epoch: new, seq: 1), lineage: carried, updatedAt: 11)])
        #expect(first == [.applied("ro", version: Version(epoch: new, seq: 2), updatedAt: 11)])
        #expect(record("a")?.sameAs == carried)
        _ = try await push([put("e1", "a", base: Version(epoch: new, seq: 2))])
        #expect(record("a")?.lineage == carried && record("a")?.sameAs == nil && record("a")?.updatedAt == 1_000_000)
        _ = try await push([Change(changeId: "d1", collection: "todos", id: "a", op: .delete, data: nil, baseVersion: Version(epoch: new, seq: 3))])
        #expect(record("a")?.deleted == true && record("a")?.lineage == carried && record("a")?.sameAs == nil)
        _ = try await push([put("f1", "a", base: nil, force: true)])
        #expect(record("a")?.lineage == carried && record("a")?.sameAs == nil)
        let replay = try await push([put("ro", "a", base: Version(epoch: new, seq: 1), lineage: carried, updatedAt: 11)])
        #expect(replay == [.applied("ro", version: Version(epoch: new, seq: 2), replayed: true, updatedAt: 11)])
        _ = try await push([put("n1", "new", base: nil)])
        #expect(record("new")?.lineage == nil && record("new")?.sameAs == nil)
    }

    /// The bug sameAs fixes: lineage is kept by a plain write, so judging a re-offer by it
    /// let a later copy of the earlier history replace a write it never saw.
    @Test func aReofferOverAStateWrittenSinceItsRestoreOrReofferIsAConflict() async throws {
        let old = server.epoch
        _ = try await push([put("c1", "untouched", base: nil), put("c2", "edited", base: nil), put("c3", "k0", base: nil)])
        let backup = server.snapshot()
        server.restore(backup)
        let new = server.epoch
        // The restore gives k0 lineage and sameAs old.3; a device re-offers its old.5 copy.
        var r = try await push([put("ra", "k0", base: Version(epoch: new, seq: 3), lineage: Version(epoch: old, seq: 5))], clientId: "device-a")
        #expect(r == [.applied("ra", version: Version(epoch: new, seq: 4), updatedAt: 5)])
        #expect(record("k0")?.lineage == Version(epoch: old, seq: 5) && record("k0")?.sameAs == Version(epoch: old, seq: 5))
        // Another device writes on it: the lineage stays, sameAs ends.
        r = try await push([put("wb", "k0", base: Version(epoch: new, seq: 4))], clientId: "device-b")
        #expect(r == [.applied("wb", version: Version(epoch: new, seq: 5), updatedAt: 1_000_000)])
        let written = try #require(record("k0"))
        #expect(written.lineage == Version(epoch: old, seq: 5) && written.sameAs == nil)
        // A third device re-offers its acknowledged old.8 delete at the current base.
        let delete = Change(changeId: "rc", collection: "todos", id: "k0", op: .delete, data: nil, baseVersion: Version(epoch: new, seq: 5),
                            lineage: Lineage(version: Version(epoch: old, seq: 8), updatedAt: 8))
        r = try await push([delete], clientId: "device-c")
        #expect(r == [.conflict("rc", current: written)])
        #expect(record("k0") == written)
        // The same on a restored state written on directly.
        _ = try await push([Change(changeId: "we", collection: "todos", id: "edited", op: .delete, data: nil, baseVersion: Version(epoch: new, seq: 2))])
        r = try await push([put("re", "edited", base: Version(epoch: new, seq: 6), lineage: Version(epoch: old, seq: 9))], clientId: "device-c")
        #expect(r.map(\.status) == [.conflict])
        #expect(r[0].current?.deleted == true && r[0].current?.lineage == Version(epoch: old, seq: 2) && r[0].current?.sameAs == nil)
        // Over a restored state nothing was written on, a newer copy still applies.
        r = try await push([put("ru", "untouched", base: Version(epoch: new, seq: 1), lineage: Version(epoch: old, seq: 7), updatedAt: 7)], clientId: "device-c")
        #expect(r == [.applied("ru", version: Version(epoch: new, seq: 7), updatedAt: 7)])
        #expect(record("untouched")?.sameAs == Version(epoch: old, seq: 7))
    }

    @Test func aLineageNotOfAnEarlierEpochOrForcedIsInvalid() async throws {
        let epoch = server.epoch
        let earlier = Epoch(String(epoch.rawValue.dropLast()))!
        let r = try await push([
            put("c1", "a", base: nil, lineage: Version(epoch: epoch, seq: 1)),
            put("c2", "b", base: nil, lineage: Version(epoch: Epoch(epoch.rawValue + "Z")!, seq: 1)),
            put("c3", "c", base: nil, lineage: Version(epoch: earlier, seq: 1), force: true),
        ])
        #expect(r.map(\.status) == [.rejected, .rejected, .rejected])
        #expect(r.allSatisfy { $0.error?.code == "invalid_change" })
        #expect(server.records(space: "sp").isEmpty)
    }
}
