import Foundation
import OutpostCore
import OutpostSQLite

// The query engine's narrow interface on a connection: compile a `QuerySpec` against the
// file's indexes, then read its rows, its count or its plan. It runs wherever the app's
// reads run (a reader of `ReadPool`, or the store's actor when it has none) and writes
// nothing.

/// One row of a query, as read: the record's JSON bytes and what the store knows of it.
struct QueryRowData: Sendable, Equatable {
    let id: String
    let doc: [UInt8]
    let pending: Bool
    let version: String?
    let updatedAt: Int64?
    let updatedBy: String?
    let rejected: Bool
    let keys: [SQLiteValue]
}

/// What the rows of one query read were.
struct QueryRead: Sendable {
    let rows: [QueryRowData]
    let shape: String
}

extension LocalDatabase {
    /// Compiles `spec` against the file's indexes of its collection. `schema` is the app's
    /// declaration; without one (the command-line client), the fields the file's indexes
    /// hold as dates are dates, so the same query gives the app's rows.
    func compile(_ spec: QuerySpec, schema: CollectionSchema?, encoder: JSONEncoder) throws -> CompiledQuery {
        let indexes = try queryIndexes().filter { $0.collection == spec.collection }
        var effective = schema ?? CollectionSchema()
        if schema == nil {
            for index in indexes {
                guard case .keys(let fields, let kinds) = index.content else { continue }
                for (f, k) in zip(fields, kinds) where k == .date && !effective.dates.contains(f.description) { effective.dates.append(f.description) }
            }
        }
        var compiler = QueryCompiler(spec: spec, schema: effective, indexes: indexes, encoder: encoder)
        return try compiler.compile()
    }

    /// The rows of a compiled query.
    func rows(_ q: CompiledQuery) throws -> QueryRead {
        let keyCount = Int32(q.keyCount)
        let rows = try db.cached(q.sql).query(q.values) { s in
            QueryRowData(id: s.text(QueryColumn.id), doc: s.blob(QueryColumn.doc), pending: s.int64(QueryColumn.pending) != 0,
                         version: s.optionalText(QueryColumn.version), updatedAt: s.optionalInt64(QueryColumn.updatedAt),
                         updatedBy: s.optionalText(QueryColumn.updatedBy), rejected: s.int64(QueryColumn.rejected) != 0,
                         keys: (0..<keyCount).map { s.value(QueryColumn.keys + $0) })
        }
        return QueryRead(rows: rows, shape: q.shape)
    }

    /// How many records a compiled query matches (its limit, offset and cursor aside).
    func count(_ q: CompiledQuery) throws -> Int {
        Int(try db.cached(q.countSQL).queryOne(q.countValues) { $0.int64(0) } ?? 0)
    }

    /// SQLite's plan for a compiled query's rows: one line per step.
    func plan(_ q: CompiledQuery) throws -> [String] {
        try db.prepare("EXPLAIN QUERY PLAN " + q.sql).query(q.values) { $0.text(3) }
    }
}
