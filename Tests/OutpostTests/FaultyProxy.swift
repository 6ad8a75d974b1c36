import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A one-request-per-connection HTTP proxy in front of a real server, that can misbehave the
/// way proxies do: answer `504` with an HTML page after the server handled the request, or
/// cut the server's answer off half-way. Each connection runs on its own thread.
final class FaultyProxy: Sendable {
    enum Behavior: Sendable {
        /// Forward and pass the answer through.
        case pass
        /// Forward (the server handles the request), then answer 504 with HTML.
        case gatewayTimeout
        /// Forward, then send only the first half of the answer and close.
        case cutOff
    }

    private struct State {
        var queue: [(path: String, behavior: Behavior)] = []
        var handled = 0
        var stopped = false
        var upstreamPort: Int
    }

    let port: Int
    private let listener: Int32
    private let state: Mutex<State>

    /// Where requests go; a server restarted on another port is followed by setting it.
    var upstreamPort: Int {
        get { state.withLock { $0.upstreamPort } }
        set { state.withLock { $0.upstreamPort = newValue } }
    }

    init(upstreamPort: Int) throws {
        state = Mutex(State(upstreamPort: upstreamPort))
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else { throw POSIXError(.EADDRINUSE) }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        port = Int(UInt16(bigEndian: addr.sin_port))
        listener = fd
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// The next request whose path contains `path` gets `behavior`.
    func next(_ behavior: Behavior, forPathContaining path: String) {
        state.withLock { $0.queue.append((path, behavior)) }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

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
            Thread.detachNewThread { [self] in handle(client) }
        }
    }

    private func handle(_ client: Int32) {
        defer { close(client) }
        guard case (var head, let body)? = readRequest(client) else { return }
        let requestLine = head.split(separator: "\r\n", omittingEmptySubsequences: false).first.map(String.init) ?? ""
        let behavior = state.withLock { s -> Behavior in
            s.handled += 1
            if let i = s.queue.firstIndex(where: { requestLine.contains($0.path) }) { return s.queue.remove(at: i).behavior }
            return .pass
        }
        // One request per connection: ask the server to close, and drop Expect.
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
            .filter { !$0.lowercased().hasPrefix("connection:") && !$0.lowercased().hasPrefix("expect:") && !$0.isEmpty }
        head = lines.joined(separator: "\r\n") + "\r\nConnection: close\r\n\r\n"
        guard let answer = forward(Array(head.utf8) + body) else { return }
        switch behavior {
        case .pass:
            writeAll(client, answer)
        case .gatewayTimeout:
            let html = "<html><head><title>504 Gateway Time-out</title></head><body><h1>504 Gateway Time-out</h1></body></html>"
            writeAll(client, Array("HTTP/1.1 504 Gateway Time-out\r\nContent-Type: text/html\r\nContent-Length: \(html.utf8.count)\r\nConnection: close\r\n\r\n\(html)".utf8))
        case .cutOff:
            writeAll(client, Array(answer.prefix(max(1, answer.count / 2))))
        }
    }

    private func readRequest(_ fd: Int32) -> (String, [UInt8])? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            if let end = find(buffer, Array("\r\n\r\n".utf8)) {
                let head = String(decoding: buffer[..<end], as: UTF8.self)
                var body = Array(buffer[(end + 4)...])
                let length = head.split(separator: "\r\n").compactMap { line -> Int? in
                    let parts = line.split(separator: ":", maxSplits: 1)
                    guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                    return Int(parts[1].trimmingCharacters(in: .whitespaces))
                }.first ?? 0
                if head.lowercased().contains("expect: 100-continue") && body.count < length {
                    writeAll(fd, Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
                }
                while body.count < length {
                    let n = read(fd, &chunk, chunk.count)
                    if n <= 0 { return nil }
                    body += chunk[0..<n]
                }
                return (head, body)
            }
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    private func forward(_ request: [UInt8]) -> [UInt8]? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(state.withLock { $0.upstreamPort }).bigEndian
        let ok = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard ok == 0 else { return nil }
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

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n <= 0 { return }
            offset += n
        }
    }

    private func find(_ haystack: [UInt8], _ needle: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] && Array(haystack[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }
}
