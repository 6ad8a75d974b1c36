// Requests a handler holds open (long polls) and something else answers later, many at a
// time: no task waits for each of them.
import Synchronization

/// What a handler returns (`HTTPResponse(hold:)`) to keep its request open without a task
/// waiting for it. The engine makes a `HeldRequest` and calls `start` with it on the
/// connection's loop thread; whoever keeps it answers it later (`HeldRequest.answer`), from
/// any thread. If the connection closes first, the engine calls `gone` (on the loop
/// thread), after which answers do nothing.
///
/// A waiting task costs its frames and a resumption per answer; a held request costs the
/// connection's state and one queued message per answer, and one wake-up per loop for all
/// the answers of a batch (`HeldRequest.answer(_:with:)`).
public struct HTTPHold: Sendable {
    let start: @Sendable (HeldRequest) -> Void
    let gone: @Sendable (HeldRequest) -> Void

    /// `start`: keep the request (it may be answered at once); `gone`: its connection closed.
    public init(start: @escaping @Sendable (HeldRequest) -> Void, gone: @escaping @Sendable (HeldRequest) -> Void) {
        self.start = start
        self.gone = gone
    }
}

extension HTTPResponse {
    /// A response that holds the request open until `hold`'s keeper answers it.
    public init(hold: HTTPHold) {
        self.init(body: .held(hold))
    }
}

/// A request held open by its handler, waiting for its answer.
///
/// Answered at most once: the first of `answer` and the connection's end wins, the rest do
/// nothing. An answer carries bytes or nothing (`.bytes`, `.empty`); the engine frames it
/// for this request exactly as it frames a handler's response (compression, `HEAD`,
/// `Connection`), and writes it on the connection's loop.
public final class HeldRequest: Sendable {
    private let loop: EventLoop
    private let connection: ConnectionID
    private let serial: Int
    private let policy: ResponsePolicy
    /// `HTTPHold.gone`: kept, unlike `start`, which runs once (so what only it captures is
    /// freed while the request waits).
    private let gone: @Sendable (HeldRequest) -> Void
    private let settled = Atomic<Bool>(false)

    init(loop: EventLoop, connection: ConnectionID, serial: Int, policy: ResponsePolicy, gone: @escaping @Sendable (HeldRequest) -> Void) {
        self.loop = loop
        self.connection = connection
        self.serial = serial
        self.policy = policy
        self.gone = gone
    }

    /// Takes the right to answer: true once, for the first caller.
    private func settle() -> Bool {
        !settled.exchange(true, ordering: .acquiringAndReleasing)
    }

    /// Answers the request (false when it was answered already or its connection closed).
    @discardableResult
    public func answer(_ response: HTTPResponse) -> Bool {
        guard settle() else { return false }
        loop.post(message(Self.prepare(response, policy)))
        return true
    }

    /// Answers every request of `requests` not answered yet with `response`: prepared once
    /// per distinct framing policy (the requests of a long-poll group mostly share one),
    /// and queued with one wake-up per loop. Returns how many it answered.
    @discardableResult
    public static func answer(_ requests: [HeldRequest], with response: HTTPResponse) -> Int {
        var prepared: [ResponsePolicy: PreparedResponse] = [:]
        var byLoop: [ObjectIdentifier: (EventLoop, [LoopMessage])] = [:]
        var answered = 0
        for request in requests where request.settle() {
            let policy = request.policy
            let ready: PreparedResponse
            if let known = prepared[policy] {
                ready = known
            } else {
                ready = prepare(response, policy)
                prepared[policy] = ready
            }
            byLoop[ObjectIdentifier(request.loop), default: (request.loop, [])].1.append(request.message(ready))
            answered += 1
        }
        for (loop, messages) in byLoop.values { loop.post(contentsOf: messages) }
        return answered
    }

    /// The engine: the connection closed (or answered with an error) before an answer.
    func connectionEnded() {
        guard settle() else { return }
        gone(self)
    }

    private func message(_ prepared: PreparedResponse) -> LoopMessage {
        .response(connection, serial: serial, prepared)
    }

    /// Bytes or nothing only: a file's descriptor or a stream's writer belongs to one
    /// connection, so an answer that needs one is a `500`.
    private static func prepare(_ response: HTTPResponse, _ policy: ResponsePolicy) -> PreparedResponse {
        switch response.body {
        case .bytes, .empty: return policy.prepare(response, notify: {}).0
        case .stream, .file, .held: return policy.prepare(HTTPError.internalError().response, notify: {}).0
        }
    }
}
