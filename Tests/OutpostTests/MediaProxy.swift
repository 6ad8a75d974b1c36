import Foundation
import OutpostTestBasics
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(OutpostTestSupport)
import OutpostTestSupport

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

    private struct State: Sendable {
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
    /// Watched: a test awaits the held and active connections, woken as they change.
    private let state: Watched<State>
    /// Wakes the threads of held requests when `releases` grows (they wait on it, holding
    /// no lock of `state`).
    private let released = NSCondition()

    init(upstreamPort: Int) throws {
        state = Watched(State(upstreamPort: upstreamPort))
        (listener, port) = try ProxySocket.listen()
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Requests whose request line contains `path` get `behavior`, after `skip` of them
    /// passed, `times` times (nil: from then on).
    func on(_ path: String, _ behavior: Behavior, skip: Int = 0, times: Int? = 1) {
        state.update { $0.rules.append(Rule(path: path, behavior: behavior, skip: skip, times: times)) }
    }

    /// Forgets every rule: requests pass from now on.
    func clearRules() {
        state.update { $0.rules.removeAll() }
    }

    /// Every request so far.
    var log: [Request] { state.value.log }

    /// The chunk indexes of the PUTs that reached the proxy since `mark` (a log count).
    func chunkPuts(since mark: Int = 0) -> [Int] {
        log.dropFirst(mark).compactMap(\.chunk)
    }

    /// Requests held right now.
    var held: Int { state.value.held }

    /// Closes every held connection without an answer.
    func releaseHeld() {
        state.update { $0.releases += 1 }
        wakeHeld()
    }

    /// Waits until `count` requests are held; fails after the tests' deadline.
    func waitUntilHeld(_ count: Int = 1, fileID: String = #fileID, line: Int = #line) async throws {
        try await state.until("\(count) request(s) held by the proxy", fileID: fileID, line: line) { $0.held >= count }
    }

    /// Waits until every connection but the held ones is done (nothing more will reach
    /// the server from them); fails after the tests' deadline.
    func waitUntilQuiet(fileID: String = #fileID, line: Int = #line) async throws {
        try await state.until("every connection through the proxy but the held ones done", fileID: fileID, line: line) { $0.active <= $0.held }
    }

    func stop() {
        state.update {
            $0.stopped = true
            $0.releases += 1
        }
        wakeHeld()
        ProxySocket.closeListener(listener)
    }

    /// Wakes the held requests' threads to look at `releases` again. Taking the
    /// condition's lock orders this after a thread's check: none misses the wake-up.
    private func wakeHeld() {
        released.lock()
        released.broadcast()
        released.unlock()
    }

    private func acceptLoop() {
        ProxySocket.acceptLoop(listener, stopped: { state.value.stopped }, accepted: { state.update { $0.active += 1 } }) { [self] client in
            handle(client)
            state.update { $0.active -= 1 }
        }
    }

    private func behavior(for requestLine: String) -> Behavior {
        state.update { s -> Behavior in
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
        guard let (head, rest) = ProxySocket.readHead(client) else { return }
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let requestLine = lines.first ?? ""
        let parts = requestLine.split(separator: " ")
        guard parts.count >= 2 else { return }
        let behavior = behavior(for: requestLine)
        state.update { $0.log.append(Request(method: String(parts[0]), path: String(parts[1]), behavior: behavior)) }
        let length = ProxySocket.contentLength(lines)
        ProxySocket.continueIfExpected(client, head: head, received: rest.count, length: length)
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
        guard let body = ProxySocket.readBody(client, rest, length) else { return }
        let request = Array(ProxySocket.upstreamHead(lines).utf8) + body
        let upstream = state.value.upstreamPort
        switch behavior {
        case .pass:
            if let answer = ProxySocket.forward(request, port: upstream) { ProxySocket.writeAll(client, answer) }
        case .loseAnswer:
            _ = ProxySocket.forward(request, port: upstream)
            shutdown(client, Int32(SHUT_RDWR))
        case .hold(let forwardFirst):
            if forwardFirst { _ = ProxySocket.forward(request, port: upstream) }
            let releases = state.update { s -> Int in
                s.held += 1
                return s.releases
            }
            released.lock()
            while state.value.releases == releases { released.wait() }
            released.unlock()
            shutdown(client, Int32(SHUT_RDWR))
            state.update { $0.held -= 1 }
        case .cutRequest:
            break
        }
    }
}
#endif
