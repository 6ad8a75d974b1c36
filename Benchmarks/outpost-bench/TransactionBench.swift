// `outpost-bench transaction`: the write block (`OutpostStore.transaction`) beside a
// hand-written SQLite transaction inserting the same rows, in the same run.
//
// 1. The SDK: --saves typed saves (a Codable struct of six fields, about 200 bytes of JSON)
//    in one write block, on a new store file with the default durability (FULL), the clock
//    from the call to its return. Best of --rounds, each on a new file.
// 2. The ceiling: the same values encoded by a JSONEncoder and inserted by prepared
//    statements, in one transaction, into a new SQLite file in WAL mode with
//    synchronous=FULL: per save, a row of the record (collection, id, data, pending) and a
//    row of the queue (a change id, the record's key, the data, a time). Best of --rounds.
// 3. For information: --single saves one at a time (each its own commit).
// The goals (issue 45): the block under 1 s for 10,000 saves, and ≥ 0.5 × the ceiling's rate.
import Foundation
import Outpost
import OutpostSQLite

enum TransactionBench {
    struct Item: Codable, Sendable {
        var name: String
        var sku: String
        var quantity: Int
        var location: String
        var notes: String
        var tags: [String]
    }

    static func item(_ i: Int) -> Item {
        Item(name: "Item \(i)", sku: "SKU-\(i * 7919 % 100_000)", quantity: i % 97, location: "Aisle \(i % 40), shelf \(i % 7)",
             notes: "checked by the night shift; box slightly damaged", tags: ["fragile", "inventory"])
    }

    static func run(arguments: [String]) async throws {
        var saves = 10_000
        var rounds = 3
        var single = 500
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--saves" where i + 1 < arguments.count: saves = Int(arguments[i + 1]) ?? saves; i += 1
            case "--rounds" where i + 1 < arguments.count: rounds = max(1, Int(arguments[i + 1]) ?? rounds); i += 1
            case "--single" where i + 1 < arguments.count: single = Int(arguments[i + 1]) ?? single; i += 1
            case "-h", "--help":
                print("usage: outpost-bench transaction [--saves 10000] [--rounds 3] [--single 500]")
                return
            default: throw HTTPBench.BenchError("unknown option \(arguments[i])")
            }
            i += 1
        }
        let work = try HTTPBench.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        print("outpost-bench transaction: \(saves) saves, best of \(rounds), load average \(HTTPBench.loadAverage()), durability FULL")
        let values = (0..<saves).map(item)

        var block = Double.infinity, hand = Double.infinity
        // Alternated, so that both see the same machine.
        for r in 0..<rounds {
            block = min(block, try await sdkBlock(values, path: work + "/block-\(r).sqlite"))
            hand = min(hand, try handWritten(values, path: work + "/hand-\(r).sqlite"))
        }
        let singles = try await sdkSingles(Array(values.prefix(single)), path: work + "/single.sqlite")
        let ratio = hand / block
        print(String(format: "write block          %8.3f s  %9.0f saves/s", block, Double(saves) / block))
        print(String(format: "hand-written SQLite  %8.3f s  %9.0f saves/s (ceiling)", hand, Double(saves) / hand))
        print(String(format: "one save at a time   %8.3f s  %9.0f saves/s (%d saves, each its own commit)", singles, Double(single) / singles, single))
        print(String(format: "goal < 1 s: %@; ratio %.2f (goal ≥ 0.5: %@)", block < 1 ? "met" : "NOT met", ratio, ratio >= 0.5 ? "met" : "NOT met"))
        print(String(format: "\ntransaction: %d saves in %.3f s (%.2fx hand-written SQLite), one at a time %.0f saves/s", saves, block, ratio, Double(single) / singles))
    }

    static func sdkBlock(_ values: [Item], path: String) async throws -> Double {
        let store = try OutpostStore(path: path, configuration: .init(space: "bench"))
        let items = store.collection("items", of: Item.self)
        let start = ContinuousClock.now
        try await store.transaction { tx in
            for (i, v) in values.enumerated() { try tx.save(v, id: "i\(i)", in: items) }
        }
        let seconds = MediaBench.seconds(ContinuousClock.now - start)
        guard try await items.count() == values.count else { throw HTTPBench.BenchError("the block did not save every value") }
        await store.close()
        return seconds
    }

    static func sdkSingles(_ values: [Item], path: String) async throws -> Double {
        let store = try OutpostStore(path: path, configuration: .init(space: "bench"))
        let items = store.collection("items", of: Item.self)
        let start = ContinuousClock.now
        for (i, v) in values.enumerated() { try await items.save(v, id: "i\(i)") }
        let seconds = MediaBench.seconds(ContinuousClock.now - start)
        await store.close()
        return seconds
    }

    static func handWritten(_ values: [Item], path: String) throws -> Double {
        let db = try Connection(path: path)
        defer { db.close() }
        try db.execute("""
            PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
            CREATE TABLE records(collection TEXT NOT NULL, id TEXT NOT NULL, data BLOB, pending INTEGER NOT NULL, PRIMARY KEY (collection, id)) WITHOUT ROWID;
            CREATE TABLE queue(position INTEGER PRIMARY KEY, change_id TEXT NOT NULL UNIQUE, collection TEXT NOT NULL, id TEXT NOT NULL, data BLOB, created_at INTEGER NOT NULL);
            """)
        let encoder = JSONEncoder()
        let start = ContinuousClock.now
        try db.transaction {
            let record = try db.prepare("INSERT INTO records(collection, id, data, pending) VALUES ('items', ?, ?, 1)")
            let queue = try db.prepare("INSERT INTO queue(change_id, collection, id, data, created_at) VALUES (?, 'items', ?, ?, ?)")
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            for (i, v) in values.enumerated() {
                let data = [UInt8](try encoder.encode(v))
                try record.run([.text("i\(i)"), .blob(data)])
                try queue.run([.text(UUID().uuidString), .text("i\(i)"), .blob(data), .integer(now)])
            }
        }
        return MediaBench.seconds(ContinuousClock.now - start)
    }
}
