import OutpostCore
import Synchronization
import Testing
@testable import Outpost

/// Resolvers, and the rules around them (seed 003): only real local changes reach a
/// resolver, never with a version older than the stored one; future timestamps count only
/// up to the drift limit; ties are broken the same way on every device; conflicts count as
/// failed attempts with backoff.
@Suite("Conflicts and resolvers")
struct ConflictTests {
    /// Records every conflict a custom resolver is asked about.
    final class Recorder: Sendable {
        let seen = Mutex<[Conflict]>([])
        let answer: Resolution
        init(_ answer: Resolution) { self.answer = answer }
        var resolver: ConflictResolver {
            .custom { [self] conflict in
                seen.withLock { $0.append(conflict) }
                return answer
            }
        }
        var conflicts: [Conflict] { seen.withLock { $0 } }
    }

    /// Phone and laptop synced on t1 = v1; both edit it offline; the laptop pushes first.
    private func concurrentEdits(_ world: World, phone resolver: ConflictResolver) async throws -> OutpostStore {
        let phone = try world.device("phone", resolver: resolver)
        try await world.concurrentEdits(phone: phone, laptop: try world.device("laptop"))
        return phone
    }

    @Test func serverWinsKeepsTheServersVersion() async throws {
        let world = World()
        let phone = try await concurrentEdits(world, phone: .serverWins)
        let report = try await phone.sync()
        #expect(report.conflicts == 1)
        #expect(try await phone.data("todos", "t1") == todo("laptop"))
        #expect(world.serverData("todos", "t1") == todo("laptop"))
        #expect(try await phone.pendingChanges().isEmpty)
    }

    @Test func clientWinsWritesTheLocalEditOnTopAsANewChange() async throws {
        let world = World()
        let phone = try await concurrentEdits(world, phone: .clientWins)
        let original = try #require(try await phone.pendingChanges().first?.changeId)
        let report = try await phone.sync()
        #expect(report.conflicts == 1)
        #expect(report.pushed == 1, "the resolved write went out in the same sync")
        #expect(world.serverData("todos", "t1") == todo("phone"))
        #expect(world.server.head(space: "team") == 3)
        let before = world.server.records(space: "team")
        #expect(before.count == 1)
        _ = original
    }

    @Test func lastWriteWinsPicksTheLaterEdit() async throws {
        let world = World()
        let phone = try await concurrentEdits(world, phone: .lastWriteWins())
        try await phone.sync()
        #expect(world.serverData("todos", "t1") == todo("laptop"), "the laptop edited 1 s later")
        #expect(try await phone.data("todos", "t1") == todo("laptop"))
    }

    @Test func customResolversMergeAndTheMergeIsANewChangeOnTheCurrentVersion() async throws {
        let world = World()
        let phone = try world.device("phone", resolver: .custom { c in
            var merged = c.server.data ?? [:]
            for (k, v) in c.local.data ?? [:] where k == "done" { merged[k] = v }
            return .write(merged)
        })
        let laptop = try world.device("laptop")
        try await phone.put(todo("v1"), in: "todos", id: "t1")
        try await phone.sync()
        try await laptop.sync()
        try await phone.put(todo("v1", done: true), in: "todos", id: "t1")
        try await laptop.put(todo("renamed"), in: "todos", id: "t1")
        try await laptop.sync()
        try await phone.sync()
        #expect(world.serverData("todos", "t1") == todo("renamed", done: true))
        try await laptop.sync()
        #expect(try await laptop.data("todos", "t1") == todo("renamed", done: true))
    }

    @Test func onlyRealLocalChangesReachTheResolver() async throws {
        let world = World()
        let recorder = Recorder(.keepServer)
        let phone = try world.device("phone", resolver: recorder.resolver)
        let laptop = try world.device("laptop")
        for i in 0..<5 { try await laptop.put(todo("l\(i)"), in: "todos", id: "t\(i)") }
        try await laptop.sync()
        try await phone.sync()
        // The laptop edits and deletes records the phone holds without local changes.
        try await laptop.put(todo("edited"), in: "todos", id: "t0")
        try await laptop.delete(from: "todos", id: "t1")
        try await laptop.sync()
        try await phone.sync()
        #expect(recorder.conflicts.isEmpty, "pulled versions of records without local changes never meet the resolver")
        #expect(try await phone.data("todos", "t0") == todo("edited"))
        // A conflict whose server version already holds what the local change wants.
        try await phone.put(todo("same"), in: "todos", id: "t2")
        try await laptop.put(todo("same"), in: "todos", id: "t2")
        try await laptop.sync()
        let report = try await phone.sync()
        #expect(report.conflicts == 1)
        #expect(recorder.conflicts.isEmpty, "nothing to decide: the server holds the same content")
        #expect(try await phone.pendingChanges().isEmpty)
        // A real conflict does reach it, with the local edit and the server's version.
        try await phone.put(todo("phone"), in: "todos", id: "t3")
        try await laptop.put(todo("laptop"), in: "todos", id: "t3")
        try await laptop.sync()
        try await phone.sync()
        #expect(recorder.conflicts.count == 1)
        #expect(recorder.conflicts.first?.local.data == todo("phone"))
        #expect(recorder.conflicts.first?.server.data == todo("laptop"))
    }

    @Test func theResolverNeverSeesAVersionOlderThanTheStoredOne() async throws {
        // A lagging replica answers the push with a conflict naming an old version. With
        // serverWins, taking that version would roll the record back and bring a deleted
        // record back to life.
        let world = World()
        let recorder = Recorder(.keepServer)
        let phone = try world.device("phone", resolver: recorder.resolver)
        let laptop = try world.device("laptop")
        try await laptop.put(todo("old"), in: "todos", id: "t1")
        try await laptop.sync()
        let lagging = world.server.snapshot()
        try await laptop.delete(from: "todos", id: "t1")
        try await laptop.sync()
        try await phone.sync()
        let stored = try #require(try await phone.record(in: "todos", id: "t1"))
        #expect(stored.deleted && stored.version?.seq == 2)
        // The phone edits the deleted record (a re-create on the tombstone's version); the
        // replica answers with its version 1.
        try await phone.put(todo("phone"), in: "todos", id: "t1")
        world.server.inject(.staleHistory(lagging), on: .push, device: "phone")
        try await phone.sync()
        let seen = try #require(recorder.conflicts.first)
        #expect(seen.server.version.seq == 2, "the stored tombstone (seq 2), not the replica's seq 1")
        #expect(seen.server.deleted)
        let after = try #require(try await phone.record(in: "todos", id: "t1"))
        #expect(after.deleted, "serverWins kept the deletion; the old version did not come back")
        #expect(after.version?.seq == 2)
    }

    @Test func aDeviceClockAYearAheadDoesNotWinEveryConflict() async throws {
        let world = World()
        let year: Int64 = 365 * 24 * 3600 * 1000
        let ahead = try world.device("ahead", clockOffset: year)
        let honest = try world.device("honest")
        try await ahead.put(todo("v1"), in: "todos", id: "t1")
        try await ahead.sync()
        try await honest.sync()
        // The honest device edits offline; the device whose clock is a year ahead writes
        // first; ten minutes later (real time) the honest device's edit... was made later
        // than the other's, by the server's clock, yet its timestamp is a year behind.
        world.clock.advance(1_000)
        try await ahead.put(todo("from the future"), in: "todos", id: "t1")
        try await ahead.sync()
        world.clock.advance(10 * 60_000)
        try await honest.put(todo("really later"), in: "todos", id: "t1")
        try await honest.sync()
        #expect(world.serverData("todos", "t1") == todo("really later"),
                "the future timestamp counts only up to the server's commit time + 5 minutes")
    }

    @Test func futureLocalTimestampsAreCappedAtNowPlusDrift() {
        let now: Int64 = 1_000_000_000
        let drift: Int64 = 300_000
        let server = RecordState(collection: "c", id: "i", version: Version("E.5")!, deleted: false, data: ["a": 1],
                                 updatedAt: now + drift, updatedBy: "zz-device", clientTime: now + drift)
        let local = LocalEdit(data: ["a": 2], deleted: false, clientTime: now + 365 * 86_400_000, changeId: "c1", clientId: "aa-device")
        let conflict = Conflict(collection: "c", id: "i", local: local, server: server)
        let resolver = ConflictResolver.lastWriteWins(maxClockDrift: .milliseconds(drift))
        // Capped, the two times tie at now + drift; the greater updatedBy ("zz-device") wins.
        #expect(resolver.resolve(conflict, now: now) == .keepServer)
        let times = ConflictResolver.effectiveTimes(conflict, now: now, driftMs: drift)
        #expect(times.local == now + drift)
    }

    @Test func tiesGoToTheGreaterUpdatedByThenTheGreaterChangeId() {
        let server = RecordState(collection: "c", id: "i", version: Version("E.5")!, deleted: false, data: ["a": 1],
                                 updatedAt: 1000, updatedBy: "laptop", clientTime: 1000)
        let fromPhone = LocalEdit(data: ["a": 2], deleted: false, clientTime: 1000, changeId: "b", clientId: "phone")
        let fromAlpha = LocalEdit(data: ["a": 2], deleted: false, clientTime: 1000, changeId: "b", clientId: "alpha")
        let resolver = ConflictResolver.lastWriteWins()
        #expect(resolver.resolve(Conflict(collection: "c", id: "i", local: fromPhone, server: server), now: 2000) == .keepLocal)
        #expect(resolver.resolve(Conflict(collection: "c", id: "i", local: fromAlpha, server: server), now: 2000) == .keepServer)
        let sameDevice = LocalEdit(data: ["a": 2], deleted: false, clientTime: 1000, changeId: "b", clientId: "laptop")
        #expect(resolver.resolve(Conflict(collection: "c", id: "i", local: sameDevice, server: server, serverChangeId: "a"), now: 2000) == .keepLocal)
        #expect(resolver.resolve(Conflict(collection: "c", id: "i", local: sameDevice, server: server, serverChangeId: "c"), now: 2000) == .keepServer)
    }

    @Test(arguments: [true, false])
    func everyDevicePicksTheSameWinnerOnATie(phoneFirst: Bool) async throws {
        let world = World()
        let phone = try world.device("phone")
        let laptop = try world.device("laptop")
        try await phone.put(todo("v1"), in: "todos", id: "t1")
        try await phone.sync()
        try await laptop.sync()
        // The same clientTime on both devices.
        try await phone.put(todo("phone"), in: "todos", id: "t1")
        try await laptop.put(todo("laptop"), in: "todos", id: "t1")
        let (first, second) = phoneFirst ? (phone, laptop) : (laptop, phone)
        try await first.sync()
        try await second.sync()
        try await first.sync()
        // "phone" > "laptop" byte by byte: the phone's edit wins whoever pushed first.
        #expect(world.serverData("todos", "t1") == todo("phone"))
        #expect(try await phone.data("todos", "t1") == todo("phone"))
        #expect(try await laptop.data("todos", "t1") == todo("phone"))
    }

    @Test func aServerThatAnswersEveryPushWithAConflictMeetsBackoff() async throws {
        let world = World()
        let phone = try world.device("phone", resolver: .clientWins)
        try await phone.put(todo("v1"), in: "todos", id: "t1")
        try await phone.sync()
        try await phone.put(todo("v2"), in: "todos", id: "t1")
        world.server.inject(.conflictEveryChange, on: .push, times: nil)
        let before = world.server.pushRequests
        // The scheduler's syncs keep to the retry times.
        for _ in 0..<50 { try await phone.sync(dueOnly: true) }
        let pushes = world.server.pushRequests - before
        #expect(pushes <= 2, "\(pushes) pushes for 50 scheduled syncs at one instant: conflicts back off")
        let change = try #require(try await phone.pendingChanges().first)
        #expect(change.state == .failed)
        #expect(change.attempts >= 2)
        #expect(change.nextAttemptAt.milliseconds > world.clock.now)
        // An explicit sync does not wait for the retry time: the app asked for it now.
        let beforeExplicit = world.server.pushRequests
        try await phone.sync()
        #expect(world.server.pushRequests > beforeExplicit, "an explicit sync sent nothing")
        // Time moves on: the delays grow with every conflict.
        var lastDelay: Int64 = 0
        for _ in 0..<4 {
            let due = try #require(try await phone.pendingChanges().first?.nextAttemptAt.milliseconds)
            let delay = due - world.clock.now
            #expect(delay >= lastDelay / 2, "non-decreasing up to jitter")
            lastDelay = delay
            world.clock.set(due)
            try await phone.sync()
        }
        #expect(lastDelay >= 4_000)
        world.server.clearFaults()
        world.clock.advance(3_600_000)
        try await phone.sync()
        #expect(world.serverData("todos", "t1") == todo("v2"))
        #expect(try await phone.pendingChanges().isEmpty)
    }
}
