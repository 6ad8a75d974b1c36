// `outpost-bench e2e`: what end-to-end encryption (docs/encryption.md) costs the client
// SDK, against the release `outpost-server` on this machine, each figure beside the same
// work in clear from the same run.
//
// 1. Save + sync: `--saves` records of ~200 bytes saved one at a time into a new store,
//    then one sync that pushes them all; encrypted and clear stores alternate, three
//    rounds each, and the medians are compared. Goal: encrypted ≤ 1.3 × the time in clear.
// 2. Initial sync: a space of `--records` sealed records (saved and pushed by an encrypted
//    store) pulled into a new encrypted store from the start, beside a clear space of as
//    many records pulled into a clear store. Goal: ≥ 80,000 records/s encrypted.
// 3. Media upload: a `--media-mib` file uploaded by an encrypted store (sealed first,
//    then sent) and by a clear one, each to a new space, alternating, three rounds each;
//    medians compared. Goal: encrypted ≥ 0.8 × the throughput in clear.
import Foundation
import Outpost
import OutpostCore
import OutpostServer

enum E2EBench {
    static let secret = "outpost-bench-e2e-secret-0123456789abcdef"

    static func run(arguments: [String]) async throws {
        var serverPath: String?
        var records = 100_000
        var saves = 5_000
        var mediaMiB = 64
        var parts: Set<Int> = [1, 2, 3]
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--server" where i + 1 < arguments.count: serverPath = arguments[i + 1]; i += 1
            case "--records" where i + 1 < arguments.count: records = Int(arguments[i + 1]) ?? records; i += 1
            case "--saves" where i + 1 < arguments.count: saves = Int(arguments[i + 1]) ?? saves; i += 1
            case "--media-mib" where i + 1 < arguments.count: mediaMiB = Int(arguments[i + 1]) ?? mediaMiB; i += 1
            case "--parts" where i + 1 < arguments.count: parts = Set(arguments[i + 1].split(separator: ",").compactMap { Int($0) }); i += 1
            case "-h", "--help":
                print("usage: outpost-bench e2e [--server PATH] [--records 100000] [--saves 5000] [--media-mib 64] [--parts 1,2,3]")
                return
            default: throw HTTPBench.BenchError("unknown option \(arguments[i])")
            }
            i += 1
        }
        let work = try HTTPBench.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        print("outpost-bench e2e: load average \(HTTPBench.loadAverage())")
        let (server, token, url) = try ClientBench.startServer(serverPath, work: work, secret: secret)
        defer { server.stop() }
        let keys = FileKeyStore(path: work + "/bench.keys")

        if parts.contains(1) { try await saveAndSync(url: url, token: token, work: work, keys: keys, count: saves) }
        if parts.contains(2) { try await initialSync(url: url, token: token, work: work, keys: keys, records: records) }
        if parts.contains(3) { try await media(url: url, token: token, work: work, keys: keys, mib: mediaMiB) }
    }

    static let clock = ContinuousClock()

    static func seconds(_ d: Duration) -> Double {
        let (s, a) = d.components
        return Double(s) + Double(a) / 1e18
    }

    /// A store of a new space `space`, sealed under `keys` when `encrypted`.
    static func store(_ path: String, space: String, encrypted: Bool, keys: FileKeyStore, url: URL, token: String) throws -> OutpostStore {
        if encrypted, try keys.keyring(space: space) == nil { try SpaceKeys.create(space: space, in: keys) }
        var configuration = OutpostStore.Configuration(space: space)
        if encrypted { configuration.encryption = .spaceKey(keys) }
        return try OutpostStore(path: path, configuration: configuration, transport: HTTPSyncTransport(baseURL: url, token: token))
    }

    static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

    // MARK: 1. Save + sync

    static func saveAndSync(url: URL, token: String, work: String, keys: FileKeyStore, count: Int) async throws {
        print("\n1. save + sync of \(count) records of ~200 bytes (saves one at a time, durability FULL, then one sync)")
        var times: [Bool: [Double]] = [true: [], false: []]
        for round in 0..<3 {
            for encrypted in [false, true] {
                let space = "saves-\(encrypted ? "e2e" : "clear")-\(round)"
                let store = try store(work + "/\(space).sqlite", space: space, encrypted: encrypted, keys: keys, url: url, token: token)
                let start = clock.now
                for n in 0..<count { try await store.put(ClientBench.record(n), in: "todos", id: "t\(n)") }
                let report = try await store.sync()
                times[encrypted]!.append(seconds(clock.now - start))
                await store.close()
                guard report.pushed == count else { throw HTTPBench.BenchError("pushed \(report.pushed) of \(count)") }
            }
        }
        let clear = median(times[false]!), sealed = median(times[true]!)
        print(String(format: "in clear   %7.2f s  (%.0f records/s; rounds %@)", clear, Double(count) / clear, times[false]!.map { String(format: "%.2f", $0) }.joined(separator: ", ")))
        print(String(format: "encrypted  %7.2f s  (%.0f records/s; rounds %@)", sealed, Double(count) / sealed, times[true]!.map { String(format: "%.2f", $0) }.joined(separator: ", ")))
        print(String(format: "ratio %.2f ×; goal ≤ 1.3 ×: %@", sealed / clear, sealed / clear <= 1.3 ? "met" : "NOT met"))
    }

    // MARK: 2. Initial sync

    static func initialSync(url: URL, token: String, work: String, keys: FileKeyStore, records: Int) async throws {
        print("\n2. initial sync of \(records) records of ~200 bytes into a new store, from a local server")
        // Seeding: the encrypted space through an encrypted store (its durability NORMAL, to
        // seed faster), the clear one through the transport.
        var configuration = OutpostStore.Configuration(space: "sync-e2e")
        try SpaceKeys.create(space: "sync-e2e", in: keys)
        configuration.encryption = .spaceKey(keys)
        configuration.durability = .normal
        let seeder = try OutpostStore(path: work + "/seed-e2e.sqlite", configuration: configuration, transport: HTTPSyncTransport(baseURL: url, token: token))
        for n in 0..<records { try await seeder.put(ClientBench.record(n), in: "todos", id: String(format: "t%07d", n)) }
        guard try await seeder.sync().pushed == records else { throw HTTPBench.BenchError("seeding the encrypted space failed") }
        await seeder.close()
        let transport = HTTPSyncTransport(baseURL: url, token: token)
        let limits = try await transport.serverInfo().limits
        var n = 0
        while n < records {
            var changes: [Change] = []
            while changes.count < limits.maxChangesPerPush && n < records {
                changes.append(Change(changeId: "seed-\(n)", collection: "todos", id: String(format: "t%07d", n), op: .put, data: ClientBench.record(n), baseVersion: nil))
                n += 1
            }
            let answer = try await transport.push(PushRequest(clientId: "seeder", changes: changes), space: "sync-clear")
            guard answer.results.allSatisfy({ $0.status == .applied }) else { throw HTTPBench.BenchError("seeding failed") }
        }
        var rates: [Bool: Double] = [:]
        for encrypted in [false, true] {
            let space = encrypted ? "sync-e2e" : "sync-clear"
            let store = try store(work + "/initial-\(space).sqlite", space: space, encrypted: encrypted, keys: keys, url: url, token: token)
            let start = clock.now
            let report = try await store.sync()
            let elapsed = seconds(clock.now - start)
            await store.close()
            guard report.pulled == records, report.quarantined == 0 else { throw HTTPBench.BenchError("pulled \(report.pulled), quarantined \(report.quarantined)") }
            rates[encrypted] = Double(records) / elapsed
            print(String(format: "%@ %10.0f records/s  %6.2f s", encrypted ? "encrypted " : "in clear  ", Double(records) / elapsed, elapsed))
        }
        print(String(format: "ratio %.2f × the time; goal ≥ 80,000 records/s encrypted: %@", rates[false]! / rates[true]!, rates[true]! >= 80_000 ? "met" : "NOT met"))
    }

    // MARK: 3. Media

    static func media(url: URL, token: String, work: String, keys: FileKeyStore, mib: Int) async throws {
        print("\n3. media upload of a \(mib) MiB file to a local server")
        let file = URL(fileURLWithPath: work + "/upload.bin")
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        let handle = try FileHandle(forWritingTo: file)
        var random = SplitMix64(seed: 7)
        for _ in 0..<mib { try handle.write(contentsOf: Data(random.bytes(1 << 20))) }
        try handle.close()
        var rates: [Bool: [Double]] = [true: [], false: []]
        for round in 0..<3 {
            for encrypted in [false, true] {
                let space = "media-\(encrypted ? "e2e" : "clear")-\(round)"
                let store = try store(work + "/\(space).sqlite", space: space, encrypted: encrypted, keys: keys, url: url, token: token)
                let uploader = MediaUploader(store: store, transport: HTTPMediaTransport(baseURL: url, token: token))
                let start = clock.now
                _ = try await uploader.uploadReference(file: file, contentType: "application/octet-stream")
                let elapsed = seconds(clock.now - start)
                await store.close()
                rates[encrypted]!.append(Double(mib) / elapsed)
            }
        }
        let clear = median(rates[false]!), sealed = median(rates[true]!)
        func rounds(_ values: [Double]) -> String { values.map { String(format: "%.1f", $0) }.joined(separator: ", ") }
        print(String(format: "in clear   %7.1f MiB/s  (rounds %@)", clear, rounds(rates[false]!)))
        print(String(format: "encrypted  %7.1f MiB/s  (sealing included; rounds %@)", sealed, rounds(rates[true]!)))
        print(String(format: "ratio %.2f ×; goal ≥ 0.8 ×: %@", sealed / clear, sealed / clear >= 0.8 ? "met" : "NOT met"))
    }
}
