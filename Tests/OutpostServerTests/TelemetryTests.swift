import Foundation
import OutpostCore
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// Device telemetry over a real socket, on each store (docs/operating.md, "Devices"):
/// `POST /v1/spaces/{space}/telemetry` with its limits, and `GET /v1/admin/devices`.
@Suite(.serverLogs) struct TelemetryTests {
    enum Store: String, CaseIterable, Sendable { case sqlite, postgres }

    static func entry(_ startedAt: Int64, pending: Int64 = 0, error: String? = nil, offset: Int64? = nil) -> TelemetryEntry {
        var e = TelemetryEntry(startedAt: startedAt, durationMs: 120)
        e.bytesSent = 300
        e.bytesReceived = 4000
        e.pushed = 2
        e.queueDepth = pending
        e.lastError = error
        e.roundTripMs = 3
        e.clockOffsetMs = offset
        return e
    }

    @Test(arguments: Store.allCases) func devicesReportTheirSyncsAndAnAdminSeesEachOnesLastState(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "telemetry") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            func send(_ space: String, _ batch: TelemetryBatch, token: String? = nil) async throws -> TestResponse {
                try await s.request("POST", "/v1/spaces/\(space)/telemetry", token: token ?? s.token(spaces: [space], scope: .read), body: batch.encoded())
            }
            let first = try await send("team", TelemetryBatch(clientId: "phone-1", sdkVersion: "outpost-swift/0.1.0",
                                                               syncs: [Self.entry(1_000, pending: 4, error: "no_answer"), Self.entry(2_000, pending: 1, offset: -250)]))
            let accepted = try json(first)["accepted"]
            #expect(first.status == 202 && accepted == 2, "\(first.text)")
            #expect(try await send("team", TelemetryBatch(clientId: "tablet", sdkVersion: "outpost-swift/0.1.0", syncs: [Self.entry(5_000)])).status == 202)
            #expect(try await send("depot", TelemetryBatch(clientId: "phone-1", sdkVersion: "outpost-swift/0.1.0", syncs: [Self.entry(7_000, error: "forbidden")])).status == 202)
            // An older batch arriving late does not replace the newest state.
            #expect(try await send("team", TelemetryBatch(clientId: "phone-1", sdkVersion: "outpost-swift/0.1.1", syncs: [Self.entry(1_500, pending: 9)])).status == 202)

            let admin = s.token(spaces: [], admin: true)
            let listed = try json(try await s.request("GET", "/v1/admin/devices", token: admin))
            let devices = listed["devices"]?.arrayValue ?? []
            #expect(devices.map { "\($0["space"]?.stringValue ?? "")/\($0["clientId"]?.stringValue ?? "")" } == ["depot/phone-1", "team/phone-1", "team/tablet"])
            let phone = devices[1]
            #expect(phone["pending"] == 1 && phone["lastError"] == .null && phone["clockOffsetMs"] == -250 && phone["lastSyncAt"] == 2_000, "\(phone)")
            #expect(phone["reports"] == 2 && phone["sdkVersion"] == "outpost-swift/0.1.1")
            #expect(devices[0]["lastError"] == "forbidden")
            // Paging, one space, and the devices not seen for a while (none yet).
            let page = try json(try await s.request("GET", "/v1/admin/devices?limit=2", token: admin))
            #expect(page["next"] == "team/phone-1" && page["devices"]?.arrayValue?.count == 2)
            let rest = try json(try await s.request("GET", "/v1/admin/devices?after=team/phone-1", token: admin))
            #expect(rest["devices"]?.arrayValue?.map { $0["clientId"] } == ["tablet"] && rest["next"] == .null)
            #expect(try json(try await s.request("GET", "/v1/admin/devices?space=team", token: admin))["devices"]?.arrayValue?.count == 2)
            #expect(try json(try await s.request("GET", "/v1/admin/devices?notSeenForHours=72", token: admin))["devices"]?.arrayValue?.isEmpty == true)
            // The history is bounded per device.
            for round in 0..<2 {
                let syncs = (0..<TelemetryBatch.maxEntries).map { Self.entry(10_000 + Int64(round * 1000 + $0)) }
                #expect(try await send("team", TelemetryBatch(clientId: "tablet", sdkVersion: "v", syncs: syncs)).status == 202)
            }
            let history = try await s.app.telemetry.telemetry.history(space: "team", clientId: "tablet")
            #expect(history.count == DeviceTelemetry.historyPerDevice && history.first?["startedAt"] == 11_099)

            // Auth and limits.
            #expect(try await s.request("GET", "/v1/admin/devices", token: s.token(spaces: ["*"])).status == 403)
            #expect(try await s.request("GET", "/v1/admin/devices", token: nil).status == 401)
            #expect(try await s.request("GET", "/v1/admin/devices?after=nope", token: admin).status == 422)
            #expect(try await send("team", TelemetryBatch(clientId: "x", sdkVersion: "v", syncs: []), token: s.token(spaces: ["other"])).status == 403)
            let tooMany = TelemetryBatch(clientId: "x", sdkVersion: "v", syncs: (0...TelemetryBatch.maxEntries).map { Self.entry(Int64($0)) })
            let refused = try await send("team", tooMany)
            #expect(refused.status == 422 && errorCode(refused) == "invalid_request")
            // sdkVersion is 1 to 64 characters, as openapi/outpost.yaml's maxLength counts them
            // (64 four-byte characters are 256 bytes), never 65.
            #expect(try await send("team", TelemetryBatch(clientId: "sdk-version", sdkVersion: String(repeating: "\u{1D4E3}", count: 64), syncs: [])).status == 202)
            let long = try await send("team", TelemetryBatch(clientId: "sdk-version", sdkVersion: String(repeating: "v", count: 65), syncs: []))
            #expect(long.status == 422 && errorCode(long) == "invalid_request")
            let big = try await s.request("POST", "/v1/spaces/team/telemetry", token: s.token(spaces: ["team"], scope: .read),
                                          body: Array(repeating: UInt8(ascii: " "), count: TelemetryBatch.maxBytes + 1))
            #expect(big.status == 413)
            let bad = try await s.request("POST", "/v1/spaces/team/telemetry", token: s.token(spaces: ["team"], scope: .read),
                                          body: Array(#"{"clientId":"x","sdkVersion":"v","syncs":[{"startedAt":1,"durationMs":-5}]}"#.utf8))
            let field = try ErrorEnvelope.decode(bad.body).details?["field"]
            #expect(bad.status == 422 && field == "syncs[0].durationMs", "\(bad.text)")
        }
    }

    /// The conflicts devices report, summed per device and per space (`GET
    /// /v1/admin/conflicts`): a batch sent again (its answer lost) counts once, a batch of
    /// another subject counts nothing, and an old report without `resolved` reads as 0.
    @Test(arguments: Store.allCases) func conflictCountsAddUpPerDeviceAndSpaceEachSyncOnce(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "conflicts") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            func send(_ space: String, _ client: String, _ syncs: [(Int64, Int64, Int64)], sub: String = "device") async throws -> Int {
                let entries = syncs.map { started, conflicts, resolved in
                    var e = Self.entry(started)
                    e.conflicts = conflicts
                    e.resolved = resolved
                    return e
                }
                let token = s.token(sub: sub, spaces: [space], scope: .read)
                return try await s.request("POST", "/v1/spaces/\(space)/telemetry", token: token,
                                           body: TelemetryBatch(clientId: client, sdkVersion: "v", syncs: entries).encoded()).status
            }
            #expect(try await send("team", "phone", [(1_000, 3, 2), (2_000, 1, 1)]) == 202)
            #expect(try await send("team", "phone", [(2_000, 1, 1), (3_000, 2, 0)]) == 202, "the sync at 2000 again, and a new one")
            #expect(try await send("team", "tablet", [(1_000, 5, 5)]) == 202)
            #expect(try await send("team", "tablet", [(9_000, 7, 7)], sub: "intruder") == 403)
            #expect(try await send("depot", "phone", [(1_000, 0, 0)]) == 202)
            let old = try await s.request("POST", "/v1/spaces/team/telemetry", token: s.token(sub: "device", spaces: ["team"], scope: .read),
                                          body: Array(#"{"clientId":"old","sdkVersion":"v","syncs":[{"startedAt":1,"durationMs":5,"conflicts":4}]}"#.utf8))
            #expect(old.status == 202)

            let admin = s.token(spaces: [], admin: true)
            let devices = try json(try await s.request("GET", "/v1/admin/devices?space=team", token: admin))["devices"]?.arrayValue ?? []
            #expect(devices.map { [$0["clientId"], $0["conflicts"], $0["resolved"]] } == [["old", 4, 0], ["phone", 6, 3], ["tablet", 5, 5]], "\(devices)")
            let spaces = try json(try await s.request("GET", "/v1/admin/conflicts", token: admin))
            #expect(spaces == ["spaces": [["space": "depot", "devices": 1, "conflicts": 0, "resolved": 0],
                                          ["space": "team", "devices": 3, "conflicts": 15, "resolved": 8]], "next": .null], "\(spaces)")
            let page = try json(try await s.request("GET", "/v1/admin/conflicts?limit=1", token: admin))
            #expect(page["next"] == "depot" && page["spaces"]?.arrayValue?.count == 1)
            let rest = try json(try await s.request("GET", "/v1/admin/conflicts?after=depot", token: admin))
            #expect(rest["spaces"]?.arrayValue?.map { $0["space"] } == ["team"] && rest["next"] == .null)
            #expect(try await s.request("GET", "/v1/admin/conflicts?after=a/b", token: admin).status == 422)
            #expect(try await s.request("GET", "/v1/admin/conflicts", token: s.token(spaces: ["*"])).status == 403)
        }
    }

    /// A read-scope token reporting 1,000 new client ids, each claiming 2^53 - 1
    /// conflicts, is refused per batch (`422`, `details.field`), stores nothing, and the
    /// admin's sums still answer.
    @Test(arguments: Store.allCases) func countsAboveWhatOneSyncDoesAreRefused(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "telemetry-flood") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let token = s.token(sub: "prober", spaces: ["team"], scope: .read)
            for n in 0..<1_000 {
                var e = Self.entry(1_000)
                e.conflicts = TelemetryEntry.maxCount
                let r = try await s.request("POST", "/v1/spaces/team/telemetry", token: token,
                                            body: TelemetryBatch(clientId: "fake-\(n)", sdkVersion: "v", syncs: [e]).encoded())
                #expect(r.status == 422 && (try? ErrorEnvelope.decode(r.body))?.details?["field"] == "syncs[0].conflicts", "\(r.text)")
                if r.status != 422 { break }
            }
            var atCeiling = Self.entry(2_000)
            atCeiling.conflicts = TelemetryEntry.maxChangesPerSync
            atCeiling.resolved = TelemetryEntry.maxChangesPerSync
            #expect(try await s.request("POST", "/v1/spaces/team/telemetry", token: token,
                                        body: TelemetryBatch(clientId: "phone", sdkVersion: "v", syncs: [atCeiling]).encoded()).status == 202)
            let admin = s.token(spaces: [], admin: true)
            let answer = try await s.request("GET", "/v1/admin/conflicts", token: admin)
            #expect(answer.status == 200, "\(answer.text)")
            #expect(try json(answer) == ["spaces": [["space": "team", "devices": 1, "conflicts": 1_000_000, "resolved": 1_000_000]], "next": .null])
        }
    }

    /// Devices whose totals sum past 2^63 - 1 (1,100 at 2^53 - 1 each, as rows stored
    /// before the per-sync ceiling could hold) give a space's sum of 2^53 - 1, not a 5xx.
    @Test(arguments: Store.allCases) func spaceSumsStopAtTheLargestCountInsteadOfOverflowing(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "telemetry-sum") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let cap = TelemetryEntry.maxCount
            try await s.app.telemetry.telemetry.run { db in
                try db.transaction(.process) {
                    for n in 0..<1_100 {
                        _ = try db.run("""
                            INSERT INTO devices(space, client_id, first_seen, last_seen, last_sync, sdk_version, pending, reports, subject, conflicts, resolved)
                            VALUES ('team', ?, 1, 1, 1, 'v', 0, 1, 'd', ?, ?)
                            """, [.text("d\(n)"), .integer(cap), .integer(n == 0 ? 1 : 0)])
                    }
                }
            }
            let answer = try await s.request("GET", "/v1/admin/conflicts", token: s.token(spaces: [], admin: true))
            #expect(answer.status == 200, "\(answer.text)")
            #expect(try json(answer) == ["spaces": [["space": "team", "devices": 1_100, "conflicts": .number(JSONNumber(cap)), "resolved": 1]], "next": .null],
                    "\(answer.text)")
        }
    }

    /// A client id is visible to every reader as `updatedBy`; its telemetry slot belongs to
    /// the subject that pushed under it, not to whoever reports first. A client id no push
    /// used belongs to its first reporter until a push under it binds it to the pusher.
    @Test(arguments: Store.allCases) func aDevicesReportsAreBoundToTheSubjectThatPushedUnderItsClientId(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "telemetry-bind") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let alice = s.token(sub: "alice", spaces: ["team"]), mallory = s.token(sub: "mallory", spaces: ["team"], scope: .read)
            func report(_ client: String, _ token: String, at started: Int64) async throws -> Int {
                try await s.request("POST", "/v1/spaces/team/telemetry", token: token,
                                    body: TelemetryBatch(clientId: client, sdkVersion: "v", syncs: [Self.entry(started)]).encoded()).status
            }
            func push(_ client: String, _ id: String) async throws {
                let change = Change(changeId: "\(client)-\(id)", collection: "jobs", id: id, op: .put, data: ["t": "x"], baseVersion: nil, clientTime: 1)
                #expect(try await s.push("team", [change], clientId: client, token: alice).status == 200)
            }
            try await push("phone-a", "j1")
            #expect(try await report("phone-a", mallory, at: 1_000) == 403, "a reader cannot take the slot of a client id it saw as updatedBy")
            #expect(try await report("phone-a", alice, at: 2_000) == 202)

            // A client id never pushed under: its first reporter's, until alice pushes under it.
            #expect(try await report("tablet", mallory, at: 1_000) == 202)
            #expect(try await report("tablet", alice, at: 2_000) == 403)
            try await push("tablet", "j2")
            #expect(try await report("tablet", alice, at: 3_000) == 202, "the pusher takes the slot over")
            #expect(try await report("tablet", mallory, at: 4_000) == 403)

            let devices = try json(try await s.request("GET", "/v1/admin/devices?space=team", token: s.token(spaces: [], admin: true)))["devices"]?.arrayValue ?? []
            #expect(devices.map { [$0["clientId"], $0["subject"], $0["lastSyncAt"]] } == [["phone-a", "alice", 2_000], ["tablet", "alice", 3_000]], "\(devices)")
        }
    }
}
