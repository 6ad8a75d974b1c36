import OutpostCore
import OutpostCrypto

/// Makes the bearer tokens the checks send: HS256 JWTs over the server's secret
/// (docs/protocol.md section 2), and deliberately broken ones (wrong algorithm, tampered
/// parts, other secrets) that a server must refuse.
public struct TokenSigner: Sendable {
    /// The HS256 secret (the server's `OUTPOST_JWT_SECRET`).
    public let secret: [UInt8]

    /// A signer for `secret`.
    public init(secret: [UInt8]) {
        self.secret = secret
    }

    /// The claims of an Outpost token; nil fields are left out of the payload.
    public struct Claims: Sendable {
        /// The user id; nil leaves `sub` out.
        public var sub: String? = "conformance"
        /// Expiry in seconds since 1970; nil leaves `exp` out.
        public var exp: Int64?
        /// Space names (`*` suffix: prefix; `"*"`: all); nil leaves `spaces` out.
        public var spaces: [String]?
        /// `"read"` or `"write"`; nil leaves `scope` out (the server then assumes read).
        public var scope: String?
        /// Admin flag; nil leaves `admin` out.
        public var admin: Bool?
        /// Other claims (`roles`…), for a server's rules.
        public var extra: JSONObject = [:]

        /// Claims valid for `lifetime` seconds from now.
        public init(spaces: [String]?, scope: String? = "write", admin: Bool? = nil, lifetime: Int64 = 600, sub: String? = "conformance") {
            self.sub = sub
            self.exp = unixNow() + lifetime
            self.spaces = spaces
            self.scope = scope
            self.admin = admin
        }

        /// The JSON payload.
        public var json: JSONValue {
            var o = extra
            if let sub { o["sub"] = .string(sub) }
            if let exp { o["exp"] = .number(JSONNumber(exp)) }
            if let spaces { o["spaces"] = .array(spaces.map { .string($0) }) }
            if let scope { o["scope"] = .string(scope) }
            if let admin { o["admin"] = .bool(admin) }
            return .object(o)
        }
    }

    /// A valid HS256 token for `claims`.
    public func token(_ claims: Claims) -> String {
        token(header: ["alg": "HS256", "typ": "JWT"], payload: claims.json)
    }

    /// A token with any header and payload, HMAC-SHA256-signed with `key` (the secret by
    /// default), whatever the header's `alg` says.
    public func token(header: JSONValue, payload: JSONValue, key: [UInt8]? = nil) -> String {
        let input = Base64.encodeURL(header.encoded()) + "." + Base64.encodeURL(payload.encoded())
        return input + "." + Base64.encodeURL(HMACSHA256.authenticate(Array(input.utf8), key: key ?? secret))
    }

    /// A token with any header and payload and the given signature part, verbatim.
    public func unsignedToken(header: JSONValue, payload: JSONValue, signature: String = "") -> String {
        Base64.encodeURL(header.encoded()) + "." + Base64.encodeURL(payload.encoded()) + "." + signature
    }
}

/// Seconds since 1970.
func unixNow() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec)
}

/// Milliseconds since 1970.
func unixNowMs() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

#if canImport(Glibc)
import Glibc
import OutpostSignatures
#endif
