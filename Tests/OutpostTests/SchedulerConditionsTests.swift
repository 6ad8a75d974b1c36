import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost

/// The scheduler's conditions (network, Wi-Fi, Low Power Mode), driven by
/// `ManualNetworkConditions` over real in-memory stores. Every wait is woken by the
/// scheduler's events or the transport's requests, with the suite's deadline.
///
/// "No sync happened" is proved without sleeping: after `syncNow()` the test moves the
/// state to another unmet condition, and the scheduler's event for that new reason comes
/// from a turn of its loop that had already taken the demand (`syncNow()` sets it before
/// the state changes); a sync it ran for the demand would have been reported before it.
/// With the default conditions there is no other reason to move to, so the offline test
/// checks what was sent up to the network's return, and the Wi-Fi and Low Power tests
/// carry the proof that a demand does not run while the scheduler waits.
@Suite("Sync scheduler conditions")
struct SchedulerConditionsTests {
    /// A phone's in-memory store on a counting transport, and its scheduler under `state`
    /// with quiet options adjusted by `configure`, started and logging its events.
    static func started(_ state: NetworkState, _ configure: (inout SyncScheduler.Options) -> Void = { _ in }) async throws
        -> (World, WatchedTransport, OutpostStore, ManualNetworkConditions, SyncScheduler, SchedulerEventLog) {
        let world = World()
        let transport = WatchedTransport(world.server.transport(device: "phone"))
        let phone = try OutpostStore.inMemory(configuration: world.configuration("phone"), transport: transport)
        let network = ManualNetworkConditions(state)
        var options = SyncScheduler.Options.quiet()
        configure(&options)
        let scheduler = SyncScheduler(store: phone, options: options, conditions: network)
        let log = SchedulerEventLog(scheduler)
        await scheduler.start()
        return (world, transport, phone, network, scheduler, log)
    }

    @Test func conditionsNameTheFirstOneUnmet() {
        let any = SyncConditions()
        #expect(any.unmet(in: .offline) == .noNetwork)
        #expect(any.unmet(in: .cellular) == nil)
        #expect(any.unmet(in: NetworkState(isLowPower: true)) == nil)
        let wifiOnly = SyncConditions(wifiOnly: true)
        #expect(wifiOnly.unmet(in: .offline) == .noNetwork)
        #expect(wifiOnly.unmet(in: .cellular) == .notOnWiFi)
        #expect(wifiOnly.unmet(in: .wifi) == nil)
        // Wi-Fi only needs a network even when `requiresNetwork` is off.
        #expect(SyncConditions(requiresNetwork: false, wifiOnly: true).unmet(in: .offline) == .noNetwork)
        #expect(SyncConditions(requiresNetwork: false).unmet(in: .offline) == nil)
        let saver = SyncConditions(pausesInLowPowerMode: true)
        #expect(saver.unmet(in: NetworkState(isLowPower: true)) == .lowPowerMode)
        #expect(saver.unmet(in: NetworkState(isReachable: false, isWiFi: false, isLowPower: true)) == .noNetwork)
        #expect(saver.unmet(in: .cellular) == nil)
    }

    @Test func offlineAnEditWaitsAndSyncsAtOnceWhenTheNetworkReturns() async throws {
        let (world, transport, phone, network, scheduler, log) = try await Self.started(.offline)
        try await log.until("the scheduler waits for the network") { $0 == [.waiting(.noNetwork)] }
        #expect(transport.requests == 0)

        try await phone.put(todo("written offline"), in: "todos", id: "t1")
        scheduler.syncNow()
        // The interval is an hour: only the network's return syncs now.
        network.set(.wifi)
        try await log.until("the edit is synced") { $0.contains(.synced(pushed: 1)) }
        #expect(log.throughFirstSync == [.waiting(.noNetwork), .synced(pushed: 1)])
        #expect(world.serverData("todos", "t1") == todo("written offline"))
        await scheduler.stop()
    }

    @Test func wifiOnlyWaitsOnCellularAndSyncsOnWiFi() async throws {
        let (world, transport, phone, network, scheduler, log) = try await Self.started(.cellular) { $0.conditions.wifiOnly = true }
        try await log.until("the scheduler waits for Wi-Fi") { $0 == [.waiting(.notOnWiFi)] }

        try await phone.put(todo("on cellular"), in: "todos", id: "t1")
        scheduler.syncNow()
        network.set(.offline)
        try await log.until("the scheduler took the demand and waits for a network") { $0 == [.waiting(.notOnWiFi), .waiting(.noNetwork)] }
        #expect(transport.requests == 0)
        #expect(world.serverData("todos", "t1") == nil)

        network.set(.cellular)
        try await log.until("the scheduler waits for Wi-Fi again") { $0.last == .waiting(.notOnWiFi) }
        #expect(transport.requests == 0)
        network.set(.wifi)
        try await log.until("the edit is synced on Wi-Fi") { $0.contains(.synced(pushed: 1)) }
        #expect(log.throughFirstSync == [.waiting(.notOnWiFi), .waiting(.noNetwork), .waiting(.notOnWiFi), .synced(pushed: 1)])
        #expect(world.serverData("todos", "t1") == todo("on cellular"))
        await scheduler.stop()
    }

    @Test func lowPowerModePausesSyncsUntilItEnds() async throws {
        let (world, transport, phone, network, scheduler, log) = try await Self.started(NetworkState(isReachable: true, isWiFi: true, isLowPower: true)) { $0.conditions.pausesInLowPowerMode = true }
        try await log.until("the scheduler pauses in Low Power Mode") { $0 == [.waiting(.lowPowerMode)] }

        try await phone.put(todo("saving power"), in: "todos", id: "t1")
        scheduler.syncNow()
        network.set(NetworkState(isReachable: false, isWiFi: false, isLowPower: true))
        try await log.until("the scheduler took the demand and waits for a network") { $0 == [.waiting(.lowPowerMode), .waiting(.noNetwork)] }
        #expect(transport.requests == 0)

        network.set(NetworkState(isReachable: true, isWiFi: false, isLowPower: false))
        try await log.until("the edit is synced once Low Power Mode ends") { $0.contains(.synced(pushed: 1)) }
        #expect(log.throughFirstSync == [.waiting(.lowPowerMode), .waiting(.noNetwork), .synced(pushed: 1)])
        #expect(world.serverData("todos", "t1") == todo("saving power"))
        await scheduler.stop()
    }

    @Test func aLongPollEndsWhenTheNetworkGoesAndReopensWhenItReturns() async throws {
        let (_, transport, _, network, scheduler, log) = try await Self.started(.wifi) { $0.longPoll = .seconds(60) }
        // The long poll opens after the sync is told: the log first, then the transport.
        try await log.until("a sync") { $0 == [.synced(pushed: 0)] }
        try await transport.until("then a long poll") { $0.openPolls == 1 }
        #expect(log.seen == [.synced(pushed: 0)])

        network.set(.offline)
        // Cancelled, not timed out: a poll that ran its minute would not count here.
        try await transport.until("the long poll is cancelled") { $0.cancelledPolls == 1 && $0.openPolls == 0 }
        try await log.until("the scheduler waits for the network") { $0 == [.synced(pushed: 0), .waiting(.noNetwork)] }
        #expect(transport.openPolls == 0)

        network.set(.cellular)
        try await log.until("a sync at once") { $0 == [.synced(pushed: 0), .waiting(.noNetwork), .synced(pushed: 0)] }
        try await transport.until("then a new long poll") { $0.openPolls == 1 }
        #expect(log.seen == [.synced(pushed: 0), .waiting(.noNetwork), .synced(pushed: 0)])
        #expect(transport.cancelledPolls == 1)
        await scheduler.stop()
    }

    #if !canImport(Network)
    @Test func withoutTheNetworkFrameworkTheConditionsAlwaysHold() async {
        let conditions = SyncScheduler.platformConditions()
        #expect(conditions is AlwaysReachableConditions)
        #expect(conditions.current == NetworkState())
        var states: [NetworkState] = []
        for await state in conditions.updates() { states.append(state) }
        #expect(states == [NetworkState()])
    }
    #endif
}

extension SyncScheduler.Options {
    /// Options under which nothing but a demand or the conditions start a sync: an hour's
    /// interval, no long poll.
    static func quiet() -> Self {
        var options = Self()
        options.interval = .seconds(3600)
        options.longPoll = nil
        return options
    }
}

/// A scheduler's events as they arrive, in a form tests compare.
final class SchedulerEventLog: Sendable {
    enum Seen: Equatable, Sendable {
        case synced(pushed: Int)
        case failed(OutpostError)
        case remoteChanges
        case waiting(SyncConditions.Unmet)
    }

    private let list = Watched<[Seen]>([])
    private let reader: Task<Void, Never>

    /// Reads `scheduler.events` (the log is then its only reader) until the log is released.
    init(_ scheduler: SyncScheduler) {
        let list = self.list, events = scheduler.events
        reader = Task {
            for await event in events {
                let seen: Seen = switch event {
                case .synced(let report): .synced(pushed: report.pushed)
                case .failed(let error): .failed(error)
                case .remoteChanges: .remoteChanges
                case .waitingForConditions(let why): .waiting(why)
                }
                list.update { $0.append(seen) }
            }
        }
    }

    deinit { reader.cancel() }

    /// Everything seen so far.
    var seen: [Seen] { list.value }

    /// Waits until `condition` holds of what was seen, woken by each event; see `Watched.until`.
    @discardableResult
    func until(_ what: String, fileID: String = #fileID, line: Int = #line, _ condition: @escaping @Sendable ([Seen]) -> Bool) async throws -> [Seen] {
        try await list.until(what, fileID: fileID, line: line, condition)
    }

    /// What was seen up to the first sync's end, included. A local edit's demand reaches the
    /// scheduler through the store's observers, so it may still come after that sync and
    /// start one more, which a test need not wait for.
    var throughFirstSync: [Seen] {
        let seen = self.seen
        guard let end = seen.firstIndex(where: { if case .synced = $0 { true } else if case .failed = $0 { true } else { false } }) else { return seen }
        return Array(seen[...end])
    }
}
