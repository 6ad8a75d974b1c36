#if canImport(OutpostTestSupport)
import Foundation
import OutpostCore
import OutpostTestBasics
import OutpostTestSupport
import Testing
@testable import Outpost

/// A real `OutpostStore` syncing with a real `outpost-server` child makes its row on the
/// space's device page (docs/operating.md, "Devices"): its pushes and its pulls (which
/// name it in `X-Outpost-Client-Id`), what its telemetry reports only it knows (the app's
/// version, its quarantine and held edits), and how far its cursor is behind the head once
/// another device writes. On SQLite and PostgreSQL.
@Suite struct SyncedDevicePageTests {
    struct Todo: Codable, Sendable, Equatable {
        var title: String
    }

    @Test(arguments: [false, true]) func aSyncingStoreShowsOnItsSpacesDevicePage(postgres: Bool) async throws {
        let database = postgres ? try await PostgresCluster.database(prefix: "device-page") : nil
        let world = try RealWorld(arguments: database.map { ["--store", $0] } ?? [])
        let phone = try world.device("phone", direct: true) { c in
            c.telemetry = true
            c.appVersion = 3
        }
        let laptop = try world.device("laptop", direct: true)
        let admin = try world.server.token(spaces: [], admin: true)
        func get(_ path: String) async throws -> JSONValue {
            let r = try await httpRequestAsync(port: world.server.port, "GET", path, headers: [("Authorization", "Bearer \(admin)")])
            #expect(r.status == 200, "\(path): \(r.text)")
            return try JSONParser.parse(r.body)
        }

        try await phone.save(Todo(title: "one"), in: "todos", id: "t1")
        try await phone.save(Todo(title: "two"), in: "todos", id: "t2")
        _ = try await phone.sync()
        // The report goes after the sync, in a task of the store's: wait for its outbox.
        try await eventually("the phone's telemetry reached the server") { try await phone.pendingTelemetry() == 0 }
        let row = try await get("/v1/admin/spaces/team/devices/phone")
        let epoch = try await phone.status().epoch
        #expect(row["clientId"] == "phone" && row["subject"] == "tester", "\(row)")
        #expect(row["lastPushAt"]?.int64Value != nil && row["lastPullAt"]?.int64Value != nil && row["lastReportAt"]?.int64Value != nil, "\(row)")
        #expect(row["sdkVersion"]?.stringValue?.hasPrefix("outpost-swift/") == true, "\(row)")
        #expect(row["appVersion"] == 3 && row["quarantined"] == 0 && row["upgradeRequired"] == 0 && row["pending"] == 0 && row["rejected"] == 0, "\(row)")
        #expect(row["cursor"]?.stringValue == "\(epoch?.rawValue ?? "").2" && row["head"] == 2, "\(row)")
        #expect(row["behind"] == ["commits": 0, "ms": 0] && row["view"] == .null && row["lastErrors"] == [], "\(row)")

        // Another device writes three records: the phone's cursor is three commits behind
        // until it pulls again.
        for i in 0..<3 { try await laptop.save(Todo(title: "l\(i)"), in: "todos", id: "l\(i)") }
        _ = try await laptop.sync()
        let behind = try await get("/v1/admin/spaces/team/devices/phone")
        #expect(behind["behind"]?["commits"] == 3 && behind["head"] == 5, "\(behind)")
        #expect((behind["behind"]?["ms"]?.int64Value ?? -1) >= 0, "\(behind)")
        // The laptop has no telemetry: the server still saw it push and pull.
        let list = try await get("/v1/admin/spaces/team/devices")
        #expect(list["devices"]?.arrayValue?.map { $0["clientId"] } == ["laptop", "phone"], "\(list)")
        let laptopRow = try #require(list["devices"]?.arrayValue?.first)
        #expect(laptopRow["reports"] == 0 && laptopRow["sdkVersion"] == .null && laptopRow["lastPullAt"]?.int64Value != nil, "\(laptopRow)")
        _ = try await phone.sync()
        try await eventually("the phone's second report reached the server") { try await phone.pendingTelemetry() == 0 }
        // A clean stop stores what was noted in memory: after a restart the phone's last
        // pull, at the head, is still known.
        #expect(world.server.stop() == 0)
        try world.server.restart()
        let after = try await get("/v1/admin/spaces/team/devices/phone")
        #expect(after["behind"]?["commits"] == 0 && after["cursor"]?.stringValue == "\(epoch?.rawValue ?? "").5", "\(after)")
        await phone.close()
        await laptop.close()
    }
}
#endif
