import OutpostCore

// Pulling (docs/protocol.md section 5), and how the store follows a new epoch.
//
// - Each page is applied in one transaction together with the cursor that follows it, so
//   a process killed mid-pull resumes where the last page ended.
// - A pulled version never replaces a newer one (seq order within an epoch); absence from
//   a page never deletes anything; tombstones are state.
// - A record with a change in flight or in doubt is not touched: the pulled version is kept
//   aside until the push's answer is known, then the newer of the two applies.
// - A record that cannot be decoded (or fails the app's validator) goes to the quarantine;
//   the pull goes on.
// - A page larger than the transport reads makes the store ask for half as many records.
//
// Epochs: a new epoch counts only when two requests of one sync report it: the pull with
// the cursor (`epoch_changed`, or a page of another epoch) and the pull from the start.
// For the first epoch a store hears of, the two are the first page and the request after
// it. The epoch must be later than the store's (a longer one is later; of two as long, the
// greater byte by byte) and not one of the last 32 it left. When the two disagree, or the
// epoch is refused, the sync fails and changes nothing. Then the store re-pulls the new
// history from its start (the phase `rePulling`, kept in the file so a crash resumes it):
// each record's copy becomes a left copy, which meets the new history's copy when it is
// pulled, or at the end of the re-pull, where the history lacks it (Engine.meet).
//
// Views (a server with rules, docs/rules.md): the cursor carries the view it was made
// under, and is kept whole. A `revoked` record drops the store's copies of it and keeps the
// app's unsettled edits (`dropCopies`). `view_changed` starts a view re-pull: the cursor
// goes back to the start of the epoch, each record the pull brings is marked seen, and at
// its end the copies of every record not seen are dropped the same way, never offered
// again: the token may no longer read them, which is not a loss of the server's.
// `history_compacted` (a cursor before the space's history horizon: compaction purged
// tombstones after it) starts the same re-pull: what the whole history from the start no
// longer holds was deleted, and its tombstone purged.

extension OutpostStore {
    /// Pulls until the server has nothing more.
    func pullPhase(_ transport: any SyncTransport, report: inout SyncReport) async throws {
        let limits = try await self.limits(transport)
        var pageLimit = max(1, min(configuration.pageLimit, limits.maxPageLimit))
        let maxBytes = max(1, min(limits.pageBytes, transport.maxResponseBytes - 65_536))
        var firstRequestOfSwitch = true
        var viewRestarts = 0
        var prefetch: Prefetch?
        defer { prefetch?.task.cancel() }
        while true {
            let d = try db()
            let epoch = try d.meta("epoch").flatMap(Epoch.init)
            let stored = try d.meta("cursor").flatMap(Cursor.init)
            let cursor = stored?.version

            guard let epoch, let cursor else {
                // The first epoch the store hears of: the first page and the next request
                // must both report it before anything is applied.
                let first = try await fetch(transport, since: nil, limit: &pageLimit, maxBytes: maxBytes)
                let second: PreparedPage
                do {
                    second = try await fetch(transport, since: first.next, view: first.view, limit: &pageLimit, maxBytes: maxBytes)
                } catch OutpostError.transport(.refused(409, let envelope)) where envelope.code == ErrorCode.epochChanged.rawValue {
                    throw OutpostError.epochDisagreement(first: first.epoch.rawValue, second: envelope.details?["epoch"]?.stringValue ?? "?")
                }
                guard second.epoch == first.epoch else {
                    throw OutpostError.epochDisagreement(first: first.epoch.rawValue, second: second.epoch.rawValue)
                }
                let retired = try read { try $0.retiredEpochs() }
                guard !retired.contains(first.epoch) else {
                    throw OutpostError.epochRefused(epoch: first.epoch.rawValue, current: nil, reason: "the store left this epoch before")
                }
                var keys: [RecordKey] = []
                try write(durability: .normal) { d in
                    let known = try d.allKeys()
                    if known.isEmpty {
                        try setPhase(.following(first.epoch), d)
                    } else {
                        try confirmHistory(first.epoch, known, d)
                    }
                    try apply(first, d, report: &report, keys: &keys)
                    try apply(second, d, report: &report, keys: &keys)
                    if !second.hasMore { try finishRePull(first.epoch, d, report: &report, keys: &keys) }
                }
                notify(StoreEvent(origin: .remote, keys: keys))
                if !second.hasMore { return }
                continue
            }

            let page: PreparedPage
            do {
                if let ahead = prefetch, ahead.since == stored {
                    prefetch = nil
                    // The fetch is a detached task: cancelling this sync must reach it.
                    (page, pageLimit) = try await withTaskCancellationHandler {
                        try await ahead.task.value
                    } onCancel: {
                        ahead.task.cancel()
                    }
                } else {
                    prefetch?.task.cancel()
                    prefetch = nil
                    page = try await fetch(transport, since: cursor, view: stored?.view, limit: &pageLimit, maxBytes: maxBytes)
                }
            } catch OutpostError.transport(.refused(409, let envelope)) where envelope.code == ErrorCode.epochChanged.rawValue {
                guard let reported = envelope.details?["epoch"]?.stringValue.flatMap(Epoch.init) else {
                    throw OutpostError.protocolViolation("epoch_changed without details.epoch")
                }
                guard firstRequestOfSwitch else { throw OutpostError.epochDisagreement(first: epoch.rawValue, second: reported.rawValue) }
                firstRequestOfSwitch = false
                try await switchEpoch(from: epoch, to: reported, transport, limit: &pageLimit, maxBytes: maxBytes, report: &report)
                continue
            } catch OutpostError.transport(.refused(409, let envelope))
                        where envelope.code == ErrorCode.viewChanged.rawValue || envelope.code == ErrorCode.historyCompacted.rawValue {
                // The rules or the token's claims changed, or compaction purged deletes
                // after the cursor: the same history is pulled again from the start, and
                // what it no longer holds is dropped, never offered again (a record deleted
                // and purged elsewhere must not come back from this device's copy). A
                // second restart within one sync fails it; the next sync goes on.
                guard viewRestarts < 2 else { throw OutpostError.transport(.refused(status: 409, envelope)) }
                viewRestarts += 1
                if envelope.code == ErrorCode.historyCompacted.rawValue { report.historyCompacted = true } else { report.viewChanged = true }
                try write(durability: .normal) { d in
                    try d.setMeta("cursor", Version.start(of: epoch).text)
                    try d.setMeta("view_repull", "1")
                    try d.clearViewSeen()
                }
                continue
            } catch OutpostError.transport(.refused(409, let envelope)) where envelope.code == ErrorCode.cursorAhead.rawValue {
                let head = envelope.details?["head"]?.int64Value.map { "\(envelope.details?["epoch"]?.stringValue ?? epoch.rawValue).\($0)" }
                throw OutpostError.cursorAhead(cursor: cursor.text, head: head)
            }
            if page.epoch != epoch {
                // A page of another history answered our cursor: it counts as the first report.
                guard firstRequestOfSwitch else { throw OutpostError.epochDisagreement(first: epoch.rawValue, second: page.epoch.rawValue) }
                firstRequestOfSwitch = false
                try await switchEpoch(from: epoch, to: page.epoch, transport, limit: &pageLimit, maxBytes: maxBytes, report: &report)
                continue
            }
            if page.hasMore {
                // Fetch the next page while this one is applied (the cursor it asks from is
                // where this page ends; it is used only if the cursor gets there).
                let space = configuration.space, validators = configuration.validators, cipher = self.cipher, since = page.next, view = page.view, limit = pageLimit
                prefetch = Prefetch(since: Cursor(since, view: view), task: Task.detached {
                    try await Self.fetchPage(transport, space: space, validators: validators, cipher: cipher, since: since, view: view, limit: limit, maxBytes: maxBytes)
                })
            }
            var keys: [RecordKey] = []
            try write(durability: .normal) { d in
                try apply(page, d, report: &report, keys: &keys)
                if !page.hasMore { try finishRePull(epoch, d, report: &report, keys: &keys) }
            }
            notify(StoreEvent(origin: .remote, keys: keys))
            if !page.hasMore { return }
        }
    }

    /// The second request of an epoch switch, the checks, and the start of the re-pull.
    private func switchEpoch(from current: Epoch, to reported: Epoch, _ transport: any SyncTransport, limit: inout Int, maxBytes: Int, report: inout SyncReport) async throws {
        let fromStart = try await fetch(transport, since: nil, limit: &limit, maxBytes: maxBytes)
        guard fromStart.epoch == reported else {
            throw OutpostError.epochDisagreement(first: reported.rawValue, second: fromStart.epoch.rawValue)
        }
        guard current < reported else {
            throw OutpostError.epochRefused(epoch: reported.rawValue, current: current.rawValue, reason: "it is earlier than the store's epoch")
        }
        guard try !read({ try $0.retiredEpochs() }).contains(reported) else {
            throw OutpostError.epochRefused(epoch: reported.rawValue, current: current.rawValue, reason: "the store left this epoch before")
        }
        var keys: [RecordKey] = []
        try write(durability: .normal) { d in
            try d.retire(current, keep: Self.retiredEpochLimit)
            try d.setMeta("cursor", nil)
            try confirmHistory(reported, try d.allKeys(), d)
            try apply(fromStart, d, report: &report, keys: &keys)
            if !fromStart.hasMore { try finishRePull(reported, d, report: &report, keys: &keys) }
        }
        report.epochChanged = true
        notify(StoreEvent(origin: .remote, keys: keys))
    }

    /// One pull request; halves `limit` while the answer is larger than the transport reads.
    func fetch(_ transport: any SyncTransport, since: Version?, view: String? = nil, limit: inout Int, maxBytes: Int, waitMs: Int = 0) async throws -> PreparedPage {
        let (page, used) = try await Self.fetchPage(transport, space: configuration.space, validators: configuration.validators, cipher: cipher,
                                                    since: since, view: view, limit: limit, maxBytes: maxBytes, waitMs: waitMs)
        limit = used
        return page
    }

    /// `fetch` off the actor (for a page fetched while the previous one is applied):
    /// returns the page, prepared, and the limit that worked. Preparing (encoding each
    /// record's data for storage, running the validators, freeing the decoded JSON) happens
    /// here too, so the actor's work on a page is SQLite alone.
    nonisolated static func fetchPage(_ transport: any SyncTransport, space: String, validators: [String: @Sendable (JSONObject) throws -> Void],
                                      cipher: RecordCipher?, since: Version?, view: String? = nil, limit: Int, maxBytes: Int, waitMs: Int = 0) async throws -> (PreparedPage, Int) {
        var limit = limit
        while true {
            do {
                let query = PullQuery(since: since, sinceView: view, limit: limit, maxBytes: maxBytes, waitMs: waitMs)
                let page = try await transport.pull(query, space: space)
                return (PreparedPage(page, validators: validators, cipher: cipher), limit)
            } catch TransportError.answerTooLarge(let cap) {
                guard limit > 1 else { throw OutpostError.transport(.answerTooLarge(limit: cap)) }
                limit = max(1, limit / 2)
            } catch {
                throw transportFailure(error)
            }
        }
    }

    /// A page being fetched while the store applies the one before it.
    struct Prefetch {
        let since: Cursor
        let task: Task<(PreparedPage, Int), any Error>
    }

    /// The store starts re-pulling the history `epoch`: every record's copy becomes a left
    /// copy, to be met there.
    func confirmHistory(_ epoch: Epoch, _ keys: [RecordKey], _ d: LocalDatabase) throws {
        let phase = Phase.rePulling(epoch)
        try setPhase(phase, d)
        for key in keys { try transition(key, .historyConfirmed, d, phase: phase) }
    }

    /// At the end of a re-pull: the left copies the history lacks are offered again, and the
    /// store follows the history.
    func finishRePull(_ epoch: Epoch, _ d: LocalDatabase, report: inout SyncReport, keys: inout [RecordKey]) throws {
        guard try d.meta("rebasing") != nil else { return }
        let phase = Phase.rePulling(epoch)
        for key in try d.keysWithLeftCopies() {
            let (effects, _) = try transition(key, .rePullFinished, d, phase: phase)
            account(effects, key, report: &report, keys: &keys)
        }
        try setPhase(.following(epoch), d)
    }

    /// Applies a page and moves the cursor past it (inside the caller's transaction).
    func apply(_ page: PreparedPage, _ d: LocalDatabase, report: inout SyncReport, keys: inout [RecordKey]) throws {
        pulledThisSync += page.items.count
        // At most `head - next.seq` records follow this page.
        let total = page.head.map { pulledThisSync + Int(clamping: max(0, $0 - page.next.seq)) }
        announce(.pulled(SyncProgress(pulled: pulledThisSync, approximateTotal: total)))
        let time = now()
        let phase = try phase(d)
        let viewRePull = try d.meta("view_repull") != nil
        for item in page.items {
            switch item {
            case .revoked(let key, _):
                let (effects, _) = try transition(key, .dropCopies, d, phase: phase)
                account(effects, key, report: &report, keys: &keys)
                if effects.contains(.show) { report.revoked += 1 }
            case .quarantine(let bad):
                if viewRePull, let collection = bad.collection, let id = bad.id { try d.markSeen(RecordKey(collection: collection, id: id)) }
                try d.quarantine(bad, at: time)
                report.quarantined += 1
                // The history holds the record at that version, though the app cannot read it.
                if let collection = bad.collection, let id = bad.id, let version = bad.version.flatMap(Version.init) {
                    let raw = try? JSONParser().parse(bad.raw)
                    let lineage = raw?["lineage"]?.stringValue.flatMap(Version.init), sameAs = raw?["sameAs"]?.stringValue.flatMap(Version.init)
                    let key = RecordKey(collection: collection, id: id)
                    let copy = Copy(version: version, body: nil, updatedAt: raw?["updatedAt"]?.int64Value, lineage: lineage, sameAs: sameAs)
                    let (effects, _) = try transition(key, .pulled(copy), d, phase: phase)
                    account(effects, key, report: &report, keys: &keys)
                }
            case .record(let record):
                if viewRePull { try d.markSeen(record.key) }
                if try applyPulled(record, d, phase: phase, report: &report, keys: &keys) { keys.append(record.key) }
            }
        }
        try d.setMeta("cursor", Cursor(page.next, view: page.view).text)
        if viewRePull && !page.hasMore { try finishViewRePull(d, phase: phase, report: &report, keys: &keys) }
    }

    /// At the end of a view re-pull: the copies of the records the new view did not bring
    /// are dropped; the app's unsettled edits of them stay, for the server to judge.
    func finishViewRePull(_ d: LocalDatabase, phase: Phase, report: inout SyncReport, keys: inout [RecordKey]) throws {
        for key in try d.keysNotSeen() {
            let (effects, _) = try transition(key, .dropCopies, d, phase: phase)
            account(effects, key, report: &report, keys: &keys)
            if effects.contains(.show) { report.revoked += 1 }
        }
        try d.clearViewSeen()
        try d.setMeta("view_repull", nil)
    }

    /// Applies one pulled record. Returns true when the store had no row of it (the app
    /// sees it now).
    func applyPulled(_ record: PreparedRecord, _ d: LocalDatabase, phase: Phase, report: inout SyncReport, keys: inout [RecordKey]) throws -> Bool {
        let copy = record.copy
        if try d.insertIfAbsent(record.key, copy) {
            report.pulled += 1
            return true
        }
        let (effects, _) = try transition(record.key, .pulled(copy), d, phase: phase)
        account(effects, record.key, report: &report, keys: &keys)
        return false
    }

    /// Pulls the current history again from its start at the next sync (a refresh: every
    /// record comes again and is applied by the usual rules, never over a newer version).
    /// Pending changes are kept.
    public func resetSync() async throws {
        try await acquireSyncGate()
        defer { releaseSyncGate() }
        try write { d in
            if let epoch = try d.meta("epoch").flatMap(Epoch.init) { try d.setMeta("cursor", Version.start(of: epoch).text) }
        }
    }

    /// Leaves the current epoch: it is retired (never followed again), and the next sync
    /// follows the epoch two of its requests report, whatever its order, unless it is one of
    /// the last 32 the store left. Pending changes are kept and re-based. The way out for a
    /// store that followed another deployment's epoch.
    ///
    /// - Parameter discardingCopies: false (the default): what the device holds that the
    ///   next history lacks is offered to it again, as after a server's data loss. True:
    ///   the copies the left history sent are dropped instead (records without an unsettled
    ///   local change, copies kept aside, copies queued to be offered again and not sent
    ///   yet), so records of another deployment (staging, another region) never reach the
    ///   one the store follows next; the app's own unsettled edits are kept and re-based.
    public func leaveEpoch(discardingCopies: Bool = false) async throws {
        try await acquireSyncGate()
        defer { releaseSyncGate() }
        var dropped: [RecordKey] = []
        try write { d in
            if let epoch = try d.meta("epoch").flatMap(Epoch.init) { try d.retire(epoch, keep: Self.retiredEpochLimit) }
            try setPhase(.detached, d)
            try d.setMeta("cursor", nil)
            if discardingCopies {
                for key in try d.allKeys() where try transition(key, .dropCopies, d, phase: .detached).effects.contains(.show) { dropped.append(key) }
            }
        }
        notify(StoreEvent(origin: .remote, keys: dropped))
    }

    // MARK: Long poll

    /// What `waitForChanges` found.
    public enum WaitResult: Sendable, Hashable {
        /// Records arrived and were applied.
        case changed
        /// Nothing arrived in time.
        case unchanged
        /// The server has more than one page, a new epoch, or the store's state moved: run
        /// `sync()`.
        case needsSync
    }

    /// Holds a long-poll pull open (docs/protocol.md section 5, `wait`) and applies what it
    /// brings. The request does not hold up `sync()` or saves; its page is applied only if
    /// the store's cursor did not move meanwhile.
    public func waitForChanges(timeout: Duration) async throws -> WaitResult {
        guard let transport else { throw OutpostError.noTransport }
        let d = try db()
        guard let epoch = try d.meta("epoch").flatMap(Epoch.init), let stored = try d.meta("cursor").flatMap(Cursor.init),
              try d.meta("rebasing") == nil, try d.meta("view_repull") == nil else { return .needsSync }
        let cursor = stored.version
        let limits = try await self.limits(transport)
        var limit = max(1, min(configuration.pageLimit, limits.maxPageLimit))
        let maxBytes = max(1, min(limits.pageBytes, transport.maxResponseBytes - 65_536))
        let waitMs = Int(min(max(timeout.milliseconds, 0), Int64(PullQuery.maxWaitMs)))
        let page: PreparedPage
        do {
            page = try await fetch(transport, since: cursor, view: stored.view, limit: &limit, maxBytes: maxBytes, waitMs: waitMs)
        } catch OutpostError.transport(.refused(409, _)) {
            return .needsSync
        }
        try await acquireSyncGate()
        defer { releaseSyncGate() }
        let current = try db()
        guard page.epoch == epoch, try current.meta("epoch") == epoch.rawValue, try current.meta("rebasing") == nil else { return .needsSync }
        if let moved = try current.meta("cursor").flatMap(Cursor.init)?.version, moved != cursor {
            // A sync ran meanwhile: when it got as far as this page, nothing is new.
            return moved.epoch == epoch && moved.seq >= page.next.seq ? .unchanged : .needsSync
        }
        var report = SyncReport()
        var keys: [RecordKey] = []
        try write(durability: .normal) { d in try apply(page, d, report: &report, keys: &keys) }
        notify(StoreEvent(origin: .remote, keys: keys))
        if page.hasMore { return .needsSync }
        return page.items.isEmpty ? .unchanged : .changed
    }
}
