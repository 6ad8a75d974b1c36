import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif

/// One TCP connection to the server under test, driven byte by byte: the checks decide
/// exactly what is sent and when (pipelined requests, partial heads, slow bodies,
/// malformed lines) and read responses, interim ones included, or the close.
///
/// The socket is blocking in the sense that each call waits (with `poll(2)` and a
/// deadline) until it is done; the waiting happens on the connection's own dispatch
/// queue, never on Swift's cooperative pool, so an in-process server sharing the pool
/// with the suite keeps its threads.
public final class RawConnection: Sendable {
    private struct State {
        /// Bytes received and not yet parsed.
        var buffer: [UInt8] = []
        /// The server closed its side (EOF or reset).
        var peerClosed = false
    }

    /// Where it is connected.
    public let endpoint: Endpoint
    /// The socket. It stays open (so its number is never reused under a call in flight)
    /// until the connection is released; `close()` only shuts it down.
    private let fd: Int32
    private let queue: DispatchQueue
    private let state: Mutex<State>

    private init(endpoint: Endpoint, fd: Int32, queue: DispatchQueue) {
        self.endpoint = endpoint
        self.fd = fd
        self.queue = queue
        self.state = Mutex(State())
    }

    deinit {
        _ = systemClose(fd)
    }

    /// Connects to `endpoint` within `timeout`.
    public static func open(_ endpoint: Endpoint, timeout: Duration = .seconds(10)) async throws -> RawConnection {
        let queue = DispatchQueue(label: "outpost-conformance.connection")
        let fd = try await run(on: queue) { try connect(endpoint, timeout: timeout) }
        return RawConnection(endpoint: endpoint, fd: fd, queue: queue)
    }

    /// Connects to `endpoint` and sends `request` in one step on the connection's queue, so
    /// no wait for the caller's executor falls between the two: a server may close a new
    /// connection that stays silent for its header timeout (nginx's
    /// `client_header_timeout`; the conformance runs set it to one second).
    public static func open(_ endpoint: Endpoint, sending request: [UInt8], timeout: Duration = .seconds(10),
                            sendTimeout: Duration = .seconds(30)) async throws -> RawConnection {
        let queue = DispatchQueue(label: "outpost-conformance.connection")
        let fd = try await run(on: queue) { () throws -> Int32 in
            let fd = try connect(endpoint, timeout: timeout)
            do {
                try sendBlocking(fd, request, timeout: sendTimeout)
            } catch {
                _ = systemClose(fd)
                throw error
            }
            return fd
        }
        return RawConnection(endpoint: endpoint, fd: fd, queue: queue)
    }

    /// Connects, sends `request` and reads its answer in one block on the connection's
    /// queue: the connection and the time the request was sent in full come back as soon
    /// as it is sent, and the answer, with the time it was read in full, through `answer`.
    /// No step waits for the caller's executor, so a check that times the server counts
    /// neither the wait of its task for a busy cooperative pool before the read starts
    /// nor the one after it ends.
    public static func openTimed(_ endpoint: Endpoint, sending request: [UInt8], isHead: Bool = false,
                                 timeout: Duration = .seconds(10), sendTimeout: Duration = .seconds(30),
                                 responseTimeout: Duration = .seconds(30)) async throws
        -> (connection: RawConnection, sentAt: ContinuousClock.Instant, answer: PendingResponse) {
        let queue = DispatchQueue(label: "outpost-conformance.connection")
        let answer = PendingResponse()
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                let connection: RawConnection
                do {
                    let fd = try connect(endpoint, timeout: timeout)
                    connection = RawConnection(endpoint: endpoint, fd: fd, queue: queue)
                    try sendBlocking(fd, request, timeout: sendTimeout)
                } catch {
                    continuation.resume(throwing: error)
                    return
                }
                continuation.resume(returning: (connection, ContinuousClock.now, answer))
                answer.complete(Result { try connection.readTimedBlocking(isHead: isHead, timeout: responseTimeout) })
            }
        }
    }

    /// An answer being read on a connection's queue; `value` waits for it.
    public final class PendingResponse: Sendable {
        private struct State {
            var result: Result<(RawResponse, ContinuousClock.Instant), any Error>?
            var waiters: [CheckedContinuation<(RawResponse, ContinuousClock.Instant), any Error>] = []
        }
        private let state = Mutex(State())

        /// Whether the answer (or the read's error) is in.
        public var isDone: Bool { state.withLock { $0.result != nil } }

        /// The answer and when it was read in full.
        public var value: (RawResponse, ContinuousClock.Instant) {
            get async throws {
                try await withCheckedThrowingContinuation { continuation in
                    let ready: Result<(RawResponse, ContinuousClock.Instant), any Error>? = state.withLock { state in
                        if let result = state.result { return result }
                        state.waiters.append(continuation)
                        return nil
                    }
                    if let ready { continuation.resume(with: ready) }
                }
            }
        }

        fileprivate func complete(_ result: Result<(RawResponse, ContinuousClock.Instant), any Error>) {
            let waiters = state.withLock { state in
                state.result = result
                defer { state.waiters.removeAll() }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(with: result) }
        }
    }

    // MARK: Sending

    /// Sends `bytes` completely (or throws when the server closed or stopped reading).
    public func send(_ bytes: [UInt8], timeout: Duration = .seconds(30)) async throws {
        try await offload { try self.sendBlocking(bytes, timeout: timeout) }
    }

    /// Sends `bytes` a few at a time, in pieces of 1, 6, 11, 16, 8, ... bytes, pausing 2 ms
    /// after each piece that ends before byte `pausedBytes` until `pausesEnd`: all in one
    /// block on the connection's queue, so the pieces arrive as fast as the client sends
    /// them, never as slowly as a busy pool hands out turns.
    public func sendInPieces(_ bytes: [UInt8], pausedBytes: Int, pausesEnd: ContinuousClock.Instant, timeout: Duration = .seconds(30)) async throws {
        try await offload {
            var offset = 0
            var step = 1
            while offset < bytes.count {
                let n = min(step, bytes.count - offset)
                try self.sendBlocking(Array(bytes[offset..<(offset + n)]), timeout: timeout)
                offset += n
                step = step % 13 + 5
                if offset < pausedBytes && ContinuousClock.now < pausesEnd { usleep(2_000) }
            }
        }
    }

    /// Sends the UTF-8 of `text`.
    public func send(_ text: String, timeout: Duration = .seconds(30)) async throws {
        try await send(Array(text.utf8), timeout: timeout)
    }

    // MARK: Receiving

    /// Reads the next response. Interim `1xx` responses are skipped unless
    /// `includeInterim`. `isHead`: the request was HEAD (no body follows).
    public func response(isHead: Bool = false, includeInterim: Bool = false, timeout: Duration = .seconds(30)) async throws -> RawResponse {
        try await offload {
            try self.withSource(timeout: timeout) { source in
                while true {
                    let response = try ResponseParser.parse(&source, isHead: isHead)
                    if includeInterim || !(100..<200).contains(response.status) || response.status == 101 { return response }
                }
            }
        }
    }

    /// Reads the next final response and when it was read in full (on `queue`).
    private func readTimedBlocking(isHead: Bool, timeout: Duration) throws -> (RawResponse, ContinuousClock.Instant) {
        try withSource(timeout: timeout) { source in
            while true {
                let response = try ResponseParser.parse(&source, isHead: isHead)
                if !(100..<200).contains(response.status) || response.status == 101 { return (response, ContinuousClock.now) }
            }
        }
    }

    /// What `awaitClose` saw.
    public enum CloseObservation: Sendable, Equatable {
        /// The server closed the connection (EOF or reset); `extra` is what came before.
        case closed(extra: [UInt8])
        /// Still open when the time was up; `extra` is what arrived meanwhile.
        case open(extra: [UInt8])
    }

    /// Reads until the server closes the connection or `timeout` passes.
    public func awaitClose(timeout: Duration) async throws -> CloseObservation {
        try await offload {
            try self.withSource(timeout: timeout) { source in
                defer { source.buffer.removeAll() }
                do {
                    while try source.readMore() {}
                } catch let error as ConnectionError where error.timedOut {
                    return .open(extra: source.buffer)
                }
                return .closed(extra: source.buffer)
            }
        }
    }

    /// Shuts the connection down in both directions (the server sees the close; a call
    /// waiting on it returns). Safe from any task, also while another call is waiting.
    public func close() {
        _ = shutdown(fd, Int32(SHUT_RDWR))
    }

    // MARK: Blocking internals (run on `queue`)

    private func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await Self.run(on: queue, body)
    }

    private static func run<T: Sendable>(on queue: DispatchQueue, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    private func sendBlocking(_ bytes: [UInt8], timeout: Duration) throws {
        try Self.sendBlocking(fd, bytes, timeout: timeout)
    }

    private static func sendBlocking(_ fd: Int32, _ bytes: [UInt8], timeout: Duration) throws {
        let deadline = ContinuousClock.now + timeout
        var offset = 0
        while offset < bytes.count {
            try wait(fd, for: Int16(POLLOUT), deadline: deadline, what: "sending \(bytes.count - offset) more bytes")
            let n = bytes.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n < 0 {
                if errno == EAGAIN || errno == EINTR { continue }
                throw ConnectionError("send failed after \(offset) of \(bytes.count) bytes: \(String(cString: strerror(errno)))", closed: true)
            }
            offset += n
        }
    }

    /// The connection's state as a parser input with a deadline, for the duration of `body`.
    private func withSource<T>(timeout: Duration, _ body: (inout SocketSource) throws -> T) throws -> T {
        try state.withLock { state in
            var source = SocketSource(fd: fd, peerClosed: state.peerClosed, deadline: ContinuousClock.now + timeout)
            swap(&source.buffer, &state.buffer)
            defer {
                swap(&source.buffer, &state.buffer)
                state.peerClosed = source.peerClosed
            }
            return try body(&source)
        }
    }

    /// Reads from the socket into `buffer` until a deadline.
    fileprivate struct SocketSource: ResponseSource {
        let fd: Int32
        var buffer: [UInt8] = []
        var peerClosed: Bool
        let deadline: ContinuousClock.Instant

        init(fd: Int32, peerClosed: Bool, deadline: ContinuousClock.Instant) {
            self.fd = fd
            self.peerClosed = peerClosed
            self.deadline = deadline
        }

        /// True when bytes arrived, false at EOF or reset; throws a timeout when nothing
        /// arrives before the deadline.
        mutating func readMore() throws -> Bool {
            if peerClosed { return false }
            while true {
                try RawConnection.wait(fd, for: Int16(POLLIN), deadline: deadline, what: "a response")
                var chunk = [UInt8](repeating: 0, count: 65536)
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n > 0 {
                    buffer.append(contentsOf: chunk[..<n])
                    return true
                }
                if n == 0 {
                    peerClosed = true
                    return false
                }
                if errno == EAGAIN || errno == EINTR { continue }
                // A reset is the server closing without a goodbye; the checks tell the two
                // apart only by what they read before it.
                peerClosed = true
                return false
            }
        }
    }

    fileprivate static func wait(_ fd: Int32, for events: Int16, deadline: ContinuousClock.Instant, what: String) throws {
        while true {
            let remaining = deadline - ContinuousClock.now
            if remaining <= .zero { throw ConnectionError("timed out waiting for \(what)", timedOut: true) }
            let ms = Int32(min(Double(remaining.components.seconds) * 1000 + Double(remaining.components.attoseconds) / 1e15 + 1, 600_000))
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&pfd, 1, ms)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR { throw ConnectionError("poll failed: \(String(cString: strerror(errno)))") }
        }
    }

    private static func connect(_ endpoint: Endpoint, timeout: Duration) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(endpoint.host, String(endpoint.port), &hints, &result)
        guard rc == 0, result != nil else {
            throw ConnectionError("cannot resolve \(endpoint.host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(result) }
        let deadline = ContinuousClock.now + timeout
        var lastError = "no address"
        var info = result
        while let ai = info {
            defer { info = ai.pointee.ai_next }
            let fd = socket(ai.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { lastError = String(cString: strerror(errno)); continue }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) == 0 { return fd }
            guard errno == EINPROGRESS else {
                lastError = String(cString: strerror(errno))
                _ = systemClose(fd)
                continue
            }
            do {
                try wait(fd, for: Int16(POLLOUT), deadline: deadline, what: "the connection to \(endpoint.hostHeader)")
            } catch {
                _ = systemClose(fd)
                throw error
            }
            var soError: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &length)
            if soError == 0 { return fd }
            lastError = String(cString: strerror(soError))
            _ = systemClose(fd)
        }
        throw ConnectionError("cannot connect to \(endpoint.hostHeader): \(lastError)")
    }
}

private func systemClose(_ fd: Int32) -> Int32 {
    Glibc.close(fd)
}
