import Dispatch
import OutpostSQLite
import Synchronization

/// Read-only connections to a store's file, for what the app reads (`get`, `all`,
/// `record`, `records`, `status`) outside the store's actor (docs/client.md, "Reads beside
/// the writer"). Each connection has a serial queue of its own that its reads run on: the
/// caller (a screen on the main actor) is suspended meanwhile, never blocked, and a read
/// waits neither for the store's actor nor for the cooperative pool, which a sync keeps
/// busy fetching and decoding pages.
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
/// then closed, not kept (its generation is old), and `drain` waits for that. `reopen`
/// after `resume()` lets reads open connections again.
final class ReadPool: Sendable {
    /// A connection lent to one read at a time (the lock hands it out; one owner at once),
    /// and the queue its reads run on (serial: Dispatch gives it a thread even when every
    /// core is busy). The connection is opened on that queue by the first read, since
    /// opening reads the file's header and schema.
    final class Reader: @unchecked Sendable {
        let generation: Int
        let queue = DispatchQueue(label: "outpost.store.reader")
        private(set) var database: LocalDatabase?
        init(generation: Int) { self.generation = generation }

        func opened(at path: String) throws -> LocalDatabase {
            if let database { return database }
            let opened = try LocalDatabase(readingAt: path)
            database = opened
            return opened
        }
    }

    /// A read's result, made on the reader's queue and handed once to the caller, which
    /// alone uses it from then on (what `sending` says, for a generic result the compiler
    /// cannot follow through the transaction).
    struct Handover<T>: @unchecked Sendable {
        let value: T
    }

    enum Shut: Sendable { case suspended, closed }

    private struct State {
        var idle: [Reader] = []
        var open = 0
        var generation = 0
        var shut: Shut?
        /// Reads running now (readers lent), and who waits for them to end (`drain`).
        var lent = 0
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
    }

    static let keptIdle = 2
    static let maximumOpen = 4

    let path: String
    private let state = Mutex(State())

    init(path: String) { self.path = path }

    /// Runs `body` on a reader's queue in one read transaction, the caller suspended
    /// meanwhile; nil when every reader is lent (the caller reads on the actor instead).
    ///
    /// - Throws: `OutpostError.suspended` or `closed` after `shut`; `storage` for a SQLite
    ///   failure.
    func read<T>(_ body: @escaping @Sendable (LocalDatabase) throws -> T,
                 isolation: isolated (any Actor)? = #isolation) async throws -> Handover<T>? {
        guard let reader = try lend() else { return nil }
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Handover<T>?, any Error>) in
            reader.queue.async {
                continuation.resume(with: Result { Handover(value: try self.run(body, on: reader)) })
            }
        }
    }

    /// Runs `body` in a read transaction on `reader`, then gives the reader back (closed,
    /// if its connection failed).
    private func run<T>(_ body: (LocalDatabase) throws -> T, on reader: Reader) throws -> T {
        var healthy = true
        defer { giveBack(reader, healthy: healthy) }
        do {
            let database = try reader.opened(at: path)
            return try database.db.transaction(.deferred) { try body(database) }
        } catch let e as SQLiteError {
            healthy = false
            throw OutpostError.storage(e.description)
        }
    }

    /// An idle reader, or a new one (opened by its first read) when fewer than
    /// `maximumOpen` are open; nil when that many are lent.
    private func lend() throws -> Reader? {
        try state.withLock { s in
            if let shut = s.shut { throw shut == .suspended ? OutpostError.suspended : OutpostError.closed }
            if let reader = s.idle.popLast() {
                s.lent += 1
                return reader
            }
            guard s.open < Self.maximumOpen else { return nil }
            s.open += 1
            s.lent += 1
            return Reader(generation: s.generation)
        }
    }

    /// Keeps the reader for the next read, or closes it: when `keptIdle` are idle, when
    /// it failed, or when the pool was shut or reopened since it was lent.
    private func giveBack(_ reader: Reader, healthy: Bool) {
        let (keep, waiters) = state.withLock { s -> (Bool, [CheckedContinuation<Void, Never>]) in
            s.lent -= 1
            let waiters = s.lent == 0 ? s.drainWaiters : []
            if s.lent == 0 { s.drainWaiters = [] }
            guard reader.generation == s.generation else { return (false, waiters) }
            if healthy, s.shut == nil, s.idle.count < Self.keptIdle {
                s.idle.append(reader)
                return (true, waiters)
            }
            s.open -= 1
            return (false, waiters)
        }
        // Closed before the waiters hear of it: a suspension that waited for this read
        // finds no reader's descriptor left on the file.
        if !keep { reader.database?.close() }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits until no read runs: each running read ends on its connection, which is closed
    /// when the pool was shut meanwhile. `suspend()` waits here, so no descriptor of a
    /// reader stays on the file once the store is suspended.
    func drain() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.lent == 0 { return true }
                s.drainWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
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
        for reader in closing { reader.database?.close() }
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

    /// Why reads are refused now, if they are (`shut`).
    var shutReason: Shut? { state.withLock { $0.shut } }
}
