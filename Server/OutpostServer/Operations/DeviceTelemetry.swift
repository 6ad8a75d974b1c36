import Foundation
import OutpostCore
import OutpostHTTP

/// What devices report of their syncs (docs/operating.md, "Devices"), kept in the store in
/// SQL written once for both stores (`SQLSession`): the last state of each device
/// (`devices`) and a bounded history of its syncs (`device_syncs`, the newest
/// `historyPerDevice`). One thread with its own session runs every statement.
final class DeviceTelemetry: Sendable {
    private let thread: WorkerThread<SQLSessionJob>

    /// Syncs kept per device.
    static let historyPerDevice = 100

    init(name: String, open: @escaping @Sendable () throws -> any SQLSession) throws {
        thread = try SQLSessionJob.thread(name: "\(name)-telemetry", open: open)
    }

    func stop() {
        thread.stop()
    }

    /// One device's row, as `GET /v1/admin/devices` lists it.
    struct Device: Sendable, Equatable {
        var space: String
        var clientId: String
        var firstSeenAt: Int64
        var lastSeenAt: Int64
        var lastSyncAt: Int64
        var sdkVersion: String
        var pending: Int64
        var lastError: String?
        var clockOffsetMs: Int64?
        var reports: Int64
        /// The authenticated subject its reports are bound to (nil: a row from before).
        var subject: String? = nil
        /// The conflicts its syncs reported, and of them those its resolver decided (each in
        /// the device's conflict journal), each sync counted once.
        var conflicts: Int64 = 0
        var resolved: Int64 = 0
    }

    /// The conflicts a space's devices reported (`GET /v1/admin/conflicts`).
    struct SpaceConflicts: Sendable, Equatable {
        var space: String
        var devices: Int64
        var conflicts: Int64
        var resolved: Int64
    }

    /// Stores a batch received at `now` from a token whose subject is `subject`: the
    /// device's row becomes its newest sync's state, and each sync joins its history, of
    /// which the newest `historyPerDevice` stay. A device's reports are bound to the subject
    /// whose newest applied push used its client id (`client_subjects`, kept by the push),
    /// as no reader can claim it: a batch under another subject changes nothing and returns
    /// false. A client id no push has used is bound to its first reporter (a row from
    /// before subjects were kept binds to the next) until a push under it binds it to the
    /// pusher, whose next report then takes the row over.
    func record(space: String, subject: String, _ batch: TelemetryBatch, now: Int64) async throws -> Bool {
        let newest = batch.syncs.max(by: { $0.startedAt < $1.startedAt })
        let entries = batch.syncs.map {
            (started: $0.startedAt, json: String(decoding: $0.json.encoded(canonical: true), as: UTF8.self), conflicts: $0.conflicts, resolved: $0.resolved)
        }
        return try await run { db in
            try db.transaction(.process) {
                let pushers = try db.query("""
                    SELECT c.subject FROM client_subjects c JOIN spaces s ON s.space_id = c.space_id WHERE s.name = ? AND c.client_id = ?
                    """, [.text(space), .text(batch.clientId)]) { $0.text(0) }
                if let pusher = pushers.first, pusher != subject { return false }
                // The row's own subject wins unless the reporter is the pusher:
                // `ON CONFLICT … DO UPDATE … WHERE` then updates nothing and the statement
                // changes no row. A batch without syncs leaves the last sync's state as it is
                // (its `last_sync` of 0 is never the newer).
                let stored = try db.run("""
                    INSERT INTO devices(space, client_id, first_seen, last_seen, last_sync, sdk_version, pending, last_error, clock_offset, reports, subject, last_active)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)
                    ON CONFLICT (space, client_id) DO UPDATE SET
                        last_seen = excluded.last_seen, sdk_version = excluded.sdk_version, reports = devices.reports + 1, subject = excluded.subject,
                        last_active = CASE WHEN excluded.last_active > devices.last_active THEN excluded.last_active ELSE devices.last_active END,
                        last_sync = CASE WHEN excluded.last_sync >= devices.last_sync THEN excluded.last_sync ELSE devices.last_sync END,
                        pending = CASE WHEN excluded.last_sync >= devices.last_sync THEN excluded.pending ELSE devices.pending END,
                        last_error = CASE WHEN excluded.last_sync >= devices.last_sync THEN excluded.last_error ELSE devices.last_error END,
                        clock_offset = CASE WHEN excluded.last_sync >= devices.last_sync THEN excluded.clock_offset ELSE devices.clock_offset END
                     WHERE devices.subject IS NULL OR devices.subject = excluded.subject OR ? = 1
                    """, [.text(space), .text(batch.clientId), .integer(now), .integer(now), .integer(newest?.startedAt ?? 0), .text(batch.sdkVersion),
                          .integer(newest?.queueDepth ?? 0), .optionalText(newest?.lastError),
                          .optionalText(newest?.clockOffsetMs.map { String($0) }), .text(subject), .integer(now), .integer(pushers.isEmpty ? 0 : 1)])
                guard stored > 0 else { return false }
                try Self.addHistory(db, space: space, clientId: batch.clientId, entries, now: now)
                return true
            }
        }
    }

    /// Adds a batch's syncs to the device's history and their conflicts to its totals. A
    /// sync already stored (a batch sent again after its answer was lost) adds nothing.
    private static func addHistory(_ db: any SQLSession, space: String, clientId: String,
                                   _ entries: [(started: Int64, json: String, conflicts: Int64, resolved: Int64)], now: Int64) throws {
        var conflicts: Int64 = 0, resolved: Int64 = 0
        for entry in entries {
            let inserted = try db.run("""
                INSERT INTO device_syncs(space, client_id, started_at, received_at, entry) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (space, client_id, started_at) DO NOTHING
                """, [.text(space), .text(clientId), .integer(entry.started), .integer(now), .text(entry.json)])
            if inserted > 0 {
                conflicts = min(TelemetryEntry.maxCount, conflicts + entry.conflicts)
                resolved = min(TelemetryEntry.maxCount, resolved + entry.resolved)
            }
        }
        if conflicts > 0 || resolved > 0 {
            // A device's totals stop at 2^53 - 1 (a batch adds at most 10^8, so the
            // sum below the cap never overflows).
            let cap = TelemetryEntry.maxCount
            _ = try db.run("""
                UPDATE devices SET conflicts = CASE WHEN conflicts + ? > \(cap) THEN \(cap) ELSE conflicts + ? END,
                                   resolved = CASE WHEN resolved + ? > \(cap) THEN \(cap) ELSE resolved + ? END
                 WHERE space = ? AND client_id = ?
                """, [.integer(conflicts), .integer(conflicts), .integer(resolved), .integer(resolved), .text(space), .text(clientId)])
        }
        _ = try db.run("""
            DELETE FROM device_syncs WHERE space = ? AND client_id = ? AND started_at <
              (SELECT started_at FROM device_syncs WHERE space = ? AND client_id = ? ORDER BY started_at DESC LIMIT 1 OFFSET \(historyPerDevice - 1))
            """, [.text(space), .text(clientId), .text(space), .text(clientId)])
    }

    /// A page of the devices that reported, in (space, client id) order after `after`, of
    /// `space` only when given, and only those not seen since `notSeenSince` when given.
    func devices(space: String?, after: (space: String, clientId: String)?, notSeenSince: Int64?, limit: Int) async throws -> [Device] {
        // Devices that have reported: a row made by pushes and pulls alone (`flush`) shows
        // on its space's device page, not here.
        var conditions: [String] = ["reports > 0"]
        var values: [SQLValue] = []
        if let space {
            conditions.append("space = ?")
            values.append(.text(space))
        }
        if let after {
            conditions.append("(space > ? OR (space = ? AND client_id > ?))")
            values += [.text(after.space), .text(after.space), .text(after.clientId)]
        }
        if let notSeenSince {
            conditions.append("last_seen < ?")
            values.append(.integer(notSeenSince))
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        let sql = """
            SELECT space, client_id, first_seen, last_seen, last_sync, sdk_version, pending, last_error, clock_offset, reports, subject, conflicts, resolved
              FROM devices \(filter) ORDER BY space, client_id LIMIT \(limit)
            """
        let bound = values
        return try await run { db in
            try db.query(sql, bound) { row in
                Device(space: row.text(0), clientId: row.text(1), firstSeenAt: row.int64(2), lastSeenAt: row.int64(3), lastSyncAt: row.int64(4),
                       sdkVersion: row.text(5), pending: row.int64(6), lastError: row.optionalText(7),
                       clockOffsetMs: row.optionalText(8).flatMap { Int64($0) }, reports: row.int64(9), subject: row.optionalText(10),
                       conflicts: row.int64(11), resolved: row.int64(12))
            }
        }
    }

    /// A page of spaces whose devices reported, in space order after `after`, with the
    /// conflicts their devices reported. The sums are taken in doubles, which do not
    /// overflow however many devices report (an integer `sum()` fails past 2^63 - 1, on
    /// SQLite and as PostgreSQL's cast to BIGINT), and stop at 2^53 - 1, below which a
    /// double's sum of integers is exact.
    func conflictsBySpace(after: String?, limit: Int) async throws -> [SpaceConflicts] {
        let cap = TelemetryEntry.maxCount
        return try await run { db in
            try db.query("""
                SELECT space, devices, CAST(CASE WHEN c >= \(cap) THEN \(cap) ELSE c END AS BIGINT),
                       CAST(CASE WHEN r >= \(cap) THEN \(cap) ELSE r END AS BIGINT)
                  FROM (SELECT space, count(*) AS devices, sum(CAST(conflicts AS DOUBLE PRECISION)) AS c,
                               sum(CAST(resolved AS DOUBLE PRECISION)) AS r
                          FROM devices WHERE space > ? AND reports > 0 GROUP BY space) AS spaces
                 ORDER BY space LIMIT \(limit)
                """, [.text(after ?? "")]) { row in
                SpaceConflicts(space: row.text(0), devices: row.int64(1), conflicts: row.int64(2), resolved: row.int64(3))
            }
        }
    }

    /// Stores what `DeviceActivity` noted, in one transaction. A device's row is bound as
    /// its reports are (`record`): to the subject whose newest applied push used its
    /// clientId, else to the first subject seen with it; activity under another subject
    /// changes nothing. A device first seen by its activity gets a row with no report yet
    /// (`reports` 0, `sdk_version` empty). Each time only moves forward.
    func flush(_ noted: [DeviceActivity.Key: DeviceActivity.Noted], now: Int64) async throws {
        guard !noted.isEmpty else { return }
        let entries = Array(noted)
        try await run { db in
            try db.transaction(.process) {
                for (key, n) in entries {
                    let pushers = try db.query("""
                        SELECT c.subject FROM client_subjects c JOIN spaces s ON s.space_id = c.space_id WHERE s.name = ? AND c.client_id = ?
                        """, [.text(key.space), .text(key.clientId)]) { $0.text(0) }
                    if let pusher = pushers.first, pusher != key.subject { continue }
                    let active = max(n.lastPush ?? 0, n.lastPull ?? 0)
                    _ = try db.run("""
                        INSERT INTO devices(space, client_id, first_seen, last_seen, last_sync, sdk_version, pending, reports, subject,
                                            last_push, last_pull, pull_epoch, pull_seq, pull_view, last_active)
                        VALUES (?, ?, ?, ?, 0, '', 0, 0, ?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (space, client_id) DO UPDATE SET
                            subject = excluded.subject,
                            last_push = CASE WHEN excluded.last_push > coalesce(devices.last_push, -1) THEN excluded.last_push ELSE devices.last_push END,
                            pull_epoch = CASE WHEN excluded.last_pull > coalesce(devices.last_pull, -1) THEN excluded.pull_epoch ELSE devices.pull_epoch END,
                            pull_seq = CASE WHEN excluded.last_pull > coalesce(devices.last_pull, -1) THEN excluded.pull_seq ELSE devices.pull_seq END,
                            pull_view = CASE WHEN excluded.last_pull > coalesce(devices.last_pull, -1) THEN excluded.pull_view ELSE devices.pull_view END,
                            last_pull = CASE WHEN excluded.last_pull > coalesce(devices.last_pull, -1) THEN excluded.last_pull ELSE devices.last_pull END,
                            last_active = CASE WHEN excluded.last_active > devices.last_active THEN excluded.last_active ELSE devices.last_active END
                         WHERE devices.subject IS NULL OR devices.subject = excluded.subject OR ? = 1
                        """, [.text(key.space), .text(key.clientId), .integer(now), .integer(now), .text(key.subject),
                              n.lastPush.map { .integer($0) } ?? .null, n.lastPull.map { .integer($0) } ?? .null, .optionalText(n.pullEpoch),
                              n.pullSeq.map { .integer($0) } ?? .null, .optionalText(n.pullView), .integer(active),
                              .integer(pushers.isEmpty ? 0 : 1)])
                }
            }
        }
    }

    /// One device as its space's device page shows it: its row, the newest sync it
    /// reported, and where its cursor stands against the space's head.
    struct SpaceDevice: Sendable {
        var device: Device
        var lastPush: Int64?
        var lastPull: Int64?
        var pullEpoch: String?
        var pullSeq: Int64?
        /// `DeviceActivity.describe`'s JSON.
        var pullView: String?
        var lastActive: Int64
        /// The newest sync's entry as reported (its JSON), nil before any.
        var newest: JSONValue?
        /// The space's newest seq (0 for a space with no record).
        var head: Int64
        /// The commit time of the oldest record state after the cursor (the first commit
        /// the device has not pulled that is still there); nil when it is at the head.
        var firstUnpulledAt: Int64?
    }

    /// A page of a space's devices: those not active since `staleBefore` first, the
    /// quietest first, then the others in clientId order; after `after` in that order
    /// (`(stale ? 0 : 1, stale ? lastActive : 0, clientId)`), or the one `clientId`.
    func spaceDevices(space: String, staleBefore: Int64, after: (group: Int64, at: Int64, clientId: String)?, clientId: String? = nil,
                      limit: Int) async throws -> [SpaceDevice] {
        var values: [SQLValue] = [.integer(staleBefore), .integer(staleBefore), .text(space)]
        var filter = ""
        if let clientId {
            filter = " AND d.client_id = ?"
            values.append(.text(clientId))
        }
        var keyset = ""
        if let after {
            keyset = "WHERE (grp, quiet_at, client_id) > (?, ?, ?)"
            values += [.integer(after.group), .integer(after.at), .text(after.clientId)]
        }
        // One index seek each for the newest sync and for the first record after the
        // cursor (`records_seq`); the page is bounded by `limit`.
        let sql = """
            SELECT * FROM (
              SELECT d.space, d.client_id, d.first_seen, d.last_seen, d.last_sync, d.sdk_version, d.pending, d.last_error, d.clock_offset,
                     d.reports, d.subject, d.conflicts, d.resolved, d.last_push, d.last_pull, d.pull_epoch, d.pull_seq, d.pull_view, d.last_active,
                     (SELECT y.entry FROM device_syncs y WHERE y.space = d.space AND y.client_id = d.client_id ORDER BY y.started_at DESC LIMIT 1) AS newest,
                     coalesce(s.head_seq, 0) AS head,
                     (SELECT r.updated_at FROM records r WHERE r.space_id = s.space_id AND r.seq > d.pull_seq ORDER BY r.seq LIMIT 1) AS unpulled,
                     CASE WHEN d.last_active < ? THEN 0 ELSE 1 END AS grp,
                     CASE WHEN d.last_active < ? THEN d.last_active ELSE 0 END AS quiet_at
                FROM devices d LEFT JOIN spaces s ON s.name = d.space
               WHERE d.space = ?\(filter)) AS t
            \(keyset) ORDER BY grp, quiet_at, client_id LIMIT \(limit)
            """
        let bound = values
        return try await run { db in
            try db.query(sql, bound) { row in
                let device = Device(space: row.text(0), clientId: row.text(1), firstSeenAt: row.int64(2), lastSeenAt: row.int64(3), lastSyncAt: row.int64(4),
                                    sdkVersion: row.text(5), pending: row.int64(6), lastError: row.optionalText(7),
                                    clockOffsetMs: row.optionalText(8).flatMap { Int64($0) }, reports: row.int64(9), subject: row.optionalText(10),
                                    conflicts: row.int64(11), resolved: row.int64(12))
                return SpaceDevice(device: device, lastPush: row.optionalInt64(13), lastPull: row.optionalInt64(14), pullEpoch: row.optionalText(15),
                                   pullSeq: row.optionalInt64(16), pullView: row.optionalText(17), lastActive: row.int64(18),
                                   newest: row.optionalText(19).flatMap { try? JSONParser.parse($0) }, head: row.int64(20),
                                   firstUnpulledAt: row.optionalInt64(21))
            }
        }
    }

    /// The syncs a device reported, newest first.
    func history(space: String, clientId: String) async throws -> [JSONValue] {
        try await run { db in
            try db.query("SELECT entry FROM device_syncs WHERE space = ? AND client_id = ? ORDER BY started_at DESC", [.text(space), .text(clientId)]) {
                (try? JSONParser.parse($0.text(0))) ?? .null
            }
        }
    }

    /// Runs `body` on the telemetry thread's session.
    func run<T: Sendable>(_ body: @escaping @Sendable (any SQLSession) throws -> T) async throws -> T {
        try await thread.run("telemetry", body)
    }
}
