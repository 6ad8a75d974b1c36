import Foundation
import Testing
import Synchronization
import OutpostTestSupport
@testable import OutpostServer

/// `PlainHTTPPost`, the webhook client of `http://` receivers, against listeners on real
/// loopback sockets that answer each in their own way: the request as it is sent, interim
/// `1xx` heads, an answer head past the bound, a receiver that closes, one that holds the
/// request past the timeout, the task cancelled while it waits, and no listener at all.
@Suite struct PlainHTTPPostTests {
    /// The listeners are on loopback: these deliveries allow it (`--webhook-allow-private`).
    static let loopback = ReceiverAddressPolicy(allowPrivate: true)

    /// The class of a failed delivery (what a dead letter keeps), or nil for a status.
    static func kind(_ answer: WebhookHTTPClient.Answer) -> WebhookHTTPClient.NoAnswer.Kind? {
        if case .noAnswer(let why) = answer { return why.kind }
        return nil
    }

    /// What a listener received: the request's head and body, reported as it arrives.
    final class Received: Sendable {
        let value = Watched<(head: String, body: [UInt8])?>(nil)
    }

    /// Runs `body` with a listener that reads one request and then does `answer` with the
    /// connection; the listener is stopped after.
    static func withListener(_ answer: @escaping @Sendable (Int32) -> Void,
                             _ body: (URL, Received) async throws -> Void) async throws {
        let received = Received()
        let listener = try LoopbackListener { fd in
            guard let (head, rest) = ProxySocket.readHead(fd) else { return }
            let length = Int(ProxySocket.field("Content-Length", in: head) ?? "") ?? 0
            let bytes = ProxySocket.readBody(fd, rest, length) ?? []
            received.value.update { $0 = (head, Array(bytes.prefix(length))) }
            answer(fd)
        }
        defer { listener.stop() }
        try await body(URL(string: "http://127.0.0.1:\(listener.port)/hooks/outpost?token=a%20b")!, received)
    }

    static func write(_ fd: Int32, _ text: String) { ProxySocket.writeAll(fd, Array(text.utf8)) }

    @Test func theRequestCarriesItsHeadersAndBodyAndTheStatusIsTheAnswer() async throws {
        try await Self.withListener({ Self.write($0, "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n") }) { url, received in
            let answer = await PlainHTTPPost.post(url, body: Array("{\"space\":\"s\"}".utf8), headers: [("Outpost-Delivery", "d1")], timeout: 30, policy: Self.loopback)
            #expect(answer == .status(204))
            let (head, body) = try #require(received.value.value)
            #expect(head.hasPrefix("POST /hooks/outpost?token=a%20b HTTP/1.1\r\n"))
            #expect(ProxySocket.field("Host", in: head) == "127.0.0.1:\(url.port!)")
            #expect(ProxySocket.field("Outpost-Delivery", in: head) == "d1")
            #expect(ProxySocket.field("Connection", in: head) == "close")
            #expect(body == Array("{\"space\":\"s\"}".utf8))
        }
    }

    @Test func interimAnswersAreSkippedAndAFailureStatusIsKept() async throws {
        try await Self.withListener({ Self.write($0, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy") }) { url, _ in
            #expect(await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 30, policy: Self.loopback) == .status(503))
        }
    }

    @Test func anAnswerHeadPastTheBoundIsNoAnswer() async throws {
        let long = "HTTP/1.1 200 OK\r\nX-Long: " + String(repeating: "a", count: WebhookHTTPClient.maxAnswerBytes) + "\r\n\r\n"
        try await Self.withListener({ Self.write($0, long) }) { url, _ in
            let answer = await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 30, policy: Self.loopback)
            #expect(answer == .noAnswer(.init(.badAnswer, "the answer's head is longer than \(WebhookHTTPClient.maxAnswerBytes) bytes")))
            #expect(answer.failure == "bad_answer")
        }
    }

    @Test func aReceiverThatClosesOrIsNotHTTPGivesNoAnswer() async throws {
        try await Self.withListener({ _ in }) { url, _ in
            #expect(await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 30, policy: Self.loopback) == .noAnswer(.init(.connectionLost, "the receiver closed the connection")))
        }
        try await Self.withListener({ Self.write($0, "SSH-2.0-OpenSSH\r\n\r\n") }) { url, _ in
            guard case .noAnswer(let why) = await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 30, policy: Self.loopback) else {
                Issue.record("a status from a peer that is not HTTP")
                return
            }
            #expect(why.kind == .badAnswer && why.detail.contains("did not answer HTTP"))
        }
    }

    /// The listener holds the connection until the client closes it (its read sees the end).
    static func hold(_ fd: Int32) {
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) > 0 {}
    }

    @Test func aHeldRequestEndsAtTheTimeoutAndCancellingEndsTheWait() async throws {
        try await Self.withListener(Self.hold) { url, _ in
            #expect(await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 1, policy: Self.loopback) == .noAnswer(.init(.timeout, "no answer within the timeout")))
        }
        try await Self.withListener(Self.hold) { url, received in
            let task = Task { await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 300, policy: Self.loopback) }
            try await received.value.until("the request received") { $0 != nil }
            task.cancel()
            #expect(await task.value == .noAnswer(.init(.cancelled, "the delivery was cancelled")))
        }
    }

    @Test func noListenerIsNoAnswer() async throws {
        let (fd, port) = try ProxySocket.listen()
        ProxySocket.closeListener(fd)
        guard case .noAnswer(let why) = await PlainHTTPPost.post(URL(string: "http://127.0.0.1:\(port)/")!, body: [1], headers: [], timeout: 30, policy: Self.loopback) else {
            Issue.record("a status with nobody listening")
            return
        }
        #expect(why.kind == .connectFailed && why.detail.hasPrefix("cannot connect to 127.0.0.1:\(port)"))
        // What an admin reads of it is the class alone: never "Connection refused".
        #expect(WebhookHTTPClient.Answer.noAnswer(why).failure == "connect_failed")
    }

    /// Without `--webhook-allow-private`, a receiver whose name resolves to loopback (or to
    /// any refused address) is never connected to: the listener accepts nothing, and the
    /// answer is `address_refused`. The address judged is the one that would be connected
    /// to, for `http://`; for `https://` every address the name resolves to, before
    /// URLSession connects.
    @Test func aNameThatResolvesToARefusedAddressIsNeverConnectedTo() async throws {
        let accepted = Mutex(0)
        let listener = try LoopbackListener { _ in accepted.withLock { $0 += 1 } }
        defer { listener.stop() }
        let refusing = ReceiverAddressPolicy(allowPrivate: false)
        for url in ["http://localhost:\(listener.port)/hook", "http://127.0.0.1:\(listener.port)/hook", "http://[::ffff:127.0.0.1]:\(listener.port)/hook"] {
            let answer = await PlainHTTPPost.post(URL(string: url)!, body: [1], headers: [], timeout: 30, policy: refusing)
            #expect(Self.kind(answer) == .addressRefused, "\(url): \(answer)")
            #expect(answer.failure == "address_refused")
        }
        let client = WebhookHTTPClient(policy: refusing)
        defer { client.close() }
        let https = await client.post(URL(string: "https://localhost:\(listener.port)/hook")!, body: [1], headers: [], timeout: 30)
        #expect(Self.kind(https) == .addressRefused, "\(https)")
        // The same receiver, allowed, is reached (so the refusals above were the policy's).
        let allowed = await PlainHTTPPost.post(URL(string: "http://localhost:\(listener.port)/hook")!, body: [1], headers: [], timeout: 30, policy: Self.loopback)
        #expect(Self.kind(allowed) == .connectionLost, "\(allowed)")
        #expect(accepted.withLock { $0 } == 1)
    }
}
