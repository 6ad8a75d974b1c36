// `outpost-bench query`: queries on the device (Client/Outpost/Query), each figure beside
// its ceiling from the same run, on a store of `--records` records (default 1,000,000) of
// eight fields pulled from the release `outpost-server` on this machine.
//
// 1. First sync with three declared indexes and one searchable field, beside the same sync
//    with none. Goal: ≥ 0.7 × the sync with none.
// 2. An indexed query: an equality, a range, a sort, the first 50 rows decoded into the
//    app's type (`status == "open" && due >= X`, sorted by due, X random), 500 times.
//    Ceiling: the same query written by hand in SQL on the same file and index (the
//    declared index's key table), on a connection of its own, decoded with JSONDecoder into
//    the same type. Goals: p99 < 2 ms; ≥ 0.8 × the hand-written query.
// 3. A count served by an index (`status == "open" && priority >= 4`). Goal: < 20 ms.
// 4. Full-text search over 100,000 records' notes, the first 20 ranked, two words the last a
//    prefix, 200 searches. Goal: p99 < 10 ms.
// 5. A live query during a first sync: the newest record (`seq` descending, limit 1),
//    followed while a store pulls the whole space; for each page, the time from its commit
//    (seen by a thread polling SQLite's data_version every 100 µs on a connection of its
//    own) to the live query's first result holding it. Goal: p99 < 16 ms.
// 6. Walking all the results page by page (pages of 1,000 by cursor, each decoded), in a
//    process of its own: its peak RSS. Goal: < 100 MB.
//
// Its last line, for scripts:
// `query: indexed p99 <ms> ms (<ratio>x hand-written SQL), count <ms> ms, search p99 <ms> ms, live p99 <ms> ms`
import Foundation
import Glibc
import Outpost
import OutpostCore
import OutpostSQLite
import OutpostSubprocess
import Synchronization

enum QueryBench {
    struct Inspection: Codable, Sendable {
        struct Site: Codable, Sendable {
            var name: String
            var city: String
        }

        var title: String
        var status: String
        var priority: Int
        var due: Date
        var site: Site
        var inspector: String
        var notes: String
        var seq: Int
    }

    static let statuses = ["open", "closed", "review", "draft"]
    static let start: Int64 = 1_767_225_600_000  // 2026-01-01
    /// The words of the notes: 2,000 made-up words and a few real ones with accents.
    static let vocabulary: [String] = ["São", "Paulo", "Zürich", "valve", "pressure", "corrosion", "façade", "crack", "seal", "meter"]
        + (0..<2000).map { "w\(String($0, radix: 36))x" }

    static let schema: [String: CollectionSchema] = [
        "inspections": CollectionSchema(indexes: [["status", "due"], ["status", "priority"], ["seq"]], searchable: ["title"], dates: ["due"]),
    ]
    static let searchSchema: [String: CollectionSchema] = ["inspections": CollectionSchema(searchable: ["notes"])]

    /// Record `n`'s data: about 330 bytes of JSON in eight fields.
    static func record(_ n: Int) -> JSONObject {
        var rng = SplitMix64(seed: UInt64(n) &+ 1)
        func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }
        let words = (0..<12).map { _ in rng.next() % 10 < 2 ? pick(Array(vocabulary.prefix(10))) : pick(vocabulary) }
        let due = start + Int64(rng.next() % (730 * 86_400)) * 1000
        return [
            "title": .string("Inspection \(n) of pump station \(n % 997)"),
            "status": .string(pick(statuses)),
            "priority": .number(JSONNumber(Int(rng.next() % 5) + 1)),
            "due": .string(RecordCoderText.iso(due)),
            "site": .object(["name": .string("Site \(n % 1000)"), "city": .string(pick(["North", "South", "East", "West"]))]),
            "inspector": .string("u\(n % 50)"),
            "notes": .string(words.joined(separator: " ")),
            "seq": .number(JSONNumber(n)),
        ]
    }

    static func run(arguments: [String]) async throws {
        var serverPath: String?
        var records = 1_000_000
        var searchRecords = 100_000
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--server" where i + 1 < arguments.count: serverPath = arguments[i + 1]; i += 1
            case "--records" where i + 1 < arguments.count: records = Int(arguments[i + 1]) ?? records; i += 1
            case "--search-records" where i + 1 < arguments.count: searchRecords = Int(arguments[i + 1]) ?? searchRecords; i += 1
            case "--walk" where i + 1 < arguments.count: return try await walk(path: arguments[i + 1])
            case "-h", "--help":
                print("usage: outpost-bench query [--server PATH] [--records 1000000] [--search-records 100000]")
                return
            default: throw HTTPBench.BenchError("unknown option \(arguments[i])")
            }
            i += 1
        }
        let work = try HTTPBench.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        print("outpost-bench query: load average \(HTTPBench.loadAverage()), \(records) records, SQLite \(sqliteLibraryVersion)")
        let (server, token, url) = try ClientBench.startServer(serverPath, work: work, secret: ClientBench.secret)
        defer { server.stop() }
        let transport = HTTPSyncTransport(baseURL: url, token: token)
        try await seed(transport, space: "bench", records: records)
        try await seed(transport, space: "search", records: searchRecords)

        // 1. First syncs.
        print("\n1. first sync of \(records) records")
        let plain = try await firstSync(transport, path: work + "/plain.sqlite", space: "bench", schema: [:])
        try? FileManager.default.removeItem(atPath: work + "/plain.sqlite")
        let indexed = try await firstSync(transport, path: work + "/indexed.sqlite", space: "bench", schema: schema)
        let syncRatio = plain / indexed
        print(String(format: "with no declaration (ceiling)     %8.2f s  %9.0f records/s", plain, Double(records) / plain))
        print(String(format: "3 indexes, 1 searchable field     %8.2f s  %9.0f records/s", indexed, Double(records) / indexed))
        print(String(format: "goal ≥ 0.7 × the sync with none: %@ (%.2f)", syncRatio >= 0.7 ? "met" : "NOT met", syncRatio))

        let store = try OutpostStore(path: work + "/indexed.sqlite", configuration: configuration("bench", schema), transport: transport)
        let inspections = store.collection("inspections", of: Inspection.self)

        // 2. The indexed query beside the hand-written one.
        let (indexedP99, ratio) = try await indexedQuery(inspections, path: work + "/indexed.sqlite")

        // 3. A count served by an index.
        let count = inspections.filter { $0.status == "open" && $0.priority >= 4 }
        guard try await count.explain().index == ["status", "priority"] else { throw HTTPBench.BenchError("the count does not use its index") }
        var counts: [Double] = []
        var n = 0
        for _ in 0..<20 {
            let t = ContinuousClock.now
            n = try await count.count()
            counts.append(ClientBench.ms(ContinuousClock.now - t))
        }
        counts.sort()
        let countMs = ClientBench.percentile(counts, 0.5)
        print("\n3. a count served by an index (status == open && priority >= 4): \(n) records")
        print(String(format: "median %.2f ms, max %.2f ms (goal < 20 ms: %@)", countMs, counts.last ?? 0, countMs < 20 ? "met" : "NOT met"))

        // 6. Walking everything, in a process of its own.
        await store.close()
        let walkRSS = try walkInProcess(path: work + "/indexed.sqlite")

        // 4. Search.
        let searchP99 = try await search(transport, path: work + "/search.sqlite", records: searchRecords)

        // 5. A live query during a first sync.
        let liveP99 = try await liveDuringSync(transport, path: work + "/live.sqlite", records: records)

        _ = walkRSS
        print(String(format: "\nquery: indexed p99 %.2f ms (%.2fx hand-written SQL), count %.2f ms, search p99 %.2f ms, live p99 %.2f ms",
                     indexedP99, ratio, countMs, searchP99, liveP99))
    }

    static func configuration(_ space: String, _ schema: [String: CollectionSchema]) -> OutpostStore.Configuration {
        var c = OutpostStore.Configuration(space: space)
        c.collections = schema
        return c
    }

    /// Pushes `records` records into `space`, in pushes of the server's largest size.
    static func seed(_ transport: HTTPSyncTransport, space: String, records: Int) async throws {
        let limits = try await transport.serverInfo().limits
        var n = 0
        while n < records {
            var changes: [Change] = []
            while changes.count < limits.maxChangesPerPush && n < records {
                changes.append(Change(changeId: "seed-\(space)-\(n)", collection: "inspections", id: String(format: "i%07d", n), op: .put,
                                      data: record(n), baseVersion: nil))
                n += 1
            }
            let answer = try await transport.push(PushRequest(clientId: "seeder", changes: changes), space: space)
            guard answer.results.allSatisfy({ $0.status == .applied }) else { throw HTTPBench.BenchError("seeding failed") }
        }
    }

    /// Seconds of a first sync of `space` into a new store at `path` declaring `schema`.
    static func firstSync(_ transport: HTTPSyncTransport, path: String, space: String, schema: [String: CollectionSchema]) async throws -> Double {
        let store = try OutpostStore(path: path, configuration: configuration(space, schema), transport: transport)
        let t = ContinuousClock.now
        let report = try await store.sync()
        let seconds = ClientBench.ms(ContinuousClock.now - t) / 1000
        await store.close()
        guard report.pulled > 0 else { throw HTTPBench.BenchError("the sync pulled nothing") }
        return seconds
    }

    // MARK: 2. The indexed query

    static func indexedQuery(_ inspections: OutpostCollection<Inspection>, path: String) async throws -> (p99: Double, ratio: Double) {
        print("\n2. an indexed query: status == open && due >= X, sorted by due, the first 50 decoded, 500 times")
        let rounds = 500
        var rng = SplitMix64(seed: 42)
        let dues = (0..<rounds).map { _ in Date(timeIntervalSince1970: Double(start + Int64(rng.next() % (700 * 86_400)) * 1000) / 1000) }
        func query(_ due: Date) -> OutpostQuery<Inspection> {
            inspections.filter { $0.status == "open" && $0.due >= .date(due) }.sorted(by: .ascending("due")).limit(50)
        }
        let plan = try await query(dues[0]).explain()
        guard plan.index == ["status", "due"] else { throw HTTPBench.BenchError("the query does not use its index: \(plan)") }

        // The hand-written query: the declared index's key table, read on a connection of
        // this thread, the rows decoded by a JSONDecoder.
        let db = try Connection(path: path, flags: [.readOnly])
        defer { db.close() }
        let table = try db.query("SELECT number, definition FROM query_indexes") { ($0.int64(0), $0.text(1)) }
            .first { $0.1.contains("\"status\"") && $0.1.contains("\"due\"") }.map { "qi_\($0.0)" }
        guard let table else { throw HTTPBench.BenchError("no key table of status and due") }
        let sql = """
            SELECT r.doc FROM \(table) k CROSS JOIN records r ON r.collection = 'inspections' AND r.id = k.id
            WHERE k.k0 = 'open' AND k.k1 >= ? AND k.k1 < x'' ORDER BY k.k1, k.id LIMIT 50
            """
        let decoder = RecordCoder.standardDecoder()
        func handWritten(_ due: Date) throws -> [Inspection] {
            let iso = RecordCoderText.iso(Int64((due.timeIntervalSince1970 * 1000).rounded()))
            return try db.cached(sql).query([.text(iso)]) { s in try decoder.decode(Inspection.self, from: Data(s.blob(0))) }
        }
        // Both once, to warm caches, and the same rows.
        let ours = try await query(dues[0]).fetch().values.map(\.seq)
        guard ours == (try handWritten(dues[0])).map(\.seq), ours.count == 50 else { throw HTTPBench.BenchError("the two queries disagree") }

        var sdk: [Double] = [], hand: [Double] = []
        // Alternated, so that both see the same machine.
        for due in dues {
            var t = ContinuousClock.now
            _ = try await query(due).fetch()
            sdk.append(ClientBench.ms(ContinuousClock.now - t))
            t = ContinuousClock.now
            _ = try handWritten(due)
            hand.append(ClientBench.ms(ContinuousClock.now - t))
        }
        sdk.sort()
        hand.sort()
        let p99 = ClientBench.percentile(sdk, 0.99)
        let ratio = ClientBench.percentile(hand, 0.5) / ClientBench.percentile(sdk, 0.5)
        print("                                p50        p99")
        print(String(format: "SDK query (fetch)        %8.3f ms %8.3f ms", ClientBench.percentile(sdk, 0.5), p99))
        print(String(format: "hand-written SQL (ceiling) %6.3f ms %8.3f ms", ClientBench.percentile(hand, 0.5), ClientBench.percentile(hand, 0.99)))
        print(String(format: "goal p99 < 2 ms: %@; ratio of medians %.2f (goal ≥ 0.8: %@)", p99 < 2 ? "met" : "NOT met", ratio, ratio >= 0.8 ? "met" : "NOT met"))
        return (p99, ratio)
    }

    // MARK: 4. Search

    static func search(_ transport: HTTPSyncTransport, path: String, records: Int) async throws -> Double {
        print("\n4. full-text search over \(records) records' notes, the first 20 ranked, 200 searches")
        _ = try await firstSync(transport, path: path, space: "search", schema: searchSchema)
        let store = try OutpostStore(path: path, configuration: configuration("search", searchSchema), transport: transport)
        defer { Task { await store.close() } }
        let inspections = store.collection("inspections", of: Inspection.self)
        var rng = SplitMix64(seed: 7)
        var times: [Double] = []
        var found = 0
        for _ in 0..<200 {
            let a = vocabulary[Int(rng.next() % UInt64(vocabulary.count))]
            let b = vocabulary[Int(rng.next() % UInt64(vocabulary.count))]
            // The second word as typed so far: its first three letters.
            let text = "\(a) \(b.prefix(3))"
            let t = ContinuousClock.now
            found += try await inspections.search(text).limit(20).fetch().count
            times.append(ClientBench.ms(ContinuousClock.now - t))
        }
        times.sort()
        let p99 = ClientBench.percentile(times, 0.99)
        print(String(format: "p50 %.2f ms, p99 %.2f ms, max %.2f ms, %.1f results a search (goal p99 < 10 ms: %@)",
                     ClientBench.percentile(times, 0.5), p99, times.last ?? 0, Double(found) / 200, p99 < 10 ? "met" : "NOT met"))
        return p99
    }

    // MARK: 5. A live query during a first sync

    /// Commits seen by a thread of their own: the time each was seen and the newest `seq` it
    /// holds.
    final class CommitWatcher: Sendable {
        let seen = Mutex<[(at: ContinuousClock.Instant, seq: Int)]>([])
        let running = Atomic<Bool>(true)
        let done = DispatchSemaphore(value: 0)

        /// Watches the store at `path` once it has a key table of `seq` named `table`.
        func start(path: String, table: String) {
            Thread.detachNewThread { [self] in
                defer { done.signal() }
                guard let db = try? Connection(path: path, flags: [.readOnly]) else { return }
                defer { db.close() }
                var version: Int64 = -1
                while running.load(ordering: .relaxed) {
                    if let v = try? db.scalarInt("PRAGMA data_version"), v != version {
                        version = v
                        let at = ContinuousClock.now
                        if let seq = try? db.scalarInt("SELECT max(k0) FROM \(table)") {
                            seen.withLock { $0.append((at, Int(seq))) }
                        }
                    }
                    usleep(100)
                }
            }
        }

        func stop() -> [(at: ContinuousClock.Instant, seq: Int)] {
            running.store(false, ordering: .relaxed)
            done.wait()
            return seen.withLock { $0 }
        }
    }

    static func liveDuringSync(_ transport: HTTPSyncTransport, path: String, records: Int) async throws -> Double {
        print("\n5. a live query of the newest record during a first sync of \(records) records")
        let store = try OutpostStore(path: path, configuration: configuration("bench", schema), transport: transport)
        let newest = store.collection("inspections", of: Inspection.self).sorted(by: .descending("seq")).limit(1)
        let table = try await newest.explain().steps.joined().components(separatedBy: " ").first { $0.hasPrefix("qi_") && !$0.hasSuffix("_keys") }
        guard let table else { throw HTTPBench.BenchError("the live query does not use the seq index") }
        let watcher = CommitWatcher()
        watcher.start(path: path, table: table)
        let shown = Mutex<[(at: ContinuousClock.Instant, seq: Int)]>([])
        let live = Task {
            for try await update in newest.live() {
                let at = ContinuousClock.now
                if let seq = update.results.first?.value.seq { shown.withLock { $0.append((at, seq)) } }
                if update.results.first?.value.seq == records - 1 { return }
            }
        }
        _ = try await store.sync()
        try await live.value
        let commits = watcher.stop()
        await store.close()
        let updates = shown.withLock { $0 }
        // For each commit, the first update that shows its record or a later one.
        var latencies: [Double] = []
        var u = 0
        for commit in commits where commit.seq >= 0 {
            while u < updates.count && updates[u].seq < commit.seq { u += 1 }
            guard u < updates.count else { break }
            latencies.append(max(0, ClientBench.ms(updates[u].at - commit.at)))
        }
        latencies.sort()
        let p99 = ClientBench.percentile(latencies, 0.99)
        print(String(format: "%d commits seen, %d updates; from a commit to the live query showing it: p50 %.2f ms, p99 %.2f ms, max %.2f ms (goal p99 < 16 ms: %@)",
                     commits.count, updates.count, ClientBench.percentile(latencies, 0.5), p99, latencies.last ?? 0, p99 < 16 ? "met" : "NOT met"))
        return p99
    }

    // MARK: 6. Walking every result

    /// Runs `outpost-bench query --walk PATH` in a process of its own under /usr/bin/time;
    /// its peak RSS in bytes.
    static func walkInProcess(path: String) throws -> Double {
        print("\n6. every result, page by page (pages of 1,000 by cursor, decoded), in a process of its own")
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().path
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/time") else {
            print("not measured: no /usr/bin/time")
            return 0
        }
        let result = try Subprocess.run("/usr/bin/time", ["-f", "walk-peak-rss-kb %M", me, "query", "--walk", path])
        guard result.status == 0, let line = result.error.split(separator: "\n").last(where: { $0.hasPrefix("walk-peak-rss-kb ") }),
              let kb = Double(line.split(separator: " ").last ?? "") else {
            throw HTTPBench.BenchError("the walk failed: \(result.output) \(result.error)")
        }
        print(result.output.trimmingCharacters(in: .whitespacesAndNewlines))
        print(String(format: "peak RSS %.1f MB (goal < 100 MB: %@)", kb * 1024 / 1e6, kb * 1024 < 100e6 ? "met" : "NOT met"))
        return kb * 1024
    }

    /// The walk itself (the child process).
    static func walk(path: String) async throws {
        let store = try OutpostStore.reader(path: path, configuration: configuration("bench", schema))
        let all = store.collection("inspections", of: Inspection.self).query.limit(1000)
        var cursor: QueryCursor?
        var rows = 0
        let t = ContinuousClock.now
        repeat {
            let page = try await all.after(cursor).fetch()
            rows += page.count
            cursor = page.count == 1000 ? page.cursor : nil
        } while cursor != nil
        print(String(format: "walked %d rows in %.2f s", rows, ClientBench.ms(ContinuousClock.now - t) / 1000))
        await store.close()
    }
}

/// RFC 3339 text of a time in ms since 1970, as the SDK's standard coder writes it.
enum RecordCoderText {
    static func iso(_ ms: Int64) -> String {
        let encoder = RecordCoder.standardEncoder()
        let data = (try? encoder.encode([Date(timeIntervalSince1970: Double(ms) / 1000)])) ?? Data()
        return String(decoding: data.dropFirst(2).dropLast(2), as: UTF8.self)
    }
}
