import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost

@Suite("Queue: ids at enqueue, states, coalescing, ordering, rejections")
struct QueueTests {
    @Test func changeIdIsGivenWhenQueuedAndKeptAcrossFailedSends() async throws {
        let world = World()
        let phone = try world.device("phone")
        try await phone.put(todo("a"), in: "todos", id: "t1")
        let queued = try #require(try await phone.pendingChanges().first)
        #expect(queued.state == .pending)
        world.server.inject(.refuseConnection, on: .push)
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        let afterFailure = try #require(try await phone.pendingChanges().first)
        #expect(afterFailure.changeId == queued.changeId)
        #expect(afterFailure.state == .failed, "not sent: a failed attempt, not in doubt")
        #expect(afterFailure.attempts == 1)
        #expect(afterFailure.nextAttemptAt.milliseconds > world.clock.now, "the retry time is stored with the change")
        world.clock.advance(600_000)
        try await phone.sync()
        #expect(try await phone.pendingChanges().isEmpty)
        let version = try #require(try await phone.record(in: "todos", id: "t1")?.version)
        #expect(world.server.record(space: "team", collection: "todos", id: "t1")?.version == version)
    }

    @Test func backoffIsStoredJitteredAndGrows() async throws {
        var rng = Randomness(seed: 42)
        let policy = OutpostStore.BackoffPolicy(initial: .seconds(1), maximum: .seconds(60), jitter: 0.5)
        let delays = (1...8).map { policy.delayMs(attempt: $0, using: &rng) }
        for (n, d) in delays.enumerated() {
            let full = min(60_000, 1000 << Int64(n))
            #expect(d >= full / 2 && d <= full, "attempt \(n + 1): \(d) ms is within [full/2, full]")
        }
        var a = Randomness(seed: 1), b = Randomness(seed: 2)
        #expect(policy.delayMs(attempt: 3, using: &a) != policy.delayMs(attempt: 3, using: &b), "jitter spreads devices apart")
    }

    @Test func putThenPutCoalescesIntoOneChangeOnTheFirstBase() async throws {
        let world = World()
        let phone = try world.device("phone")
        let laptop = try world.device("laptop")
        try await phone.put(todo("v1"), in: "todos", id: "t1")
        try await phone.sync()
        let base = try #require(try await phone.record(in: "todos", id: "t1")?.version)
        try await phone.put(todo("v2"), in: "todos", id: "t1")
        let first = try #require(try await phone.pendingChanges().first)
        try await phone.put(todo("v3"), in: "todos", id: "t1")
        let queue = try await phone.pendingChanges()
        #expect(queue.count == 1)
        #expect(queue[0].data == todo("v3"))
        #expect(queue[0].baseVersion == base, "the base stays the last server version")
        #expect(queue[0].changeId != first.changeId, "new content, new changeId")
        try await phone.sync()
        #expect(world.server.pushRequests == 2)
        try await laptop.sync()
        #expect(try await laptop.data("todos", "t1") == todo("v3"))
        #expect(world.server.head(space: "team") == 2, "v2 never reached the server")
    }

    @Test func putThenDeleteOfANeverPushedRecordLeavesNothing() async throws {
        let world = World()
        let phone = try world.device("phone")
        try await phone.put(todo("draft"), in: "todos", id: "t1")
        #expect(try await phone.delete(from: "todos", id: "t1"))
        #expect(try await phone.pendingChanges().isEmpty)
        #expect(try await phone.record(in: "todos", id: "t1") == nil)
        try await phone.sync()
        #expect(world.server.head(space: "team") == 0, "nothing was sent")
    }

    @Test func putThenDeleteOfAPushedRecordBecomesOneDelete() async throws {
        let world = World()
        let phone = try world.device("phone")
        try await phone.put(todo("a"), in: "todos", id: "t1")
        try await phone.sync()
        try await phone.put(todo("b"), in: "todos", id: "t1")
        try await phone.delete(from: "todos", id: "t1")
        let queue = try await phone.pendingChanges()
        #expect(queue.count == 1 && queue[0].op == .delete)
        try await phone.sync()
        #expect(world.server.record(space: "team", collection: "todos", id: "t1")?.deleted == true)
        // Delete then put again: a put, on the tombstone's version.
        try await phone.put(todo("back"), in: "todos", id: "t1")
        try await phone.sync()
        #expect(world.serverData("todos", "t1") == todo("back"))
    }

    @Test func queueOrderIsKeptAcrossRecordsWhenCoalescing() async throws {
        let world = World()
        let phone = try world.device("phone")
        try await phone.put(["name": "Ada"], in: "contacts", id: "c1")
        try await phone.put(["contact": "c1", "total": 10], in: "invoices", id: "i1")
        try await phone.put(["name": "Ada L."], in: "contacts", id: "c1")
        let queue = try await phone.pendingChanges()
        #expect(queue.map(\.collection) == ["contacts", "invoices"], "the parent keeps its place before the child")
        try await phone.sync()
        let contact = try #require(world.server.record(space: "team", collection: "contacts", id: "c1"))
        let invoice = try #require(world.server.record(space: "team", collection: "invoices", id: "i1"))
        #expect(contact.version.seq < invoice.version.seq)
    }

    @Test func anEditWhileInFlightWaitsAndIsSentOnTheNewVersion() async throws {
        let world = World()
        let transport = WatchedTransport(world.server.transport(device: "phone"))
        let phone = try world.device("phone", transport: transport)
        try await phone.put(todo("first"), in: "todos", id: "t1")
        transport.holdAnswer(of: .push)
        let sync = Task { try await phone.sync() }
        try await transport.until("the push reaches the server, its answer held") { $0.held == 1 }
        // The first change is in flight (applied on the server, answer pending).
        try await phone.put(todo("second"), in: "todos", id: "t1")
        let queue = try await phone.pendingChanges()
        #expect(queue.map(\.state) == [.inFlight, .pending], "an in-flight change is never rewritten")
        sync.cancel()
        _ = await sync.result
        #expect(try await phone.queueStates() == [.inDoubt, .pending])
        world.clock.advance(600_000)  // past the in-doubt change's backoff
        let report = try await phone.sync()
        #expect(report.conflicts == 0, "the second edit went on the version the first one got")
        #expect(report.pushed == 2)
        #expect(world.serverData("todos", "t1") == todo("second"))
        #expect(world.server.head(space: "team") == 2)
    }

    @Test func aRejectedChangeIsKeptWithItsReasonAndBlocksNothing() async throws {
        var limits = Limits()
        limits.maxRecordBytes = 200
        let world = World(limits: limits)
        let phone = try world.device("phone")
        var events = await phone.observe(collection: "todos").makeAsyncIterator()
        try await phone.put(todo("fine 1"), in: "todos", id: "a")
        try await phone.put(todo(String(repeating: "x", count: 400)), in: "todos", id: "big")
        try await phone.put(todo("fine 2"), in: "todos", id: "b")
        let report = try await phone.sync()
        #expect(report.pushed == 2)
        #expect(report.rejected == 1)
        let rejected = try await phone.rejectedChanges()
        #expect(rejected.count == 1)
        #expect(rejected.first?.errorCode == "record_too_large")
        #expect(rejected.first?.lastError?.isEmpty == false)
        #expect(rejected.first?.data?["title"]?.stringValue?.count == 400, "the edit is kept for the app")
        #expect(try await phone.pendingChanges().isEmpty)
        #expect(try await phone.record(in: "todos", id: "big") == nil, "a record the server never had leaves the view")
        #expect(world.serverData("todos", "a") != nil && world.serverData("todos", "b") != nil)
        for _ in 0..<3 { _ = await events.next() }
        let removal = await events.next()
        #expect(removal?.keys.contains(RecordKey(collection: "todos", id: "big")) == true)
        // Later edits of other records keep flowing; the app may discard the rejected one.
        try await phone.put(todo("fine 3"), in: "todos", id: "c")
        try await phone.sync()
        #expect(world.serverData("todos", "c") != nil)
        #expect(try await phone.discardRejectedChange(rejected[0].changeId))
        #expect(try await phone.rejectedChanges().isEmpty)
    }

    @Test func aChangeLargerThanAnyRequestIsRejectedLocally() async throws {
        var limits = Limits()
        limits.maxRequestBytes = 1000
        let world = World(limits: limits)
        let phone = try world.device("phone")
        try await phone.put(todo(String(repeating: "y", count: 2000)), in: "todos", id: "huge")
        try await phone.put(todo("small"), in: "todos", id: "small")
        let report = try await phone.sync()
        #expect(report.rejected == 1)
        #expect(try await phone.rejectedChanges().first?.errorCode == "payload_too_large")
        #expect(world.serverData("todos", "small") != nil)
    }
}
