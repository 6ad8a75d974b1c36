import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` in a temporary
/// directory, one `postgres` on 127.0.0.1 at a free port, a database per caller, and the
/// server stopped by its PID at the end.
///
/// The binaries come from `OUTPOST_PG_BIN` or the newest `/usr/lib/postgresql/*/bin`
/// (Debian's `postgresql` package; `scripts/install-deps.sh test` installs it). A missing
/// binary is an error, never a skip: tests that need PostgreSQL run in CI.
///
/// `initdb` refuses to run as root, and CI runs as root: then every PostgreSQL command runs
/// as the `postgres` user through `runuser`, in a directory that user owns.
///
/// The server runs under a small shell watchdog that stops it (SIGINT, a fast shutdown)
/// and removes the directory as soon as the process that started it is gone, so a test
/// run that crashes or is killed leaves no server and no files behind.
public final class PostgresCluster: Sendable {
    /// The directory holding the cluster (`data/`), its socket and its log.
    public let directory: String
    /// The TCP port on 127.0.0.1.
    public let port: Int
    /// The cluster's superuser.
    public let user = "outpost"
    /// The PID of the `postgres` server process.
    public let serverPID: Int32
    private let watchdog: Subprocess
    private let bin: String
    private let asPostgresUser: Bool
    private let stopped = Mutex(false)

    /// The cluster that every test of this process shares, started on first use and
    /// stopped when the process exits.
    public static var shared: PostgresCluster {
        get throws {
            try sharedCluster.withLock { cluster in
                if let cluster { return cluster }
                let started = try PostgresCluster(durable: false)
                cluster = started
                atexit { PostgresCluster.stopShared() }
                return started
            }
        }
    }

    private static let sharedCluster = Mutex<PostgresCluster?>(nil)

    /// `shared`, from async code: the first use waits for the cluster to start (initdb,
    /// seconds on a loaded machine), and that wait must not hold a thread of the
    /// concurrency pool, which the in-process servers of other tests answer on.
    public static func started() async throws -> PostgresCluster {
        try await blocking { try shared }
    }

    /// A new database of `shared`, from async code, made off the concurrency pool (see
    /// `started`; `CREATE DATABASE` blocks too).
    public static func database(prefix: String = "t") async throws -> String {
        try await blocking { try shared.createDatabase(prefix: prefix) }
    }

    private static func stopShared() {
        let cluster = sharedCluster.withLock { c -> PostgresCluster? in
            defer { c = nil }
            return c
        }
        cluster?.stop()
    }

    /// Where the PostgreSQL server binaries are.
    public static func binaryDirectory() throws -> String {
        if let override = ProcessInfo.processInfo.environment["OUTPOST_PG_BIN"] { return override }
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted()
        for version in versions.reversed() {
            let dir = "\(root)/\(version)/bin"
            if FileManager.default.isExecutableFile(atPath: dir + "/initdb") { return dir }
        }
        throw ProcessFailure("PostgreSQL server binaries not found under \(root)/*/bin (apt-get install postgresql, or set OUTPOST_PG_BIN); scripts/install-deps.sh test installs them")
    }

    /// Creates and starts a cluster. `durable: false` turns `fsync` off (tests: a killed
    /// outpost-server never needs PostgreSQL's own crash safety); benchmarks pass true.
    public init(durable: Bool = false, timeout: Double = 60) throws {
        bin = try Self.binaryDirectory()
        asPostgresUser = getuid() == 0
        // As root the server runs as `postgres`, which must be able to reach the directory:
        // /tmp, whatever TMPDIR says.
        let base = asPostgresUser ? URL(fileURLWithPath: "/tmp") : FileManager.default.temporaryDirectory
        let dir = base.appendingPathComponent("outpost-pg-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        directory = dir
        if asPostgresUser {
            guard let pw = getpwnam("postgres") else {
                throw ProcessFailure("running as root, and there is no postgres user to run PostgreSQL as (apt-get install postgresql creates it)")
            }
            guard chown(dir, pw.pointee.pw_uid, pw.pointee.pw_gid) == 0 else {
                throw ProcessFailure("chown \(dir) to postgres: \(String(cString: strerror(errno)))")
            }
        }
        let data = dir + "/data"
        let initdb = try Self.runTool(bin + "/initdb", ["-D", data, "-U", "outpost", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                                      asPostgresUser: asPostgresUser)
        guard initdb.status == 0 else {
            try? FileManager.default.removeItem(atPath: dir)
            throw ProcessFailure("initdb exited \(initdb.status): \(initdb.output)")
        }
        port = try Self.freePort()
        // Every PostgreSQL store holds five connections (two writers, two readers, the
        // listener), a server process as many, and the suite runs its tests in parallel:
        // the whole suite was seen at 381 at once, so 400 failed it with "too many clients".
        // An idle backend costs a few MB; 1,000 of them fit the machine.
        var settings = ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=1000", "-c", "shared_buffers=128MB",
                        "-c", "log_min_messages=warning", "-c", "deadlock_timeout=200ms"]
        if !durable { settings += ["-c", "fsync=off", "-c", "full_page_writes=off"] }
        let quoted = settings.map { "'\($0)'" }.joined(separator: " ")
        // The watchdog: start postgres, note its PID, stop it when the test process is gone.
        let script = """
            "$1/postgres" -D "$2/data" -p "$3" -k "$2" \(quoted) >"$2/server.log" 2>&1 &
            pg=$!
            echo "$pg" > "$2/server.pid"
            while [ -d "/proc/$4" ] && kill -0 "$pg" 2>/dev/null; do sleep 0.5; done
            kill -INT "$pg" 2>/dev/null
            wait "$pg"
            rm -rf "$2"
            """
        let arguments = ["-c", script, "sh", bin, dir, String(port), String(getpid())]
        let process = asPostgresUser
            ? try Subprocess("/usr/sbin/runuser", ["-u", "postgres", "--", "/bin/sh"] + arguments)
            : try Subprocess("/bin/sh", arguments)
        watchdog = process

        // Wait for the PID file and for the server to answer.
        let deadline = Date().addingTimeInterval(timeout)
        var pid: Int32 = 0
        var ready = false
        while Date() < deadline {
            if pid == 0, let text = try? String(contentsOfFile: dir + "/server.pid", encoding: .utf8), let p = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                pid = p
            }
            if pid != 0, (try? Self.runTool(bin + "/pg_isready", ["-h", "127.0.0.1", "-p", String(port), "-U", "outpost", "-d", "postgres", "-q"], asPostgresUser: false).status) == 0 {
                ready = true
                break
            }
            if !process.isRunning { break }
            usleep(100_000)
        }
        serverPID = pid
        guard ready else {
            let log = (try? String(contentsOfFile: dir + "/server.log", encoding: .utf8)) ?? ""
            if pid != 0 { kill(pid, SIGKILL) }
            process.stop(grace: 10)
            try? FileManager.default.removeItem(atPath: dir)
            throw ProcessFailure("PostgreSQL did not start within \(timeout) s on port \(port): \(log.suffix(2000))")
        }
    }

    /// A `postgres://` URL of database `name` on this cluster.
    public func url(database name: String) -> String {
        "postgres://\(user)@127.0.0.1:\(port)/\(name)?sslmode=disable&connect_timeout=10"
    }

    /// Creates a new, empty database and returns its URL.
    public func createDatabase(prefix: String = "t") throws -> String {
        let name = "\(prefix)_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased())"
        let result = try Self.runTool(bin + "/createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", user, name], asPostgresUser: false)
        guard result.status == 0 else { throw ProcessFailure("createdb \(name) exited \(result.status): \(result.output)") }
        return url(database: name)
    }

    /// Runs `psql -Atc SQL` on database `name` and returns its output (for test checks).
    public func psql(database name: String, _ sql: String) throws -> String {
        let result = try Self.runTool(bin + "/psql", ["-h", "127.0.0.1", "-p", String(port), "-U", user, "-d", name, "-v", "ON_ERROR_STOP=1", "-Atc", sql],
                                      asPostgresUser: false)
        guard result.status == 0 else { throw ProcessFailure("psql exited \(result.status): \(result.output)") }
        return result.output
    }

    /// The path of a PostgreSQL client or server program of this installation.
    public func tool(_ name: String) -> String { bin + "/" + name }

    /// Stops the server (SIGINT: a fast shutdown) by its PID, waits for it, and removes
    /// the directory. Safe to call more than once.
    public func stop() {
        let first = stopped.withLock { s -> Bool in
            if s { return false }
            s = true
            return true
        }
        guard first else { return }
        if serverPID > 0 { kill(serverPID, SIGINT) }
        if watchdog.wait(timeout: 30) == nil, serverPID > 0 {
            kill(serverPID, SIGKILL)
            watchdog.wait()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ProcessFailure("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw ProcessFailure("bind: \(String(cString: strerror(errno)))") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw ProcessFailure("getsockname: \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Runs a program to completion (as `postgres` when asked) and returns its status and
    /// its standard output and error together.
    static func runTool(_ path: String, _ arguments: [String], asPostgresUser: Bool) throws -> (status: Int32, output: String) {
        // Run from a directory every user can enter (runuser keeps the working directory).
        let result = asPostgresUser
            ? try Subprocess.run("/usr/sbin/runuser", ["-u", "postgres", "--", path] + arguments, workingDirectory: "/", errorToOutput: true)
            : try Subprocess.run(path, arguments, workingDirectory: "/", errorToOutput: true)
        return (result.status, result.output)
    }
}
