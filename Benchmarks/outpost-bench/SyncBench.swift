// `outpost-bench push` and `outpost-bench pull`: the sync service through the release
// `outpost-server` (docs/protocol.md sections 4 and 5), each figure beside its ceiling from
// the same run on the same machine.
//
// push: 8 keep-alive clients push batches of 100 and of 500 new records (~200 bytes of
//   data each). Ceiling: raw SQLite on the same disk doing the same statements per change
//   (idempotency lookup, record lookup, record upsert, idempotency insert) in one
//   transaction per batch, WAL with synchronous=FULL like the server's default.
// pull: a space of 1,000,000 records of ~200 bytes pulled from the start in pages of
//   1,000. Ceiling: raw SQLite reading the same rows by the same index in pages of 1,000.
//   Then one page's time in a space of 10,000 and of 1,000,000 records, and the wake-up
//   latency of 2,000 long-poll pulls held open when one change is committed.
// longpoll: the wake-up alone, for each count of --waiters (2000,10000).
//
// Goals (issues 3 and 16): push >= 0.4 x ceiling and >= 150,000 changes/s; pull >= 400,000
// records/s; page time at 1,000,000 within 1.5 x of 10,000; long-poll wake-up p99 < 50 ms
// with 2,000 waiting pulls and < 150 ms with 10,000.
import Foundation
import OutpostCLinux
import Glibc
import OutpostCore
import OutpostSQLite
import OutpostServer
import Synchronization

enum SyncBench {
    static let secret = "outpost-bench-secret-0123456789abcdef"

    static func run(area: String, arguments: [String]) async throws {
        var serverPath: String?
        var records = 1_000_000
        var waiters = [2_000]
        var batches = [100, 500]
        var store: String?
        var instances = [1, 3]
        var perfControl: PerfControl?
        var rounds = 5
        var clientThreads = 2
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--server" where i + 1 < arguments.count: serverPath = arguments[i + 1]; i += 1
            case "--records" where i + 1 < arguments.count: records = Int(arguments[i + 1]) ?? records; i += 1
            case "--waiters" where i + 1 < arguments.count: waiters = arguments[i + 1].split(separator: ",").compactMap { Int($0) }; i += 1
            case "--batches" where i + 1 < arguments.count: batches = arguments[i + 1].split(separator: ",").compactMap { Int($0) }; i += 1
            case "--store" where i + 1 < arguments.count: store = arguments[i + 1]; i += 1
            case "--instances" where i + 1 < arguments.count: instances = arguments[i + 1].split(separator: ",").compactMap { Int($0) }; i += 1
            case "--perf-control" where i + 1 < arguments.count: perfControl = try PerfControl(arguments[i + 1]); i += 1
            case "--rounds" where i + 1 < arguments.count: rounds = max(1, Int(arguments[i + 1]) ?? rounds); i += 1
            case "--client-threads" where i + 1 < arguments.count: clientThreads = max(1, Int(arguments[i + 1]) ?? clientThreads); i += 1
            case "-h", "--help":
                print("usage: outpost-bench \(area) [--server PATH] [--batches 100,500] [--records 1000000] [--waiters 2000[,10000,100000]] [--rounds 5] [--client-threads 2] [--store postgres://… [--instances 1,3]] [--perf-control CTL_FIFO,ACK_FIFO]")
                print("  --waiters: long polls held on one server, from 20,000 per loopback source address (127.0.0.2, .3, …); the server is started with --max-connections and --max-connections-per-address for the largest")
                print("  --perf-control: the fifos of `perf record -D -1 --control fifo:CTL,ACK`; recording is enabled only from each long-poll push to its last answer")
                return
            default: throw HTTPBench.BenchError("unknown option \(arguments[i])")
            }
            i += 1
        }
        HTTPBench.raiseOpenFileLimit()
        if area != "push" { waiters = waiters.map(LongPollBench.feasible) }
        let work = try HTTPBench.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        setenv("OUTPOST_JWT_SECRET", secret, 1)
        let fleet = area == "push" ? [] : LongPollBench.serverArguments(waiters: waiters.max() ?? 0)
        let server = try HTTPBench.ServerChild.start(path: try HTTPBench.locateServer(serverPath), data: work + "/data", eventLoops: 0, extra: fleet)
        defer { server.stop() }
        let token = benchToken(secret: secret)
        print("outpost-bench \(area): server pid \(server.pid) on port \(server.port), load average \(HTTPBench.loadAverage())")
        if area == "push" {
            let sqliteRates = try push(server: server, token: token, work: work, batches: batches)
            if let store {
                // The PostgreSQL figures of the same run, beside the SQLite ones (ScalingBench).
                server.stop()
                try ScalingBench.push(serverPath: try HTTPBench.locateServer(serverPath), url: store, instances: instances, batches: batches,
                                      token: token, work: work, sqliteRates: sqliteRates)
            }
        } else if area == "longpoll" {
            // Only the long-poll wake-up, once per count of waiting pulls.
            let connection = try BenchConnection(port: server.port)
            let epoch = try epochOf(connection: connection)
            for count in waiters {
                try LongPollBench.run(port: server.port, token: token, waiters: count, epoch: epoch, serverPID: server.pid, space: "poll\(count)",
                                      rounds: rounds, threads: clientThreads, perf: perfControl)
            }
            print("goals: p99 < 50 ms with 2,000 waiting pulls, < 150 ms with 10,000, < 1 s with 100,000 (server RSS growth < 1 GB)")
        } else {
            try pull(server: server, token: token, work: work, records: records, waiters: waiters, rounds: rounds, clientThreads: clientThreads)
        }
    }

    // MARK: Push

    /// Prints the push figures; returns changes/s by batch size.
    @discardableResult
    static func push(server: HTTPBench.ServerChild, token: String, work: String, batches: [Int]) throws -> [Int: Double] {
        var rates: [Int: Double] = [:]
        print("\n                          changes/s   ceiling (raw SQLite)   ratio   p50 / p99 per push")
        for batch in batches {
            let total = 400_000
            let clients = 8
            let perClient = total / batch / clients
            let bodies = (0..<clients).map { c in
                (0..<perClient).map { r in pushBody(space: "push\(batch)", prefix: "b\(batch)-c\(c)-r\(r)", count: batch) }
            }
            let cpuBefore = MemorySampler.cpu(pid: server.pid).total
            let result = try drive(port: server.port, token: token, space: "push\(batch)", bodies: bodies)
            let serverCPU = MemorySampler.cpu(pid: server.pid).total - cpuBefore
            let ceiling = try rawSQLiteCeiling(path: work + "/ceiling-\(batch).sqlite", batch: batch, total: total)
            let rate = Double(result.counted) / result.seconds
            rates[batch] = rate
            print("batches of \(batch):".padding(toLength: 22, withPad: " ", startingAt: 0)
                  + String(format: "%11.0f %14.0f %16.2f   %.1f / %.1f ms", rate, ceiling, rate / ceiling, result.p50 * 1000, result.p99 * 1000)
                  + String(format: "   server CPU %.1f us/change", serverCPU / Double(max(result.counted, 1)) * 1e6)
                  + (result.counted == total ? "" : "  (only \(result.counted) of \(total) applied!)"))
        }
        print("\ngoals: >= 0.4 x the ceiling; >= 150,000 changes/s in batches of 500, >= 120,000 in batches of 100")
        return rates
    }

    /// A push of `count` new records with ~200 bytes of data each.
    static func pushBody(space: String, prefix: String, count: Int) -> [UInt8] {
        var out = Array(#"{"clientId":"bench","changes":["#.utf8)
        for i in 0..<count {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out += Array(#"{"changeId":"\#(prefix)-\#(i)","collection":"items","id":"\#(prefix)-\#(i)","op":"put","baseVersion":null,"clientTime":1764430000000,"data":{"name":"Item \#(i) of \#(prefix)","sku":"SKU-\#(i * 7919 % 100000)","quantity":\#(i % 97),"location":"Aisle \#(i % 40), shelf \#(i % 7)","notes":"checked by the night shift; box slightly damaged","tags":["fragile","inventory"]}}"#.utf8)
        }
        out += Array("]}".utf8)
        return out
    }

    /// Sends every client's bodies on its own keep-alive connection, all clients at once.
    static func drive(port: Int, token: String, space: String, bodies: [[[UInt8]]]) throws -> DriveResult {
        try driveClients(bodies, port: { _ in port }) { connection, _, body in
            try push(body, on: connection, path: "/v1/spaces/\(space)/push", token: token)
        }
    }

    /// One push; the number of changes its answer applied.
    static func push(_ body: [UInt8], on connection: BenchConnection, path: String, token: String) throws -> Int {
        let (status, response) = try connection.exchange(method: "POST", path: path, token: token, body: body)
        guard status == 200 else { throw HTTPBench.BenchError("push answered \(status): \(String(decoding: response.prefix(300), as: UTF8.self))") }
        return count(#""status":"applied""#, in: response)
    }

    /// Occurrences of `needle` in `haystack`.
    static func count(_ needle: String, in haystack: [UInt8]) -> Int {
        let n = Array(needle.utf8)
        guard let first = n.first, haystack.count >= n.count else { return 0 }
        var found = 0
        haystack.withUnsafeBufferPointer { h in
            var i = 0
            let last = h.count - n.count
            outer: while i <= last {
                if h[i] == first {
                    var j = 1
                    while j < n.count {
                        if h[i + j] != n[j] { i += 1; continue outer }
                        j += 1
                    }
                    found += 1
                    i += n.count
                } else {
                    i += 1
                }
            }
        }
        return found
    }

    /// Raw SQLite on the same schema and writer settings, the same statements per change as
    /// the server's store, one transaction per batch, WAL + synchronous=FULL, ids as the
    /// push sends them (`SchemaBench`'s layout of today). Returns changes/s.
    static func rawSQLiteCeiling(path: String, batch: Int, total: Int) throws -> Double {
        try SchemaBench.measure(SchemaBench.layouts[0], path: path, batch: batch, total: total, ids: .ordered)
    }

    // MARK: Pull

    static func pull(server: HTTPBench.ServerChild, token: String, work: String, records: Int, waiters: [Int], rounds: Int, clientThreads: Int) throws {
        // Fill a big space and a small one through the push route.
        let fillStart = Date()
        for (space, count) in [("big", records), ("small", 10_000)] {
            let batch = 500
            let clients = 8
            let perClient = (count + batch * clients - 1) / (batch * clients)
            let bodies = (0..<clients).map { c in (0..<perClient).map { r in pushBody(space: space, prefix: "\(space)-\(c)-\(r)", count: batch) } }
            _ = try drive(port: server.port, token: token, space: space, bodies: bodies)
        }
        print(String(format: "filled spaces of %d and 10,000 records in %.1f s", records, Date().timeIntervalSince(fillStart)))

        // Pull the big space from the start in pages of 1,000.
        let connection = try BenchConnection(port: server.port)
        let cpuBefore = MemorySampler.cpu(pid: server.pid)
        var pulled = 0
        var bytes = 0
        var since = ""
        var pageTimes: [Double] = []
        let start = Date()
        while true {
            let t0 = Date()
            let (status, body) = try connection.exchange(method: "GET", path: "/v1/spaces/big/pull?limit=1000\(since)", token: token, body: nil)
            guard status == 200 else { throw HTTPBench.BenchError("pull answered \(status)") }
            pageTimes.append(Date().timeIntervalSince(t0))
            bytes += body.count
            pulled += count(#""collection":"#, in: body)
            guard let next = field("next", in: body) else { throw HTTPBench.BenchError("page without next") }
            since = "&since=\(next)"
            if !hasMore(body) { break }
        }
        let seconds = Date().timeIntervalSince(start)
        let serverCPU = (MemorySampler.cpu(pid: server.pid) - cpuBefore).total
        let ceiling = try rawReadCeiling(path: work + "/data/outpost.sqlite", space: "big")
        let rate = Double(pulled) / seconds
        print("\n                          records/s      MB/s   ceiling (raw SQLite)   ratio")
        print(String(format: "pull, pages of 1,000     %10.0f %9.1f %16.0f %12.2f", rate, Double(bytes) / seconds / 1e6, ceiling, rate / ceiling))
        print(String(format: "  server CPU %.2f us per record", serverCPU / Double(max(pulled, 1)) * 1e6))
        if pulled != records { print("  (pulled \(pulled) of \(records)!)") }

        // One page's time at 10,000 and at 1,000,000 records: a page from the middle, many times.
        func pageTime(_ space: String, middle: String) throws -> Double {
            var times: [Double] = []
            for _ in 0..<200 {
                let t0 = Date()
                let (status, _) = try connection.exchange(method: "GET", path: "/v1/spaces/\(space)/pull?limit=1000&since=\(middle)", token: token, body: nil)
                guard status == 200 else { throw HTTPBench.BenchError("pull answered \(status)") }
                times.append(Date().timeIntervalSince(t0))
            }
            return times.sorted()[times.count / 2]
        }
        let epoch = try epochOf(connection: connection)
        let small = try pageTime("small", middle: "\(epoch).5000")
        let big = try pageTime("big", middle: "\(epoch).\(records / 2)")
        print(String(format: "one page of 1,000 (median of 200): %.2f ms at 10,000 records, %.2f ms at %d: %.2f x (goal <= 1.5)", small * 1000, big * 1000, records, big / small))

        for count in waiters {
            try LongPollBench.run(port: server.port, token: token, waiters: count, epoch: epoch, serverPID: server.pid, space: "poll\(count)",
                                  rounds: rounds, threads: clientThreads)
        }
        print("goals: >= 400,000 records/s; long-poll wake-up p99 < 50 ms (2,000 waiting), < 150 ms (10,000)")
    }

    /// True when a page says `"hasMore":true`. Only the envelope's tail is searched: it
    /// ends `…,"next":"…","hasMore":…,"head":N}` after hundreds of kilobytes of records
    /// (a tail of 20 bytes, as before, missed it once `head` followed it).
    static func hasMore(_ body: [UInt8]) -> Bool {
        String(decoding: body.suffix(64), as: UTF8.self).contains(#""hasMore":true"#)
    }

    static func epochOf(connection: BenchConnection) throws -> String {
        let (_, body) = try connection.exchange(method: "GET", path: "/v1/info", token: nil, body: nil)
        guard let epoch = field("epoch", in: body) else { throw HTTPBench.BenchError("no epoch in /v1/info") }
        return epoch
    }

    /// The string value of `"name":"..."` in a JSON body. Searched from the end: the
    /// envelope's fields follow the records, and a page is hundreds of kilobytes.
    static func field(_ name: String, in body: [UInt8]) -> String? {
        let key = Array("\"\(name)\":\"".utf8)
        guard body.count >= key.count else { return nil }
        var i = body.count - key.count
        while i >= 0 {
            if body[i] == key[0] && body[i..<(i + key.count)].elementsEqual(key) {
                var end = i + key.count
                while end < body.count && body[end] != UInt8(ascii: "\"") { end += 1 }
                return String(decoding: body[(i + key.count)..<end], as: UTF8.self)
            }
            i -= 1
        }
        return nil
    }

    /// Raw SQLite reading the same rows by the same index, pages of 1,000. Records/s.
    static func rawReadCeiling(path: String, space: String) throws -> Double {
        let db = try Connection(path: path, flags: [.readOnly])
        defer { db.close() }
        guard let spaceID = try db.scalarInt("SELECT space_id FROM spaces WHERE name = ?", [.text(space)]) else { return 0 }
        let stmt = try db.prepare("SELECT seq, collection, id, deleted, data, updated_at, updated_by, client_time FROM records WHERE space_id = ? AND seq > ? ORDER BY seq LIMIT 1001")
        var after: Int64 = 0
        var rows = 0
        var touched = 0
        let start = Date()
        while true {
            try stmt.bind([.integer(spaceID), .integer(after)])
            var n = 0
            while try stmt.step() {
                if n == 1000 { break }
                after = stmt.int64(0)
                touched &+= stmt.text(1).utf8.count &+ stmt.text(2).utf8.count &+ stmt.withBytes(4) { $0.count } &+ stmt.text(6).utf8.count
                n += 1
            }
            stmt.reset()
            rows += n
            if n < 1000 { break }
        }
        let seconds = Date().timeIntervalSince(start)
        _ = touched
        return Double(rows) / seconds
    }

    /// Reads one answer from a blocking socket whose buffered reader holds nothing:
    /// true when it is a 200 and all of its `Content-Length` was read.
    static func readWholeAnswer(fd: Int32, scratch: inout [UInt8]) -> Bool {
        var have = 0
        let key = Array("\r\nContent-Length: ".utf8)
        while true {
            let got = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + have, $0.count - have, 0) }
            guard got > 0 else { return false }
            have += got
            // The head's end and length, found by bytes.
            guard have >= 12, let headEnd = find([13, 10, 13, 10], in: scratch, upTo: have),
                  let at = find(key, in: scratch, upTo: headEnd + 2) else {
                if have == scratch.count { return false }
                continue
            }
            var length = 0
            var i = at + key.count
            while scratch[i] >= 0x30 && scratch[i] <= 0x39 { length = length * 10 + Int(scratch[i] - 0x30); i += 1 }
            let total = headEnd + 4 + length
            guard total <= scratch.count else { return false }
            if have >= total { return have == total && scratch[9] == 0x32 && scratch[10] == 0x30 && scratch[11] == 0x30 }
        }
    }

    /// The first index of `needle` in `haystack[0..<end]`.
    static func find(_ needle: [UInt8], in haystack: [UInt8], upTo end: Int) -> Int? {
        guard end >= needle.count else { return nil }
        var i = 0
        while i <= end - needle.count {
            if haystack[i] == needle[0] {
                var j = 1
                while j < needle.count && haystack[i + j] == needle[j] { j += 1 }
                if j == needle.count { return i }
            }
            i += 1
        }
        return nil
    }
}

/// The control fifos of `perf record --control fifo:CTL,ACK -D -1`: a profile of only
/// the moments that matter (the long poll's wake-ups), not of the setup around them.
final class PerfControl {
    let control: Int32
    let ack: Int32

    init(_ spec: String) throws {
        let parts = spec.split(separator: ",").map(String.init)
        guard parts.count == 2 else { throw HTTPBench.BenchError("--perf-control needs CTL_FIFO,ACK_FIFO") }
        control = open(parts[0], O_WRONLY)
        ack = open(parts[1], O_RDONLY)
        guard control >= 0, ack >= 0 else { throw HTTPBench.BenchError("cannot open the perf fifos \(spec)") }
    }

    /// Sends `enable` or `disable` and waits for perf's `ack`.
    func send(_ command: String) throws {
        let line = Array((command + "\n").utf8)
        guard write(control, line, line.count) == line.count else { throw HTTPBench.BenchError("perf control write failed") }
        var buffer = [UInt8](repeating: 0, count: 16)
        _ = read(ack, &buffer, buffer.count)
    }
}

/// Hands values to exactly one thread. `@unchecked Sendable` is sound because the sender
/// keeps no other reference in use until the receiving thread is done (the long-poll
/// round waits for every reader thread before it touches the connections again).
struct Owned<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

extension BenchConnection {
    /// A request with an optional bearer token and JSON body: (status, body).
    func exchange(method: String, path: String, token: String?, body: [UInt8]?) throws -> (Int, [UInt8]) {
        let r = try request(method, path, headers: Self.headers(token: token, json: body != nil), body: body)
        return (r.status, r.body)
    }

    func send(method: String, path: String, token: String?, body: [UInt8]?) throws {
        try send(method, path, headers: Self.headers(token: token, json: body != nil), body: body)
    }

    static func headers(token: String?, json: Bool) -> [(String, String)] {
        var h: [(String, String)] = []
        if let token { h.append(("Authorization", "Bearer \(token)")) }
        if json { h.append(("Content-Type", "application/json")) }
        return h
    }
}
