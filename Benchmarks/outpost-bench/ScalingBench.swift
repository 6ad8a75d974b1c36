// `outpost-bench push --store postgres://… --instances 1,3`: the push figures of the
// PostgreSQL store with one and with several `outpost-server` instances on one database,
// printed after (and beside) the SQLite figures of the same run (docs/benchmarks.md,
// "Scaling"). The same 8 keep-alive clients push the same batches as `push` does (200,000
// changes per figure, into one space, then into one space per client); with N
// instances the clients are spread round-robin over them, as a load balancer would.
//
// Each configuration pushes into spaces named after the run, so the previous configuration
// does not turn the writes into replays. Give it an empty database (`createdb`) per run:
// instances refuse a media directory other than the one the database first saw.
import Foundation
import OutpostSubprocess
import Glibc
import Synchronization

enum ScalingBench {
    /// One `outpost-server serve --store URL` child, stopped by its PID.
    final class Instance {
        let process: Subprocess
        let port: Int
        var pid: Int32 { process.pid }

        init(path: String, data: String, arguments: [String]) throws {
            (process, port) = try HTTPBench.startServer(
                path: path, arguments: ["serve", "--host", "127.0.0.1", "--port", "0", "--data", data, "--access-log", "false"] + arguments,
                timeout: 60)
        }

        /// SIGTERM to its PID, then wait (SIGKILL after 15 s).
        func stop() {
            process.stop(grace: 15)
        }
    }

    /// Runs the push figures for every instance count and prints them beside
    /// `sqliteRates` (changes/s by batch size, from the same run).
    static func push(serverPath: String, url: String, instances: [Int], batches: [Int], token: String, work: String,
                     sqliteRates: [Int: Double]) throws {
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        print("\nPostgreSQL store (\(redacted(url))), 8 clients spread round-robin over the instances")
        print("instances, spaces, batch:         changes/s   vs SQLite   p50 / p99 per push   instances' CPU")
        // One media directory shared by every instance of every configuration, as in production.
        let media = work + "/pg-media"
        try FileManager.default.createDirectory(atPath: media, withIntermediateDirectories: true)
        for count in instances {
            var servers: [Instance] = []
            defer { for s in servers { s.stop() } }
            for i in 0..<count {
                servers.append(try Instance(path: serverPath, data: work + "/pg-instance-\(count)-\(i)",
                                            arguments: ["--store", url, "--media-dir", media]))
            }
            // One hot space (every commit of it is serialized across instances: the price of
            // the visibility rule), then one space per client (commits run in parallel).
            for perClientSpace in [false, true] {
                for batch in batches {
                    let total = 200_000
                    let clients = 8
                    let perClient = total / batch / clients
                    let space = "pg\(run)-\(count)-\(batch)"
                    let bodies = (0..<clients).map { c in
                        (0..<perClient).map { r in SyncBench.pushBody(space: space, prefix: "b\(batch)-c\(c)-r\(r)", count: batch) }
                    }
                    let cpuBefore = servers.map { MemorySampler.cpu(pid: $0.pid).total }.reduce(0, +)
                    let result = try drive(ports: servers.map(\.port), token: token, space: space, bodies: bodies, perClientSpace: perClientSpace)
                    let cpu = servers.map { MemorySampler.cpu(pid: $0.pid).total }.reduce(0, +) - cpuBefore
                    let rate = Double(result.counted) / result.seconds
                    let versus = sqliteRates[batch].map { String(format: "%9.2f x", rate / $0) } ?? "        -  "
                    let label = "\(count) inst., \(perClientSpace ? "8 spaces" : "1 space "), \(batch):"
                    print(label.padding(toLength: 30, withPad: " ", startingAt: 0)
                          + String(format: "%9.0f %@   %6.1f / %6.1f ms", rate, versus, result.p50 * 1000, result.p99 * 1000)
                          + String(format: "   %.1f us/change", cpu / Double(max(result.counted, 1)) * 1e6)
                          + (result.counted == total ? "" : "  (only \(result.counted) of \(total) applied!)"))
                }
            }
            if count >= 2 { try crossInstanceLongPoll(ports: servers.map(\.port), token: token, space: "pg\(run)-\(count)-poll") }
        }
        print("load average after: \(HTTPBench.loadAverage())")
    }

    /// A pull held by instance 1 (`wait=30000`), answered after a push of one change
    /// through instance 0 (PostgreSQL's NOTIFY carries the commit across): the time from
    /// sending the push to the pull's answer arriving, 20 rounds.
    static func crossInstanceLongPoll(ports: [Int], token: String, space: String) throws {
        let pusher = try BenchConnection(port: ports[0])
        let waiter = try BenchConnection(port: ports[1])
        let (_, first) = try waiter.exchange(method: "GET", path: "/v1/spaces/\(space)/pull", token: token, body: nil)
        guard var cursor = SyncBench.field("next", in: first) else { throw HTTPBench.BenchError("a pull answered no cursor") }
        var latencies: [Double] = []
        for round in 0..<20 {
            try waiter.send(method: "GET", path: "/v1/spaces/\(space)/pull?wait=30000&since=\(cursor)", token: token, body: nil)
            // Give the pull time to reach instance 1 and start waiting.
            usleep(200_000)
            let t0 = Date()
            try pusher.send(method: "POST", path: "/v1/spaces/\(space)/push", token: token,
                            body: SyncBench.pushBody(space: space, prefix: "poll-\(round)", count: 1))
            let answer = try waiter.readResponse()
            latencies.append(Date().timeIntervalSince(t0))
            guard answer.status == 200, let next = SyncBench.field("next", in: answer.body) else { throw HTTPBench.BenchError("the held pull answered \(answer.status)") }
            cursor = next
            let push = try pusher.readResponse()
            guard push.status == 200 else { throw HTTPBench.BenchError("push answered \(push.status)") }
        }
        latencies.sort()
        print(String(format: "%d inst., long poll across instances (push via 0, pull held by 1), 20 rounds: p50 %.1f ms, max %.1f ms",
                     ports.count, latencies[latencies.count / 2] * 1000, latencies.last! * 1000))
    }

    /// Client `c` sends all its bodies to `ports[c % ports.count]` on one keep-alive
    /// connection; all clients at once.
    static func drive(ports: [Int], token: String, space: String, bodies: [[[UInt8]]], perClientSpace: Bool) throws -> DriveResult {
        try driveClients(bodies, port: { ports[$0 % ports.count] }) { connection, c, body in
            try SyncBench.push(body, on: connection, path: "/v1/spaces/\(space)\(perClientSpace ? "-c\(c)" : "")/push", token: token)
        }
    }

    /// The URL with its password hidden.
    static func redacted(_ url: String) -> String {
        guard let at = url.firstIndex(of: "@"), let scheme = url.range(of: "://"), let colon = url[scheme.upperBound..<at].firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + ":***" + String(url[at...])
    }
}
