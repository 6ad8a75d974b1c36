import OutpostCore
import OutpostSQLite

// The sync session's row (`sync_session`, migration 8): the phase, the cursor and the epochs
// the store left, as the file keeps them.

extension LocalDatabase {
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
