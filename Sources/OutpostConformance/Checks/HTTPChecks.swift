import OutpostCore

/// Section 2's HTTP rules: headers on every response, connection handling, content
/// coding, limits, timeouts and malformed input.
enum HTTPChecks {
    /// Whether `text` is an IMF-fixdate (RFC 9110 section 5.6.7), e.g.
    /// `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func isIMFFixdate(_ text: String) -> Bool {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[5] == "GMT" else { return false }
        let days = ["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard days.contains(String(parts[0])), parts[1].count == 2, Int(parts[1]) != nil, months.contains(String(parts[2])),
              parts[3].count == 4, Int(parts[3]) != nil else { return false }
        let time = parts[4].split(separator: ":")
        return time.count == 3 && time.allSatisfy { $0.count == 2 && Int($0) != nil }
    }

    /// Fails unless `response` has a `Date` and an `X-Request-ID`.
    static func expectCommonHeaders(_ response: RawResponse, _ what: String) throws {
        let date = response.header("Date")
        try expect(date.map(isIMFFixdate) == true, "\(what): Date is \(date.map { "\"\($0)\"" } ?? "absent"), expected an IMF-fixdate such as \"Sun, 06 Nov 1994 08:49:37 GMT\"")
        let id = response.header("X-Request-ID") ?? ""
        try expect(!id.isEmpty, "\(what): no X-Request-ID")
    }

    /// Sends raw `bytes` on a new connection and reads one response; with `closeWithin`,
    /// also whether the server then closed the connection within that time.
    static func exchange(_ c: CheckContext, _ bytes: [UInt8], closeWithin: Duration? = nil) async throws -> (RawResponse, closed: Bool) {
        let connection = try await c.connect()
        defer { connection.close() }
        try? await connection.send(bytes)
        let response = try await connection.response(timeout: c.configuration.responseTimeout)
        guard let closeWithin else { return (response, false) }
        if case .closed = try await connection.awaitClose(timeout: closeWithin) { return (response, true) }
        return (response, false)
    }

    /// Fails unless `bytes` is answered `status` with the error envelope and `code`, and
    /// the server then closes the connection.
    static func expectErrorAndClose(_ c: CheckContext, _ bytes: [UInt8], status: Int, code: String, _ what: String) async throws {
        let (response, closed) = try await exchange(c, bytes, closeWithin: .seconds(3))
        try expectError(response, status, code, what)
        try expectCommonHeaders(response, what)
        try expect(closed, "\(what): the server kept the connection open after \(status); it must close it")
    }

    static func pushBody(_ c: CheckContext, id: String = "r1") -> [UInt8] {
        JSONValue.object(["clientId": "conformance", "changes": [ChangeJSON.put(c.unique("chg"), id: id, data: ["v": 1], base: nil)]]).encoded()
    }

    static let all: [Check] = [
        Check("http-date-and-request-id-on-every-response", section: "2", "every response, error or not, has Date and X-Request-ID") { c in
            let space = c.newSpace()
            let cases: [(String, String, String?)] = [
                ("GET", "/healthz", nil), ("GET", "/v1/info", nil), ("GET", "/v1/no-such-route", nil), ("DELETE", "/v1/info", nil),
                ("GET", CheckContext.spacePath(space, "pull"), nil), ("GET", CheckContext.spacePath(space, "pull") + "?since=bad", c.readToken(space)),
                ("GET", CheckContext.spacePath(space, "pull"), c.readToken(space)),
            ]
            for (method, path, token) in cases {
                let response = try await c.send(method, path, token: token)
                try expectCommonHeaders(response, "\(method) \(path) (\(response.status))")
            }
            let (bad, _) = try await exchange(c, Array("NOT A REQUEST\r\n\r\n".utf8))
            try expectCommonHeaders(bad, "a malformed request (\(bad.status))")
        },
        Check("http-request-id-echoed-or-generated", section: "2", "X-Request-ID is echoed when the request sent a safe one of at most 128 characters, generated otherwise") { c in
            let mine = "conformance-" + CheckContext.randomToken(16)
            let echoed = try await c.get("/healthz", headers: [("X-Request-ID", mine)])
            try expect(echoed.header("X-Request-ID") == mine, "sent X-Request-ID \(mine), got back \(echoed.header("X-Request-ID") ?? "none")")
            let longest = String(repeating: "a", count: 128)
            let atLimit = try await c.get("/v1/info", headers: [("X-Request-ID", longest)])
            try expect(atLimit.header("X-Request-ID") == longest, "a 128-character X-Request-ID was not echoed: got \(atLimit.header("X-Request-ID") ?? "none")")
            let tooLong = String(repeating: "b", count: 129)
            for (sent, what) in [(tooLong, "129 characters"), ("a\"b<script>", "unsafe characters")] {
                let response = try await c.get("/healthz", headers: [("X-Request-ID", sent)])
                let got = response.header("X-Request-ID") ?? ""
                try expect(!got.isEmpty && got != sent, "X-Request-ID of \(what) came back \(got.isEmpty ? "missing" : "unchanged"); expected a generated one")
            }
            let first = try await c.get("/healthz").header("X-Request-ID") ?? ""
            let second = try await c.get("/healthz").header("X-Request-ID") ?? ""
            try expect(!first.isEmpty && first != second, "generated request ids are missing or repeat: \"\(first)\", \"\(second)\"")
        },
        Check("http-keep-alive-by-default", section: "2", "an HTTP/1.1 connection stays open for further requests unless a side asks to close") { c in
            let connection = try await c.connect()
            defer { connection.close() }
            for (i, path) in ["/healthz", "/v1/info", "/healthz"].enumerated() {
                try await connection.send(c.requestBytes("GET", path))
                let response = try await connection.response(timeout: c.configuration.responseTimeout)
                try expectStatus(response, 200, "request \(i + 1) (GET \(path)) on one connection")
                try expect(!response.headerHasToken("Connection", "close"), "request \(i + 1) was answered with Connection: close")
            }
            if case .closed = try await connection.awaitClose(timeout: .milliseconds(500)) {
                throw CheckFailure("the server closed an idle keep-alive connection within 500 ms")
            }
        },
        Check("http-pipelined-requests-answered-in-order", section: "2", "requests sent back to back on one connection are answered in order") { c in
            let space = c.newSpace()
            let connection = try await c.connect()
            defer { connection.close() }
            var bytes: [UInt8] = []
            bytes += c.requestBytes("GET", "/healthz", headers: [("X-Request-ID", "pipe-1")])
            bytes += c.requestBytes("POST", CheckContext.spacePath(space, "push"), headers: [("X-Request-ID", "pipe-2"), ("Content-Type", "application/json")],
                                    body: pushBody(c), token: c.writeToken(space))
            bytes += c.requestBytes("GET", "/v1/no-such-route", headers: [("X-Request-ID", "pipe-3")])
            bytes += c.requestBytes("GET", CheckContext.spacePath(space, "pull"), headers: [("X-Request-ID", "pipe-4")], token: c.readToken(space))
            try await connection.send(bytes)
            let expected = [200, 200, 404, 200]
            for (i, status) in expected.enumerated() {
                let response = try await connection.response(timeout: c.configuration.responseTimeout)
                try expect(response.header("X-Request-ID") == "pipe-\(i + 1)" && response.status == status,
                           "pipelined response \(i + 1): expected \(status) for pipe-\(i + 1), got \(response.status) for \(response.header("X-Request-ID") ?? "?")")
                if i == 3 {
                    let page = try c.decodePull(response, query: [])
                    try expect(page.page.changes.count == 1, "the pipelined pull did not see the pipelined push before it")
                }
            }
        },
        Check("http-connection-close-honoured", section: "2", "a request with Connection: close is answered and the server then closes the connection") { c in
            let (response, closed) = try await exchange(c, c.requestBytes("GET", "/healthz", headers: [("Connection", "close")]), closeWithin: .seconds(3))
            try expectStatus(response, 200, "GET /healthz with Connection: close")
            try expect(closed, "the server kept the connection open after answering a request with Connection: close")
        },
        Check("http-expect-100-continue", section: "2", "Expect: 100-continue is answered 100 Continue before the body is sent, then the final answer") { c in
            let space = c.newSpace()
            let body = pushBody(c)
            let connection = try await c.connect()
            defer { connection.close() }
            try await connection.send(c.requestBytes("POST", CheckContext.spacePath(space, "push"),
                                                     headers: [("Content-Type", "application/json"), ("Expect", "100-continue"), ("Content-Length", String(body.count))],
                                                     token: c.writeToken(space)))
            let interim: RawResponse
            do {
                interim = try await connection.response(includeInterim: true, timeout: .seconds(5))
            } catch let error as ConnectionError where error.timedOut {
                throw CheckFailure("no 100 Continue within 5 s of a push head with Expect: 100-continue")
            }
            try expect(interim.status == 100, "expected 100 Continue before the body, got \(interim.summary)")
            try await connection.send(body)
            let final = try await connection.response(timeout: c.configuration.responseTimeout)
            let reply = try c.decodePush(final, changes: [try JSONParser.parse(body)["changes"]![0]!])
            _ = try expectApplied(reply.results[0], "push sent after 100 Continue")
        },
        Check("http-expect-100-continue-refused-without-body", section: "2", "with Expect: 100-continue, a request refused on its head (401, 413) gets the final answer and no 100 Continue") { c in
            let info = try await c.info()
            let space = c.newSpace()
            let cases: [([(String, String)], String?, Int, String, String)] = [
                ([("Content-Length", "100")], nil, 401, "unauthorized", "no token"),
                ([("Content-Length", String(info.limits.maxRequestBytes + 1))], c.writeToken(space), 413, "payload_too_large", "Content-Length over maxRequestBytes"),
            ]
            for (headers, token, status, code, what) in cases {
                let connection = try await c.connect()
                defer { connection.close() }
                try await connection.send(c.requestBytes("POST", CheckContext.spacePath(space, "push"),
                                                         headers: [("Content-Type", "application/json"), ("Expect", "100-continue")] + headers, token: token))
                let first = try await connection.response(includeInterim: true, timeout: .seconds(5))
                try expect(first.status != 100, "\(what): the server sent 100 Continue for a request it refuses on its head")
                try expectError(first, status, code, "push with Expect: 100-continue and \(what)")
            }
        },
        Check("http-gzip-request-body", section: "2", "a request body with Content-Encoding: gzip is decompressed") { c in
            let space = c.newSpace()
            let body = pushBody(c)
            let response = try await c.send("POST", CheckContext.spacePath(space, "push"),
                                            headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")],
                                            body: GzipCodec.gzip(body), token: c.writeToken(space))
            let reply = try c.decodePush(response, changes: [try JSONParser.parse(body)["changes"]![0]!])
            _ = try expectApplied(reply.results[0], "gzip-encoded push")
        },
        Check("http-gzip-bomb-413", section: "2", "a gzip body that inflates past the limit is 413 payload_too_large: decompression stops at the limit") { c in
            let info = try await c.info()
            let limit = info.limits.maxRequestBytes
            let space = c.newSpace()
            let bomb = GzipCodec.bomb(prefix: Array(#"{"clientId":"c","changes":[],"pad":""#.utf8), byte: UInt8(ascii: "a"), count: limit * 2)
            try expect(bomb.count < limit, "internal: the compressed bomb (\(bomb.count) bytes) is not under the limit")
            let start = ContinuousClock.now
            let response = try await c.send("POST", CheckContext.spacePath(space, "push"),
                                            headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")],
                                            body: bomb, token: c.writeToken(space))
            let details = try expectError(response, 413, "payload_too_large", "push of \(bomb.count) gzip bytes inflating to \(limit * 2 + 37)")
            try expect(detailInt(details, "limit") == Int64(limit), "payload_too_large details.limit is \(details["limit"]?.description ?? "absent"), expected \(limit)")
            c.note("\(bomb.count) bytes refused in \(LifecycleChecks.milliseconds(ContinuousClock.now - start)) ms")
        },
        Check("http-gzip-response", section: "2", "a response body over 1 KiB is gzip-compressed when the request accepts gzip, and not otherwise") { c in
            let space = c.newSpace()
            _ = try await PullChecks.fill(c, space, ids: PullChecks.ids(20), data: { _ in PushChecks.padded(200) })
            let gz = try await c.pullResponse(space, headers: [("Accept-Encoding", "gzip")])
            try expect(gz.header("Content-Encoding")?.lowercased() == "gzip", "a \(gz.body.count)-byte page with Accept-Encoding: gzip came with Content-Encoding \(gz.header("Content-Encoding") ?? "absent")")
            let reply = try c.decodePull(gz, query: [])
            try expect(reply.page.changes.count == 20, "the gzip page decodes to \(reply.page.changes.count) records, expected 20")
            let plain = try await c.pullResponse(space)
            try expect(plain.header("Content-Encoding") == nil || plain.header("Content-Encoding")?.lowercased() == "identity",
                       "a request without Accept-Encoding got Content-Encoding \(plain.header("Content-Encoding")!)")
            let refused = try await c.pullResponse(space, headers: [("Accept-Encoding", "identity")])
            try expect(refused.header("Content-Encoding")?.lowercased() != "gzip", "Accept-Encoding: identity got a gzip body")
        },
        Check("http-uri-too-long-414", section: "2", "a request line over 8 KiB is 414; one of 7 KiB is served") { c in
            let long = "/v1/info?pad=" + String(repeating: "a", count: 9 * 1024)
            let (response, _) = try await exchange(c, Array("GET \(c.endpoint.target(long)) HTTP/1.1\r\nHost: \(c.endpoint.hostHeader)\r\n\r\n".utf8))
            try expect(response.status == 414, "a 9 KiB request line: expected 414, got \(response.summary)")
            try expectCommonHeaders(response, "414")
            let fits = "/v1/info?pad=" + String(repeating: "a", count: 7 * 1024)
            try expectStatus(try await c.get(fits), 200, "a 7 KiB request line")
        },
        Check("http-headers-too-large-431", section: "2", "header fields over 16 KiB in all are 431; 14 KiB of them are served") { c in
            let headers = (0..<20).map { ("X-Filler-\($0)", String(repeating: "h", count: 1000)) }
            let (response, _) = try await exchange(c, c.requestBytes("GET", "/healthz", headers: headers))
            try expect(response.status == 431, "20 KB of header fields: expected 431, got \(response.summary)")
            try expectCommonHeaders(response, "431")
            let fitting = (0..<14).map { ("X-Filler-\($0)", String(repeating: "h", count: 1000)) }
            try expectStatus(try await c.get("/healthz", headers: fitting), 200, "14 KB of header fields")
        },
        Check("http-header-timeout-408", section: "2", "a request head not complete within the header timeout is 408, then the connection is closed", waitsOnServerTimeout: true) { c in
            let connection = try await c.connect()
            defer { connection.close() }
            let start = ContinuousClock.now
            try await connection.send("GET \(c.endpoint.target("/healthz")) HTTP/1.1\r\nHost: \(c.endpoint.hostHeader)\r\n")
            let limit = c.configuration.headerTimeout + .seconds(5)
            let response: RawResponse
            do {
                response = try await connection.response(timeout: limit)
            } catch let error as ConnectionError where error.timedOut {
                throw CheckFailure("an incomplete request head was held for \(limit) with no answer (header timeout \(c.configuration.headerTimeout))")
            } catch let error as ConnectionError where error.closed {
                throw CheckFailure("the server closed the connection without a 408 after \(LifecycleChecks.milliseconds(ContinuousClock.now - start)) ms")
            }
            try expect(response.status == 408, "an incomplete request head: expected 408, got \(response.summary)")
            _ = try expectError(response, 408, (try? response.json())?["error"]?["code"]?.stringValue ?? "(a code)", "408")
            if case .open = try await connection.awaitClose(timeout: .seconds(3)) {
                throw CheckFailure("the server kept the connection open after 408")
            }
            c.note("408 after \(LifecycleChecks.milliseconds(ContinuousClock.now - start)) ms")
        },
        Check("http-slow-body-408", section: "2", "a body that stops arriving is 408 after the body timeout, then the connection is closed", waitsOnServerTimeout: true) { c in
            let space = c.newSpace()
            let connection = try await c.connect()
            defer { connection.close() }
            let body = pushBody(c)
            try await connection.send(c.requestBytes("POST", CheckContext.spacePath(space, "push"),
                                                     headers: [("Content-Type", "application/json"), ("Content-Length", String(body.count + 1000))],
                                                     token: c.writeToken(space)) + body.prefix(10))
            let start = ContinuousClock.now
            let limit = c.configuration.bodyTimeout + .seconds(5)
            let response: RawResponse
            do {
                response = try await connection.response(timeout: limit)
            } catch let error as ConnectionError where error.timedOut {
                throw CheckFailure("a stalled body was held for \(limit) with no answer (body timeout \(c.configuration.bodyTimeout))")
            } catch let error as ConnectionError where error.closed {
                throw CheckFailure("the server closed the connection without a 408 after \(LifecycleChecks.milliseconds(ContinuousClock.now - start)) ms")
            }
            try expect(response.status == 408, "a stalled body: expected 408, got \(response.summary)")
            if case .open = try await connection.awaitClose(timeout: .seconds(3)) {
                throw CheckFailure("the server kept the connection open after 408")
            }
            c.note("408 after \(LifecycleChecks.milliseconds(ContinuousClock.now - start)) ms")
        },
        Check("http-malformed-request-line-400", section: "2", "a malformed request line is 400 bad_request, then the connection is closed") { c in
            let host = "Host: \(c.endpoint.hostHeader)\r\n\r\n"
            for (line, what) in [("GARBAGE\r\n", "a line of one word"), ("GET /healthz\r\n", "no HTTP version"),
                                 ("GET /healthz HTTP/1.1 extra\r\n", "four parts"),
                                 ("G(T /healthz HTTP/1.1\r\n", "a method with a delimiter"), ("GET /healthz HTTP/x.y\r\n", "a bad version")] {
                try await expectErrorAndClose(c, Array((line + host).utf8), status: 400, code: "bad_request", "request line with \(what)")
            }
        },
        Check("http-malformed-header-400", section: "2", "a malformed header field is 400 bad_request, then the connection is closed") { c in
            let start = "GET \(c.endpoint.target("/healthz")) HTTP/1.1\r\nHost: \(c.endpoint.hostHeader)\r\n"
            for (field, what) in [("NoColonHere\r\n", "a field without a colon"), ("Bad Name: v\r\n", "a space in the name"),
                                  ("X-Space : v\r\n", "a space before the colon"), (": empty-name\r\n", "an empty name")] {
                try await expectErrorAndClose(c, Array((start + field + "\r\n").utf8), status: 400, code: "bad_request", "header with \(what)")
            }
            try await expectErrorAndClose(c, Array("GET \(c.endpoint.target("/healthz")) HTTP/1.1\r\n\r\n".utf8), status: 400, code: "bad_request",
                                          "an HTTP/1.1 request without Host")
        },
        Check("http-conflicting-content-length-400", section: "2", "conflicting Content-Length fields are 400 bad_request, then the connection is closed") { c in
            let space = c.newSpace()
            let body = pushBody(c)
            for lengths in [["\(body.count)", "\(body.count + 5)"], ["\(body.count), \(body.count + 5)"], ["-1"], ["12abc"]] {
                let headers = [("Content-Type", "application/json")] + lengths.map { ("Content-Length", $0) }
                let bytes = c.requestBytes("POST", CheckContext.spacePath(space, "push"), headers: headers, body: body, token: c.writeToken(space))
                try await expectErrorAndClose(c, bytes, status: 400, code: "bad_request", "Content-Length \(lengths.joined(separator: " / "))")
            }
            let pulled = try await c.pull(space)
            try expect(pulled.page.changes.isEmpty, "a request with a bad Content-Length was applied")
        },
        Check("http-transfer-encoding-with-content-length", section: "2", "a request with both Transfer-Encoding and Content-Length is refused 400, or answered and the connection then closed (RFC 9112 section 6.1: no request smuggling)") { c in
            let space = c.newSpace()
            let body = pushBody(c)
            let chunked = Array((String(body.count, radix: 16) + "\r\n").utf8) + body + Array("\r\n0\r\n\r\n".utf8)
            let smuggled = c.requestBytes("GET", "/healthz", headers: [("X-Request-ID", "smuggled")])
            let bytes = c.requestBytes("POST", CheckContext.spacePath(space, "push"),
                                       headers: [("Content-Type", "application/json"), ("Content-Length", "3"), ("Transfer-Encoding", "chunked")],
                                       body: chunked, token: c.writeToken(space)) + smuggled
            let (response, closed) = try await exchange(c, bytes, closeWithin: .seconds(3))
            try expect(response.status == 400 || response.status == 200, "Transfer-Encoding with Content-Length: expected 400 (or the push answered), got \(response.summary)")
            if response.status == 400 { try expectError(response, 400, "bad_request", "Transfer-Encoding with Content-Length") }
            try expect(closed, "after a request with both Transfer-Encoding and Content-Length the server kept the connection open (a request could be smuggled behind it)")
        },
        Check("http-malformed-chunked-body-400", section: "2", "a chunked body with a bad chunk-size line or missing CRLF is 400 bad_request, then the connection is closed") { c in
            let space = c.newSpace()
            let body = pushBody(c)
            let cases: [([UInt8], String)] = [
                (Array("zz\r\nabc\r\n0\r\n\r\n".utf8), "a chunk size that is not hex"),
                (Array((String(body.count, radix: 16) + "\r\n").utf8) + body + Array("XX0\r\n\r\n".utf8), "chunk data not followed by CRLF"),
            ]
            for (wire, what) in cases {
                let bytes = c.requestBytes("POST", CheckContext.spacePath(space, "push"),
                                           headers: [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")], body: wire, token: c.writeToken(space))
                try await expectErrorAndClose(c, bytes, status: 400, code: "bad_request", "chunked body with \(what)")
            }
        },
        Check("http-unknown-transfer-encoding-501", section: "2", "an unsupported Transfer-Encoding is 501") { c in
            let space = c.newSpace()
            let bytes = c.requestBytes("POST", CheckContext.spacePath(space, "push"),
                                       headers: [("Content-Type", "application/json"), ("Transfer-Encoding", "x-outpost-unknown")],
                                       body: Array("5\r\nhello\r\n0\r\n\r\n".utf8), token: c.writeToken(space))
            let (response, _) = try await exchange(c, bytes)
            try expect(response.status == 501, "Transfer-Encoding: x-outpost-unknown: expected 501, got \(response.summary)")
            try expectCommonHeaders(response, "501")
        },
        Check("http-chunked-request-body", section: "2", "a request body with Transfer-Encoding: chunked is read") { c in
            let space = c.newSpace()
            let body = pushBody(c)
            var wire: [UInt8] = []
            var offset = 0
            for size in [1, 7, body.count] {
                let n = min(size, body.count - offset)
                guard n > 0 else { continue }
                wire += Array((String(n, radix: 16) + ";ext=1\r\n").utf8) + body[offset..<(offset + n)] + [0x0D, 0x0A]
                offset += n
            }
            wire += Array("0\r\n\r\n".utf8)
            let response = try await c.send("POST", CheckContext.spacePath(space, "push"),
                                            headers: [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")], body: wire, token: c.writeToken(space))
            let reply = try c.decodePush(response, changes: [try JSONParser.parse(body)["changes"]![0]!])
            _ = try expectApplied(reply.results[0], "chunked push")
        },
        Check("http-head-request", section: "2", "HEAD is answered like GET without a body, and the connection stays usable") { c in
            let get = try await c.get("/v1/info")
            let connection = try await c.connect()
            defer { connection.close() }
            try await connection.send(c.requestBytes("HEAD", "/v1/info") + c.requestBytes("GET", "/healthz"))
            let head = try await connection.response(isHead: true, timeout: c.configuration.responseTimeout)
            try expectStatus(head, 200, "HEAD /v1/info")
            if let length = head.header("Content-Length") {
                try expect(Int(length) == get.body.count, "HEAD /v1/info: Content-Length \(length), but GET sends \(get.body.count) bytes")
            }
            let next = try await connection.response(timeout: c.configuration.responseTimeout)
            try expect(next.status == 200 && (try? next.json()["status"]?.stringValue) == "ok",
                       "the request after HEAD was answered \(next.summary) \(next.bodyPreview): the HEAD response must have had a body")
        },
        Check("http-request-split-across-writes", section: "2", "a request that arrives a few bytes at a time is read whole") { c in
            let space = c.newSpace()
            let body = pushBody(c)
            let bytes = c.requestBytes("POST", CheckContext.spacePath(space, "push"), headers: [("Content-Type", "application/json")], body: body, token: c.writeToken(space))
            let connection = try await c.connect()
            defer { connection.close() }
            // Pauses make the pieces arrive apart; they stop well inside the server's header
            // timeout, which a busy machine would otherwise stretch them past.
            try await connection.sendInPieces(bytes, pausedBytes: 200, pausesEnd: ContinuousClock.now + c.configuration.headerTimeout / 4)
            let response = try await connection.response(timeout: c.configuration.responseTimeout)
            let reply = try c.decodePush(response, changes: [try JSONParser.parse(body)["changes"]![0]!])
            _ = try expectApplied(reply.results[0], "a push sent in small pieces")
        },
        Check("http-early-error-readable", section: "2", "a request refused before its body was read is answered readably while the client still sends the body (no reset)") { c in
            let space = c.newSpace()
            var body = Array(#"{"clientId":"c","changes":[],"pad":""#.utf8)
            body += [UInt8](repeating: UInt8(ascii: "x"), count: 256 * 1024)
            body += Array(#""}"#.utf8)
            let connection = try await c.connect()
            defer { connection.close() }
            let bytes = c.requestBytes("POST", CheckContext.spacePath(space, "push"), headers: [("Content-Type", "application/json")], body: body)
            try? await connection.send(bytes, timeout: .seconds(10))
            let response: RawResponse
            do {
                response = try await connection.response(timeout: c.configuration.responseTimeout)
            } catch let error as ConnectionError where error.closed {
                throw CheckFailure("the connection was closed or reset before the 401 could be read: \(error)")
            }
            try AuthChecks.expectUnauthorized(response, "push of a 256 KiB body without a token")
        },
        Check("http-slow-clients-do-not-block-others", section: "2", "connections that send nothing or half a request do not delay other clients") { c in
            var stalled: [RawConnection] = []
            defer { for s in stalled { s.close() } }
            for i in 0..<6 {
                let connection = try await c.connect()
                if i % 2 == 1 { try await connection.send("GET \(c.endpoint.target("/healthz")) HTTP/1.1\r\nHost: ") }
                stalled.append(connection)
            }
            var slowest = Duration.zero
            for _ in 0..<10 {
                let start = ContinuousClock.now
                let response = try await c.send("GET", "/healthz", timeout: .seconds(5))
                try expectStatus(response, 200, "GET /healthz while other connections stall")
                slowest = max(slowest, ContinuousClock.now - start)
            }
            try expect(slowest < .seconds(2), "with stalled connections open, a /healthz took \(LifecycleChecks.milliseconds(slowest)) ms")
        },
    ]
}
