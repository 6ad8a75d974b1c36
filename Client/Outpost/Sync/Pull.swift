import OutpostCore

// Pulling (docs/protocol.md section 5): what the store does for the session's `fetch` and
// `apply` (Sync/SyncSession.swift decides which page, and what an answer means).
//
// - Each page is applied in one transaction together with the cursor that follows it, so
//   a process killed mid-pull resumes where the last page ended.
// - What a pulled copy does to a record is the engine's (`.pulled`, `.dropCopies`), a
//   record the store has no row of included: its model is reduced from the empty one and
//   inserted without a read.
// - A record that cannot be decoded (or fails the app's validator) goes to the quarantine;
//   the pull goes on.
// - A page larger than the transport reads is told to the session, which asks for half as
//   many records (`pageTooLarge`).
// - While a page is applied, the next one is fetched (it is used only if the session asks
//   for it).

extension OutpostStore {
    /// Fetches one page for the session: the one fetched ahead when it is the one asked for.
    func fetch(since: Version?, view: String?, holding: Bool, limit: Int?, _ p: inout SessionPerformer) async throws -> SessionEvent {
        let limits: Limits
        do { limits = try await self.limits(p.transport) } catch let e as OutpostError { return .failed(e) }
        let pageLimit = limit ?? max(1, min(configuration.pageLimit, limits.maxPageLimit))
        let maxBytes = max(1, min(limits.pageBytes, p.transport.maxResponseBytes - 65_536))
        let page: PreparedPage
        do {
            if let ahead = p.prefetch, ahead.since == since, ahead.view == view, ahead.holding == holding, ahead.limit == pageLimit {
                p.prefetch = nil
                // The fetch is a detached task: cancelling this sync must reach it.
                page = try await withTaskCancellationHandler { try await ahead.task.value } onCancel: { ahead.task.cancel() }
            } else {
                p.cancel()
                page = try await Self.fetchPage(p.transport, space: configuration.space, validators: configuration.validators, cipher: cipher,
                                                since: since, view: view, holding: holding, limit: pageLimit, maxBytes: maxBytes, clientId: clientId)
            }
        } catch OutpostError.transport(.refused(let status, let envelope)) {
            return .pullRefused(status: status, envelope)
        } catch OutpostError.transport(.answerTooLarge(let cap)) {
            return .pageTooLarge(since: since, view: view, limit: pageLimit, cap: cap)
        } catch let e as OutpostError {
            return .failed(e)
        }
        if page.hasMore {
            // Fetch the next page while this one is applied.
            let space = configuration.space, validators = configuration.validators, cipher = self.cipher, next = page.next, view = page.view
            let clientId = self.clientId
            let transport = p.transport
            p.prefetch = Prefetch(since: next, view: view, holding: holding, limit: pageLimit, task: Task.detached {
                try await Self.fetchPage(transport, space: space, validators: validators, cipher: cipher, since: next, view: view, holding: holding,
                                         limit: pageLimit, maxBytes: maxBytes, clientId: clientId)
            })
        }
        p.pages.append(page)
        return .page(page.header, storeEmpty: try read { try $0.isEmpty() })
    }

    /// `fetch` off the actor: returns the page, prepared. Preparing (encoding each record's
    /// data for storage, running the validators, freeing the decoded JSON) happens here
    /// too, so the actor's work on a page is SQLite alone.
    nonisolated static func fetchPage(_ transport: any SyncTransport, space: String, validators: [String: @Sendable (JSONObject) throws -> Void],
                                      cipher: RecordCipher?, since: Version?, view: String? = nil, holding: Bool = false, limit: Int, maxBytes: Int,
                                      waitMs: Int = 0, clientId: String) async throws -> PreparedPage {
        do {
            let query = PullQuery(since: since, sinceView: view, limit: limit, maxBytes: maxBytes, waitMs: waitMs, holding: holding, clientId: clientId)
            return PreparedPage(try await transport.pull(query, space: space), validators: validators, cipher: cipher)
        } catch {
            throw transportFailure(error)
        }
    }

    /// A page being fetched while the store applies the one before it.
    struct Prefetch {
        let since: Version?
        let view: String?
        let holding: Bool
        let limit: Int
        let task: Task<PreparedPage, any Error>
    }

    /// Applies the session's pages in one transaction (see `Application`).
    func apply(_ a: Application, _ p: inout SessionPerformer, _ report: inout SyncReport) throws -> SessionEvent {
        // The pages fetched since the last `apply`, which are the session's.
        let pages = p.pages
        p.pages.removeAll()
        guard pages.map(\.header) == a.pages else { throw OutpostError.protocolViolation("the session applies pages the store did not fetch") }
        let reofferedBefore = report.reoffered
        var keys: [RecordKey] = []
        // The server's field kinds as of the last page (none when it sends none), kept
        // with the pages so that a merge after a restart, offline, uses them too.
        let kinds = pages.last.map { $0.fields ?? FieldKinds() }
        try write(durability: .normal) { d in
            if let kinds, kinds != syncRun.fieldKinds { try d.setMeta(.fieldKinds, String(decoding: kinds.encoded(), as: UTF8.self)) }
            let pulling = a.pulling.engine
            if let epoch = a.retire { try d.retire(epoch, keep: SyncSession.retiredLimit) }
            if a.clearSeen { try d.clearViewSeen() }
            if a.confirm {
                // Every record's copy becomes a left copy, to be met in the new history.
                for key in try d.allKeys() { try transition(key, .historyConfirmed, d, phase: pulling) }
            }
            for page in pages { try apply(page, marksSeen: a.pulling.marksSeen, phase: pulling, d, report: &report, keys: &keys) }
            if let unseen = a.dropUnseen {
                // The copies of the records the pull did not bring are dropped, as the session
                // says; the app's unsettled edits of them stay, for the server to judge.
                for key in try d.keysNotSeen() where try d.model(key).map(unseen.drops) ?? false {
                    try drop(key, d, phase: pulling, report: &report, keys: &keys)
                }
                try d.clearViewSeen()
            }
            if a.finishRePull {
                // The left copies the history lacks are offered again.
                for key in try d.keysWithLeftCopies() {
                    let (effects, _) = try transition(key, .rePullFinished, d, phase: pulling)
                    account(effects, key, report: &report, keys: &keys)
                }
            }
            try d.storeSession(phase: a.phase, cursor: a.cursor)
        }
        if let kinds { syncRun.fieldKinds = kinds }
        notify(StoreEvent(origin: .remote, keys: keys))
        return .applied(reoffered: report.reoffered > reofferedBefore)
    }

    /// Applies one page's records (inside the caller's transaction).
    func apply(_ page: PreparedPage, marksSeen: Bool, phase: Phase, _ d: LocalDatabase, report: inout SyncReport, keys: inout [RecordKey]) throws {
        syncRun.pulled += page.items.count
        // At most `head - next.seq` records follow this page.
        let total = page.head.map { syncRun.pulled + Int(clamping: max(0, $0 - page.next.seq)) }
        announce(.pulled(SyncProgress(pulled: syncRun.pulled, approximateTotal: total)))
        let time = now()
        let context = engineContext(phase: phase)
        for item in page.items {
            switch item {
            case .revoked(let key, _):
                try drop(key, d, phase: phase, report: &report, keys: &keys)
            case .quarantine(let bad):
                if marksSeen, let collection = bad.collection, let id = bad.id { try d.markSeen(RecordKey(collection: collection, id: id)) }
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
                if marksSeen { try d.markSeen(record.key) }
                try applyPulled(record, d, phase: phase, context: context, report: &report, keys: &keys)
            }
        }
    }

    /// Applies one pulled record (the engine's `.pulled`). A record the store has no row of
    /// holds nothing (a record with edits always has one): its model is the empty one's
    /// after the event, inserted without a read (the common case of an initial sync).
    func applyPulled(_ record: PreparedRecord, _ d: LocalDatabase, phase: Phase, context: EngineContext, report: inout SyncReport, keys: inout [RecordKey]) throws {
        let (fresh, effects) = Engine.reduce(RecordModel(key: record.key), .pulled(record.copy), context)
        if try d.insertIfAbsent(fresh) {
            account(effects, record.key, report: &report, keys: &keys)
        } else {
            let (effects, _) = try transition(record.key, .pulled(record.copy), d, phase: phase)
            account(effects, record.key, report: &report, keys: &keys)
        }
    }

    /// `dropCopies`: the record is out of the token's view.
    private func drop(_ key: RecordKey, _ d: LocalDatabase, phase: Phase, report: inout SyncReport, keys: inout [RecordKey]) throws {
        let (effects, _) = try transition(key, .dropCopies, d, phase: phase)
        account(effects, key, report: &report, keys: &keys)
        if effects.contains(.show) { report.revoked += 1 }
    }

    /// Pulls the current history again from its start at the next sync (a refresh: every
    /// record comes again and is applied by the usual rules, never over a newer version; at
    /// its end the live copies of records it did not bring, deleted since or out of view,
    /// are dropped). Pending changes are kept and sent.
    public func resetSync() async throws {
        try await acquireSyncGate()
        defer { releaseSyncGate() }
        try write { d in try store(SyncSession.reduce(try d.session(), .reset), d) }
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
            try store(SyncSession.reduce(try d.session(), .leave), d)
            if discardingCopies {
                for key in try d.allKeys() where try transition(key, .dropCopies, d, phase: .detached).effects.contains(.show) { dropped.append(key) }
            }
        }
        notify(StoreEvent(origin: .remote, keys: dropped))
    }

    /// Stores what the session decided outside a sync (`SessionEffect.store`).
    private func store(_ decided: (SyncSession, [SessionEffect]), _ d: LocalDatabase) throws {
        for case .store(let retire, let clearSeen) in decided.1 {
            if let retire { try d.retire(retire, keep: SyncSession.retiredLimit) }
            if clearSeen { try d.clearViewSeen() }
            try d.storeSession(phase: decided.0.phase, cursor: decided.0.cursor)
        }
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
    /// the session still is where the poll asked from (`SyncSession.longPollVerdict`).
    public func waitForChanges(timeout: Duration) async throws -> WaitResult {
        guard let transport else { throw OutpostError.noTransport }
        guard let asked = try read({ try $0.session() }).longPollCursor else { return .needsSync }
        let limits = try await self.limits(transport)
        let limit = max(1, min(configuration.pageLimit, limits.maxPageLimit))
        let maxBytes = max(1, min(limits.pageBytes, transport.maxResponseBytes - 65_536))
        let waitMs = Int(min(max(timeout.milliseconds, 0), Int64(PullQuery.maxWaitMs)))
        let page: PreparedPage
        do {
            page = try await Self.fetchPage(transport, space: configuration.space, validators: configuration.validators, cipher: cipher,
                                            since: asked.version, view: asked.view, limit: limit, maxBytes: maxBytes, waitMs: waitMs, clientId: clientId)
        } catch OutpostError.transport(.refused(409, _)) {
            return .needsSync
        } catch OutpostError.transport(.answerTooLarge) {
            // More than one answer holds: a sync pulls it in smaller pages.
            return .needsSync
        }
        try await acquireSyncGate()
        defer { releaseSyncGate() }
        let session = try read { try $0.session() }
        let phase: SyncPhase, cursor: Cursor
        switch session.longPollVerdict(asked: asked, page: page.header) {
        case .unchanged: return .unchanged
        case .needsSync: return .needsSync
        case .apply(let p, let c): (phase, cursor) = (p, c)
        }
        var report = SyncReport()
        var keys: [RecordKey] = []
        try write(durability: .normal) { d in
            try apply(page, marksSeen: false, phase: phase.engine, d, report: &report, keys: &keys)
            try d.storeSession(phase: phase, cursor: cursor)
        }
        notify(StoreEvent(origin: .remote, keys: keys))
        if page.hasMore { return .needsSync }
        return page.items.isEmpty ? .unchanged : .changed
    }
}

extension PreparedPage {
    /// What the session knows of the page.
    var header: PageHeader { PageHeader(epoch: epoch, next: next, view: view, hasMore: hasMore) }
}
