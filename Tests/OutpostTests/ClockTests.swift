import Foundation
import OutpostCore
import OutpostCrypto
import OutpostTestBasics
import Synchronization
import Testing
@testable import Outpost
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// The device's clock against the server's (docs/client.md, "The device's clock"), over a
/// real `outpost-server` child, with injected device clocks.
@Suite("The device's clock", .offPoolWhileBlocking, .serialized, .serverLogs)
struct ClockTests {
    static let year: Int64 = 365 * 86_400_000

    @Test func aDeviceAYearAheadLearnsItsOffsetAndNoLongerWinsTheConflictsItResolves() async throws {
        let world = try RealWorld()
        let ahead = try world.device("ahead", direct: true, resolver: .lastWriteWins(), clockOffset: Self.year)
        let other = try world.device("other", direct: true, resolver: .lastWriteWins(), clockOffset: 5_000)
        #expect(try await ahead.clockStatus().offset.map(\.milliseconds) == nil, "nothing measured before a sync")
        try await ahead.put(todo("first"), in: "todos", id: "t0")
        try await ahead.sync()
        let status = try await ahead.clockStatus()
        let offset = try #require(status.offset.map(\.milliseconds))
        #expect(abs(offset + Self.year) < 5_000 && (status.uncertainty.map(\.milliseconds) ?? .max) < 5_000, "offset \(offset)")
        #expect(status.anomalies == [.offsetBeyondThreshold])

        // The device a year ahead writes first; another device writes the same record a
        // little later (its clock a few seconds ahead, within the drift limit), and pushes
        // first. Resolving the conflict itself, the device a year ahead compares its edit
        // by the server's clock, so the later edit wins.
        try await ahead.put(todo("ahead, earlier"), in: "todos", id: "t1")
        let edit = try #require(try await ahead.pendingChanges().first)
        #expect(abs(edit.clientTime.milliseconds - systemMilliseconds()) < 5_000, "the edit carries the server's time, not the device's")
        try await other.put(todo("other, later"), in: "todos", id: "t1")
        #expect(try await other.sync().pushed == 1)
        let report = try await ahead.sync()
        #expect(report.conflicts == 1)
        #expect(try await ahead.data("todos", "t1") == todo("other, later"))
        #expect(try await world.serverData("t1") == todo("other, later"))
        await ahead.close()
        await other.close()
    }

    @Test func aDeviceSetBackAnHourBetweenTwoSyncsIsFlagged() async throws {
        let world = try RealWorld()
        // The device's clock runs with the wall clock, shifted by what the test sets: the
        // measured offsets are then off by no more than the uncertainty the store reports
        // (half a round trip and the header's second), however long the syncs take.
        let shift = Atomic<Int64>(0)
        let phone = try world.device("phone", direct: true) { $0.clock = { Date(milliseconds: systemMilliseconds() + shift.load(ordering: .relaxed)) } }
        try await phone.sync()
        let first = try await phone.clockStatus()
        let firstSlack = try #require(first.uncertainty.map(\.milliseconds)) + 1
        #expect(first.offset.map(\.milliseconds).map { abs($0) <= firstSlack } == true && !first.isAnomalous, "\(first)")

        shift.store(-3_600_000, ordering: .relaxed)
        try await phone.sync()
        let second = try await phone.clockStatus()
        let secondSlack = try #require(second.uncertainty.map(\.milliseconds)) + 1
        #expect(second.anomalies == [.jumpedBackwards, .offsetBeyondThreshold], "\(second)")
        #expect(second.jumpedBackwards.map(\.milliseconds).map { abs($0 - 3_600_000) <= firstSlack + secondSlack } == true, "\(second)")
        #expect(second.offset.map(\.milliseconds).map { abs($0 - 3_600_000) <= secondSlack } == true, "\(second)")

        // No further jump: the flag clears, the offset stays.
        try await phone.sync()
        let third = try await phone.clockStatus()
        #expect(third.jumpedBackwards.map(\.milliseconds) == nil && third.anomalies == [.offsetBeyondThreshold], "\(third)")
        // The threshold is the configuration's.
        await phone.close()
        let tolerant = try world.device("phone", direct: true) {
            $0.clock = { Date(milliseconds: systemMilliseconds() + shift.load(ordering: .relaxed)) }
            $0.clockThreshold = .seconds(7200)
        }
        #expect(try await tolerant.clockStatus().isAnomalous == false)
        await tolerant.close()
    }
}

/// Compaction seen from the SDK (docs/client.md, "Pulling"): `history_compacted` and a new
/// epoch side by side. Both pull the space from the start; only the new epoch, a history
/// that may have lost writes, has the store offer its copies again.
@Suite("Compacted history against a new epoch", .offPoolWhileBlocking, .serialized, .serverLogs)
struct CompactedHistoryTests {
    @Test func aCompactedHistoryDropsWhatWasDeletedWhereANewEpochOffersItAgain() async throws {
        let world = try RealWorld()
        let phone = try world.device("phone")
        let laptop = try world.device("laptop")
        try await phone.put(todo("one"), in: "todos", id: "t1")
        try await phone.put(todo("two"), in: "todos", id: "t2")
        try await phone.sync()
        try await laptop.sync()
        // The laptop goes offline with an unsent edit; meanwhile t1 is deleted, and its
        // tombstone purged.
        try await laptop.put(todo("three"), in: "todos", id: "t3")
        try await phone.delete(from: "todos", id: "t1")
        try await phone.sync()
        let admin = try world.server.token(spaces: [], admin: true)
        let compacted = try await httpRequestAsync(port: world.server.port, "POST", "/v1/admin/compact?retentionDays=0", headers: [("Authorization", "Bearer \(admin)")])
        #expect(compacted.status == 200 && compacted.text.contains("\"purged\":1"), "\(compacted.text)")

        let report = try await laptop.sync()
        #expect(report.historyCompacted && !report.epochChanged && report.reoffered == 0, "\(report)")
        #expect(try await laptop.records(in: "todos").map(\.id) == ["t2", "t3"], "t1 was deleted; its copy is dropped, not offered again")
        #expect(try await world.serverRecords().keys.sorted() == ["t2", "t3"], "the laptop's edit went; t1 did not come back")
        #expect(try await laptop.sync().historyCompacted == false, "the cursor is past the horizon now")

        // Side by side: the server loses its data (a new epoch). The store offers its copies
        // again, as it must: the new history may lack them.
        try world.restartEmpty()
        let after = try await laptop.sync()
        #expect(after.epochChanged && after.reoffered == 2 && !after.historyCompacted, "\(after)")
        #expect(try await world.serverRecords().keys.sorted() == ["t2", "t3"])
        await phone.close()
        await laptop.close()
    }
}

/// The store's own compaction (docs/client.md, "Compaction").
@Suite("Compacting the store's file", .offPoolWhileBlocking, .serialized, .serverLogs)
struct StoreCompactionTests {
    @Test func compactionKeepsWhatIsUnsettledAndRemovesWhatNoSyncNeedsOnDemandAndOnItsSchedule() async throws {
        let world = try RealWorld()
        let keys = FileKeyStore(path: world.dir.appending("keys"))
        try SpaceKeys.create(space: "team", in: keys)
        let clock = ManualClock(systemMilliseconds())
        let phone = try world.device("phone", direct: true) {
            $0.encryption = .spaceKey(keys)
            $0.clock = clock.dates()
        }
        for i in 0..<50 { try await phone.put(["text": .string(String(repeating: "x", count: 2000)), "i": .number(JSONNumber(Int64(i)))], in: "notes", id: "n\(i)") }
        try await phone.sync()
        for i in 0..<50 { try await phone.delete(from: "notes", id: "n\(i)") }
        try await phone.sync()
        // Offline: an edit absorbed by a newer one leaves a sealed form no change needs; an
        // unsent edit and a rejected change must stay.
        try await phone.put(["text": "draft"], in: "notes", id: "draft")
        try await phone.put(["text": "draft, again"], in: "notes", id: "draft")
        #expect(try await phone.read { d in try d.db.scalarInt("SELECT count(*) FROM sealed") } == 2)
        // A download's leftover from a crash, an hour and more old, and a fresh one.
        let downloads = world.dir.appending("downloads")
        try FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        try await phone.noteDownloadDirectory(downloads)
        let stale = downloads + "/.photo.jpg.abc.outpost-download", fresh = downloads + "/.photo.jpg.def.outpost-download"
        for path in [stale, fresh] { #expect(FileManager.default.createFile(atPath: path, contents: Data("partial".utf8))) }
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-7200)], ofItemAtPath: stale)

        let report = try await phone.compact()
        #expect(report.sealedFormsPruned == 1 && report.temporaryFilesRemoved == 1, "\(report)")
        #expect(!FileManager.default.fileExists(atPath: stale) && FileManager.default.fileExists(atPath: fresh))
        #expect(try await phone.pendingChanges().count == 1)
        #expect(try await phone.data("notes", "draft") == ["text": "draft, again"])
        #expect(try await phone.read { d in try d.db.scalarInt("PRAGMA auto_vacuum") } == 2, "the file frees pages incrementally from now on")
        #expect(try await phone.read { d in try d.db.scalarInt("PRAGMA freelist_count") } == 0)
        #expect(try await phone.sync().pushed == 1, "the unsent edit still goes")

        // On its schedule: not before the interval has passed since the last compaction.
        let last = try await phone.read { try $0.meta(.compactedAt) }
        try await phone.sync()
        #expect(try await phone.read { try $0.meta(.compactedAt) } == last)
        clock.advance(8 * 86_400_000)
        try await phone.sync()
        #expect(try await phone.read { try $0.meta(.compactedAt) } == String(clock.now), "compacted after the sync, a week later")
        await phone.close()
    }
}
#endif
