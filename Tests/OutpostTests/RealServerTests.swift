import Foundation
import OutpostCore
import OutpostTestBasics
import Synchronization
import Testing
@testable import Outpost
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// A real `outpost-server` child (on port 0) behind a `FaultyProxy`, so the devices keep
/// one URL across restarts, and faults happen on real sockets.
final class RealWorld {
    let dir: TemporaryDirectory
    var server: ServerProcess
    let proxy: FaultyProxy
    let token: String
    let clock = ManualClock()
    let space = "team"

    init(arguments: [String] = []) throws {
        dir = try TemporaryDirectory(prefix: "outpost-client")
        server = try ServerProcess(dataDirectory: dir.appending("data"), arguments: arguments)
        proxy = try FaultyProxy(upstreamPort: server.port)
        token = try server.token(spaces: ["team"])
    }

    deinit {
        server.stop()
        proxy.stop()
        dir.remove()
    }

    /// A device talking to the proxy (`direct`: to the server itself).
    func device(_ name: String, direct: Bool = false, resolver: ConflictResolver = .lastWriteWins(), clockOffset: Int64 = 0,
                maxResponseBytes: Int = 16 << 20, configure: (inout OutpostStore.Configuration) -> Void = { _ in }) throws -> OutpostStore {
        var c = OutpostStore.Configuration(space: space)
        c.clientId = name
        c.resolver = resolver
        c.durability = .normal
        c.randomSeed = World.seed(of: name)
        if clockOffset != 0 { c.clock = { Date(milliseconds: systemMilliseconds() + clockOffset) } }
        configure(&c)
        var options = HTTPSyncTransport.Options()
        options.maxResponseBytes = maxResponseBytes
        options.timeout = .seconds(20)
        let transport = HTTPSyncTransport(baseURL: direct ? server.baseURL : proxy.url, token: token, options: options)
        return try OutpostStore(path: dir.appending("\(name).sqlite"), configuration: c, transport: transport)
    }

    /// Stops the server, loses its data directory, starts it again.
    func restartEmpty() throws {
        server.stop()
        try FileManager.default.removeItem(atPath: server.dataDirectory)
        try server.restart()
        proxy.upstreamPort = server.port
    }

    /// A copy of the data directory, taken with the server stopped.
    func backup() throws -> String {
        server.stop()
        let copy = dir.appending("backup-\(UUID().uuidString)")
        try FileManager.default.copyItem(atPath: server.dataDirectory, toPath: copy)
        try server.restart()
        proxy.upstreamPort = server.port
        return copy
    }

    /// Restores a copy of the data directory, runs `rotate-epoch`, starts again.
    func restore(_ copy: String) throws {
        server.stop()
        try FileManager.default.removeItem(atPath: server.dataDirectory)
        try FileManager.default.copyItem(atPath: copy, toPath: server.dataDirectory)
        let (status, _) = try ServerProcess.run(["rotate-epoch", "--data", server.dataDirectory], environment: ["OUTPOST_JWT_SECRET": server.secret])
        #expect(status == 0)
        try server.restart()
        proxy.upstreamPort = server.port
    }

    /// The server's current data of a record (live), via a throwaway pull.
    func serverRecords() async throws -> [String: RecordState] {
        let transport = HTTPSyncTransport(baseURL: server.baseURL, token: token)
        var out: [String: RecordState] = [:]
        var since: Version?
        while true {
            let page = try await transport.pull(PullQuery(since: since, limit: 5000), space: space)
            for case .record(let r) in page.records { out[r.id] = r }
            since = page.next
            if !page.hasMore { return out }
        }
    }

    func serverData(_ id: String) async throws -> JSONObject? {
        guard let r = try await serverRecords()[id], !r.deleted else { return nil }
        return r.data
    }
}

@Suite("Against a real outpost-server", .offPoolWhileBlocking, .serialized, .serverLogs)
struct RealServerTests {
    @Test func twoDevicesSyncOverHTTP() async throws {
        let world = try RealWorld()
        let phone = try world.device("phone", direct: true)
        let laptop = try world.device("laptop", direct: true)
        try await phone.save(Todo(title: "Buy milk"), in: "todos", id: "t1")
        try await phone.save(Todo(title: "Walk"), in: "todos", id: "t2")
        #expect(try await phone.sync().pushed == 2)
        #expect(try await laptop.sync().pulled == 2)
        try await laptop.delete(from: "todos", id: "t1")
        try await laptop.sync()
        try await phone.sync()
        #expect(try await phone.all(Todo.self, in: "todos") == [Todo(title: "Walk")])
        #expect(try await phone.record(in: "todos", id: "t1")?.deleted == true)
        let status = try await phone.status()
        #expect(status.epoch != nil && status.lastError == nil && status.pending == 0)
    }

    @Test(arguments: [FaultyProxy.Behavior.gatewayTimeout, .cutOff])
    func aPushWhoseAnswerIsLostIsRetriedAfterAnotherDeviceWroteAndNothingOlderWins(_ behavior: FaultyProxy.Behavior) async throws {
        let world = try RealWorld()
        let phone = try world.device("phone", resolver: .clientWins) { $0.backoff = .init(initial: .milliseconds(1), maximum: .milliseconds(1)) }
        let laptop = try world.device("laptop")
        try await phone.put(todo("v1"), in: "todos", id: "t1")
        try await phone.sync()
        try await laptop.sync()
        try await phone.put(todo("phone"), in: "todos", id: "t1")
        world.proxy.next(behavior, forPathContaining: "/push")
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        #expect(try await phone.queueStates() == [.inDoubt])
        #expect(try await world.serverData("t1") == todo("phone"), "the server applied it")
        try await laptop.sync()
        try await laptop.put(todo("laptop, later"), in: "todos", id: "t1")
        try await laptop.sync()
        // The phone's retry is stamped later than the laptop's write.
        try await untilWallClockPasses(wallClockMilliseconds())
        let report = try await phone.sync()
        #expect(report.pushed == 1 && report.conflicts == 0)
        #expect(try await world.serverData("t1") == todo("laptop, later"))
        #expect(try await phone.data("todos", "t1") == todo("laptop, later"))
    }

    @Test(arguments: [FaultyProxy.Behavior.gatewayTimeout, .cutOff])
    func aPageCutOffOrReplacedByA504ChangesNothing(_ behavior: FaultyProxy.Behavior) async throws {
        let world = try RealWorld()
        let writer = try world.device("writer", direct: true)
        let reader = try world.device("reader")
        for i in 0..<30 { try await writer.put(todo("item \(i)"), in: "todos", id: "t\(i)") }
        try await writer.sync()
        world.proxy.next(behavior, forPathContaining: "/pull")
        await #expect(throws: OutpostError.self) { try await reader.sync() }
        #expect(try await reader.records().isEmpty)
        #expect(try await reader.status().cursor == nil)
        try await reader.sync()
        #expect(try await reader.records().count == 30)
    }

    @Test func aServerRestartedWithAnEmptyDataDirectory() async throws {
        let world = try RealWorld()
        let a = try world.device("a"), b = try world.device("b")
        for i in 0..<5 { try await a.put(todo("a\(i)"), in: "todos", id: "a\(i)") }
        try await a.sync()
        try await b.sync()
        try await b.put(todo("b new"), in: "todos", id: "b0")
        try await a.put(todo("a0 edited"), in: "todos", id: "a0")
        try world.restartEmpty()
        let report = try await a.sync()
        #expect(report.epochChanged)
        try await b.sync()
        try await a.sync()
        let server = try await world.serverRecords()
        #expect(server.count == 6)
        #expect(server["a0"]?.data == todo("a0 edited"))
        #expect(server["b0"]?.data == todo("b new"))
        for store in [a, b] {
            #expect(try await store.records().count == 6)
            #expect(try await store.pendingChanges().isEmpty)
            #expect(try await store.data("todos", "a0") == todo("a0 edited"))
        }
    }

    @Test func aServerRestoredFromACopyOfItsDataDirectoryThenRotated() async throws {
        let world = try RealWorld()
        let a = try world.device("a"), b = try world.device("b")
        try await a.put(todo("one"), in: "todos", id: "r1")
        try await a.put(todo("two"), in: "todos", id: "r2")
        try await a.sync()
        let copy = try world.backup()
        // The server's own updatedAt of the writes after the backup must be later than
        // those in it.
        try await untilWallClockPasses(wallClockMilliseconds())
        try await a.put(todo("one, after the backup"), in: "todos", id: "r1")
        try await a.put(todo("three, after the backup"), in: "todos", id: "r3")
        try await a.sync()
        try await b.sync()
        try world.restore(copy)
        let report = try await b.sync()
        #expect(report.epochChanged)
        #expect(report.reoffered == 2)
        try await a.sync()
        let server = try await world.serverRecords()
        #expect(server["r1"]?.data == todo("one, after the backup"))
        #expect(server["r2"]?.data == todo("two"))
        #expect(server["r3"]?.data == todo("three, after the backup"))
        #expect(try await a.data("todos", "r1") == todo("one, after the backup"))
        #expect(try await a.pendingChanges().isEmpty)
    }

    @Test func aDeviceClockAYearAheadDoesNotWin() async throws {
        let world = try RealWorld()
        let ahead = try world.device("ahead", direct: true, clockOffset: 365 * 86_400_000)
        let honest = try world.device("honest", direct: true) { $0.resolver = .lastWriteWins(maxClockDrift: .milliseconds(50)) }
        try await ahead.put(todo("v1"), in: "todos", id: "t1")
        try await ahead.sync()
        try await honest.sync()
        try await ahead.put(todo("from the future"), in: "todos", id: "t1")
        try await ahead.sync()
        // The honest edit is stamped later than the commit plus the 50 ms of drift allowed.
        try await untilWallClockPasses(wallClockMilliseconds() + 50)
        try await honest.put(todo("really later"), in: "todos", id: "t1")
        try await honest.sync()
        #expect(try await world.serverData("t1") == todo("really later"))
    }

    @Test func anUndecodableRecordIsQuarantinedOverHTTP() async throws {
        let world = try RealWorld()
        let writer = try world.device("writer", direct: true)
        try await writer.put(todo("fine"), in: "todos", id: "a")
        try await writer.put(["title": ["not": "a string"]], in: "todos", id: "b")
        try await writer.sync()
        let reader = try world.device("reader", direct: true) { $0.validate(Todo.self, in: "todos") }
        let report = try await reader.sync()
        #expect(report.quarantined == 1 && report.pulled == 1)
        #expect(try await reader.quarantinedRecords().first?.id == "b")
    }

    @Test func pushesAreSplitToTheServersLimits() async throws {
        let world = try RealWorld(arguments: ["--max-changes-per-push", "7", "--max-request-bytes", "40000", "--max-record-bytes", "20000"])
        let phone = try world.device("phone", direct: true)
        for i in 0..<40 { try await phone.put(todo(String(repeating: "p", count: 3_000) + "\(i)"), in: "todos", id: "t\(i)") }
        let report = try await phone.sync()
        #expect(report.pushed == 40)
        #expect(report.rejected == 0)
        #expect(try await world.serverRecords().count == 40)
    }

    @Test func aPageLargerThanTheTransportReadsMakesTheStoreAskForFewer() async throws {
        let world = try RealWorld()
        let writer = try world.device("writer", direct: true)
        for i in 0..<40 { try await writer.put(todo(String(repeating: "q", count: 10_000) + "\(i)"), in: "todos", id: "t\(i)") }
        try await writer.sync()
        // The server's smallest page budget is maxRecordBytes + 16 KiB (about 278 KB); this
        // device reads at most 64 KB.
        let reader = try world.device("reader", direct: true, maxResponseBytes: 64_000)
        let report = try await reader.sync()
        #expect(report.pulled == 40)
    }

    @Test func anExpiredTokenIsRefreshedOnceOn401() async throws {
        let world = try RealWorld()
        let calls = Mutex<[Bool]>([])
        let good = world.token
        let transport = HTTPSyncTransport(baseURL: world.server.baseURL) { refresh in
            calls.withLock { $0.append(refresh) }
            return refresh ? good : "expired.token.value"
        }
        var c = OutpostStore.Configuration(space: "team")
        c.durability = .normal
        let store = try OutpostStore(path: world.dir.appending("t.sqlite"), configuration: c, transport: transport)
        try await store.put(todo("x"), in: "todos", id: "x")
        try await store.sync()
        #expect(calls.withLock { $0 }.contains(true))
        #expect(try await world.serverData("x") == todo("x"))
        // Without a token the server says 401 and no refresh helps: refused, not in doubt.
        let anonymous = HTTPSyncTransport(baseURL: world.server.baseURL, token: nil)
        do {
            _ = try await anonymous.push(PushRequest(clientId: "z", changes: []), space: "team")
            Issue.record("expected 401")
        } catch let error as TransportError {
            #expect(error.code == "unauthorized")
            #expect(!error.pushMayHaveApplied)
        }
    }

    @Test func aServerThatCannotBeReachedIsNotSentNotInDoubt() async throws {
        let world = try RealWorld()
        let phone = try world.device("phone", direct: true)
        try await phone.sync()
        world.server.stop()
        try await phone.put(todo("offline"), in: "todos", id: "t1")
        await #expect(throws: OutpostError.self) { try await phone.sync() }
        let change = try #require(try await phone.pendingChanges().first)
        #expect(change.state == .failed, "connection refused: the request never left")
        #expect(try await phone.data("todos", "t1") == todo("offline"))
    }

    @Test func aLongPollBringsAnotherDevicesWrite() async throws {
        let world = try RealWorld()
        let a = try world.device("a", direct: true)
        let b = try world.device("b", direct: true)
        try await a.sync()
        try await b.sync()
        let admin = try world.server.token(spaces: [], admin: true)
        let server = world.server
        let waiting = Task { try await a.waitForChanges(timeout: .seconds(20)) }
        // The pull is held by the server before b writes, so only the commit can answer it.
        try await eventually("a's long poll waits on the server") {
            try await blocking { try server.metric("outpost_long_polls_waiting", token: admin) } == 1
        }
        try await b.put(todo("hello"), in: "todos", id: "t1")
        try await b.sync()
        #expect(try await waiting.value == .changed)
        #expect(try await a.data("todos", "t1") == todo("hello"))
    }
}
#endif
