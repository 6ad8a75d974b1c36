import OutpostSQLite
import Synchronization

/// Read-only connections to a store's file, for what the app reads (`get`, `all`,
/// `record`, `records`, `status`) outside the store's actor (docs/client.md, "Reads beside
/// the writer").
///
/// Why: the actor owns the one writing connection and applies a pulled page of up to
/// 1,000 records in one transaction. A read that queued behind that work on the actor
/// waited for the whole page (a p99 of 50-70 ms, four frames, during a first sync of a
/// million records; docs/benchmarks.md). In WAL mode a reader on its own connection never
/// waits for the writer: it sees the last committed state, so a read started after a save
/// returned sees the save, and a page being applied is seen whole or not at all.
///
/// Each read runs in one deferred (read) transaction, so a read of several statements
/// (`status()`) sees one snapshot. A connection is used by one read at a time: it is taken
/// from the idle list under the lock and given back after. At most `keptIdle` stay open
/// between reads; at most `maximumOpen` are open at once, and a read beyond that runs on
/// the actor (the caller falls back), so a burst of reads cannot open descriptors without
/// bound.
///
/// Suspension and close: `shut` closes the idle connections and makes reads throw
/// `suspended` or `closed`; a read running at that moment ends on its connection, which is
/// then closed, not kept (its generation is old). `reopen` after `resume()` lets reads open
/// connections again.
final class ReadPool: Sendable {
    /// A connection lent to one read at a time (the lock hands it out; one owner at once).
    final class Reader: @unchecked Sendable {
        let database: LocalDatabase
        let generation: Int
        init(database: LocalDatabase, generation: Int) {
            self.database = database
            self.generation = generation
        }
    }

    enum Shut: Sendable { case suspended, closed }

    /// What a read gets: a reader, or none because `maximumOpen` are lent.
    enum Lent {
        case reader(Reader)
        case busy
    }

    private struct State {
        var idle: [Reader] = []
        var open = 0
        var generation = 0
        var shut: Shut?
    }

    static let keptIdle = 2
    static let maximumOpen = 4

    let path: String
    private let state = Mutex(State())

    init(path: String) { self.path = path }

    /// Runs `body` on a reader in one read transaction; nil when every reader is lent (the
    /// caller reads on the actor instead).
    ///
    /// - Throws: `OutpostError.suspended` or `closed` after `shut`; `storage` for a SQLite
    ///   failure.
    func read<T>(_ body: (LocalDatabase) throws -> T) throws -> T? {
        guard case .reader(let reader) = try lend() else { return nil }
        var healthy = true
        defer { giveBack(reader, healthy: healthy) }
        do {
            return try reader.database.db.transaction(.deferred) { try body(reader.database) }
        } catch let e as SQLiteError {
            healthy = false
            throw OutpostError.storage(e.description)
        }
    }

    /// An idle reader, or a new one when fewer than `maximumOpen` are open.
    private func lend() throws -> Lent {
        enum Step { case lent(Reader), open(generation: Int), busy }
        let step: Step = try state.withLock { s in
            if let shut = s.shut { throw shut == .suspended ? OutpostError.suspended : OutpostError.closed }
            if let reader = s.idle.popLast() { return .lent(reader) }
            guard s.open < Self.maximumOpen else { return .busy }
            s.open += 1
            return .open(generation: s.generation)
        }
        switch step {
        case .lent(let reader): return .reader(reader)
        case .busy: return .busy
        case .open(let generation):
            do {
                // Opened outside the lock: opening reads the file's header and schema.
                return .reader(Reader(database: try LocalDatabase(readingAt: path), generation: generation))
            } catch {
                state.withLock { s in if s.generation == generation { s.open -= 1 } }
                if let e = error as? SQLiteError { throw OutpostError.storage(e.description) }
                throw error
            }
        }
    }

    /// Keeps the reader for the next read, or closes it: when `keptIdle` are idle, when
    /// it failed, or when the pool was shut or reopened since it was lent.
    private func giveBack(_ reader: Reader, healthy: Bool) {
        let keep = state.withLock { s -> Bool in
            guard reader.generation == s.generation else { return false }
            if healthy, s.shut == nil, s.idle.count < Self.keptIdle {
                s.idle.append(reader)
                return true
            }
            s.open -= 1
            return false
        }
        if !keep { reader.database.close() }
    }

    /// Closes the idle readers; reads throw `suspended` or `closed` until `reopen`.
    func shut(_ why: Shut) {
        let closing = state.withLock { s -> [Reader] in
            let idle = s.idle
            s.idle = []
            s.open = 0
            s.generation += 1
            s.shut = why
            return idle
        }
        for reader in closing { reader.database.close() }
    }

    /// Lets reads open readers again (after `resume()`).
    func reopen() {
        state.withLock { s in
            guard s.shut == .suspended else { return }
            s.shut = nil
        }
    }

    /// Readers open now (idle or lent), for tests of descriptors and suspension.
    var openCount: Int { state.withLock { $0.open } }
}
