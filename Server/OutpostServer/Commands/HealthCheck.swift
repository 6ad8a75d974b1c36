import Foundation
import OutpostHTTP

/// `outpost-server healthcheck [--url URL] [--timeout SECONDS]`: one `GET` of the server's
/// `/readyz`; exits 0 on a 2xx answer and 1 otherwise. The container's `HEALTHCHECK` runs
/// it, so the runtime image needs no curl.
///
/// It speaks plain HTTP/1.1 with the engine's `HTTPClient`: a one-shot probe of a local
/// server needs no TLS and no event loop. The default URL is
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

        do throws(HTTPClientFailure) {
            let client = try HTTPClient(host: host, port: port, timeout: timeout)
            let hostHeader = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            try client.send(HTTPClient.encode("GET", target, headers: [("Host", hostHeader), ("User-Agent", "outpost-server-healthcheck"), ("Connection", "close")]))
            // The status line is all we need.
            return try client.readHead(maxBytes: 8192).status
        } catch {
            throw OperatorError(error.kind == .connectFailed ? error.detail : "\(host):\(port): \(error.detail)")
        }
    }
}
