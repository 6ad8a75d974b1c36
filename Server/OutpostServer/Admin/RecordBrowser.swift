import Foundation
import OutpostCore

/// The admin console's reads of a space's records (docs/operating.md, "Admin console"),
/// written once in SQL over `SQLSession` for both stores: the collections of a space, a
/// page of one collection's records in id order (optionally those whose id starts with a
/// prefix), and one record. Every read is bounded: pages by a count and a byte budget,
/// and each walks the records' key index (space, collection, id) from a cursor, so none
/// reads a whole space. One thread with its own session runs every statement; on SQLite
/// the session is read-only and reads a WAL snapshot, never waiting for the writer.
final class RecordBrowser: Sendable {
    private let thread: WorkerThread<SQLSessionJob>
    /// The store's epoch: the versions of the records it lists.
    let epoch: Epoch

    /// The most collections, and records, in one page, and their defaults.
    static let maxCollectionsPerPage = 500
    static let defaultCollectionsPerPage = 100
    static let maxRecordsPerPage = 500
    static let defaultRecordsPerPage = 50
    /// The byte budget of a page of records (encoded JSON): default and bounds.
    static let defaultPageBytes = 1_048_576
    static let minPageBytes = 1024
    static let maxPageBytes = 8_388_608
    /// Bytes counted for a record besides its data and key (version, times, names).
    static let recordOverhead = 160

    init(name: String, epoch: Epoch, open: @escaping @Sendable () throws -> any SQLSession) throws {
        self.epoch = epoch
        thread = try SQLSessionJob.thread(name: "\(name)-browser", open: open)
    }

    func stop() {
        thread.stop()
    }

    /// A page of records: the records encoded as a JSON array of their wire form
    /// (docs/protocol.md section 5), and the id to continue after, nil on the last page.
    struct RecordPage: Sendable {
        var recordsJSON: [UInt8]
        var count: Int
        var next: String?
    }

    /// At most `limit` collection names of `space` after `after`, in bytewise order. Each
    /// is found by one seek in the key index (a recursive query), so a collection's size
    /// costs nothing.
    func collections(space: String, after: String, limit: Int) async throws -> [String] {
        try await run { db in
            guard let spaceID = try Self.spaceID(db, space) else { return [] }
            return try db.query("""
                WITH RECURSIVE c(name, n) AS (
                  SELECT (SELECT collection FROM records WHERE space_id = ? AND collection > ? ORDER BY collection LIMIT 1), 1
                  UNION ALL
                  SELECT (SELECT collection FROM records WHERE space_id = ? AND collection > c.name ORDER BY collection LIMIT 1), c.n + 1
                    FROM c WHERE c.name IS NOT NULL AND c.n < ?
                )
                SELECT name FROM c WHERE name IS NOT NULL ORDER BY n
                """, [.integer(spaceID), .text(after), .integer(spaceID), .integer(Int64(limit))]) { $0.text(0) }
        }
    }

    /// A page of `collection`'s records in `space` (tombstones included) whose ids sort
    /// after `after` and, with a `prefix`, start with it: at most `limit` records and
    /// `maxBytes` of encoded records, but at least one when any is due. The sizes are read
    /// first (the data's length, not the data), the page chosen from them, and then only
    /// its records are read whole.
    func records(space: String, collection: String, after: String, prefix: String?, limit: Int, maxBytes: Int) async throws -> RecordPage {
        let epoch = self.epoch
        let bounds = prefix.map(Self.prefixBounds)
        return try await run { db in
            let empty = RecordPage(recordsJSON: Array("[]".utf8), count: 0, next: nil)
            guard let spaceID = try Self.spaceID(db, space) else { return empty }
            var conditions = "space_id = ? AND collection = ? AND id > ?"
            var values: [SQLValue] = [.integer(spaceID), .text(collection), .text(after)]
            if let bounds {
                conditions += " AND id >= ?"
                values.append(.text(bounds.lower))
                if let upper = bounds.upper {
                    conditions += " AND id < ?"
                    values.append(.text(upper))
                }
            }
            // One more than asked tells whether another page follows.
            let sizes = try db.query("""
                SELECT id, coalesce(length(data), 0) + coalesce(length(resolved), 0) FROM records WHERE \(conditions) ORDER BY id LIMIT ?
                """, values + [.integer(Int64(limit + 1))]) { (id: $0.text(0), bytes: $0.int(1)) }
            var chosen: [String] = []
            var total = 0
            for row in sizes.prefix(limit) {
                let cost = row.bytes + row.id.utf8.count + collection.utf8.count + Self.recordOverhead
                if !chosen.isEmpty && total + cost > maxBytes { break }
                chosen.append(row.id)
                total += cost
            }
            guard !chosen.isEmpty else { return empty }
            let records = try db.query("""
                SELECT \(Self.columns) FROM records WHERE space_id = ? AND collection = ? AND \(db.anyOf("id")) ORDER BY id
                """, [.integer(spaceID), .text(collection), .texts(chosen)]) { Self.codec.record($0) }
            var out: [UInt8] = [UInt8(ascii: "[")]
            for (i, record) in records.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                record.append(to: &out, epoch: epoch)
            }
            out.append(UInt8(ascii: "]"))
            // A record deleted for good (compaction) between the two reads is left out; the
            // page still ends where the sizes said, so the next one starts after it.
            return RecordPage(recordsJSON: out, count: records.count, next: sizes.count > chosen.count ? chosen.last : nil)
        }
    }

    /// One record of `space` (its tombstone included), nil when the space has none by
    /// that collection and id.
    func record(space: String, collection: String, id: String) async throws -> StoredRecord? {
        try await run { db in
            guard let spaceID = try Self.spaceID(db, space) else { return nil }
            return try db.queryOne("SELECT \(Self.columns) FROM records WHERE space_id = ? AND collection = ? AND id = ?",
                                   [.integer(spaceID), .text(collection), .text(id)]) { Self.codec.record($0) }
        }
    }

    /// The range of ids that start with `prefix`: from `prefix` itself up to (not
    /// including) `prefix` with its last scalar raised by one, since UTF-8's byte order is
    /// the scalars' order and both stores compare ids bytewise. A prefix of only U+10FFFF
    /// scalars has no upper bound.
    static func prefixBounds(_ prefix: String) -> (lower: String, upper: String?) {
        var scalars = Array(prefix.unicodeScalars)
        while let last = scalars.popLast() {
            var value = last.value + 1
            if value == 0xD800 { value = 0xE000 }
            if let next = Unicode.Scalar(value) {
                scalars.append(next)
                var upper = String.UnicodeScalarView()
                upper.append(contentsOf: scalars)
                return (prefix, String(upper))
            }
        }
        return (prefix, nil)
    }

    private static func spaceID(_ db: any SQLSession, _ space: String) throws -> Int64? {
        try db.queryOne("SELECT space_id FROM spaces WHERE name = ?", [.text(space)]) { $0.int64(0) }
    }

    /// The console shows an operator the authenticated subject that wrote each state,
    /// which no pull sends: its reads list `subject` too.
    private static let columns = RecordRow.select(subject: true)
    private static let codec = RecordRow(subject: true)

    private func run<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = SQLSessionJob { db, error in
                if let error { continuation.resume(throwing: error); return }
                continuation.resume(with: Result { try body(db) })
            }
            if !thread.submit(job) { continuation.resume(throwing: StoreError("the record browser is closed")) }
        }
    }
}
