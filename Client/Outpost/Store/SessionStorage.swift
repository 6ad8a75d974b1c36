import OutpostCore
import OutpostSQLite

// The sync session's row (`sync_session`, migrations 8 and 14): the phase, the cursor and
// the epochs the store left, as the file keeps them.

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
            (s.int64(0), s.optionalText(1).flatMap(Epoch.init), s.optionalText(2).flatMap(Cursor.init))
        }
        guard let row else { return (.detached, nil) }
        return (SyncPhase(storedCode: row.0, epoch: row.1) ?? .detached, row.2)
    }

    /// Stores the session's phase and cursor (the epochs left are kept by `retire`).
    func storeSession(phase: SyncPhase, cursor: Cursor?) throws {
        try db.cached("INSERT OR REPLACE INTO sync_session(one, phase, epoch, cursor) VALUES (1, ?, ?, ?)")
            .run([.integer(phase.storedCode), phase.epoch.map { .text($0.rawValue) } ?? .null, cursor.map { .text($0.text) } ?? .null])
    }
}

extension SyncPhase {
    /// The phase's code in `sync_session.phase` (migration 14), its epoch kept apart: the one
    /// table of codes, read back by `init(storedCode:epoch:)`. Codes are never reused.
    var storedCode: Int64 {
        switch self {
        case .detached: return 0
        case .following: return 1
        case .viewRePulling: return 2
        case .refreshing: return 3
        case .rePulling(_, let viewChanged): return viewChanged ? 5 : 4
        }
    }

    /// The phase stored as `code` with `epoch`: the phase of that epoch whose `storedCode`
    /// is `code`; nil for a code no release wrote or a phase that lacks its epoch.
    init?(storedCode code: Int64, epoch: Epoch?) {
        if code == 0 { self = .detached; return }
        guard let e = epoch,
              let phase = [SyncPhase.following(e), .viewRePulling(e), .refreshing(e), .rePulling(e, viewChanged: false), .rePulling(e, viewChanged: true)]
                .first(where: { $0.storedCode == code }) else { return nil }
        self = phase
    }
}
