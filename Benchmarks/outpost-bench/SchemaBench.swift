// outpost-bench schema: candidate SQLite layouts for the push path, each measured with the
// statements the store runs for a new change (the raw-SQLite ceiling of `outpost-bench
// push`), in the same run and alternated, so the machine's noise falls on every layout
// alike. It answers "what would this layout save" before the store is changed for it.
import Foundation
import OutpostCrypto
import OutpostServer
import OutpostSQLite

enum SchemaBench {
    /// One layout: how to set it up, and the statements of one new change.
    struct Layout: Sendable {
        let name: String
        /// Run after the store's own migration (which creates today's layout).
        let alter: String
        /// The change id's lookup and insert for this layout.
        let findApplied: String
        let remember: String
        /// Binds the idempotency statements: (change id) -> their values.
        let appliedKey: @Sendable (String) -> [SQLiteValue]
        let rememberValues: @Sendable (String, Int64) -> [SQLiteValue]
    }

    static let fingerprint = [UInt8](repeating: 7, count: 32)

    static let layouts: [Layout] = [
        Layout(name: "today: 5 B-trees (records, key, seq; idempotency, its time index)", alter: "",
               findApplied: "SELECT fingerprint, epoch, seq, applied_at FROM applied_changes WHERE space_id = ? AND change_id = ?",
               remember: "INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES (?, ?, ?, ?, ?, ?)",
               appliedKey: { [.integer(1), .text($0)] },
               rememberValues: { [.integer(1), .text($0), .blob(fingerprint), .text("EPOCH"), .integer($1), .integer(1)] }),
        Layout(name: "no time index on idempotency rows (sweep by scanning)", alter: "DROP INDEX applied_changes_at",
               findApplied: "SELECT fingerprint, epoch, seq, applied_at FROM applied_changes WHERE space_id = ? AND change_id = ?",
               remember: "INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES (?, ?, ?, ?, ?, ?)",
               appliedKey: { [.integer(1), .text($0)] },
               rememberValues: { [.integer(1), .text($0), .blob(fingerprint), .text("EPOCH"), .integer($1), .integer(1)] }),
        Layout(name: "idempotency keyed by one 64-bit integer (hash of space and id), no time index",
               alter: """
                   DROP TABLE applied_changes;
                   CREATE TABLE applied_changes(key INTEGER PRIMARY KEY, change_id TEXT NOT NULL, fingerprint BLOB NOT NULL,
                     epoch TEXT NOT NULL, seq INTEGER NOT NULL, applied_at INTEGER NOT NULL);
                   """,
               findApplied: "SELECT fingerprint, epoch, seq, applied_at, change_id FROM applied_changes WHERE key = ?",
               remember: "INSERT INTO applied_changes(key, change_id, fingerprint, epoch, seq, applied_at) VALUES (?, ?, ?, ?, ?, ?)",
               appliedKey: { [.integer(hashKey($0))] },
               rememberValues: { [.integer(hashKey($0)), .text($0), .blob(fingerprint), .text("EPOCH"), .integer($1), .integer(1)] }),
        Layout(name: "idempotency rows in insertion order (rowid), unique (space, id) index; range sweep",
               alter: """
                   DROP TABLE applied_changes;
                   CREATE TABLE applied_changes(space_id INTEGER NOT NULL, change_id TEXT NOT NULL, fingerprint BLOB NOT NULL,
                     epoch TEXT NOT NULL, seq INTEGER NOT NULL, applied_at INTEGER NOT NULL);
                   CREATE UNIQUE INDEX applied_changes_key ON applied_changes(space_id, change_id);
                   """,
               findApplied: "SELECT fingerprint, epoch, seq, applied_at FROM applied_changes WHERE space_id = ? AND change_id = ?",
               remember: "INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES (?, ?, ?, ?, ?, ?)",
               appliedKey: { [.integer(1), .text($0)] },
               rememberValues: { [.integer(1), .text($0), .blob(fingerprint), .text("EPOCH"), .integer($1), .integer(1)] }),
    ]

    static func hashKey(_ id: String) -> Int64 {
        let digest = SHA256.hash(Array(("1/" + id).utf8))
        return digest.prefix(8).reduce(Int64(0)) { ($0 << 8) | Int64($1) }
    }

    static func run(arguments: [String]) throws {
        var rounds = 2
        var batch = 500
        var total = 400_000
        var ids = IDs.ordered
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--rounds" where i + 1 < arguments.count: rounds = Int(arguments[i + 1]) ?? rounds; i += 1
            case "--batch" where i + 1 < arguments.count: batch = Int(arguments[i + 1]) ?? batch; i += 1
            case "--changes" where i + 1 < arguments.count: total = Int(arguments[i + 1]) ?? total; i += 1
            case "--ids" where i + 1 < arguments.count: ids = IDs(rawValue: arguments[i + 1]) ?? ids; i += 1
            default:
                print("usage: outpost-bench schema [--rounds 2] [--batch 500] [--changes 400000] [--ids ordered|sdk|uuid]")
                return
            }
            i += 1
        }
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-bench-schema-\(getpid())").path
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work) }
        print("outpost-bench schema: \(total) new changes in transactions of \(batch), WAL + synchronous=FULL, ids \(ids.description), \(rounds) rounds alternated, load average \(HTTPBench.loadAverage())")
        var rates = Array(repeating: [Double](), count: layouts.count)
        for round in 0..<rounds {
            for (n, layout) in layouts.enumerated() {
                let rate = try measure(layout, path: work + "/r\(round)-\(n).sqlite", batch: batch, total: total, ids: ids)
                rates[n].append(rate)
            }
        }
        let baseline = rates[0].reduce(0, +) / Double(rounds)
        print("\nchanges/s per round                                         mean    × today")
        for (n, layout) in layouts.enumerated() {
            let mean = rates[n].reduce(0, +) / Double(rounds)
            print("\(layout.name)\n    " + rates[n].map { String(format: "%9.0f", $0) }.joined()
                  + String(format: "   %9.0f   %.2f", mean, mean / baseline))
        }
    }

    /// The store's statements for `total` new changes with `layout`'s idempotency rows.
    /// How the change ids and record ids of the measured changes are made.
    enum IDs: String {
        /// One string for both, ordered within each client's stream, as `outpost-bench push`
        /// sends them.
        case ordered
        /// As the SDK makes change ids (UUID version 7: time first), with record ids as
        /// apps often make them (random UUIDs).
        case sdk
        /// Both random UUIDs.
        case uuid

        var description: String {
            switch self {
            case .ordered: return "ordered per client (as outpost-bench push)"
            case .sdk: return "change ids time-ordered (the SDK's UUIDv7), record ids random UUIDs"
            case .uuid: return "change ids and record ids random UUIDs"
            }
        }

        /// The change id and record id of change `i` of transaction `b`.
        func make(batch: Int, b: Int, i: Int) -> (change: String, record: String) {
            switch self {
            case .ordered:
                let id = "b\(batch)-c\(b % 8)-r\(b / 8)-\(i)"
                return (id, id)
            case .sdk:
                let ms = UInt64(Date().timeIntervalSince1970 * 1000)
                return (String(format: "%012llx-7%03x-%016llx", ms, i & 0xFFF, UInt64.random(in: 0...UInt64.max)), UUID().uuidString.lowercased())
            case .uuid:
                return (UUID().uuidString.lowercased(), UUID().uuidString.lowercased())
            }
        }
    }

    static func measure(_ layout: Layout, path: String, batch: Int, total: Int, ids: IDs) throws -> Double {
        let db = try Connection(path: path)
        try db.enableWAL(synchronous: .full)
        // The store's writer settings (SQLiteSyncStore): its checkpoints run on a thread of
        // their own, never in the commit.
        try db.execute("PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY; PRAGMA wal_autocheckpoint=0")
        try SQLiteSyncStore.migrate(db)
        if !layout.alter.isEmpty { try db.execute(layout.alter) }
        try db.run("INSERT INTO spaces(name, head_seq) VALUES ('bench', 0)")
        let findApplied = try db.prepare(layout.findApplied)
        let findHead = try db.prepare("SELECT seq, lineage, same_as FROM records WHERE space_id = ? AND collection = ? AND id = ?")
        let upsert = try db.prepare("""
            INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as)
            VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, NULL, NULL)
            ON CONFLICT(space_id, collection, id) DO UPDATE SET
              seq = excluded.seq, deleted = excluded.deleted, data = excluded.data, updated_at = excluded.updated_at,
              updated_by = excluded.updated_by, client_time = excluded.client_time, lineage = excluded.lineage, same_as = excluded.same_as
            """)
        let remember = try db.prepare(layout.remember)
        let data = Array(#"{"name":"Item 1 of b100-c0-r0","sku":"SKU-7919","quantity":1,"location":"Aisle 1, shelf 1","notes":"checked by the night shift; box slightly damaged","tags":["fragile","inventory"]}"#.utf8)
        var seq: Int64 = 0
        let start = Date()
        for b in 0..<(total / batch) {
            try db.transaction {
                for i in 0..<batch {
                    let (change, id) = ids.make(batch: batch, b: b, i: i)
                    seq += 1
                    try findApplied.bind(layout.appliedKey(change))
                    _ = try findApplied.step()
                    findApplied.reset()
                    try findHead.bind([.integer(1), .text("items"), .text(id)])
                    _ = try findHead.step()
                    findHead.reset()
                    try upsert.bind([.integer(1), .text("items"), .text(id), .integer(seq), .blob(data), .integer(1), .text("bench"), .integer(1)])
                    _ = try upsert.step()
                    upsert.reset()
                    try remember.bind(layout.rememberValues(change, seq))
                    _ = try remember.step()
                    remember.reset()
                }
                try db.run("UPDATE spaces SET head_seq = ? WHERE space_id = 1", [.integer(seq)])
            }
        }
        let seconds = Date().timeIntervalSince(start)
        db.close()
        return Double(total) / seconds
    }
}
