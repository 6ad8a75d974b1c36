import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP listener on 127.0.0.1 and an ephemeral port whose connections are each served on
/// a thread of their own, never on the test process's cooperative pool: a peer a test
/// stands up (a proxy, a webhook receiver) then answers on time however busy the pool is
/// with the other tests running beside it.
public final class LoopbackListener: Sendable {
    public let port: Int
    private let listener: Int32
    private let stopped = StopFlag()

    /// Set once by `stop`, read by the accept loop when `accept` fails.
    private final class StopFlag: Sendable {
        let value = Atomic(false)
    }

    /// Starts listening; `serve` gets each accepted connection, on a new thread, and the
    /// listener closes the connection when `serve` returns.
    public init(serve: @escaping @Sendable (Int32) -> Void) throws {
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
        let stopped = self.stopped
        Thread.detachNewThread {
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 {
                    if stopped.value.load(ordering: .acquiring) { return }
                    continue
                }
                Thread.detachNewThread {
                    defer { close(client) }
                    serve(client)
                }
            }
        }
    }

    /// Stops accepting (connections being served go on until their `serve` returns).
    public func stop() {
        guard !stopped.value.exchange(true, ordering: .acquiringAndReleasing) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    /// A connection to `port` on 127.0.0.1, or nil when it is refused.
    public static func connect(port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = loopback(port: port)
        let connected = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// A request head (up to the blank line) and the bytes read past it, or nil when the
    /// peer closed first.
    public static func readHead(_ fd: Int32) -> (head: String, rest: [UInt8])? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        let marker = Array("\r\n\r\n".utf8)
        while true {
            if buffer.count >= 4, let end = (0...(buffer.count - 4)).first(where: { buffer[$0..<($0 + 4)].elementsEqual(marker) }) {
                return (String(decoding: buffer[..<end], as: UTF8.self), Array(buffer[(end + 4)...]))
            }
            let n = Glibc.read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    /// The value of the head's field `name` (case-insensitive), if it has one.
    public static func field(_ name: String, in head: String) -> String? {
        for line in head.split(separator: "\r\n").dropFirst() {
            let kv = line.split(separator: ":", maxSplits: 1)
            if kv.count == 2, kv[0].lowercased() == name.lowercased() { return kv[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }

    /// Reads until `body` holds `count` bytes; false when the peer closed first.
    public static func read(_ fd: Int32, into body: inout [UInt8], upTo count: Int) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while body.count < count {
            let n = Glibc.read(fd, &chunk, chunk.count)
            if n <= 0 { return false }
            body += chunk[0..<n]
        }
        return true
    }

    /// Writes all of `bytes` (stops early if the peer has gone).
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
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
