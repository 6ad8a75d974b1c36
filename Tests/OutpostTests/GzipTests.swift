import Foundation
import OutpostCompression
import OutpostCore
import OutpostTestBasics
import Synchronization
import Testing
@testable import Outpost
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// The SDK's compressed request bodies: what `HTTPSyncTransport` puts on the wire, and a
/// real server inflating it.
@Suite("gzip request bodies", .offPoolWhileBlocking, .serverLogs)
struct GzipTests {
    static func changes(_ count: Int) -> [Change] {
        (0..<count).map { Change(changeId: "g\($0)", collection: "todos", id: "t\($0)", op: .put, data: todo("item \($0) " + String(repeating: "z", count: 100)), baseVersion: nil) }
    }

    /// One request as a listener received it: its head and its body as sent.
    struct Received: Sendable {
        var head: String
        var body: [UInt8]
    }

    /// Accepts one connection on `listener`, keeps its request and answers 500 (the test
    /// looks at the request only). Runs on a thread of its own.
    static func receiveOne(_ listener: Int32, into received: borrowing Mutex<Received?>) {
        let client = accept(listener, nil, nil)
        guard client >= 0 else { return }
        defer { close(client) }
        guard let (head, rest) = ProxySocket.readHead(client) else { return }
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let length = ProxySocket.contentLength(lines)
        ProxySocket.continueIfExpected(client, head: head, received: rest.count, length: length)
        guard let body = ProxySocket.readBody(client, rest, length) else { return }
        // Kept before the answer goes out: the transport returns after this.
        received.withLock { $0 = Received(head: head, body: body) }
        ProxySocket.writeAll(client, Array("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8))
    }

    /// The push as the transport sent it to a listener on a port of its own.
    static func sent(_ push: PushRequest) async throws -> Received {
        let (listener, port) = try ProxySocket.listen()
        defer { ProxySocket.closeListener(listener) }
        let received = Mutex<Received?>(nil)
        Thread.detachNewThread { receiveOne(listener, into: received) }
        let transport = HTTPSyncTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!, token: "t")
        _ = try? await transport.push(push, space: "team")
        return try #require(received.withLock { $0 }, "the listener received no request")
    }

    @Test func aBodyOver16KiBIsSentGzipAndInflatesToThePush() async throws {
        let push = PushRequest(clientId: "gz", changes: Self.changes(400))
        let plain = push.encoded()
        #expect(plain.count > 16 * 1024)
        let request = try await Self.sent(push)
        #expect(request.head.lowercased().contains("\r\ncontent-encoding: gzip\r\n"), "\(request.head)")
        #expect(Gzip.looksCompressed(request.body))
        #expect(try Gzip.decompress(request.body, limit: 1 << 22) == plain)
        #expect(request.body.count * 3 < plain.count, "a push body repeats its keys every change and shrinks")
    }

    @Test func aSmallBodyIsSentPlain() async throws {
        let push = PushRequest(clientId: "gz", changes: Self.changes(3))
        let request = try await Self.sent(push)
        #expect(!request.head.lowercased().contains("content-encoding"), "\(request.head)")
        #expect(request.body == push.encoded())
    }

    @Test func aRealServerAcceptsCompressedPushes() async throws {
        let world = try RealWorld()
        let transport = HTTPSyncTransport(baseURL: world.server.baseURL, token: world.token)
        let changes = Self.changes(400)
        #expect(PushRequest(clientId: "gz", changes: changes).encoded().count > 16 * 1024)
        let answer = try await transport.push(PushRequest(clientId: "gz", changes: changes), space: "team")
        #expect(answer.results.allSatisfy { $0.status == .applied })
        #expect(try await world.serverRecords().count == 400)
    }
}
#endif
