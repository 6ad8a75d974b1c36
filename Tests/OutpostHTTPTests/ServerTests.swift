// The engine over real sockets on 127.0.0.1. One serialized suite: the fd-count test
// must not see other tests' sockets, and a 2-core machine runs these best one at a time.
import Foundation
import Glibc
import OutpostTestSupport
import OutpostCompression
import Synchronization
import Testing
@testable import OutpostHTTP

private func echoRoutes(_ r: inout Router) {
    r.add(.GET, "/healthz", inline: { _ in HTTPResponse(json: json(#"{"status":"ok"}"#)) })
    r.add(.GET, "/hello/{name}") { req in HTTPResponse(text: "hello \(req.parameter("name")!) q=\(req.query("q") ?? "-")") }
    r.add(.POST, "/echo", bodyLimit: 1000) { req in
        HTTPResponse(headers: ["Content-Type": "application/octet-stream"], body: .bytes(req.body))
    }
    r.add(.PUT, "/echo", bodyLimit: 1000) { req in
        HTTPResponse(headers: ["Content-Type": "application/octet-stream"], body: .bytes(req.body))
    }
}

@Suite("HTTP server over sockets", .serialized, .timeLimit(.minutes(2)))
struct ServerTests {
    // MARK: Basics

    @Test func getKeepAliveDateAndRequestID() async throws {
        try await withServer(routes: echoRoutes) { s in
            // Connected and used on one thread: no wait for the test's task in between.
            let port = s.port
            let (r1, r2, r3) = try await io {
                let c = try TestClient.connect(port: port)
                defer { c.close() }
                try c.send(request("GET", "/healthz"))
                let r1 = try c.readResponse()
                try c.send(request("GET", "/hello/w%C3%B6rld?q=a+b", headers: [("X-Request-ID", "client-id_1.2:3")]))
                let r2 = try c.readResponse()
                try c.send(request("GET", "/healthz", headers: [("X-Request-ID", "bad id with spaces")]))
                let r3 = try c.readResponse()
                return (r1, r2, r3)
            }
            #expect(r1.status == 200)
            #expect(r1.text == #"{"status":"ok"}"#)
            #expect(r1.header("Content-Type") == "application/json")
            #expect(r1.header("Content-Length") == "15")
            #expect(r1.header("Date")?.hasSuffix(" GMT") == true)
            let serverTime = try #require(r1.header("X-Server-Time").flatMap { Int64($0) }, "every answer carries the server's time in ms")
            #expect(abs(serverTime - Int64(Date().timeIntervalSince1970 * 1000)) < 60_000)
            #expect(r1.header("X-Request-ID")?.isEmpty == false)
            #expect(r1.header("Connection") == nil)
            #expect(r2.status == 200)
            #expect(r2.text == "hello wörld q=a b")
            #expect(r2.header("X-Request-ID") == "client-id_1.2:3")
            #expect(r3.header("X-Request-ID") != "bad id with spaces")
            #expect(r3.header("X-Request-ID").map(isValidRequestID) == true)
            #expect(r1.header("X-Request-ID") != r3.header("X-Request-ID"))
        }
    }

    @Test func pipeliningAnswersInOrderWithSlowFirst() async throws {
        try await withServer(routes: { r in
            r.add(.GET, "/slow") { _ in
                try await Task.sleep(for: .milliseconds(300))
                return HTTPResponse(text: "slow")
            }
            r.add(.GET, "/fast") { _ in HTTPResponse(text: "fast") }
            r.add(.GET, "/inline", inline: { _ in HTTPResponse(text: "inline") })
            r.add(.POST, "/body") { req in HTTPResponse(text: "body:" + String(decoding: req.body, as: UTF8.self)) }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            let texts = try await io {
                try c.send(request("GET", "/slow") + request("GET", "/fast") + request("POST", "/body", body: json("xyz"))
                           + request("GET", "/inline") + request("HEAD", "/fast") + request("GET", "/fast"))
                var out: [String] = []
                for i in 0..<6 {
                    let r = try c.readResponse(head: i == 4)
                    out.append(i == 4 ? "head:\(r.header("Content-Length") ?? "?")" : r.text)
                }
                return out
            }
            #expect(texts == ["slow", "fast", "body:xyz", "inline", "head:4", "fast"])
        }
    }

    @Test func connectionCloseIsHonoured() async throws {
        try await withServer(routes: echoRoutes) { s in
            let (response, closed) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(request("GET", "/healthz", headers: [("Connection", "close")]))
                let r = try c.readResponse()
                return (r, try c.waitForClose())
            }
            #expect(response.status == 200)
            #expect(response.header("Connection") == "close")
            #expect(closed)
        }
    }

    @Test func http10ClosesByDefaultAndKeepsAliveWhenAsked() async throws {
        try await withServer(routes: echoRoutes) { s in
            let (plain, plainClosed) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(request("GET", "/healthz", version: "HTTP/1.0"))
                return (try c.readResponse(), try c.waitForClose())
            }
            #expect(plain.status == 200)
            #expect(plain.header("Connection") == "close")
            #expect(plainClosed)
            let (a, b) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(request("GET", "/healthz", headers: [("Connection", "keep-alive")], version: "HTTP/1.0"))
                let a = try c.readResponse()
                try c.send(request("GET", "/healthz", version: "HTTP/1.0"))
                return (a, try c.readResponse())
            }
            #expect(a.header("Connection") == "keep-alive")
            #expect(b.status == 200)
        }
    }

    @Test func headHasNoBodyButTheLengthOfGet() async throws {
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 5000)
        try await withServer(routes: { r in
            r.add(.GET, "/big") { _ in HTTPResponse(headers: ["Content-Type": "text/plain"], body: .bytes(big)) }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            let (head, get, headGzip) = try await io {
                try c.send(request("HEAD", "/big"))
                let head = try c.readResponse(head: true)
                try c.send(request("GET", "/big"))
                let get = try c.readResponse()
                try c.send(request("HEAD", "/big", headers: [("Accept-Encoding", "gzip")]))
                let headGzip = try c.readResponse(head: true)
                return (head, get, headGzip)
            }
            #expect(head.status == 200)
            #expect(head.header("Content-Length") == "5000")
            #expect(head.body.isEmpty)
            #expect(get.body == big)  // the HEAD sent no body: the next response parses cleanly
            #expect(headGzip.header("Content-Encoding") == "gzip")
            #expect(Int(headGzip.header("Content-Length") ?? "") ?? 5000 < 5000)
        }
    }

    // MARK: 100-continue and early answers

    @Test func expectContinueAccepted() async throws {
        try await withServer(routes: echoRoutes) { s in
            let (interim, final) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(Array("PUT /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n".utf8))
                let interim = try c.readResponse()
                try c.send("hello")
                return (interim, try c.readResponse())
            }
            #expect(interim.status == 100)
            #expect(final.status == 200)
            #expect(final.text == "hello")
        }
    }

    @Test func expectContinueRefusedByPreBodyCheck() async throws {
        let handlerRan = Flag()
        try await withServer(routes: { r in
            r.add(.PUT, "/private", preBody: { head, _ in
                guard head.headers["Authorization"] == "Bearer good" else { throw HTTPError.unauthorized() }
            }) { _ in
                handlerRan.fire()
                return HTTPResponse(text: "ok")
            }
        }) { s in
            let (response, closed) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(Array("PUT /private HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n".utf8))
                let r = try c.readResponse()  // the final answer, not 100 Continue
                return (r, try c.waitForClose())
            }
            #expect(response.status == 401)
            #expect(response.errorCode == "unauthorized")
            #expect(response.header("WWW-Authenticate") == "Bearer")
            #expect(response.header("Connection") == "close")
            #expect(closed)
            #expect(!handlerRan.isFired)
            // With the right token the same request goes through.
            let ok = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(Array("PUT /private HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer good\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n".utf8))
                guard try c.readResponse().status == 100 else { throw TestFailure("no 100 Continue") }
                try c.send("ab")
                return try c.readResponse()
            }
            #expect(ok.status == 200)
        }
    }

    @Test func preBodyRejectionWithoutBodyKeepsConnection() async throws {
        try await withServer(routes: { r in
            r.add(.GET, "/private", preBody: { _, _ in throw HTTPError.forbidden() }) { _ in HTTPResponse() }
            r.add(.GET, "/open") { _ in HTTPResponse(text: "open") }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            let (a, b) = try await io {
                try c.send(request("GET", "/private") + request("GET", "/open"))
                return (try c.readResponse(), try c.readResponse())
            }
            #expect(a.status == 403)
            #expect(a.errorCode == "forbidden")
            #expect(a.header("Connection") == nil)
            #expect(b.text == "open")
        }
    }

    @Test func payloadTooLargeBeforeTheBody() async throws {
        try await withServer(routes: echoRoutes) { s in
            // Headers only: the 413 must come without the client sending any body.
            let (response, closed) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(Array("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n".utf8))
                let r = try c.readResponse()
                return (r, try c.waitForClose())
            }
            #expect(response.status == 413)
            #expect(response.errorCode == "payload_too_large")
            #expect(response.text.contains(#""details":{"limit":1000}"#))
            #expect(closed)
            // With 100-continue: 413 instead of 100.
            let expecting = try await s.exchange(Array("POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n".utf8))
            #expect(expecting.status == 413)
        }
    }

    @Test func payloadTooLargeWhileSendingTheBodyIsReadable() async throws {
        // The client sends the whole oversized body at once, as naive clients do: the
        // server discards it (bounded) so the client reads the 413 instead of a reset.
        try await withServer(routes: echoRoutes) { s in
            let response = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                _ = c.trySend(request("POST", "/echo", body: [UInt8](repeating: 1, count: 200_000)))
                return try c.readResponse()
            }
            #expect(response.status == 413)
        }
    }

    @Test func chunkedBodyOverTheLimit() async throws {
        try await withServer(routes: echoRoutes) { s in
            let response = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(Array("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".utf8))
                for _ in 0..<3 { _ = c.trySend(Array("190\r\n".utf8) + [UInt8](repeating: 65, count: 400) + Array("\r\n".utf8)) }
                return try c.readResponse()
            }
            #expect(response.status == 413)
            #expect(response.text.contains(#""limit":1000"#))
            // Under the limit, chunked works.
            let fine = try await s.exchange(Array("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: v\r\n\r\n".utf8))
            #expect(fine.text == "abcde")
        }
    }

    // MARK: Limits and malformed input

    @Test func requestLineTooLongIs414() async throws {
        try await withServer(routes: echoRoutes) { s in
            let r = try await s.exchange(request("GET", "/" + String(repeating: "a", count: 9000)))
            #expect(r.status == 414)
            #expect(r.errorCode == "uri_too_long")
            #expect(r.text.contains(#""limit":8192"#))
            #expect(r.header("Connection") == "close")
        }
    }

    @Test func headersTooLargeIs431() async throws {
        try await withServer(routes: echoRoutes) { s in
            let headers = (0..<40).map { ("X-Filler-\($0)", String(repeating: "v", count: 500)) }
            let r = try await s.exchange(request("GET", "/healthz", headers: headers))
            #expect(r.status == 431)
            #expect(r.text.contains(#""limit":16384"#))
            #expect(r.header("Connection") == "close")
        }
    }

    @Test(arguments: [
        "GET /healthz\r\nHost: t\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n folded\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A : 1\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: -3\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: three\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a\u{07}b\r\n\r\n",
        "GET /he\u{01}althz HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /healthz HTTP/1.1\nHost: t\n\n",
        "GET /healthz HTTP/1.1\r\n\r\n",
        "GET /v1/a%2Fb HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /a/../healthz HTTP/1.1\r\nHost: t\r\n\r\n",
    ])
    func malformedIs400AndClose(_ malformed: RawRequest) async throws {
        let raw = malformed.text
        try await withServer(routes: echoRoutes) { s in
            let (r, closed) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                // A valid request after the bad one must never be answered.
                try c.send(Array(raw.utf8) + request("GET", "/healthz"))
                let r = try c.readResponse()
                return (r, try c.waitForClose())
            }
            #expect(r.status == 400, "\(raw.debugDescription)")
            #expect(r.errorCode == "bad_request")
            #expect(r.header("Connection") == "close")
            #expect(r.header("Content-Type") == "application/json")
            #expect(closed)
        }
    }

    @Test func unknownTransferCodingIs501() async throws {
        try await withServer(routes: echoRoutes) { s in
            let r = try await s.exchange(Array("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: br\r\n\r\n".utf8))
            #expect(r.status == 501)
            #expect(r.header("Connection") == "close")
        }
    }

    @Test func unknownContentEncodingIs415() async throws {
        try await withServer(routes: echoRoutes) { s in
            let r = try await s.exchange(request("POST", "/echo", headers: [("Content-Encoding", "br")], body: [1, 2, 3]))
            #expect(r.status == 415)
            #expect(r.errorCode == "unsupported_media_type")
        }
    }

    @Test func notFoundAndMethodNotAllowed() async throws {
        try await withServer(routes: echoRoutes) { s in
            let c = try await s.connect()
            defer { c.close() }
            let (a, b, h) = try await io {
                try c.send(request("GET", "/missing") + request("DELETE", "/healthz") + request("HEAD", "/healthz"))
                return (try c.readResponse(), try c.readResponse(), try c.readResponse(head: true))
            }
            #expect(a.status == 404)
            #expect(a.errorCode == "not_found")
            #expect(b.status == 405)
            #expect(b.errorCode == "method_not_allowed")
            #expect(b.header("Allow") == "GET, HEAD")
            #expect(h.status == 200)
            #expect(h.header("Content-Length") == "15")
        }
    }

    // MARK: Timeouts

    @Test func slowHeadersGet408() async throws {
        try await withServer(configure: { $0.headerTimeout = .milliseconds(400) }, routes: echoRoutes) { s in
            let (r, closed) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send("GET /healthz HTTP/1.1\r\nHost: t\r\n")
                let r = try c.readResponse()
                return (r, try c.waitForClose())
            }
            #expect(r.status == 408)
            #expect(r.errorCode == "request_timeout")
            #expect(r.header("Connection") == "close")
            #expect(closed)
        }
    }

    @Test func stalledBodyGets408() async throws {
        try await withServer(configure: { $0.bodyTimeout = .milliseconds(400) }, routes: echoRoutes) { s in
            let (r, closed) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(Array("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly-a-little".utf8))
                let r = try c.readResponse()
                return (r, try c.waitForClose())
            }
            #expect(r.status == 408)
            #expect(closed)
        }
    }

    @Test func idleKeepAliveConnectionIsClosedSilently() async throws {
        try await withServer(configure: { $0.idleTimeout = .milliseconds(300) }, routes: echoRoutes) { s in
            let (r, rest) = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(request("GET", "/healthz"))
                let r = try c.readResponse()
                return (r, try c.readToEOF())
            }
            #expect(r.status == 200)
            #expect(rest.isEmpty)
        }
    }

    // MARK: gzip

    @Test func gzipRequestBodyIsDecompressed() async throws {
        try await withServer(routes: echoRoutes) { s in
            let plain = Array(String(repeating: "compressible ", count: 70).utf8)  // 910 bytes, under the limit
            let r = try await s.exchange(request("POST", "/echo", headers: [("Content-Encoding", "gzip")], body: Gzip.compress(plain)))
            #expect(r.status == 200)
            #expect(r.body == plain)
            let corrupt = try await s.exchange(request("POST", "/echo", headers: [("Content-Encoding", "gzip")], body: [0x1F, 0x8B, 1, 2, 3]))
            #expect(corrupt.status == 400)
        }
    }

    @Test func gzipBombIs413() async throws {
        try await withServer(routes: echoRoutes) { s in
            // 10 MB of zeros compress to about 10 KB: within the wire allowance, far over the limit.
            let bomb = Gzip.compress([UInt8](repeating: 0, count: 10_000_000))
            let r = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(Array("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n".utf8))
                _ = c.trySend(Array((String(bomb.count, radix: 16) + "\r\n").utf8) + bomb + Array("\r\n0\r\n\r\n".utf8))
                return try c.readResponse()
            }
            #expect(r.status == 413)
            #expect(r.text.contains(#""limit":1000"#))
            // With Content-Length too (the compressed size is small enough to be read).
            let small = Gzip.compress([UInt8](repeating: 0, count: 5000))
            let r2 = try await s.exchange(request("POST", "/echo", headers: [("Content-Encoding", "gzip")], body: small))
            #expect(r2.status == 413)
        }
    }

    @Test func gzipResponseOnlyWhenAskedAndLarge() async throws {
        let big = Array(String(repeating: "{\"k\":\"value\"},", count: 200).utf8)
        try await withServer(routes: { r in
            r.add(.GET, "/big") { _ in HTTPResponse(json: big) }
            r.add(.GET, "/small") { _ in HTTPResponse(json: json(#"{"a":1}"#)) }
            r.add(.GET, "/binary") { _ in HTTPResponse(headers: ["Content-Type": "image/jpeg"], body: .bytes(big)) }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            let rs = try await io {
                try c.send(request("GET", "/big", headers: [("Accept-Encoding", "gzip, deflate")])
                           + request("GET", "/big")
                           + request("GET", "/big", headers: [("Accept-Encoding", "gzip;q=0")])
                           + request("GET", "/small", headers: [("Accept-Encoding", "gzip")])
                           + request("GET", "/binary", headers: [("Accept-Encoding", "gzip")]))
                return try (0..<5).map { _ in try c.readResponse() }
            }
            #expect(rs[0].header("Content-Encoding") == "gzip")
            #expect(rs[0].header("Vary") == "Accept-Encoding")
            #expect(try Gzip.decompress(rs[0].body, limit: 1 << 20) == big)
            #expect(rs[1].header("Content-Encoding") == nil)
            #expect(rs[1].header("Vary") == "Accept-Encoding")
            #expect(rs[1].body == big)
            #expect(rs[2].header("Content-Encoding") == nil)
            #expect(rs[3].header("Content-Encoding") == nil)
            #expect(rs[3].text == #"{"a":1}"#)
            #expect(rs[4].header("Content-Encoding") == nil)
        }
    }

    // MARK: Handler errors

    @Test func handlerErrorsAreRenderedAndTheConnectionGoesOn() async throws {
        struct Boom: Error {}
        try await withServer(routes: { r in
            r.add(.GET, "/boom") { _ in throw Boom() }
            r.add(.GET, "/inline-boom", inline: { _ in throw Boom() })
            r.add(.GET, "/conflict") { _ in
                throw HTTPError(.conflict, code: "upload_incomplete", message: "missing chunks",
                                details: ["missing": .ints([3, 4]), "names": .strings(["a"])])
            }
            r.add(.GET, "/busy") { _ in throw HTTPError.unavailable(retryAfterSeconds: 3) }
            r.add(.GET, "/ok") { _ in HTTPResponse(text: "ok") }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            let rs = try await io {
                try c.send(request("GET", "/boom") + request("GET", "/inline-boom") + request("GET", "/conflict")
                           + request("GET", "/busy") + request("GET", "/ok"))
                return try (0..<5).map { _ in try c.readResponse() }
            }
            #expect(rs[0].status == 500)
            #expect(rs[0].text == #"{"error":{"code":"internal_error","message":"internal server error"}}"#)
            #expect(rs[1].status == 500)
            #expect(rs[2].status == 409)
            #expect(rs[2].text == #"{"error":{"code":"upload_incomplete","message":"missing chunks","details":{"missing":[3,4],"names":["a"]}}}"#)
            #expect(rs[3].status == 503)
            #expect(rs[3].header("Retry-After") == "3")
            #expect(rs[4].text == "ok")
        }
    }

    // MARK: Streams, files, held responses

    @Test func streamedResponses() async throws {
        try await withServer(routes: { r in
            r.add(.GET, "/chunked") { _ in
                HTTPResponse(headers: ["Content-Type": "text/plain"], body: .stream(length: nil) { w in
                    for i in 0..<50 { try await w.write("line \(i)\n") }
                })
            }
            r.add(.GET, "/sized") { _ in
                HTTPResponse(headers: ["Content-Type": "application/octet-stream"], body: .stream(length: 10) { w in
                    try await w.write([0, 1, 2, 3, 4])
                    try await w.write([5, 6, 7, 8, 9])
                })
            }
            r.add(.GET, "/inline-stream", inline: { _ in
                HTTPResponse(headers: ["Content-Type": "text/plain"], body: .stream(length: nil) { w in try await w.write("inline") })
            })
            r.add(.GET, "/after") { _ in HTTPResponse(text: "after") }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            let rs = try await io {
                try c.send(request("GET", "/chunked") + request("GET", "/sized") + request("GET", "/chunked", headers: [("Accept-Encoding", "gzip")])
                           + request("HEAD", "/chunked") + request("HEAD", "/sized") + request("GET", "/inline-stream") + request("GET", "/after"))
                return try (0..<7).map { i in try c.readResponse(head: i == 3 || i == 4) }
            }
            let expected = (0..<50).map { "line \($0)\n" }.joined()
            #expect(rs[0].header("Transfer-Encoding") == "chunked")
            #expect(rs[0].text == expected)
            #expect(rs[1].header("Content-Length") == "10")
            #expect(rs[1].body == Array(0...9))
            #expect(rs[2].header("Content-Encoding") == "gzip")
            #expect(String(decoding: try Gzip.decompress(rs[2].body, limit: 1 << 20), as: UTF8.self) == expected)
            #expect(rs[3].header("Transfer-Encoding") == "chunked")
            #expect(rs[3].body.isEmpty)
            #expect(rs[4].header("Content-Length") == "10")
            #expect(rs[5].text == "inline")
            #expect(rs[6].text == "after")
        }
    }

    @Test func streamWriterAppliesBackPressure() async throws {
        let written = Atomic<Int>(0)
        let finished = Flag()
        let writer = Mutex<HTTPBodyWriter?>(nil)
        let total = 64 * 1024 * 1024
        try await withServer(configure: { $0.streamHighWater = 64 * 1024 }, routes: { r in
            r.add(.GET, "/firehose") { _ in
                HTTPResponse(headers: ["Content-Type": "application/octet-stream"], body: .stream(length: total) { w in
                    writer.withLock { $0 = w }
                    let piece = [UInt8](repeating: 7, count: 64 * 1024)
                    for _ in 0..<(total / piece.count) {
                        try await w.write(piece)
                        written.add(piece.count, ordering: .relaxed)
                    }
                    finished.fire()
                })
            }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            try await io { try c.send(request("GET", "/firehose")) }
            // The client reads nothing: the producer is stalled once the socket buffers and
            // the writer's high-water mark are full, far short of 64 MiB, and only a read
            // by the client lets it go on.
            try await eventually("the producer waits for room") { writer.withLock { $0?.isWaitingForRoom } == true }
            #expect(!finished.isFired)
            #expect(written.load(ordering: .relaxed) < total / 2)
            let r = try await io { try c.readResponse() }
            #expect(r.body.count == total)
            #expect(await finished.wait(timeout: .seconds(10)))
        }
    }

    @Test func producerFailureTruncatesTheResponse() async throws {
        struct Broken: Error {}
        try await withServer(routes: { r in
            r.add(.GET, "/broken") { _ in
                HTTPResponse(headers: ["Content-Type": "text/plain"], body: .stream(length: nil) { w in
                    try await w.write("partial")
                    throw Broken()
                })
            }
        }) { s in
            let raw = try await io {
                let c = try TestClient.connect(port: s.port)
                defer { c.close() }
                try c.send(request("GET", "/broken"))
                return String(decoding: try c.readToEOF(), as: UTF8.self)
            }
            #expect(raw.hasPrefix("HTTP/1.1 200"))
            #expect(raw.contains("partial"))
            #expect(!raw.hasSuffix("0\r\n\r\n"))  // no last-chunk: the client knows it is incomplete
        }
    }

    @Test func fileResponsesWithOffsetAndLength() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-http-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("blob").path
        var content = [UInt8]()
        for i in 0..<300_000 { content.append(UInt8(truncatingIfNeeded: i &* 31)) }
        #expect(FileManager.default.createFile(atPath: path, contents: Data(content)))
        try await withServer(routes: { r in
            r.add(.GET, "/file") { _ in HTTPResponse(headers: ["Content-Type": "application/octet-stream"], body: .file(path: path)) }
            r.add(.GET, "/range") { _ in
                HTTPResponse(status: .partialContent, headers: ["Content-Type": "application/json"], body: .file(path: path, offset: 1000, length: 150_000))
            }
            r.add(.GET, "/missing") { _ in HTTPResponse(body: .file(path: path + ".nope")) }
            r.add(.GET, "/beyond") { _ in HTTPResponse(body: .file(path: path, offset: 299_000, length: 5000)) }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            let rs = try await io {
                try c.send(request("GET", "/file") + request("GET", "/range", headers: [("Accept-Encoding", "gzip")]) + request("HEAD", "/range")
                           + request("GET", "/missing") + request("GET", "/beyond") + request("GET", "/file"))
                return try (0..<6).map { i in try c.readResponse(head: i == 2) }
            }
            #expect(rs[0].body == content)
            #expect(rs[1].status == 206)
            #expect(rs[1].header("Content-Encoding") == nil)  // files are never compressed
            #expect(rs[1].body == Array(content[1000..<151_000]))
            #expect(rs[2].header("Content-Length") == "150000")
            #expect(rs[2].body.isEmpty)
            #expect(rs[3].status == 500)
            #expect(rs[4].status == 500)
            #expect(rs[5].body == content)
        }
    }

    @Test func heldResponseCompletedFromAnotherTask() async throws {
        final class Held: Sendable {
            let waiting = Flag()
            let slot = Mutex<CheckedContinuation<String, Never>?>(nil)
            func resume(_ value: String) { slot.withLock { $0?.resume(returning: value); $0 = nil } }
        }
        let held = Held()
        try await withServer(routes: { r in
            r.add(.GET, "/poll") { _ in
                let value = await withCheckedContinuation { c in
                    held.slot.withLock { $0 = c }
                    held.waiting.fire()
                }
                return HTTPResponse(text: value)
            }
        }) { s in
            let c = try await s.connect()
            defer { c.close() }
            try await io { try c.send(request("GET", "/poll")) }
            await held.waiting.wait()
            #expect(!c.hasIncoming())
            Task.detached { held.resume("committed") }
            let r = try await io { try c.readResponse() }
            #expect(r.text == "committed")
        }
    }

    @Test func clientDisconnectCancelsTheHandler() async throws {
        let started = Flag()
        let cancelled = Flag()
        try await withServer(routes: { r in
            r.add(.GET, "/wait") { _ in
                started.fire()
                await withTaskCancellationHandler {
                    await Flag().wait()  // never fired: only cancellation ends this
                } onCancel: {
                    cancelled.fire()
                }
                return HTTPResponse()
            }
        }) { s in
            let c = try await s.connect()
            try await io { try c.send(request("GET", "/wait")) }
            await started.wait()
            c.close()
            #expect(await cancelled.wait(timeout: .seconds(10)))
            try await eventually("the closed connection is gone") { s.server.openConnections == 0 }
        }
    }

    // MARK: Shutdown, load, hygiene

    @Test func gracefulShutdownFinishesInFlightRequests() async throws {
        let started = Flag()
        let release = Flag()
        var router = Router()
        router.add(.GET, "/work") { _ in
            started.fire()
            await release.wait()
            return HTTPResponse(text: "done")
        }
        router.add(.GET, "/healthz", inline: { _ in HTTPResponse(text: "ok") })
        var config = TestServer.configuration()
        config.shutdownGrace = .seconds(20)
        let server = HTTPServer(configuration: config, router: router)
        let port = try server.start()
        let busy = try await io { try TestClient.connect(port: port) }
        let idle = try await io { try TestClient.connect(port: port) }
        defer {
            busy.close()
            idle.close()
        }
        try await io {
            try idle.send(request("GET", "/healthz"))
            _ = try idle.readResponse()
            try busy.send(request("GET", "/work"))
        }
        await started.wait()
        let shutdown = Task { await server.shutdown() }
        // Stop accepting: new connections are refused; the idle one is closed.
        try await eventually("new connections are refused") {
            (try? TestClient.connect(port: port)).map { c in c.close(); return false } ?? true
        }
        #expect(try await io { try idle.waitForClose() })
        release.fire()
        let r = try await io { try busy.readResponse() }
        #expect(r.text == "done")
        #expect(r.header("Connection") == "close")
        await shutdown.value
        #expect(server.openConnections == 0)
    }

    @Test func drainingAnswersKeepAliveRequestsWithClose() async throws {
        let started = Flag()
        let release = Flag()
        var router = Router()
        router.add(.GET, "/work") { _ in
            started.fire()
            await release.wait()
            return HTTPResponse(text: "done")
        }
        router.add(.GET, "/quick") { _ in HTTPResponse(text: "quick") }
        let server = HTTPServer(configuration: TestServer.configuration(), router: router)
        let port = try server.start()
        let a = try await io { try TestClient.connect(port: port) }
        let b = try await io { try TestClient.connect(port: port) }
        defer {
            a.close()
            b.close()
        }
        // A connection still in the listener's backlog when the listener closes is reset
        // by the kernel (errno 104 on b's next send): b must have been accepted first, which
        // its answer to a first request proves. Then b is mid-request (half a head) when
        // draining begins: it may finish it.
        let first = try await io {
            try b.send(request("GET", "/quick"))
            return try b.readResponse()
        }
        #expect(first.text == "quick" && first.header("Connection") != "close")
        try await io {
            try a.send(request("GET", "/work"))
            try b.send("GET /quick HTTP/1.1\r\n")
        }
        await started.wait()
        #expect(server.openConnections == 2)
        let shutdown = Task { await server.shutdown(grace: .seconds(20)) }
        // Draining has begun on every event loop once new connections are refused: each
        // loop closes its listener and marks its connections draining in the same step.
        try await eventually("new connections are refused") {
            (try? TestClient.connect(port: port)).map { c in c.close(); return false } ?? true
        }
        let quick = try await io {
            try b.send("Host: t\r\n\r\n")
            return try b.readResponse()
        }
        #expect(quick.text == "quick")
        #expect(quick.header("Connection") == "close")
        release.fire()
        #expect(try await io { try a.readResponse() }.header("Connection") == "close")
        await shutdown.value
    }

    @Test func shutdownGraceExpiryCancelsStragglers() async throws {
        let cancelled = Flag()
        let started = Flag()
        var router = Router()
        router.add(.GET, "/forever") { _ in
            started.fire()
            await withTaskCancellationHandler { await Flag().wait() } onCancel: { cancelled.fire() }
            return HTTPResponse()
        }
        let server = HTTPServer(configuration: TestServer.configuration(), router: router)
        let port = try server.start()
        let c = try await io { try TestClient.connect(port: port) }
        defer { c.close() }
        try await io { try c.send(request("GET", "/forever")) }
        await started.wait()
        await server.shutdown(grace: .milliseconds(200))
        #expect(await cancelled.wait(timeout: .seconds(10)))
        #expect(server.openConnections == 0)
    }

    @Test func slowClientsDoNotHoldUpOthers() async throws {
        try await withServer(configure: { $0.headerTimeout = .seconds(60) }, routes: echoRoutes) { s in
            let port = s.port
            // Half of them send half a head, half send nothing at all.
            let slow = try await io {
                try (0..<300).map { i in
                    let c = try TestClient.connect(port: port)
                    if i % 2 == 0 { try c.send("GET /healthz HTTP/1.1\r\nHost: t\r\nX-Never: finishes") }
                    return c
                }
            }
            defer { for c in slow { c.close() } }
            try await eventually("300 slow connections are open") { s.server.openConnections >= 300 }
            let answers = try await io {
                try (0..<20).map { i -> Int in
                    let c = try TestClient.connect(port: port)
                    defer { c.close() }
                    try c.send(request("GET", "/hello/\(i)") + request("GET", "/healthz"))
                    _ = try c.readResponse()
                    return try c.readResponse().status
                }
            }
            #expect(answers == [Int](repeating: 200, count: 20))
            // The slow ones were neither answered nor dropped meanwhile.
            #expect(slow.allSatisfy { !$0.hasIncoming() })
        }
    }

    @Test func malformedStormLeavesNoDescriptorsBehind() async throws {
        try await withServer(routes: echoRoutes) { s in
            // Counted among this server's sockets only: other suites open and close
            // descriptors in the same process meanwhile.
            // The count reads /proc, which fails while the process is briefly out of
            // descriptors (hundreds of tests share it): wait for a reading that sees the
            // listeners (one per event loop).
            let port = s.port
            var before = 0
            try await eventually("this server's listening sockets are counted") {
                before = socketDescriptorCount(localPort: port)
                return before >= 1
            }
            let garbage: [String] = [
                "GARBAGE\r\n\r\n", "GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n", "\u{00}\u{01}\u{02}\r\n",
                "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                "GET /" + String(repeating: "x", count: 10_000) + " HTTP/1.1\r\n\r\n",
                "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nnothex\r\n",
                "GET / HTTP/1.1\r\n" + String(repeating: "X: y\r\n", count: 5000),
            ]
            try await io {
                for i in 0..<210 {
                    let c = try TestClient.connect(port: port)
                    let raw = Array(garbage[i % garbage.count].utf8)
                    switch i % 3 {
                    case 0:  // send and read the answer
                        _ = c.trySend(raw)
                        _ = try? c.readResponse()
                        c.close()
                    case 1:  // send and vanish with a reset
                        _ = c.trySend(raw)
                        c.reset()
                    default:  // send half and close
                        _ = c.trySend(Array(raw.prefix(raw.count / 2)))
                        c.close()
                    }
                }
            }
            do {
                try await eventually("every bad connection closed and its socket released") {
                    s.server.openConnections == 0 && socketDescriptorCount(localPort: port) == before
                }
            } catch {
                Issue.record("\(error); server sockets before \(before), now \(socketDescriptorCount(localPort: port)); open connections \(s.server.openConnections)")
            }
            let r = try await s.exchange(request("GET", "/healthz"))
            #expect(r.status == 200)
        }
    }

    @Test func completionHookAndConnectionGauge() async throws {
        let logs = Watched<[HTTPRequestLog]>([])
        try await withServer(routes: echoRoutes) { s in
            s.server.onRequestComplete = { log in logs.update { $0.append(log) } }
            let c = try await s.connect()
            try await io {
                try c.send(request("GET", "/hello/x", headers: [("X-Request-ID", "rid-1")]) + request("POST", "/echo", body: json("12345")) + request("GET", "/nope"))
                for _ in 0..<3 { _ = try c.readResponse() }
            }
            // Answered: the connection was accepted and is open.
            #expect(s.server.openConnections == 1)
            c.close()
            try await eventually("the closed connection is gone") { s.server.openConnections == 0 }
            // The hook runs after each answer is handed to the kernel: the test awaits its calls.
            let all = try await logs.until("three requests logged") { $0.count >= 3 }
            #expect(all.count == 3)
            #expect(all[0].route == "/hello/{name}")
            #expect(all[0].method == .GET)
            #expect(all[0].status == 200)
            #expect(all[0].requestID == "rid-1")
            #expect(all[0].bytesIn == request("GET", "/hello/x", headers: [("X-Request-ID", "rid-1")]).count)
            #expect(all[0].bytesOut > 0)
            #expect(all[1].route == "/echo")
            #expect(all[1].bytesIn == request("POST", "/echo", body: json("12345")).count)
            #expect(all[2].route == nil)
            #expect(all[2].status == 404)
            #expect(all.allSatisfy { $0.duration >= .zero && $0.remoteAddress.hasPrefix("127.0.0.1:") })
        }
    }
}
