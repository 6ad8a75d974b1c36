#!/usr/bin/env python3
"""Writes the server's database fixtures of every schema state `main` has shipped.

Each fixture is made from the DDL of the release that shipped the state, read from git at
that commit (not from today's code): the SQLite steps of its `migrate` and its media
metadata's, and the PostgreSQL migration texts as that commit ran them (migrations 1 to 3
with their push function, as first released). Then a server's writes of that time are
played as SQL: a history begun in epoch E0, rotated to E1 (with the lineage the rotation
of that release gave), writes on both sides of the rotation, a tombstone, change ids, and
one row in each table the state has (departures, view index, telemetry, webhooks, media,
uploads, tus uploads). SchemaMigrationTests opens every fixture with today's server.

Run from the repository's root with its history at hand:
    python3 Tests/server-schemas/make-fixtures.py
It rewrites Tests/server-schemas/sqlite-*.sqlite and postgres-*.sql.
"""
import hashlib
import os
import re
import sqlite3
import subprocess

OUT = os.path.dirname(os.path.abspath(__file__))

# (name, sync version, media version, commit): every schema state of main's first-parent
# history, with the commit that first shipped it.
SQLITE_STATES = [
    ("s1", 1, 0, "bb4ba7719d2c61a3ec44d363ae5ade6acd13a538"),
    ("s1-m1", 1, 1, "127c832a5134c522c7079305c86bc3ba15bdbecd"),
    ("s2-m1", 2, 1, "9f8e346236f76cb0f35038bcad72dcb86bbd2f03"),
    ("s3-m1", 3, 1, "736543fe063e956b6e547fa89e27861509ca4bc3"),
    ("s4-m1", 4, 1, "fe79d57b5c1651fde75a6236ec6928b5babd8324"),
    ("s5-m1", 5, 1, "4d7a4b00598842f6fd1c1c1fbddf353e1cf1cdca"),
    ("s6-m1", 6, 1, "39bfb35eae20f4be75e6b44de6676cc69e1e2f9f"),
    ("s7-m1", 7, 1, "bf3c543bc04c8f2a80bb6187f5f1bb0a075560de"),
    ("s7-m2", 7, 2, "2d78e6cee43c3cdee57e70d2d97c903869891929"),
    ("s8-m2", 8, 2, "47459819f3103b73f67ffe18a39578d6d03103af"),
    ("s11-m2", 11, 2, "354d535f4727c863d3acce3fcd60019b03a1ee68"),
]
POSTGRES_STATES = [
    ("p1", 1, 1, "4f0443670418a5e7e058ffd6cc031bc8ac9efdea"),
    ("p2", 2, 1, "9f8e346236f76cb0f35038bcad72dcb86bbd2f03"),
    ("p3", 3, 1, "736543fe063e956b6e547fa89e27861509ca4bc3"),
    ("p4", 4, 1, "1c57f54b2b2bcc43e89035c2f1df271158b8c6eb"),
    ("p5", 5, 1, "fe79d57b5c1651fde75a6236ec6928b5babd8324"),
    ("p6", 6, 1, "4d7a4b00598842f6fd1c1c1fbddf353e1cf1cdca"),
    ("p7", 7, 1, "39bfb35eae20f4be75e6b44de6676cc69e1e2f9f"),
    ("p8", 8, 1, "bf3c543bc04c8f2a80bb6187f5f1bb0a075560de"),
    ("p8-m2", 8, 2, "2d78e6cee43c3cdee57e70d2d97c903869891929"),
    ("p9-m2", 9, 2, "47459819f3103b73f67ffe18a39578d6d03103af"),
    ("p12-m2", 12, 2, "354d535f4727c863d3acce3fcd60019b03a1ee68"),
]

E0 = "01JE0000000000000000000000"
E1 = "01JE1000000000000000000000"


def git_file(commit, suffix):
    names = subprocess.check_output(["git", "ls-tree", "-r", "--name-only", commit], text=True).split()
    matches = [n for n in names if n.endswith(suffix)]
    return subprocess.check_output(["git", "show", f"{commit}:{matches[0]}"], text=True) if matches else None


def sqlite_steps(source):
    """The statements of each `if version < N` block of an SQLite `migrate`, in order."""
    body = source[source.index("static func migrate(_ db: Connection)"):]
    body = body[:body.index("\n    }\n")]
    parts = re.split(r"\n        if version < (\d+) \{", body)
    steps = {}
    for i in range(1, len(parts), 2):
        literals = re.findall(r'db\.(?:execute|run)\((?:"""\n(.*?)\n\s*"""|"((?:[^"\\]|\\.)*)")', parts[i + 1], re.S)
        steps[int(parts[i])] = [a or b for a, b in literals]
    return steps


# The three steps of 354d535 that are Swift, as they ran on a new file (no epoch yet, so
# no retired epochs to import; `addColumn` adds each column, which a new file lacks).
SQLITE_SWIFT_STEPS = {
    9: ["CREATE TABLE IF NOT EXISTS epoch_history(epoch TEXT PRIMARY KEY, ended_at INTEGER NOT NULL) WITHOUT ROWID",
        "DELETE FROM meta WHERE key = 'retired_epochs'",
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '9')"],
    10: ["ALTER TABLE records ADD COLUMN subject TEXT", "ALTER TABLE webhook_outbox ADD COLUMN subject TEXT",
         "ALTER TABLE devices ADD COLUMN subject TEXT", "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '10')"],
    11: ["ALTER TABLE spaces ADD COLUMN record_bytes INTEGER NOT NULL DEFAULT 0",
         "UPDATE spaces SET record_bytes = (SELECT coalesce(sum(length(CAST(collection AS BLOB)) + length(CAST(id AS BLOB)) + coalesce(length(data), 0)), 0) "
         "FROM records r WHERE r.space_id = spaces.space_id)",
         "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '11')"],
}


def fingerprint(change_id):
    return hashlib.sha256(change_id.encode()).digest()


def writes(sync, media, pg):
    """The rows a server of that state wrote, as statements of its dialect."""
    def blob(b):
        return ("'\\x" + b.hex() + "'::bytea") if pg else ("X'" + b.hex() + "'")

    def data(text):
        return blob(text.encode())

    true, false = ("true", "false") if pg else ("1", "0")
    lineage = sync >= 2
    same_as = sync >= 3
    out = [f"INSERT INTO meta(key, value) VALUES ('epoch', '{E1}')"]
    if sync >= (12 if pg else 11):
        out.append("INSERT INTO meta(key, value) VALUES ('history_began_at', '1')")
        out.append(f"INSERT INTO epoch_history(epoch, ended_at) VALUES ('{E0}', 25)")
    else:
        out.append(f"INSERT INTO meta(key, value) VALUES ('retired_epochs', '{E0}')")
    record_bytes = (sync >= (12 if pg else 11))
    out.append("INSERT INTO spaces(name, head_seq) VALUES ('sp', 5), ('other', 1)")
    # sp: a (seq 1, E0), b (seq 2 in E0, then seq 3 in E1), c (created seq 4, deleted seq 5);
    # other: z (seq 1, E1). The rotation gave a and b their E0 version as lineage (and, from
    # sync 3 on, as same_as); b's write in E1 kept its lineage and cleared same_as.
    rows = [
        ("sp", "todos", "a", 1, False, '{"t":"x"}', 10, "p", 5, f"{E0}.1", f"{E0}.1"),
        ("sp", "todos", "b", 3, False, '{"t":"y"}', 30, "q", None, f"{E0}.2", None),
        ("sp", "todos", "c", 5, True, None, 50, "q", None, None, None),
        ("other", "notes", "z", 1, False, '{"n":1}', 60, "p", None, None, None),
    ]
    for space, collection, rid, seq, deleted, d, at, by, ct, lin, same in rows:
        cols = ["space_id", "collection", "id", "seq", "deleted", "data", "updated_at", "updated_by", "client_time"]
        vals = [f"(SELECT space_id FROM spaces WHERE name = '{space}')", f"'{collection}'", f"'{rid}'", str(seq),
                true if deleted else false, "NULL" if d is None else data(d), str(at), f"'{by}'", "NULL" if ct is None else str(ct)]
        if lineage:
            cols.append("lineage")
            vals.append("NULL" if lin is None else f"'{lin}'")
        if same_as:
            cols.append("same_as")
            vals.append("NULL" if same is None else f"'{same}'")
        if record_bytes:
            cols.append("subject")
            vals.append(f"'sub-{by}'")
        out.append(f"INSERT INTO records({', '.join(cols)}) VALUES ({', '.join(vals)})")
    if record_bytes:
        out.append("UPDATE spaces SET record_bytes = (SELECT coalesce(sum(" +
                   ("octet_length(collection) + octet_length(id) + coalesce(octet_length(data), 0)" if pg else
                    "length(CAST(collection AS BLOB)) + length(CAST(id AS BLOB)) + coalesce(length(data), 0)") +
                   "), 0) FROM records r WHERE r.space_id = spaces.space_id)")
    for space, change, epoch, seq, at in [("sp", "c-a", E0, 1, 10), ("sp", "c-b1", E0, 2, 20), ("sp", "c-b2", E1, 3, 30),
                                          ("sp", "c-c1", E1, 4, 40), ("sp", "c-c2", E1, 5, 50), ("other", "c-z", E1, 1, 60)]:
        out.append("INSERT INTO applied_changes(space_id, change_id, fingerprint, epoch, seq, applied_at) VALUES "
                   f"((SELECT space_id FROM spaces WHERE name = '{space}'), '{change}', {blob(fingerprint(change))}, '{epoch}', {seq}, {at})")
    if sync >= (5 if pg else 4):
        old = data('{"t":"old"}')
        out.append("INSERT INTO departures(space_id, collection, id, seq, data) VALUES "
                   f"((SELECT space_id FROM spaces WHERE name = 'sp'), 'todos', 'b', 3, {old})")
    if sync >= (6 if pg else 5):
        for space, seq, collection in [("sp", 1, "todos"), ("sp", 3, "todos"), ("other", 1, "notes")]:
            out.append("INSERT INTO view_index(space_id, scope, path, key, seq, collection) VALUES "
                       f"((SELECT space_id FROM spaces WHERE name = '{space}'), '', '', '', {seq}, '{collection}')")
    if sync >= (8 if pg else 7):
        subject = ", subject" if record_bytes else ""
        subject_value = ", 'sub-p'" if record_bytes else ""
        out.append(f"INSERT INTO devices(space, client_id, first_seen, last_seen, last_sync, sdk_version, pending, last_error, clock_offset, reports{subject}) "
                   f"VALUES ('sp', 'dev1', 100, 200, 150, '1.0.0', 0, NULL, NULL, 2{subject_value})")
        out.append("INSERT INTO device_syncs(space, client_id, started_at, received_at, entry) VALUES ('sp', 'dev1', 150, 200, '{\"ok\":true}')")
    if sync >= (9 if pg else 8):
        subject = ", subject" if record_bytes else ""
        subject_value = ", 'sub-q'" if record_bytes else ""
        out.append("INSERT INTO webhook_outbox(space_id, epoch, seq, collection, record_id, deleted, data, updated_at, updated_by, client_time, "
                   f"lineage, same_as, committed_at{subject}) VALUES ((SELECT space_id FROM spaces WHERE name = 'sp'), '{E1}', 5, 'todos', 'c', "
                   f"{true}, NULL, 50, 'q', NULL, NULL, NULL, 50{subject_value})")
        out.append("INSERT INTO webhooks(webhook, name, start_id, seen_at) VALUES ('wh1', 'hook', 1, 100)")
        out.append("INSERT INTO webhook_cursors(webhook, space_id, delivered_id) VALUES ('wh1', (SELECT space_id FROM spaces WHERE name = 'sp'), 0)")
    if media >= 1:
        sha = hashlib.sha256(b"media").hexdigest()
        out.append(f"INSERT INTO media(space, media_id, size, content_type, filename, created_at) VALUES ('sp', '{sha}', 5, 'text/plain', 'a.txt', 100)")
        out.append("INSERT INTO uploads(upload_id, space, sha256, size, content_type, filename, chunk_size, chunk_count, state, created_at, expires_at) "
                   f"VALUES ('{'a' * 32}', 'sp', '{hashlib.sha256(b'file').hexdigest()}', 8192, 'image/jpeg', NULL, 4096, 2, 'open', 1, 9999999999999)")
        out.append(f"INSERT INTO upload_chunks(upload_id, idx, sha256) VALUES ('{'a' * 32}', 0, {blob(hashlib.sha256(bytes([1])).digest())})")
    if media >= 2:
        out.append("INSERT INTO tus_uploads(upload_id, space, length, upload_offset, metadata, content_type, filename, media_id, state, created_at, expires_at) "
                   f"VALUES ('{'b' * 32}', 'sp', 10, 4, 'k dg==', 'text/plain', 'f.txt', NULL, 'open', 5, 9999999999999)")
    return out


def make_sqlite(name, sync, media, commit):
    path = os.path.join(OUT, f"sqlite-{name}.sqlite")
    if os.path.exists(path):
        os.remove(path)
    steps = sqlite_steps(git_file(commit, "Storage/SQLiteSyncStore.swift") or git_file(commit, "SQLiteSyncStore.swift"))
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    # The store first, as `SQLiteSyncStore.init` ran `migrate` then made the epoch.
    db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
    # Each step's statements as one script (the transactions a step ran in change nothing
    # the file keeps).
    for version in range(1, sync + 1):
        statements = SQLITE_SWIFT_STEPS[version] if commit.startswith("354d535") and version in SQLITE_SWIFT_STEPS else steps[version]
        db.executescript(";\n".join(statements) + ";")
    if media:
        source = git_file(commit, "Media/SQLiteMediaMetadata.swift") or git_file(commit, "Media/MediaStore.swift")
        media_steps = sqlite_steps(source)
        for version in range(1, media + 1):
            db.executescript(";\n".join(media_steps[version]) + ";")
    db.executescript(";\n".join(writes(sync, media, pg=False)) + ";")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def postgres_migrations(source):
    body = source[source.index("static let migrations"):]
    return [m.group(1) for m in re.finditer(r'#"""\n(.*?)\n\s*"""#', body, re.S)]


def make_postgres(name, sync, media, commit):
    texts = postgres_migrations(git_file(commit, "Storage/PostgresSchema.swift"))
    out = [f"-- The PostgreSQL schema of main at {commit[:7]} (schema_migrations {sync}, media {media}),",
           "-- its migrations as that commit ran them, then a server's writes of that time.",
           "SET client_min_messages = warning;",
           "CREATE TABLE IF NOT EXISTS schema_migrations(version bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());"]
    for version in range(1, sync + 1):
        out += ["BEGIN;", texts[version - 1].rstrip(), f"INSERT INTO schema_migrations(version) VALUES ({version});", "COMMIT;"]
    if media >= 2:
        source = git_file(commit, "Media/PostgresMediaMetadata.swift")
        tus = re.search(r'if version < 2 \{\s*try db\.execute\("""\n(.*?)\n\s*"""\)', source, re.S).group(1)
        out += ["BEGIN;", tus.rstrip(), "INSERT INTO meta(key, value) VALUES ('media_schema_version', '2');", "COMMIT;"]
    out += ["BEGIN;"] + [s + ";" for s in writes(sync, media, pg=True)] + ["COMMIT;"]
    with open(os.path.join(OUT, f"postgres-{name}.sql"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    for state in SQLITE_STATES:
        make_sqlite(*state)
    for state in POSTGRES_STATES:
        make_postgres(*state)
