import Foundation
import OutpostCore

extension OutpostStore {
    /// A typed handle on the collection `name`: the name, the app's type and its coder,
    /// written once, for every save, read, delete, query and live query of the collection.
    ///
    /// ```swift
    /// let inspections = store.collection("inspections", of: Inspection.self)
    /// try await inspections.save(inspection, id: OutpostStore.newRecordID())
    /// let open = try await inspections.filter { $0.status == "open" }.sorted(by: .ascending("dueDate")).limit(50).fetch()
    /// ```
    ///
    /// The string API (`put`, `record(in:id:)`, `records(in:)`) stays for raw records.
    public nonisolated func collection<Value: Decodable & Sendable>(_ name: String, of type: Value.Type = Value.self,
                                                                  coder: RecordCoder = .standard) -> OutpostCollection<Value> {
        OutpostCollection(name: name, store: self, coder: coder)
    }

    /// True when full-text search works here: the SQLite the process links has FTS5
    /// (Debian's and Apple's do; docs/client.md, "Search"). Without it a search throws
    /// `OutpostError.searchUnavailable` and every other query works.
    public static var isSearchAvailable: Bool { LocalDatabase.hasFTS5 }

    /// Runs a query's read on the app's read connections (or the actor), in one snapshot.
    func queryRead<T: Sendable>(_ spec: QuerySpec, encoder: JSONEncoder, isolation: isolated (any Actor)? = #isolation,
                                _ body: @escaping @Sendable (LocalDatabase, CompiledQuery) throws -> T) async throws -> T {
        let schema = configuration.collections[spec.collection]
        return try await appRead { d in
            try mappingSQLiteErrors {
                let compiled = try d.compile(spec, schema: schema, encoder: encoder)
                return try body(d, compiled)
            }
        }
    }
}

/// One collection of a store, bound to the app's type `Value` and its coder
/// (`OutpostStore.collection(_:of:coder:)`).
public struct OutpostCollection<Value: Decodable & Sendable>: Sendable {
    /// The collection's name.
    public let name: String
    /// The store it belongs to.
    public let store: OutpostStore
    /// The encoder and decoder every call uses.
    public let coder: RecordCoder

    // MARK: Records

    /// The record `id` decoded; nil when absent or deleted.
    public func get(_ id: String, isolation: isolated (any Actor)? = #isolation) async throws -> Value? {
        try await row(id)?.value
    }

    /// The record `id` with its id, version and local state; nil when absent or deleted.
    public func row(_ id: String, isolation: isolated (any Actor)? = #isolation) async throws -> QueryRow<Value>? {
        guard Names.isValidRecordID(id) else { throw OutpostError.invalidName("invalid record id: 1 to 256 bytes of UTF-8, no control characters") }
        return try await query.filter(.recordIDs([id])).fetch().first
    }

    /// Deletes the record `id` (a tombstone that syncs). False when there was nothing to delete.
    @discardableResult
    public func delete(_ id: String, isolation: isolated (any Actor)? = #isolation) async throws -> Bool {
        try await store.delete(from: name, id: id)
    }

    // MARK: Queries

    /// Every live record, ordered by id.
    public var query: OutpostQuery<Value> { OutpostQuery(collection: self, spec: QuerySpec(collection: name)) }

    /// The records `build` matches: `$0` names the fields (`$0.site.name == "North"`).
    public func filter(_ build: (QueryFields) -> QueryFilter) -> OutpostQuery<Value> { query.filter(build) }

    /// The records `filter` matches.
    public func filter(_ filter: QueryFilter) -> OutpostQuery<Value> { query.filter(filter) }

    /// Every live record in the order of `sorts`.
    public func sorted(by sorts: QuerySort...) -> OutpostQuery<Value> { query.sorted(by: sorts) }

    /// The records whose searchable fields hold every word of `text`, best first.
    public func search(_ text: String) -> OutpostQuery<Value> { query.search(text) }

    /// Every live record, ordered by id.
    public func fetch(isolation: isolated (any Actor)? = #isolation) async throws -> QueryResults<Value> { try await query.fetch() }

    /// How many live records the collection holds.
    public func count(isolation: isolated (any Actor)? = #isolation) async throws -> Int { try await query.count() }

    static func date(_ ms: Int64) -> Date { Date(timeIntervalSince1970: Double(ms) / 1000) }
}

extension OutpostCollection where Value: Encodable {
    /// Saves `value` as the record `id` (a put; local only, like `OutpostStore.save`):
    /// fields `Value` does not know survive.
    public func save(_ value: Value, id: String, isolation: isolated (any Actor)? = #isolation) async throws {
        try await store.save(value, in: name, id: id, encoder: coder.encoder, decoder: coder.decoder)
    }
}

/// A query of a collection: a value (filter, order, search, page) that runs with `fetch()`,
/// `count()`, `explain()` or `live()`. Each modifier returns a new query.
///
/// ```swift
/// let query = inspections
///     .filter { $0.status == "open" && $0.site.name.hasPrefix("North") }
///     .sorted(by: .ascending("dueDate"), .descending("priority"))
///     .limit(50)
/// for row in try await query.fetch() { print(row.id, row.value.title) }
/// ```
///
/// A query sees exactly what `get` sees: the app's unsent edits at once, no deleted record,
/// no record the app cannot read (quarantined, or sealed under a key the device lacks).
public struct OutpostQuery<Value: Decodable & Sendable>: Sendable {
    /// The collection queried.
    public let collection: OutpostCollection<Value>
    var spec: QuerySpec

    init(collection: OutpostCollection<Value>, spec: QuerySpec) {
        self.collection = collection
        self.spec = spec
    }

    /// Only records `build` matches too (filters add up with `&&`).
    public func filter(_ build: (QueryFields) -> QueryFilter) -> OutpostQuery {
        filter(build(QueryFields()))
    }

    /// Only records `filter` matches too.
    public func filter(_ filter: QueryFilter) -> OutpostQuery {
        var q = self
        q.spec.filter = q.spec.filter.map { .all([$0, filter.node]) } ?? filter.node
        return q
    }

    /// Ordered by `sorts` (replacing an earlier order); ties by id.
    public func sorted(by sorts: QuerySort...) -> OutpostQuery { sorted(by: sorts) }

    /// Ordered by `sorts` (replacing an earlier order); ties by id.
    public func sorted(by sorts: [QuerySort]) -> OutpostQuery {
        var q = self
        q.spec.sorts = sorts
        return q
    }

    /// Only records whose searchable fields (`CollectionSchema.searchable`) hold every word
    /// of `text`, ignoring case and accents, the last word as a prefix (so results follow
    /// what is being typed); ranked best first unless the query is sorted. Text without a
    /// word searches nothing: the query is as without it.
    public func search(_ text: String) -> OutpostQuery {
        var q = self
        q.spec.search = text
        return q
    }

    /// At most `count` rows (nil: all).
    public func limit(_ count: Int?) -> OutpostQuery {
        var q = self
        q.spec.limit = count
        return q
    }

    /// Skips the first `count` rows.
    public func offset(_ count: Int) -> OutpostQuery {
        var q = self
        q.spec.offset = count
        return q
    }

    /// The rows after `cursor` (a row's or a page's `cursor` from a query of the same
    /// order): keyset paging. nil: from the start.
    public func after(_ cursor: QueryCursor?) -> OutpostQuery {
        var q = self
        q.spec.after = cursor
        return q
    }

    /// Fills each row's `localState`: whether an edit waits for the server and whether one
    /// was rejected.
    public func withLocalState(_ on: Bool = true) -> OutpostQuery {
        var q = self
        q.spec.localState = on
        return q
    }

    /// The rows, decoded. A record that does not decode as `Value` is left out and listed in
    /// `QueryResults.skipped`; it never fails the query.
    public func fetch(isolation: isolated (any Actor)? = #isolation) async throws -> QueryResults<Value> {
        let read = try await collection.store.queryRead(spec, encoder: collection.coder.encoder) { d, q in try d.rows(q) }
        return QueryResults(read, of: self)
    }

    /// The first row, if any.
    public func first(isolation: isolated (any Actor)? = #isolation) async throws -> QueryRow<Value>? {
        try await limit(1).fetch().first
    }

    /// How many records the query matches (its limit, offset and cursor aside).
    public func count(isolation: isolated (any Actor)? = #isolation) async throws -> Int {
        try await collection.store.queryRead(spec, encoder: collection.coder.encoder) { d, q in try d.count(q) }
    }

    /// How the store runs the query: the declared index it reads through (nil: it reads the
    /// collection), whether it searches, SQLite's plan and the SQL. For the developer.
    public func explain(isolation: isolated (any Actor)? = #isolation) async throws -> QueryPlan {
        try await collection.store.queryRead(spec, encoder: collection.coder.encoder) { d, q in
            let steps = try d.plan(q)
            let used = q.index.flatMap { index in steps.contains { $0.contains(index.table) } ? index.keyFields.map(\.description) : nil }
            return QueryPlan(index: used, searches: q.searchIndex != nil, steps: steps, sql: q.sql)
        }
    }

    /// The query's results now, then again after every committed write to the collection
    /// that changes them, with what changed (`LiveResults.changes`). See `LiveQuery`.
    public func live() -> LiveQuery<Value> { LiveQuery(query: self) }

    /// The rows of a read, decoded in the caller's isolation.
    func decode(_ read: QueryRead) -> QueryResults<Value> { QueryResults(read, of: self) }
}

/// How a query runs (`OutpostQuery.explain()`).
public struct QueryPlan: Sendable, Hashable, CustomStringConvertible {
    /// The fields of the declared index the query reads through; nil when it reads the
    /// whole collection (or searches).
    public let index: [String]?
    /// True when the query goes through the collection's full-text index.
    public let searches: Bool
    /// SQLite's `EXPLAIN QUERY PLAN`, one line per step.
    public let steps: [String]
    /// The SQL the store runs.
    public let sql: String

    public var description: String {
        let how = index.map { "index [\($0.joined(separator: ", "))]" } ?? (searches ? "full-text search" : "no index: reads the collection")
        return how + "\n" + steps.map { "  " + $0 }.joined(separator: "\n")
    }
}

/// A record of a query's results: its id, its value and what the store knows of it.
public struct QueryRow<Value>: Identifiable {
    /// The record's id.
    public let id: String
    /// The record decoded.
    public let value: Value
    /// The server version the record is based on; nil before its first push or pull.
    public let version: Version?
    /// When the server committed `version`.
    public let updatedAt: Date?
    /// The client that wrote `version`.
    public let updatedBy: String?
    /// Whether an edit waits for the server, and whether one was rejected; nil unless the
    /// query asked (`withLocalState()`).
    public let localState: LocalState?
    /// Where the row is in its query's order (`OutpostQuery.after(_:)`).
    public let cursor: QueryCursor
}

extension QueryRow: Sendable where Value: Sendable {}
extension QueryRow: Equatable where Value: Equatable {}
extension QueryRow: Hashable where Value: Hashable {}

/// A record's state on the device beside the server's.
public struct LocalState: Sendable, Hashable {
    /// An edit of the record waits for the server.
    public let pending: Bool
    /// The server rejected an edit of the record (`OutpostStore.rejectedChanges()`).
    public let rejected: Bool
}

/// A record a query left out because it does not decode as the app's type.
public struct SkippedRecord: Sendable, Hashable {
    /// The record's id.
    public let id: String
    /// Why it did not decode.
    public let message: String
}

/// The rows of a query, in its order.
public struct QueryResults<Value>: RandomAccessCollection {
    /// The rows.
    public let rows: [QueryRow<Value>]
    /// Records of the page that did not decode as `Value` (left out of `rows`).
    public let skipped: [SkippedRecord]
    /// Where the next page starts (the cursor of the last record read, skipped or not); nil
    /// when the query returned nothing.
    public let cursor: QueryCursor?

    public var startIndex: Int { rows.startIndex }
    public var endIndex: Int { rows.endIndex }
    public subscript(position: Int) -> QueryRow<Value> { rows[position] }

    /// The values alone.
    public var values: [Value] { rows.map(\.value) }

    init(rows: [QueryRow<Value>], skipped: [SkippedRecord], cursor: QueryCursor?) {
        self.rows = rows
        self.skipped = skipped
        self.cursor = cursor
    }

    init(_ read: QueryRead, of query: OutpostQuery<Value>) where Value: Decodable {
        var rows: [QueryRow<Value>] = []
        rows.reserveCapacity(read.rows.count)
        var skipped: [SkippedRecord] = []
        let collection = query.collection.name
        let decoder = query.collection.coder.decoder
        // Once the collection's fields are learned, rows decode directly (no lookup each).
        var learned = KnownFieldsRegistry.fields(of: Value.self, in: collection) != nil
        for r in read.rows {
            do {
                let value: Value
                if learned {
                    value = try decoder.decode(Value.self, from: Data(r.doc))
                } else {
                    value = try Self.decode(r.doc, in: collection, decoder: decoder)
                    learned = true
                }
                rows.append(QueryRow(id: r.id, value: value, version: r.version.flatMap(Version.init),
                                     updatedAt: r.updatedAt.map(OutpostCollection<Value>.date), updatedBy: r.updatedBy,
                                     localState: query.spec.localState ? LocalState(pending: r.pending, rejected: r.rejected) : nil,
                                     cursor: QueryCursor(shape: read.shape, keys: r.keys, id: r.id)))
            } catch {
                skipped.append(SkippedRecord(id: r.id, message: "\(error)"))
            }
        }
        self.init(rows: rows, skipped: skipped, cursor: read.rows.last.map { QueryCursor(shape: read.shape, keys: $0.keys, id: $0.id) })
    }

    /// Decodes a record's bytes. The first decode of `Value` in the collection learns the
    /// fields it reads, so that typed saves keep the others (docs/client.md, "Fields an app
    /// does not know"); later ones decode the bytes directly.
    static func decode(_ bytes: [UInt8], in collection: String, decoder: JSONDecoder) throws -> Value where Value: Decodable {
        guard KnownFieldsRegistry.fields(of: Value.self, in: collection) != nil else {
            return try KnownFieldsRegistry.learn(Value.self, from: try decodeObject(bytes), in: collection, decoder: decoder)
        }
        return try decoder.decode(Value.self, from: Data(bytes))
    }
}

extension QueryResults: Sendable where Value: Sendable {}
extension QueryResults: Equatable where Value: Equatable {}
