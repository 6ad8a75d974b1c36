import Foundation
#if canImport(Glibc)
import Glibc
#endif
@_exported import OutpostSubprocess

/// Where the build put the executables: next to the test bundle (`.build/<config>/`).
public enum BuildProducts {
    /// The directory holding the built executables.
    public static var directory: URL {
        if let override = ProcessInfo.processInfo.environment["OUTPOST_BUILD_DIR"] {
            return URL(fileURLWithPath: override)
        }
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        // The runner is `.build/<config>/<Package>PackageTests.xctest` (a file on Linux).
        while url.pathComponents.count > 1 {
            url.deleteLastPathComponent()
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("outpost-server").path) { return url }
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(".build/debug")
    }

    /// The path of the executable `name` (e.g. `outpost-server`, `outpost`).
    public static func executable(_ name: String) -> String {
        directory.appendingPathComponent(name).path
    }
}

/// Runs the program at `path` with `arguments` to completion (blocking: call it inside
/// `blocking {}` from async tests) and returns its exit status and standard output, with
/// its standard error too when `standardError` is true (else it is discarded).
/// `environment` is added to this process's.
public func runToCompletion(_ path: String, _ arguments: [String], environment: [String: String] = [:], standardError: Bool = false) throws -> (status: Int32, output: String) {
    let child = try Subprocess(path, arguments, environment: Subprocess.environment(adding: environment),
                               output: .capture, error: .discard, errorToOutput: standardError)
    let termination = child.wait()
    child.waitForStreams()
    return (termination.status, child.outputText())
}

/// An error of a child process the tests started.
public struct ProcessFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// An `outpost-server serve` child process on an ephemeral port, stopped by its own PID.
/// Its standard error (the server's log) is read line by line by a thread of this process:
/// each line goes to a file of `TestLogs`, shown only in the issues of a failing test, and
/// to `log`, where a test awaits the line that reports what it waits for.
public final class ServerProcess: @unchecked Sendable {
    // @unchecked: every mutable property is written only in `start` (before the instance is
    // shared) and in `stop`/`kill`, which the owning test calls from one task.
    public let dataDirectory: String
    public let secret: String
    public private(set) var process: Subprocess
    public private(set) var baseURL: URL
    public private(set) var port: Int
    /// The file holding the server's standard error, across restarts.
    public let logPath: String
    /// The lines of the server's standard error, across restarts, each added as the
    /// server writes it.
    public let log = Watched<[String]>([])
    /// Signalled once the current process's log is all read (after its exit).
    private var logRead: DispatchSemaphore
    /// The arguments after `serve` (for tests that read the store URL back).
    public private(set) var arguments: [String]
    private let environment: [String: String]

    /// Starts `outpost-server serve --port 0 --data DIR` and waits for its
    /// `listening on http://HOST:PORT` line (at most `timeout` seconds).
    public init(dataDirectory: String, secret: String = "test-secret-0123456789abcdef-0123456789abcdef", arguments: [String] = [], environment: [String: String] = [:], timeout: Double = 30) throws {
        self.dataDirectory = dataDirectory
        self.secret = secret
        self.arguments = arguments
        self.environment = environment
        logPath = TestLogs.newFile(named: "outpost-server")
        (process, baseURL, port, logRead) = try Self.launch(dataDirectory: dataDirectory, secret: secret, arguments: arguments, environment: environment,
                                                            port: 0, log: logPath, lines: log, timeout: timeout)
    }

    private static func launch(dataDirectory: String, secret: String, arguments: [String], environment: [String: String], port: Int,
                               log: String, lines: Watched<[String]>, timeout: Double) throws -> (Subprocess, URL, Int, DispatchSemaphore) {
        // Its log goes to its own file (its standard error), not to the tests' shared one.
        var env = Subprocess.environment(adding: ["OUTPOST_JWT_SECRET": secret]) { $0 == "OUTPOST_LOG_FILE" }
        env["OUTPOST_ACCESS_LOG"] = env["OUTPOST_ACCESS_LOG"] ?? "false"
        for (k, v) in environment { env[k] = v }
        let process = try Subprocess(BuildProducts.executable("outpost-server"),
                                     ["serve", "--host", "127.0.0.1", "--port", String(port), "--data", dataDirectory] + arguments,
                                     environment: env, output: .capture, error: .capture)
        let read = readLog(of: process, to: log, lines: lines)
        do {
            let (url, port) = try process.listeningAddress(timeout: timeout)
            return (process, URL(string: url)!, port, read)
        } catch {
            process.wait()
            _ = read.wait(timeout: .now() + .seconds(10))
            throw ProcessFailure("outpost-server did not start: \(error); its log: \(TestLogs.tail(of: log))")
        }
    }

    /// Reads `process`'s standard error on a thread of its own until it ends: each line is
    /// appended to the file at `path` and to `lines`. The semaphore is signalled once all
    /// of it is read.
    private static func readLog(of process: Subprocess, to path: String, lines: Watched<[String]>) -> DispatchSemaphore {
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            let file = FileHandle(forWritingAtPath: path)
            _ = try? file?.seekToEnd()
            var consumed = 0
            // One line at a time while the child runs: nextLine wakes when its bytes arrive.
            while let line = try? process.nextLine(of: 2, timeout: Double(Int32.max)) {
                consumed += line.utf8.count + 1
                try? file?.write(contentsOf: Data((line + "\n").utf8))
                lines.update { $0.append(line) }
            }
            // It ended: what its stream still held once read to the end.
            process.waitForStreams()
            let rest = process.output(2).dropFirst(consumed)
            if !rest.isEmpty {
                try? file?.write(contentsOf: Data(rest))
                let tail = String(decoding: rest, as: UTF8.self).split(separator: "\n").map(String.init)
                lines.update { $0 += tail }
            }
            try? file?.close()
            done.signal()
        }
        thread.name = "log of \(process.pid)"
        thread.start()
        return done
    }

    /// Waits until the log holds a line, after its first `after` lines, for which `matches`
    /// holds, and returns the first such line; throws `NotReached`, naming `what`, at the
    /// tests' deadline.
    @discardableResult
    public func logLine(_ what: String, after: Int = 0, within limit: Duration = .seconds(testDeadlineSeconds), fileID: String = #fileID, line: Int = #line,
                        where matches: @escaping @Sendable (String) -> Bool) async throws -> String {
        try await logLines(what, count: 1, after: after, within: limit, fileID: fileID, line: line, where: matches)[0]
    }

    /// Waits until the log holds `count` lines, after its first `after` lines, for which
    /// `matches` holds, and returns them all.
    public func logLines(_ what: String, count: Int, after: Int = 0, within limit: Duration = .seconds(testDeadlineSeconds), fileID: String = #fileID,
                         line: Int = #line, where matches: @escaping @Sendable (String) -> Bool) async throws -> [String] {
        let all = try await log.until(what, within: limit, fileID: fileID, line: line) { lines in
            lines.dropFirst(after).lazy.filter(matches).count >= count
        }
        return all.dropFirst(after).filter(matches)
    }

    /// A log line's test: its `msg` is `message` and its fields have the values given.
    public static func logged(_ message: String, _ fields: [String: String] = [:]) -> @Sendable (String) -> Bool {
        let wanted = ["\"msg\":\(jsonString(message))"] + fields.map { "\(jsonString($0.key)):\(jsonString($0.value))" }
        return { line in wanted.allSatisfy { line.contains($0) } }
    }

    private static func jsonString(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// The process id.
    public var pid: Int32 { process.pid }

    /// `http://127.0.0.1:PORT` + `path`.
    public func url(_ path: String) -> URL {
        URL(string: baseURL.absoluteString + path)!
    }

    /// SIGTERM, then waits for the exit; returns the exit status.
    @discardableResult
    public func stop() -> Int32 {
        let status = process.stop(grace: 60).status
        waitForLog()
        return status
    }

    /// SIGKILL (a crash), then waits for the exit.
    public func kill9() {
        process.send(SIGKILL)
        process.wait()
        waitForLog()
    }

    /// After the exit: waits until the reader has put the last lines in `log` and the file.
    private func waitForLog() {
        if logRead.wait(timeout: .now() + .seconds(testDeadlineSeconds)) == .success { logRead.signal() }
    }

    /// Starts the server again on the same data directory (a new port), with `arguments`
    /// after `serve` when given (else the ones it had).
    public func restart(arguments: [String]? = nil, timeout: Double = 30) throws {
        if process.isRunning { stop() }
        if let arguments { self.arguments = arguments }
        (process, baseURL, port, logRead) = try Self.launch(dataDirectory: dataDirectory, secret: secret, arguments: self.arguments, environment: environment,
                                                            port: 0, log: logPath, lines: log, timeout: timeout)
    }

    deinit {
        process.send(SIGKILL)
        process.wait()
    }

    /// Runs `outpost-server ARGS` to completion and returns its standard output.
    /// Blocking: call it inside `blocking {}` from async tests.
    public static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
        try runToCompletion(BuildProducts.executable("outpost-server"), arguments, environment: environment)
    }

    /// The value of one series on this server's `/metrics`, named as the page writes it
    /// (`outpost_long_polls_waiting`, `outpost_changes_total{result="applied"}`); nil when
    /// the page has no such line. `token` must be an admin token (`token(spaces: [], admin: true)`).
    public func metric(_ series: String, token: String) throws -> Double? {
        let r = try httpRequest(port: port, "GET", "/metrics", headers: [("Authorization", "Bearer \(token)")])
        guard r.status == 200 else { throw ProcessFailure("GET /metrics answered \(r.status): \(r.text.prefix(200))") }
        for line in r.text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            if parts.count == 2, parts[0] == series { return Double(parts[1]) }
        }
        return nil
    }

    /// A token from `outpost-server token` signed with this server's secret.
    /// `claims` are other claims, `NAME=VALUE` (`roles=["supervisor"]`), for the rules.
    public func token(sub: String = "tester", spaces: [String], scope: String = "write", admin: Bool = false, ttl: Int = 3600,
                      claims: [String] = []) throws -> String {
        var args = ["token", "--data", dataDirectory, "--sub", sub, "--scope", scope, "--ttl", String(ttl)]
        for s in spaces { args += ["--space", s] }
        for c in claims { args += ["--claim", c] }
        if admin { args.append("--admin") }
        let (status, output) = try Self.run(args, environment: ["OUTPOST_JWT_SECRET": secret])
        guard status == 0 else { throw ProcessFailure("outpost-server token exited \(status)") }
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
