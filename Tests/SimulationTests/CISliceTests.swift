import Foundation
import OutpostTestSupport
import Testing
@testable import OutpostSimulation

/// The slice of the harness CI runs on every build: every combination of resolver and fault
/// set (the default rotation), 30 seeds each, 80 steps. `outpost-sim --seeds 100000` is the
/// large run (docs/simulation.md).
@Suite("Simulation CI slice", .offPool)
struct CISliceTests {
    static let seeds = 24 * 30

    @Test func everyCombinationOfResolverAndFaultsPasses() async {
        let start = ContinuousClock.now
        var tally = RunTally()
        var failures: [RunResult] = []
        await Runner.run(first: 0, count: Self.seeds, jobs: ProcessInfo.processInfo.activeProcessorCount,
                         configuration: { .forSeed($0) }) { result in
            tally.add(result)
            if !result.passed { failures.append(result) }
        }
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print("simulation slice: \(tally.runs) runs in \(String(format: "%.1f", seconds)) s (\(String(format: "%.1f", Double(tally.runs) / seconds)) runs/s)")
        #expect(tally.runs == Self.seeds)
        #expect(tally.byConfiguration.count == 24, "every resolver × fault set ran")
        for failure in failures.prefix(3) {
            Issue.record("\(failure.configuration):\n\(failure.violations.map(\.description).joined(separator: "\n"))\nreproduce: \(failure.configuration.reproduction)")
        }
        #expect(failures.isEmpty, "\(failures.count) failed: \(failures.map(\.configuration.seed))")
    }

    /// The same harness with the server on PostgreSQL (each run on a database of its own in
    /// the test run's cluster): every combination once, 48 seeds. `outpost-sim --store
    /// postgres://…` is the large run.
    @Test(.serverLogs) func everyCombinationPassesOnPostgreSQL() async throws {
        let admin = try await PostgresCluster.database(prefix: "simadmin")
        await passTwiceEachCombination { $0.store = .postgres(admin) }
    }

    /// Counter and set fields (`Ledger`) under every resolver and fault set: 48 seeds, each
    /// combination twice. `outpost-sim --field-kinds` is the large run.
    @Test func counterAndSetFieldsAddUpUnderEveryFaultSet() async {
        await passTwiceEachCombination { $0.fieldKinds = true }
    }

    /// A keyed list (`Ledger`'s checklist) under every resolver and fault set: 48 seeds,
    /// each combination twice. `outpost-sim --list-kind` is the large run. Seed 40 is in
    /// the slice: it found that a page under rules looked for departures after its own
    /// cursor, not after where the pull began (`PagedDepartureTests`, docs/rules.md, "Paged
    /// pulls").
    @Test func aKeyedListLosesNoItemOrMarkUnderEveryFaultSet() async {
        await passTwiceEachCombination(first: 0) { $0.listKind = true }
    }

    /// Conflicts left for a person (`RunConfiguration.leaveConflicts`) under every resolver
    /// and fault set: 48 seeds, each combination twice. No record lost, every device
    /// converged once the person settled them all, and no queue blocked: a held record never
    /// sent, and every other record's change delivered while conflicts were held.
    /// `outpost-sim --leave-conflicts` is the large run.
    @Test func conflictsLeftForAPersonLoseNothingAndBlockNoQueue() async {
        await passTwiceEachCombination { $0.leaveConflicts = true }
    }

    /// Runs seeds `first` to `first` + 47 (every resolver × fault set twice when `first` is
    /// a multiple of 24), each configuration changed by `configure`, and requires every run
    /// to pass.
    func passTwiceEachCombination(first: UInt64 = 0, _ configure: @escaping @Sendable (inout RunConfiguration) -> Void) async {
        var tally = RunTally()
        var failures: [RunResult] = []
        await Runner.run(first: first, count: 48, jobs: ProcessInfo.processInfo.activeProcessorCount, configuration: { seed in
            var c = RunConfiguration.forSeed(seed)
            configure(&c)
            return c
        }) { result in
            tally.add(result)
            if !result.passed { failures.append(result) }
        }
        #expect(tally.runs == 48)
        #expect(tally.byConfiguration.count == 24, "every resolver × fault set ran")
        for failure in failures.prefix(3) {
            Issue.record("\(failure.configuration):\n\(failure.violations.map(\.description).joined(separator: "\n"))\nreproduce: \(failure.configuration.reproduction)\n\(failure.log.suffix(40).joined(separator: "\n"))")
        }
        #expect(failures.isEmpty, "\(failures.count) failed: \(failures.map(\.configuration.seed))")
    }

    @Test func aRunReplaysExactlyFromItsSeed() async {
        let configuration = RunConfiguration.forSeed(23)  // custom resolver, every fault at once
        let first = await Simulation.run(configuration)
        let second = await Simulation.run(configuration)
        #expect(first.log == second.log)
        #expect(first.log.count > configuration.steps)
        #expect(first.faults > 0)
    }
}
