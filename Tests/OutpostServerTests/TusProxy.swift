import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy for one request per connection (tuspy opens a connection for each), in
/// front of a real server, that can damage the body of one PATCH: cut the connection
/// after some of its bytes, or flip one of its bytes in transit. It counts the PATCH body
/// bytes it forwarded, so a test sees what a client really sent. Each connection runs on
/// a thread of its own; every call blocks (tests call them through `blocking`).
final class TusProxy: Sendable {
    enum Fault: Sendable, Equatable {
        /// Forward the head and the first `bytes` of the body, then close both sides.
        case cut(afterBodyBytes: Int)
        /// Forward the body with byte `index` inverted.
        case flip(byte: Int)
    }

    private struct State {
        var faults: [Int: Fault] = [:]
        var patches = 0
        var patchBodyBytes = 0
        var stopped = false
    }

    let port: Int
    private let upstreamPort: Int
    private let listener: Int32
    private let state = Mutex(State())

    init(upstreamPort: Int) throws {
        self.upstreamPort = upstreamPort
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        listener = fd
        port = Int(UInt16(bigEndian: addr.sin_port))
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// The `number`th PATCH from now on (1: the next) gets `fault`.
    func damage(patch number: Int, _ fault: Fault) {
        state.withLock { $0.faults[$0.patches + number] = fault }
    }

    /// PATCH body bytes forwarded to the server so far (a cut PATCH's forwarded part included).
    var patchBodyBytes: Int { state.withLock { $0.patchBodyBytes } }

    func stop() {
        state.withLock { $0.stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if state.withLock({ $0.stopped }) { return }
                continue
            }
            Thread.detachNewThread { [self] in serve(client) }
        }
    }

    private func serve(_ client: Int32) {
        defer { close(client) }
        guard let (head, start) = Self.readHead(client) else { return }
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let isPatch = lines.first?.hasPrefix("PATCH ") == true
        let fault = state.withLock { s -> Fault? in
            guard isPatch else { return nil }
            s.patches += 1
            return s.faults.removeValue(forKey: s.patches)
        }
        let length = lines.compactMap { line -> Int? in
            let kv = line.split(separator: ":", maxSplits: 1)
            guard kv.count == 2, kv[0].lowercased() == "content-length" else { return nil }
            return Int(kv[1].trimmingCharacters(in: .whitespaces))
        }.first ?? 0
        var body = start
        let wanted: Int
        if case .cut(let bytes) = fault { wanted = min(bytes, length) } else { wanted = length }
        var chunk = [UInt8](repeating: 0, count: 65536)
        while body.count < wanted {
            let n = read(client, &chunk, chunk.count)
            if n <= 0 { return }
            body += chunk[0..<n]
        }
        if body.count > wanted { body = Array(body[0..<wanted]) }
        if case .flip(let index) = fault, index < body.count { body[index] ^= 0xFF }
        let upstreamHead = ([lines[0]] + lines.dropFirst().filter { !$0.lowercased().hasPrefix("connection:") && !$0.isEmpty })
            .joined(separator: "\r\n") + "\r\nConnection: close\r\n\r\n"
        let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(upstream) }
        var addr = Self.loopback(port: upstreamPort)
        let connected = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else { return }
        Self.writeAll(upstream, Array(upstreamHead.utf8) + body)
        if isPatch { state.withLock { $0.patchBodyBytes += body.count } }
        if case .cut = fault {
            // The connection breaks mid-body: the server sees its end, the client a reset.
            shutdown(upstream, Int32(SHUT_RDWR))
            shutdown(client, Int32(SHUT_RDWR))
            return
        }
        while true {
            let n = read(upstream, &chunk, chunk.count)
            if n <= 0 { break }
            Self.writeAll(client, Array(chunk[0..<n]))
        }
    }

    private static func readHead(_ fd: Int32) -> (String, [UInt8])? {
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

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            offset += n
        }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        return addr
    }
}
