import OutpostConformance
import OutpostMutants
import OutpostServer
import OutpostTestSupport
import Testing

/// A suite that cannot fail proves nothing. Each `ServerMutation` switches on one
/// deliberate bug in an otherwise real server (in process, on the HTTP engine); the suite
/// must fail on it, and on the named checks below in particular. The same server without
/// a mutation must pass every check. The bugs of the store run on both stores, SQLite and
/// PostgreSQL; those of the handlers, which no store changes, on SQLite.
@Suite(.serialized) struct MutationTests {
    /// The checks that must catch each mutant. Every mutation must be listed: a new one
    /// without a catcher fails `everyMutationHasACatcher`.
    static let catchers: [ServerMutation: [String]] = [
        .forgetIdempotency: ["push-replay-returns-original-version", "push-replay-within-one-push", "push-change-id-reused-rejected",
                             "restart-replay-survives"],
        .reuseSeqAfterRestart: ["restart-seqs-continue"],
        .pageOverBudget: ["pull-max-bytes-respected", "pull-page-bytes-ceiling"],
        .acceptAlgNone: ["auth-alg-none-401"],
        .acceptForeignEpochCursor: ["pull-epoch-changed-409", "rotate-epoch-old-cursor-epoch-changed"],
        .dropTombstones: ["pull-tombstones-included"],
        .applyOutOfOrder: ["push-applied-in-array-order"],
        .ignoreMaxChangesPerPush: ["push-too-many-changes-413"],
        .ignoreBodyLimit: ["push-body-over-limit-413", "push-chunked-body-over-limit-413"],
        .leakOtherSpaces: ["pull-space-isolation"],
        .staleCurrentOnConflict: ["push-stale-base-conflict-current-is-latest"],
        .skipWholeFileHash: ["media-checksum-mismatch-422-discards"],
        .acceptCursorAhead: ["pull-cursor-ahead-409"],
        .ignoreBaseVersion: ["push-null-base-on-existing-conflict", "push-null-base-on-tombstone-conflict",
                             "push-stale-base-conflict-current-is-latest"],
        .reofferAsEdit: ["reoffer-without-state-creates-with-original-time", "reoffer-judged-by-current-lineage",
                         "rotate-epoch-gives-lineage-reoffers-judged"],
        .reofferJudgedByLineage: ["reoffer-over-plain-write-conflicts", "rotate-epoch-gives-same-as"],
    ]

    /// Checks that only wait out a server timeout; no mutation touches what they check,
    /// so the mutants skip them to keep the run short (the clean server runs them).
    static let timeoutChecks = Conformance.checks.filter(\.waitsOnServerTimeout).map(\.name)

    @Test func everyMutationHasACatcher() {
        let names = Set(Conformance.checks.map(\.name))
        #expect(ServerMutation.allCases.count >= 12)
        for mutation in ServerMutation.allCases {
            let expected = Self.catchers[mutation] ?? []
            #expect(!expected.isEmpty, "no check is named as catching \(mutation)")
            for name in expected { #expect(names.contains(name), "\(mutation): no check is named \(name)") }
        }
    }

    @Test func cleanServerPassesEveryCheck() async throws {
        let server = try await InProcessServer(mutation: nil)
        let report: Report
        do {
            report = try await Conformance.run(server.configuration())
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
        for result in report.results where !result.passed { Issue.record("\(result.line)") }
        #expect(report.passedCount == Conformance.checks.count)
    }

    @Test(arguments: ServerMutation.allCases)
    func mutantIsCaught(_ mutation: ServerMutation) async throws {
        try await expectCaught(mutation, postgresURL: nil)
    }

    @Test(.serverLogs, arguments: ServerMutation.allCases.filter(\.isInStore))
    func mutantOfTheStoreIsCaughtOnPostgreSQL(_ mutation: ServerMutation) async throws {
        try await expectCaught(mutation, postgresURL: try await PostgresCluster.database(prefix: "mutant"))
    }

    private func expectCaught(_ mutation: ServerMutation, postgresURL: String?) async throws {
        let expected = try #require(Self.catchers[mutation])
        let server = try await InProcessServer(mutation: mutation, postgresURL: postgresURL)
        let report: Report
        do {
            // The mutants are of the protocol without rules; the rules checks restart the
            // server twice each and catch none of them.
            let rulesChecks = Conformance.checks.filter { $0.category == .rules }.map(\.name)
            report = try await Conformance.run(server.configuration(), skip: Self.timeoutChecks + rulesChecks)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
        #expect(report.failedCount > 0, "no check caught \(mutation)")
        for name in expected {
            #expect(report.failedNames.contains(name), "\(name) did not catch \(mutation); failed: \(report.failedNames)")
        }
    }
}
