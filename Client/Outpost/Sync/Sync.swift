import OutpostCore

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
        runningSync = work
        defer { runningSync = nil }
        return try await withTaskCancellationHandler { try await work.value } onCancel: { work.cancel() }
    }

    /// The sync itself, under the gate.
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
        pulledThisSync = 0
        announce(.started)
        do {
            _ = try db()
            var pushFailure: OutpostError?
            if try read({ try $0.meta("rebasing") }) == nil {
                pushFailure = try await pushPhase(transport, dueOnly: dueOnly, report: &report)
            }
            // A push that failed on the network would fail the pull too; one that the
            // server refused (403, a conflict storm...) does not stop the pull.
            if let failure = pushFailure, case .transport(let t) = failure, !t.isServerAnswer { throw failure }
            let epochBefore = try read { try $0.meta("epoch") }
            let rebasingBefore = try read { try $0.meta("rebasing") } != nil
            try await pullPhase(transport, report: &report)
            let epochAfter = try read { try $0.meta("epoch") }
            // Pushing waits while the store re-pulls a history; a sync that ends a re-pull
            // (begun now, or cut short earlier by a failure or a crash) pushes what the re-pull
            // queued before it returns.
            let stillRePulling = try read { try $0.meta("rebasing") } != nil
            let finishedRePull = rebasingBefore && !stillRePulling
            if report.epochChanged || report.reoffered > 0 || epochAfter != epochBefore || finishedRePull {
                let pushed = report.pushed
                if let failure = try await pushPhase(transport, dueOnly: dueOnly, report: &report) { pushFailure = pushFailure ?? failure }
                // What that phase wrote comes back as the server stored it (its lineage, and its
                // commit time from a server whose answers leave it out), so the sync ends on
                // the copies the next change of history compares with.
                if report.pushed > pushed && pushFailure == nil { try await pullPhase(transport, report: &report) }
            }
            if let pushFailure { throw pushFailure }
            try write(durability: .normal) { d in
                try d.setMeta("last_sync_at", String(now()))
                try d.setMeta("last_error", nil)
            }
            report.epoch = try read { try $0.meta("epoch").flatMap(Epoch.init) }
            report.pending = try read { try $0.count(deliveries: ["queued", "sent"]) }
            compactIfDue()
            announce(.finished(report))
            return report
        } catch {
            let failed = error as? OutpostError ?? .storage("\(error)")
            failure = failed
            if failed != .closed { try? write { try $0.setMeta("last_error", failed.description) } }
            announce(.failed(failed.description))
            throw failed
        }
    }

    /// The server's limits, read from `/v1/info` at most every `limitsLifetime`.
    func limits(_ transport: any SyncTransport, refresh: Bool = false) async throws -> Limits {
        let time = now()
        if !refresh, let cached = cachedLimits, time - cached.fetchedAt < configuration.limitsLifetime.milliseconds, time >= cached.fetchedAt {
            return cached.limits
        }
        let info: ServerInfo
        do { info = try await transport.serverInfo() } catch { throw Self.transportFailure(error) }
        cachedLimits = (info.limits, time)
        return info.limits
    }

    static func transportFailure(_ error: any Error) -> OutpostError {
        if let t = error as? TransportError { return .transport(t) }
        if let o = error as? OutpostError { return o }
        return .transport(.noAnswer("\(error)"))
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
