import OutpostCore
import OutpostSQLite

/// Every key of the store file's `meta` table: the one place that names them. The sync
/// session's state is not here: it is the typed row `sync_session` (migration 8). The keys
/// files of earlier schemas held (`epoch`, `cursor`, `rebasing`, `view_repull`,
/// `rebased_through`) are named only in the frozen migrations that removed them.
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
}
