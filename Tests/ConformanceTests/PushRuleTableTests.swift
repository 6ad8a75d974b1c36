import Foundation
import Outpost
import OutpostTesting
import OutpostCore
import OutpostCrypto
import OutpostServer
import OutpostTestSupport
import Synchronization
import Testing

/// The push rules (docs/protocol.md section 4, `PushRules`) as one table of pushes and the
/// answers they must get, run against each store directly: SQLite, PostgreSQL and the SDK's
/// `InMemorySyncServer`. Over HTTP the conformance suite checks the same on every server;
/// this table also pins what the protocol leaves optional, such as a replay's `updatedAt`.
@Suite(.serverLogs) struct PushRuleTableTests {
    /// One store as the table sees it: a push of changes at a time `now`, and the epoch.
    struct Subject: Sendable {
        let epoch: Epoch
        let push: @Sendable ([Change], Int64) async throws -> [PushResult]
        let close: @Sendable () async -> Void
    }

    /// What an answer must be: status, and for `applied` the version's seq, replayed and
    /// updatedAt; for `conflict` the seq of the state reported; for `rejected` the code.
    enum Expect: Equatable {
        case applied(seq: Int64, replayed: Bool = false, updatedAt: Int64)
        case conflict(currentSeq: Int64?)
        case rejected(String)
    }

    static func put(_ changeId: String, _ id: String, _ v: Int, base: Int64?, epoch: Epoch, force: Bool = false, lineage: Lineage? = nil) -> Change {
        Change(changeId: changeId, collection: "c", id: id, op: .put, data: ["v": .number(JSONNumber(v))],
               baseVersion: base.map { Version(epoch: epoch, seq: $0) }, force: force, clientTime: 5, lineage: lineage)
    }

    static func delete(_ changeId: String, _ id: String, base: Int64, epoch: Epoch) -> Change {
        Change(changeId: changeId, collection: "c", id: id, op: .delete, data: nil, baseVersion: Version(epoch: epoch, seq: base), clientTime: 5)
    }

    /// The table: pushes in order, at times 1000, 1001, …, each with the answers it must get.
    static func table(_ e: Epoch) -> [(changes: [Change], expect: [Expect])] {
        var rng = SplitMix64(seed: 1)
        let earlier = Epoch.generate(nowMs: 1, after: nil, using: &rng)
        let original = put("a1", "r1", 1, base: nil, epoch: e)
        return [
            // A create on nothing; again with a null base it conflicts.
            ([original], [.applied(seq: 1, updatedAt: 1000)]),
            ([put("a2", "r1", 2, base: nil, epoch: e)], [.conflict(currentSeq: 1)]),
            // An update at its base; at a stale base it conflicts with the newest state.
            ([put("a3", "r1", 3, base: 1, epoch: e)], [.applied(seq: 2, updatedAt: 1002)]),
            ([put("a4", "r1", 4, base: 1, epoch: e)], [.conflict(currentSeq: 2)]),
            // A replay answers the original version and time; other content under the same id is refused.
            ([original], [.applied(seq: 1, replayed: true, updatedAt: 1000)]),
            ([put("a1", "r1", 9, base: nil, epoch: e)], [.rejected("change_id_reused")]),
            // A base of another history cannot be judged.
            ([put("a5", "r1", 5, base: 2, epoch: earlier)], [.rejected("epoch_mismatch")]),
            // force skips the base guard.
            ([put("a6", "r1", 6, base: nil, epoch: e, force: true)], [.applied(seq: 3, updatedAt: 1007)]),
            // A delete leaves a tombstone, which a null-base create conflicts with.
            ([delete("a7", "r1", base: 3, epoch: e)], [.applied(seq: 4, updatedAt: 1008)]),
            ([put("a8", "r1", 8, base: nil, epoch: e)], [.conflict(currentSeq: 4)]),
            // Within one push: each change sees the ones before it; a repeated change is a replay;
            // a conflict reports the state an earlier change of the push wrote.
            ([put("b1", "r2", 1, base: nil, epoch: e), put("b2", "r2", 2, base: 5, epoch: e), put("b2", "r2", 2, base: 5, epoch: e),
              put("b3", "r2", 3, base: 5, epoch: e)],
             [.applied(seq: 5, updatedAt: 1010), .applied(seq: 6, updatedAt: 1010), .applied(seq: 6, replayed: true, updatedAt: 1010),
              .conflict(currentSeq: 6)]),
            // A re-offer over nothing is stamped with its original time, and so is its replay.
            ([put("c1", "r3", 1, base: nil, epoch: e, lineage: Lineage(version: Version(epoch: earlier, seq: 9), updatedAt: 77))],
             [.applied(seq: 7, updatedAt: 77)]),
            ([put("c1", "r3", 1, base: nil, epoch: e, lineage: Lineage(version: Version(epoch: earlier, seq: 9), updatedAt: 77))],
             [.applied(seq: 7, replayed: true, updatedAt: 77)]),
            // A re-offer's commit time is one its epoch could have had in the store's history:
            // not after the history moved past that epoch (for an epoch before it began, not
            // after it began), nor before 1970. Nothing is written, no seq is used.
            ([put("d1", "r4", 1, base: nil, epoch: e, lineage: Lineage(version: Version("0.5")!, updatedAt: 4_102_444_800_000)),
              put("d2", "r4", 1, base: nil, epoch: e, lineage: Lineage(version: Version(epoch: earlier, seq: 9), updatedAt: -1)),
              put("d3", "r4", 1, base: nil, epoch: e, lineage: Lineage(version: Version(epoch: earlier, seq: 9), updatedAt: 78))],
             [.rejected("invalid_change"), .rejected("invalid_change"), .applied(seq: 8, updatedAt: 78)]),
        ]
    }

    static func check(_ subject: Subject) async throws {
        for (step, row) in table(subject.epoch).enumerated() {
            let results = try await subject.push(row.changes, 1000 + Int64(step))
            let got = results.map { r -> Expect in
                switch r.status {
                case .applied: .applied(seq: r.version?.seq ?? -1, replayed: r.replayed, updatedAt: r.updatedAt ?? -1)
                case .conflict: .conflict(currentSeq: r.current?.version.seq)
                case .rejected: .rejected(r.error?.code ?? "?")
                }
            }
            #expect(got == row.expect, "push \(step) (\(row.changes.map(\.changeId))): got \(got), expected \(row.expect)")
        }
        await subject.close()
    }

    static func serverStore(_ store: any SyncStore) -> Subject {
        Subject(epoch: store.epoch, push: { changes, now in
            let items = changes.map { c in
                PushItem.change(PreparedChange(change: c, fingerprint: SHA256.hash(c.fingerprintMaterial()), data: c.canonicalData()))
            }
            return try await store.push(space: "table", clientId: "tester", items: items, now: now)
        }, close: { await store.close() })
    }

    @Test func sqlite() async throws {
        let directory = try TemporaryDirectory(prefix: "push-table")
        defer { directory.remove() }
        try await Self.check(Self.serverStore(try SQLiteSyncStore(configuration: .init(path: directory.appending("s.sqlite")))))
    }

    @Test func postgres() async throws {
        let url = try await PostgresCluster.database(prefix: "pushtable")
        try await Self.check(Self.serverStore(try PostgresSyncStore(configuration: .init(url: url))))
    }

    @Test func inMemory() async throws {
        // The server's epoch is made from its clock at start: later than the table's earlier one.
        let now = Mutex<Int64>(1_800_000_000_000)
        let server = InMemorySyncServer(clock: { now.withLock { $0 } })
        try await Self.check(Subject(epoch: server.epoch, push: { changes, at in
            now.withLock { $0 = at }
            return try await server.push(PushRequest(clientId: "tester", changes: changes), space: "table").results
        }, close: {}))
    }
}
