import Foundation
import OutpostCore
import OutpostCrypto
import OutpostSignatures

/// What a verified token allows (docs/protocol.md section 2).
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

    /// Every claim, as the rules see them (`auth`). `roles` is always a list: a token's
    /// single role (`"roles": "editor"`) is a list of one, and a token without roles has an
    /// empty list, so `'x' in auth.roles` asks only whether the token holds role `x`.
    public var all: JSONObject {
        var o = extra
        switch extra["roles"] {
        case .array?: break
        case nil, .null?: o["roles"] = .array([])
        case let single?: o["roles"] = .array([single])
        }
        o["sub"] = .string(sub)
        o["exp"] = .number(JSONNumber(exp))
        o["spaces"] = .array(spaces.map { .string($0) })
        o["scope"] = .string(scope.rawValue)
        o["admin"] = .bool(admin)
        return o
    }

    /// The name of the first claim whose text (a string anywhere in it, or an object's
    /// member name) holds a control character (U+0000 to U+001F, U+007F to U+009F), nil
    /// when none does: what the server refuses to sign (`POST /v1/admin/tokens`,
    /// `outpost-server token`), since such a subject or claim corrupts every log line,
    /// list and header that shows it.
    public var claimWithControlCharacter: String? {
        func hasControl(_ text: String) -> Bool {
            text.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
        }
        func holds(_ value: JSONValue) -> Bool {
            switch value {
            case .string(let s): return hasControl(s)
            case .array(let items): return items.contains(where: holds)
            case .object(let o): return o.contains { hasControl($0.key) || holds($0.value) }
            default: return false
            }
        }
        if hasControl(sub) { return "sub" }
        if spaces.contains(where: hasControl) { return "spaces" }
        return extra.sorted { $0.key < $1.key }.first { hasControl($0.key) || holds($0.value) }?.key
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
    /// The header's `alg`, and the algorithms this server accepts.
    case unsupportedAlgorithm(String, accepted: [String])
    /// A header parameter that would bring a key or a rule from the token itself.
    case refusedHeader(String)
    case badSignature
    case expired
    case notYetValid
    case missingClaim(String)
    /// A provider token's `iss`, which is not the configured issuer.
    case wrongIssuer(String)
    /// A provider token whose `aud` lacks the configured audience.
    case wrongAudience
    /// A provider token's `kid`, which the provider's key set lacks (after a refresh, or
    /// while refreshes are held back).
    case unknownKey(String)
    /// A provider token's key that exists but cannot verify it, and why.
    case unusableKey(String, String)
    /// The provider's key set has not been loaded yet; why the last fetch failed.
    case keysUnavailable(String)

    public var message: String {
        switch self {
        case .malformed(let why): return "malformed token: \(why)"
        case .unsupportedAlgorithm(let alg, let accepted):
            let list = accepted.count == 1 ? "only \(accepted[0]) is" : "only " + accepted.dropLast().joined(separator: ", ") + " and \(accepted.last!) are"
            return "token algorithm \(Self.shown(alg)) is not accepted; \(list)"
        case .refusedHeader(let name): return "token header \(name) is not accepted: keys come only from the server's own configuration"
        case .badSignature: return "token signature does not verify"
        case .expired: return "token has expired"
        case .notYetValid: return "token is not valid yet"
        case .missingClaim(let claim): return "token lacks a valid \(claim) claim"
        case .wrongIssuer(let iss): return "token issuer \(Self.shown(iss)) is not the issuer this server accepts"
        case .wrongAudience: return "token audience does not include this server's"
        case .unknownKey(let kid): return "token key \(Self.shown(kid)) is not in the identity provider's key set"
        case .unusableKey(let kid, let why): return "token key \(Self.shown(kid)) cannot verify it: \(why)"
        case .keysUnavailable(let why): return "the identity provider's keys are not loaded (\(why)); try again later"
        }
    }

    /// A value from a token, quoted and cut short for a message.
    static func shown(_ text: String) -> String {
        let cut = text.count > 64 ? String(text.prefix(64)) + "…" : text
        return "\"" + cut + "\""
    }
}

/// Turns a bearer token into verified claims, or refuses it: what `Authorizer` asks of
/// the server's tokens. `JWTAuthority` (HS256 with the server's secrets) verifies them,
/// with `ServerTokens` in front when an identity provider is configured (RS256 and ES256
/// against its JWK Set); an application may wrap either (an audit log, say) when it
/// builds its parts (`OutpostApplication.Parts`).
///
/// Async because a provider's token may name a key the server has to fetch first; a
/// verifier that never waits (HS256) implements it with a synchronous method, and costs
/// its callers no suspension.
public protocol TokenVerifier: Sendable {
    /// The claims of `token` at time `now` (seconds since 1970).
    func verify(_ token: String, now: Int64) async throws(TokenError) -> Claims
}

/// A compact JWS (RFC 7515 section 7.1) split into its three parts, with its protected
/// header parsed and checked: what every verifier reads first. It works on the token's
/// UTF-8 bytes: the parts are ranges of them, decoded from base64url where they lie. Every
/// part must be canonical base64url (no `=` padding, zero leftover bits): a token has one
/// spelling, so no altered copy of a signed token verifies.
struct CompactJWS: Sendable {
    /// The longest token accepted, in bytes.
    static let maximumBytes = 8192
    /// Header parameters that would make the token name its own key or rules (RFC 7515
    /// sections 4.1.2 to 4.1.6 and 4.1.11): the server never follows them, and a token that
    /// carries one is refused rather than verified as if it did not.
    static let refusedHeaders = ["jku", "jwk", "x5u", "x5c", "crit"]

    /// The whole token, as sent.
    let bytes: [UInt8]
    let header: JSONObject
    let alg: String
    /// Where the two dots are in `bytes`.
    private let firstDot: Int
    private let secondDot: Int

    /// Splits and checks `token`; `accepted` are the algorithms the caller verifies. The
    /// algorithm is checked first: a token that names another is refused whatever else
    /// it holds (the classic `alg: none` and key-confusion attacks).
    init(_ token: String, accepted: [String]) throws(TokenError) {
        guard token.utf8.count <= Self.maximumBytes else { throw .malformed("expected three dot-separated parts") }
        let bytes = Array(token.utf8)
        let dot = UInt8(ascii: ".")
        guard let first = bytes.firstIndex(of: dot),
              let second = bytes[(first + 1)...].firstIndex(of: dot),
              !bytes[(second + 1)...].contains(dot)
        else { throw .malformed("expected three dot-separated parts") }
        guard let headerBytes = Base64.decodeCanonicalURL(bytes: bytes[..<first]),
              case .object(let header)? = try? JSONParser.parse(headerBytes)
        else { throw .malformed("header is not canonical base64url JSON") }
        guard case .string(let alg)? = header["alg"] else { throw .malformed("header has no alg") }
        guard accepted.contains(alg) else { throw .unsupportedAlgorithm(alg, accepted: accepted) }
        for name in Self.refusedHeaders where header[name] != nil { throw .refusedHeader(name) }
        self.bytes = bytes
        self.header = header
        self.alg = alg
        firstDot = first
        secondDot = second
    }

    /// The bytes the signature covers: `header.payload` as sent (RFC 7515 section 5.2).
    var signingInput: [UInt8] { Array(bytes[..<secondDot]) }

    /// The decoded signature, nil when it is not canonical base64url.
    var signature: [UInt8]? { Base64.decodeCanonicalURL(bytes: bytes[(secondDot + 1)...]) }

    /// The payload's claims: read only after the signature verified.
    func claims() throws(TokenError) -> JSONObject {
        guard let payloadBytes = Base64.decodeCanonicalURL(bytes: bytes[(firstDot + 1)..<secondDot]),
              case .object(let payload)? = try? JSONParser.parse(payloadBytes)
        else { throw .malformed("payload is not canonical base64url JSON") }
        return payload
    }

    /// A NumericDate claim (RFC 7519 section 2) in whole seconds; nil when absent; throws
    /// when present but not a number.
    static func numericDate(_ payload: JSONObject, _ name: String) throws(TokenError) -> Int64? {
        guard let value = payload[name], value != .null else { return nil }
        guard let seconds = value.int64Value ?? wholeSeconds(value) else { throw .missingClaim(name) }
        return seconds
    }

    /// NumericDate may carry a fraction (RFC 7519 section 2); it counts in whole seconds.
    private static func wholeSeconds(_ value: JSONValue) -> Int64? {
        guard case .number(let n) = value else { return nil }
        let d = n.doubleValue
        guard d.isFinite, abs(d) < 1e15 else { return nil }
        return Int64(d.rounded(.down))
    }
}

/// HS256 JSON Web Tokens (RFC 7519, RFC 7515) for Outpost's access rules. Any `alg` other
/// than HS256 — `none` included — is refused before anything else is looked at, and
/// signatures are compared in constant time.
public struct JWTAuthority: TokenVerifier {
    /// Signing key first; the others still verify (for rotating the secret without
    /// logging every device out at once).
    private let keys: [[UInt8]]

    public init(secret: [UInt8], previousSecrets: [[UInt8]] = []) {
        precondition(!secret.isEmpty && !previousSecrets.contains([]), "a JWT secret cannot be empty")
        keys = [secret] + previousSecrets
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
        try verify(CompactJWS(token, accepted: ["HS256"]), now: now)
    }

    /// Verifies a token already split (its `alg` is HS256) with the server's secrets only:
    /// no key of an identity provider is ever an HMAC key here.
    func verify(_ jws: CompactJWS, now: Int64) throws(TokenError) -> Claims {
        guard jws.alg == "HS256" else { throw .unsupportedAlgorithm(jws.alg, accepted: ["HS256"]) }
        guard let signature = jws.signature, signature.count == SHA256.byteCount else {
            throw .malformed("signature is not canonical base64url of 32 bytes")
        }
        let signingInput = jws.signingInput
        var verified = false
        for key in keys where HMACSHA256.verify(signature, message: signingInput, key: key) { verified = true }
        guard verified else { throw .badSignature }

        let payload = try jws.claims()
        guard case .string(let sub)? = payload["sub"], !sub.isEmpty else { throw .missingClaim("sub") }
        guard let exp = try CompactJWS.numericDate(payload, "exp") else { throw .missingClaim("exp") }
        guard now < exp else { throw .expired }
        if let nbf = try CompactJWS.numericDate(payload, "nbf") {
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
}

/// Where the server's JWT secrets come from: `OUTPOST_JWT_SECRET`, or a file in the data
/// directory created on first use with mode 0600 (docs/protocol.md section 8), and the older
/// secrets of `OUTPOST_JWT_PREVIOUS_SECRETS`. Every one is at least 32 bytes
/// (`SecretFile.checkStrength`).
public enum JWTSecret {
    /// The file name inside the data directory.
    public static let fileName = "jwt-secret"

    /// Loads the secret from the environment value when set, else from (or into) the file.
    public static func load(environmentValue: String?, dataDirectory: String) throws -> [UInt8] {
        try SecretFile.load(environmentValue: environmentValue, dataDirectory: dataDirectory, fileName: fileName, variable: "OUTPOST_JWT_SECRET")
    }

    /// The secrets of `OUTPOST_JWT_PREVIOUS_SECRETS` (comma-separated; unset or empty: none),
    /// each used exactly as written. A list with an empty entry, an entry of white space
    /// alone or with white space at either end, or a secret under 32 bytes is refused, with
    /// the entry's number: such an entry (what `${OLD}, ${UNSET}` makes in a unit file)
    /// would otherwise verify tokens signed with a key anyone can guess.
    public static func previous(_ environmentValue: String?) throws -> [[UInt8]] {
        guard let list = environmentValue, !list.isEmpty else { return [] }
        let entries = list.split(separator: ",", omittingEmptySubsequences: false)
        var secrets: [[UInt8]] = []
        for (index, entry) in entries.enumerated() {
            let name = "OUTPOST_JWT_PREVIOUS_SECRETS entry \(index + 1) of \(entries.count)"
            let trimmed = entry.trimmingCharacters(in: .whitespacesAndNewlines)
            if trimmed.isEmpty {
                throw Settings.Invalid(description: "\(name) is \(entry.isEmpty ? "empty" : "white space only"); list the older secrets separated by commas, with nothing between them")
            }
            if trimmed.count != entry.count {
                throw Settings.Invalid(description: "\(name) has white space at its start or end; list the older secrets separated by commas, with no spaces around them")
            }
            let secret = Array(entry.utf8)
            try SecretFile.checkStrength(secret, name: name)
            secrets.append(secret)
        }
        return secrets
    }
}
