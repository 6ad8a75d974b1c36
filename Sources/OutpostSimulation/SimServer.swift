import Foundation
import OutpostCore
import OutpostHTTP
import OutpostServer
import OutpostSQLite
import Synchronization

/// The real server in process: `SQLiteSyncStore` (its writer, reader and checkpoint threads,
/// a real SQLite file in WAL mode with `synchronous=FULL`) and `SyncService` (the push and
/// pull handlers), on a data directory of the run. Operators' actions are done the way an
/// operator does them: a restart closes the store and opens the same file again; a data
/// loss opens a new file (a new epoch); a backup is SQLite's online backup of the live
/// file; a restore puts a backup in place, runs `rotate-epoch` on it and opens it.
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
    private(set) var store: SQLiteSyncStore?
    private(set) var service: SyncService?

    /// The store file.
    var path: String { directory + "/outpost.sqlite" }
    /// The space every device syncs.
    static let space = "sim"

    init(directory: String, limits: Limits, clock: VirtualClock, seed: UInt64, wrapStore: (@Sendable (any SyncStore) -> any SyncStore)?) throws {
        self.directory = directory
        self.limits = limits
        self.clock = clock
        self.wrapStore = wrapStore
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // Epochs from the virtual clock and a seeded source: a run replays exactly.
        let epochRandom = Mutex(SimRandom(seed: seed))
        makeEpoch = { previous in
            epochRandom.withLock { rng in Epoch.generate(nowMs: clock.now, after: previous, using: &rng) }
        }
        authorizer = Authorizer(authority: JWTAuthority(secret: Self.secret, previousSecrets: []))
    }

    private static let secret = Array("outpost-sim: a secret for simulations only".utf8)

    /// A write token for the space, signed with the run's secret (valid until 2100).
    static let token = JWTAuthority(secret: secret).sign(Claims(sub: "sim", exp: 4_102_444_800, spaces: [space], scope: .write))

    /// The current epoch (the server is open).
    var epoch: Epoch { store!.epoch }

    /// Opens the store on the data directory and builds the service.
    func open() throws {
        var configuration = SQLiteSyncStore.Configuration(path: path)
        configuration.readers = 1
        configuration.synchronous = .full
        configuration.makeEpoch = makeEpoch
        let store = try SQLiteSyncStore(configuration: configuration)
        self.store = store
        let clock = self.clock
        service = SyncService(store: wrapStore?(store) ?? store, limits: limits, authorizer: authorizer, metrics: Metrics(), clock: { clock.now })
    }

    /// Closes the store (a clean shutdown: in-flight work finishes first).
    func close() async {
        service = nil
        if let store { await store.close() }
        store = nil
    }

    private func removeStoreFiles() throws {
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            try FileManager.default.removeItem(atPath: path + suffix)
        }
    }

    /// A restart with the data directory kept.
    func restart() async throws {
        await close()
        try open()
    }

    /// A restart after the data directory was lost: a new store, a new epoch.
    func restartEmpty() async throws {
        await close()
        try removeStoreFiles()
        try open()
    }

    /// A copy of the live store file at `backupPath` (SQLite's online backup), and the
    /// epoch it was taken in.
    func backup(to backupPath: String) throws -> Epoch {
        let source = try Connection(path: path, flags: [.readOnly])
        defer { source.close() }
        let destination = try Connection(path: backupPath)
        defer { destination.close() }
        try source.backup(into: destination)
        return epoch
    }

    /// Stops the server, puts the backup at `backupPath` in place, runs `rotate-epoch` on
    /// it (as an operator must after a restore) and starts again. Returns the new epoch.
    func restore(from backupPath: String) async throws -> Epoch {
        await close()
        try removeStoreFiles()
        try FileManager.default.copyItem(atPath: backupPath, toPath: path)
        let epoch = try SQLiteSyncStore.rotateEpoch(path: path, makeEpoch: makeEpoch)
        try open()
        return epoch
    }

    /// The records of the space, read straight from the store file (a separate read-only
    /// connection: a WAL snapshot of what is committed).
    func rows() throws -> [ServerRow] {
        let db = try Connection(path: path, flags: [.readOnly])
        defer { db.close() }
        return try db.query("""
            SELECT r.collection, r.id, r.seq, r.deleted, r.data, r.updated_at FROM records r
            JOIN spaces s ON s.space_id = r.space_id WHERE s.name = ? ORDER BY r.seq
            """, [.text(Self.space)]) { row in
            let deleted = row.int64(3) != 0
            var t: String?
            if !deleted, case .object(let o)? = try? JSONParser.parse(row.blob(4)) { t = tag(of: o) }
            return ServerRow(key: Key(row.text(0), row.text(1)), seq: row.int64(2), deleted: deleted, tag: t, updatedAt: row.int64(5))
        }
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
            try service.authorizePush(head, parameters)
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
            try service.authorizePull(head, parameters)
            return answer(try await service.pull(HTTPRequest(head: head, pathParameters: parameters)))
        } catch {
            return failure(error)
        }
    }

    private static func answer(_ response: HTTPResponse) -> (Int, [UInt8]) {
        switch response.body {
        case .bytes(let bytes): return (response.status.code, bytes)
        case .empty: return (response.status.code, [])
        case .stream, .file: return (500, HTTPError.internalError().jsonEnvelope())
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
