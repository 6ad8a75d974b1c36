// `outpost-bench http`: the HTTP engine against nginx on the same machine, same client.
//
// 1. Starts the release `outpost-server serve --port 0` (next to this binary) on a
//    temporary data directory, and nginx (one worker, daemon off, access_log off) serving
//    a static file as large as the /healthz body on a free port.
// 2. Drives both with wrk: keep-alive, the same connections, threads and duration, after
//    a short warm-up each; prints requests/s and p50/p99 side by side and the ratio.
//    Then a pull of one record (`limit=1` from the middle of a space of 10,000, an HS256
//    token) on the same connections, its rounds interleaved with /healthz's.
// 3. On a fresh server: RSS at start, then with 10,000 idle keep-alive connections open
//    (each has sent one request and read its answer).
//
// Goals (docs/benchmarks.md): /healthz at >= nginx's requests/s with 64 connections and
// p99 < 5 ms; 10,000 idle connections with RSS < 300 MB. Every process started here is
// stopped by its own PID.
import Foundation
import OutpostSubprocess
import Glibc
import OutpostHTTP

enum HTTPBench {
    struct Options {
        var connections = 64
        var threads = 2
        var seconds = 10
        var warmup = 2
        var rounds = 1
        var idleConnections = 10_000
        var eventLoops = 0
        var server: String?
        var skipNginx = false
        var skipIdle = false
        var skipPull = false
        var fileMegabytes = 1024
        var nice: Int?
    }

    struct BenchError: Error, CustomStringConvertible {
        var description: String
        init(_ d: String) { description = d }
    }

    static let help = """
        usage: outpost-bench http [--connections 64] [--threads 2] [--duration 10] [--warmup 2]
                                  [--rounds 1] [--idle 10000] [--event-loops N] [--server PATH]
                                  [--no-nginx] [--no-idle] [--no-pull] [--file-mb 1024] [--nice N]
        --file-mb 0 skips the file download (sendfile) measurement.
        --nice N runs the bench and every process it starts at that nice value (e.g. -10,
        as root) so other work on a shared machine preempts neither side.
        """

    static func run(arguments: [String]) async throws {
        var o = Options()
        var options = OptionReader(arguments, help: help)
        while let option = options.next() {
            switch option {
            case "--connections": o.connections = try options.number()
            case "--threads": o.threads = try options.number()
            case "--duration": o.seconds = try options.number()
            case "--warmup": o.warmup = try options.number()
            case "--rounds": o.rounds = max(1, try options.number())
            case "--idle": o.idleConnections = try options.number()
            case "--event-loops": o.eventLoops = try options.number()
            case "--server": o.server = try options.value()
            case "--no-nginx": o.skipNginx = true
            case "--no-idle": o.skipIdle = true
            case "--no-pull": o.skipPull = true
            case "--file-mb": o.fileMegabytes = try options.number()
            case "--nice":
                let v = try options.value()
                guard let n = Int(v) else { throw BenchError("--nice needs a number, not \(v)") }
                o.nice = n
            case "-h", "--help":
                print(help)
                return
            default: throw options.unknown(option)
            }
        }
        try await bench(o)
    }

    // MARK: The run

    static func bench(_ o: Options) async throws {
        raiseOpenFileLimit()
        if let nice = o.nice {
            // Children (server, nginx, wrk, curl) inherit the process's nice value.
            guard setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, Int32(nice)) == 0 else {
                throw BenchError("setpriority(\(nice)) failed: errno \(errno) (negative values need root)")
            }
        }
        let serverPath = try locateServer(o.server)
        let work = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        let wrkCommand = "wrk -t\(o.threads) -c\(o.connections) -d\(o.seconds)s --latency"
        print("outpost-bench http: \(wrkCommand), keep-alive, GET /healthz (outpost) vs a 15-byte static file (nginx)")
        print("machine: \(ProcessInfo.processInfo.activeProcessorCount) cores; nice \(o.nice.map(String.init) ?? "unchanged"); server: \(serverPath)")

        let loadBefore = loadAverage()
        let (outpostRuns, pullRuns) = try measureOutpost(o, serverPath: serverPath, work: work)
        let nginxRuns = o.skipNginx ? [] : try measureNginx(o, work: work)
        report(o, outpost: outpostRuns, pull: pullRuns, nginx: nginxRuns, loadBefore: loadBefore)

        if o.fileMegabytes > 0 {
            print("")
            try await fileDownload(megabytes: o.fileMegabytes, directory: work)
        }

        if !o.skipIdle && o.idleConnections > 0 {
            print("")
            try measureIdle(o, serverPath: serverPath, work: work)
        }
    }

    /// wrk's rounds of /healthz and of the one-record pull on a server of its own (after a
    /// warm-up of each), with the server's CPU per request.
    static func measureOutpost(_ o: Options, serverPath: String, work: String) throws -> (healthz: [WrkResult], pull: [WrkResult]) {
        var outpostRuns: [WrkResult] = []
        var pullRuns: [WrkResult] = []
        // The pull's token is signed with the secret the server is started with.
        setenv("OUTPOST_JWT_SECRET", IntegrationsBench.secret, 1)
        let server = try ServerChild.start(path: serverPath, data: work + "/data", eventLoops: o.eventLoops)
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)/healthz"
        try check(url: url)
        let pull = o.skipPull ? nil : try onePullURL(port: server.port)
        let authorization = ["Authorization: Bearer \(IntegrationsBench.hsToken())"]
        if o.warmup > 0 {
            _ = try runWrk(url: url, threads: o.threads, connections: o.connections, seconds: o.warmup)
            if let pull { _ = try runWrk(url: pull, headers: authorization, threads: o.threads, connections: o.connections, seconds: o.warmup) }
        }
        // The server's CPU per request beside the rates: on a machine shared with other
        // work it moves far less than requests/s do.
        func measured(_ run: () throws -> WrkResult) rethrows -> WrkResult {
            let (run, cpu) = try withCPU(of: server.pid, run)
            var result = run
            result.serverMicrosecondsPerRequest = cpu * 1e6 / max(1, result.requestsPerSecond * Double(o.seconds))
            return result
        }
        for _ in 0..<o.rounds {
            outpostRuns.append(try measured { try runWrk(url: url, threads: o.threads, connections: o.connections, seconds: o.seconds) })
            if let pull {
                pullRuns.append(try measured { try runWrk(url: pull, headers: authorization, threads: o.threads, connections: o.connections, seconds: o.seconds) })
            }
        }
        print("outpost-server RSS after load: \(formatMB(rss(pid: server.pid)))")
        return (outpostRuns, pullRuns)
    }

    /// wrk's rounds of the static file on nginx, after a warm-up.
    static func measureNginx(_ o: Options, work: String) throws -> [WrkResult] {
        var nginxRuns: [WrkResult] = []
        let nginx = try NginxChild.start(directory: work + "/nginx")
        defer { nginx.stop() }
        let url = "http://127.0.0.1:\(nginx.port)/healthz"
        try check(url: url)
        if o.warmup > 0 { _ = try runWrk(url: url, threads: o.threads, connections: o.connections, seconds: o.warmup) }
        for _ in 0..<o.rounds {
            nginxRuns.append(try runWrk(url: url, threads: o.threads, connections: o.connections, seconds: o.seconds))
        }
        return nginxRuns
    }

    /// Every round when there were several, then the best round of each side (the one
    /// least disturbed by other work) with the ratio and the goals.
    static func report(_ o: Options, outpost outpostRuns: [WrkResult], pull pullRuns: [WrkResult], nginx nginxRuns: [WrkResult], loadBefore: String) {
        let best = outpostRuns.max { $0.requestsPerSecond < $1.requestsPerSecond }!
        if o.rounds > 1 {
            print("rounds (requests/s, p99):")
            print("  outpost-server: " + outpostRuns.map { String(format: "%.0f, %.2f ms, %.1f µs CPU", $0.requestsPerSecond, $0.p99Milliseconds, $0.serverMicrosecondsPerRequest) }.joined(separator: "; "))
            if !pullRuns.isEmpty {
                print("  one-record pull: " + pullRuns.map { String(format: "%.0f, %.2f ms, %.1f µs CPU", $0.requestsPerSecond, $0.p99Milliseconds, $0.serverMicrosecondsPerRequest) }.joined(separator: "; "))
            }
            if !nginxRuns.isEmpty {
                print("  nginx:          " + nginxRuns.map { String(format: "%.0f, %.2f ms", $0.requestsPerSecond, $0.p99Milliseconds) }.joined(separator: "; "))
            }
        }
        print("load average (1 min) before and after: \(loadBefore), \(loadAverage())")
        print("")
        print(pad("", 16) + pad("requests/s", 14) + pad("p50", 12) + pad("p99", 12) + "errors")
        print(row("outpost-server", best))
        if let pullBest = pullRuns.max(by: { $0.requestsPerSecond < $1.requestsPerSecond }) { print(row("one-record pull", pullBest)) }
        if let nginxBest = nginxRuns.max(by: { $0.requestsPerSecond < $1.requestsPerSecond }) {
            print(row("nginx", nginxBest))
            let ratio = best.requestsPerSecond / nginxBest.requestsPerSecond
            print(String(format: "ratio outpost/nginx: %.2fx requests/s", ratio))
            print("goal requests/s >= nginx: \(verdict(ratio >= 1))")
        }
        print("goal p99 < 5 ms: \(verdict(best.p99Milliseconds < 5)) (\(String(format: "%.2f", best.p99Milliseconds)) ms)")
    }

    /// A fresh server's RSS at start and with `o.idleConnections` idle keep-alive
    /// connections open.
    static func measureIdle(_ o: Options, serverPath: String, work: String) throws {
        let server = try ServerChild.start(path: serverPath, data: work + "/data-idle", eventLoops: o.eventLoops)
        defer { server.stop() }
        let atStart = rss(pid: server.pid)
        let sockets = try openIdleConnections(port: server.port, count: o.idleConnections)
        defer { for fd in sockets { close(fd) } }
        usleep(500_000)
        let withIdle = rss(pid: server.pid)
        print("idle: \(sockets.count) keep-alive connections (one request each, then idle)")
        print("  server RSS at start \(formatMB(atStart)), with them open \(formatMB(withIdle)) (+\(formatMB(withIdle - atStart)), \(sockets.isEmpty ? 0 : (withIdle - atStart) / sockets.count) bytes each)")
        print("  goal RSS < 300 MB: \(verdict(withIdle < 300 * 1024 * 1024))")
    }

    /// Serves a file of `megabytes` MiB with `.file` from an in-process engine and
    /// downloads it with curl: throughput over loopback, and this process's RSS before and
    /// after (sendfile never brings the file into memory).
    static func fileDownload(megabytes: Int, directory: String) async throws {
        let path = directory + "/download.bin"
        guard FileManager.default.createFile(atPath: path, contents: nil), let handle = FileHandle(forWritingAtPath: path) else {
            throw BenchError("cannot create \(path)")
        }
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var rng = SystemRandomNumberGenerator()
        for i in block.indices { block[i] = UInt8.random(in: 0...255, using: &rng) }
        for _ in 0..<megabytes { handle.write(Data(block)) }
        try handle.close()
        let size = Int64(megabytes) << 20
        var router = Router()
        router.add(.GET, "/download") { _ in
            HTTPResponse(headers: ["Content-Type": "application/octet-stream"], body: .file(path: path, offset: 0, length: size))
        }
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0), router: router)
        let port = try server.start()
        let before = rss(pid: getpid())
        // Warm the page cache so the figure is the engine and loopback, not the disk.
        _ = try runCommand("/usr/bin/env", ["dd", "if=\(path)", "of=/dev/null", "bs=1M", "status=none"])
        let speed = try runCommand("/usr/bin/env", ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}", "http://127.0.0.1:\(port)/download"])
        let after = rss(pid: getpid())
        await server.shutdown(grace: .seconds(1))
        try? FileManager.default.removeItem(atPath: path)
        let parts = speed.split(separator: " ")
        guard parts.count == 2, let bytesPerSecond = Double(parts[0]), Int64(parts[1]) == size else {
            throw BenchError("download failed: curl said \(speed)")
        }
        print("file: \(megabytes) MiB with .file (sendfile) to curl over loopback: \(String(format: "%.2f", bytesPerSecond / 1e9)) GB/s; this process's RSS \(formatMB(before)) before, \(formatMB(after)) after")
        print("  goal (later) >= 1 GB/s: \(bytesPerSecond >= 1e9 ? "met" : "MISSED")")
    }

    /// The 1-minute load average: other work on the machine skews latency figures.
    static func loadAverage() -> String {
        (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)).map { String($0.split(separator: " ").first ?? "?") } ?? "?"
    }

    static func row(_ name: String, _ r: WrkResult) -> String {
        pad(name, 16) + pad(String(format: "%.0f", r.requestsPerSecond), 14)
            + pad(String(format: "%.3f ms", r.p50Milliseconds), 12) + pad(String(format: "%.3f ms", r.p99Milliseconds), 12)
            + (r.errors.isEmpty ? "none" : r.errors)
    }

    static func pad(_ s: String, _ n: Int) -> String { s.padding(toLength: max(n, s.count + 1), withPad: " ", startingAt: 0) }

    static func formatMB(_ bytes: Int) -> String { String(format: "%.1f MB", Double(bytes) / 1_048_576) }

    // MARK: wrk

    /// Fills a space of 10,000 records on the server at `port` and returns the URL of a pull
    /// of one record from its middle, checked to answer one record.
    static func onePullURL(port: Int) throws -> String {
        let connection = try BenchConnection(port: port)
        let path = try seedOneRecordPull(on: connection, space: "bench", token: IntegrationsBench.hsToken())
        let (status, body) = try connection.exchange(method: "GET", path: path, token: IntegrationsBench.hsToken(), body: nil)
        guard status == 200, SyncBench.count(#""collection":"#, in: body) == 1 else {
            throw BenchError("the one-record pull answered \(status): \(String(decoding: body.prefix(300), as: UTF8.self))")
        }
        return "http://127.0.0.1:\(port)" + path
    }

    struct WrkResult {
        var requestsPerSecond: Double
        var p50Milliseconds: Double
        var p99Milliseconds: Double
        var errors: String
        /// The server's CPU time (user and system, all threads) per request, when measured.
        var serverMicrosecondsPerRequest: Double = .nan
    }

    static func runWrk(url: String, headers: [String] = [], threads: Int, connections: Int, seconds: Int) throws -> WrkResult {
        let output = try runCommand("/usr/bin/env", ["wrk", "-t\(threads)", "-c\(connections)", "-d\(seconds)s", "--latency"] + headers.flatMap { ["-H", $0] } + [url])
        var result = WrkResult(requestsPerSecond: 0, p50Milliseconds: .nan, p99Milliseconds: .nan, errors: "")
        var errors: [String] = []
        for line in output.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            if line.hasPrefix("Requests/sec:"), fields.count >= 2 { result.requestsPerSecond = Double(fields[1]) ?? 0 }
            if line.hasPrefix("50%"), fields.count >= 2 { result.p50Milliseconds = milliseconds(fields[1]) }
            if line.hasPrefix("99%"), fields.count >= 2 { result.p99Milliseconds = milliseconds(fields[1]) }
            if line.hasPrefix("Socket errors") || line.hasPrefix("Non-2xx") { errors.append(line) }
        }
        guard result.requestsPerSecond > 0 else { throw BenchError("could not read wrk's output:\n\(output)") }
        result.errors = errors.joined(separator: "; ")
        return result
    }

    /// wrk prints latencies as `612.00us`, `1.20ms`, `2.00s`.
    static func milliseconds(_ text: String) -> Double {
        for (suffix, scale) in [("us", 0.001), ("ms", 1.0), ("s", 1000.0)] where text.hasSuffix(suffix) {
            return (Double(text.dropLast(suffix.count)) ?? .nan) * scale
        }
        return .nan
    }

    // MARK: Processes

    static func runCommand(_ path: String, _ arguments: [String]) throws -> String {
        let result = try Subprocess.run(path, arguments, errorToOutput: true)
        guard result.status == 0 else { throw BenchError("\(arguments.first ?? path) failed:\n\(result.output)") }
        return result.output
    }

    /// The release outpost-server next to this binary; built when missing.
    static func locateServer(_ explicit: String?) throws -> String {
        if let explicit { return explicit }
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        let beside = me.deletingLastPathComponent().appendingPathComponent("outpost-server").path
        if FileManager.default.isExecutableFile(atPath: beside) { return beside }
        // .build/<triple>/release/outpost-bench: the scratch path is two levels up.
        let configuration = me.deletingLastPathComponent().lastPathComponent
        let scratch = me.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        print("outpost-server is not built next to \(me.path); building it: swift build -c \(configuration) --product outpost-server --scratch-path \(scratch)")
        _ = try? runCommand("/usr/bin/env", ["swift", "build", "-c", configuration, "--product", "outpost-server", "--scratch-path", scratch])
        guard FileManager.default.isExecutableFile(atPath: beside) else {
            throw BenchError("no outpost-server at \(beside); build it with `swift build -c release --product outpost-server` (same scratch path as outpost-bench) or pass --server PATH")
        }
        return beside
    }

    /// An `outpost-server serve --port 0` child.
    final class ServerChild {
        let process: Subprocess
        let port: Int
        var pid: Int32 { process.pid }

        private init(process: Subprocess, port: Int) {
            self.process = process
            self.port = port
        }

        static func start(path: String, data: String, eventLoops: Int, extra: [String] = []) throws -> ServerChild {
            var args = ["serve", "--host", "127.0.0.1", "--port", "0", "--data", data, "--access-log", "false"] + extra
            if eventLoops > 0 { args += ["--event-loops", String(eventLoops)] }
            let (process, port) = try startServer(path: path, arguments: args, timeout: 30)
            return ServerChild(process: process, port: port)
        }

        /// SIGTERM to its PID, then wait (SIGKILL after 15 s).
        func stop() {
            process.stop(grace: 15)
        }
    }

    /// Every client of a benchmark connects from 127.0.0.1, standing for many devices (10,000
    /// idle connections, 10,000 long polls): the per-address connection limit is off. Set by
    /// its variable, which a server built before the setting existed ignores, so `--server`
    /// can name one of those for a comparison.
    static let benchEnvironment = ["OUTPOST_MAX_CONNECTIONS_PER_ADDRESS": "0"]

    /// Starts `outpost-server ARGS` (its log on this process's standard error) and waits
    /// for its `listening on http://HOST:PORT` line; returns the child and the port.
    static func startServer(path: String, arguments: [String], timeout: Double) throws -> (Subprocess, Int) {
        let process = try Subprocess(path, arguments, environment: Subprocess.environment(adding: benchEnvironment),
                                     output: .capture, error: .inherit)
        do {
            return (process, try process.listeningAddress(timeout: timeout).port)
        } catch {
            throw BenchError("\(error)")
        }
    }

    /// nginx with a config of our own: one worker, daemon off, no access log, a static file.
    final class NginxChild {
        let process: Subprocess
        let port: Int

        private init(process: Subprocess, port: Int) {
            self.process = process
            self.port = port
        }

        static func start(directory: String) throws -> NginxChild {
            let fm = FileManager.default
            let www = directory + "/www"
            try fm.createDirectory(atPath: www, withIntermediateDirectories: true)
            // Same bytes as outpost's /healthz body.
            guard fm.createFile(atPath: www + "/healthz", contents: Data(#"{"status":"ok"}"#.utf8)) else {
                throw BenchError("cannot write \(www)/healthz")
            }
            // Workers may run as another user (nobody): let them reach and read the file.
            for path in [(directory as NSString).deletingLastPathComponent, directory, www] { chmod(path, 0o755) }
            chmod(www + "/healthz", 0o644)
            let port = try freePort()
            let config = """
                worker_processes 1;
                daemon off;
                master_process on;
                pid \(directory)/nginx.pid;
                error_log \(directory)/error.log warn;
                events { worker_connections 20000; }
                http {
                    access_log off;
                    default_type application/json;
                    keepalive_requests 100000000;
                    keepalive_timeout 75s;
                    client_body_temp_path \(directory)/tmp-body;
                    proxy_temp_path \(directory)/tmp-proxy;
                    fastcgi_temp_path \(directory)/tmp-fastcgi;
                    uwsgi_temp_path \(directory)/tmp-uwsgi;
                    scgi_temp_path \(directory)/tmp-scgi;
                    server {
                        listen 127.0.0.1:\(port);
                        root \(www);
                    }
                }
                """
            let configPath = directory + "/nginx.conf"
            try config.write(toFile: configPath, atomically: true, encoding: .utf8)
            let p = try Subprocess("/usr/sbin/nginx", ["-p", directory, "-e", directory + "/error.log", "-c", configPath],
                                   output: .standardError, error: .inherit)
            let child = NginxChild(process: p, port: port)
            // Ready when it accepts a connection.
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline {
                if let fd = try? connectTo(port: port) {
                    close(fd)
                    return child
                }
                guard p.isRunning else { break }
                usleep(20_000)
            }
            child.stop()
            throw BenchError("nginx did not start; see \(directory)/error.log")
        }

        /// SIGTERM to the master's PID (it stops its worker), then wait.
        func stop() {
            process.stop(grace: 10)
        }
    }

    // MARK: Sockets

    static func raiseOpenFileLimit() {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0 else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(resource, &limit)
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard ok else { throw BenchError("cannot find a free port") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    /// `call` (bind, connect) on the IPv4 socket address `address`:`port`.
    private static func withIPv4(_ address: String, port: Int, _ call: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr(address)
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// A blocking connection to 127.0.0.1:`port`, from the loopback address `source` when
    /// given (each 127.x.y.z has its own ephemeral ports: a fleet of 100,000 connections
    /// needs several).
    /// `receiveTimeout`: seconds a read may wait (10; a finalize that publishes a large file
    /// to a bucket takes longer).
    static func connectTo(port: Int, from source: String? = nil, receiveTimeout: Int = 10) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: errno \(errno) (file limit?)") }
        if let source {
            // The port is chosen at connect(2), by the whole 4-tuple, instead of at bind(2)
            // by the address alone: so ports in TIME_WAIT from an earlier fleet are taken
            // again on loopback (tcp_tw_reuse) instead of running the address out of ports.
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_IP), 24 /* IP_BIND_ADDRESS_NO_PORT */, &one, socklen_t(MemoryLayout<Int32>.size))
            guard withIPv4(source, port: 0, { bind(fd, $0, $1) }) == 0 else {
                let e = errno
                close(fd)
                throw BenchError("bind \(source): errno \(e) (ephemeral ports of that address used up?)")
            }
        }
        guard withIPv4("127.0.0.1", port: port, { connect(fd, $0, $1) }) == 0 else {
            let e = errno
            close(fd)
            throw BenchError("connect: errno \(e)")
        }
        var tv = timeval(tv_sec: receiveTimeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// One GET /healthz on a new connection, answer read, socket kept open.
    static func openIdleConnections(port: Int, count: Int) throws -> [Int32] {
        let request = Array("GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n".utf8)
        var sockets: [Int32] = []
        sockets.reserveCapacity(count)
        var buffer = [UInt8](repeating: 0, count: 4096)
        do {
            for _ in 0..<count {
                let fd = try connectTo(port: port)
                sockets.append(fd)
                guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else {
                    throw BenchError("send failed: errno \(errno)")
                }
                // The answer is small; read until its body ends.
                var got: [UInt8] = []
                while !(got.count > 4 && String(decoding: got, as: UTF8.self).hasSuffix(#"{"status":"ok"}"#)) {
                    let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    guard n > 0 else { throw BenchError("connection \(sockets.count) closed before its answer (errno \(errno))") }
                    got += buffer[0..<n]
                }
            }
        } catch {
            for fd in sockets { close(fd) }
            throw error
        }
        return sockets
    }

    /// A GET that must answer 200, so a misconfigured side fails loudly before wrk runs.
    static func check(url: String) throws {
        let text = try runCommand("/usr/bin/env", ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url])
        guard text == "200" else { throw BenchError("\(url) answered \(text), not 200") }
    }

    /// Resident memory of a process from /proc/PID/status (VmRSS), in bytes.
    static func rss(pid: Int32) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let kb = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) } ?? 0
            return kb * 1024
        }
        return 0
    }

    static func makeTemporaryDirectory() throws -> String {
        var template = Array((NSTemporaryDirectory() + "/outpost-bench-XXXXXX").utf8CString)
        guard let p = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw BenchError("mkdtemp failed")
        }
        return String(cString: p)
    }
}
