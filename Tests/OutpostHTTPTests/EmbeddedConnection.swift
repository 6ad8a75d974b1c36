// A connection of the real engine with no socket under it, as swift-nio's EmbeddedChannel
// runs a handler: the test writes the client's bytes in, reads the server's bytes out, moves
// a clock of its own and runs the loop's queued work by hand.
import Glibc
import Testing
@testable import OutpostHTTP

/// One connection on a `LoopRunner` that has no listener and never waits in epoll: its
/// transport is a pair of byte buffers, its clock the test's.
final class EmbeddedConnection {
    /// The client's side of the wire.
    final class Wire {
        /// Bytes sent by the client and not yet read by the server.
        var inbound: [UInt8] = []
        /// The client shut its sending side.
        var inboundClosed = false
        /// Bytes the server wrote and the client has not read.
        var outbound: [UInt8] = []
        /// How many more bytes the server may write before the socket is full (nil: no limit).
        var room: Int?
        var interest: ConnectionInterest = []
        /// The server shut its sending side (FIN).
        var outboundShut = false
        var closed = false
    }

    struct Transport: ConnectionTransport {
        let wire: Wire

        func read(into buffer: UnsafeMutableRawBufferPointer) -> TransportResult {
            if wire.inbound.isEmpty { return wire.inboundClosed ? .done(0) : .wouldBlock }
            let n = min(buffer.count, wire.inbound.count)
            buffer.copyBytes(from: wire.inbound[0..<n])
            wire.inbound.removeFirst(n)
            return .done(n)
        }

        func write(_ bytes: UnsafeRawBufferPointer) -> TransportResult {
            if wire.closed || wire.outboundShut { return .failed }
            let n = min(bytes.count, wire.room ?? Int.max)
            if n == 0 && bytes.count > 0 { return .wouldBlock }
            wire.outbound += bytes[0..<n]
            wire.room = wire.room.map { $0 - n }
            return .done(n)
        }

        func send(file: Int32, offset: Int64, count: Int) -> TransportResult {
            var chunk = [UInt8](repeating: 0, count: min(count, wire.room ?? count))
            if chunk.isEmpty { return count == 0 ? .done(0) : .wouldBlock }
            let n = chunk.withUnsafeMutableBytes { pread(file, $0.baseAddress, $0.count, off_t(offset)) }
            guard n >= 0 else { return .failed }
            return chunk.withUnsafeBytes { write(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }

        func watch(_ interest: ConnectionInterest) { wire.interest = interest }
        func shutdownWrite() { wire.outboundShut = true }
        func close() { wire.closed = true }
    }

    /// The test's clock.
    final class Clock {
        var now = Instant(nanoseconds: 1_000_000_000)
    }

    let wire = Wire()
    let clock = Clock()
    let shared: ServerShared
    let loop: EventLoop
    let runner: LoopRunner
    let connection: Connection

    init(configure: (inout HTTPServerConfiguration) -> Void = { _ in }, routes: (inout Router) -> Void) throws {
        var c = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        c.headerTimeout = .seconds(10)
        c.idleTimeout = .seconds(60)
        c.bodyTimeout = .seconds(10)
        c.discardTimeout = .seconds(1)
        configure(&c)
        var router = Router()
        routes(&router)
        shared = ServerShared(configuration: c, router: router)
        loop = try EventLoop()
        let clock = self.clock
        runner = LoopRunner(loop: loop, listenFD: -1, shared: shared, clock: { clock.now })
        connection = runner.adopt(Transport(wire: wire), id: runner.nextConnectionID(), remoteAddress: "192.0.2.1:5000")
        wire.interest = connection.interest
    }

    deinit {
        if !connection.isClosed { connection.closeNow() }
        loop.close()
    }

    var state: ConnectionStateMachine.State { connection.machine.state }

    /// The client sends `bytes`; the server reads them and answers what it can without
    /// running a task (inline handlers answer; async ones wait for `run()`).
    func writeInbound(_ bytes: [UInt8]) {
        wire.inbound += bytes
        settle(runningTasks: false)
    }

    func writeInbound(_ text: String) { writeInbound(Array(text.utf8)) }

    /// The client shuts its sending side.
    func closeInbound() {
        wire.inboundClosed = true
        settle(runningTasks: false)
    }

    /// What the server wrote since the last call, as text (the client reads it).
    func readOutbound() -> String {
        let text = String(decoding: wire.outbound, as: UTF8.self)
        wire.outbound = []
        return text
    }

    /// The socket's send buffer takes `bytes` more (nil: any amount).
    func setRoom(_ bytes: Int?) {
        wire.room = bytes
        settle(runningTasks: false)
    }

    /// Moves the clock on and fires what is due.
    func advanceTime(by duration: Duration) {
        clock.now = clock.now + duration
        runner.readClock()
        runner.fireTimers()
        settle(runningTasks: false)
    }

    /// Runs the loop's queued jobs (handlers, checks, producers) and messages, and delivers
    /// the socket's readiness, until nothing moves, as the loop's rounds would.
    func run() {
        settle(runningTasks: true)
    }

    private func settle(runningTasks: Bool) {
        for _ in 0..<10_000 {
            if connection.isClosed { return }
            runner.readClock()
            var ready: ConnectionInterest = []
            let readable = !wire.inbound.isEmpty || wire.inboundClosed
            if wire.interest.contains(.read) && readable { ready.insert(.read) }
            if wire.interest.contains(.hangUp) && wire.inboundClosed && wire.inbound.isEmpty { ready.insert(.hangUp) }
            if wire.interest.contains(.write) && (wire.room ?? 1) > 0 { ready.insert(.write) }
            let work = runningTasks && loop.hasWork
            if ready.isEmpty && !work { return }
            if !ready.isEmpty { runner.handle(ready, error: false, for: connection.id) }
            if work { runner.runQueuedWork() }
        }
        Issue.record("the embedded connection never settled")
    }
}

