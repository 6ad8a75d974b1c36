import Foundation
import OutpostCore
import OutpostSQLite

/// An offline-first store: records in collections, kept in one SQLite file (WAL), synced
/// with an Outpost server.
///
/// A save writes the record and its queue entry in one transaction and never waits for
/// the network. `sync()` pushes the queue, then pulls to the end of the server's history.
/// Nothing local is lost by a failed sync: changes stay queued until a read answer settles
/// them.
///
/// ```swift
/// struct Todo: Codable { var id: String; var title: String; var done = false }
///
/// let store = try OutpostStore(path: "todos.sqlite",
///                              configuration: .init(space: "team"),
///                              transport: HTTPSyncTransport(baseURL: url, token: { _ in token }))
/// try await store.save(Todo(id: "t1", title: "Buy milk"), in: "todos", id: "t1")
/// let report = try await store.sync()
/// let todos = try await store.all(Todo.self, in: "todos")
/// ```
///
/// Concurrency: the actor owns the only writing SQLite connection, which never leaves it.
/// The app's reads (`get`, `all`, `record`, `records`, `status`) run on read-only
/// connections (`ReadPool`) on threads of their own, so a screen never waits for a page
/// being applied. While a sync waits for the network, saves and reads go on; a second `sync()`
/// waits for the first. One store per file: a second open of the same file, in this process or another,
/// fails with `OutpostError.storeInUse`, until the first is closed or suspended
/// (`suspend()`, when the app leaves the foreground). Another process reads the file at any
/// time through `OutpostStore.reader(path:configuration:)`.
public actor OutpostStore {
    /// The thread the actor runs on (`StoreExecutor`: never the cooperative pool).
    private let executor = StoreExecutor()
    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// The configuration the store was opened with.
    public nonisolated let configuration: Configuration
    /// This installation's client id (kept in the file).
    public nonisolated let clientId: String
    /// The space.
    public nonisolated var space: String { configuration.space }
    /// The client id the file had on another device when it was restored here from that
    /// device's backup (this store then took a new `clientId`); nil for a file made here.
    public nonisolated let restoredFrom: String?

    let transport: (any SyncTransport)?
    /// Seals puts and opens pulled copies when the store is end-to-end encrypted.
    nonisolated let cipher: RecordCipher?
    /// The store's file (nil in memory), and whether it was opened for reading only.
    nonisolated let file: StoreFile?
    /// Read-only connections for the app's reads, outside the actor (Store/ReadPool.swift);
    /// nil in memory and for a reader store, whose reads run on the actor.
    nonisolated let readers: ReadPool?
    var database: LocalDatabase?
    var lock: StoreLock?
    /// Open, suspended (file and lock released until `resume()`), or closed for good.
    var lifecycle = Lifecycle.open
    var rng: Randomness
    private var observers: [UUID: Observer] = [:]
    private var activityObservers: [UUID: AsyncStream<SyncActivity>.Continuation] = [:]
    /// `observeConflicts()`'s subscribers, and the journal entries of the transaction now
    /// open, told to them once it commits (Store/ConflictJournal.swift).
    var conflictObservers: [UUID: AsyncStream<ConflictEntry>.Continuation] = [:]
    var journaled: [ConflictEntry] = []
    /// Records the running sync's pull has received so far (for `SyncProgress`).
    var pulledThisSync = 0
    /// One sync (or re-pull, epoch change, long-poll page) at a time.
    nonisolated let syncGate = SyncGate()
    /// The task of the sync running now: `suspend()` cancels it when its caller is.
    var runningSync: Task<SyncReport, any Error>?
    var cachedLimits: (limits: Limits, fetchedAt: Int64)?
    /// Changes in the push request now awaiting its answer.
    var inFlight: Set<String> = []
    /// The server's clock minus the device's, as last measured (`clockStatus()`).
    var clockOffset: Int64?
    /// The round trip of the last sync's best clock reading (telemetry).
    var lastRoundTripMs: Int64?
    /// True while the telemetry outbox is being sent.
    var sendingTelemetry = false
    /// The field kinds the server declared in the last page pulled (meta `field_kinds`):
    /// what `.mergeFields` merges by (docs/client.md, "Field kinds").
    var fieldKinds: FieldKinds

    /// How many epochs the store remembers having left (docs/protocol.md section 5).
    public static let retiredEpochLimit = SyncSession.retiredLimit

    /// Opens (creating when absent) the store at `path`.
    ///
    /// - Throws: `OutpostError.storeInUse` when the file is open elsewhere;
    ///   `spaceMismatch` when it belongs to another space; `EncryptionError.noKeyring` when
    ///   `configuration.encryption` is set and the device has no key for the space;
    ///   `EncryptionError.encryptionRequired` when a file of an encrypted space is opened
    ///   without `encryption`, or a file that synced in clear is opened with it.
    ///   Opening a file restored from another device's backup gives the store a new
    ///   `clientId` (the old one stays with that device; `restoredFrom` names it) and keeps
    ///   its queued edits; an encrypted one then throws
    ///   `EncryptionError.keysNotOnThisDevice` until its keys are imported.
    public init(path: String, configuration: Configuration, transport: (any SyncTransport)? = nil) throws {
        try Platform.createDirectory(holding: path, protection: configuration.fileProtection)
        let lock = try StoreLock.acquire(databasePath: path, protection: configuration.fileProtection)
        try self.init(file: StoreFile(path: path, readOnly: false), lock: lock, configuration: configuration, transport: transport)
    }

    /// Opens the store at `path` for reading only, alongside the store another process (the
    /// app, when this is its extension) has open: no lock is taken and nothing is written.
    /// Reads, status and observation of its own events work; saves and syncs throw
    /// `OutpostError.readOnly`. What the other process writes meanwhile is read by the next
    /// call (it is not announced to observers).
    ///
    /// - Throws: `OutpostError.storage` when there is no store file at `path`, or the app
    ///   has not yet opened it with this SDK version; `spaceMismatch` and the encryption
    ///   errors as `init(path:configuration:transport:)`.
    public static func reader(path: String, configuration: Configuration) throws -> OutpostStore {
        try OutpostStore(file: StoreFile(path: path, readOnly: true), lock: nil, configuration: configuration, transport: nil)
    }

    /// A new record id: a UUID version 7 in lower case, whose first 48 bits are the time in
    /// milliseconds. Ids made later sort later, so the server's key index takes new records
    /// at its end instead of in random leaves, which keeps pushes of many new records fast
    /// on a large space (docs/benchmarks.md, "Sync service"). Any string of the protocol's
    /// id form is a valid id; this one is only the cheapest to store.
    public static func newRecordID() -> String {
        var rng = Randomness(seed: nil)
        return Identifiers.changeID(nowMs: Int64(Date().timeIntervalSince1970 * 1000), using: &rng)
    }

    /// The space a store file belongs to, read without opening the store; nil when the file
    /// does not exist or was never opened as a store.
    public static func space(ofStoreAt path: String) throws -> String? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        return try mappingSQLiteErrors {
            let connection = try Connection(path: path, flags: [.readOnly])
            defer { connection.close() }
            guard try connection.scalarInt("SELECT count(*) FROM sqlite_master WHERE name = 'meta'") == 1 else { return nil }
            return try connection.scalarText("SELECT value FROM meta WHERE key = ?", [.text(MetaKey.space.rawValue)])
        }
    }

    /// A store in memory, for tests and previews: nothing is written to disk.
    public static func inMemory(configuration: Configuration, transport: (any SyncTransport)? = nil) throws -> OutpostStore {
        try OutpostStore(file: nil, lock: nil, configuration: configuration, transport: transport)
    }

    private init(file: StoreFile?, lock: StoreLock?, configuration: Configuration, transport: (any SyncTransport)?) throws {
        guard Names.isValidSpace(configuration.space) else { throw OutpostError.invalidName("invalid space name \"\(configuration.space)\"") }
        if let id = configuration.clientId, !Names.isValidClientID(id) {
            throw OutpostError.invalidName("invalid client id \"\(id)\": 1 to 128 characters of [A-Za-z0-9_.:-]")
        }
        var rng = Randomness(seed: configuration.randomSeed)
        let opened = try Self.open(file, configuration: configuration, rng: &rng)
        let cipher: RecordCipher?
        do {
            cipher = try Self.cipher(opened, configuration: configuration, readOnly: file?.readOnly == true)
        } catch {
            opened.database.close()
            throw error
        }
        opened.database.cipher = cipher
        self.configuration = configuration
        self.clientId = opened.clientId
        self.restoredFrom = opened.restoredFrom
        self.cipher = cipher
        self.transport = transport
        self.file = file
        self.readers = file.flatMap { $0.readOnly ? nil : ReadPool(path: $0.path) }
        self.database = opened.database
        self.lock = lock
        self.rng = rng
        self.clockOffset = (try? opened.database.meta(.clockOffset)).flatMap { $0.flatMap { Int64($0) } }
        self.fieldKinds = (try? opened.database.meta(.fieldKinds)).flatMap { $0.flatMap { try? JSONParser.parse(Array($0.utf8)) } }
            .map(FieldKinds.init(json:)) ?? FieldKinds()
    }

    /// The store's record cipher when `configuration.encryption` is set. A file keeps the
    /// mode it was made with: an encrypted one opened without its keys would queue edits in
    /// clear, and a clear one would meet its own copies as records it cannot open.
    private static func cipher(_ opened: OpenedFile, configuration: Configuration, readOnly: Bool) throws -> RecordCipher? {
        var cipher: RecordCipher?
        if let encryption = configuration.encryption {
            guard let ring = try encryption.keys.keyring(space: configuration.space) else {
                if let from = opened.restoredFrom { throw EncryptionError.keysNotOnThisDevice(space: configuration.space, restoredFrom: from) }
                throw EncryptionError.noKeyring(space: configuration.space)
            }
            cipher = RecordCipher(space: configuration.space, ring: ring, clearFields: encryption.clearFields)
        }
        let mode = cipher == nil ? "none" : "e2e-1"
        try mappingSQLiteErrors {
            let stored = try opened.database.meta(.encryption)
            if let stored, stored != mode { throw EncryptionError.encryptionRequired(space: configuration.space) }
            if !readOnly { try opened.database.setMeta(.encryption, mode) }
        }
        return cipher
    }

    /// Closes the store: observers finish, the file and its lock are released. A sync in
    /// progress stops at its next step; changes it had sent stay in doubt.
    public func close() {
        readers?.shut(.closed)
        database?.close()
        database = nil
        lock = nil
        lifecycle = .closed
        for observer in observers.values { observer.continuation.finish() }
        observers.removeAll()
        for continuation in activityObservers.values { continuation.finish() }
        activityObservers.removeAll()
        for continuation in conflictObservers.values { continuation.finish() }
        conflictObservers.removeAll()
    }

    /// The database, or `closed` (`suspended` while the store is suspended).
    func db() throws -> LocalDatabase {
        guard let database else { throw lifecycle == .suspended ? OutpostError.suspended : OutpostError.closed }
        return database
    }

    /// Runs `body` in one transaction, mapping SQLite failures to `OutpostError.storage`.
    ///
    /// Durability: local edits, and marking changes in flight, commit with the configured
    /// durability (FULL by default). The sync's own bookkeeping (pulled pages with their
    /// cursor, push answers, retry times) passes `.normal`: a power loss can only take back
    /// such a commit whole (WAL), and the next sync pulls that page again or learns the
    /// answer again under the same changeId, so nothing is lost and an fsync per page is
    /// saved.
    func write<T>(durability: Durability? = nil, _ body: (LocalDatabase) throws -> T) throws -> T {
        let d = try db()
        guard file?.readOnly != true else { throw OutpostError.readOnly }
        // Journal entries of a transaction that rolls back are never told.
        defer { journaled.removeAll() }
        return try mappingSQLiteErrors {
            try d.use(durability ?? configuration.durability)
            let result = try d.db.transaction {
                let result = try body(d)
                try d.settleSearch()
                return result
            }
            announceJournaled()
            return result
        }
    }

    /// Runs a read, mapping SQLite failures.
    func read<T>(_ body: (LocalDatabase) throws -> T) throws -> T {
        let d = try db()
        return try mappingSQLiteErrors { try body(d) }
    }

    func now() -> Int64 { configuration.clock().milliseconds }

    // MARK: - Saving

    /// Saves a Codable value as the record `collection`/`id` (a put). Local only: the
    /// record and its queue entry are written in one transaction; the network is not
    /// touched. Returns the record as stored.
    ///
    /// Fields the app's type does not know survive: the put is `value` encoded, plus every
    /// field of the record as the store shows it now that `T` never reads, at every level
    /// of nested objects; a field `T` reads and `value` leaves out is removed
    /// (docs/client.md, "Fields an app does not know"). What `T` reads is learned from the
    /// store's first decode of it in `collection` (`get`, `all`, `values`,
    /// `StoredRecord.decode`); before any, the save decodes the stored record as `T` with
    /// `decoder` to learn it (pass the decoder the app reads with when it sets strategies).
    /// The default coder is `RecordCoder.standard`'s: dates as RFC 3339 text (docs/client.md,
    /// "Dates"). A typed collection (`collection(_:of:coder:)`) names its coder once.
    @discardableResult
    public func save<T: Encodable & OutpostSendableMetatype>(_ value: T, in collection: String, id: String, encoder: JSONEncoder = RecordCoder.standardEncoder(),
                                   decoder: JSONDecoder = RecordCoder.standardDecoder()) throws -> StoredRecord {
        var tx = OutpostTransaction()
        try tx.save(value, in: collection, id: id, encoder: encoder, decoder: decoder)
        return try committedRecord(tx)
    }

    /// Saves raw JSON as the record `collection`/`id` (a put). See `save(_:in:id:)`.
    @discardableResult
    public func put(_ data: JSONObject, in collection: String, id: String) throws -> StoredRecord {
        var tx = OutpostTransaction()
        try tx.put(data, in: collection, id: id)
        return try committedRecord(tx)
    }

    /// Deletes the record (a tombstone: the delete syncs like any edit). Returns false when
    /// there was nothing to delete.
    @discardableResult
    public func delete(from collection: String, id: String) throws -> Bool {
        var tx = OutpostTransaction()
        try tx.delete(from: collection, id: id)
        return try !commit(tx.writes).isEmpty
    }

    /// Commits a block of one put; the record as stored.
    private func committedRecord(_ tx: OutpostTransaction) throws -> StoredRecord {
        guard let shown = try commit(tx.writes).first?.shown else { throw OutpostError.storage("the saved record is not in the store") }
        return try Self.storedRecord(shown)
    }

    // MARK: - Reading

    /// The record decoded as `type`; nil when absent or deleted.
    ///
    /// The reads of the app (`get`, `all`, `record`, `records`, `status`) run on a
    /// read-only connection of their own, on its own thread, with the caller (the main
    /// actor, for a screen) suspended meanwhile: they never wait for the store's actor,
    /// which may be applying a pulled page, and never hold the caller's thread while they
    /// read the rows and parse their JSON. They see every save that returned before them,
    /// and a pulled page whole or not at all (docs/client.md, "Reads beside the writer").
    /// Only the last step, `T`'s `Decodable` initializer, runs with the caller's isolation:
    /// an app type's conformance may be isolated to the main actor (an app target's
    /// default), and then must not run anywhere else.
    public func get<T: Decodable>(_ type: T.Type, from collection: String, id: String, decoder: JSONDecoder = RecordCoder.standardDecoder(),
                                  isolation: isolated (any Actor)? = #isolation) async throws -> T? {
        guard let record = try await record(in: collection, id: id), !record.deleted else { return nil }
        return try record.decode(T.self, decoder: decoder)
    }

    /// Every live record of `collection` decoded as `type`, ordered by id.
    public func all<T: Decodable>(_ type: T.Type, in collection: String, decoder: JSONDecoder = RecordCoder.standardDecoder(),
                                  isolation: isolated (any Actor)? = #isolation) async throws -> [T] {
        try await records(in: collection).map { try $0.decode(T.self, decoder: decoder) }
    }

    /// The record (tombstones included), or nil when the store has never held it.
    public func record(in collection: String, id: String, isolation: isolated (any Actor)? = #isolation) async throws -> StoredRecord? {
        let key = RecordKey(collection: collection, id: id)
        return try await appRead { try $0.shown(key).map(Self.storedRecord) }
    }

    /// The live records of `collection` (all collections when nil), ordered by collection
    /// and id; tombstones only with `includeDeleted`.
    public func records(in collection: String? = nil, includeDeleted: Bool = false,
                        isolation: isolated (any Actor)? = #isolation) async throws -> [StoredRecord] {
        try await appRead { d in
            try d.shown(collection: collection).filter { includeDeleted || !$0.body.deleted }.map(Self.storedRecord)
        }
    }

    /// Runs one of the app's reads on a read-only connection (`ReadPool`), the caller
    /// suspended; on the store's actor when the store has no such connections (in memory,
    /// a reader store) or all of them are in use.
    func appRead<T>(_ body: @escaping @Sendable (LocalDatabase) throws -> T,
                    isolation: isolated (any Actor)? = #isolation) async throws -> T {
        if let readers, let read = try await readers.read(body) { return read.value }
        return try await readOnActor(body).value
    }

    /// `read`, with its result handed over to a caller on another actor.
    private func readOnActor<T>(_ body: @Sendable (LocalDatabase) throws -> T) throws -> ReadPool.Handover<T> {
        ReadPool.Handover(value: try read(body))
    }

    static func storedRecord(_ shown: LocalDatabase.Shown) throws -> StoredRecord {
        StoredRecord(collection: shown.key.collection, id: shown.key.id, data: try shown.body.data.map(decodeObject),
                     deleted: shown.body.deleted, version: shown.version, pending: shown.pending,
                     updatedAt: shown.updatedAt.map(Date.init(milliseconds:)), updatedBy: shown.updatedBy)
    }

    // MARK: - Queue, quarantine, status

    /// Changes not yet settled, in queue order (rejected ones excluded).
    public func pendingChanges() throws -> [QueuedChange] {
        try changes(unsettled: true)
    }

    /// Changes the server rejected for good, with their reasons. They block nothing; the app
    /// shows them and may discard them (`discardRejectedChange`) or save again.
    public func rejectedChanges() throws -> [QueuedChange] {
        try changes(unsettled: false)
    }

    /// Removes a rejected change. Returns false when no rejected change has that id.
    @discardableResult
    public func discardRejectedChange(_ changeId: String) throws -> Bool {
        try write { d in
            guard let key = try d.key(ofChange: changeId), let edit = try d.model(key)?.edit(changeId), Engine.isRejected(edit) else { return false }
            try transition(key, .discard(changeId: changeId), d)
            return true
        }
    }

    /// The unsettled or the rejected edits as the app sees them, in the order they go out.
    private func changes(unsettled: Bool) throws -> [QueuedChange] {
        try read { d in
            let context = try engineContext(d)
            // Records by the queue position of their first such edit; a record's edits in the
            // order they go out.
            var out: [QueuedChange] = []
            for key in try d.keysWithEdits(in: unsettled ? ["queued", "sent"] : ["rejected"]) {
                guard let model = try d.model(key) else { continue }
                for edit in model.edits where unsettled ? edit.delivery.isUnsettled : Engine.isRejected(edit) {
                    out.append(try queuedChange(edit, model, context))
                }
            }
            return out
        }
    }

    func queuedChange(_ e: Edit, _ model: RecordModel, _ context: EngineContext) throws -> QueuedChange {
        let state: ChangeState
        var base: Version?
        var code: String?
        var required: Int?
        switch e.delivery {
        case .queued where e.inConflict:
            state = .inConflict
            if let epoch = context.phase.epoch { base = Engine.wireBase(model, e, epoch: epoch) }
        case .queued where Engine.isHeld(e, model.key, context):
            state = .upgradeRequired
            required = e.upgradeTo
            if let epoch = context.phase.epoch { base = Engine.wireBase(model, e, epoch: epoch) }
        case .queued:
            state = e.attempts == 0 && e.lastError == nil ? .pending : .failed
            if let epoch = context.phase.epoch { base = Engine.wireBase(model, e, epoch: epoch) }
        case .sent(let sent):
            state = inFlight.contains(e.changeId) ? .inFlight : .inDoubt
            base = sent
        case .acknowledged(let copy):
            state = .pending
            base = copy.version
        case .rejected(let c, _):
            state = .rejected
            code = c
            base = model.state(e.madeOn)?.version
        }
        return QueuedChange(changeId: e.changeId, collection: model.key.collection, id: model.key.id, op: e.body.deleted ? .delete : .put,
                            data: try e.body.data.map(decodeObject), baseVersion: base, state: state, attempts: e.attempts,
                            nextAttemptAt: Date(milliseconds: e.nextAttemptAt), lastError: e.lastError, errorCode: code, clientTime: Date(milliseconds: e.clientTime),
                            requiredAppVersion: required)
    }

    /// Pulled records that could not be decoded (or failed a validator), oldest first.
    public func quarantinedRecords() throws -> [QuarantinedRecord] {
        try read { try $0.quarantined() }
    }

    /// Forgets a quarantined record.
    public func discardQuarantined(_ number: Int64) throws {
        try write { try $0.deleteQuarantined(number) }
    }

    /// Tries every quarantined record again (after an app update taught it the new shape, or
    /// an import brought the key it was sealed under): those of the current epoch that now
    /// open, decode and pass their validator are applied like
    /// pulled records (never over a newer version); the others stay. Returns how many left
    /// the quarantine.
    @discardableResult
    public func retryQuarantined() throws -> Int {
        var keys: [RecordKey] = []
        let released: Int = try write { d in
            var released = 0
            let phase = try d.session().phase.engine
            let context = engineContext(phase: phase)
            for q in try d.quarantined() {
                guard let value = try? JSONParser(maxDepth: JSONParser.depthCeiling).parse(q.raw),
                      case .record(let state) = PulledRecord(value) else { continue }
                // A version of a history the store has left is never applied.
                guard state.version.epoch == phase.epoch else { continue }
                guard case .record(let record) = PreparedItem(state, validators: configuration.validators, cipher: cipher) else { continue }
                var ignored = SyncReport()
                try applyPulled(record, d, phase: phase, context: context, report: &ignored, keys: &keys)
                try d.deleteQuarantined(q.number)
                released += 1
            }
            return released
        }
        if !keys.isEmpty { notify(StoreEvent(origin: .remote, keys: keys)) }
        return released
    }

    /// The sync state (read like `get`, beside the store's actor, in one snapshot).
    public func status(isolation: isolated (any Actor)? = #isolation) async throws -> SyncStatus {
        let clientId = clientId, space = configuration.space, versions = configuration.versions, restoredFrom = restoredFrom
        return try await appRead { d in
            let session = try d.session()
            var status = SyncStatus(
                clientId: clientId, space: space, epoch: session.phase.epoch,
                cursor: session.cursor?.version,
                pending: try d.count(deliveries: ["queued", "sent"]),
                rejected: try d.count(deliveries: ["rejected"]), quarantined: try d.quarantineCount(),
                lastSyncAt: try d.meta(.lastSyncAt).flatMap { Int64($0) }.map(Date.init(milliseconds:)), lastError: try d.meta(.lastError),
                retiredEpochs: try d.retiredEpochs(), rebasing: session.phase.isRePulling, restoredFrom: restoredFrom)
            status.upgradeRequired = try d.heldCount(versions)
            status.conflicts = try d.conflictCount()
            // A failure kept by an SDK before `SyncProblem` has its text only: one to retry.
            status.lastProblem = try d.meta(.lastProblem).flatMap(SyncProblem.init(rawValue:)) ?? (status.lastError == nil ? nil : .serverUnavailable)
            return status
        }
    }

    /// The earliest `nextAttemptAt` of a failed or in-doubt change, if any (schedulers
    /// sync again then; pending changes go with the next sync anyway). A retry time stored
    /// before the device's clock was set back counts as now.
    public func nextRetryAt() throws -> Date? {
        try nextRetryMs().map(Date.init(milliseconds:))
    }

    /// `nextRetryAt()` in ms since 1970.
    func nextRetryMs() throws -> Int64? {
        let time = now()
        return try read { d in
            // A change held for a later app version waits for no time.
            let (held, values) = LocalDatabase.heldCondition(configuration.versions)
            let times = try d.db.query("""
                SELECT next_attempt_at FROM edits
                WHERE delivery = 'sent' OR (delivery = 'queued' AND (attempts > 0 OR last_error IS NOT NULL) AND NOT \(held))
                """, values) { $0.int64(0) }
            return times.map { isDue($0, now: time) ? min($0, time) : $0 }.min()
        }
    }

    // MARK: - Observation

    struct Observer {
        enum Filter { case all, collection(String), record(RecordKey) }
        let filter: Filter
        let continuation: AsyncStream<StoreEvent>.Continuation
    }

    /// Events for every change of `collection`: local edits, pulled records, push answers
    /// and resolutions that change what the app sees. Ends when the store closes.
    public func observe(collection: String) -> AsyncStream<StoreEvent> {
        addObserver(.collection(collection))
    }

    /// Events for every change of one record.
    public func observe(collection: String, id: String) -> AsyncStream<StoreEvent> {
        addObserver(.record(RecordKey(collection: collection, id: id)))
    }

    /// Events for every change of the store.
    public func observeAll() -> AsyncStream<StoreEvent> {
        addObserver(.all)
    }

    /// The live records of `collection` decoded as `type` with `decoder`: now, then after
    /// every committed write that changes them (a live query of the whole collection,
    /// ordered by id: `OutpostQuery.live()`). A record that does not decode is left out, not
    /// the end of the stream. Ends when the store closes or the consumer stops. For ids,
    /// filters, order and what changed, use a typed collection's `live()`.
    public nonisolated func values<T: Decodable & Sendable>(_ type: T.Type, in collection: String,
                                                            decoder: JSONDecoder = RecordCoder.standardDecoder()) -> AsyncThrowingStream<[T], any Error> {
        let live = self.collection(collection, of: T.self, coder: RecordCoder(encoder: RecordCoder.standardEncoder(), decoder: decoder)).query.live()
        let (stream, continuation) = AsyncThrowingStream<[T], any Error>.makeStream()
        let task = Task {
            do {
                for try await update in live { continuation.yield(update.results.values) }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// What the store's syncs do from now on: each sync's start, a progress report after
    /// every page its pull applies, and its end. Ends when the store closes.
    public func syncActivity() -> AsyncStream<SyncActivity> {
        subscribe(.bufferingNewest(256)) { id, continuation in
            activityObservers[id] = continuation
        } remove: { store, id in
            await store.removeActivityObserver(id)
        }
    }

    private func removeActivityObserver(_ id: UUID) {
        activityObservers[id] = nil
    }

    func announce(_ activity: SyncActivity) {
        for continuation in activityObservers.values { continuation.yield(activity) }
    }

    /// A signal after every committed transaction that changed what the app sees of
    /// `collection`, for a reader that reads the collection again on each: signals that
    /// come while it reads are folded into one (the stream keeps only the newest).
    func changeSignals(collection: String) -> AsyncStream<StoreEvent> {
        addObserver(.collection(collection), buffering: .bufferingNewest(1))
    }

    private func addObserver(_ filter: Observer.Filter, buffering: AsyncStream<StoreEvent>.Continuation.BufferingPolicy = .unbounded) -> AsyncStream<StoreEvent> {
        subscribe(buffering) { id, continuation in
            observers[id] = Observer(filter: filter, continuation: continuation)
        } remove: { store, id in
            await store.removeObserver(id)
        }
    }

    private func removeObserver(_ id: UUID) {
        observers[id] = nil
    }

    /// A stream for a new subscriber: finished at once when the store is closed, else kept
    /// by `register` under a new id until its consumer stops, when `remove` drops it.
    func subscribe<T: Sendable>(_ buffering: AsyncStream<T>.Continuation.BufferingPolicy,
                                        register: (UUID, AsyncStream<T>.Continuation) -> Void,
                                        remove: @escaping @Sendable (OutpostStore, UUID) async -> Void) -> AsyncStream<T> {
        let (stream, continuation) = AsyncStream<T>.makeStream(bufferingPolicy: buffering)
        guard database != nil else {
            continuation.finish()
            return stream
        }
        let id = UUID()
        register(id, continuation)
        continuation.onTermination = { [weak self] _ in
            Task { if let self { await remove(self, id) } }
        }
        return stream
    }

    func notify(_ event: StoreEvent) {
        guard !event.keys.isEmpty else { return }
        for observer in observers.values {
            let keys: [RecordKey]
            switch observer.filter {
            case .all: keys = event.keys
            case .collection(let c): keys = event.keys.filter { $0.collection == c }
            case .record(let k): keys = event.keys.filter { $0 == k }
            }
            if !keys.isEmpty { observer.continuation.yield(StoreEvent(origin: event.origin, keys: keys)) }
        }
    }

    // MARK: - One sync at a time

    /// Takes the sync gate (`SyncGate`): a cancelled waiter throws `CancellationError` at
    /// once. Refused with `suspended` while the store is suspending or suspended: a sync
    /// queued behind the one a suspension waits for does not prolong it.
    func acquireSyncGate() async throws {
        try await syncGate.acquire()
        guard lifecycle == .open || lifecycle == .closed else {
            syncGate.release()
            throw OutpostError.suspended
        }
    }

    func releaseSyncGate() {
        syncGate.release()
    }
}
