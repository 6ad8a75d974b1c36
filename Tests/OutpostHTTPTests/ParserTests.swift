import OutpostCore
import Testing
@testable import OutpostHTTP

/// Parser events with body pieces merged, so different splits compare equal.
enum Parsed: Equatable, CustomStringConvertible {
    case head(ParsedRequestHead)
    case body([UInt8])
    case end(HTTPHeaders)
    case error(HTTPParserError.Kind)

    var description: String {
        switch self {
        case .head(let h): "head(\(h.method) \(h.target) \(h.version) \(h.framing))"
        case .body(let b): "body(\(String(decoding: b, as: UTF8.self)))"
        case .end(let t): "end(\(t))"
        case .error(let k): "error(\(k))"
        }
    }
}

/// Feeds `input` in pieces of the given sizes, the way a connection does: unconsumed
/// bytes stay and are fed again with the next piece.
func parse(_ input: [UInt8], pieces: [Int], limits: HTTPParserLimits = HTTPParserLimits()) -> [Parsed] {
    var parser = HTTPRequestParser(limits: limits)
    var events: [Parsed] = []
    var pending: [UInt8] = []
    var offset = 0
    outer: for size in pieces {
        pending += input[offset..<(offset + size)]
        offset += size
        while true {
            let (event, consumed) = pending.withUnsafeBufferPointer { parser.parse($0) }
            guard let event else {
                pending.removeFirst(consumed)
                break
            }
            switch event {
            case .head(let h): events.append(.head(h))
            case .body(let r):
                let bytes = Array(pending[r])
                if case .body(let previous) = events.last {
                    events[events.count - 1] = .body(previous + bytes)
                } else {
                    events.append(.body(bytes))
                }
            case .end(let t): events.append(.end(t))
            case .error(let e):
                events.append(.error(e.kind))
                break outer
            }
            pending.removeFirst(consumed)
        }
    }
    return events
}

func wholeSplit(_ n: Int) -> [Int] { [n] }
func byteSplit(_ n: Int) -> [Int] { [Int](repeating: 1, count: n) }
func randomSplit(_ n: Int, seed: UInt64) -> [Int] {
    var rng = SplitMix64(seed: seed)
    var pieces: [Int] = []
    var left = n
    while left > 0 {
        let size = Int.random(in: 1...max(1, min(left, 24)), using: &rng)
        pieces.append(size)
        left -= size
    }
    return pieces
}

/// Parses whole, byte by byte and at 20 seeded random splits; all must agree.
func parseEverySplit(_ text: String, limits: HTTPParserLimits = HTTPParserLimits()) -> [Parsed] {
    let input = Array(text.utf8)
    let whole = parse(input, pieces: wholeSplit(input.count), limits: limits)
    let bytes = parse(input, pieces: byteSplit(input.count), limits: limits)
    #expect(bytes == whole, "byte-at-a-time differs for \(text.debugDescription)")
    for seed in UInt64(1)...20 {
        let random = parse(input, pieces: randomSplit(input.count, seed: seed), limits: limits)
        #expect(random == whole, "random split (seed \(seed)) differs for \(text.debugDescription)")
    }
    return whole
}

@Suite("HTTP parser")
struct ParserTests {
    @Test func simpleGet() {
        let events = parseEverySplit("GET /healthz?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  spaced value \t\r\n\r\n")
        guard case .head(let h) = events.first else { Issue.record("no head"); return }
        #expect(h.method == "GET")
        #expect(h.target == "/healthz?x=1")
        #expect(h.version == .http1_1)
        #expect(h.headers["x-thing"] == "spaced value")
        #expect(h.keepAlive)
        #expect(h.framing == BodyFraming.none)
        #expect(events.count == 2)
        #expect(events.last == .end(HTTPHeaders()))
    }

    @Test func contentLengthBody() {
        let events = parseEverySplit("POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world")
        #expect(events.count == 3)
        #expect(events[1] == .body(Array("hello world".utf8)))
        #expect(events[2] == .end(HTTPHeaders()))
    }

    @Test func chunkedBodyWithExtensionsAndTrailers() {
        let text = "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "5;name=value\r\nhello\r\n6 \r\n world\r\nA\r\n0123456789\r\n0\r\nX-Checksum: abc\r\n\r\n"
        let events = parseEverySplit(text)
        #expect(events.count == 3)
        if case .head(let h) = events[0] { #expect(h.framing == .chunked) }
        #expect(events[1] == .body(Array("hello world0123456789".utf8)))
        #expect(events[2] == .end(["X-Checksum": "abc"]))
    }

    @Test func pipelinedRequestsInOrder() {
        let text = "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nxyzGET /c HTTP/1.1\r\nHost: a\r\n\r\nGET /d HT"
        let events = parseEverySplit(text)
        let targets = events.compactMap { e -> String? in if case .head(let h) = e { return h.target } else { return nil } }
        #expect(targets == ["/a", "/b", "/c"])
        #expect(events.filter { if case .end = $0 { true } else { false } }.count == 3)
        #expect(events.contains(.body(Array("xyz".utf8))))
    }

    @Test func http10AndKeepAlive() {
        let plain = parseEverySplit("GET / HTTP/1.0\r\n\r\n")
        if case .head(let h) = plain[0] {
            #expect(h.version == .http1_0)
            #expect(!h.keepAlive)
        } else { Issue.record("no head") }
        let kept = parseEverySplit("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
        if case .head(let h) = kept[0] { #expect(h.keepAlive) } else { Issue.record("no head") }
        let closed = parseEverySplit("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n")
        if case .head(let h) = closed[0] { #expect(!h.keepAlive) } else { Issue.record("no head") }
    }

    @Test func expectContinue() {
        let e = parseEverySplit("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nx")
        if case .head(let h) = e[0] { #expect(h.expectContinue) } else { Issue.record("no head") }
        // RFC 9110 section 10.1.1: ignored for HTTP/1.0.
        let old = parseEverySplit("PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx")
        if case .head(let h) = old[0] { #expect(!h.expectContinue) } else { Issue.record("no head") }
    }

    @Test func leadingEmptyLinesAreIgnored() {
        let e = parseEverySplit("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
        if case .head(let h) = e.first { #expect(h.target == "/") } else { Issue.record("no head: \(e)") }
    }

    @Test(arguments: [
        ("bad request line", "GET /\r\nHost: a\r\n\r\n"),
        ("two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n"),
        ("method with slash", "GE/T / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("target with fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"),
        ("space before colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n"),
        ("no colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A b\r\n\r\n"),
        ("empty name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n"),
        ("control char in value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\u{01}c\r\n\r\n"),
        ("DEL in value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\u{7F}\r\n\r\n"),
        ("bare LF", "GET / HTTP/1.1\nHost: a\r\n\r\n"),
        ("bare CR", "GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n"),
        ("duplicate Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"),
        ("Content-Length list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\nx"),
        ("negative Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"),
        ("non-numeric Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12a\r\n\r\n"),
        ("signed Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello"),
        ("huge Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n"),
        ("TE and CL", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"),
        ("chunked twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
        ("TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("no Host in 1.1", "GET / HTTP/1.1\r\n\r\n"),
        ("two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ("bad chunk size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        ("chunk without CRLF", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n"),
        ("chunk size overflow", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFF\r\n"),
    ])
    func malformedIs400(_ name: String, _ request: RawRequest) {
        let events = parseEverySplit(request.text)
        #expect(events.last == .error(.badRequest), "\(name): \(events)")
    }

    @Test func unknownTransferCodingIs501() {
        let events = parseEverySplit("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
        #expect(events == [.error(.notImplemented)])
    }

    @Test func http2VersionIs505() {
        #expect(parseEverySplit("GET / HTTP/2.0\r\nHost: a\r\n\r\n") == [.error(.versionNotSupported)])
    }

    @Test func requestLineLimitIs414() {
        var limits = HTTPParserLimits()
        limits.maxRequestLineBytes = 100
        let ok = "GET /" + String(repeating: "a", count: 100 - 15) + " HTTP/1.1\r\nHost: a\r\n\r\n"  // exactly 100
        #expect(parseEverySplit(ok, limits: limits).count == 2)
        let long = "GET /" + String(repeating: "a", count: 200) + " HTTP/1.1\r\nHost: a\r\n\r\n"
        #expect(parseEverySplit(long, limits: limits) == [.error(.uriTooLong)])
        // Detected before the line ends: a client that never ends it is refused too.
        let endless = "GET /" + String(repeating: "a", count: 200)
        #expect(parseEverySplit(endless, limits: limits) == [.error(.uriTooLong)])
    }

    @Test func headerLimitIs431() {
        var limits = HTTPParserLimits()
        limits.maxHeaderBytes = 200
        let fits = "GET / HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "b", count: 150) + "\r\n\r\n"
        #expect(parseEverySplit(fits, limits: limits).count == 2)
        let big = "GET / HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "b", count: 300) + "\r\n\r\n"
        #expect(parseEverySplit(big, limits: limits) == [.error(.headersTooLarge)])
        var few = HTTPParserLimits()
        few.maxHeaderCount = 3
        let many = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"
        #expect(parseEverySplit(many, limits: few) == [.error(.headersTooLarge)])
    }

    @Test func trailersCountAgainstTheHeaderLimit() {
        var limits = HTTPParserLimits()
        limits.maxHeaderBytes = 100
        let text = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: " + String(repeating: "t", count: 200) + "\r\n\r\n"
        #expect(parseEverySplit(text, limits: limits).last == .error(.headersTooLarge))
    }

    @Test func absoluteFormTarget() {
        #expect(originPathAndQuery("http://example.com/a/b?x=1")! == ("/a/b", "x=1"))
        #expect(originPathAndQuery("HTTPS://example.com")! == ("/", nil))
        #expect(originPathAndQuery("http://example.com?q")! == ("/", "q"))
        #expect(originPathAndQuery("example.com:443") == nil)
        #expect(originPathAndQuery("*") == nil)
    }

    /// A long random soup of valid requests, split at random, must parse identically.
    @Test func randomPipelineSoup() {
        var rng = SplitMix64(seed: 42)
        var text = ""
        for i in 0..<60 {
            switch Int.random(in: 0..<3, using: &rng) {
            case 0: text += "GET /r\(i) HTTP/1.1\r\nHost: h\r\nX-N: \(i)\r\n\r\n"
            case 1:
                let body = String(repeating: "b", count: Int.random(in: 0..<300, using: &rng))
                text += "POST /r\(i) HTTP/1.1\r\nHost: h\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
            default:
                text += "PUT /r\(i) HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                for _ in 0..<Int.random(in: 0..<4, using: &rng) {
                    let size = Int.random(in: 1..<100, using: &rng)
                    text += String(size, radix: 16) + "\r\n" + String(repeating: "c", count: size) + "\r\n"
                }
                text += "0\r\n\r\n"
            }
        }
        let events = parseEverySplit(text)
        #expect(events.filter { if case .head = $0 { true } else { false } }.count == 60)
        #expect(events.filter { if case .end = $0 { true } else { false } }.count == 60)
    }
}
