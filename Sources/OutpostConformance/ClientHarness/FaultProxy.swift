import Foundation
import Glibc
import OutpostCore
import Synchronization

/// A seeded faulty HTTP proxy between one client driver and the server, on 127.0.0.1 and an
/// ephemeral port. It carries one request per connection (it asks the server, and tells the
/// client, `Connection: close`), so each request meets one fault draw:
///
/// - `dropAnswer`: the server got the request and answered (a push committed), the client
///   never reads the answer: the connection closes;
/// - `resetMidAnswer`: half the answer, then a TCP reset;
/// - `unavailable`: `503 unavailable` with `Retry-After: 0`, the server never asked; a
///   burst of one to three such answers;
/// - `cutAnswer`: the answer's head and half its body, then an orderly close (a body
///   shorter than its `Content-Length`); with `cutsHeads`, half the answer, so the close
///   may fall inside the head (FoundationNetworking on Linux traps on that: see
///   docs/conformance.md, "Found");
/// - `dropRequest`: the connection closes before anything reaches the server;
/// - `duplicate`: the request reaches the server twice (a retrying middlebox), the client
///   reads the second answer;
/// - `crashAfterCommit` (armed for one request): the server answers, then the armed action
///   runs (the harness kills the driver, as a crash mid-sync, or the server) and the
///   answer is lost.
///
/// Draws come from the proxy's own SplitMix64, seeded by the run, so a seed replays the
/// same faults as long as the driver sends the same requests.
final class FaultProxy: Sendable {
    enum Fault: String, Sendable {
        case pass, dropAnswer = "drop-answer", resetMidAnswer = "reset-mid-answer", cutAnswer = "cut-answer", unavailable = "503"
        case dropRequest = "drop-request", duplicate
        case crashAfterCommit = "crash-after-commit"
    }

    private struct State {
        var upstreamPort: Int?
        var faulty = false
        var random: SplitMix64
        var burst = 0
        var crashArmed: (pushOnly: Bool, action: @Sendable () -> Void)?
        var log: [String] = []
        var stopped = false
    }

    let port: Int
    /// Whether `cutAnswer` may cut inside the answer's head.
    let cutsHeads: Bool
    private let listener: Int32
    private let state: Mutex<State>
    let name: String

    init(name: String, seed: UInt64, cutsHeads: Bool = false) throws {
        self.name = name
        self.cutsHeads = cutsHeads
        state = Mutex(State(random: SplitMix64(seed: seed)))
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw HarnessError("proxy cannot listen: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        listener = fd
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "proxy \(name)"
        thread.start()
    }

    /// The server's port now (nil while it is down: every request is then lost).
    func setUpstream(_ port: Int?) { state.withLock { $0.upstreamPort = port } }

    /// Whether requests meet faults (off while healing).
    func setFaulty(_ faulty: Bool) { state.withLock { $0.faulty = faulty; $0.burst = 0 } }

    /// Runs `action` once the server has answered the next request (a push only, with
    /// `pushOnly`), and loses that answer.
    func armCrash(pushOnly: Bool, _ action: @escaping @Sendable () -> Void) { state.withLock { $0.crashArmed = (pushOnly, action) } }

    /// Disarms a crash that found no request; true when it had fired.
    func disarmCrash() -> Bool { state.withLock { s in defer { s.crashArmed = nil }; return s.crashArmed == nil } }

    /// The faults met since the last call, one line each.
    func takeLog() -> [String] { state.withLock { s in defer { s.log = [] }; return s.log } }

    /// Stops accepting connections.
    func stop() {
        state.withLock { $0.stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if state.withLock({ $0.stopped }) { return }
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            Thread.detachNewThread { [self] in serve(client) }
        }
    }

    /// What happens to one request, drawn under the lock.
    private func draw(isPush: Bool) -> (Fault, Int?, (@Sendable () -> Void)?) {
        state.withLock { s in
            if let armed = s.crashArmed, !armed.pushOnly || isPush {
                s.crashArmed = nil
                return (.crashAfterCommit, s.upstreamPort, armed.action)
            }
            guard s.faulty else { return (.pass, s.upstreamPort, nil) }
            if s.burst > 0 {
                s.burst -= 1
                return (.unavailable, s.upstreamPort, nil)
            }
            let roll = s.random.next() % 100
            let fault: Fault
            switch roll {
            case ..<8: fault = .dropAnswer
            case ..<13: fault = .resetMidAnswer
            case ..<16: fault = .cutAnswer
            case ..<20:
                fault = .unavailable
                s.burst = Int(s.random.next() % 3)
            case ..<23: fault = .dropRequest
            case ..<26: fault = .duplicate
            default: fault = .pass
            }
            return (fault, s.upstreamPort, nil)
        }
    }

    private func note(_ fault: Fault, _ requestLine: String) {
        guard fault != .pass else { return }
        state.withLock { $0.log.append("\(name): \(fault.rawValue) on \(requestLine)") }
    }

    private func serve(_ client: Int32) {
        defer { close(client) }
        guard let (head, body) = readRequest(client) else { return }
        let lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.first ?? ""
        let target = requestLine.split(separator: " ").dropFirst().first.map(String.init) ?? ""
        let isPush = requestLine.hasPrefix("POST ") && target.contains("/push")
        let (fault, upstream, action) = draw(isPush: isPush)
        note(fault, requestLine.split(separator: "?").first.map(String.init) ?? requestLine)
        switch fault {
        case .unavailable:
            let payload = #"{"error":{"code":"unavailable","message":"the conformance proxy's fault"}}"#
            sendAll(client, Array("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Type: application/json\r\nContent-Length: \(payload.utf8.count)\r\nConnection: close\r\n\r\n\(payload)".utf8))
            return
        case .dropRequest:
            return
        default: break
        }
        // The server is down: nothing answers (an armed crash happens all the same).
        guard let upstream else {
            action?()
            return
        }
        // The request as sent, but for one request per connection.
        var forwarded = lines.filter { line in
            let lower = line.lowercased()
            return !lower.hasPrefix("connection:") && !lower.hasPrefix("keep-alive:") && !lower.hasPrefix("expect:")
        }
        forwarded.append("Connection: close")
        let request = Array((forwarded.joined(separator: "\r\n") + "\r\n\r\n").utf8) + body
        if fault == .duplicate { _ = exchange(port: upstream, request: request) }
        let answer = exchange(port: upstream, request: request)
        guard let answer, !answer.isEmpty else {
            action?()
            return
        }
        switch fault {
        case .dropAnswer:
            return
        case .crashAfterCommit:
            action?()
            return
        case .cutAnswer:
            let headEnd = find(Array("\r\n\r\n".utf8), in: answer).map { $0 + 4 } ?? answer.count
            let cut = cutsHeads ? max(1, answer.count / 2) : headEnd + (answer.count - headEnd) / 2
            sendAll(client, Array(answer.prefix(cut)))
        case .resetMidAnswer:
            sendAll(client, Array(answer.prefix(max(1, answer.count / 2))))
            var linger = linger(l_onoff: 1, l_linger: 0)
            setsockopt(client, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
        default:
            sendAll(client, answer)
        }
    }

    /// A request's head (without its blank line) and body, or nil when the client went away.
    /// A client that asks `Expect: 100-continue` is told to go on.
    private func readRequest(_ fd: Int32) -> (String, [UInt8])? {
        var buffer: [UInt8] = []
        let marker = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while headEnd == nil {
            guard let more = receive(fd) else { return nil }
            buffer += more
            headEnd = find(marker, in: buffer)
        }
        let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
        var body = Array(buffer[(headEnd! + 4)...])
        var length = 0
        var chunked = false
        var expectsContinue = false
        for line in head.components(separatedBy: "\r\n").dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard parts.count == 2 else { continue }
            if parts[0] == "content-length" { length = Int(parts[1]) ?? 0 }
            if parts[0] == "transfer-encoding" && parts[1].contains("chunked") { chunked = true }
            if parts[0] == "expect" && parts[1] == "100-continue" { expectsContinue = true }
        }
        if expectsContinue && body.isEmpty && (length > 0 || chunked) { sendAll(fd, Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) }
        if chunked {
            let end = Array("0\r\n\r\n".utf8)
            while !(body.count >= end.count && Array(body.suffix(end.count)) == end) {
                guard let more = receive(fd) else { return nil }
                body += more
            }
        } else {
            while body.count < length {
                guard let more = receive(fd) else { return nil }
                body += more
            }
        }
        return (head, body)
    }

    /// Sends `request` to the server and reads its answer to the end (nil: no connection).
    private func exchange(port: Int, request: [UInt8]) -> [UInt8]? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var address = Self.loopback(port: port)
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else { return nil }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard sendAll(fd, request) else { return nil }
        var answer: [UInt8] = []
        while let more = receive(fd) { answer += more }
        return answer
    }

    private func receive(_ fd: Int32) -> [UInt8]? {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n < 0 && errno == EINTR { continue }
            return n > 0 ? Array(chunk[0..<n]) : nil
        }
    }

    @discardableResult
    private func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }

    private func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start..<(start + needle.count)].elementsEqual(needle) { return start }
        return nil
    }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }
}

/// A failure of the harness's own machinery (a process that did not start, a driver that
/// broke the driver protocol).
public struct HarnessError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
