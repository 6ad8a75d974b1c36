import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost
import OutpostTesting

/// docs/protocol.md section 5, "How a client treats a new epoch", and seed 003's "Epochs go one
/// way" and "Two requests before a new epoch counts".
@Suite("Epochs")
struct EpochTests {
    /// Everything a device shows, for "nothing changed" checks.
    private func snapshot(_ store: OutpostStore) async throws -> (records: [StoredRecord], status: SyncStatus, queue: [QueuedChange]) {
        (try await store.records(includeDeleted: true), try await store.status(), try await store.pendingChanges())
    }

    private func assertUnchanged(_ store: OutpostStore, since before: (records: [StoredRecord], status: SyncStatus, queue: [QueuedChange])) async throws {
        let after = try await snapshot(store)
        #expect(after.records == before.records)
        #expect(after.status.epoch == before.status.epoch)
        #expect(after.status.cursor == before.status.cursor)
        #expect(after.status.retiredEpochs == before.status.retiredEpochs)
        #expect(after.queue.map(\.changeId) == before.queue.map(\.changeId))
    }

    /// A server holding `r1` (written by a device "writer") and another deployment holding
    /// `s0` and `s1`, whose epoch sorts after the server's.
    private func realAndStaging() async throws -> (World, InMemorySyncServer.Snapshot) {
        let world = World()
        let writer = try world.device("writer")
        try await writer.put(todo("real"), in: "todos", id: "r1")
        try await writer.sync()
        return (world, try await otherDeployment(world, records: 2))
    }

    /// Another deployment whose epoch sorts after `world`'s (its clock is a day ahead).
    private func otherDeployment(_ world: World, records: Int) async throws -> InMemorySyncServer.Snapshot {
        let other = InMemorySyncServer(clock: world.clock.reading(offset: 86_400_000), seed: 99)
        let writer = try OutpostStore.inMemory(configuration: world.configuration("staging"), transport: other.transport(device: "staging"))
        for i in 0..<records { try await writer.put(todo("staging \(i)"), in: "todos", id: "s\(i)") }
        try await writer.sync()
        #expect(world.server.epoch < other.epoch)
        return other.snapshot()
    }

    @Test func aServerRestartedWithAnEmptyDataDirectoryGetsBackWhatDevicesHold() async throws {
        let world = World()
        let a = try world.device("a"), b = try world.device("b")
        for i in 1...3 { try await a.put(todo("a\(i)"), in: "todos", id: "r\(i)") }
        try await a.sync()
        for i in 4...5 { try await b.put(todo("b\(i)"), in: "todos", id: "r\(i)") }
        try await b.sync()
        try await a.sync()
        try await b.delete(from: "todos", id: "r5")
        try await b.sync()
        try await a.sync()
        let oldEpoch = world.server.epoch
        // Offline edits on both sides.
        world.clock.advance(1_000)
        try await a.put(todo("a1 edited"), in: "todos", id: "r1")
        try await b.put(todo("b6 new"), in: "todos", id: "r6")

        world.clock.advance(1_000)
        world.server.restartEmpty()
        #expect(world.server.records(space: "team").isEmpty)

        let reportA = try await a.sync()
        #expect(reportA.epochChanged)
        #expect(reportA.epoch == world.server.epoch)
        #expect(reportA.reoffered >= 3)
        #expect(try await a.rejectedChanges().isEmpty, "pending changes were re-based, not rejected")
        #expect(try await a.status().retiredEpochs == [oldEpoch])
        try await b.sync()
        try await a.sync()

        let expected: [String: JSONObject?] = ["r1": todo("a1 edited"), "r2": todo("a2"), "r3": todo("a3"), "r4": todo("b4"), "r5": nil, "r6": todo("b6 new")]
        for (id, data) in expected {
            #expect(world.serverData("todos", id) == data, "server \(id)")
            #expect(try await a.data("todos", id) == data, "a \(id)")
            #expect(try await b.data("todos", id) == data, "b \(id)")
        }
        #expect(world.server.record(space: "team", collection: "todos", id: "r5")?.deleted == true, "the tombstone came back too")
        #expect(try await a.pendingChanges().isEmpty)
        #expect(try await b.pendingChanges().isEmpty)
    }

    @Test func aServerRestoredFromACopyThenRotatedGetsBackTheNewerCopies() async throws {
        let world = World()
        let a = try world.device("a"), b = try world.device("b"), c = try world.device("c")
        try await a.put(todo("one"), in: "todos", id: "r1")
        try await a.put(todo("two"), in: "todos", id: "r2")
        try await a.sync()
        let backup = world.server.snapshot()
        world.clock.advance(60_000)
        try await a.put(todo("one, edited after the backup"), in: "todos", id: "r1")
        try await a.put(todo("three, created after the backup"), in: "todos", id: "r3")
        try await a.sync()
        try await b.sync()
        world.clock.advance(60_000)
        world.server.restore(backup)  // the copy, then rotate-epoch
        #expect(world.serverData("todos", "r1") == todo("one"))
        #expect(world.serverData("todos", "r3") == nil)

        let report = try await b.sync()
        #expect(report.epochChanged)
        #expect(report.reoffered == 2, "r1 is newer on the device by the server's updatedAt; r3 is missing")
        #expect(world.serverData("todos", "r1") == todo("one, edited after the backup"))
        #expect(world.serverData("todos", "r3") == todo("three, created after the backup"))
        try await a.sync()
        try await c.sync()
        for store in [a, b, c] {
            #expect(try await store.data("todos", "r1") == todo("one, edited after the backup"))
            #expect(try await store.data("todos", "r2") == todo("two"))
            #expect(try await store.data("todos", "r3") == todo("three, created after the backup"))
            #expect(try await store.pendingChanges().isEmpty)
        }
    }

    @Test func aPendingChangeIsKeptAndReBasedOnTheNewHistory() async throws {
        let world = World()
        let a = try world.device("a", resolver: .serverWins)
        try await a.put(todo("v1"), in: "todos", id: "r1")
        try await a.sync()
        try await a.put(todo("offline edit"), in: "todos", id: "r1")
        world.server.rotateEpoch()
        let report = try await a.sync()
        #expect(report.epochChanged)
        #expect(report.conflicts == 0, "the change was re-based on the new history's version")
        #expect(try await a.rejectedChanges().isEmpty)
        #expect(world.serverData("todos", "r1") == todo("offline edit"))
        let record = try #require(try await a.record(in: "todos", id: "r1"))
        #expect(record.version?.epoch == world.server.epoch)
    }

    @Test func oneAnswerFromAnotherDeploymentDoesNotCount() async throws {
        let world = World()
        let a = try world.device("a")
        try await a.put(todo("mine"), in: "todos", id: "r1")
        try await a.sync()
        let staging = try await otherDeployment(world, records: 3)
        let before = try await snapshot(a)
        world.server.inject(.staleHistory(staging), on: .pull, device: "a")
        await #expect(throws: OutpostError.epochDisagreement(first: staging.epoch.rawValue, second: world.server.epoch.rawValue)) {
            try await a.sync()
        }
        try await assertUnchanged(a, since: before)
        #expect(try await a.status().lastError?.contains("epoch") == true)
        let next = try await a.sync()
        #expect(!next.epochChanged)
        try await assertUnchanged(a, since: before)
    }

    /// Seed 003's limits #30 and #31: a push answered by another deployment (staging, a
    /// replica) behind the same URL settles nothing. Without the rule its `applied` would
    /// count as the server accepting the write (the real server would never get it) and its
    /// conflict would put the other deployment's copy in front of the real one.
    @Test func aPushAnswerFromAnotherDeploymentSettlesNothing() async throws {
        let world = World()
        let a = try world.device("a"), b = try world.device("b")
        try await a.put(todo("mine"), in: "todos", id: "r1")
        try await a.sync()
        let staging = try await otherDeployment(world, records: 2)  // holds s0 and s1
        try await a.put(todo("new"), in: "todos", id: "r2")         // staging applies it
        try await a.put(todo("clash"), in: "todos", id: "s0")       // staging answers conflict
        world.server.inject(.staleHistory(staging), on: .push, device: "a")
        let first = try await a.sync()
        #expect(first.pushed == 0 && first.conflicts == 0 && first.rejected == 0, "\(first)")
        #expect(!first.epochChanged)
        #expect(try await a.status().epoch == world.server.epoch)
        let queued = try await a.pendingChanges()
        #expect(Set(queued.map(\.id)) == ["r2", "s0"], "both stay queued")
        #expect(try await a.data("todos", "s0") == todo("clash"), "the other deployment's copy is not shown")
        #expect(try await a.record(in: "todos", id: "r2")?.version == nil)

        let second = try await a.sync()
        #expect(second.pushed == 2 && second.conflicts == 0, "\(second)")
        #expect(try await a.pendingChanges().isEmpty)
        #expect(world.serverData("todos", "r2") == todo("new"))
        #expect(world.serverData("todos", "s0") == todo("clash"))
        for id in ["r2", "s0"] {
            #expect(try await a.record(in: "todos", id: id)?.version?.epoch == world.server.epoch)
        }
        try await b.sync()
        #expect(try await b.data("todos", "r2") == todo("new"))
        #expect(try await b.data("todos", "s0") == todo("clash"))
    }

    /// Seed 003's limits #26, #27, #28 and #32. A new store whose first sync reaches only
    /// another deployment, for both of its requests, follows it (two requests are the
    /// protocol's evidence), and the real server's earlier epoch is then refused. The way
    /// back is an API, not moving the file aside: `leaveEpoch(discardingCopies: true)` drops
    /// the other deployment's copies, so none reaches the real server, and keeps the app's
    /// own edits, which then meet the real history like any edit.
    @Test func aStoreThatFollowedAnotherDeploymentLeavesItWithoutCarryingItsRecords() async throws {
        let (world, staging) = try await realAndStaging()
        let fresh = try world.device("fresh")
        world.server.inject(.staleHistory(staging), on: .pull, times: 2, device: "fresh")
        try await fresh.sync()
        #expect(try await fresh.status().epoch == staging.epoch, "#26: both requests named it")
        #expect(try await fresh.records().map(\.id) == ["s0", "s1"])
        try await fresh.put(todo("edited on a staging copy"), in: "todos", id: "s0")
        try await fresh.put(todo("mine"), in: "todos", id: "m1")

        await #expect(throws: OutpostError.self, "#27: the real server's epoch sorts earlier") { try await fresh.sync() }
        #expect(try await fresh.status().epoch == staging.epoch)
        #expect(world.serverData("todos", "s0") == nil && world.serverData("todos", "s1") == nil)

        try await fresh.leaveEpoch(discardingCopies: true)
        #expect(try await fresh.records().map(\.id) == ["m1", "s0"], "only the app's own edits are left")
        try await fresh.sync()
        try await fresh.sync()
        #expect(try await fresh.status().epoch == world.server.epoch)
        #expect(try await fresh.status().retiredEpochs == [staging.epoch])
        #expect(try await fresh.pendingChanges().isEmpty)
        #expect(try await fresh.rejectedChanges().isEmpty)
        #expect(world.serverData("todos", "s1") == nil, "a copy of the other deployment never reaches the real one")
        #expect(world.serverData("todos", "s0") == todo("edited on a staging copy"), "#28: the edit does not park")
        #expect(world.serverData("todos", "m1") == todo("mine"))
        #expect(try await fresh.records().map(\.id) == ["m1", "r1", "s0"])
        for record in try await fresh.records() { #expect(record.version?.epoch == world.server.epoch) }
    }

    /// Seed 003's limit #33: a server restored from a backup that holds the answer to a
    /// change a device still has in doubt replays that answer, naming a version of the
    /// history before the restore. The edit is not parked: it ends on the new history, and
    /// nothing stays queued.
    @Test func aReplayedAnswerFromBeforeARestoreDoesNotParkTheEdit() async throws {
        let world = World()
        let a = try world.device("a"), b = try world.device("b")
        try await a.put(todo("one"), in: "todos", id: "r1")
        try await a.sync()
        world.clock.advance(1_000)
        try await a.put(todo("two"), in: "todos", id: "r2")
        world.server.inject(.loseAnswer, on: .push, device: "a")  // applied; the answer is lost
        await #expect(throws: OutpostError.self) { try await a.sync() }
        #expect(try await a.pendingChanges().map(\.state) == [.inDoubt])
        let backup = world.server.snapshot()  // holds r2 and its change ID's answer
        world.clock.advance(1_000)
        try await b.put(todo("three"), in: "todos", id: "r3")
        try await b.sync()
        world.clock.advance(1_000)
        world.server.restore(backup)  // the copy, then rotate-epoch

        try await a.sync()
        try await a.sync()
        #expect(try await a.pendingChanges().isEmpty, "nothing parked")
        #expect(try await a.rejectedChanges().isEmpty)
        #expect(world.serverData("todos", "r2") == todo("two"))
        #expect(try await a.record(in: "todos", id: "r2")?.version?.epoch == world.server.epoch)
        try await b.sync()
        try await a.sync()
        for store in [a, b] {
            #expect(try await store.data("todos", "r2") == todo("two"))
            #expect(try await store.data("todos", "r3") == todo("three"), "b's copy was offered again")
        }
        #expect(world.serverData("todos", "r3") == todo("three"))
    }

    @Test func aNewStoresFirstPageFromAnotherDeploymentDoesNotCount() async throws {
        let (world, staging) = try await realAndStaging()
        let fresh = try world.device("fresh")
        world.server.inject(.staleHistory(staging), on: .pull, device: "fresh")
        await #expect(throws: OutpostError.self) { try await fresh.sync() }
        #expect(try await fresh.status().epoch == nil)
        #expect(try await fresh.records().isEmpty, "nothing of the first page was applied")
        try await fresh.sync()
        #expect(try await fresh.status().epoch == world.server.epoch)
        #expect(try await fresh.records().map(\.id) == ["r1"])
    }

    @Test func aNewStoreWhoseFirstTwoAnswersNameDifferentEpochsAppliesNothing() async throws {
        // A server that answers a foreign cursor with a page of its own (instead of 409).
        let world = World()
        let writer = try world.device("writer")
        try await writer.put(todo("real"), in: "todos", id: "r1")
        try await writer.sync()
        let real = world.server.epoch.rawValue
        let other = String(repeating: "Z", count: real.count)
        let fresh = try world.device("fresh")
        world.server.inject(.rewritePage({ bytes in
            Array(String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: real, with: other).utf8)
        }), on: .pull, device: "fresh", skip: 1)
        await #expect(throws: OutpostError.epochDisagreement(first: real, second: other)) { try await fresh.sync() }
        #expect(try await fresh.status().epoch == nil)
        #expect(try await fresh.records().isEmpty)
        try await fresh.sync()
        #expect(try await fresh.status().epoch == world.server.epoch)
    }

    @Test func epochsOnlyGoForward() async throws {
        let world = World()
        let a = try world.device("a")
        try await a.put(todo("v1"), in: "todos", id: "r1")
        try await a.sync()
        let earlier = world.server.snapshot()
        world.server.rotateEpoch()
        world.clock.advance(1_000)
        try await a.put(todo("v2"), in: "todos", id: "r1")
        try await a.sync()
        // A device that joined after the rotation: the earlier epoch is not one it left,
        // so only the order of epochs keeps it from going back.
        let b = try world.device("b")
        try await b.sync()
        #expect(try await b.status().epoch == world.server.epoch)
        #expect(try await b.status().retiredEpochs.isEmpty)
        for store in [a, b] {
            let before = try await snapshot(store)
            // A lagging replica still in the earlier epoch answers both requests of a sync.
            world.server.inject(.staleHistory(earlier), on: .pull, times: 2, device: store.clientId)
            await #expect(throws: OutpostError.self) { try await store.sync() }
            try await assertUnchanged(store, since: before)
            #expect(try await store.data("todos", "r1") == todo("v2"), "not rolled back")
        }
    }

    @Test func theEpochsAStoreLeftAreRefusedEvenWithoutAnEpochToCompareWith() async throws {
        let world = World()
        let a = try world.device("a")
        try await a.put(todo("v1"), in: "todos", id: "r1")
        try await a.sync()
        let first = world.server.snapshot()
        world.server.rotateEpoch()
        try await a.put(todo("v2"), in: "todos", id: "r1")
        try await a.sync()
        try await a.leaveEpoch()
        #expect(try await a.status().epoch == nil)
        #expect(try await a.status().retiredEpochs == [first.epoch, world.server.epoch])
        // Both requests of the next sync come from the first history, which the store left.
        world.server.inject(.staleHistory(first), on: .pull, times: 2, device: "a")
        await #expect(throws: OutpostError.epochRefused(epoch: first.epoch.rawValue, current: nil, reason: "the store left this epoch before")) {
            try await a.sync()
        }
        #expect(try await a.data("todos", "r1") == todo("v2"))
        // A new epoch the store never left is followed.
        world.server.rotateEpoch()
        let report = try await a.sync()
        #expect(report.epoch == world.server.epoch)
        #expect(try await a.data("todos", "r1") == todo("v2"))
    }

    @Test func theLast32EpochsAreRemembered() async throws {
        let world = World()
        let a = try world.device("a")
        try await a.put(todo("v"), in: "todos", id: "r1")
        try await a.sync()
        var epochs = [world.server.epoch]
        var snapshots = [world.server.snapshot()]
        for _ in 0..<33 {
            world.server.rotateEpoch()
            try await a.sync()
            epochs.append(world.server.epoch)
            snapshots.append(world.server.snapshot())
        }
        let retired = try await a.status().retiredEpochs
        #expect(retired.count == 32)
        #expect(retired == Array(epochs[1..<33]), "the oldest one left was forgotten")
        try await a.leaveEpoch()
        #expect(try await a.status().retiredEpochs == Array(epochs[2...33]), "leaving the current one pushed out the oldest")
        // The oldest epoch still remembered is refused...
        world.server.inject(.staleHistory(snapshots[2]), on: .pull, times: 2, device: "a")
        await #expect(throws: OutpostError.self) { try await a.sync() }
        #expect(try await a.status().epoch == nil)
        // ...while the one before it, forgotten, is followed once both requests report it.
        world.server.inject(.staleHistory(snapshots[1]), on: .pull, times: 2, device: "a")
        try await a.sync()
        #expect(try await a.status().epoch == epochs[1])
    }

    @Test func aServerWhoseHistoryWentBackWithoutANewEpochChangesNothing() async throws {
        let world = World()
        let a = try world.device("a")
        try await a.put(todo("v1"), in: "todos", id: "r1")
        try await a.sync()
        let backup = world.server.snapshot()
        try await a.put(todo("v2"), in: "todos", id: "r1")
        try await a.put(todo("x"), in: "todos", id: "r2")
        try await a.sync()
        world.server.restoreKeepingEpoch(backup)  // the operator forgot rotate-epoch
        let before = try await snapshot(a)
        await #expect(throws: OutpostError.self) { try await a.sync() }
        try await assertUnchanged(a, since: before)
        #expect(try await a.status().lastError?.contains("cursor") == true)
    }

    @Test func aClientKilledInTheMiddleOfARePullResumesIt() async throws {
        try await withTemporaryDirectory { dir in
            let world = World()
            let path = dir.appending("a.sqlite")
            let small: (inout OutpostStore.Configuration) -> Void = { $0.pageLimit = 2 }
            let transport = WatchedTransport(world.server.transport(device: "a"))
            var a = try world.device("a", path: path, transport: transport, configure: small)
            for i in 0..<9 { try await a.put(todo("r\(i)"), in: "todos", id: "r\(i)") }
            try await a.sync()
            let backup = world.server.snapshot()
            world.clock.advance(10_000)
            try await a.put(todo("r0 after backup"), in: "todos", id: "r0")
            try await a.put(todo("r9 after backup"), in: "todos", id: "r9")
            try await a.sync()
            world.clock.advance(10_000)
            world.server.restore(backup)
            // The re-pull dies after two of its pages: the cursor's 409, then pages 1 and 2.
            transport.holdAnswer(of: .pull, skip: 3)
            let sync = Task { [a] in try await a.sync() }
            try await transport.until("the fourth pull reaches the server, its answer held") { $0.held == 1 }
            await a.close()
            sync.cancel()
            _ = await sync.result
            a = try world.device("a", path: path, configure: small)
            let status = try await a.status()
            #expect(status.epoch == world.server.epoch)
            #expect(status.rebasing, "the re-pull's state survived")
            #expect(try await a.records().count == 10, "nothing was deleted on the way")
            try await a.sync()
            #expect(try await a.status().rebasing == false)
            for i in 0..<10 {
                let want = i == 0 ? todo("r0 after backup") : i == 9 ? todo("r9 after backup") : todo("r\(i)")
                #expect(world.serverData("todos", "r\(i)") == want, "server r\(i)")
                #expect(try await a.data("todos", "r\(i)") == want, "device r\(i)")
            }
            await a.close()
        }
    }
}
