// One client connection: bytes in through the parser, requests to handlers, responses
// out through the output queue. What it is doing is one value, its
// `ConnectionStateMachine`; this class interprets that machine's actions on a transport
// (its socket, or a test's buffers). Lives on one loop thread; never shared.
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
    let serial: Int
    let parsed: ParsedRequestHead
    var head: HTTPRequestHead
    let started: Instant
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
/// A streamed body is pulled from its writer while less than this waits for the socket.
private let streamLowWater = 64 * 1024

final class Connection {
    let id: ConnectionID
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
    /// What the connection is doing: every decision about its state is made there.
    private(set) var machine: ConnectionStateMachine
    var scheduledDeadline: Instant?
    private(set) var interest: ConnectionInterest
    private var transport: any ConnectionTransport

    private var parser: HTTPRequestParser
    private var input: [UInt8] = []
    private var inputStart = 0
    private var out = OutputQueue()
    /// The request being answered, from its head until its response is completely queued.
    private var request: RequestState?
    private var serial = 0
    private var firstByteAt: Instant?
    private var requestBytes = 0

    init(id: ConnectionID, transport: any ConnectionTransport, remoteAddress: String, clientAddress: ClientAddress?, overAddressLimit: Bool, runner: LoopRunner) {
        self.id = id
        self.transport = transport
        self.remoteAddress = remoteAddress
        self.clientAddress = clientAddress
        self.overAddressLimit = overAddressLimit
        self.runner = runner
        self.machine = ConnectionStateMachine(timeouts: runner.timeouts, now: runner.now)
        self.parser = HTTPRequestParser(limits: runner.parserLimits)
        self.interest = machine.interest(buffered: 0, outputPending: 0, maxBuffered: runner.configuration.maxPipelineBufferBytes)
    }

    private var now: Instant { runner.now }
    private var configuration: HTTPServerConfiguration { runner.configuration }
    var isClosed: Bool { machine.isClosed }

    // MARK: The machine

    /// Applies `event` to the machine and carries out its action.
    private func apply(_ event: ConnectionStateMachine.Event) {
        perform(machine.on(event, now: now))
    }

    private func perform(_ action: ConnectionStateMachine.Action) {
        switch action {
        case .none:
            break
        case .discardInput:
            input = []
            inputStart = 0
        case .answerTimeout:
            // docs/protocol.md section 2: headers not complete in time, or a body too slow.
            queueClosingAnswer(.requestTimeout())
            input = []
            inputStart = 0
        case .shutdownWrite:
            transport.shutdownWrite()
            input = []
            inputStart = 0
        case .close:
            release()
        case .closeSilent:
            runner.shared.closedSilent.add(1, ordering: .relaxed)
            release()
        }
    }

    // MARK: Events from the loop

    func handle(_ ready: ConnectionInterest, error: Bool) {
        if error {
            apply(.abandon)
            return
        }
        if ready.contains(.read) {
            onReadable()
        } else if ready.contains(.hangUp) {
            apply(.peerClosed(outputPending: !out.isEmpty))
        }
        if isClosed { return }
        advance()
    }

    private func onReadable() {
        let capacity = runner.readBuffer.count
        let result = runner.readBuffer.withUnsafeMutableBytes { transport.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<capacity])) }
        switch result {
        case .wouldBlock:
            return
        case .failed:
            apply(.abandon)
        case .done(0):
            apply(.peerClosed(outputPending: !out.isEmpty))
        case .done(let n):
            let action = machine.on(.received(n), now: now)
            guard action == .none else {
                // Not a request now (the connection is closing): dropped.
                perform(action)
                return
            }
            if request == nil && firstByteAt == nil { firstByteAt = now }
            input.append(contentsOf: runner.readBuffer[0..<n])
        }
    }

    func timerFired() {
        apply(.timer)
        if !isClosed { advance() }
    }

    func checkFinished(serial: Int, error: HTTPError?) {
        guard let r = request, r.serial == serial, machine.state == .checking else { return }
        r.task = nil
        if let error {
            respondEarly(error, r)
        } else {
            beginBody(r)
        }
        advance()
    }

    func streamReady() {
        guard case .writing = machine.state else { return }
        advance()
    }

    func beginDraining() {
        apply(.drain(outputPending: !out.isEmpty))
    }

    /// Closes at once (the server stops).
    func closeNow() {
        apply(.abandon)
    }

    // MARK: Driving

    /// Parses what can be parsed, writes what can be written, and repeats while a
    /// finished streamed response lets a buffered pipelined request go on.
    private func advance() {
        while !isClosed {
            processInput()
            guard pump() else { break }
        }
        if !isClosed { updateInterest() }
    }

    private func processInput() {
        while !isClosed && machine.mayParse(outputPending: out.pendingBytes) {
            // Between requests with nothing buffered there is nothing to parse; a request's
            // parser may still owe its end without a byte more.
            if request == nil && inputStart == input.count && parser.isIdle { break }
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
        apply(.headReceived)
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

        // docs/protocol.md section 2: gzip request bodies are decompressed; other codings are 415.
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
        if r.hasBody && r.parsed.expectContinue { out.append(continueLine) }
        apply(.bodyStarted)
    }

    /// The most a request body's buffer is sized ahead of its bytes (`receiveBody`).
    static let bodyReserveCap = 1 << 20

    private func receiveBody(_ bytes: ArraySlice<UInt8>) {
        guard let r = request, case .readingBody = machine.state else { return }
        apply(.bodyReceived(bytes.count))
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
            if r.body.capacity == 0, case .length(let length) = r.parsed.framing {
                // The length is within the route's limit (checked before the body): with its
                // first bytes, the body gets one buffer of its size instead of growing by
                // doubling, which copied and faulted in about twice every media chunk. At
                // most 1 MiB is asked for ahead of the bytes; a larger body grows from there.
                r.body.reserveCapacity(min(length, Connection.bodyReserveCap))
            }
            r.body.append(contentsOf: bytes)
        }
    }

    private func endRequest() {
        guard let r = request, case .readingBody = machine.state else { return }
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
        apply(.requestReceived)
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
        apply(.requestReceived)
        let (prepared, _) = policy(for: r).prepare(error.response, notify: {})
        queueResponse(serial: r.serial, prepared)
    }

    /// Answers before the body was read. Without a body the connection goes on; with one,
    /// the rest of the body is discarded (bounded) and the connection closed, because
    /// the client may or may not still send it (docs/protocol.md section 2).
    private func respondEarly(_ error: HTTPError, _ r: RequestState) {
        // A malformed request (400) closes the connection whatever its framing: the
        // client is confused, and nothing it sends next can be trusted.
        if !r.hasBody && error.status != .badRequest {
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
        queueClosingAnswer(error)
        apply(.answeredEarly)
    }

    /// Queues `error` with `Connection: close` in place of whatever the current request
    /// would have been answered with.
    private func queueClosingAnswer(_ error: HTTPError) {
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
        guard let r = request, r.serial == serial, machine.state == .handling else {
            prepared.release()
            return
        }
        if case .held(let hold) = prepared.body {
            // Nothing to send yet: the handler's keeper answers with a `.response` of this serial.
            // The handler's task posted this as its last act: nothing is left to cancel, and
            // a finished task kept referenced would keep its memory while the request waits.
            let held = HeldRequest(loop: runner.loop, connection: id, serial: serial, policy: policy(for: r), gone: hold.gone)
            r.task = nil
            r.held = held
            hold.start(held)
            return
        }
        r.status = prepared.status.code
        r.failure = prepared.failure
        let close = !r.parsed.keepAlive || machine.draining || prepared.wantsClose || prepared.framing == .closeDelimited
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
                apply(.streamStarted(close: close))
                _ = pullStream()
                return
            }
        }
        finishResponse(r)
        apply(.responseQueued(close: close, buffered: inputStart < input.count))
    }

    /// Moves a streamed body from its writer to the output queue while there is room.
    /// Returns true when the body ended (the connection may go on to a next request).
    private func pullStream() -> Bool {
        guard case .writing = machine.state, let r = request, let writer = r.writer else { return false }
        while out.pendingBytes < streamLowWater {
            let taken = writer.take()
            for chunk in taken.chunks { out.append(chunk) }
            r.bytesOut += taken.bytes
            if taken.aborted {
                // The producer failed mid-body: the client must see a truncated response.
                r.writer = nil
                r.task = nil
                request = nil
                apply(.streamFailed)
                return false
            }
            if taken.finished {
                r.writer = nil
                finishResponse(r)
                apply(.streamFinished(buffered: inputStart < input.count))
                return true
            }
            if taken.chunks.isEmpty { return false }
        }
        return false
    }

    /// The current response is completely queued: log it and forget the request. When
    /// the bytes of a next one are already buffered, its clock starts now.
    private func finishResponse(_ r: RequestState) {
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
        firstByteAt = inputStart < input.count ? now : nil
    }

    // MARK: Output

    /// Writes queued output, pulling streamed bodies as room appears. Returns true when a
    /// streamed response ended meanwhile (a buffered pipelined request may go on).
    private func pump() -> Bool {
        var streamEnded = false
        while !isClosed {
            if pullStream() { streamEnded = true }
            if isClosed || out.isEmpty { break }
            let result = out.flush(
                to: &transport,
                marker: { log, started in
                    var log = log
                    log.duration = runner.clock() - started
                    runner.report(log)
                })
            switch result {
            case .failed:
                apply(.abandon)
                return false
            case .wouldBlock(let progress):
                apply(.writeBlocked(progress: progress))
                return streamEnded
            case .drained:
                if case .writing = machine.state { continue }
            }
            break
        }
        if !isClosed { apply(.outputDrained) }
        return streamEnded && !isClosed
    }

    private func updateInterest() {
        let wanted = machine.interest(buffered: input.count - inputStart, outputPending: out.pendingBytes, maxBuffered: configuration.maxPipelineBufferBytes)
        if wanted != interest {
            interest = wanted
            transport.watch(wanted)
        }
    }

    /// Frees everything once the machine has closed: cancels a running handler, frees
    /// queued files, closes the transport.
    private func release() {
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
        transport.close()
        runner.removed(self)
    }
}
