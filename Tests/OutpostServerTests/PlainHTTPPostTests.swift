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
    /// What a listener received: the request's head and body.
    final class Received: Sendable {
        let value = Mutex<(head: String, body: [UInt8])?>(nil)
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
            received.value.withLock { $0 = (head, Array(bytes.prefix(length))) }
            answer(fd)
        }
        defer { listener.stop() }
        try await body(URL(string: "http://127.0.0.1:\(listener.port)/hooks/outpost?token=a%20b")!, received)
    }

    static func write(_ fd: Int32, _ text: String) { ProxySocket.writeAll(fd, Array(text.utf8)) }

    @Test func theRequestCarriesItsHeadersAndBodyAndTheStatusIsTheAnswer() async throws {
        try await Self.withListener({ Self.write($0, "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n") }) { url, received in
            let answer = await PlainHTTPPost.post(url, body: Array("{\"space\":\"s\"}".utf8), headers: [("Outpost-Delivery", "d1")], timeout: 30)
            #expect(answer == .status(204))
            let (head, body) = try #require(received.value.withLock { $0 })
            #expect(head.hasPrefix("POST /hooks/outpost?token=a%20b HTTP/1.1\r\n"))
            #expect(ProxySocket.field("Host", in: head) == "127.0.0.1:\(url.port!)")
            #expect(ProxySocket.field("Outpost-Delivery", in: head) == "d1")
            #expect(ProxySocket.field("Connection", in: head) == "close")
            #expect(body == Array("{\"space\":\"s\"}".utf8))
        }
    }

    @Test func interimAnswersAreSkippedAndAFailureStatusIsKept() async throws {
        try await Self.withListener({ Self.write($0, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy") }) { url, _ in
            #expect(await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 30) == .status(503))
        }
    }

    @Test func anAnswerHeadPastTheBoundIsNoAnswer() async throws {
        let long = "HTTP/1.1 200 OK\r\nX-Long: " + String(repeating: "a", count: WebhookHTTPClient.maxAnswerBytes) + "\r\n\r\n"
        try await Self.withListener({ Self.write($0, long) }) { url, _ in
            let answer = await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 30)
            #expect(answer == .noAnswer("no answer: the answer's head is longer than \(WebhookHTTPClient.maxAnswerBytes) bytes"))
        }
    }

    @Test func aReceiverThatClosesOrIsNotHTTPGivesNoAnswer() async throws {
        try await Self.withListener({ _ in }) { url, _ in
            #expect(await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 30) == .noAnswer("no answer: the receiver closed the connection"))
        }
        try await Self.withListener({ Self.write($0, "SSH-2.0-OpenSSH\r\n\r\n") }) { url, _ in
            guard case .noAnswer(let why) = await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 30) else {
                Issue.record("a status from a peer that is not HTTP")
                return
            }
            #expect(why.contains("did not answer HTTP"))
        }
    }

    /// The listener holds the connection until the client closes it (its read sees the end).
    static func hold(_ fd: Int32) {
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) > 0 {}
    }

    @Test func aHeldRequestEndsAtTheTimeoutAndCancellingEndsTheWait() async throws {
        try await Self.withListener(Self.hold) { url, _ in
            #expect(await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 1) == .noAnswer("no answer within the timeout"))
        }
        try await Self.withListener(Self.hold) { url, received in
            let task = Task { await PlainHTTPPost.post(url, body: [1], headers: [], timeout: 300) }
            try await eventually("the request received") { received.value.withLock { $0 != nil } }
            task.cancel()
            #expect(await task.value == .noAnswer("no answer: the delivery was cancelled"))
        }
    }

    @Test func noListenerIsNoAnswer() async throws {
        let (fd, port) = try ProxySocket.listen()
        ProxySocket.closeListener(fd)
        guard case .noAnswer(let why) = await PlainHTTPPost.post(URL(string: "http://127.0.0.1:\(port)/")!, body: [1], headers: [], timeout: 30) else {
            Issue.record("a status with nobody listening")
            return
        }
        #expect(why.hasPrefix("no answer: cannot connect to 127.0.0.1:\(port)"))
    }
}
