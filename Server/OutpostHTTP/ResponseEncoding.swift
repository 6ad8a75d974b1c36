// Turning a handler's HTTPResponse into what goes on the wire: content coding, framing,
// and the head's bytes. The expensive part (gzip, opening files) runs in the handler's
// task; only the head is encoded on the event loop.
import Glibc
import OutpostCompression

/// How a response body is delimited on the wire (RFC 9112 section 6.3).
enum ResponseFraming: Equatable, Sendable {
    /// 1xx, 204, 304: no content and no Content-Length.
    case noContent
    case contentLength(Int)
    /// Only for HTTP/1.1 requests (RFC 9112 section 6.1).
    case chunked
    /// An HTTP/1.0 client and a body of unknown length: the body ends when the connection closes.
    case closeDelimited
}

/// A response ready for the loop.
struct PreparedResponse: Sendable {
    enum Body: Sendable {
        case none
        case bytes([UInt8])
        /// An open file descriptor the connection owns from now on (closed after sending).
        case file(fd: Int32, offset: Int64, length: Int64)
        /// A streamed body; nil writer for HEAD (the producer never runs).
        case stream(HTTPBodyWriter?)
        /// Nothing to send yet: the request is held (`HeldRequest`).
        case held(HTTPHold)
    }
    var status: HTTPStatus
    var headers: HTTPHeaders
    var body: Body
    var framing: ResponseFraming
    /// The handler asked for `Connection: close`.
    var wantsClose: Bool
    /// The error the response renders (`HTTPResponse.failure`), for the request's log.
    var failure: HTTPFailure?

    /// Frees what the response holds when it will not be sent.
    func release() {
        switch body {
        case .file(let fd, _, _): close(fd)
        case .stream(let writer): writer?.fail()
        default: break
        }
    }
}

/// What decides how a response is encoded, known when the request ends.
struct ResponsePolicy: Sendable, Hashable {
    var isHead: Bool
    var version: HTTPVersion
    var acceptsGzip: Bool
    var compressionThreshold: Int
    var compressionLevel: Int32
    var streamHighWater: Int

    /// Header fields the engine owns; a handler's values for them are dropped.
    private static let reserved: [String] = [
        "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Date", "X-Server-Time", "X-Request-ID",
        "X-Content-Type-Options",
    ]

    /// Applies content coding and framing. Returns the producer to run for a streamed
    /// body (nil for HEAD and other bodies).
    func prepare(_ response: HTTPResponse, notify: @escaping @Sendable () -> Void) -> (PreparedResponse, HTTPBodyProducer?) {
        var (prepared, producer) = encode(response, notify: notify)
        prepared.failure = prepared.failure ?? response.failure
        return (prepared, producer)
    }

    private func encode(_ response: HTTPResponse, notify: @escaping @Sendable () -> Void) -> (PreparedResponse, HTTPBodyProducer?) {
        var headers = response.headers
        let wantsClose = headers.containsToken("close", in: "Connection")
        for name in ResponsePolicy.reserved { headers.remove(name: name) }
        let status = response.status

        if case .held(let hold) = response.body {
            return (PreparedResponse(status: status, headers: headers, body: .held(hold), framing: .noContent, wantsClose: false), nil)
        }
        if status.forbidsBody {
            return (PreparedResponse(status: status, headers: headers, body: .none, framing: .noContent, wantsClose: wantsClose), nil)
        }

        switch response.body {
        case .empty, .held:
            return (PreparedResponse(status: status, headers: headers, body: .none, framing: .contentLength(0), wantsClose: wantsClose), nil)

        case .bytes(var bytes):
            if bytes.count > compressionThreshold && compressible(headers) {
                // docs/protocol.md section 2: gzip over 1 KiB when the client allows it; the
                // representation varies with Accept-Encoding either way (RFC 9110 section 12.5.5).
                addVary(&headers)
                if acceptsGzip {
                    let compressed = Gzip.compress(bytes, level: compressionLevel)
                    if compressed.count < bytes.count {
                        bytes = compressed
                        headers.replaceOrAdd(name: "Content-Encoding", value: "gzip")
                    }
                }
            }
            let framing = ResponseFraming.contentLength(bytes.count)
            return (PreparedResponse(status: status, headers: headers, body: isHead ? .none : .bytes(bytes), framing: framing, wantsClose: wantsClose), nil)

        case .file(let path, let offset, let length):
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return internalError() }
            var st = stat()
            guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
                close(fd)
                return internalError()
            }
            let size = Int64(st.st_size)
            let count = length ?? (size - offset)
            guard offset >= 0, count >= 0, offset + count <= size else {
                close(fd)
                return internalError()
            }
            if isHead { close(fd) }
            let body: PreparedResponse.Body = isHead ? .none : .file(fd: fd, offset: offset, length: count)
            return (PreparedResponse(status: status, headers: headers, body: body, framing: .contentLength(Int(count)), wantsClose: wantsClose), nil)

        case .stream(let length, let producer):
            let framing: ResponseFraming
            var gzip = false
            if let length {
                framing = .contentLength(length)
            } else {
                framing = version == .http1_1 ? .chunked : .closeDelimited
                if compressible(headers) {
                    addVary(&headers)
                    if acceptsGzip {
                        gzip = true
                        headers.replaceOrAdd(name: "Content-Encoding", value: "gzip")
                    }
                }
            }
            if isHead {
                return (PreparedResponse(status: status, headers: headers, body: .stream(nil), framing: framing, wantsClose: wantsClose), nil)
            }
            let writerFraming: HTTPBodyWriter.Framing
            switch framing {
            case .contentLength(let n): writerFraming = .length(n)
            case .chunked: writerFraming = .chunked
            default: writerFraming = .raw
            }
            let writer = HTTPBodyWriter(framing: writerFraming, gzip: gzip, level: compressionLevel, highWater: streamHighWater, notify: notify)
            return (PreparedResponse(status: status, headers: headers, body: .stream(writer), framing: framing, wantsClose: wantsClose), producer)
        }
    }

    private func internalError() -> (PreparedResponse, HTTPBodyProducer?) {
        prepare(HTTPError.internalError().response, notify: {})
    }

    private func addVary(_ headers: inout HTTPHeaders) {
        if let vary = headers["Vary"] {
            if !headers.containsToken("Accept-Encoding", in: "Vary") && vary != "*" {
                headers["Vary"] = vary + ", Accept-Encoding"
            }
        } else {
            headers.add(name: "Vary", value: "Accept-Encoding")
        }
    }

    /// Textual content is worth compressing; media and already-encoded content are not.
    private func compressible(_ headers: HTTPHeaders) -> Bool {
        if headers.contains(name: "Content-Encoding") { return false }
        guard let type = headers["Content-Type"]?.lowercased() else { return false }
        let essence = type.split(separator: ";").first.map { $0.trimmingOWS() } ?? ""
        return essence.hasPrefix("text/") || essence.hasSuffix("json") || essence.hasSuffix("+json")
            || essence.hasSuffix("xml") || essence == "application/javascript" || essence == "application/x-www-form-urlencoded"
    }
}

/// True when `Accept-Encoding` allows gzip (RFC 9110 section 12.5.3): listed as `gzip`
/// (or `x-gzip`) with a non-zero weight, or covered by `*` with a non-zero weight and not
/// refused by name. No header: no compression (a client that sends none may not decode).
func acceptsGzip(_ headers: HTTPHeaders) -> Bool {
    var gzipWeight: Double?
    var starWeight: Double?
    for element in headers.tokens(name: "Accept-Encoding") {
        let parts = element.split(separator: ";")
        guard let coding = parts.first?.trimmingOWS().lowercased() else { continue }
        var weight = 1.0
        for param in parts.dropFirst() {
            let p = param.trimmingOWS()
            if p.lowercased().hasPrefix("q=") { weight = Double(p.dropFirst(2)) ?? 0 }
        }
        if coding == "gzip" || coding == "x-gzip" {
            gzipWeight = max(gzipWeight ?? 0, weight)
        } else if coding == "*" {
            starWeight = weight
        }
    }
    if let gzipWeight { return gzipWeight > 0 }
    if let starWeight { return starWeight > 0 }
    return false
}

/// A client's `X-Request-ID` is echoed only when it is 1 to 128 characters of
/// `[A-Za-z0-9._:-]` (docs/protocol.md section 2), so it is safe in logs and headers.
func isValidRequestID(_ id: String) -> Bool {
    let utf8 = id.utf8
    guard !utf8.isEmpty, utf8.count <= 128 else { return false }
    return utf8.allSatisfy { c in
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
            || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: ":") || c == UInt8(ascii: "-")
    }
}

/// Makes request ids: a random per-loop prefix and a counter, unique without a syscall
/// per request.
struct RequestIDGenerator {
    private let prefix: [UInt8]
    private var counter: UInt64 = 0

    init() {
        var rng = SystemRandomNumberGenerator()
        let value = rng.next() as UInt64
        var p = Array(String(value, radix: 16).utf8)
        while p.count < 16 { p.insert(UInt8(ascii: "0"), at: 0) }
        p.append(UInt8(ascii: "-"))
        prefix = p
    }

    mutating func next() -> String {
        counter &+= 1
        return String(decoding: prefix + Array(String(counter, radix: 16).utf8), as: UTF8.self)
    }
}

/// Dates as HTTP fields carry them (RFC 9110 section 5.6.7, IMF-fixdate): `Date`, and
/// fields of protocols on top such as tus's `Upload-Expires`.
public enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// `Sun, 06 Nov 1994 08:49:37 GMT` for a time in seconds since 1970 (UTC).
    public static func imfFixdate(secondsSince1970 seconds: Int64) -> String {
        var time = time_t(seconds)
        var t = tm()
        gmtime_r(&time, &t)
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(days[Int(t.tm_wday)]), \(two(t.tm_mday)) \(months[Int(t.tm_mon)]) \(t.tm_year + 1900) \(two(t.tm_hour)):\(two(t.tm_min)):\(two(t.tm_sec)) GMT"
    }
}

/// The `Date` field (RFC 9110 section 6.6.1, IMF-fixdate), formatted once per second.
struct DateCache {
    private var second: Int = -1
    private(set) var line: [UInt8] = []

    /// `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n` for the current second.
    mutating func current() -> [UInt8] {
        let now = time(nil)
        if Int(now) != second {
            second = Int(now)
            line = Array("Date: \(HTTPDate.imfFixdate(secondsSince1970: Int64(now)))\r\n".utf8)
        }
        return line
    }
}

/// Encodes a response head.
func encodeHead(
    status: HTTPStatus, headers: HTTPHeaders, framing: ResponseFraming, requestID: String,
    date: [UInt8], connection: ConnectionHeader, into out: inout [UInt8]
) {
    out.append(contentsOf: "HTTP/1.1 ".utf8)
    if status.code == 200 {
        out.append(contentsOf: "200 OK\r\n".utf8)
    } else {
        out.append(contentsOf: String(status.code).utf8)
        out.append(0x20)
        out.append(contentsOf: status.reason.utf8)
        out.append(contentsOf: "\r\n".utf8)
    }
    for (name, value) in headers {
        out.append(contentsOf: name.utf8)
        out.append(contentsOf: ": ".utf8)
        // A handler's value cannot split the head: CR and LF become spaces.
        for c in value.utf8 { out.append(c == 0x0D || c == 0x0A ? 0x20 : c) }
        out.append(contentsOf: "\r\n".utf8)
    }
    out.append(contentsOf: date)
    // The server's clock in milliseconds, read as the head is written (`Date` has seconds
    // only): what devices measure their clock's offset against (docs/protocol.md section 2).
    out.append(contentsOf: "X-Server-Time: ".utf8)
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    out.append(contentsOf: String(Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000).utf8)
    out.append(contentsOf: "\r\nX-Request-ID: ".utf8)
    out.append(contentsOf: requestID.utf8)
    // Every answer, JSON, errors and media alike: a browser takes Content-Type as sent and
    // never sniffs a script or a page out of a body (WHATWG Fetch, "X-Content-Type-Options").
    out.append(contentsOf: "\r\nX-Content-Type-Options: nosniff\r\n".utf8)
    switch framing {
    case .noContent, .closeDelimited: break
    case .contentLength(let n):
        out.append(contentsOf: "Content-Length: ".utf8)
        out.append(contentsOf: String(n).utf8)
        out.append(contentsOf: "\r\n".utf8)
    case .chunked:
        out.append(contentsOf: "Transfer-Encoding: chunked\r\n".utf8)
    }
    switch connection {
    case .none: break
    case .close: out.append(contentsOf: "Connection: close\r\n".utf8)
    case .keepAlive: out.append(contentsOf: "Connection: keep-alive\r\n".utf8)
    }
    out.append(contentsOf: "\r\n".utf8)
}

/// The `Connection` field a response carries.
enum ConnectionHeader {
    /// HTTP/1.1 keep-alive: the default, nothing to say.
    case none
    case close
    /// An HTTP/1.0 client asked for keep-alive (RFC 9112 section 9.3).
    case keepAlive
}
