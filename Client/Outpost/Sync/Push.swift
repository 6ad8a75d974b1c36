import OutpostCore

// Pushing (docs/protocol.md section 4). What each answer does to a record is the engine's
// (Engine/Engine.swift); this file moves changes to and from the network.
//
// - Changes go in queue order, split to the server's `maxChangesPerPush` and
//   `maxRequestBytes` (from `/v1/info`); a 413 halves the batches and re-reads the limits.
// - Per record only the head edit is sent; a later edit waits for its answer.
// - Before a request leaves, its changes are marked sent in one durable transaction; a
//   process that dies while they are out finds them sent, and sends them again as they were.
// - Only a read and decoded answer of the followed history settles a change.
// - A push phase runs at most three rounds (first sends, then changes unblocked or
//   resolved by the answers), and sends a change at most once, so no server answer can
//   keep a sync busy.

extension OutpostStore {
    enum BatchOutcome {
        case settled
        case tooLarge
        case failed(OutpostError)
    }

    /// Pushes what is unsettled (with `dueOnly`, only what is due). Returns the failure that
    /// stopped it, if any.
    func pushPhase(_ transport: any SyncTransport, dueOnly: Bool, report: inout SyncReport) async throws -> OutpostError? {
        let failure = try await pushRounds(transport, dueOnly: dueOnly, report: &report)
        // The sealed forms of what this phase settled are no longer needed.
        if cipher != nil { try write(durability: .normal) { try $0.pruneSealed() } }
        return failure
    }

    private func pushRounds(_ transport: any SyncTransport, dueOnly: Bool, report: inout SyncReport) async throws -> OutpostError? {
        var batchCap = Int.max
        var sent = Set<String>()
        var rounds = 0
        var shrinks = 0
        while rounds < 3 {
            rounds += 1
            let limits: Limits
            do { limits = try await self.limits(transport) } catch let e as OutpostError { return e }
            let time = now()
            let candidates = try write(durability: .normal) { d in try outgoing(d, now: time, dueOnly: dueOnly, limits: limits, report: &report) }
                .filter { !sent.contains($0.changeId) }
            if candidates.isEmpty { return nil }
            let batches = makeBatches(candidates, limits: limits, cap: batchCap)
            var shrunk = false
            for batch in batches {
                switch try await send(batch, transport, report: &report) {
                case .settled:
                    sent.formUnion(batch.map(\.changeId))
                case .tooLarge:
                    batchCap = max(1, batch.count / 2)
                    shrinks += 1
                    do { _ = try await self.limits(transport, refresh: true) } catch let e as OutpostError { return e }
                    shrunk = true
                case .failed(let error):
                    return error
                }
                if shrunk { break }
            }
            if shrunk && shrinks < 24 { rounds -= 1 }
        }
        return nil
    }

    /// The changes to send now, in queue order: each record's head edit, when (with
    /// `dueOnly`) its retry time has come. A change too large for any request is rejected
    /// here, for good: it could never be sent.
    func outgoing(_ d: LocalDatabase, now: Int64, dueOnly: Bool, limits: Limits, report: inout SyncReport) throws -> [Change] {
        let context = try engineContext(d)
        var out: [Change] = []
        var keys: [RecordKey] = []
        for key in try d.keysWithUnsettledEdits() {
            guard let model = try d.model(key), let head = model.head, !inFlight.contains(head.changeId) else { continue }
            if dueOnly && !isDue(head.nextAttemptAt, now: now) { continue }
            guard let plain = Engine.outgoing(model, context) else { continue }
            let change = try d.wire(plain)
            let size = change.json.encoded().count
            if size + requestOverhead > limits.maxRequestBytes {
                let effects = try transition(key, .rejected(changeId: change.changeId, code: ErrorCode.payloadTooLarge.rawValue,
                                                            message: "the change is \(size) bytes encoded; the server takes requests of at most \(limits.maxRequestBytes)"), d)
                account(effects.effects, key, report: &report, keys: &keys)
                continue
            }
            out.append(change)
        }
        notify(StoreEvent(origin: .remote, keys: keys))
        return out
    }

    /// The context of a transition outside `transition` (for reading what would be sent).
    func engineContext(_ d: LocalDatabase) throws -> EngineContext {
        EngineContext(phase: try phase(d), resolver: configuration.resolver, now: now(), serverNow: serverNow(), clientId: clientId, backoff: { _ in 0 }, newChangeId: { "" })
    }

    /// `{"clientId":"…","changes":[…]}` around the changes.
    var requestOverhead: Int { 32 + clientId.utf8.count }

    /// True when a change stored with retry time `time` is due at `now`. A retry time further
    /// ahead than the longest backoff was stored before the device's clock was set back: it
    /// is due now, else the queue would wait until the clock caught up.
    func isDue(_ time: Int64, now: Int64) -> Bool {
        time <= now || time > now &+ configuration.backoff.longestDelayMs
    }

    /// Splits `candidates` into requests the server takes.
    func makeBatches(_ candidates: [Change], limits: Limits, cap: Int) -> [[Change]] {
        let maxCount = max(1, min(limits.maxChangesPerPush, cap))
        var batches: [[Change]] = []
        var current: [Change] = []
        var bytes = requestOverhead
        for change in candidates {
            let size = change.json.encoded().count
            if !current.isEmpty && (current.count >= maxCount || bytes + size + 1 > limits.maxRequestBytes) {
                batches.append(current)
                current = []
                bytes = requestOverhead
            }
            current.append(change)
            bytes += size + 1
        }
        if !current.isEmpty { batches.append(current) }
        return batches
    }

    /// Sends one request and settles what its answer settles.
    func send(_ planned: [Change], _ transport: any SyncTransport, report: inout SyncReport) async throws -> BatchOutcome {
        // Durable before the request leaves: a change the server may apply must never come
        // back as not sent after a power loss (it could then be merged with a later edit).
        var sentBefore: [String: Bool] = [:]
        let batch: [(key: RecordKey, change: Change)] = try write { d in
            var out: [(RecordKey, Change)] = []
            for change in planned {
                let key = RecordKey(collection: change.collection, id: change.id)
                let wasSent = try d.model(key)?.edit(change.changeId).map(Engine.isSent) ?? false
                let (effects, _) = try transition(key, .sending(changeId: change.changeId), d)
                for case .send(let c) in effects {
                    sentBefore[c.changeId] = wasSent
                    out.append((key, try d.wire(c)))
                }
            }
            return out
        }
        if batch.isEmpty { return .settled }
        let changes = batch.map(\.change)
        inFlight.formUnion(changes.map(\.changeId))
        defer { inFlight.subtract(changes.map(\.changeId)) }
        let response: PushResponse
        do {
            response = try await transport.push(PushRequest(clientId: clientId, changes: changes), space: configuration.space)
        } catch {
            _ = try db()  // closed meanwhile: the changes stay sent
            let failure = Self.transportFailure(error)
            guard case .transport(let t) = failure else { throw failure }
            if case .refused(413, let envelope) = t,
               envelope.code == ErrorCode.tooManyChanges.rawValue || envelope.code == ErrorCode.payloadTooLarge.rawValue {
                // Not applied: the changes are as they were, and smaller requests follow.
                let single = batch.count == 1 && envelope.code == ErrorCode.payloadTooLarge.rawValue
                try settle(batch, report: &report) { change in
                    single ? .rejected(changeId: change.changeId, code: envelope.code, message: envelope.message)
                        : .noAnswer(changeId: change.changeId, mayHaveApplied: false, sentBefore: sentBefore[change.changeId] ?? true, retryAt: 0, message: envelope.message)
                }
                return single ? .settled : .tooLarge
            }
            try scheduleRetry(batch, mayHaveApplied: t.pushMayHaveApplied, sentBefore: sentBefore, message: t.description, report: &report)
            return .failed(failure)
        }
        _ = try db()
        guard response.results.count == batch.count,
              zip(response.results, batch).allSatisfy({ $0.changeId == $1.change.changeId }) else {
            let message = "the push answer does not match the request (\(response.results.count) results for \(batch.count) changes)"
            try scheduleRetry(batch, mayHaveApplied: true, sentBefore: sentBefore, message: message, report: &report)
            return .failed(.protocolViolation(message))
        }
        let results = Dictionary(zip(changes.map(\.changeId), response.results), uniquingKeysWith: { a, _ in a })
        let followed = try read { try $0.meta("epoch").flatMap(Epoch.init) }
        // The server's copies that conflicts carry, opened (an encrypted store's copy that
        // does not open is quarantined and met as a copy the app cannot read).
        var currents: [String: Copy] = [:]
        for result in response.results where result.status == .conflict {
            if let state = result.current { currents[result.changeId] = try openedCopy(state, report: &report) }
        }
        try settle(batch, report: &report) { change in
            let result = results[change.changeId]!
            if let followed, followed != response.epoch {
                // Another deployment behind the same URL (a replica, staging) may have sent
                // it; a new history counts only once two requests of a pull confirm it.
                return .foreignAnswer(changeId: change.changeId,
                                      message: "an answer in epoch \(response.epoch), which the store does not follow (\(followed)); settled by a later sync")
            }
            switch result.status {
            case .applied:
                return .applied(changeId: change.changeId, Copy(version: result.version!, body: nil, updatedAt: result.updatedAt))
            case .conflict:
                return .conflict(changeId: change.changeId, current: currents[change.changeId])
            case .rejected:
                let reason = result.error ?? PushResult.RejectReason(code: "unknown", message: "rejected")
                if reason.code == ErrorCode.epochMismatch.rawValue {
                    return .notInHistory(changeId: change.changeId, message: "\(reason.code): \(reason.message)")
                }
                return .rejected(changeId: change.changeId, code: reason.code, message: reason.message)
            }
        }
        return .settled
    }

    /// Applies one event per change of `batch` in one transaction, and tells observers.
    private func settle(_ batch: [(key: RecordKey, change: Change)], report: inout SyncReport, _ event: (Change) -> RecordEvent) throws {
        var keys: [RecordKey] = []
        try write(durability: .normal) { d in
            let phase = try phase(d)
            for (key, change) in batch {
                let (effects, _) = try transition(key, event(change), d, phase: phase)
                account(effects, key, report: &report, keys: &keys)
            }
        }
        notify(StoreEvent(origin: .remote, keys: keys))
    }

    /// After a failed request every change waits for its jittered backoff.
    private func scheduleRetry(_ batch: [(key: RecordKey, change: Change)], mayHaveApplied: Bool, sentBefore: [String: Bool], message: String,
                               report: inout SyncReport) throws {
        let time = now()
        var attempts: [String: Int] = [:]
        try read { d in
            for (key, change) in batch { attempts[change.changeId] = try d.model(key)?.edit(change.changeId)?.attempts ?? 1 }
        }
        var retryAt: [String: Int64] = [:]
        for (_, change) in batch { retryAt[change.changeId] = time + configuration.backoff.delayMs(attempt: attempts[change.changeId] ?? 1, using: &rng) }
        try settle(batch, report: &report) { change in
            .noAnswer(changeId: change.changeId, mayHaveApplied: mayHaveApplied, sentBefore: sentBefore[change.changeId] ?? true,
                      retryAt: retryAt[change.changeId]!, message: message)
        }
    }
}
