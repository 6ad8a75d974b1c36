import Dispatch
import Glibc
import OutpostCLinux

/// An answer as `HTTPClient` read it.
public struct HTTPClientResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of a header (case-insensitive).
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }

    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// Why an exchange with `HTTPClient` ended without an answer.
public struct HTTPClientFailure: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Every address the host resolves to was refused by the caller's `refusal`.
        case addressRefused
        /// The name did not resolve, or no connection was made.
        case connectFailed
        /// A wait outlasted `timeout` or the `deadline`.
        case timeout
        /// The cancel pipe became readable.
        case cancelled
        /// The connection failed or was closed before a whole answer came.
        case connectionLost
        /// The peer answered something that is not an HTTP/1.x answer, or a head past the bound.
        case badAnswer
    }

    public var kind: Kind
    public var detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { detail }
}

/// The engine's HTTP/1.1 client: the server's own outgoing calls (a webhook POST to an
/// `http://` receiver, the `healthcheck` probe) and the tests that must control the bytes
/// on the wire (keep-alive, pipelining, partial sends, malformed input). Two others exist on
/// purpose: the conformance suite's (it checks this engine, so it does not use it) and the
/// benchmarks' `BenchConnection` (it sends a body from the caller's buffer and reads with a
/// small buffer per connection, for thousands of idle long polls).
///
/// Blocking, on one non-blocking TCP socket: every wait is poll(2), and ends at `timeout`
/// seconds after it began, at the `deadline` (an uptime in nanoseconds) when there is one,
/// or at once when the `cancel` descriptor becomes readable. Call it off the concurrency
/// pool. It does not pool connections or speak TLS.
public final class HTTPClient {
    public let fd: Int32
    /// Seconds one wait (connect, send, read) may take.
    public var timeout: Double
    /// When the whole exchange ends, as `DispatchTime.now().uptimeNanoseconds` counts.
    public var deadline: UInt64?
    /// Used in messages: "the server", "the receiver".
    public var peer: String
    private let cancel: Int32
    private var buffer: [UInt8] = []
    /// The bound of the head being read (for its message).
    private var headBound = Int.max

    /// Connects to `host`:`port` (a name, or an address without brackets), trying each
    /// address it resolves to in turn. `refusal` judges each address before it is connected
    /// to and says why it is refused (nil: allowed), so the address judged is the address
    /// connected to.
    public init(host: String = "127.0.0.1", port: Int, timeout: Double, deadline: UInt64? = nil, cancel: Int32 = -1,
                peer: String = "the server", refusal: ((UnsafePointer<sockaddr>) -> String?)? = nil) throws(HTTPClientFailure) {
        self.timeout = timeout
        self.deadline = deadline
        self.cancel = cancel
        self.peer = peer
        fd = try Self.connect(host: host, port: port, timeout: timeout, deadline: deadline, cancel: cancel, refusal: refusal)
    }

    deinit { Glibc.close(fd) }

    /// The bytes of a request: Host (`127.0.0.1` unless given) and Content-Length added when absent.
    public static func encode(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil) -> [UInt8] {
        var text = "\(method) \(target) HTTP/1.1\r\n"
        if !headers.contains(where: { $0.0.lowercased() == "host" }) { text += "Host: 127.0.0.1\r\n" }
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        if let body, !headers.contains(where: { $0.0.lowercased() == "content-length" || $0.0.lowercased() == "transfer-encoding" }) {
            text += "Content-Length: \(body.count)\r\n"
        }
        text += "\r\n"
        return Array(text.utf8) + (body ?? [])
    }

    /// Sends one request and reads its answer on this connection.
    public func request(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil) throws(HTTPClientFailure) -> HTTPClientResponse {
        try send(Self.encode(method, target, headers: headers, body: body))
        return try readResponse(head: method == "HEAD")
    }

    // MARK: Sending

    /// Sends raw bytes.
    public func send(_ bytes: [UInt8]) throws(HTTPClientFailure) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n >= 0 {
                sent += n
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                try wait(Int16(POLLOUT))
            } else if errno != EINTR {
                throw HTTPClientFailure(.connectionLost, "the connection failed while sending: \(Self.lastError())")
            }
        }
    }

    public func send(_ text: String) throws(HTTPClientFailure) { try send(Array(text.utf8)) }

    /// Half-closes the sending side.
    public func shutdownWrite() { Glibc.shutdown(fd, Int32(SHUT_WR)) }

    // MARK: Reading


    /// Reads one answer. `head` means the request was HEAD (no body follows). Interim 1xx
    /// answers are returned like any other when `interim` is true, else skipped. A body
    /// longer than `maxBodyBytes` is `badAnswer`, found before it is read when the answer
    /// declares its length.
    public func readResponse(head: Bool = false, interim: Bool = false, maxBodyBytes: Int = .max) throws(HTTPClientFailure) -> HTTPClientResponse {
        var response = try readHead(interim: interim)
        if head || response.status / 100 == 1 || response.status == 204 || response.status == 304 { return response }
        let tooLong = HTTPClientFailure(.badAnswer, "\(peer) answered a body longer than \(maxBodyBytes) bytes")
        if let coding = response.header("Transfer-Encoding"), coding.lowercased().contains("chunked") {
            var body: [UInt8] = []
            while true {
                let sizeLine = try readLine()
                guard let size = Int(sizeLine.split(separator: ";").first.map { String($0).trimmingSpaces() } ?? "", radix: 16) else {
                    throw HTTPClientFailure(.badAnswer, "bad chunk size \"\(sizeLine)\"")
                }
                if size == 0 {
                    while try !readLine().isEmpty {}
                    break
                }
                guard size <= maxBodyBytes - body.count else { throw tooLong }
                body += try readExactly(size)
                _ = try readLine()
            }
            response.body = body
        } else if let length = response.header("Content-Length").flatMap({ Int($0) }) {
            guard length <= maxBodyBytes else { throw tooLong }
            response.body = try readExactly(length)
        } else {
            while try fill() {
                guard buffer.count <= maxBodyBytes else { throw tooLong }
            }
            response.body = buffer
            buffer.removeAll()
        }
        return response
    }

    /// Reads heads until a final one (or an interim one, with `interim`) and returns it
    /// without its body. A head longer than `maxBytes` is `badAnswer`.
    public func readHead(interim: Bool = false, maxBytes: Int = 1 << 20) throws(HTTPClientFailure) -> HTTPClientResponse {
        while true {
            var budget = maxBytes
            headBound = maxBytes
            let statusLine = try readLine(budget: &budget)
            let parts = statusLine.split(separator: " ", maxSplits: 2)
            guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].utf8.count == 3, let status = Int(parts[1]), (100...599).contains(status) else {
                throw HTTPClientFailure(.badAnswer, "\(peer) did not answer HTTP (\"\(statusLine.prefix(80))\")")
            }
            var headers: [(name: String, value: String)] = []
            while true {
                let line = try readLine(budget: &budget)
                if line.isEmpty { break }
                guard let colon = line.firstIndex(of: ":") else { throw HTTPClientFailure(.badAnswer, "bad header line \"\(line.prefix(80))\"") }
                headers.append((String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingSpaces()))
            }
            if status / 100 == 1 && !interim { continue }
            return HTTPClientResponse(status: status, headers: headers, body: [])
        }
    }

    private func readLine() throws(HTTPClientFailure) -> String {
        var budget = Int.max
        return try readLine(budget: &budget)
    }

    /// One line without its CR LF (or LF); `budget` is what the head may still take.
    private func readLine(budget: inout Int) throws(HTTPClientFailure) -> String {
        while true {
            if let i = buffer.firstIndex(of: 0x0A) {
                guard i + 1 <= budget else { throw headTooLong() }
                budget -= i + 1
                var line = Array(buffer[..<i])
                buffer.removeFirst(i + 1)
                if line.last == 0x0D { line.removeLast() }
                return String(decoding: line, as: UTF8.self)
            }
            guard buffer.count < budget else { throw headTooLong() }
            guard try fill() else { throw HTTPClientFailure(.connectionLost, "\(peer) closed the connection") }
        }
    }

    private func headTooLong() -> HTTPClientFailure {
        HTTPClientFailure(.badAnswer, "the answer's head is longer than \(headBound) bytes")
    }

    private func readExactly(_ count: Int) throws(HTTPClientFailure) -> [UInt8] {
        while buffer.count < count {
            guard try fill() else { throw HTTPClientFailure(.connectionLost, "\(peer) closed the connection after \(buffer.count) of \(count) body bytes") }
        }
        let out = Array(buffer[..<count])
        buffer.removeFirst(count)
        return out
    }

    /// Reads more bytes into the buffer; false at the end of the stream (or a reset).
    private func fill() throws(HTTPClientFailure) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer.append(contentsOf: chunk[0..<n])
                return true
            }
            if n == 0 || errno == ECONNRESET { return false }
            if errno == EAGAIN || errno == EWOULDBLOCK {
                try wait(Int16(POLLIN))
            } else if errno != EINTR {
                throw HTTPClientFailure(.connectionLost, "the connection failed: \(Self.lastError())")
            }
        }
    }

    // MARK: Waiting and connecting

    /// Waits until `fd` has `events`, or throws at the timeout, the deadline or on cancellation.
    private func wait(_ events: Int16) throws(HTTPClientFailure) {
        try Self.wait(fd, events, timeout: timeout, deadline: deadline, cancel: cancel)
    }

    private static func wait(_ fd: Int32, _ events: Int16, timeout: Double, deadline: UInt64?, cancel: Int32) throws(HTTPClientFailure) {
        let started = DispatchTime.now().uptimeNanoseconds
        var end = started + UInt64(max(0, timeout) * 1_000_000_000)
        if let deadline { end = min(end, deadline) }
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < end else { throw HTTPClientFailure(.timeout, "no answer within the timeout") }
            let ms = Int32(min((end - now + 999_999) / 1_000_000, UInt64(Int32.max)))
            var fds = [pollfd(fd: fd, events: events, revents: 0), pollfd(fd: cancel, events: Int16(POLLIN), revents: 0)]
            let n = poll(&fds, 2, ms)  // a negative fd (no cancel pipe) is ignored by poll
            if n < 0 {
                if errno == EINTR { continue }
                throw HTTPClientFailure(.connectionLost, "poll: \(lastError())")
            }
            if fds[1].revents != 0 { throw HTTPClientFailure(.cancelled, "the exchange was cancelled") }
            if fds[0].revents != 0 { return }
        }
    }

    private static func connect(host: String, port: Int, timeout: Double, deadline: UInt64?, cancel: Int32,
                                refusal: ((UnsafePointer<sockaddr>) -> String?)?) throws(HTTPClientFailure) -> Int32 {
        let first = try lookUp(host, port: port)
        defer { freeaddrinfo(first) }
        var why = "no address"
        var refused: [String] = []
        var tried = 0
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            next = info.pointee.ai_next
            guard let address = info.pointee.ai_addr else { continue }
            if let refusal, let reason = refusal(UnsafePointer(address)) {
                refused.append(reason)
                continue
            }
            tried += 1
            let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else {
                why = lastError()
                continue
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return fd }
            guard errno == EINPROGRESS else {
                why = lastError()
                Glibc.close(fd)
                continue
            }
            do throws(HTTPClientFailure) {
                try wait(fd, Int16(POLLOUT), timeout: timeout, deadline: deadline, cancel: cancel)
            } catch {
                Glibc.close(fd)
                throw error
            }
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            if error == 0 { return fd }
            why = String(cString: strerror(error))
            Glibc.close(fd)
        }
        if tried == 0 && !refused.isEmpty {
            throw HTTPClientFailure(.addressRefused, "\(host): \(refused.joined(separator: "; "))")
        }
        throw HTTPClientFailure(.connectFailed, "cannot connect to \(host):\(port): \(why)")
    }

    /// getaddrinfo(3) for a stream socket to `host`:`port` (blocking): the list, which the
    /// caller frees with freeaddrinfo(3).
    public static func lookUp(_ host: String, port: Int) throws(HTTPClientFailure) -> UnsafeMutablePointer<addrinfo> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var result: UnsafeMutablePointer<addrinfo>?
        let code = getaddrinfo(host, String(port), &hints, &result)
        guard code == 0, let result else {
            throw HTTPClientFailure(.connectFailed, "cannot resolve \(host): \(String(cString: gai_strerror(code)))")
        }
        return result
    }

    private static func lastError() -> String { String(cString: strerror(errno)) }
}

extension String {
    /// Without leading and trailing spaces and tabs (no Foundation in the engine).
    fileprivate func trimmingSpaces() -> String {
        var view = Substring(self)
        while let c = view.first, c == " " || c == "\t" { view.removeFirst() }
        while let c = view.last, c == " " || c == "\t" { view.removeLast() }
        return String(view)
    }
}
