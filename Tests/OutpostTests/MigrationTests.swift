import Foundation
import OutpostCore
import OutpostTestSupport
import Testing
@testable import Outpost

@Suite("Store files of earlier schemas")
struct MigrationTests {
    /// `Fixtures/store-schema2.sqlite` was written by the release before the engine's
    /// rewrite (schema 2: `records`, `queue`, `aside`): records a, b, c, d synced; then
    /// `big` rejected as too large; b's put applied with its answer lost (in doubt) and
    /// another edit of b behind it; d in doubt after a 503; e a failed attempt (connection
    /// refused); a, n and a delete of c queued and never sent.
    @Test func aSchemaTwoFileOpensWithEveryPendingInDoubtAndRejectedEdit() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path + "/store.sqlite"
        try FileManager.default.copyItem(atPath: repositoryPath("Tests/OutpostTests/Fixtures/store-schema2.sqlite"), toPath: path)
        let world = World()
        let store = try world.device("fixture-phone", path: path)

        let pending = try await store.pendingChanges()
        let described = pending.map { "\($0.id) \($0.op.rawValue) \($0.data?["title"]?.stringValue ?? "-") \($0.state.rawValue)" }
        #expect(described == ["b put b in doubt in_doubt", "b put b behind pending", "d put d failed in_doubt", "e put e failed failed",
                              "a put a pending pending", "n put new pending", "c delete - pending"])
        let rejected = try await store.rejectedChanges()
        #expect(rejected.map(\.id) == ["big"])
        #expect(rejected.first?.errorCode == "record_too_large")
        // The sent changes keep their base, so they go again with the same fingerprint.
        #expect(pending.first { $0.data?["title"]?.stringValue == "b in doubt" }?.baseVersion?.seq == 2)
        #expect(try await store.data("todos", "a") == ["title": "a pending"])
        #expect(try await store.data("todos", "c") == nil)
        let status = try await store.status()
        #expect(status.pending == 7 && status.rejected == 1)
        #expect(status.epoch?.rawValue == "01KB83JBW0QW2BTHPY19BCEG6R")

        // The file's server is gone (this world's server has another, later history): the
        // store follows it, and every edit and copy reaches it.
        try await store.sync()
        try await store.sync()
        let expected: [String: JSONObject?] = ["a": ["title": "a pending"], "b": ["title": "b behind"], "c": nil, "d": ["title": "d failed"],
                                               "e": ["title": "e failed"], "n": ["title": "new"]]
        for (id, data) in expected {
            #expect(world.serverData("todos", id) == data, "server \(id)")
            #expect(try await store.data("todos", id) == data, "store \(id)")
        }
        #expect(try await store.pendingChanges().isEmpty)
        #expect(try await store.rejectedChanges().map(\.id) == ["big"], "a rejected edit stays until the app discards it")
        await store.close()

        // Opened again, the file is of the current schema.
        let again = try world.device("fixture-phone", path: path)
        #expect(try await again.data("todos", "b") == ["title": "b behind"])
        await again.close()
    }
}
