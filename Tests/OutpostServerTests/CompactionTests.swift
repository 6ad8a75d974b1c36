import Foundation
import OutpostCore
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// Compaction over a real socket, on each store (docs/operating.md, "Compaction"):
/// tombstones older than the retention are purged, the space's history horizon moves to
/// the newest purged seq, and a cursor before it is answered `409 history_compacted`.
@Suite(.serverLogs) struct CompactionTests {
    enum Store: String, CaseIterable, Sendable { case sqlite, postgres }

    @Test(arguments: Store.allCases) func purgedTombstonesMoveTheHorizonAndOlderCursorsPullAgainFromTheStart(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "compact") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let made = try PushResponse.decode(try await s.push("team", [put("c1", "a"), put("c2", "b"), put("c3", "c")]).body)
            let cursor = try PullPage.decode(try await s.pull("team").body).next
            #expect(cursor.seq == 3)
            let deleteA = Change(changeId: "c4", collection: "todos", id: "a", op: .delete, data: nil, baseVersion: made.results[0].version, clientTime: 1)
            let deleteB = Change(changeId: "c5", collection: "todos", id: "b", op: .delete, data: nil, baseVersion: made.results[1].version, clientTime: 1)
            let deletes = try PushResponse.decode(try await s.push("team", [deleteA, deleteB]).body)
            // b is created again after its delete: a live record, never purged.
            #expect(try await s.push("team", [put("c6", "b", base: deletes.results[1].version)]).status == 200)
            #expect(try await s.push("other", [put("o1", "x")]).status == 200)

            let admin = s.token(spaces: [], admin: true)
            // Within the retention (90 days by default), nothing is purged.
            let kept = try json(try await s.request("POST", "/v1/admin/compact", token: admin))
            #expect(kept["purged"] == 0 && kept["horizons"] == .object([:]))
            #expect(try await s.pull("team", query: "since=\(cursor.text)").status == 200)
            #expect(try await s.request("POST", "/v1/admin/compact", token: s.token(spaces: ["*"])).status == 403)
            #expect(try await s.request("POST", "/v1/admin/compact?retentionDays=-1", token: admin).status == 422)

            let purged = try json(try await s.request("POST", "/v1/admin/compact?retentionDays=0", token: admin))
            #expect(purged["purged"] == 1, "only a's tombstone: b lives again")
            #expect(purged["horizons"] == .object(["team": 4]))
            #expect((purged["reclaimedBytes"]?.int64Value ?? 0) > 0)

            // A cursor before the horizon missed a's purged delete.
            let refused = try await s.pull("team", query: "since=\(cursor.text)")
            #expect(refused.status == 409 && errorCode(refused) == "history_compacted")
            let details = try ErrorEnvelope.decode(refused.body).details
            #expect(details?["horizon"] == .string(Version(epoch: s.epoch, seq: 4).text))
            // At or after the horizon, and from the start, the history is whole.
            #expect(try await s.pull("team", query: "since=\(Version(epoch: s.epoch, seq: 4).text)").status == 200)
            let fromStart = try PullPage.decode(try await s.pull("team").body)
            #expect(fromStart.changes.map(\.id).sorted() == ["b", "c"], "a is gone, tombstone and all")
            #expect(try await s.pull("other", query: "since=\(Version(epoch: s.epoch, seq: 1).text)").status == 200, "another space's horizon did not move")

            let spaces = try json(try await s.request("GET", "/v1/admin/spaces", token: admin))["spaces"]?.arrayValue ?? []
            #expect(spaces.first { $0["name"] == "team" }?["horizon"] == 4)
            #expect(spaces.first { $0["name"] == "team" }?["tombstones"] == 0)
            let metrics = String(decoding: try await s.request("GET", "/metrics", token: admin).body, as: UTF8.self)
            #expect(metrics.contains("outpost_tombstones_purged_total 1"), "\(metrics.split(separator: "\n").filter { $0.contains("purged") })")
            #expect(metrics.contains("outpost_history_horizon_max_seq 4"))
        }
    }
}
