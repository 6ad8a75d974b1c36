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
/// and hands it to every pull of the group. A waiting pull is a held request
/// (`HTTPHold`): no task waits for it, and the answer reaches its connection's loop as
/// one queued message, all of a group's answers with one wake-up per loop
/// (`HeldRequest.answer(_:with:)`), the body's bytes shared, not copied. So a commit that
/// wakes 10,000 pulls costs one page read, one encoding and 10,000 writes.
///
/// A pull that joins a group while the group's read runs gets that read's page: its own
/// empty page predates the commit that woke the group (a read from after that commit
/// would have held the commit's records), so the page holds everything after its cursor
/// that it could have seen. A filtered group woken by a commit to another collection
/// reads an empty page and waits on from that page's head.
///
/// Each pull leaves at its own deadline (one timer for the hub: a heap of deadlines), or
/// when its connection closes, answered by the newest empty page its group read (or the
/// group's first: every pull of a group read the same empty page), exactly as a pull
/// that waited alone would. A group whose last pull left stops waiting. When the server
/// drains (`releaseAll`), every pull leaves as at its deadline, and later pulls do not
/// wait.
final class LongPollHub: Sendable {
    /// The page a group waits for; its `head` is the head of the pulls' empty first page.
    typealias Key = PageCoalescer.Key

    /// What a pull's wait is answered with, counted as pull pages.
    struct Counters: Sendable {
        /// Pulls woken by a commit (`outpost_long_polls_woken_total`).
        var woken: Metrics.Counter
        var pages: Metrics.Counter
        var records: Metrics.Counter
        var bytes: Metrics.Counter
    }

    private struct Group {
        let generation: UInt64
        /// The empty page the pulls read before they waited.
        let first: PageData
        let task: Task<Void, Never>
        var waiters: [UInt64: HeldRequest] = [:]
        /// The newest empty page read after a wake-up (filtered pulls).
        var latest: PageData?
    }

    private struct Deadline: Comparable {
        var at: ContinuousClock.Instant
        var id: UInt64
        var key: Key

        static func < (a: Deadline, b: Deadline) -> Bool { a.at < b.at }
        static func == (a: Deadline, b: Deadline) -> Bool { a.at == b.at && a.id == b.id }
    }

    private struct State {
        var groups: [Key: Group] = [:]
        var generations: UInt64 = 0
        /// Pulls waiting in all groups (the `outpost_long_polls_waiting` gauge).
        var count = 0
        /// Set by `releaseAll`: no pull waits any more.
        var released = false
        /// Every waiting pull's deadline (entries of pulls gone already are skipped).
        var deadlines = Heap<Deadline>()
        /// When the timer fires next (nil: not armed).
        var armedFor: ContinuousClock.Instant?
        /// The one timer of every deadline, used only under the lock.
        var timer: (any DispatchSourceTimer)?

        /// Arms the timer for `deadline`.
        mutating func arm(_ deadline: ContinuousClock.Instant) {
            armedFor = deadline
            let delay = ContinuousClock.now.duration(to: deadline)
            let nanos = max(0, delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000)
            timer?.schedule(deadline: .now() + .nanoseconds(Int(nanos)), leeway: .milliseconds(1))
        }

        /// Takes pull `id` out of its group (in place: a group's table is never copied);
        /// the group's task to stop when it was the last. Nil when it left already.
        mutating func remove(_ key: Key, _ id: UInt64) -> (held: HeldRequest, group: Group, stop: Task<Void, Never>?)? {
            guard let held = groups[key]?.waiters.removeValue(forKey: id) else { return nil }
            count -= 1
            let group = groups[key]!
            guard group.waiters.isEmpty else { return (held, group, nil) }
            groups[key] = nil
            return (held, group, group.task)
        }
    }

    private let state: Mutex<State>
    private let nextID = Atomic<UInt64>(0)
    private let store: any SyncStore
    private let counters: Counters

    init(store: any SyncStore, counters: Counters) {
        self.store = store
        self.counters = counters
        state = Mutex(State(timer: DispatchSource.makeTimerSource(queue: DispatchQueue(label: "outpost.longpoll.deadlines"))))
        state.withLock { s in
            s.timer?.setEventHandler { [weak self] in self?.expire() }
            s.timer?.activate()
        }
    }

    deinit {
        state.withLock { $0.timer?.cancel() }
    }

    /// How many pulls are waiting now.
    var waitingCount: Int { state.withLock { $0.count } }

    /// The response that holds a pull whose first page, `first`, was empty, until a commit
    /// brings records for `key` (answered with the group's page) or `deadline` passes or
    /// its connection closes (answered with the newest empty page its group read). `since`
    /// is the pull's cursor, for the answer's `next`.
    func hold(_ key: Key, request: PageRequest, first: PageData, since: Version, deadline: ContinuousClock.Instant) -> HTTPResponse {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).newValue
        return HTTPResponse(hold: HTTPHold(
            start: { [self] held in join(key, id, held, request: request, first: first, since: since, deadline: deadline) },
            gone: { [self] _ in drop(key, id) }))
    }

    private func join(_ key: Key, _ id: UInt64, _ held: HeldRequest, request: PageRequest, first: PageData, since: Version,
                      deadline: ContinuousClock.Instant) {
        let joined = state.withLock { s -> Bool in
            if s.released || ContinuousClock.now >= deadline { return false }
            if s.groups[key] == nil {
                s.generations += 1
                let generation = s.generations
                // On the loop of the pull that opened the group, not the global pool.
                let task = Task(executorPreference: HTTPServer.currentEventLoop) {
                    await self.serve(key, request: request, since: since, generation: generation)
                }
                s.groups[key] = Group(generation: generation, first: first, task: task)
            }
            s.groups[key]!.waiters[id] = held
            s.count += 1
            s.deadlines.push(Deadline(at: deadline, id: id, key: key))
            if s.armedFor.map({ deadline < $0 }) ?? true { s.arm(deadline) }
            return true
        }
        if !joined { answerEarly([held], page: first, since: since) }
    }

    /// Its connection closed: the pull leaves its group without an answer.
    private func drop(_ key: Key, _ id: UInt64) {
        let stop = state.withLock { s in s.remove(key, id)?.stop }
        stop?.cancel()
    }

    /// The server is shutting down: every waiting pull is answered now, as at its deadline,
    /// and pulls that come later answer at once. A long poll held until the shutdown's grace
    /// period ends would be cut without an answer, and would hold the shutdown that long.
    func releaseAll() {
        let groups = state.withLock { s -> [(Key, Group)] in
            s.released = true
            let all = Array(s.groups)
            s.groups = [:]
            s.count = 0
            s.deadlines = Heap()
            return all
        }
        for (key, group) in groups {
            group.task.cancel()
            answerEarly(Array(group.waiters.values), page: group.latest ?? group.first, since: Version(epoch: group.first.epoch, seq: key.afterSeq))
        }
    }

    /// The timer: the pulls whose deadline passed leave, each answered like a pull that
    /// waited alone; the timer is armed for the next deadline.
    private func expire() {
        let now = ContinuousClock.now
        var leaving: [Key: (page: PageData, since: Version, held: [HeldRequest])] = [:]
        var stops: [Task<Void, Never>] = []
        state.withLock { s in
            while let due = s.deadlines.first, due.at <= now {
                _ = s.deadlines.pop()
                guard let (held, group, stop) = s.remove(due.key, due.id) else { continue }
                if let stop { stops.append(stop) }
                let since = Version(epoch: group.first.epoch, seq: due.key.afterSeq)
                leaving[due.key, default: (group.latest ?? group.first, since, [])].held.append(held)
            }
            s.armedFor = nil
            if let next = s.deadlines.first?.at { s.arm(next) }
        }
        for task in stops { task.cancel() }
        for (page, since, held) in leaving.values { answerEarly(held, page: page, since: since) }
    }

    /// Answers pulls that leave without a commit for them: the empty `page`, `next` their cursor.
    private func answerEarly(_ held: [HeldRequest], page: PageData, since: Version) {
        guard !held.isEmpty else { return }
        let next = page.lastSeq.map { Version(epoch: since.epoch, seq: $0) } ?? since
        count(HeldRequest.answer(held, with: HTTPResponse(json: SyncService.encodePage(page, next: next))), page)
    }

    private func count(_ pulls: Int, _ page: PageData) {
        counters.pages.add(pulls)
        counters.records.add(pulls * page.count)
        counters.bytes.add(pulls * page.changesJSON.count)
    }

    /// The group's task: wait for a commit after what the group has seen, read, answer.
    private func serve(_ key: Key, request: PageRequest, since: Version, generation: UInt64) async {
        var head = key.head
        // Longer than any pull waits; the group is cancelled when its last pull leaves.
        let horizon = Duration.milliseconds(PullQuery.maxWaitMs) + .seconds(60)
        while !Task.isCancelled {
            guard await store.waitForCommit(space: key.space, afterSeq: head, deadline: .now + horizon) else { continue }
            let waiting = state.withLock { $0.groups[key]?.generation == generation ? $0.groups[key]!.waiters.count : 0 }
            if waiting == 0 { return }
            counters.woken.add(waiting)
            let response: HTTPResponse
            var page: PageData?
            do {
                let read = try await store.page(request)
                if read.count == 0 {
                    head = read.head
                    state.withLock { s in
                        if s.groups[key]?.generation == generation { s.groups[key]!.latest = read }
                    }
                    continue
                }
                let next = read.lastSeq.map { Version(epoch: since.epoch, seq: $0) } ?? since
                response = HTTPResponse(json: SyncService.encodePage(read, next: next))
                page = read
            } catch {
                response = HTTPError.fromStore("store failure", "the store cannot serve this request now; retry", error: error).response
            }
            // Every pull in the group now gets this answer; later ones start a new group.
            let waiters = state.withLock { s -> [HeldRequest] in
                guard let group = s.groups[key], group.generation == generation else { return [] }
                s.groups[key] = nil
                s.count -= group.waiters.count
                return Array(group.waiters.values)
            }
            let answered = HeldRequest.answer(waiters, with: response)
            if let page { count(answered, page) }
            return
        }
    }
}
