@_spi(Mutants) import OutpostServer

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
    /// A deliberate server bug (the harness's own mutation test); nil for the real server.
    @_spi(Mutants) public var mutation: ServerMutation?
    /// A deliberately broken custom resolver that writes back the oldest version it saw
    /// (the harness's own mutation test).
    public var brokenResolver = false

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
        if let mutation { command += " --mutation \(mutation.rawValue)" }
        if brokenResolver { command += " --broken-resolver" }
        return command + " --verbose"
    }

    public var description: String {
        var text = "seed \(seed), \(resolver.rawValue), faults \(faults.rawValue), \(devices) devices, \(steps) steps"
        if let mutation { text += ", server mutation \(mutation.rawValue)" }
        if brokenResolver { text += ", broken resolver" }
        return text
    }
}
