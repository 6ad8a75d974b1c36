import Foundation
import OutpostCore
import OutpostCrypto

/// What a verified token allows (PROTOCOL.md section 2).
public struct Claims: Sendable, Equatable {
    public enum Scope: String, Sendable {
        case read
        case write
    }

    /// The user id.
    public var sub: String
    /// Expiry, in seconds since 1970 (RFC 7519 NumericDate).
    public var exp: Int64
    /// Space names; an entry ending in `*` matches by prefix; `"*"` alone matches all.
    public var spaces: [String]
    public var scope: Scope
    public var admin: Bool
    /// The token's other claims (`roles`, `team`, `iat`…), as it carries them: what a
    /// rules file reads as `auth.<claim>` besides the ones above (docs/rules.md).
    public var extra: JSONObject

    /// The names of the claims this type reads itself; `extra` holds the others.
    public static let standardNames: Set<String> = ["sub", "exp", "spaces", "scope", "admin"]

    public init(sub: String, exp: Int64, spaces: [String], scope: Scope = .read, admin: Bool = false, extra: JSONObject = [:]) {
        self.sub = sub
        self.exp = exp
        self.spaces = spaces
        self.scope = scope
        self.admin = admin
        var others = extra
        for name in Self.standardNames { _ = others.removeValue(forKey: name) }
        self.extra = others
    }

    /// Every claim, as the rules see them (`auth`).
    public var all: JSONObject {
        var o = extra
        o["sub"] = .string(sub)
        o["exp"] = .number(JSONNumber(exp))
        o["spaces"] = .array(spaces.map { .string($0) })
        o["scope"] = .string(scope.rawValue)
        o["admin"] = .bool(admin)
        return o
    }

    /// True when the token names `space`, exactly or by a `*` prefix.
    public func allows(space: String) -> Bool {
        spaces.contains { entry in
            if entry.hasSuffix("*") { return space.hasPrefix(entry.dropLast()) }
            return entry == space
        }
    }

    /// True when the token may do `needed` in `space`. Write includes read.
    public func permits(_ needed: Scope, in space: String) -> Bool {
        guard allows(space: space) else { return false }
        return needed == .read || scope == .write
    }
}

/// Why a token was refused. Every case is answered with `401 unauthorized`.
public enum TokenError: Error, Equatable, Sendable {
    case malformed(String)
    case unsupportedAlgorithm(String)
    case badSignature
    case expired
    case notYetValid
    case missingClaim(String)

    public var message: String {
        switch self {
        case .malformed(let why): return "malformed token: \(why)"
        case .unsupportedAlgorithm(let alg): return "token algorithm \(alg) is not accepted; only HS256 is"
        case .badSignature: return "token signature does not verify"
        case .expired: return "token has expired"
        case .notYetValid: return "token is not valid yet"
        case .missingClaim(let claim): return "token lacks a valid \(claim) claim"
        }
    }
}

/// Turns a bearer token into verified claims, or refuses it: what `Authorizer` asks of
/// the server's tokens. `JWTAuthority` (HS256 with the server's secrets) is the one the
/// server uses; an application may wrap it (an audit log, say) when it builds its parts
/// (`OutpostApplication.Parts`).
public protocol TokenVerifier: Sendable {
    /// The claims of `token` at time `now` (seconds since 1970).
    func verify(_ token: String, now: Int64) throws(TokenError) -> Claims
}

/// HS256 JSON Web Tokens (RFC 7519, RFC 7515) for Outpost's access rules. Any `alg` other
/// than HS256 — `none` included — is refused before anything else is looked at, and
/// signatures are compared in constant time.
public struct JWTAuthority: TokenVerifier {
    /// Signing key first; the others still verify (for rotating the secret without
    /// logging every device out at once).
    private let keys: [[UInt8]]

    public init(secret: [UInt8], previousSecrets: [[UInt8]] = []) {
        precondition(!secret.isEmpty, "a JWT secret cannot be empty")
        keys = [secret] + previousSecrets.filter { !$0.isEmpty }
    }

    /// Signs `claims` into a compact token.
    public func sign(_ claims: Claims) -> String {
        let header = JSONValue.object(["alg": "HS256", "typ": "JWT"]).encoded()
        var payload: JSONObject = claims.extra
        payload["sub"] = .string(claims.sub)
        payload["exp"] = .number(JSONNumber(claims.exp))
        payload["spaces"] = .array(claims.spaces.map { .string($0) })
        payload["scope"] = .string(claims.scope.rawValue)
        if claims.admin { payload["admin"] = .bool(true) }
        let signingInput = Base64.encodeURL(header) + "." + Base64.encodeURL(JSONValue.object(payload).encoded())
        return signingInput + "." + Base64.encodeURL(HMACSHA256.authenticate(Array(signingInput.utf8), key: keys[0]))
    }

    /// Verifies `token` at time `now` (seconds since 1970) and returns its claims.
    public func verify(_ token: String, now: Int64) throws(TokenError) -> Claims {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, token.utf8.count <= 8192 else { throw .malformed("expected three dot-separated parts") }
        guard let headerBytes = Base64.decodeURL(String(parts[0])),
              case .object(let header)? = try? JSONParser.parse(headerBytes)
        else { throw .malformed("header is not base64url JSON") }
        // The algorithm is checked first: a token that names another algorithm is refused
        // whatever its signature (the classic `alg: none` and key-confusion attacks).
        guard case .string(let alg)? = header["alg"] else { throw .malformed("header has no alg") }
        guard alg == "HS256" else { throw .unsupportedAlgorithm(alg) }
        guard let signature = Base64.decodeURL(String(parts[2])), signature.count == SHA256.byteCount else {
            throw .malformed("signature is not base64url of 32 bytes")
        }
        let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        var verified = false
        for key in keys where HMACSHA256.verify(signature, message: signingInput, key: key) { verified = true }
        guard verified else { throw .badSignature }

        guard let payloadBytes = Base64.decodeURL(String(parts[1])),
              case .object(let payload)? = try? JSONParser.parse(payloadBytes)
        else { throw .malformed("payload is not base64url JSON") }
        guard case .string(let sub)? = payload["sub"], !sub.isEmpty else { throw .missingClaim("sub") }
        guard let exp = payload["exp"]?.int64Value ?? payload["exp"].flatMap(Self.wholeSeconds) else { throw .missingClaim("exp") }
        guard now < exp else { throw .expired }
        if let nbfValue = payload["nbf"] {
            guard let nbf = nbfValue.int64Value ?? Self.wholeSeconds(nbfValue) else { throw .missingClaim("nbf") }
            guard now >= nbf else { throw .notYetValid }
        }
        var spaces: [String] = []
        switch payload["spaces"] {
        case nil, .null?: break
        case .array(let items)?:
            for item in items {
                guard case .string(let s) = item else { throw .missingClaim("spaces") }
                spaces.append(s)
            }
        default: throw .missingClaim("spaces")
        }
        var scope = Claims.Scope.read
        switch payload["scope"] {
        case nil, .null?: break
        case .string(let s)?:
            guard let parsed = Claims.Scope(rawValue: s) else { throw .missingClaim("scope") }
            scope = parsed
        default: throw .missingClaim("scope")
        }
        var admin = false
        switch payload["admin"] {
        case nil, .null?: break
        case .bool(let b)?: admin = b
        default: throw .missingClaim("admin")
        }
        return Claims(sub: sub, exp: exp, spaces: spaces, scope: scope, admin: admin, extra: payload)
    }

    /// NumericDate may carry a fraction (RFC 7519 section 2); it counts in whole seconds.
    private static func wholeSeconds(_ value: JSONValue) -> Int64? {
        guard case .number(let n) = value else { return nil }
        let d = n.doubleValue
        guard d.isFinite, abs(d) < 1e15 else { return nil }
        return Int64(d.rounded(.down))
    }
}

/// Where the server's JWT secret comes from: `OUTPOST_JWT_SECRET`, or a file in the data
/// directory created on first use with mode 0600 (PROTOCOL.md section 8).
public enum JWTSecret {
    /// The file name inside the data directory.
    public static let fileName = "jwt-secret"

    /// Loads the secret from the environment value when set, else from (or into) the file.
    public static func load(environmentValue: String?, dataDirectory: String) throws -> [UInt8] {
        try SecretFile.load(environmentValue: environmentValue, dataDirectory: dataDirectory, fileName: fileName)
    }
}
