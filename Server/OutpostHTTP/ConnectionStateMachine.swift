// A connection's phases and timeouts as a plain value: events go in with the current
// time, actions come out. No sockets, no clock reads: tests drive it with made-up
// instants (Hummingbird's HTTPConnectionStateHandler is the model).
import Glibc

/// A point on the monotonic clock, in nanoseconds.
struct Instant: Comparable, Hashable, Sendable, CustomStringConvertible {
    var nanoseconds: Int64

    init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    /// Now, from `CLOCK_MONOTONIC`.
    static func now() -> Instant {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Instant(nanoseconds: Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec))
    }

    static func < (a: Instant, b: Instant) -> Bool { a.nanoseconds < b.nanoseconds }
    static func + (a: Instant, d: Duration) -> Instant { Instant(nanoseconds: a.nanoseconds + d.nanosecondsClamped) }
    static func - (a: Instant, b: Instant) -> Duration { .nanoseconds(a.nanoseconds - b.nanoseconds) }
    var description: String { "\(nanoseconds)ns" }
}

extension Duration {
    /// The duration in whole nanoseconds, saturating instead of trapping.
    var nanosecondsClamped: Int64 {
        let (s, atto) = components
        let (ns, overflow) = s.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return s < 0 ? Int64.min / 2 : Int64.max / 2 }
        return ns + atto / 1_000_000_000
    }
}

/// The timeouts a connection obeys (from `HTTPServerConfiguration`).
struct ConnectionTimeouts: Sendable, Equatable {
    var header: Duration
    var idle: Duration
    var body: Duration
    /// Bytes per second a body must average once `body` has passed since it started; 0: no check.
    var minBodyRate: Int
    var send: Duration
    var discard: Duration
    var discardLimit: Int

    init(_ c: HTTPServerConfiguration) {
        header = c.headerTimeout
        idle = c.idleTimeout
        body = c.bodyTimeout
        minBodyRate = c.minBodyBytesPerSecond
        send = c.sendTimeout
        discard = c.discardTimeout
        discardLimit = c.discardLimit
    }
}

/// The lifecycle of one connection:
///
/// ```
/// idle --bytes--> readingHead --head--> awaitingCheck --pass--> readingBody --end--> responding
///   ^                                        |                        |                  |
///   +-------------- response sent, keep-alive ------------------------+------------------+
///  early error (413, 401...): discarding --(bound reached, peer EOF)--> closed
/// ```
///
/// Timeouts (PROTOCOL.md section 2): a head must be complete `header` after its first
/// byte, else 408 and close; a body that makes no progress for `body`, or whose average
/// rate falls under `minBodyRate` bytes/s once `body` has passed since it started, gets
/// 408 and close; an idle keep-alive connection is closed after `idle` without a response
/// (RFC 9112 section 9.5 lets a server close idle connections), and a new connection that
/// has sent nothing yet is closed the same way after `header` when that is shorter (nginx
/// closes a silent new connection at `client_header_timeout`); a response the client
/// does not read for `send` closes the connection; discarding after an early error stops
/// after `discard` or `discardLimit` bytes. Work the server does (pre-body checks,
/// handlers) is never timed out here: a long poll is the server's choice.
struct ConnectionStateMachine: Sendable {
    enum Phase: Equatable, Sendable {
        /// Between requests; nothing of the next one received.
        case idle(since: Instant)
        /// Part of a head received.
        case readingHead(started: Instant)
        /// The head is complete; the route's pre-body check runs. No body is read.
        case awaitingCheck
        /// Reading the body.
        case readingBody(started: Instant, lastProgress: Instant, received: Int)
        /// The handler runs or the response is being produced.
        case responding
        /// An error was answered before the body was read: reading and dropping input
        /// until `until` or `remaining` more bytes, then close.
        case discarding(until: Instant, remaining: Int)
        case closed
    }

    /// What the connection must do.
    enum Action: Equatable, Sendable {
        case none
        /// Answer `408 request_timeout` and close.
        case timeout
        /// Close now without answering.
        case close
    }

    let timeouts: ConnectionTimeouts
    private(set) var phase: Phase
    /// Shutting down: finish the current request, answer it with `Connection: close`.
    private(set) var draining = false
    /// Since when queued output has made no progress (nil: nothing waits for the socket).
    private(set) var writeStalledSince: Instant?
    /// Nothing has arrived on this connection yet (no byte, no request): while idle, it may
    /// stay only as long as a head may take (the shorter of `header` and `idle`).
    private(set) var silent = true

    init(timeouts: ConnectionTimeouts, now: Instant) {
        self.timeouts = timeouts
        phase = .idle(since: now)
    }

    var isIdle: Bool {
        if case .idle = phase { return true }
        return false
    }

    // MARK: Events

    /// Request bytes arrived (any phase). Starts the header clock on an idle connection;
    /// counts discarded bytes while discarding.
    mutating func bytesReceived(_ count: Int, now: Instant) -> Action {
        switch phase {
        case .idle:
            silent = false
            phase = .readingHead(started: now)
        case .discarding(let until, let remaining):
            if count >= remaining {
                phase = .closed
                return .close
            }
            phase = .discarding(until: until, remaining: remaining - count)
        default:
            break
        }
        return .none
    }

    /// The head is complete; a pre-body check (or, without one, the body) comes next.
    mutating func headReceived(now: Instant) {
        silent = false
        phase = .awaitingCheck
    }

    /// The body starts being read (the check passed; `100 Continue` was sent if asked).
    mutating func bodyStarted(now: Instant) {
        phase = .readingBody(started: now, lastProgress: now, received: 0)
    }

    /// Body bytes arrived.
    mutating func bodyReceived(_ count: Int, now: Instant) {
        if case .readingBody(let started, _, let received) = phase {
            phase = .readingBody(started: started, lastProgress: now, received: received + count)
        }
    }

    /// The whole request is in; the handler runs.
    mutating func requestReceived() {
        phase = .responding
    }

    /// The response was queued completely. Returns whether the connection stays open:
    /// only when both sides allow keep-alive and the server is not draining.
    mutating func responseCompleted(keepAlive: Bool, now: Instant) -> Bool {
        silent = false
        if keepAlive && !draining {
            phase = .idle(since: now)
            return true
        }
        return false
    }

    /// An error was answered before the body was read: discard what still arrives, bounded.
    mutating func startDiscarding(now: Instant) {
        phase = .discarding(until: now + timeouts.discard, remaining: timeouts.discardLimit)
    }

    /// The connection closed.
    mutating func closed() {
        phase = .closed
    }

    /// Output could not be written completely.
    mutating func writeStalled(now: Instant) {
        if writeStalledSince == nil { writeStalledSince = now }
    }

    /// Some output was written; `drained` when nothing is left. An idle connection's
    /// idle clock starts when its last response has left, not when it was queued (a
    /// long download must not count as idle time).
    mutating func writeProgressed(now: Instant, drained: Bool) {
        if drained {
            writeStalledSince = nil
            if case .idle = phase { phase = .idle(since: now) }
        } else if writeStalledSince != nil {
            writeStalledSince = now
        }
    }

    /// The server is shutting down: the current request, if any, is answered with
    /// `Connection: close`. Returns true when the connection is between requests with
    /// nothing being sent, so it can be closed now.
    mutating func beginDraining() -> Bool {
        draining = true
        if case .idle = phase, writeStalledSince == nil {
            phase = .closed
            return true
        }
        return false
    }

    // MARK: Time

    /// The next instant `timerFired` may have something to do, or nil.
    func nextDeadline() -> Instant? {
        var deadline: Instant?
        func consider(_ d: Instant) { deadline = deadline.map { min($0, d) } ?? d }
        switch phase {
        case .idle(let since): if writeStalledSince == nil { consider(since + idleLimit) }
        case .readingHead(let started): consider(started + timeouts.header)
        case .readingBody(let started, let lastProgress, let received):
            consider(lastProgress + timeouts.body)
            if let rateDeadline = rateDeadline(started: started, received: received) { consider(rateDeadline) }
        case .discarding(let until, _): consider(until)
        case .awaitingCheck, .responding, .closed: break
        }
        if let stalled = writeStalledSince { consider(stalled + timeouts.send) }
        return deadline
    }

    /// How long the connection may stay idle: `idle`, or for a silent new one no longer
    /// than `header`.
    private var idleLimit: Duration {
        silent ? min(timeouts.header, timeouts.idle) : timeouts.idle
    }

    /// When the body's average rate would fall under the minimum: the later of the grace
    /// period's end and the instant `received / rate` seconds after the start.
    private func rateDeadline(started: Instant, received: Int) -> Instant? {
        guard timeouts.minBodyRate > 0 else { return nil }
        let allowed = Duration.nanoseconds(Int64(received) * 1_000_000_000 / Int64(timeouts.minBodyRate))
        return started + max(timeouts.body, allowed)
    }

    /// Checks the deadlines at `now`.
    mutating func timerFired(now: Instant) -> Action {
        if case .closed = phase { return .none }
        if let stalled = writeStalledSince, now >= stalled + timeouts.send {
            phase = .closed
            return .close
        }
        switch phase {
        case .idle(let since) where now >= since + idleLimit && writeStalledSince == nil:
            phase = .closed
            return .close
        case .readingHead(let started) where now >= started + timeouts.header:
            phase = .closed
            return .timeout
        case .readingBody(let started, let lastProgress, let received):
            let rateExpired = rateDeadline(started: started, received: received).map { now >= $0 } ?? false
            if now >= lastProgress + timeouts.body || rateExpired {
                phase = .closed
                return .timeout
            }
        case .discarding(let until, _) where now >= until:
            phase = .closed
            return .close
        default:
            break
        }
        return .none
    }
}
