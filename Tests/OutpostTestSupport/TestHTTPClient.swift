import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A response as the test client read it.
public struct TestResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    /// The first value of a header (case-insensitive).
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// A blocking HTTP/1.1 client on one TCP connection, for tests that must control the
/// bytes on the wire (keep-alive, pipelining, partial sends, malformed input). Not for
/// production: it trusts the server to be well-behaved apart from what tests check.
public final class TestHTTPClient {
    public let fd: Int32
    private var buffer: [UInt8] = []
    /// Seconds a read waits before failing.
    public var timeout: Double

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Connects to 127.0.0.1:`port`.
    public init(port: Int, timeout: Double = Double(testDeadlineSeconds)) throws {
        self.timeout = timeout
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(errno)") }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else {
            // No close(fd) here: `self` is fully initialized, so deinit runs and closes it.
            // Closing it twice could close a descriptor another thread has been given since.
            throw Failure(description: "connect to port \(port): errno \(errno)")
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit { Glibc.close(fd) }

    /// Sends raw bytes.
    public func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Failure(description: "send: errno \(errno)")
            }
            sent += n
        }
    }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Half-closes the sending side.
    public func shutdownWrite() { Glibc.shutdown(fd, Int32(SHUT_WR)) }

    /// Reads more bytes into the buffer; false at end of stream.
    private func fill() throws -> Bool {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&pfd, 1, Int32(timeout * 1000))
        guard ready > 0 else { throw Failure(description: "read timed out after \(timeout) s") }
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n < 0 {
            if errno == ECONNRESET { return false }
            throw Failure(description: "recv: errno \(errno)")
        }
        if n == 0 { return false }
        buffer.append(contentsOf: chunk[0..<n])
        return true
    }

    /// True when the server closed the connection (reads EOF within `timeout`).
    public func isClosedByPeer() -> Bool {
        while true {
            if !buffer.isEmpty { return false }
            guard let more = try? fill() else { return false }
            if !more { return true }
        }
    }

    private func readLine() throws -> String {
        while true {
            if let i = buffer.firstIndex(of: 0x0A) {
                var line = Array(buffer[..<i])
                buffer.removeFirst(i + 1)
                if line.last == 0x0D { line.removeLast() }
                return String(decoding: line, as: UTF8.self)
            }
            guard try fill() else { throw Failure(description: "connection closed while reading a line") }
        }
    }

    private func readExactly(_ count: Int) throws -> [UInt8] {
        while buffer.count < count {
            guard try fill() else { throw Failure(description: "connection closed after \(buffer.count) of \(count) body bytes") }
        }
        let out = Array(buffer[..<count])
        buffer.removeFirst(count)
        return out
    }

    /// Reads one response. `head` means the request was HEAD (no body follows).
    /// Interim 1xx responses are returned like any other when `interim` is true, else skipped.
    public func readResponse(head: Bool = false, interim: Bool = false) throws -> TestResponse {
        while true {
            let statusLine = try readLine()
            let parts = statusLine.split(separator: " ", maxSplits: 2)
            guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
                throw Failure(description: "bad status line \"\(statusLine)\"")
            }
            var headers: [(name: String, value: String)] = []
            while true {
                let line = try readLine()
                if line.isEmpty { break }
                guard let colon = line.firstIndex(of: ":") else { throw Failure(description: "bad header line \"\(line)\"") }
                headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
            }
            var response = TestResponse(status: status, headers: headers, body: [])
            if status / 100 == 1 {
                if interim { return response }
                continue
            }
            if head || status == 204 || status == 304 { return response }
            if let te = response.header("Transfer-Encoding"), te.lowercased().contains("chunked") {
                var body: [UInt8] = []
                while true {
                    let sizeLine = try readLine()
                    guard let size = Int(sizeLine.split(separator: ";")[0].trimmingCharacters(in: .whitespaces), radix: 16) else {
                        throw Failure(description: "bad chunk size \"\(sizeLine)\"")
                    }
                    if size == 0 {
                        while try !readLine().isEmpty {}
                        break
                    }
                    body += try readExactly(size)
                    _ = try readLine()
                }
                response.body = body
            } else if let cl = response.header("Content-Length"), let length = Int(cl) {
                response.body = try readExactly(length)
            } else {
                while try fill() {}
                response.body = buffer
                buffer.removeAll()
            }
            return response
        }
    }

    /// Sends one request and reads its response on this connection.
    public func request(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil) throws -> TestResponse {
        try send(Self.encode(method, target, headers: headers, body: body))
        return try readResponse(head: method == "HEAD")
    }

    /// The bytes of a request (Host and Content-Length added when absent).
    public static func encode(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil) -> [UInt8] {
        var text = "\(method) \(target) HTTP/1.1\r\n"
        if !headers.contains(where: { $0.0.lowercased() == "host" }) { text += "Host: 127.0.0.1\r\n" }
        for (k, v) in headers { text += "\(k): \(v)\r\n" }
        if let body, !headers.contains(where: { $0.0.lowercased() == "content-length" || $0.0.lowercased() == "transfer-encoding" }) {
            text += "Content-Length: \(body.count)\r\n"
        }
        text += "\r\n"
        return Array(text.utf8) + (body ?? [])
    }
}

/// One request on a fresh connection.
public func httpRequest(port: Int, _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil, timeout: Double = Double(testDeadlineSeconds)) throws -> TestResponse {
    let client = try TestHTTPClient(port: port, timeout: timeout)
    return try client.request(method, target, headers: headers + [("Connection", "close")], body: body)
}

/// Runs blocking work (socket reads, child processes) on a thread of its own and awaits
/// it. Blocking calls must never run on Swift's cooperative pool: it has one thread per
/// core, and a test that blocks them starves the in-process server it is talking to.
public func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.stackSize = 1 << 20
        thread.start()
    }
}

/// One request on a fresh connection, from async code (see `blocking`).
public func httpRequestAsync(port: Int, _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil, timeout: Double = Double(testDeadlineSeconds)) async throws -> TestResponse {
    try await blocking { try httpRequest(port: port, method, target, headers: headers, body: body, timeout: timeout) }
}

/// Blocking work started on a thread of its own at once, awaited later through `value`:
/// unlike `Task.detached { try await blocking { ... } }`, nothing waits for a thread of the
/// cooperative pool before the work starts (a request a test sends and then holds, a long
/// poll, is on the wire when this returns, or soon after on a busy machine).
public final class OnThread<T: Sendable>: Sendable {
    private struct State {
        var result: Result<T, any Error>?
        var waiter: CheckedContinuation<T, any Error>?
    }

    private let state = Mutex(State())

    public init(_ body: @escaping @Sendable () throws -> T) {
        let thread = Thread { [self] in
            let result = Result { try body() }
            let waiter = state.withLock { s -> CheckedContinuation<T, any Error>? in
                s.result = result
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume(with: result)
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// The work's result, once it has ended.
    public var value: T {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                let done = state.withLock { s -> Result<T, any Error>? in
                    if let result = s.result { return result }
                    s.waiter = continuation
                    return nil
                }
                if let done { continuation.resume(with: done) }
            }
        }
    }
}
