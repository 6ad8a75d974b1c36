-- The PostgreSQL schema of main at 354d535 (schema_migrations 12, media 2),
-- its migrations as that commit ran them, then a server's writes of that time.
SET client_min_messages = warning;
CREATE TABLE IF NOT EXISTS schema_migrations(version bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
BEGIN;
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
COMMIT;
BEGIN;
        ALTER TABLE records ADD COLUMN IF NOT EXISTS lineage text;
        -- Migration 2 also replaced outpost_push; migration 4 drops every version of it.
INSERT INTO schema_migrations(version) VALUES (2);
COMMIT;
BEGIN;
        ALTER TABLE records ADD COLUMN IF NOT EXISTS same_as text;
        UPDATE records SET same_as = lineage WHERE lineage IS NOT NULL;
        -- Migration 3 also replaced outpost_push; migration 4 drops every version of it.
INSERT INTO schema_migrations(version) VALUES (3);
COMMIT;
BEGIN;
        DROP FUNCTION IF EXISTS outpost_push(text, text, text, bigint, text[], bytea[], text[], text[],
                                             boolean[], bytea[], bigint[], bigint[], boolean[], boolean[]);
        DROP FUNCTION IF EXISTS outpost_push(text, text, text, bigint, text[], bytea[], text[], text[],
                                             boolean[], bytea[], bigint[], bigint[], boolean[], boolean[],
                                             text[], bigint[], bigint[]);
INSERT INTO schema_migrations(version) VALUES (4);
COMMIT;
BEGIN;
        CREATE TABLE IF NOT EXISTS departures(
            space_id bigint NOT NULL,
            collection text NOT NULL,
            id text NOT NULL,
            seq bigint NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY(space_id, collection, id, seq));
INSERT INTO schema_migrations(version) VALUES (5);
COMMIT;
BEGIN;
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
COMMIT;
BEGIN;
        ALTER TABLE spaces ADD COLUMN IF NOT EXISTS horizon_seq bigint NOT NULL DEFAULT 0;
        CREATE INDEX IF NOT EXISTS records_tombstones ON records(updated_at) WHERE deleted;
INSERT INTO schema_migrations(version) VALUES (7);
COMMIT;
BEGIN;
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
COMMIT;
BEGIN;
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
COMMIT;
BEGIN;
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
COMMIT;
BEGIN;
        ALTER TABLE records ADD COLUMN IF NOT EXISTS subject text;
        ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS subject text;
        ALTER TABLE devices ADD COLUMN IF NOT EXISTS subject text;
INSERT INTO schema_migrations(version) VALUES (11);
COMMIT;
BEGIN;
        ALTER TABLE spaces ADD COLUMN IF NOT EXISTS record_bytes bigint NOT NULL DEFAULT 0;
        UPDATE spaces s SET record_bytes = coalesce((
            SELECT sum(octet_length(collection) + octet_length(id) + coalesce(octet_length(data), 0)) FROM records r
             WHERE r.space_id = s.space_id), 0);
INSERT INTO schema_migrations(version) VALUES (12);
COMMIT;
BEGIN;
                    CREATE TABLE tus_uploads(
                        upload_id text COLLATE "C" PRIMARY KEY,
                        space text COLLATE "C" NOT NULL,
                        length bigint NOT NULL,
                        upload_offset bigint NOT NULL,
                        metadata text NOT NULL,
                        content_type text NOT NULL,
                        filename text,
                        media_id text COLLATE "C",
                        state text NOT NULL,
                        created_at bigint NOT NULL,
                        expires_at bigint NOT NULL);
                    CREATE INDEX tus_uploads_expiry ON tus_uploads(expires_at);
INSERT INTO meta(key, value) VALUES ('media_schema_version', '2');
COMMIT;
BEGIN;
INSERT INTO meta(key, value) VALUES ('epoch', '01JE1000000000000000000000');
INSERT INTO meta(key, value) VALUES ('history_began_at', '1');
INSERT INTO epoch_history(epoch, ended_at) VALUES ('01JE0000000000000000000000', 25);
INSERT INTO spaces(name, head_seq) VALUES ('sp', 5), ('other', 1);
INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as, subject) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'todos', 'a', 1, false, '\x7b2274223a2278227d'::bytea, 10, 'p', 5, '01JE0000000000000000000000.1', '01JE0000000000000000000000.1', 'sub-p');
INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as, subject) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'todos', 'b', 3, false, '\x7b2274223a2279227d'::bytea, 30, 'q', NULL, '01JE0000000000000000000000.2', NULL, 'sub-q');
INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as, subject) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'todos', 'c', 5, true, NULL, 50, 'q', NULL, NULL, NULL, 'sub-q');
INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as, subject) VALUES ((SELECT space_id FROM spaces WHERE name = 'other'), 'notes', 'z', 1, false, '\x7b226e223a317d'::bytea, 60, 'p', NULL, NULL, NULL, 'sub-p');
UPDATE spaces SET record_bytes = (SELECT coalesce(sum(octet_length(collection) + octet_length(id) + coalesce(octet_length(data), 0)), 0) FROM records r WHERE r.space_id = spaces.space_id);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-a', '\x87052919223f50f90e932c645eab4855c7b7f82b811000f3aa4c482b95c5ab69'::bytea, '01JE0000000000000000000000', 1, 10);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-b1', '\x3cb53f91c90b24f0fb81d4dd81d9e11634b577a192e9a782368b38dc5043b573'::bytea, '01JE0000000000000000000000', 2, 20);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-b2', '\xb2e6bad36361200a926271a797dfa5c667dd55cf54df6c75cfeb4ad657756afd'::bytea, '01JE1000000000000000000000', 3, 30);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-c1', '\xa5e85bba11e52429cf86d8a7a0f7fabe06f9fd58d2dfa6de3b6c8e0d755419b3'::bytea, '01JE1000000000000000000000', 4, 40);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-c2', '\x97e20b009432b836d351ad330629d7af97fd133c6e9536ab4d2370e19678d7da'::bytea, '01JE1000000000000000000000', 5, 50);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'other'), 'c-z', '\x04094b5df1158ed83f28d4ff138cbe6fc49088f270652b797c3613147d57a412'::bytea, '01JE1000000000000000000000', 1, 60);
INSERT INTO departures(space_id, collection, id, seq, data) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'todos', 'b', 3, '\x7b2274223a226f6c64227d'::bytea);
INSERT INTO view_index(space_id, scope, path, key, seq, collection) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), '', '', '', 1, 'todos');
INSERT INTO view_index(space_id, scope, path, key, seq, collection) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), '', '', '', 3, 'todos');
INSERT INTO view_index(space_id, scope, path, key, seq, collection) VALUES ((SELECT space_id FROM spaces WHERE name = 'other'), '', '', '', 1, 'notes');
INSERT INTO devices(space, client_id, first_seen, last_seen, last_sync, sdk_version, pending, last_error, clock_offset, reports, subject) VALUES ('sp', 'dev1', 100, 200, 150, '1.0.0', 0, NULL, NULL, 2, 'sub-p');
INSERT INTO device_syncs(space, client_id, started_at, received_at, entry) VALUES ('sp', 'dev1', 150, 200, '{"ok":true}');
INSERT INTO webhook_outbox(space_id, epoch, seq, collection, record_id, deleted, data, updated_at, updated_by, client_time, lineage, same_as, committed_at, subject) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), '01JE1000000000000000000000', 5, 'todos', 'c', true, NULL, 50, 'q', NULL, NULL, NULL, 50, 'sub-q');
INSERT INTO webhooks(webhook, name, start_id, seen_at) VALUES ('wh1', 'hook', 1, 100);
INSERT INTO webhook_cursors(webhook, space_id, delivered_id) VALUES ('wh1', (SELECT space_id FROM spaces WHERE name = 'sp'), 0);
INSERT INTO media(space, media_id, size, content_type, filename, created_at) VALUES ('sp', '721c9525ade2ea8903d343ef25cf68b9bf4ab0aad56bb7b01fbe48d09bc7fcf4', 5, 'text/plain', 'a.txt', 100);
INSERT INTO uploads(upload_id, space, sha256, size, content_type, filename, chunk_size, chunk_count, state, created_at, expires_at) VALUES ('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'sp', '3b9c358f36f0a31b6ad3e14f309c7cf198ac9246e8316f9ce543d5b19ac02b80', 8192, 'image/jpeg', NULL, 4096, 2, 'open', 1, 9999999999999);
INSERT INTO upload_chunks(upload_id, idx, sha256) VALUES ('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 0, '\x4bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c385a5d7cce23c7785459a'::bytea);
INSERT INTO tus_uploads(upload_id, space, length, upload_offset, metadata, content_type, filename, media_id, state, created_at, expires_at) VALUES ('bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 'sp', 10, 4, 'k dg==', 'text/plain', 'f.txt', NULL, 'open', 5, 9999999999999);
COMMIT;
