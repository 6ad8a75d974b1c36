import Foundation
import OutpostCore

/// Tokens of the app's own identity provider (Auth0, Keycloak, Cognito, Firebase…):
/// RS256 or ES256, signed by a key of the provider's JWK Set (RFC 7517), from the
/// configured issuer and, when one is configured, for the configured audience; their
/// claims become Outpost's through a `ClaimsMapping` (docs/deploying.md, "Identity
/// providers").
public final class ProviderTokens: Sendable {
    /// The algorithms a provider token may use (RFC 7518 section 3.1).
    public static let algorithms = ["RS256", "ES256"]
    /// Seconds of clock difference allowed between the provider and this server when
    /// `exp` and `nbf` are checked.
    public static let leewaySeconds: Int64 = 60

    /// The `iss` every token must carry.
    public let issuer: String
    /// An `aud` every token must carry (as its string, or in its array); nil: not checked.
    public let audience: String?
    public let mapping: ClaimsMapping
    let keys: JWKSKeys
    /// The tokens that verified, until their `exp` or a change of the key set.
    let verified: VerifiedTokenCache

    init(issuer: String, audience: String?, mapping: ClaimsMapping, keys: JWKSKeys,
         cacheCapacity: Int = VerifiedTokenCache.defaultCapacity) {
        self.issuer = issuer
        self.audience = audience
        self.mapping = mapping
        self.keys = keys
        verified = VerifiedTokenCache(capacity: cacheCapacity, leewaySeconds: Self.leewaySeconds)
    }

    /// The provider of `settings`, with its key set loaded when it is a file (a file that
    /// does not read or parse refuses the start; a URL is fetched once the server runs).
    public convenience init(settings: IdentityProviderSettings, metrics: Metrics) throws {
        guard let source = settings.source, let issuer = settings.issuer else {
            throw Settings.Invalid(description: "an identity provider needs --jwks-url or --jwks-file, and --jwt-issuer")
        }
        let keys = JWKSKeys(source: source, maxBytes: settings.maxJWKSBytes, timeout: .seconds(settings.fetchTimeoutSeconds),
                            cooldown: .seconds(settings.refreshCooldownSeconds), metrics: metrics)
        do {
            try keys.loadNow()
        } catch {
            throw Settings.Invalid(description: "--jwks-file: \(error.description)")
        }
        self.init(issuer: issuer, audience: settings.audience, mapping: try settings.mapping(), keys: keys)
    }

    /// Starts fetching and refreshing the key set.
    public func start() {
        keys.start()
    }

    /// Stops the refreshes.
    public func stop() {
        keys.stop()
    }

    /// Verifies a provider token already split, whose `alg` is one of `algorithms`: from
    /// the cache when this very token verified under the key set in use and is still
    /// within its time; otherwise in full, and then cached.
    func verify(_ jws: CompactJWS, now: Int64) async throws(TokenError) -> Claims {
        guard case .string(let kid)? = jws.header["kid"], !kid.isEmpty else {
            throw .malformed("a \(jws.alg) token needs a kid header naming its key")
        }
        let cacheKey = VerifiedTokenCache.Key(jws.bytes)
        // Read before the key is looked up: a set put in use meanwhile makes this entry stale.
        let generation = keys.generation
        if let claims = verified.claims(cacheKey, now: now, generation: generation) { return claims }
        let (claims, notBefore) = try await verifyInFull(jws, kid: kid, now: now)
        verified.store(cacheKey, claims: claims, notBefore: notBefore, generation: generation)
        return claims
    }

    /// The signature, issuer, audience, times and mapping of a token of key `kid`: its
    /// claims and its `nbf`.
    private func verifyInFull(_ jws: CompactJWS, kid: String, now: Int64) async throws(TokenError) -> (Claims, Int64?) {
        let key = try await keys.key(kid: kid, alg: jws.alg)
        guard let signature = jws.signature else { throw .malformed("signature is not canonical base64url") }
        guard key.verifies(signature, jws.signingInput) else { throw .badSignature }

        let payload = try jws.claims()
        guard case .string(let iss)? = payload["iss"] else { throw .missingClaim("iss") }
        guard iss == issuer else { throw .wrongIssuer(iss) }
        if let audience {
            switch payload["aud"] {
            case .string(let aud)? where aud == audience: break
            case .array(let list)? where list.contains(.string(audience)): break
            case nil, .null?: throw .missingClaim("aud")
            default: throw .wrongAudience
            }
        }
        guard case .string(let sub)? = payload["sub"], !sub.isEmpty else { throw .missingClaim("sub") }
        guard let exp = try CompactJWS.numericDate(payload, "exp") else { throw .missingClaim("exp") }
        // `now - leeway`, not `exp + leeway`: a token's exp may be near Int64.max.
        guard now - Self.leewaySeconds < exp else { throw .expired }
        let nbf = try CompactJWS.numericDate(payload, "nbf")
        if let nbf {
            guard now + Self.leewaySeconds >= nbf else { throw .notYetValid }
        }
        return (try mapping.claims(payload, sub: sub, exp: exp), nbf)
    }
}

/// The server's bearer tokens when an identity provider is configured: HS256 with the
/// server's secrets (`JWTAuthority`), RS256 and ES256 of the provider (`ProviderTokens`).
/// The header is parsed once and its `alg` picks the verifier, so an HS256 token is
/// checked against the shared secrets only (a provider's public key, as bytes, PEM or
/// JWK, used as an HMAC secret verifies nothing) and costs what it cost without a
/// provider; a provider token never meets the secrets.
public struct ServerTokens: TokenVerifier {
    public let shared: JWTAuthority
    public let provider: ProviderTokens
    /// Every algorithm either verifier takes.
    static let accepted = ["HS256"] + ProviderTokens.algorithms

    public init(shared: JWTAuthority, provider: ProviderTokens) {
        self.shared = shared
        self.provider = provider
    }

    public func verify(_ token: String, now: Int64) async throws(TokenError) -> Claims {
        let jws = try CompactJWS(token, accepted: Self.accepted)
        if jws.alg == "HS256" { return try shared.verify(jws, now: now) }
        return try await provider.verify(jws, now: now)
    }
}
