import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A one-request-per-connection HTTP proxy in front of a real `outpost-server`, for media
/// tests: it logs every request that reaches it (so tests count chunk PUTs) and can cut a
/// request's body off, lose an answer, or hold a request until released (a process
/// "killed" while it waits). Each connection runs on its own thread; no Swift task ever
/// blocks on it.
final class MediaProxy: Sendable {
    enum Behavior: Sendable, Hashable {
        /// Forward and pass the answer through.
        case pass
        /// Read this many bytes of the request's body, then close both ways: the server
        /// never sees the request (a connection cut mid-chunk).
        case cutRequest(afterBodyBytes: Int)
        /// Forward (the server handles the request), then close without answering.
        case loseAnswer
        /// Hold the connection until `releaseHeld()`, then close it without answering;
        /// with `forward`, the server handles the request first.
        case hold(forward: Bool)
    }

    /// One request as it reached the proxy.
    struct Request: Sendable, Hashable {
        var method: String
        var path: String
        var behavior: Behavior
        /// The chunk index of a `PUT …/chunks/N`.
        var chunk: Int? {
            guard method == "PUT", let r = path.range(of: "/chunks/") else { return nil }
            return Int(path[r.upperBound...])
        }
    }

    private struct Rule {
        var path: String
        var behavior: Behavior
        var skip: Int
        var times: Int?
    }

    private struct State {
        var rules: [Rule] = []
        var log: [Request] = []
        var held = 0
        var active = 0
        var releases = 0
        var stopped = false
        var upstreamPort: Int
    }

    let port: Int
    private let listener: Int32
    private let state: Mutex<State>

    init(upstreamPort: Int) throws {
        state = Mutex(State(upstreamPort: upstreamPort))
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else { throw POSIXError(.EADDRINUSE) }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        port = Int(UInt16(bigEndian: addr.sin_port))
        listener = fd
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Requests whose request line contains `path` get `behavior`, after `skip` of them
    /// passed, `times` times (nil: from then on).
    func on(_ path: String, _ behavior: Behavior, skip: Int = 0, times: Int? = 1) {
        state.withLock { $0.rules.append(Rule(path: path, behavior: behavior, skip: skip, times: times)) }
    }

    /// Forgets every rule: requests pass from now on.
    func clearRules() {
        state.withLock { $0.rules.removeAll() }
    }

    /// Every request so far.
    var log: [Request] { state.withLock { $0.log } }

    /// The chunk indexes of the PUTs that reached the proxy since `mark` (a log count).
    func chunkPuts(since mark: Int = 0) -> [Int] {
        log.dropFirst(mark).compactMap(\.chunk)
    }

    /// Requests held right now.
    var held: Int { state.withLock { $0.held } }

    /// Closes every held connection without an answer.
    func releaseHeld() {
        state.withLock { $0.releases += 1 }
    }

    /// Waits (polling, off the cooperative pool's time) until `count` requests are held.
    func waitUntilHeld(_ count: Int = 1) async throws {
        while held < count { try await Task.sleep(for: .milliseconds(5)) }
    }

    /// Waits until every connection but the held ones is done (nothing more will reach
    /// the server from them).
    func waitUntilQuiet() async throws {
        while state.withLock({ $0.active > $0.held }) { try await Task.sleep(for: .milliseconds(5)) }
    }

    func stop() {
        state.withLock {
            $0.stopped = true
            $0.releases += 1
        }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if state.withLock({ $0.stopped }) { return }
                continue
            }
            state.withLock { $0.active += 1 }
            Thread.detachNewThread { [self] in
                handle(client)
                state.withLock { $0.active -= 1 }
            }
        }
    }

    private func behavior(for requestLine: String) -> Behavior {
        state.withLock { s -> Behavior in
            guard let i = s.rules.firstIndex(where: { requestLine.contains($0.path) }) else { return .pass }
            if s.rules[i].skip > 0 {
                s.rules[i].skip -= 1
                return .pass
            }
            let behavior = s.rules[i].behavior
            if let times = s.rules[i].times {
                if times <= 1 { s.rules.remove(at: i) } else { s.rules[i].times = times - 1 }
            }
            return behavior
        }
    }

    private func handle(_ client: Int32) {
        defer { close(client) }
        guard let (head, rest) = readHead(client) else { return }
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let requestLine = lines.first ?? ""
        let parts = requestLine.split(separator: " ")
        guard parts.count >= 2 else { return }
        let behavior = behavior(for: requestLine)
        state.withLock { $0.log.append(Request(method: String(parts[0]), path: String(parts[1]), behavior: behavior)) }
        let length = lines.compactMap { line -> Int? in
            let kv = line.split(separator: ":", maxSplits: 1)
            guard kv.count == 2, kv[0].lowercased() == "content-length" else { return nil }
            return Int(kv[1].trimmingCharacters(in: .whitespaces))
        }.first ?? 0
        if head.lowercased().contains("expect: 100-continue") && rest.count < length {
            writeAll(client, Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
        }
        if case .cutRequest(let n) = behavior {
            var got = rest.count
            var chunk = [UInt8](repeating: 0, count: 4096)
            while got < min(n, length) {
                let r = read(client, &chunk, min(chunk.count, n - got))
                if r <= 0 { break }
                got += r
            }
            shutdown(client, Int32(SHUT_RDWR))
            return
        }
        guard let body = readBody(client, rest, length) else { return }
        // One request per connection: ask the server to close, and drop Expect.
        let kept = lines.dropFirst().filter { !$0.lowercased().hasPrefix("connection:") && !$0.lowercased().hasPrefix("expect:") && !$0.isEmpty }
        let forwarded = ([requestLine] + kept).joined(separator: "\r\n") + "\r\nConnection: close\r\n\r\n"
        switch behavior {
        case .pass:
            if let answer = forward(Array(forwarded.utf8) + body) { writeAll(client, answer) }
        case .loseAnswer:
            _ = forward(Array(forwarded.utf8) + body)
            shutdown(client, Int32(SHUT_RDWR))
        case .hold(let forwardFirst):
            if forwardFirst { _ = forward(Array(forwarded.utf8) + body) }
            let releases = state.withLock { s -> Int in
                s.held += 1
                return s.releases
            }
            while state.withLock({ $0.releases == releases }) { usleep(2_000) }
            shutdown(client, Int32(SHUT_RDWR))
            state.withLock { $0.held -= 1 }
        case .cutRequest:
            break
        }
    }

    private func readHead(_ fd: Int32) -> (String, [UInt8])? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        let marker = Array("\r\n\r\n".utf8)
        while true {
            if buffer.count >= 4, let end = (0...(buffer.count - 4)).first(where: { buffer[$0..<($0 + 4)].elementsEqual(marker) }) {
                return (String(decoding: buffer[..<end], as: UTF8.self), Array(buffer[(end + 4)...]))
            }
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    private func readBody(_ fd: Int32, _ start: [UInt8], _ length: Int) -> [UInt8]? {
        var body = start
        var chunk = [UInt8](repeating: 0, count: 65536)
        while body.count < length {
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            body += chunk[0..<n]
        }
        return body
    }

    private func forward(_ request: [UInt8]) -> [UInt8]? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(state.withLock { $0.upstreamPort }).bigEndian
        let ok = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard ok == 0 else { return nil }
        writeAll(fd, request)
        var answer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { break }
            answer += chunk[0..<n]
        }
        return answer
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            offset += n
        }
    }
}
