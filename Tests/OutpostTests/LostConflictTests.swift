import Foundation
import OutpostCore
import Testing
@testable import Outpost

#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// The device that lost a conflict learns it: another device's resolution replaced its
/// acknowledged write, and its conflict journal records the decision when it pulls the
/// resolved version; two devices and a real `outpost-server` on SQLite and PostgreSQL.
@Suite("Conflicts lost to another device", .offPoolWhileBlocking, .serverLogs)
struct LostConflictTests {
    struct Inspection: Codable, Hashable, Sendable {
        var title: String
        var status: String
        var notes: String
    }

    @Test(arguments: [false, true])
    func theDeviceWhoseWriteAResolutionReplacedJournalsTheDecision(postgres: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-lost-conflict")
        defer { dir.remove() }
        let database = postgres ? try await PostgresCluster.database(prefix: "lostconflict") : nil
        let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data"), arguments: database.map { ["--store", $0] } ?? []) }
        defer { server.stop() }
        let token = try server.token(sub: "u", spaces: ["team"])
        // The phone merges its conflicts field by field, except checklists' ones, which it
        // leaves for a person.
        let configure: (inout OutpostStore.Configuration) -> Void = {
            $0.resolver = .custom(name: "byHandForChecks") { conflict in
                conflict.id.hasPrefix("check") ? .leaveForPerson : ConflictResolver.mergeFields().resolve(conflict, now: conflict.local.clientTime)
            }
        }
        var phone = try serverDevice("phone", server, dir, token: token, space: "team", seed: 21, configure: configure)
        var laptop = try serverDevice("laptop", server, dir, token: token, space: "team", seed: 21)
        let original = Inspection(title: "Pump 4", status: "open", notes: "")
        for id in ["i1", "check1", "i3"] { try await laptop.collection("inspections", of: Inspection.self).save(original, id: id) }
        try await laptop.sync()
        try await phone.sync()

        // The laptop's write is acknowledged; the phone, offline, edited the same records.
        let laptopWrite = Inspection(title: "Pump 4", status: "open", notes: "office")
        try await laptop.collection("inspections", of: Inspection.self).save(laptopWrite, id: "i1")
        try await laptop.collection("inspections", of: Inspection.self).save(laptopWrite, id: "check1")
        try await laptop.sync()
        let acknowledged = try #require(try await laptop.record(in: "inspections", id: "i1")?.version)
        let acknowledgedCheck = try #require(try await laptop.record(in: "inspections", id: "check1")?.version)
        let phoneInspections = phone.collection("inspections", of: Inspection.self)
        try await phoneInspections.save(Inspection(title: "Pump 4", status: "blocked", notes: ""), id: "i1")
        try await phoneInspections.save(Inspection(title: "Pump 4", status: "blocked", notes: ""), id: "check1")
        let phoneReport = try await phone.sync()
        #expect(phoneReport.resolved == 2 && phoneReport.pushed == 1, "\(phoneReport)")

        // The phone's own journal holds its resolver's decision, decided here.
        let own = try await phone.conflicts().first { $0.id == "i1" }
        #expect(own?.resolution == .write(["notes": "office", "status": "blocked", "title": "Pump 4"]) && own?.decidedElsewhere == nil)

        // A plain edit made on the laptop's write, not a resolution, tells the laptop nothing.
        try await phone.sync()
        try await phoneInspections.save(Inspection(title: "Pump 4", status: "closed", notes: ""), id: "i3")
        try await phone.sync()

        // The laptop pulls the merge: its journal records the phone's decision, and tells it.
        let told = await laptop.observeConflicts()
        let report = try await laptop.sync()
        #expect(report.overwritten == 1, "only the resolved write counts: \(report)")
        let entry = try #require(try await laptop.conflicts().first, "the laptop's journal holds the phone's decision")
        let merged = Inspection(title: "Pump 4", status: "blocked", notes: "office")
        #expect(entry.id == "i1" && entry.decidedElsewhere?.clientId == "phone" && entry.decidedElsewhere?.overwrote == acknowledged)
        #expect(entry.decidedElsewhere?.outcome == .write && entry.resolver == "byHandForChecks" && entry.resolution == .keepServer)
        #expect(try entry.local(as: Inspection.self) == laptopWrite && entry.server(as: Inspection.self) == merged)
        #expect(try entry.result(as: Inspection.self) == merged)
        #expect(!entry.changeId.isEmpty, "the laptop knows the change that wrote its version")
        #expect(try await laptop.collection("inspections", of: Inspection.self).get("i1") == merged)

        // A person on the phone settles the checklist after a restart: the laptop learns that
        // too, named as a person's decision.
        await phone.close()
        phone = try serverDevice("phone", server, dir, token: token, space: "team", seed: 21, configure: configure)
        let kept = Inspection(title: "Pump 4", status: "blocked", notes: "")
        #expect(try await phone.collection("inspections", of: Inspection.self).settleConflict("check1", .keepLocal))
        #expect(try await phone.sync().pushed == 1)
        try await laptop.sync()
        let byPerson = try await laptop.conflicts().first { $0.id == "check1" }
        #expect(byPerson?.decidedElsewhere?.overwrote == acknowledgedCheck && byPerson?.decidedElsewhere?.outcome == .keepLocal)
        #expect(byPerson?.resolver == "person")
        #expect(try byPerson?.server(as: Inspection.self) == kept)

        // The journal keeps both across a restart, and nothing else was journaled; the stream
        // told both as they were journaled, and ends with the store.
        await laptop.close()
        var streamed: [ConflictEntry] = []
        for await e in told { streamed.append(e) }
        #expect(streamed.map(\.id) == ["i1", "check1"] && streamed.first == entry)
        laptop = try serverDevice("laptop", server, dir, token: token, space: "team", seed: 21)
        let journal = try await laptop.conflicts()
        #expect(journal.map(\.id) == ["i1", "check1"] && journal.allSatisfy { $0.decidedElsewhere?.clientId == "phone" })
        #expect(try await phone.conflicts().allSatisfy { $0.decidedElsewhere == nil }, "the phone lost nothing")
        await phone.close()
        await laptop.close()
    }
}
#endif
