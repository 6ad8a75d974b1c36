// Helpers for the engine's tests: a blocking raw-socket client whose calls run on
// threads of their own (never on the concurrency pool the server's handlers need), a
// server fixture on 127.0.0.1:0, one-shot flags, and a seeded RNG.
import Foundation
import Glibc
import OutpostTestSupport
import Synchronization
import Testing
@testable import OutpostHTTP

/// Raw request bytes as a test argument: shown escaped (`\r\n` as written), so a
/// parameterized test's name does not spill headers over several lines of the output.
struct RawRequest: ExpressibleByStringLiteral, CustomTestStringConvertible, Sendable {
    let text: String
    init(stringLiteral text: String) { self.text = text }
    var testDescription: String { text.debugDescription }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs blocking code on a fresh thread and awaits its result, so a test blocked in
/// recv(2) never starves the server's handlers of pool threads.
func io<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.stackSize = 1 << 20
        thread.start()
    }
}

/// A response as the test client read it.
struct TestResponse: Sendable {
    var status: Int
    var headers: HTTPHeaders
    var body: [UInt8]
    var text: String { String(decoding: body, as: UTF8.self) }
    func header(_ name: String) -> String? { headers[name] }
    /// The error envelope's `error.code`, found textually.
    var errorCode: String? {
        guard let r = text.range(of: #""code":""#) else { return nil }
        return String(text[r.upperBound...].prefix { $0 != "\"" })
    }
}

/// Builds a request with `Host` (and `Content-Length` when a body is given).
func request(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil, version: String = "HTTP/1.1") -> [UInt8] {
    var text = "\(method) \(target) \(version)\r\nHost: test\r\n"
    for (n, v) in headers { text += "\(n): \(v)\r\n" }
    if let body, !headers.contains(where: { $0.0.lowercased() == "content-length" || $0.0.lowercased() == "transfer-encoding" }) {
        text += "Content-Length: \(body.count)\r\n"
    }
    text += "\r\n"
    return Array(text.utf8) + (body ?? [])
}

/// A blocking TCP client. Sendable: the fd is immutable and the read buffer is behind a mutex.
final class TestClient: Sendable {
    let fd: Int32
    private let buffer = Mutex<[UInt8]>([])

    private init(fd: Int32) { self.fd = fd }

    /// Connects to 127.0.0.1:`port`, from the loopback address `source` (any other
    /// 127.x.y.z stands for another client); reads time out after `timeout` seconds so a
    /// broken server fails the test instead of hanging it.
    static func connect(port: Int, timeout: Int = 10, from source: String = "127.0.0.1") throws -> TestClient {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: errno \(errno)") }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            let e = errno
            Glibc.close(fd)
            throw TestFailure("bind \(source): errno \(e)")
        }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let e = errno
            Glibc.close(fd)
            throw TestFailure("connect: errno \(e)")
        }
        var tv = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        return TestClient(fd: fd)
    }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw TestFailure("send: errno \(errno)")
            }
            offset += n
        }
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Tries to send; returns false when the server closed the connection (EPIPE/ECONNRESET).
    func trySend(_ bytes: [UInt8]) -> Bool {
        (try? send(bytes)) != nil
    }

    /// Reads more bytes into the buffer; false at EOF. Throws on timeout or error.
    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer.withLock { $0 += chunk[0..<n] }
                return true
            }
            if n == 0 { return false }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { throw TestFailure("read timed out") }
            if errno == ECONNRESET { return false }
            throw TestFailure("recv: errno \(errno)")
        }
    }

    private func take(_ count: Int) -> [UInt8] {
        buffer.withLock { b in
            let out = Array(b[0..<count])
            b.removeFirst(count)
            return out
        }
    }

    private func readLine() throws -> String {
        while true {
            if let i = buffer.withLock({ b in b.indices.dropLast().first { b[$0] == 0x0D && b[$0 + 1] == 0x0A } }) {
                let line = take(i + 2)
                return String(decoding: line.dropLast(2), as: UTF8.self)
            }
            guard try fill() else { throw TestFailure("EOF while reading a line") }
        }
    }

    private func readExactly(_ count: Int) throws -> [UInt8] {
        while buffer.withLock({ $0.count }) < count {
            guard try fill() else { throw TestFailure("EOF while reading \(count) bytes") }
        }
        return take(count)
    }

    /// Reads one response (an interim 1xx one too). `head`: the request was HEAD, no body.
    func readResponse(head: Bool = false) throws -> TestResponse {
        let statusLine = try readLine()
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0] == "HTTP/1.1", let status = Int(parts[1]) else {
            throw TestFailure("bad status line: \(statusLine)")
        }
        var headers = HTTPHeaders()
        while true {
            let line = try readLine()
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: ":") else { throw TestFailure("bad header line: \(line)") }
            headers.add(name: String(line[..<colon]), value: String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
        }
        var body: [UInt8] = []
        if status < 200 || status == 204 || status == 304 || head {
            return TestResponse(status: status, headers: headers, body: body)
        }
        if headers["Transfer-Encoding"]?.lowercased() == "chunked" {
            while true {
                let sizeLine = try readLine()
                guard let size = Int(sizeLine.split(separator: ";")[0], radix: 16) else { throw TestFailure("bad chunk size \(sizeLine)") }
                if size == 0 {
                    while try !readLine().isEmpty {}
                    break
                }
                body += try readExactly(size)
                guard try readLine().isEmpty else { throw TestFailure("chunk not followed by CRLF") }
            }
        } else if let length = headers["Content-Length"].flatMap({ Int($0) }) {
            body = try readExactly(length)
        } else {
            while try fill() {}
            body = buffer.withLock { b in
                let all = b
                b = []
                return all
            }
        }
        return TestResponse(status: status, headers: headers, body: body)
    }

    /// Reads until the server closes; returns what was left. Throws if it does not close in time.
    func readToEOF() throws -> [UInt8] {
        while try fill() {}
        return buffer.withLock { b in
            let all = b
            b = []
            return all
        }
    }

    /// True when the server closed the connection (after any unread bytes, which are dropped).
    func waitForClose() throws -> Bool {
        _ = try readToEOF()
        return true
    }

    /// Non-blocking: true when anything (bytes or EOF) has arrived from the server.
    func hasIncoming() -> Bool {
        if buffer.withLock({ !$0.isEmpty }) { return true }
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        if n > 0 || n == 0 { return true }
        return !(errno == EAGAIN || errno == EWOULDBLOCK)
    }

    func shutdownWrite() { Glibc.shutdown(fd, Int32(SHUT_WR)) }

    /// Closes with a reset (SO_LINGER 0), like a client that vanishes.
    func reset() {
        var l = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
        Glibc.close(fd)
    }

    func close() { Glibc.close(fd) }
}

/// A server on 127.0.0.1 with a free port. Its header, body and idle timeouts are the
/// tests' deadline: between connecting (one `io` call) and sending (the next), a test's
/// task may wait seconds for a thread of the cooperative pool while the whole suite runs
/// on two cores, and a shorter timeout would close the connection under it (an idle
/// timeout of 30 s did: the test read EOF where its first answer belonged). The tests of
/// the timeouts set their own.
struct TestServer: Sendable {
    let server: HTTPServer
    let port: Int

    static func configuration() -> HTTPServerConfiguration {
        var c = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        c.eventLoopCount = 2
        c.headerTimeout = .seconds(testDeadlineSeconds)
        c.bodyTimeout = .seconds(testDeadlineSeconds)
        c.idleTimeout = .seconds(testDeadlineSeconds)
        c.discardTimeout = .milliseconds(300)
        return c
    }

    init(configure: (inout HTTPServerConfiguration) -> Void = { _ in }, routes: (inout Router) -> Void) throws {
        var c = TestServer.configuration()
        configure(&c)
        var router = Router()
        routes(&router)
        server = HTTPServer(configuration: c, router: router)
        port = try server.start()
    }

    func connect() async throws -> TestClient {
        let port = self.port
        return try await io { try TestClient.connect(port: port) }
    }

    /// Sends `bytes` on a new connection and reads one response.
    func exchange(_ bytes: [UInt8], head: Bool = false) async throws -> TestResponse {
        let port = self.port
        return try await io {
            let c = try TestClient.connect(port: port)
            defer { c.close() }
            try c.send(bytes)
            return try c.readResponse(head: head)
        }
    }

    func stop() async { await server.shutdown(grace: .seconds(2)) }
}

/// Starts a test server, runs `body`, always shuts the server down.
func withServer(
    configure: (inout HTTPServerConfiguration) -> Void = { _ in },
    routes: (inout Router) -> Void,
    _ body: (TestServer) async throws -> Void
) async throws {
    let s = try TestServer(configure: configure, routes: routes)
    do {
        try await body(s)
    } catch {
        await s.stop()
        throw error
    }
    await s.stop()
}

/// A one-shot signal between tasks.
final class Flag: Sendable {
    private struct State {
        var fired = false
        var waiters: [UInt64: CheckedContinuation<Bool, Never>] = [:]
        var nextID: UInt64 = 0
    }
    private let state = Mutex(State())

    func fire() {
        let waiters = state.withLock { s -> [CheckedContinuation<Bool, Never>] in
            s.fired = true
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        for w in waiters { w.resume(returning: true) }
    }

    var isFired: Bool { state.withLock { $0.fired } }

    /// Waits until fired, however long that takes (a handler that only cancellation ends).
    func wait() async {
        _ = await wait(deadline: nil)
    }

    /// Waits at most `timeout`; true when fired.
    func wait(timeout: Duration) async -> Bool {
        await wait(deadline: timeout)
    }

    private func wait(deadline timeout: Duration?) async -> Bool {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        return await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            let fired = state.withLock { s -> Bool in
                if s.fired { return true }
                s.waiters[id] = c
                return false
            }
            if fired {
                c.resume(returning: true)
                return
            }
            guard let timeout else { return }
            let (seconds, attoseconds) = timeout.components
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(seconds * 1_000_000_000 + attoseconds / 1_000_000_000))) { [self] in
                state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(returning: false)
            }
        }
    }
}

/// Open file descriptors of this process.
/// The descriptors of this process that are TCP sockets with local port `port`: a server's
/// listener and the connections it accepted, and nothing of the other tests running in the
/// same process (their sockets have other ports), unlike a count of every descriptor.
func socketDescriptorCount(localPort port: Int) -> Int {
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    var inodes = Set<Substring>()
    for fd in fds {
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)"),
              target.hasPrefix("socket:[") else { continue }
        inodes.insert(Substring(target.dropFirst(8).dropLast()))
    }
    var count = 0
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
        for line in text.split(separator: "\n").dropFirst() {
            let columns = line.split(separator: " ")
            guard columns.count > 9, let colon = columns[1].lastIndex(of: ":"),
                  Int(columns[1][columns[1].index(after: colon)...], radix: 16) == port else { continue }
            if inodes.contains(columns[9]) { count += 1 }
        }
    }
    return count
}

func json(_ text: String) -> [UInt8] { Array(text.utf8) }
