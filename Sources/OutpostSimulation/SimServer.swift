import Foundation
import OutpostCore
import OutpostHTTP
import OutpostServer
import OutpostPostgres
import OutpostSQLite
import Synchronization

/// The real server in process: `SyncService` (the push and pull handlers) on the run's
/// store, `SQLiteSyncStore` (its writer, reader and checkpoint threads, a real SQLite file
/// in WAL mode with `synchronous=FULL`) or `PostgresSyncStore` (a database of the run).
/// Operators' actions are done the way an operator does them: a restart closes the store
/// and opens it again; a data loss starts from nothing (a new epoch); a backup is a
/// consistent copy of the live store (SQLite's online backup; a copy of the tables in one
/// snapshot); a restore puts a backup in place, runs `rotate-epoch` on it and opens it.
///
/// Owned by the simulation's one task; the transports reach the service through the run's
/// shared state.
final class SimServer {
    let directory: String
    let limits: Limits
    let authorizer: Authorizer
    private let clock: VirtualClock
    private let makeEpoch: SQLiteSyncStore.EpochMaker
    /// Wraps the store the service uses (a test's deliberately broken store), or nil.
    private let wrapStore: (@Sendable (any SyncStore) -> any SyncStore)?
    private let backend: Backend
    private(set) var store: (any SyncStore)?
    private(set) var service: SyncService?
    /// The rules file of the run (`Ledger.rules` for a run with field kinds), or none.
    private let rules: RulesHolder

    /// The run's store.
    private enum Backend {
        case sqlite(path: String)
        /// The run's database (`url`), made through `admin`.
        case postgres(admin: String, url: String, database: String)
    }

    /// The space every device syncs.
    static let space = "sim"

    init(directory: String, store: SimStore, limits: Limits, clock: VirtualClock, seed: UInt64,
         wrapStore: (@Sendable (any SyncStore) -> any SyncStore)?, rules: String? = nil) throws {
        self.directory = directory
        self.limits = limits
        self.clock = clock
        self.wrapStore = wrapStore
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if let rules {
            let path = directory + "/rules.json"
            try Data(rules.utf8).write(to: URL(fileURLWithPath: path))
            self.rules = try RulesHolder(path: path)
        } else {
            self.rules = RulesHolder()
        }
        // Epochs from the virtual clock and a seeded source: a run replays exactly.
        let epochRandom = Mutex(SimRandom(seed: seed))
        makeEpoch = { previous in
            epochRandom.withLock { rng in Epoch.generate(nowMs: clock.now, after: previous, using: &rng) }
        }
        authorizer = Authorizer(authority: JWTAuthority(secret: Self.secret, previousSecrets: []))
        switch store {
        case .sqlite:
            backend = .sqlite(path: directory + "/outpost.sqlite")
        case .postgres(let admin):
            // A database of its own for this run: runs go in parallel.
            let database = "sim_\(seed)_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
            let db = try PostgresConnection(url: admin)
            defer { db.close() }
            try db.execute("CREATE DATABASE \(database)")
            backend = .postgres(admin: admin, url: try Self.url(admin, database: database), database: database)
        }
    }

    /// `url` with its database replaced by `database`.
    static func url(_ url: String, database: String) throws -> String {
        guard let scheme = url.range(of: "://"), let slash = url[scheme.upperBound...].firstIndex(of: "/") else {
            throw StoreError("\(PostgresConnection.redacted(url)) names no database")
        }
        let query = url[slash...].firstIndex(of: "?").map { String(url[$0...]) } ?? ""
        return String(url[..<slash]) + "/" + database + query
    }

    private static let secret = Array("outpost-sim: a secret for simulations only".utf8)

    /// A write token for the space, signed with the run's secret (valid until 2100).
    static let token = JWTAuthority(secret: secret).sign(Claims(sub: "sim", exp: 4_102_444_800, spaces: [space], scope: .write))

    /// The current epoch (the server is open).
    var epoch: Epoch { store!.epoch }

    /// Opens the store and builds the service.
    func open() throws {
        let store: any SyncStore
        switch backend {
        case .sqlite(let path):
            var configuration = SQLiteSyncStore.Configuration(path: path)
            configuration.readers = 1
            configuration.synchronous = .full
            configuration.makeEpoch = makeEpoch
            configuration.clock = { [clock = self.clock] in clock.now }
            store = try SQLiteSyncStore(configuration: configuration)
        case .postgres(_, let url, _):
            var configuration = PostgresSyncStore.Configuration(url: url)
            configuration.readers = 1
            configuration.writers = 1
            configuration.makeEpoch = makeEpoch
            configuration.clock = { [clock = self.clock] in clock.now }
            store = try PostgresSyncStore(configuration: configuration)
        }
        self.store = store
        let clock = self.clock
        service = SyncService(store: wrapStore?(store) ?? store, limits: limits, authorizer: authorizer, metrics: Metrics(), rules: rules, clock: { clock.now })
    }

    /// Closes the store (a clean shutdown: in-flight work finishes first).
    func close() async {
        service = nil
        if let store { await store.close() }
        store = nil
    }

    /// Closes the store and removes what the run made (its PostgreSQL database).
    func destroy() async {
        await close()
        if case .postgres(let admin, _, let database) = backend, let db = try? PostgresConnection(url: admin) {
            _ = try? db.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
            db.close()
        }
    }

    /// The tables a backup copies (media is not part of the simulation).
    private static let tables = ["meta", "spaces", "records", "applied_changes"]

    private func removeStoreFiles(_ path: String) throws {
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            try FileManager.default.removeItem(atPath: path + suffix)
        }
    }

    /// A restart with the data kept.
    func restart() async throws {
        await close()
        try open()
    }

    /// A restart after the data was lost: a new store, a new epoch.
    func restartEmpty() async throws {
        await close()
        switch backend {
        case .sqlite(let path):
            try removeStoreFiles(path)
        case .postgres(_, let url, _):
            let db = try PostgresConnection(url: url)
            defer { db.close() }
            try db.execute("SET client_min_messages = warning; DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        }
        try open()
    }

    /// A copy of the live store named `name` (SQLite's online backup; the tables copied
    /// in one snapshot into a schema), and the epoch it was taken in.
    func backup(named name: String) throws -> Epoch {
        switch backend {
        case .sqlite(let path):
            let source = try Connection(path: path, flags: [.readOnly])
            defer { source.close() }
            let destination = try Connection(path: directory + "/" + name + ".sqlite")
            defer { destination.close() }
            try source.backup(into: destination)
        case .postgres(_, let url, _):
            let db = try PostgresConnection(url: url)
            defer { db.close() }
            let schema = Self.schema(name)
            try db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ; CREATE SCHEMA \(schema); "
                + Self.tables.map { "CREATE TABLE \(schema).\($0) AS SELECT * FROM public.\($0);" }.joined() + " COMMIT")
        }
        return epoch
    }

    private static func schema(_ name: String) -> String { "backup_" + name.filter { $0.isLetter || $0.isNumber } }

    /// Stops the server, puts the backup `name` in place, runs `rotate-epoch` on it (as an
    /// operator must after a restore) and starts again. Returns the new epoch.
    func restore(named name: String) async throws -> Epoch {
        await close()
        let epoch: Epoch
        switch backend {
        case .sqlite(let path):
            try removeStoreFiles(path)
            try FileManager.default.copyItem(atPath: directory + "/" + name + ".sqlite", toPath: path)
            epoch = try SQLiteSyncStore.rotateEpoch(path: path, makeEpoch: makeEpoch, now: clock.now)
        case .postgres(_, let url, _):
            let db = try PostgresConnection(url: url)
            let schema = Self.schema(name)
            do {
                try db.execute("BEGIN; TRUNCATE " + Self.tables.joined(separator: ", ") + "; "
                    + Self.tables.map { "INSERT INTO public.\($0) SELECT * FROM \(schema).\($0);" }.joined()
                    + " SELECT setval(pg_get_serial_sequence('spaces', 'space_id'), greatest(1, (SELECT max(space_id) FROM spaces))); COMMIT")
            } catch {
                db.close()
                throw error
            }
            db.close()
            epoch = try PostgresSyncStore.rotateEpoch(url: url, makeEpoch: makeEpoch, now: clock.now)
        }
        try open()
        return epoch
    }

    /// The records of the space, read straight from the store (a connection of its own:
    /// what is committed).
    func rows() throws -> [ServerRow] {
        switch backend {
        case .sqlite(let path):
            let db = try Connection(path: path, flags: [.readOnly])
            defer { db.close() }
            return try db.query("""
                SELECT r.collection, r.id, r.seq, r.deleted, r.data, r.updated_at FROM records r
                JOIN spaces s ON s.space_id = r.space_id WHERE s.name = ? ORDER BY r.seq
                """, [.text(Self.space)]) { row in
                Self.row(collection: row.text(0), id: row.text(1), seq: row.int64(2), deleted: row.int64(3) != 0, data: row.blob(4), updatedAt: row.int64(5))
            }
        case .postgres(_, let url, _):
            let db = try PostgresConnection(url: url)
            defer { db.close() }
            let rows = try db.query("""
                SELECT r.collection, r.id, r.seq, r.deleted, r.data, r.updated_at FROM records r
                JOIN spaces s ON s.space_id = r.space_id WHERE s.name = $1 ORDER BY r.seq
                """, [.text(Self.space)])
            return (0..<rows.count).map { i in
                Self.row(collection: rows.text(i, 0), id: rows.text(i, 1), seq: rows.int64(i, 2), deleted: rows.bool(i, 3),
                         data: rows.optionalBytes(i, 4) ?? [], updatedAt: rows.int64(i, 5))
            }
        }
    }

    private static func row(collection: String, id: String, seq: Int64, deleted: Bool, data: [UInt8], updatedAt: Int64) -> ServerRow {
        var t: String?
        var object: JSONObject?
        if !deleted, case .object(let o)? = try? JSONParser.parse(data) {
            t = tag(of: o)
            object = o
        }
        return ServerRow(key: Key(collection, id), seq: seq, deleted: deleted, tag: t, updatedAt: updatedAt, data: object)
    }

    // MARK: Requests

    /// `POST /v1/spaces/{space}/push` through the real handler, after the checks the HTTP
    /// engine makes before it reads a body (the route's body limit, the bearer token).
    /// Returns the status and the body, as the wire would carry them.
    static func push(_ service: SyncService, body: [UInt8], token: String, limits: Limits) async -> (Int, [UInt8]) {
        let parameters = ["space": space]
        let head = HTTPRequestHead(method: .POST, target: "/v1/spaces/\(space)/push",
                                   headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"])
        guard body.count <= limits.maxRequestBytes else {
            return (413, HTTPError.payloadTooLarge(limit: limits.maxRequestBytes).jsonEnvelope())
        }
        do {
            try await service.authorizePush(head, parameters)
            return answer(try await service.push(HTTPRequest(head: head, body: body, pathParameters: parameters)))
        } catch {
            return failure(error)
        }
    }

    /// `GET /v1/spaces/{space}/pull?…` through the real handler.
    static func pull(_ service: SyncService, query: PullQuery, token: String) async -> (Int, [UInt8]) {
        let parameters = ["space": space]
        let items = query.queryItems.map { "\(escape($0.0))=\(escape($0.1))" }.joined(separator: "&")
        let head = HTTPRequestHead(method: .GET, target: "/v1/spaces/\(space)/pull" + (items.isEmpty ? "" : "?" + items),
                                   headers: ["Authorization": "Bearer \(token)"])
        do {
            try await service.authorizePull(head, parameters)
            return answer(try await service.pull(HTTPRequest(head: head, pathParameters: parameters)))
        } catch {
            return failure(error)
        }
    }

    private static func answer(_ response: HTTPResponse) -> (Int, [UInt8]) {
        switch response.body {
        case .bytes(let bytes): return (response.status.code, bytes)
        case .empty: return (response.status.code, [])
        case .stream, .file, .held: return (500, HTTPError.internalError().jsonEnvelope())
        }
    }

    /// What the engine sends for an error a handler threw: the protocol's envelope for an
    /// `HTTPError`, a 500 for anything else.
    private static func failure(_ error: any Error) -> (Int, [UInt8]) {
        if let e = error as? HTTPError { return (e.status.code, e.jsonEnvelope()) }
        return (500, HTTPError.internalError().jsonEnvelope())
    }

    private static func escape(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}
