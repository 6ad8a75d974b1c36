import Foundation
import OutpostTestSupport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy in front of the test run's S3 store (one request per connection, as the
/// server's bucket client sends them) that injects the store's faults into requests a rule
/// matches: `503 SlowDown` without forwarding, a connection reset after part of the body, or
/// the request forwarded whole and its answer lost. Each connection runs on a thread of its
/// own, off the concurrency pool; every fault it injected is counted.
final class S3FaultProxy: Sendable {
    enum Fault: Sendable, Equatable {
        /// Answer `503` with S3's `SlowDown` error, forwarding nothing.
        case slowDown
        /// Forward the head and the first `bytes` of the body, then close both sides.
        case reset(afterBodyBytes: Int)
        /// Forward the request whole (the store acts on it), then close the client's side
        /// without an answer.
        case loseAnswer
    }

    /// Which requests a rule applies to: the request line (`PUT /bucket/key?partNumber=2…`).
    struct Rule: Sendable {
        let matches: @Sendable (String) -> Bool
        /// The faults for the next matching requests, in order; then requests pass.
        var faults: [Fault]
    }

    private let upstreamPort: Int
    private let rules = Mutex<[Rule]>([])
    private let injected = Mutex<[Fault]>([])
    private let box = Box()
    private let listener: LoopbackListener
    var port: Int { listener.port }
    var endpoint: String { "http://127.0.0.1:\(port)" }

    private final class Box: @unchecked Sendable {
        // @unchecked: written once in init, before the port is known to any client.
        var proxy: S3FaultProxy?
    }

    init(upstreamPort: Int) throws {
        self.upstreamPort = upstreamPort
        let box = self.box
        listener = try LoopbackListener { fd in box.proxy?.serve(fd) }
        box.proxy = self
    }

    /// Injects `faults`, one each, into the next requests whose request line `matches`.
    func inject(_ faults: [Fault], where matches: @escaping @Sendable (String) -> Bool) {
        rules.withLock { $0.append(Rule(matches: matches, faults: faults)) }
    }

    /// The faults injected so far, in order.
    var faultsInjected: [Fault] { injected.withLock { $0 } }

    func stop() { listener.stop() }

    /// Serves one connection (the listener closes it afterwards).
    private func serve(_ client: Int32) {
        guard let (head, start) = ProxySocket.readHead(client) else { return }
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let requestLine = lines.first ?? ""
        let fault = rules.withLock { rules -> Fault? in
            guard let i = rules.firstIndex(where: { !$0.faults.isEmpty && $0.matches(requestLine) }) else { return nil }
            return rules[i].faults.removeFirst()
        }
        if let fault { injected.withLock { $0.append(fault) } }
        let length = ProxySocket.contentLength(lines)
        var wanted = length
        if case .reset(let bytes) = fault { wanted = min(bytes, length) }
        guard var body = ProxySocket.readBody(client, start, wanted) else { return }
        if body.count > wanted { body = Array(body[0..<wanted]) }
        if fault == .slowDown {
            let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            ProxySocket.writeAll(client, Array("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: \(xml.utf8.count)\r\nConnection: close\r\n\r\n\(xml)".utf8))
            return
        }
        let request = Array(ProxySocket.upstreamHead(lines).utf8) + body
        if case .reset = fault {
            guard let upstream = ProxySocket.connect(port: upstreamPort) else { return }
            defer { close(upstream) }
            ProxySocket.writeAll(upstream, request)
            shutdown(upstream, Int32(SHUT_RDWR))
            shutdown(client, Int32(SHUT_RDWR))
            return
        }
        guard let answer = ProxySocket.forward(request, port: upstreamPort) else { return }
        if fault == .loseAnswer {
            shutdown(client, Int32(SHUT_RDWR))
            return
        }
        ProxySocket.writeAll(client, answer)
    }
}
