import Foundation
import OutpostCore
import OutpostTestBasics
import OutpostSQLite
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

    /// Copies a fixture to a temporary file.
    func fixture(_ name: String, in dir: TemporaryDirectory) throws -> String {
        let path = dir.path + "/store.sqlite"
        try FileManager.default.copyItem(atPath: repositoryPath("Tests/OutpostTests/Fixtures/\(name)"), toPath: path)
        return path
    }

    /// `Fixtures/store-schema7-repull.sqlite` was written by the release before the sync
    /// session's model (schema 7; git history: StoreFixtureMaker): records a…f synced in epoch
    /// E1 (f's newer write by another device not pulled), `bad` quarantined, b's put in doubt; the server restored from a backup (E2), and
    /// the sync that met it confirmed the new history and applied one page (a, b) before the
    /// network failed: a re-pull in progress, left copies of c…f and of `bad`. Then a put of
    /// a, a create of n and a delete of c queued, and one media upload waiting.
    @Test func aFileWithARePullInProgressOpensAndFinishesIt() async throws {
        let dir = try TemporaryDirectory()
        let path = try fixture("store-schema7-repull.sqlite", in: dir)
        let world = World()
        // The file's server is gone; this one's history is later than both of the file's.
        world.clock.advance(86_400_000)
        world.server.restartEmpty()
        var store: OutpostStore? = try world.device("fixture-phone", path: path)
        var phone = store!

        let status = try await phone.status()
        #expect(status.rebasing, "the re-pull is still in progress")
        #expect(status.epoch?.rawValue == "01KB83M7E8F7NRFDXZG9TZ7XRC" && status.cursor?.text == "01KB83M7E8F7NRFDXZG9TZ7XRC.2")
        #expect(status.retiredEpochs.map(\.rawValue) == ["01KB83JBW0QW2BTHPY19BCEG6R"])
        #expect(status.pending == 4 && status.quarantined == 1 && status.lastError == "request not sent: connection refused")
        let pending = try await phone.pendingChanges().map { "\($0.id) \($0.op.rawValue) \($0.state.rawValue)" }
        #expect(pending == ["b put in_doubt", "a put pending", "n put pending", "c delete pending"])
        // The left copies show until the new history is met.
        #expect(try await phone.data("todos", "d") == todo("d"))
        #expect(try await phone.data("todos", "f") == todo("f"))
        #expect(try await phone.data("todos", "c") == nil)
        let uploads = try await MediaUploader(store: phone, transport: HTTPMediaTransport(baseURL: URL(string: "http://127.0.0.1:9")!, token: "unused")).pendingUploads()
        #expect(uploads.count == 1 && uploads.first?.path.hasSuffix("/photo.jpg") == true && uploads.first?.size == 70_000)
        // Every migration is recorded once, in order, and the session is one typed row.
        let names = try await phone.read { try $0.db.query("SELECT name FROM migrations ORDER BY position", []) { $0.text(0) } }
        #expect(names == LocalDatabase.migrations.map(\.name))
        #expect(try await phone.read { try $0.db.scalarInt("SELECT count(*) FROM meta WHERE key IN ('epoch', 'cursor', 'rebasing', 'view_repull')") } == 0)

        // The sync meets the new history, offers the left copies again and sends the edits.
        try await phone.sync()
        try await phone.sync()
        let expected: [String: JSONObject?] = ["a": todo("a pending"), "b": todo("b in doubt"), "c": nil, "d": todo("d"), "e": todo("e"),
                                               "f": todo("f"), "n": todo("new")]
        for (id, data) in expected {
            #expect(world.serverData("todos", id) == data, "server \(id)")
            #expect(try await phone.data("todos", id) == data, "store \(id)")
        }
        #expect(try await phone.pendingChanges().isEmpty)
        #expect(try await phone.status().rebasing == false)
        await phone.close()
        store = nil
        phone = try world.device("fixture-phone", path: path)
        #expect(try await phone.data("todos", "n") == todo("new"), "opened again, the file is of the current schema")
        await phone.close()
    }

    /// `Fixtures/store-schema7-view.sqlite`, by the same release: records a…f synced; then
    /// the view changed (`view_changed`), the cursor went back to the start, the first page
    /// (a, b) was pulled and marked seen, and the next page failed: a view re-pull in
    /// progress. Then a put of d queued.
    @Test func aFileWithAViewRePullInProgressOpensAndFinishesIt() async throws {
        let dir = try TemporaryDirectory()
        let path = try fixture("store-schema7-view.sqlite", in: dir)
        // The same epoch, seen through the new view: a, b, c and e (d and f left it), c and e
        // written since.
        let world = World()
        let writer = try world.device("writer")
        for id in ["a", "b", "c", "e"] { try await writer.put(todo(id), in: "todos", id: id) }
        try await writer.sync()
        for id in ["c", "e"] { try await writer.put(todo(id + " now"), in: "todos", id: id) }
        try await writer.sync()
        let phone = try world.device("fixture-view", path: path)
        #expect(try await phone.status().rebasing == false)
        #expect(try await phone.status().cursor?.seq == 2)
        #expect(try await phone.pendingChanges().map(\.id) == ["d"])
        #expect(try await phone.read { try $0.session().phase } == .viewRePulling(Epoch("01KB83JBW0QW2BTHPY19BCEG6R")!))
        #expect(try await phone.read { try $0.db.scalarInt("SELECT count(*) FROM view_seen") } == 2)

        try await phone.sync()
        #expect(try await phone.read { try $0.session().phase } == .following(Epoch("01KB83JBW0QW2BTHPY19BCEG6R")!))
        #expect(try await phone.read { try $0.db.scalarInt("SELECT count(*) FROM view_seen") } == 0)
        // What the re-pull brought is there; f, which it did not bring, is dropped and never
        // offered again; d's own edit stays the app's.
        #expect(try await phone.data("todos", "c") == todo("c now"))
        #expect(try await phone.data("todos", "e") == todo("e now"))
        #expect(try await phone.data("todos", "f") == nil)
        #expect(world.serverData("todos", "f") == nil)
        #expect(try await phone.data("todos", "d") == todo("d pending"))
        await phone.close()
    }

    /// A file a later SDK migrated (a migration this one does not know) is refused, and
    /// nothing in it changes.
    @Test func aFileOfALaterSchemaIsRefused() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path + "/store.sqlite"
        let world = World()
        var store: OutpostStore? = try world.device("phone", path: path)
        await store!.close()
        store = nil
        let raw = try Connection(path: path, flags: [.readWrite])
        try raw.run("INSERT INTO migrations(position, name) VALUES (?, 'from the future')", [.integer(Int64(LocalDatabase.migrations.count + 1))])
        raw.close()
        #expect(throws: OutpostError.schemaTooNew(LocalDatabase.migrations.count + 1)) { try world.device("phone", path: path) }
        let check = try Connection(path: path, flags: [.readOnly])
        #expect(try check.scalarInt("SELECT count(*) FROM migrations") == Int64(LocalDatabase.migrations.count + 1))
        check.close()
    }
}
