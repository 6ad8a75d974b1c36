import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// The SDK against a real `outpost-server` with a rules file (docs/rules.md): what a
/// worker's phone holds as jobs are created, reassigned and refused, and as the rules change.
@Suite struct RulesClientTests {
    static let rules = #"""
    {"collections": {"jobs": {
       "read": "data.assignee == auth.sub || 'supervisor' in auth.roles",
       "write": "'supervisor' in auth.roles || (op == 'put' && data.assignee == auth.sub && (prev == null || prev.assignee == auth.sub))",
       "schema": {"type": "object", "required": ["title", "assignee"],
                  "properties": {"title": {"type": "string", "minLength": 1}, "assignee": {"type": "string"}}}}},
     "default": {"read": "true", "write": "true"}}
    """#

    func device(_ name: String, _ server: ServerProcess, _ dir: TemporaryDirectory, token: String) throws -> OutpostStore {
        try serverDevice(name, server, dir, token: token, space: "team", seed: 5)
    }

    func ids(_ store: OutpostStore) async throws -> [String] {
        try await store.records(in: "jobs").map(\.id).sorted()
    }

    /// A temporary directory with the rules file above, and a server started on it with
    /// `--rules`: the directory, the rules file's path, the server.
    func rulesServer(_ prefix: String) async throws -> (TemporaryDirectory, String, ServerProcess) {
        let dir = try TemporaryDirectory(prefix: prefix)
        let path = dir.appending("rules.json")
        do {
            try Data(Self.rules.utf8).write(to: URL(fileURLWithPath: path))
            let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data"), arguments: ["--rules", path]) }
            return (dir, path, server)
        } catch {
            dir.remove()
            throw error
        }
    }

    /// Rewrites the rules file and waits for the server to take it (SIGHUP).
    func reload(_ server: ServerProcess, _ path: String, _ text: String, admin: String, count: Int) async throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        server.process.send(SIGHUP)
        try await eventually("the server reloaded its rules (\(count))") {
            try await blocking { try server.metric("outpost_rules_reloads_total{result=\"applied\"}", token: admin) } == Double(count)
        }
    }

    @Test func aWorkersPhoneKeepsItsJobsLosesAReassignedOneSeesRefusalsAndFollowsNewRules() async throws {
        let (dir, path, server) = try await rulesServer("outpost-rules-client")
        defer { dir.remove() }
        defer { server.stop() }
        let admin = try server.token(spaces: [], admin: true)
        let phone = try device("phone", server, dir, token: try server.token(sub: "w1", spaces: ["team"]))
        let office = try device("office", server, dir, token: try server.token(sub: "boss", spaces: ["team"], claims: [#"roles=["supervisor"]"#]))

        _ = try await office.put(["title": "Fix pump", "assignee": "w1"], in: "jobs", id: "j1")
        _ = try await office.put(["title": "Paint wall", "assignee": "w2"], in: "jobs", id: "j2")
        _ = try await office.put(["title": "Check valve", "assignee": "w1"], in: "jobs", id: "j3")
        try await office.sync()
        try await phone.sync()
        #expect(try await ids(phone) == ["j1", "j3"], "the phone holds its own jobs only")

        // The phone edits j1 while the office reassigns it: the edit is judged on the
        // reassigned job, refused, and the job leaves the phone.
        _ = try await phone.put(["title": "Fix pump today", "assignee": "w1"], in: "jobs", id: "j1")
        _ = try await office.put(["title": "Fix pump", "assignee": "w2"], in: "jobs", id: "j1")
        try await office.sync()
        // And a job of its own that fails the schema.
        _ = try await phone.put(["title": "", "assignee": "w1"], in: "jobs", id: "j4")
        let report = try await phone.sync()
        #expect(report.rejected == 2)
        let rejected = try await phone.rejectedChanges()
        #expect(Set(rejected.compactMap(\.errorCode)) == ["forbidden", "invalid_change"])
        #expect(rejected.first { $0.errorCode == "invalid_change" }?.lastError?.contains("/title") == true)
        #expect(try await ids(phone) == ["j3"], "the reassigned job left the phone; the refused new one has no server copy")
        #expect(try await phone.pendingChanges().isEmpty)

        // Workers may read every job now: the phone's view changes and it pulls them all.
        let readAll = Self.rules.replacingOccurrences(of: "\"read\": \"data.assignee == auth.sub || 'supervisor' in auth.roles\"", with: "\"read\": \"true\"")
        try await reload(server, path, readAll, admin: admin, count: 1)
        let wider = try await phone.sync()
        #expect(wider.viewChanged)
        #expect(try await ids(phone) == ["j1", "j2", "j3"])

        // Back to the first rules: the jobs of others leave the phone and are not offered
        // back to the server; a pending edit of the phone's own job survives the change.
        _ = try await phone.put(["title": "Check valve twice", "assignee": "w1"], in: "jobs", id: "j3")
        try await reload(server, path, Self.rules, admin: admin, count: 2)
        let narrower = try await phone.sync()
        #expect(narrower.viewChanged && narrower.pushed == 1 && narrower.reoffered == 0)
        #expect(try await ids(phone) == ["j3"])
        try await office.sync()
        #expect(try await ids(office) == ["j1", "j2", "j3"])
        #expect(try await office.record(in: "jobs", id: "j3")?.data?["title"] == "Check valve twice")
        #expect(try await office.record(in: "jobs", id: "j1")?.data?["assignee"] == "w2", "the office's reassignment stands")
        await phone.close()
        await office.close()
    }

    /// `resetSync()` under rules: the refresh pulls from the start saying it keeps copies
    /// (`holding`), so the delete of a job deleted since reaches the phone (and a live copy
    /// it did not bring would be dropped at its end, for a server that ignores `holding`);
    /// the tombstone copies the phone held stay, and its pending edit is kept and sent.
    @Test func aRefreshUnderRulesDropsTheJobsDeletedSinceAndKeepsTombstonesAndEdits() async throws {
        let (dir, _, server) = try await rulesServer("outpost-rules-refresh")
        defer { dir.remove() }
        defer { server.stop() }
        let phone = try device("phone", server, dir, token: try server.token(sub: "w1", spaces: ["team"]))
        let office = try device("office", server, dir, token: try server.token(sub: "boss", spaces: ["team"], claims: [#"roles=["supervisor"]"#]))
        for id in ["j1", "j3", "j5"] { _ = try await office.put(["title": .string("Job \(id)"), "assignee": "w1"], in: "jobs", id: id) }
        try await office.sync()
        try await phone.sync()
        // j5 is deleted while the phone follows: its tombstone reaches the phone.
        _ = try await office.delete(from: "jobs", id: "j5")
        try await office.sync()
        try await phone.sync()
        let j5 = RecordKey(collection: "jobs", id: "j5")
        #expect(try await phone.read { try $0.model(j5) }?.server?.body?.deleted == true)
        // j1 is deleted while the phone does not sync; the phone edits j3, then refreshes.
        _ = try await office.delete(from: "jobs", id: "j1")
        try await office.sync()
        _ = try await phone.put(["title": "Job j3, done", "assignee": "w1"], in: "jobs", id: "j3")
        try await phone.resetSync()
        let epoch = try #require(try await phone.read { try $0.session().phase.epoch })
        #expect(try await phone.read { try $0.session().phase } == .refreshing(epoch))
        let report = try await phone.sync()
        #expect(report.pushed == 1)
        #expect(try await ids(phone) == ["j3"], "the copy of j1, deleted since, is gone after the refresh")
        #expect(try await phone.read { try $0.model(RecordKey(collection: "jobs", id: "j1")) }?.server?.body?.deleted == true,
                "the refresh says it keeps copies (holding), so the delete of j1 came with it")
        #expect(try await phone.read { try $0.model(j5) }?.server?.body?.deleted == true, "the tombstone the phone held stays")
        #expect(try await phone.read { try $0.session().phase } == .following(epoch))
        try await office.sync()
        #expect(try await office.record(in: "jobs", id: "j3")?.data?["title"] == "Job j3, done")
        await phone.close()
        await office.close()
    }

    /// A new epoch under rules (a restore: here `rotate-epoch`): the phone held j5 live,
    /// the restored history holds it deleted. Its re-pull says it keeps copies (`holding`),
    /// so the server sends j5's tombstone from the start: the copy meets it and is not
    /// offered again. (Without `holding`, a page from the start under rules has no
    /// tombstone, and the phone re-created j5 as a record the new history lacked.)
    @Test func aNewEpochUnderRulesMeetsTheRestoredDeletesAndOffersNoneAgain() async throws {
        try await meetTheRestoredDeletes(leavingFirst: false)
    }

    /// The same restore, met by a phone that left its epoch first (`leaveEpoch()`): the
    /// store is detached, with no cursor, and keeps its copies; its pull says so
    /// (`holding`), so j5's tombstone comes and j5 is not offered again. (Before, a detached
    /// store's pull never said `holding`, and the phone re-created j5.)
    @Test func aStoreThatLeftItsEpochMeetsTheNextHistorysDeletesUnderRules() async throws {
        try await meetTheRestoredDeletes(leavingFirst: true)
    }

    private func meetTheRestoredDeletes(leavingFirst: Bool) async throws {
        let (dir, _, server) = try await rulesServer(leavingFirst ? "outpost-rules-left" : "outpost-rules-epoch")
        defer { dir.remove() }
        defer { server.stop() }
        let phoneToken = try server.token(sub: "w1", spaces: ["team"])
        let officeToken = try server.token(sub: "boss", spaces: ["team"], claims: [#"roles=["supervisor"]"#])
        var phone = try device("phone", server, dir, token: phoneToken)
        var office = try device("office", server, dir, token: officeToken)
        for id in ["j1", "j5"] { _ = try await office.put(["title": .string("Job \(id)"), "assignee": "w1"], in: "jobs", id: id) }
        try await office.sync()
        try await phone.sync()
        #expect(try await ids(phone) == ["j1", "j5"])
        // j5 is deleted while the phone is away; then the server's history is restored as a
        // new epoch that holds the delete.
        _ = try await office.delete(from: "jobs", id: "j5")
        try await office.sync()
        await phone.close()
        await office.close()
        try await blocking {
            server.stop()
            let (status, output) = try ServerProcess.run(["rotate-epoch", "--data", server.dataDirectory], environment: ["OUTPOST_JWT_SECRET": server.secret])
            #expect(status == 0, "\(output)")
            try server.restart()
        }
        phone = try device("phone", server, dir, token: phoneToken)
        office = try device("office", server, dir, token: officeToken)
        if leavingFirst {
            try await phone.leaveEpoch()
            #expect(try await phone.read { try $0.session().phase } == .detached)
        }
        let report = try await phone.sync()
        #expect(report.epochChanged == !leavingFirst && report.reoffered == 0, "\(report)")
        #expect(try await ids(phone) == ["j1"], "the copy of j5 met its delete in the new history")
        try await office.sync()
        #expect(try await ids(office) == ["j1"], "j5 was not offered again")
        await phone.close()
        await office.close()
    }
}
#endif
