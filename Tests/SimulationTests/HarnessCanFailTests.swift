import Outpost
import OutpostCore
import OutpostMutants
import OutpostServer
import OutpostTestSupport
import Synchronization
import Testing
@testable import OutpostSimulation

/// A harness that cannot fail proves nothing: with a deliberate bug switched on — a resolver
/// that writes back old versions, or a server mutation (`ServerMutation`) — some run of a
/// small fixed range must break the invariant that bug breaks.
@Suite("The harness can fail", .offPool)
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
            c.broken = Self.resolverWritingBackOldVersions()
            return c
        }
        #expect(found[.acknowledgedWrite, default: 0] > 0, "\(found)")
    }

    /// Counters merged by last-write-wins instead of by kind lose counts, and the ledger
    /// (`Ledger`) sees it.
    @Test func countersMergedByLastWriteWinsDoNotAddUp() async {
        let found = await broken(12) { seed in
            var c = RunConfiguration.forSeed(seed, resolver: .custom, faults: seed % 2 == 0 ? FaultSet.none : .network)
            c.fieldKinds = true
            c.broken = BrokenPart(name: "counters by last-write-wins", resolver: { _ in .lastWriteWins() })
            return c
        }
        #expect(found[.fieldKinds, default: 0] > 0, "\(found)")
        #expect(found.keys.allSatisfy { $0 == .fieldKinds }, "only the ledger's invariant breaks: \(found)")
    }

    /// A keyed list merged as a plain value (its declaration left out of the conflict, so
    /// `.mergeFields` takes the list whole, by last-write-wins) loses items and marks, and
    /// the ledger (`Ledger`) sees it.
    @Test func aKeyedListMergedAsAPlainValueLosesItems() async {
        let found = await broken(12) { seed in
            var c = RunConfiguration.forSeed(seed, resolver: .custom, faults: seed % 2 == 0 ? FaultSet.none : .network)
            c.listKind = true
            c.broken = BrokenPart(name: "keyed list merged as a plain value", resolver: { _ in Self.mergeFieldsWithoutLists() })
            return c
        }
        #expect(found[.fieldKinds, default: 0] > 0, "\(found)")
        #expect(found.keys.allSatisfy { $0 == .fieldKinds }, "only the ledger's invariant breaks: \(found)")
    }

    /// An engine whose queue waits behind a conflict left for a person (a device that holds
    /// one sends nothing) keeps other records' changes from the server, and the check that
    /// nothing is blocked after healing sees it.
    @Test func aQueueWaitingBehindAHeldConflictIsCaught() async {
        let found = await broken(24) { seed in
            var c = RunConfiguration.forSeed(seed)
            c.leaveConflicts = true
            c.broken = BrokenPart(name: "queue waits behind a held conflict", holdsPush: { _, held in held > 0 })
            return c
        }
        #expect(found[.queueBlocked, default: 0] > 0, "\(found)")
    }

    /// An engine that drops the value a person settled a conflict with (every settle taken
    /// as `.keepServer`) loses local edits, and the oracle, following the person's choice,
    /// sees them leave the queue unanswered.
    @Test func aSettledValueDroppedIsCaught() async {
        let found = await broken(24) { seed in
            var c = RunConfiguration.forSeed(seed)
            c.leaveConflicts = true
            c.broken = BrokenPart(name: "settled value dropped", settle: { _ in .keepServer })
            return c
        }
        #expect(found[.localEdit, default: 0] > 0, "\(found)")
    }

    /// `.mergeFields` as the runs use it, except that a field declared a list merges as
    /// any other value.
    static func mergeFieldsWithoutLists() -> ConflictResolver {
        let merge = ConflictResolver.mergeFields(fallback: .lastWriteWins(maxClockDrift: .seconds(300)))
        return .custom { c in
            let plain = Conflict(collection: c.collection, id: c.id, local: c.local, server: c.server, serverChangeId: c.serverChangeId, base: c.base,
                                 fields: c.fields.filter { if case .list = $0.value { false } else { true } })
            // A custom resolver has no clock: the later of the two sides' times stands for now
            // (last-write-wins uses it only to cap times ahead of it).
            return merge.resolve(plain, now: max(c.local.clientTime, c.server.updatedAt))
        }
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
            c.broken = BrokenPart(name: "server mutation \(mutation.rawValue)", store: { MutantSyncStore(base: $0, mutation: mutation) })
            return c
        }
        #expect(found[invariant, default: 0] > 0, "\(mutation): \(found)")
    }

    /// The slice on PostgreSQL can fail too: the same mutant of the store, on PostgreSQL.
    @Test(.serverLogs) func aServerMutationIsCaughtOnPostgreSQL() async throws {
        let admin = try await PostgresCluster.database(prefix: "simadmin")
        let found = await broken(24) { seed in
            var c = RunConfiguration.forSeed(seed)
            c.store = .postgres(admin)
            c.broken = BrokenPart(name: "server mutation dropTombstones", store: { MutantSyncStore(base: $0, mutation: .dropTombstones) })
            return c
        }
        #expect(found[.convergence, default: 0] > 0, "\(found)")
    }

    /// A failed run of `outpost-sim` prints its shortest failing prefix, how to replay it,
    /// and its step log.
    @Test func aFailedRunIsReportedWithItsReproductionAndStepLog() async throws {
        var c = RunConfiguration.forSeed(4, steps: 40)
        c.broken = BrokenPart(name: "server mutation ignoreBaseVersion", store: { MutantSyncStore(base: $0, mutation: .ignoreBaseVersion) })
        let result = await Simulation.run(c)
        #expect(!result.passed)
        let lines = await Simulation.failureReport(result, shrink: true)
        #expect(lines.first == "FAIL \(c)")
        #expect(lines.contains { $0.hasPrefix("minimal reproduction (") && $0.contains("--seed 4 --steps ") })
        #expect(lines.contains("step log:"))
    }

    /// A resolver that remembers the first server version it saw of each record and writes
    /// it back at every later conflict, on every device.
    static func resolverWritingBackOldVersions() -> BrokenPart {
        let memory = Mutex<[String: JSONObject]>([:])
        return BrokenPart(name: "resolver writing back old versions", resolver: { _ in
            .custom { conflict in
                memory.withLock { seen in
                    let key = conflict.collection + "/" + conflict.id
                    if let old = seen[key] { return .write(old) }
                    if let data = conflict.server.data { seen[key] = data }
                    return .keepServer
                }
            }
        })
    }
}
