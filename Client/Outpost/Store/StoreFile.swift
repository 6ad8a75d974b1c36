import Foundation
import OutpostCore
import OutpostSQLite

// Opening a store's file, and the store's life around it on a phone (docs/client.md, "An
// app's life on iOS"): suspension, which releases the file and its lock while the app is
// suspended; readers in other processes; and a file restored onto another device.

/// A store's file and how it was opened.
struct StoreFile: Sendable, Hashable {
    let path: String
    /// Opened by `OutpostStore.reader`: no lock, nothing written.
    let readOnly: Bool

    /// The device marker beside the file (`<file>-device`), kept out of backups.
    var markerPath: String { path + "-device" }
}

extension OutpostStore {
    /// What opening the file found.
    struct OpenedFile {
        let database: LocalDatabase
        let clientId: String
        let restoredFrom: String?
    }

    /// Opens the database of `file` (in memory when nil) and checks it belongs to the
    /// configured space. A file opened for writing gets its client id on first open, is
    /// bound to this device (`bindToDevice`), and has its uploads' paths rebased on
    /// `configuration.baseDirectory`.
    static func open(_ file: StoreFile?, configuration: Configuration, rng: inout Randomness) throws -> OpenedFile {
        let database = try mappingSQLiteErrors {
            if let file, file.readOnly { return try LocalDatabase(readingAt: file.path) }
            return try LocalDatabase(path: file?.path ?? ":memory:", durability: configuration.durability,
                                     protection: file == nil ? nil : configuration.fileProtection)
        }
        database.baseDirectory = configuration.baseDirectory.map { MediaFiles.absolutePath($0.path) }
        do {
            if let stored = try database.meta(.space), stored != configuration.space {
                throw OutpostError.spaceMismatch(stored: stored, configured: configuration.space)
            }
            if let file, file.readOnly {
                guard let clientId = try database.meta(.clientId) else { throw OutpostError.storage("\(file.path) is not a store file") }
                return OpenedFile(database: database, clientId: clientId, restoredFrom: try database.meta(.restoredFrom))
            }
            try database.setMeta(.space, configuration.space)
            var clientId: String
            if let existing = try database.meta(.clientId) {
                clientId = existing
            } else {
                clientId = configuration.clientId ?? Identifiers.clientID(using: &rng)
                try database.setMeta(.clientId, clientId)
            }
            if let file {
                if try bindToDevice(file, database, protection: configuration.fileProtection) {
                    // Restored from another device's backup: that device may still be
                    // syncing under the old client id, so this copy takes a new one.
                    // Its queued edits stay queued and go with its next sync under the
                    // same changeIds (the server answers those it applied as replayed).
                    let old = clientId
                    clientId = Identifiers.clientID(using: &rng)
                    try database.db.transaction {
                        try database.setMeta(.clientId, clientId)
                        try database.setMeta(.restoredFrom, old)
                    }
                }
                try database.rebaseUploads()
            }
            // Opening is a cheap moment to drop the conflict journal's entries past their
            // retention (a bounded batch).
            try database.pruneConflictJournal(before: configuration.conflictCutoff(now: configuration.clock().milliseconds))
            // The query indexes the app declares now (created, or dropped, only when the
            // declarations changed since the last open).
            if configuration.reconcilesQueryIndexes {
                try database.reconcileQueryIndexes(configuration.collections)
            } else {
                database.searchIndexes = try database.queryIndexes().filter(\.isSearch)
            }
            return OpenedFile(database: database, clientId: clientId, restoredFrom: try database.meta(.restoredFrom))
        } catch let e as SQLiteError {
            database.close()
            throw OutpostError.storage(e.description)
        } catch {
            database.close()
            throw error
        }
    }

    /// Binds the file to this device and tells whether it came from another one.
    ///
    /// The file keeps a random marker (meta `device_marker`) and so does a small file
    /// beside it (`<file>-device`) that backups leave out (`Platform.excludeFromBackup`;
    /// on Apple platforms, iCloud and computer backups and the migration to a new device
    /// skip it). Equal markers: the file never left this device. A file without a marker
    /// (new, or made before markers) gets one. A file whose marker is not the one beside it
    /// was restored from a backup: it gets a new marker, and the caller a true.
    ///
    /// The marker beside the file is written first, so a crash between the two writes
    /// leaves a new file unmarked (marked again at the next open), never a file of this
    /// device that looks restored.
    private static func bindToDevice(_ file: StoreFile, _ database: LocalDatabase, protection: FileProtection) throws -> Bool {
        let beside = FileManager.default.contents(atPath: file.markerPath).map { String(decoding: $0, as: UTF8.self) }
        let stored = try database.meta(.deviceMarker)
        if let stored, stored == beside {
            try? Platform.excludeFromBackup(file.markerPath)
            return false
        }
        var random = SystemRandomNumberGenerator()
        let marker = hexString((0..<16).map { _ in UInt8.random(in: 0...255, using: &random) })
        do {
            try Platform.writeDurably(Array(marker.utf8), to: file.markerPath, mode: 0o600)
            try Platform.protect(file.markerPath, protection)
            try Platform.excludeFromBackup(file.markerPath)
        } catch {
            throw OutpostError.storage("cannot write the device marker \(file.markerPath): \(error)")
        }
        try database.setMeta(.deviceMarker, marker)
        return stored != nil
    }

    // MARK: - Suspension

    /// Releases the store's file and lock until `resume()`, for an app about to be
    /// suspended: iOS stops an app that holds a file lock in a shared (App Group) container
    /// while suspended (0xdead10cc), and an extension could not open the store meanwhile.
    ///
    /// A sync in progress is waited for; cancelling the task that called `suspend()` (as a
    /// background task's expiration handler does) cancels that sync and suspends at once
    /// (its sent changes stay in doubt, as after a lost answer). Syncs waiting for their
    /// turn, and any started before `resume()`, throw `OutpostError.suspended`; saves and
    /// reads work until the file closes, then throw `suspended` too. Observers stay. An
    /// in-memory store holds no file: nothing happens. `resume()` before the sync ended
    /// calls the suspension off.
    public func suspend() async {
        guard file != nil, life.beginSuspending() else { return }
        var holdsGate = true
        do { try await syncRun.gate.acquire() } catch {
            holdsGate = false
            syncRun.running?.cancel()
        }
        defer { if holdsGate { syncRun.gate.release() } }
        // A resume() or close() while it waited ends the suspension here.
        guard life.phase == .suspending else { return }
        // Reads in flight end first, and their connections close: no reader's descriptor
        // (nor SQLite's WAL lock) stays on the file once the app is suspended.
        readers?.shut(.suspended)
        await readers?.drain()
        guard life.phase == .suspending else {
            // Resumed while the reads ended: the store stays open, and reads may open again.
            readers?.reopen()
            return
        }
        life.release(to: .suspended)
    }

    /// Opens the file and takes its lock again after `suspend()`; nothing happens when the
    /// store is not suspended, and a suspension still waiting for a sync is called off.
    ///
    /// - Throws: `OutpostError.storeInUse` when another process (an extension) has the
    ///   file open meanwhile: the store stays suspended, and `resume()` may be called
    ///   again; `closed` after `close()`; the errors of opening the file.
    public func resume() throws {
        switch life.phase {
        case .open: return
        case .suspending:
            life.callOffSuspension()
            return
        case .closed: throw OutpostError.closed
        case .suspended: break
        }
        guard let file else { return }
        let lock = file.readOnly ? nil : try StoreLock.acquire(databasePath: file.path, protection: configuration.fileProtection)
        let opened = try Self.open(file, configuration: configuration, rng: &rng)
        guard opened.clientId == clientId else {
            opened.database.close()
            throw OutpostError.storage("the store file was replaced while the store was suspended (its client id is \(opened.clientId), not \(clientId))")
        }
        opened.database.cipher = cipher
        life.reopen(opened.database, lock: lock)
        readers?.reopen()
    }

    /// True while the store is suspended (or suspending).
    public var isSuspended: Bool { life.isSuspended }
}
