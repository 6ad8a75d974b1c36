import Foundation
import Testing
@testable import Outpost

/// The scheduler's decisions, stepped without a store, a socket, a clock or a sleep
/// (`SchedulerModel`): what it does at start, after a sync, a failure, a long poll's end, a
/// demand, and while the conditions do not hold.
@Suite("The scheduler as a model")
struct SchedulerModelTests {
    typealias Model = SchedulerModel<ContinuousClock.Instant>
    static let t0 = ContinuousClock.now
    static let online = NetworkState()
    static let offline = NetworkState(isReachable: false)

    static func model(longPoll: Duration? = .seconds(25)) -> Model {
        var options = SyncScheduler.Options()
        options.interval = .seconds(60)
        options.longPoll = longPoll
        return Model(options: options, now: t0, seed: 7)
    }

    static func at(_ seconds: Double) -> ContinuousClock.Instant { t0.advanced(by: .milliseconds(Int64(seconds * 1000))) }

    @Test func itWaitsForTheFirstNetworkStateThenSyncsAtOnce() {
        var m = Self.model()
        #expect(m.next(network: nil, now: Self.t0).0 == .waitForWake(cancelPoll: false))
        #expect(m.next(network: Self.online, now: Self.t0).0 == .sync)
    }

    @Test func afterASyncItHoldsALongPollUntilTheIntervalAndAPollsChangesAreTold() {
        var m = Self.model()
        _ = m.next(network: Self.online, now: Self.t0)
        #expect(m.take(.synced(SyncReport(), retryIn: nil), now: Self.at(1)).count == 1)
        #expect(m.next(network: Self.online, now: Self.at(1)).0 == .sleep(until: Self.at(61), startPoll: 1))
        // The poll is running: the next wake does not start another.
        #expect(m.next(network: Self.online, now: Self.at(2)).0 == .sleep(until: Self.at(61), startPoll: nil))
        let told = m.take(.pollEnded(id: 1, outcome: .success(.changed)), now: Self.at(3))
        #expect(told.count == 1 && { if case .remoteChanges = told[0] { true } else { false } }())
        #expect(m.next(network: Self.online, now: Self.at(3)).0 == .sleep(until: Self.at(61), startPoll: 2))
        // A poll that says the server has more asks for a sync at once.
        _ = m.take(.pollEnded(id: 2, outcome: .success(.needsSync)), now: Self.at(4))
        #expect(m.next(network: Self.online, now: Self.at(4)).0 == .sync)
        #expect(m.next(network: Self.online, now: Self.at(70)).0 == .sync, "the interval passed")
    }

    @Test func failuresBackOffMoreEachTimeWithoutALongPollAndASyncResetsThem() {
        var m = Self.model()
        _ = m.next(network: Self.online, now: Self.t0)
        var delays: [Duration] = []
        for attempt in 1...4 {
            let told = m.take(.failed(.transport(.noAnswer("down"))), now: Self.t0)
            #expect(told.count == 1 && m.failures == attempt)
            guard case .sleep(let until, let poll) = m.next(network: Self.online, now: Self.t0).0 else {
                Issue.record("no sleep after failure \(attempt)")
                return
            }
            #expect(poll == nil, "no long poll while failing")
            delays.append(until - Self.t0)
        }
        #expect(delays.last! > delays.first!, "the backoff grows: \(delays)")
        _ = m.take(.synced(SyncReport(), retryIn: nil), now: Self.at(1))
        #expect(m.failures == 0)
    }

    @Test func aRetryDueBeforeTheIntervalBringsTheNextSyncForward() {
        var m = Self.model(longPoll: nil)
        _ = m.next(network: Self.online, now: Self.t0)
        _ = m.take(.synced(SyncReport(), retryIn: .seconds(5)), now: Self.t0)
        #expect(m.next(network: Self.online, now: Self.t0).0 == .sleep(until: Self.t0.advanced(by: .milliseconds(5_001)), startPoll: nil))
    }

    @Test func whileTheConditionsFailItWaitsCancelsThePollKeepsDemandsAndSyncsWhenTheyHold() {
        var m = Self.model()
        _ = m.next(network: Self.online, now: Self.t0)
        _ = m.take(.synced(SyncReport(), retryIn: nil), now: Self.t0)
        #expect(m.next(network: Self.online, now: Self.t0).0 == .sleep(until: Self.at(60), startPoll: 1))
        let (step, told) = m.next(network: Self.offline, now: Self.at(1))
        #expect(step == .waitForWake(cancelPoll: true) && told.count == 1, "told once, the poll cancelled")
        let again = m.next(network: Self.offline, now: Self.at(2))
        #expect(again.0 == .waitForWake(cancelPoll: false) && again.1.isEmpty, "not told again for the same reason")
        // The cancelled poll's outcome does not count.
        #expect(m.take(.pollEnded(id: 1, outcome: .failure(.transport(.noAnswer("cancelled")))), now: Self.at(3)).isEmpty && m.failures == 0)
        _ = m.take(.demanded, now: Self.at(4))
        #expect(m.next(network: Self.offline, now: Self.at(4)).0 == .waitForWake(cancelPoll: false), "a demand waits for the conditions")
        #expect(m.next(network: Self.online, now: Self.at(5)).0 == .sync, "and runs as soon as they hold")
    }

    @Test func eachNewReasonToWaitIsToldOnceAndADemandWaitsThroughThemAll() {
        var options = SyncScheduler.Options()
        options.longPoll = nil
        options.conditions = SyncConditions(wifiOnly: true, pausesInLowPowerMode: true)
        var m = Model(options: options, now: Self.t0, seed: 7)
        func waits(_ state: NetworkState, at seconds: Double) -> [SyncConditions.Unmet] {
            let (step, told) = m.next(network: state, now: Self.at(seconds))
            #expect(step == .waitForWake(cancelPoll: false))
            return told.compactMap { if case .waitingForConditions(let why) = $0 { why } else { nil } }
        }
        let cellular = NetworkState(isReachable: true, isWiFi: false), saving = NetworkState(isLowPower: true)
        #expect(waits(cellular, at: 0) == [.notOnWiFi])
        _ = m.take(.demanded, now: Self.at(1))
        #expect(waits(cellular, at: 1) == [], "the same reason is not told again")
        #expect(waits(Self.offline, at: 2) == [.noNetwork])
        #expect(waits(cellular, at: 3) == [.notOnWiFi])
        #expect(waits(saving, at: 4) == [.lowPowerMode])
        #expect(m.next(network: Self.online, now: Self.at(5)).0 == .sync, "the demand runs once they all hold")
    }

    @Test func aClosedStoreStopsTheRun() {
        var m = Self.model()
        _ = m.next(network: Self.online, now: Self.t0)
        #expect(m.take(.failed(.closed), now: Self.t0).isEmpty)
        #expect(m.next(network: Self.online, now: Self.t0).0 == .stop)
    }
}
