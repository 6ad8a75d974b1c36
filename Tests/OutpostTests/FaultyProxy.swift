import Foundation
import OutpostTestBasics
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// A one-request-per-connection HTTP proxy in front of a real server, that can misbehave the
/// way proxies do: answer `504` with an HTML page after the server handled the request, or
/// cut the server's answer off half-way. Each connection runs on its own thread.
final class FaultyProxy: Sendable {
    enum Behavior: Sendable {
        /// Forward and pass the answer through.
        case pass
        /// Forward (the server handles the request), then answer 504 with HTML.
        case gatewayTimeout
        /// Forward, then send only the first half of the answer and close.
        case cutOff
    }

    private struct State {
        var queue: [(path: String, behavior: Behavior)] = []
        var handled = 0
        /// Run on the proxy's thread once the request with this count has been answered
        /// by the server, before the answer is passed on.
        var answered: (request: Int, action: @Sendable () -> Void)?
        var stopped = false
        var upstreamPort: Int
    }

    let port: Int
    private let listener: Int32
    private let state: Mutex<State>

    /// Where requests go; a server restarted on another port is followed by setting it.
    var upstreamPort: Int {
        get { state.withLock { $0.upstreamPort } }
        set { state.withLock { $0.upstreamPort = newValue } }
    }

    init(upstreamPort: Int) throws {
        state = Mutex(State(upstreamPort: upstreamPort))
        (listener, port) = try ProxySocket.listen()
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// The next request whose path contains `path` gets `behavior`.
    func next(_ behavior: Behavior, forPathContaining path: String) {
        state.withLock { $0.queue.append((path, behavior)) }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Runs `action` on the proxy's connection thread once the `request`th request since
    /// the proxy started (see `requestsReceived`) has been answered by the server, before
    /// the answer is passed on: a client killed there sent the request, the server handled
    /// it, and the client never read the answer. Replaces an earlier one.
    func whenAnswered(request: Int, _ action: @escaping @Sendable () -> Void) {
        state.withLock { $0.answered = (request, action) }
    }

    /// How many requests have reached the proxy (counted when their head was read, before
    /// they are forwarded).
    var requestsReceived: Int { state.withLock { $0.handled } }

    func stop() {
        state.withLock { $0.stopped = true }
        ProxySocket.closeListener(listener)
    }

    private func acceptLoop() {
        ProxySocket.acceptLoop(listener, stopped: { state.withLock { $0.stopped } }) { [self] in handle($0) }
    }

    private func handle(_ client: Int32) {
        defer { close(client) }
        guard let (head, rest) = ProxySocket.readHead(client) else { return }
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let requestLine = lines.first ?? ""
        let (behavior, number) = state.withLock { s -> (Behavior, Int) in
            s.handled += 1
            if let i = s.queue.firstIndex(where: { requestLine.contains($0.path) }) { return (s.queue.remove(at: i).behavior, s.handled) }
            return (.pass, s.handled)
        }
        let length = ProxySocket.contentLength(lines)
        ProxySocket.continueIfExpected(client, head: head, received: rest.count, length: length)
        guard let body = ProxySocket.readBody(client, rest, length),
              let answer = ProxySocket.forward(Array(ProxySocket.upstreamHead(lines).utf8) + body, port: upstreamPort) else { return }
        let action = state.withLock { s -> (@Sendable () -> Void)? in
            guard let answered = s.answered, answered.request == number else { return nil }
            s.answered = nil
            return answered.action
        }
        action?()
        switch behavior {
        case .pass:
            ProxySocket.writeAll(client, answer)
        case .gatewayTimeout:
            let html = "<html><head><title>504 Gateway Time-out</title></head><body><h1>504 Gateway Time-out</h1></body></html>"
            ProxySocket.writeAll(client, Array("HTTP/1.1 504 Gateway Time-out\r\nContent-Type: text/html\r\nContent-Length: \(html.utf8.count)\r\nConnection: close\r\n\r\n\(html)".utf8))
        case .cutOff:
            ProxySocket.writeAll(client, Array(answer.prefix(max(1, answer.count / 2))))
        }
    }
}
#endif
