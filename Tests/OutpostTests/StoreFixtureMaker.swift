import Foundation
import OutpostCore
import Synchronization
import OutpostTestSupport
import Testing
@testable import Outpost

/// Writes the store files of `Fixtures/store-schema7-*.sqlite` with the release they
/// describe (run once, with OUTPOST_WRITE_STORE_FIXTURES=1; a released fixture is never
/// written again).
@Suite("Store fixtures of schema 7")
struct StoreFixtureMaker {
    /// A transport that answers the first pull with a cursor with `view_changed`, and fails
    /// every pull after `pagesBeforeFailure` more.
    final class ViewChanging: SyncTransport, Sendable {
        let inner: InMemorySyncTransport
        let state = Mutex((viewChanged: false, pagesLeft: 0, armed: false))
        init(_ inner: InMemorySyncTransport) { self.inner = inner }
        func arm(pagesBeforeFailure: Int) { state.withLock { $0 = (false, pagesBeforeFailure, true) } }
        func serverInfo() async throws -> ServerInfo { try await inner.serverInfo() }
        func push(_ request: PushRequest, space: String) async throws -> PushResponse { try await inner.push(request, space: space) }
        func pull(_ query: PullQuery, space: String) async throws -> PulledPage {
            enum Next { case pass, viewChanged, fail }
            let next: Next = state.withLock { s in
                guard s.armed else { return .pass }
                if !s.viewChanged && query.since != nil { s.viewChanged = true; return .viewChanged }
                if s.pagesLeft == 0 { return .fail }
                s.pagesLeft -= 1
                return .pass
            }
            switch next {
            case .pass: return try await inner.pull(query, space: space)
            case .viewChanged: throw TransportError.refused(status: 409, ErrorEnvelope(code: "view_changed", message: "the view changed"))
            case .fail: throw TransportError.notSent("connection refused")
            }
        }
    }

    @Test func writeTheFixtures() async throws {
        guard ProcessInfo.processInfo.environment["OUTPOST_WRITE_STORE_FIXTURES"] != nil else { return }
        try await rePullInProgress(repositoryPath("Tests/OutpostTests/Fixtures/store-schema7-repull.sqlite"))
        try await viewRePullInProgress(repositoryPath("Tests/OutpostTests/Fixtures/store-schema7-view.sqlite"))
    }

    func configure(_ c: inout OutpostStore.Configuration) {
        c.pageLimit = 2
        c.validators = ["todos": { object in
            if object["title"]?.stringValue == "bad" { throw OutpostError.encoding("a bad title") }
        }]
    }

    /// Records a…f synced in epoch 1; `bad` quarantined; b's put in doubt (answer lost);
    /// the server restored from a backup of a…f (epoch 2); the sync that met it confirmed
    /// the new history and applied one page of 2 before the network failed (a re-pull in
    /// progress, left copies of the records not met yet); then a put of a, a create of n
    /// and a delete of c queued; one media upload waiting.
    func rePullInProgress(_ target: String) async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path + "/store.sqlite"
        let world = World()
        let phone = try world.device("fixture-phone", path: path, configure: configure)
        for id in ["a", "b", "c", "d", "e", "f"] { try await phone.put(todo(id), in: "todos", id: id) }
        try await phone.sync()
        let backup = world.server.snapshot()
        let other = try world.device("fixture-other")
        try await other.put(todo("bad"), in: "todos", id: "bad")
        try await other.put(todo("f newer"), in: "todos", id: "f")
        try await other.sync()
        world.clock.advance(1_000)
        try await phone.sync()
        #expect(try await phone.quarantinedRecords().count == 1)
        try await phone.put(todo("b in doubt"), in: "todos", id: "b")
        world.server.inject(.loseAnswer, on: .push, device: "fixture-phone")
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        world.clock.advance(60_000)
        world.server.restore(backup)
        // The sync: the push (an answer of the new epoch settles nothing), the pull with the
        // cursor (epoch_changed), the pull from the start (page 1), then page 2 fails.
        world.server.inject(.refuseConnection, on: .pull, device: "fixture-phone", skip: 2)
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        #expect(try await phone.status().rebasing)
        try await phone.put(todo("a pending"), in: "todos", id: "a")
        try await phone.put(todo("new"), in: "todos", id: "n")
        try await phone.delete(from: "todos", id: "c")
        let file = dir.path + "/photo.jpg"
        try Data(repeating: 7, count: 70_000).write(to: URL(fileURLWithPath: file))
        let uploader = MediaUploader(store: phone, transport: HTTPMediaTransport(baseURL: URL(string: "http://127.0.0.1:9")!, token: { _ in "unused" }))
        _ = try await uploader.enqueue(file: URL(fileURLWithPath: file), contentType: "image/jpeg")
        print("re-pull fixture:", try await phone.status(), try await phone.pendingChanges().map { "\($0.id) \($0.op) \($0.state)" })
        await phone.close()
        try? FileManager.default.removeItem(atPath: target)
        try FileManager.default.copyItem(atPath: path, toPath: target)
    }

    /// Records a…f synced; then the server's view changed (`view_changed`): the cursor went
    /// back to the start, the first page (a, b) was pulled and marked seen, and the next page
    /// failed (a view re-pull in progress); a put of d queued.
    func viewRePullInProgress(_ target: String) async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path + "/store.sqlite"
        let world = World()
        var c = world.configuration("fixture-view")
        configure(&c)
        let transport = ViewChanging(world.server.transport(device: "fixture-view"))
        let phone = try OutpostStore(path: path, configuration: c, transport: transport)
        for id in ["a", "b", "c", "d", "e", "f"] { try await phone.put(todo(id), in: "todos", id: id) }
        try await phone.sync()
        world.clock.advance(1_000)
        transport.arm(pagesBeforeFailure: 1)
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        try await phone.put(todo("d pending"), in: "todos", id: "d")
        print("view fixture:", try await phone.status())
        await phone.close()
        try? FileManager.default.removeItem(atPath: target)
        try FileManager.default.copyItem(atPath: path, toPath: target)
    }
}
