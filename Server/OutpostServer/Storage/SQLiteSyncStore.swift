import Foundation
import OutpostCore
import OutpostSyncRules
import OutpostSQLite
import Synchronization

/// The embedded store: one SQLite file in WAL mode, zero set-up.
///
/// Threads: one writer thread owns the only write connection and applies pushes with
/// group commit (every push queued while a commit is in progress goes into the next
/// transaction together); a few reader threads each own a read-only connection and serve
/// pages from WAL snapshots, never waiting for the writer.
///
/// Durability: `PRAGMA synchronous=FULL` by default. In WAL mode FULL fsyncs the log at
/// every commit, so an `applied` answer — sent only after the commit returns — survives
/// a kill of the process *and* a power loss. NORMAL would survive a process kill but could
/// lose the last commits on power loss, which breaks the protocol's promise that `applied`
/// means durable; group commit pays for the fsync across many pushes instead.
/// `Configuration.synchronous = .normal` exists for operators who accept that risk.
public final class SQLiteSyncStore: SyncStore {
    /// Settings of the store.
    public struct Configuration: Sendable {
        /// The database file.
        public var path: String
        public var synchronous: Connection.Synchronous = .full
        /// Reader threads (each with its own connection).
        public var readers: Int = 2
        /// Most pushes combined into one transaction.
        public var maxPushesPerCommit: Int = 64
        /// Makes the epoch of a store that has none (a new data directory). The default is
        /// `SQLiteSyncStore.systemEpoch` (the wall clock and the system's random source); the
        /// simulation (`outpost-sim`) passes a virtual clock and a seeded source so that a run
        /// replays exactly from its seed.
        public var makeEpoch: EpochMaker = SQLiteSyncStore.systemEpoch
        /// Whether every commit also writes its records to the webhook outbox (only while
        /// webhooks are configured; docs/operating.md, "Webhooks").
        public var outbox = false
        /// The most record bytes a space may hold (`PushRules.recordBytes`); nil for no limit.
        public var recordQuota: Int64?
        /// The server's clock (ms since 1970), for when the history begins and an epoch ends:
        /// the clock the pushes' commit times come from (the simulation's is virtual).
        public var clock: @Sendable () -> Int64 = SQLiteSyncStore.systemClock

        public init(path: String) { self.path = path }
    }

    /// Makes a new epoch that sorts after `previous` (docs/protocol.md section 1).
    public typealias EpochMaker = @Sendable (_ previous: Epoch?) -> Epoch

    /// The wall clock in ms since 1970.
    public static let systemClock: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }

    /// `Epoch.generate` from the wall clock and the system's random source: time first, so a
    /// new epoch sorts after every epoch made before it.
    public static let systemEpoch: EpochMaker = { previous in
        var rng = SystemRandomNumberGenerator()
        return Epoch.generate(nowMs: Int64(Date().timeIntervalSince1970 * 1000), after: previous, using: &rng)
    }

    public let epoch: Epoch
    public let notifier: CommitNotifier
    private let writer: WorkerThread<WriteJob>
    private let readers: [WorkerThread<ReadJob>]
    /// Copies the WAL back into the database off the commit path (see `init`).
    private let checkpointer: WorkerThread<CheckpointRequest>
    private let checkpointTimer: Task<Void, Never>
    private let nextReader = Atomic<Int>(0)
    private let configuration: Configuration

    /// The newest `meta.schema_version`, the number servers from before the named list of
    /// migrations (`SQLiteSchema`) read: its migrations "sync 1" to "sync 11" write it.
    static let schemaVersion = 11

    /// Opens (creating when absent) the store at `configuration.path`. A new store gets a
    /// new epoch.
    public init(configuration: Configuration, notifier: CommitNotifier = CommitNotifier()) throws {
        self.configuration = configuration
        self.notifier = notifier
        // Private before SQLite creates anything: the store and its -wal and -shm are the
        // owner's alone (DataDirectory.makePrivateStore).
        try DataDirectory.makePrivateStore(configuration.path)
        // Open once here to migrate and read the epoch before any thread starts.
        let setup = try Connection(path: configuration.path)
        try setup.enableWAL(synchronous: configuration.synchronous)
        try Self.migrate(setup, now: configuration.clock())
        let epoch = try Self.ensureEpoch(setup, makeEpoch: configuration.makeEpoch, now: configuration.clock())
        setup.close()
        self.epoch = epoch

        let path = configuration.path
        let synchronous = configuration.synchronous
        let maxBatch = configuration.maxPushesPerCommit
        let outbox = configuration.outbox
        let recordQuota = configuration.recordQuota
        let notifierRef = notifier
        writer = try WorkerThread<WriteJob>(
            name: "sqlite-writer", maxBatch: maxBatch,
            setup: {
                let db = try Connection(path: path)
                try db.enableWAL(synchronous: synchronous)
                // No automatic checkpoints in the committing thread: a checkpoint writes
                // and fsyncs the database file, and would stall every push queued behind
                // it. The checkpointer thread does that work instead.
                try db.execute("PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY; PRAGMA wal_autocheckpoint=0")
                return SQLiteWriter(db: db, epoch: epoch, notifier: notifierRef, outbox: outbox, recordQuota: recordQuota)
            },
            handle: { writer, jobs in writer.handle(jobs) },
            teardown: { writer in writer.close() })
        var readers: [WorkerThread<ReadJob>] = []
        for i in 0..<max(1, configuration.readers) {
            readers.append(try WorkerThread<ReadJob>(
                name: "sqlite-reader-\(i)",
                setup: {
                    let db = try Connection(path: path, flags: [.readOnly])
                    try db.execute("PRAGMA cache_size=-32768; PRAGMA mmap_size=268435456")
                    return SQLiteReader(db: db, epoch: epoch)
                },
                handle: { reader, jobs in for job in jobs { job.run(reader) } },
                teardown: { reader in reader.db.close() }))
        }
        self.readers = readers
        checkpointer = try WorkerThread<CheckpointRequest>(
            name: "sqlite-checkpoint",
            setup: {
                let db = try Connection(path: path)
                try db.enableWAL(synchronous: synchronous)
                return db
            },
            // PASSIVE never blocks the writer or readers; it copies what it can.
            handle: { db, _ in _ = try? db.execute("PRAGMA wal_checkpoint(PASSIVE)") },
            teardown: { db in db.close() })
        let checkpointer = self.checkpointer
        checkpointTimer = Task.detached(priority: .utility) {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                checkpointer.submit(CheckpointRequest())
            }
        }
    }

    // MARK: Schema

    /// Brings the schema of the file `db` is open on up to date (`SQLiteSchema`). Public so
    /// a benchmark can build the same tables for its ceiling.
    public static func migrate(_ db: Connection, now: Int64 = systemClock()) throws {
        try SQLiteSchema.migrations.migrate(SQLiteSession(borrowing: db), now: now)
    }

    static func ensureEpoch(_ db: Connection, makeEpoch: EpochMaker = systemEpoch, now: Int64 = systemClock()) throws -> Epoch {
        if let text = try db.scalarText("SELECT value FROM meta WHERE key = 'epoch'") {
            guard let epoch = Epoch(text) else { throw StoreError("the store's epoch \"\(text)\" is not valid") }
            return epoch
        }
        return try rotateEpoch(db, makeEpoch: makeEpoch, now: now)
    }

    /// Gives the store at `db` a new epoch, later than its current one, at `now`, and
    /// returns it. The epoch that ends joins the history (`epoch_history`); a new store's
    /// history begins. The caller makes sure no server has the store open.
    @discardableResult
    static func rotateEpoch(_ db: Connection, makeEpoch: EpochMaker = systemEpoch, now: Int64 = systemClock()) throws -> Epoch {
        try db.transaction {
            let previous = try db.scalarText("SELECT value FROM meta WHERE key = 'epoch'").flatMap(Epoch.init)
            let epoch = makeEpoch(previous)
            try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('epoch', ?)", [.text(epoch.rawValue)])
            if let previous {
                try endEpochs([(previous, now)], in: db)
                try recordLineage(db, endingEpoch: previous)
            } else {
                try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('history_began_at', ?)", [.text(String(now))])
            }
            return epoch
        }
    }

    /// Adds ended epochs to the store's history, each with the time it ended (an epoch
    /// already there keeps the earlier time).
    static func endEpochs(_ ended: [(Epoch, Int64)], in db: Connection) throws {
        for (epoch, at) in ended {
            try db.run("""
                INSERT INTO epoch_history(epoch, ended_at) VALUES (?, ?)
                ON CONFLICT(epoch) DO UPDATE SET ended_at = min(ended_at, excluded.ended_at)
                """, [.text(epoch.rawValue), .integer(at)])
        }
    }

    /// The history of epochs of the store at `db` (`PushRules.EpochHistory`).
    static func epochHistory(_ db: Connection) throws -> PushRules.EpochHistory {
        guard let began = try db.scalarText("SELECT value FROM meta WHERE key = 'history_began_at'").flatMap({ Int64($0) }) else {
            throw StoreError("the store's epoch history has no beginning (meta history_began_at)")
        }
        return PushRules.EpochHistory(began: began, ended: Dictionary(try endedEpochs(db), uniquingKeysWith: min))
    }

    /// The ended epochs of the store at `db`, with when each ended.
    static func endedEpochs(_ db: Connection) throws -> [(Epoch, Int64)] {
        try db.query("SELECT epoch, ended_at FROM epoch_history ORDER BY ended_at") { ($0.text(0), $0.int64(1)) }.compactMap { e, at in Epoch(e).map { ($0, at) } }
    }

    /// Gives every record (tombstones included) the lineage and sameAs `<ending>.<seq>`:
    /// its own version in the history that ends, since seqs are kept across a rotation, and
    /// nothing is written on it yet. Re-offers of that history are judged against sameAs
    /// (docs/protocol.md section 4, added in 1.1); older values are replaced, as devices compare
    /// with the most recent history they knew. A resolution's mark goes: the version it
    /// names is of the history that ends.
    static func recordLineage(_ db: Connection, endingEpoch ending: Epoch) throws {
        try db.run("UPDATE records SET lineage = ?1 || '.' || seq, same_as = ?1 || '.' || seq, resolved = NULL", [.text(ending.rawValue)])
    }

    /// Opens the store file at `path`, gives it a new epoch (made by `makeEpoch`) at `now`
    /// and closes it.
    public static func rotateEpoch(path: String, makeEpoch: EpochMaker = systemEpoch, now: Int64 = systemClock()) throws -> Epoch {
        try DataDirectory.makePrivateStore(path)
        let db = try Connection(path: path)
        defer { db.close() }
        try db.enableWAL(synchronous: .full)
        try migrate(db)
        return try rotateEpoch(db, makeEpoch: makeEpoch, now: now)
    }

    // MARK: SyncStore

    public var queuedWrites: Int { writer.queued }

    public func push(space: String, clientId: String, subject: String, items: [PushItem], now: Int64, judge: (any PushJudge)?) async throws -> [PushResult] {
        try await withCheckedThrowingContinuation { continuation in
            let job = WriteJob.push(PushJob(space: space, clientId: clientId, subject: subject, items: items, now: now, judge: judge,
                                            completion: { continuation.resume(with: $0) }))
            if !writer.submit(job) { continuation.resume(throwing: StoreError("the store is closed")) }
        }
    }

    public func page(_ request: PageRequest) async throws -> PageData {
        try await read { try $0.page(request) }
    }

    public func scan(_ request: PageRequest) async throws -> RecordScan {
        try await read { try $0.scan(request) }
    }

    public func departures(space: String, _ queries: [DepartureQuery]) async throws -> [PushRules.Key: [UInt8]] {
        try await read { try $0.departures(space: space, queries) }
    }

    public func viewScan(_ request: ViewScanRequest) async throws -> RecordScan {
        try await read { try $0.viewScan(request) }
    }

    public func viewPage(_ request: ViewScanRequest, maxBytes: Int) async throws -> PageData? {
        try await read { try $0.viewPage(request, maxBytes: maxBytes) }
    }

    public func viewIndexSpec() async throws -> String? {
        try await read { try $0.db.scalarText("SELECT value FROM meta WHERE key = 'view_index_spec'") }
    }

    public func forgetViewIndex() async throws {
        try await write { db in try db.run("DELETE FROM meta WHERE key = 'view_index_spec'") }
    }

    public func buildViewIndex(spec: String, keys: @escaping @Sendable (String, [UInt8]) -> [PushRules.IndexKey]) async throws -> Int {
        // Each step is a write transaction on the writer, between pushes: the index a
        // batch writes is that of the records' states then, and a push after it keeps it.
        try await write { db in
            try db.transaction(.immediate) {
                try db.run("DELETE FROM meta WHERE key = 'view_index_spec'")
                try db.run("DELETE FROM view_index")
            }
        }
        let spaces: [Int64] = try await read { try $0.db.query("SELECT space_id FROM spaces ORDER BY space_id", []) { $0.int64(0) } }
        var indexed = 0
        for space in spaces {
            var after: Int64 = 0
            while true {
                let from = after
                let (count, last): (Int, Int64?) = try await write { db in
                    try db.transaction(.immediate) {
                        let rows = try db.query(
                            "SELECT seq, collection, data FROM records WHERE space_id = ? AND seq > ? AND deleted = 0 ORDER BY seq LIMIT ?",
                            [.integer(space), .integer(from), .integer(Int64(Self.indexBatch))]) { ($0.int64(0), $0.text(1), $0.blob(2)) }
                        let storage = SQLitePushStorage(db: db, spaceID: space, epoch: self.epoch)
                        try storage.reindex(removing: [], adding: rows.flatMap { seq, collection, data in
                            keys(collection, data).map { PushRules.IndexEntry(key: $0, seq: seq, collection: collection) }
                        })
                        return (rows.count, rows.last?.0)
                    }
                }
                indexed += count
                guard let last, count == Self.indexBatch else { break }
                after = last
            }
        }
        try await write { db in try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('view_index_spec', ?)", [.text(spec)]) }
        return indexed
    }

    /// Records indexed per write transaction of `buildViewIndex`.
    static let indexBatch = 2000

    public func head(space: String) async throws -> Int64 {
        try await read { try $0.head(space: space) }
    }

    public func waitForCommit(space: String, afterSeq: Int64, deadline: ContinuousClock.Instant) async -> Bool {
        await notifier.wait(space: space, afterSeq: afterSeq, deadline: deadline)
    }

    public func sweepChangeIDs(appliedBefore cutoff: Int64) async throws -> Int {
        var total = 0
        while true {
            let deleted: Int = try await write { db in
                try db.run("""
                    DELETE FROM applied_changes WHERE (space_id, change_id) IN
                      (SELECT space_id, change_id FROM applied_changes WHERE applied_at < ? LIMIT 5000)
                    """, [.integer(cutoff)])
                return db.changes
            }
            total += deleted
            if deleted < 5000 { return total }
        }
    }

    public func compact(tombstonesBefore cutoff: Int64) async throws -> Compaction {
        try await Compaction.run {
            try await write { db in try Compaction.slice(SQLiteSession(borrowing: db), before: cutoff) }
        }
    }

    public func horizon(space: String) async throws -> Int64 {
        try await read { try $0.db.scalarInt("SELECT horizon_seq FROM spaces WHERE name = ?", [.text(space)]) ?? 0 }
    }

    public func spaces(after: String, limit: Int) async throws -> [SpaceSummary] {
        try await read { reader in
            try reader.db.query(SpaceSummary.listingSQL { _ in "?" }, [.text(after), .integer(Int64(limit))]) { row in
                SpaceSummary(name: row.text(0), records: row.int64(2), tombstones: row.int64(3), head: row.int64(1),
                             lastWriteAt: row.isNull(4) ? nil : row.int64(4), horizon: row.int64(5), recordBytes: row.int64(6))
            }
        }
    }

    public func isWritable() async -> Bool {
        (try? await write { db in
            try db.execute("BEGIN IMMEDIATE")
            try db.execute("ROLLBACK")
            return true
        }) ?? false
    }

    public func close() async {
        checkpointTimer.cancel()
        let writer = self.writer, readers = self.readers, checkpointer = self.checkpointer
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                checkpointer.stop()
                writer.stop()
                for r in readers { r.stop() }
                c.resume()
            }
        }
    }

    /// Sessions on the writer thread, borrowing its connection between push transactions:
    /// for SQL whose write transactions must queue fairly with the pushes' (the webhook
    /// outbox's claims), where a second connection would contend for SQLite's write lock
    /// with a writer that commits back to back, and rarely get it. `.process` transactions
    /// commit at NORMAL, `.durable` ones at the store's `synchronous`.
    var writerSessions: any SQLRunner { WriterSessions(store: self, level: configuration.synchronous) }

    private struct WriterSessions: SQLRunner {
        let store: SQLiteSyncStore
        let level: Connection.Synchronous

        func run<T: Sendable>(_ what: String, _ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
            let level = self.level
            return try await store.write { db in try body(SQLiteSession(borrowing: db, at: level)) }
        }

        /// The store owns the writer: `close` ends it.
        func stop() {}
    }

    /// Sessions on the reader threads, borrowing their read-only connections: for reads
    /// that need not wait for the writer (a webhook batch's rows, once claimed). Queries
    /// only; each statement reads one snapshot.
    var readerSessions: any SQLRunner { ReaderSessions(store: self) }

    private struct ReaderSessions: SQLRunner {
        let store: SQLiteSyncStore

        func run<T: Sendable>(_ what: String, _ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
            try await store.read { reader in try body(SQLiteSession(borrowing: reader.db)) }
        }

        /// The store owns the readers: `close` ends them.
        func stop() {}
    }

    /// Runs `body` on the writer thread (outside any push transaction).
    func write<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let job = WriteJob.other { db in continuation.resume(with: Result { try body(db) }) }
            if !writer.submit(job) { continuation.resume(throwing: StoreError("the store is closed")) }
        }
    }

    fileprivate func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteReader) throws -> T) async throws -> T {
        let index = nextReader.wrappingAdd(1, ordering: .relaxed).oldValue % readers.count
        return try await withCheckedThrowingContinuation { continuation in
            let job = ReadJob { reader in continuation.resume(with: Result { try body(reader) }) }
            if !readers[index].submit(job) { continuation.resume(throwing: StoreError("the store is closed")) }
        }
    }
}

// MARK: - Jobs

enum WriteJob: Sendable {
    case push(PushJob)
    case other(@Sendable (Connection) -> Void)
}

struct CheckpointRequest: Sendable {}

struct ReadJob: Sendable {
    let run: @Sendable (SQLiteReader) -> Void
}

// MARK: - Writer

/// Owned by the writer thread; never touched elsewhere. Its pushes go through
/// `GroupCommit`: one `BEGIN IMMEDIATE` transaction per group, the spaces' counters kept
/// here between groups and stored once per group, at its commit.
final class SQLiteWriter: GroupWriter {
    let db: Connection
    let epoch: Epoch
    let notifier: CommitNotifier
    /// Whether pushes write the webhook outbox.
    let outbox: Bool
    /// The most record bytes a space may hold; nil for no limit.
    let recordQuota: Int64?
    /// space name -> its space_id and counters, as committed.
    private var spaces: [String: (id: Int64, counters: PushRules.Space)] = [:]
    /// `spaces` when the group's transaction began, put back when it is rolled back.
    private var beforeGroup: [String: (id: Int64, counters: PushRules.Space)] = [:]

    init(db: Connection, epoch: Epoch, notifier: CommitNotifier, outbox: Bool = false, recordQuota: Int64? = nil) {
        self.db = db
        self.epoch = epoch
        self.notifier = notifier
        self.outbox = outbox
        self.recordQuota = recordQuota
    }

    func close() {
        // Fold the WAL into the database before the last connection goes.
        _ = try? db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
    }

    func handle(_ jobs: [WriteJob]) {
        var pushes: [PushJob] = []
        for job in jobs {
            switch job {
            case .push(let p):
                pushes.append(p)
            case .other(let body):
                if !pushes.isEmpty { GroupCommit.run(pushes, on: self) }
                pushes.removeAll()
                body(db)
                // The job may have changed a space's counters (a compaction purges
                // tombstones, and their bytes): read them again at the next push.
                spaces.removeAll()
            }
        }
        if !pushes.isEmpty { GroupCommit.run(pushes, on: self) }
    }

    // MARK: GroupWriter

    func begin(spaces: [String]) throws {
        beforeGroup = self.spaces
        try db.execute("BEGIN IMMEDIATE")
    }

    func storage(for job: PushJob) throws -> (SQLitePushStorage, PushRules.Space) {
        let space = try spaceEntry(job.space)
        return (SQLitePushStorage(db: db, spaceID: space.id, epoch: epoch, outboxAt: outbox ? job.now : nil), space.counters)
    }

    func commit(touched: [String: PushRules.Space]) throws {
        let store = try db.cached("UPDATE spaces SET head_seq = ?, record_bytes = ? WHERE space_id = ?")
        for (space, counters) in touched {
            let id = spaces[space]!.id
            try store.bind(int: counters.head, at: 1)
            try store.bind(int: counters.recordBytes, at: 2)
            try store.bind(int: id, at: 3)
            while try store.step() {}
            store.reset()
            spaces[space] = (id, counters)
        }
        try db.execute("COMMIT")
    }

    func rollback() {
        if db.isInTransaction { try? db.execute("ROLLBACK") }
        spaces = beforeGroup
    }

    /// One writer owns the file: a failure while a push is applied is that push's, and
    /// any other is the transaction's.
    func failure(_ error: any Error, at phase: GroupCommit.Phase) -> GroupCommit.Failure {
        phase == .push ? .push : .group(answer: error)
    }

    private func spaceEntry(_ name: String) throws -> (id: Int64, counters: PushRules.Space) {
        if let entry = spaces[name] { return entry }
        if let row = try db.queryOne("SELECT space_id, head_seq, record_bytes FROM spaces WHERE name = ?", [.text(name)], { ($0.int64(0), $0.int64(1), $0.int64(2)) }) {
            let entry = (id: row.0, counters: PushRules.Space(head: row.1, recordBytes: row.2))
            spaces[name] = entry
            return entry
        }
        try db.run("INSERT INTO spaces(name, head_seq) VALUES (?, 0)", [.text(name)])
        let entry = (id: db.lastInsertRowID, counters: PushRules.Space(head: 0, recordBytes: 0))
        spaces[name] = entry
        return entry
    }
}

// MARK: - Readers

/// Owned by one reader thread.
final class SQLiteReader: PageReader {
    let db: Connection
    let epoch: Epoch

    init(db: Connection, epoch: Epoch) {
        self.db = db
        self.epoch = epoch
    }

    func head(space: String) throws -> Int64 {
        try db.scalarInt("SELECT head_seq FROM spaces WHERE name = ?", [.text(space)]) ?? 0
    }

    /// The store's one read of a page of records, in one read transaction so the space's
    /// counters, the departures checked and the rows come from the same snapshot.
    func read<Sink: RecordSink>(_ source: RecordSource, into sink: inout Sink, wholeOnly: Bool) throws -> PageEnd? {
        try db.transaction(.deferred) {
            guard case (let spaceID, let head, let horizon)? = try db.queryOne(
                "SELECT space_id, head_seq, horizon_seq FROM spaces WHERE name = ?", [.text(source.space)], { ($0.int64(0), $0.int64(1), $0.int64(2)) })
            else { return PageEnd(head: 0, horizon: 0) }
            let end = PageEnd(head: head, horizon: horizon)
            guard !source.isEmpty else { return end }
            if wholeOnly, let departures = source.departures {
                let departed = try viewStatement(departures, spaceID: spaceID)
                defer { departed.reset() }
                if try departed.step() { return nil }
            }
            let stmt: Statement
            switch source {
            case .after(let request): stmt = try recordsAfter(request, spaceID: spaceID)
            case .view(let request): stmt = try viewStatement(request, spaceID: spaceID)
            }
            defer { stmt.reset() }
            let row = SQLiteRow(statement: stmt)
            while try stmt.step(), sink.take(row, RecordRow()) {}
            return end
        }
    }

    /// The statement of the records after a cursor: `limit + 1` of them, so the caller
    /// learns whether more follow.
    private func recordsAfter(_ request: PageRequest, spaceID: Int64) throws -> Statement {
        var sql = "SELECT \(RecordRow.pullColumns) FROM records WHERE space_id = ? AND seq > ?"
        var values: [SQLiteValue] = [.integer(spaceID), .integer(request.afterSeq)]
        if let collections = request.collections, !collections.isEmpty {
            sql += " AND collection IN (" + Array(repeating: "?", count: collections.count).joined(separator: ",") + ")"
            values += collections.map { .text($0) }
        }
        sql += " ORDER BY seq LIMIT ?"
        values.append(.integer(Int64(request.limit) + 1))
        let stmt = try db.cached(sql)
        try stmt.bind(values)
        return stmt
    }

    /// The statement of a view index scan's records, in `recordsAfter`'s columns.
    private func viewStatement(_ request: ViewScanRequest, spaceID: Int64) throws -> Statement {
        let (seqs, parameters) = request.seqsSQL(space: "?1", first: 2, placeholder: { "?\($0)" },
                                                 inList: { "\($0) IN (SELECT value FROM json_each(\($1)))" })
        let stmt = try db.cached("SELECT \(RecordRow.pullColumns) FROM records WHERE space_id = ?1 AND seq IN (\(seqs)) ORDER BY seq LIMIT ?3")
        try stmt.bind([.integer(spaceID)] + parameters.map { parameter -> SQLiteValue in
            switch parameter {
            case .integer(let v): return .integer(v)
            case .text(let t): return .text(t)
            case .texts(let list): return .text(String(decoding: JSONValue.array(list.map { .string($0) }).encoded(), as: UTF8.self))
            }
        })
        return stmt
    }

    /// The first departure of each queried record in its range.
    func departures(space: String, _ queries: [DepartureQuery]) throws -> [PushRules.Key: [UInt8]] {
        guard !queries.isEmpty, let spaceID = try db.scalarInt("SELECT space_id FROM spaces WHERE name = ?", [.text(space)]) else { return [:] }
        let find = try db.cached("SELECT data FROM departures WHERE space_id = ? AND collection = ? AND id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT 1")
        var out: [PushRules.Key: [UInt8]] = [:]
        for q in queries {
            try find.bind(int: spaceID, at: 1)
            try find.bind(text: q.key.collection, at: 2)
            try find.bind(text: q.key.id, at: 3)
            try find.bind(int: q.after, at: 4)
            try find.bind(int: q.upTo, at: 5)
            defer { find.reset() }
            if try find.step() { out[q.key] = find.blob(0) }
        }
        return out
    }
}
