import OutpostCore

// Pushing (docs/protocol.md section 4): what the store does for the session's `plan`, `send`,
// `record` and `retry` (Sync/SyncSession.swift decides what goes in which request and
// what an answer means; Engine/Engine.swift what it does to a record).
//
// - Per record only the head edit is sent; a later edit waits for its answer.
// - Before a request leaves, its changes are marked sent in one durable transaction; a
//   process that dies while they are out finds them sent, and sends them again as they were.

extension OutpostStore {
    /// What could be sent now, in queue order: each record's head edit, when (with
    /// `dueOnly`) its retry time has come, and not in `excluding`.
    func pushCandidates(_ d: LocalDatabase, now: Int64, dueOnly: Bool, excluding: Set<String>) throws -> [Candidate] {
        let context = try engineContext(d)
        var out: [Candidate] = []
        for key in try d.keysWithUnsettledEdits() {
            guard let model = try d.model(key), let head = model.head, !syncRun.inFlight.contains(head.changeId), !excluding.contains(head.changeId) else { continue }
            if dueOnly && !isDue(head.nextAttemptAt, now: now) { continue }
            guard let plain = Engine.outgoing(model, context) else { continue }
            out.append(Candidate(key: key, changeId: plain.changeId, bytes: try d.wire(plain).json.encoded().count))
        }
        return out
    }

    /// The context of a transition outside `transition` (for reading what would be sent, and
    /// for a record the store holds nothing of): it draws no change id.
    func engineContext(_ d: LocalDatabase) throws -> EngineContext {
        engineContext(phase: try phase(d))
    }

    func engineContext(phase: Phase) -> EngineContext {
        EngineContext(phase: phase, resolver: configuration.resolver, fieldKinds: syncRun.fieldKinds, now: now(), serverNow: serverNow(), clientId: clientId, backoff: { _ in 0 }, newChangeId: { "" },
                      versions: configuration.versions)
    }

    /// `{"clientId":"…","changes":[…]}` around the changes.
    var requestOverhead: Int { 32 + clientId.utf8.count }

    /// True when a change stored with retry time `time` is due at `now`. A retry time further
    /// ahead than the longest backoff was stored before the device's clock was set back: it
    /// is due now, else the queue would wait until the clock caught up.
    func isDue(_ time: Int64, now: Int64) -> Bool {
        time <= now || time > now &+ configuration.backoff.longestDelayMs
    }

    /// Sends one request; returns its answer for the session.
    func send(_ planned: [Candidate], _ p: inout SessionPerformer, _ report: inout SyncReport) async throws -> SessionEvent {
        // Durable before the request leaves: a change the server may apply must never come
        // back as not sent after a power loss (it could then be merged with a later edit).
        var sentBefore: [String: Bool] = [:]
        let changes: [Change] = try write { d in
            var out: [Change] = []
            for candidate in planned {
                let wasSent = try d.model(candidate.key)?.edit(candidate.changeId).map(Engine.isSent) ?? false
                let (effects, _) = try transition(candidate.key, .sending(changeId: candidate.changeId), d)
                for case .send(let c) in effects {
                    sentBefore[c.changeId] = wasSent
                    out.append(try d.wire(c))
                }
            }
            return out
        }
        p.sentBefore = sentBefore
        let ids = changes.map(\.changeId)
        if changes.isEmpty { return .pushAnswered(sent: [], .answered(epoch: nil, [])) }
        syncRun.inFlight.formUnion(ids)
        defer { syncRun.inFlight.subtract(ids) }
        let response: PushResponse
        do {
            response = try await p.transport.push(PushRequest(clientId: clientId, changes: changes, versions: configuration.versions), space: configuration.space)
        } catch {
            _ = try db()  // closed meanwhile: the changes stay sent
            let failure = Self.transportFailure(error)
            guard case .transport(let t) = failure else { throw failure }
            if case .refused(413, let envelope) = t,
               envelope.code == ErrorCode.tooManyChanges.rawValue || envelope.code == ErrorCode.payloadTooLarge.rawValue {
                return .pushAnswered(sent: ids, .tooLarge(code: envelope.code, message: envelope.message))
            }
            return .pushAnswered(sent: ids, .failed(t))
        }
        _ = try db()
        // The server's copies that conflicts carry, opened (an encrypted store's copy that
        // does not open is quarantined and met as a copy the app cannot read).
        var answers: [AnsweredChange] = []
        for result in response.results {
            let answer: ChangeAnswer
            switch result.status {
            case .applied: answer = .applied(result.version!, updatedAt: result.updatedAt)
            case .conflict: answer = .conflict(current: try result.current.map { try openedCopy($0, report: &report) })
            case .rejected:
                let reason = result.error ?? PushResult.RejectReason(code: "unknown", message: "rejected")
                if reason.code == ErrorCode.upgradeRequired.rawValue {
                    // Held until the app is the version the server names (one past this
                    // app's when it names none).
                    let collection = changes.first { $0.changeId == result.changeId }?.collection ?? ""
                    let minimum = reason.details?["minimum"]?.int64Value.map { Int(clamping: $0) }
                        ?? configuration.versions.version(for: collection) + 1
                    answer = .upgradeRequired(minimum: minimum, message: reason.message)
                } else {
                    answer = .rejected(code: reason.code, message: reason.message)
                }
            }
            answers.append(AnsweredChange(changeId: result.changeId, answer: answer))
        }
        return .pushAnswered(sent: ids, .answered(epoch: response.epoch, answers))
    }

    /// Applies the session's record events in one transaction, and tells observers.
    func settle(_ events: [KeyedEvent], report: inout SyncReport) throws {
        var keys: [RecordKey] = []
        try write(durability: .normal) { d in
            let phase = try phase(d)
            for e in events {
                let (effects, _) = try transition(e.key, e.event, d, phase: phase)
                account(effects, e.key, report: &report, keys: &keys)
            }
        }
        notify(StoreEvent(origin: .remote, keys: keys))
    }

    /// No answer settled the changes: each waits for its jittered backoff (or is due at
    /// once). `mayHaveApplied` false: this request certainly did not apply them.
    func scheduleRetry(_ batch: [Candidate], mayHaveApplied: Bool, immediately: Bool, sentBefore: [String: Bool], message: String,
                       report: inout SyncReport) throws {
        let time = now()
        var events: [KeyedEvent] = []
        for c in batch {
            let attempts = try read { try $0.model(c.key)?.edit(c.changeId)?.attempts ?? 1 }
            let retryAt = immediately ? 0 : time + configuration.backoff.delayMs(attempt: attempts, using: &rng)
            let event: RecordEvent = mayHaveApplied
                ? .noAnswer(changeId: c.changeId, retryAt: retryAt, message: message)
                : .refused(changeId: c.changeId, sentBefore: sentBefore[c.changeId] ?? true, retryAt: retryAt, message: message)
            events.append(KeyedEvent(key: c.key, event: event))
        }
        try settle(events, report: &report)
    }
}
