import OutpostCore

/// The scheduler's decisions, as a value (docs/client.md, "The scheduler"): when to sync,
/// when to hold a long poll open, how long to back off, when to wait for the conditions.
/// `SyncScheduler.run` feeds it what happened (`take`) and performs the step it asks for
/// (`next`): a sync, a long poll, a wait. It reads no clock and sleeps on none, so its tests
/// step it with instants of their own.
struct SchedulerModel<Instant: InstantProtocol> where Instant.Duration == Duration {
    /// What happened.
    enum Input {
        /// A local edit or `syncNow()` asked for a sync.
        case demanded
        /// The long poll numbered `id` ended so.
        case pollEnded(id: Int, outcome: Result<OutpostStore.WaitResult, OutpostError>)
        /// The sync ended well; `retryIn`: when the store's next retry is due, if any.
        case synced(SyncReport, retryIn: Duration?)
        /// The sync failed.
        case failed(OutpostError)
    }

    /// What to do next.
    enum Step: Equatable {
        /// The store closed: the scheduler's run ends.
        case stop
        /// Wait to be woken (a demand, a network state): no network state is known yet, or
        /// the conditions do not hold. `cancelPoll`: end the running long poll first.
        case waitForWake(cancelPoll: Bool)
        /// Sync now.
        case sync
        /// Wait until `until`, or to be woken; first start the long poll numbered
        /// `startPoll`, when there is one.
        case sleep(until: Instant, startPoll: Int?)
    }

    let options: SyncScheduler.Options
    /// Failures in a row: the backoff's attempt.
    private(set) var failures = 0
    /// When the next sync is due.
    private(set) var nextSync: Instant
    /// The number of the last long poll started; a poll's outcome counts only when it is
    /// the running one's (one cancelled when the conditions stopped holding is not).
    private(set) var pollId = 0
    /// True while a long poll runs.
    private(set) var polling = false
    /// Why it waits for the conditions; nil while they hold.
    private(set) var waiting: SyncConditions.Unmet?
    private(set) var stopped = false
    private var rng: Randomness

    init(options: SyncScheduler.Options, now: Instant, seed: UInt64? = nil) {
        self.options = options
        nextSync = now
        rng = Randomness(seed: seed)
    }

    /// Takes what happened; returns what to tell the app.
    mutating func take(_ input: Input, now: Instant) -> [SyncScheduler.Event] {
        switch input {
        case .demanded:
            // A demand made while it waits stays in `nextSync` until the conditions hold.
            nextSync = now
            return []
        case .pollEnded(let id, let outcome):
            guard id == pollId, polling else { return [] }
            polling = false
            switch outcome {
            case .success(.changed): return [.remoteChanges]
            case .success(.unchanged): return []
            case .success(.needsSync):
                nextSync = now
                return []
            case .failure(let failure): return failed(failure, now: now)
            }
        case .synced(let report, let retryIn):
            failures = 0
            nextSync = now.advanced(by: options.interval)
            if let retryIn { nextSync = min(nextSync, now.advanced(by: max(.zero, retryIn) + .milliseconds(1))) }
            return [.synced(report)]
        case .failed(let failure):
            return failed(failure, now: now)
        }
    }

    private mutating func failed(_ failure: OutpostError, now: Instant) -> [SyncScheduler.Event] {
        if failure == .closed {
            stopped = true
            return []
        }
        failures += 1
        nextSync = now.advanced(by: .milliseconds(options.backoff.delayMs(attempt: failures, using: &rng)))
        return [.failed(failure)]
    }

    /// The next step, with `network` the newest state the conditions reported (nil: none
    /// yet); returns it and what to tell the app.
    mutating func next(network: NetworkState?, now: Instant) -> (Step, [SyncScheduler.Event]) {
        if stopped { return (.stop, []) }
        guard let network else { return (.waitForWake(cancelPoll: false), []) }
        if let unmet = options.conditions.unmet(in: network) {
            var events: [SyncScheduler.Event] = []
            if unmet != waiting {
                waiting = unmet
                events.append(.waitingForConditions(unmet))
            }
            let cancel = polling
            polling = false
            return (.waitForWake(cancelPoll: cancel), events)
        }
        if waiting != nil {
            // The conditions hold again: sync at once.
            waiting = nil
            nextSync = now
        }
        if now >= nextSync { return (.sync, []) }
        var start: Int?
        if !polling, failures == 0, options.longPoll != nil {
            pollId += 1
            polling = true
            start = pollId
        }
        return (.sleep(until: nextSync, startPoll: start), [])
    }
}
