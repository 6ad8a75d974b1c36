import Foundation
import OutpostCore
import OutpostHTTP
import OutpostTestSupport
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

    init(limits: Limits = Limits(), configure: (inout Settings) -> Void = { _ in }) throws {
        directory = try TemporaryDirectory(prefix: "outpost-server-test")
        var settings = Settings()
        settings.port = 0
        settings.dataDirectory = directory.appending("data")
        settings.limits = limits
        settings.accessLog = false
        configure(&settings)
        app = try OutpostApplication(settings: settings, environment: ["OUTPOST_JWT_SECRET": Self.secret])
        var configuration = ServerApp.httpConfiguration(settings)
        configuration.eventLoopCount = 2
        http = HTTPServer(configuration: configuration, router: app.router)
        let app = self.app
        http.onRequestComplete = { app.record($0) }
        ServerApp.declareConnectionMetrics(app.metrics, server: http)
        port = try http.start()
    }

    func stop() async {
        await http.shutdown(grace: .seconds(2))
        await app.close()
        directory.remove()
    }

    var epoch: Epoch { app.store.epoch }

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
