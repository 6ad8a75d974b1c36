import Testing
@testable import OutpostHTTP

/// The connection state machine driven by a made-up clock: no sockets, no sleeping.
@Suite("Connection state machine")
struct StateMachineTests {
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

    @Test func idleConnectionClosesSilently() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        _ = sm.bytesReceived(10, now: t(1))
        sm.headReceived(now: t(1))
        sm.requestReceived()
        let kept = sm.responseCompleted(keepAlive: true, now: t(2))
        #expect(kept)
        #expect(sm.nextDeadline() == t(62))
        #expect(sm.timerFired(now: t(61.9)) == .none)
        #expect(sm.timerFired(now: t(62)) == .close)
        #expect(!sm.silent)
    }

    /// A new connection that sends nothing may stay only as long as a head may take.
    @Test func silentNewConnectionClosesAtTheHeaderTimeout() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        #expect(sm.silent)
        #expect(sm.nextDeadline() == t(10))
        #expect(sm.timerFired(now: t(9.9)) == .none)
        #expect(sm.timerFired(now: t(10)) == .close)
        #expect(sm.silent)

        // A header timeout longer than the idle one leaves the idle one in charge.
        var c = HTTPServerConfiguration()
        c.headerTimeout = .seconds(90)
        c.idleTimeout = .seconds(60)
        let long = ConnectionStateMachine(timeouts: ConnectionTimeouts(c), now: t(0))
        #expect(long.nextDeadline() == t(60))
    }

    @Test func slowHeadersTimeOutWith408() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        #expect(sm.bytesReceived(10, now: t(5)) == .none)
        #expect(sm.nextDeadline() == t(15))
        // More bytes do not extend the header deadline: it counts from the first byte.
        _ = sm.bytesReceived(10, now: t(14))
        #expect(sm.timerFired(now: t(14.5)) == .none)
        #expect(sm.timerFired(now: t(15)) == .timeout)
    }

    @Test func stalledBodyTimesOut() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        _ = sm.bytesReceived(100, now: t(1))
        sm.headReceived(now: t(1))
        sm.bodyStarted(now: t(1))
        sm.bodyReceived(20_000, now: t(2))
        #expect(sm.nextDeadline() == t(12))  // no progress for 10 s
        #expect(sm.timerFired(now: t(11.9)) == .none)
        #expect(sm.timerFired(now: t(12)) == .timeout)
    }

    @Test func bodyBelowMinimumRateTimesOut() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        sm.headReceived(now: t(0))
        sm.bodyStarted(now: t(0))
        // 1 000 bytes/s minimum after a 10 s grace: a trickle of 100 bytes every 5 s
        // always makes progress, but its average is 20 bytes/s.
        var now = 0.0
        var action = ConnectionStateMachine.Action.none
        while action == .none && now < 100 {
            now += 5
            sm.bodyReceived(100, now: t(now))
            action = sm.timerFired(now: t(now))
        }
        #expect(action == .timeout)
        #expect(now <= 15)
    }

    @Test func fastBodyDoesNotTimeOut() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        sm.headReceived(now: t(0))
        sm.bodyStarted(now: t(0))
        for second in 1...100 {
            sm.bodyReceived(5000, now: t(Double(second)))
            #expect(sm.timerFired(now: t(Double(second))) == .none)
        }
        sm.requestReceived()
        #expect(sm.nextDeadline() == nil)  // the handler is never timed out here
    }

    @Test func keepAliveReturnsToIdle() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        _ = sm.bytesReceived(50, now: t(1))
        sm.headReceived(now: t(1))
        sm.requestReceived()
        let kept = sm.responseCompleted(keepAlive: true, now: t(2))
        #expect(kept)
        #expect(sm.isIdle)
        #expect(sm.nextDeadline() == t(62))
        let keptAgain = sm.responseCompleted(keepAlive: false, now: t(3))
        #expect(!keptAgain)
    }

    @Test func idleClockWaitsForOutputToDrain() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        _ = sm.responseCompleted(keepAlive: true, now: t(0))
        sm.writeStalled(now: t(0))
        sm.writeProgressed(now: t(20), drained: false)
        // A long download keeps making progress: neither idle nor send timeout.
        #expect(sm.timerFired(now: t(45)) == .none)
        sm.writeProgressed(now: t(40), drained: false)
        #expect(sm.timerFired(now: t(65)) == .none)
        sm.writeProgressed(now: t(70), drained: true)
        #expect(sm.nextDeadline() == t(130))
    }

    @Test func clientThatStopsReadingIsDropped() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        sm.requestReceived()
        sm.writeStalled(now: t(1))
        #expect(sm.nextDeadline() == t(31))
        #expect(sm.timerFired(now: t(31)) == .close)
    }

    @Test func discardingIsBoundedInTimeAndBytes() {
        var sm = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        sm.startDiscarding(now: t(0))
        #expect(sm.bytesReceived(600, now: t(0.1)) == .none)
        #expect(sm.bytesReceived(600, now: t(0.2)) == .close)
        var sm2 = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        sm2.startDiscarding(now: t(0))
        #expect(sm2.nextDeadline() == t(1))
        #expect(sm2.timerFired(now: t(1)) == .close)
    }

    @Test func drainingClosesIdleAndMarksBusy() {
        var idle = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        let closeIdle = idle.beginDraining()
        #expect(closeIdle)
        var busy = ConnectionStateMachine(timeouts: timeouts, now: t(0))
        _ = busy.bytesReceived(1, now: t(0))
        let closeBusy = busy.beginDraining()
        #expect(!closeBusy)
        #expect(busy.draining)
        busy.headReceived(now: t(0))
        busy.requestReceived()
        let keptBusy = busy.responseCompleted(keepAlive: true, now: t(1))
        #expect(!keptBusy)
    }
}
