import Dispatch
import Foundation
import OutpostHTTP
import Synchronization

/// The `outpost-server` executable's commands (PROTOCOL.md section 8), kept here so the
/// executable's `main.swift` stays one line and tests can run them in-process.
public enum ServerApp {
    /// Dispatches `serve`, `token`, `rotate-epoch`, `backup`, `restore`, `check` and
    /// `healthcheck`; returns the process exit code.
    public static func main(arguments: [String], environment: [String: String]) async -> Int32 {
        let rest = Array(arguments.dropFirst())
        switch arguments.first {
        case "serve":
            return await serve(arguments: rest, environment: environment)
        case "token":
            return runAdmin { print(try AdminCommands.token(arguments: rest, environment: environment)) }
        case "rotate-epoch":
            return runAdmin { print(try AdminCommands.rotateEpoch(arguments: rest, environment: environment)) }
        case "backup":
            return BackupCommand.main(arguments: rest, environment: environment)
        case "restore":
            return RestoreCommand.main(arguments: rest, environment: environment)
        case "check":
            return CheckCommand.main(arguments: rest, environment: environment)
        case "healthcheck":
            return HealthCheckCommand.main(arguments: rest, environment: environment)
        default:
            printError(usage)
            return 64
        }
    }

    /// The text printed for an unknown command.
    public static let usage = """
        usage: outpost-server COMMAND [options]
          serve [options]                       serve HTTP (serve --help lists every option)
          token --data DIR --sub USER --space SPACE ... [--scope read|write] [--admin] [--ttl SECONDS]
          rotate-epoch --data DIR | --store URL give the store a new epoch (SQLite: server stopped)
          backup --data DIR [--media-dir DIR] --out PATH [--include-secret]
                                                a consistent copy, also while the server runs
          restore --from PATH --data DIR [--media-dir DIR] [--force]
                                                put a backup in place, with a new epoch (server stopped)
          check --data DIR [--media-dir DIR]    integrity of the store and every media file (exit 1 when damaged)
          healthcheck [--url URL] [--timeout SECONDS]
                                                exit 0 when GET /readyz answers 2xx
        """

    private static func runAdmin(_ body: () throws -> Void) -> Int32 {
        do {
            try body()
            return 0
        } catch let usage as AdminCommands.Usage {
            printError("outpost-server: \(usage)")
            return 64
        } catch {
            printError("outpost-server: \(error)")
            return 1
        }
    }

    /// The engine configuration for `settings`: host, port, loops, body limit, grace, timeouts.
    public static func httpConfiguration(_ settings: Settings) -> HTTPServerConfiguration {
        var configuration = HTTPServerConfiguration(host: settings.host, port: settings.port)
        if settings.eventLoops > 0 { configuration.eventLoopCount = settings.eventLoops }
        configuration.defaultBodyLimit = settings.limits.maxRequestBytes
        configuration.shutdownGrace = .seconds(settings.shutdownGraceSeconds)
        configuration.headerTimeout = .seconds(settings.headerTimeoutSeconds)
        configuration.bodyTimeout = .seconds(settings.bodyTimeoutSeconds)
        return configuration
    }

    /// `outpost-server serve`: builds the application (its router holds every route),
    /// starts the HTTP engine, prints `listening on http://HOST:PORT` once connections are
    /// accepted, and on SIGTERM/SIGINT drains (`/readyz` turns 503, requests in flight
    /// finish within the grace period), closes the store and returns 0.
    public static func serve(arguments: [String], environment: [String: String]) async -> Int32 {
        if arguments.contains("--help") || arguments.contains("-h") {
            print(Settings.help)
            return 0
        }
        let settings: Settings
        do {
            settings = try Settings.parse(arguments: arguments, environment: environment)
        } catch {
            printError("outpost-server serve: \(error)")
            return 64
        }
        // Signals are routed to a dispatch source before any thread starts, so SIGTERM
        // never takes the default action (immediate exit) while requests are in flight.
        let signals = SignalWaiter(signals: [SIGTERM, SIGINT])

        let app: OutpostApplication
        do {
            app = try OutpostApplication(settings: settings, environment: environment)
        } catch {
            printError("outpost-server serve: \(error)")
            return 1
        }
        // A PostgreSQL store whose epoch an operator rotated stops serving; shut down so
        // the supervisor starts this instance again on the new epoch (docs/scaling.md).
        app.onEpochChange { kill(getpid(), SIGTERM) }
        let configuration = httpConfiguration(settings)
        let server = HTTPServer(configuration: configuration, router: app.router)
        server.onRequestComplete = { log in app.record(log) }
        app.metrics.gauge("outpost_http_open_connections", help: "Open client connections (idle, in a request, or held by a long poll).") {
            Double(server.openConnections)
        }
        let port: Int
        do {
            port = try server.start()
        } catch {
            printError("outpost-server serve: cannot listen on \(settings.host):\(settings.port): \(error)")
            await app.close()
            return 1
        }
        let host = settings.host.contains(":") ? "[\(settings.host)]" : settings.host
        // One line, written with a single write(2) so it is flushed before anything else:
        // scripts and tests wait for it (PROTOCOL.md section 8).
        let line = Array("listening on http://\(host):\(port)\n".utf8)
        line.withUnsafeBytes { _ = Glibc.write(1, $0.baseAddress, $0.count) }

        let signal = await signals.next()
        Log.info("shutting down", ["signal": signal == SIGTERM ? "SIGTERM" : "SIGINT"])
        // A second signal while draining means "now": exit without waiting for the grace.
        Task.detached {
            let again = await signals.next()
            Log.error("second signal during shutdown; exiting at once", ["signal": again == SIGTERM ? "SIGTERM" : "SIGINT"])
            exit(1)
        }
        app.operations.beginDraining()
        await server.shutdown(grace: configuration.shutdownGrace)
        await app.close()
        return 0
    }

    private static func printError(_ message: String) {
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }
}

/// Delivers SIGTERM/SIGINT to async code through dispatch signal sources (the signals'
/// default action is turned off first).
final class SignalWaiter: Sendable {
    private final class Mailbox: Sendable {
        struct State {
            var received: [Int32] = []
            var waiter: CheckedContinuation<Int32, Never>?
        }
        let state = Mutex(State())

        func deliver(_ number: Int32) {
            let waiter = state.withLock { s -> CheckedContinuation<Int32, Never>? in
                if let w = s.waiter {
                    s.waiter = nil
                    return w
                }
                s.received.append(number)
                return nil
            }
            waiter?.resume(returning: number)
        }
    }

    private let mailbox = Mailbox()
    // DispatchSource objects are thread-safe (libdispatch allows use from any thread), and
    // after init this array is only read; it exists to keep the sources alive.
    private nonisolated(unsafe) let sources: [DispatchSourceSignal]

    init(signals: [Int32]) {
        var sources: [DispatchSourceSignal] = []
        let mailbox = self.mailbox
        for number in signals {
            Glibc.signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { mailbox.deliver(number) }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    /// Waits for the next signal.
    func next() async -> Int32 {
        await withCheckedContinuation { continuation in
            let ready = mailbox.state.withLock { s -> Int32? in
                if !s.received.isEmpty { return s.received.removeFirst() }
                s.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
