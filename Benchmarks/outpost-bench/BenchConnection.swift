import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A blocking HTTP/1.1 keep-alive connection: the benchmarks' client wherever the time of a
/// request is a figure. The engine's `HTTPClient` (OutpostHTTP) serves the untimed probes
/// (`probe` in Drive.swift); this one stays for the timed work because of what it does not
/// cost, so the figures are the server's:
///
/// - A body goes out from the caller's buffer, `bodyCount` bytes of it, with no copy:
///   `media`'s chunk PUTs and `integrations` 3's tus PATCHes (a 4 MiB buffer read anew for
///   each piece) and `peers` (d)'s 64 MiB multipart body. `HTTPClient.encode` joins head
///   and body into a new array per request, a copy of every byte inside the timed region.
/// - `download` hands the body to a sink piece by piece: `media`'s download (256 MiB by
///   default) is hashed or discarded as it arrives, where `HTTPClient` gathers the whole body
///   into one array, whose allocation and copy would be timed.
/// - Reads block in recv(2) (with `SO_RCVTIMEO`) into one buffer per connection: one
///   system call for an answer not yet there, where `HTTPClient`'s non-blocking socket takes
///   a recv that finds nothing, a poll and a recv again, and allocates and copies a 64 KiB
///   block per read. The closed loops of `driveClients` (`push`, `rules`, `integrations`,
///   `peers`, `scaling`), the page loops of `pull`, `rules` and `peers`, and the long-poll
///   wake-ups' pushes run beside the server on the same cores: each extra call per request
///   is taken from the server's figure.
///
/// Answers are read with `Content-Length` or chunked (PocketBase's large lists).
final class BenchConnection {
    let fd: Int32
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0

    struct Response {
        var status: Int
        var body: [UInt8]
        /// The answer's header fields, as sent.
        var headers: [(String, String)] = []

        /// The first field named `name` (case-insensitive).
        func header(_ name: String) -> String? {
            let lower = name.lowercased()
            return headers.first { $0.0.lowercased() == lower }?.1
        }
    }

    /// `bufferSize` bounds one read; thousands of idle long-poll connections want it small.
    init(port: Int, bufferSize: Int = 1 << 20, receiveTimeout: Int = 10) throws {
        buffer = [UInt8](repeating: 0, count: bufferSize)
        fd = try HTTPBench.connectTo(port: port, receiveTimeout: receiveTimeout)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit { close(fd) }

    private func sendAll(_ base: UnsafeRawPointer, _ count: Int) throws {
        var sent = 0
        while sent < count {
            let n = Glibc.send(fd, base + sent, count - sent, Int32(MSG_NOSIGNAL))
            if n < 0 {
                if errno == EINTR { continue }
                throw HTTPBench.BenchError("send: errno \(errno)")
            }
            sent += n
        }
    }

    private func head(_ method: String, _ target: String, _ headers: [(String, String)], bodyCount: Int?) -> [UInt8] {
        var text = "\(method) \(target) HTTP/1.1\r\nHost: bench\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        if let bodyCount { text += "Content-Length: \(bodyCount)\r\n" }
        return Array((text + "\r\n").utf8)
    }

    func request(_ method: String, _ target: String, headers: [(String, String)], body: [UInt8]? = nil, bodyCount: Int? = nil) throws -> Response {
        try send(method, target, headers: headers, body: body, bodyCount: bodyCount)
        return try readResponse()
    }

    /// Sends a request without waiting for its answer (for pulls held open by a long poll).
    func send(_ method: String, _ target: String, headers: [(String, String)], body: [UInt8]? = nil, bodyCount: Int? = nil) throws {
        let count = bodyCount ?? body?.count
        let h = head(method, target, headers, bodyCount: count)
        try h.withUnsafeBytes { try sendAll($0.baseAddress!, $0.count) }
        if let body, let count, count > 0 { try body.withUnsafeBytes { try sendAll($0.baseAddress!, count) } }
    }

    /// Reads the next answer on this connection.
    func readResponse() throws -> Response {
        let (status, length, chunked, fields) = try readHead()
        var out: [UInt8] = []
        if chunked {
            // RFC 9112 section 7.1 (peers' servers answer large bodies this way).
            while true {
                let size = try readChunkSize()
                if size == 0 {
                    // Trailer fields (none expected), then the empty line.
                    while try !readLine().isEmpty {}
                    break
                }
                try readBody(size) { out.append(contentsOf: $0) }
                guard try readLine().isEmpty else { throw HTTPBench.BenchError("bad chunk end") }
            }
        } else {
            out.reserveCapacity(length)
            try readBody(length) { out.append(contentsOf: $0) }
        }
        return Response(status: status, body: out, headers: fields)
    }

    /// One CRLF-terminated line, without its CRLF.
    private func readLine() throws -> [UInt8] {
        while true {
            var i = start
            while i + 1 < end {
                if buffer[i] == 13 && buffer[i + 1] == 10 {
                    let line = Array(buffer[start..<i])
                    start = i + 2
                    return line
                }
                i += 1
            }
            compact()
            try fill()
        }
    }

    private func readChunkSize() throws -> Int {
        let line = try readLine()
        let hex = line.prefix { $0 != UInt8(ascii: ";") }
        guard let size = Int(String(decoding: hex, as: UTF8.self).trimmingCharacters(in: .whitespaces), radix: 16) else {
            throw HTTPBench.BenchError("bad chunk size line")
        }
        return size
    }

    /// Moves unread bytes to the front of the buffer so `fill` has room.
    private func compact() {
        if start > 0 {
            buffer.withUnsafeMutableBytes { raw in
                raw.baseAddress!.copyMemory(from: raw.baseAddress! + start, byteCount: end - start)
            }
            end -= start
            start = 0
        }
    }

    /// GET whose body is handed to `sink` piece by piece; returns the body's length.
    func download(_ target: String, headers: [(String, String)], sink: (UnsafeRawBufferPointer) -> Void) throws -> Int64 {
        let h = head("GET", target, headers, bodyCount: nil)
        try h.withUnsafeBytes { try sendAll($0.baseAddress!, $0.count) }
        let (status, length, chunked, _) = try readHead()
        guard status == 200, !chunked else { throw HTTPBench.BenchError("GET \(target) answered \(status)\(chunked ? " chunked" : "")") }
        try readBody(length, sink)
        return Int64(length)
    }

    private func fill() throws {
        if start == end { start = 0; end = 0 }
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + end, $0.count - end, 0) }
        guard n > 0 else { throw HTTPBench.BenchError("recv: \(n == 0 ? "connection closed" : "errno \(errno)")") }
        end += n
    }

    private func readHead() throws -> (status: Int, length: Int, chunked: Bool, fields: [(String, String)]) {
        while true {
            if let range = findHeadEnd() {
                let text = String(decoding: buffer[start..<range], as: UTF8.self)
                start = range + 4
                let lines = text.split(separator: "\r\n")
                guard let statusLine = lines.first, statusLine.count >= 12, let status = Int(statusLine.dropFirst(9).prefix(3)) else {
                    throw HTTPBench.BenchError("bad status line")
                }
                var length = 0
                var chunked = false
                var fields: [(String, String)] = []
                for line in lines.dropFirst() {
                    if let colon = line.firstIndex(of: ":") {
                        fields.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
                    }
                    let lower = line.lowercased()
                    if lower.hasPrefix("content-length:") {
                        length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
                    } else if lower.hasPrefix("transfer-encoding:") && lower.contains("chunked") {
                        chunked = true
                    }
                }
                if status == 100 { continue }
                return (status, length, chunked, fields)
            }
            compact()
            try fill()
        }
    }

    private func findHeadEnd() -> Int? {
        guard end - start >= 4 else { return nil }
        var i = start
        while i + 3 < end {
            if buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 { return i }
            i += 1
        }
        return nil
    }

    private func readBody(_ length: Int, _ sink: (UnsafeRawBufferPointer) -> Void) throws {
        var left = length
        while left > 0 {
            if start == end { try fill() }
            let n = min(left, end - start)
            buffer.withUnsafeBytes { sink(UnsafeRawBufferPointer(rebasing: $0[start..<(start + n)])) }
            start += n
            left -= n
        }
    }
}
