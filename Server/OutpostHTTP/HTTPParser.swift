// The incremental HTTP/1.1 request parser (RFC 9112). It does no I/O: the connection
// feeds it whatever bytes arrived and gets back one event at a time. Feeding a request
// whole, one byte at a time or split anywhere gives the same events (the tests check).

/// How a request's body is delimited (RFC 9112 section 6.3).
enum BodyFraming: Equatable, Sendable {
    /// No body: neither `Content-Length` nor `Transfer-Encoding` (rule 7).
    case none
    /// `Content-Length` bytes (rule 6).
    case length(Int)
    /// `Transfer-Encoding: chunked` (rule 4).
    case chunked
}

/// A request head as the parser validated it.
struct ParsedRequestHead: Equatable, Sendable {
    var method: String
    var target: String
    var version: HTTPVersion
    var headers: HTTPHeaders
    var framing: BodyFraming
    /// Whether the connection may stay open after this request (RFC 9112 section 9.3).
    var keepAlive: Bool
    /// `Expect: 100-continue` on an HTTP/1.1 request (RFC 9110 section 10.1.1; 1.0 ignores it).
    var expectContinue: Bool
}

/// Why a request could not be parsed, with the status it earns.
struct HTTPParserError: Error, Equatable, Sendable {
    enum Kind: Equatable, Sendable {
        /// `400`: malformed syntax or framing.
        case badRequest
        /// `414`: request line over the limit.
        case uriTooLong
        /// `431`: header (or trailer) section over the limit.
        case headersTooLarge
        /// `501`: a transfer coding this server does not implement.
        case notImplemented
        /// `505`: not HTTP/1.x.
        case versionNotSupported
    }
    var kind: Kind
    var message: String

    static func bad(_ message: String) -> HTTPParserError { HTTPParserError(kind: .badRequest, message: message) }
}

/// One thing the parser found. Body ranges index the buffer passed to that `parse` call.
enum HTTPParserEvent: Equatable, Sendable {
    case head(ParsedRequestHead)
    case body(Range<Int>)
    case end(trailers: HTTPHeaders)
    case error(HTTPParserError)
}

/// Limits the parser enforces itself (a subset of `HTTPServerConfiguration`).
struct HTTPParserLimits: Sendable, Equatable {
    var maxRequestLineBytes = 8 * 1024
    var maxHeaderBytes = 16 * 1024
    var maxHeaderCount = 128
    var maxChunkLineBytes = 4 * 1024

    init() {}
    init(_ c: HTTPServerConfiguration) {
        maxRequestLineBytes = c.maxRequestLineBytes
        maxHeaderBytes = c.maxHeaderBytes
        maxHeaderCount = c.maxHeaderCount
        maxChunkLineBytes = c.maxChunkLineBytes
    }
}

private let CR: UInt8 = 0x0D
private let LF: UInt8 = 0x0A
private let SP: UInt8 = 0x20
private let HTAB: UInt8 = 0x09

/// The request parser. One per connection; it moves on to the next request by itself
/// after `.end`, so pipelined requests are parsed from the same buffer in order.
struct HTTPRequestParser {
    private enum State: Equatable {
        /// Reading a request head (request line and header section).
        case head
        /// The head is done and there is no body: `.end` comes next.
        case noBody
        /// Reading a `Content-Length` body.
        case fixed(remaining: Int)
        /// Reading a chunk-size line (with extensions) into `line`.
        case chunkSize
        /// Reading chunk data.
        case chunkData(remaining: Int)
        /// Expecting the CRLF that closes a chunk's data.
        case chunkDataCR
        case chunkDataLF
        /// Reading the trailer section after the last chunk.
        case trailers
        case failed(HTTPParserError)
    }

    let limits: HTTPParserLimits
    private var state: State = .head

    // Scanning state of a head or trailer section that spans calls. Positions are
    // "logical": indexes into `buffer` followed by the current input.
    private var buffer: [UInt8] = []
    private var sectionStart = 0
    private var lineStart = 0
    private var headerSectionStart = 0
    private var inRequestLine = true
    private var sawCR = false
    private var leadingEmptyLines = 0
    private var line: [UInt8] = []

    init(limits: HTTPParserLimits = HTTPParserLimits()) {
        self.limits = limits
    }

    /// True between requests: nothing of a next request has been seen.
    var isIdle: Bool {
        state == .head && buffer.isEmpty && !sawCR
    }

    /// True while a request head is incomplete.
    var isReadingHead: Bool { state == .head }

    /// Parses from `input` until one event is found or the input is used up. Returns the
    /// event (nil: more input needed) and how many bytes of `input` it consumed; call
    /// again with the rest. After `.head` call again even with empty input: a request
    /// without a body ends at once. After `.error` the parser stays failed.
    mutating func parse(_ input: UnsafeBufferPointer<UInt8>) -> (event: HTTPParserEvent?, consumed: Int) {
        switch state {
        case .failed:
            return (nil, 0)
        case .head:
            return scanSection(input, trailers: false)
        case .trailers:
            return scanSection(input, trailers: true)
        case .noBody:
            state = .head
            return (.end(trailers: HTTPHeaders()), 0)
        case .fixed(let remaining):
            if remaining == 0 {
                state = .head
                return (.end(trailers: HTTPHeaders()), 0)
            }
            if input.isEmpty { return (nil, 0) }
            let take = min(remaining, input.count)
            state = .fixed(remaining: remaining - take)
            return (.body(0..<take), take)
        case .chunkSize, .chunkData, .chunkDataCR, .chunkDataLF:
            return parseChunked(input)
        }
    }

    private mutating func fail(_ error: HTTPParserError, consumed: Int) -> (event: HTTPParserEvent?, consumed: Int) {
        state = .failed(error)
        buffer = []
        line = []
        return (.error(error), consumed)
    }

    // MARK: Head and trailer sections

    /// Scans for the empty line ending a head (or trailer) section, enforcing the line
    /// syntax that can be checked byte by byte (CRLF only, no control characters) and
    /// the size limits as soon as they are passed. The section is parsed once complete.
    private mutating func scanSection(_ input: UnsafeBufferPointer<UInt8>, trailers: Bool) -> (event: HTTPParserEvent?, consumed: Int) {
        let base = buffer.count
        let n = input.count
        var i = 0
        while i < n {
            let c = input[i]
            let pos = base + i
            if sawCR {
                // RFC 9112 section 2.2: a bare CR is invalid; lines end in CRLF.
                guard c == LF else { return fail(.bad("bare CR in request head"), consumed: i) }
                sawCR = false
                let lineLength = pos - 1 - lineStart
                if !trailers && inRequestLine {
                    if lineLength == 0 {
                        // RFC 9112 section 2.2: ignore empty lines before the request line.
                        leadingEmptyLines += 1
                        if leadingEmptyLines > 8 { return fail(.bad("too many empty lines before the request line"), consumed: i) }
                        sectionStart = pos + 1
                        lineStart = pos + 1
                        i += 1
                        continue
                    }
                    inRequestLine = false
                    headerSectionStart = pos + 1
                } else if lineLength == 0 {
                    return completeSection(input, endIndex: i + 1, trailers: trailers)
                }
                lineStart = pos + 1
            } else if c == CR {
                sawCR = true
            } else if c == LF {
                return fail(.bad("bare LF in request head"), consumed: i)
            } else if (c < SP && c != HTAB) || c == 0x7F {
                return fail(.bad("control character in request head"), consumed: i)
            }
            if !trailers && inRequestLine {
                if pos + 1 - lineStart > limits.maxRequestLineBytes + (sawCR ? 1 : 0) {
                    return fail(HTTPParserError(kind: .uriTooLong, message: "request line too long"), consumed: i)
                }
            } else if pos + 1 - headerSectionStart > limits.maxHeaderBytes + 2 {
                // +2: the section's closing CRLF does not count against the limit.
                return fail(HTTPParserError(kind: .headersTooLarge, message: trailers ? "trailers too large" : "headers too large"), consumed: i)
            }
            i += 1
        }
        buffer.append(contentsOf: input)
        return (nil, n)
    }

    private mutating func completeSection(_ input: UnsafeBufferPointer<UInt8>, endIndex: Int, trailers: Bool) -> (event: HTTPParserEvent?, consumed: Int) {
        let result: Result<ParsedSection, HTTPParserError>
        if buffer.isEmpty {
            let region = UnsafeBufferPointer(rebasing: input[sectionStart..<endIndex])
            result = trailers ? parseTrailers(region) : parseHead(region)
        } else {
            buffer.append(contentsOf: UnsafeBufferPointer(rebasing: input[0..<endIndex]))
            let start = sectionStart
            result = buffer.withUnsafeBufferPointer { all in
                let region = UnsafeBufferPointer(rebasing: all[start...])
                return trailers ? parseTrailers(region) : parseHead(region)
            }
        }
        buffer = []
        sectionStart = 0
        lineStart = 0
        headerSectionStart = 0
        inRequestLine = true
        leadingEmptyLines = 0
        switch result {
        case .failure(let error):
            return fail(error, consumed: endIndex)
        case .success(.trailers(let fields)):
            state = .head
            return (.end(trailers: fields), endIndex)
        case .success(.head(let head)):
            switch head.framing {
            case .none: state = .noBody
            case .length(let n): state = .fixed(remaining: n)
            case .chunked: state = .chunkSize
            }
            return (.head(head), endIndex)
        }
    }

    private enum ParsedSection {
        case head(ParsedRequestHead)
        case trailers(HTTPHeaders)
    }

    /// Parses a complete head: request line, header fields, then the framing rules.
    private func parseHead(_ bytes: UnsafeBufferPointer<UInt8>) -> Result<ParsedSection, HTTPParserError> {
        // Request line: method SP request-target SP HTTP-version CRLF (RFC 9112 section 3).
        guard let lineEnd = firstIndex(of: CR, in: bytes, from: 0) else { return .failure(.bad("no request line")) }
        guard let sp1 = firstIndex(of: SP, in: bytes, from: 0, to: lineEnd), sp1 > 0 else {
            return .failure(.bad("malformed request line"))
        }
        for k in 0..<sp1 where !isTokenChar(bytes[k]) { return .failure(.bad("invalid method")) }
        guard let sp2 = firstIndex(of: SP, in: bytes, from: sp1 + 1, to: lineEnd), sp2 > sp1 + 1 else {
            return .failure(.bad("malformed request line"))
        }
        for k in (sp1 + 1)..<sp2 {
            let c = bytes[k]
            // Visible ASCII only; a fragment is never sent (RFC 9112 section 3.2).
            if c <= SP || c >= 0x7F || c == UInt8(ascii: "#") { return .failure(.bad("invalid request target")) }
        }
        // HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 section 2.3).
        guard lineEnd - (sp2 + 1) == 8,
              bytes[sp2 + 1] == UInt8(ascii: "H"), bytes[sp2 + 2] == UInt8(ascii: "T"),
              bytes[sp2 + 3] == UInt8(ascii: "T"), bytes[sp2 + 4] == UInt8(ascii: "P"),
              bytes[sp2 + 5] == UInt8(ascii: "/"), isDigit(bytes[sp2 + 6]),
              bytes[sp2 + 7] == UInt8(ascii: "."), isDigit(bytes[sp2 + 8])
        else { return .failure(.bad("malformed HTTP version")) }
        let major = Int(bytes[sp2 + 6] - 0x30), minor = Int(bytes[sp2 + 8] - 0x30)
        guard major == 1 else { return .failure(HTTPParserError(kind: .versionNotSupported, message: "unsupported HTTP version")) }
        // A later 1.x minor version is answered as 1.1 (RFC 9110 section 2.5).
        let version: HTTPVersion = minor == 0 ? .http1_0 : .http1_1

        let method = String(decoding: UnsafeBufferPointer(rebasing: bytes[0..<sp1]), as: UTF8.self)
        let target = String(decoding: UnsafeBufferPointer(rebasing: bytes[(sp1 + 1)..<sp2]), as: UTF8.self)

        let headers: HTTPHeaders
        switch parseFields(bytes, from: lineEnd + 2) {
        case .failure(let e): return .failure(e)
        case .success(let h): headers = h
        }

        let framing: BodyFraming
        switch Self.framing(headers, version: version) {
        case .failure(let e): return .failure(e)
        case .success(let f): framing = f
        }

        // RFC 9112 section 3.2: an HTTP/1.1 request without exactly one Host is a 400.
        let hosts = headers.values(name: "Host")
        if hosts.count > 1 || (version == .http1_1 && hosts.isEmpty) {
            return .failure(.bad("missing or repeated Host"))
        }

        // Persistence (RFC 9112 section 9.3).
        var keepAlive = version == .http1_1
        for token in headers.tokens(name: "Connection") {
            if HTTPHeaders.equalsIgnoringCase(token, "close") {
                keepAlive = false
                break
            }
            if version == .http1_0 && HTTPHeaders.equalsIgnoringCase(token, "keep-alive") { keepAlive = true }
        }
        let expect = version == .http1_1
            && headers.values(name: "Expect").contains { HTTPHeaders.equalsIgnoringCase($0.trimmingOWS(), "100-continue") }

        return .success(.head(ParsedRequestHead(
            method: method, target: target, version: version, headers: headers,
            framing: framing, keepAlive: keepAlive, expectContinue: expect)))
    }

    /// The body's framing (RFC 9112 section 6.3), strictest reading: anything ambiguous is
    /// a 400, because two parsers disagreeing about where a body ends is request smuggling.
    private static func framing(_ headers: HTTPHeaders, version: HTTPVersion) -> Result<BodyFraming, HTTPParserError> {
        let transferEncodings = headers.values(name: "Transfer-Encoding")
        let contentLengths = headers.values(name: "Content-Length")
        if !transferEncodings.isEmpty {
            if !contentLengths.isEmpty {
                return .failure(.bad("both Transfer-Encoding and Content-Length"))
            }
            if version == .http1_0 {
                // RFC 9112 section 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing.
                return .failure(.bad("Transfer-Encoding in an HTTP/1.0 request"))
            }
            let codings = headers.tokens(name: "Transfer-Encoding")
            for coding in codings where !HTTPHeaders.equalsIgnoringCase(coding, "chunked") {
                return .failure(HTTPParserError(kind: .notImplemented, message: "unsupported transfer coding"))
            }
            // Only "chunked", exactly once (it must be last and cannot repeat, section 6.1).
            guard codings.count == 1 else { return .failure(.bad("chunked applied more than once")) }
            return .success(.chunked)
        } else if !contentLengths.isEmpty {
            guard contentLengths.count == 1 else { return .failure(.bad("more than one Content-Length")) }
            let value = contentLengths[0].utf8
            // Content-Length = 1*DIGIT (RFC 9110 section 8.6): no sign, no list, no spaces.
            guard !value.isEmpty, value.count <= 18, value.allSatisfy(isDigit) else {
                return .failure(.bad("invalid Content-Length"))
            }
            return .success(.length(value.reduce(0) { $0 * 10 + Int($1 - 0x30) }))
        }
        return .success(.none)
    }

    private func parseTrailers(_ bytes: UnsafeBufferPointer<UInt8>) -> Result<ParsedSection, HTTPParserError> {
        parseFields(bytes, from: 0).map { .trailers($0) }
    }

    /// Parses `field-name ":" OWS field-value OWS CRLF` lines up to the empty line
    /// (RFC 9112 section 5).
    private func parseFields(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Result<HTTPHeaders, HTTPParserError> {
        var fields: [(String, String)] = []
        var p = start
        while true {
            guard let end = firstIndex(of: CR, in: bytes, from: p) else { return .failure(.bad("unterminated header section")) }
            if end == p { break }  // the empty line
            if fields.count == limits.maxHeaderCount {
                return .failure(HTTPParserError(kind: .headersTooLarge, message: "too many header fields"))
            }
            let first = bytes[p]
            // RFC 9112 section 5.2: obs-fold (a line starting with whitespace) is rejected.
            if first == SP || first == HTAB { return .failure(.bad("obsolete line folding")) }
            var colon = p
            while colon < end && bytes[colon] != UInt8(ascii: ":") {
                // RFC 9112 section 5.1: no whitespace between name and colon; names are tokens.
                guard isTokenChar(bytes[colon]) else { return .failure(.bad("invalid header field name")) }
                colon += 1
            }
            guard colon < end, colon > p else { return .failure(.bad("malformed header field")) }
            var vs = colon + 1, ve = end
            while vs < ve && (bytes[vs] == SP || bytes[vs] == HTAB) { vs += 1 }
            while ve > vs && (bytes[ve - 1] == SP || bytes[ve - 1] == HTAB) { ve -= 1 }
            // Control characters were refused while scanning, so the value is VCHAR, SP,
            // HTAB or obs-text (RFC 9110 section 5.5).
            let name = String(decoding: UnsafeBufferPointer(rebasing: bytes[p..<colon]), as: UTF8.self)
            let value = String(decoding: UnsafeBufferPointer(rebasing: bytes[vs..<ve]), as: UTF8.self)
            fields.append((name, value))
            p = end + 2
        }
        return .success(HTTPHeaders(fields))
    }

    // MARK: Chunked bodies (RFC 9112 section 7.1)

    private mutating func parseChunked(_ input: UnsafeBufferPointer<UInt8>) -> (event: HTTPParserEvent?, consumed: Int) {
        var i = 0
        let n = input.count
        while i < n {
            switch state {
            case .chunkSize:
                let c = input[i]
                i += 1
                if sawCR {
                    guard c == LF else { return fail(.bad("bare CR in chunk size line"), consumed: i) }
                    sawCR = false
                    guard let size = parseChunkSizeLine() else { return fail(.bad("invalid chunk size"), consumed: i) }
                    line.removeAll(keepingCapacity: true)
                    if size == 0 {
                        // last-chunk: the trailer section follows.
                        state = .trailers
                        headerSectionStart = 0
                        sectionStart = 0
                        lineStart = 0
                        inRequestLine = false
                        let (event, used) = scanSection(UnsafeBufferPointer(rebasing: input[i...]), trailers: true)
                        return (event, i + used)
                    }
                    state = .chunkData(remaining: size)
                } else if c == CR {
                    sawCR = true
                } else if c == LF || (c < SP && c != HTAB) || c == 0x7F {
                    return fail(.bad("invalid character in chunk size line"), consumed: i)
                } else {
                    line.append(c)
                    if line.count > limits.maxChunkLineBytes { return fail(.bad("chunk size line too long"), consumed: i) }
                }
            case .chunkData(let remaining):
                if remaining == 0 {
                    state = .chunkDataCR
                    continue
                }
                let take = min(remaining, n - i)
                state = .chunkData(remaining: remaining - take)
                if remaining - take == 0 { state = .chunkDataCR }
                return (.body(i..<(i + take)), i + take)
            case .chunkDataCR:
                guard input[i] == CR else { return fail(.bad("chunk data not followed by CRLF"), consumed: i) }
                i += 1
                state = .chunkDataLF
            case .chunkDataLF:
                guard input[i] == LF else { return fail(.bad("chunk data not followed by CRLF"), consumed: i) }
                i += 1
                state = .chunkSize
            default:
                preconditionFailure("parseChunked in state \(state)")
            }
        }
        return (nil, n)
    }

    /// `chunk-size [ chunk-ext ]`: hex digits, then optional extensions that are ignored
    /// (RFC 9112 section 7.1.1 lets a recipient ignore unrecognized extensions).
    private func parseChunkSizeLine() -> Int? {
        var size = 0
        var digits = 0
        var k = 0
        while k < line.count, let v = hexValue(line[k]) {
            digits += 1
            if digits > 15 { return nil }  // would overflow; no body is that large
            size = size << 4 | Int(v)
            k += 1
        }
        guard digits > 0 else { return nil }
        while k < line.count && (line[k] == SP || line[k] == HTAB) { k += 1 }  // BWS
        if k == line.count { return size }
        return line[k] == UInt8(ascii: ";") ? size : nil
    }
}

// MARK: Character classes

/// tchar (RFC 9110 section 5.6.2).
private let tokenTable: [Bool] = {
    var t = [Bool](repeating: false, count: 256)
    for c in UInt8(ascii: "0")...UInt8(ascii: "9") { t[Int(c)] = true }
    for c in UInt8(ascii: "a")...UInt8(ascii: "z") { t[Int(c)] = true }
    for c in UInt8(ascii: "A")...UInt8(ascii: "Z") { t[Int(c)] = true }
    for c in "!#$%&'*+-.^_`|~".utf8 { t[Int(c)] = true }
    return t
}()

@inline(__always) func isTokenChar(_ c: UInt8) -> Bool { tokenTable[Int(c)] }
@inline(__always) func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }

private func firstIndex(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from: Int, to: Int? = nil) -> Int? {
    let end = to ?? bytes.count
    var i = from
    while i < end {
        if bytes[i] == byte { return i }
        i += 1
    }
    return nil
}
