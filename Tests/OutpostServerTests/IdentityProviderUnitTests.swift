import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import OutpostTestSupport
import Synchronization
import Testing
@testable import OutpostServer

/// The parts of provider-token verification that need no provider: when the key set is
/// fetched, how claims map, how a JWK Set is read, the settings, and a key set file
/// (docs/deploying.md, "Identity providers").
@Suite struct JWKSRefreshPolicyTests {
    let t0 = ContinuousClock.now

    @Test func unknownKeysFetchAtMostOncePerCooldownAndWaitForAFetchUnderWay() {
        var policy = JWKSRefreshPolicy(cooldown: .seconds(30))
        #expect(policy.unknownKey(at: t0) == .fetch)
        policy.started()
        #expect(policy.unknownKey(at: t0 + .seconds(1)) == .join)
        policy.succeeded(at: t0 + .seconds(2), maxAge: .seconds(120))
        #expect(policy.loaded && policy.nextFetch == t0 + .seconds(122))
        #expect(policy.unknownKey(at: t0 + .seconds(3)) == .refuse)
        #expect(policy.unknownKey(at: t0 + .seconds(29)) == .refuse)
        #expect(policy.unknownKey(at: t0 + .seconds(30)) == .fetch)
        // A scheduled fetch under way is joined, and does not move the cooldown.
        policy.started()
        #expect(policy.unknownKey(at: t0 + .seconds(31)) == .join)
        policy.failed(at: t0 + .seconds(32))
        #expect(policy.unknownKey(at: t0 + .seconds(33)) == .refuse)
        #expect(policy.unknownKey(at: t0 + .seconds(60)) == .fetch)
    }

    @Test func failuresKeepTheSetAndRetryWithADoublingDelay() {
        var policy = JWKSRefreshPolicy(cooldown: .seconds(30))
        policy.started()
        policy.succeeded(at: t0, maxAge: nil)
        #expect(policy.nextFetch == t0 + .seconds(600))
        var at = t0
        var delays: [Duration] = []
        for _ in 0..<11 {
            policy.started()
            policy.failed(at: at)
            delays.append(policy.nextFetch! - at)
            at = policy.nextFetch!
        }
        #expect(delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300].map { .seconds($0) })
        #expect(policy.loaded && policy.failures == 11)
        policy.started()
        policy.succeeded(at: at, maxAge: .seconds(90))
        #expect(policy.failures == 0 && policy.nextFetch == at + .seconds(90))
    }

    @Test func freshnessComesFromCacheControlWithinBounds() {
        #expect(JWKSRefreshPolicy.freshness(nil) == .seconds(600))
        #expect(JWKSRefreshPolicy.freshness(.seconds(5)) == .seconds(60))
        #expect(JWKSRefreshPolicy.freshness(.seconds(3600)) == .seconds(3600))
        #expect(JWKSRefreshPolicy.freshness(.seconds(10_000_000)) == .seconds(86_400))
        let maxAge = JWKSRefreshPolicy.maxAge
        #expect(maxAge("public, max-age=19213, must-revalidate, no-transform", nil) == .seconds(19213))
        #expect(maxAge("max-age=3600", "600") == .seconds(3000))
        #expect(maxAge("max-age=60", "600") == .zero)
        #expect(maxAge("MAX-AGE = \"120\"", nil) == .seconds(120))
        #expect(maxAge("no-store", nil) == .zero)
        #expect(maxAge("max-age=100, no-cache", nil) == .zero)
        #expect(maxAge("private", nil) == nil)
        #expect(maxAge("max-age=soon", nil) == nil)
        #expect(maxAge(nil, "10") == nil)
        #expect(JWKSRefreshPolicy.freshness(maxAge("max-age=99999999999999999999999", nil)) == .seconds(86_400))
    }
}

@Suite struct ClaimsMappingTests {
    static func path(_ text: String) throws -> ClaimPath { try ClaimPath(text) }

    @Test func claimPathsAreJSONPointersOrLiteralClaimNames() throws {
        #expect(try Self.path("/realm_access/roles").tokens == ["realm_access", "roles"])
        #expect(try Self.path("/a~1b~0c/~01").tokens == ["a/b~c", "~1"])
        #expect(try Self.path("/").tokens == [""])
        #expect(try Self.path("cognito:groups").tokens == ["cognito:groups"])
        #expect(try Self.path("https://outpost.example.com/spaces").tokens == ["https://outpost.example.com/spaces"])
        #expect(try Self.path("/https:~1~1outpost.example.com~1spaces").tokens == ["https://outpost.example.com/spaces"])
        for bad in ["", "/a~2", "/a~"] {
            #expect(throws: ClaimPath.Invalid.self) { try Self.path(bad) }
        }
        let payload: JSONObject = ["groups": ["g0", "g1"], "a": ["b": ["c": 1]]]
        #expect(try Self.path("/groups/1").value(in: payload) == "g1")
        #expect(try Self.path("/groups/01").value(in: payload) == nil)
        #expect(try Self.path("/groups/2").value(in: payload) == nil)
        #expect(try Self.path("/a/b/c").value(in: payload) == 1)
        #expect(try Self.path("/a/b/c/d").value(in: payload) == nil)
    }

    @Test func keycloakNestedRolesAndGroups() throws {
        var mapping = ClaimsMapping()
        mapping.spaces = try Self.path("/groups")
        mapping.roles = try Self.path("/realm_access/roles")
        mapping.writeScope = "outpost:write"
        mapping.admin = try ClaimsMapping.adminRule("/realm_access/roles=outpost-admin")
        let payload: JSONObject = ["groups": ["team-1", "team-2"], "scope": "openid email outpost:write",
                                   "realm_access": ["roles": ["supervisor", "offline_access"]],
                                   "resource_access": ["account": ["roles": ["view-profile"]]], "admin": true]
        let claims = try mapping.claims(payload, sub: "u1", exp: 10)
        #expect(claims.spaces == ["team-1", "team-2"] && claims.scope == .write && !claims.admin)
        #expect(claims.all["roles"] == ["supervisor", "offline_access"])
        // The rules also see the token's other claims as they are.
        #expect(claims.all["resource_access"] == ["account": ["roles": ["view-profile"]]])
        var operatorPayload = payload
        operatorPayload["realm_access"] = ["roles": ["outpost-admin"]]
        #expect(try mapping.claims(operatorPayload, sub: "u1", exp: 10).admin)
    }

    @Test func auth0NamespacedClaimsAndPermissions() throws {
        var mapping = ClaimsMapping()
        mapping.spaces = try Self.path("https://outpost.example.com/spaces")
        mapping.roles = try Self.path("https://outpost.example.com/roles")
        mapping.scope = try Self.path("/permissions")
        mapping.writeScope = "write:records"
        let payload: JSONObject = ["https://outpost.example.com/spaces": ["acme-eu", "acme-*", "*"], "https://outpost.example.com/roles": ["supervisor"],
                                   "permissions": ["read:records", "write:records"], "scope": "openid profile"]
        let claims = try mapping.claims(payload, sub: "auth0|1", exp: 10)
        // A provider's names are literal: the ones that are no space name are dropped.
        #expect(claims.spaces == ["acme-eu"] && claims.scope == .write && claims.all["roles"] == ["supervisor"])
        #expect(claims.allows(space: "acme-eu") && !claims.allows(space: "acme-us"))
    }

    @Test func cognitoGroupsAndItsSpaceSeparatedScope() throws {
        var mapping = ClaimsMapping()
        mapping.spaces = try Self.path("cognito:groups")
        mapping.writeScope = "outpost/write"
        mapping.admin = try ClaimsMapping.adminRule("cognito:groups=outpost-admins")
        let payload: JSONObject = ["cognito:groups": ["team-1"], "scope": "outpost/read outpost/write", "client_id": "abc", "token_use": "access"]
        let claims = try mapping.claims(payload, sub: "c1", exp: 10)
        #expect(claims.spaces == ["team-1"] && claims.scope == .write && !claims.admin && claims.all["roles"] == [])
        var readOnly = payload
        readOnly["scope"] = "outpost/read"
        #expect(try mapping.claims(readOnly, sub: "c1", exp: 10).scope == .read)
        var admin = payload
        admin["cognito:groups"] = ["team-1", "outpost-admins"]
        #expect(try mapping.claims(admin, sub: "c1", exp: 10).admin)
    }

    @Test func firebaseCustomClaimsWithTheDefaults() throws {
        let mapping = ClaimsMapping()
        let payload: JSONObject = ["spaces": ["team-1"], "scope": "write", "roles": ["editor"], "admin": true,
                                   "firebase": ["sign_in_provider": "password"], "user_id": "f1"]
        let claims = try mapping.claims(payload, sub: "f1", exp: 10)
        #expect(claims.spaces == ["team-1"] && claims.scope == .write && claims.all["roles"] == ["editor"])
        // Never admin without --claim-admin, whatever the token says.
        #expect(!claims.admin)
        var withRule = mapping
        withRule.admin = try ClaimsMapping.adminRule("/admin=true")
        #expect(try withRule.claims(payload, sub: "f1", exp: 10).admin)
        // Absent claims: no space, read scope, no role.
        let bare = try mapping.claims([:], sub: "f1", exp: 10)
        #expect(bare.spaces.isEmpty && bare.scope == .read && bare.all["roles"] == [])
        // A space string of several names, and claims of the wrong type.
        #expect(try mapping.claims(["spaces": "a b"], sub: "f1", exp: 10).spaces == ["a", "b"])
        #expect(throws: TokenError.missingClaim("spaces (/spaces)")) { try mapping.claims(["spaces": 3], sub: "f1", exp: 10) }
        #expect(throws: TokenError.missingClaim("roles (/roles)")) { try mapping.claims(["roles": ["x": 1]], sub: "f1", exp: 10) }
        #expect(throws: TokenError.missingClaim("scope (/scope)")) { try mapping.claims(["scope": [1]], sub: "f1", exp: 10) }
    }

    @Test func theAdminRuleNeedsAClaimAndAValue() throws {
        for bad in ["admin", "=x", "/a=", ""] {
            #expect(throws: ClaimPath.Invalid.self) { try ClaimsMapping.adminRule(bad) }
        }
        let rule = try ClaimsMapping.adminRule("/scope=outpost:admin")
        #expect(rule.path.tokens == ["scope"] && rule.value == "outpost:admin")
        #expect(try ClaimsMapping.adminRule("role=a=b").value == "a=b")
    }
}

@Suite struct JSONWebKeySetTests {
    /// RFC 7515 A.2's RSA key and A.3's P-256 key, as a provider publishes them.
    static let rsa: JSONObject = ["kty": "RSA", "kid": "rsa", "use": "sig", "alg": "RS256", "e": "AQAB",
                                  "n": .string(Base64.encodeURL(SignatureVectors.a2n))]
    static let ec: JSONObject = ["kty": "EC", "kid": "ec", "crv": "P-256",
                                 "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"]

    static func set(_ keys: [JSONObject]) throws -> JSONWebKeySet {
        try JSONWebKeySet(parsing: JSONValue.object(["keys": .array(keys.map { .object($0) })]).encoded())
    }

    static func refusal(_ set: JSONWebKeySet, _ kid: String, _ alg: String) -> String? {
        if case .unusable(let why) = set.lookup(kid: kid, alg: alg) { return why }
        return nil
    }

    @Test func usableKeysAreFoundByKidAndAlgorithm() throws {
        let set = try Self.set([Self.rsa, Self.ec])
        #expect(set.usableCount == 2 && set.refusals.isEmpty)
        guard case .found(.rsa(let key)) = set.lookup(kid: "rsa", alg: "RS256") else { Issue.record("rsa not found"); return }
        #expect(key.bits == 2048)
        guard case .found(.p256) = set.lookup(kid: "ec", alg: "ES256") else { Issue.record("ec not found"); return }
        guard case .unknown = set.lookup(kid: "other", alg: "RS256") else { Issue.record("other found"); return }
        #expect(Self.refusal(set, "rsa", "ES256") == "it is an RSA key (2048 bits), which verifies RS256, not ES256")
        #expect(Self.refusal(set, "ec", "RS256") == "it is a P-256 key, which verifies ES256, not RS256")
    }

    @Test func keysThatCannotVerifyAreKeptWithTheirReason() throws {
        func with(_ base: JSONObject, _ changes: JSONObject) -> JSONObject {
            var o = base
            for (k, v) in changes { o[k] = v }
            return o
        }
        var noKid = Self.ec
        noKid["kid"] = nil
        let set = try Self.set([
            with(Self.rsa, ["kid": "enc", "use": "enc"]),
            with(Self.rsa, ["kid": "ps", "alg": "PS256"]),
            with(Self.rsa, ["kid": "small", "n": .string(Base64.encodeURL(Array(SignatureVectors.a2n.prefix(128))))]),
            with(Self.rsa, ["kid": "ops", "key_ops": ["encrypt"]]),
            with(Self.ec, ["kid": "p384", "crv": "P-384"]),
            with(Self.ec, ["kid": "offcurve", "y": "y_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"]),
            with(Self.ec, ["kid": "es512", "alg": "ES512"]),
            ["kty": "oct", "kid": "oct", "k": "c2VjcmV0"],
            ["kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"],
            with(Self.rsa, ["kid": "no-n", "n": 5]),
            noKid,
        ])
        #expect(set.usableCount == 0 && set.unnamed == 1)
        #expect(Self.refusal(set, "enc", "RS256") == "its use is \"enc\", not \"sig\"")
        #expect(Self.refusal(set, "ps", "RS256") == "its alg is PS256; RSA keys are accepted for RS256 only")
        #expect(Self.refusal(set, "small", "RS256") == "an RSA key of 1024 bits; at least 2048 are required")
        #expect(Self.refusal(set, "ops", "RS256") == "its key_ops do not include \"verify\"")
        #expect(Self.refusal(set, "p384", "ES256") == "its curve is P-384; ES256 needs P-256")
        #expect(Self.refusal(set, "offcurve", "ES256")?.contains("P-256") == true)
        #expect(Self.refusal(set, "es512", "ES256") == "its alg is ES512; P-256 keys are accepted for ES256 only")
        #expect(Self.refusal(set, "oct", "RS256") == "its key type is oct; only RSA and EC (P-256) keys are accepted")
        #expect(Self.refusal(set, "ed", "ES256")?.contains("OKP") == true)
        #expect(Self.refusal(set, "no-n", "RS256") == "an RSA key needs n and e in base64url")
        #expect(set.refusals.count == 10)
    }

    @Test func aKidMayNameAnEncryptionKeyBesideItsSigningKey() throws {
        var encryption = Self.rsa
        encryption["kid"] = "shared"
        encryption["use"] = "enc"
        var signing = Self.ec
        signing["kid"] = "shared"
        let set = try Self.set([encryption, signing])
        guard case .found(.p256) = set.lookup(kid: "shared", alg: "ES256") else { Issue.record("the signing key was not found"); return }
        #expect(Self.refusal(set, "shared", "RS256") == "its use is \"enc\", not \"sig\"")
    }

    @Test func documentsThatAreNotKeySetsAreRefused() throws {
        for text in ["", "[]", "{}", #"{"keys": {}}"#, #"{"keys": [1]}"#, "{\"keys\": [", "null"] {
            #expect(throws: JSONWebKeySet.Invalid.self, "\(text)") { try JSONWebKeySet(parsing: Array(text.utf8)) }
        }
        let many = (0...JSONWebKeySet.maximumKeys).map { i -> JSONObject in ["kty": "oct", "kid": .string("k\(i)"), "k": "AA"] }
        #expect(throws: JSONWebKeySet.Invalid.self) { try Self.set(many) }
        #expect(try Self.set([]).usableCount == 0)
    }
}

/// RFC 7515 A.2's modulus, for key sets built here.
enum SignatureVectors {
    static let a2n = Base64.decodeURL("ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ")!
}

@Suite struct IdentityProviderSettingsTests {
    static func parse(_ arguments: [String], environment: [String: String] = [:]) throws -> Settings {
        try Settings.parse(arguments: arguments, environment: environment)
    }

    static func refusal(_ arguments: [String]) -> String? {
        do {
            _ = try parse(arguments)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func aKeySetNeedsAnIssuerAndOneSource() throws {
        let s = try Self.parse(["--jwks-url", "https://tenant.eu.auth0.com/.well-known/jwks.json", "--jwt-issuer", "https://tenant.eu.auth0.com/",
                                "--jwt-audience", "https://api.example.com", "--claim-spaces", "https://example.com/spaces"])
        #expect(s.identityProvider.source == .url(URL(string: "https://tenant.eu.auth0.com/.well-known/jwks.json")!))
        #expect(try s.identityProvider.mapping().spaces.tokens == ["https://example.com/spaces"])
        let env = try Self.parse([], environment: ["OUTPOST_JWKS_FILE": "/etc/outpost/jwks.json", "OUTPOST_JWT_ISSUER": "https://idp",
                                                   "OUTPOST_CLAIM_ROLES": "/realm_access/roles", "OUTPOST_JWKS_REFRESH_COOLDOWN": "60"])
        #expect(env.identityProvider.source == .file("/etc/outpost/jwks.json") && env.identityProvider.refreshCooldownSeconds == 60)
        #expect(Self.refusal(["--jwks-url", "https://idp/jwks"])?.contains("--jwt-issuer is required") == true)
        #expect(Self.refusal(["--jwks-url", "https://idp/jwks", "--jwks-file", "f", "--jwt-issuer", "i"])?.contains("give one") == true)
        #expect(Self.refusal(["--jwt-audience", "a"])?.contains("--jwt-audience apply to identity-provider tokens only") == true)
        #expect(Self.refusal(["--claim-spaces", "/groups", "--claim-admin", "x=y"])?.contains("--claim-spaces, --claim-admin") == true)
        #expect(Self.refusal(["--jwks-url", "ftp://idp/jwks", "--jwt-issuer", "i"])?.contains("--jwks-url must be") == true)
        #expect(Self.refusal(["--jwks-url", "not a url", "--jwt-issuer", "i"])?.contains("--jwks-url must be") == true)
        #expect(Self.refusal(["--jwks-file", "f", "--jwt-issuer", "i", "--claim-admin", "admin"])?.contains("CLAIM=VALUE") == true)
        #expect(Self.refusal(["--jwks-file", "f", "--jwt-issuer", "i", "--claim-roles", "/a~5"])?.contains("JSON Pointer") == true)
        #expect(Self.refusal(["--jwks-file", "f", "--jwt-issuer", "i", "--jwks-timeout", "0"])?.contains("--jwks-timeout") == true)
        #expect(Self.refusal(["--jwks-file", "f", "--jwt-issuer", "i", "--jwks-max-bytes", "10"])?.contains("--jwks-max-bytes") == true)
        #expect(Self.refusal(["--jwks-file", "f", "--jwt-issuer", "i", "--claim-scope-write", "a b"])?.contains("one word") == true)
    }
}

/// A key set in a file (`--jwks-file`): read at start, where a bad file refuses the start,
/// and again when a token names a key it lacks; over a real socket, in process.
@Suite(.serverLogs) struct JWKSFileTests {
    static let issuer = "https://idp.example.com"
    /// The server's HS256 secret in these tests (32 bytes at least, as every server secret).
    static let secret = "jwks-file-tests-secret-0123456789abcdef"

    static func write(_ keys: [ProviderKey], to path: String) throws {
        try Data(JSONValue.object(["keys": .array(keys.map(\.jwk))]).encoded()).write(to: URL(fileURLWithPath: path))
    }

    static func claims(_ sub: String = "u1") -> JSONObject {
        ["iss": .string(issuer), "sub": .string(sub), "exp": .number(JSONNumber(epochSeconds() + 600)), "spaces": ["s"], "scope": "write"]
    }

    @Test func aKeySetFileVerifiesTokensAndIsReadAgainForANewKey() async throws {
        let first = try await ProviderKey.ec("file-1")
        let second = try await ProviderKey.rsa("file-2")
        try await withTemporaryDirectory(prefix: "outpost-jwks-file") { dir in
            let path = dir.appending("jwks.json")
            try Self.write([first], to: path)
            try await withServer(configure: {
                $0.identityProvider.jwksFile = path
                $0.identityProvider.issuer = Self.issuer
            }) { s in
                let pulled = try await s.pull("s", token: try first.token(Self.claims()))
                #expect(pulled.status == 200, "\(pulled.text)")
                #expect(s.app.metrics.render().contains("outpost_jwks_keys 1"))
                #expect(try await s.pull("s", token: s.token(spaces: ["s"])).status == 200)
                // A new key in the file: its first token reads the file again.
                try Self.write([first, second], to: path)
                #expect(try await s.push("s", [put("c1", "a")], token: try second.token(Self.claims())).status == 200)
                let rendered = s.app.metrics.render()
                #expect(rendered.contains("outpost_jwks_keys 2"))
                // The provider's metrics, which a server without one does not declare, are
                // described in docs/operating.md as every other.
                let operating = try OperatorDocsTests.read("docs/operating.md")
                let names = rendered.split(separator: "\n").compactMap { line -> String? in
                    guard line.hasPrefix("# TYPE outpost_jwks") else { return nil }
                    return line.split(separator: " ").dropFirst(2).first.map(String.init)
                }
                #expect(names.count == 3)
                for name in names { #expect(operating.contains("| `\(name)` |"), "docs/operating.md does not describe \(name)") }
            }
        }
    }

    @Test func aKeySetFileThatDoesNotLoadRefusesTheStart() async throws {
        try await withTemporaryDirectory(prefix: "outpost-jwks-file") { dir in
            func start(_ path: String, maxBytes: Int = 262_144) -> String? {
                var settings = Settings()
                settings.dataDirectory = dir.appending("data-\(UUID().uuidString)")
                settings.identityProvider.jwksFile = path
                settings.identityProvider.issuer = Self.issuer
                settings.identityProvider.maxJWKSBytes = maxBytes
                do {
                    _ = try OutpostApplication(settings: settings, environment: ["OUTPOST_JWT_SECRET": JWKSFileTests.secret])
                    return nil
                } catch {
                    return "\(error)"
                }
            }
            #expect(start(dir.appending("missing.json"))?.contains("cannot open") == true)
            let notJSON = dir.appending("bad.json")
            try Data("keys".utf8).write(to: URL(fileURLWithPath: notJSON))
            #expect(start(notJSON)?.contains("not a JSON object") == true)
            let big = dir.appending("big.json")
            try Self.write([try await ProviderKey.rsa("k1"), try await ProviderKey.rsa("k2"), try await ProviderKey.rsa("k3")], to: big)
            #expect(start(big, maxBytes: 1024)?.contains("over the limit of 1024 bytes") == true)
        }
    }

    /// `OutpostApplication.Parts.tokens` still wraps the verifier the settings make, with an
    /// identity provider in it.
    @Test func partsWrapTheVerifierOfProviderTokensToo() async throws {
        let key = try await ProviderKey.rsa("wrapped")
        try await withTemporaryDirectory(prefix: "outpost-jwks-parts") { dir in
            let path = dir.appending("jwks.json")
            try Self.write([key], to: path)
            var settings = Settings()
            settings.dataDirectory = dir.appending("data")
            settings.identityProvider.jwksFile = path
            settings.identityProvider.issuer = Self.issuer
            let seen = Counting.Seen()
            var parts = OutpostApplication.Parts()
            parts.tokens = { Counting(base: $0, seen: seen) }
            let app = try OutpostApplication(settings: settings, environment: ["OUTPOST_JWT_SECRET": JWKSFileTests.secret], parts: parts)
            let head = HTTPRequestHead(method: .GET, target: "/", headers: ["Authorization": "Bearer \(try key.token(Self.claims("through")))"])
            let claims = try await app.authorizer.claims(head)
            #expect(claims.sub == "through" && seen.count.load(ordering: .relaxed) == 1)
            #expect(app.authorizer.authority is Counting)
            await app.close()
        }
    }

    /// The token with one character of its signature changed to another base64url
    /// character, in the middle (the last one may carry padding bits).
    static func tampered(_ token: String) -> String {
        var bytes = Array(token.utf8)
        let at = bytes.count - 20
        bytes[at] = bytes[at] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The verifier a server builds for a key set file, in this process with its clock
    /// moved by the test: a verified token is served from the cache until its `exp` (with
    /// the leeway), never before its `nbf`, and a token differing by one byte is verified.
    @Test func aCachedTokenStopsAtItsExpAndNotBeforeItsNbfAndAnotherByteIsVerified() async throws {
        let key = try await ProviderKey.ec("cached")
        try await withTemporaryDirectory(prefix: "outpost-token-cache") { dir in
            let path = dir.appending("jwks.json")
            try Self.write([key], to: path)
            var settings = IdentityProviderSettings()
            settings.jwksFile = path
            settings.issuer = Self.issuer
            let provider = try ProviderTokens(settings: settings, metrics: Metrics())
            let tokens = ServerTokens(shared: JWTAuthority(secret: Array(JWKSFileTests.secret.utf8)), provider: provider)
            let leeway = ProviderTokens.leewaySeconds
            let t0: Int64 = 1_800_000_000
            var payload = Self.claims("timed")
            payload["exp"] = .number(JSONNumber(t0 + 100))
            let token = try key.token(payload)

            #expect(try await tokens.verify(token, now: t0).sub == "timed")
            #expect(provider.verified.count == 1)
            #expect(try await tokens.verify(token, now: t0 + 50).sub == "timed")
            #expect(provider.verified.count == 1)
            // The last second of the leeway still passes; the next is refused as expired.
            #expect(try await tokens.verify(token, now: t0 + 100 + leeway - 1).sub == "timed")
            await #expect(throws: TokenError.expired) { try await tokens.verify(token, now: t0 + 100 + leeway) }
            #expect(provider.verified.count == 0)

            // One byte changed: verified, refused, not stored; the token itself still passes.
            #expect(try await tokens.verify(token, now: t0).sub == "timed")
            await #expect(throws: TokenError.badSignature) { try await tokens.verify(Self.tampered(token), now: t0) }
            #expect(provider.verified.count == 1)
            #expect(try await tokens.verify(token, now: t0).sub == "timed")

            // Not before its nbf, with the leeway, even once cached.
            var early = Self.claims("early")
            early["exp"] = .number(JSONNumber(t0 + 1000))
            early["nbf"] = .number(JSONNumber(t0 + 500))
            let later = try key.token(early)
            #expect(try await tokens.verify(later, now: t0 + 500 - leeway).sub == "early")
            #expect(provider.verified.count == 2)
            #expect(try await tokens.verify(later, now: t0 + 500 - leeway).sub == "early")
            await #expect(throws: TokenError.notYetValid) { try await tokens.verify(later, now: t0 + 500 - leeway - 1) }
        }
    }

    /// A key gone from the set stops its cached tokens as soon as the set is read again; the
    /// tokens of the keys that stay are verified again under the new set, and pass.
    @Test func aKeyRemovedFromTheFileStopsItsCachedTokens() async throws {
        let stays = try await ProviderKey.ec("stays")
        let leaves = try await ProviderKey.rsa("leaves")
        let arrives = try await ProviderKey.ec("arrives")
        try await withTemporaryDirectory(prefix: "outpost-token-cache") { dir in
            let path = dir.appending("jwks.json")
            try Self.write([stays, leaves], to: path)
            var settings = IdentityProviderSettings()
            settings.jwksFile = path
            settings.issuer = Self.issuer
            let provider = try ProviderTokens(settings: settings, metrics: Metrics())
            let tokens = ServerTokens(shared: JWTAuthority(secret: Array(JWKSFileTests.secret.utf8)), provider: provider)
            let now = epochSeconds()
            let kept = try stays.token(Self.claims("kept")), gone = try leaves.token(Self.claims("gone"))
            #expect(try await tokens.verify(kept, now: now).sub == "kept")
            #expect(try await tokens.verify(gone, now: now).sub == "gone")
            #expect(try await tokens.verify(gone, now: now).sub == "gone")
            #expect(provider.verified.count == 2)

            // The provider drops a key and adds one; the new key's first token reads the file.
            try Self.write([stays, arrives], to: path)
            let arrived = try arrives.token(Self.claims("new"))
            #expect(try await tokens.verify(arrived, now: now).sub == "new")
            await #expect(throws: TokenError.unknownKey("leaves")) { try await tokens.verify(gone, now: now) }
            #expect(try await tokens.verify(kept, now: now).sub == "kept")
            // The token whose lookup brought the new set was verified under the set before it
            // began, so it was not kept; from its next request on it is.
            #expect(provider.verified.count == 1)
            #expect(try await tokens.verify(arrived, now: now).sub == "new")
            #expect(provider.verified.count == 2)
        }
    }

    struct Counting: TokenVerifier {
        final class Seen: Sendable {
            let count = Atomic<Int>(0)
        }

        let base: any TokenVerifier
        let seen: Seen

        func verify(_ token: String, now: Int64) async throws(TokenError) -> Claims {
            seen.count.add(1, ordering: .relaxed)
            return try await base.verify(token, now: now)
        }
    }
}

/// The cache of verified provider tokens on its own: its bound, its order of eviction, and
/// its emptying when the key set changes.
@Suite struct VerifiedTokenCacheTests {
    static func key(_ n: Int) -> VerifiedTokenCache.Key { VerifiedTokenCache.Key(Array("token-\(n)".utf8)) }

    static func claims(_ n: Int, exp: Int64 = 2_000_000_000) -> Claims { Claims(sub: "user-\(n)", exp: exp, spaces: ["s"]) }

    @Test func theBoundHoldsAndTheOldestEntryGoesFirst() {
        let cache = VerifiedTokenCache(capacity: 3, leewaySeconds: 60)
        let now: Int64 = 1_800_000_000
        for n in 0..<5 {
            cache.store(Self.key(n), claims: Self.claims(n), notBefore: nil, generation: 1)
            #expect(cache.count == min(n + 1, 3))
        }
        #expect(cache.claims(Self.key(0), now: now, generation: 1) == nil)
        #expect(cache.claims(Self.key(1), now: now, generation: 1) == nil)
        for n in 2..<5 { #expect(cache.claims(Self.key(n), now: now, generation: 1)?.sub == "user-\(n)") }
        // Storing a token held already takes no second place.
        cache.store(Self.key(4), claims: Self.claims(4), notBefore: nil, generation: 1)
        cache.store(Self.key(5), claims: Self.claims(5), notBefore: nil, generation: 1)
        #expect(cache.count == 3)
        #expect(cache.claims(Self.key(2), now: now, generation: 1) == nil)
        for n in 3..<6 { #expect(cache.claims(Self.key(n), now: now, generation: 1)?.sub == "user-\(n)") }
        // An entry dropped when it expired leaves the bound and the order right.
        cache.store(Self.key(6), claims: Self.claims(6, exp: now), notBefore: nil, generation: 1)
        #expect(cache.claims(Self.key(6), now: now + 60, generation: 1) == nil)
        #expect(cache.count == 2)
        for n in 7..<12 { cache.store(Self.key(n), claims: Self.claims(n), notBefore: nil, generation: 1) }
        #expect(cache.count == 3)
        for n in 9..<12 { #expect(cache.claims(Self.key(n), now: now, generation: 1)?.sub == "user-\(n)") }
    }

    @Test func aNewKeySetGenerationEmptiesItAndAnOlderOneIsNotStored() {
        let cache = VerifiedTokenCache(capacity: 10, leewaySeconds: 60)
        let now: Int64 = 1_800_000_000
        for n in 0..<4 { cache.store(Self.key(n), claims: Self.claims(n), notBefore: nil, generation: 3) }
        #expect(cache.count == 4)
        #expect(cache.claims(Self.key(0), now: now, generation: 4) == nil)
        #expect(cache.count == 0)
        // Verified under the set before: not stored, and not served.
        cache.store(Self.key(1), claims: Self.claims(1), notBefore: nil, generation: 3)
        #expect(cache.count == 0)
        #expect(cache.claims(Self.key(1), now: now, generation: 3) == nil)
        cache.store(Self.key(2), claims: Self.claims(2), notBefore: nil, generation: 5)
        #expect(cache.claims(Self.key(2), now: now, generation: 5)?.sub == "user-2")
        #expect(cache.claims(Self.key(2), now: now, generation: 4) == nil)
        // A key differing from another in one byte is another entry.
        #expect(cache.claims(VerifiedTokenCache.Key(Array("token-3".utf8)), now: now, generation: 5) == nil)
    }
}
