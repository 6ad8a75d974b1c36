import OutpostCompression
import Testing
@testable import OutpostConformance

/// The suite's own HTTP and gzip parts, checked against the repository's zlib-based
/// codec: a conformance check is only as good as the client that makes it.
@Suite struct ClientPartsTests {
    @Test func storedGzipIsReadByZlib() throws {
        for size in [0, 1, 1000, 65535, 65536, 200_000] {
            let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            #expect(try Gzip.decompress(GzipCodec.gzip(data), limit: 1 << 20) == data)
        }
    }

    @Test func bombInflatesToWhatItSays() throws {
        let prefix = Array(#"{"pad":""#.utf8)
        let bomb = GzipCodec.bomb(prefix: prefix, byte: UInt8(ascii: "a"), count: 100_003)
        #expect(bomb.count < 1000)
        let inflated = try Gzip.decompress(bomb, limit: 1 << 20)
        #expect(inflated == prefix + [UInt8](repeating: UInt8(ascii: "a"), count: 100_003))
        #expect(throws: GzipCodec.Failure.self) { try GzipCodec.gunzip(bomb, limit: 50_000) }
    }

    @Test func inflaterReadsZlibOutput() throws {
        var text: [UInt8] = []
        for i in 0..<20_000 { text += Array("record \(i % 97) of \(i / 3),".utf8) }
        let random = (0..<70_000).map { _ in UInt8.random(in: 0...255) }
        for data in [text, random, [], Array("a".utf8)] {
            for level: Int32 in [1, 6, 9] {
                #expect(try GzipCodec.gunzip(Gzip.compress(data, level: level), limit: 1 << 22) == data)
            }
        }
        var corrupt = Gzip.compress(text)
        corrupt[corrupt.count - 6] ^= 0xFF
        #expect(throws: GzipCodec.Failure.self) { try GzipCodec.gunzip(corrupt, limit: 1 << 22) }
    }

    @Test func responseParserFramings() throws {
        var source = BytesSource(buffer: Array((
            "HTTP/1.1 100 Continue\r\n\r\n"
            + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello"
            + "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n"
            + "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n"
            + "HTTP/1.0 200 OK\r\n\r\nto the end").utf8))
        #expect(try ResponseParser.parse(&source, isHead: false).status == 100)
        let first = try ResponseParser.parse(&source, isHead: false)
        #expect(first.body == Array("hello".utf8) && first.header("x-a") == "1")
        #expect(try ResponseParser.parse(&source, isHead: false).body == Array("abcde".utf8))
        #expect(try ResponseParser.parse(&source, isHead: false).body.isEmpty)
        #expect(try ResponseParser.parse(&source, isHead: false).body == Array("to the end".utf8))
    }

    @Test func jsonSpanMeasuresTheChangesArray() {
        let text = Array(#"{"epoch":"E","changes":[{"a":"]}\"x"},{"b":[1,{}]}] ,"next":"E.2","hasMore":false}"#.utf8)
        let span = JSONSpan.member("changes", in: text)!
        #expect(String(decoding: text[span], as: UTF8.self) == #"[{"a":"]}\"x"},{"b":[1,{}]}]"#)
        #expect(JSONSpan.elements(of: span, in: text).count == 2)
        #expect(JSONSpan.member("missing", in: text) == nil)
    }

    @Test func endpointParsing() throws {
        let plain = try Endpoint(url: "http://127.0.0.1:8080")
        #expect(plain.host == "127.0.0.1" && plain.port == 8080 && plain.pathPrefix == "")
        let prefixed = try Endpoint(url: "http://sync.example.com/outpost/")
        #expect(prefixed.port == 80 && prefixed.target("/v1/info") == "/outpost/v1/info" && prefixed.hostHeader == "sync.example.com")
        let v6 = try Endpoint(url: "http://[::1]:9000")
        #expect(v6.host == "::1" && v6.hostHeader == "[::1]:9000")
        #expect(throws: Endpoint.Invalid.self) { try Endpoint(url: "https://example.com") }
    }

    @Test func checkNamesAreUniqueKebabCase() {
        let names = Conformance.checks.map(\.name)
        #expect(Set(names).count == names.count)
        #expect(names.allSatisfy(Check.isKebabCase))
        #expect(names.count >= 100)
    }

    /// Every check is filed under a category and every category has checks, so a run by
    /// category (`Conformance.run(categories:)`) can leave nothing out by accident.
    @Test func everyCheckHasACategory() {
        #expect(Conformance.checks.allSatisfy { $0.category != nil })
        for category in Check.Category.allCases {
            #expect(Conformance.checks.contains { $0.category == category }, "no check in \(category)")
        }
    }
}
