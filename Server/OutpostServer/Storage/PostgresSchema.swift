import Foundation
import OutpostCore
import OutpostPostgres

/// The PostgreSQL schema of Outpost: versioned migrations applied at start under an
/// advisory lock, the epoch in `meta`, and `rotate-epoch`.
///
/// Every instance runs `migrate` when it starts. `pg_advisory_lock(lockKey)` makes
/// instances that start together take turns: the first applies what is missing, each
/// migration in its own transaction together with its row in `schema_migrations`, and the
/// others then find nothing left to do. An instance older than the database (a version it
/// does not know) refuses to start rather than write a schema it does not understand.
public enum PostgresSchema {
    /// The key of the session advisory lock held while migrating (ASCII "outpost" + 1).
    public static let lockKey: Int64 = 0x6F75_7470_6F73_7401

    /// The newest migration this server knows.
    public static var latestVersion: Int { migrations.count }

    /// Migrations in order; migration `n` (1-based) brings the schema to version `n`.
    /// Never edit one that has shipped: add another.
    static let migrations: [String] = [
        // 1: sync tables, the push function, media metadata.
        #"""
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
        """#,
        // 2: protocol 1.1, a re-offer keeps its history: records.lineage, and the push
        // function again with re-offers and the original time of a replay.
        #"""
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
        """#,
        // 3: protocol 1.1, a re-offer is admitted by what the state is, not what it descends
        // from: records.same_as, and the push function again, judging by it and returning it
        // with a conflict's current state. A row of migration 2 does not tell whether its
        // lineage was kept through a write since, so its lineage is copied: this errs toward
        // admitting a re-offer, as migration 2 did. Migration 2 existed only between two
        // commits of the development of 1.1, so no deployed database holds such rows.
        #"""
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
        """#,
    ]

    /// Brings the database up to `latestVersion` (under the advisory lock) and returns
    /// its epoch, creating one for a new database.
    public static func migrate(_ db: PostgresConnection) throws -> Epoch {
        try db.query("SELECT pg_advisory_lock($1)", [.int(lockKey)])
        defer { _ = try? db.query("SELECT pg_advisory_unlock($1)", [.int(lockKey)]) }
        try db.execute("""
            SET client_min_messages = warning;
            CREATE TABLE IF NOT EXISTS schema_migrations(
                version bigint PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now())
            """)
        let current = Int(try db.query("SELECT coalesce(max(version), 0) FROM schema_migrations").int64(0, 0))
        guard current <= latestVersion else {
            throw StoreError("the database's schema version \(current) is newer than this server's (\(latestVersion)); upgrade the server")
        }
        for version in (current + 1)..<(latestVersion + 1) {
            try db.transaction {
                try db.execute(migrations[version - 1])
                try db.run("INSERT INTO schema_migrations(version) VALUES ($1)", [.int(Int64(version))])
            }
            Log.info("applied PostgreSQL migration", ["version": String(version)])
        }
        return try db.transaction {
            if let text = try currentEpochText(db) {
                guard let epoch = Epoch(text) else { throw StoreError("the store's epoch \"\(text)\" is not valid") }
                return epoch
            }
            var rng = SystemRandomNumberGenerator()
            let epoch = Epoch.generate(nowMs: Int64(Date().timeIntervalSince1970 * 1000), after: nil, using: &rng)
            try db.run("INSERT INTO meta(key, value) VALUES ('epoch', $1)", [.text(epoch.rawValue)])
            return epoch
        }
    }

    /// The schema version of the database (0 before the first migration).
    public static func version(_ db: PostgresConnection) throws -> Int {
        let exists = try db.query("SELECT to_regclass('schema_migrations') IS NOT NULL").bool(0, 0)
        guard exists else { return 0 }
        return Int(try db.query("SELECT coalesce(max(version), 0) FROM schema_migrations").int64(0, 0))
    }

    static func currentEpochText(_ db: PostgresConnection) throws -> String? {
        let rows = try db.query("SELECT value FROM meta WHERE key = 'epoch'")
        return rows.count == 0 ? nil : rows.text(0, 0)
    }

    /// Gives the database at `url` a new epoch, later than its current one, keeps the last
    /// 32 retired epochs, gives every record its lineage and sameAs in the epoch that ends, and tells
    /// running instances (`NOTIFY outpost_epoch`): they stop
    /// taking writes and shut down, to be started again on the new epoch.
    public static func rotateEpoch(url: String) throws -> Epoch {
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        _ = try migrate(db)
        return try db.transaction {
            // The row lock makes two rotations take turns; pushes read the epoch in their
            // own transactions and fail once it changed.
            let rows = try db.query("SELECT value FROM meta WHERE key = 'epoch' FOR UPDATE")
            let previous = rows.count == 0 ? nil : Epoch(rows.text(0, 0))
            var rng = SystemRandomNumberGenerator()
            let epoch = Epoch.generate(nowMs: Int64(Date().timeIntervalSince1970 * 1000), after: previous, using: &rng)
            try db.run("INSERT INTO meta(key, value) VALUES ('epoch', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       [.text(epoch.rawValue)])
            if let previous {
                let retiredRows = try db.query("SELECT value FROM meta WHERE key = 'retired_epochs'")
                let retired = (retiredRows.count == 0 ? "" : retiredRows.text(0, 0)).split(separator: ",").map(String.init) + [previous.rawValue]
                try db.run("INSERT INTO meta(key, value) VALUES ('retired_epochs', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                           [.text(retired.suffix(32).joined(separator: ","))])
                // Every record's own version in the history that ends (seqs are kept), as
                // both what it descends from and what it is, since nothing is written on it
                // yet: re-offers of that history are judged against same_as (PROTOCOL.md
                // section 4, added in 1.1). It replaces older values.
                try db.run("UPDATE records SET lineage = $1 || '.' || seq, same_as = $1 || '.' || seq", [.text(previous.rawValue)])
            }
            try db.query("SELECT pg_notify('outpost_epoch', $1)", [.text(epoch.rawValue)])
            return epoch
        }
    }
}
