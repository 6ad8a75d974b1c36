// One client connection: bytes in through the parser, requests to handlers, responses
// out through the output queue. Lives on one loop thread; never shared.
import OutpostCLinux
import Glibc
import OutpostCompression

/// A gzip request body's decompressor (a class so the non-copyable stream can sit in an
/// optional and be mutated in place).
final class GunzipBox {
    var stream: GzipDecompressor
    init(limit: Int) { stream = GzipDecompressor(limit: limit) }
}

/// The request a connection is working on.
final class RequestState {
    enum Phase: Equatable {
        /// The pre-body check runs; the body is not read.
        case check
        /// Reading the body (or waiting for the parser's end of a bodiless request).
        case body
        /// The handler runs.
        case handling
        /// The head was sent; a streamed body is being produced.
        case streaming
    }

    let serial: Int
    let parsed: ParsedRequestHead
    var head: HTTPRequestHead
    let started: Instant
    var phase: Phase = .body
    var route: Route?
    var parameters: [String: String] = [:]
    var bodyLimit = 0
    var wireLimit = 0
    var gunzip: GunzipBox?
    var body: [UInt8] = []
    var wireBodyBytes = 0
    var task: Task<Void, Never>?
    var writer: HTTPBodyWriter?
    /// The handler held the request (`HTTPHold`): answered later by a `.response` message.
    var held: HeldRequest?
    var status = 0
    /// The error the response rendered, for the log.
    var failure: HTTPFailure?
    var bytesOut = 0
    var closeAfter = false

    init(serial: Int, parsed: ParsedRequestHead, head: HTTPRequestHead, started: Instant) {
        self.serial = serial
        self.parsed = parsed
        self.head = head
        self.started = started
    }

    var hasBody: Bool {
        switch parsed.framing {
        case .none: false
        case .length(let n): n > 0
        case .chunked: true
        }
    }
}

private let continueLine = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
/// Output queued beyond this stops the parsing of further pipelined requests until the
/// client reads (back-pressure against a client that sends but does not read).
private let outputHighWater = 1 << 20
/// A streamed body is pulled from its writer while less than this waits for the socket.
private let streamLowWater = 64 * 1024

final class Connection {
    let id: ConnectionID
    let fd: Int32
    let remoteAddress: String
    /// The address the per-address limit counted this connection under (nil: no limit).
    let clientAddress: ClientAddress?
    /// The connection is over the per-address limit: its first request is answered `503`.
    private let overAddressLimit: Bool
    /// unowned(unsafe) is sound here: the runner keeps every connection in its table,
    /// closes and drops them all at the end of `run()` (during which it is alive), and a
    /// connection is only ever used from inside `run()`. It saves a reference-count
    /// round trip on every access in the request path.
    unowned(unsafe) let runner: LoopRunner
    var sm: ConnectionStateMachine
    var scheduledDeadline: Instant?
    private(set) var interest: UInt32
    private(set) var isClosed = false

    private var parser: HTTPRequestParser
    private var input: [UInt8] = []
    private var inputStart = 0
    private var out = OutputQueue()
    private var request: RequestState?
    private var serial = 0
    private var firstByteAt: Instant?
    private var requestBytes = 0
    private var processing = false
    private var writeBlocked = false
    private var peerEOF = false
    /// No further request will be read on this connection.
    private var noMoreRequests = false
    /// When the output drains: half-close, discard input for a bounded time, close.
    private var closeAfterFlush = false
    /// When the output drains: close at once.
    private var abortAfterFlush = false
    private var lingering = false
    private var finishedInPump = false

    init(id: ConnectionID, fd: Int32, remoteAddress: String, clientAddress: ClientAddress?, overAddressLimit: Bool, runner: LoopRunner) {
        self.id = id
        self.fd = fd
        self.remoteAddress = remoteAddress
        self.clientAddress = clientAddress
        self.overAddressLimit = overAddressLimit
        self.runner = runner
        self.sm = ConnectionStateMachine(timeouts: runner.timeouts, now: runner.now)
        self.parser = HTTPRequestParser(limits: runner.parserLimits)
        self.interest = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
    }

    private var now: Instant { runner.now }
    private var configuration: HTTPServerConfiguration { runner.configuration }

    private var isDiscarding: Bool {
        if case .discarding = sm.phase { return true }
        return false
    }

    // MARK: Events from the loop

    func handle(events: UInt32) {
        if events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
            closeNow()
            return
        }
        if events & EPOLLIN.rawValue != 0 {
            onReadable()
        } else if events & EPOLLRDHUP.rawValue != 0 {
            onPeerEOF()
        }
        if isClosed { return }
        if events & EPOLLOUT.rawValue != 0 { writeBlocked = false }
        advance()
    }

    private func onReadable() {
        let capacity = runner.readBuffer.count
        let n = runner.readBuffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, capacity) }
        if n == 0 {
            onPeerEOF()
            return
        }
        if n < 0 {
            if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return }
            closeNow()
            return
        }
        if lingering || isDiscarding {
            if sm.bytesReceived(n, now: now) == .close { closeNow() }
            return
        }
        if noMoreRequests { return }  // closing after the current answer; later requests are dropped
        if request == nil && firstByteAt == nil { firstByteAt = now }
        _ = sm.bytesReceived(n, now: now)
        input.append(contentsOf: runner.readBuffer[0..<n])
    }

    /// The client shut down its side (read returned 0 or EPOLLRDHUP).
    private func onPeerEOF() {
        peerEOF = true
        if lingering || isDiscarding || request != nil || out.isEmpty {
            // A handler still running for a client that left is cancelled (closeNow
            // cancels its task); a half-sent request can never complete.
            closeNow()
            return
        }
        // Answers are still queued: finish writing them, then close.
        noMoreRequests = true
        abortAfterFlush = true
    }

    func timerFired() {
        switch sm.timerFired(now: now) {
        case .none:
            break
        case .close:
            if sm.silent { runner.shared.closedSilent.add(1, ordering: .relaxed) }
            closeNow()
            return
        case .timeout:
            // PROTOCOL.md section 2: headers not complete in time, or a body too slow.
            respondAndClose(.requestTimeout())
        }
        advance()
    }

    func checkFinished(serial: Int, error: HTTPError?) {
        guard let r = request, r.serial == serial, r.phase == .check else { return }
        r.task = nil
        if let error {
            respondEarly(error, r)
        } else {
            beginBody(r)
        }
        advance()
    }

    func streamReady() {
        guard let r = request, r.phase == .streaming else { return }
        advance()
    }

    func beginDraining() {
        if sm.beginDraining() && request == nil && parser.isIdle && inputStart == input.count {
            if out.isEmpty {
                closeNow()
            } else {
                noMoreRequests = true
                closeAfterFlush = true
            }
        }
    }

    // MARK: Driving

    /// Parses what can be parsed, writes what can be written, and repeats while a
    /// finished streamed response lets a buffered pipelined request go on.
    private func advance() {
        repeat {
            finishedInPump = false
            processInput()
            pump()
        } while finishedInPump && !isClosed
        if !isClosed { updateInterest() }
    }

    private func processInput() {
        guard !processing else { return }
        processing = true
        defer { processing = false }
        while !isClosed && !noMoreRequests {
            if let r = request {
                guard r.phase == .body else { break }
            } else {
                if out.pendingBytes > outputHighWater { break }
                if inputStart == input.count && parser.isIdle { break }
            }
            let start = inputStart
            let (event, consumed) = input.withUnsafeBufferPointer { buffer in
                parser.parse(UnsafeBufferPointer(rebasing: buffer[start...]))
            }
            inputStart += consumed
            requestBytes += consumed
            guard let event else { break }
            switch event {
            case .head(let head):
                startRequest(head)
            case .body(let range):
                receiveBody(input[(start + range.lowerBound)..<(start + range.upperBound)])
            case .end:
                endRequest()
            case .error(let error):
                respondAndClose(httpError(for: error))
            }
        }
        if inputStart == input.count {
            input.removeAll(keepingCapacity: input.capacity <= 4096)
            inputStart = 0
        } else if inputStart > 32 * 1024 {
            input.removeFirst(inputStart)
            inputStart = 0
        }
    }

    private func httpError(for error: HTTPParserError) -> HTTPError {
        switch error.kind {
        case .badRequest: .badRequest(error.message)
        case .uriTooLong: .uriTooLong(limit: configuration.maxRequestLineBytes)
        case .headersTooLarge: .headersTooLarge(limit: configuration.maxHeaderBytes)
        case .notImplemented: .notImplemented(error.message)
        case .versionNotSupported: .versionNotSupported()
        }
    }

    // MARK: Requests

    private func startRequest(_ parsed: ParsedRequestHead) {
        serial += 1
        let requestID = parsed.headers["X-Request-ID"].flatMap { isValidRequestID($0) ? $0 : nil } ?? runner.requestIDs.next()
        let target = originPathAndQuery(parsed.target)
        let head = HTTPRequestHead(
            method: HTTPMethod(rawValue: parsed.method), target: parsed.target, path: target?.path ?? parsed.target,
            query: target?.query.map(parseQuery) ?? [], version: parsed.version, headers: parsed.headers,
            requestID: requestID, remoteAddress: remoteAddress)
        let r = RequestState(serial: serial, parsed: parsed, head: head, started: firstByteAt ?? now)
        request = r
        sm.headReceived(now: now)
        if overAddressLimit {
            // As nginx's limit_conn answers: 503 once the head is read, then close.
            respondAndClose(.unavailable(retryAfterSeconds: 1, "too many connections from this address; retry later"))
            return
        }

        guard let target else {
            respondEarly(parsed.target == "*" ? .notFound() : .badRequest("unsupported request target form"), r)
            return
        }
        let route: Route
        switch runner.shared.router.match(method: head.method, path: target.path) {
        case .failed(let error):
            respondEarly(error, r)
            return
        case .found(let found, let parameters):
            route = found
            r.route = found
            r.parameters = parameters
        }

        // PROTOCOL.md section 2: gzip request bodies are decompressed; other codings are 415.
        var gzip = false
        if r.hasBody {
            let codings = parsed.headers.tokens(name: "Content-Encoding").filter { !HTTPHeaders.equalsIgnoringCase($0, "identity") }
            if codings.count == 1 && (HTTPHeaders.equalsIgnoringCase(codings[0], "gzip") || HTTPHeaders.equalsIgnoringCase(codings[0], "x-gzip")) {
                gzip = true
            } else if !codings.isEmpty {
                respondEarly(.unsupportedMediaType("unsupported Content-Encoding; only gzip is accepted"), r)
                return
            }
        }
        let limit = route.bodyLimit ?? configuration.defaultBodyLimit
        r.bodyLimit = limit
        // The limit counts decompressed bytes; compressed input may exceed it by at most
        // deflate's worst-case expansion of incompressible data (about 0.03% plus headers).
        r.wireLimit = gzip ? limit + limit / 1024 + 1024 : limit
        if case .length(let length) = parsed.framing, length > r.wireLimit {
            // Decided from Content-Length before reading a byte of the body.
            respondEarly(.payloadTooLarge(limit: limit), r)
            return
        }
        if gzip { r.gunzip = GunzipBox(limit: limit) }

        if let check = route.preBody {
            r.phase = .check
            let loop = runner.loop, id = self.id, serial = r.serial
            let head = r.head, parameters = r.parameters
            r.task = Task(executorPreference: runner.loop) {
                var failure: HTTPError?
                do {
                    try await check(head, parameters)
                } catch {
                    if Task.isCancelled { return }
                    failure = (error as? HTTPError) ?? .internalError()
                }
                loop.post(.checkDone(id, serial: serial, error: failure))
            }
            return
        }
        beginBody(r)
    }

    /// The route is known and its checks passed: invite the body (RFC 9110 section
    /// 10.1.1: `100 Continue` only now, so a refused client never sends it).
    private func beginBody(_ r: RequestState) {
        r.phase = .body
        if r.hasBody {
            if r.parsed.expectContinue { out.append(continueLine) }
            sm.bodyStarted(now: now)
        }
    }

    private func receiveBody(_ bytes: ArraySlice<UInt8>) {
        guard let r = request, r.phase == .body else { return }
        sm.bodyReceived(bytes.count, now: now)
        r.wireBodyBytes += bytes.count
        if r.wireBodyBytes > r.wireLimit {
            // A chunked (or gzip) body passed the limit: answer now, stop reading it.
            respondEarly(.payloadTooLarge(limit: r.bodyLimit), r)
            return
        }
        if let gunzip = r.gunzip {
            do {
                r.body += try gunzip.stream.decompress(bytes)
            } catch .limitExceeded {
                respondEarly(.payloadTooLarge(limit: r.bodyLimit), r)
            } catch {
                respondEarly(.badRequest("request body is not valid gzip"), r)
            }
        } else {
            r.body.append(contentsOf: bytes)
        }
    }

    private func endRequest() {
        guard let r = request, r.phase == .body else { return }
        if let gunzip = r.gunzip {
            r.gunzip = nil
            do {
                try gunzip.stream.finish()
            } catch {
                // The body was read whole, so the connection can go on.
                respond(.badRequest("request body is not valid gzip"), r)
                return
            }
        }
        dispatch(r)
    }

    private func policy(for r: RequestState) -> ResponsePolicy {
        ResponsePolicy(
            isHead: r.parsed.method == "HEAD", version: r.parsed.version,
            acceptsGzip: acceptsGzip(r.parsed.headers),
            compressionThreshold: configuration.compressionThreshold,
            compressionLevel: configuration.compressionLevel,
            streamHighWater: configuration.streamHighWater)
    }

    /// Any error becomes a response through `HTTPError.response`, the one renderer.
    private static func errorResponse(_ error: Error) -> HTTPResponse {
        ((error as? HTTPError) ?? .internalError()).response
    }

    private func dispatch(_ r: RequestState) {
        guard let route = r.route else { return }
        r.phase = .handling
        sm.requestReceived()
        let request = HTTPRequest(head: r.head, body: r.body, pathParameters: r.parameters, routePattern: route.pattern)
        r.body = []
        let policy = policy(for: r)
        let loop = runner.loop, id = self.id, serial = r.serial
        let notify: @Sendable () -> Void = { loop.post(.streamReady(id)) }
        switch route.handler {
        case .inline(let handler):
            let response: HTTPResponse
            do {
                response = try handler(request)
            } catch {
                response = Connection.errorResponse(error)
            }
            let (prepared, producer) = policy.prepare(response, notify: notify)
            if let producer, case .stream(let writer?) = prepared.body {
                r.task = Task(executorPreference: runner.loop) { await Connection.produce(producer, writer) }
            }
            queueResponse(serial: serial, prepared)
        case .async(let handler):
            r.task = Task(executorPreference: runner.loop) {
                let response: HTTPResponse
                do {
                    response = try await handler(request)
                } catch {
                    // Cancelled because the client left or the server stopped: nobody to answer.
                    if Task.isCancelled { return }
                    response = Connection.errorResponse(error)
                }
                let (prepared, producer) = policy.prepare(response, notify: notify)
                loop.post(.response(id, serial: serial, prepared))
                if let producer, case .stream(let writer?) = prepared.body {
                    await Connection.produce(producer, writer)
                }
            }
        }
    }

    private static func produce(_ producer: HTTPBodyProducer, _ writer: HTTPBodyWriter) async {
        do {
            try await producer(writer)
            try writer.finish()
        } catch {
            writer.abort()
        }
    }

    // MARK: Responses

    /// Answers the current request with an error through the normal path (the request
    /// was read whole, keep-alive is honoured).
    private func respond(_ error: HTTPError, _ r: RequestState) {
        r.phase = .handling
        let (prepared, _) = policy(for: r).prepare(error.response, notify: {})
        queueResponse(serial: r.serial, prepared)
    }

    /// Answers before the body was read. Without a body the connection goes on; with one,
    /// the rest of the body is discarded (bounded) and the connection closed, because
    /// the client may or may not still send it (PROTOCOL.md section 2).
    private func respondEarly(_ error: HTTPError, _ r: RequestState) {
        // A malformed request (400) closes the connection whatever its framing: the
        // client is confused, and nothing it sends next can be trusted.
        if !r.hasBody && r.phase != .handling && error.status != .badRequest {
            // Consume the parser's end of this bodiless request so the next one parses cleanly.
            let (event, _) = parser.parse(UnsafeBufferPointer(start: nil, count: 0))
            if case .end = event {
                respond(error, r)
                return
            }
        }
        respondAndClose(error)
    }

    /// Answers with `Connection: close`, then discards input for a bounded time and closes.
    private func respondAndClose(_ error: HTTPError) {
        let r = request
        r?.task?.cancel()
        r?.writer?.fail()
        r?.held?.connectionEnded()
        let isHead = r?.parsed.method == "HEAD"
        let policy = ResponsePolicy(
            isHead: isHead, version: .http1_1, acceptsGzip: false, compressionThreshold: Int.max,
            compressionLevel: 1, streamHighWater: 0)
        let (prepared, _) = policy.prepare(error.response, notify: {})
        let requestID = r?.head.requestID ?? runner.requestIDs.next()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        encodeHead(
            status: prepared.status, headers: Connection.withAnswerHeaders(prepared.headers, of: r?.route), framing: prepared.framing, requestID: requestID,
            date: runner.dateCache.current(), connection: .close, into: &bytes)
        if case .bytes(let body) = prepared.body { bytes += body }
        out.append(bytes)
        if runner.hasCompletionHook {
            let log = HTTPRequestLog(
                method: r.map { HTTPMethod(rawValue: $0.parsed.method) }, route: r?.route?.pattern,
                status: error.status.code, duration: .zero, requestID: requestID, bytesIn: requestBytes,
                bytesOut: bytes.count, remoteAddress: remoteAddress, failure: prepared.failure)
            out.appendMarker(log, started: r?.started ?? firstByteAt ?? now)
        }
        request = nil
        noMoreRequests = true
        closeAfterFlush = true
        input = []
        inputStart = 0
        sm.startDiscarding(now: now)
    }

    /// A response's fields with the route's `answerHeaders` added (those the response
    /// already has are left as the response set them).
    private static func withAnswerHeaders(_ headers: HTTPHeaders, of route: Route?) -> HTTPHeaders {
        guard let route, !route.answerHeaders.isEmpty else { return headers }
        var out = headers
        for (name, value) in route.answerHeaders where !out.contains(name: name) { out.add(name: name, value: value) }
        return out
    }

    /// A handler task's response arrived.
    func deliver(serial: Int, _ prepared: PreparedResponse) {
        queueResponse(serial: serial, prepared)
        advance()
    }

    /// Queues a prepared response for the current request.
    private func queueResponse(serial: Int, _ prepared: PreparedResponse) {
        guard let r = request, r.serial == serial, r.phase == .handling else {
            prepared.release()
            return
        }
        if case .held(let hold) = prepared.body {
            // Nothing to send yet: the handler's keeper answers with a `.response` of this serial.
            let held = HeldRequest(loop: runner.loop, connection: id, serial: serial, policy: policy(for: r), hold: hold)
            r.held = held
            held.started()
            return
        }
        r.status = prepared.status.code
        r.failure = prepared.failure
        let close = !r.parsed.keepAlive || sm.draining || prepared.wantsClose || prepared.framing == .closeDelimited
        let connection: ConnectionHeader = close ? .close : (r.parsed.version == .http1_0 ? .keepAlive : .none)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(320)
        encodeHead(
            status: prepared.status, headers: Connection.withAnswerHeaders(prepared.headers, of: r.route), framing: prepared.framing, requestID: r.head.requestID,
            date: runner.dateCache.current(), connection: connection, into: &bytes)
        switch prepared.body {
        case .none:
            r.bytesOut += bytes.count
            out.append(bytes)
        case .bytes(let body):
            r.bytesOut += bytes.count + body.count
            if body.count <= 16 * 1024 {
                bytes += body
                out.append(bytes)
            } else {
                out.append(bytes)
                out.append(body)
            }
        case .file(let fileFD, let offset, let length):
            r.bytesOut += bytes.count + Int(length)
            out.append(bytes)
            out.appendFile(fd: fileFD, offset: offset, length: length)
        case .held:
            preconditionFailure("a held response is queued above")
        case .stream(let writer):
            r.bytesOut += bytes.count
            out.append(bytes)
            if let writer {
                r.writer = writer
                r.phase = .streaming
                r.closeAfter = close
                pullStream()
                return
            }
        }
        finishResponse(r, close: close)
    }

    /// Moves a streamed body from its writer to the output queue while there is room.
    private func pullStream() {
        guard let r = request, r.phase == .streaming, let writer = r.writer else { return }
        while out.pendingBytes < streamLowWater {
            let taken = writer.take()
            for chunk in taken.chunks { out.append(chunk) }
            r.bytesOut += taken.bytes
            if taken.aborted {
                // The producer failed mid-body: the client must see a truncated response.
                r.writer = nil
                r.task = nil
                request = nil
                noMoreRequests = true
                abortAfterFlush = true
                return
            }
            if taken.finished {
                r.writer = nil
                finishResponse(r, close: r.closeAfter)
                finishedInPump = true
                return
            }
            if taken.chunks.isEmpty { return }
        }
    }

    /// The current response is completely queued: log it, then keep the connection for
    /// the next request or arrange to close it.
    private func finishResponse(_ r: RequestState, close: Bool) {
        if runner.hasCompletionHook {
            let log = HTTPRequestLog(
                method: HTTPMethod(rawValue: r.parsed.method), route: r.route?.pattern, status: r.status,
                duration: .zero, requestID: r.head.requestID, bytesIn: requestBytes, bytesOut: r.bytesOut,
                remoteAddress: remoteAddress, failure: r.failure)
            out.appendMarker(log, started: r.started)
        }
        r.task = nil
        request = nil
        requestBytes = 0
        firstByteAt = nil
        if close || !sm.responseCompleted(keepAlive: true, now: now) {
            noMoreRequests = true
            closeAfterFlush = true
            input = []
            inputStart = 0
        } else if inputStart < input.count {
            // A pipelined request is already buffered: its header clock starts now.
            firstByteAt = now
            _ = sm.bytesReceived(input.count - inputStart, now: now)
        }
    }

    // MARK: Output

    /// Writes queued output, pulling streamed bodies as room appears.
    private func pump() {
        while !isClosed {
            pullStream()
            if out.isEmpty { break }
            let result = out.flush(
                to: fd,
                progress: { _ in },
                marker: { log, started in
                    var log = log
                    log.duration = Instant.now() - started
                    runner.report(log)
                })
            switch result {
            case .failed:
                closeNow()
                return
            case .wouldBlock:
                writeBlocked = true
                sm.writeStalled(now: now)
                sm.writeProgressed(now: now, drained: false)
                return
            case .drained:
                sm.writeProgressed(now: now, drained: true)
                if request?.phase == .streaming { continue }
            }
            break
        }
        if isClosed || !out.isEmpty { return }
        if abortAfterFlush {
            closeNow()
        } else if closeAfterFlush && !lingering {
            // Lingering close: send FIN, then read and drop what the client still sends
            // (bounded by sm's discard limits) so it reads our answer, not a reset.
            lingering = true
            shutdown(fd, Int32(SHUT_WR))
            input = []
            inputStart = 0
            sm.startDiscarding(now: now)
            if peerEOF { closeNow() }
        } else if sm.draining && request == nil && sm.isIdle && parser.isIdle {
            closeNow()
        }
    }

    private func updateInterest() {
        var events: UInt32 = 0
        if !peerEOF {
            events |= EPOLLRDHUP.rawValue
            let consuming = lingering || isDiscarding || noMoreRequests
                || (request == nil && out.pendingBytes <= outputHighWater)
                || request?.phase == .body
            if consuming || input.count - inputStart < configuration.maxPipelineBufferBytes {
                events |= EPOLLIN.rawValue
            }
        }
        if writeBlocked && !out.isEmpty { events |= EPOLLOUT.rawValue }
        if events != interest {
            interest = events
            runner.modify(fd: fd, events: events, token: id)
        }
    }

    /// Closes at once: cancels a running handler, frees queued files.
    func closeNow() {
        guard !isClosed else { return }
        isClosed = true
        if let r = request {
            r.task?.cancel()
            r.writer?.fail()
            r.held?.connectionEnded()
            if runner.hasCompletionHook {
                // The client left (or the server stopped) before the answer was sent.
                var log = HTTPRequestLog(
                    method: HTTPMethod(rawValue: r.parsed.method), route: r.route?.pattern, status: 0,
                    duration: .zero, requestID: r.head.requestID, bytesIn: requestBytes, bytesOut: 0,
                    remoteAddress: remoteAddress)
                log.duration = now - r.started
                runner.report(log)
            }
            request = nil
        }
        out.discard()
        Glibc.close(fd)
        sm.closed()
        runner.removed(self)
    }
}
