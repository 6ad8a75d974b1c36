import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// A live query on one device against a real `outpost-server` (SQLite and PostgreSQL) with a
/// rules file: it shows another device's edits and deletes as they are pulled, and drops the
/// records that leave the device's view under the rules.
@Suite("Live queries against a real server", .offPoolWhileBlocking, .serverLogs)
struct LiveQueryServerTests {
    static let rules = #"""
    {"collections": {"jobs": {
       "read": "data.assignee == auth.sub || 'supervisor' in auth.roles",
       "write": "true"}},
     "default": {"read": "true", "write": "true"}}
    """#

    struct Job: Codable, Hashable, Sendable {
        var title: String
        var assignee: String
        var status: String
        var due: Date
    }

    static let schema = ["jobs": CollectionSchema(indexes: [["status", "due"]], searchable: ["title"], dates: ["due"])]

    @Test(arguments: [false, true])
    func aWorkersLiveListFollowsTheOfficesEditsDeletesAndReassignments(postgres: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-live-server")
        defer { dir.remove() }
        let server = try await rulesServer(dir, rules: Self.rules, postgres: postgres, prefix: "livequery")
        defer { server.stop() }
        let office = try serverDevice("office", server, dir, token: try server.token(sub: "boss", spaces: ["team"], claims: [#"roles=["supervisor"]"#]),
                                      space: "team", seed: 3) { $0.collections = Self.schema }
        let phone = try serverDevice("phone", server, dir, token: try server.token(sub: "w1", spaces: ["team"]), space: "team", seed: 3) {
            $0.collections = Self.schema
        }
        let officeJobs = office.collection("jobs", of: Job.self)
        let start = Date(timeIntervalSince1970: 1_790_000_000)
        for i in 0..<6 {
            try await officeJobs.save(Job(title: "Pump \(i)", assignee: i < 4 ? "w1" : "w2", status: "open", due: start.addingTimeInterval(Double(6 - i) * 3600)),
                                      id: "j\(i)")
        }
        try await office.sync()

        // The worker's screen: open jobs by due date, live.
        let myOpen = phone.collection("jobs", of: Job.self).filter { $0.status == "open" }.sorted(by: .ascending("due"))
        #expect(try await myOpen.explain().index == ["status", "due"])
        let live = try await LiveRecorder.start(myOpen.live())
        #expect(try await live.next().results.isEmpty)
        try await phone.sync()
        let first = try await live.next()
        #expect(first.results.map(\.id) == ["j3", "j2", "j1", "j0"], "only the worker's jobs, soonest first")

        // The office edits one job (now due first) and closes another.
        var j1 = try #require(try await officeJobs.get("j1"))
        j1.due = start
        try await officeJobs.save(j1, id: "j1")
        var j2 = try #require(try await officeJobs.get("j2"))
        j2.status = "done"
        try await officeJobs.save(j2, id: "j2")
        try await office.sync()
        try await phone.sync()
        let edited = try await live.next()
        #expect(edited.results.map(\.id) == ["j1", "j3", "j0"])
        #expect(!edited.changes.removed.isEmpty && !edited.changes.moved.isEmpty)

        // A delete, then a reassignment that takes a job out of the worker's view.
        try await officeJobs.delete("j0")
        var j3 = try #require(try await officeJobs.get("j3"))
        j3.assignee = "w2"
        try await officeJobs.save(j3, id: "j3")
        try await office.sync()
        try await phone.sync()
        var rows = try await live.next().results.map(\.id)
        // The delete and the view change may land in two transactions.
        if rows != ["j1"] { rows = try await live.next().results.map(\.id) }
        #expect(rows == ["j1"])
        #expect(try await phone.record(in: "jobs", id: "j3") == nil, "the reassigned job left the phone")
        #expect(Set(try await phone.collection("jobs", of: Job.self).search("pump").fetch().map(\.id)) == ["j1", "j2"])
        await phone.close()
        await office.close()
    }
}
#endif
