@_spi(Mutants) import OutpostServer
import Testing
@_spi(Mutants) @testable import OutpostSimulation

/// A harness that cannot fail proves nothing: with a deliberate bug switched on — a resolver
/// that writes back old versions, or a server mutation (`ServerMutation`) — some run of a
/// small fixed range must break the invariant that bug breaks.
@Suite("The harness can fail")
struct HarnessCanFailTests {
    /// Runs `count` seeds and returns the invariants broken, with how many runs broke each.
    private func broken(_ count: Int, _ configure: @escaping @Sendable (UInt64) -> RunConfiguration) async -> [Invariant: Int] {
        var tally = RunTally()
        await Runner.run(first: 0, count: count, jobs: 2, configuration: configure) { tally.add($0) }
        return tally.invariants
    }

    @Test func aResolverThatWritesBackAnOldVersionLosesAcknowledgedWrites() async {
        let found = await broken(12) { seed in
            var c = RunConfiguration.forSeed(seed, resolver: .custom)
            c.brokenResolver = true
            return c
        }
        #expect(found[.acknowledgedWrite, default: 0] > 0, "\(found)")
    }

    @Test(arguments: [
        (ServerMutation.ignoreBaseVersion, Invariant.acknowledgedWrite),
        (.dropTombstones, .convergence),
        (.staleCurrentOnConflict, .noRegression),
        (.reuseSeqAfterRestart, .noRegression),
    ])
    func aServerMutationIsCaught(mutation: ServerMutation, invariant: Invariant) async {
        let found = await broken(24) { seed in
            var c = RunConfiguration.forSeed(seed, faults: mutation == .reuseSeqAfterRestart ? .server : nil)
            c.mutation = mutation
            return c
        }
        #expect(found[invariant, default: 0] > 0, "\(mutation): \(found)")
    }
}
