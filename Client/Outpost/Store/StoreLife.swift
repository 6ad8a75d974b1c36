import OutpostCore

/// The lifecycle part of a store: its open database and file lock, and where the store is
/// in its life. Owned by the store's actor and used only on it. Suspension and closing are
/// its transitions (`Store/StoreFile.swift` performs them); every other part reaches the
/// database through `database()`, which names why there is none.
final class StoreLife {
    /// Where a store is in its life.
    enum Phase: Sendable, Hashable {
        case open
        /// `suspend()` waits for the running sync; new syncs are refused.
        case suspending
        /// File and lock released until `resume()`; every call throws `suspended`.
        case suspended
        /// `close()` was called.
        case closed
    }

    private var opened: LocalDatabase?
    private var lock: StoreLock?
    private(set) var phase = Phase.open

    init(database: LocalDatabase, lock: StoreLock?) {
        opened = database
        self.lock = lock
    }

    /// The database, or `closed` (`suspended` while the store is suspended).
    func database() throws -> LocalDatabase {
        guard let opened else { throw phase == .suspended ? OutpostError.suspended : OutpostError.closed }
        return opened
    }

    /// True while the database is open (open or suspending).
    var hasDatabase: Bool { opened != nil }

    /// True while the store is suspended (or suspending).
    var isSuspended: Bool { phase == .suspending || phase == .suspended }

    /// True when a sync may start: the store is neither suspending nor suspended (a closed
    /// store lets the sync fail on its closed database).
    var admitsSync: Bool { phase == .open || phase == .closed }

    /// Starts a suspension; false when the store is not open.
    func beginSuspending() -> Bool {
        guard phase == .open else { return false }
        phase = .suspending
        return true
    }

    /// Calls off a suspension still waiting.
    func callOffSuspension() {
        if phase == .suspending { phase = .open }
    }

    /// Closes the database and releases the lock, ending in `phase` (suspended or closed).
    func release(to phase: Phase) {
        opened?.close()
        opened = nil
        lock = nil
        self.phase = phase
    }

    /// Takes the database and lock of a resumed store.
    func reopen(_ database: LocalDatabase, lock: StoreLock?) {
        opened = database
        self.lock = lock
        phase = .open
    }
}
