-- The PostgreSQL schema of main at 736543f (schema_migrations 3, media 1),
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

        -- Applies one push to one space, every change on its own and in order, and returns
        -- one row per change: o_status 'a' applied, 'r' replayed, 'u' change id reused,
        -- 'e' epoch mismatch, 'c' conflict (with the current record in cur_*).
        --
        -- Seqs are allocated under the space row's lock (FOR UPDATE), which is held until
        -- the transaction ends: see PostgresSyncStore for why that makes a puller never
        -- skip a record. head_seq is stored in the same transaction, so a seq is never
        -- handed out twice, also after a crash; the idempotency row too. pg_notify is
        -- delivered to listeners when (and only if) the transaction commits.
        CREATE FUNCTION outpost_push(
            p_space text, p_epoch text, p_client text, p_now bigint,
            p_change_ids text[], p_fingerprints bytea[], p_collections text[], p_ids text[],
            p_deleted boolean[], p_data bytea[], p_client_times bigint[],
            p_base_seqs bigint[], p_base_ok boolean[], p_force boolean[])
        RETURNS TABLE(o_status text, o_seq bigint, o_epoch text, o_head bigint,
                      cur_seq bigint, cur_deleted boolean, cur_data bytea, cur_updated_at bigint,
                      cur_updated_by text, cur_client_time bigint)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_epoch text;
            v_space bigint;
            v_head bigint;
            v_start bigint;
            v_fp bytea;
            v_applied_epoch text;
            v_applied_seq bigint;
            v_rows bigint;
            i integer;
        BEGIN
            SELECT m.value INTO v_epoch FROM meta m WHERE m.key = 'epoch';
            IF v_epoch IS DISTINCT FROM p_epoch THEN
                RAISE EXCEPTION 'the store''s epoch is %, this server serves %', v_epoch, p_epoch USING ERRCODE = 'OP001';
            END IF;
            SELECT s.space_id, s.head_seq INTO v_space, v_head FROM spaces s WHERE s.name = p_space FOR UPDATE;
            IF NOT FOUND THEN
                INSERT INTO spaces(name) VALUES (p_space) ON CONFLICT (name) DO NOTHING;
                SELECT s.space_id, s.head_seq INTO v_space, v_head FROM spaces s WHERE s.name = p_space FOR UPDATE;
            END IF;
            v_start := v_head;
            FOR i IN 1 .. coalesce(array_length(p_change_ids, 1), 0) LOOP
                o_status := NULL; o_seq := NULL; o_epoch := NULL;
                cur_seq := NULL; cur_deleted := NULL; cur_data := NULL;
                cur_updated_at := NULL; cur_updated_by := NULL; cur_client_time := NULL;
                -- 1. Idempotency: an applied change id answers with its original result.
                SELECT a.fingerprint, a.epoch, a.seq INTO v_fp, v_applied_epoch, v_applied_seq
                  FROM applied_changes a WHERE a.space_id = v_space AND a.change_id = p_change_ids[i];
                IF FOUND THEN
                    IF v_fp = p_fingerprints[i] THEN
                        o_status := 'r'; o_seq := v_applied_seq; o_epoch := v_applied_epoch;
                    ELSE
                        o_status := 'u';
                    END IF;
                    o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                -- 2. A base version of another history cannot be judged.
                IF NOT p_force[i] AND NOT p_base_ok[i] THEN
                    o_status := 'e'; o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                IF v_head >= 9007199254740991 THEN
                    RAISE EXCEPTION 'space % has used every seq of this epoch', p_space USING ERRCODE = 'OP002';
                END IF;
                -- 3. The write, guarded by the base check in the statement itself.
                IF p_force[i] THEN
                    INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time)
                    VALUES (v_space, p_collections[i], p_ids[i], v_head + 1, p_deleted[i], p_data[i], p_now, p_client, p_client_times[i])
                    ON CONFLICT (space_id, collection, id) DO UPDATE SET
                        seq = excluded.seq, deleted = excluded.deleted, data = excluded.data,
                        updated_at = excluded.updated_at, updated_by = excluded.updated_by, client_time = excluded.client_time;
                ELSIF p_base_seqs[i] IS NULL THEN
                    INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time)
                    VALUES (v_space, p_collections[i], p_ids[i], v_head + 1, p_deleted[i], p_data[i], p_now, p_client, p_client_times[i])
                    ON CONFLICT (space_id, collection, id) DO NOTHING;
                ELSE
                    UPDATE records r SET seq = v_head + 1, deleted = p_deleted[i], data = p_data[i],
                           updated_at = p_now, updated_by = p_client, client_time = p_client_times[i]
                     WHERE r.space_id = v_space AND r.collection = p_collections[i] AND r.id = p_ids[i]
                       AND r.seq = p_base_seqs[i];
                END IF;
                GET DIAGNOSTICS v_rows = ROW_COUNT;
                IF v_rows = 0 THEN
                    SELECT r.seq, r.deleted, r.data, r.updated_at, r.updated_by, r.client_time
                      INTO cur_seq, cur_deleted, cur_data, cur_updated_at, cur_updated_by, cur_client_time
                      FROM records r WHERE r.space_id = v_space AND r.collection = p_collections[i] AND r.id = p_ids[i];
                    o_status := 'c'; o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                v_head := v_head + 1;
                INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at)
                VALUES (v_space, p_change_ids[i], p_fingerprints[i], p_epoch, v_head, p_now);
                o_status := 'a'; o_seq := v_head; o_head := v_head;
                RETURN NEXT;
            END LOOP;
            IF v_head > v_start THEN
                UPDATE spaces SET head_seq = v_head WHERE space_id = v_space;
                PERFORM pg_notify('outpost_commits', p_space || ' ' || v_head);
            END IF;
        END
        $fn$;

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
        DROP FUNCTION IF EXISTS outpost_push(text, text, text, bigint, text[], bytea[], text[], text[],
                                             boolean[], bytea[], bigint[], bigint[], boolean[], boolean[]);

        -- Applies one push to one space, every change on its own and in order, and returns
        -- one row per change: o_status 'a' applied, 'r' replayed, 'u' change id reused,
        -- 'e' epoch mismatch, 'c' conflict (with the current record in cur_*); o_updated_at
        -- is the updatedAt of an applied or replayed version.
        --
        -- A re-offer (PROTOCOL.md section 4, added in 1.1) has p_lineage_epochs[i] and
        -- p_lineage_seqs[i] (the version it carries from an earlier history) and
        -- p_updated_ats[i] (that version's commit time); they are NULL for an edit. Over an
        -- existing state at its base it applies only when the state's lineage has the same
        -- epoch and a seq not after the re-offer's; it is stored with its own lineage and
        -- commit time. Any other write keeps the lineage of the state it replaces.
        --
        -- Seqs are allocated under the space row's lock (FOR UPDATE), which is held until
        -- the transaction ends: see PostgresSyncStore for why that makes a puller never
        -- skip a record. head_seq is stored in the same transaction, so a seq is never
        -- handed out twice, also after a crash; the idempotency row too. pg_notify is
        -- delivered to listeners when (and only if) the transaction commits.
        CREATE FUNCTION outpost_push(
            p_space text, p_epoch text, p_client text, p_now bigint,
            p_change_ids text[], p_fingerprints bytea[], p_collections text[], p_ids text[],
            p_deleted boolean[], p_data bytea[], p_client_times bigint[],
            p_base_seqs bigint[], p_base_ok boolean[], p_force boolean[],
            p_lineage_epochs text[], p_lineage_seqs bigint[], p_updated_ats bigint[])
        RETURNS TABLE(o_status text, o_seq bigint, o_epoch text, o_head bigint, o_updated_at bigint,
                      cur_seq bigint, cur_deleted boolean, cur_data bytea, cur_updated_at bigint,
                      cur_updated_by text, cur_client_time bigint, cur_lineage text)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_epoch text;
            v_space bigint;
            v_head bigint;
            v_start bigint;
            v_fp bytea;
            v_applied_epoch text;
            v_applied_seq bigint;
            v_applied_at bigint;
            v_lineage text;
            v_updated_at bigint;
            v_rows bigint;
            i integer;
        BEGIN
            SELECT m.value INTO v_epoch FROM meta m WHERE m.key = 'epoch';
            IF v_epoch IS DISTINCT FROM p_epoch THEN
                RAISE EXCEPTION 'the store''s epoch is %, this server serves %', v_epoch, p_epoch USING ERRCODE = 'OP001';
            END IF;
            SELECT s.space_id, s.head_seq INTO v_space, v_head FROM spaces s WHERE s.name = p_space FOR UPDATE;
            IF NOT FOUND THEN
                INSERT INTO spaces(name) VALUES (p_space) ON CONFLICT (name) DO NOTHING;
                SELECT s.space_id, s.head_seq INTO v_space, v_head FROM spaces s WHERE s.name = p_space FOR UPDATE;
            END IF;
            v_start := v_head;
            FOR i IN 1 .. coalesce(array_length(p_change_ids, 1), 0) LOOP
                o_status := NULL; o_seq := NULL; o_epoch := NULL; o_updated_at := NULL;
                cur_seq := NULL; cur_deleted := NULL; cur_data := NULL;
                cur_updated_at := NULL; cur_updated_by := NULL; cur_client_time := NULL; cur_lineage := NULL;
                -- 1. Idempotency: an applied change id answers with its original result.
                --    applied_at is the arrival time (the sweep needs it); a re-offer's
                --    updatedAt was its original commit time, which its fingerprint covers.
                SELECT a.fingerprint, a.epoch, a.seq, a.applied_at INTO v_fp, v_applied_epoch, v_applied_seq, v_applied_at
                  FROM applied_changes a WHERE a.space_id = v_space AND a.change_id = p_change_ids[i];
                IF FOUND THEN
                    IF v_fp = p_fingerprints[i] THEN
                        o_status := 'r'; o_seq := v_applied_seq; o_epoch := v_applied_epoch;
                        o_updated_at := coalesce(p_updated_ats[i], v_applied_at);
                    ELSE
                        o_status := 'u';
                    END IF;
                    o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                -- 2. A base version of another history cannot be judged.
                IF NOT p_force[i] AND NOT p_base_ok[i] THEN
                    o_status := 'e'; o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                IF v_head >= 9007199254740991 THEN
                    RAISE EXCEPTION 'space % has used every seq of this epoch', p_space USING ERRCODE = 'OP002';
                END IF;
                v_lineage := CASE WHEN p_lineage_epochs[i] IS NULL THEN NULL ELSE p_lineage_epochs[i] || '.' || p_lineage_seqs[i] END;
                v_updated_at := coalesce(p_updated_ats[i], p_now);
                -- 3. The write, guarded by the base check (and a re-offer's descent check)
                --    in the statement itself.
                IF p_force[i] THEN
                    INSERT INTO records AS r (space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage)
                    VALUES (v_space, p_collections[i], p_ids[i], v_head + 1, p_deleted[i], p_data[i], v_updated_at, p_client, p_client_times[i], v_lineage)
                    ON CONFLICT (space_id, collection, id) DO UPDATE SET
                        seq = excluded.seq, deleted = excluded.deleted, data = excluded.data,
                        updated_at = excluded.updated_at, updated_by = excluded.updated_by, client_time = excluded.client_time,
                        lineage = coalesce(excluded.lineage, r.lineage);
                ELSIF p_base_seqs[i] IS NULL THEN
                    INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage)
                    VALUES (v_space, p_collections[i], p_ids[i], v_head + 1, p_deleted[i], p_data[i], v_updated_at, p_client, p_client_times[i], v_lineage)
                    ON CONFLICT (space_id, collection, id) DO NOTHING;
                ELSE
                    UPDATE records r SET seq = v_head + 1, deleted = p_deleted[i], data = p_data[i],
                           updated_at = v_updated_at, updated_by = p_client, client_time = p_client_times[i],
                           lineage = coalesce(v_lineage, r.lineage)
                     WHERE r.space_id = v_space AND r.collection = p_collections[i] AND r.id = p_ids[i]
                       AND r.seq = p_base_seqs[i]
                       AND (p_lineage_epochs[i] IS NULL
                            OR (split_part(r.lineage, '.', 1) = p_lineage_epochs[i]
                                AND split_part(r.lineage, '.', 2)::bigint <= p_lineage_seqs[i]));
                END IF;
                GET DIAGNOSTICS v_rows = ROW_COUNT;
                IF v_rows = 0 THEN
                    SELECT r.seq, r.deleted, r.data, r.updated_at, r.updated_by, r.client_time, r.lineage
                      INTO cur_seq, cur_deleted, cur_data, cur_updated_at, cur_updated_by, cur_client_time, cur_lineage
                      FROM records r WHERE r.space_id = v_space AND r.collection = p_collections[i] AND r.id = p_ids[i];
                    o_status := 'c'; o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                v_head := v_head + 1;
                INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at)
                VALUES (v_space, p_change_ids[i], p_fingerprints[i], p_epoch, v_head, p_now);
                o_status := 'a'; o_seq := v_head; o_head := v_head; o_updated_at := v_updated_at;
                RETURN NEXT;
            END LOOP;
            IF v_head > v_start THEN
                UPDATE spaces SET head_seq = v_head WHERE space_id = v_space;
                PERFORM pg_notify('outpost_commits', p_space || ' ' || v_head);
            END IF;
        END
        $fn$;
INSERT INTO schema_migrations(version) VALUES (2);
COMMIT;
BEGIN;
        ALTER TABLE records ADD COLUMN IF NOT EXISTS same_as text;
        UPDATE records SET same_as = lineage WHERE lineage IS NOT NULL;
        DROP FUNCTION IF EXISTS outpost_push(text, text, text, bigint, text[], bytea[], text[], text[],
                                             boolean[], bytea[], bigint[], bigint[], boolean[], boolean[],
                                             text[], bigint[], bigint[]);

        -- Applies one push to one space, every change on its own and in order, and returns
        -- one row per change: o_status 'a' applied, 'r' replayed, 'u' change id reused,
        -- 'e' epoch mismatch, 'c' conflict (with the current record in cur_*); o_updated_at
        -- is the updatedAt of an applied or replayed version.
        --
        -- A re-offer (PROTOCOL.md section 4, added in 1.1) has p_lineage_epochs[i] and
        -- p_lineage_seqs[i] (the version it carries from an earlier history) and
        -- p_updated_ats[i] (that version's commit time); they are NULL for an edit. Over an
        -- existing state at its base it applies only when the state's same_as (the
        -- earlier-history version it is, with nothing written since) has the same epoch and
        -- a seq not after the re-offer's; it is stored with its version as both lineage and
        -- same_as, and with its commit time. Any other write keeps the lineage of the state
        -- it replaces and clears same_as: it wrote what that earlier state never held.
        --
        -- Seqs are allocated under the space row's lock (FOR UPDATE), which is held until
        -- the transaction ends: see PostgresSyncStore for why that makes a puller never
        -- skip a record. head_seq is stored in the same transaction, so a seq is never
        -- handed out twice, also after a crash; the idempotency row too. pg_notify is
        -- delivered to listeners when (and only if) the transaction commits.
        CREATE FUNCTION outpost_push(
            p_space text, p_epoch text, p_client text, p_now bigint,
            p_change_ids text[], p_fingerprints bytea[], p_collections text[], p_ids text[],
            p_deleted boolean[], p_data bytea[], p_client_times bigint[],
            p_base_seqs bigint[], p_base_ok boolean[], p_force boolean[],
            p_lineage_epochs text[], p_lineage_seqs bigint[], p_updated_ats bigint[])
        RETURNS TABLE(o_status text, o_seq bigint, o_epoch text, o_head bigint, o_updated_at bigint,
                      cur_seq bigint, cur_deleted boolean, cur_data bytea, cur_updated_at bigint,
                      cur_updated_by text, cur_client_time bigint, cur_lineage text, cur_same_as text)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_epoch text;
            v_space bigint;
            v_head bigint;
            v_start bigint;
            v_fp bytea;
            v_applied_epoch text;
            v_applied_seq bigint;
            v_applied_at bigint;
            v_lineage text;
            v_updated_at bigint;
            v_rows bigint;
            i integer;
        BEGIN
            SELECT m.value INTO v_epoch FROM meta m WHERE m.key = 'epoch';
            IF v_epoch IS DISTINCT FROM p_epoch THEN
                RAISE EXCEPTION 'the store''s epoch is %, this server serves %', v_epoch, p_epoch USING ERRCODE = 'OP001';
            END IF;
            SELECT s.space_id, s.head_seq INTO v_space, v_head FROM spaces s WHERE s.name = p_space FOR UPDATE;
            IF NOT FOUND THEN
                INSERT INTO spaces(name) VALUES (p_space) ON CONFLICT (name) DO NOTHING;
                SELECT s.space_id, s.head_seq INTO v_space, v_head FROM spaces s WHERE s.name = p_space FOR UPDATE;
            END IF;
            v_start := v_head;
            FOR i IN 1 .. coalesce(array_length(p_change_ids, 1), 0) LOOP
                o_status := NULL; o_seq := NULL; o_epoch := NULL; o_updated_at := NULL;
                cur_seq := NULL; cur_deleted := NULL; cur_data := NULL;
                cur_updated_at := NULL; cur_updated_by := NULL; cur_client_time := NULL; cur_lineage := NULL; cur_same_as := NULL;
                -- 1. Idempotency: an applied change id answers with its original result.
                --    applied_at is the arrival time (the sweep needs it); a re-offer's
                --    updatedAt was its original commit time, which its fingerprint covers.
                SELECT a.fingerprint, a.epoch, a.seq, a.applied_at INTO v_fp, v_applied_epoch, v_applied_seq, v_applied_at
                  FROM applied_changes a WHERE a.space_id = v_space AND a.change_id = p_change_ids[i];
                IF FOUND THEN
                    IF v_fp = p_fingerprints[i] THEN
                        o_status := 'r'; o_seq := v_applied_seq; o_epoch := v_applied_epoch;
                        o_updated_at := coalesce(p_updated_ats[i], v_applied_at);
                    ELSE
                        o_status := 'u';
                    END IF;
                    o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                -- 2. A base version of another history cannot be judged.
                IF NOT p_force[i] AND NOT p_base_ok[i] THEN
                    o_status := 'e'; o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                IF v_head >= 9007199254740991 THEN
                    RAISE EXCEPTION 'space % has used every seq of this epoch', p_space USING ERRCODE = 'OP002';
                END IF;
                v_lineage := CASE WHEN p_lineage_epochs[i] IS NULL THEN NULL ELSE p_lineage_epochs[i] || '.' || p_lineage_seqs[i] END;
                v_updated_at := coalesce(p_updated_ats[i], p_now);
                -- 3. The write, guarded by the base check (and a re-offer's descent check)
                --    in the statement itself.
                IF p_force[i] THEN
                    INSERT INTO records AS r (space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as)
                    VALUES (v_space, p_collections[i], p_ids[i], v_head + 1, p_deleted[i], p_data[i], v_updated_at, p_client, p_client_times[i], v_lineage, v_lineage)
                    ON CONFLICT (space_id, collection, id) DO UPDATE SET
                        seq = excluded.seq, deleted = excluded.deleted, data = excluded.data,
                        updated_at = excluded.updated_at, updated_by = excluded.updated_by, client_time = excluded.client_time,
                        lineage = coalesce(excluded.lineage, r.lineage), same_as = excluded.same_as;
                ELSIF p_base_seqs[i] IS NULL THEN
                    INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time, lineage, same_as)
                    VALUES (v_space, p_collections[i], p_ids[i], v_head + 1, p_deleted[i], p_data[i], v_updated_at, p_client, p_client_times[i], v_lineage, v_lineage)
                    ON CONFLICT (space_id, collection, id) DO NOTHING;
                ELSE
                    UPDATE records r SET seq = v_head + 1, deleted = p_deleted[i], data = p_data[i],
                           updated_at = v_updated_at, updated_by = p_client, client_time = p_client_times[i],
                           lineage = coalesce(v_lineage, r.lineage), same_as = v_lineage
                     WHERE r.space_id = v_space AND r.collection = p_collections[i] AND r.id = p_ids[i]
                       AND r.seq = p_base_seqs[i]
                       AND (p_lineage_epochs[i] IS NULL
                            OR (split_part(r.same_as, '.', 1) = p_lineage_epochs[i]
                                AND split_part(r.same_as, '.', 2)::bigint <= p_lineage_seqs[i]));
                END IF;
                GET DIAGNOSTICS v_rows = ROW_COUNT;
                IF v_rows = 0 THEN
                    SELECT r.seq, r.deleted, r.data, r.updated_at, r.updated_by, r.client_time, r.lineage, r.same_as
                      INTO cur_seq, cur_deleted, cur_data, cur_updated_at, cur_updated_by, cur_client_time, cur_lineage, cur_same_as
                      FROM records r WHERE r.space_id = v_space AND r.collection = p_collections[i] AND r.id = p_ids[i];
                    o_status := 'c'; o_head := v_head;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                v_head := v_head + 1;
                INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at)
                VALUES (v_space, p_change_ids[i], p_fingerprints[i], p_epoch, v_head, p_now);
                o_status := 'a'; o_seq := v_head; o_head := v_head; o_updated_at := v_updated_at;
                RETURN NEXT;
            END LOOP;
            IF v_head > v_start THEN
                UPDATE spaces SET head_seq = v_head WHERE space_id = v_space;
                PERFORM pg_notify('outpost_commits', p_space || ' ' || v_head);
            END IF;
        END
        $fn$;
INSERT INTO schema_migrations(version) VALUES (3);
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
