import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost
import OutpostTesting
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// One device, several spaces (docs/client.md, "Many spaces"), against a real
/// `outpost-server` child: `OutpostClient` and the CLI's many-spaces sync.
@Suite("Many spaces on one device", .offPoolWhileBlocking, .serialized, .serverLogs)
struct SpacesTests {
    @Test func ofThreeSpacesTheOneTheServerRefusesFailsAloneAndADetachedOneKeepsItsEdits() async throws {
        let world = try RealWorld()
        let token = try world.server.token(spaces: ["acme", "globex", "team-*"])
        #expect(OutpostClient.spaces(inToken: token) == ["acme", "globex"], "wildcards name no space to open")
        #expect(OutpostClient.spaces(inToken: "not a token").isEmpty)
        let directory = world.dir.appending("spaces")
        let client = OutpostClient(directory: directory, baseURL: world.server.baseURL, token: { _ in token }) { $0.durability = .normal }
        // The app lists a third space the token does not grant: the server refuses it.
        try await client.attach(spaces: ["acme", "initech", "globex"])
        for space in ["acme", "initech", "globex"] { try await client.store(for: space).put(todo("in \(space)"), in: "todos", id: "t1") }
        let reports = await client.sync()
        #expect(reports.map(\.space) == ["acme", "initech", "globex"])
        #expect(reports.map(\.succeeded) == [true, false, true])
        if case .failed(let error) = reports[1].outcome {
            #expect((error as? OutpostError)?.code == "forbidden", "\(error)")
        }
        let acme = try await client.store(for: "acme")
        #expect(try await acme.status().pending == 0)
        #expect(FileManager.default.fileExists(atPath: client.path(for: "globex")), "one file per space")

        // The token no longer lists initech: detached, its unsent edit still readable, and
        // not removed while it is unsent.
        try await client.attach(spaces: OutpostClient.spaces(inToken: token))
        let detached = await client.detached()
        #expect(detached.map(\.space) == ["initech"] && detached.first?.pending == 1)
        #expect(try await client.withStore("initech") { try await $0.data("todos", "t1") } == todo("in initech"))
        await #expect(throws: OutpostError.self) { try await client.store(for: "initech") }
        await #expect(throws: OutpostError.self) { try await client.remove(space: "initech") }
        #expect(await client.sync().map(\.succeeded) == [true, true])
        await client.close()

        // The CLI: one line per space, a failure in one not stopping the others.
        let base = ["--store", directory, "--server", world.server.baseURL.absoluteString, "--token", token]
        let listed = try CLITests.outpost(base + ["--space", "acme", "--space", "initech", "--space", "globex", "sync"])
        #expect(listed.status == 2, "\(listed.stderr)")
        #expect(listed.lines.map { $0["space"]?.stringValue } == ["acme", "initech", "globex"])
        #expect(listed.lines[1]["error"]?["code"] == "forbidden" && listed.lines[0]["pushed"] == 0 && listed.lines[2]["error"] == nil, "\(listed.stdout)")
        let all = try CLITests.outpost(base + ["sync", "--all"])
        #expect(all.status == 0 && all.lines.map { $0["space"]?.stringValue } == ["acme", "globex"], "\(all.stdout) \(all.stderr)")
        try await client.remove(space: "initech", discardingUnsent: true)
        #expect(!FileManager.default.fileExists(atPath: client.path(for: "initech")))
    }
}

/// Device telemetry from the SDK (docs/client.md, "Telemetry"), against a real server.
@Suite("Device telemetry from the SDK", .offPoolWhileBlocking, .serialized, .serverLogs)
struct DeviceTelemetryTests {
    @Test func anOptedInStoreReportsItsSyncsAndAStoreWhoseTransportCannotKeepsThemWithoutFailing() async throws {
        let world = try RealWorld()
        let admin = try world.server.token(spaces: [], admin: true)
        func devices() async throws -> [JSONValue] {
            let r = try await httpRequestAsync(port: world.server.port, "GET", "/v1/admin/devices?space=team", headers: [("Authorization", "Bearer \(admin)")])
            return (try JSONParser.parse(r.body))["devices"]?.arrayValue ?? []
        }
        let quiet = try world.device("quiet", direct: true)
        let phone = try world.device("phone", direct: true) { $0.telemetry = true }
        try await quiet.put(todo("a"), in: "todos", id: "a")
        try await quiet.sync()
        try await phone.put(todo("b"), in: "todos", id: "b")
        try await phone.put(todo("c"), in: "todos", id: "c")
        try await phone.sync()
        try await phone.sync()
        try await eventually("the phone's two syncs reached the server") {
            let list = try await devices()
            let waiting = try await phone.pendingTelemetry()
            return list.count == 1 && list[0]["clientId"] == "phone" && (list[0]["reports"]?.int64Value ?? 0) >= 1 && waiting == 0
        }
        let row = try #require(try await devices().first)
        #expect(row["pending"] == 0 && row["lastError"] == .null && row["sdkVersion"] == .string(OutpostStore.sdkVersion), "\(row)")
        #expect(row["clockOffsetMs"]?.int64Value.map { abs($0) < 5_000 } == true)
        #expect(try await devices().allSatisfy { $0["clientId"] != "quiet" }, "telemetry is opt-in")

        // A store whose transport sends no telemetry keeps its entries, and syncs as ever.
        let server = InMemorySyncServer()
        var c = OutpostStore.Configuration(space: "team")
        c.telemetry = true
        let offline = try OutpostStore.inMemory(configuration: c, transport: server.transport(device: "tablet"))
        try await offline.put(todo("d"), in: "todos", id: "d")
        #expect(try await offline.sync().pushed == 1)
        #expect(try await offline.sync().pushed == 0)
        // Each sync writes its entry before it returns; the failed sends delete none.
        #expect(try await offline.pendingTelemetry() == 2, "both entries stay in the outbox")
        await phone.close()
        await quiet.close()
    }
}
#endif
