import OutpostCore

// Pulling (PROTOCOL.md section 5), and how the store follows a new epoch.
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
// epoch is refused, the sync fails and changes nothing. Then the store pulls the new
// history from its start ("rebasing", kept in the file so a crash resumes it): records are
// compared with the device's copies, pending changes wait, and at the end
// - records the new history lacks are offered again as creates (tombstones as deletes); one
//   with unsettled changes that go as they are keeps the device's copy until they settle,
//   and it is offered again if they are all rejected;
// - records whose device copy is newer, by the server's own `updatedAt`, than the new
//   history's are offered again on top of it;
// - pending changes are re-based on what the new history holds.

extension OutpostStore {
    /// Pulls until the server has nothing more.
    func pullPhase(_ transport: any SyncTransport, report: inout SyncReport) async throws {
        let limits = try await self.limits(transport)
        var pageLimit = max(1, min(configuration.pageLimit, limits.maxPageLimit))
        let maxBytes = max(1, min(limits.pageBytes, transport.maxResponseBytes - 65_536))
        var firstRequestOfSwitch = true
        var prefetch: Prefetch?
        defer { prefetch?.task.cancel() }
        while true {
            let d = try db()
            let epoch = try d.meta("epoch").flatMap(Epoch.init)
            let cursor = try d.meta("cursor").flatMap(Version.init)

            guard let epoch, let cursor else {
                // The first epoch the store hears of: the first page and the next request
                // must both report it before anything is applied.
                let first = try await fetch(transport, since: nil, limit: &pageLimit, maxBytes: maxBytes)
                let second: PreparedPage
                do {
                    second = try await fetch(transport, since: first.next, limit: &pageLimit, maxBytes: maxBytes)
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
                    try d.setMeta("epoch", first.epoch.rawValue)
                    if try d.recordCount() > 0 {
                        try d.markAllForEpochCheck()
                        try d.setMeta("rebasing", "1")
                    }
                    try apply(first, d, report: &report, keys: &keys)
                    try apply(second, d, report: &report, keys: &keys)
                    if !second.hasMore, try d.meta("rebasing") != nil { try finishRebase(first.epoch, d, report: &report, keys: &keys) }
                }
                notify(StoreEvent(origin: .remote, keys: keys))
                if !second.hasMore { return }
                continue
            }

            let page: PreparedPage
            do {
                if let ahead = prefetch, ahead.since == cursor {
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
                    page = try await fetch(transport, since: cursor, limit: &pageLimit, maxBytes: maxBytes)
                }
            } catch OutpostError.transport(.refused(409, let envelope)) where envelope.code == ErrorCode.epochChanged.rawValue {
                guard let reported = envelope.details?["epoch"]?.stringValue.flatMap(Epoch.init) else {
                    throw OutpostError.protocolViolation("epoch_changed without details.epoch")
                }
                guard firstRequestOfSwitch else { throw OutpostError.epochDisagreement(first: epoch.rawValue, second: reported.rawValue) }
                firstRequestOfSwitch = false
                try await switchEpoch(from: epoch, to: reported, transport, limit: &pageLimit, maxBytes: maxBytes, report: &report)
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
                let space = configuration.space, validators = configuration.validators, since = page.next, limit = pageLimit
                prefetch = Prefetch(since: since, task: Task.detached {
                    try await Self.fetchPage(transport, space: space, validators: validators, since: since, limit: limit, maxBytes: maxBytes)
                })
            }
            var keys: [RecordKey] = []
            try write(durability: .normal) { d in
                try apply(page, d, report: &report, keys: &keys)
                if !page.hasMore, try d.meta("rebasing") != nil { try finishRebase(epoch, d, report: &report, keys: &keys) }
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
            try d.setMeta("epoch", reported.rawValue)
            try d.setMeta("cursor", nil)
            try d.markAllForEpochCheck()
            try d.setMeta("rebasing", "1")
            try apply(fromStart, d, report: &report, keys: &keys)
            if !fromStart.hasMore { try finishRebase(reported, d, report: &report, keys: &keys) }
        }
        report.epochChanged = true
        notify(StoreEvent(origin: .remote, keys: keys))
    }

    /// One pull request; halves `limit` while the answer is larger than the transport reads.
    func fetch(_ transport: any SyncTransport, since: Version?, limit: inout Int, maxBytes: Int, waitMs: Int = 0) async throws -> PreparedPage {
        let (page, used) = try await Self.fetchPage(transport, space: configuration.space, validators: configuration.validators,
                                                    since: since, limit: limit, maxBytes: maxBytes, waitMs: waitMs)
        limit = used
        return page
    }

    /// `fetch` off the actor (for a page fetched while the previous one is applied):
    /// returns the page, prepared, and the limit that worked. Preparing (encoding each
    /// record's data for storage, running the validators, freeing the decoded JSON) happens
    /// here too, so the actor's work on a page is SQLite alone.
    nonisolated static func fetchPage(_ transport: any SyncTransport, space: String, validators: [String: @Sendable (JSONObject) throws -> Void],
                                      since: Version?, limit: Int, maxBytes: Int, waitMs: Int = 0) async throws -> (PreparedPage, Int) {
        var limit = limit
        while true {
            do {
                let query = PullQuery(since: since, limit: limit, maxBytes: maxBytes, waitMs: waitMs)
                let page = try await transport.pull(query, space: space)
                return (PreparedPage(page, validators: validators), limit)
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
        let since: Version
        let task: Task<(PreparedPage, Int), any Error>
    }

    /// Applies a page and moves the cursor past it (inside the caller's transaction).
    func apply(_ page: PreparedPage, _ d: LocalDatabase, report: inout SyncReport, keys: inout [RecordKey]) throws {
        pulledThisSync += page.items.count
        // At most `head - next.seq` records follow this page.
        let total = page.head.map { pulledThisSync + Int(clamping: max(0, $0 - page.next.seq)) }
        announce(.pulled(SyncProgress(pulled: pulledThisSync, approximateTotal: total)))
        let sentKeys = try d.keysWithSentChanges()
        let time = now()
        for item in page.items {
            switch item {
            case .quarantine(let bad):
                try d.quarantine(bad, at: time)
                report.quarantined += 1
                try rebaseOnQuarantined(bad, d, sentKeys: sentKeys)
            case .record(let record):
                if try applyPulled(record, d, sentKeys: sentKeys, report: &report) { keys.append(record.key) }
            }
        }
        try d.setMeta("cursor", page.next.text)
    }

    /// Applies one pulled record. Returns true when what the app sees changed.
    func applyPulled(_ record: PreparedRecord, _ d: LocalDatabase, sentKeys: Set<RecordKey>, report: inout SyncReport) throws -> Bool {
        let key = record.key
        if !sentKeys.contains(key), try d.insertIfAbsent(record) {
            report.pulled += 1
            return true
        }
        let incoming = record.serverCopy
        guard var row = try d.record(key) else { return false }
        let before = row.view

        if sentKeys.contains(key) {
            // A change of this record was sent and its answer is not known: keep the pulled
            // version aside until it is.
            if let kept = try d.aside(key), !incoming.isNewer(than: kept) {} else { try d.setAside(key, incoming) }
            if row.epochCheck {
                row.epochCheck = false
                try d.write(row)
            }
            return false
        }

        if row.epochCheck {
            // First sight of the record in a new history.
            row.epochCheck = false
            if try meetInNewHistory(&row, incoming, d) {
                report.reoffered += 1
                try d.write(row)
                return false
            }
            try d.write(row)
            if !row.pending { report.pulled += 1 }
            return (row.pending ? row.view : incoming.body) != before
        }

        if let stored = row.server, !incoming.isNewer(than: stored) {
            // Never backwards. The same version coming back fills in what a push answer
            // did not say (the server's time and writer).
            if stored.version == incoming.version && stored.updatedAt == nil {
                row.server!.updatedAt = incoming.updatedAt
                row.server!.updatedBy = incoming.updatedBy
                try d.write(row)
            }
            return false
        }
        row.server = incoming
        try d.write(row)
        if row.pending { return false }
        report.pulled += 1
        return incoming.body != before
    }

    /// The device's row meets its record's copy `incoming` in a new history (at a re-pull, or
    /// when the answer to an in-doubt change is known). A device copy newer by the server's
    /// `updatedAt` is offered again on top, ahead of local edits made on it and not sent yet
    /// (seed 9368); otherwise pending edits are re-based on `incoming` when they knew as much.
    /// Returns true when the device's copy was offered again. The caller writes `row`.
    func meetInNewHistory(_ row: inout RecordRow, _ incoming: ServerCopy, _ d: LocalDatabase) throws -> Bool {
        if let device = row.server, device.version.epoch != incoming.version.epoch,
           committedLater(device.updatedAt, than: incoming.updatedAt), !device.body.sameContent(as: incoming.body) {
            if !row.pending {
                try offerAgain(&row, device, base: incoming.version, d)
                row.server = incoming
                return true
            }
            if try offerAheadOfUnsentEdits(device, base: incoming.version, row.key, d) {
                row.server = incoming
                return true
            }
        }
        if row.pending { try rebasePending(row.key, madeOn: row.server, onto: incoming, d) }
        row.server = incoming
        return false
    }

    /// When every unsettled change of `key` is a local edit not sent yet, made on the device's
    /// copy `device` of an older history: queues that copy, offered again on `base`, ahead of
    /// them (they are re-based on it when it is applied) and returns true. So an edit the
    /// server rejects never takes the copy, an acknowledged write of the old history, with
    /// it. (Found by outpost-sim, seeds 3430 and 9368.) Edits made on an older copy than the
    /// device's did not see it and are not put on top of it (seed 1064): they meet the
    /// resolver if the record exists.
    private func offerAheadOfUnsentEdits(_ device: ServerCopy, base: Version?, _ key: RecordKey, _ d: LocalDatabase) throws -> Bool {
        let unsettled = try d.entries(for: key)
        guard let first = unsettled.first, first.origin == .local, first.baseVersion == device.version,
              unsettled.allSatisfy({ $0.state == .pending || $0.state == .failed }) else { return false }
        for e in unsettled { try d.deleteEntry(position: e.position) }
        try offerAgain(device.body, base: base, originUpdatedAt: device.updatedAt, key, d)
        for e in unsettled { _ = try d.insert(e) }
        return true
    }

    /// Queues the row's copy `device` to be offered again on `base`; the app sees it, pending,
    /// until it is settled.
    func offerAgain(_ row: inout RecordRow, _ device: ServerCopy, base: Version?, _ d: LocalDatabase) throws {
        try offerAgain(device.body, base: base, originUpdatedAt: device.updatedAt, row.key, d)
        row.view = device.body
        row.pending = true
    }

    /// Queues a copy offered again to a new history.
    private func offerAgain(_ body: Body, base: Version?, originUpdatedAt: Int64?, _ key: RecordKey, _ d: LocalDatabase) throws {
        let time = now()
        try d.insert(QueueEntry(
            position: 0, changeId: Identifiers.changeID(nowMs: time, using: &rng), key: key, op: body.deleted ? .delete : .put,
            data: body.data, baseVersion: base, clientTime: time, state: .pending, attempts: 0, nextAttemptAt: 0,
            lastError: nil, errorCode: nil, origin: .reoffer, originUpdatedAt: originUpdatedAt, createdAt: time))
    }

    /// The end of a new history's re-pull: offer again what it lacks, re-base pending
    /// changes on what it holds.
    func finishRebase(_ epoch: Epoch, _ d: LocalDatabase, report: inout SyncReport, keys: inout [RecordKey]) throws {
        for var row in try d.recordsNeedingEpochCheck() {
            row.epochCheck = false
            let unsettled = try d.entries(for: row.key)
            if unsettled.isEmpty, let device = row.server {
                try offerAgain(&row, device, base: nil, d)
                row.server = nil
                report.reoffered += 1
            } else if let device = row.server, try offerAheadOfUnsentEdits(device, base: nil, row.key, d) {
                row.server = nil
                report.reoffered += 1
            }
            // Otherwise the record's unsettled changes (in doubt, or made on another copy) go
            // as they are, and the device keeps its copy of the old history: if they are all
            // rejected, that copy is offered again (see `afterRejection`), so a rejected edit
            // never takes it with it (seeds 56303, 83108).
            if row.pending {
                try d.write(row)
            } else {
                try d.deleteRecord(row.key)
                keys.append(row.key)
            }
        }
        for var e in try d.entries(in: [.pending, .failed]) {
            // A base of another history left now belongs to a record the new history lacks
            // (the others were re-based when their record arrived): the change is a create.
            if let base = e.baseVersion, base.epoch != epoch { e.baseVersion = nil }
            e.nextAttemptAt = 0
            try d.update(e)
        }
        // Changes queued until now may concern records an older history held (the new one
        // may lack them, so their row has no server copy): a put then a delete of such a
        // record must reach the server as a tombstone, never cancel out (see `enqueue`).
        try d.setMeta("rebased_through", String(try d.lastQueuePosition()))
        try d.setMeta("rebasing", nil)
    }

    /// Re-bases the pending changes of `key` on the new history's copy `incoming` when the
    /// edits knew as much: they were made on the device's copy `madeOn` of the old history,
    /// and that copy holds what `incoming` holds, or is newer by the server's `updatedAt`
    /// (the rule by which copies are offered again). A copy newer than anything the edits saw
    /// — or one that cannot be ordered, because the device's copy came from a push answer
    /// without `updatedAt` — is a concurrent write: the change goes as a create instead, the
    /// server answers with a conflict, and the resolver decides, as it would within one
    /// history. (Re-basing it there blindly made an offline edit overwrite, without the
    /// resolver, a write another device made after the restore: found by outpost-sim, seeds
    /// 92, 227 and, for a copy known from a push answer only, 10 and 285.)
    private func rebasePending(_ key: RecordKey, madeOn known: ServerCopy?, onto incoming: ServerCopy, _ d: LocalDatabase) throws {
        try rebasePending(key, madeOn: known, onto: incoming.version, updatedAt: incoming.updatedAt, body: incoming.body, d)
    }

    /// `rebasePending` for a copy of the new history known by its version and time, and by
    /// its content when the device could read it (`body`).
    func rebasePending(_ key: RecordKey, madeOn known: ServerCopy?, onto version: Version, updatedAt: Int64?, body: Body?, _ d: LocalDatabase) throws {
        for var e in try d.entries(for: key) where e.state == .pending || e.state == .failed {
            // A create stays a create; a base already in the new history stays.
            guard let base = e.baseVersion, base.epoch != version.epoch else { continue }
            var knewAsMuch = false
            if e.origin == .reoffer {
                // A copy offered again is ordered by the server's time, never by content: the
                // new history may hold the content it was put on top of, committed later.
                // (Found by outpost-sim, seed 12380.)
                knewAsMuch = committedLater(e.originUpdatedAt, than: updatedAt)
            } else if let known, known.version == base {
                knewAsMuch = body.map { known.body.sameContent(as: $0) } ?? false
                    || committedLater(known.updatedAt, than: updatedAt)
            }
            e.baseVersion = knewAsMuch ? version : nil
            try d.update(e)
        }
    }

    /// A record of a new history that the device cannot read (quarantined) still counts as
    /// seen there: pending edits made on a device copy newer than it by the server's
    /// `updatedAt` are re-based on it, as for a readable copy, instead of going as creates
    /// at the end of the re-pull, where the conflict would hand the resolver a choice the
    /// device already knew the answer to (an acknowledged write lost to a restored older
    /// copy: found by outpost-sim, seed 2612). A record without pending edits is left to the
    /// end of the re-pull, which offers the device's copy again. A record with a change in
    /// doubt waits until the change is known not applied (the quarantine keeps the copy; see
    /// `settleRejected`).
    private func rebaseOnQuarantined(_ bad: UndecodableRecord, _ d: LocalDatabase, sentKeys: Set<RecordKey>) throws {
        guard let collection = bad.collection, let id = bad.id, let version = bad.version.flatMap(Version.init) else { return }
        let key = RecordKey(collection: collection, id: id)
        guard !sentKeys.contains(key), var row = try d.record(key), row.epochCheck else { return }
        if try rebaseOnUnreadable(&row, version: version, raw: bad.raw, d) { try d.write(row) }
    }

    /// The pending edits of `row`, which holds a copy of another history, meet the current
    /// history's copy at `version` that the device cannot read (`raw`, as it came): a device
    /// copy newer by the server's `updatedAt` goes first, offered again on it, when the edits
    /// were made on that copy and not sent (so an edit the server rejects never takes it
    /// along, as in `meetInNewHistory`); otherwise the edits are re-based on it when they knew
    /// as much. Returns true when it did either (the caller writes `row`).
    func rebaseOnUnreadable(_ row: inout RecordRow, version: Version, raw: [UInt8], _ d: LocalDatabase) throws -> Bool {
        guard row.pending, let device = row.server, device.version.epoch != version.epoch else { return false }
        let updatedAt = (try? JSONParser().parse(raw))?["updatedAt"]?.int64Value
        if !(try committedLater(device.updatedAt, than: updatedAt) && offerAheadOfUnsentEdits(device, base: version, row.key, d)) {
            try rebasePending(row.key, madeOn: device, onto: version, updatedAt: updatedAt, body: nil, d)
        }
        row.epochCheck = false
        row.server = nil
        return true
    }

    /// Pulls the current history again from its start at the next sync (a refresh: every
    /// record comes again and is applied by the usual rules, never over a newer version).
    /// Pending changes are kept.
    public func resetSync() async throws {
        await acquireSyncGate()
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
        await acquireSyncGate()
        defer { releaseSyncGate() }
        var dropped: [RecordKey] = []
        try write { d in
            if let epoch = try d.meta("epoch").flatMap(Epoch.init) { try d.retire(epoch, keep: Self.retiredEpochLimit) }
            try d.setMeta("epoch", nil)
            try d.setMeta("cursor", nil)
            try d.setMeta("rebasing", nil)
            if discardingCopies { dropped = try d.discardServerCopies() }
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

    /// Holds a long-poll pull open (PROTOCOL.md section 5, `wait`) and applies what it
    /// brings. The request does not hold up `sync()` or saves; its page is applied only if
    /// the store's cursor did not move meanwhile.
    public func waitForChanges(timeout: Duration) async throws -> WaitResult {
        guard let transport else { throw OutpostError.noTransport }
        let d = try db()
        guard let epoch = try d.meta("epoch").flatMap(Epoch.init), let cursor = try d.meta("cursor").flatMap(Version.init),
              try d.meta("rebasing") == nil else { return .needsSync }
        let limits = try await self.limits(transport)
        var limit = max(1, min(configuration.pageLimit, limits.maxPageLimit))
        let maxBytes = max(1, min(limits.pageBytes, transport.maxResponseBytes - 65_536))
        let waitMs = Int(min(max(timeout.milliseconds, 0), Int64(PullQuery.maxWaitMs)))
        let page: PreparedPage
        do {
            page = try await fetch(transport, since: cursor, limit: &limit, maxBytes: maxBytes, waitMs: waitMs)
        } catch OutpostError.transport(.refused(409, _)) {
            return .needsSync
        }
        await acquireSyncGate()
        defer { releaseSyncGate() }
        let current = try db()
        guard page.epoch == epoch, try current.meta("epoch") == epoch.rawValue, try current.meta("rebasing") == nil else { return .needsSync }
        if let moved = try current.meta("cursor").flatMap(Version.init), moved != cursor {
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
