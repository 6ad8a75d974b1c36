import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost

/// The scheduler. Time is asserted only on a `TestClock`, which moves when the test says
/// (a deadline on the real clock only stops a hung test).
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
        let phoneLog = SchedulerEventLog(phoneScheduler), laptopLog = SchedulerEventLog(laptopScheduler)
        await phoneScheduler.start()
        await laptopScheduler.start()
        var laptopEvents = await laptop.observe(collection: "todos").makeAsyncIterator()
        let synced: @Sendable ([SchedulerEventLog.Seen]) -> Bool = { $0.contains { if case .synced = $0 { true } else { false } } }
        try await phoneLog.until("the phone has synced once", synced)
        try await laptopLog.until("the laptop has synced once", synced)
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
        let log = SchedulerEventLog(scheduler)
        await scheduler.start()
        guard case .failed = try await log.until("the sync at start ended", { $0.count == 1 })[0] else { Issue.record("expected a failure"); return }
        // The next try is an hour away; a demand does not wait for it.
        try await phone.put(todo("x"), in: "todos", id: "t1")
        #expect(try await log.until("the edit's sync ended") { $0.count == 2 }[1] == .synced(pushed: 1))
        scheduler.syncNow()
        #expect(try await log.until("the demanded sync ended") { $0.count == 3 }[2] == .synced(pushed: 0))
        await scheduler.stop()
    }

    // MARK: By the clock (a TestClock moves only when the test says)

    /// A phone's scheduler on a `TestClock`, with no long poll and an hour's interval unless
    /// `configure` says otherwise (not started).
    static func onTestClock(_ configure: (inout SyncScheduler.Options) -> Void) throws -> (World, TestClock, SyncScheduler) {
        let world = World()
        let clock = TestClock()
        var options = SyncScheduler.Options()
        options.interval = .seconds(3600)
        options.longPoll = nil
        configure(&options)
        return (world, clock, SyncScheduler(store: try world.device("phone"), options: options, conditions: AlwaysReachableConditions(), clock: clock))
    }

    /// After the sync at start, the next one is due an interval later by the scheduler's
    /// clock: it sleeps until then, a second short of it wakes nothing, and at the interval
    /// it syncs and sleeps until the next.
    @Test func syncsComeOneIntervalApartByTheClock() async throws {
        let (world, clock, scheduler) = try Self.onTestClock { $0.interval = .seconds(60) }
        let log = SchedulerEventLog(scheduler)
        await scheduler.start()
        #expect(try await log.until("the sync at start ended") { $0.count == 1 } == [.synced(pushed: 0)])
        let at: @Sendable (Int64) -> TestClock.Instant = { seconds in TestClock.Instant(offset: .seconds(seconds)) }
        try await clock.untilSleepers("the scheduler sleeps until the interval ends") { $0 == [at(60)] }
        clock.advance(by: .seconds(59))
        #expect(clock.sleepers == [at(60)], "a second early, nothing woke")
        let pullsBefore = world.server.pullRequests
        clock.advance(by: .seconds(1))
        #expect(try await log.until("the interval's sync ended") { $0.count == 2 }[1] == .synced(pushed: 0))
        #expect(world.server.pullRequests > pullsBefore)
        try await clock.untilSleepers("the scheduler sleeps until the next interval ends") { $0 == [at(120)] }
        await scheduler.stop()
    }

    /// A failed sync is tried again after the backoff's delay by the scheduler's clock
    /// (2 s, half jittered: between 1 and 2 s), not before.
    @Test func aFailedSyncIsRetriedAfterItsBackoffByTheClock() async throws {
        let (world, clock, scheduler) = try Self.onTestClock { $0.backoff = .init(initial: .seconds(2), maximum: .seconds(300)) }
        world.server.inject(.refuseConnection, on: .info)
        let log = SchedulerEventLog(scheduler)
        await scheduler.start()
        guard case .failed = try await log.until("the sync at start ended", { $0.count == 1 })[0] else { Issue.record("expected a failure"); return }
        try await clock.untilSleepers("the scheduler sleeps for the backoff") { $0.count == 1 }
        let retry = try #require(clock.sleepers.first)
        #expect(retry.offset >= .seconds(1) && retry.offset <= .seconds(2), "the first backoff is 1 to 2 s: \(retry)")
        clock.advance(by: retry.offset - .milliseconds(1))
        #expect(clock.sleepers == [retry], "a millisecond early, nothing woke")
        clock.advance(by: .milliseconds(1))
        #expect(try await log.until("the retry ended") { $0.count == 2 }[1] == .synced(pushed: 0), "the retry syncs")
        await scheduler.stop()
    }
}
