import OutpostCore
import OutpostSQLite

/// Every key of the store file's `meta` table: the one place that names them. The sync
/// session's state is not here: it is the typed row `sync_session` (migration 8).
enum MetaKey: String {
    /// The number of migrations run (older SDKs refuse a file past theirs by it).
    case schemaVersion = "schema_version"
    case space
    case clientId = "client_id"
    case restoredFrom = "restored_from"
    case deviceMarker = "device_marker"
    case encryption
    case lastSyncAt = "last_sync_at"
    case lastError = "last_error"
    /// The last failure's `SyncProblem` (its raw value), beside its text.
    case lastProblem = "last_problem"
    case compactedAt = "compacted_at"
    case clockOffset = "clock_offset"
    case clockUncertainty = "clock_uncertainty"
    case clockMeasuredAt = "clock_measured_at"
    case clockJumpedBack = "clock_jumped_back"
    /// The field kinds the server last declared (`FieldKinds`, its JSON): what
    /// `.mergeFields` merges by, also offline after a restart.
    case fieldKinds = "field_kinds"
    /// Before migration 8: the session's state.
    case legacyEpoch = "epoch"
    case legacyCursor = "cursor"
    case legacyRebasing = "rebasing"
    case legacyViewRePull = "view_repull"
    /// Before migration 3.
    case legacyRebasedThrough = "rebased_through"
}

extension LocalDatabase {
    // MARK: Meta

    func meta(_ key: MetaKey) throws -> String? {
        try db.cached("SELECT value FROM meta WHERE key = ?").queryOne([.text(key.rawValue)]) { $0.text(0) }
    }

    func setMeta(_ key: MetaKey, _ value: String?) throws {
        if let value {
            try db.cached("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)").run([.text(key.rawValue), .text(value)])
        } else {
            try db.cached("DELETE FROM meta WHERE key = ?").run([.text(key.rawValue)])
        }
    }

    // MARK: The sync session

    /// The session as the file keeps it: phase, cursor and the epochs left.
    func session() throws -> SyncSession {
        let row = try sessionRow()
        return SyncSession(phase: row.phase, cursor: row.cursor, retired: try retiredEpochs())
    }

    /// The session's phase and cursor.
    func sessionRow() throws -> (phase: SyncPhase, cursor: Cursor?) {
        let row = try db.cached("SELECT phase, epoch, cursor FROM sync_session WHERE one = 1").queryOne([]) { s in
            (s.text(0), s.optionalText(1).flatMap(Epoch.init), s.optionalText(2).flatMap(Cursor.init))
        }
        let phase: SyncPhase
        switch (row?.0, row?.1) {
        case ("following", let e?): phase = .following(e)
        case ("view re-pulling", let e?): phase = .viewRePulling(e)
        case ("refreshing", let e?): phase = .refreshing(e)
        case ("re-pulling", let e?): phase = .rePulling(e, viewChanged: false)
        case ("re-pulling, view changed", let e?): phase = .rePulling(e, viewChanged: true)
        default: phase = .detached
        }
        return (phase, row?.2)
    }

    /// Stores the session's phase and cursor (the epochs left are kept by `retire`).
    func storeSession(phase: SyncPhase, cursor: Cursor?) throws {
        let name: String
        switch phase {
        case .detached: name = "detached"
        case .following: name = "following"
        case .viewRePulling: name = "view re-pulling"
        case .refreshing: name = "refreshing"
        case .rePulling(_, let view): name = view ? "re-pulling, view changed" : "re-pulling"
        }
        try db.cached("INSERT OR REPLACE INTO sync_session(one, phase, epoch, cursor) VALUES (1, ?, ?, ?)")
            .run([.text(name), phase.epoch.map { .text($0.rawValue) } ?? .null, cursor.map { .text($0.text) } ?? .null])
    }
}
