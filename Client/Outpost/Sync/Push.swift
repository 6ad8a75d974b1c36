import OutpostCore

// Pushing the queue (PROTOCOL.md section 4).
//
// - Changes go in queue order, split to the server's `maxChangesPerPush` and
//   `maxRequestBytes` (from `/v1/info`); a 413 halves the batches and re-reads the limits.
// - Per record only the first unsettled change is sent; a later edit waits for its answer.
// - Before a request leaves, its changes are marked in flight in one transaction; a process
//   that dies while they are in flight finds them in doubt when it opens the file again.
// - Only a read and decoded answer settles a change. A failure that may have reached the
//   server puts the changes in doubt: they keep their changeId and content and are sent
//   again as they are, so the server's idempotency answers what happened.
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
        var batchCap = Int.max
        var sent = Set<String>()
        var rounds = 0
        var shrinks = 0
        while rounds < 3 {
            rounds += 1
            let limits: Limits
            do { limits = try await self.limits(transport) } catch let e as OutpostError { return e }
            let time = now()
            let candidates = try read { try sendable($0, now: time, dueOnly: dueOnly) }.filter { !sent.contains($0.changeId) }
            if candidates.isEmpty { return nil }
            let batches = try makeBatches(candidates, limits: limits, cap: batchCap, report: &report)
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

    /// The changes to send now, in queue order: per record the first unsettled one, when it
    /// is not in flight and (with `dueOnly`) its retry time has come (see `isDue`).
    func sendable(_ d: LocalDatabase, now: Int64, dueOnly: Bool) throws -> [QueueEntry] {
        var seen = Set<RecordKey>()
        var out: [QueueEntry] = []
        for e in try d.entries(in: [.pending, .inFlight, .inDoubt, .failed]) {
            guard seen.insert(e.key).inserted else { continue }
            if e.state != .inFlight && (!dueOnly || isDue(e.nextAttemptAt, now: now)) { out.append(e) }
        }
        return out
    }

    /// True when a change stored with retry time `time` is due at `now`. A retry time further
    /// ahead than the longest backoff was stored before the device's clock was set back (the
    /// user fixed a clock a year ahead, or it drifted): it is due now, else the queue would
    /// wait until the clock caught up, a year later. (Found by outpost-sim, seed 356.)
    func isDue(_ time: Int64, now: Int64) -> Bool {
        time <= now || time > now &+ configuration.backoff.longestDelayMs
    }

    /// Splits `candidates` into requests the server takes. A change too large for any
    /// request is rejected here, for good (it could never be sent).
    func makeBatches(_ candidates: [QueueEntry], limits: Limits, cap: Int, report: inout SyncReport) throws -> [[QueueEntry]] {
        let overhead = 32 + clientId.utf8.count  // {"clientId":"…","changes":[…]}
        let maxCount = max(1, min(limits.maxChangesPerPush, cap))
        var batches: [[QueueEntry]] = []
        var current: [QueueEntry] = []
        var bytes = overhead
        for entry in candidates {
            let size = try entry.change().json.encoded().count
            if size + overhead > limits.maxRequestBytes {
                try write(durability: .normal) { d in
                    try rejectLocally(entry, code: ErrorCode.payloadTooLarge.rawValue,
                                      message: "the change is \(size) bytes encoded; the server takes requests of at most \(limits.maxRequestBytes)", d)
                }
                report.rejected += 1
                continue
            }
            if !current.isEmpty && (current.count >= maxCount || bytes + size + 1 > limits.maxRequestBytes) {
                batches.append(current)
                current = []
                bytes = overhead
            }
            current.append(entry)
            bytes += size + 1
        }
        if !current.isEmpty { batches.append(current) }
        return batches
    }

    /// Sends one request and settles what its answer settles.
    func send(_ batch: [QueueEntry], _ transport: any SyncTransport, report: inout SyncReport) async throws -> BatchOutcome {
        let changes = try batch.map { try $0.change() }
        // Durable before the request leaves: a change the server may apply must never come
        // back as "pending" after a power loss (it could then be merged with a later edit).
        try write { d in
            for var e in batch {
                e.state = .inFlight
                e.attempts += 1
                try d.update(e)
            }
        }
        let response: PushResponse
        do {
            response = try await transport.push(PushRequest(clientId: clientId, changes: changes), space: configuration.space)
        } catch {
            _ = try db()  // closed meanwhile: the changes stay in flight, in doubt at the next open
            let failure = Self.transportFailure(error)
            guard case .transport(let t) = failure else { throw failure }
            if case .refused(413, let envelope) = t,
               envelope.code == ErrorCode.tooManyChanges.rawValue || envelope.code == ErrorCode.payloadTooLarge.rawValue {
                // Not applied: put the changes back as they were and send smaller requests.
                try write(durability: .normal) { d in
                    for e in batch {
                        if batch.count == 1 && envelope.code == ErrorCode.payloadTooLarge.rawValue {
                            try rejectLocally(e, code: envelope.code, message: envelope.message, d)
                        } else {
                            try d.update(e)
                        }
                    }
                }
                if batch.count == 1 && envelope.code == ErrorCode.payloadTooLarge.rawValue {
                    report.rejected += 1
                    return .settled
                }
                return .tooLarge
            }
            try scheduleRetry(batch, mayHaveApplied: t.pushMayHaveApplied, message: t.description)
            return .failed(failure)
        }
        _ = try db()
        guard response.results.count == batch.count,
              zip(response.results, batch).allSatisfy({ $0.changeId == $1.changeId }) else {
            let message = "the push answer does not match the request (\(response.results.count) results for \(batch.count) changes)"
            try scheduleRetry(batch, mayHaveApplied: true, message: message)
            return .failed(.protocolViolation(message))
        }
        var keys: [RecordKey] = []
        try write(durability: .normal) { d in
            // An answer in a history the store does not follow settles nothing: another
            // deployment behind the same URL (a replica, staging) may have sent it, and a new
            // history counts only once two requests of a pull confirm it (PROTOCOL.md
            // section 5). Its changes stay in doubt, due at once: the pull that follows moves
            // the store to a confirmed new history and the same change IDs then learn what
            // that history did with them. (Seed 003's limits #30 and #31.)
            let followed = try d.meta("epoch").flatMap(Epoch.init)
            let foreign = followed != nil && followed != response.epoch
            for (entry, result) in zip(batch, response.results) {
                var sentEntry = entry
                sentEntry.attempts += 1
                if foreign && result.error?.code != ErrorCode.epochMismatch.rawValue {
                    sentEntry.state = entry.state == .inDoubt || result.status == .applied ? .inDoubt : .failed
                    sentEntry.nextAttemptAt = 0
                    sentEntry.lastError = "an answer in epoch \(response.epoch), which the store does not follow (\(followed!)); settled by a later sync"
                    try d.update(sentEntry)
                    continue
                }
                let changed: Bool
                switch result.status {
                case .applied:
                    guard let version = result.version else { continue }
                    changed = try settleApplied(sentEntry, version: version, updatedAt: result.updatedAt, epoch: response.epoch, d)
                    report.pushed += 1
                case .conflict:
                    changed = try settleConflict(sentEntry, current: result.current, epoch: response.epoch, d)
                    report.conflicts += 1
                case .rejected:
                    let reason = result.error ?? PushResult.RejectReason(code: "unknown", message: "rejected")
                    let (isFinal, didChange) = try settleRejected(sentEntry, previousState: entry.state, reason: reason, epoch: response.epoch, d)
                    if isFinal { report.rejected += 1 }
                    changed = didChange
                }
                if changed { keys.append(entry.key) }
            }
        }
        notify(StoreEvent(origin: .remote, keys: keys))
        return .settled
    }

    /// After a failed request: changes that may have been applied are in doubt; the others
    /// are failed attempts (an in-doubt change stays in doubt: an earlier send may have
    /// been applied). Each waits for its jittered backoff.
    private func scheduleRetry(_ batch: [QueueEntry], mayHaveApplied: Bool, message: String) throws {
        let time = now()
        try write(durability: .normal) { d in
            for var e in batch {
                e.attempts += 1
                e.state = mayHaveApplied || e.state == .inDoubt ? .inDoubt : .failed
                e.nextAttemptAt = time + configuration.backoff.delayMs(attempt: e.attempts, using: &rng)
                e.lastError = message
                try d.update(e)
            }
        }
    }

    // MARK: Settling

    /// `applied`: the change is durable on the server at `version`, committed at `updatedAt`
    /// when the server says (an epoch switch orders copies by it; otherwise the next pull
    /// fills it in). Returns true when what the app sees changed.
    func settleApplied(_ entry: QueueEntry, version: Version, updatedAt: Int64?, epoch: Epoch, _ d: LocalDatabase) throws -> Bool {
        let key = entry.key
        try d.deleteEntry(position: entry.position)
        guard var row = try d.record(key) else { return false }
        let before = row.view
        var remaining = try d.entries(for: key)
        if version.epoch != epoch {
            // A replayed answer from an earlier history: applied there. When the current
            // history holds the record, it holds it or a later state; otherwise the edit is
            // offered to the current history as a new change.
            if row.server?.version.epoch != epoch && remaining.isEmpty {
                let time = now()
                let again = QueueEntry(
                    position: 0, changeId: Identifiers.changeID(nowMs: time, using: &rng), key: key, op: entry.op, data: entry.data,
                    baseVersion: nil, clientTime: entry.clientTime, state: .pending, attempts: 0, nextAttemptAt: 0,
                    lastError: nil, errorCode: nil, origin: entry.origin, originUpdatedAt: entry.originUpdatedAt, createdAt: time)
                try d.insert(again)
                remaining = [again]
            }
            if let aside = try d.aside(key), remaining.allSatisfy({ $0.state != .inDoubt }) {
                if row.server.map({ aside.isNewer(than: $0) }) ?? true { row.server = aside }
                try d.clearAside(key)
            }
        } else {
            var newest = ServerCopy(version: version, body: entry.body, updatedAt: updatedAt, updatedBy: clientId, clientTime: entry.clientTime, changeId: entry.changeId)
            if let stored = row.server, stored.isNewer(than: newest) { newest = stored }
            if let aside = try d.aside(key) {
                if aside.isNewer(than: newest) { newest = aside }
                try d.clearAside(key)
            }
            row.server = newest
            // Later edits were made on top of this change: they are based on its version.
            for var later in remaining where later.state != .inDoubt && later.baseVersion != version {
                later.baseVersion = version
                try d.update(later)
            }
        }
        row.pending = !remaining.isEmpty
        guard row.pending || row.server != nil else {
            try d.deleteRecord(key)
            return true
        }
        try d.write(row)
        return (row.pending ? row.view : row.server!.body) != before
    }

    /// `conflict`: nothing was written; `current` is the record as it is now.
    func settleConflict(_ entry: QueueEntry, current: RecordState?, epoch: Epoch, _ d: LocalDatabase) throws -> Bool {
        let key = entry.key
        guard var row = try d.record(key) else {
            try d.deleteEntry(position: entry.position)
            return false
        }
        let before = row.view
        let remaining = try d.entries(for: key).map { $0.position == entry.position ? entry : $0 }
        let latest = remaining.last ?? entry
        let time = now()

        // The resolver never sees a version older than one the store holds.
        var server = current.map(ServerCopy.init)
        if let stored = row.server, stored.version.epoch == epoch, let s = server, stored.isNewer(than: s) { server = stored }
        if let aside = try d.aside(key) {
            if let s = server, aside.isNewer(than: s) { server = aside }
            try d.clearAside(key)
        }
        if let s = server, s.changeId == nil, let stored = row.server, stored.version == s.version { server!.changeId = stored.changeId }

        /// When a change that settles this conflict is due: at once after a first attempt.
        func retryTime() -> Int64 {
            time + (entry.attempts <= 1 ? 0 : configuration.backoff.delayMs(attempt: entry.attempts - 1, using: &rng))
        }

        func replace(with body: Body, base: Version?, origin: ChangeOrigin, originUpdatedAt: Int64?, note: String) throws {
            for e in remaining { try d.deleteEntry(position: e.position) }
            let due = retryTime()
            let resolved = QueueEntry(
                position: remaining.first?.position ?? entry.position, changeId: Identifiers.changeID(nowMs: time, using: &rng), key: key,
                op: body.deleted ? .delete : .put, data: body.data, baseVersion: base, clientTime: latest.clientTime,
                state: .failed, attempts: entry.attempts, nextAttemptAt: due, lastError: note, errorCode: "conflict",
                origin: origin, originUpdatedAt: originUpdatedAt, createdAt: latest.createdAt)
            try d.insert(resolved, keepPosition: true)
            row.view = body
            row.pending = true
        }

        func adopt(_ copy: ServerCopy?) throws {
            for e in remaining { try d.deleteEntry(position: e.position) }
            row.server = copy
            row.pending = false
        }

        guard let serverCopy = server else {
            // The record does not exist in the current history: create it there.
            try replace(with: latest.body, base: nil, origin: latest.origin, originUpdatedAt: latest.originUpdatedAt,
                        note: "conflict: the record does not exist on the server")
            row.server = nil
            try d.write(row)
            return row.view != before
        }

        if latest.body.sameContent(as: serverCopy.body) {
            // The server already holds what the change wants: settled, no resolver.
            try adopt(serverCopy)
        } else if latest.origin == .reoffer {
            // A copy offered again to a new history: the server's own updatedAt decides.
            if committedLater(latest.originUpdatedAt, than: serverCopy.updatedAt) {
                try replace(with: latest.body, base: serverCopy.version, origin: .reoffer, originUpdatedAt: latest.originUpdatedAt,
                            note: "conflict with \(serverCopy.version); the device's copy is newer")
                row.server = serverCopy
            } else {
                try adopt(serverCopy)
            }
        } else if entry.origin == .reoffer, committedLater(entry.originUpdatedAt, than: serverCopy.updatedAt),
                  !entry.body.sameContent(as: serverCopy.body) {
            // A copy offered again ahead of local edits made on it, newer than the current
            // history's copy: it goes again on that copy, and the edits stay behind it
            // (re-based on it once applied). Handing the edits to the resolver instead let
            // it keep the older copy over the acknowledged one.
            var again = entry
            again.changeId = Identifiers.changeID(nowMs: time, using: &rng)
            again.baseVersion = serverCopy.version
            again.state = .failed
            again.nextAttemptAt = retryTime()
            again.lastError = "conflict with \(serverCopy.version); the device's copy is newer"
            again.errorCode = "conflict"
            try d.update(again)
            row.server = serverCopy
        } else {
            let conflict = Conflict(
                collection: key.collection, id: key.id,
                local: LocalEdit(data: try latest.body.data.map(decodeObject), deleted: latest.body.deleted, clientTime: latest.clientTime,
                                 changeId: latest.changeId, clientId: clientId),
                server: try serverCopy.recordState(key, fallbackTime: time), serverChangeId: serverCopy.changeId)
            let note = "conflict with \(serverCopy.version); resolved"
            switch configuration.resolver.resolve(conflict, now: time) {
            case .keepServer:
                try adopt(serverCopy)
            case .keepLocal:
                try replace(with: latest.body, base: serverCopy.version, origin: .local, originUpdatedAt: nil, note: note)
                row.server = serverCopy
            case .write(let object):
                try replace(with: Body(data: encodeObject(object)), base: serverCopy.version, origin: .local, originUpdatedAt: nil, note: note)
                row.server = serverCopy
            case .delete:
                try replace(with: .tombstone, base: serverCopy.version, origin: .local, originUpdatedAt: nil, note: note)
                row.server = serverCopy
            }
        }
        try d.write(row)
        return (row.pending ? row.view : row.server!.body) != before
    }

    /// `rejected`. Returns (rejected for good, view changed).
    func settleRejected(_ entry: QueueEntry, previousState: ChangeState, reason: PushResult.RejectReason, epoch: Epoch, _ d: LocalDatabase) throws -> (Bool, Bool) {
        let time = now()
        if reason.code == ErrorCode.epochMismatch.rawValue {
            // Not a verdict on the change: its base names another history. The pull moves
            // the store to the server's epoch and re-bases it.
            var e = entry
            e.lastError = "\(reason.code): \(reason.message)"
            e.nextAttemptAt = time + configuration.backoff.delayMs(attempt: e.attempts, using: &rng)
            let localEpoch = try d.meta("epoch").flatMap(Epoch.init)
            let rebasing = try d.meta("rebasing") != nil
            if previousState == .inDoubt && localEpoch == epoch && !rebasing {
                // In doubt, and the current history says it never applied it: the same
                // content, as a new change, on what the store holds of this history.
                e.changeId = Identifiers.changeID(nowMs: time, using: &rng)
                e.state = .pending
                e.nextAttemptAt = 0
                guard var row = try d.record(entry.key) else {
                    e.baseVersion = nil
                    try d.update(e)
                    return (false, false)
                }
                if row.server?.version.epoch != epoch,
                   try d.entries(for: entry.key).allSatisfy({ $0.position == e.position || ($0.state != .inDoubt && $0.state != .inFlight) }) {
                    // The record's copy is still of the history the store left: the re-pull
                    // met the record while the answer was unknown. The change meets what it
                    // found now, as a pending edit meets a re-pull (its base still names the
                    // copy it was made on). Sending it as a create instead handed an
                    // acknowledged write to the resolver.
                    if let aside = try d.aside(entry.key), aside.version.epoch == epoch {
                        // A copy kept aside (seed 20564).
                        try d.update(e)
                        try d.clearAside(entry.key)
                        _ = try meetInNewHistory(&row, aside, d)
                        try d.write(row)
                        return (false, false)
                    }
                    if let unreadable = try d.quarantinedCopy(entry.key, in: epoch) {
                        // A copy the app cannot read, which the quarantine keeps (seed 95924).
                        try d.update(e)
                        if try rebaseOnUnreadable(&row, version: unreadable.version, raw: unreadable.raw, d) {
                            try d.write(row)
                            return (false, false)
                        }
                    }
                }
                e.baseVersion = row.server.flatMap { $0.version.epoch == epoch ? $0.version : nil }
            } else if previousState != .inDoubt && localEpoch == epoch && !rebasing {
                // Not sent before, and the store already follows the history that refused its
                // base (it was queued behind a change of the old one): nothing re-bases it any
                // more, so it goes as a create and meets the current copy through the resolver
                // (seed 12742: it was refused for ever).
                e.baseVersion = nil
                e.state = .failed
                e.nextAttemptAt = 0
            } else {
                e.state = previousState == .inDoubt ? .inDoubt : .failed
            }
            try d.update(e)
            return (false, false)
        }
        var e = entry
        e.state = .rejected
        e.errorCode = reason.code
        e.lastError = reason.message
        try d.update(e)
        return (true, try afterRejection(entry.key, d))
    }

    /// Rejects `entry` without asking the server (it can never be sent).
    func rejectLocally(_ entry: QueueEntry, code: String, message: String, _ d: LocalDatabase) throws {
        var e = entry
        e.state = .rejected
        e.errorCode = code
        e.lastError = message
        try d.update(e)
        _ = try afterRejection(entry.key, d)
    }

    /// When a record's last unsettled change was rejected, the app sees the server's copy
    /// again (the rejected edit stays readable in `rejectedChanges()`); a record the server
    /// never had goes away.
    private func afterRejection(_ key: RecordKey, _ d: LocalDatabase) throws -> Bool {
        guard var row = try d.record(key) else { return false }
        guard try d.entries(for: key).isEmpty else { return false }
        let before = row.view
        row.pending = false
        if let aside = try d.aside(key) {
            try d.clearAside(key)
            if let server = row.server, server.version.epoch != aside.version.epoch {
                // The record met a new history while the change was unsettled: the device's
                // copy meets it as at a re-pull, and is offered again when newer (seed 39551:
                // an acknowledged write lost to an older restored copy).
                if try meetInNewHistory(&row, aside, d) {
                    try d.write(row)
                    return row.view != before
                }
            } else if row.server.map({ aside.isNewer(than: $0) }) ?? true {
                row.server = aside
            }
        }
        guard let server = row.server else {
            try d.deleteRecord(key)
            return true
        }
        if !row.epochCheck, let current = try d.meta("epoch").flatMap(Epoch.init), server.version.epoch != current {
            // The copy is of a history the store left, which lacked the record (the re-pull
            // kept it while the record's changes were out): it is offered again, as at the end
            // of a re-pull (seeds 56303, 83108: an acknowledged write went with a rejected edit).
            try offerAgain(&row, server, base: nil, d)
            row.server = nil
            try d.write(row)
            return row.view != before
        }
        try d.write(row)
        return server.body != before
    }
}
