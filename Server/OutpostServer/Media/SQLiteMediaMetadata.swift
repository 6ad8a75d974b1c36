import Foundation
import OutpostCore
import OutpostSQLite

/// Media metadata in the server's SQLite file: the `media`, `uploads`, `upload_chunks` and
/// `tus_uploads` tables (docs/media.md), kept by the rules of `SQLMediaMetadata` on
/// `SQLiteSession`s.
///
/// The sync store's writer is another connection on the same file: WAL and the busy
/// timeout settle the rare overlap. One process owns the file (`DataDirectory`'s lock),
/// so the upload locks of `MediaService` alone keep chunk writes and finalize apart.
enum SQLiteMediaMetadata {
    /// The newest `meta.media_schema_version`, the number servers from before the named list
    /// of migrations read: "media 1" and "media 2" write it.
    static let schemaVersion = 2

    /// Opens the media tables of the file at `path` (creating them when absent). Publishing
    /// commits with `publishSynchronous` (FULL by default), receipts with NORMAL.
    static func open(databasePath path: String, publishSynchronous: Connection.Synchronous) throws -> SQLMediaMetadata {
        let setup = try SQLiteSession(path: path, durableSynchronous: publishSynchronous)
        defer { setup.close() }
        try migrate(setup.db)
        return try SQLMediaMetadata(
            name: "outpost", largestOpenChunkSize: try SQLMediaMetadata.largestOpenChunkSize(setup),
            openWriter: { try SQLiteSession(path: path, durableSynchronous: publishSynchronous) },
            openReader: { try SQLiteSession(path: path, flags: [.readOnly], durableSynchronous: publishSynchronous) },
            locks: OneProcessUploadLocks())
    }

    // MARK: Schema

    /// Creates or upgrades the file's schema, the media tables with the rest
    /// (`SQLiteSchema`).
    static func migrate(_ db: Connection) throws {
        try SQLiteSyncStore.migrate(db)
    }

    /// The media tables' steps from before the named list, in `SQLiteSchema`'s list.
    static let migrations: [Migration] = [
        Migration(name: "media 1: media, uploads, upload_chunks", legacy: ("media", 1), sql: """
            CREATE TABLE media(
                space TEXT NOT NULL,
                media_id TEXT NOT NULL,
                size INTEGER NOT NULL,
                content_type TEXT NOT NULL,
                filename TEXT,
                created_at INTEGER NOT NULL,
                PRIMARY KEY(space, media_id)) WITHOUT ROWID;
            CREATE TABLE uploads(
                upload_id TEXT PRIMARY KEY,
                space TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                size INTEGER NOT NULL,
                content_type TEXT NOT NULL,
                filename TEXT,
                chunk_size INTEGER NOT NULL,
                chunk_count INTEGER NOT NULL,
                state TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL) WITHOUT ROWID;
            CREATE INDEX uploads_file ON uploads(space, sha256, size) WHERE state = 'open';
            CREATE INDEX uploads_expiry ON uploads(expires_at);
            CREATE TABLE upload_chunks(
                upload_id TEXT NOT NULL,
                idx INTEGER NOT NULL,
                sha256 BLOB NOT NULL,
                PRIMARY KEY(upload_id, idx)) WITHOUT ROWID;
            INSERT OR REPLACE INTO meta(key, value) VALUES ('media_schema_version', '1');
            """),
        Migration(name: "media 2: tus_uploads", legacy: ("media", 2), sql: """
            CREATE TABLE tus_uploads(
                upload_id TEXT PRIMARY KEY,
                space TEXT NOT NULL,
                length INTEGER NOT NULL,
                upload_offset INTEGER NOT NULL,
                metadata TEXT NOT NULL,
                content_type TEXT NOT NULL,
                filename TEXT,
                media_id TEXT,
                state TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL) WITHOUT ROWID;
            CREATE INDEX tus_uploads_expiry ON tus_uploads(expires_at);
            INSERT OR REPLACE INTO meta(key, value) VALUES ('media_schema_version', '2');
            """),
    ]
}
