import Foundation
import OutpostCore
import Testing
@testable import Outpost

/// Bugs the integrity harness (`outpost-sim`, docs/simulation.md) found, each as a scenario
/// on the in-memory server. `Tests/SimulationTests/RegressionTests.swift` replays the seeds
/// that found them.
@Suite("Found by outpost-sim")
struct SimulationFindingsTests {
    /// A device whose clock `skew` moves on top of the world's.
    private func skewedDevice(_ world: World, _ name: String, skew: ManualClock, resolver: ConflictResolver = .serverWins) throws -> OutpostStore {
        try world.device(name, resolver: resolver) { c in
            let clock = world.clock
            c.clock = { clock.now + skew.now }
        }
    }

    /// Seeds 92 and 227: after a restore, a pending edit made on the old history's copy was
    /// re-based on whatever the new history held, so it overwrote, without the resolver, a
    /// write another device made after the restore.
    @Test func aPendingEditMeetsTheResolverOverAWriteMadeAfterARestore() async throws {
        let world = World()
        let a = try world.device("a", resolver: .serverWins), b = try world.device("b", resolver: .serverWins)
        try await a.put(todo("v1"), in: "todos", id: "r1")
        try await a.sync()
        try await b.sync()
        let backup = world.server.snapshot()
        world.clock.advance(1_000)
        try await a.put(todo("a's offline edit of v1"), in: "todos", id: "r1")
        world.clock.advance(1_000)
        world.server.restore(backup)  // the same v1, a new epoch
        world.clock.advance(1_000)
        try await b.put(todo("b's edit after the restore"), in: "todos", id: "r1")
        try await b.sync()
        #expect(world.serverData("todos", "r1") == todo("b's edit after the restore"))

        let report = try await a.sync()
        #expect(report.epochChanged)
        #expect(report.conflicts == 1, "a's edit never saw b's write: the resolver decides")
        #expect(world.serverData("todos", "r1") == todo("b's edit after the restore"), "the server wins")
        #expect(try await a.data("todos", "r1") == todo("b's edit after the restore"))
        #expect(try await a.pendingChanges().isEmpty)
    }

    /// The other side of the same rule: a pending edit made on a copy newer than the restored
    /// one is re-based on it and wins without a conflict (the device knew more).
    @Test func aPendingEditOnANewerCopyThanTheRestoredOneIsReBased() async throws {
        let world = World()
        let a = try world.device("a", resolver: .serverWins)
        try await a.put(todo("v1"), in: "todos", id: "r1")
        try await a.sync()
        let backup = world.server.snapshot()
        world.clock.advance(1_000)
        try await a.put(todo("v2"), in: "todos", id: "r1")
        try await a.sync()
        world.clock.advance(1_000)
        try await a.put(todo("v3 on v2"), in: "todos", id: "r1")
        world.server.restore(backup)  // v1 again: older than the v2 the edit was made on
        let report = try await a.sync()
        #expect(report.epochChanged)
        #expect(report.conflicts == 0)
        #expect(world.serverData("todos", "r1") == todo("v3 on v2"))
    }

    /// Seed 356 (and 334, 359): a retry time stored before the device's clock was set back a
    /// year held the change for a year.
    @Test func aChangeWaitingForItsRetryIsSentAfterTheClockWasSetBack() async throws {
        let world = World()
        let skew = ManualClock(0)
        let a = try skewedDevice(world, "a", skew: skew)
        try await a.put(todo("one"), in: "todos", id: "r1")
        world.server.inject(.refuseConnection, on: .push)
        await #expect(throws: OutpostError.self) { try await a.sync() }
        let waiting = try #require(try await a.pendingChanges().first)
        #expect(waiting.state == .failed)
        #expect(waiting.nextAttemptAt > world.clock.now)

        skew.set(-365 * 86_400_000)  // the user sets the clock back a year
        world.clock.advance(5_000)
        let retry = try #require(try await a.nextRetryAt())
        #expect(retry <= world.clock.now + skew.now, "due now, not in a year")
        let report = try await a.sync()
        #expect(report.pushed == 1)
        #expect(world.serverData("todos", "r1") == todo("one"))
    }

    /// Seeds 10, 285 and 275: a device's copy known only from a push answer had no server
    /// time, so the next change of history could not order it against the new history's
    /// copy. Push answers now carry `updatedAt`.
    @Test func aPushAnswerGivesTheCopyItsServerTime() async throws {
        let world = World()
        let a = try world.device("a", resolver: .serverWins), b = try world.device("b", resolver: .serverWins)
        try await a.put(todo("a's"), in: "todos", id: "r1")
        world.server.inject(.loseAnswer, on: .pull, device: "a")
        await #expect(throws: OutpostError.self) { try await a.sync() }  // pushed, the pull after it lost
        let pushed = try #require(try await a.record(in: "todos", id: "r1"))
        #expect(pushed.version != nil)
        #expect(pushed.updatedAt == world.server.record(space: "team", collection: "todos", id: "r1")?.updatedAt)

        world.clock.advance(1_000)
        try await a.put(todo("a's offline edit"), in: "todos", id: "r1")
        world.server.restartEmpty()
        world.clock.advance(1_000)
        try await b.put(todo("b's, after the data loss"), in: "todos", id: "r1")
        try await b.sync()
        let report = try await a.sync()
        #expect(report.conflicts == 1, "b's write is newer than the copy a's edit was made on")
        #expect(world.serverData("todos", "r1") == todo("b's, after the data loss"))
    }

    /// The wire: `updatedAt` of an applied result round-trips, in both encoders.
    @Test func anAppliedResultCarriesUpdatedAt() throws {
        let epoch = try #require(Epoch("01JDQ7ZK3M8X4N2B6C9V0T5R1W"))
        let response = PushResponse(epoch: epoch, results: [
            .applied("c1", version: Version(epoch: epoch, seq: 3), updatedAt: 1_764_430_000_123),
            .applied("c2", version: Version(epoch: epoch, seq: 2), replayed: true),
        ])
        #expect(response.encoded() == response.json.encoded())
        let decoded = try PushResponse.decode(response.encoded())
        #expect(decoded.results[0].updatedAt == 1_764_430_000_123)
        #expect(decoded.results[1].updatedAt == nil)
        #expect(decoded == response)
    }
}
