import Foundation
#if canImport(Glibc)
import Glibc
#endif

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
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    process.environment = env
    let out = Pipe()
    process.standardOutput = out
    process.standardError = standardError ? out : FileHandle.nullDevice
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// An error of a child process the tests started.
public struct ProcessFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// An `outpost-server serve` child process on an ephemeral port, stopped by its own PID.
public final class ServerProcess: @unchecked Sendable {
    // @unchecked: every mutable property is written only in `start` (before the instance is
    // shared) and in `stop`/`kill`, which the owning test calls from one task.
    public let dataDirectory: String
    public let secret: String
    public private(set) var process: Process
    public private(set) var baseURL: URL
    public private(set) var port: Int
    private let extraArguments: [String]
    private let environment: [String: String]
    private var stderrPipe: Pipe

    /// Starts `outpost-server serve --port 0 --data DIR` and waits for its
    /// `listening on http://HOST:PORT` line (at most `timeout` seconds).
    public init(dataDirectory: String, secret: String = "test-secret-0123456789abcdef", arguments: [String] = [], environment: [String: String] = [:], timeout: Double = 30) throws {
        self.dataDirectory = dataDirectory
        self.secret = secret
        self.extraArguments = arguments
        self.environment = environment
        (process, baseURL, port, stderrPipe) = try Self.launch(dataDirectory: dataDirectory, secret: secret, arguments: arguments, environment: environment, port: 0, timeout: timeout)
    }

    private static func launch(dataDirectory: String, secret: String, arguments: [String], environment: [String: String], port: Int, timeout: Double) throws -> (Process, URL, Int, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuildProducts.executable("outpost-server"))
        process.arguments = ["serve", "--host", "127.0.0.1", "--port", String(port), "--data", dataDirectory] + arguments
        var env = ProcessInfo.processInfo.environment
        env["OUTPOST_JWT_SECRET"] = secret
        env["OUTPOST_ACCESS_LOG"] = env["OUTPOST_ACCESS_LOG"] ?? "false"
        for (k, v) in environment { env[k] = v }
        process.environment = env
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // Read the first line of stdout with a deadline.
        let line = try readLine(from: out.fileHandleForReading, timeout: timeout, process: process)
        guard line.hasPrefix("listening on "), let url = URL(string: String(line.dropFirst("listening on ".count))), let p = url.port else {
            process.terminate()
            throw ProcessFailure("outpost-server printed \"\(line)\" instead of listening on ...")
        }
        // Keep draining stderr so the child never blocks on a full pipe.
        err.fileHandleForReading.readabilityHandler = { handle in _ = handle.availableData }
        out.fileHandleForReading.readabilityHandler = { handle in _ = handle.availableData }
        return (process, url, p, err)
    }

    private static func readLine(from handle: FileHandle, timeout: Double, process: Process) throws -> String {
        let fd = handle.fileDescriptor
        var bytes: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 100)
            if ready > 0 {
                var byte: UInt8 = 0
                let n = read(fd, &byte, 1)
                if n <= 0 { break }
                if byte == 0x0A { return String(decoding: bytes, as: UTF8.self) }
                bytes.append(byte)
            } else if !process.isRunning {
                break
            }
        }
        process.terminate()
        throw ProcessFailure("outpost-server did not print its listening line within \(timeout) s (exit: \(process.isRunning ? "running" : String(process.terminationStatus)); got \"\(String(decoding: bytes, as: UTF8.self))\")")
    }

    /// The process id.
    public var pid: Int32 { process.processIdentifier }

    /// `http://127.0.0.1:PORT` + `path`.
    public func url(_ path: String) -> URL {
        URL(string: baseURL.absoluteString + path)!
    }

    /// SIGTERM, then waits for the exit; returns the exit status.
    @discardableResult
    public func stop() -> Int32 {
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// SIGKILL (a crash), then waits for the exit.
    public func kill9() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Starts the server again on the same data directory (a new port).
    public func restart(timeout: Double = 30) throws {
        if process.isRunning { stop() }
        (process, baseURL, port, stderrPipe) = try Self.launch(dataDirectory: dataDirectory, secret: secret, arguments: extraArguments, environment: environment, port: 0, timeout: timeout)
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Runs `outpost-server ARGS` to completion and returns its standard output.
    public static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
        try runToCompletion(BuildProducts.executable("outpost-server"), arguments, environment: environment)
    }

    /// A token from `outpost-server token` signed with this server's secret.
    public func token(sub: String = "tester", spaces: [String], scope: String = "write", admin: Bool = false, ttl: Int = 3600) throws -> String {
        var args = ["token", "--data", dataDirectory, "--sub", sub, "--scope", scope, "--ttl", String(ttl)]
        for s in spaces { args += ["--space", s] }
        if admin { args.append("--admin") }
        let (status, output) = try Self.run(args, environment: ["OUTPOST_JWT_SECRET": secret])
        guard status == 0 else { throw ProcessFailure("outpost-server token exited \(status)") }
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
