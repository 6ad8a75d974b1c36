import OutpostCore

/// One change of a database's schema: a name, and the SQL that makes it
/// (docs/architecture.md, "Schema migrations").
///
/// Once released a migration is never edited, renamed or removed: a database that ran it
/// keeps its name in `migrations`, and `SchemaMigrationTests` pins the SQL of each by its
/// SHA-256. A change to what a migration made is a new migration at the end of the list.
struct Migration: Sendable {
    /// The migration's name, as `migrations` records it.
    let name: String
    /// For a migration from before the list: the version number it brought its part of
    /// the schema to (`("sync", 3)`: `meta.schema_version` 3), by which a database from
    /// then is known to have applied it.
    var legacy: (part: String, version: Int)? = nil
    /// Statements run in one transaction with the row that records the migration.
    let sql: String
}

/// The migrations of one database, in order, run as GRDB's `DatabaseMigrator` runs them:
/// each once, in the list's order, in a transaction of its own together with the row of
/// `migrations(name, applied_at)` that records it. The same runner serves the SQLite file
/// and the PostgreSQL database (`SQLiteSchema`, `PostgresSchema`), over `SQLSession`.
///
/// A database from before the list recorded its schema in version numbers per part
/// (`meta.schema_version` and `meta.media_schema_version` in SQLite, `schema_migrations`
/// and `meta.media_schema_version` in PostgreSQL): `legacy` reads them, and the migrations
/// they stand for (`Migration.legacy`) are recorded as applied the first time the list
/// runs. Those migrations still write the numbers, so a server from before the list reads
/// the schema it knows, and refuses a database some later one made newer than it.
struct Migrations: Sendable {
    let list: [Migration]
    /// A database's version number of each part, from before the list (empty for a new
    /// database).
    let legacy: @Sendable (any SQLSession) throws -> [String: Int]

    init(_ list: [Migration], legacy: @escaping @Sendable (any SQLSession) throws -> [String: Int]) {
        precondition(Set(list.map(\.name)).count == list.count, "two migrations share a name")
        self.list = list
        self.legacy = legacy
    }

    /// Brings `db` up to the end of the list at time `now` (ms since 1970), and returns the
    /// names it applied. A database that recorded a migration this list does not hold was
    /// migrated by a newer server, and is refused before anything is run.
    @discardableResult
    func migrate(_ db: any SQLSession, now: Int64) throws -> [String] {
        var applied = try self.applied(db, now: now)
        if let unknown = applied.first(where: { name in !list.contains { $0.name == name } }) {
            throw StoreError("the database was migrated by a newer server (migration \"\(unknown)\", unknown to this one); upgrade the server")
        }
        var ran: [String] = []
        for migration in list where !applied.contains(migration.name) {
            try db.transaction(.durable) {
                try db.execute(migration.sql)
                try db.run("INSERT INTO migrations(name, applied_at) VALUES (?, ?)", [.text(migration.name), .integer(now)])
            }
            applied.insert(migration.name)
            ran.append(migration.name)
        }
        return ran
    }

    /// The names `db` has recorded, creating the table (with the names of `legacy`) when
    /// the list never ran on it.
    func applied(_ db: any SQLSession, now: Int64) throws -> Set<String> {
        try db.transaction(.durable) {
            try db.execute("CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)")
            var names = Set(try db.query("SELECT name FROM migrations", []) { $0.text(0) })
            if names.isEmpty {
                for name in legacyNames(try legacy(db)) {
                    names.insert(name)
                    try db.run("INSERT INTO migrations(name, applied_at) VALUES (?, ?)", [.text(name), .integer(now)])
                }
            }
            return names
        }
    }

    /// The migrations a database from before the list has applied, by its version
    /// numbers (`legacy`).
    func legacyNames(_ versions: [String: Int]) -> [String] {
        list.compactMap { migration in
            guard let (part, version) = migration.legacy, version <= versions[part] ?? 0 else { return nil }
            return migration.name
        }
    }

    /// The migrations of the list a database that recorded `recorded` has not applied;
    /// nil when it recorded one the list does not hold (a newer server migrated it).
    func pending(recorded: Set<String>) -> [String]? {
        guard recorded.allSatisfy({ name in list.contains { $0.name == name } }) else { return nil }
        return list.map(\.name).filter { !recorded.contains($0) }
    }
}
