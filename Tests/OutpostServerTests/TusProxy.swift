import Foundation
import OutpostTestSupport
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
    }

    private let upstreamPort: Int
    private let state = Mutex(State())
    private let box = Box()
    private let listener: LoopbackListener
    var port: Int { listener.port }

    /// The listener's connections reach the proxy through this (set once, before any connects).
    private final class Box: @unchecked Sendable {
        // @unchecked: written once in init, before the port is known to any client.
        var proxy: TusProxy?
    }

    init(upstreamPort: Int) throws {
        self.upstreamPort = upstreamPort
        let box = self.box
        listener = try LoopbackListener { fd in box.proxy?.serve(fd) }
        box.proxy = self
    }

    /// The `number`th PATCH from now on (1: the next) gets `fault`.
    func damage(patch number: Int, _ fault: Fault) {
        state.withLock { $0.faults[$0.patches + number] = fault }
    }

    /// PATCH body bytes forwarded to the server so far (a cut PATCH's forwarded part included).
    var patchBodyBytes: Int { state.withLock { $0.patchBodyBytes } }

    func stop() { listener.stop() }

    private func serve(_ client: Int32) {
        guard let (head, start) = ProxySocket.readHead(client) else { return }
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let isPatch = lines.first?.hasPrefix("PATCH ") == true
        let fault = state.withLock { s -> Fault? in
            guard isPatch else { return nil }
            s.patches += 1
            return s.faults.removeValue(forKey: s.patches)
        }
        let length = ProxySocket.contentLength(lines)
        let wanted: Int
        if case .cut(let bytes) = fault { wanted = min(bytes, length) } else { wanted = length }
        guard var body = ProxySocket.readBody(client, start, wanted) else { return }
        if body.count > wanted { body = Array(body[0..<wanted]) }
        if case .flip(let index) = fault, index < body.count { body[index] ^= 0xFF }
        let upstreamHead = ([lines[0]] + lines.dropFirst().filter { !$0.lowercased().hasPrefix("connection:") && !$0.isEmpty })
            .joined(separator: "\r\n") + "\r\nConnection: close\r\n\r\n"
        guard let upstream = ProxySocket.connect(port: upstreamPort) else { return }
        defer { close(upstream) }
        ProxySocket.writeAll(upstream, Array(upstreamHead.utf8) + body)
        if isPatch { state.withLock { $0.patchBodyBytes += body.count } }
        if case .cut = fault {
            // The connection breaks mid-body: the server sees its end, the client a reset.
            shutdown(upstream, Int32(SHUT_RDWR))
            shutdown(client, Int32(SHUT_RDWR))
            return
        }
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(upstream, &chunk, chunk.count)
            if n <= 0 { break }
            ProxySocket.writeAll(client, Array(chunk[0..<n]))
        }
    }
}
