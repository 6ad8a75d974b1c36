import OutpostCore

// Every change of a record's state goes through `Engine.reduce` here: the model is read,
// the event applied, the new model stored, and the effects returned for the caller to act
// on (notify observers, count them in the report, send a change).

/// Change ids drawn from the store's seeded generator while a transition runs.
final class ChangeIDSource {
    var rng: Randomness
    let now: Int64

    init(rng: Randomness, now: Int64) {
        self.rng = rng
        self.now = now
    }

    func next() -> String { Identifiers.changeID(nowMs: now, using: &rng) }
}

extension OutpostStore {
    /// The phase kept in the file: the epoch followed, and whether its history is being
    /// pulled from the start.
    func phase(_ d: LocalDatabase) throws -> Phase {
        try d.sessionRow().phase.engine
    }

    /// Applies `event` to the record `key` inside the caller's transaction; returns the
    /// effects and the model after it.
    @discardableResult
    func transition(_ key: RecordKey, _ event: RecordEvent, _ d: LocalDatabase, phase known: Phase? = nil) throws -> (effects: [Effect], model: RecordModel) {
        let before = try d.model(key) ?? RecordModel(key: key)
        let time = now()
        let ids = ChangeIDSource(rng: rng, now: time)
        let backoff = configuration.backoff
        var jitter = rng
        let context = EngineContext(phase: try known ?? phase(d), resolver: configuration.resolver, fieldKinds: syncRun.fieldKinds, now: time, serverNow: serverNow(), clientId: clientId,
                                    backoff: { attempt in backoff.delayMs(attempt: attempt, using: &jitter) }, newChangeId: ids.next,
                                    versions: configuration.versions)
        let (after, effects) = Engine.reduce(before, event, context)
        rng = ids.rng
        if after != before { try d.save(after) }
        for effect in effects {
            switch effect {
            case .resolved(let decision): observers.journal(try d.journal(decision, at: time))
            case .overwritten(let lost): observers.journal(try d.journal(lost, at: time))
            default: break
            }
        }
        return (effects, after)
    }

    /// Counts `effects` into `report` and collects the keys whose view changed.
    func account(_ effects: [Effect], _ key: RecordKey, report: inout SyncReport, keys: inout [RecordKey]) {
        for effect in effects {
            switch effect {
            case .show: keys.append(key)
            case .pulledShown: report.pulled += 1
            case .pushed: report.pushed += 1
            case .conflict: report.conflicts += 1
            case .resolved: report.resolved += 1
            case .overwritten: report.overwritten += 1
            case .rejected: report.rejected += 1
            case .upgradeRequired: report.upgradeRequired += 1
            case .reoffered: report.reoffered += 1
            case .syncAgain, .send: break
            }
        }
    }
}
