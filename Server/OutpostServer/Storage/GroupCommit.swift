import OutpostCore
import OutpostSyncRules

/// One push as a store's writer thread receives it.
struct PushJob: Sendable {
    let space: String
    let clientId: String
    let subject: String
    let items: [PushItem]
    let now: Int64
    let judge: (any PushJudge)?
    let completion: @Sendable (Result<[PushResult], any Error>) -> Void
}

/// What a store's writer gives `GroupCommit`, on the connection its thread owns: where the
/// stores differ (how a transaction begins and ends, how a space's counters are read and
/// kept, which failures are whose), under one rule of group commit.
protocol GroupWriter: AnyObject {
    associatedtype Storage: PushStorage
    var epoch: Epoch { get }
    /// The most record bytes a space may hold; nil for no limit.
    var recordQuota: Int64? { get }
    var notifier: CommitNotifier { get }
    /// Begins the group's transaction, for pushes to `spaces` (sorted by name, so writers
    /// that lock several take them in one order).
    func begin(spaces: [String]) throws
    /// `PushRules`' storage for `job` in the open transaction, and its space's counters
    /// as stored (the space's row is created when missing, and locked where the store
    /// needs it).
    func storage(for job: PushJob) throws -> (Storage, PushRules.Space)
    /// Commits the transaction; `touched` holds the counters of every space the group
    /// wrote, after its last push (a store that did not store them with each push stores
    /// them now).
    func commit(touched: [String: PushRules.Space]) throws
    /// Ends the transaction without keeping anything of it, in the database and in the
    /// writer's memory.
    func rollback()
    /// Whose failure `error` is, thrown while the group was at `phase`.
    func failure(_ error: any Error, at phase: GroupCommit.Phase) -> GroupCommit.Failure
}

/// Group commit, once for every store (docs/architecture.md, "Group commit"): the pushes
/// a writer finds queued are applied in one transaction, in their order, each by
/// `PushRules`, and answered after it.
///
/// - No push is answered `applied` before the group's commit has returned.
/// - A failure of one push alone (its own statements fail, a stored record cannot be
///   read, its space has used every seq) fails that push only: the transaction is rolled
///   back and the others run again without it, so nothing of the failed push is kept.
/// - A failure of the transaction (the commit fails, the connection is lost, the epoch
///   changed under it) fails every push of the group: none is answered `applied` and
///   nothing of the group is kept; their clients retry (after a lost connection the
///   commit may have happened, and the retry is then answered as a replay).
/// - A conflict between writers that the database resolved by aborting this transaction
///   (a deadlock, a serialization failure) runs the whole group again, `maxAttempts` at
///   most.
enum GroupCommit {
    /// Where the group was when a failure was thrown.
    enum Phase { case begin, push, commit }

    /// What a failure fails.
    enum Failure {
        /// The push being applied, alone.
        case push
        /// Nothing yet: the whole group runs again.
        case retry
        /// Every push of the group, answered with `answer`.
        case group(answer: any Error)
    }

    /// Runs of one group at most (the first and its retries).
    static let maxAttempts = 5

    /// Applies `jobs` on `writer` as one group and answers each.
    static func run<W: GroupWriter>(_ jobs: [PushJob], on writer: W) {
        var jobs = jobs
        var attempts = 0
        while !jobs.isEmpty {
            attempts += 1
            var answers: [[PushResult]] = []
            answers.reserveCapacity(jobs.count)
            var touched: [String: PushRules.Space] = [:]
            var phase = Phase.begin
            var current = 0
            do {
                try writer.begin(spaces: Set(jobs.map(\.space)).sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
                phase = .push
                for (index, job) in jobs.enumerated() {
                    current = index
                    answers.append(try apply(job, on: writer, touched: &touched))
                }
                phase = .commit
                try writer.commit(touched: touched)
            } catch {
                writer.rollback()
                var failure = writer.failure(error, at: phase)
                if case .retry = failure, attempts >= maxAttempts { failure = .group(answer: error) }
                switch failure {
                case .retry:
                    continue
                case .push:
                    Log.error("push failed in the store", ["error": "\(error)"])
                    jobs.remove(at: current).completion(.failure(error))
                    continue
                case .group(let answer):
                    for job in jobs { job.completion(.failure(answer)) }
                    return
                }
            }
            // The notifier learns the new heads before any push is answered, so a pull sent
            // after a push's answer never shares a page read older than that push
            // (PageCoalescer).
            for (space, counters) in touched { writer.notifier.committed(space: space, head: counters.head) }
            for (job, answer) in zip(jobs, answers) { job.completion(.success(answer)) }
            return
        }
    }

    /// Applies one push with `PushRules` over the writer's storage; `touched` holds the
    /// counters of the spaces written so far in the group, and this push's after it.
    private static func apply<W: GroupWriter>(_ job: PushJob, on writer: W, touched: inout [String: PushRules.Space]) throws -> [PushResult] {
        // Nothing for the store: the space is not even read.
        guard job.items.contains(where: { if case .change = $0 { true } else { false } }) else {
            return job.items.compactMap { if case .rejected(let result) = $0 { result } else { nil } }
        }
        var (storage, stored) = try writer.storage(for: job)
        var counters = touched[job.space] ?? stored
        let before = counters.head
        let context = PushRules.Context(epoch: writer.epoch, clientId: job.clientId, subject: job.subject, now: job.now,
                                        recordQuota: writer.recordQuota)
        let results = try PushRules.apply(items: job.items, context: context, space: &counters, storage: &storage, judge: job.judge)
        if counters.head != before { touched[job.space] = counters }
        return results
    }
}
