import OutpostCLinux
import Foundation
import OutpostCore
import OutpostSyncRules
import OutpostPostgres
import Synchronization

/// The store for several `outpost-server` instances sharing one history: PostgreSQL
/// through libpq (docs/scaling.md).
///
/// Threads (libpq blocks, so none of it runs on Swift's cooperative pool; see
/// `WorkerThread`): a few writer threads each own a connection and apply pushes with group
/// commit (every push queued while a commit is in progress goes into the next transaction
/// together, each applied by `PushRules` over `PostgresPushStorage`); a space's pushes always go to the same
/// writer, so one instance never makes its own writers wait for each other's locks, and
/// different spaces commit in parallel, in this instance as across instances; a few reader
/// threads each own
/// a connection and serve pages; one listener thread owns a connection that `LISTEN`s on
/// `outpost_commits` and `outpost_epoch`. Each connection stays on its thread.
///
/// **Seq allocation and what a puller sees.** Each space's seq lives in its `spaces` row
/// and is allocated by `PushRules.apply` (see `PostgresWriter.lockSpace`) inside the writing
/// transaction, under that row's lock (`SELECT … FOR UPDATE`), and stored in the same
/// transaction, with the idempotency rows. The lock is held until the transaction ends,
/// on whichever instance it runs. So:
/// 1. no two transactions hold seqs of one space at once: a second writer, here or on
///    another instance, waits for the first to commit or roll back, and then reads the
///    head the first left (a rollback leaves the old head, and its seqs were never seen);
/// 2. hence the commits of a space happen in seq order: when a transaction holding seqs
///    up to n commits, every smaller seq of the space is already committed (PostgreSQL
///    makes a commit visible before it releases the transaction's locks);
/// 3. a page is one statement, hence one snapshot: it reads the head and the records
///    after the cursor together, and a snapshot that contains seq n contains every seq
///    below n. A record whose seq was allocated before a later one can therefore never be
///    committed after it, and no puller skips it.
/// `PostgresSyncStoreTests.aPullerNeverSkipsASeqCommittedLate` holds a transaction with
/// the smaller seq open on one connection while another instance pushes, and checks this.
/// The price: the commits of one space are serialized across all instances (different
/// spaces commit in parallel); group commit amortizes it, as SQLite's single writer does.
///
/// **Long polls across instances.** A push's write calls `pg_notify('outpost_commits',
/// '<space> <head>')`, delivered to every listening connection when the transaction
/// commits. Each instance's listener feeds its `CommitNotifier`; the writer of the
/// instance that committed also tells its own notifier at once. After the listener loses
/// its connection it reconnects and wakes every waiting pull once (they read again), since
/// notifications sent meanwhile are lost.
///
/// **Epoch.** The epoch lives in `meta` and is read at start. Every push checks it inside
/// its transaction (when it locks the space's row) and every page reads it
/// in its snapshot. `rotate-epoch --store postgres://…` changes it and notifies
/// `outpost_epoch`. An instance that sees a changed epoch stops taking writes and reads
/// (503 `unavailable`), reports `isWritable() == false`, and calls `onEpochChange`, which
/// `outpost-server` uses to shut down so that its supervisor starts it again on the new
/// epoch: an instance never serves two epochs.
///
/// Durability: PostgreSQL's (`synchronous_commit` on by default): `applied` is answered
/// after the commit returned.
public final class PostgresSyncStore: SyncStore {
    /// Settings of the store.
    public struct Configuration: Sendable {
        /// `postgres://user:password@host:port/database?…` (libpq URL).
        public var url: String
        /// Reader threads (each with its own connection).
        public var readers: Int = 2
        /// Writer threads (each with its own connection); a space always uses the same one.
        public var writers: Int = 2
        /// Most pushes combined into one transaction.
        public var maxPushesPerCommit: Int = 64
        /// Called once, off the request path, when the database's epoch is no longer this
        /// store's (an operator rotated it).
        public var onEpochChange: (@Sendable (Epoch?) -> Void)?
        /// Makes the epoch of a database that has none, as `SQLiteSyncStore.Configuration`'s
        /// does (the simulation passes a virtual clock and a seeded source).
        public var makeEpoch: SQLiteSyncStore.EpochMaker = SQLiteSyncStore.systemEpoch
        /// Whether every commit also writes its records to the webhook outbox (only while
        /// webhooks are configured; docs/operating.md, "Webhooks").
        public var outbox = false
        /// The most record bytes a space may hold (`PushRules.recordBytes`); nil for no limit.
        public var recordQuota: Int64?
        /// The server's clock, for when a new database's history begins (as
        /// `SQLiteSyncStore.Configuration`'s).
        public var clock: @Sendable () -> Int64 = SQLiteSyncStore.systemClock

        /// A configuration with the defaults.
        public init(url: String) { self.url = url }
    }

    /// The epoch read from the database at start; the store stops serving when the
    /// database's changes (see "Epoch" above).
    public let epoch: Epoch
    /// Wakes long polls of this instance.
    public let notifier: CommitNotifier
    private let writers: [WorkerThread<PostgresWriteJob>]
    private let readers: [WorkerThread<PostgresReadJob>]
    private let listener: PostgresListener
    private let nextReader = Atomic<Int>(0)
    /// Set once the database's epoch is seen to differ from `epoch`.
    private let stale: StaleEpoch

    /// Connects, applies migrations (under the advisory lock) and reads the epoch (a new
    /// database gets one), then starts the threads.
    public init(configuration: Configuration, notifier: CommitNotifier = CommitNotifier()) throws {
        self.notifier = notifier
        let url = configuration.url
        let setup = try PostgresConnection(url: url)
        let epoch = try PostgresSchema.migrate(setup, makeEpoch: configuration.makeEpoch, now: configuration.clock())
        setup.close()
        self.epoch = epoch
        let stale = StaleEpoch(handler: configuration.onEpochChange)
        self.stale = stale

        let notifierRef = notifier
        let outbox = configuration.outbox
        let recordQuota = configuration.recordQuota
        var writers: [WorkerThread<PostgresWriteJob>] = []
        for i in 0..<max(1, configuration.writers) {
            writers.append(try WorkerThread<PostgresWriteJob>(
                name: "pg-writer-\(i)", maxBatch: max(1, configuration.maxPushesPerCommit),
                setup: { PostgresWriter(db: try Self.open(url), epoch: epoch, notifier: notifierRef, stale: stale, outbox: outbox, recordQuota: recordQuota) },
                handle: { writer, jobs in writer.handle(jobs) },
                teardown: { writer in writer.db.close() }))
        }
        self.writers = writers
        var readers: [WorkerThread<PostgresReadJob>] = []
        for i in 0..<max(1, configuration.readers) {
            readers.append(try WorkerThread<PostgresReadJob>(
                name: "pg-reader-\(i)",
                setup: { PostgresReader(db: try Self.open(url), epoch: epoch, stale: stale) },
                handle: { reader, jobs in
                    for job in jobs {
                        do {
                            try reader.db.reconnectIfNeeded()
                        } catch {
                            job.run(nil, error)
                            continue
                        }
                        job.run(reader, nil)
                    }
                },
                teardown: { reader in reader.db.close() }))
        }
        self.readers = readers
        listener = try PostgresListener(url: url, epoch: epoch, notifier: notifier, stale: stale)
    }

    /// A connection with the session settings every thread uses.
    static func open(_ url: String) throws -> PostgresConnection {
        let db = try PostgresConnection(url: url)
        try db.execute("SET application_name = 'outpost-server'; SET client_min_messages = warning")
        return db
    }

    /// Gives the database at `url` a new epoch (see `PostgresSchema.rotateEpoch`).
    public static func rotateEpoch(url: String, makeEpoch: SQLiteSyncStore.EpochMaker = SQLiteSyncStore.systemEpoch,
                                   now: Int64 = SQLiteSyncStore.systemClock()) throws -> Epoch {
        try PostgresSchema.rotateEpoch(url: url, makeEpoch: makeEpoch, now: now)
    }

    // MARK: SyncStore

    public var queuedWrites: Int { writers.reduce(0) { $0 + $1.queued } }

    public func push(space: String, clientId: String, subject: String, items: [PushItem], now: Int64, judge: (any PushJudge)?) async throws -> [PushResult] {
        try stale.check()
        return try await withCheckedThrowingContinuation { continuation in
            let job = PostgresWriteJob.push(PushJob(space: space, clientId: clientId, subject: subject, items: items, now: now, judge: judge,
                                                    completion: { continuation.resume(with: $0) }))
            if !writer(for: space).submit(job) { continuation.resume(throwing: StoreError("the store is closed")) }
        }
    }

    public func page(_ request: PageRequest) async throws -> PageData {
        try stale.check()
        return try await read { try $0.page(request) }
    }

    public func scan(_ request: PageRequest) async throws -> RecordScan {
        try stale.check()
        return try await read { try $0.scan(request) }
    }

    public func departures(space: String, _ queries: [DepartureQuery]) async throws -> [PushRules.Key: [UInt8]] {
        guard !queries.isEmpty else { return [:] }
        return try await read { reader in
            let rows = try reader.db.query("""
                SELECT q.c, q.i, d.data
                  FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS q(c, i, a, u)
                  CROSS JOIN LATERAL (
                    SELECT data FROM departures
                     WHERE space_id = (SELECT space_id FROM spaces WHERE name = $1)
                       AND collection = q.c AND id = q.i AND seq > q.a AND seq <= q.u
                     ORDER BY seq LIMIT 1) d
                """, [.text(space), .textArray(queries.map(\.key.collection)), .textArray(queries.map(\.key.id)),
                      .intArray(queries.map(\.after)), .intArray(queries.map(\.upTo))])
            var out: [PushRules.Key: [UInt8]] = [:]
            for i in 0..<rows.count { out[PushRules.Key(collection: rows.text(i, 0), id: rows.text(i, 1))] = rows.bytes(i, 2) }
            return out
        }
    }

    public func viewScan(_ request: ViewScanRequest) async throws -> RecordScan {
        try stale.check()
        return try await read { try $0.viewScan(request) }
    }

    public func viewPage(_ request: ViewScanRequest, maxBytes: Int) async throws -> PageData? {
        try stale.check()
        return try await read { try $0.viewPage(request, maxBytes: maxBytes) }
    }

    public func viewIndexSpec() async throws -> String? {
        try await read { reader in
            let rows = try reader.db.query("SELECT value FROM meta WHERE key = 'view_index_spec'")
            return rows.count == 0 ? nil : rows.text(0, 0)
        }
    }

    public func forgetViewIndex() async throws {
        _ = try await read { try $0.db.run("DELETE FROM meta WHERE key = 'view_index_spec'") }
    }

    public func buildViewIndex(spec: String, keys: @escaping @Sendable (String, [UInt8]) -> [PushRules.IndexKey]) async throws -> Int {
        _ = try await read { reader in
            try reader.db.transaction {
                try reader.db.run("DELETE FROM meta WHERE key = 'view_index_spec'")
                try reader.db.run("DELETE FROM view_index")
            }
        }
        let spaces: [String] = try await read { reader in
            let rows = try reader.db.query("SELECT name FROM spaces ORDER BY space_id")
            return (0..<rows.count).map { rows.text($0, 0) }
        }
        var indexed = 0
        for space in spaces {
            var after: Int64 = 0
            while true {
                let from = after
                // Each batch under the space's row lock, as pushes take it: the keys it
                // writes are those of the records' states then, and a push after it keeps them.
                let (count, last): (Int, Int64?) = try await read { reader in
                    try reader.db.transaction {
                        let (storage, _) = try PostgresPushStorage.locking(space, on: reader.db, epoch: self.epoch)
                        let rows = try reader.db.query(
                            "SELECT seq, collection, data FROM records WHERE space_id = $1 AND seq > $2 AND NOT deleted ORDER BY seq LIMIT $3",
                            [.int(storage.spaceID), .int(from), .int(Int64(SQLiteSyncStore.indexBatch))])
                        var entries: [PushRules.IndexEntry] = []
                        for i in 0..<rows.count {
                            let seq = rows.int64(i, 0), collection = rows.text(i, 1)
                            for key in keys(collection, rows.bytes(i, 2)) { entries.append(PushRules.IndexEntry(key: key, seq: seq, collection: collection)) }
                        }
                        try storage.reindex(removing: [], adding: entries)
                        return (rows.count, rows.count == 0 ? nil : rows.int64(rows.count - 1, 0))
                    }
                }
                indexed += count
                guard let last, count == SQLiteSyncStore.indexBatch else { break }
                after = last
            }
        }
        _ = try await read { reader in
            try reader.db.run("""
                INSERT INTO meta(key, value) VALUES ('view_index_spec', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value
                """, [.text(spec)])
        }
        return indexed
    }

    public func head(space: String) async throws -> Int64 {
        try await read { reader in
            let rows = try reader.db.query("SELECT head_seq FROM spaces WHERE name = $1", [.text(space)])
            return rows.count == 0 ? 0 : rows.int64(0, 0)
        }
    }

    public func spaces(after: String, limit: Int) async throws -> [SpaceSummary] {
        try await read { reader in
            let rows = try reader.db.query(SpaceSummary.listingSQL { "$\($0)" }, [.text(after), .int(Int64(limit))])
            return (0..<rows.count).map { i in
                SpaceSummary(name: rows.text(i, 0), records: rows.int64(i, 2), tombstones: rows.int64(i, 3), head: rows.int64(i, 1),
                             lastWriteAt: rows.optionalInt64(i, 4), horizon: rows.int64(i, 5), recordBytes: rows.int64(i, 6))
            }
        }
    }

    public func waitForCommit(space: String, afterSeq: Int64, deadline: ContinuousClock.Instant) async -> Bool {
        await notifier.wait(space: space, afterSeq: afterSeq, deadline: deadline)
    }

    public func sweepChangeIDs(appliedBefore cutoff: Int64) async throws -> Int {
        var total = 0
        while true {
            // In slices, so no transaction holds many row locks for long.
            let deleted: Int = try await read { reader in
                try reader.db.run("""
                    DELETE FROM applied_changes WHERE ctid = ANY(ARRAY(
                      SELECT ctid FROM applied_changes WHERE applied_at < $1 LIMIT 5000))
                    """, [.int(cutoff)])
            }
            total += deleted
            if deleted < 5000 { return total }
        }
    }

    public func compact(tombstonesBefore cutoff: Int64) async throws -> Compaction {
        try await Compaction.run {
            try await read { reader in try Compaction.slice(PostgresSession(db: reader.db), before: cutoff) }
        }
    }

    public func horizon(space: String) async throws -> Int64 {
        try await read { reader in
            let rows = try reader.db.query("SELECT horizon_seq FROM spaces WHERE name = $1", [.text(space)])
            return rows.count == 0 ? 0 : rows.int64(0, 0)
        }
    }

    public func isWritable() async -> Bool {
        guard !stale.isStale else { return false }
        return (try? await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Bool, any Error>) in
            let job = PostgresWriteJob.other { db in
                continuation.resume(with: Result {
                    // A hot standby, or a primary that lost its connection, cannot write.
                    try !db.query("SELECT pg_is_in_recovery()").bool(0, 0)
                })
            }
            if !writers[0].submit(job) { continuation.resume(throwing: StoreError("the store is closed")) }
        }) ?? false
    }

    public func close() async {
        let writers = self.writers, readers = self.readers, listener = self.listener
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                listener.stop()
                for w in writers { w.stop() }
                for r in readers { r.stop() }
                c.resume()
            }
        }
    }

    /// The writer of `space`: the same for every push of the space in this process (FNV-1a
    /// of its name, so the choice does not depend on the process's hash seed).
    private func writer(for space: String) -> WorkerThread<PostgresWriteJob> {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in space.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        return writers[Int(hash % UInt64(writers.count))]
    }

    private func read<T: Sendable>(_ body: @escaping @Sendable (PostgresReader) throws -> T) async throws -> T {
        let index = nextReader.wrappingAdd(1, ordering: .relaxed).oldValue % readers.count
        return try await withCheckedThrowingContinuation { continuation in
            let job = PostgresReadJob { reader, error in
                if let error { continuation.resume(throwing: error); return }
                continuation.resume(with: Result {
                    do {
                        return try body(reader!)
                    } catch let error as PostgresError where error.connectionLost {
                        // Reads (and the idempotent sweep) are safe to run again on a new
                        // connection after the old one was closed under them.
                        try reader!.db.reconnectIfNeeded()
                        return try body(reader!)
                    }
                })
            }
            if !readers[index].submit(job) { continuation.resume(throwing: StoreError("the store is closed")) }
        }
    }
}

/// Whether the database's epoch moved away from the store's, shared by its threads.
final class StaleEpoch: Sendable {
    private let state = Mutex<(stale: Bool, reported: Bool)>((false, false))
    private let handler: (@Sendable (Epoch?) -> Void)?

    init(handler: (@Sendable (Epoch?) -> Void)?) {
        self.handler = handler
    }

    var isStale: Bool { state.withLock { $0.stale } }

    /// Throws once the epoch changed: this instance no longer serves.
    func check() throws {
        if isStale { throw StoreError("the database's epoch was rotated; this server is shutting down to restart on the new epoch") }
    }

    /// Records that the database now has `epoch`; the handler runs once, on its own thread.
    func mark(_ epoch: Epoch?) {
        let first = state.withLock { s -> Bool in
            s.stale = true
            defer { s.reported = true }
            return !s.reported
        }
        guard first else { return }
        Log.error("the database's epoch changed; this server stops serving", ["epoch": epoch?.rawValue ?? "-"])
        if let handler { Thread.detachNewThread { handler(epoch) } }
    }
}

// MARK: - Jobs

enum PostgresWriteJob: Sendable {
    case push(PushJob)
    case other(@Sendable (PostgresConnection) -> Void)
}

struct PostgresReadJob: Sendable {
    /// Called with the reader, or with the error that kept it from connecting.
    let run: @Sendable (PostgresReader?, (any Error)?) -> Void
}

// MARK: - Writer

/// Owned by the writer thread; never touched elsewhere. Its pushes go through
/// `GroupCommit`: one transaction per group, each push storing its space's counters in
/// its own write statement (`PostgresPushStorage.write`), under the space's row lock.
final class PostgresWriter: GroupWriter {
    let db: PostgresConnection
    let epoch: Epoch
    let notifier: CommitNotifier
    let stale: StaleEpoch
    /// Whether pushes write the webhook outbox.
    let outbox: Bool
    /// The most record bytes a space may hold; nil for no limit.
    let recordQuota: Int64?

    init(db: PostgresConnection, epoch: Epoch, notifier: CommitNotifier, stale: StaleEpoch, outbox: Bool = false, recordQuota: Int64? = nil) {
        self.db = db
        self.epoch = epoch
        self.notifier = notifier
        self.stale = stale
        self.outbox = outbox
        self.recordQuota = recordQuota
    }

    func handle(_ jobs: [PostgresWriteJob]) {
        var pushes: [PushJob] = []
        for job in jobs {
            switch job {
            case .push(let p):
                pushes.append(p)
            case .other(let body):
                if !pushes.isEmpty { GroupCommit.run(pushes, on: self) }
                pushes.removeAll()
                _ = try? db.reconnectIfNeeded()
                body(db)
            }
        }
        if !pushes.isEmpty { GroupCommit.run(pushes, on: self) }
    }

    // MARK: GroupWriter

    /// Connects again when the connection was lost while idle, begins, and locks the
    /// spaces' rows in name order when the group writes more than one, so two groups that
    /// touch the same spaces cannot deadlock.
    func begin(spaces: [String]) throws {
        try db.reconnectIfNeeded()
        try db.execute("BEGIN")
        if spaces.count > 1 { try db.query("SELECT outpost_lock_spaces($1)", [.textArray(spaces)]) }
    }

    /// Locks the space's row (creating it when missing) and checks the epoch in the same
    /// statement; the push then takes five round trips at most, whatever its size.
    func storage(for job: PushJob) throws -> (PostgresPushStorage, PushRules.Space) {
        var (storage, counters) = try PostgresPushStorage.locking(job.space, on: db, epoch: epoch)
        if outbox { storage.outboxAt = job.now }
        return (storage, counters)
    }

    /// Each push stored its counters with its writes.
    func commit(touched: [String: PushRules.Space]) throws {
        try db.execute("COMMIT")
    }

    func rollback() {
        if db.isInTransaction { try? db.execute("ROLLBACK") }
    }

    /// A lost connection before anything was sent (the server closed it while idle: a
    /// restart, a failover) and a deadlock or serialization failure run the group again;
    /// an epoch rotated under the instance stops it; a failure of a push's own statements
    /// is that push's; anything else is the transaction's (after a lost connection its
    /// commit may or may not have happened: the client's retry is safe, replays answer it).
    func failure(_ error: any Error, at phase: GroupCommit.Phase) -> GroupCommit.Failure {
        if error is EpochRotated {
            stale.mark(nil)
            return .group(answer: StoreError("the database's epoch was rotated; this server no longer serves"))
        }
        let pg = error as? PostgresError
        if pg?.isRetryable ?? false { return .retry }
        if pg?.connectionLost ?? false {
            if phase == .begin { Log.error("PostgreSQL writer connection lost; reconnecting", ["error": "\(error)"]) }
            return phase == .begin ? .retry : .group(answer: error)
        }
        return phase == .push ? .push : .group(answer: error)
    }
}

/// The database's epoch is no longer the store's: it was rotated under a running instance.
struct EpochRotated: Error, CustomStringConvertible {
    var description: String { "the database's epoch was rotated; this server no longer serves" }
}

/// `PushStorage` on a PostgreSQL writer's connection, inside its transaction, with the
/// space's row locked. Each set is one statement over arrays (`unnest`), so a push costs
/// the same few round trips whatever its size. The write stores the records, the change
/// ids and the new head in one statement and calls `pg_notify`, which PostgreSQL delivers
/// to every listening instance when (and only if) the transaction commits.
struct PostgresPushStorage: PushStorage {
    let db: PostgresConnection
    let spaceID: Int64
    let space: String
    let epoch: Epoch
    /// While webhooks are configured, the push's time: every record written also gets a
    /// row in `webhook_outbox`, in the same statement (`WebhookOutbox`).
    var outboxAt: Int64? = nil

    /// The storage of `space` in the transaction open on `db`, with the space's counters
    /// read under its row lock, held until the transaction ends (see "Seq allocation" on
    /// `PostgresSyncStore`); creates the space's row when missing. Checks in the same
    /// snapshot that the database still has `epoch`.
    static func locking(_ space: String, on db: PostgresConnection, epoch: Epoch) throws -> (PostgresPushStorage, PushRules.Space) {
        let lock = "SELECT s.space_id, s.head_seq, (SELECT value FROM meta WHERE key = 'epoch'), s.record_bytes FROM spaces s WHERE s.name = $1 FOR UPDATE OF s"
        var rows = try db.query(lock, [.text(space)])
        if rows.count == 0 {
            try db.run("INSERT INTO spaces(name) VALUES ($1) ON CONFLICT (name) DO NOTHING", [.text(space)])
            rows = try db.query(lock, [.text(space)])
        }
        guard rows.count == 1 else { throw StoreError("space \(space) could not be locked") }
        guard rows.optionalText(0, 2) == epoch.rawValue else { throw EpochRotated() }
        return (PostgresPushStorage(db: db, spaceID: rows.int64(0, 0), space: space, epoch: epoch),
                PushRules.Space(head: rows.int64(0, 1), recordBytes: rows.int64(0, 3)))
    }

    func applied(_ changeIds: [String]) throws -> [String: PushRules.Applied] {
        let rows = try db.query("""
            SELECT change_id, fingerprint, epoch, seq, applied_at FROM applied_changes
             WHERE space_id = $1 AND change_id = ANY($2)
            """, [.int(spaceID), .textArray(changeIds)])
        var out: [String: PushRules.Applied] = [:]
        for i in 0..<rows.count {
            guard let e = Epoch(rows.text(i, 2)) else { throw StoreError("the idempotency row of \(rows.text(i, 0)) names no valid epoch") }
            out[rows.text(i, 0)] = PushRules.Applied(fingerprint: rows.bytes(i, 1), version: Version(epoch: e, seq: rows.int64(i, 3)), appliedAt: rows.int64(i, 4))
        }
        return out
    }

    func heads(_ keys: [PushRules.Key]) throws -> [PushRules.Key: PushRules.Head] {
        let rows = try db.query("""
            SELECT r.collection, r.id, r.seq, r.lineage, r.same_as, coalesce(octet_length(r.data), 0)
              FROM unnest($2::text[], $3::text[]) AS k(collection, id)
              JOIN records r ON r.space_id = $1 AND r.collection = k.collection AND r.id = k.id
            """, [.int(spaceID), .textArray(keys.map(\.collection)), .textArray(keys.map(\.id))])
        var out: [PushRules.Key: PushRules.Head] = [:]
        out.reserveCapacity(rows.count)
        for i in 0..<rows.count {
            out[PushRules.Key(collection: rows.text(i, 0), id: rows.text(i, 1))] = PushRules.Head(
                seq: rows.int64(i, 2), lineage: rows.optionalText(i, 3).flatMap(Version.init), sameAs: rows.optionalText(i, 4).flatMap(Version.init),
                dataBytes: rows.int64(i, 5))
        }
        return out
    }

    func currents(_ keys: [PushRules.Key]) throws -> [PushRules.Key: RecordState] {
        let rows = try db.query(Self.currentsSQL, [.int(spaceID), .textArray(keys.map(\.collection)), .textArray(keys.map(\.id))])
        var out: [PushRules.Key: RecordState] = [:]
        for i in 0..<rows.count {
            let state = try RecordRow().state(PostgresRow(rows: rows, index: i), epoch: epoch)
            out[PushRules.Key(collection: state.collection, id: state.id)] = state
        }
        return out
    }

    private static let currentsSQL = """
        SELECT \(RecordRow.select("r"))
          FROM unnest($2::text[], $3::text[]) AS k(collection, id)
          JOIN records r ON r.space_id = $1 AND r.collection = k.collection AND r.id = k.id
        """

    func write(_ writes: [PushRules.Write], remember: [PushRules.Remember], space counters: PushRules.Space) throws {
        try db.query(Self.writeSQL, [.int(spaceID)] + RecordRow.postgresArrays(writes) + [
            .text(epoch.rawValue),
            .textArray(remember.map(\.changeId)), .bytesArray(remember.map(\.fingerprint)),
            .intArray(remember.map(\.seq)), .intArray(remember.map(\.appliedAt)),
            .int(counters.head), .text(space), outboxAt.map { .int($0) } ?? .null, .int(counters.recordBytes),
        ])
    }

    /// The records (from `$2`, one array per column: `RecordRow.postgresUnnest`), the change
    /// ids, the head and the outbox rows of a push in one statement.
    private static let writeSQL: String = {
        // The statement's own parameters follow the space id and the records' arrays.
        let first = 2 + RecordColumn.allCases.count
        let epoch = "$\(first)", changes = (1...4).map { "$\(first + $0)" }
        let head = "$\(first + 5)", space = "$\(first + 6)", outboxAt = "$\(first + 7)::bigint", recordBytes = "$\(first + 8)"
        return """
            WITH written AS (
              INSERT INTO records AS r (space_id, \(RecordRow.insertColumns))
              SELECT $1, * FROM unnest(\(RecordRow.postgresUnnest(first: 2)))
              ON CONFLICT (space_id, collection, id) DO UPDATE SET \(RecordRow.updateSet)
              RETURNING \(RecordRow.select("r", subject: true))),
            queued AS (
              INSERT INTO webhook_outbox(\(OutboxRow.insertColumns))
              SELECT $1, \(epoch), \(outboxAt), \(RecordRow.select("w", subject: true))
                FROM written w WHERE \(outboxAt) IS NOT NULL ORDER BY w.seq
              RETURNING 1),
            remembered AS (
              INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at)
              SELECT $1, c, f, \(epoch), s, a
                FROM unnest(\(changes[0])::text[], \(changes[1])::bytea[], \(changes[2])::bigint[], \(changes[3])::bigint[]) AS t(c, f, s, a)
              RETURNING 1),
            bound AS (
              INSERT INTO client_subjects(space_id, client_id, subject)
              SELECT DISTINCT ON (w.updated_by) $1, w.updated_by, w.subject FROM written w ORDER BY w.updated_by, w.seq DESC
              ON CONFLICT (space_id, client_id) DO UPDATE SET subject = excluded.subject WHERE client_subjects.subject <> excluded.subject
              RETURNING 1),
            moved AS (UPDATE spaces SET head_seq = \(head), record_bytes = \(recordBytes) WHERE space_id = $1 RETURNING 1)
            SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM remembered), (SELECT count(*) FROM moved),
                   pg_notify('outpost_commits', \(space) || ' ' || \(head))
            """
    }()

    func epochHistory() throws -> PushRules.EpochHistory {
        // One statement: every ended epoch, each row with when the history began.
        let rows = try db.query("""
            SELECT (SELECT value FROM meta WHERE key = 'history_began_at'), e.epoch, e.ended_at
              FROM (SELECT 1) AS one LEFT JOIN epoch_history e ON true
            """)
        guard rows.count > 0, let began = rows.optionalText(0, 0).flatMap({ Int64($0) }) else {
            throw StoreError("the database's epoch history has no beginning (meta history_began_at)")
        }
        var history = PushRules.EpochHistory(began: began)
        for i in 0..<rows.count {
            if let epoch = rows.optionalText(i, 1).flatMap(Epoch.init), let at = rows.optionalInt64(i, 2) { history.end([epoch: at]) }
        }
        return history
    }

    func deletedCopies(_ tombstones: [PushRules.Key: Int64]) throws -> [PushRules.Key: [UInt8]] {
        let list = Array(tombstones)
        let rows = try db.query("""
            SELECT d.collection, d.id, d.data FROM unnest($2::text[], $3::text[], $4::bigint[]) AS k(collection, id, seq)
              JOIN departures d ON d.space_id = $1 AND d.collection = k.collection AND d.id = k.id AND d.seq = k.seq
            """, [.int(spaceID), .textArray(list.map(\.key.collection)), .textArray(list.map(\.key.id)), .intArray(list.map(\.value))])
        var out: [PushRules.Key: [UInt8]] = [:]
        for i in 0..<rows.count { out[PushRules.Key(collection: rows.text(i, 0), id: rows.text(i, 1))] = rows.bytes(i, 2) }
        return out
    }

    /// One statement: the replaced states' keys go and the new ones come.
    func reindex(removing: [PushRules.IndexEntry], adding: [PushRules.IndexEntry]) throws {
        try db.run("""
            WITH gone AS (DELETE FROM view_index v USING unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS g(scope, path, key, seq)
                          WHERE v.space_id = $1 AND v.scope = g.scope AND v.path = g.path AND v.key = g.key AND v.seq = g.seq)
            INSERT INTO view_index(space_id, scope, path, key, seq, collection)
            SELECT $1, * FROM unnest($6::text[], $7::text[], $8::text[], $9::bigint[], $10::text[])
            ON CONFLICT DO NOTHING
            """, [.int(spaceID), .textArray(removing.map(\.key.scope)), .textArray(removing.map(\.key.path)),
                  .textArray(removing.map(\.key.key)), .intArray(removing.map(\.seq)),
                  .textArray(adding.map(\.key.scope)), .textArray(adding.map(\.key.path)),
                  .textArray(adding.map(\.key.key)), .intArray(adding.map(\.seq)), .textArray(adding.map(\.collection))])
    }

    func depart(_ departures: [PushRules.Departure]) throws {
        try db.run("""
            INSERT INTO departures(space_id, collection, id, seq, data)
            SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bytea[])
            ON CONFLICT DO NOTHING
            """, [.int(spaceID), .textArray(departures.map(\.key.collection)), .textArray(departures.map(\.key.id)),
                  .intArray(departures.map(\.seq)), .bytesArray(departures.map(\.data))])
    }
}

// MARK: - Readers

/// Owned by one reader thread.
final class PostgresReader: PageReader {
    let db: PostgresConnection
    let epoch: Epoch
    let stale: StaleEpoch

    init(db: PostgresConnection, epoch: Epoch, stale: StaleEpoch) {
        self.db = db
        self.epoch = epoch
        self.stale = stale
    }

    /// The store's one read of a page of records: the space's counters and the rows in one
    /// statement (`pageSQL`); the departures checked in a transaction with it, so in the
    /// same snapshot.
    func read<Sink: RecordSink>(_ source: RecordSource, into sink: inout Sink, wholeOnly: Bool) throws -> PageEnd? {
        guard !source.isEmpty else {
            let rows = try db.query("SELECT head_seq, horizon_seq FROM spaces WHERE name = $1", [.text(source.space)])
            return rows.count == 0 ? PageEnd(head: 0, horizon: 0) : PageEnd(head: rows.int64(0, 0), horizon: rows.int64(0, 1))
        }
        guard wholeOnly, let departures = source.departures else { return try take(rows(source), into: &sink) }
        return try db.transaction("ISOLATION LEVEL REPEATABLE READ READ ONLY") {
            if let departed = try rows(.view(departures)), !departed.isNull(0, Self.codec.base) { return nil }
            return try take(rows(source), into: &sink)
        }
    }

    /// Hands the records of `rows` to `sink` until it is full; where they end (nothing
    /// when the space does not exist).
    private func take<Sink: RecordSink>(_ rows: PostgresRows?, into sink: inout Sink) -> PageEnd {
        guard let rows else { return PageEnd(head: 0, horizon: 0) }
        for i in 0..<rows.count where !rows.isNull(i, Self.codec.base) {
            guard sink.take(PostgresRow(rows: rows, index: i), Self.codec) else { break }
        }
        return PageEnd(head: rows.int64(0, 0), horizon: rows.int64(0, 2))
    }

    /// The columns of `pageSQL`: the space's head, the database's epoch, the space's
    /// horizon, then the record's (none, one NULL row, when the space has no record).
    private static let codec = RecordRow(base: 3)

    /// One statement, so one snapshot: the space's head, the database's epoch and the
    /// records `condition` finds are read together (the visibility argument on
    /// `PostgresSyncStore` needs exactly this). `$1` is the space's name, `$3` the limit.
    private static func pageSQL(_ condition: String) -> String {
        """
        SELECT s.head_seq, (SELECT value FROM meta WHERE key = 'epoch'), s.horizon_seq, \(RecordRow.select("r"))
        FROM spaces s LEFT JOIN LATERAL (
            SELECT \(RecordRow.pullColumns) FROM records
            WHERE space_id = s.space_id AND \(condition)
            ORDER BY seq LIMIT $3) r ON true
        WHERE s.name = $1
        ORDER BY r.seq
        """
    }

    /// The statements of the records after a cursor (`$2`), of every collection or of the
    /// list `$4`.
    private static let afterSQL = pageSQL("seq > $2")
    private static let afterInSQL = pageSQL("seq > $2 AND collection = ANY($4)")

    /// The rows of `pageSQL` for `source` (none when the space does not exist), after
    /// checking the database's epoch is still the store's.
    private func rows(_ source: RecordSource) throws -> PostgresRows? {
        let sql: String, parameters: [PostgresValue]
        switch source {
        case .after(let request):
            let list = request.collections.flatMap { $0.isEmpty ? nil : $0 }
            sql = list == nil ? Self.afterSQL : Self.afterInSQL
            parameters = [.text(request.space), .int(request.afterSeq), .int(Int64(request.limit) + 1)] + (list.map { [.textArray($0)] } ?? [])
        case .view(let request):
            let (seqs, view) = request.seqsSQL(space: "s.space_id", first: 2, placeholder: { "$\($0)" }, inList: { "\($0) = ANY(\($1))" })
            sql = Self.pageSQL("seq IN (\(seqs))")
            parameters = [.text(request.space)] + view.map { parameter -> PostgresValue in
                switch parameter {
                case .integer(let v): return .int(v)
                case .text(let t): return .text(t)
                case .texts(let list): return .textArray(list)
                }
            }
        }
        let rows = try db.query(sql, parameters)
        guard rows.count > 0 else { return nil }
        guard rows.text(0, 1) == epoch.rawValue else {
            stale.mark(Epoch(rows.text(0, 1)))
            try stale.check()
            throw StoreError("epoch changed")
        }
        return rows
    }
}

// MARK: - Listener

/// The thread that `LISTEN`s for commits and epoch changes of every instance and wakes
/// this instance's long polls. It owns its connection; `stop` ends it within one poll
/// interval.
final class PostgresListener: Sendable {
    private let running = Atomic<Bool>(true)
    private let finished = DispatchSemaphore(value: 0)

    /// Connects (so a bad URL fails at start) and starts listening.
    init(url: String, epoch: Epoch, notifier: CommitNotifier, stale: StaleEpoch) throws {
        let first = try Self.connect(url)
        let box = ConnectionBox(first)
        let thread = Thread { [self] in
            outpost_set_thread_name("pg-listener")
            var db: PostgresConnection? = box.take()
            while self.running.load(ordering: .relaxed) {
                do {
                    if db == nil {
                        db = try Self.connect(url)
                        // Notifications sent while disconnected are lost: let every
                        // waiting pull read again.
                        notifier.wakeAll()
                    }
                    for n in try db!.waitForNotifications(timeoutMs: 200) {
                        if n.channel == "outpost_commits" {
                            let parts = n.payload.split(separator: " ")
                            if parts.count == 2, let head = Int64(parts[1]) { notifier.committed(space: String(parts[0]), head: head) }
                        } else if n.channel == "outpost_epoch", n.payload != epoch.rawValue {
                            stale.mark(Epoch(n.payload))
                        }
                    }
                } catch {
                    Log.error("PostgreSQL listener lost its connection; reconnecting", ["error": "\(error)"])
                    db?.close()
                    db = nil
                    usleep(500_000)
                }
            }
            db?.close()
            self.finished.signal()
        }
        thread.name = "pg-listener"
        thread.stackSize = 1 << 20
        thread.start()
    }

    private static func connect(_ url: String) throws -> PostgresConnection {
        let db = try PostgresSyncStore.open(url)
        try db.execute("LISTEN outpost_commits; LISTEN outpost_epoch")
        return db
    }

    /// Stops the thread and waits for it. Blocks: call it off the cooperative pool.
    func stop() {
        guard running.exchange(false, ordering: .relaxed) else { return }
        finished.wait()
    }
}

/// Hands a connection made on one thread to the thread that will own it, exactly once.
///
/// `@unchecked Sendable`: the connection is stored before the thread starts (`Thread.start`
/// is a happens-before edge), and `take` runs once, on that thread, under the mutex; after
/// it the box is empty and the connection belongs to that thread alone.
final class ConnectionBox: @unchecked Sendable {
    private let slot: Mutex<Void>
    private var connection: PostgresConnection?

    init(_ connection: PostgresConnection) {
        self.connection = connection
        self.slot = Mutex(())
    }

    func take() -> PostgresConnection? {
        slot.withLock { _ in
            defer { connection = nil }
            return connection
        }
    }
}
