import OutpostCore
import OutpostSyncRules
import OutpostTestSupport
@testable import OutpostServer

/// The store of an in-process test server (`OutpostApplication.Parts.store`): the real
/// store, with every call passed through, that reports what a test waits for as it
/// happens: each long poll's wait for a commit once the wait is registered with the
/// store's notifier, and again once it ended; each view index built, and each one marked
/// as not built. A test awaits a pull that waits, a group that stopped or an index built
/// as the store reports it. A wait whose task was cancelled before it was reported is
/// left out (a group that stopped before its wait began), so once a pull's group is
/// stopped, no report of it follows.
///
/// The wait runs on a thread of its own as the child of a task that prefers that thread:
/// the thread runs its jobs in the order they were queued, so the parent's turn after
/// `Task.yield()` comes once the child's first step has run, and `CommitNotifier.wait`
/// registers the waiter in its first step, before it first suspends.
final class ReportingStore: SyncStore {
    /// One wait for a commit: its space and the seq it waits to pass.
    struct Wait: Sendable, Equatable {
        var space: String
        var afterSeq: Int64
    }

    /// What the store reported so far.
    struct Reports: Sendable {
        /// The waits registered, in order.
        var registered: [Wait] = []
        /// How many of them ended (woken, past their deadline or cancelled).
        var ended = 0
        /// The specs of the view indexes built, in order (each once its build returned).
        var built: [String] = []
        /// How many times the view index was marked as not built.
        var forgotten = 0
    }

    let base: any SyncStore
    let reports: Watched<Reports>

    init(base: any SyncStore, reports: Watched<Reports>) {
        self.base = base
        self.reports = reports
    }

    func waitForCommit(space: String, afterSeq: Int64, deadline: ContinuousClock.Instant) async -> Bool {
        let executor = DedicatedThreadExecutor(name: "test-store-wait")
        defer { executor.stop() }
        let base = self.base, reports = self.reports
        return await withTaskExecutorPreference(executor) {
            async let woken = base.waitForCommit(space: space, afterSeq: afterSeq, deadline: deadline)
            await Task.yield()
            // A wait cancelled by now (its group stopped) is not reported: it registered
            // nothing, or is being taken out again.
            let reported = !Task.isCancelled
            if reported { reports.update { $0.registered.append(Wait(space: space, afterSeq: afterSeq)) } }
            let result = await woken
            if reported { reports.update { $0.ended += 1 } }
            return result
        }
    }

    var epoch: Epoch { base.epoch }
    var notifier: CommitNotifier { base.notifier }
    var queuedWrites: Int { base.queuedWrites }

    func push(space: String, clientId: String, subject: String, items: [PushItem], now: Int64, judge: (any PushJudge)?) async throws -> [PushResult] {
        try await base.push(space: space, clientId: clientId, subject: subject, items: items, now: now, judge: judge)
    }

    func page(_ request: PageRequest) async throws -> PageData { try await base.page(request) }
    func scan(_ request: PageRequest) async throws -> RecordScan { try await base.scan(request) }
    func departures(space: String, _ queries: [DepartureQuery]) async throws -> [PushRules.Key: [UInt8]] {
        try await base.departures(space: space, queries)
    }
    func viewScan(_ request: ViewScanRequest) async throws -> RecordScan { try await base.viewScan(request) }
    func viewPage(_ request: ViewScanRequest, maxBytes: Int) async throws -> PageData? { try await base.viewPage(request, maxBytes: maxBytes) }
    func viewIndexSpec() async throws -> String? { try await base.viewIndexSpec() }
    func buildViewIndex(spec: String, keys: @escaping @Sendable (String, [UInt8]) -> [PushRules.IndexKey]) async throws -> Int {
        let records = try await base.buildViewIndex(spec: spec, keys: keys)
        reports.update { $0.built.append(spec) }
        return records
    }
    func forgetViewIndex() async throws {
        try await base.forgetViewIndex()
        reports.update { $0.forgotten += 1 }
    }
    func head(space: String) async throws -> Int64 { try await base.head(space: space) }
    func sweepChangeIDs(appliedBefore cutoff: Int64) async throws -> Int { try await base.sweepChangeIDs(appliedBefore: cutoff) }
    func compact(tombstonesBefore cutoff: Int64) async throws -> Compaction { try await base.compact(tombstonesBefore: cutoff) }
    func horizon(space: String) async throws -> Int64 { try await base.horizon(space: space) }
    func isWritable() async -> Bool { await base.isWritable() }
    func spaces(after: String, limit: Int) async throws -> [SpaceSummary] { try await base.spaces(after: after, limit: limit) }
    func close() async { await base.close() }
}
