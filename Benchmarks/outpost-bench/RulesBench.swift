// `outpost-bench rules`: what a rules file (docs/rules.md) costs, through the release
// `outpost-server`, each figure beside the same work in the same run.
//
// - First sync of a device that sees --visible records (1,000) of a space of --records
//   (1,000,000), against a space that holds only its records; both under the same rules.
//   Goal: at most 2 x.
// - A page of 1,000 records under `data.assignee == auth.sub`, read from the view index
//   (the token sees every record), against the same page on a server without rules.
//   Goal: at most 1.3 x.
// - Pushes of workers creating their own jobs, judged by the write rule and the schema,
//   against the same pushes without rules: 8 clients, batches of 500. Goal: at most 1.3 x
//   the time (at least 1 / 1.3 of the rate).
import Foundation
import OutpostServer

enum RulesBench {
    static let secret = "outpost-bench-secret-0123456789abcdef"
    static let rules = #"""
    {"collections": {"jobs": {
       "read": "data.assignee == auth.sub || 'supervisor' in auth.roles",
       "write": "'supervisor' in auth.roles || (op == 'put' && data.assignee == auth.sub && (prev == null || prev.assignee == auth.sub))",
       "schema": {"type": "object", "required": ["title", "assignee"],
                  "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 200}, "assignee": {"type": "string"},
                                 "status": {"enum": ["open", "done"]}, "site": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"}}}}},
     "default": {"read": "false", "write": "false"}}
    """#

    static func run(arguments: [String]) async throws {
        var serverPath: String?
        var records = 1_000_000
        var visible = 1_000
        let help = "usage: outpost-bench rules [--server PATH] [--records 1000000] [--visible 1000]"
        var reader = OptionReader(arguments, help: help)
        while let option = reader.next() {
            switch option {
            case "--server": serverPath = try reader.value()
            case "--records": records = try reader.number(atLeast: 1_000)
            case "--visible": visible = try reader.number(atLeast: 1)
            case "-h", "--help":
                print(help)
                return
            default: throw reader.unknown(option)
            }
        }
        HTTPBench.raiseOpenFileLimit()
        let work = try HTTPBench.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        setenv("OUTPOST_JWT_SECRET", secret, 1)
        let rulesPath = work + "/rules.json"
        try Data(rules.utf8).write(to: URL(fileURLWithPath: rulesPath))
        let path = try HTTPBench.locateServer(serverPath)
        let ruled = try HTTPBench.ServerChild.start(path: path, data: work + "/ruled", eventLoops: 0, extra: ["--rules", rulesPath])
        defer { ruled.stop() }
        let plain = try HTTPBench.ServerChild.start(path: path, data: work + "/plain", eventLoops: 0)
        defer { plain.stop() }
        let boss = benchToken(secret: secret, sub: "boss", roles: ["supervisor"]), w1 = benchToken(secret: secret, sub: "w1")
        print("outpost-bench rules: servers with rules (pid \(ruled.pid)) and without (pid \(plain.pid)), load average \(HTTPBench.loadAverage())")
        try await waitForViewIndex(port: ruled.port)
        try measurePushes(ruled: ruled, plain: plain)
        try measurePages(ruled: ruled, plain: plain, boss: boss, w1: w1)
        try measureFirstSync(ruled: ruled, records: records, visible: visible, boss: boss, w1: w1)
    }

    /// The pushes' clients and changes per push, in every part.
    static let clients = 8, batch = 500

    /// Waits until the server's view index is built: pages under rules read it once it is
    /// (at once for a new store).
    static func waitForViewIndex(port: Int) async throws {
        let admin = benchToken(secret: secret, sub: "bench-admin", admin: true)
        let deadline = Date().addingTimeInterval(60)
        while true {
            let metrics = try probe(port: port, "/metrics", token: admin)
            if metrics.status == 200 && metrics.text.contains("outpost_view_index_ready 1") { break }
            guard Date() < deadline else { throw HTTPBench.BenchError("the view index was not ready within 60 s (metrics answered \(metrics.status))") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// 1. Pushes judged by the rules against the same pushes without.
    static func measurePushes(ruled: HTTPBench.ServerChild, plain: HTTPBench.ServerChild) throws {
        let total = 200_000
        func workerBodies(_ space: String) -> [[[UInt8]]] {
            (0..<clients).map { c in (0..<(total / batch / clients)).map { r in jobs(prefix: "\(space)-c\(c)-r\(r)", count: batch, assignee: { _ in "w\(c)" }) } }
        }
        let workers = (0..<clients).map { benchToken(secret: secret, sub: "w\($0)") }
        var pushRates: [(String, Double, Double)] = []
        for round in 0..<2 {
            for (name, server) in [("with rules", ruled), ("without", plain)] {
                let space = "push\(round)"
                let result = try driveClients(workerBodies(space), port: { _ in server.port }) { connection, c, body in
                    try SyncBench.push(body, on: connection, path: "/v1/spaces/\(space)/push", token: workers[c])
                }
                guard result.counted == total else { throw HTTPBench.BenchError("\(name): only \(result.counted) of \(total) changes applied") }
                pushRates.append((name, Double(result.counted) / result.seconds, result.p99))
            }
        }
        print("\npush, 8 workers creating their own jobs, batches of 500 (two rounds, alternated):")
        for (name, rate, p99) in pushRates { print(String(format: "  %-12@ %9.0f changes/s   p99 %.1f ms", name as NSString, rate, p99 * 1000)) }
        let ruledRate = pushRates.filter { $0.0 == "with rules" }.map(\.1).reduce(0, +) / 2
        let plainRate = pushRates.filter { $0.0 == "without" }.map(\.1).reduce(0, +) / 2
        print(String(format: "  time with rules / without: %.2f x (goal <= 1.3)", plainRate / ruledRate))
    }

    /// 2. A page of 1,000 records the token sees, with and without rules.
    static func measurePages(ruled: HTTPBench.ServerChild, plain: HTTPBench.ServerChild, boss: String, w1: String) throws {
        let pageRecords = 100_000
        for server in [ruled, plain] {
            let bodies = (0..<clients).map { c in (0..<(pageRecords / batch / clients)).map { r in jobs(prefix: "all-c\(c)-r\(r)", count: batch, assignee: { _ in "w1" }) } }
            _ = try driveClients(bodies, port: { _ in server.port }) { connection, _, body in
                try SyncBench.push(body, on: connection, path: "/v1/spaces/all/push", token: boss)
            }
        }
        var pageTimes: [String: [Double]] = [:]
        for round in 0..<3 {
            for (name, server) in [("with rules", ruled), ("without", plain)] {
                let (pages, seconds, _) = try fullSync(port: server.port, space: "all", token: w1)
                if round > 0 { pageTimes[name, default: []].append(seconds / Double(pages)) }
            }
        }
        let ruledPage = pageTimes["with rules"]!.min()!, plainPage = pageTimes["without"]!.min()!
        print(String(format: "\npage of 1,000 of 100,000 records the token sees: with rules %.2f ms, without %.2f ms: %.2f x (goal <= 1.3)",
                     ruledPage * 1000, plainPage * 1000, ruledPage / plainPage))
    }

    /// 3. A device that sees `visible` records of a big space, against a space of only those.
    static func measureFirstSync(ruled: HTTPBench.ServerChild, records: Int, visible: Int, boss: String, w1: String) throws {
        let fillStart = Date()
        let others = records - visible
        let stride = max(1, records / visible)
        let bigBodies = (0..<clients).map { c in
            (0..<((records + batch * clients - 1) / (batch * clients))).map { r -> [UInt8] in
                jobs(prefix: "big-c\(c)-r\(r)", count: batch) { i in
                    let n = (c * (records / clients)) + r * batch + i
                    return n % stride == 0 ? "w1" : "other\(n % 997)"
                }
            }
        }
        _ = try driveClients(bigBodies, port: { _ in ruled.port }) { connection, _, body in
            try SyncBench.push(body, on: connection, path: "/v1/spaces/big/push", token: boss)
        }
        let smallBodies = [(0..<((visible + batch - 1) / batch)).map { r in jobs(prefix: "small-r\(r)", count: min(batch, visible - r * batch), assignee: { _ in "w1" }) }]
        _ = try driveClients(smallBodies, port: { _ in ruled.port }) { connection, _, body in
            try SyncBench.push(body, on: connection, path: "/v1/spaces/small/push", token: boss)
        }
        print(String(format: "\nfilled a space of %d records (about %d for w1, %d for others) in %.1f s", records, records / stride, others, Date().timeIntervalSince(fillStart)))
        var big: [Double] = [], small: [Double] = []
        var seen = (0, 0)
        for _ in 0..<3 {
            let (bigPages, bigSeconds, bigRecords) = try fullSync(port: ruled.port, space: "big", token: w1, counting: true)
            let (_, smallSeconds, smallRecords) = try fullSync(port: ruled.port, space: "small", token: w1, counting: true)
            big.append(bigSeconds)
            small.append(smallSeconds)
            seen = (bigRecords, smallRecords)
            _ = bigPages
        }
        print(String(format: "first sync of w1: %d records of the big space in %.3f s (best of 3), %d records of its own space in %.3f s: %.1f x (goal <= 2)",
                     seen.0, big.min()!, seen.1, small.min()!, big.min()! / small.min()!))
    }

    /// Jobs with ~200 bytes of data each, assigned by `assignee(i)`.
    static func jobs(prefix: String, count: Int, assignee: (Int) -> String) -> [UInt8] {
        var out = Array(#"{"clientId":"bench","changes":["#.utf8)
        for i in 0..<count {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out += Array(#"{"changeId":"\#(prefix)-\#(i)","collection":"jobs","id":"\#(prefix)-\#(i)","op":"put","baseVersion":null,"clientTime":1764430000000,"data":{"title":"Job \#(i) of \#(prefix)","assignee":"\#(assignee(i))","status":"open","site":"NW-\#(i % 500)","notes":"check the pump and the valve; replace the gasket if worn","tags":["plumbing","urgent"]}}"#.utf8)
        }
        out += Array("]}".utf8)
        return out
    }

    /// Pulls `space` from the start in pages of 1,000 until `hasMore` is false: the pages,
    /// the seconds, and (with `counting`) the records.
    static func fullSync(port: Int, space: String, token: String, counting: Bool = false) throws -> (Int, Double, Int) {
        let connection = try BenchConnection(port: port)
        var since = ""
        var pages = 0, records = 0
        let start = Date()
        while true {
            let (status, body) = try connection.exchange(method: "GET", path: "/v1/spaces/\(space)/pull?limit=1000\(since)", token: token, body: nil)
            guard status == 200 else { throw HTTPBench.BenchError("pull answered \(status): \(String(decoding: body.prefix(300), as: UTF8.self))") }
            pages += 1
            if counting { records += SyncBench.count(#""collection":"#, in: body) }
            guard let next = SyncBench.field("next", in: body) else { throw HTTPBench.BenchError("page without next") }
            since = "&since=\(next)"
            if SyncBench.count(#""hasMore":true"#, in: body) == 0 { break }
        }
        return (pages, Date().timeIntervalSince(start), records)
    }
}

