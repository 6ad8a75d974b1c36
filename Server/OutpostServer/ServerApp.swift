import Dispatch
import Foundation
import OutpostHTTP
import Synchronization

/// The `outpost-server` executable's commands (docs/protocol.md section 8), kept here so the
/// executable's `main.swift` stays one line and tests can run them in-process.
public enum ServerApp {
    /// Dispatches `serve`, `token`, `rotate-epoch`, `backup`, `restore`, `check` and
    /// `healthcheck`; returns the process exit code.
    public static func main(arguments: [String], environment: [String: String]) async -> Int32 {
        let rest = Array(arguments.dropFirst())
        // `--help` (or `-h`) answers on standard output with exit 0, for the executable and
        // for each command; `help COMMAND` is the same as `COMMAND --help`.
        switch arguments.first {
        case nil:
            printError(usage)
            return 64
        case "--help", "-h":
            print(usage)
            return 0
        case "help":
            guard let name = rest.first else {
                print(usage)
                return 0
            }
            guard let text = help(for: name) else {
                printError("outpost-server: unknown command \(name)\n\(usage)")
                return 64
            }
            print(text)
            return 0
        case let command?:
            if rest.contains("--help") || rest.contains("-h"), let text = help(for: command) {
                print(text)
                return 0
            }
        }
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
            printError("outpost-server: unknown command \(arguments[0])\n\(usage)")
            return 64
        }
    }

    /// The text printed for `outpost-server --help`, and with an unknown command.
    public static let usage = """
        usage: outpost-server COMMAND [options]    (COMMAND --help, or help COMMAND, for its options)
          serve [options]                       serve HTTP (serve --help lists every option)
          token --data DIR --sub USER --space SPACE ... [--scope read|write] [--admin] [--ttl SECONDS] [--claim NAME=VALUE ...]
          rotate-epoch --data DIR | --store URL give the store a new epoch (SQLite: server stopped)
          backup --data DIR [--media-dir DIR] --out PATH [--include-secret]
                                                a consistent copy, also while the server runs
          restore --from PATH --data DIR [--media-dir DIR] [--force]
                                                put a backup in place, with a new epoch (server stopped)
          check --data DIR [--media-dir DIR | --media-store s3 --s3-…]    integrity of the store and every media file (exit 1 when damaged)
          healthcheck [--url URL] [--timeout SECONDS]
                                                exit 0 when GET /readyz answers 2xx
        """

    /// The `--help` text of one command, or nil for a name that is not a command.
    public static func help(for command: String) -> String? {
        switch command {
        case "serve": Settings.help
        case "token": """
            usage: outpost-server token [--data DIR] --sub USER --space SPACE [--space SPACE ...]
                                        [--scope read|write] [--admin] [--ttl SECONDS] [--claim NAME=VALUE ...]
            Prints a token (HS256) signed with the data directory's secret.
              --data DIR        the data directory whose jwt-secret signs (default $OUTPOST_DATA, else ./outpost-data;
                                OUTPOST_JWT_SECRET, when set, is the secret instead)
              --sub USER        the token's subject (required)
              --space SPACE     a space it may use; repeat for more; NAME* is a prefix, * every space
              --scope SCOPE     read or write (default read)
              --admin           an admin token (operator endpoints under /v1/admin; no --space needed)
              --ttl SECONDS     lifetime (default 86400)
              --claim NAME=VALUE  another claim, for the rules (auth.NAME); VALUE is JSON when it parses
                                (roles='["supervisor"]'), else a string; repeat for more
            """
        case "rotate-epoch": """
            usage: outpost-server rotate-epoch --data DIR | --store postgres://...
            Gives the store a new, later epoch and prints it. Devices then re-pull and offer their
            unsent edits again (docs/operating.md). SQLite: refused while a server runs on DIR.
            PostgreSQL: running instances notice and shut down, to be started again.
            """
        case "backup": """
            usage: outpost-server backup --data DIR [--media-dir DIR] --out PATH [--include-secret]
            Writes a consistent copy of the store and the media to the new directory PATH, also
            while the server runs. The JWT secret is left out unless --include-secret is given.
            """
        case "restore": """
            usage: outpost-server restore --from PATH --data DIR [--media-dir DIR] [--force]
            Puts a backup in place, with a new epoch, while no server runs on DIR. --force replaces
            a data directory that already holds a store.
            """
        case "check": """
            usage: outpost-server check --data DIR [--media-dir DIR | --media-store s3 --s3-endpoint URL --s3-bucket NAME …]
            Checks the store's invariants and every media file; prints what is wrong and exits 1
            when anything is damaged, 0 when sound.
            """
        case "healthcheck": """
            usage: outpost-server healthcheck [--url URL] [--timeout SECONDS]
            Exits 0 when GET URL answers 2xx, 1 otherwise; for container health checks. URL defaults
            to http://$OUTPOST_HOST:$OUTPOST_PORT/readyz (127.0.0.1 and 8080 when unset); timeout 5 s.
            """
        default: nil
        }
    }

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

    /// The engine configuration for `settings`: host, port, loops, body limit, grace,
    /// timeouts, connection limits.
    public static func httpConfiguration(_ settings: Settings) -> HTTPServerConfiguration {
        var configuration = HTTPServerConfiguration(host: settings.host, port: settings.port)
        if settings.eventLoops > 0 { configuration.eventLoopCount = settings.eventLoops }
        configuration.defaultBodyLimit = settings.limits.maxRequestBytes
        configuration.shutdownGrace = .seconds(settings.shutdownGraceSeconds)
        configuration.headerTimeout = .seconds(settings.headerTimeoutSeconds)
        configuration.bodyTimeout = .seconds(settings.bodyTimeoutSeconds)
        configuration.maxConnections = settings.maxConnections
        configuration.maxConnectionsPerAddress = settings.maxConnectionsPerAddress
        return configuration
    }

    /// The engine's connection gauge and counters as `/metrics` series, read at each scrape.
    public static func declareConnectionMetrics(_ metrics: Metrics, server: HTTPServer) {
        metrics.gauge("outpost_http_open_connections", help: "Open client connections (idle, in a request, or held by a long poll).") {
            Double(server.openConnections)
        }
        metrics.declare("outpost_http_connection_limit_reached_total",
                        help: "Times a connection limit was reached: limit=process (--max-connections; accepting paused for 100 ms, new connections wait in the backlog) or limit=address (--max-connections-per-address; the connection was answered 503).",
                        kind: "counter")
        metrics.counter("outpost_http_connection_limit_reached_total", .init([("limit", "process")])) { Double(server.connectionCounts.acceptPauses) }
        metrics.counter("outpost_http_connection_limit_reached_total", .init([("limit", "address")])) { Double(server.connectionCounts.refusedOverAddressLimit) }
        metrics.declare("outpost_http_silent_connections_closed_total",
                        help: "New connections closed at the header timeout without having sent a byte.", kind: "counter")
        metrics.counter("outpost_http_silent_connections_closed_total", .none) { Double(server.connectionCounts.closedSilent) }
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
        // A store that does not exist yet: this is the data directory's first start.
        let firstStart = settings.postgresURL == nil
            ? !FileManager.default.fileExists(atPath: (settings.dataDirectory as NSString).appendingPathComponent(DataDirectory.storeFileName))
            : !FileManager.default.fileExists(atPath: settings.dataDirectory)
        // Signals are routed to a dispatch source before any thread starts, so SIGTERM
        // never takes the default action (immediate exit) while requests are in flight.
        let signals = SignalWaiter(signals: [SIGTERM, SIGINT])
        let hangups = SignalWaiter(signals: [SIGHUP])

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
        declareConnectionMetrics(app.metrics, server: server)
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
        // scripts and tests wait for it (docs/protocol.md section 8).
        var text = "listening on http://\(host):\(port)\n"
        if firstStart {
            text += firstStartNote(settings: settings, port: port, environment: environment,
                                   executable: CommandLine.arguments.first ?? "outpost-server")
        }
        let line = Array(text.utf8)
        line.withUnsafeBytes { _ = Glibc.write(1, $0.baseAddress, $0.count) }

        // SIGHUP reloads the rules file; a file that does not check leaves the rules as they were.
        let reloader = Task.detached {
            while !Task.isCancelled {
                _ = await hangups.next()
                app.reloadRules()
            }
        }
        defer { reloader.cancel() }

        let signal = await signals.next()
        Log.info("shutting down", ["signal": signal == SIGTERM ? "SIGTERM" : "SIGINT"])
        // A second signal while draining means "now": exit without waiting for the grace.
        Task.detached {
            let again = await signals.next()
            Log.error("second signal during shutdown; exiting at once", ["signal": again == SIGTERM ? "SIGTERM" : "SIGINT"])
            exit(1)
        }
        app.beginDraining()
        await server.shutdown(grace: configuration.shutdownGrace)
        await app.close()
        return 0
    }

    /// What a newcomer does next, printed under the listening line on a data directory's
    /// first start only: the exact token command for this directory, the URL of
    /// `/v1/info`, and where the secret lives.
    public static func firstStartNote(settings: Settings, port: Int, environment: [String: String], executable: String) -> String {
        var host = settings.host
        switch host {
        case "0.0.0.0", "": host = "127.0.0.1"
        case "::": host = "[::1]"
        default: if host.contains(":") { host = "[\(host)]" }
        }
        let base = "http://\(host):\(port)"
        let data = settings.dataDirectory
        let quotedData = data.contains(" ") ? "'\(data)'" : data
        let secretNote = (environment["OUTPOST_JWT_SECRET"] ?? "").isEmpty
            ? "The token secret was created in \((data as NSString).appendingPathComponent(JWTSecret.fileName)) (mode 0600); keep it, and back it up with the store."
            : "Tokens are signed with OUTPOST_JWT_SECRET; `token` needs the same variable set."
        let storeNote = settings.postgresURL == nil ? "the store is \((data as NSString).appendingPathComponent(DataDirectory.storeFileName))" : "the store is on PostgreSQL"
        return """

            First start of the data directory \(data) (\(storeNote)). Next:
              curl \(base)/v1/info
              TOKEN=$(\(executable) token --data \(quotedData) --sub me --space demo --scope write)
              curl -H "Authorization: Bearer $TOKEN" '\(base)/v1/spaces/demo/pull'
            \(secretNote)
            `\(executable) --help` lists the commands; this note shows on the first start only.

            """
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
