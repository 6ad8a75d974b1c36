// `outpost-bench client`: the client SDK (Client/Outpost) against the release
// `outpost-server` on this machine, each figure beside its ceiling from the same run.
//
// 1. Local save latency: `OutpostStore.put` of a ~200-byte record into a store file (WAL,
//    the default durability FULL, then NORMAL), one at a time. Ceiling: a raw SQLite
//    INSERT of the same bytes into a table in a file with the same settings, one
//    transaction each. A save writes the record and its queue entry in one transaction.
// 2. Initial sync: a space of 100,000 records of ~200 bytes of data, pulled into a new
//    store from the start, with the SDK's default page size and transport options (answers
//    uncompressed from a loopback server). Reported in records/s with the process's peak
//    memory during the sync (VmHWM, reset before it); then again with gzip-compressed
//    answers, as over the internet. Ceilings: the same pages fetched and decoded by
//    HTTPSyncTransport without storing them, and raw SQLite inserting 100,000 rows of the
//    same size in transactions of one page each.
//    Goal: at least 100,000 records/s (five times PowerSync's published 20,000 ops/s),
//    and at least 0.8 × the transport ceiling.
//    The screen during the sync: a task on the main actor reads every 2 ms what a screen
//    shows, `get` of one record and `all` of a 50-record collection, while the sync
//    applies pages; the same reads on the idle store after it are the ceiling. Goal: p99
//    < 16 ms, one frame. Then the store file's size, and the peak RSS of the `outpost`
//    command-line client making the same sync in a process of its own (this process holds
//    the ceiling's rows). Goal: < 100 MB.
// 3. Write-to-other-device latency: two stores, each with a SyncScheduler holding a long
//    poll; the time from the first device's save to the second device's observer hearing
//    the record. Ceiling: the bare protocol over the same transport (a push of one change
//    while a long-poll pull waits; the time until the pull returns). Goal: p99 < 100 ms.
// 4. Typed reads and saves (docs/client.md, "Fields an app does not know"): `all(T)` of
//    10,000 records whose data has a field `T` does not know (the first decode of `T`
//    learns which keys it reads, the others are plain); ceiling: the same records read
//    with `records(in:)` and decoded by a plain JSONDecoder. Then `save(T)` one at a time over existing records (the put keeps
//    the unknown field); ceiling: `put` of the same value encoded, which merges nothing.
//    `--typed-only` runs this part alone (no server).
import Foundation
import Glibc
import Outpost
import OutpostCore
import OutpostServer
import OutpostSQLite
import OutpostSubprocess

enum ClientBench {
    static let secret = "outpost-bench-client-secret-0123456789abcdef"

    static func run(arguments: [String]) async throws {
        var serverPath: String?
        var records = 100_000
        var saves = 2_000
        var rounds = 200
        var pageLimit: Int?
        var typedOnly = false
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--server" where i + 1 < arguments.count: serverPath = arguments[i + 1]; i += 1
            case "--records" where i + 1 < arguments.count: records = Int(arguments[i + 1]) ?? records; i += 1
            case "--saves" where i + 1 < arguments.count: saves = Int(arguments[i + 1]) ?? saves; i += 1
            case "--rounds" where i + 1 < arguments.count: rounds = Int(arguments[i + 1]) ?? rounds; i += 1
            case "--page-limit" where i + 1 < arguments.count: pageLimit = Int(arguments[i + 1]); i += 1
            case "--typed-only": typedOnly = true
            case "-h", "--help":
                print("usage: outpost-bench client [--server PATH] [--records 100000] [--saves 2000] [--rounds 200] [--page-limit N] [--typed-only]")
                return
            default: throw HTTPBench.BenchError("unknown option \(arguments[i])")
            }
            i += 1
        }
        let work = try HTTPBench.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        print("outpost-bench client: load average \(HTTPBench.loadAverage())")

        if typedOnly { return try await typedReadsAndSaves(work: work, records: 10_000, saves: saves) }
        try await localSaves(work: work, count: saves)

        let (server, token, url) = try startServer(serverPath, work: work, secret: secret)
        defer { server.stop() }

        try await initialSync(url: url, token: token, work: work, records: records, pageLimit: pageLimit)
        try await writeToOtherDevice(url: url, token: token, work: work, rounds: rounds)
        try await typedReadsAndSaves(work: work, records: 10_000, saves: saves)
    }

    // MARK: Helpers

    /// The release server on a data directory in `work`, signing with `secret`, and a
    /// write token for every space.
    static func startServer(_ serverPath: String?, work: String, secret: String) throws -> (HTTPBench.ServerChild, String, URL) {
        setenv("OUTPOST_JWT_SECRET", secret, 1)
        let server = try HTTPBench.ServerChild.start(path: try HTTPBench.locateServer(serverPath), data: work + "/data", eventLoops: 0)
        let token = benchToken(secret: secret)
        print("server pid \(server.pid) on port \(server.port)")
        return (server, token, URL(string: "http://127.0.0.1:\(server.port)")!)
    }

    struct Todo: Codable {
        var title: String
        var done: Bool
        var priority: Int
        var notes: String
    }

    /// About 200 bytes of JSON.
    static func record(_ n: Int) -> JSONObject {
        [
            "title": .string("Inspect pump station \(n) on the north loop"),
            "done": .bool(n % 3 == 0), "priority": .number(JSONNumber(n % 5)),
            "notes": .string("Check the seals, the pressure gauge and the valve at the outlet; photo of meter \(n)."),
            "site": .string("NL-\(n % 97)"),
        ]
    }

    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p + 0.5))]
    }

    static func ms(_ d: Duration) -> Double {
        let (s, a) = d.components
        return Double(s) * 1000 + Double(a) / 1e15
    }

    /// Resets the peak resident size (VmHWM) of this process.
    static func resetPeakMemory() {
        if let fd = fopen("/proc/self/clear_refs", "w") {
            fputs("5", fd)
            fclose(fd)
        }
    }

    /// VmHWM and VmRSS of this process, in bytes.
    static func memory() -> (peak: Int, now: Int) {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return (0, 0) }
        func field(_ name: String) -> Int {
            for line in text.split(separator: "\n") where line.hasPrefix(name) {
                return (line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) } ?? 0) * 1024
            }
            return 0
        }
        return (field("VmHWM:"), field("VmRSS:"))
    }

    // MARK: 1. Local saves

    static func localSaves(work: String, count: Int) async throws {
        print("\n1. local save latency, \(count) saves of ~200 bytes, one at a time")
        print("                           p50        p99        raw SQLite insert p50 / p99 (ceiling)")
        for (durability, name, pragma) in [(OutpostStore.Durability.full, "FULL", Connection.Synchronous.full), (.normal, "NORMAL", .normal)] {
            var configuration = OutpostStore.Configuration(space: "bench")
            configuration.durability = durability
            let path = work + "/saves-\(name).sqlite"
            let store = try OutpostStore(path: path, configuration: configuration)
            var latencies: [Double] = []
            latencies.reserveCapacity(count)
            let clock = ContinuousClock()
            for n in 0..<count {
                let data = record(n)
                let t = clock.measure { }
                _ = t
                let start = clock.now
                try await store.put(data, in: "todos", id: "t\(n)")
                latencies.append(ms(clock.now - start))
            }
            await store.close()
            latencies.sort()

            let raw = try Connection(path: work + "/raw-\(name).sqlite")
            try raw.enableWAL(synchronous: pragma)
            try raw.execute("CREATE TABLE t(id TEXT PRIMARY KEY, data BLOB) WITHOUT ROWID")
            var rawLatencies: [Double] = []
            for n in 0..<count {
                var bytes: [UInt8] = []
                JSONWriter.append(record(n), to: &bytes)
                let start = clock.now
                try raw.run("INSERT INTO t(id, data) VALUES (?, ?)", [.text("t\(n)"), .blob(bytes)])
                rawLatencies.append(ms(clock.now - start))
            }
            raw.close()
            rawLatencies.sort()
            let p50 = percentile(latencies, 0.5), p99 = percentile(latencies, 0.99)
            let r50 = percentile(rawLatencies, 0.5), r99 = percentile(rawLatencies, 0.99)
            print("save, synchronous=\(name)".padding(toLength: 24, withPad: " ", startingAt: 0)
                  + String(format: "%8.3f ms %8.3f ms      %.3f / %.3f ms   (%.1f× / %.1f× the ceiling)", p50, p99, r50, r99, p50 / r50, p99 / r99))
        }
    }

    // MARK: 2. Initial sync

    static func initialSync(url: URL, token: String, work: String, records: Int, pageLimit requested: Int?) async throws {
        let transport = HTTPSyncTransport(baseURL: url, token: token)
        let limits = try await transport.serverInfo().limits
        let bytes = try await seed(transport, records: records, changesPerPush: limits.maxChangesPerPush)
        var configuration = OutpostStore.Configuration(space: "bench")
        if let requested { configuration.pageLimit = requested }
        let pageLimit = configuration.pageLimit
        print("\n2. initial sync of \(records) records (\(bytes / records) bytes of data each, pages of \(pageLimit)) from a local server")

        // Ceiling 1: the transport alone (HTTP, decoding), nothing stored.
        let clock = ContinuousClock()
        var start = clock.now
        var since: Version?
        var fetched = 0
        while true {
            let page = try await transport.pull(PullQuery(since: since, limit: pageLimit, maxBytes: limits.pageBytes), space: "bench")
            fetched += page.records.count
            since = page.next
            if !page.hasMore { break }
        }
        let transportSeconds = ms(clock.now - start) / 1000

        let rawSeconds = try rawInsertSeconds(work: work, records: records, pageLimit: pageLimit)

        // The SDK: a new store pulling everything, with a screen reading beside it.
        let store = try OutpostStore(path: work + "/initial.sqlite", configuration: configuration, transport: transport)
        let before = memory()
        resetPeakMemory()
        let duringSync = await Screen(store: store, records: records)
        start = clock.now
        let report = try await store.sync()
        let seconds = ms(clock.now - start) / 1000
        let during = await duringSync.stop()
        let after = memory()
        let held = try await store.records(in: "todos").count
        let idle = await Screen(store: store, records: records)
        try await Task.sleep(for: .seconds(3))
        let idleReads = await idle.stop()
        await store.close()
        guard report.pulled == records + screenSize, held == records, fetched == records + screenSize else {
            throw HTTPBench.BenchError("pulled \(report.pulled), holds \(held), fetched \(fetched) of \(records) + \(screenSize)")
        }
        let fileBytes = ["", "-wal"].reduce(0) { total, suffix in
            total + ((try? FileManager.default.attributesOfItem(atPath: work + "/initial.sqlite" + suffix)[.size] as? Int) ?? 0)
        }

        // The same with answers gzip-compressed, as over the internet (the server compresses
        // on the same cores).
        var gzipOptions = HTTPSyncTransport.Options()
        gzipOptions.compressedAnswers = true
        let gzipStore = try OutpostStore(path: work + "/initial-gzip.sqlite", configuration: configuration,
                                         transport: HTTPSyncTransport(baseURL: url, token: token, options: gzipOptions))
        start = clock.now
        _ = try await gzipStore.sync()
        let gzipSeconds = ms(clock.now - start) / 1000
        await gzipStore.close()
        printInitialSync(records: records, seconds: seconds, gzipSeconds: gzipSeconds, transportSeconds: transportSeconds, rawSeconds: rawSeconds,
                         memory: (before, after), fileBytes: fileBytes, during: during, idle: idleReads)
        try clientProcessSync(url: url, token: token, work: work, records: records)
    }

    static let screenSize = 50

    /// Seeds the space `bench` through the protocol: the screen's 50 records, then `records`
    /// records in pushes of `changesPerPush` (the server's largest). Returns the seeded
    /// records' bytes of data.
    static func seed(_ transport: HTTPSyncTransport, records: Int, changesPerPush: Int) async throws -> Int {
        var n = 0
        var bytes = 0
        // What the screen shows: a collection of 50 records, in the first page.
        let screen = (0..<screenSize).map { i in
            Change(changeId: "screen-\(i)", collection: "screen", id: String(format: "s%02d", i), op: .put, data: record(i), baseVersion: nil)
        }
        _ = try await transport.push(PushRequest(clientId: "seeder", changes: screen), space: "bench")
        while n < records {
            var changes: [Change] = []
            while changes.count < changesPerPush && n < records {
                let data = record(n)
                bytes += JSONValue.object(data).encoded().count
                changes.append(Change(changeId: "seed-\(n)", collection: "todos", id: String(format: "t%07d", n), op: .put, data: data, baseVersion: nil))
                n += 1
            }
            let answer = try await transport.push(PushRequest(clientId: "seeder", changes: changes), space: "bench")
            guard answer.results.allSatisfy({ $0.status == .applied }) else { throw HTTPBench.BenchError("seeding failed") }
        }
        return bytes
    }

    /// The initial sync's ceiling 2: seconds of raw SQLite inserts of the same bytes.
    static func rawInsertSeconds(work: String, records: Int, pageLimit: Int) throws -> Double {
        // Ceiling 2: raw SQLite inserts of the same bytes, a transaction per page, with the
        // durability the store uses for pulled pages (NORMAL: see OutpostStore.write).
        let clock = ContinuousClock()
        let raw = try Connection(path: work + "/raw-sync.sqlite")
        try raw.enableWAL(synchronous: .normal)
        try raw.execute("CREATE TABLE t(collection TEXT, id TEXT, data BLOB, version TEXT, PRIMARY KEY(collection, id)) WITHOUT ROWID")
        let blobs = (0..<records).map { n -> [UInt8] in
            var b: [UInt8] = []
            JSONWriter.append(record(n), to: &b)
            return b
        }
        let start = clock.now
        var row = 0
        while row < records {
            try raw.transaction {
                let stmt = try raw.cached("INSERT INTO t(collection, id, data, version) VALUES (?, ?, ?, ?)")
                for r in row..<min(records, row + pageLimit) {
                    try stmt.bind([.text("todos"), .text(String(format: "t%07d", r)), .blob(blobs[r]), .text("E.\(r + 1)")])
                    while try stmt.step() {}
                }
            }
            row += pageLimit
        }
        let rawSeconds = ms(clock.now - start) / 1000
        raw.close()
        return rawSeconds
    }

    /// The initial sync's table beside its ceilings, its goals, and the screen's reads.
    static func printInitialSync(records: Int, seconds: Double, gzipSeconds: Double, transportSeconds: Double, rawSeconds: Double,
                                 memory: (before: (peak: Int, now: Int), after: (peak: Int, now: Int)), fileBytes: Int,
                                 during: (get: [Double], all: [Double]), idle idleReads: (get: [Double], all: [Double])) {
        let (before, after) = memory
        print("                            records/s     seconds")
        print(String(format: "SDK initial sync        %12.0f %10.2f   peak memory %.1f MB (%.1f MB before, %.1f MB after)",
                     Double(records) / seconds, seconds, Double(after.peak) / 1e6, Double(before.now) / 1e6, Double(after.now) / 1e6))
        print(String(format: "  with gzip answers     %12.0f %10.2f   (as over the internet; the default for non-loopback servers)", Double(records) / gzipSeconds, gzipSeconds))
        print(String(format: "ceiling: transport only %12.0f %10.2f   (HTTP + decoding, nothing stored)", Double(records) / transportSeconds, transportSeconds))
        print(String(format: "ceiling: raw SQLite     %12.0f %10.2f   (inserts of the same bytes, one transaction per page)", Double(records) / rawSeconds, rawSeconds))
        print(String(format: "goal ≥ 100,000 records/s: %@; ratio to the transport ceiling %.2f (goal ≥ 0.8: %@)",
                     Double(records) / seconds >= 100_000 ? "met" : "NOT met", transportSeconds / seconds, transportSeconds / seconds >= 0.8 ? "met" : "NOT met"))
        print(String(format: "store file: %.1f MB (%.0f bytes a record)", Double(fileBytes) / 1e6, Double(fileBytes) / Double(records)))
        print("the screen, on the main actor every 2 ms   reads     p50        p99        max")
        for (name, reads) in [("get, during the sync", during.get), ("all(50), during the sync", during.all),
                              ("get, idle (ceiling)", idleReads.get), ("all(50), idle (ceiling)", idleReads.all)] {
            print(name.padding(toLength: 36, withPad: " ", startingAt: 0)
                  + String(format: "%8d %8.2f ms %8.2f ms %8.2f ms", reads.count, percentile(reads, 0.5), percentile(reads, 0.99), reads.last ?? 0))
        }
        let worst = max(percentile(during.get, 0.99), percentile(during.all, 0.99))
        print(String(format: "goal: reads during the sync p99 < 16 ms: %@ (%.2f ms)", worst < 16 ? "met" : "NOT met", worst))
    }

    /// A screen on the main actor: every 2 ms, `get` of a random record and `all` of the
    /// 50-record collection, each timed, until `stop()`.
    @MainActor final class Screen {
        private var get: [Double] = []
        private var all: [Double] = []
        private var running = true
        private var task: Task<Void, Never>?

        init(store: OutpostStore, records: Int) {
            task = Task { @MainActor in
                let clock = ContinuousClock()
                var rng = SystemRandomNumberGenerator()
                while running {
                    let id = String(format: "t%07d", Int.random(in: 0..<records, using: &rng))
                    var t = clock.now
                    _ = try? await store.get(Todo.self, from: "todos", id: id)
                    get.append(ms(clock.now - t))
                    t = clock.now
                    _ = try? await store.all(Todo.self, in: "screen")
                    all.append(ms(clock.now - t))
                    try? await Task.sleep(for: .milliseconds(2))
                }
            }
        }

        /// Stops the reads and gives their latencies (ms), sorted.
        func stop() async -> (get: [Double], all: [Double]) {
            running = false
            await task?.value
            return (get.sorted(), all.sorted())
        }
    }

    /// The same first sync made by the `outpost` command-line client in a process of its
    /// own, under `/usr/bin/time`: its peak RSS is the SDK's memory for the whole data set.
    static func clientProcessSync(url: URL, token: String, work: String, records: Int) throws {
        guard let run = try outpostSync(store: work + "/cli.sqlite", space: "bench", server: url.absoluteString, token: token) else {
            print("the client process's memory: not measured (no outpost-cli built beside outpost-bench, or no /usr/bin/time)")
            return
        }
        print(String(format: "`outpost sync` in its own process: %.2f s (%.0f records/s), peak RSS %.1f MB (goal < 100 MB: %@)",
                     run.seconds, Double(records) / run.seconds, run.peakRSS / 1e6, run.peakRSS < 100e6 ? "met" : "NOT met"))
    }

    /// One `outpost sync` by the command-line client built beside outpost-bench, in a
    /// process of its own under `/usr/bin/time`: its wall time, peak RSS (bytes) and
    /// report. Nil when either program is missing; throws when the sync fails.
    static func outpostSync(store: String, space: String, server: String, token: String) throws -> (seconds: Double, peakRSS: Double, report: String)? {
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        let client = me.deletingLastPathComponent().appendingPathComponent("outpost-cli").path
        guard FileManager.default.isExecutableFile(atPath: client), FileManager.default.isExecutableFile(atPath: "/usr/bin/time") else { return nil }
        let started = ContinuousClock.now
        let result = try Subprocess.run("/usr/bin/time", ["-f", "outpost-peak-rss-kb %M", client, "--store", store, "--space", space,
                                                          "--server", server, "--token", token, "sync"])
        let seconds = ms(ContinuousClock.now - started) / 1000
        guard result.status == 0, let line = result.error.split(separator: "\n").last(where: { $0.hasPrefix("outpost-peak-rss-kb ") }),
              let kb = Double(line.split(separator: " ").last ?? "") else {
            throw HTTPBench.BenchError("outpost sync failed: \(result.output) \(result.error)")
        }
        return (seconds, kb * 1024, result.output)
    }

    // MARK: 3. Write to another device

    static func writeToOtherDevice(url: URL, token: String, work: String, rounds: Int) async throws {
        print("\n3. write-to-other-device latency through long poll, \(rounds) rounds")
        var configuration = OutpostStore.Configuration(space: "latency")
        let a = try OutpostStore(path: work + "/a.sqlite", configuration: configuration, transport: HTTPSyncTransport(baseURL: url, token: token))
        configuration.clientId = "device-b"
        let b = try OutpostStore(path: work + "/b.sqlite", configuration: configuration, transport: HTTPSyncTransport(baseURL: url, token: token))
        try await a.sync()
        try await b.sync()
        var options = SyncScheduler.Options()
        options.interval = .seconds(3600)
        options.longPoll = .seconds(25)
        // The server is on this machine: the host's network state has no say.
        let schedulerA = SyncScheduler(store: a, options: options, conditions: AlwaysReachableConditions())
        let schedulerB = SyncScheduler(store: b, options: options, conditions: AlwaysReachableConditions())
        await schedulerA.start()
        await schedulerB.start()
        var heard = await b.observe(collection: "todos").makeAsyncIterator()
        try await Task.sleep(for: .milliseconds(300))
        let clock = ContinuousClock()
        var latencies: [Double] = []
        for n in 0..<rounds {
            let start = clock.now
            try await a.put(record(n), in: "todos", id: "l\(n)")
            while let event = await heard.next() {
                if event.keys.contains(where: { $0.id == "l\(n)" }) { break }
            }
            latencies.append(ms(clock.now - start))
            try await Task.sleep(for: .milliseconds(5))
        }
        await schedulerA.stop()
        await schedulerB.stop()
        await a.close()
        await b.close()

        // Ceiling: the protocol alone on the same transport.
        let transport = HTTPSyncTransport(baseURL: url, token: token)
        var cursor = try await transport.pull(PullQuery(limit: 1), space: "ceiling").next
        var bare: [Double] = []
        for n in 0..<rounds {
            let since = cursor
            let poll = Task { try await transport.pull(PullQuery(since: since, limit: 100, waitMs: 25_000), space: "ceiling") }
            try await Task.sleep(for: .milliseconds(20))
            let start = clock.now
            _ = try await transport.push(PushRequest(clientId: "ceiling", changes: [
                Change(changeId: "c-\(n)-\(UUID().uuidString)", collection: "todos", id: "c\(n)", op: .put, data: record(n), baseVersion: nil),
            ]), space: "ceiling")
            let page = try await poll.value
            bare.append(ms(clock.now - start))
            cursor = page.next
        }
        latencies.sort()
        bare.sort()
        print("                            p50        p99")
        print(String(format: "SDK save → other device %8.1f ms %8.1f ms   (schedulers: push + pull on one side, long poll on the other)",
                     percentile(latencies, 0.5), percentile(latencies, 0.99)))
        print(String(format: "ceiling: push → long poll %6.1f ms %8.1f ms   (bare protocol, same transport)", percentile(bare, 0.5), percentile(bare, 0.99)))
        print(String(format: "goal p99 < 100 ms: %@", percentile(latencies, 0.99) < 100 ? "met" : "NOT met"))
    }

    // MARK: 4. Typed reads and saves

    static func typedReadsAndSaves(work: String, records: Int, saves: Int) async throws {
        print("\n4. typed reads and saves: \(records) records with a field Todo does not know; best of 5 rounds, interleaved")
        var configuration = OutpostStore.Configuration(space: "bench")
        configuration.durability = .normal
        let store = try OutpostStore(path: work + "/typed.sqlite", configuration: configuration)
        for n in 0..<records { try await store.put(record(n), in: "todos", id: "t\(n)") }
        let clock = ContinuousClock()
        var typed = Duration.seconds(3600), plain = Duration.seconds(3600)
        for _ in 0..<5 {
            var start = clock.now
            let a = try await store.all(Todo.self, in: "todos")
            typed = min(typed, clock.now - start)
            start = clock.now
            let b = try await store.records(in: "todos").map { try JSONValue.object($0.data!).decode(Todo.self) }
            plain = min(plain, clock.now - start)
            precondition(a.count == records && b.count == records)
        }
        print(String(format: "all(Todo.self)            %8.1f ms   records + plain JSONDecoder %8.1f ms (ceiling)   %.2f× the ceiling",
                     ms(typed), ms(plain), ms(typed) / ms(plain)))

        var saveLatencies: [Double] = [], putLatencies: [Double] = []
        for n in 0..<saves {
            let value = Todo(title: "Edited \(n)", done: n % 2 == 0, priority: n % 5, notes: "Seals checked.")
            let id = "t\(n % records)"
            if n % 2 == 0 {
                let start = clock.now
                try await store.save(value, in: "todos", id: id)
                saveLatencies.append(ms(clock.now - start))
            } else {
                let start = clock.now
                guard case .object(let object) = try JSONValue(encoding: value) else { fatalError("Todo encodes as an object") }
                try await store.put(object, in: "todos", id: id)
                putLatencies.append(ms(clock.now - start))
            }
        }
        saveLatencies.sort()
        putLatencies.sort()
        let s50 = percentile(saveLatencies, 0.5), s99 = percentile(saveLatencies, 0.99)
        let p50 = percentile(putLatencies, 0.5), p99 = percentile(putLatencies, 0.99)
        print(String(format: "save(Todo), NORMAL        %8.3f ms %8.3f ms   encode + put %.3f / %.3f ms (ceiling)   (%.2f× / %.2f× the ceiling)",
                     s50, s99, p50, p99, s50 / p50, s99 / p99))
        let kept = try await store.record(in: "todos", id: "t0")?.data?["site"]
        precondition(kept != nil, "a typed save keeps the field Todo does not know")
        await store.close()
    }
}
