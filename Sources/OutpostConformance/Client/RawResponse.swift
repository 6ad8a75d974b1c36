import OutpostCore

/// One HTTP response exactly as it came off the wire: status, header fields in order,
/// and the body after transfer decoding (chunks joined) but before content decoding.
public struct RawResponse: Sendable {
    /// `HTTP/1.1` or `HTTP/1.0`.
    public var version: String
    /// The status code.
    public var status: Int
    /// The reason phrase.
    public var reason: String
    /// Header fields in the order received, names as sent.
    public var headers: [(name: String, value: String)]
    /// The body as framed on the wire (still gzip when `Content-Encoding: gzip`).
    public var body: [UInt8]
    /// How the body was delimited.
    public var framing: Framing = .none

    /// How a response body is delimited (RFC 9112 section 6.3).
    public enum Framing: Sendable, Equatable {
        /// No body by definition (HEAD, 1xx, 204, 304).
        case none
        /// `Content-Length`.
        case contentLength
        /// `Transfer-Encoding: chunked`.
        case chunked
        /// Neither: the body ran to the end of the connection.
        case untilClose
    }

    /// The first value of header `name` (case-insensitive), or nil.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// Every value of header `name` (case-insensitive).
    public func headerValues(_ name: String) -> [String] {
        headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }

    /// Whether a comma-separated header (such as `Connection`) lists `token`.
    public func headerHasToken(_ name: String, _ token: String) -> Bool {
        headerValues(name).contains { value in
            value.split(separator: ",").contains { $0.trimmedOWS.lowercased() == token.lowercased() }
        }
    }

    /// The body with its content coding removed (gzip is the only one a server may use).
    public func decodedBody() throws -> [UInt8] {
        guard let coding = header("Content-Encoding")?.trimmedOWS.lowercased(), coding != "identity" else { return body }
        guard coding == "gzip" else { throw CheckFailure("response uses Content-Encoding \(coding), which the client did not offer") }
        do {
            return try GzipCodec.gunzip(body, limit: 256 << 20)
        } catch {
            throw CheckFailure("response body is declared gzip but does not decode: \(error)")
        }
    }

    /// The body parsed as JSON (after content decoding).
    public func json() throws -> JSONValue {
        let bytes = try decodedBody()
        do {
            return try JSONParser.parse(bytes)
        } catch {
            throw CheckFailure("\(status) response body is not JSON (\(error)): \(RawResponse.preview(bytes))")
        }
    }

    /// The body as text, shortened for messages.
    public var bodyPreview: String {
        RawResponse.preview((try? decodedBody()) ?? body)
    }

    /// `bytes` as text for a failure message: at most 300 characters.
    static func preview(_ bytes: [UInt8]) -> String {
        if bytes.isEmpty { return "(empty body)" }
        let text = String(decoding: bytes.prefix(300), as: UTF8.self)
        return bytes.count > 300 ? text + "… (\(bytes.count) bytes)" : text
    }

    /// `"404 not_found"` or `"200"`: the status with the error code, when there is one.
    public var summary: String {
        if let code = try? JSONParser.parse((try? decodedBody()) ?? body)["error"]?["code"]?.stringValue {
            return "\(status) \(code)"
        }
        return "\(status)"
    }
}

/// A malformed or missing response, a timeout, or a socket failure.
public struct ConnectionError: Error, CustomStringConvertible, Sendable {
    /// What went wrong.
    public let description: String
    /// The connection was closed by the server (EOF or reset) before the expected bytes.
    public let closed: Bool
    /// No bytes arrived in time.
    public let timedOut: Bool

    init(_ description: String, closed: Bool = false, timedOut: Bool = false) {
        self.description = description
        self.closed = closed
        self.timedOut = timedOut
    }
}

/// Where the response parser gets its bytes: a buffer it consumes from the front, and a
/// way to get more (false at the end of input).
protocol ResponseSource {
    var buffer: [UInt8] { get set }
    mutating func readMore() throws -> Bool
}

/// A fixed input, for parsing responses without a socket.
struct BytesSource: ResponseSource {
    var buffer: [UInt8]
    mutating func readMore() throws -> Bool { false }
}

/// Parses responses out of a byte buffer (RFC 9112): status line, fields, then a body
/// framed by `Transfer-Encoding: chunked`, `Content-Length`, or the end of the
/// connection. Needs no socket: the source supplies bytes.
struct ResponseParser {
    /// Largest response head accepted.
    static let maxHeadBytes = 256 * 1024

    /// Reads one response (an interim `1xx` one too) from `source.buffer`, removing its bytes.
    /// `isHead`: the request was HEAD, so no body follows whatever the headers say.
    static func parse<S: ResponseSource>(_ source: inout S, isHead: Bool) throws -> RawResponse {
        // 1. The head, up to the empty line.
        var headEnd: Int?
        var searchFrom = 0
        while headEnd == nil {
            if let end = find(crlfcrlf, in: source.buffer, from: searchFrom) {
                headEnd = end
                break
            }
            searchFrom = max(0, source.buffer.count - 3)
            guard source.buffer.count <= maxHeadBytes else { throw ConnectionError("response head over \(maxHeadBytes) bytes") }
            guard try source.readMore() else {
                if source.buffer.isEmpty { throw ConnectionError("connection closed without a response", closed: true) }
                throw ConnectionError("connection closed in the middle of a response head: \(RawResponse.preview(source.buffer))", closed: true)
            }
        }
        let headBytes = Array(source.buffer[..<headEnd!])
        source.buffer.removeFirst(headEnd! + 4)
        let lines = split(headBytes)
        guard let statusLine = lines.first else { throw ConnectionError("empty response head") }
        let parts = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].count == 3, let status = Int(parts[1]) else {
            throw ConnectionError("malformed status line \"\(statusLine)\"")
        }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { throw ConnectionError("malformed header line \"\(line)\"") }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmedOWS))
        }
        var response = RawResponse(version: String(parts[0]), status: status, reason: parts.count > 2 ? String(parts[2]) : "",
                                   headers: headers, body: [])
        // 2. The body (RFC 9112 section 6.3).
        if isHead || (100..<200).contains(status) || status == 204 || status == 304 { return response }
        if let te = response.header("Transfer-Encoding") {
            guard te.lowercased().split(separator: ",").last?.trimmedOWS == "chunked" else {
                response.body = try readToEnd(&source)
                response.framing = .untilClose
                return response
            }
            response.body = try readChunked(&source)
            response.framing = .chunked
            return response
        }
        if let lengthText = response.header("Content-Length") {
            let lengths = Set(response.headerValues("Content-Length").flatMap { $0.split(separator: ",").map { $0.trimmedOWS } })
            guard lengths.count == 1, let length = Int(lengths.first!), length >= 0 else {
                throw ConnectionError("malformed Content-Length \"\(lengthText)\"")
            }
            while source.buffer.count < length {
                guard try source.readMore() else {
                    throw ConnectionError("connection closed after \(source.buffer.count) of \(length) body bytes", closed: true)
                }
            }
            response.body = Array(source.buffer[..<length])
            source.buffer.removeFirst(length)
            response.framing = .contentLength
            return response
        }
        response.body = try readToEnd(&source)
        response.framing = .untilClose
        return response
    }

    private static func readToEnd<S: ResponseSource>(_ source: inout S) throws -> [UInt8] {
        while try source.readMore() {}
        defer { source.buffer.removeAll() }
        return source.buffer
    }

    private static func readChunked<S: ResponseSource>(_ source: inout S) throws -> [UInt8] {
        var body: [UInt8] = []
        while true {
            var lineEnd = find(crlf, in: source.buffer, from: 0)
            while lineEnd == nil {
                guard source.buffer.count < 4096, try source.readMore() else { throw ConnectionError("bad or missing chunk-size line", closed: true) }
                lineEnd = find(crlf, in: source.buffer, from: 0)
            }
            let line = String(decoding: source.buffer[..<lineEnd!], as: UTF8.self)
            let sizeText = line.split(separator: ";", maxSplits: 1).first.map { $0.trimmedOWS } ?? ""
            guard let size = Int(sizeText, radix: 16), size >= 0 else { throw ConnectionError("malformed chunk size \"\(line)\"") }
            source.buffer.removeFirst(lineEnd! + 2)
            if size == 0 {
                // Trailer fields, then the empty line.
                while true {
                    var end = find(crlf, in: source.buffer, from: 0)
                    while end == nil {
                        guard try source.readMore() else { throw ConnectionError("connection closed in chunked trailer", closed: true) }
                        end = find(crlf, in: source.buffer, from: 0)
                    }
                    source.buffer.removeFirst(end! + 2)
                    if end == 0 { return body }
                }
            }
            while source.buffer.count < size + 2 {
                guard try source.readMore() else { throw ConnectionError("connection closed inside a chunk", closed: true) }
            }
            body.append(contentsOf: source.buffer[..<size])
            guard source.buffer[size] == 0x0D, source.buffer[size + 1] == 0x0A else { throw ConnectionError("chunk not followed by CRLF") }
            source.buffer.removeFirst(size + 2)
        }
    }

    static let crlf: [UInt8] = [0x0D, 0x0A]
    static let crlfcrlf: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A]

    static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard haystack.count >= needle.count, start <= haystack.count - needle.count else { return nil }
        var i = start
        let last = haystack.count - needle.count
        while i <= last {
            if haystack[i] == needle[0] {
                var j = 1
                while j < needle.count && haystack[i + j] == needle[j] { j += 1 }
                if j == needle.count { return i }
            }
            i += 1
        }
        return nil
    }

    private static func split(_ head: [UInt8]) -> [String] {
        var lines: [String] = []
        var start = 0
        var i = 0
        while i < head.count {
            if head[i] == 0x0D, i + 1 < head.count, head[i + 1] == 0x0A {
                lines.append(String(decoding: head[start..<i], as: UTF8.self))
                i += 2
                start = i
            } else {
                i += 1
            }
        }
        lines.append(String(decoding: head[start...], as: UTF8.self))
        return lines
    }
}
