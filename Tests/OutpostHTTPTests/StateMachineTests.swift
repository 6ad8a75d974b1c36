import Testing
@testable import OutpostHTTP

/// The connection state machine driven by a made-up clock: events in, state and action
/// out; no sockets, no sleeping.
@Suite("Connection state machine")
struct StateMachineTests {
    typealias Machine = ConnectionStateMachine

    let timeouts: ConnectionTimeouts = {
        var c = HTTPServerConfiguration()
        c.headerTimeout = .seconds(10)
        c.idleTimeout = .seconds(60)
        c.bodyTimeout = .seconds(10)
        c.minBodyBytesPerSecond = 1000
        c.sendTimeout = .seconds(30)
        c.discardTimeout = .seconds(1)
        c.discardLimit = 1000
        return ConnectionTimeouts(c)
    }()

    func t(_ seconds: Double) -> Instant { Instant(nanoseconds: Int64(seconds * 1e9)) }

    /// A machine that has read one bodiless request's head at `at` and runs its handler.
    func handling(at seconds: Double = 1) -> Machine {
        var sm = Machine(timeouts: timeouts, now: t(0))
        _ = sm.on(.received(10), now: t(seconds))
        _ = sm.on(.headReceived, now: t(seconds))
        _ = sm.on(.bodyStarted, now: t(seconds))
        _ = sm.on(.requestReceived, now: t(seconds))
        return sm
    }

    // MARK: Timeouts

    @Test func idleConnectionClosesSilently() {
        var sm = handling()
        #expect(sm.on(.responseQueued(close: false, buffered: false), now: t(2)) == .none)
        #expect(sm.state == .idle(since: t(2)))
        #expect(sm.nextDeadline() == t(62))
        #expect(sm.on(.timer, now: t(61.9)) == .none)
        #expect(sm.on(.timer, now: t(62)) == .close)
        #expect(sm.state == .closed)
    }

    /// A new connection that sends nothing may stay only as long as a head may take.
    @Test func silentNewConnectionClosesAtTheHeaderTimeout() {
        var sm = Machine(timeouts: timeouts, now: t(0))
        #expect(sm.state == .opened(since: t(0)))
        #expect(sm.nextDeadline() == t(10))
        #expect(sm.on(.timer, now: t(9.9)) == .none)
        #expect(sm.on(.timer, now: t(10)) == .closeSilent)

        // A header timeout longer than the idle one leaves the idle one in charge.
        var c = HTTPServerConfiguration()
        c.headerTimeout = .seconds(90)
        c.idleTimeout = .seconds(60)
        let long = Machine(timeouts: ConnectionTimeouts(c), now: t(0))
        #expect(long.nextDeadline() == t(60))
    }

    @Test func slowHeadersTimeOutWith408() {
        var sm = Machine(timeouts: timeouts, now: t(0))
        #expect(sm.on(.received(10), now: t(5)) == .none)
        #expect(sm.state == .readingHead(started: t(5)))
        #expect(sm.nextDeadline() == t(15))
        // More bytes do not extend the header deadline: it counts from the first byte.
        _ = sm.on(.received(10), now: t(14))
        #expect(sm.on(.timer, now: t(14.5)) == .none)
        #expect(sm.on(.timer, now: t(15)) == .answerTimeout)
        // The 408 is an early answer: input is dropped within the bound, then linger.
        #expect(sm.state == .closing(.discarding(.init(until: t(16), remaining: 1000))))
    }

    @Test func stalledBodyTimesOut() {
        var sm = Machine(timeouts: timeouts, now: t(0))
        _ = sm.on(.received(100), now: t(1))
        _ = sm.on(.headReceived, now: t(1))
        _ = sm.on(.bodyStarted, now: t(1))
        _ = sm.on(.bodyReceived(20_000), now: t(2))
        #expect(sm.nextDeadline() == t(12))  // no progress for 10 s
        #expect(sm.on(.timer, now: t(11.9)) == .none)
        #expect(sm.on(.timer, now: t(12)) == .answerTimeout)
    }

    @Test func bodyBelowMinimumRateTimesOut() {
        var sm = Machine(timeouts: timeouts, now: t(0))
        _ = sm.on(.headReceived, now: t(0))
        _ = sm.on(.bodyStarted, now: t(0))
        // 1 000 bytes/s minimum after a 10 s grace: a trickle of 100 bytes every 5 s
        // always makes progress, but its average is 20 bytes/s.
        var now = 0.0
        var action = Machine.Action.none
        while action == .none && now < 100 {
            now += 5
            _ = sm.on(.bodyReceived(100), now: t(now))
            action = sm.on(.timer, now: t(now))
        }
        #expect(action == .answerTimeout)
        #expect(now <= 15)
    }

    @Test func fastBodyDoesNotTimeOut() {
        var sm = Machine(timeouts: timeouts, now: t(0))
        _ = sm.on(.headReceived, now: t(0))
        _ = sm.on(.bodyStarted, now: t(0))
        for second in 1...100 {
            _ = sm.on(.bodyReceived(5000), now: t(Double(second)))
            #expect(sm.on(.timer, now: t(Double(second))) == .none)
        }
        _ = sm.on(.requestReceived, now: t(100))
        #expect(sm.state == .handling)
        #expect(sm.nextDeadline() == nil)  // the handler is never timed out here
    }

    @Test func keepAliveReturnsToIdle() {
        var sm = handling()
        #expect(sm.on(.responseQueued(close: false, buffered: false), now: t(2)) == .none)
        #expect(sm.state == .idle(since: t(2)))
        #expect(sm.nextDeadline() == t(62))
        _ = sm.on(.received(10), now: t(3))
        _ = sm.on(.headReceived, now: t(3))
        _ = sm.on(.bodyStarted, now: t(3))
        _ = sm.on(.requestReceived, now: t(3))
        #expect(sm.on(.responseQueued(close: true, buffered: false), now: t(3)) == .discardInput)
        #expect(sm.state == .closing(.linger))
    }

    @Test func idleClockWaitsForOutputToDrain() {
        var sm = handling(at: 0)
        _ = sm.on(.responseQueued(close: false, buffered: false), now: t(0))
        _ = sm.on(.writeBlocked(progress: false), now: t(0))
        _ = sm.on(.writeBlocked(progress: true), now: t(20))
        // A long download keeps making progress: neither idle nor send timeout.
        #expect(sm.on(.timer, now: t(45)) == .none)
        _ = sm.on(.writeBlocked(progress: true), now: t(40))
        #expect(sm.on(.timer, now: t(65)) == .none)
        _ = sm.on(.outputDrained, now: t(70))
        #expect(sm.nextDeadline() == t(130))
    }

    @Test func clientThatStopsReadingIsDropped() {
        var sm = handling(at: 0)
        _ = sm.on(.writeBlocked(progress: false), now: t(1))
        // Flushes that move nothing do not restart the send clock.
        _ = sm.on(.writeBlocked(progress: false), now: t(20))
        #expect(sm.nextDeadline() == t(31))
        #expect(sm.on(.timer, now: t(31)) == .close)
    }

    @Test func discardingIsBoundedInTimeAndBytes() {
        var sm = Machine(timeouts: timeouts, now: t(0))
        _ = sm.on(.received(5), now: t(0))
        #expect(sm.on(.answeredEarly, now: t(0)) == .discardInput)
        #expect(sm.on(.received(600), now: t(0.1)) == .discardInput)
        #expect(sm.on(.received(600), now: t(0.2)) == .close)
        var sm2 = Machine(timeouts: timeouts, now: t(0))
        _ = sm2.on(.answeredEarly, now: t(0))
        #expect(sm2.nextDeadline() == t(1))
        #expect(sm2.on(.timer, now: t(1)) == .close)
    }

    @Test func drainingClosesIdleAndMarksBusy() {
        var idle = Machine(timeouts: timeouts, now: t(0))
        #expect(idle.on(.drain(outputPending: false), now: t(0)) == .close)
        var busy = Machine(timeouts: timeouts, now: t(0))
        _ = busy.on(.received(1), now: t(0))
        #expect(busy.on(.drain(outputPending: false), now: t(0)) == .none)
        #expect(busy.draining)
        _ = busy.on(.headReceived, now: t(0))
        _ = busy.on(.bodyStarted, now: t(0))
        _ = busy.on(.requestReceived, now: t(0))
        _ = busy.on(.responseQueued(close: false, buffered: false), now: t(1))
        #expect(busy.state == .closing(.linger))
    }

    // MARK: Transitions

    /// The bytes of a next request already buffered when a response is queued start its
    /// head clock at once.
    @Test func aPipelinedRequestStartsReadingAtOnce() {
        var sm = handling()
        #expect(sm.on(.responseQueued(close: false, buffered: true), now: t(2)) == .none)
        #expect(sm.state == .readingHead(started: t(2)))
        #expect(sm.nextDeadline() == t(12))
    }

    /// A streamed body is `writing`; its end returns to idle, or closes when its head said
    /// so or the server began draining meanwhile.
    @Test func aStreamedResponseIsWritingUntilItEnds() {
        var sm = handling()
        _ = sm.on(.streamStarted(close: false), now: t(1))
        #expect(sm.state == .writing(then: .keepAlive))
        #expect(sm.nextDeadline() == nil)
        #expect(sm.on(.streamFinished(buffered: false), now: t(5)) == .none)
        #expect(sm.state == .idle(since: t(5)))

        var draining = handling()
        _ = draining.on(.streamStarted(close: false), now: t(1))
        _ = draining.on(.drain(outputPending: true), now: t(2))
        #expect(draining.state == .writing(then: .close))
        #expect(draining.on(.streamFinished(buffered: true), now: t(3)) == .discardInput)
        #expect(draining.state == .closing(.linger))

        var failed = handling()
        _ = failed.on(.streamStarted(close: false), now: t(1))
        #expect(failed.on(.streamFailed, now: t(2)) == .discardInput)
        #expect(failed.state == .closing(.abort))
        #expect(failed.on(.outputDrained, now: t(3)) == .close)
    }

    /// After `Connection: close` the output drains, the write side is shut and input is
    /// dropped within the bound: lingering close.
    @Test func closeLingersAfterTheOutputDrains() {
        var sm = handling()
        _ = sm.on(.responseQueued(close: true, buffered: false), now: t(1))
        _ = sm.on(.writeBlocked(progress: true), now: t(1))
        #expect(sm.on(.received(5_000), now: t(1.5)) == .discardInput)  // not counted yet
        #expect(sm.state == .closing(.linger))
        #expect(sm.on(.outputDrained, now: t(2)) == .shutdownWrite)
        #expect(sm.state == .lingering(.init(until: t(3), remaining: 1000)))
        #expect(sm.on(.received(999), now: t(2.5)) == .discardInput)
        #expect(sm.on(.received(1), now: t(2.6)) == .close)
    }

    /// The client's half-close: answers already queued are still sent, then close; a
    /// request in progress ends the connection at once.
    @Test func peerCloseFinishesQueuedAnswersOnly() {
        var between = handling()
        _ = between.on(.responseQueued(close: false, buffered: false), now: t(1))
        #expect(between.on(.peerClosed(outputPending: true), now: t(1)) == .discardInput)
        #expect(between.state == .closing(.abort))
        #expect(between.on(.outputDrained, now: t(2)) == .close)

        var nothingQueued = handling()
        _ = nothingQueued.on(.responseQueued(close: false, buffered: false), now: t(1))
        #expect(nothingQueued.on(.peerClosed(outputPending: false), now: t(1)) == .close)

        var busy = handling()
        #expect(busy.on(.peerClosed(outputPending: true), now: t(1)) == .close)
        #expect(busy.state == .closed)
        // Closed is final.
        #expect(busy.on(.received(10), now: t(2)) == .discardInput)
        #expect(busy.on(.timer, now: t(100)) == .none)
        #expect(busy.on(.abandon, now: t(100)) == .none)
    }

    /// Back-pressure: a next head is not parsed while more than the high-water mark of
    /// output waits, and reading stops once the pipeline buffer is full too.
    @Test func backPressureStopsParsingAndReading() {
        var sm = handling()
        _ = sm.on(.responseQueued(close: false, buffered: true), now: t(1))
        let high = Machine.outputHighWater
        #expect(sm.mayParse(outputPending: high))
        #expect(!sm.mayParse(outputPending: high + 1))
        #expect(sm.interest(buffered: 10, outputPending: high + 1, maxBuffered: 100) == [.read, .hangUp])
        #expect(sm.interest(buffered: 100, outputPending: high + 1, maxBuffered: 100) == [.hangUp])
        _ = sm.on(.writeBlocked(progress: false), now: t(1))
        #expect(sm.interest(buffered: 100, outputPending: high + 1, maxBuffered: 100) == [.hangUp, .write])
        // A body is always read; a handler's request buffers what follows up to the limit.
        var body = Machine(timeouts: timeouts, now: t(0))
        _ = body.on(.received(10), now: t(0))
        _ = body.on(.headReceived, now: t(0))
        #expect(!body.mayParse(outputPending: 0))  // the pre-body check runs
        _ = body.on(.bodyStarted, now: t(0))
        #expect(body.mayParse(outputPending: high + 1))
        #expect(body.interest(buffered: 1000, outputPending: 0, maxBuffered: 100) == [.read, .hangUp])
        // Closing after the client left: nothing more to read.
        var gone = handling()
        _ = gone.on(.responseQueued(close: false, buffered: false), now: t(1))
        _ = gone.on(.peerClosed(outputPending: true), now: t(1))
        _ = gone.on(.writeBlocked(progress: false), now: t(1))
        #expect(gone.interest(buffered: 0, outputPending: 10, maxBuffered: 100) == [.write])
    }

    /// Draining a connection between requests whose last answer is still queued: it is
    /// sent, then the connection closes; no further request is read.
    @Test func drainingWaitsForQueuedOutput() {
        var sm = handling()
        _ = sm.on(.responseQueued(close: false, buffered: false), now: t(1))
        #expect(sm.on(.drain(outputPending: true), now: t(2)) == .discardInput)
        #expect(sm.state == .closing(.abort))
        #expect(!sm.mayParse(outputPending: 0))
        #expect(sm.on(.outputDrained, now: t(3)) == .close)
    }
}
