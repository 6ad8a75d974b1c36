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
    var rng: Randomness

    // The store's parts (docs/architecture.md, "The client store"), each owning its state;
    // all of them live on the store's actor.
    /// The database and lock, open, suspended or closed (Store/StoreLife.swift).
    let life: StoreLife
    /// The subscribers of events, activity and conflicts (Observation/StoreObservers.swift).
    let observers = StoreObservers()
    /// One sync at a time and what the running one holds (Sync/SyncRunner.swift).
    let syncRun: SyncRunner
    /// The device's clock readings and the telemetry sender (Journal/DeviceClock.swift).
    let readings: DeviceReadings

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
        self.life = StoreLife(database: opened.database, lock: lock)
        self.rng = rng
        self.readings = DeviceReadings(clockOffset: (try? opened.database.meta(.clockOffset)).flatMap { $0.flatMap { Int64($0) } })
        self.syncRun = SyncRunner(fieldKinds: (try? opened.database.meta(.fieldKinds)).flatMap { $0.flatMap { try? JSONParser.parse(Array($0.utf8)) } }
            .map(FieldKinds.init(json:)) ?? FieldKinds())
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
        life.release(to: .closed)
        observers.finishAll()
    }

    /// The database, or `closed` (`suspended` while the store is suspended).
    func db() throws -> LocalDatabase {
        try life.database()
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
        defer { observers.forgetJournaled() }
        return try mappingSQLiteErrors {
            try d.use(durability ?? configuration.durability)
            let result = try d.db.transaction {
                let result = try body(d)
                try d.settleSearch()
                return result
            }
            observers.announceJournaled()
            return result
        }
    }

    /// Runs a read, mapping SQLite failures.
    func read<T>(_ body: (LocalDatabase) throws -> T) throws -> T {
        let d = try db()
        return try mappingSQLiteErrors { try body(d) }
    }

    func now() -> Int64 { configuration.clock().milliseconds }
}
