import Foundation
import OutpostCore
import OutpostSQLite

/// A query as the engine runs it: a value, compiled to SQL by `QueryCompiler`.
struct QuerySpec: Sendable, Hashable {
    var collection: String
    /// nil: every record.
    var filter: QueryFilter.Node?
    var sorts: [QuerySort] = []
    /// Full-text search text; nil or no word: no search.
    var search: String?
    var limit: Int?
    var offset = 0
    var after: QueryCursor?
    /// Read each row's rejected edits too (`QueryRow.localState`).
    var localState = false

    init(collection: String) { self.collection = collection }
}

/// Where a query stops: the last row's sort keys and id. `Query.after(_:)` continues after
/// it (keyset paging: a page costs the same wherever it starts, and rows written meanwhile
/// neither repeat nor go missing). A cursor belongs to queries of the same order.
public struct QueryCursor: Sendable, Hashable {
    /// The order it was taken in (fields, directions, search).
    let shape: String
    let keys: [SQLiteValue]
    /// The last row's id.
    public let id: String
}

/// The SQL of a query and what its columns hold.
struct CompiledQuery {
    /// The rows (columns: `QueryColumn`).
    let sql: String
    let values: [SQLiteValue]
    /// The count of the rows (limit, offset and cursor left out).
    let countSQL: String
    let countValues: [SQLiteValue]
    /// Sort-key columns selected after `QueryColumn.keys` (the cursor's keys).
    let keyCount: Int
    let shape: String
    /// The declared index the query reads through, if any; the search table.
    let index: QueryIndex?
    let searchIndex: QueryIndex?
}

/// The columns of a compiled query's rows.
enum QueryColumn {
    static let id: Int32 = 0, doc: Int32 = 1, pending: Int32 = 2, version: Int32 = 3, updatedAt: Int32 = 4, updatedBy: Int32 = 5
    static let rejected: Int32 = 6, keys: Int32 = 7
}

/// Turns a `QuerySpec` into SQL over the store's tables (docs/client.md, "Queries"). Every
/// comparison is on sort keys (`SortKey`), read from a declared index's key table when the
/// query goes through one and computed from the record otherwise, so both give the same rows.
struct QueryCompiler {
    let spec: QuerySpec
    let schema: CollectionSchema
    /// The collection's indexes in the file.
    let indexes: [QueryIndex]
    /// Writes `Date` values of fields not declared dates, as the collection writes them.
    let encoder: JSONEncoder

    private var values: [SQLiteValue] = []
    private var chosen: QueryIndex?
    /// Set when a filter reads the record itself (not only the chosen key table).
    private var readsRecord = false

    init(spec: QuerySpec, schema: CollectionSchema, indexes: [QueryIndex], encoder: JSONEncoder) {
        self.spec = spec
        self.schema = schema
        self.indexes = indexes
        self.encoder = encoder
    }

    /// The record's JSON text, as `get` reads it (NULL for a tombstone or a record the app
    /// cannot read: see the `doc` column, migration 11).
    static let doc = "r.doc"

    mutating func compile() throws -> CompiledQuery {
        try validate()
        let collection = sqlString(spec.collection)
        let words = spec.search.map(Self.searchWords) ?? []
        var search: QueryIndex?
        if !words.isEmpty {
            guard let s = indexes.first(where: \.isSearch) else {
                throw LocalDatabase.hasFTS5 ? OutpostError.invalidQuery("\(spec.collection) declares no searchable field (CollectionSchema.searchable)") : OutpostError.searchUnavailable
            }
            search = s
        } else {
            chosen = choose()
        }

        // FROM: the search table or the chosen key table drives (CROSS JOIN keeps SQLite
        // from reordering), the records joined by key.
        var from = "records r"
        var base = "r.collection = \(collection) AND r.doc IS NOT NULL"
        var baseValues: [SQLiteValue] = []
        if let search {
            from = "\(search.table) CROSS JOIN \(search.table)_ids m ON m.n = \(search.table).rowid CROSS JOIN records r ON r.collection = \(collection) AND r.id = m.id"
            base = "\(search.table) MATCH ? AND " + base
            baseValues.append(.text(Self.matchExpression(words)))
        } else if let chosen {
            from = "\(chosen.table) CROSS JOIN records r ON r.collection = \(collection) AND r.id = \(chosen.table).id"
        }

        values = []
        readsRecord = false
        let filter = try spec.filter.map { try condition($0) } ?? "1"
        let filterValues = values
        let filterReadsRecord = readsRecord

        // The order: the sorts, the search's rank, then the id, in the last sort's direction.
        var order: [(sql: String, descending: Bool)] = spec.sorts.map { (key($0.field), $0.descending) }
        if let search { order.append(("\(search.table).rank", false)) }
        let idDescending = spec.sorts.last?.descending ?? false
        // The id as the driving table has it: a key table's index ends with its id, so an
        // order by that column (not by `r.id`, the same value SQLite cannot tell is) reads
        // the rows in index order and stops at the limit instead of sorting every match.
        let idColumn = chosen.map { "\($0.table).id" } ?? "r.id"
        let shape = spec.sorts.map { "\($0.field.path)\($0.descending ? "-" : "+")" }.joined(separator: ",") + (search == nil ? "" : ",rank")

        let rejected = spec.localState
            ? "EXISTS (SELECT 1 FROM edits e WHERE e.collection = r.collection AND e.id = r.id AND e.delivery = 'rejected')" : "0"
        var select = """
            SELECT r.id, r.doc, r.pending, coalesce(r.s_version, r.l_version), CASE WHEN r.s_version IS NULL THEN r.l_updated_at ELSE r.s_updated_at END,
                   CASE WHEN r.s_version IS NULL THEN r.l_updated_by ELSE r.s_updated_by END, \(rejected)
            """
        for o in order { select += ", " + o.sql }

        var whereSQL = "\(base) AND \(filter)"
        var keysetValues: [SQLiteValue] = []
        if let after = spec.after {
            guard after.shape == shape, after.keys.count == order.count else {
                throw OutpostError.invalidQuery("the cursor was taken in another order than this query's")
            }
            let keyset = Self.keyset(after: after, order: order, idColumn: idColumn, idDescending: idDescending)
            whereSQL += " AND (" + keyset.sql + ")"
            keysetValues = keyset.values
        }

        var sql = "\(select) FROM \(from) WHERE \(whereSQL) ORDER BY "
        sql += (order.map { "\($0.sql)\($0.descending ? " DESC" : "")" } + ["\(idColumn)\(idDescending ? " DESC" : "")"]).joined(separator: ", ")
        var pageValues: [SQLiteValue] = []
        if spec.limit != nil || spec.offset > 0 {
            sql += " LIMIT ? OFFSET ?"
            pageValues = [.integer(Int64(spec.limit ?? -1)), .integer(Int64(spec.offset))]
        }

        // A count through the key table alone when nothing else is asked of the record.
        let keyTable = filterReadsRecord ? nil : chosen?.table
        let countSQL = keyTable.map { "SELECT count(*) FROM \($0) WHERE \(filter)" } ?? "SELECT count(*) FROM \(from) WHERE \(base) AND \(filter)"
        let countValues = (keyTable != nil ? [] : baseValues) + filterValues

        return CompiledQuery(sql: sql, values: baseValues + filterValues + keysetValues + pageValues,
                             countSQL: countSQL, countValues: countValues, keyCount: order.count, shape: shape,
                             index: chosen, searchIndex: search)
    }

    /// The rows after the cursor `after` in `order` (then the id): one alternative per
    /// sort key (the keys before it equal, this one past it, NULLs last ascending and first
    /// descending), and the last all equal with a later id; with the values bound in the
    /// order the text names them.
    private static func keyset(after: QueryCursor, order: [(sql: String, descending: Bool)], idColumn: String,
                               idDescending: Bool) -> (sql: String, values: [SQLiteValue]) {
        var alternatives: [String] = []
        var equal: [String] = []
        for (i, o) in order.enumerated() {
            let v = after.keys[i]
            var terms = equal
            if v == .null {
                if o.descending { terms.append("0") } else { terms.append("\(o.sql) IS NOT NULL") }
            } else {
                terms.append(o.descending ? "(\(o.sql) < ? OR \(o.sql) IS NULL)" : "\(o.sql) > ?")
            }
            alternatives.append("(" + terms.joined(separator: " AND ") + ")")
            equal.append("\(o.sql) IS ?")
        }
        alternatives.append("(" + (equal + ["\(idColumn) \(idDescending ? "<" : ">") ?"]).joined(separator: " AND ") + ")")
        var values: [SQLiteValue] = []
        for i in order.indices {
            for j in 0..<i { values.append(after.keys[j]) }
            if after.keys[i] != .null { values.append(after.keys[i]) }
        }
        values += after.keys
        values.append(.text(after.id))
        return (alternatives.joined(separator: " OR "), values)
    }

    private func validate() throws {
        guard Names.isValidCollection(spec.collection) else { throw OutpostError.invalidName("invalid collection name: \(spec.collection)") }
        guard spec.limit.map({ $0 >= 0 }) ?? true, spec.offset >= 0 else { throw OutpostError.invalidQuery("limit and offset are not negative") }
        guard spec.sorts.count <= 8 else { throw OutpostError.invalidQuery("a query sorts by at most 8 fields") }
        for sort in spec.sorts { if let p = sort.field.problem { throw OutpostError.invalidQuery(p) } }
        if let filter = spec.filter { try Self.check(filter) }
    }

    private static func check(_ node: QueryFilter.Node, depth: Int = 0) throws {
        guard depth < QueryFilter.maxDepth else { throw OutpostError.invalidQuery("a filter nests at most \(QueryFilter.maxDepth) levels") }
        switch node {
        case .compare(let f, _, _), .oneOf(let f, _), .contains(let f, _), .hasPrefix(let f, _), .isNull(let f), .isMissing(let f):
            if let p = f.problem { throw OutpostError.invalidQuery(p) }
        case .all(let nodes), .any(let nodes):
            for n in nodes { try check(n, depth: depth + 1) }
        case .not(let n):
            try check(n, depth: depth + 1)
        case .pending, .constant, .ids:
            break
        }
    }

    // MARK: Choosing an index

    /// The declared index that serves the query best, by its first fields: those the
    /// query's top-level equalities name, then one with a range, then the sort; nil when
    /// none serves any of it (the query reads the collection).
    private func choose() -> QueryIndex? {
        var conjuncts: [QueryFilter.Node] = []
        func flatten(_ n: QueryFilter.Node) {
            if case .all(let nodes) = n { nodes.forEach(flatten) } else { conjuncts.append(n) }
        }
        if let filter = spec.filter { flatten(filter) }
        func isEquality(_ n: QueryFilter.Node, _ f: QueryField) -> Bool {
            switch n {
            case .compare(f, .equal, let v): return v != .null
            case .oneOf(f, let vs): return vs.count == 1 && vs[0] != .null
            default: return false
            }
        }
        func isRange(_ n: QueryFilter.Node, _ f: QueryField) -> Bool {
            switch n {
            case .compare(f, let op, _): return op != .equal && op != .notEqual
            case .hasPrefix(f, _), .oneOf(f, _): return true
            default: return false
            }
        }
        var best: (index: QueryIndex, score: Int)?
        for index in indexes {
            guard case .keys(let fields, let kinds) = index.content,
                  zip(fields, kinds).allSatisfy({ schema.kind(of: $0) == $1 }) else { continue }
            var i = 0
            while i < fields.count, conjuncts.contains(where: { isEquality($0, fields[i]) }) { i += 1 }
            var score = i * 4
            if i < fields.count, conjuncts.contains(where: { isRange($0, fields[i]) }) { score += 2 }
            let rest = fields.dropFirst(i)
            if !spec.sorts.isEmpty, spec.sorts.count <= rest.count, zip(spec.sorts, rest).allSatisfy({ $0.field == $1 }),
               Set(spec.sorts.map(\.descending)).count == 1 {
                score += 3
            }
            guard score > 0 else { continue }
            if best == nil || score > best!.score || (score == best!.score && fields.count < best!.index.keyFields.count) {
                best = (index, score)
            }
        }
        return best?.index
    }

    // MARK: Filters

    /// The sort key of `field`: the chosen key table's column, or computed from the record.
    private mutating func key(_ field: QueryField) -> String {
        if let chosen, let i = chosen.keyFields.firstIndex(of: field) { return "\(chosen.table).k\(i)" }
        readsRecord = true
        return SortKey.sql(field, schema.kind(of: field), doc: Self.doc)
    }

    private mutating func bind(_ value: SQLiteValue) -> String {
        values.append(value)
        return "?"
    }

    private mutating func type(_ field: QueryField) -> String {
        readsRecord = true
        return "json_type(\(Self.doc), \(sqlString(field.jsonPath)))"
    }

    /// The SQL of a filter. Every part is true or false for every row, never NULL (SQL's
    /// unknown), so that `not` is the negation of what it wraps.
    private mutating func condition(_ node: QueryFilter.Node) throws -> String {
        switch node {
        case .constant(let b):
            return b ? "1" : "0"
        case .all(let nodes):
            guard !nodes.isEmpty else { return "1" }
            return "(" + (try nodes.map { try condition($0) }).joined(separator: " AND ") + ")"
        case .any(let nodes):
            guard !nodes.isEmpty else { return "0" }
            return "(" + (try nodes.map { try condition($0) }).joined(separator: " OR ") + ")"
        case .not(let n):
            return "((\(try condition(n))) IS NOT 1)"
        case .pending:
            readsRecord = true
            return "r.pending = 1"
        case .ids(let ids):
            guard !ids.isEmpty else { return "0" }
            let column = chosen.map { "\($0.table).id" } ?? "r.id"
            return "\(column) IN (" + ids.map { bind(.text($0)) }.joined(separator: ", ") + ")"
        case .isNull(let f):
            return "(\(type(f)) IS 'null')"
        case .isMissing(let f):
            return "(\(type(f)) IS NULL)"
        case .hasPrefix(let f, let prefix):
            let k = key(f)
            if prefix.isEmpty { return "(\(k) >= '' AND \(k) < x'')" }
            let low = bind(.text(prefix))
            if let successor = Self.successor(of: prefix) { return "(\(k) >= \(low) AND \(k) < \(bind(.text(successor))))" }
            return "(\(k) >= \(low) AND \(k) < x'')"
        case .compare(let f, let op, let value):
            switch SortKey.value(value, schema.kind(of: f), encoder: encoder) {
            case .none:
                return op == .notEqual ? "1" : "0"
            case .null:
                switch op {
                case .equal: return "(\(type(f)) IS 'null')"
                case .notEqual: return "(\(type(f)) IS NOT 'null')"
                default: return "0"
                }
            case .key(let v, let cls):
                let k = key(f)
                switch op {
                case .equal: return "(\(k) = \(bind(v)))"
                case .notEqual: return "((\(k) = \(bind(v))) IS NOT 1)"
                case .less, .lessOrEqual: return "(\(k) \(op.rawValue) \(bind(v))\(cls.lowerBound(k)))"
                case .greater, .greaterOrEqual: return "(\(k) \(op.rawValue) \(bind(v))\(cls.upperBound(k)))"
                }
            }
        case .oneOf(let f, let list):
            let kind = schema.kind(of: f)
            var keys: [SQLiteValue] = []
            var null = false
            for value in list {
                switch SortKey.value(value, kind, encoder: encoder) {
                case .null: null = true
                case .key(let v, _): keys.append(v)
                case .none: break
                }
            }
            var parts: [String] = []
            if !keys.isEmpty {
                let k = key(f)
                parts.append("\(k) IN (" + keys.map { bind($0) }.joined(separator: ", ") + ")")
            }
            if null { parts.append("(\(type(f)) IS 'null')") }
            return parts.isEmpty ? "0" : "(" + parts.joined(separator: " OR ") + ")"
        case .contains(let f, let value):
            let path = sqlString(f.jsonPath)
            let t = type(f)
            let element: String
            switch SortKey.value(value, .value, encoder: encoder) {
            case .none: return "0"
            case .null: element = "e.type = 'null'"
            case .key(let v, _): element = SortKey.elementSQL(type: "e.type", value: "e.value") + " = " + bind(v)
            }
            return "(\(t) IS 'array' AND EXISTS (SELECT 1 FROM json_each(\(Self.doc), \(path)) e WHERE \(element)))"
        }
    }

    /// The least string greater than every string that starts with `prefix` (its last
    /// scalar that can grow, grown by one); nil when there is none.
    static func successor(of prefix: String) -> String? {
        var scalars = Array(prefix.unicodeScalars)
        while let last = scalars.popLast() {
            var next = last.value + 1
            if next == 0xD800 { next = 0xE000 }
            if let s = Unicode.Scalar(next) {
                scalars.append(s)
                var out = String.UnicodeScalarView()
                out.append(contentsOf: scalars)
                return String(out)
            }
        }
        return nil
    }

    // MARK: Search

    /// The words of a search: runs of letters and digits, at most 16.
    static func searchWords(_ text: String) -> [String] {
        var words: [String] = []
        var current = String.UnicodeScalarView()
        for s in text.unicodeScalars {
            if s.properties.isAlphabetic || s.properties.numericType != nil || s.properties.generalCategory == .nonspacingMark {
                current.append(s)
            } else if !current.isEmpty {
                words.append(String(current))
                current = String.UnicodeScalarView()
            }
        }
        if !current.isEmpty { words.append(String(current)) }
        return Array(words.prefix(16))
    }

    /// An FTS5 query for `words`: each word must be there, the last one as a prefix (so a
    /// search finds what is being typed). Words are quoted, so nothing the user types is
    /// read as FTS5 syntax.
    static func matchExpression(_ words: [String]) -> String {
        words.enumerated().map { i, w in "\"\(w)\"" + (i == words.count - 1 ? " *" : "") }.joined(separator: " ")
    }
}

extension SortKey.Class {
    /// ` AND` a bound keeping a key at or above this class's least value (for `<`, `<=`).
    func lowerBound(_ key: String) -> String {
        switch self {
        case .number: ""
        case .string: " AND \(key) >= ''"
        case .boolean: " AND \(key) >= x'00'"
        case .array: " AND \(key) >= x'02'"
        case .object: " AND \(key) >= x'03'"
        }
    }

    /// ` AND` a bound keeping a key below the next class (for `>`, `>=`).
    func upperBound(_ key: String) -> String {
        switch self {
        case .number: " AND \(key) < ''"
        case .string: " AND \(key) < x''"
        case .boolean: " AND \(key) < x'02'"
        case .array: " AND \(key) < x'03'"
        case .object: ""
        }
    }
}
