import Outpost
import OutpostServer

/// The conflict resolver every device of a run uses.
public enum ResolverKind: String, CaseIterable, Sendable, Hashable {
    /// `.serverWins`.
    case serverWins = "server-wins"
    /// `.clientWins`.
    case clientWins = "client-wins"
    /// `.lastWriteWins(maxClockDrift: 5 minutes)`.
    case lastWriteWins = "last-write-wins"
    /// `.custom`: a deterministic merge that writes a new record naming both sides.
    case custom
}

/// Which faults a run injects. Every set also has the app's own hazards (oversized records
/// the server rejects, records another app version wrote that a validator quarantines).
public enum FaultSet: String, CaseIterable, Sendable, Hashable {
    /// A perfect network, a server that never restarts, devices that never crash.
    case none
    /// Lost requests, answers lost after the server applied them, duplicated, delayed and
    /// reordered requests, pages and answers cut off, a proxy's 504.
    case network
    /// Server restarts keeping the data directory, losing it, or restored from an older
    /// copy with a new epoch; the server down for a while.
    case server
    /// Devices crash between any two steps (and in the middle of a sync: before a push
    /// leaves, after the server applied it, between pages) and reopen their store from disk.
    case crash
    /// Device clocks a year ahead, a year behind, or minutes off.
    case skew
    /// All of the above at once.
    case all

    var network: Bool { self == .network || self == .all }
    var server: Bool { self == .server || self == .all }
    var crash: Bool { self == .crash || self == .all }
    var skew: Bool { self == .skew || self == .all }
}

/// Everything that decides one run: the seed and the configuration around it.
public struct RunConfiguration: Sendable, Hashable, CustomStringConvertible {
    /// The seed of the run's one random generator.
    public var seed: UInt64
    /// Random steps before the network heals.
    public var steps: Int
    /// The resolver of every device.
    public var resolver: ResolverKind
    /// The faults injected.
    public var faults: FaultSet
    /// How many devices (2 to 4).
    public var devices: Int
    /// A deliberately broken part (the harness's own test); nil for the real thing.
    public var broken: BrokenPart?
    /// The server's store: SQLite (a file of the run), or PostgreSQL (a database of the
    /// run, created on the server at that URL and dropped after it).
    public var store: SimStore = .sqlite
    /// Counter and set fields beside the records (`Ledger`): a rules file declares them,
    /// steps edit them, and the oracle checks their sums. Off by default, so that a seed's
    /// run without them stays what it was.
    public var fieldKinds = false
    /// A checklist, a list keyed by `id` (docs/rules.md, "Field kinds"), in the same records
    /// (`Ledger`): the rules file declares it, steps add, mark and remove its items, and the
    /// oracle checks that no item or mark is lost. Off by default, like `fieldKinds`.
    public var listKind = false
    /// Conflicts left for a person (`Resolution.leaveForPerson`, docs/simulation.md,
    /// "Conflicts left for a person"): each device's resolver leaves every conflict of some
    /// records (a seeded coin per record), a step settles a device's held conflict with a
    /// seeded choice, healing settles the rest, and the oracle checks that a held record is
    /// never sent and blocks no other record. Off by default, like `fieldKinds`.
    public var leaveConflicts = false

    /// The configuration of `seed` in the default rotation: resolver and fault set cycle
    /// through all 24 combinations (seed mod 24), the device count through 2, 3, 4
    /// (seed / 24 mod 3). `resolver` or `faults` pin one of them instead.
    public static func forSeed(_ seed: UInt64, steps: Int = 80, resolver: ResolverKind? = nil, faults: FaultSet? = nil, devices: Int? = nil) -> RunConfiguration {
        let resolvers = ResolverKind.allCases, sets = FaultSet.allCases
        let combination = Int(seed % UInt64(resolvers.count * sets.count))
        return RunConfiguration(
            seed: seed, steps: steps,
            resolver: resolver ?? resolvers[combination % resolvers.count],
            faults: faults ?? sets[combination / resolvers.count],
            devices: devices ?? 2 + Int((seed / UInt64(resolvers.count * sets.count)) % 3))
    }

    /// A configuration.
    public init(seed: UInt64, steps: Int, resolver: ResolverKind, faults: FaultSet, devices: Int) {
        precondition((2...4).contains(devices), "2 to 4 devices")
        self.seed = seed
        self.steps = steps
        self.resolver = resolver
        self.faults = faults
        self.devices = devices
    }

    /// The command that replays this run.
    public var reproduction: String {
        var command = "outpost-sim --seed \(seed) --steps \(steps) --resolver \(resolver.rawValue) --faults \(faults.rawValue) --devices \(devices)"
        if case .postgres(let url) = store { command += " --store '\(url)'" }
        if fieldKinds { command += " --field-kinds" }
        if listKind { command += " --list-kind" }
        if leaveConflicts { command += " --leave-conflicts" }
        if let broken { return "the test that breaks \(broken.name) (not the command line): \(command) --verbose" }
        return command + " --verbose"
    }

    public var description: String {
        var text = "seed \(seed), \(resolver.rawValue), faults \(faults.rawValue), \(devices) devices, \(steps) steps"
        if case .postgres = store { text += ", on PostgreSQL" }
        if fieldKinds { text += ", with field kinds" }
        if listKind { text += ", with a keyed list" }
        if leaveConflicts { text += ", conflicts left for a person" }
        if let broken { text += ", broken: \(broken.name)" }
        return text
    }
}

/// A deliberately broken part of a run, for the harness's own test: a harness that cannot
/// fail proves nothing, so a test breaks one part and expects the invariant it protects to
/// be broken in some run. The test builds it (the bugs live in the test targets), so its
/// runs replay from that test, not from the command line.
public struct BrokenPart: Sendable, Hashable {
    /// What is broken, for the run's description.
    public var name: String
    /// Wraps the server's store (a store with a deliberate bug).
    public var store: (@Sendable (any SyncStore) -> any SyncStore)?
    /// Replaces the custom resolver of each device (by its index); in a run with field
    /// kinds or the list kind, the resolver of the `Ledger` records' conflicts instead.
    public var resolver: (@Sendable (_ device: Int) -> ConflictResolver)?
    /// In a run with conflicts left for a person: true when a device's push is not sent
    /// because the device holds `held` conflicts (an engine whose queue waits behind them).
    public var holdsPush: (@Sendable (_ device: Int, _ held: Int) -> Bool)?
    /// In a run with conflicts left for a person: the resolution the store is given in place
    /// of the person's (an engine that settles otherwise than asked); the oracle follows the
    /// person's.
    public var settle: (@Sendable (_ asked: Resolution) -> Resolution)?

    public init(name: String, store: (@Sendable (any SyncStore) -> any SyncStore)? = nil,
                resolver: (@Sendable (_ device: Int) -> ConflictResolver)? = nil,
                holdsPush: (@Sendable (_ device: Int, _ held: Int) -> Bool)? = nil,
                settle: (@Sendable (_ asked: Resolution) -> Resolution)? = nil) {
        self.name = name
        self.store = store
        self.resolver = resolver
        self.holdsPush = holdsPush
        self.settle = settle
    }

    public static func == (a: BrokenPart, b: BrokenPart) -> Bool { a.name == b.name }
    public func hash(into hasher: inout Hasher) { hasher.combine(name) }
}

/// Where a run's server keeps its history.
public enum SimStore: Sendable, Hashable {
    /// `SQLiteSyncStore` on a file of the run (the default).
    case sqlite
    /// `PostgresSyncStore` on a database of the run, created (and dropped) through a
    /// connection to this URL, whose user may create databases.
    case postgres(String)
}
