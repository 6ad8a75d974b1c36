import Foundation

/// Runs a range of seeds, several at once, and reports each result as it comes.
public enum Runner {
    /// Runs `count` seeds from `first`, `jobs` at a time; `configuration` maps a seed to its
    /// run. `report` is called on the caller's task, once per run, in completion order.
    public static func run(first: UInt64, count: Int, jobs: Int, scratch: String = Simulation.defaultScratch,
                           isolation: isolated (any Actor)? = #isolation,
                           configuration: @escaping @Sendable (UInt64) -> RunConfiguration,
                           report: (RunResult) -> Void) async {
        guard count > 0 else { return }
        await withTaskGroup(of: RunResult.self) { group in
            var next = 0
            func add() {
                let seed = first &+ UInt64(next)
                next += 1
                group.addTask { await Simulation.run(configuration(seed), scratch: scratch) }
            }
            for _ in 0..<min(max(1, jobs), count) { add() }
            for await result in group {
                report(result)
                if next < count { add() }
            }
        }
    }
}

/// Counts of a range of runs.
public struct RunTally: Sendable {
    /// Runs finished.
    public private(set) var runs = 0
    /// Runs that broke an invariant.
    public private(set) var failed = 0
    /// Runs per configuration ("resolver · faults"), with their failures.
    public private(set) var byConfiguration: [String: (runs: Int, failed: Int)] = [:]
    /// Runs in which each known limit showed.
    /// Runs that broke each invariant.
    public private(set) var invariants: [Invariant: Int] = [:]
    /// Requests and faults over all runs.
    public private(set) var requests = 0, faults = 0

    /// An empty tally.
    public init() {}

    /// Counts one run.
    public mutating func add(_ result: RunResult) {
        runs += 1
        requests += result.requests
        faults += result.faults
        let name = "\(result.configuration.resolver.rawValue) · \(result.configuration.faults.rawValue)"
        var entry = byConfiguration[name] ?? (0, 0)
        entry.runs += 1
        if !result.passed {
            failed += 1
            entry.failed += 1
            for invariant in Set(result.violations.map(\.invariant)) { invariants[invariant, default: 0] += 1 }
        }
        byConfiguration[name] = entry
    }

    /// The passed count.
    public var passed: Int { runs - failed }
}
