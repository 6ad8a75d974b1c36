import Foundation

/// `outpost-server healthcheck [--url URL] [--timeout SECONDS]`: one `GET` of the server's
/// `/readyz`; exits 0 on a 2xx answer and 1 otherwise. The container's `HEALTHCHECK` runs
/// it, so the runtime image needs no curl.
///
/// It speaks plain HTTP/1.1 over a blocking socket: a one-shot probe of a local server
/// needs no TLS and no event loop. The default URL is
/// `http://127.0.0.1:$OUTPOST_PORT/readyz`, or `OUTPOST_HOST` instead of 127.0.0.1 when
/// the server listens on one address rather than all of them.
public enum HealthCheckCommand {
    /// Parses the command line and probes; prints the status line or the failure.
    public static func main(arguments: [String], environment: [String: String]) -> Int32 {
        runOperatorCommand {
            let options = try OperatorArguments(arguments, valued: ["--url", "--timeout"], switches: [])
            let url = options.values["--url"] ?? defaultURL(environment: environment)
            var timeout = 5.0
            if let text = options.values["--timeout"] {
                guard let value = Double(text), value > 0, value <= 3600 else { throw AdminCommands.Usage("--timeout must be a number of seconds") }
                timeout = value
            }
            let status = try probe(url: url, timeout: timeout)
            print("\(url): \(status)")
            return (200..<300).contains(status) ? 0 : 1
        }
    }

    /// `http://HOST:PORT/readyz` from `OUTPOST_HOST` and `OUTPOST_PORT` as `serve` reads them.
    public static func defaultURL(environment: [String: String]) -> String {
        let port = environment["OUTPOST_PORT"].flatMap { Int($0) }.map(String.init) ?? "8080"
        var host = environment["OUTPOST_HOST"] ?? "127.0.0.1"
        switch host {
        case "", "0.0.0.0": host = "127.0.0.1"
        case "::", "[::]": host = "[::1]"
        default: if host.contains(":") && !host.hasPrefix("[") { host = "[\(host)]" }
        }
        return "http://\(host):\(port)/readyz"
    }

    /// Sends `GET` to `url` (http only) and returns the response's status code.
    public static func probe(url text: String, timeout: Double) throws -> Int {
        guard let url = URL(string: text), url.scheme == "http", var host = url.host, !host.isEmpty else {
            throw AdminCommands.Usage("--url must be an http:// URL, not \(text)")
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = url.port ?? 80
        var target = url.path.isEmpty ? "/" : url.path
        if let query = url.query { target += "?" + query }

        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, let info = result else {
            throw OperatorError("cannot resolve \(host)")
        }
        defer { freeaddrinfo(result) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw OperatorFiles.ioError("socket", text) }
        defer { close(fd) }
        // Linux applies SO_SNDTIMEO to connect(2) as well.
        var limit = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            throw OperatorError("cannot connect to \(host):\(port): \(String(cString: strerror(errno)))")
        }
        let hostHeader = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let request = Array("GET \(target) HTTP/1.1\r\nHost: \(hostHeader)\r\nUser-Agent: outpost-server-healthcheck\r\nConnection: close\r\n\r\n".utf8)
        var sent = 0
        while sent < request.count {
            let n = request.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw OperatorError("cannot send to \(host):\(port): \(String(cString: strerror(errno)))")
            }
            sent += n
        }
        // The status line is all we need: "HTTP/1.1 200 OK\r\n".
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while !received.contains(0x0A), received.count < 8192 {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                if errno == EINTR { continue }
                throw OperatorError("no answer from \(host):\(port): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            received += buffer[0..<n]
        }
        let line = String(decoding: received.prefix { $0 != 0x0D && $0 != 0x0A }, as: UTF8.self)
        let parts = line.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]), (100...599).contains(status) else {
            throw OperatorError("\(host):\(port) did not answer HTTP (got \"\(line.prefix(80))\")")
        }
        return status
    }
}
