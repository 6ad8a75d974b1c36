import Dispatch
import Synchronization
import OutpostCrypto
import OutpostHTTP

/// Where the media bucket is and how requests address it (docs/scaling.md, "Media in S3").
public struct S3Location: Sendable, Equatable {
    /// `http` or `https`.
    public var scheme: String
    public var host: String
    public var port: Int
    public var bucket: String
    /// Prepended to every key (`media/`, say); empty for the bucket's root.
    public var prefix: String
    public var region: String
    /// Bucket in the path (`host/bucket/key`, what MinIO, Ceph and Swift expect) rather than
    /// in the host name (`bucket.host/key`, AWS's default).
    public var pathStyle: Bool

    /// Parses `endpoint` (`http://host:port` or `https://host`), refusing what is not one.
    public init(endpoint: String, bucket: String, prefix: String = "", region: String = "us-east-1", pathStyle: Bool = true) throws(S3Failure) {
        let parts = endpoint.split(separator: "://", maxSplits: 1).map(String.init)
        guard parts.count == 2, parts[0] == "http" || parts[0] == "https" else {
            throw S3Failure(.configuration, "the S3 endpoint \(endpoint) is not an http:// or https:// URL")
        }
        var authority = parts[1]
        while authority.hasSuffix("/") { authority.removeLast() }
        guard !authority.isEmpty, !authority.contains("/"), !authority.contains("@") else {
            throw S3Failure(.configuration, "the S3 endpoint \(endpoint) must be a scheme and a host (and port), with no path or user")
        }
        scheme = parts[0]
        if let colon = authority.lastIndex(of: ":"), let port = Int(authority[authority.index(after: colon)...]), (1...65535).contains(port) {
            host = String(authority[..<colon])
            self.port = port
        } else {
            host = authority
            port = scheme == "https" ? 443 : 80
        }
        guard Self.isBucketName(bucket) else {
            throw S3Failure(.configuration, "\(bucket) is not a bucket name (3 to 63 lower-case letters, digits, dots and hyphens)")
        }
        self.bucket = bucket
        self.prefix = prefix
        self.region = region
        self.pathStyle = pathStyle
    }

    /// The Host header's value.
    var hostHeader: String {
        let name = pathStyle ? host : "\(bucket).\(host)"
        return (scheme == "http" && port == 80) || (scheme == "https" && port == 443) ? name : "\(name):\(port)"
    }

    /// The decoded path of `key` (of the bucket itself when nil).
    func path(_ key: String?) -> String {
        let object = key.map { "/" + prefix + $0 } ?? "/"
        return pathStyle ? "/" + bucket + (key == nil ? "" : object) : object
    }

    static func isBucketName(_ name: String) -> Bool {
        (3...63).contains(name.utf8.count) && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x2D }
    }
}

/// Why a request to the store failed.
public struct S3Failure: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// A setting names no usable store.
        case configuration
        /// No answer: no connection, a reset, or nothing within the time left.
        case unreachable
        /// The store answered with an error: its HTTP status and S3 code.
        case answered(status: Int, code: String)
        /// The answer was not what the operation expects.
        case badAnswer
    }

    public var kind: Kind
    public var detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { detail }

    /// Whether trying again may succeed: no answer, a server error (500, 502, 503 with
    /// `SlowDown`, 504), or a request the store timed out.
    public var isTransient: Bool {
        switch kind {
        case .unreachable: return true
        case .answered(let status, let code): return status >= 500 || code == "RequestTimeout" || code == "SlowDown"
        case .configuration, .badAnswer: return false
        }
    }

    /// The S3 error code, when the store answered one.
    public var code: String? {
        if case .answered(_, let code) = kind { return code }
        return nil
    }
}

/// When a failed request is tried again: with exponential backoff and full jitter (a
/// random wait up to `base` × 2^attempt, at most `cap`), only for a transient failure, at
/// most `attempts` times, and never past the request's deadline.
public struct S3RetryPolicy: Sendable {
    public var attempts = 5
    public var baseMs: Int64 = 100
    public var capMs: Int64 = 5_000

    public init() {}

    /// The wait before attempt `attempt + 1` after `failure` (attempt counts from 0); nil
    /// to give up. `random` draws from 0 ..< n; `leftMs` is the time to the deadline.
    public func delay(after failure: S3Failure, attempt: Int, leftMs: Int64, random: (Int64) -> Int64) -> Int64? {
        guard failure.isTransient, attempt + 1 < attempts else { return nil }
        let ceiling = min(capMs, baseMs << min(Int64(attempt), 20))
        let wait = random(ceiling + 1)
        // A wait that would end past the deadline leaves no time for the attempt it waits for.
        return wait < leftMs ? wait : nil
    }
}

/// One answer as the store sent it.
struct S3Answer: Sendable {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}

/// Sends one signed request and reads its answer: blocking, off the concurrency pool.
protocol S3Exchange: Sendable {
    func send(method: String, target: String, headers: [(name: String, value: String)], body: [UInt8], location: S3Location,
              deadline: UInt64, maxBodyBytes: Int) throws(S3Failure) -> S3Answer
}

/// Requests to `http://` endpoints over the engine's own client (`HTTPClient`), one
/// connection per request.
struct PlainS3Exchange: S3Exchange {
    func send(method: String, target: String, headers: [(name: String, value: String)], body: [UInt8], location: S3Location,
              deadline: UInt64, maxBodyBytes: Int) throws(S3Failure) -> S3Answer {
        do {
            let client = try HTTPClient(host: location.host, port: location.port, timeout: 30, deadline: deadline, peer: "the S3 store")
            try client.send(HTTPClient.encode(method, target, headers: headers.map { ($0.name, $0.value) } + [("Connection", "close")],
                                              body: method == "GET" || method == "HEAD" ? nil : body))
            let answer = try client.readResponse(head: method == "HEAD", maxBodyBytes: maxBodyBytes)
            return S3Answer(status: answer.status, headers: answer.headers, body: answer.body)
        } catch {
            switch error.kind {
            case .badAnswer: throw S3Failure(.badAnswer, "the S3 store at \(location.host):\(location.port): \(error.detail)")
            default: throw S3Failure(.unreachable, "the S3 store at \(location.host):\(location.port): \(error.detail)")
            }
        }
    }
}

/// The media bucket: where it is, the credentials that reach it, and the part size of the
/// multipart uploads that publish files (`--media-store s3`, docs/media.md).
public struct S3MediaSettings: Sendable {
    public var location: S3Location
    public var credentials: S3Credentials
    /// Bytes of one multipart part; at least 5 MiB (S3's minimum for all but the last).
    public var partSize = 8 << 20
    /// Seconds a presigned download URL lasts; 0: downloads stream through the server.
    public var presignedDownloadSeconds = 0
    /// What the server's requests to the bucket did (`/metrics`).
    public let counters = S3Counters()

    public init(location: S3Location, credentials: S3Credentials) {
        self.location = location
        self.credentials = credentials
    }
}

/// Requests to the bucket, their failures and their bytes, counted across threads for
/// `/metrics` (`outpost_media_s3_*`).
public final class S3Counters: Sendable {
    private let values = Mutex<(requests: Int, failures: Int, sent: Int, received: Int)>((0, 0, 0, 0))

    public init() {}

    /// One attempt: bytes sent; bytes received, or nil when it failed.
    func attempt(sent: Int, received: Int?) {
        values.withLock { v in
            v.requests += 1
            v.sent += sent
            if let received { v.received += received } else { v.failures += 1 }
        }
    }

    public var requests: Int { values.withLock { $0.requests } }
    public var failures: Int { values.withLock { $0.failures } }
    public var bytesSent: Int { values.withLock { $0.sent } }
    public var bytesReceived: Int { values.withLock { $0.received } }
}
