import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import Outpost

/// Conflicts an app shows and settles: a resolver leaves a conflict for a person, the record
/// keeps its local version marked in conflict, the queue goes on, and the app settles it
/// later, after a restart; two devices and a real `outpost-server` on SQLite and PostgreSQL.
@Suite("Conflicts left for a person", .offPoolWhileBlocking, .serverLogs)
struct LeftConflictTests {
    struct Inspection: Codable, Hashable, Sendable {
        var title: String
        var status: String
        var notes: String
    }

    /// Leaves inspections' conflicts for a person; decides every other one as the default.
    static let resolver = ConflictResolver.custom(name: "inspectionsByHand") { conflict in
        conflict.collection == "inspections" ? .leaveForPerson : ConflictResolver.mergeFields().resolve(conflict, now: conflict.local.clientTime)
    }

    #if canImport(OutpostTestSupport)
    @Test(arguments: [false, true])
    func aConflictLeftForAPersonWaitsAcrossARestartAndItsSettledValueReachesTheOtherDevice(postgres: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-left-conflict")
        defer { dir.remove() }
        let database = postgres ? try await PostgresCluster.database(prefix: "leftconflict") : nil
        let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data"), arguments: database.map { ["--store", $0] } ?? []) }
        defer { server.stop() }
        let token = try server.token(sub: "u", spaces: ["team"])
        let configure: (inout OutpostStore.Configuration) -> Void = { $0.resolver = Self.resolver }
        var phone = try serverDevice("phone", server, dir, token: token, space: "team", seed: 11, configure: configure)
        let laptop = try serverDevice("laptop", server, dir, token: token, space: "team", seed: 11)

        let original = Inspection(title: "Pump 4", status: "open", notes: "")
        try await laptop.collection("inspections", of: Inspection.self).save(original, id: "i1")
        try await laptop.collection("inspections", of: Inspection.self).save(original, id: "i2")
        try await laptop.sync()
        try await phone.sync()

        // Offline on both: the same inspections edited on each.
        try await laptop.collection("inspections", of: Inspection.self).save(Inspection(title: "Pump 4", status: "done", notes: "office"), id: "i1")
        try await laptop.collection("inspections", of: Inspection.self).save(Inspection(title: "Pump 4", status: "done", notes: ""), id: "i2")
        try await laptop.sync()
        var inspections = phone.collection("inspections", of: Inspection.self)
        try await inspections.save(Inspection(title: "Pump 4", status: "open", notes: "valve leaks"), id: "i1")
        try await inspections.save(Inspection(title: "Pump 4", status: "blocked", notes: ""), id: "i2")
        try await phone.put(["text": "unrelated"], in: "notes", id: "n1")
        let told = await phone.observeConflicts()
        let report = try await phone.sync()
        #expect(report.conflicts == 2 && report.pushed == 1, "the queue went on: the note was pushed; \(report)")

        // Both conflicts wait, shown as the phone's edits, counted, listed and told.
        var entries = told.makeAsyncIterator()
        let first = try #require(await entries.next())
        #expect(first.resolution == .leaveForPerson && first.resolver == "inspectionsByHand")
        #expect(try first.local(as: Inspection.self)?.notes == "valve leaks" && first.server(as: Inspection.self)?.notes == "office")
        #expect(try first.base(as: Inspection.self) == original)
        #expect(try await inspections.get("i1")?.notes == "valve leaks", "the record shows the local version")
        #expect(try await phone.status().conflicts == 2)
        #expect(try await phone.pendingChanges().filter { $0.state == .inConflict }.map(\.id) == ["i1", "i2"])
        #expect(try await phone.sync().pushed == 0, "nothing of a record in conflict is sent")
        #expect(try await phone.nextRetryAt() == nil, "and no retry is scheduled for it")

        // A restart: still there, with both sides and the base.
        await phone.close()
        phone = try serverDevice("phone", server, dir, token: token, space: "team", seed: 11, configure: configure)
        inspections = phone.collection("inspections", of: Inspection.self)
        let waiting = try await inspections.unsettledConflicts()
        #expect(waiting.map(\.id) == ["i1", "i2"])
        let one = try #require(waiting.first)
        #expect(try one.local(as: Inspection.self)?.notes == "valve leaks")
        #expect(try one.server(as: Inspection.self) == Inspection(title: "Pump 4", status: "done", notes: "office"))
        #expect(try one.base(as: Inspection.self) == original)

        // Another edit of a record in conflict stays in conflict: the person has not settled it.
        try await inspections.save(Inspection(title: "Pump 4", status: "open", notes: "valve leaks, photo taken"), id: "i1")
        #expect(try await phone.status().conflicts == 2)

        // The person settles: i1 with a merge of both, i2 with the server's version.
        let merged = Inspection(title: "Pump 4", status: "done", notes: "office; valve leaks, photo taken")
        #expect(try await inspections.settleConflict("i1", with: merged))
        #expect(try await inspections.settleConflict("i2", .keepServer))
        #expect(try await inspections.settleConflict("i2", .keepLocal) == false, "nothing waits there any more")
        #expect(try await inspections.get("i2")?.status == "done", "the server's version stands")
        #expect(try await phone.status().conflicts == 0)
        #expect(try await phone.sync().pushed == 1)

        try await laptop.sync()
        let there = laptop.collection("inspections", of: Inspection.self)
        #expect(try await there.get("i1") == merged)
        #expect(try await there.get("i2") == Inspection(title: "Pump 4", status: "done", notes: ""))
        await phone.close()
        await laptop.close()
    }
    #endif

    /// The status line shows conflicts waiting, and `SyncState` counts them apart from the
    /// changes waiting to go.
    @Test func theStatusLineCountsConflictsApartFromWaitingChanges() {
        let status = { (pending: Int, conflicts: Int) in
            var s = SyncStatus(clientId: "c", space: "s", epoch: nil, cursor: nil, pending: pending, rejected: 0, quarantined: 0,
                               lastSyncAt: Date(timeIntervalSince1970: 1_790_000_000), lastError: nil, retiredEpochs: [], rebasing: false, restoredFrom: nil)
            s.conflicts = conflicts
            return s
        }
        #expect(SyncState(status: status(2, 2), syncing: false, progress: nil) == .conflicts(count: 2))
        #expect(SyncState(status: status(2, 2), syncing: false, progress: nil).message == "2 records have changes from two devices to settle.")
        #expect(SyncState(status: status(3, 0), syncing: false, progress: nil) == .waiting(pending: 3))
    }
}
