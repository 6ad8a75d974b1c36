import Foundation
import OutpostCore
import OutpostHTTP
import OutpostServer
import Synchronization

/// What `driveClients` measured: what the answers counted, the wall time, and the latency of one
/// piece of work at the median and the 99th percentile.
struct DriveResult {
    var counted = 0
    var seconds = 0.0
    var p50 = 0.0
    var p99 = 0.0
}

/// Runs every list of work at once, list `c` on a thread and a keep-alive connection of its
/// own to `port(c)`. `send` does one piece of work and returns what its answer counted (it
/// throws on a wrong answer, which ends the run with that error).
func driveClients<Work>(_ lists: [[Work]], port: (Int) -> Int,
                 send: @escaping @Sendable (BenchConnection, Int, Work) throws -> Int) throws -> DriveResult {
    let counted = Atomic<Int>(0)
    let latencies = Mutex<[Double]>([])
    let failure = Mutex<String?>(nil)
    let group = DispatchGroup()
    let start = Date()
    for (c, list) in lists.enumerated() {
        let mine = Owned(list)
        let port = port(c)
        group.enter()
        Thread.detachNewThread {
            defer { group.leave() }
            do {
                let connection = try BenchConnection(port: port)
                var times: [Double] = []
                for work in mine.value {
                    let t0 = Date()
                    let n = try send(connection, c, work)
                    times.append(Date().timeIntervalSince(t0))
                    counted.add(n, ordering: .relaxed)
                }
                latencies.withLock { $0 += times }
            } catch {
                failure.withLock { $0 = "\(error)" }
            }
        }
    }
    group.wait()
    let seconds = Date().timeIntervalSince(start)
    if let f = failure.withLock({ $0 }) { throw HTTPBench.BenchError(f) }
    let sorted = latencies.withLock { $0 }.sorted()
    return DriveResult(counted: counted.load(ordering: .relaxed), seconds: seconds,
                       p50: sorted[sorted.count / 2], p99: sorted[min(sorted.count - 1, sorted.count * 99 / 100)])
}

/// An area's options, read one at a time; a missing or bad value is an error that names
/// the option and shows the area's help.
struct OptionReader {
    private let arguments: [String]
    private let help: String
    private var index = -1

    init(_ arguments: [String], help: String) {
        self.arguments = arguments
        self.help = help
    }

    /// The next option, or nil after the last.
    mutating func next() -> String? {
        index += 1
        return index < arguments.count ? arguments[index] : nil
    }

    /// The value after the current option.
    mutating func value() throws -> String {
        let option = arguments[index]
        index += 1
        guard index < arguments.count else { throw HTTPBench.BenchError("\(option) needs a value\n\(help)") }
        return arguments[index]
    }

    /// The value after the current option, a whole number of at least `minimum`.
    mutating func number(atLeast minimum: Int = 0) throws -> Int {
        let option = arguments[index]
        let text = try value()
        guard let n = Int(text), n >= minimum else { throw HTTPBench.BenchError("\(option) needs a number of at least \(minimum), not \(text)") }
        return n
    }

    /// The error for an option the area does not know.
    func unknown(_ option: String) -> HTTPBench.BenchError {
        HTTPBench.BenchError("unknown option \(option)\n\(help)")
    }
}

// MARK: Shared setup

/// A token signed with the HS256 `secret` a bench's servers are started with (through
/// `OUTPOST_JWT_SECRET`), for every space and valid for a day.
func benchToken(secret: String, sub: String = "bench", scope: Claims.Scope = .write, admin: Bool = false,
                roles: [String]? = nil) -> String {
    JWTAuthority(secret: Array(secret.utf8)).sign(
        Claims(sub: sub, exp: Int64(Date().timeIntervalSince1970) + 86_400, spaces: ["*"], scope: scope, admin: admin,
               extra: roles.map { ["roles": .array($0.map { .string($0) })] } ?? [:]))
}

/// Fills `space` with 10,000 records (20 pushes of 500 on `connection`) and returns the path
/// of a pull of one record from its middle: what a device that is almost up to date asks for.
func seedOneRecordPull(on connection: BenchConnection, space: String, token: String) throws -> String {
    for r in 0..<20 {
        _ = try SyncBench.push(SyncBench.pushBody(space: space, prefix: "seed-\(r)", count: 500), on: connection,
                               path: "/v1/spaces/\(space)/push", token: token)
    }
    let epoch = try SyncBench.epochOf(connection: connection)
    return "/v1/spaces/\(space)/pull?limit=1&since=\(epoch).5000"
}

/// What `body` returns and the CPU time (user and system, all threads) process `pid` spent
/// while it ran, in seconds.
func withCPU<T>(of pid: Int32, _ body: () throws -> T) rethrows -> (T, Double) {
    let before = MemorySampler.cpu(pid: pid).total
    let result = try body()
    return (result, MemorySampler.cpu(pid: pid).total - before)
}

/// One GET on a new connection through the engine's `HTTPClient`: the benches' untimed
/// probes (readiness, `/v1/info`, `/metrics`), where no figure depends on the client.
func probe(port: Int, _ path: String, token: String? = nil) throws -> HTTPClientResponse {
    try HTTPClient(port: port, timeout: 10).request("GET", path, headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [])
}

/// "met" or "MISSED", as every goal line says.
func verdict(_ met: Bool) -> String { met ? "met" : "MISSED" }
