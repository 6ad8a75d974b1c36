import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A throwaway S3 store for tests: OpenStack Swift from Debian with its s3api middleware,
/// its four servers (proxy, account, container, object) each a child process on
/// 127.0.0.1 at a free port, one replica on a plain directory in a temporary directory,
/// and a bucket made with Swift's native API. S3 clients sign with `accessKey` and
/// `secretKey` (tempauth's user `test:tester`) for `region`, path-style, at `endpoint`.
///
/// scripts/s3-test-server.py writes the configuration and rings (`setup`) and runs each
/// server (`run`); docs/testing.md, "The S3 store", says what it configures and why.
/// `scripts/install-deps.sh test` installs Swift; a missing Swift is an error, never a
/// skip. Each server is stopped by its own PID (`stop()`, or `deinit`), and a server whose
/// test process is gone stops itself, so a crashed run leaves none behind.
public final class S3TestServer: Sendable {
    /// Swift's four servers, each a process of its own.
    public enum Server: String, CaseIterable, Sendable {
        case account, container, object, proxy
    }

    /// The directory holding the configuration, the rings and the stored objects.
    public let directory: String
    /// The proxy's TCP port on 127.0.0.1: S3 and Swift's native API both answer there.
    public let port: Int
    /// `http://127.0.0.1:PORT`: the S3 endpoint (path-style: `/BUCKET/KEY`).
    public var endpoint: String { "http://127.0.0.1:\(port)" }
    /// The bucket made at start (a Swift container of the same name).
    public let bucket: String
    /// The S3 access key id and secret: tempauth's user `test:tester` and its key.
    public let accessKey = "test:tester"
    public let secretKey = "testing"
    /// The region s3api names (its `location`) and checks SigV4 scopes against.
    public let region = "us-east-1"
    /// The account's path on the native API (`/v1/AUTH_test`) and a token for it.
    public let accountPath: String
    public let authToken: String
    /// How long `init` took, from the first file written to the bucket made.
    public let startup: Duration
    /// Each server's log (its standard error), a file of `TestLogs`.
    public let logs: [Server: String]
    private let processes: [Server: Subprocess]
    private let stopped = Mutex(false)

    /// scripts/s3-test-server.py in this checkout.
    public static let script = PinnedTools.root.appendingPathComponent("scripts/s3-test-server.py").path
    /// The interpreter Debian's python3-swift is installed for (a python3 earlier on PATH,
    /// a pyenv's, lacks it).
    static let python = "/usr/bin/python3"

    /// How long a start may take before it fails: four Python processes import Swift at
    /// once, which took a minute when three stores started together beside other builds on
    /// two cores; twice the tests' deadline only ends a start that went wrong.
    public static let startDeadline = 2 * Double(testDeadlineSeconds)

    /// Starts a store of its own with `bucket`, from async code (for a test that stops a
    /// server or the store): the start waits on a thread of its own, off the cooperative
    /// pool. A test that only needs a bucket takes one of `shared` (`bucket(prefix:)`).
    public static func start(bucket: String = "outpost-media", timeout: Double = startDeadline) async throws -> S3TestServer {
        try await blocking { try S3TestServer(bucket: bucket, timeout: timeout) }
    }

    /// The store every test of this process shares, started on first use and stopped when
    /// the process exits; each test takes a bucket of its own from it.
    public static var shared: S3TestServer {
        get throws {
            try sharedStore.withLock { store in
                if let store { return store }
                let started = try S3TestServer()
                store = started
                atexit { S3TestServer.stopShared() }
                return started
            }
        }
    }

    private static let sharedStore = Mutex<S3TestServer?>(nil)

    private static func stopShared() {
        let store = sharedStore.withLock { s -> S3TestServer? in
            defer { s = nil }
            return s
        }
        store?.stop()
    }

    /// A new, empty bucket of `shared` and the store, from async code (the first use waits
    /// for the store to start, off the cooperative pool).
    public static func bucket(prefix: String = "t") async throws -> (store: S3TestServer, bucket: String) {
        try await blocking {
            let store = try shared
            return (store, try store.createBucket(prefix: prefix))
        }
    }

    /// Makes a new, empty bucket named `PREFIX-` and 16 random hex digits (a valid S3
    /// bucket name) and returns its name. Blocking.
    public func createBucket(prefix: String = "t") throws -> String {
        let name = "\(prefix)-\(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased())"
        let made = try native("PUT", name, headers: [("Content-Length", "0")])
        guard made.status == 201 else { throw ProcessFailure("Swift's PUT \(accountPath)/\(name) answered \(made.status): \(made.text.prefix(500))") }
        return name
    }

    /// Starts a store and makes `bucket` (blocking: see `start`). Each server prints
    /// `ready SERVER` once it accepts connections; a server that exits or prints nothing
    /// within `timeout` seconds fails the start with its log. A free port can be taken by
    /// another process between the choice and the bind: then the start is tried again on
    /// new ports, at most three times.
    public init(bucket: String = "outpost-media", timeout: Double = startDeadline) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.python),
              FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/swift/common/middleware/s3api") else {
            throw ProcessFailure("OpenStack Swift (python3-swift with s3api) is not installed: scripts/install-deps.sh test installs it")
        }
        let clock = ContinuousClock()
        let began = clock.now
        let deadline = Date().addingTimeInterval(timeout)
        var attempt = 1
        var started: (directory: String, ports: [Server: Int], processes: [Server: Subprocess], logs: [Server: String])
        while true {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-s3-\(UUID().uuidString.prefix(8))").path
            do {
                let launched = try Self.launch(directory: dir, deadline: deadline)
                started = (dir, launched.ports, launched.processes, launched.logs)
                break
            } catch is PortTaken where attempt < 3 {
                attempt += 1
            }
        }
        directory = started.directory
        port = started.ports[.proxy]!
        processes = started.processes
        logs = started.logs
        self.bucket = bucket
        do {
            (accountPath, authToken) = try Self.makeBucket(bucket, port: port, user: "test:tester", key: "testing")
        } catch {
            Self.stop(processes, directory: directory)
            throw error
        }
        startup = clock.now - began
    }

    /// A start that failed because a chosen port was taken before its server bound it.
    private struct PortTaken: Error, CustomStringConvertible {
        let description: String
    }

    /// Writes the store's files into `directory` and starts its four servers; returns once
    /// each has said it is ready. On failure nothing is left running and the directory is
    /// removed.
    private static func launch(directory: String, deadline: Date) throws -> (ports: [Server: Int], processes: [Server: Subprocess], logs: [Server: String]) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var ports: [Server: Int] = [:]
        for server in Server.allCases {
            var chosen = try PostgresCluster.freePort()
            while ports.values.contains(chosen) { chosen = try PostgresCluster.freePort() }
            ports[server] = chosen
        }
        // Only Debian's Swift: no Python search path of this process's reaches the servers.
        let environment = Subprocess.environment { $0 == "PYTHONPATH" || $0 == "PYTHONHOME" }
        let setup = try Subprocess.run(python, [script, "setup", directory] + Server.allCases.map { String(ports[$0]!) },
                                       environment: environment, errorToOutput: true)
        guard setup.status == 0 else {
            try? FileManager.default.removeItem(atPath: directory)
            throw ProcessFailure("s3-test-server.py setup exited \(setup.termination): \(setup.output.suffix(2000))")
        }
        var processes: [Server: Subprocess] = [:]
        var logs: [Server: String] = [:]
        do {
            // All four start at once (each takes seconds to import Swift), then each is waited for.
            for server in Server.allCases {
                let log = TestLogs.newFile(named: "swift-\(server.rawValue)")
                logs[server] = log
                processes[server] = try Subprocess(python, [script, "run", directory, server.rawValue, String(getpid())], environment: environment,
                                                   output: .capture, error: .file(log, append: true))
            }
            for server in Server.allCases {
                let line = try? processes[server]!.nextLine(timeout: max(deadline.timeIntervalSinceNow, 0))
                guard line == "ready \(server.rawValue)" else {
                    let log = TestLogs.tail(of: logs[server]!)
                    if log.contains("Could not bind to") {
                        throw PortTaken(description: "the Swift \(server.rawValue) server could not bind port \(ports[server]!), taken by another process; its log:\n\(log)")
                    }
                    let state = processes[server]!.exit.map { "it ended (\($0))" } ?? "it was not ready in time"
                    throw ProcessFailure("the Swift \(server.rawValue) server on port \(ports[server]!) did not start: \(state); its log:\n\(log)")
                }
            }
        } catch {
            stop(processes, directory: directory)
            throw error
        }
        return (ports, processes, logs)
    }

    /// Gets a token with tempauth's native login (`GET /auth/v1.0`) and makes the container
    /// `bucket` (`PUT /v1/AUTH_test/BUCKET`): plain HTTP, no SigV4. Returns the account's
    /// path and the token.
    private static func makeBucket(_ bucket: String, port: Int, user: String, key: String) throws -> (accountPath: String, token: String) {
        let login = try httpRequest(port: port, "GET", "/auth/v1.0", headers: [("X-Auth-User", user), ("X-Auth-Key", key)])
        guard login.status == 200, let token = login.header("X-Auth-Token"), let storage = login.header("X-Storage-Url"),
              let path = URL(string: storage)?.path, !path.isEmpty else {
            throw ProcessFailure("Swift's GET /auth/v1.0 answered \(login.status) \(login.headers): \(login.text.prefix(500))")
        }
        let made = try httpRequest(port: port, "PUT", "\(path)/\(bucket)", headers: [("X-Auth-Token", token), ("Content-Length", "0")])
        guard made.status == 201 || made.status == 202 else {
            throw ProcessFailure("Swift's PUT \(path)/\(bucket) answered \(made.status): \(made.text.prefix(500))")
        }
        return (path, token)
    }

    /// One request to Swift's native API as tempauth's user: `path` is below the account
    /// (`BUCKET/KEY`). Blocking: call it inside `blocking {}` from async tests.
    public func native(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8]? = nil) throws -> TestResponse {
        try httpRequest(port: port, method, "\(accountPath)/\(path)", headers: [("X-Auth-Token", authToken)] + headers, body: body)
    }

    /// The process id of one server.
    public func pid(of server: Server) -> Int32 { processes[server]!.pid }

    /// Whether one server's process has not exited.
    public func isRunning(_ server: Server) -> Bool { processes[server]!.isRunning }

    /// Stops one server (SIGTERM by its PID, SIGKILL after 10 s) and waits for it: an
    /// outage of that part of the store (the object server: every object read and write
    /// then fails). The proxy remembers a failed server for a minute: a store is not
    /// restarted, a test wanting it whole again starts another.
    public func stop(_ server: Server) {
        processes[server]!.stop(grace: 10)
    }

    /// Stops every server by its PID, waits for them, and removes the directory. Safe to
    /// call more than once.
    public func stop() {
        let first = stopped.withLock { s -> Bool in
            defer { s = true }
            return !s
        }
        guard first else { return }
        Self.stop(processes, directory: directory)
    }

    private static func stop(_ processes: [Server: Subprocess], directory: String) {
        // SIGTERM to all first, so the four shut down together, then each is waited for.
        for process in processes.values { process.send(SIGTERM) }
        for process in processes.values { process.stop(grace: 10) }
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }
}
