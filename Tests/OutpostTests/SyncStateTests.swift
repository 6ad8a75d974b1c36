import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Synchronization
import Testing
@testable import Outpost

/// The sync status line: `SyncStatusModel.state`, one typed value an app switches over, and
/// its sentence, against a real `outpost-server` behind a proxy that fails on request.
@Suite("The sync status line", .offPoolWhileBlocking, .serverLogs)
struct SyncStateTests {
    @MainActor
    static func wait(for model: SyncStatusModel, _ what: String, _ condition: @escaping @MainActor (SyncState) -> Bool) async {
        await ProgressTests.wait(for: model, what) { condition($0.state) }
    }

    #if canImport(OutpostTestSupport)
    @MainActor
    @Test func theStateSaysOfflineUnauthorizedUnavailableWaitingAndUpToDateInWords() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-sync-state")
        defer { dir.remove() }
        let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data")) }
        defer { server.stop() }
        let proxy = try FaultyProxy(upstreamPort: server.port)
        let good = try server.token(sub: "u", spaces: ["team"])
        let refused = Mutex(true)
        // The first token the transport sends is not the server's; a refresh gives the right one
        // once the test lets it.
        let transport = HTTPSyncTransport(baseURL: proxy.url) { _ in refused.withLock { $0 } ? "not-a-token" : good }
        var configuration = OutpostStore.Configuration(space: "team")
        configuration.durability = .normal
        let store = try OutpostStore(path: dir.appending("phone.sqlite"), configuration: configuration, transport: transport)
        let model = SyncStatusModel(store: store)
        await model.start()
        defer { model.stop() }
        #expect(model.state == .neverSynced && model.message == "Not synced yet.")

        for i in 0..<3 { try await store.put(todo("t\(i)"), in: "todos", id: "t\(i)") }
        await Self.wait(for: model, "3 changes waiting") { $0 == .waiting(pending: 3) }
        #expect(model.message == "3 changes to send.")

        await #expect(throws: OutpostError.self) { try await store.sync() }
        await Self.wait(for: model, "unauthorized") { $0 == .failed(.unauthorized, pending: 3) }
        #expect(model.message.hasPrefix("Signed out."))
        #expect(model.lastError?.contains("401") == true || model.lastError?.contains("unauthorized") == true, "the text stays for support: \(model.lastError ?? "nil")")

        refused.withLock { $0 = false }
        proxy.next(.gatewayTimeout, forPathContaining: "/v1/")
        await #expect(throws: OutpostError.self) { try await store.sync() }
        await Self.wait(for: model, "the server unavailable") { $0 == .failed(.serverUnavailable, pending: 3) }
        #expect(model.message.hasPrefix("The server is not answering"))

        try await store.sync()
        await Self.wait(for: model, "up to date") { if case .upToDate = $0 { true } else { false } }
        #expect(model.progress == nil, "no progress is shown once the sync ends")
        #expect(model.message.hasPrefix("Up to date (last synced "))
        let status = try await store.status()
        #expect(status.lastProblem == nil && status.lastError == nil)

        // The proxy gone: nothing listens where the store connects.
        proxy.stop()
        try await store.put(todo("offline"), in: "todos", id: "t9")
        await #expect(throws: OutpostError.self) { try await store.sync() }
        await Self.wait(for: model, "offline") { $0 == .failed(.offline, pending: 1) }
        #expect(model.message.hasPrefix("Offline."))
        await store.close()

        // The problem is kept in the file: a status read after a restart still has it.
        let reopened = try OutpostStore(path: dir.appending("phone.sqlite"), configuration: configuration)
        #expect(try await reopened.status().lastProblem == .offline)
        await reopened.close()
    }
    #endif

    /// The state's words for a running sync never read "0 of about 0".
    @Test func progressWordsStartWithoutNumbers() {
        #expect(SyncState.syncing(progress: nil).message == "Syncing…")
        #expect(SyncState.syncing(progress: SyncProgress(pulled: 0, approximateTotal: 0)).message == "Syncing…")
        #expect(SyncState.syncing(progress: SyncProgress(pulled: 120, approximateTotal: 5000)).message == "Syncing: 120 of about 5000 records")
        #expect(SyncState.rePulling(progress: SyncProgress(pulled: 7, approximateTotal: nil)).message == "Catching up with the server: 7 records")
        #expect(SyncState.upgradeRequired(count: 2).message == "2 changes wait for an app update.")
    }

    /// Each kind of failure is classified as the app needs it.
    @Test func failuresAreClassified() {
        let envelope = { (code: String) in ErrorEnvelope(code: code, message: code) }
        #expect(SyncProblem(.transport(.notSent("connection refused"))) == .offline)
        #expect(SyncProblem(.transport(.refused(status: 401, envelope("unauthorized")))) == .unauthorized)
        #expect(SyncProblem(.transport(.refused(status: 503, envelope("unavailable")))) == .serverUnavailable)
        #expect(SyncProblem(.transport(.refused(status: 429, envelope("rate_limited")))) == .serverUnavailable)
        #expect(SyncProblem(.transport(.noAnswer("timed out"))) == .serverUnavailable)
        #expect(SyncProblem(.transport(.badAnswer(status: 502, "<html>"))) == .serverUnavailable)
        #expect(SyncProblem(.transport(.refused(status: 400, envelope("invalid_request")))) == .serverRefused)
        #expect(SyncProblem(.storage("disk I/O error")) == .device)
        #expect(SyncProblem(.epochRefused(epoch: "e2", current: "e1", reason: "older")) == .serverRefused)
    }
}
