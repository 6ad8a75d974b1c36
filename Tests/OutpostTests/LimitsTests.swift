import OutpostCore
import Testing
@testable import Outpost
import OutpostTesting

/// Pushes split to the server's limits; pages with a byte budget; a page larger than the
/// client reads makes it ask for fewer records (seed 003, "Pages have a byte budget").
@Suite("Limits: push splitting and page budgets")
struct LimitsTests {
    /// The in-memory server answers a bad space name as the real one does: `400
    /// invalid_space` with the rule, not a 404.
    @Test func theInMemoryServerRefusesABadSpaceNameWithTheRule() async throws {
        let server = InMemorySyncServer()
        do {
            _ = try await server.push(PushRequest(clientId: "c", changes: []), space: "-x")
            Issue.record("a push to space -x was answered")
        } catch TransportError.refused(let status, let envelope) {
            #expect(status == 400 && envelope.code == "invalid_space", "\(status) \(envelope.code)")
            #expect(envelope.message.contains("is not a space name") && envelope.details?["space"] == "-x")
        }
    }

    @Test func pushesAreSplitToMaxChangesPerPush() async throws {
        var limits = Limits()
        limits.maxChangesPerPush = 3
        let world = World(limits: limits)
        let phone = try world.device("phone")
        for i in 0..<10 { try await phone.put(todo("item \(i)"), in: "todos", id: "t\(i)") }
        let report = try await phone.sync()
        #expect(report.pushed == 10)
        #expect(world.server.pushRequests == 4)
        #expect(try await phone.pendingChanges().isEmpty)
    }

    @Test func pushesAreSplitToMaxRequestBytes() async throws {
        var limits = Limits()
        limits.maxRequestBytes = 2_000
        limits.maxRecordBytes = 1_500
        let world = World(limits: limits)
        let phone = try world.device("phone")
        for i in 0..<12 { try await phone.put(todo(String(repeating: "\(i % 10)", count: 400)), in: "todos", id: "t\(i)") }
        let report = try await phone.sync()
        #expect(report.pushed == 12)
        #expect(world.server.pushRequests >= 3)
        #expect(world.server.head(space: "team") == 12)
    }

    @Test func aPageLargerThanTheClientReadsMakesItAskForFewerRecords() async throws {
        var limits = Limits()
        limits.maxRecordBytes = 4096
        let world = World(limits: limits)
        let writer = try world.device("writer")
        for i in 0..<60 { try await writer.put(todo(String(repeating: "z", count: 2000) + "\(i)"), in: "todos", id: "t\(i)") }
        try await writer.sync()
        // A server that cuts pages by count only (ignoring maxBytes), and a device that
        // reads at most 40 KB: a 1000-record page would be ~130 KB.
        world.server.inject(.ignorePageBudget, on: .pull, times: nil)
        let reader = try world.device("reader", maxResponseBytes: 40_000)
        let report = try await reader.sync()
        #expect(report.pulled == 60)
        #expect(try await reader.records(in: "todos").count == 60)
    }

    @Test func pagesKeepToTheByteBudgetTheClientAsksFor() async throws {
        var limits = Limits()
        limits.maxRecordBytes = 20_000
        let world = World(limits: limits)
        let writer = try world.device("writer")
        for i in 0..<30 { try await writer.put(todo(String(repeating: "w", count: 15_000) + "\(i)"), in: "todos", id: "t\(i)") }
        try await writer.sync()
        // The reader reads at most 100 KB; it asks for pages of at most that (minus a
        // margin, clamped by the server to at least maxRecordBytes + 16 KiB).
        let reader = try world.device("reader", maxResponseBytes: 100_000)
        let pullsBefore = world.server.pullRequests
        let report = try await reader.sync()
        #expect(report.pulled == 30)
        #expect(world.server.pullRequests - pullsBefore > 2, "several pages, each within the budget")
    }
}
