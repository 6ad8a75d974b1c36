import OutpostCore

// The store's side of a sync: it performs what the session (Sync/SyncSession.swift) asks
// and feeds back what came of it. The session decides the steps of a sync (what to fetch or
// send next, when to stop, retire an epoch or pull again); what a page or an answer does to a
// record is the engine's (Engine/Engine.swift); the long poll's verdict and cursor are the
// session's too (`SyncSession.longPollVerdict`), and so is halving a page's limit after an
// answer too large (`pageTooLarge`). A `.store` effect comes only from `reset` and `leave`,
// outside a sync (`OutpostStore.store`).

extension OutpostStore {
    /// One sync: pushes the queue, then pulls to the end of the server's history (and, when
    /// that brought a new epoch, pushes what it re-based or offered again).
    ///
    /// An explicit sync sends every unsettled change at once, those in doubt or failed
    /// included, whatever their retry time: the app or the user asked for it now. The
    /// stored retry times pace only a `SyncScheduler`'s automatic syncs.
    ///
    /// A second call waits for the first; cancelled while it waits, it throws
    /// `CancellationError` at once. On failure nothing local is lost: sent changes
    /// whose answer was not read are in doubt, others get a retry time, and the error is
    /// kept in `status().lastError`. While the store is suspended it throws
    /// `OutpostError.suspended`; a store opened by `reader` throws `readOnly`.
    @discardableResult
    public func sync() async throws -> SyncReport {
        try await sync(dueOnly: false)
    }

    /// One sync; with `dueOnly` (the scheduler's syncs), a change waits for its retry time.
    ///
    /// It runs in a task of its own, kept in `runningSync`, so that a suspension whose
    /// time runs out can cancel it (`suspend()`); cancelling the caller cancels it too.
    @discardableResult
    func sync(dueOnly: Bool) async throws -> SyncReport {
        guard file?.readOnly != true else { throw OutpostError.readOnly }
        guard let transport else { throw OutpostError.noTransport }
        try await acquireSyncGate()
        defer { releaseSyncGate() }
        let work = Task { try await self.run(transport, dueOnly: dueOnly) }
        syncRun.running = work
        defer { syncRun.running = nil }
        return try await withTaskCancellationHandler { try await work.value } onCancel: { work.cancel() }
    }

    /// The sync itself, under the gate: the session's effects, performed in order.
    private func run(_ transport: any SyncTransport, dueOnly: Bool) async throws -> SyncReport {
        let startedAt = now(), started = ContinuousClock.now
        var failure: OutpostError?
        var report = SyncReport()
        // Every answer of the sync is a reading of the server's clock, failed syncs' too;
        // and the sync is one entry of the device's telemetry, when the app opted in.
        defer {
            measureClock(transport)
            recordTelemetry(transport, startedAt: startedAt, started: started, report: report, failure: failure)
        }
        syncRun.pulled = 0
        announce(.started)
        var performer = SessionPerformer(transport: transport)
        defer { performer.cancel() }
        do {
            var (session, effects) = SyncSession.reduce(try read { try $0.session() }, .start(dueOnly: dueOnly))
            while !effects.isEmpty {
                let effect = effects.removeFirst()
                if case .succeed = effect { break }
                guard let event = try await perform(effect, session, &performer, &report) else { continue }
                let more: [SessionEffect]
                (session, more) = SyncSession.reduce(session, event)
                effects += more
            }
            try write(durability: .normal) { d in
                try d.setMeta(.lastSyncAt, String(now()))
                try d.setMeta(.lastError, nil)
                try d.setMeta(.lastProblem, nil)
            }
            report.epoch = session.phase.epoch
            report.pending = try read { try $0.count(deliveries: ["queued", "sent"]) }
            compactIfDue()
            pruneConflictJournal()
            announce(.finished(report))
            return report
        } catch {
            let failed = error as? OutpostError ?? .storage("\(error)")
            failure = failed
            if failed != .closed {
                try? write { d in
                    try d.setMeta(.lastError, failed.description)
                    try d.setMeta(.lastProblem, SyncProblem(failed).rawValue)
                }
            }
            announce(.failed(failed.description))
            throw failed
        }
    }

    /// Performs one effect; returns what came of it, when the session waits for that.
    private func perform(_ effect: SessionEffect, _ session: SyncSession, _ p: inout SessionPerformer, _ report: inout SyncReport) async throws -> SessionEvent? {
        switch effect {
        case .plan(let dueOnly, let refresh, let excluding):
            let limits: Limits
            do { limits = try await self.limits(p.transport, refresh: refresh) } catch let e as OutpostError { return .limitsFailed(e) }
            let time = now()
            let candidates = try read { d in try pushCandidates(d, now: time, dueOnly: dueOnly, excluding: excluding) }
            return .candidates(candidates, limits, overhead: requestOverhead)
        case .send(let batch):
            return try await send(batch, &p, &report)
        case .record(let events):
            try settle(events, report: &report)
            return nil
        case .retry(let batch, let mayHaveApplied, let message, let immediately):
            try scheduleRetry(batch, mayHaveApplied: mayHaveApplied, immediately: immediately, sentBefore: p.sentBefore, message: message, report: &report)
            return nil
        case .pruneSealed:
            // The sealed forms of what the push phase settled are no longer needed.
            if cipher != nil { try write(durability: .normal) { try $0.pruneSealed() } }
            return nil
        case .fetch(let since, let view, let holding, let limit):
            return try await fetch(since: since, view: view, holding: holding, limit: limit, &p)
        case .apply(let application):
            return try apply(application, &p, &report)
        case .restartView(let phase, let cursor, let compacted):
            if compacted { report.historyCompacted = true } else { report.viewChanged = true }
            try write(durability: .normal) { d in
                try d.storeSession(phase: phase, cursor: cursor)
                try d.clearViewSeen()
            }
            return nil
        case .epochChanged:
            report.epochChanged = true
            return nil
        case .succeed:
            return nil
        case .store:
            // The session emits it only for `reset` and `leave`, which never run inside a sync.
            throw OutpostError.protocolViolation("the session asked to store its state inside a sync")
        case .fail(let error):
            throw error
        }
    }

    /// The server's limits, read from `/v1/info` at most every `limitsLifetime`.
    func limits(_ transport: any SyncTransport, refresh: Bool = false) async throws -> Limits {
        let time = now()
        if !refresh, let cached = syncRun.limits(now: time, lifetime: configuration.limitsLifetime.milliseconds) { return cached }
        let info: ServerInfo
        do { info = try await transport.serverInfo() } catch { throw Self.transportFailure(error) }
        syncRun.keep(info.limits, readAt: time)
        return info.limits
    }

    /// Takes the sync gate (`SyncGate`): a cancelled waiter throws `CancellationError` at
    /// once. Refused with `suspended` while the store is suspending or suspended: a sync
    /// queued behind the one a suspension waits for does not prolong it.
    func acquireSyncGate() async throws {
        try await syncRun.gate.acquire()
        guard life.admitsSync else {
            syncRun.gate.release()
            throw OutpostError.suspended
        }
    }

    func releaseSyncGate() {
        syncRun.gate.release()
    }

    static func transportFailure(_ error: any Error) -> OutpostError {
        if let t = error as? TransportError { return .transport(t) }
        if let o = error as? OutpostError { return o }
        return .transport(.noAnswer("\(error)"))
    }
}

/// What the store keeps while it performs one sync's effects: the pages fetched and not
/// yet applied, the page being fetched ahead, and what the last push request carried.
struct SessionPerformer {
    let transport: any SyncTransport
    var pages: [PreparedPage] = []
    var prefetch: OutpostStore.Prefetch?
    /// Per change of the last push request: whether an earlier request carried it.
    var sentBefore: [String: Bool] = [:]

    init(transport: any SyncTransport) { self.transport = transport }

    mutating func cancel() {
        prefetch?.task.cancel()
        prefetch = nil
    }
}

extension TransportError {
    /// True when the server itself answered (a protocol error with a 4xx status), as
    /// opposed to the network or a proxy failing.
    var isServerAnswer: Bool {
        if case .refused(let status, _) = self { return status < 500 }
        return false
    }
}
