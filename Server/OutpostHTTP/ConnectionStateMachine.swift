// What a connection is doing, as one value: events go in with the current time, the new
// state and an action come out. No sockets, no clock reads: tests drive it with made-up
// instants (Hummingbird's HTTPConnectionStateHandler and swift-nio's
// HTTPServerPipelineHandler state are the models). `Connection` interprets the actions.
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

/// What a connection waits for from its socket (epoll's `EPOLLIN`, `EPOLLOUT`, `EPOLLRDHUP`).
struct ConnectionInterest: OptionSet, Sendable, Hashable {
    let rawValue: UInt8
    /// Bytes from the client.
    static let read = ConnectionInterest(rawValue: 1)
    /// Room in the socket's send buffer.
    static let write = ConnectionInterest(rawValue: 2)
    /// The client's half-close.
    static let hangUp = ConnectionInterest(rawValue: 4)
}

/// One connection's life, from accept to close:
///
/// ```
/// opened --bytes--> readingHead --head--> checking --pass--> readingBody --end--> handling
///   idle --bytes--^                 answer before the body: closing(discarding)     |
///    ^                                                                 streamed body: writing
///    +--------------------- response queued, keep-alive -----------------------------+
///    response with `Connection: close` --> closing(linger) --output sent--> lingering --> closed
///    client gone with answers queued, or a stream failed --> closing(abort) --output sent--> closed
/// ```
///
/// Pipelining: while a response waits for the socket, the next request's head is read
/// (`idle`, `readingHead`) unless more than `outputHighWater` bytes wait (back-pressure);
/// bytes that arrive during `checking`, `handling` and `writing` stay buffered, up to the
/// configured pipeline buffer.
///
/// Timeouts (docs/protocol.md section 2): a head must be complete `header` after its first
/// byte, else 408 and close; a body that makes no progress for `body`, or whose average
/// rate falls under `minBodyRate` bytes/s once `body` has passed since it started, gets 408
/// and close; an idle keep-alive connection is closed after `idle` without a response (RFC
/// 9112 section 9.5 lets a server close idle connections), and a new connection that has
/// sent nothing yet is closed the same way after `header` when that is shorter (nginx
/// closes a silent new connection at `client_header_timeout`); output that makes no
/// progress for `send` closes the connection; discarding after an early answer, and
/// lingering after the last one, stop after `discard` or `discardLimit` bytes. Work the
/// server does (pre-body checks, handlers, streamed bodies) is never timed out here: a long
/// poll is the server's choice.
struct ConnectionStateMachine: Sendable {
    /// What the connection is doing.
    enum State: Equatable, Sendable {
        /// Accepted; nothing has arrived yet. Closed (silently) after the shorter of the
        /// header and idle timeouts.
        case opened(since: Instant)
        /// Between requests: the last response has been queued, nothing of the next one read.
        case idle(since: Instant)
        /// Part of a request head has arrived.
        case readingHead(started: Instant)
        /// The head is complete; the route's pre-body check runs. The body is not read
        /// (nor invited with `100 Continue`) until it passes.
        case checking
        /// Reading the body (for a request without one, only until the parser's end).
        case readingBody(started: Instant, lastProgress: Instant, received: Int)
        /// The whole request is in; its handler runs.
        case handling
        /// The response's head is queued and its streamed body is being produced.
        case writing(then: AfterResponse)
        /// No further request is read; the queued output drains, then `Closing` says how
        /// the connection ends.
        case closing(Closing)
        /// The last answer was sent and the write side shut (FIN): what the client still
        /// sends is read and dropped, within the bound, so it reads the answer rather than
        /// a reset; then close.
        case lingering(Discard)
        case closed
    }

    /// What follows a response.
    enum AfterResponse: Equatable, Sendable {
        case keepAlive
        case close
    }

    /// How a closing connection ends once its output is sent.
    enum Closing: Equatable, Sendable {
        /// A response said `Connection: close`: linger. Input is dropped.
        case linger
        /// An error was answered before the request was read whole (the client may still be
        /// sending its body): input is dropped within the bound, then linger.
        case discarding(Discard)
        /// Close at once: the client has gone, a streamed body failed, or the server drains
        /// a connection between requests.
        case abort
    }

    /// A bound on input read and dropped: until an instant, or a number of bytes more.
    struct Discard: Equatable, Sendable {
        var until: Instant
        var remaining: Int
    }

    /// What happens to the connection.
    enum Event: Equatable, Sendable {
        /// `count` bytes arrived from the client.
        case received(Int)
        /// The client shut its side (read returned 0, or `EPOLLRDHUP`); `outputPending`:
        /// answers are still queued for it.
        case peerClosed(outputPending: Bool)
        /// A request head was parsed.
        case headReceived
        /// The body may be read now: the pre-body check passed, or there was none.
        case bodyStarted
        /// `count` bytes of the body arrived, as framed on the wire.
        case bodyReceived(Int)
        /// The whole request is in; the handler runs.
        case requestReceived
        /// The response's head is queued; its body is streamed, and the head said `close`.
        case streamStarted(close: Bool)
        /// The current response is completely queued; `close`: its head said
        /// `Connection: close`; `buffered`: bytes of a next request already wait.
        case responseQueued(close: Bool, buffered: Bool)
        /// The streamed body ended and is completely queued.
        case streamFinished(buffered: Bool)
        /// The streamed body failed after its head was sent: the client must see it truncated.
        case streamFailed
        /// An answer with `Connection: close` was queued before the request was read whole
        /// (a malformed or refused request, a body over its limit).
        case answeredEarly
        /// Queued output could not all be written; `progress`: some of it was.
        case writeBlocked(progress: Bool)
        /// Nothing is queued for the socket any more (all of it was written, or none was queued).
        case outputDrained
        /// The server is shutting down: finish the current request, with `Connection: close`.
        case drain(outputPending: Bool)
        /// A timer fired: check the deadlines.
        case timer
        /// The socket failed, or the server stops: close at once.
        case abandon
    }

    /// What the connection must do.
    enum Action: Equatable, Sendable {
        case none
        /// Drop the input read and buffered: it is no request.
        case discardInput
        /// Answer `408 request_timeout` with `Connection: close` (the state is already
        /// `closing(discarding)`).
        case answerTimeout
        /// Shut the write side (FIN) and drop input: lingering has begun.
        case shutdownWrite
        /// Close now without answering.
        case close
        /// Close now: a new connection sent nothing within the header timeout.
        case closeSilent
    }

    /// Output queued beyond this stops the parsing of further pipelined requests until the
    /// client reads (back-pressure against a client that sends but does not read).
    static let outputHighWater = 1 << 20

    let timeouts: ConnectionTimeouts
    private(set) var state: State
    /// The server is shutting down: the current request is answered with
    /// `Connection: close` and no further one is read.
    private(set) var draining = false
    /// Since when queued output has made no progress (nil: nothing waits for the socket).
    private(set) var writeStalledSince: Instant?

    init(timeouts: ConnectionTimeouts, now: Instant) {
        self.timeouts = timeouts
        state = .opened(since: now)
    }

    var isClosed: Bool {
        if case .closed = state { return true }
        return false
    }

    // MARK: Transitions

    /// Applies `event` at `now`; returns what the connection must do.
    mutating func on(_ event: Event, now: Instant) -> Action {
        if case .closed = state { return closedAction(event) }
        switch event {
        case .received(let count):
            return received(count, now: now)
        case .peerClosed(let outputPending):
            return peerClosed(outputPending: outputPending)
        case .headReceived:
            state = .checking
        case .bodyStarted:
            state = .readingBody(started: now, lastProgress: now, received: 0)
        case .bodyReceived(let count):
            if case .readingBody(let started, _, let received) = state {
                state = .readingBody(started: started, lastProgress: now, received: received + count)
            }
        case .requestReceived:
            state = .handling
        case .streamStarted(let close):
            state = .writing(then: close || draining ? .close : .keepAlive)

        case .responseQueued(let close, let buffered):
            return responseEnded(close: close, buffered: buffered, now: now)
        case .streamFinished(let buffered):
            guard case .writing(let then) = state else { return .none }
            return responseEnded(close: then == .close, buffered: buffered, now: now)
        case .streamFailed:
            state = .closing(.abort)
            return .discardInput
        case .answeredEarly:
            state = .closing(.discarding(Discard(until: now + timeouts.discard, remaining: timeouts.discardLimit)))
            return .discardInput

        case .writeBlocked(let progress):
            if progress || writeStalledSince == nil { writeStalledSince = now }
        case .outputDrained:
            return outputDrained(now: now)
        case .drain(let outputPending):
            draining = true
            switch state {
            case .opened, .idle:
                // Between requests: close once the answers queued have been sent.
                guard outputPending else { return close() }
                state = .closing(.abort)
                return .discardInput
            case .writing:
                state = .writing(then: .close)
            default:
                break
            }

        case .timer:
            return timerFired(now: now)
        case .abandon:
            return close()
        }
        return .none
    }

    /// Bytes arrived: they begin a request on an idle connection, and count against the
    /// bound of what a closing one discards.
    private mutating func received(_ count: Int, now: Instant) -> Action {
        switch state {
        case .opened, .idle:
            state = .readingHead(started: now)
            return .none
        case .readingHead, .checking, .readingBody, .handling, .writing:
            return .none
        case .closing(.discarding(let bound)):
            guard let left = bound.less(count) else { return close() }
            state = .closing(.discarding(left))
            return .discardInput
        case .lingering(let bound):
            guard let left = bound.less(count) else { return close() }
            state = .lingering(left)
            return .discardInput
        case .closing(.linger), .closing(.abort), .closed:
            return .discardInput
        }
    }

    /// The peer closed its side.
    private mutating func peerClosed(outputPending: Bool) -> Action {
        switch state {
        case .opened, .idle, .readingHead, .closing(.linger), .closing(.abort):
            // Answers still queued are sent first; a half-sent head can never complete.
            guard outputPending else { return close() }
            state = .closing(.abort)
            return .discardInput
        case .checking, .readingBody, .handling, .writing, .closing(.discarding), .lingering, .closed:
            // A request in progress can never be answered to anyone (its handler is
            // cancelled); a closing connection has nothing left to wait for.
            return close()
        }
    }

    /// Everything queued has been written.
    private mutating func outputDrained(now: Instant) -> Action {
        // An idle connection's clock starts when its last response has left, not when it
        // was queued (a long download must not count as idle time).
        if writeStalledSince != nil, case .idle = state { state = .idle(since: now) }
        writeStalledSince = nil
        switch state {
        case .closing(.linger), .closing(.discarding):
            state = .lingering(Discard(until: now + timeouts.discard, remaining: timeouts.discardLimit))
            return .shutdownWrite
        case .closing(.abort):
            return close()
        default:
            return .none
        }
    }

    /// A closed connection ignores everything.
    private func closedAction(_ event: Event) -> Action {
        if case .received = event { return .discardInput }
        return .none
    }

    private mutating func close() -> Action {
        state = .closed
        return .close
    }

    /// The response is completely queued: keep the connection for the next request (whose
    /// header clock starts now when its bytes are already buffered), or close it after the
    /// output drains.
    private mutating func responseEnded(close: Bool, buffered: Bool, now: Instant) -> Action {
        if close || draining {
            state = .closing(.linger)
            return .discardInput
        }
        state = buffered ? .readingHead(started: now) : .idle(since: now)
        return .none
    }

    // MARK: Questions the connection asks

    /// Whether the parser may consume more input now. A request's body is always read; a
    /// next request's head only while the output is under `outputHighWater`.
    func mayParse(outputPending: Int) -> Bool {
        switch state {
        case .readingBody: true
        case .opened, .idle, .readingHead: outputPending <= Self.outputHighWater
        default: false
        }
    }

    /// What to wait for from the socket, given the input buffered and not parsed yet and
    /// the output queued.
    func interest(buffered: Int, outputPending: Int, maxBuffered: Int) -> ConnectionInterest {
        var interest: ConnectionInterest = []
        switch state {
        case .closed, .closing(.abort):
            break
        case .closing, .lingering, .readingBody:
            interest = [.read, .hangUp]
        case .opened, .idle, .readingHead:
            interest = .hangUp
            if outputPending <= Self.outputHighWater || buffered < maxBuffered { interest.insert(.read) }
        case .checking, .handling, .writing:
            interest = .hangUp
            if buffered < maxBuffered { interest.insert(.read) }
        }
        if writeStalledSince != nil && outputPending > 0 { interest.insert(.write) }
        return interest
    }

    // MARK: Time

    /// The next instant a `.timer` event may have something to do, or nil.
    func nextDeadline() -> Instant? {
        var deadline: Instant?
        func consider(_ d: Instant) { deadline = deadline.map { min($0, d) } ?? d }
        switch state {
        case .opened(let since): consider(since + silentLimit)
        case .idle(let since): if writeStalledSince == nil { consider(since + timeouts.idle) }
        case .readingHead(let started): consider(started + timeouts.header)
        case .readingBody(let started, let lastProgress, let received):
            consider(lastProgress + timeouts.body)
            if let rateDeadline = rateDeadline(started: started, received: received) { consider(rateDeadline) }
        case .closing(.discarding(let bound)), .lingering(let bound): consider(bound.until)
        case .checking, .handling, .writing, .closing, .closed: break
        }
        if let stalled = writeStalledSince { consider(stalled + timeouts.send) }
        return deadline
    }

    /// How long a new connection may stay silent: no longer than a head may take, nor than
    /// an idle connection may stay.
    private var silentLimit: Duration { min(timeouts.header, timeouts.idle) }

    /// When the body's average rate would fall under the minimum: the later of the grace
    /// period's end and the instant `received / rate` seconds after the start.
    private func rateDeadline(started: Instant, received: Int) -> Instant? {
        guard timeouts.minBodyRate > 0 else { return nil }
        let allowed = Duration.nanoseconds(Int64(received) * 1_000_000_000 / Int64(timeouts.minBodyRate))
        return started + max(timeouts.body, allowed)
    }

    private mutating func timerFired(now: Instant) -> Action {
        if let stalled = writeStalledSince, now >= stalled + timeouts.send { return close() }
        switch state {
        case .opened(let since) where now >= since + silentLimit:
            state = .closed
            return .closeSilent
        case .idle(let since) where now >= since + timeouts.idle && writeStalledSince == nil:
            return close()
        case .readingHead(let started) where now >= started + timeouts.header:
            return timedOut(now: now)
        case .readingBody(let started, let lastProgress, let received):
            let rateExpired = rateDeadline(started: started, received: received).map { now >= $0 } ?? false
            if now >= lastProgress + timeouts.body || rateExpired { return timedOut(now: now) }
        case .closing(.discarding(let bound)) where now >= bound.until:
            return close()
        case .lingering(let bound) where now >= bound.until:
            return close()
        default:
            break
        }
        return .none
    }

    /// Headers not complete in time, or a body too slow: 408, then close as after any
    /// early answer (docs/protocol.md section 2).
    private mutating func timedOut(now: Instant) -> Action {
        state = .closing(.discarding(Discard(until: now + timeouts.discard, remaining: timeouts.discardLimit)))
        return .answerTimeout
    }
}

extension ConnectionStateMachine.Discard {
    /// The bound after `count` more bytes, or nil when they use it up.
    func less(_ count: Int) -> Self? {
        count >= remaining ? nil : Self(until: until, remaining: remaining - count)
    }
}
