import Foundation
import OutpostCore
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// A device's sync as the server sees it (docs/operating.md, "Devices";
/// `GET /v1/admin/spaces/{space}/devices` and `…/devices/{clientId}`), over a real socket on
/// each store, under a rules file: its pushes, its pulls (named by `X-Outpost-Client-Id`)
/// with their cursor and view, what its telemetry reports, the quiet ones first.
@Suite(.serverLogs) struct DevicePageTests {
    enum Store: String, CaseIterable, Sendable { case sqlite, postgres }

    static let rules = #"{"collections": {"jobs": {"read": "data.team == auth.team", "write": "true"}}}"#

    @Test(arguments: Store.allCases) func aDevicesPushesPullsAndReportsMakeItsRow(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "device-page") : nil
        try await withTemporaryDirectory(prefix: "outpost-device-page") { dir in
            let rulesPath = dir.appending("rules.json")
            try Data(Self.rules.utf8).write(to: URL(fileURLWithPath: rulesPath))
            try await withServer(configure: { settings in
                settings.rulesPath = rulesPath
                if let url { settings.store = url }
            }) { s in
                func token(_ sub: String, team: String) -> String {
                    s.authority.sign(Claims(sub: sub, exp: Int64(Date().timeIntervalSince1970) + 3600, spaces: ["field"], scope: .write,
                                            extra: ["team": .string(team)]))
                }
                let ann = token("ann", team: "north"), bob = token("bob", team: "north"), mallory = token("mallory", team: "south")
                func put(_ id: String) -> Change {
                    Change(changeId: "c-\(id)", collection: "jobs", id: id, op: .put, data: ["team": "north"], baseVersion: nil, clientTime: 1)
                }
                func pull(_ query: String, _ token: String, clientId: String?) async throws -> TestResponse {
                    try await s.request("GET", "/v1/spaces/field/pull?\(query)", token: token,
                                        headers: clientId.map { [("X-Outpost-Client-Id", $0)] } ?? [])
                }
                let admin = s.token(sub: "ops", spaces: [], admin: true)
                func get(_ path: String) async throws -> JSONValue {
                    let r = try await s.request("GET", path, token: admin)
                    #expect(r.status == 200, "\(path): \(r.text)")
                    return try JSONParser.parse(r.body)
                }

                #expect(try await s.push("field", [put("j1"), put("j2"), put("j3")], clientId: "phone-1", token: ann).status == 200)
                let first = try await pull("limit=1", ann, clientId: "phone-1")
                #expect(first.status == 200, "\(first.text)")
                let firstPage = try PullPage.decode(first.body)
                let next = firstPage.next
                #expect(try await s.push("field", [put("j4"), put("j5")], clientId: "tablet", token: bob).status == 200)
                // Another subject naming the phone's clientId changes nothing of it.
                #expect(try await pull("", mallory, clientId: "phone-1").status == 200)
                // What only the device knows, from its report.
                var older = TelemetryEntry(startedAt: 1_000, durationMs: 50)
                older.lastError = "no_answer"
                var newest = TelemetryEntry(startedAt: 2_000, durationMs: 80)
                newest.queueDepth = 4
                newest.rejected = 1
                newest.appVersion = 7
                newest.quarantined = 2
                newest.upgradeRequired = 1
                let report = try await s.request("POST", "/v1/spaces/field/telemetry", token: ann,
                                                 body: TelemetryBatch(clientId: "phone-1", sdkVersion: "outpost-swift/9", syncs: [older, newest]).encoded())
                #expect(report.status == 202, "\(report.text)")

                let phone = try await get("/v1/admin/spaces/field/devices/phone-1")
                #expect(phone["subject"] == "ann" && phone["sdkVersion"] == "outpost-swift/9" && phone["appVersion"] == 7, "\(phone)")
                #expect(phone["pending"] == 4 && phone["rejected"] == 1 && phone["quarantined"] == 2 && phone["upgradeRequired"] == 1, "\(phone)")
                #expect(phone["lastErrors"] == [["startedAt": 1_000, "error": "no_answer"]] && phone["lastError"] == .null, "\(phone)")
                #expect(phone["cursor"]?.stringValue == "\(next.epoch.rawValue).\(next.seq)" && phone["head"] == 5, "\(phone)")
                #expect(phone["behind"]?["commits"]?.int64Value == 5 - next.seq, "\(phone)")
                #expect((phone["behind"]?["ms"]?.int64Value ?? -1) >= 0 && phone["lastPushAt"]?.int64Value != nil, "\(phone)")
                // The view it pulls under: its id (a cursor's third part) and the claims the
                // read rule reads, never the token.
                #expect(phone["view"]?["id"]?.stringValue == firstPage.view && phone["view"]?["claims"] == ["team": "north"], "\(phone)")
                #expect(!String(decoding: phone.encoded(), as: UTF8.self).contains(ann) && phone["token"] == nil)

                // Quiet devices first: the tablet, last seen two days ago, before the phone.
                let twoDaysAgo = Int64(Date().timeIntervalSince1970 * 1000) - 2 * 86_400_000
                try await s.app.telemetry.telemetry.run { db in
                    _ = try db.run("UPDATE devices SET last_active = ? WHERE client_id = 'tablet'", [.integer(twoDaysAgo)])
                }
                let listed = try await get("/v1/admin/spaces/field/devices?staleAfter=86400")
                let rows = listed["devices"]?.arrayValue ?? []
                #expect(rows.map { [$0["clientId"], $0["stale"]] } == [["tablet", true], ["phone-1", false]], "\(listed)")
                #expect(rows.first?["reports"] == 0 && rows.first?["lastPushAt"]?.int64Value != nil && rows.first?["lastPullAt"] == .null)
                let page = try await get("/v1/admin/spaces/field/devices?staleAfter=86400&limit=1")
                #expect(page["next"]?.stringValue == "0.\(twoDaysAgo).tablet", "\(page)")
                let rest = try await get("/v1/admin/spaces/field/devices?staleAfter=86400&after=0.\(twoDaysAgo).tablet")
                #expect(rest["devices"]?.arrayValue?.map { $0["clientId"] } == ["phone-1"] && rest["next"] == .null, "\(rest)")
                // With a longer staleAfter nobody is stale: clientId order.
                let calm = try await get("/v1/admin/spaces/field/devices?staleAfter=604800")
                #expect(calm["devices"]?.arrayValue?.map { $0["clientId"] } == ["phone-1", "tablet"], "\(calm)")
                // The list of reporting devices is as it was: the tablet never reported.
                #expect(try await get("/v1/admin/devices?space=field")["devices"]?.arrayValue?.map { $0["clientId"] } == ["phone-1"])

                // Bad input, and who may ask.
                let badHeader = try await pull("", ann, clientId: "not a client id")
                #expect(badHeader.status == 400 && errorCode(badHeader) == "invalid_header", "\(badHeader.text)")
                #expect(try ErrorEnvelope.decode(badHeader.body).details?["header"] == "X-Outpost-Client-Id")
                for (path, status, field) in [("/v1/admin/spaces/field/devices?staleAfter=-1", 422, "staleAfter"),
                                              ("/v1/admin/spaces/field/devices?staleAfter=x", 422, "staleAfter"),
                                              ("/v1/admin/spaces/field/devices?limit=1001", 422, "limit"),
                                              ("/v1/admin/spaces/field/devices?after=2.0.x", 422, "after"),
                                              ("/v1/admin/spaces/field/devices?after=nope", 422, "after")] {
                    let r = try await s.request("GET", path, token: admin)
                    #expect(r.status == status && (try? ErrorEnvelope.decode(r.body).details?["field"]) == .string(field), "\(path): \(r.text)")
                }
                // The report's new fields are checked like the others; an older report without
                // them was taken above (the phone's failed sync carries none of them).
                for (field, value) in [("appVersion", "-1"), ("quarantined", "1.5"), ("upgradeRequired", "\"2\"")] {
                    let body = #"{"clientId":"phone-1","sdkVersion":"v","syncs":[{"startedAt":3000,"durationMs":5,"\#(field)":\#(value)}]}"#
                    let r = try await s.request("POST", "/v1/spaces/field/telemetry", token: ann, body: Array(body.utf8))
                    #expect(r.status == 422 && (try? ErrorEnvelope.decode(r.body).details?["field"]) == .string("syncs[0].\(field)"), "\(field): \(r.text)")
                }
                let unknown = try await s.request("GET", "/v1/admin/spaces/field/devices/nobody", token: admin)
                #expect(unknown.status == 404 && errorCode(unknown) == "device_not_found", "\(unknown.text)")
                #expect(try await s.request("GET", "/v1/admin/spaces/bad%20space/devices", token: admin).status == 400)
                #expect(try await s.request("GET", "/v1/admin/spaces/field/devices", token: ann).status == 403)
                #expect(try await s.request("GET", "/v1/admin/spaces/field/devices/phone-1", token: nil).status == 401)
            }
        }
    }
}
