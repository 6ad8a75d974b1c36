import Dispatch
import OutpostCore
import OutpostHTTP
import Synchronization

/// Holds the long polls of `pull` (docs/protocol.md section 5, `wait`) in groups of pulls that
/// would read the same page, and answers each group with one read and one encoded body.
///
/// Pulls that wait with the same space, cursor, limit, byte budget, collections and the
/// same head in their empty first page would read the same page when a commit wakes them.
/// One task per group waits for that commit, reads the page once, encodes the answer once
/// and resumes every pull of the group with those bytes (shared, not copied). Each pull
/// is resumed once, with its answer ready: two thousand pulls woken by one commit cost one
/// page read and one encoding, not two thousand of each plus a second suspension to share
/// the read (the cost that `PageCoalescer` alone leaves).
///
/// A pull that joins a group while the group's read runs gets that read's page: its own
/// empty page predates the commit that woke the group (a read from after that commit
/// would have held the commit's records), so the page holds everything after its cursor
/// that it could have seen. A filtered group woken by a commit to another collection
/// reads an empty page and waits on from that page's head.
///
/// Each pull leaves at its own deadline or when its task is cancelled, answered by the
/// newest empty page its group read (or none: its own first page), exactly as a pull that
/// waited alone would. A group whose last pull left stops waiting. When the server drains
/// (`releaseAll`), every pull leaves as at its deadline, and later pulls do not wait.
final class LongPollHub: Sendable {
    /// The page a group waits for; its `head` is the head of the pulls' empty first page.
    typealias Key = PageCoalescer.Key

    /// How a waiting pull ends.
    enum Outcome: Sendable {
        /// Woken: the page and the whole encoded answer (`SyncService.encodePage`).
        case page(PageData, body: [UInt8])
        /// Deadline or cancellation, with the newest empty page the group read, if any.
        case leftEarly(PageData?)
        /// The group's read failed; every pull of the group answers this error.
        case failed(any Error)
    }

    private struct Group {
        let generation: UInt64
        var waiters: [UInt64: CheckedContinuation<Outcome, Never>] = [:]
        var task: Task<Void, Never>?
        /// The newest empty page read after a wake-up (filtered pulls).
        var latest: PageData?
    }

    private struct State {
        var groups: [Key: Group] = [:]
        var nextID: UInt64 = 0
        /// Pulls waiting in all groups (the `outpost_long_polls_waiting` gauge).
        var count = 0
        /// Set by `releaseAll`: no pull waits any more.
        var released = false
    }

    private let state = Mutex(State())
    private let timerQueue = DispatchQueue(label: "outpost.longpoll.deadlines")
    private let store: any SyncStore
    private let woken: Metrics.Counter

    init(store: any SyncStore, woken: Metrics.Counter) {
        self.store = store
        self.woken = woken
    }

    /// How many pulls are waiting now.
    var waitingCount: Int { state.withLock { $0.count } }

    /// Waits with the pulls of `key` until a commit brings records for it (`.page`), the
    /// deadline passes or the task is cancelled (`.leftEarly`). `epoch` is the epoch of
    /// the pull's cursor, for the answer's `next`.
    func wait(_ key: Key, request: PageRequest, epoch: Epoch, deadline: ContinuousClock.Instant) async -> Outcome {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
                let joined = state.withLock { s -> Bool in
                    if s.released || Task.isCancelled || ContinuousClock.now >= deadline { return false }
                    if s.groups[key] == nil {
                        s.nextID += 1
                        var group = Group(generation: s.nextID)
                        let generation = group.generation
                        // On the loop of the pull that opened the group, not the global pool.
                        group.task = Task(executorPreference: HTTPServer.currentEventLoop) {
                            await self.serve(key, request: request, epoch: epoch, generation: generation)
                        }
                        s.groups[key] = group
                    }
                    s.groups[key]!.waiters[id] = continuation
                    s.count += 1
                    return true
                }
                guard joined else {
                    continuation.resume(returning: .leftEarly(nil))
                    return
                }
                let delay = ContinuousClock.now.duration(to: deadline)
                let nanos = max(0, delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000)
                timerQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(nanos))) { [weak self] in
                    self?.leave(key, id: id)
                }
            }
        } onCancel: {
            leave(key, id: id)
        }
    }

    /// The server is shutting down: every waiting pull is answered now, as at its deadline,
    /// and pulls that come later answer at once. A long poll held until the shutdown's grace
    /// period ends would be cut without an answer, and would hold the shutdown that long.
    func releaseAll() {
        let waiting = state.withLock { s -> [(Key, UInt64)] in
            s.released = true
            return s.groups.flatMap { key, group in group.waiters.keys.map { (key, $0) } }
        }
        for (key, id) in waiting { leave(key, id: id) }
    }

    /// A pull leaves its group (deadline or cancellation); the last one out stops the group.
    private func leave(_ key: Key, id: UInt64) {
        let (continuation, latest, stop) = state.withLock { s -> (CheckedContinuation<Outcome, Never>?, PageData?, Task<Void, Never>?) in
            guard var group = s.groups[key], let c = group.waiters.removeValue(forKey: id) else { return (nil, nil, nil) }
            s.count -= 1
            if group.waiters.isEmpty {
                s.groups[key] = nil
                return (c, group.latest, group.task)
            }
            s.groups[key] = group
            return (c, group.latest, nil)
        }
        stop?.cancel()
        continuation?.resume(returning: .leftEarly(latest))
    }

    /// The group's task: wait for a commit after what the group has seen, read, answer.
    private func serve(_ key: Key, request: PageRequest, epoch: Epoch, generation: UInt64) async {
        var head = key.head
        // Longer than any pull waits; the group is cancelled when its last pull leaves.
        let horizon = Duration.milliseconds(PullQuery.maxWaitMs) + .seconds(60)
        while !Task.isCancelled {
            guard await store.waitForCommit(space: key.space, afterSeq: head, deadline: .now + horizon) else { continue }
            let waiting = state.withLock { $0.groups[key]?.generation == generation ? $0.groups[key]!.waiters.count : 0 }
            if waiting == 0 { return }
            woken.add(waiting)
            let outcome: Outcome
            do {
                let page = try await store.page(request)
                if page.count == 0 {
                    head = page.head
                    state.withLock { s in
                        if s.groups[key]?.generation == generation { s.groups[key]!.latest = page }
                    }
                    continue
                }
                let next = page.lastSeq.map { Version(epoch: epoch, seq: $0) } ?? Version(epoch: epoch, seq: key.afterSeq)
                outcome = .page(page, body: SyncService.encodePage(page, next: next))
            } catch {
                outcome = .failed(error)
            }
            // Every pull in the group now gets this answer; later ones start a new group.
            let waiters = state.withLock { s -> [CheckedContinuation<Outcome, Never>] in
                guard let group = s.groups[key], group.generation == generation else { return [] }
                s.groups[key] = nil
                s.count -= group.waiters.count
                return Array(group.waiters.values)
            }
            for c in waiters { c.resume(returning: outcome) }
            return
        }
    }
}
