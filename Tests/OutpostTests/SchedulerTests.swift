import OutpostCore
import OutpostTestSupport
import Testing
@testable import Outpost

/// The scheduler; no timing is asserted (a deadline only stops a hung test).
@Suite("Sync scheduler")
struct SchedulerTests {
    @Test func aLocalEditReachesTheOtherDeviceThroughItsLongPoll() async throws {
        let world = World()
        let phone = try world.device("phone"), laptop = try world.device("laptop")
        var options = SyncScheduler.Options()
        options.interval = .seconds(3600)
        options.longPoll = .seconds(10)
        // The server is in process: the host's network has no say.
        let phoneScheduler = SyncScheduler(store: phone, options: options, conditions: AlwaysReachableConditions())
        let laptopScheduler = SyncScheduler(store: laptop, options: options, conditions: AlwaysReachableConditions())
        await phoneScheduler.start()
        await laptopScheduler.start()
        var laptopEvents = await laptop.observe(collection: "todos").makeAsyncIterator()
        try await eventually("both devices have synced once") {
            let a = try await laptop.status().epoch, b = try await phone.status().epoch
            return a != nil && b != nil
        }
        try await phone.put(todo("hello"), in: "todos", id: "t1")
        let event = await laptopEvents.next()
        #expect(event?.origin == .remote)
        #expect(try await laptop.data("todos", "t1") == todo("hello"))
        await phoneScheduler.stop()
        await laptopScheduler.stop()
    }

    @Test func failedSyncsBackOffAndADemandSyncsAtOnce() async throws {
        let world = World()
        let phone = try world.device("phone")
        var options = SyncScheduler.Options()
        options.interval = .seconds(3600)
        options.longPoll = nil
        options.backoff = .init(initial: .seconds(3600), maximum: .seconds(3600))
        let scheduler = SyncScheduler(store: phone, options: options, conditions: AlwaysReachableConditions())
        world.server.inject(.refuseConnection, on: .info)
        var events = scheduler.events.makeAsyncIterator()
        await scheduler.start()
        guard case .failed = await events.next() else { Issue.record("expected a failure"); return }
        // The next try is an hour away; a demand does not wait for it.
        try await phone.put(todo("x"), in: "todos", id: "t1")
        guard case .synced(let report) = await events.next() else { Issue.record("expected a sync"); return }
        #expect(report.pushed == 1)
        scheduler.syncNow()
        guard case .synced = await events.next() else { Issue.record("expected a sync"); return }
        await scheduler.stop()
    }
}
