import OutpostCore
import OutpostCrypto
import OutpostSignatures

/// Credentials for an S3-compatible store: an access key id and its secret, and a session
/// token when the credentials are temporary (AWS STS). Never written to a log.
public struct S3Credentials: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var accessKeyId: String
    public var secretAccessKey: String
    public var sessionToken: String?

    public init(accessKeyId: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    /// Never the key or the secret: settings and errors may be printed.
    public var description: String { "S3Credentials(redacted)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

/// AWS Signature Version 4 as S3 takes it, written from AWS's specification ("Signature
/// Version 4 signing process" and "Authenticating Requests (AWS Signature Version 4)" in the
/// S3 API reference):
///
/// 1. The canonical request: method, the canonical URI (each path segment percent-encoded
///    once, RFC 3986 unreserved characters left alone, `/` kept; S3 neither normalizes the
///    path nor encodes it twice), the canonical query (names and values encoded, sorted by
///    name then value), the signed headers (lowercased names, values trimmed with inner runs
///    of spaces folded, sorted, each line ending in a newline), the list of their names, and
///    the payload's SHA-256 in hex (or `UNSIGNED-PAYLOAD`).
/// 2. The string to sign: `AWS4-HMAC-SHA256`, the time (`YYYYMMDDTHHMMSSZ`), the scope
///    (`date/region/s3/aws4_request`) and the canonical request's SHA-256 in hex.
/// 3. The signing key: HMAC-SHA256 chained over `AWS4` + secret, the date, the region,
///    the service and `aws4_request`; the signature is the string to sign's HMAC under it.
///
/// Tested against the published examples of the S3 reference and of AWS's test suite
/// (`SigV4Tests`) and against a real S3 layer (OpenStack Swift's s3api).
public struct SigV4Signer: Sendable {
    public let credentials: S3Credentials
    public let region: String
    public let service: String

    /// The SHA-256 of no bytes: the payload hash of a request without a body.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    /// The payload hash of a request whose body is not part of the signature (a presigned URL).
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"

    public init(credentials: S3Credentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// One request to sign. `path` is the decoded path (`/bucket/key`); `query` the decoded
    /// query parameters; `headers` every header to sign, `host` included.
    public struct Request: Sendable {
        public var method: String
        public var path: String
        public var query: [(name: String, value: String)]
        public var headers: [(name: String, value: String)]

        public init(method: String, path: String, query: [(name: String, value: String)] = [], headers: [(name: String, value: String)]) {
            self.method = method
            self.path = path
            self.query = query
            self.headers = headers
        }
    }

    /// The headers to add to `request` to sign it at `secondsSince1970`: `x-amz-date`,
    /// `x-amz-content-sha256`, `x-amz-security-token` with temporary credentials, and
    /// `authorization`. Every header of the request is signed, these included.
    public func sign(_ request: Request, payloadHash: String, secondsSince1970: Int64) -> [(name: String, value: String)] {
        let time = Self.amzDate(secondsSince1970)
        var added: [(name: String, value: String)] = [("x-amz-date", time), ("x-amz-content-sha256", payloadHash)]
        if let token = credentials.sessionToken { added.append(("x-amz-security-token", token)) }
        let headers = Self.canonicalHeaders(request.headers + added)
        let canonical = [request.method, Self.canonicalURI(request.path), Self.canonicalQuery(request.query),
                         headers.lines, headers.names, payloadHash].joined(separator: "\n")
        let signature = self.signature(canonicalRequest: canonical, time: time)
        added.append(("authorization", "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyId)/\(scope(time)), SignedHeaders=\(headers.names), Signature=\(signature)"))
        return added
    }

    /// A presigned URL's query (without the `?`) for `method` on `path` at `host`, valid for
    /// `expires` seconds from `secondsSince1970`: only `host` is signed, and the payload is
    /// unsigned, as S3 expects of a URL handed to another client.
    public func presignedQuery(method: String, path: String, host: String, query: [(name: String, value: String)] = [],
                               expires: Int, secondsSince1970: Int64) -> String {
        let time = Self.amzDate(secondsSince1970)
        var parameters = query + [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", "\(credentials.accessKeyId)/\(scope(time))"),
                                  ("X-Amz-Date", time), ("X-Amz-Expires", String(expires)), ("X-Amz-SignedHeaders", "host")]
        if let token = credentials.sessionToken { parameters.append(("X-Amz-Security-Token", token)) }
        let canonical = [method, Self.canonicalURI(path), Self.canonicalQuery(parameters), "host:\(host)\n", "host", Self.unsignedPayload]
            .joined(separator: "\n")
        return Self.canonicalQuery(parameters) + "&X-Amz-Signature=" + signature(canonicalRequest: canonical, time: time)
    }

    /// The signature of a canonical request made at `time` (`YYYYMMDDTHHMMSSZ`).
    func signature(canonicalRequest: String, time: String) -> String {
        let stringToSign = ["AWS4-HMAC-SHA256", time, scope(time), SHA256.hex(Array(canonicalRequest.utf8))].joined(separator: "\n")
        var key = Array("AWS4\(credentials.secretAccessKey)".utf8)
        for part in [String(time.prefix(8)), region, service, "aws4_request"] {
            key = HMACSHA256.authenticate(Array(part.utf8), key: key)
        }
        return Hex.encode(HMACSHA256.authenticate(Array(stringToSign.utf8), key: key))
    }

    private func scope(_ time: String) -> String {
        "\(time.prefix(8))/\(region)/\(service)/aws4_request"
    }

    /// The path with each segment encoded once; `/` is kept.
    static func canonicalURI(_ path: String) -> String {
        let encoded = encode(path, keepingSlash: true)
        return encoded.hasPrefix("/") ? encoded : "/" + encoded
    }

    /// Names and values encoded, sorted by encoded name, then value; a name without a
    /// value is `name=`.
    static func canonicalQuery(_ query: [(name: String, value: String)]) -> String {
        query.map { (encode($0.name, keepingSlash: false), encode($0.value, keepingSlash: false)) }
            .sorted { $0.0 == $1.0 ? $0.1 < $1.1 : $0.0 < $1.0 }
            .map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// The signed headers' lines and the `;`-joined list of their names. Headers of the same
    /// name are joined by commas in the order given.
    static func canonicalHeaders(_ headers: [(name: String, value: String)]) -> (lines: String, names: String) {
        var values: [String: [String]] = [:]
        for (name, value) in headers {
            let folded = value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            values[name.lowercased(), default: []].append(String(folded.trimmingSpacesAndTabs))
        }
        let names = values.keys.sorted()
        let lines = names.map { "\($0):\(values[$0]!.joined(separator: ","))\n" }.joined()
        return (lines, names.joined(separator: ";"))
    }

    /// Percent-encodes every byte of `text`'s UTF-8 but the unreserved characters of RFC 3986
    /// (`A-Z a-z 0-9 - . _ ~`), and `/` when `keepingSlash`; hex digits upper case.
    static func encode(_ text: String, keepingSlash: Bool) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            case UInt8(ascii: "/") where keepingSlash:
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `YYYYMMDDTHHMMSSZ` in UTC.
    static func amzDate(_ secondsSince1970: Int64) -> String {
        let days = secondsSince1970 >= 0 ? secondsSince1970 / 86_400 : (secondsSince1970 - 86_399) / 86_400
        let secondOfDay = secondsSince1970 - days * 86_400
        let (year, month, day) = CivilCalendar.date(days: days)
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(year)\(two(month))\(two(day))T\(two(secondOfDay / 3600))\(two(secondOfDay % 3600 / 60))\(two(secondOfDay % 60))Z"
    }
}
