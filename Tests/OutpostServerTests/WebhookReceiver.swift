import Foundation
import OutpostCore
import OutpostTestSupport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A webhook receiver for tests on 127.0.0.1 and an ephemeral port, taking `POST /hook`:
/// it records every request (its raw body and the webhook headers) and answers as it is
/// told: accept (204), fail with a status, or hang (hold the request until `release()`, or
/// until the server gives up and closes the connection). It notes when a request of a
/// space arrives while another of the same space is still in flight; a test awaits what it
/// has seen (`until`), checked as each request arrives or ends. Each connection is
/// served on a thread of its own (`LoopbackListener`), so the receiver answers on time
/// however busy the test process's cooperative pool is.
final class WebhookReceiver: Sendable {
    enum Behaviour: Sendable, Equatable {
        case accept
        case fail(Int)
        case hang
    }

    /// One request as it arrived.
    struct Request: Sendable {
        var body: [UInt8]
        var signature: String?
        var delivery: String?
        var attempt: String?
        var contentType: String?
        /// How it was answered.
        var behaviour: Behaviour
        /// The body's `space`.
        var space: String
        /// Another request of the same space was in flight when it arrived.
        var overlapped: Bool

        var json: JSONValue { (try? JSONParser.parse(body)) ?? .null }
        /// The seqs of its changes, in the order sent.
        var seqs: [Int64] { json["changes"]?.arrayValue?.compactMap { $0["seq"]?.int64Value } ?? [] }
    }

    private struct State {
        var plan: [Behaviour] = []
        var otherwise: Behaviour = .accept
        var requests: [Request] = []
        var inFlight: [String: Int] = [:]
        /// The write ends of the pipes hung requests wait on; `release()` writes to each.
        var hung: [Int32] = []
        /// Hung requests that ended (released, or closed by the client).
        var hungEnded = 0
    }

    private let state = Watched(State())
    private let box = Box()
    private let listener: LoopbackListener
    var port: Int { listener.port }

    /// Starts listening; `behaviour` answers every request until `plan` says otherwise.
    init(_ behaviour: Behaviour = .accept) throws {
        let box = self.box
        listener = try LoopbackListener { fd in box.receiver?.serve(fd) }
        state.update { $0.otherwise = behaviour }
        box.receiver = self
    }

    /// The listener's connections reach the receiver through this (set once, before any connects).
    private final class Box: @unchecked Sendable {
        // @unchecked: written once in init, before the port is known to any client.
        var receiver: WebhookReceiver?
    }

    var url: String { "http://127.0.0.1:\(port)/hook" }

    /// Answers the next requests with `behaviours`, one each, then with `otherwise`.
    func plan(_ behaviours: [Behaviour], otherwise: Behaviour) {
        state.update {
            $0.plan = behaviours
            $0.otherwise = otherwise
        }
    }

    /// Every request so far, in arrival order.
    var requests: [Request] { state.value.requests }

    /// The requests answered 2xx.
    var delivered: [Request] { requests.filter { $0.behaviour == .accept } }

    /// Hung requests that ended so far.
    var hungEnded: Int { state.value.hungEnded }

    /// What the receiver has seen: the requests so far, in arrival order, and how many
    /// hung requests ended.
    struct Seen: Sendable {
        var requests: [Request]
        var hungEnded: Int
        /// The requests answered 2xx.
        var delivered: [Request] { requests.filter { $0.behaviour == .accept } }
    }

    /// Waits until `condition` holds for what the receiver has seen (checked as each
    /// request arrives or a hung one ends), and returns that; throws `NotReached`, naming
    /// `what`, at the tests' deadline.
    @discardableResult
    func until(_ what: String, fileID: String = #fileID, line: Int = #line, _ condition: @escaping @Sendable (Seen) -> Bool) async throws -> Seen {
        let state = try await self.state.until(what, fileID: fileID, line: line) { condition(Seen(requests: $0.requests, hungEnded: $0.hungEnded)) }
        return Seen(requests: state.requests, hungEnded: state.hungEnded)
    }

    /// Ends every hung request (with 503).
    func release() {
        let waiting = state.update { s -> [Int32] in
            defer { s.hung.removeAll() }
            return s.hung
        }
        for fd in waiting { _ = Glibc.write(fd, [UInt8(1)], 1) }
    }

    func stop() async {
        release()
        listener.stop()
    }

    /// Serves the requests of one connection, one after the other, until the client closes it.
    private func serve(_ fd: Int32) {
        while let (head, start) = ProxySocket.readHead(fd) {
            let length = Int(ProxySocket.field("Content-Length", in: head) ?? "") ?? 0
            guard let body = ProxySocket.readBody(fd, start, length) else { return }
            let status = receive(head: head, body: Array(body.prefix(length)), fd)
            guard let status else { return }
            let reason = status == 204 ? "No Content" : "Refused"
            let text = status == 204 ? "" : "refused on purpose"
            ProxySocket.writeAll(fd, Array("HTTP/1.1 \(status) \(reason)\r\nContent-Length: \(text.utf8.count)\r\n\r\n\(text)".utf8))
        }
    }

    /// Records one request and answers it: the status to send, or nil when the client
    /// closed the connection while the request hung.
    private func receive(head: String, body: [UInt8], _ fd: Int32) -> Int? {
        let space = (try? JSONParser.parse(body))?["space"]?.stringValue ?? ""
        let behaviour = state.update { s -> Behaviour in
            let b = s.plan.isEmpty ? s.otherwise : s.plan.removeFirst()
            s.inFlight[space, default: 0] += 1
            s.requests.append(Request(body: body, signature: ProxySocket.field("Outpost-Signature", in: head),
                                      delivery: ProxySocket.field("Outpost-Delivery", in: head),
                                      attempt: ProxySocket.field("Outpost-Attempt", in: head),
                                      contentType: ProxySocket.field("Content-Type", in: head),
                                      behaviour: b, space: space, overlapped: s.inFlight[space]! > 1))
            return b
        }
        defer { state.update { $0.inFlight[space]! -= 1 } }
        switch behaviour {
        case .accept:
            return 204
        case .fail(let code):
            return code
        case .hang:
            // Waits for release() (a byte on the pipe) or the client's close, whichever first.
            var pipeEnds: [Int32] = [0, 0]
            guard pipe(&pipeEnds) == 0 else { return 503 }
            defer { close(pipeEnds[0]); close(pipeEnds[1]) }
            state.update { $0.hung.append(pipeEnds[1]) }
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: pipeEnds[0], events: Int16(POLLIN), revents: 0)]
            while poll(&fds, 2, -1) < 0 && errno == EINTR {}
            state.update { s in
                s.hung.removeAll { $0 == pipeEnds[1] }
                s.hungEnded += 1
            }
            return fds[1].revents & Int16(POLLIN) != 0 ? 503 : nil
        }
    }
}
