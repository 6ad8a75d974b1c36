import Foundation
import OutpostCore
import OutpostHTTP
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// A whole Outpost server in this process — the application and the HTTP engine on
/// 127.0.0.1 port 0 — over a real SQLite file in a temporary directory.
final class TestServer: Sendable {
    static let secret = "server-test-secret-0123456789abcdef"
    let directory: TemporaryDirectory
    let app: OutpostApplication
    let http: HTTPServer
    let port: Int
    let authority = JWTAuthority(secret: Array(TestServer.secret.utf8))
    /// Requests the engine has finished (`HTTPServer.onRequestComplete`), each counted once
    /// the application has recorded it: a test awaits the count.
    let completed = Watched(0)
    /// What the store reports (`ReportingStore`): the long polls' waits for a commit, the
    /// view indexes built.
    let reports = Watched(ReportingStore.Reports())

    init(limits: Limits = Limits(), configure: (inout Settings) -> Void = { _ in }) throws {
        directory = try TemporaryDirectory(prefix: "outpost-server-test")
        var settings = Settings()
        settings.port = 0
        settings.dataDirectory = directory.appending("data")
        settings.limits = limits
        settings.accessLog = false
        configure(&settings)
        var parts = OutpostApplication.Parts()
        let reports = self.reports
        parts.store = { ReportingStore(base: $0, reports: reports) }
        app = try OutpostApplication(settings: settings, environment: ["OUTPOST_JWT_SECRET": Self.secret], parts: parts)
        var configuration = ServerApp.httpConfiguration(settings)
        configuration.eventLoopCount = 2
        http = HTTPServer(configuration: configuration, router: app.router)
        let app = self.app, completed = self.completed
        http.onRequestComplete = {
            app.record($0)
            completed.add()
        }
        ServerApp.declareConnectionMetrics(app.metrics, server: http)
        port = try http.start()
    }

    func stop() async {
        await http.shutdown(grace: .seconds(2))
        await app.close()
        directory.remove()
    }

    var epoch: Epoch { app.store.epoch }

    /// Waits until `count` waits for a commit were registered with the store's notifier
    /// since the server started, and returns them all.
    @discardableResult
    func registeredWaits(_ what: String, count: Int, fileID: String = #fileID, line: Int = #line) async throws -> [ReportingStore.Wait] {
        try await reports.until(what, fileID: fileID, line: line) { $0.registered.count >= count }.registered
    }

    /// Waits until `count` of the store's waits for a commit have ended since the server started.
    func endedWaits(_ what: String, count: Int, fileID: String = #fileID, line: Int = #line) async throws {
        try await reports.until(what, fileID: fileID, line: line) { $0.ended >= count }
    }

    /// Waits until the store has built the view index for `spec` (the keeper's build, which
    /// marks it ready just after), and expects the store to name it as its index.
    func viewIndexBuilt(_ spec: String, fileID: String = #fileID, line: Int = #line) async throws {
        try await reports.until("the view index is built", fileID: fileID, line: line) { $0.built.contains(spec) }
        #expect(try await app.store.viewIndexSpec() == spec)
    }

    func token(sub: String = "tester", spaces: [String], scope: Claims.Scope = .write, admin: Bool = false, exp: Int64? = nil) -> String {
        authority.sign(Claims(sub: sub, exp: exp ?? Int64(Date().timeIntervalSince1970) + 3600, spaces: spaces, scope: scope, admin: admin))
    }

    /// One request with a bearer token for `space` (write scope) unless `token` is given.
    func request(_ method: String, _ target: String, token: String?, body: [UInt8]? = nil, headers: [(String, String)] = []) async throws -> TestResponse {
        var h = headers
        if let token { h.append(("Authorization", "Bearer \(token)")) }
        if body != nil { h.append(("Content-Type", "application/json")) }
        return try await httpRequestAsync(port: port, method, target, headers: h, body: body)
    }

    func push(_ space: String, _ changes: [Change], clientId: String = "test-client", token: String? = nil) async throws -> TestResponse {
        try await request("POST", "/v1/spaces/\(space)/push", token: token ?? self.token(spaces: [space]), body: PushRequest(clientId: clientId, changes: changes).encoded())
    }

    func pull(_ space: String, query: String = "", token: String? = nil) async throws -> TestResponse {
        try await request("GET", "/v1/spaces/\(space)/pull\(query.isEmpty ? "" : "?" + query)", token: token ?? self.token(spaces: [space], scope: .read))
    }
}

/// Runs `body` against a fresh in-process server and always stops it.
func withServer(limits: Limits = Limits(), configure: (inout Settings) -> Void = { _ in }, _ body: (TestServer) async throws -> Void) async throws {
    let server = try TestServer(limits: limits, configure: configure)
    do {
        try await body(server)
    } catch {
        await server.stop()
        throw error
    }
    await server.stop()
}

func put(_ changeId: String, _ id: String, _ data: JSONObject = ["t": "x"], collection: String = "todos", base: Version? = nil) -> Change {
    Change(changeId: changeId, collection: collection, id: id, op: .put, data: data, baseVersion: base, clientTime: 1_764_430_000_000)
}

func json(_ response: TestResponse) throws -> JSONValue {
    try JSONParser.parse(response.body)
}

func errorCode(_ response: TestResponse) -> String? {
    (try? ErrorEnvelope.decode(response.body))?.code
}
