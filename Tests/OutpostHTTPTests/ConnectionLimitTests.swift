// The connection limits, the silent-connection timeout and the nosniff field of every
// answer, over real sockets on 127.0.0.1 (other 127.x.y.z sources stand for other clients).
import Foundation
import Glibc
import OutpostTestSupport
import Testing
@testable import OutpostHTTP

private func routes(_ r: inout Router) {
    r.add(.GET, "/healthz", inline: { _ in HTTPResponse(json: json(#"{"status":"ok"}"#)) })
    r.add(.GET, "/page", inline: { _ in
        // A handler's own value for the field is replaced by the engine's.
        HTTPResponse(headers: ["Content-Type": "text/html", "X-Content-Type-Options": "sniff-away"], body: .bytes(Array("<p>hi</p>".utf8)))
    })
    r.add(.POST, "/echo", bodyLimit: 10) { req in
        HTTPResponse(headers: ["Content-Type": "application/octet-stream"], body: .bytes(req.body))
    }
    r.add(.GET, "/fails") { _ in throw HTTPError(.conflict, code: "some_conflict", message: "no") }
}

@Suite("Connection limits and answer fields over sockets", .serialized, .timeLimit(.minutes(2)))
struct ConnectionLimitTests {
    // MARK: X-Content-Type-Options

    /// Every answer carries `X-Content-Type-Options: nosniff` exactly once: JSON, a page, a
    /// handler's error, an error answered before the body (413, then close), a routing
    /// error (404) and a parse error (400).
    @Test func everyAnswerSaysNosniff() async throws {
        try await withServer(routes: routes) { s in
            let answers = [
                try await s.exchange(request("GET", "/healthz")),
                try await s.exchange(request("GET", "/page")),
                try await s.exchange(request("GET", "/fails")),
                try await s.exchange(request("POST", "/echo", body: Array(repeating: 0x61, count: 100))),
                try await s.exchange(request("GET", "/nowhere")),
                try await s.exchange(Array("GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n".utf8)),
            ]
            #expect(answers.map(\.status) == [200, 200, 409, 413, 404, 400])
            for answer in answers {
                #expect(answer.headers.values(name: "X-Content-Type-Options") == ["nosniff"], "\(answer.status): \(answer.headers)")
            }
        }
    }

    // MARK: Silent connections

    /// A connection that sends nothing is closed, without an answer, at the header timeout,
    /// not after the (much longer) idle timeout; and counted.
    @Test func aSilentConnectionIsClosedAtTheHeaderTimeout() async throws {
        try await withServer(configure: { $0.headerTimeout = .milliseconds(300); $0.idleTimeout = .seconds(120) }, routes: routes) { s in
            let rest = try await io {
                // Reads give up after 10 s: the idle timeout would close it only after 120.
                let c = try TestClient.connect(port: s.port, timeout: 10)
                defer { c.close() }
                return try c.readToEOF()
            }
            #expect(rest.isEmpty)
            // The engine counts the close before it closes the socket: the EOF read above
            // comes after the count.
            #expect(s.server.connectionCounts.closedSilent == 1)
            try await eventually("the connection is gone") { s.server.openConnections == 0 }
        }
    }

    // MARK: The process-wide limit

    /// At `maxConnections`, the loops stop accepting: a third client's connection waits in
    /// the backlog unanswered, and is served once one of the first two closes.
    @Test func atTheProcessLimitNewConnectionsWaitForASlot() async throws {
        try await withServer(configure: { $0.maxConnections = 2 }, routes: routes) { s in
            let first = try await s.connect()
            let second = try await s.connect()
            defer { second.close() }
            // Each answered once: both accepted, and open.
            for c in [first, second] {
                #expect(try await io { try c.send(request("GET", "/healthz")); return try c.readResponse() }.status == 200)
            }
            #expect(s.server.openConnections == 2)
            let third = try await s.connect()
            defer { third.close() }
            try await io { try third.send(request("GET", "/healthz")) }
            try await eventually("a loop met the limit") { s.server.connectionCounts.acceptPauses >= 1 }
            #expect(s.server.openConnections == 2)
            #expect(!third.hasIncoming(), "the third connection was served past the limit")
            first.close()
            let answer = try await io { try third.readResponse() }
            #expect(answer.status == 200)
        }
    }

    // MARK: The per-address limit

    /// Over `maxConnectionsPerAddress`, a client's next connection is answered `503
    /// unavailable` with `Retry-After` and closed; another address is not affected; and a
    /// slot freed by a close is taken again.
    @Test func overThePerAddressLimitTheNextConnectionIs503() async throws {
        try await withServer(configure: { $0.maxConnectionsPerAddress = 2 }, routes: routes) { s in
            let port = s.port
            let first = try await io { try TestClient.connect(port: port, from: "127.0.0.1") }
            let second = try await io { try TestClient.connect(port: port, from: "127.0.0.1") }
            defer { second.close() }
            // Each answered once: both accepted, and counted for the address.
            for c in [first, second] {
                #expect(try await io { try c.send(request("GET", "/healthz")); return try c.readResponse() }.status == 200)
            }
            #expect(s.server.openConnections == 2)
            let (refused, closed) = try await io {
                let c = try TestClient.connect(port: port, from: "127.0.0.1")
                defer { c.close() }
                try c.send(request("GET", "/healthz"))
                let r = try c.readResponse()
                return (r, try c.waitForClose())
            }
            #expect(refused.status == 503)
            #expect(refused.errorCode == "unavailable")
            #expect(refused.header("Retry-After") == "1")
            #expect(refused.header("Connection") == "close")
            #expect(closed)
            #expect(s.server.connectionCounts.refusedOverAddressLimit == 1)

            let other = try await io {
                let c = try TestClient.connect(port: port, from: "127.0.0.2")
                defer { c.close() }
                try c.send(request("GET", "/healthz"))
                return try c.readResponse()
            }
            #expect(other.status == 200, "another address has its own count")

            first.close()
            try await eventually("the first connection is gone") { s.server.openConnections == 1 }
            let again = try await io {
                let c = try TestClient.connect(port: port, from: "127.0.0.1")
                defer { c.close() }
                try c.send(request("GET", "/healthz"))
                return try c.readResponse()
            }
            #expect(again.status == 200)
        }
    }

    /// The address key: IPv4 whole (also as an IPv4-mapped IPv6 address), IPv6 by its /64.
    @Test func clientAddressesCountIPv4WholeAndIPv6ByTheir64() {
        func key(_ text: String) -> ClientAddress {
            var storage = sockaddr_storage()
            withUnsafeMutablePointer(to: &storage) { p in
                if text.contains(":") {
                    p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { a in
                        a.pointee.sin6_family = sa_family_t(AF_INET6)
                        _ = inet_pton(AF_INET6, text, &a.pointee.sin6_addr)
                    }
                } else {
                    p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { a in
                        a.pointee.sin_family = sa_family_t(AF_INET)
                        _ = inet_pton(AF_INET, text, &a.pointee.sin_addr)
                    }
                }
            }
            return ClientAddress(storage)
        }
        #expect(key("203.0.113.7") == key("::ffff:203.0.113.7"))
        #expect(key("203.0.113.7") != key("203.0.113.8"))
        #expect(key("2001:db8:1:2::1") == key("2001:db8:1:2:ffff::9"))
        #expect(key("2001:db8:1:2::1") != key("2001:db8:1:3::1"))
        #expect(key("::1") != key("127.0.0.1"))
    }
}
