-- The PostgreSQL schema of main at 1c57f54 (schema_migrations 4, media 1),
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
INSERT INTO meta(key, value) VALUES ('epoch', '01JE1000000000000000000000');
INSERT INTO meta(key, value) VALUES ('retired_epochs', '01JE0000000000000000000000');
INSERT INTO spaces(name, head_seq) VALUES ('sp', 5), ('other', 1);
INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'todos', 'a', 1, false, '\x7b2274223a2278227d'::bytea, 10, 'p', 5, '01JE0000000000000000000000.1', '01JE0000000000000000000000.1');
INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'todos', 'b', 3, false, '\x7b2274223a2279227d'::bytea, 30, 'q', NULL, '01JE0000000000000000000000.2', NULL);
INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'todos', 'c', 5, true, NULL, 50, 'q', NULL, NULL, NULL);
INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as) VALUES ((SELECT space_id FROM spaces WHERE name = 'other'), 'notes', 'z', 1, false, '\x7b226e223a317d'::bytea, 60, 'p', NULL, NULL, NULL);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-a', '\x87052919223f50f90e932c645eab4855c7b7f82b811000f3aa4c482b95c5ab69'::bytea, '01JE0000000000000000000000', 1, 10);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-b1', '\x3cb53f91c90b24f0fb81d4dd81d9e11634b577a192e9a782368b38dc5043b573'::bytea, '01JE0000000000000000000000', 2, 20);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-b2', '\xb2e6bad36361200a926271a797dfa5c667dd55cf54df6c75cfeb4ad657756afd'::bytea, '01JE1000000000000000000000', 3, 30);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-c1', '\xa5e85bba11e52429cf86d8a7a0f7fabe06f9fd58d2dfa6de3b6c8e0d755419b3'::bytea, '01JE1000000000000000000000', 4, 40);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), 'c-c2', '\x97e20b009432b836d351ad330629d7af97fd133c6e9536ab4d2370e19678d7da'::bytea, '01JE1000000000000000000000', 5, 50);
INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES ((SELECT space_id FROM spaces WHERE name = 'other'), 'c-z', '\x04094b5df1158ed83f28d4ff138cbe6fc49088f270652b797c3613147d57a412'::bytea, '01JE1000000000000000000000', 1, 60);
INSERT INTO media(space, media_id, size, content_type, filename, created_at) VALUES ('sp', '721c9525ade2ea8903d343ef25cf68b9bf4ab0aad56bb7b01fbe48d09bc7fcf4', 5, 'text/plain', 'a.txt', 100);
INSERT INTO uploads(upload_id, space, sha256, size, content_type, filename, chunk_size, chunk_count, state, created_at, expires_at) VALUES ('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'sp', '3b9c358f36f0a31b6ad3e14f309c7cf198ac9246e8316f9ce543d5b19ac02b80', 8192, 'image/jpeg', NULL, 4096, 2, 'open', 1, 9999999999999);
INSERT INTO upload_chunks(upload_id, idx, sha256) VALUES ('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 0, '\x4bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c385a5d7cce23c7785459a'::bytea);
COMMIT;
