import OutpostCore
import Synchronization

/// Runs a store's `sync()` for the app: at start, after local edits, on demand, on an
/// interval, and when a failed change's retry time comes; after a failed sync it waits a
/// jittered, growing delay. Between syncs it can hold a long poll open, so another
/// device's write arrives within moments.
///
/// It syncs only while its `Options.conditions` hold (by default: a network is
/// reachable), as `NetworkConditions` report them. While they do not, it starts no sync
/// and no long poll, cancels a running long poll, and emits `.waitingForConditions`;
/// local edits and `syncNow()` meanwhile are kept, and once the conditions hold again it
/// syncs at once.
///
/// ```swift
/// let scheduler = SyncScheduler(store: store)
/// await scheduler.start()
/// for await event in scheduler.events { ... }   // .synced(report), .failed(error), .remoteChanges, .waitingForConditions(why)
/// ```
public actor SyncScheduler {
    /// Settings.
    public struct Options: Sendable {
        /// Time between syncs when nothing else asks for one. Default 60 s.
        public var interval: Duration = .seconds(60)
        /// How long each long poll waits for a change; nil disables long polls. Default 25 s.
        public var longPoll: Duration? = .seconds(25)
        /// Delays after failed syncs. Default 2 s doubling to 5 minutes, half jittered.
        public var backoff = OutpostStore.BackoffPolicy(initial: .seconds(2), maximum: .seconds(300))
        /// Sync soon after each local edit. Default true.
        public var syncAfterLocalEdits = true
        /// When it may sync: the network it needs, and whether it pauses in Low Power
        /// Mode. Default: any reachable network, in any power mode.
        public var conditions = SyncConditions()
        /// The defaults.
        public init() {}
    }

    /// What the scheduler did.
    public enum Event: Sendable {
        /// A sync finished.
        case synced(SyncReport)
        /// A sync failed; the next one waits for the backoff (or a demand).
        case failed(OutpostError)
        /// A long poll brought and applied records.
        case remoteChanges
        /// The conditions stopped holding, or hold for another reason now: it waits (no
        /// sync, no long poll) until they hold, then syncs at once. Emitted once as the
        /// wait starts, and again only when the reason changes.
        case waitingForConditions(SyncConditions.Unmet)
    }

    /// The store it runs.
    public let store: OutpostStore
    /// Its settings.
    public let options: Options
    /// Where it learns whether the network and power allow a sync.
    public let conditions: any NetworkConditions
    /// What it reads the time from and sleeps on: intervals, backoffs and retry times are
    /// measured on it (`ContinuousClock` unless a test gives its own).
    public let clock: any Clock<Duration>
    /// Everything it does, as it happens (the newest 256 are kept for a slow reader).
    public nonisolated let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private nonisolated let wake = AsyncSignal()
    private var loop: Task<Void, Never>?
    private var edits: Task<Void, Never>?
    private var watcher: Task<Void, Never>?

    /// A scheduler for `store` (not started), checking `options.conditions` against the
    /// state `conditions` reports (by default the platform's: `platformConditions()`), and
    /// timing its syncs on `clock`.
    public init(store: OutpostStore, options: Options = Options(), conditions: any NetworkConditions = SyncScheduler.platformConditions(),
                clock: any Clock<Duration> = ContinuousClock()) {
        self.store = store
        self.options = options
        self.conditions = conditions
        self.clock = clock
        (events, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(256))
    }

    /// Starts syncing: at once when the conditions hold, else as soon as they do (the
    /// first sync waits for the conditions' first report). Does nothing when already
    /// started.
    public func start() async {
        guard loop == nil else { return }
        let store = self.store, options = self.options, wake = self.wake, continuation = self.continuation
        if options.syncAfterLocalEdits {
            let local = await store.observeAll()
            edits = Task { [weak self] in
                for await event in local where event.origin == .local { self?.demand() }
            }
        }
        let inbox = self.inbox
        // A state from an earlier start is stale: the stream below begins with the current one.
        inbox.withLock { $0.network = nil }
        let updates = conditions.updates()
        watcher = Task { await Self.watch(updates, inbox: inbox, wake: wake) }
        let clock = self.clock
        loop = Task { await Self.run(clock: clock, store: store, options: options, wake: wake, inbox: inbox, events: continuation) }
    }

    /// Stops: a long poll or a sleep ends at once; a sync in progress finishes first.
    public func stop() async {
        edits?.cancel()
        watcher?.cancel()
        loop?.cancel()
        await loop?.value
        // Awaited, so no state from this run lands in the inbox after a next start.
        await watcher?.value
        loop = nil
        edits = nil
        watcher = nil
    }

    /// Asks for a sync now (or right after the one in progress). While the conditions do
    /// not hold, the demand is kept: the sync runs as soon as they hold.
    public nonisolated func syncNow() {
        demand()
    }

    /// What woke the loop, besides time: a demand (a local edit or `syncNow()`), the end of
    /// a long poll with its outcome, or a new network state.
    private struct Inbox: Sendable {
        var demanded = false
        /// The number of the poll that ended, and how.
        var poll: (id: Int, outcome: Result<OutpostStore.WaitResult, OutpostError>)?
        /// The newest state the conditions reported; nil until the first. It stays until
        /// the next report (it is not taken like the rest).
        var network: NetworkState?
    }

    /// A reference to the inbox, so the loop and the long-poll task share it.
    private final class Mailbox: Sendable {
        let box = Mutex(Inbox())
        func withLock<T>(_ body: (inout Inbox) -> T) -> T { box.withLock { body(&$0) } }
    }

    private nonisolated let inbox = Mailbox()

    /// Asks for a sync now (or right after the one in progress).
    private nonisolated func demand() {
        inbox.withLock { $0.demanded = true }
        wake.signal()
    }

    /// Puts each state the conditions report in the inbox and wakes the loop.
    private static func watch(_ updates: AsyncStream<NetworkState>, inbox: Mailbox, wake: AsyncSignal) async {
        for await state in updates {
            inbox.withLock { $0.network = state }
            wake.signal()
        }
    }

    private static func run<C: Clock<Duration>>(clock: C, store: OutpostStore, options: Options, wake: AsyncSignal, inbox: Mailbox,
                                                events: AsyncStream<Event>.Continuation) async {
        // The decisions are the model's (SchedulerModel); this loop performs its steps. The
        // long poll runs beside everything else: a local edit syncs at once instead of
        // waiting for the poll to be cancelled, and the poll's page is applied only if the
        // store's cursor has not moved meanwhile.
        var model = SchedulerModel(options: options, now: clock.now)
        var poll: Task<Void, Never>?
        defer { poll?.cancel() }
        func tell(_ told: [Event]) { for event in told { events.yield(event) } }
        while !Task.isCancelled {
            // A kept signal is for what the inbox holds now, read below: dropped first, so it
            // does not wake the step this turn chooses (a sleep cancelled and begun again).
            wake.clear()
            let (demanded, ended, network) = inbox.withLock { box in
                defer {
                    box.demanded = false
                    box.poll = nil
                }
                return (box.demanded, box.poll, box.network)
            }
            if demanded { tell(model.take(.demanded, now: clock.now)) }
            if let ended {
                let wasPolling = model.polling
                tell(model.take(.pollEnded(id: ended.id, outcome: ended.outcome), now: clock.now))
                if wasPolling, !model.polling { poll = nil }
            }
            let (step, told) = model.next(network: network, now: clock.now)
            tell(told)
            switch step {
            case .stop:
                return
            case .waitForWake(let cancelPoll):
                if cancelPoll {
                    poll?.cancel()
                    poll = nil
                }
                await wake.wait()
            case .sync:
                do {
                    let report = try await store.sync(dueOnly: true)
                    var retryIn: Duration?
                    if let retry = try? await store.nextRetryMs() { retryIn = .milliseconds(retry - store.configuration.clock().milliseconds) }
                    tell(model.take(.synced(report, retryIn: retryIn), now: clock.now))
                } catch {
                    tell(model.take(.failed(error as? OutpostError ?? .storage("\(error)")), now: clock.now))
                }
            case .sleep(let due, let startPoll):
                if let id = startPoll, let longPoll = options.longPoll { poll = Self.longPoll(id, store: store, timeout: longPoll, inbox: inbox, wake: wake) }
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { await wake.wait() }
                    group.addTask { try? await clock.sleep(until: due, tolerance: nil) }
                    _ = await group.next()
                    group.cancelAll()
                }
            }
        }
    }

    /// Holds the long poll numbered `id` open; its outcome goes to the inbox, unless it was
    /// cancelled (the loop no longer waits for it) or a later poll's outcome is there.
    private static func longPoll(_ id: Int, store: OutpostStore, timeout: Duration, inbox: Mailbox, wake: AsyncSignal) -> Task<Void, Never> {
        Task {
            let outcome: Result<OutpostStore.WaitResult, OutpostError>
            do { outcome = .success(try await store.waitForChanges(timeout: timeout)) } catch {
                outcome = .failure(error as? OutpostError ?? .storage("\(error)"))
            }
            if Task.isCancelled { return }
            inbox.withLock { box in
                if (box.poll?.id ?? 0) < id { box.poll = (id, outcome) }
            }
            wake.signal()
        }
    }
}

/// Wakes one waiter; a signal with nobody waiting is kept for the next wait.
final class AsyncSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    func signal() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let w = s.waiter {
                s.waiter = nil
                return w
            }
            s.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Drops a kept signal.
    func clear() {
        state.withLock { $0.pending = false }
    }

    /// Returns at the next signal (or at once for a kept one), or when the task is cancelled.
    func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.pending {
                        s.pending = false
                        return true
                    }
                    if Task.isCancelled { return true }
                    s.waiter = c
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume()
        }
    }
}
