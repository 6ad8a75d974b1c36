import Foundation
import OutpostCore

// The queue part of the store's surface: the changes not yet settled and those rejected, the
// quarantine of pulled records that could not be used, and when a failed change is tried
// again.
extension OutpostStore {
    /// Changes not yet settled, in queue order (rejected ones excluded).
    public func pendingChanges() throws -> [QueuedChange] {
        try changes(unsettled: true)
    }

    /// Changes the server rejected for good, with their reasons. They block nothing; the app
    /// shows them and may discard them (`discardRejectedChange`) or save again.
    public func rejectedChanges() throws -> [QueuedChange] {
        try changes(unsettled: false)
    }

    /// Removes a rejected change. Returns false when no rejected change has that id.
    @discardableResult
    public func discardRejectedChange(_ changeId: String) throws -> Bool {
        try write { d in
            guard let key = try d.key(ofChange: changeId), let edit = try d.model(key)?.edit(changeId), Engine.isRejected(edit) else { return false }
            try transition(key, .discard(changeId: changeId), d)
            return true
        }
    }

    /// The unsettled or the rejected edits as the app sees them, in the order they go out.
    private func changes(unsettled: Bool) throws -> [QueuedChange] {
        try read { d in
            let context = try engineContext(d)
            // Records by the queue position of their first such edit; a record's edits in the
            // order they go out.
            var out: [QueuedChange] = []
            for key in try d.keysWithEdits(in: unsettled ? ["queued", "sent"] : ["rejected"]) {
                guard let model = try d.model(key) else { continue }
                for edit in model.edits where unsettled ? edit.delivery.isUnsettled : Engine.isRejected(edit) {
                    out.append(try queuedChange(edit, model, context))
                }
            }
            return out
        }
    }

    func queuedChange(_ e: Edit, _ model: RecordModel, _ context: EngineContext) throws -> QueuedChange {
        let state: ChangeState
        var base: Version?
        var code: String?
        var required: Int?
        switch e.delivery {
        case .queued where e.inConflict:
            state = .inConflict
            if let epoch = context.phase.epoch { base = Engine.wireBase(model, e, epoch: epoch) }
        case .queued where Engine.isHeld(e, model.key, context):
            state = .upgradeRequired
            required = e.upgradeTo
            if let epoch = context.phase.epoch { base = Engine.wireBase(model, e, epoch: epoch) }
        case .queued:
            state = e.attempts == 0 && e.lastError == nil ? .pending : .failed
            if let epoch = context.phase.epoch { base = Engine.wireBase(model, e, epoch: epoch) }
        case .sent(let sent):
            state = syncRun.inFlight.contains(e.changeId) ? .inFlight : .inDoubt
            base = sent
        case .acknowledged(let copy):
            state = .pending
            base = copy.version
        case .rejected(let c, _):
            state = .rejected
            code = c
            base = model.state(e.madeOn)?.version
        }
        return QueuedChange(changeId: e.changeId, collection: model.key.collection, id: model.key.id, op: e.body.deleted ? .delete : .put,
                            data: try e.body.data.map(decodeObject), baseVersion: base, state: state, attempts: e.attempts,
                            nextAttemptAt: Date(milliseconds: e.nextAttemptAt), lastError: e.lastError, errorCode: code, clientTime: Date(milliseconds: e.clientTime),
                            requiredAppVersion: required)
    }

    /// Pulled records that could not be decoded (or failed a validator), oldest first.
    public func quarantinedRecords() throws -> [QuarantinedRecord] {
        try read { try $0.quarantined() }
    }

    /// Forgets a quarantined record.
    public func discardQuarantined(_ number: Int64) throws {
        try write { try $0.deleteQuarantined(number) }
    }

    /// Tries every quarantined record again (after an app update taught it the new shape, or
    /// an import brought the key it was sealed under): those of the current epoch that now
    /// open, decode and pass their validator are applied like
    /// pulled records (never over a newer version); the others stay. Returns how many left
    /// the quarantine.
    @discardableResult
    public func retryQuarantined() throws -> Int {
        var keys: [RecordKey] = []
        let released: Int = try write { d in
            var released = 0
            let phase = try d.session().phase.engine
            let context = engineContext(phase: phase)
            for q in try d.quarantined() {
                guard let value = try? JSONParser(maxDepth: JSONParser.depthCeiling).parse(q.raw),
                      case .record(let state) = PulledRecord(value) else { continue }
                // A version of a history the store has left is never applied.
                guard state.version.epoch == phase.epoch else { continue }
                guard case .record(let record) = PreparedItem(state, validators: configuration.validators, cipher: cipher) else { continue }
                var ignored = SyncReport()
                try applyPulled(record, d, phase: phase, context: context, report: &ignored, keys: &keys)
                try d.deleteQuarantined(q.number)
                released += 1
            }
            return released
        }
        if !keys.isEmpty { notify(StoreEvent(origin: .remote, keys: keys)) }
        return released
    }


    /// before the device's clock was set back counts as now.
    public func nextRetryAt() throws -> Date? {
        try nextRetryMs().map(Date.init(milliseconds:))
    }

    /// `nextRetryAt()` in ms since 1970.
    func nextRetryMs() throws -> Int64? {
        let time = now()
        return try read { d in
            // A change held for a later app version waits for no time.
            let (held, values) = LocalDatabase.heldCondition(configuration.versions)
            let times = try d.db.query("""
                SELECT next_attempt_at FROM edits
                WHERE delivery = 'sent' OR (delivery = 'queued' AND (attempts > 0 OR last_error IS NOT NULL) AND NOT \(held))
                """, values) { $0.int64(0) }
            return times.map { isDue($0, now: time) ? min($0, time) : $0 }.min()
        }
    }
}
