import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A state a test waited for that was not reached before its deadline.
public struct NotReached: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// How long a wait of a test may take before it fails: generous, because the suite starts
/// hundreds of servers, clients and child processes at once on a machine of two cores, and
/// for its first half minute a task may wait seconds for a turn on a core.
public let testDeadlineSeconds = 90

/// Waits until `condition` holds: a state another task, thread or process reaches (a
/// waiter registered, a listener ready, a count reached). It checks the condition every
/// 2 ms and throws `NotReached`, naming `what` and the caller's line, once `within` has
/// passed, so a test that waits never hangs. The limit only ends a wait that went wrong:
/// nothing is asserted about how long the wait took.
public func eventually(_ what: String, within limit: Duration = .seconds(testDeadlineSeconds), fileID: String = #fileID, line: Int = #line,
                       _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + limit
    while true {
        if try await condition() { return }
        guard ContinuousClock.now < deadline else { throw NotReached("not reached within \(limit): \(what) (\(fileID):\(line))") }
        try await Task.sleep(for: .milliseconds(2))
    }
}

/// `eventually` for code that runs on a thread of its own (inside `blocking {}`, a
/// proxy's connection thread): it blocks the thread between checks, so it never runs on
/// Swift's cooperative pool (a name of its own keeps an async caller from picking it).
public func eventuallyBlocking(_ what: String, within limit: Duration = .seconds(testDeadlineSeconds), fileID: String = #fileID, line: Int = #line,
                       _ condition: () throws -> Bool) throws {
    let deadline = ContinuousClock.now + limit
    while true {
        if try condition() { return }
        guard ContinuousClock.now < deadline else { throw NotReached("not reached within \(limit): \(what) (\(fileID):\(line))") }
        usleep(2_000)
    }
}

/// Milliseconds since 1970 on the system's wall clock (what a server child and a device
/// stamp their records with).
public func wallClockMilliseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

/// Waits until the wall clock reads later than `milliseconds`: a timestamp taken after
/// this returns is greater than one taken before `milliseconds` was read. Only the clock
/// can tell; it is read every 2 ms, with the tests' deadline.
public func untilWallClockPasses(_ milliseconds: Int64, fileID: String = #fileID, line: Int = #line) async throws {
    try await eventually("the wall clock passed \(milliseconds) ms", fileID: fileID, line: line) { wallClockMilliseconds() > milliseconds }
}
