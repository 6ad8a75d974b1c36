import Synchronization
import Testing
@testable import OutpostHTTP

/// The engine's connection with no socket: bytes in, bytes and state out, time moved by
/// hand (`EmbeddedConnection`). The same behaviours over real sockets are in ServerTests.
@Suite("Connection without a socket")
struct EmbeddedConnectionTests {
    static func routes(_ r: inout Router) {
        r.add(.GET, "/hello", inline: { _ in HTTPResponse(text: "hello") })
        r.add(.PUT, "/echo") { request in HTTPResponse(text: String(decoding: request.body, as: UTF8.self)) }
    }

    func get(_ path: String, _ extra: String = "") -> String { "GET \(path) HTTP/1.1\r\nHost: t\r\n\(extra)\r\n" }

    @Test func aRequestIsAnsweredAndTheConnectionWaitsForTheNext() throws {
        let c = try EmbeddedConnection(routes: Self.routes)
        #expect(c.state == .opened(since: c.clock.now))
        c.writeInbound("GET /hello HTTP/1.1\r\n")
        #expect(c.state == .readingHead(started: c.clock.now))
        #expect(c.readOutbound().isEmpty)
        c.writeInbound("Host: t\r\n\r\n")
        let answer = c.readOutbound()
        #expect(answer.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(answer.hasSuffix("\r\n\r\nhello"))
        #expect(!answer.contains("Connection:"))
        #expect(c.state == .idle(since: c.clock.now))
        #expect(c.wire.interest == [.read, .hangUp])
    }

    /// Pipelined requests are answered in order; the second waits, buffered, while the
    /// first one's handler runs on the loop's executor.
    @Test func pipelinedRequestsAreAnsweredInOrder() throws {
        let release = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let c = try EmbeddedConnection(routes: { r in
            r.add(.GET, "/slow") { _ in
                await withCheckedContinuation { continuation in release.withLock { $0 = continuation } }
                return HTTPResponse(text: "slow")
            }
            r.add(.GET, "/fast", inline: { _ in HTTPResponse(text: "fast") })
        })
        c.writeInbound(get("/slow") + get("/fast"))
        #expect(c.state == .handling)
        c.run()  // the handler starts on the loop's executor and waits
        #expect(c.readOutbound().isEmpty)
        release.withLock { $0?.resume() }
        c.run()
        let answers = c.readOutbound()
        let slow = try #require(answers.range(of: "slow"))
        let fast = try #require(answers.range(of: "fast"))
        #expect(slow.lowerBound < fast.lowerBound)
        #expect(c.state == .idle(since: c.clock.now))
    }

    /// A client that sends but does not read: once more than the high-water mark waits for
    /// the socket, the next request is not parsed, and once the pipeline buffer is full too
    /// the socket is not read; a read by the client lets everything go on.
    @Test func backPressureHoldsTheNextRequestUntilTheClientReads() throws {
        let big = [UInt8](repeating: 0x61, count: ConnectionStateMachine.outputHighWater + 100_000)
        let c = try EmbeddedConnection(configure: { $0.maxPipelineBufferBytes = 1024 }, routes: { r in
            r.add(.GET, "/big", inline: { _ in HTTPResponse(headers: ["Content-Type": "application/octet-stream"], body: .bytes(big)) })
            Self.routes(&r)
        })
        c.wire.room = 1000
        let garbage = String(repeating: "x", count: 2000) + "\r\n\r\n"
        c.writeInbound(get("/big") + get("/hello") + garbage)
        #expect(c.state == .readingHead(started: c.clock.now))
        #expect(c.connection.machine.writeStalledSince != nil)
        #expect(c.wire.interest == [.hangUp, .write])  // nor the socket: 2 KiB wait, unparsed
        #expect(c.wire.outbound.count == 1000)
        c.writeInbound("more")
        #expect(c.wire.inbound.count == 4)  // left in the "kernel"
        _ = c.readOutbound()
        c.setRoom(nil)
        let rest = c.readOutbound()
        let hello = rest.contains("HTTP/1.1 200 OK\r\nContent-Type: text/plain")
        #expect(hello)
        let bad = rest.contains("HTTP/1.1 400 Bad Request\r\n")  // the garbage: 400 and close
        #expect(bad)
        #expect(c.wire.outboundShut)
    }

    /// `100 Continue` is sent only once the pre-body check has passed; the body is not
    /// read before.
    @Test func continueFollowsThePreBodyCheck() throws {
        let c = try EmbeddedConnection(routes: { r in
            r.add(.PUT, "/checked", preBody: { _, _ in }) { request in HTTPResponse(text: "got \(request.body.count)") }
        })
        c.writeInbound("PUT /checked HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        #expect(c.state == .checking)
        #expect(c.readOutbound().isEmpty)
        c.run()  // the check's task, on the loop's executor
        #expect(c.readOutbound() == "HTTP/1.1 100 Continue\r\n\r\n")
        #expect(c.state == .readingBody(started: c.clock.now, lastProgress: c.clock.now, received: 0))
        c.writeInbound("hello")
        #expect(c.readOutbound().hasSuffix("got 5"))
        #expect(c.state == .idle(since: c.clock.now))
    }

    /// Refused before the body: the answer says close, what the client still sends is
    /// dropped within the bound, and after the answer is out the connection lingers.
    @Test func anEarlyAnswerDiscardsThenLingers() throws {
        let c = try EmbeddedConnection(configure: { $0.discardLimit = 100 }, routes: Self.routes)
        c.wire.room = 0
        c.writeInbound("PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\nabc")
        guard case .closing(.discarding(let bound)) = c.state else {
            Issue.record("not discarding: \(c.state)")
            return
        }
        #expect(bound.remaining == 100)
        c.writeInbound([UInt8](repeating: 0, count: 60))
        #expect(c.state == .closing(.discarding(.init(until: bound.until, remaining: 40))))
        c.setRoom(nil)
        let answer = c.readOutbound()
        #expect(answer.hasPrefix("HTTP/1.1 413 Content Too Large\r\n"))
        #expect(answer.contains("Connection: close\r\n"))
        #expect(c.wire.outboundShut)
        #expect(c.state == .lingering(.init(until: c.clock.now + .seconds(1), remaining: 100)))
        c.writeInbound([UInt8](repeating: 0, count: 100))
        #expect(c.state == .closed)
        #expect(c.wire.closed)
    }

    /// A head not complete within the header timeout: 408 and close, by the test's clock.
    @Test func aSlowHeadIsAnswered408() throws {
        let c = try EmbeddedConnection(routes: Self.routes)
        c.writeInbound("GET /hello HTTP/1.1\r\n")
        c.advanceTime(by: .seconds(9))
        #expect(c.readOutbound().isEmpty)
        c.advanceTime(by: .seconds(1))
        let answer = c.readOutbound()
        #expect(answer.hasPrefix("HTTP/1.1 408 Request Timeout\r\n"))
        #expect(answer.contains("Connection: close\r\n"))
        #expect(c.wire.outboundShut)
        c.advanceTime(by: .seconds(1))  // the lingering bound
        #expect(c.wire.closed)
    }

    /// A connection that never sends a byte is closed at the header timeout, silently, and
    /// counted (issue 33's silent-connection timeout).
    @Test func aSilentConnectionIsClosedAndCounted() throws {
        let c = try EmbeddedConnection(routes: Self.routes)
        c.advanceTime(by: .seconds(10))
        #expect(c.state == .closed)
        #expect(c.wire.closed)
        #expect(c.readOutbound().isEmpty)
        let closedSilent = c.shared.closedSilent.load(ordering: .relaxed)
        #expect(closedSilent == 1)
    }

    /// Keep-alive: idle for the idle timeout, then closed without an answer.
    @Test func anIdleConnectionIsClosedAfterTheIdleTimeout() throws {
        let c = try EmbeddedConnection(routes: Self.routes)
        c.writeInbound(get("/hello"))
        _ = c.readOutbound()
        let answered = c.clock.now
        c.advanceTime(by: .seconds(59))
        #expect(c.state == .idle(since: answered))
        c.advanceTime(by: .seconds(1))
        #expect(c.wire.closed)
        #expect(c.readOutbound().isEmpty)
        let closedSilent = c.shared.closedSilent.load(ordering: .relaxed)
        #expect(closedSilent == 0)
    }

    /// A streamed body: `writing` until the producer returns, then the next request.
    @Test func aStreamedResponseIsWritingUntilItsProducerEnds() throws {
        let resume = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let c = try EmbeddedConnection(routes: { r in
            r.add(.GET, "/stream") { _ in
                HTTPResponse(headers: ["Content-Type": "text/plain"], body: .stream(length: nil) { w in
                    try await w.write("first;")
                    await withCheckedContinuation { continuation in resume.withLock { $0 = continuation } }
                    try await w.write("second")
                })
            }
            Self.routes(&r)
        })
        c.writeInbound(get("/stream") + get("/hello"))
        c.run()
        #expect(c.state == .writing(then: .keepAlive))
        let head = c.readOutbound()
        #expect(head.contains("Transfer-Encoding: chunked\r\n"))
        #expect(head.hasSuffix("6\r\nfirst;\r\n"))
        resume.withLock { $0?.resume() }
        c.run()
        let rest = c.readOutbound()
        #expect(rest.hasPrefix("6\r\nsecond\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"))
        #expect(rest.hasSuffix("hello"))
        #expect(c.state == .idle(since: c.clock.now))
    }

    /// Draining: the request in flight is answered with `Connection: close`, then the
    /// connection lingers and closes.
    @Test func drainingAnswersTheRequestInFlightWithClose() throws {
        let release = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let c = try EmbeddedConnection(routes: { r in
            r.add(.GET, "/work") { _ in
                await withCheckedContinuation { continuation in release.withLock { $0 = continuation } }
                return HTTPResponse(text: "done")
            }
        })
        c.writeInbound(get("/work"))
        c.run()
        #expect(c.state == .handling)
        c.connection.beginDraining()
        release.withLock { $0?.resume() }
        c.run()
        let answer = c.readOutbound()
        #expect(answer.contains("Connection: close\r\n"))
        #expect(answer.hasSuffix("done"))
        #expect(c.wire.outboundShut)
        #expect(c.state == .lingering(.init(until: c.clock.now + .seconds(1), remaining: HTTPServerConfiguration().discardLimit)))
    }

    /// The client half-closes after a pipelined request: its answer is still sent, then
    /// the connection closes (no lingering: the client has nothing more to send).
    @Test func aHalfCloseAfterARequestStillGetsItsAnswer() throws {
        let c = try EmbeddedConnection(routes: Self.routes)
        c.wire.room = 10
        c.writeInbound(get("/hello"))
        c.closeInbound()
        #expect(c.state == .closing(.abort))
        c.setRoom(nil)
        #expect(c.readOutbound().hasSuffix("hello"))
        #expect(c.wire.closed)
        #expect(!c.wire.outboundShut)
    }

    /// A client that leaves while its handler runs cancels the handler.
    @Test func aClientLeavingCancelsItsHandler() throws {
        let cancelled = Atomic<Bool>(false)
        let c = try EmbeddedConnection(routes: { r in
            r.add(.GET, "/wait") { _ in
                let gate = Flag()  // fired only by cancellation
                await withTaskCancellationHandler {
                    await gate.wait()
                } onCancel: {
                    cancelled.store(true, ordering: .relaxed)
                    gate.fire()
                }
                return HTTPResponse()
            }
        })
        c.writeInbound(get("/wait"))
        c.run()
        #expect(c.state == .handling)
        c.closeInbound()
        #expect(c.state == .closed)
        let handlerCancelled = cancelled.load(ordering: .relaxed)
        #expect(handlerCancelled)
    }
}
