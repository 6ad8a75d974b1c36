import Synchronization

/// A clock whose time moves only when a test advances it. Code that takes a clock
/// (`SyncScheduler`) then waits for exactly the time it should, and a test proves it by
/// time, not by which task ran first: it sees each sleeper's deadline (`sleepers`, awaited
/// with `untilSleepers`), and a sleeper wakes when, and only when, `advance` reaches its
/// deadline.
public final class TestClock: Clock, Sendable {
    public struct Instant: InstantProtocol, Sendable, CustomStringConvertible {
        /// Time since the clock's start.
        public var offset: Duration

        public init(offset: Duration) { self.offset = offset }
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
        public var description: String { "\(offset)" }
    }

    private struct Sleeper {
        let deadline: Instant
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State: Sendable {
        var now = Instant(offset: .zero)
        var sleepers: [UInt64: Sleeper] = [:]
        var nextID: UInt64 = 0
    }

    /// Watched: a sleeper's arrival or departure wakes a test that awaits the sleepers.
    private let state = Watched(State())

    public init() {}

    public var now: Instant { state.value.now }
    public var minimumResolution: Duration { .nanoseconds(1) }

    /// The deadlines of the tasks sleeping on this clock now, earliest first.
    public var sleepers: [Instant] { Self.deadlines(state.value) }

    /// Waits until `condition` holds of the sleepers' deadlines (earliest first), woken by
    /// each sleep that starts or ends; see `Watched.until`.
    public func untilSleepers(_ what: String, fileID: String = #fileID, line: Int = #line,
                              _ condition: @escaping @Sendable ([Instant]) -> Bool) async throws {
        try await state.until(what, fileID: fileID, line: line) { condition(Self.deadlines($0)) }
    }

    private static func deadlines(_ state: State) -> [Instant] { state.sleepers.values.map(\.deadline).sorted() }

    /// Moves the time forward by `duration` and wakes every sleeper whose deadline it reached.
    public func advance(by duration: Duration) {
        let woken = state.update { s -> [CheckedContinuation<Void, any Error>] in
            s.now = s.now.advanced(by: duration)
            let now = s.now
            let due = s.sleepers.filter { $0.value.deadline <= now }
            for id in due.keys { s.sleepers[id] = nil }
            return due.values.map(\.continuation)
        }
        for c in woken { c.resume() }
    }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.update { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Void, any Error>? = state.update { s in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if deadline <= s.now { return .success(()) }
                    s.sleepers[id] = Sleeper(deadline: deadline, continuation: c)
                    return nil
                }
                if let outcome { c.resume(with: outcome) }
            }
        } onCancel: {
            let sleeper = state.update { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }
}
