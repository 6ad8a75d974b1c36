import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import Outpost

/// docs/rules.md's worked example, "Forms a supervisor has settled", as the checked-in file
/// docs/examples/supervisor-rules.json, over a real `outpost-server` (SQLite and PostgreSQL):
/// a worker edits a submission until a supervisor approves it; after that only a
/// supervisor, or the worker a supervisor opened a correction for, may write. The worker's
/// refused edit is kept on the phone as rejected, with the server's reason, until the app
/// discards it.
@Suite struct SupervisorRulesTests {
    static let rulesPath = repositoryPath("docs/examples/supervisor-rules.json")

    #if canImport(OutpostTestSupport)
    func device(_ name: String, _ server: ServerProcess, _ dir: TemporaryDirectory, token: String) throws -> OutpostStore {
        try serverDevice(name, server, dir, token: token, space: "survey", seed: 11)
    }
    #endif

    func answers(_ store: OutpostStore) async throws -> JSONValue? {
        try await store.record(in: "submissions", id: "f1")?.data?["answers"]?["q1"]
    }

    /// docs/rules.md shows the file whole, as the server takes it.
    @Test func theDocsShowTheTestedFile() throws {
        let file = try String(contentsOfFile: Self.rulesPath, encoding: .utf8)
        let docs = try String(contentsOfFile: repositoryPath("docs/rules.md"), encoding: .utf8)
        #expect(docs.contains("```json\n" + file + "```"), "docs/rules.md shows docs/examples/supervisor-rules.json as it is")
    }

    #if canImport(OutpostTestSupport)
    @Test(arguments: [false, true])
    func aWorkerEditsUntilApprovalThenOnlyInACorrectionTheSupervisorOpened(postgres: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-supervisor")
        defer { dir.remove() }
        let database = postgres ? try await PostgresCluster.database(prefix: "supervisor") : nil
        let server = try await blocking {
            try ServerProcess(dataDirectory: dir.appending("data"), arguments: ["--rules", Self.rulesPath] + (database.map { ["--store", $0] } ?? []))
        }
        defer { server.stop() }
        let phone = try device("phone", server, dir, token: try server.token(sub: "w1", spaces: ["survey"]))
        let portal = try device("portal", server, dir, token: try server.token(sub: "sup", spaces: ["survey"], claims: [#"roles=["supervisor"]"#]))

        // The worker fills in the form and edits it while it is theirs.
        _ = try await phone.put(["worker": "w1", "status": "draft", "answers": ["q1": "3 pumps"]], in: "submissions", id: "f1")
        #expect(try await phone.sync().pushed == 1)
        _ = try await phone.put(["worker": "w1", "status": "submitted", "answers": ["q1": "4 pumps"]], in: "submissions", id: "f1")
        #expect(try await phone.sync().pushed == 1)
        // The worker may not approve it.
        _ = try await phone.put(["worker": "w1", "status": "approved", "answers": ["q1": "4 pumps"]], in: "submissions", id: "f1")
        #expect(try await phone.sync().rejected == 1)
        let selfApproved = try #require(try await phone.rejectedChanges().first)
        #expect(selfApproved.lastError?.contains("only a supervisor approves a submission") == true, "\(selfApproved.lastError ?? "")")
        #expect(try await phone.discardRejectedChange(selfApproved.changeId))

        // The supervisor approves it: the server's copy wins from now on.
        try await portal.sync()
        _ = try await portal.put(["worker": "w1", "status": "approved", "approvedBy": "sup", "answers": ["q1": "4 pumps"]], in: "submissions", id: "f1")
        #expect(try await portal.sync().pushed == 1)
        try await phone.sync()
        #expect(try await phone.record(in: "submissions", id: "f1")?.data?["status"] == "approved")

        // The worker's edit of the approved form is refused, with the reason, and kept.
        _ = try await phone.put(["worker": "w1", "status": "approved", "approvedBy": "sup", "answers": ["q1": "5 pumps"]], in: "submissions", id: "f1")
        let refused = try await phone.sync()
        #expect(refused.rejected == 1)
        let rejected = try await phone.rejectedChanges()
        #expect(rejected.count == 1)
        #expect(rejected.first?.state == .rejected)
        #expect(rejected.first?.errorCode == "forbidden")
        #expect(rejected.first?.lastError?.contains("a supervisor approved this submission: only a correction they open for you lets you change it") == true,
                "the reason the rules give: \(rejected.first?.lastError ?? "")")
        #expect(rejected.first?.data?["answers"]?["q1"] == "5 pumps", "the refused edit is kept for the app to show")
        #expect(try await answers(phone) == "4 pumps", "the phone shows the approved copy")
        #expect(try await phone.status().rejected == 1)
        // It is kept across syncs until the app discards it, and never sent again.
        #expect(try await phone.sync().rejected == 0)
        #expect(try await phone.rejectedChanges().count == 1)
        #expect(try await phone.discardRejectedChange(rejected[0].changeId))
        #expect(try await phone.rejectedChanges().isEmpty)

        // The supervisor opens a correction for the worker: the worker's edit is taken.
        _ = try await portal.put(["worker": "w1", "status": "correction", "approvedBy": "sup", "correction": "w1", "answers": ["q1": "4 pumps"]],
                                 in: "submissions", id: "f1")
        #expect(try await portal.sync().pushed == 1)
        try await phone.sync()
        _ = try await phone.put(["worker": "w1", "status": "correction", "approvedBy": "sup", "correction": "w1", "answers": ["q1": "5 pumps"]],
                                in: "submissions", id: "f1")
        let corrected = try await phone.sync()
        #expect(corrected.pushed == 1)
        #expect(corrected.rejected == 0)
        // The worker cannot close the correction; the supervisor does.
        _ = try await phone.put(["worker": "w1", "status": "approved", "approvedBy": "sup", "answers": ["q1": "5 pumps"]], in: "submissions", id: "f1")
        #expect(try await phone.sync().rejected == 1)
        #expect(try await phone.rejectedChanges().last?.lastError?.contains("opens and closes a correction") == true)
        try await portal.sync()
        #expect(try await answers(portal) == "5 pumps")
        _ = try await portal.put(["worker": "w1", "status": "approved", "approvedBy": "sup", "answers": ["q1": "5 pumps"]], in: "submissions", id: "f1")
        #expect(try await portal.sync().pushed == 1)

        // Closed: the worker's edits are refused again.
        try await phone.sync()
        _ = try await phone.put(["worker": "w1", "status": "approved", "approvedBy": "sup", "answers": ["q1": "6 pumps"]], in: "submissions", id: "f1")
        #expect(try await phone.sync().rejected == 1)
        #expect(try await phone.rejectedChanges().count == 2)
        #expect(try await answers(phone) == "5 pumps")
        await phone.close()
        await portal.close()
    }
    #endif
}

#if canImport(OutpostTestSupport)
/// A store named `name` in `dir`, syncing `space` with `server` under `token` (`.normal`
/// durability), for the tests against a real server with rules. Its ids are seeded by
/// `seed` and its name: devices seeded alike make the same change ids in the same
/// millisecond, and the server answers the second as a replay of the first.
func serverDevice(_ name: String, _ server: ServerProcess, _ dir: TemporaryDirectory, token: String, space: String, seed: UInt64,
                  configure: (inout OutpostStore.Configuration) -> Void = { _ in }) throws -> OutpostStore {
    var c = OutpostStore.Configuration(space: space)
    c.clientId = name
    c.durability = .normal
    c.randomSeed = World.seed(of: "\(seed) \(name)")
    configure(&c)
    return try OutpostStore(path: dir.appending("\(name).sqlite"), configuration: c, transport: HTTPSyncTransport(baseURL: server.baseURL, token: token))
}
#endif
