import Foundation

/// The settings of an identity provider whose RS256 and ES256 tokens the server accepts
/// beside its own HS256 ones (docs/deploying.md, "Identity providers").
public struct IdentityProviderSettings: Sendable {
    /// `--jwks-url`: the provider's JWK Set, fetched over HTTPS (or HTTP).
    public var jwksURL: URL?
    /// `--jwks-file`: a JWK Set in a file instead.
    public var jwksFile: String?
    /// `--jwt-issuer`: the `iss` its tokens carry; required with a key set.
    public var issuer: String?
    /// `--jwt-audience`: an `aud` its tokens must carry; nil: not checked.
    public var audience: String?
    /// `--jwks-max-bytes`: the largest key set document read.
    public var maxJWKSBytes = 262_144
    /// `--jwks-timeout`: seconds a fetch may take, connecting included.
    public var fetchTimeoutSeconds = 5
    /// `--jwks-refresh-cooldown`: the least seconds between fetches caused by tokens that
    /// name a key the set lacks.
    public var refreshCooldownSeconds = 30
    /// `--claim-spaces`, `--claim-scope`, `--claim-scope-write`, `--claim-roles`,
    /// `--claim-admin` as given (nil: the default of `ClaimsMapping`).
    public var claimSpaces: String?
    public var claimScope: String?
    public var claimScopeWrite: String?
    public var claimRoles: String?
    public var claimAdmin: String?

    public init() {}

    /// True when a key set is configured: provider tokens are accepted.
    public var isConfigured: Bool { jwksURL != nil || jwksFile != nil }

    /// Where the key set comes from.
    public var source: JWKSSource? {
        if let jwksURL { return .url(jwksURL) }
        if let jwksFile { return .file(jwksFile) }
        return nil
    }

    /// The claims mapping the `--claim-*` settings make.
    public func mapping() throws -> ClaimsMapping {
        var mapping = ClaimsMapping()
        do {
            if let claimSpaces { mapping.spaces = try ClaimPath(claimSpaces) }
            if let claimScope { mapping.scope = try ClaimPath(claimScope) }
            if let claimRoles { mapping.roles = try ClaimPath(claimRoles) }
            if let claimAdmin { mapping.admin = try ClaimsMapping.adminRule(claimAdmin) }
        } catch {
            throw Settings.Invalid(description: error.description)
        }
        if let claimScopeWrite { mapping.writeScope = claimScopeWrite }
        return mapping
    }

    /// Checks the settings against each other, with a message naming the flags.
    func validate() throws {
        if jwksURL != nil && jwksFile != nil {
            throw Settings.Invalid(description: "--jwks-url and --jwks-file are two sources of the same keys: give one")
        }
        guard isConfigured else {
            let given = [("--jwt-issuer", issuer), ("--jwt-audience", audience), ("--claim-spaces", claimSpaces), ("--claim-scope", claimScope),
                         ("--claim-scope-write", claimScopeWrite), ("--claim-roles", claimRoles), ("--claim-admin", claimAdmin)]
                .filter { $0.1 != nil }.map(\.0)
            if !given.isEmpty {
                throw Settings.Invalid(description: "\(given.joined(separator: ", ")) apply to identity-provider tokens only: set --jwks-url or --jwks-file too")
            }
            return
        }
        guard let issuer, !issuer.isEmpty else {
            throw Settings.Invalid(description: "--jwt-issuer is required with --jwks-url or --jwks-file: without it, a token of any tenant of the same provider (Firebase's key set is shared by every project) would be accepted")
        }
        _ = try mapping()
    }

    /// The flags and variables of these settings, appended to `Settings.options`.
    static let options: [Settings.Option] = [
        Settings.Option(flag: "--jwks-url", env: "OUTPOST_JWKS_URL", help: "the identity provider's JWK Set URL: RS256 and ES256 tokens it signs are accepted beside HS256 ones (docs/deploying.md, Identity providers; needs --jwt-issuer)") { s, v in
            guard let url = URL(string: v), let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http", let host = url.host, !host.isEmpty else {
                throw Settings.Invalid(description: "--jwks-url must be an https:// (or http://) URL with a host, not \"\(v)\"")
            }
            s.identityProvider.jwksURL = url
        },
        Settings.Option(flag: "--jwks-file", env: "OUTPOST_JWKS_FILE", help: "a JWK Set file instead of --jwks-url, read at start, every 10 minutes and when a token names a key it lacks") { s, v in
            guard !v.isEmpty else { throw Settings.Invalid(description: "--jwks-file must not be empty") }
            s.identityProvider.jwksFile = v
        },
        Settings.Option(flag: "--jwt-issuer", env: "OUTPOST_JWT_ISSUER", help: "the iss identity-provider tokens must carry (required with --jwks-url or --jwks-file)") { s, v in
            guard !v.isEmpty else { throw Settings.Invalid(description: "--jwt-issuer must not be empty") }
            s.identityProvider.issuer = v
        },
        Settings.Option(flag: "--jwt-audience", env: "OUTPOST_JWT_AUDIENCE", help: "an aud identity-provider tokens must carry, as their aud or in its array (default none: not checked)") { s, v in
            guard !v.isEmpty else { throw Settings.Invalid(description: "--jwt-audience must not be empty") }
            s.identityProvider.audience = v
        },
        Settings.Option(flag: "--jwks-max-bytes", env: "OUTPOST_JWKS_MAX_BYTES", help: "largest JWK Set document read, in bytes (default 262144)") { s, v in
            s.identityProvider.maxJWKSBytes = try Settings.int("--jwks-max-bytes", v, min: 1024)
        },
        Settings.Option(flag: "--jwks-timeout", env: "OUTPOST_JWKS_TIMEOUT", help: "seconds a JWK Set fetch may take, connecting included (default 5)") { s, v in
            s.identityProvider.fetchTimeoutSeconds = try Settings.int("--jwks-timeout", v, min: 1)
            guard s.identityProvider.fetchTimeoutSeconds <= 60 else { throw Settings.Invalid(description: "--jwks-timeout must be at most 60 seconds") }
        },
        Settings.Option(flag: "--jwks-refresh-cooldown", env: "OUTPOST_JWKS_REFRESH_COOLDOWN", help: "least seconds between JWK Set fetches caused by tokens naming a key the set lacks (default 30)") { s, v in
            s.identityProvider.refreshCooldownSeconds = try Settings.int("--jwks-refresh-cooldown", v, min: 1)
        },
        Settings.Option(flag: "--claim-spaces", env: "OUTPOST_CLAIM_SPACES", help: "the provider-token claim naming the spaces: a JSON Pointer (/realm_access/roles) or a claim name as written (default /spaces)") { s, v in
            s.identityProvider.claimSpaces = v
        },
        Settings.Option(flag: "--claim-scope", env: "OUTPOST_CLAIM_SCOPE", help: "the provider-token claim holding the scope words (default /scope)") { s, v in
            s.identityProvider.claimScope = v
        },
        Settings.Option(flag: "--claim-scope-write", env: "OUTPOST_CLAIM_SCOPE_WRITE", help: "the scope word that grants write; any other scope is read (default write)") { s, v in
            guard !v.isEmpty, !v.contains(" ") else { throw Settings.Invalid(description: "--claim-scope-write must be one word") }
            s.identityProvider.claimScopeWrite = v
        },
        Settings.Option(flag: "--claim-roles", env: "OUTPOST_CLAIM_ROLES", help: "the provider-token claim holding the roles the rules see as auth.roles (default /roles)") { s, v in
            s.identityProvider.claimRoles = v
        },
        Settings.Option(flag: "--claim-admin", env: "OUTPOST_CLAIM_ADMIN", help: "CLAIM=VALUE that makes a provider token admin (default none: provider tokens are never admin)") { s, v in
            s.identityProvider.claimAdmin = v
        },
    ]
}
