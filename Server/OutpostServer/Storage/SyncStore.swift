import OutpostCore
import OutpostSyncRules

/// A change ready for the store: checked (`PushRules.check`), with its fingerprint and
/// its `data` encoded. The CPU work (JSON encoding, SHA-256) happens in the handler, on the
/// concurrency pool, so the store's writer spends its time on SQL only; the handler drops
/// the parsed `data` once the encoded form is kept (a judge keeps what it reads).
public typealias PreparedChange = PushRules.Input

/// One entry of a push to apply: a prepared change, or one already rejected by the
/// handler (invalid, too large) whose result only keeps its place in the order.
public typealias PushItem = PushRules.Item

/// The encoded `changes` of one pull page and where it ends.
public struct PageData: Sendable {
    /// The epoch the page was read in.
    public var epoch: Epoch
    /// The JSON array of records, `[...]`, ready to be sent.
    public var changesJSON: [UInt8]
    /// How many records the page holds.
    public var count: Int
    /// Seq of the last record in the page, or nil when the page is empty.
    public var lastSeq: Int64?
    /// True when records after the page exist.
    public var hasMore: Bool
    /// The space's newest seq in this epoch when the page was read.
    public var head: Int64
    /// The space's history horizon when the page was read (`SyncStore.compact`): a cursor
    /// before it may have missed a purged delete.
    public var horizon: Int64

    public init(epoch: Epoch, changesJSON: [UInt8], count: Int, lastSeq: Int64?, hasMore: Bool, head: Int64, horizon: Int64 = 0) {
        self.epoch = epoch
        self.changesJSON = changesJSON
        self.count = count
        self.lastSeq = lastSeq
        self.hasMore = hasMore
        self.head = head
        self.horizon = horizon
    }
}

/// What a pull asks the store for.
public struct PageRequest: Sendable {
    public var space: String
    /// Records with a seq greater than this.
    public var afterSeq: Int64
    public var limit: Int
    /// Most bytes of encoded records (at least one record is always included).
    public var maxBytes: Int
    public var collections: [String]?

    public init(space: String, afterSeq: Int64, limit: Int, maxBytes: Int, collections: [String]?) {
        self.space = space
        self.afterSeq = afterSeq
        self.limit = limit
        self.maxBytes = maxBytes
        self.collections = collections
    }
}

/// One stored record state as a pull under rules reads it (docs/rules.md): the page is
/// chosen in Swift, by the token's view, not by the store's SQL.
public struct StoredRecord: Sendable {
    public var collection: String
    public var id: String
    public var seq: Int64
    public var deleted: Bool
    /// The data as stored (JSON); nil for a tombstone.
    public var data: [UInt8]?
    public var updatedAt: Int64
    public var updatedBy: String
    public var clientTime: Int64?
    public var lineage: String?
    public var sameAs: String?
    /// The stored mark of the resolved write that stored this state (`Resolved.stored`);
    /// nil for any other state.
    public var resolved: String? = nil
    /// The authenticated subject of the push that wrote it, when read for an operator (the
    /// admin console); nil in a pull's reads, and for a state written before it was kept.
    public var subject: String? = nil

    public var key: PushRules.Key { PushRules.Key(collection: collection, id: id) }

    /// Appends the record's wire form (docs/protocol.md section 5) to `out`.
    public func append(to out: inout [UInt8], epoch: Epoch) {
        func encode(_ data: UnsafeRawBufferPointer?) {
            RecordJSON.append(to: &out, collection: collection, id: id, epoch: epoch, seq: seq, deleted: deleted, data: data,
                              updatedAt: updatedAt, updatedBy: updatedBy, clientTime: clientTime, lineage: lineage, sameAs: sameAs,
                              resolved: resolved, subject: subject)
        }
        if let data, !deleted { data.withUnsafeBytes { encode($0) } } else { encode(nil) }
    }
}

/// The records after a cursor, in seq order, as `SyncStore.scan` reads them.
public struct RecordScan: Sendable {
    public var records: [StoredRecord]
    /// True when records after the last one exist.
    public var hasMore: Bool
    /// The space's newest seq when the scan was read.
    public var head: Int64

    public init(records: [StoredRecord], hasMore: Bool, head: Int64) {
        self.records = records
        self.hasMore = hasMore
        self.head = head
    }
}

/// Which departure a pull under rules needs of one record: the first one kept after the
/// cursor (`after`) and no later than the record's state it read (`upTo`).
public struct DepartureQuery: Sendable {
    public var key: PushRules.Key
    public var after: Int64
    public var upTo: Int64

    public init(key: PushRules.Key, after: Int64, upTo: Int64) {
        self.key = key
        self.after = after
        self.upTo = upTo
    }
}

/// A failure of the store itself (not of a change): the request cannot be served now.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The storage behind the sync service: everything the handlers need and nothing about
/// HTTP. SQLite is the default; a PostgreSQL implementation for several servers sharing
/// one history plugs in here without touching the handlers.
///
/// Rules every implementation keeps (docs/protocol.md sections 1, 4, 5):
/// - `push` applies changes in array order, each on its own; an `applied` result is
///   returned only after its write, its seq and its idempotency row are committed in one
///   transaction.
/// - A seq is never handed out twice in an epoch, also after a crash.
/// - A page lists records whose latest seq is after the cursor, in seq order, each once.
public protocol SyncStore: Sendable {
    /// The current epoch.
    var epoch: Epoch { get }

    /// Wakes this process's long polls (and counts them for `/metrics`); knows the newest
    /// head committed per space. Implementations tell it about a commit before they answer
    /// the push that made it (`PageCoalescer` relies on that).
    var notifier: CommitNotifier { get }

    /// Pushes and other writes waiting for a writer, not yet taken into a transaction: a
    /// figure that keeps growing means writes arrive faster than the store commits them.
    var queuedWrites: Int { get }

    /// Applies a push by `clientId` (the device's name for itself) under the token subject
    /// `subject`, and returns one result per item, in order. With a `judge` (a server with
    /// rules), `PushRules` asks it about every change and keeps the departures it names, in
    /// the same transaction.
    func push(space: String, clientId: String, subject: String, items: [PushItem], now: Int64, judge: (any PushJudge)?) async throws -> [PushResult]

    /// Reads one page. The server's stores read it, `scan`, `viewScan` and `viewPage` in
    /// one way (`PageReader`), each a source of records and a sink of their rows.
    func page(_ request: PageRequest) async throws -> PageData

    /// Reads at most `request.limit` records after `request.afterSeq` (of
    /// `request.collections`, when set), in seq order, for a pull under rules; the byte
    /// budget is the caller's.
    func scan(_ request: PageRequest) async throws -> RecordScan

    /// For each query, the data of the first departure of its record in its range, when
    /// there is one (docs/rules.md).
    func departures(space: String, _ queries: [DepartureQuery]) async throws -> [PushRules.Key: [UInt8]]

    /// The records a page under rules reads from the view index (docs/rules.md, "Cost"):
    /// the first `request.limit` in seq order after `request.afterSeq` that the request's
    /// lookups find, or that departed since `request.heldAt`, with the head in the same
    /// snapshot.
    func viewScan(_ request: ViewScanRequest) async throws -> RecordScan

    /// `viewScan`'s records encoded as a page of at most `maxBytes`, for a view whose
    /// lookups find only records it admits: every record found is sent. Nil when a record
    /// departed since `request.heldAt` follows `request.afterSeq` (in the same snapshot):
    /// that page needs each record decided (`viewScan`).
    func viewPage(_ request: ViewScanRequest, maxBytes: Int) async throws -> PageData?

    /// The spec (`ViewIndex.spec`) the view index was last built for whole; nil when it
    /// was never built, or a server without rules opened the store since (`forgetViewIndex`).
    func viewIndexSpec() async throws -> String?

    /// Builds the view index again for `spec` from every live record, `keys` giving a
    /// record's keys from its collection and stored data. Writes during the build keep
    /// the index (their judge gives their keys), so pages use it once the build records
    /// `spec`. Returns the number of records indexed.
    func buildViewIndex(spec: String, keys: @escaping @Sendable (String, [UInt8]) -> [PushRules.IndexKey]) async throws -> Int

    /// Records that the view index is not kept: a server without rules writes without it.
    func forgetViewIndex() async throws

    /// The newest seq of a space in the current epoch (0 when it has none).
    func head(space: String) async throws -> Int64

    /// Suspends until a commit in `space` makes its head greater than `afterSeq`, the
    /// deadline passes, or the task is cancelled. Holds no thread while waiting.
    /// Returns true when woken by a commit.
    func waitForCommit(space: String, afterSeq: Int64, deadline: ContinuousClock.Instant) async -> Bool

    /// Deletes idempotency records applied before `cutoff` (ms since 1970); returns how many.
    func sweepChangeIDs(appliedBefore cutoff: Int64) async throws -> Int
    /// Purges the tombstones last written before `cutoff` (ms since 1970), in slices, and
    /// moves each space's history horizon up to the newest seq it purged
    /// (docs/operating.md, "Compaction").
    func compact(tombstonesBefore cutoff: Int64) async throws -> Compaction
    /// The space's history horizon (0 when nothing was purged).
    func horizon(space: String) async throws -> Int64

    /// True when the store is open and a write transaction can start.
    func isWritable() async -> Bool

    /// At most `limit` spaces whose names sort after `after` (bytewise), in name order,
    /// with their counts: the operator's list (`GET /v1/admin/spaces`).
    func spaces(after: String, limit: Int) async throws -> [SpaceSummary]

    /// Closes the store: queued work finishes, then connections close.
    func close() async
}

/// What one compaction purged.
public struct Compaction: Sendable, Equatable {
    /// Tombstones purged.
    public var purged: Int
    /// The bytes of the rows purged (key, metadata and row overhead; a tombstone has no
    /// data), which the store's file reuses.
    public var reclaimedBytes: Int64
    /// The spaces whose horizon moved, and their new horizons.
    public var horizons: [String: Int64]

    public init(purged: Int = 0, reclaimedBytes: Int64 = 0, horizons: [String: Int64] = [:]) {
        self.purged = purged
        self.reclaimedBytes = reclaimedBytes
        self.horizons = horizons
    }

    /// Purges one slice of the tombstones last written before `cutoff`, oldest first, in
    /// one transaction of `db` (either store's: the SQL is written once), and moves the
    /// horizon of each space it purged in. A tombstone written again meanwhile (a new seq,
    /// or not deleted) is not matched by the delete. Returns what it did and whether it was
    /// the last slice.
    static func slice(_ db: any SQLSession, before cutoff: Int64) throws -> (Compaction, last: Bool) {
        try db.transaction(.process) {
            var slice = Compaction()
            // `deleted = (1 = 1)`: true in both dialects (SQLite stores 1, PostgreSQL a boolean).
            let rows = try db.query("""
                SELECT r.space_id, s.name, r.collection, r.id, r.seq, length(r.collection) + length(r.id) + length(r.updated_by) + 48
                  FROM records r JOIN spaces s ON s.space_id = r.space_id
                 WHERE r.deleted = (1 = 1) AND r.updated_at < ?
                 ORDER BY r.updated_at LIMIT ?
                """, [.integer(cutoff), .integer(Int64(sliceSize))]) {
                (space: $0.int64(0), name: $0.text(1), collection: $0.text(2), id: $0.text(3), seq: $0.int64(4), bytes: $0.int64(5))
            }
            // The spaces' rows first, in name order as pushes lock them: on PostgreSQL a push
            // holding one reads its records' sizes under that lock, so a tombstone is not
            // purged between its read and its write (its bytes would be taken off twice).
            var names: [Int64: String] = [:]
            for row in rows { names[row.space] = row.name }
            for (id, _) in names.sorted(by: { Array($0.value.utf8).lexicographicallyPrecedes(Array($1.value.utf8)) }) {
                try db.run("UPDATE spaces SET record_bytes = record_bytes WHERE space_id = ?", [.integer(id)])
            }
            var spaces: [Int64: (name: String, seq: Int64, bytes: Int64)] = [:]
            for row in rows {
                let deleted = try db.run("DELETE FROM records WHERE space_id = ? AND collection = ? AND id = ? AND seq = ? AND deleted = (1 = 1)",
                                         [.integer(row.space), .text(row.collection), .text(row.id), .integer(row.seq)])
                guard deleted == 1 else { continue }
                slice.purged += 1
                slice.reclaimedBytes += row.bytes
                let key = PushRules.Key(collection: row.collection, id: row.id)
                spaces[row.space] = (row.name, max(spaces[row.space]?.seq ?? 0, row.seq),
                                     (spaces[row.space]?.bytes ?? 0) + PushRules.recordBytes(key, dataBytes: 0))
            }
            for (id, space) in spaces {
                try db.run("UPDATE spaces SET horizon_seq = CASE WHEN horizon_seq < ? THEN ? ELSE horizon_seq END, record_bytes = record_bytes - ? WHERE space_id = ?",
                           [.integer(space.seq), .integer(space.seq), .integer(space.bytes), .integer(id)])
                slice.horizons[space.name] = try db.queryOne("SELECT horizon_seq FROM spaces WHERE space_id = ?", [.integer(id)]) { $0.int64(0) } ?? space.seq
            }
            return (slice, rows.count < sliceSize)
        }
    }

    /// Runs `slice` until a slice is the last, adding up what they did.
    static func run(_ slice: () async throws -> (Compaction, last: Bool)) async throws -> Compaction {
        var total = Compaction()
        while true {
            let (done, last) = try await slice()
            total.purged += done.purged
            total.reclaimedBytes += done.reclaimedBytes
            total.horizons.merge(done.horizons) { max($0, $1) }
            if last { return total }
        }
    }

    /// Tombstones per slice: one write transaction each, so pushes wait for little.
    static let sliceSize = 2000
}

/// One space as the operator's list shows it.
public struct SpaceSummary: Sendable, Equatable {
    public var name: String
    /// Live records (tombstones not counted).
    public var records: Int64
    public var tombstones: Int64
    /// The newest seq in the current epoch.
    public var head: Int64
    /// The server time (ms) of the newest write, nil for a space with no record.
    public var lastWriteAt: Int64?
    /// The history horizon: the newest seq of a purged tombstone (0: nothing purged).
    public var horizon: Int64
    /// The bytes of its records (`PushRules.recordBytes`), which its limit counts.
    public var recordBytes: Int64

    public init(name: String, records: Int64, tombstones: Int64, head: Int64, lastWriteAt: Int64?, horizon: Int64 = 0, recordBytes: Int64 = 0) {
        self.recordBytes = recordBytes
        self.name = name
        self.records = records
        self.tombstones = tombstones
        self.head = head
        self.lastWriteAt = lastWriteAt
        self.horizon = horizon
    }

    /// The one query of the list, for both stores (they share the schema's tables and
    /// columns): `placeholder(1)` is the name to start after, `placeholder(2)` the limit.
    /// The page of spaces is chosen first, so only those spaces' records are counted.
    static func listingSQL(placeholder: (Int) -> String) -> String {
        """
        SELECT s.name, s.head_seq,
               count(r.id) FILTER (WHERE NOT r.deleted),
               count(r.id) FILTER (WHERE r.deleted),
               max(r.updated_at), s.horizon_seq, s.record_bytes
          FROM (SELECT space_id, name, head_seq, horizon_seq, record_bytes FROM spaces WHERE name > \(placeholder(1)) ORDER BY name LIMIT \(placeholder(2))) s
          LEFT JOIN records r ON r.space_id = s.space_id
         GROUP BY s.space_id, s.name, s.head_seq, s.horizon_seq, s.record_bytes
         ORDER BY s.name
        """
    }
}

extension SyncStore {
    /// A push on a server without rules, by a device whose subject is its `clientId` (a
    /// store driven directly, with no token: tests and tools).
    public func push(space: String, clientId: String, items: [PushItem], now: Int64) async throws -> [PushResult] {
        try await push(space: space, clientId: clientId, subject: clientId, items: items, now: now, judge: nil)
    }
}
