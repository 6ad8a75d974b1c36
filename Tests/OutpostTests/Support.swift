import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Synchronization
import Testing
@testable import Outpost
import OutpostTesting

/// A clock tests move by hand (ms since 1970).
final class ManualClock: Sendable {
    private let value: Mutex<Int64>

    init(_ start: Int64 = 1_764_430_000_000) { value = Mutex(start) }

    var now: Int64 { value.withLock { $0 } }

    func advance(_ ms: Int64) { value.withLock { $0 += ms } }

    func set(_ ms: Int64) { value.withLock { $0 = ms } }

    /// A clock closure offset from this one by `offset` ms (a device whose clock is wrong),
    /// in ms since 1970 (the in-memory server's clock).
    func reading(offset: Int64 = 0) -> @Sendable () -> Int64 {
        { [self] in self.now + offset }
    }

    /// The same as a store's clock (`Configuration.clock`).
    func dates(offset: Int64 = 0) -> @Sendable () -> Date {
        { [self] in Date(milliseconds: self.now + offset) }
    }
}

/// A to-do, the record type of most tests.
struct Todo: Codable, Hashable, Sendable {
    var title: String
    var done = false
}

/// A test world: one in-memory server, a shared clock, devices on it.
struct World {
    let server: InMemorySyncServer
    let clock: ManualClock
    let space = "team"

    init(limits: Limits = Limits(), seed: UInt64 = 7) {
        let clock = ManualClock()
        self.clock = clock
        server = InMemorySyncServer(limits: limits, clock: clock.reading(), seed: seed)
    }

    /// A configuration for device `name`.
    func configuration(_ name: String, resolver: ConflictResolver = .lastWriteWins(), clockOffset: Int64 = 0, seed: UInt64? = nil) -> OutpostStore.Configuration {
        var c = OutpostStore.Configuration(space: space)
        c.clientId = name
        c.resolver = resolver
        c.clock = clock.dates(offset: clockOffset)
        c.randomSeed = seed ?? World.seed(of: name)
        c.durability = .normal
        return c
    }

    /// A fixed random seed per device name (FNV-1a of its bytes). Not `hashValue`, which
    /// changes from run to run: two devices whose seeds met made the same change ids at the
    /// same clock reading, and the server answered one device's push with the other's.
    static func seed(of name: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        return hash == 0 ? 1 : hash
    }

    /// An in-memory device, on `transport` when given (a `WatchedTransport` in front of
    /// `server.transport(device: name)`), else on its own transport to the server.
    func device(_ name: String, resolver: ConflictResolver = .lastWriteWins(), clockOffset: Int64 = 0, maxResponseBytes: Int = 16 << 20,
                transport: (any SyncTransport)? = nil, configure: (inout OutpostStore.Configuration) -> Void = { _ in }) throws -> OutpostStore {
        var c = configuration(name, resolver: resolver, clockOffset: clockOffset)
        configure(&c)
        return try OutpostStore.inMemory(configuration: c, transport: transport ?? server.transport(device: name, maxResponseBytes: maxResponseBytes))
    }

    /// A device on a file, on `transport` when given, else on its own transport to the server.
    func device(_ name: String, path: String, resolver: ConflictResolver = .lastWriteWins(),
                transport: (any SyncTransport)? = nil, configure: (inout OutpostStore.Configuration) -> Void = { _ in }) throws -> OutpostStore {
        var c = configuration(name, resolver: resolver)
        configure(&c)
        return try OutpostStore(path: path, configuration: c, transport: transport ?? server.transport(device: name))
    }

    /// `phone` and `laptop` synced on todos/t1 = v1; both edit it offline, 1 s apart; the
    /// laptop pushes first, so the phone's next sync meets a conflict.
    func concurrentEdits(phone: OutpostStore, laptop: OutpostStore) async throws {
        try await phone.put(todo("v1"), in: "todos", id: "t1")
        try await phone.sync()
        try await laptop.sync()
        clock.advance(1_000)
        try await phone.put(todo("phone"), in: "todos", id: "t1")
        clock.advance(1_000)
        try await laptop.put(todo("laptop"), in: "todos", id: "t1")
        try await laptop.sync()
    }

    /// The server's live data of a record, or nil.
    func serverData(_ collection: String, _ id: String) -> JSONObject? {
        guard let r = server.record(space: space, collection: collection, id: id), !r.deleted else { return nil }
        return r.data
    }
}

extension OutpostStore {
    /// The live data of a record, or nil.
    func data(_ collection: String, _ id: String, isolation: isolated (any Actor)? = #isolation) async throws -> JSONObject? {
        guard let r = try await record(in: collection, id: id), !r.deleted else { return nil }
        return r.data
    }

    /// The states of the queued changes, in order.
    func queueStates() throws -> [ChangeState] {
        try pendingChanges().map(\.state)
    }
}

func todo(_ title: String, done: Bool = false) -> JSONObject {
    ["title": .string(title), "done": .bool(done)]
}

#if canImport(OutpostTestSupport)
/// A real `outpost-server` reading `rules` (a rules file written into `dir`), on SQLite or
/// on a PostgreSQL database of its own (`prefix` names it).
func rulesServer(_ dir: TemporaryDirectory, rules: String, postgres: Bool, prefix: String) async throws -> ServerProcess {
    let database = postgres ? try await PostgresCluster.database(prefix: prefix) : nil
    let path = dir.appending("rules.json")
    try Data(rules.utf8).write(to: URL(fileURLWithPath: path))
    let arguments = ["--rules", path] + (database.map { ["--store", $0] } ?? [])
    return try await blocking { try ServerProcess(dataDirectory: dir.appending("data"), arguments: arguments) }
}
#endif
