import OutpostCore
import Synchronization

/// Runs a store's `sync()` for the app: at start, after local edits, on demand, on an
/// interval, and when a failed change's retry time comes; after a failed sync it waits a
/// jittered, growing delay. Between syncs it can hold a long poll open, so another
/// device's write arrives within moments.
///
/// ```swift
/// let scheduler = SyncScheduler(store: store)
/// await scheduler.start()
/// for await event in scheduler.events { ... }   // .synced(report), .failed(error), .remoteChanges
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
    }

    /// The store it runs.
    public let store: OutpostStore
    /// Its settings.
    public let options: Options
    /// Everything it does, as it happens (the newest 256 are kept for a slow reader).
    public nonisolated let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private nonisolated let wake = AsyncSignal()
    private var loop: Task<Void, Never>?
    private var edits: Task<Void, Never>?

    /// A scheduler for `store` (not started).
    public init(store: OutpostStore, options: Options = Options()) {
        self.store = store
        self.options = options
        (events, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(256))
    }

    /// Starts syncing (at once). Does nothing when already started.
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
        loop = Task { await Self.run(store: store, options: options, wake: wake, inbox: inbox, events: continuation) }
    }

    /// Stops: a long poll or a sleep ends at once; a sync in progress finishes first.
    public func stop() async {
        edits?.cancel()
        loop?.cancel()
        await loop?.value
        loop = nil
        edits = nil
    }

    /// Asks for a sync now (or right after the one in progress).
    public nonisolated func syncNow() {
        demand()
    }

    /// What woke the loop, besides time: a demand (a local edit or `syncNow()`), or the end
    /// of the long poll with its outcome.
    private struct Inbox: Sendable {
        var demanded = false
        var poll: Result<OutpostStore.WaitResult, OutpostError>?
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

    private static func run(store: OutpostStore, options: Options, wake: AsyncSignal, inbox: Mailbox, events: AsyncStream<Event>.Continuation) async {
        var rng = Randomness(seed: nil)
        var failures = 0
        var nextSync = ContinuousClock.now
        // The long poll runs beside everything else: a local edit syncs at once instead of
        // waiting for the poll to be cancelled, and the poll's page is applied only if the
        // store's cursor has not moved meanwhile.
        var poll: Task<Void, Never>?
        defer { poll?.cancel() }
        while !Task.isCancelled {
            let (demanded, polled) = inbox.withLock { box -> (Bool, Result<OutpostStore.WaitResult, OutpostError>?) in
                defer { box = Inbox() }
                return (box.demanded, box.poll)
            }
            if demanded { nextSync = ContinuousClock.now }
            if let polled {
                poll = nil
                switch polled {
                case .success(.changed): events.yield(.remoteChanges)
                case .success(.unchanged): break
                case .success(.needsSync): nextSync = ContinuousClock.now
                case .failure(let failure):
                    if failure == .closed { return }
                    failures += 1
                    events.yield(.failed(failure))
                    nextSync = ContinuousClock.now + .milliseconds(options.backoff.delayMs(attempt: failures, using: &rng))
                }
            }
            if ContinuousClock.now >= nextSync {
                do {
                    let report = try await store.sync(dueOnly: true)
                    failures = 0
                    events.yield(.synced(report))
                    nextSync = ContinuousClock.now + options.interval
                    if let retry = try? await store.nextRetryAt() {
                        let delay = max(0, retry - store.configuration.clock()) + 1
                        nextSync = min(nextSync, ContinuousClock.now + .milliseconds(delay))
                    }
                } catch {
                    let failure = error as? OutpostError ?? .storage("\(error)")
                    if failure == .closed { return }
                    failures += 1
                    events.yield(.failed(failure))
                    nextSync = ContinuousClock.now + .milliseconds(options.backoff.delayMs(attempt: failures, using: &rng))
                }
                continue
            }
            if poll == nil, failures == 0, let longPoll = options.longPoll {
                poll = Task {
                    let outcome: Result<OutpostStore.WaitResult, OutpostError>
                    do { outcome = .success(try await store.waitForChanges(timeout: longPoll)) } catch {
                        outcome = .failure(error as? OutpostError ?? .storage("\(error)"))
                    }
                    inbox.withLock { $0.poll = outcome }
                    wake.signal()
                }
            }
            let remaining = nextSync - ContinuousClock.now
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await wake.wait() }
                group.addTask { try? await Task.sleep(for: remaining) }
                _ = await group.next()
                group.cancelAll()
            }
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
