import Foundation
import OutpostCore
import OutpostPostgres

/// The PostgreSQL schema of Outpost: one list of named migrations (`Migrations`) applied
/// at start under an advisory lock, the epoch in `meta`, and `rotate-epoch`.
///
/// Every instance runs `migrate` when it starts. `pg_advisory_lock(lockKey)` makes
/// instances that start together take turns: the first applies what is missing, each
/// migration in its own transaction together with its row in `migrations`, and the others
/// then find nothing left to do. An instance older than the database (a migration it does
/// not know) refuses to start rather than write a schema it does not understand.
///
/// "sync 1" to "sync 12" and "media 2" are the steps from before the list, when
/// `schema_migrations` and `meta.media_schema_version` counted them; they still write those
/// numbers, which servers from before the list read.
public enum PostgresSchema {
    /// The key of the session advisory lock held while migrating (ASCII "outpost" + 1).
    public static let lockKey: Int64 = 0x6F75_7470_6F73_7401

    /// The list: the sync steps, the media metadata's and those since the list began.
    static let migrations = Migrations(sync + PostgresMediaMetadata.migrations + later) { db in
        guard try db.queryOne("SELECT CASE WHEN to_regclass('schema_migrations') IS NULL THEN 0 ELSE 1 END", [], { $0.int64(0) }) == 1 else { return [:] }
        let sync = Int(try db.queryOne("SELECT coalesce(max(version), 0) FROM schema_migrations", [], { $0.int64(0) }) ?? 0)
        // A database without the key has the media tables of "sync 1" only.
        let media = try db.queryOne("SELECT value FROM meta WHERE key = 'media_schema_version'", [], { $0.text(0) }).map { Int($0) ?? 0 } ?? 1
        return ["sync": sync, "media": media]
    }

    /// The sync store's steps from before the named list (`schema_migrations` 1 to 12).
    static let sync: [Migration] = [
        // The sync tables, the lock of several spaces, the media metadata. (Its first
        // release also made the push function outpost_push, which "sync 4" drops.)
        Migration(name: "sync 1: meta, spaces, records, applied_changes, outpost_lock_spaces, media, uploads, upload_chunks", legacy: ("sync", 1), sql: #"""
            CREATE TABLE IF NOT EXISTS schema_migrations(
                version bigint PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now());
            CREATE TABLE meta(
                key text COLLATE "C" PRIMARY KEY,
                value text NOT NULL);
            CREATE TABLE spaces(
                space_id bigserial PRIMARY KEY,
                name text COLLATE "C" NOT NULL UNIQUE,
                head_seq bigint NOT NULL DEFAULT 0);
            CREATE TABLE records(
                space_id bigint NOT NULL,
                collection text COLLATE "C" NOT NULL,
                id text COLLATE "C" NOT NULL,
                seq bigint NOT NULL,
                deleted boolean NOT NULL,
                data bytea,
                updated_at bigint NOT NULL,
                updated_by text NOT NULL,
                client_time bigint,
                PRIMARY KEY(space_id, collection, id));
            CREATE UNIQUE INDEX records_seq ON records(space_id, seq);
            CREATE TABLE applied_changes(
                space_id bigint NOT NULL,
                change_id text COLLATE "C" NOT NULL,
                fingerprint bytea NOT NULL,
                epoch text NOT NULL,
                seq bigint NOT NULL,
                applied_at bigint NOT NULL,
                PRIMARY KEY(space_id, change_id));
            CREATE INDEX applied_changes_at ON applied_changes(applied_at);

            -- The push function that stood here (outpost_push) is dropped by migration 4:
            -- since then the push rules run in the server (PushRules, one implementation for
            -- every store), so a new database never gets it.

            -- Locks several spaces' rows in one order (creating missing ones), so two group
            -- commits that touch the same spaces cannot deadlock.
            CREATE FUNCTION outpost_lock_spaces(p_spaces text[]) RETURNS void
            LANGUAGE plpgsql AS $fn$
            BEGIN
                INSERT INTO spaces(name) SELECT n FROM unnest(p_spaces) AS n ORDER BY n ON CONFLICT (name) DO NOTHING;
                PERFORM 1 FROM spaces WHERE name = ANY(p_spaces) ORDER BY name FOR UPDATE;
            END
            $fn$;

            CREATE TABLE media(
                space text COLLATE "C" NOT NULL,
                media_id text COLLATE "C" NOT NULL,
                size bigint NOT NULL,
                content_type text NOT NULL,
                filename text,
                created_at bigint NOT NULL,
                PRIMARY KEY(space, media_id));
            CREATE TABLE uploads(
                upload_id text COLLATE "C" PRIMARY KEY,
                space text COLLATE "C" NOT NULL,
                sha256 text COLLATE "C" NOT NULL,
                size bigint NOT NULL,
                content_type text NOT NULL,
                filename text,
                chunk_size bigint NOT NULL,
                chunk_count bigint NOT NULL,
                state text NOT NULL,
                created_at bigint NOT NULL,
                expires_at bigint NOT NULL);
            CREATE INDEX uploads_file ON uploads(space, sha256, size) WHERE state = 'open';
            CREATE INDEX uploads_expiry ON uploads(expires_at);
            CREATE TABLE upload_chunks(
                upload_id text COLLATE "C" NOT NULL,
                idx bigint NOT NULL,
                sha256 bytea NOT NULL,
                PRIMARY KEY(upload_id, idx));
            INSERT INTO schema_migrations(version) VALUES (1);
            """#),
        // Protocol 1.1, a re-offer keeps its history: records.lineage. (Its first release
        // also replaced outpost_push.)
        Migration(name: "sync 2: records.lineage", legacy: ("sync", 2), sql: #"""
            ALTER TABLE records ADD COLUMN IF NOT EXISTS lineage text;
            -- Migration 2 also replaced outpost_push; migration 4 drops every version of it.
            INSERT INTO schema_migrations(version) VALUES (2);
            """#),
        // Protocol 1.1, a re-offer is admitted by what the state is, not what it descends
        // from: records.same_as. A row of "sync 2" does not tell whether its lineage was
        // kept through a write since, so its lineage is copied: this errs toward admitting
        // a re-offer, as "sync 2" did. (Its first release also replaced outpost_push.)
        Migration(name: "sync 3: records.same_as", legacy: ("sync", 3), sql: #"""
            ALTER TABLE records ADD COLUMN IF NOT EXISTS same_as text;
            UPDATE records SET same_as = lineage WHERE lineage IS NOT NULL;
            -- Migration 3 also replaced outpost_push; migration 4 drops every version of it.
            INSERT INTO schema_migrations(version) VALUES (3);
            """#),
        // The push rules run in the server, for every store alike (PushRules over
        // PostgresPushStorage), so the stored push function goes, in each of the versions
        // migrations 1 to 3 created. An instance of the previous release still running
        // answers its pushes 503 until it is replaced; clients retry, and nothing is lost.
        Migration(name: "sync 4: no outpost_push", legacy: ("sync", 4), sql: #"""
            DROP FUNCTION IF EXISTS outpost_push(text, text, text, bigint, text[], bytea[], text[], text[],
                                                 boolean[], bytea[], bigint[], bigint[], boolean[], boolean[]);
            DROP FUNCTION IF EXISTS outpost_push(text, text, text, bigint, text[], bytea[], text[], text[],
                                                 boolean[], bytea[], bigint[], bigint[], boolean[], boolean[],
                                                 text[], bigint[], bigint[]);
            INSERT INTO schema_migrations(version) VALUES (4);
            """#),
        // The live states that writes replaced on a server with rules, where the write
        // may have taken the record out of some token's view (docs/rules.md).
        Migration(name: "sync 5: departures", legacy: ("sync", 5), sql: #"""
            CREATE TABLE IF NOT EXISTS departures(
                space_id bigint NOT NULL,
                collection text NOT NULL,
                id text NOT NULL,
                seq bigint NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY(space_id, collection, id, seq));
            INSERT INTO schema_migrations(version) VALUES (5);
            """#),
        // The view index of a server with rules (docs/rules.md, "Cost"; `ViewIndex`),
        // and the departures by seq. (Its first release also made `view_index_seq`, which
        // "view_index without view_index_seq" drops.)
        Migration(name: "sync 6: view_index", legacy: ("sync", 6), sql: #"""
            CREATE TABLE IF NOT EXISTS view_index(
                space_id bigint NOT NULL,
                scope text NOT NULL,
                path text NOT NULL,
                key text NOT NULL,
                seq bigint NOT NULL,
                collection text NOT NULL,
                PRIMARY KEY(space_id, scope, path, key, seq));
            CREATE INDEX IF NOT EXISTS departures_seq ON departures(space_id, seq);
            INSERT INTO schema_migrations(version) VALUES (6);
            """#),
        // Compaction (docs/operating.md): each space's history horizon, and the
        // tombstones by age.
        Migration(name: "sync 7: spaces.horizon_seq, records_tombstones", legacy: ("sync", 7), sql: #"""
            ALTER TABLE spaces ADD COLUMN IF NOT EXISTS horizon_seq bigint NOT NULL DEFAULT 0;
            CREATE INDEX IF NOT EXISTS records_tombstones ON records(updated_at) WHERE deleted;
            INSERT INTO schema_migrations(version) VALUES (7);
            """#),
        // Device telemetry (DeviceTelemetry): each device's last state and its syncs.
        Migration(name: "sync 8: devices, device_syncs", legacy: ("sync", 8), sql: #"""
            CREATE TABLE IF NOT EXISTS devices(
                space text COLLATE "C" NOT NULL,
                client_id text COLLATE "C" NOT NULL,
                first_seen bigint NOT NULL,
                last_seen bigint NOT NULL,
                last_sync bigint NOT NULL,
                sdk_version text NOT NULL,
                pending bigint NOT NULL,
                last_error text,
                clock_offset text,
                reports bigint NOT NULL,
                PRIMARY KEY(space, client_id));
            CREATE TABLE IF NOT EXISTS device_syncs(
                space text COLLATE "C" NOT NULL,
                client_id text COLLATE "C" NOT NULL,
                started_at bigint NOT NULL,
                received_at bigint NOT NULL,
                entry text NOT NULL,
                PRIMARY KEY(space, client_id, started_at));
            INSERT INTO schema_migrations(version) VALUES (8);
            """#),
        // Webhooks (WebhookOutbox): each committed change while webhooks are configured,
        // written in its push's transaction; the webhooks, each one's delivery cursor per
        // space, and the batches that ran out of attempts. Within a space, outbox ids grow
        // in commit order: they are drawn under the space's row lock.
        Migration(name: "sync 9: webhook_outbox, webhooks, webhook_cursors, webhook_dead_letters", legacy: ("sync", 9), sql: #"""
            CREATE TABLE IF NOT EXISTS webhook_outbox(
                id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                space_id bigint NOT NULL,
                epoch text NOT NULL,
                seq bigint NOT NULL,
                collection text NOT NULL,
                record_id text NOT NULL,
                deleted boolean NOT NULL,
                data bytea,
                updated_at bigint NOT NULL,
                updated_by text NOT NULL,
                client_time bigint,
                lineage text,
                same_as text,
                committed_at bigint NOT NULL);
            CREATE INDEX IF NOT EXISTS webhook_outbox_space ON webhook_outbox(space_id, id);
            CREATE TABLE IF NOT EXISTS webhooks(
                webhook text COLLATE "C" PRIMARY KEY,
                name text NOT NULL,
                start_id bigint NOT NULL,
                seen_at bigint NOT NULL);
            CREATE TABLE IF NOT EXISTS webhook_cursors(
                webhook text COLLATE "C" NOT NULL,
                space_id bigint NOT NULL,
                delivered_id bigint NOT NULL,
                batch_last bigint,
                delivery_id text,
                attempts bigint NOT NULL DEFAULT 0,
                next_attempt_at bigint NOT NULL DEFAULT 0,
                last_error text,
                lease_owner text,
                lease_until bigint NOT NULL DEFAULT 0,
                PRIMARY KEY(webhook, space_id));
            CREATE TABLE IF NOT EXISTS webhook_dead_letters(
                id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                webhook text NOT NULL,
                name text NOT NULL,
                space text NOT NULL,
                epoch text NOT NULL,
                first_seq bigint NOT NULL,
                last_seq bigint NOT NULL,
                changes bigint NOT NULL,
                delivery_id text NOT NULL,
                body bytea NOT NULL,
                attempts bigint NOT NULL,
                last_error text NOT NULL,
                failed_at bigint NOT NULL);
            INSERT INTO schema_migrations(version) VALUES (9);
            """#),
        // The epoch history (docs/protocol.md section 4, "Re-offers", rule 3): when the
        // database's history began and every epoch it ended and when, so a re-offer's commit
        // time can be only one its epoch could have had. A database from before knows its
        // ended epochs (the last 32, from `retired_epochs`) but not when they ended nor when
        // it began: both are bounded by now, when every one of them is over.
        Migration(name: "sync 10: epoch_history", legacy: ("sync", 10), sql: #"""
            CREATE TABLE IF NOT EXISTS epoch_history(
                epoch text COLLATE "C" PRIMARY KEY,
                ended_at bigint NOT NULL);
            INSERT INTO epoch_history(epoch, ended_at)
                SELECT e, (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                  FROM meta, unnest(string_to_array(value, ',')) AS e
                 WHERE key = 'retired_epochs' AND e <> ''
                ON CONFLICT DO NOTHING;
            INSERT INTO meta(key, value)
                SELECT 'history_began_at', ((extract(epoch FROM clock_timestamp()) * 1000)::bigint)::text
                 WHERE EXISTS (SELECT 1 FROM meta WHERE key = 'epoch')
                ON CONFLICT (key) DO NOTHING;
            DELETE FROM meta WHERE key = 'retired_epochs';
            INSERT INTO schema_migrations(version) VALUES (10);
            """#),
        // Who wrote, as no device can claim it: the authenticated subject (the token's
        // `sub`) of the push that wrote each record state, beside the clientId the device
        // chose; the same in the webhook outbox, and the subject a device's telemetry is
        // bound to. NULL for what was written before.
        Migration(name: "sync 11: records.subject, webhook_outbox.subject, devices.subject", legacy: ("sync", 11), sql: #"""
            ALTER TABLE records ADD COLUMN IF NOT EXISTS subject text;
            ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS subject text;
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS subject text;
            INSERT INTO schema_migrations(version) VALUES (11);
            """#),
        // Each space's record bytes (`PushRules.recordBytes`: collection, id and data of
        // every record, tombstones included), kept by every push and compaction in their
        // transactions, for the per-space limit and the operator's list.
        Migration(name: "sync 12: spaces.record_bytes", legacy: ("sync", 12), sql: #"""
            ALTER TABLE spaces ADD COLUMN IF NOT EXISTS record_bytes bigint NOT NULL DEFAULT 0;
            UPDATE spaces s SET record_bytes = coalesce((
                SELECT sum(octet_length(collection) + octet_length(id) + coalesce(octet_length(data), 0)) FROM records r
                 WHERE r.space_id = s.space_id), 0);
            INSERT INTO schema_migrations(version) VALUES (12);
            """#),
    ]

    /// Migrations since the list began, in the order they were released.
    static let later: [Migration] = [
        // "sync 6" first made a second index of the view index by seq, which pages never
        // read; the databases it made still kept it up at every write.
        Migration(name: "view_index without view_index_seq", sql: """
            DROP INDEX IF EXISTS view_index_seq;
            """),
        // The conflicts each device reported, and of them those its resolver decided
        // (`DeviceTelemetry`), summed per space for the console.
        Migration(name: "devices.conflicts, devices.resolved", sql: """
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS conflicts bigint NOT NULL DEFAULT 0;
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS resolved bigint NOT NULL DEFAULT 0;
            """),
        // The webhook batches claimed and not yet delivered, per webhook and space: a claim
        // cuts everything the space committed after the cursor into a run of batches, each
        // fixed by its last outbox id and delivery id (`WebhookOutbox.claim`). The batch a
        // cursor had in flight becomes the first of its run.
        Migration(name: "webhook_batches", sql: """
            CREATE TABLE IF NOT EXISTS webhook_batches(
                webhook text COLLATE "C" NOT NULL,
                space_id bigint NOT NULL,
                last_id bigint NOT NULL,
                delivery_id text NOT NULL,
                PRIMARY KEY(webhook, space_id, last_id));
            INSERT INTO webhook_batches(webhook, space_id, last_id, delivery_id)
                SELECT webhook, space_id, batch_last, delivery_id FROM webhook_cursors
                 WHERE batch_last IS NOT NULL AND delivery_id IS NOT NULL AND batch_last > delivered_id
                ON CONFLICT DO NOTHING;
            UPDATE webhook_cursors SET batch_last = NULL, delivery_id = NULL;
            """),
        // What a resolved write did (docs/protocol.md section 4, "Resolutions"; added
        // without a version change): the state it stored keeps the version it replaced and
        // the resolver's mark (`Resolved.stored`), which pages, conflicts and webhooks carry
        // as they are. NULL for every state written before, and cleared by any later write
        // and by a rotation.
        Migration(name: "records.resolved, webhook_outbox.resolved", sql: """
            ALTER TABLE records ADD COLUMN IF NOT EXISTS resolved text;
            ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS resolved text;
            """),
        // The subject whose newest applied push used each client id of a space: what a
        // device's telemetry is bound to (`DeviceTelemetry.record`), kept by every push
        // that writes. Filled from the records' newest state per client id.
        Migration(name: "client_subjects", sql: """
            CREATE TABLE IF NOT EXISTS client_subjects(
                space_id bigint NOT NULL,
                client_id text COLLATE "C" NOT NULL,
                subject text NOT NULL,
                PRIMARY KEY(space_id, client_id));
            INSERT INTO client_subjects(space_id, client_id, subject)
                SELECT DISTINCT ON (space_id, updated_by) space_id, updated_by, subject FROM records
                 WHERE subject IS NOT NULL ORDER BY space_id, updated_by, seq DESC
                ON CONFLICT DO NOTHING;
            """),
        // What the server sees of each device's sync (`DeviceActivity`, flushed by
        // `DeviceTelemetry.flush`): its last push, its last pull with the cursor that pull
        // answered and the view it was read under, and the newest of every time the server
        // saw it (a report, a push, a pull), by which the console lists quiet devices first.
        Migration(name: "devices.last_push, last_pull, pull cursor and view, last_active", sql: """
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS last_push bigint;
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS last_pull bigint;
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS pull_epoch text;
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS pull_seq bigint;
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS pull_view text;
            ALTER TABLE devices ADD COLUMN IF NOT EXISTS last_active bigint NOT NULL DEFAULT 0;
            UPDATE devices SET last_active = last_seen;
            """),
    ]

    /// Brings the database up to date (under the advisory lock) and returns its epoch,
    /// creating one for a new database.
    public static func migrate(_ db: PostgresConnection, makeEpoch: SQLiteSyncStore.EpochMaker = SQLiteSyncStore.systemEpoch,
                               now: Int64 = SQLiteSyncStore.systemClock()) throws -> Epoch {
        try db.query("SELECT pg_advisory_lock($1)", [.int(lockKey)])
        defer { _ = try? db.query("SELECT pg_advisory_unlock($1)", [.int(lockKey)]) }
        try db.execute("SET client_min_messages = warning")
        for name in try migrations.migrate(PostgresSession(db: db), now: now) {
            Log.info("applied PostgreSQL migration", ["migration": name])
        }
        return try db.transaction {
            if let text = try currentEpochText(db) {
                guard let epoch = Epoch(text) else { throw StoreError("the store's epoch \"\(text)\" is not valid") }
                return epoch
            }
            let epoch = makeEpoch(nil)
            try db.run("INSERT INTO meta(key, value) VALUES ('epoch', $1), ('history_began_at', $2)",
                       [.text(epoch.rawValue), .text(String(now))])
            return epoch
        }
    }

    /// The migrations of the list the database at `db` has not applied (all of them for a
    /// new database); nil when it recorded one this server does not know.
    static func pending(_ db: PostgresConnection) throws -> [String]? {
        let session = PostgresSession(db: db)
        guard try db.query("SELECT to_regclass('migrations') IS NOT NULL").bool(0, 0) else {
            return migrations.pending(recorded: Set(migrations.legacyNames(try migrations.legacy(session))))
        }
        return migrations.pending(recorded: Set(try session.query("SELECT name FROM migrations", []) { $0.text(0) }))
    }

    static func currentEpochText(_ db: PostgresConnection) throws -> String? {
        let rows = try db.query("SELECT value FROM meta WHERE key = 'epoch'")
        return rows.count == 0 ? nil : rows.text(0, 0)
    }

    /// Gives the database at `url` a new epoch, later than its current one, at `now`; adds
    /// the epoch that ends to the history (`epoch_history`), gives every record its lineage
    /// and sameAs in it (and clears resolutions' marks), and tells running instances
    /// (`NOTIFY outpost_epoch`): they stop taking writes and shut down, to be started again
    /// on the new epoch.
    public static func rotateEpoch(url: String, makeEpoch: SQLiteSyncStore.EpochMaker = SQLiteSyncStore.systemEpoch,
                                   now: Int64 = SQLiteSyncStore.systemClock()) throws -> Epoch {
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        _ = try migrate(db, makeEpoch: makeEpoch, now: now)
        return try db.transaction {
            // The row lock makes two rotations take turns; pushes read the epoch in their
            // own transactions and fail once it changed.
            let rows = try db.query("SELECT value FROM meta WHERE key = 'epoch' FOR UPDATE")
            let previous = rows.count == 0 ? nil : Epoch(rows.text(0, 0))
            let epoch = makeEpoch(previous)
            try db.run("INSERT INTO meta(key, value) VALUES ('epoch', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       [.text(epoch.rawValue)])
            if let previous {
                try db.run("""
                    INSERT INTO epoch_history(epoch, ended_at) VALUES ($1, $2)
                    ON CONFLICT (epoch) DO UPDATE SET ended_at = least(epoch_history.ended_at, excluded.ended_at)
                    """, [.text(previous.rawValue), .int(now)])
                // Every record's own version in the history that ends (seqs are kept), as
                // both what it descends from and what it is, since nothing is written on it
                // yet: re-offers of that history are judged against same_as (docs/protocol.md
                // section 4, added in 1.1). It replaces older values. A resolution's mark
                // goes: the version it names is of the history that ends.
                try db.run("UPDATE records SET lineage = $1 || '.' || seq, same_as = $1 || '.' || seq, resolved = NULL", [.text(previous.rawValue)])
            }
            try db.query("SELECT pg_notify('outpost_epoch', $1)", [.text(epoch.rawValue)])
            return epoch
        }
    }
}
