import OutpostCore
import OutpostTestBasics
import Synchronization
@testable import Outpost

/// A transport in front of another (a device's on the in-memory server) that counts the
/// requests a store makes and the long polls it holds open, and can hold the answer of a
/// request: the request is forwarded (a push is applied), and its answer never arrives;
/// once the caller's task is cancelled it throws `noAnswer`, as a connection whose answer
/// was not read. The counts are a `Watched` state: a test awaits them, woken by the
/// request itself.
final class WatchedTransport: SyncTransport {
    struct Counts: Sendable, Equatable {
        /// Requests of every kind sent.
        var requests = 0
        var pushes = 0
        var pulls = 0
        /// Long polls (pulls that wait) not yet answered.
        var openPolls = 0
        /// Long polls that ended because their task was cancelled.
        var cancelledPolls = 0
        /// Answers held now (`holdAnswer`): their request reached the server.
        var held = 0
    }

    enum Kind: Sendable, Equatable {
        case push, pull
    }

    private struct Hold {
        var kind: Kind
        var skip: Int
    }

    private let inner: any SyncTransport
    let counts = Watched(Counts())
    private let holds = Mutex<[Hold]>([])

    init(_ inner: any SyncTransport) { self.inner = inner }

    /// Requests of every kind sent.
    var requests: Int { counts.value.requests }
    /// Long polls not yet answered.
    var openPolls: Int { counts.value.openPolls }
    /// Long polls that ended because their task was cancelled.
    var cancelledPolls: Int { counts.value.cancelledPolls }

    /// Holds the answer of the next request of `kind` after `skip` of them passed.
    func holdAnswer(of kind: Kind, skip: Int = 0) {
        holds.withLock { $0.append(Hold(kind: kind, skip: skip)) }
    }

    /// Waits until `condition` holds of the counts; see `Watched.until`.
    @discardableResult
    func until(_ what: String, fileID: String = #fileID, line: Int = #line, _ condition: @escaping @Sendable (Counts) -> Bool) async throws -> Counts {
        try await counts.until(what, fileID: fileID, line: line, condition)
    }

    var maxResponseBytes: Int { inner.maxResponseBytes }

    func takeServerClockReading() -> ServerClockReading? { inner.takeServerClockReading() }

    func takeTraffic() -> TransportTraffic? { inner.takeTraffic() }

    func sendTelemetry(_ batch: TelemetryBatch, space: String) async throws {
        counts.update { $0.requests += 1 }
        try await inner.sendTelemetry(batch, space: space)
    }

    func serverInfo() async throws -> ServerInfo {
        counts.update { $0.requests += 1 }
        return try await inner.serverInfo()
    }

    func push(_ request: PushRequest, space: String) async throws -> PushResponse {
        let hold = arrived(.push)
        let answer = try await inner.push(request, space: space)
        if hold { try await holdUntilCancelled() }
        return answer
    }

    func pull(_ query: PullQuery, space: String) async throws -> PulledPage {
        let waits = query.waitMs > 0
        let hold = arrived(.pull, waits: waits)
        defer {
            if waits {
                let cancelled = Task.isCancelled
                counts.update { c in
                    c.openPolls -= 1
                    if cancelled { c.cancelledPolls += 1 }
                }
            }
        }
        let page = try await inner.pull(query, space: space)
        if hold { try await holdUntilCancelled() }
        return page
    }

    /// Counts a request of `kind`; true when its answer is to be held.
    private func arrived(_ kind: Kind, waits: Bool = false) -> Bool {
        let hold = holds.withLock { holds -> Bool in
            guard let i = holds.firstIndex(where: { $0.kind == kind }) else { return false }
            if holds[i].skip > 0 {
                holds[i].skip -= 1
                return false
            }
            holds.remove(at: i)
            return true
        }
        counts.update { c in
            c.requests += 1
            if kind == .push { c.pushes += 1 } else { c.pulls += 1 }
            if waits { c.openPolls += 1 }
        }
        return hold
    }

    /// Returns nothing: counts the held answer, waits for the task's cancellation, and
    /// throws as a connection whose answer never came.
    private func holdUntilCancelled() async throws -> Never {
        counts.update { $0.held += 1 }
        await untilCancelled()
        counts.update { $0.held -= 1 }
        throw TransportError.noAnswer("cancelled while waiting for the answer")
    }
}

/// Returns once the current task is cancelled (at once when it already is).
func untilCancelled() async {
    final class Box: Sendable {
        let state = Mutex<(waiter: CheckedContinuation<Void, Never>?, cancelled: Bool)>((nil, false))
    }
    let box = Box()
    await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = box.state.withLock { s -> Bool in
                if s.cancelled || Task.isCancelled { return true }
                s.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    } onCancel: {
        let waiter = box.state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.cancelled = true
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }
}
