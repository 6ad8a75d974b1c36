import OutpostCore
import OutpostSQLite

// The indexes an app declares (`Configuration.collections`), as tables of their own beside
// `records` (docs/client.md, "Queries"):
//
// - a *key table* per declared index, `qi_N(id, k0, k1, …)` with an index on its keys: the
//   sort keys (`SortKey`) of the index's fields for every live record of the collection the
//   app can see. Its own index serves equalities, ranges and sorts, and counts read nothing
//   else. (SQLite can index the key expressions on `records` directly, but before 3.41 it
//   reads each row to check them, so a count of 250,000 took half a second instead of 7 ms.)
// - a *search table* per collection with searchable fields: an FTS5 table `qs_N` of the
//   fields' text, tokenized with `unicode61 remove_diacritics 2`, and `qs_N_ids`, which gives
//   each record the integer row id FTS5 needs.
//
// Triggers on `records` keep them in step in the same transaction as every write, whichever
// path writes (a save, a pulled page, a migration), so they never disagree with what `get`
// reads: key tables row by row, search tables through a note of the ids written that the
// commit settles in one statement (`settleSearch`). `query_indexes` lists them by their
// definition; `reconcileQueryIndexes` creates and drops them when the declarations change.

/// One index of the catalog.
struct QueryIndex: Sendable, Hashable {
    enum Content: Sendable, Hashable {
        /// A key table of these fields, in order.
        case keys([QueryField], [SortKey.Kind])
        /// A search table of these fields' text.
        case search([QueryField])
    }

    let collection: String
    let content: Content
    /// Its number in `query_indexes` (0 before it is created).
    var number: Int64 = 0

    var table: String { "\(isSearch ? "qs" : "qi")_\(number)" }
    var isSearch: Bool { if case .search = content { true } else { false } }

    /// The key table's fields, in order (none for a search table).
    var keyFields: [QueryField] {
        if case .keys(let f, _) = content { return f }
        return []
    }

    /// Canonical JSON of what the index holds: the catalog's key.
    var definition: String {
        var o: JSONObject = ["collection": .string(collection)]
        switch content {
        case .keys(let fields, let kinds):
            o["keys"] = .array(zip(fields, kinds).map { .array([.string($1.rawValue)] + $0.path.map { .string($0) }) })
        case .search(let fields):
            o["search"] = .array(fields.map { .array($0.path.map { .string($0) }) })
        }
        return String(decoding: JSONValue.object(o).encoded(), as: UTF8.self)
    }

    init(collection: String, content: Content, number: Int64 = 0) {
        self.collection = collection
        self.content = content
        self.number = number
    }

    /// The index a catalog row's definition describes; nil for one this SDK cannot read.
    init?(number: Int64, definition: String) {
        guard case .object(let o)? = try? JSONParser(maxDepth: 8).parse(Array(definition.utf8)),
              let collection = o["collection"]?.stringValue else { return nil }
        func path(_ v: JSONValue) -> [String]? {
            guard let a = v.arrayValue else { return nil }
            let names = a.compactMap(\.stringValue)
            return names.count == a.count && !names.isEmpty ? names : nil
        }
        if let keys = o["keys"]?.arrayValue {
            var fields: [QueryField] = [], kinds: [SortKey.Kind] = []
            for k in keys {
                guard let p = path(k), let kind = SortKey.Kind(rawValue: p[0]), p.count > 1 else { return nil }
                kinds.append(kind)
                fields.append(QueryField(path: Array(p.dropFirst())))
            }
            content = .keys(fields, kinds)
        } else if let search = o["search"]?.arrayValue {
            let fields = search.compactMap(path).map { QueryField(path: $0) }
            guard fields.count == search.count else { return nil }
            content = .search(fields)
        } else {
            return nil
        }
        self.collection = collection
        self.number = number
    }

    /// The indexes `schemas` declare, in a fixed order.
    static func declared(_ schemas: [String: CollectionSchema]) throws -> [QueryIndex] {
        var out: [QueryIndex] = []
        for (collection, schema) in schemas.sorted(by: { $0.key < $1.key }) {
            guard Names.isValidCollection(collection) else { throw OutpostError.invalidName("invalid collection name in Configuration.collections: \(collection)") }
            for index in schema.indexes {
                let fields = try index.map(validField)
                guard !fields.isEmpty, fields.count <= 8 else { throw OutpostError.invalidQuery("an index of \(collection) has 1 to 8 fields") }
                guard Set(fields).count == fields.count else { throw OutpostError.invalidQuery("an index of \(collection) names a field twice") }
                out.append(QueryIndex(collection: collection, content: .keys(fields, fields.map(schema.kind))))
            }
            if !schema.searchable.isEmpty {
                let fields = try schema.searchable.map(validField)
                guard Set(fields).count == fields.count else { throw OutpostError.invalidQuery("the searchable fields of \(collection) name a field twice") }
                out.append(QueryIndex(collection: collection, content: .search(fields)))
            }
            _ = try schema.dates.map(validField)
        }
        return out
    }

    private static func validField(_ dotted: String) throws -> QueryField {
        let field = QueryField(dotted)
        if let problem = field.problem { throw OutpostError.invalidQuery(problem) }
        return field
    }

    // MARK: SQL

    /// The text of a searchable field over `doc`: a string, or the strings of an array.
    static func searchText(_ field: QueryField, doc: String) -> String {
        let path = sqlString(field.jsonPath)
        return "(CASE json_type(\(doc), \(path)) WHEN 'text' THEN json_extract(\(doc), \(path)) "
            + "WHEN 'array' THEN (SELECT group_concat(value, ' ') FROM json_each(\(doc), \(path)) WHERE type = 'text') END)"
    }

    /// Creates the index's tables and triggers and fills them from the records held.
    func create(_ db: Connection) throws {
        let t = table
        let c = sqlString(collection)
        switch content {
        case .keys(let fields, let kinds):
            let columns = fields.indices.map { "k\($0)" }
            let keys = { (doc: String) in zip(fields, kinds).map { SortKey.sql($0, $1, doc: doc) }.joined(separator: ", ") }
            // No conflict clause in a trigger: the writing statement's own (an upsert's)
            // would replace it. A row new to `records` has no keys yet, so its trigger only
            // inserts (the first sync's path).
            let insert = "INSERT INTO \(t)(id, \(columns.joined(separator: ", "))) SELECT new.id, \(keys("new.doc")) WHERE new.doc IS NOT NULL;"
            let upsert = "DELETE FROM \(t) WHERE id = new.id; " + insert
            try db.execute("""
                CREATE TABLE \(t)(id TEXT PRIMARY KEY, \(columns.joined(separator: ", "))) WITHOUT ROWID;
                CREATE INDEX \(t)_keys ON \(t)(\(columns.joined(separator: ", ")), id);
                INSERT INTO \(t)(id, \(columns.joined(separator: ", "))) SELECT id, \(keys("doc")) FROM records WHERE collection = \(c) AND doc IS NOT NULL;
                CREATE TRIGGER \(t)_insert AFTER INSERT ON records WHEN new.collection = \(c) AND new.doc IS NOT NULL BEGIN \(insert) END;
                CREATE TRIGGER \(t)_update AFTER UPDATE ON records WHEN new.collection = \(c) AND new.doc IS NOT old.doc BEGIN \(upsert) END;
                CREATE TRIGGER \(t)_delete AFTER DELETE ON records WHEN old.collection = \(c) BEGIN DELETE FROM \(t) WHERE id = old.id; END;
                """)
        case .search(let fields):
            // The triggers only note which records changed (`qs_N_pending`); the commit
            // rewrites their search rows in one statement each (`settleSearch`). FTS5 flushes
            // its buffered terms at every statement savepoint, so a row written by a trigger
            // costs a segment of its own: a first sync of 100,000 records spent 2 s there.
            let note = "INSERT INTO \(t)_pending(id) SELECT %@.id WHERE NOT EXISTS (SELECT 1 FROM \(t)_pending WHERE id = %@.id);"
            let noteNew = note.replacingOccurrences(of: "%@", with: "new")
            let noteOld = note.replacingOccurrences(of: "%@", with: "old")
            try db.execute("""
                CREATE VIRTUAL TABLE \(t) USING fts5(\(fields.indices.map { "f\($0)" }.joined(separator: ", ")), tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3');
                CREATE TABLE \(t)_ids(n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE);
                CREATE TABLE \(t)_pending(id TEXT PRIMARY KEY) WITHOUT ROWID;
                INSERT INTO \(t)_pending(id) SELECT id FROM records WHERE collection = \(c) AND doc IS NOT NULL;
                CREATE TRIGGER \(t)_insert AFTER INSERT ON records WHEN new.collection = \(c) AND new.doc IS NOT NULL BEGIN \(noteNew) END;
                CREATE TRIGGER \(t)_update AFTER UPDATE ON records WHEN new.collection = \(c) AND new.doc IS NOT old.doc BEGIN \(noteNew) END;
                CREATE TRIGGER \(t)_delete AFTER DELETE ON records WHEN old.collection = \(c) BEGIN \(noteOld) END;
                """)
            try settle(db)
        }
    }

    /// Rewrites the search rows of the records noted in `qs_N_pending` from what they hold
    /// now, and empties the note. Runs before every commit that wrote records, so no
    /// committed state has a note left: a search sees what `get` sees.
    func settle(_ db: Connection) throws {
        guard case .search(let fields) = content else { return }
        let t = table
        let c = sqlString(collection)
        let columns = fields.indices.map { "f\($0)" }.joined(separator: ", ")
        let texts = fields.map { Self.searchText($0, doc: "r.doc") }.joined(separator: ", ")
        try db.execute("""
            DELETE FROM \(t) WHERE rowid IN (SELECT m.n FROM \(t)_pending p CROSS JOIN \(t)_ids m ON m.id = p.id);
            DELETE FROM \(t)_ids WHERE id IN (SELECT id FROM \(t)_pending);
            INSERT INTO \(t)_ids(id) SELECT p.id FROM \(t)_pending p CROSS JOIN records r ON r.collection = \(c) AND r.id = p.id WHERE r.doc IS NOT NULL;
            INSERT INTO \(t)(rowid, \(columns)) SELECT m.n, \(texts) FROM \(t)_pending p CROSS JOIN \(t)_ids m ON m.id = p.id CROSS JOIN records r ON r.collection = \(c) AND r.id = p.id;
            DELETE FROM \(t)_pending;
            """)
    }

    /// Drops the index's triggers and tables.
    func drop(_ db: Connection) throws {
        let t = table
        var sql = "DROP TRIGGER IF EXISTS \(t)_insert; DROP TRIGGER IF EXISTS \(t)_update; DROP TRIGGER IF EXISTS \(t)_delete; DROP TABLE IF EXISTS \(t);"
        if isSearch { sql += " DROP TABLE IF EXISTS \(t)_ids; DROP TABLE IF EXISTS \(t)_pending;" }
        try db.execute(sql)
    }
}

extension LocalDatabase {
    /// The indexes the file holds. Read again only when SQLite's schema cookie says a table
    /// was made or dropped (every change to the catalog makes or drops one), so a query
    /// does not parse the catalog each time.
    func queryIndexes() throws -> [QueryIndex] {
        let cookie = try db.queryOne("PRAGMA schema_version", []) { $0.int64(0) } ?? 0
        if let cached = catalog, cached.cookie == cookie { return cached.indexes }
        let indexes = try db.query("SELECT number, definition FROM query_indexes ORDER BY number") { s in
            QueryIndex(number: s.int64(0), definition: s.text(1))
        }.compactMap { $0 }
        catalog = (cookie, indexes)
        return indexes
    }

    /// Makes the file's indexes those `schemas` declare: creates the missing ones (built from
    /// the records held) and drops those no longer declared, in one transaction; the others
    /// are kept as they are. Search tables are made only where SQLite has FTS5 (a search
    /// then throws `OutpostError.searchUnavailable`).
    func reconcileQueryIndexes(_ schemas: [String: CollectionSchema]) throws {
        let declared = try QueryIndex.declared(schemas).filter { !$0.isSearch || Self.hasFTS5 }
        let held = try queryIndexes()
        let wanted = Set(declared.map(\.definition))
        let present = Set(held.map(\.definition))
        let drop = held.filter { !wanted.contains($0.definition) }
        let create = declared.filter { !present.contains($0.definition) }
        defer { searchIndexes = (try? queryIndexes().filter(\.isSearch)) ?? [] }
        guard !drop.isEmpty || !create.isEmpty else { return }
        try db.transaction {
            for index in drop {
                try index.drop(db)
                try db.run("DELETE FROM query_indexes WHERE number = ?", [.integer(index.number)])
            }
            for var index in create {
                try db.run("INSERT INTO query_indexes(definition) VALUES (?)", [.text(index.definition)])
                index.number = db.lastInsertRowID
                try index.create(db)
            }
        }
    }

    /// Settles the search tables' notes (`QueryIndex.settle`) if the transaction wrote any.
    /// `OutpostStore.write` calls it before every commit.
    func settleSearch() throws {
        for index in searchIndexes where try db.queryOne("SELECT 1 FROM \(index.table)_pending LIMIT 1", []) { _ in true } == true {
            try index.settle(db)
        }
    }

    /// True when the SQLite the process links has FTS5.
    static let hasFTS5: Bool = {
        guard let db = try? Connection.inMemory() else { return false }
        defer { db.close() }
        return (try? db.execute("CREATE VIRTUAL TABLE probe USING fts5(x)")) != nil
    }()
}
