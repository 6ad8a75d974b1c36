// Value types a handler returns, and the writer streamed bodies are produced through.
import OutpostCompression
import Synchronization

/// Produces a streamed body by writing pieces to the writer; returning ends the body.
public typealias HTTPBodyProducer = @Sendable (HTTPBodyWriter) async throws -> Void

/// How a response's content is produced.
public enum HTTPResponseBody: Sendable {
    /// No content (`Content-Length: 0`, or no field at all for 204/304).
    case empty
    /// Content held in memory. Compressed with gzip when the client allows it, the body is
    /// over the configured threshold (1 KiB) and the content type is textual.
    case bytes([UInt8])
    /// Content written by `producer` after the head is sent. With `length`, the response
    /// carries `Content-Length` and the producer must write exactly that many bytes;
    /// without, it is sent with chunked encoding (and may be gzip-streamed). The producer
    /// runs in the handler's task; `HTTPBodyWriter.write` suspends while too much is
    /// queued on the socket, and throws when the client went away. If the producer throws
    /// after the head was sent, the connection is closed without completing the body so
    /// the client sees a truncated response. Not run for `HEAD`.
    case stream(length: Int?, producer: HTTPBodyProducer)
    /// `length` bytes of the file at `path` from `offset` (nil: to the end), sent with
    /// `sendfile(2)`: never read into memory, never compressed. The engine opens the file
    /// when the handler returns; a file that cannot be opened is a `500`.
    case file(path: String, offset: Int64 = 0, length: Int64? = nil)
    /// No answer yet: the request is held open, without a task, until `HTTPHold`'s keeper
    /// answers it (`HeldRequest`); for long polls. The response's status and headers are
    /// not sent; the answer's are.
    case held(HTTPHold)
}

/// A response: status, headers and body. The engine adds `Date`, `X-Server-Time`,
/// `X-Request-ID`, `X-Content-Type-Options: nosniff`, `Content-Length` or
/// `Transfer-Encoding`, `Connection` and, when it compresses, `Content-Encoding` and
/// `Vary`; values a handler sets for those are replaced.
///
/// ```swift
/// return HTTPResponse(status: .created, json: Array(#"{"ok":true}"#.utf8))
/// return HTTPResponse(body: .file(path: blobPath, offset: 0, length: size))
/// ```
public struct HTTPResponse: Sendable {
    /// The status.
    public var status: HTTPStatus
    /// Header fields to send.
    public var headers: HTTPHeaders
    /// The content.
    public var body: HTTPResponseBody
    /// The error this response renders, when `HTTPError.response` made it: reported in the
    /// request's `HTTPRequestLog`, never sent.
    public var failure: HTTPFailure?

    /// Creates a response.
    public init(status: HTTPStatus = .ok, headers: HTTPHeaders = HTTPHeaders(), body: HTTPResponseBody = .empty) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response: `Content-Type: application/json` and the given encoded bytes.
    public init(status: HTTPStatus = .ok, json bytes: [UInt8], headers: HTTPHeaders = HTTPHeaders()) {
        var headers = headers
        headers.replaceOrAdd(name: "Content-Type", value: "application/json")
        self.init(status: status, headers: headers, body: .bytes(bytes))
    }

    /// A plain-text response (`text/plain; charset=utf-8`).
    public init(status: HTTPStatus = .ok, text: String, headers: HTTPHeaders = HTTPHeaders()) {
        var headers = headers
        headers.replaceOrAdd(name: "Content-Type", value: "text/plain; charset=utf-8")
        self.init(status: status, headers: headers, body: .bytes(Array(text.utf8)))
    }
}

/// The result of a request, reported once its response was written (or the connection
/// ended): for logs and metrics. Delivered on an event-loop thread; the callback must be
/// quick and must not block (hand the record to a queue or update atomics).
public struct HTTPRequestLog: Sendable {
    /// The method, or nil when the request line could not be parsed.
    public var method: HTTPMethod?
    /// The matched route's pattern (`/v1/spaces/{space}/pull`), nil when no route matched.
    public var route: String?
    /// The status sent (0 when the connection ended before a response was sent).
    public var status: Int
    /// From the first byte of the request to the last byte of the response handed to the kernel.
    public var duration: Duration
    /// The request id echoed in `X-Request-ID`.
    public var requestID: String
    /// Bytes of the request read from the socket (head and body as on the wire).
    public var bytesIn: Int
    /// Bytes of the response written to the socket (head and body as on the wire).
    public var bytesOut: Int
    /// The peer address.
    public var remoteAddress: String
    /// The error answered, when the response was an `HTTPError`'s envelope.
    public var failure: HTTPFailure?
}

/// The code and message of an error answer, as `HTTPRequestLog` reports it.
public struct HTTPFailure: Sendable, Equatable {
    /// The envelope's `code`.
    public var code: String
    /// The envelope's `message` as the server keeps it: `HTTPError.kept`, or the message,
    /// with double-quoted client text cut (`HTTPError.withoutQuotedText`).
    public var message: String

    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }
}

/// Errors `HTTPBodyWriter.write` throws.
public enum HTTPBodyWriterError: Error, Sendable, Equatable {
    /// The client went away or the server is closing the connection.
    case connectionClosed
    /// The producer wrote more than the `length` it declared.
    case lengthExceeded(declared: Int)
    /// The producer ended before writing the `length` it declared.
    case lengthShort(declared: Int, written: Int)
}

/// Writes a streamed response body with back-pressure: `write` returns at once while
/// little is queued for the socket and suspends (holding no thread) once more than
/// `highWater` bytes wait, until the connection drains them.
///
/// ```swift
/// HTTPResponse(body: .stream(length: nil) { writer in
///     for page in pages { try await writer.write(page) }
/// })
/// ```
public final class HTTPBodyWriter: Sendable {
    enum Framing: Sendable, Equatable {
        /// RFC 9112 section 7.1 chunks, ended by a last-chunk.
        case chunked
        /// Exactly this many bytes (`Content-Length`).
        case length(Int)
        /// Unframed; the connection's close ends the body (HTTP/1.0 clients).
        case raw
    }

    struct State {
        var chunks: [[UInt8]] = []
        var queuedBytes = 0
        var written = 0
        var finished = false
        var aborted = false
        var failed = false
        var cancelled = false
        /// True while the loop has taken everything and wants a wake-up on the next write.
        var loopWaiting = true
        var waiter: CheckedContinuation<Void, Error>?
    }

    /// What the event loop takes out of the writer.
    struct Taken {
        var chunks: [[UInt8]]
        var bytes: Int
        /// The producer finished and the body's last bytes are in `chunks`.
        var finished: Bool
        /// The producer failed: close the connection after what is queued.
        var aborted: Bool
    }

    private let state = Mutex(State())
    private let compressor: Mutex<GzipCompressor?>
    let framing: Framing
    private let highWater: Int
    private let lowWater: Int
    private let notify: @Sendable () -> Void

    init(framing: Framing, gzip: Bool, level: Int32 = 6, highWater: Int, notify: @escaping @Sendable () -> Void) {
        self.framing = framing
        self.compressor = Mutex(gzip ? GzipCompressor(level: level) : nil)
        self.highWater = highWater
        self.lowWater = highWater / 2
        self.notify = notify
    }

    /// Queues `bytes` for the client. Suspends while more than the high-water mark is
    /// queued; throws `HTTPBodyWriterError.connectionClosed` (or `CancellationError`) when
    /// the client is gone, so a producer stops at once.
    public func write(_ bytes: [UInt8]) async throws {
        if bytes.isEmpty { return }
        try Task.checkCancellation()
        if case .length(let declared) = framing {
            let over = state.withLock { s -> Bool in
                if s.written + bytes.count > declared { return true }
                s.written += bytes.count
                return false
            }
            if over { throw HTTPBodyWriterError.lengthExceeded(declared: declared) }
        } else {
            state.withLock { $0.written += bytes.count }
        }
        let payload = compressor.withLock { c -> [UInt8] in
            if c != nil { return c!.compress(bytes) }
            return bytes
        }
        if payload.isEmpty { return }
        try await enqueue(frame(payload))
    }

    /// Queues the UTF-8 bytes of `text`.
    public func write(_ text: String) async throws {
        try await write(Array(text.utf8))
    }

    /// Sends what the gzip stream holds so far (only meaningful for gzip-streamed bodies:
    /// long-lived streams whose pieces must reach the client before the end).
    public func flush() async throws {
        let payload = compressor.withLock { c -> [UInt8] in c != nil ? c!.flush() : [] }
        if !payload.isEmpty { try await enqueue(frame(payload)) }
    }

    private func frame(_ payload: [UInt8]) -> [UInt8] {
        guard framing == .chunked else { return payload }
        // RFC 9112 section 7.1: chunk-size in hex, CRLF, data, CRLF.
        var out = Array(String(payload.count, radix: 16).utf8)
        out.reserveCapacity(out.count + payload.count + 4)
        out.append(0x0D); out.append(0x0A)
        out.append(contentsOf: payload)
        out.append(0x0D); out.append(0x0A)
        return out
    }

    private func enqueue(_ framed: [UInt8]) async throws {
        let (wake, mustWait) = try state.withLock { s throws -> (Bool, Bool) in
            if s.failed { throw HTTPBodyWriterError.connectionClosed }
            s.chunks.append(framed)
            s.queuedBytes += framed.count
            let wake = s.loopWaiting
            s.loopWaiting = false
            return (wake, s.queuedBytes > highWater)
        }
        if wake { notify() }
        if mustWait { try await waitForRoom() }
    }

    /// True while the producer is suspended in a write, waiting for the client to read
    /// (back-pressure holds it).
    var isWaitingForRoom: Bool { state.withLock { $0.waiter != nil } }

    private func waitForRoom() async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, Error>) in
                let outcome: Result<Void, Error>? = state.withLock { s in
                    if s.failed { return .failure(HTTPBodyWriterError.connectionClosed) }
                    if s.cancelled { return .failure(CancellationError()) }
                    if s.queuedBytes <= lowWater { return .success(()) }
                    s.waiter = c
                    return nil
                }
                if let outcome { c.resume(with: outcome) }
            }
        } onCancel: {
            let waiter = state.withLock { s in
                s.cancelled = true
                let w = s.waiter
                s.waiter = nil
                return w
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    // MARK: Engine side

    /// Called by the engine when the producer returned: ends the gzip stream and the
    /// chunked framing, or checks the declared length.
    func finish() throws {
        var tail: [UInt8] = []
        let gz = compressor.withLock { c -> [UInt8]? in c != nil ? c!.finish() : nil }
        if let gz, !gz.isEmpty { tail += frame(gz) }
        if framing == .chunked { tail += Array("0\r\n\r\n".utf8) }  // last-chunk, no trailers
        let (wake, short) = state.withLock { s -> (Bool, (Int, Int)?) in
            if case .length(let declared) = framing, s.written != declared {
                s.aborted = true
                let w = s.loopWaiting
                s.loopWaiting = false
                return (w, (declared, s.written))
            }
            if !tail.isEmpty {
                s.chunks.append(tail)
                s.queuedBytes += tail.count
            }
            s.finished = true
            let w = s.loopWaiting
            s.loopWaiting = false
            return (w, nil)
        }
        if wake { notify() }
        if let short { throw HTTPBodyWriterError.lengthShort(declared: short.0, written: short.1) }
    }

    /// Called by the engine when the producer threw: the body cannot be completed.
    func abort() {
        let wake = state.withLock { s in
            s.aborted = true
            let w = s.loopWaiting
            s.loopWaiting = false
            return w
        }
        if wake { notify() }
    }

    /// Called by the loop when the connection closed: wakes a suspended writer with an error.
    func fail() {
        let waiter = state.withLock { s in
            s.failed = true
            s.chunks = []
            s.queuedBytes = 0
            let w = s.waiter
            s.waiter = nil
            return w
        }
        waiter?.resume(throwing: HTTPBodyWriterError.connectionClosed)
    }

    /// Called by the loop when its socket buffer has room: takes everything queued.
    func take() -> Taken {
        let (taken, waiter) = state.withLock { s -> (Taken, CheckedContinuation<Void, Error>?) in
            let t = Taken(chunks: s.chunks, bytes: s.queuedBytes, finished: s.finished, aborted: s.aborted)
            s.chunks = []
            s.queuedBytes = 0
            if !s.finished && !s.aborted { s.loopWaiting = true }
            let w = s.waiter
            s.waiter = nil
            return (t, w)
        }
        waiter?.resume()
        return taken
    }
}
