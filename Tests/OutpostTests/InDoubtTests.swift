import OutpostCore
import Testing
@testable import Outpost
import OutpostTesting

/// "An answer nobody read settles nothing" (seed 003): lost answers, proxies' 504s, cut-off
/// bodies and answers longer than the transport reads leave a change in doubt; it is sent
/// again under the same changeId, and a pulled version waits aside until its answer is known.
@Suite("In-doubt pushes")
struct InDoubtTests {
    /// Two devices synced on one record, `phone` with `resolver`.
    private func synced(_ world: World, phoneResolver: ConflictResolver) async throws -> (OutpostStore, OutpostStore) {
        let phone = try world.device("phone", resolver: phoneResolver)
        let laptop = try world.device("laptop")
        try await phone.put(todo("v1"), in: "todos", id: "t1")
        try await phone.sync()
        try await laptop.sync()
        return (phone, laptop)
    }

    @Test(arguments: [
        InMemorySyncServer.Fault.loseAnswer, .gatewayTimeout(applied: true), .cutOff,
    ])
    func aLostAnswerRetriedAfterAnotherDeviceWroteLetsNothingOlderWin(_ fault: InMemorySyncServer.Fault) async throws {
        let world = World()
        // clientWins is where a wrong guess hurts: a change believed unapplied would be
        // written again over the laptop's newer edit.
        let (phone, laptop) = try await synced(world, phoneResolver: .clientWins)
        try await phone.put(todo("phone edit"), in: "todos", id: "t1")
        let changeId = try #require(try await phone.pendingChanges().first?.changeId)
        world.server.inject(fault, on: .push, device: "phone")
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        let doubted = try #require(try await phone.pendingChanges().first)
        #expect(doubted.state == .inDoubt)
        #expect(doubted.changeId == changeId)
        #expect(world.serverData("todos", "t1") == todo("phone edit"), "the server did apply it")

        // Another device writes in between.
        world.clock.advance(1000)
        try await laptop.sync()
        try await laptop.put(todo("laptop edit, later"), in: "todos", id: "t1")
        try await laptop.sync()

        world.clock.advance(600_000)
        let report = try await phone.sync()
        #expect(report.pushed == 1, "the retry under the same changeId was answered as applied (replayed)")
        #expect(report.conflicts == 0)
        #expect(world.serverData("todos", "t1") == todo("laptop edit, later"), "the older edit did not come back")
        #expect(try await phone.data("todos", "t1") == todo("laptop edit, later"))
        #expect(try await phone.pendingChanges().isEmpty)
    }

    @Test func aProxy504BeforeTheServerAppliedIsAlsoInDoubtAndSettlesOnRetry() async throws {
        let world = World()
        let phone = try world.device("phone")
        try await phone.put(todo("a"), in: "todos", id: "t1")
        world.server.inject(.gatewayTimeout(applied: false), on: .push)
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        #expect(try await phone.queueStates() == [.inDoubt], "a 504 page says nothing about the server")
        world.clock.advance(600_000)
        let report = try await phone.sync()
        #expect(report.pushed == 1)
        #expect(world.serverData("todos", "t1") == todo("a"))
    }

    @Test func anAnswerLargerThanTheTransportReadsIsInDoubt() async throws {
        let world = World()
        let phone = try world.device("phone", maxResponseBytes: 600)
        for i in 0..<20 { try await phone.put(todo("item \(i)"), in: "todos", id: "t\(i)") }
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        #expect(try await phone.queueStates().allSatisfy { $0 == .inDoubt })
        #expect(world.server.head(space: "team") == 20, "applied on the server, though nobody read the answer")
    }

    /// After a lost answer, the next explicit sync sends the in-doubt change at once,
    /// whatever its retry time: two syncs in a row settle it (the server replays its answer)
    /// and show the other device's newer write.
    @Test func anExplicitSyncSendsAnInDoubtChangeAtOnce() async throws {
        let world = World()
        let phone = try await phoneInDoubtThenLaptopWrites(world)
        let before = world.server.pushRequests
        let report = try await phone.sync()
        #expect(world.server.pushRequests == before + 1, "the in-doubt change was not sent again")
        #expect(report.pushed == 1 && report.pending == 0)
        #expect(try await phone.queueStates().isEmpty)
        #expect(try await phone.data("todos", "t1") == todo("laptop"))
    }

    /// The phone's put is applied but its answer lost (in doubt); then the laptop writes
    /// the same record. Returns the phone.
    private func phoneInDoubtThenLaptopWrites(_ world: World) async throws -> OutpostStore {
        let (phone, laptop) = try await synced(world, phoneResolver: .lastWriteWins())
        try await phone.put(todo("phone"), in: "todos", id: "t1")
        world.server.inject(.loseAnswer, on: .push, device: "phone")
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        #expect(try await phone.queueStates() == [.inDoubt])
        try await laptop.sync()
        try await laptop.put(todo("laptop"), in: "todos", id: "t1")
        try await laptop.sync()
        return phone
    }

    @Test func aPulledVersionWhileAChangeIsInDoubtIsKeptAndTheAnswerNeverMovesItBack() async throws {
        // Order 1: another device writes after the in-doubt change was applied. The pulled
        // version is the record's copy at once (the app still sees its own edit); the
        // answer, older, never moves it back, and the newer write shows once it is known.
        let world = World()
        let phone = try await phoneInDoubtThenLaptopWrites(world)
        // Before the in-doubt change's retry time the phone's scheduler syncs again: nothing
        // is due, and the pull brings the laptop's version while the change is still in doubt.
        try await phone.sync(dueOnly: true)
        #expect(try await phone.queueStates() == [.inDoubt])
        let held = try #require(try await phone.record(in: "todos", id: "t1"))
        #expect(held.data == todo("phone"), "the app sees its edit while the change is in doubt")
        #expect(held.version == world.server.record(space: "team", collection: "todos", id: "t1")?.version)
        world.clock.advance(600_000)
        try await phone.sync()
        let settled = try #require(try await phone.record(in: "todos", id: "t1"))
        #expect(settled.data == todo("laptop"))
        #expect(settled.version == world.server.record(space: "team", collection: "todos", id: "t1")?.version)
    }

    @Test func aPulledVersionOlderThanTheAnswerNeverReplacesIt() async throws {
        // Order 2: the laptop wrote first; the phone's in-doubt change was applied after it
        // (the phone had pulled the laptop's write, so no conflict). A stale page bringing
        // the laptop's version back while the phone's answer is unknown must not win.
        let world = World()
        let (phone, laptop) = try await synced(world, phoneResolver: .serverWins)
        try await laptop.put(todo("laptop"), in: "todos", id: "t1")
        try await laptop.sync()
        try await phone.sync()
        let laptopVersion = try #require(try await phone.record(in: "todos", id: "t1")?.version)
        let beforePhoneWrite = world.server.snapshot()
        try await phone.put(todo("phone, later"), in: "todos", id: "t1")
        world.server.inject(.loseAnswer, on: .push, device: "phone")
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        // A lagging replica serves the phone a page from before its write: cursor at 1,
        // so the laptop's version 2 comes again.
        // Its scheduler syncs before the in-doubt change's retry time: nothing is pushed, and
        // the pull is kept aside.
        try await phone.resetSync()
        world.server.inject(.staleHistory(beforePhoneWrite), on: .pull, device: "phone")
        try await phone.sync(dueOnly: true)
        #expect(try await phone.queueStates() == [.inDoubt])
        #expect(try await phone.data("todos", "t1") == todo("phone, later"))
        // The retry's answer arrives; the replica still lags (its pull brings nothing new),
        // so what the store keeps comes from the answer and the kept-aside version alone.
        world.clock.advance(600_000)
        world.server.inject(.staleHistory(beforePhoneWrite), on: .pull, device: "phone")
        try await phone.sync()
        let settled = try #require(try await phone.record(in: "todos", id: "t1"))
        #expect(settled.data == todo("phone, later"), "the answer (seq 3) is newer than the kept-aside version (seq 2)")
        #expect(settled.version?.seq == 3)
        #expect(laptopVersion.seq == 2)
        #expect(world.serverData("todos", "t1") == todo("phone, later"))
    }
}
