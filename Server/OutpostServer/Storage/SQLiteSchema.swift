import OutpostSQLite

/// The schema of the server's SQLite file as one list of named migrations (`Migrations`):
/// the sync store's tables, device telemetry, the webhook outbox and the media metadata
/// (`SQLiteMediaMetadata.migrations`), each opener of the file running the whole list.
///
/// "sync 1" to "sync 11" and "media 1" and "media 2" are the steps from before the list,
/// when `meta.schema_version` and `meta.media_schema_version` counted them; they still
/// write those numbers, which servers from before the list read. Migrations after them
/// write no number unless servers from before the list must refuse the file.
enum SQLiteSchema {
    static let migrations = Migrations(sync + SQLiteMediaMetadata.migrations + later) { db in
        guard try db.queryOne("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'", [], { _ in true }) != nil else { return [:] }
        var versions: [String: Int] = [:]
        for (key, part) in [("schema_version", "sync"), ("media_schema_version", "media")] {
            if let text = try db.queryOne("SELECT value FROM meta WHERE key = ?", [.text(key)], { $0.text(0) }) {
                guard let version = Int(text) else { throw StoreError("meta.\(key) is \"\(text)\", not a number") }
                versions[part] = version
            }
        }
        return versions
    }

    /// The migrations of the list the file open on `db` has not applied (all of them for a
    /// new file); nil when it recorded one this server does not know. Reads only.
    static func pending(_ db: Connection) throws -> [String]? {
        let session = SQLiteSession(borrowing: db)
        guard try session.queryOne("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'", [], { _ in true }) != nil else {
            return migrations.pending(recorded: Set(migrations.legacyNames(try migrations.legacy(session))))
        }
        return migrations.pending(recorded: Set(try session.query("SELECT name FROM migrations", []) { $0.text(0) }))
    }

    /// The sync store's steps from before the named list.
    static let sync: [Migration] = [
        Migration(name: "sync 1: spaces, records, applied_changes", legacy: ("sync", 1), sql: """
            CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
            CREATE TABLE spaces(
                space_id INTEGER PRIMARY KEY,
                name TEXT NOT NULL UNIQUE,
                head_seq INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE records(
                space_id INTEGER NOT NULL,
                collection TEXT NOT NULL,
                id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                deleted INTEGER NOT NULL,
                data BLOB,
                updated_at INTEGER NOT NULL,
                updated_by TEXT NOT NULL,
                client_time INTEGER);
            CREATE UNIQUE INDEX records_key ON records(space_id, collection, id);
            CREATE UNIQUE INDEX records_seq ON records(space_id, seq);
            CREATE TABLE applied_changes(
                space_id INTEGER NOT NULL,
                change_id TEXT NOT NULL,
                fingerprint BLOB NOT NULL,
                epoch TEXT NOT NULL,
                seq INTEGER NOT NULL,
                applied_at INTEGER NOT NULL,
                PRIMARY KEY(space_id, change_id)) WITHOUT ROWID;
            CREATE INDEX applied_changes_at ON applied_changes(applied_at);
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '1');
            """),
        // The earlier-history version a record state descends from, "<epoch>.<seq>"
        // (docs/protocol.md section 4, added in 1.1); NULL for the states of a 1.0 store.
        Migration(name: "sync 2: records.lineage", legacy: ("sync", 2), sql: """
            ALTER TABLE records ADD COLUMN lineage TEXT;
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '2');
            """),
        // The earlier-history version a record state *is*, with nothing written since
        // (docs/protocol.md section 4, added in 1.1): re-offers are admitted by it, since a
        // plain write keeps `lineage` but clears `same_as`. A schema-2 row does not tell
        // whether its lineage came from a rotation or re-offer left untouched or was kept
        // through a write since, so its lineage is copied: this errs toward admitting a
        // re-offer, as schema 2 did.
        Migration(name: "sync 3: records.same_as", legacy: ("sync", 3), sql: """
            ALTER TABLE records ADD COLUMN same_as TEXT;
            UPDATE records SET same_as = lineage WHERE lineage IS NOT NULL;
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '3');
            """),
        // The live states that writes replaced on a server with rules, where the write may
        // have taken the record out of some token's view (docs/rules.md): a pull from a
        // cursor before the write reads whether the device's copy was in view.
        Migration(name: "sync 4: departures", legacy: ("sync", 4), sql: """
            CREATE TABLE IF NOT EXISTS departures(
                space_id INTEGER NOT NULL,
                collection TEXT NOT NULL,
                id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                data BLOB NOT NULL,
                PRIMARY KEY(space_id, collection, id, seq)) WITHOUT ROWID;
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '4');
            """),
        // The view index of a server with rules (docs/rules.md, "Cost"; `ViewIndex`): keys
        // of the live records by scope, path and value, in seq order, and the departures
        // by seq, so a page under rules reads only what a view may admit. (Its first
        // release also made `view_index_seq`, which "view_index without view_index_seq"
        // drops.)
        Migration(name: "sync 5: view_index", legacy: ("sync", 5), sql: """
            CREATE TABLE IF NOT EXISTS view_index(
                space_id INTEGER NOT NULL,
                scope TEXT NOT NULL,
                path TEXT NOT NULL,
                key TEXT NOT NULL,
                seq INTEGER NOT NULL,
                collection TEXT NOT NULL,
                PRIMARY KEY(space_id, scope, path, key, seq)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS departures_seq ON departures(space_id, seq);
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '5');
            """),
        // Compaction (docs/operating.md): each space's history horizon, and the tombstones
        // by age, so a purge finds them without reading every record.
        Migration(name: "sync 6: spaces.horizon_seq, records_tombstones", legacy: ("sync", 6), sql: """
            ALTER TABLE spaces ADD COLUMN horizon_seq INTEGER NOT NULL DEFAULT 0;
            CREATE INDEX IF NOT EXISTS records_tombstones ON records(updated_at) WHERE deleted = 1;
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '6');
            """),
        // Device telemetry (DeviceTelemetry): each device's last state and its syncs.
        Migration(name: "sync 7: devices, device_syncs", legacy: ("sync", 7), sql: """
            CREATE TABLE IF NOT EXISTS devices(
                space TEXT NOT NULL,
                client_id TEXT NOT NULL,
                first_seen INTEGER NOT NULL,
                last_seen INTEGER NOT NULL,
                last_sync INTEGER NOT NULL,
                sdk_version TEXT NOT NULL,
                pending INTEGER NOT NULL,
                last_error TEXT,
                clock_offset TEXT,
                reports INTEGER NOT NULL,
                PRIMARY KEY(space, client_id)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS device_syncs(
                space TEXT NOT NULL,
                client_id TEXT NOT NULL,
                started_at INTEGER NOT NULL,
                received_at INTEGER NOT NULL,
                entry TEXT NOT NULL,
                PRIMARY KEY(space, client_id, started_at)) WITHOUT ROWID;
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '7');
            """),
        // Webhooks (WebhookOutbox): each committed change while webhooks are configured,
        // written in its push's transaction; the webhooks, each one's delivery cursor per
        // space, and the batches that ran out of attempts. AUTOINCREMENT: an outbox id is
        // never handed out twice, also once every row up to it is pruned, because the
        // cursors count by it.
        Migration(name: "sync 8: webhook_outbox, webhooks, webhook_cursors, webhook_dead_letters", legacy: ("sync", 8), sql: """
            CREATE TABLE IF NOT EXISTS webhook_outbox(
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                space_id INTEGER NOT NULL,
                epoch TEXT NOT NULL,
                seq INTEGER NOT NULL,
                collection TEXT NOT NULL,
                record_id TEXT NOT NULL,
                deleted INTEGER NOT NULL,
                data BLOB,
                updated_at INTEGER NOT NULL,
                updated_by TEXT NOT NULL,
                client_time INTEGER,
                lineage TEXT,
                same_as TEXT,
                committed_at INTEGER NOT NULL);
            CREATE INDEX IF NOT EXISTS webhook_outbox_space ON webhook_outbox(space_id, id);
            CREATE TABLE IF NOT EXISTS webhooks(
                webhook TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                start_id INTEGER NOT NULL,
                seen_at INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS webhook_cursors(
                webhook TEXT NOT NULL,
                space_id INTEGER NOT NULL,
                delivered_id INTEGER NOT NULL,
                batch_last INTEGER,
                delivery_id TEXT,
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at INTEGER NOT NULL DEFAULT 0,
                last_error TEXT,
                lease_owner TEXT,
                lease_until INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY(webhook, space_id)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS webhook_dead_letters(
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                webhook TEXT NOT NULL,
                name TEXT NOT NULL,
                space TEXT NOT NULL,
                epoch TEXT NOT NULL,
                first_seq INTEGER NOT NULL,
                last_seq INTEGER NOT NULL,
                changes INTEGER NOT NULL,
                delivery_id TEXT NOT NULL,
                body BLOB NOT NULL,
                attempts INTEGER NOT NULL,
                last_error TEXT NOT NULL,
                failed_at INTEGER NOT NULL);
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '8');
            """),
        // The epoch history (docs/protocol.md section 4, "Re-offers", rule 3): when the
        // store's history began and every epoch it ended and when, so a re-offer's commit
        // time can be only one its epoch could have had. A store from before knows its
        // ended epochs (the last 32, comma-separated in `retired_epochs`) but not when they
        // ended nor when it began: both are bounded by now, when every one of them is over.
        Migration(name: "sync 9: epoch_history", legacy: ("sync", 9), sql: """
            CREATE TABLE IF NOT EXISTS epoch_history(epoch TEXT PRIMARY KEY, ended_at INTEGER NOT NULL) WITHOUT ROWID;
            WITH RECURSIVE retired(epoch, rest) AS (
                SELECT '', (SELECT value FROM meta WHERE key = 'retired_epochs') || ','
                UNION ALL
                SELECT substr(rest, 1, instr(rest, ',') - 1), substr(rest, instr(rest, ',') + 1) FROM retired WHERE rest <> '')
            INSERT OR IGNORE INTO epoch_history(epoch, ended_at)
                SELECT epoch, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) FROM retired
                 WHERE epoch <> '' AND EXISTS (SELECT 1 FROM meta WHERE key = 'epoch');
            INSERT OR IGNORE INTO meta(key, value)
                SELECT 'history_began_at', CAST(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS TEXT)
                 WHERE EXISTS (SELECT 1 FROM meta WHERE key = 'epoch');
            DELETE FROM meta WHERE key = 'retired_epochs';
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '9');
            """),
        // Who wrote, as no device can claim it: the authenticated subject (the token's
        // `sub`) of the push that wrote each record state, kept beside the clientId the
        // device chose; the same in the webhook outbox, and the subject a device's telemetry
        // is bound to. NULL for what was written before.
        Migration(name: "sync 10: records.subject, webhook_outbox.subject, devices.subject", legacy: ("sync", 10), sql: """
            ALTER TABLE records ADD COLUMN subject TEXT;
            ALTER TABLE webhook_outbox ADD COLUMN subject TEXT;
            ALTER TABLE devices ADD COLUMN subject TEXT;
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '10');
            """),
        // Each space's record bytes (`PushRules.recordBytes`: collection, id and data of
        // every record, tombstones included), kept by every push and compaction in their
        // transactions, for the per-space limit and the operator's list.
        Migration(name: "sync 11: spaces.record_bytes", legacy: ("sync", 11), sql: """
            ALTER TABLE spaces ADD COLUMN record_bytes INTEGER NOT NULL DEFAULT 0;
            UPDATE spaces SET record_bytes = (SELECT coalesce(sum(length(CAST(collection AS BLOB)) + length(CAST(id AS BLOB)) + coalesce(length(data), 0)), 0)
                                                FROM records r WHERE r.space_id = spaces.space_id);
            INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '11');
            """),
    ]

    /// Migrations since the list began, in the order they were released.
    static let later: [Migration] = [
        // "sync 5" first made a second index of the view index by seq, which pages never
        // read; the files it made still kept it up at every write.
        Migration(name: "view_index without view_index_seq", sql: """
            DROP INDEX IF EXISTS view_index_seq;
            """),
        // The conflicts each device reported, and of them those its resolver decided
        // (`DeviceTelemetry`), summed per space for the console.
        Migration(name: "devices.conflicts, devices.resolved", sql: """
            ALTER TABLE devices ADD COLUMN conflicts INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE devices ADD COLUMN resolved INTEGER NOT NULL DEFAULT 0;
            """),
        // The webhook batches claimed and not yet delivered, per webhook and space: a claim
        // cuts everything the space committed after the cursor into a run of batches, each
        // fixed by its last outbox id and delivery id (`WebhookOutbox.claim`). The batch a
        // cursor had in flight becomes the first of its run.
        Migration(name: "webhook_batches", sql: """
            CREATE TABLE IF NOT EXISTS webhook_batches(
                webhook TEXT NOT NULL,
                space_id INTEGER NOT NULL,
                last_id INTEGER NOT NULL,
                delivery_id TEXT NOT NULL,
                PRIMARY KEY(webhook, space_id, last_id)) WITHOUT ROWID;
            INSERT INTO webhook_batches(webhook, space_id, last_id, delivery_id)
                SELECT webhook, space_id, batch_last, delivery_id FROM webhook_cursors
                 WHERE batch_last IS NOT NULL AND delivery_id IS NOT NULL AND batch_last > delivered_id;
            UPDATE webhook_cursors SET batch_last = NULL, delivery_id = NULL;
            """),
        // What a resolved write did (docs/protocol.md section 4, "Resolutions"; added
        // without a version change): the state it stored keeps the version it replaced and
        // the resolver's mark (`Resolved.stored`), which pages, conflicts and webhooks carry
        // as they are. NULL for every state written before, and cleared by any later write
        // and by a rotation.
        Migration(name: "records.resolved, webhook_outbox.resolved", sql: """
            ALTER TABLE records ADD COLUMN resolved TEXT;
            ALTER TABLE webhook_outbox ADD COLUMN resolved TEXT;
            """),
        // The subject whose newest applied push used each client id of a space: what a
        // device's telemetry is bound to (`DeviceTelemetry.record`), kept by every push
        // that writes. Filled from the records' newest state per client id.
        Migration(name: "client_subjects", sql: """
            CREATE TABLE IF NOT EXISTS client_subjects(
                space_id INTEGER NOT NULL,
                client_id TEXT NOT NULL,
                subject TEXT NOT NULL,
                PRIMARY KEY(space_id, client_id)) WITHOUT ROWID;
            INSERT OR IGNORE INTO client_subjects(space_id, client_id, subject)
                SELECT space_id, updated_by, subject FROM
                  (SELECT space_id, updated_by, subject, max(seq) FROM records WHERE subject IS NOT NULL GROUP BY space_id, updated_by);
            """),
        // What the server sees of each device's sync (`DeviceActivity`, flushed by
        // `DeviceTelemetry.flush`): its last push, its last pull with the cursor that pull
        // answered and the view it was read under, and the newest of every time the server
        // saw it (a report, a push, a pull), by which the console lists quiet devices first.
        Migration(name: "devices.last_push, last_pull, pull cursor and view, last_active", sql: """
            ALTER TABLE devices ADD COLUMN last_push INTEGER;
            ALTER TABLE devices ADD COLUMN last_pull INTEGER;
            ALTER TABLE devices ADD COLUMN pull_epoch TEXT;
            ALTER TABLE devices ADD COLUMN pull_seq INTEGER;
            ALTER TABLE devices ADD COLUMN pull_view TEXT;
            ALTER TABLE devices ADD COLUMN last_active INTEGER NOT NULL DEFAULT 0;
            UPDATE devices SET last_active = last_seen;
            """),
    ]
}
