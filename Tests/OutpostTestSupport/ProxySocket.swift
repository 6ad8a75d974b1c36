import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The socket plumbing of the peers tests stand up on loopback (the misbehaving proxies
/// `FaultyProxy`, `MediaProxy` and `TusProxy`, the webhook receiver; `LoopbackListener`):
/// blocking calls, made only on the peers' own threads.
public enum ProxySocket {
    /// A listening socket on 127.0.0.1 and an ephemeral port.
    public static func listen() throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var addr = loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, Glibc.listen(fd, 64) == 0 else {
            close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return (fd, Int(UInt16(bigEndian: addr.sin_port)))
    }

    /// Accepts connections on `listener` until it is closed and `stopped()` says so, and
    /// serves each on a thread of its own (`accepted` runs first, on the accepting thread).
    public static func acceptLoop(_ listener: Int32, stopped: () -> Bool, accepted: () -> Void = {}, serve: @escaping @Sendable (Int32) -> Void) {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if stopped() { return }
                continue
            }
            accepted()
            Thread.detachNewThread { serve(client) }
        }
    }

    /// Closes a listener, ending its `acceptLoop`.
    public static func closeListener(_ listener: Int32) {
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
    }

    /// A request's head and what of its body came with it, or nil when the client went away.
    public static func readHead(_ fd: Int32) -> (head: String, rest: [UInt8])? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        let marker = Array("\r\n\r\n".utf8)
        while true {
            if buffer.count >= 4, let end = (0...(buffer.count - 4)).first(where: { buffer[$0..<($0 + 4)].elementsEqual(marker) }) {
                return (String(decoding: buffer[..<end], as: UTF8.self), Array(buffer[(end + 4)...]))
            }
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    /// The head's `Content-Length` (0 when absent).
    public static func contentLength(_ lines: [String]) -> Int {
        lines.compactMap { line -> Int? in
            let kv = line.split(separator: ":", maxSplits: 1)
            guard kv.count == 2, kv[0].lowercased() == "content-length" else { return nil }
            return Int(kv[1].trimmingCharacters(in: .whitespaces))
        }.first ?? 0
    }

    /// Answers `100 Continue` when the client waits for it before sending its body.
    public static func continueIfExpected(_ fd: Int32, head: String, received: Int, length: Int) {
        if head.lowercased().contains("expect: 100-continue") && received < length {
            writeAll(fd, Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
        }
    }

    /// The body of `length` bytes, `start` being what came with the head.
    public static func readBody(_ fd: Int32, _ start: [UInt8], _ length: Int) -> [UInt8]? {
        var body = start
        var chunk = [UInt8](repeating: 0, count: 65536)
        while body.count < length {
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            body += chunk[0..<n]
        }
        return body
    }

    /// The head to send upstream: one request per connection (the server is asked to close),
    /// without `Expect` (the proxy already read the body).
    public static func upstreamHead(_ lines: [String]) -> String {
        let kept = lines.dropFirst().filter { !$0.lowercased().hasPrefix("connection:") && !$0.lowercased().hasPrefix("expect:") && !$0.isEmpty }
        return ([lines.first ?? ""] + kept).joined(separator: "\r\n") + "\r\nConnection: close\r\n\r\n"
    }

    /// Sends `request` to 127.0.0.1:`port` and returns everything it answered before closing,
    /// or nil when the connection could not be made.
    public static func forward(_ request: [UInt8], port: Int) -> [UInt8]? {
        guard let fd = connect(port: port) else { return nil }
        defer { close(fd) }
        writeAll(fd, request)
        var answer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { break }
            answer += chunk[0..<n]
        }
        return answer
    }

    /// Writes all of `bytes` (or as much as the peer takes before it goes away).
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            offset += n
        }
    }

    /// A connection to 127.0.0.1:`port`, or nil when it is refused.
    public static func connect(port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = loopback(port: port)
        let ok = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard ok == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// The value of the head's field `name` (case-insensitive), if it has one.
    public static func field(_ name: String, in head: String) -> String? {
        for line in head.split(separator: "\r\n").dropFirst() {
            let kv = line.split(separator: ":", maxSplits: 1)
            if kv.count == 2, kv[0].lowercased() == name.lowercased() { return kv[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        return addr
    }
}
