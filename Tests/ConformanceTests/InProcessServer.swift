import Foundation
import OutpostConformance
import OutpostCore
import OutpostHTTP
import OutpostMutants
import OutpostServer
import OutpostTestSupport
import Synchronization

/// An Outpost server in this process, wired as `outpost-server serve` wires it (the
/// application's router on the HTTP engine), optionally with one deliberate bug
/// switched on. It restarts on the same data directory and rotates its epoch the way an
/// operator would: stop, (run `rotate-epoch`,) start; each start picks a new port.
final class InProcessServer: Sendable {
    struct Running: Sendable {
        let app: OutpostApplication
        let server: HTTPServer
        let port: Int
    }

    let directory: TemporaryDirectory
    let mutation: ServerMutation?
    let secret = "conformance-secret-" + UUID().uuidString
    let settings: Settings
    private let running = Mutex<Running?>(nil)
    /// The rules file the next start serves with (the rules checks' hook sets it).
    private let rulesPath = Mutex<String?>(nil)

    /// Limits smaller than the defaults (so the suite's size checks stay quick) but in the
    /// same proportions; the suite reads them from `/v1/info` like any client.
    static let testLimits = Limits(maxRequestBytes: 1 << 20, maxChangesPerPush: 100, maxRecordBytes: 64 << 10, pageBytes: 256 << 10,
                                   maxPageLimit: 300, chunkSize: 64 << 10, maxMediaBytes: 16 << 20)

    /// The settings of the in-process server: `testLimits`, short timeouts, no access log.
    static func testSettings(dataDirectory: String) -> Settings {
        var settings = Settings()
        settings.host = "127.0.0.1"
        settings.port = 0
        settings.dataDirectory = dataDirectory
        settings.limits = testLimits
        settings.accessLog = false
        // Restarts here are graceful, so no check needs power-loss durability; without an
        // fsync per commit the mutants run several times faster.
        settings.synchronous = "normal"
        settings.eventLoops = 2
        settings.shutdownGraceSeconds = 1
        settings.headerTimeoutSeconds = 1
        settings.bodyTimeoutSeconds = 1
        return settings
    }

    /// A server on its SQLite store, or on the PostgreSQL database at `postgresURL`, with
    /// `mutation`'s bug (ServerMutation wraps the application's parts and routes).
    init(mutation: ServerMutation?, postgresURL: String? = nil) async throws {
        self.mutation = mutation
        directory = try TemporaryDirectory(prefix: "outpost-conformance-\(mutation?.rawValue ?? "clean")")
        var settings = Self.testSettings(dataDirectory: directory.path)
        if let postgresURL { settings.store = postgresURL }
        self.settings = settings
        try await start()
    }

    /// `http://127.0.0.1:PORT` of the running server.
    var baseURL: String {
        "http://127.0.0.1:\(running.withLock { $0!.port })"
    }

    /// The suite's configuration for this server, with restart and rotate-epoch hooks and
    /// its one-second header and body timeouts.
    func configuration() -> Configuration {
        var configuration = Configuration(baseURL: baseURL, secret: secret)
        configuration.restart = .closure("restart the in-process server") { [self] in
            await stopServing()
            try await start()
            return baseURL
        }
        configuration.rotateEpoch = .closure("rotate the in-process server's epoch") { [self] in
            await stopServing()
            let target = self.settings.postgresURL.map { ["--store", $0] } ?? ["--data", self.directory.path]
            _ = try await withDirectoryRetry { try AdminCommands.rotateEpoch(arguments: target, environment: [:]) }
            try await start()
            return baseURL
        }
        configuration.rules = .closure("restart the in-process server with or without a rules file") { [self] path in
            await stopServing()
            rulesPath.withLock { $0 = path }
            try await start()
            return baseURL
        }
        configuration.headerTimeout = .seconds(settings.headerTimeoutSeconds)
        configuration.bodyTimeout = .seconds(settings.bodyTimeoutSeconds)
        return configuration
    }

    private func start() async throws {
        var settings = self.settings
        settings.rulesPath = rulesPath.withLock { $0 }
        let app = try await withDirectoryRetry {
            try OutpostApplication(settings: settings, environment: ["OUTPOST_JWT_SECRET": self.secret],
                                   parts: self.mutation?.parts(secret: Array(self.secret.utf8)) ?? .init())
        }
        let server = HTTPServer(configuration: ServerApp.httpConfiguration(settings), router: mutation?.routes(of: app) ?? app.router)
        let port = try server.start()
        running.withLock { $0 = Running(app: app, server: server, port: port) }
    }

    /// Stops the engine and closes the store; the data directory's lock goes with the
    /// application.
    private func stopServing() async {
        guard let current = running.withLock({ state -> Running? in
            defer { state = nil }
            return state
        }) else { return }
        await current.server.shutdown(grace: .seconds(1))
        await current.app.close()
    }

    /// Retries while the previous application still holds the directory's lock (it is
    /// released when the last reference to it goes).
    private func withDirectoryRetry<T>(_ body: () throws -> T) async throws -> T {
        var result: T?
        try await eventually("the previous application released the data directory's lock", within: .seconds(10)) {
            do {
                result = try body()
                return true
            } catch is DataDirectory.Unavailable {
                return false
            }
        }
        return result!
    }

    /// Stops the server and removes its data.
    func stop() async {
        await stopServing()
        directory.remove()
    }
}
