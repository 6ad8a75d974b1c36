import Foundation
import OutpostCore
import OutpostCrypto
import OutpostSignatures
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// Tokens of an identity provider (RS256 and ES256 against its JWK Set) on a real
/// `outpost-server` child: the provider is a `JWKSTestServer` in this process, its keys
/// are generated here and its tokens signed here, and every check goes through real pulls
/// and pushes over HTTP (docs/deploying.md, "Identity providers").
@Suite(.serverLogs) struct IdentityProviderTests {
    static let issuer = "https://idp.example.com/realms/outpost"
    static let audience = "outpost-api"

    /// A provider token's claims: issuer, audience, subject, an hour of life, and `extra`.
    static func claims(sub: String = "alice", spaces: [String] = ["team-1"], scope: String = "write", iss: String = issuer,
                       aud: JSONValue = .string(audience), exp: Int64? = nil, extra: JSONObject = [:]) -> JSONObject {
        var o: JSONObject = ["iss": .string(iss), "aud": aud, "sub": .string(sub), "exp": .number(JSONNumber(exp ?? epochSeconds() + 3600)),
                             "iat": .number(JSONNumber(epochSeconds())), "spaces": .array(spaces.map { .string($0) }), "scope": .string(scope)]
        for (k, v) in extra { o[k] = v }
        return o
    }

    /// A server child whose provider is `jwks`, run for `body` and always stopped, with the
    /// provider server.
    static func withProvider(_ jwks: JSONValue? = nil, arguments: [String] = [], serve: (JWKSTestServer) -> Void,
                             _ body: (JWKSTestServer, ServerProcess) async throws -> Void) async throws {
        try await withTemporaryDirectory(prefix: "outpost-jwks") { dir in
            let provider = try JWKSTestServer()
            serve(provider)
            do {
                // A timeout far beyond any answer of the provider here, unless the test sets
                // its own: a machine loaded by the whole suite must not make a fetch fail.
                let args = ["--jwks-url", provider.url, "--jwt-issuer", issuer, "--jwt-audience", audience, "--jwks-timeout", "30"] + arguments
                let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data"), arguments: args) }
                do {
                    try await body(provider, server)
                } catch {
                    _ = try? await blocking { server.stop() }
                    throw error
                }
                #expect(try await blocking { server.stop() } == 0)
            } catch {
                await provider.stop()
                throw error
            }
            await provider.stop()
        }
    }

    static func pull(_ server: ServerProcess, _ token: String, _ space: String = "team-1") async throws -> TestResponse {
        try await httpRequestAsync(port: server.port, "GET", "/v1/spaces/\(space)/pull", headers: [("Authorization", "Bearer \(token)")])
    }

    static func push(_ server: ServerProcess, _ token: String, _ changes: [Change], space: String = "team-1") async throws -> TestResponse {
        try await httpRequestAsync(port: server.port, "POST", "/v1/spaces/\(space)/push",
                                   headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
                                   body: PushRequest(clientId: "jwks-test", changes: changes).encoded())
    }

    /// The series' value on the server's `/metrics` (0 when absent).
    static func metric(_ server: ServerProcess, _ series: String, _ admin: String) async throws -> Double {
        try await blocking { try server.metric(series, token: admin) } ?? 0
    }

    /// Expects a `401 unauthorized` in the protocol's envelope whose message contains `text`.
    static func expectRefused(_ response: TestResponse, _ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(response.status == 401, "\(response.status) \(response.text)", sourceLocation: sourceLocation)
        let envelope = try? ErrorEnvelope.decode(response.body)
        #expect(envelope?.code == "unauthorized", "\(response.text)", sourceLocation: sourceLocation)
        #expect(envelope?.message.contains(text) == true, "expected a message with \"\(text)\": \(response.text)", sourceLocation: sourceLocation)
        #expect(response.header("WWW-Authenticate")?.hasPrefix("Bearer") == true, sourceLocation: sourceLocation)
    }

    /// Waits for the server's log line that says the key set loaded, with `keys` usable keys,
    /// and expects `/metrics` to count them (read with `admin`).
    static func keysLoaded(_ server: ServerProcess, _ keys: Int, admin: String, within limit: Duration = .seconds(testDeadlineSeconds),
                           sourceLocation: SourceLocation = #_sourceLocation) async throws {
        try await server.logLine("the key set loaded with \(keys) keys", within: limit, fileID: sourceLocation.fileID, line: sourceLocation.line,
                                 where: ServerProcess.logged("JWKS loaded", ["keys": String(keys)]))
        #expect(try await metric(server, "outpost_jwks_keys", admin) == Double(keys), sourceLocation: sourceLocation)
    }

    static func appliedCount(_ response: TestResponse) throws -> Int {
        try PushResponse.decode(response.body).results.filter { $0.status == .applied }.count
    }

    @Test func rs256AndES256TokensPushAndPullAndTheirClaimsAreChecked() async throws {
        let rsa = try await ProviderKey.rsa("rsa-1")
        let ec = try await ProviderKey.ec("ec-1")
        try await Self.withProvider(serve: { $0.serve(keys: [rsa, ec]) }) { jwks, server in
            let admin = try await blocking { try server.token(spaces: [], admin: true) }
            try await Self.keysLoaded(server, 2, admin: admin)
            // Fetches until the set loaded: one, or more after a failure on a loaded machine.
            let loaded = jwks.fetches

            let pushed = try await Self.push(server, try rsa.token(Self.claims()), [put("c1", "r1", ["by": "rsa"])])
            #expect(try pushed.status == 200 && Self.appliedCount(pushed) == 1, "\(pushed.text)")
            let pushedEC = try await Self.push(server, try ec.token(Self.claims(sub: "bob")), [put("c2", "r2", ["by": "ec"])])
            #expect(try pushedEC.status == 200 && Self.appliedCount(pushedEC) == 1, "\(pushedEC.text)")
            let pulled = try await Self.pull(server, try ec.token(Self.claims(scope: "read")))
            #expect(pulled.status == 200)
            let page = try PullPage.decode(pulled.body)
            #expect(page.changes.map(\.id) == ["r1", "r2"])
            // The server's own HS256 tokens work beside them.
            let hs = try await blocking { try server.token(spaces: ["team-1"], scope: "read") }
            #expect(try await Self.pull(server, hs).status == 200)
            // Scope and spaces as for any token: read scope cannot push, another space is 403.
            #expect(try await Self.push(server, try rsa.token(Self.claims(scope: "read")), [put("c3", "r3")]).status == 403)
            #expect(try await Self.pull(server, try rsa.token(Self.claims(spaces: ["team-2"]))).status == 403)

            // Issuer, audience, expiry, not-before, subject, kid.
            Self.expectRefused(try await Self.pull(server, try rsa.token(Self.claims(iss: "https://idp.example.com/realms/other"))), "issuer")
            Self.expectRefused(try await Self.pull(server, try rsa.token(Self.claims(aud: "someone-else"))), "audience")
            Self.expectRefused(try await Self.pull(server, try ec.token(Self.claims(aud: ["a", "b"]))), "audience")
            #expect(try await Self.pull(server, try ec.token(Self.claims(aud: ["account", .string(Self.audience)]))).status == 200)
            var noAudience = Self.claims()
            noAudience["aud"] = nil
            Self.expectRefused(try await Self.pull(server, try rsa.token(noAudience)), "aud")
            var noIssuer = Self.claims()
            noIssuer["iss"] = nil
            Self.expectRefused(try await Self.pull(server, try rsa.token(noIssuer)), "iss")
            // 60 seconds of leeway: 30 s past exp passes, 120 s does not.
            #expect(try await Self.pull(server, try rsa.token(Self.claims(exp: epochSeconds() - 30))).status == 200)
            Self.expectRefused(try await Self.pull(server, try rsa.token(Self.claims(exp: epochSeconds() - 120))), "expired")
            Self.expectRefused(try await Self.pull(server, try ec.token(Self.claims(extra: ["nbf": .number(JSONNumber(epochSeconds() + 600))]))), "not valid yet")
            #expect(try await Self.pull(server, try ec.token(Self.claims(extra: ["nbf": .number(JSONNumber(epochSeconds() + 20))]))).status == 200)
            // The extremes of NumericDate: the largest integer is a long life, not an overflow.
            #expect(try await Self.pull(server, try rsa.token(Self.claims(exp: Int64.max))).status == 200)
            Self.expectRefused(try await Self.pull(server, try rsa.token(Self.claims(exp: Int64.min))), "expired")
            Self.expectRefused(try await Self.pull(server, try rsa.token(Self.claims(extra: ["exp": 1e300]))), "exp")
            var noSubject = Self.claims()
            noSubject["sub"] = nil
            Self.expectRefused(try await Self.pull(server, try rsa.token(noSubject)), "sub")
            Self.expectRefused(try await Self.pull(server, try rsa.token(Self.claims(), header: ["kid": .null])), "kid")
            // A key of the provider's name that is not the provider's: the signature fails.
            let impostor = ProviderKey(kid: "rsa-1", material: .rsa(try await blocking { try RSAPrivateKey.generate() }))
            Self.expectRefused(try await Self.pull(server, try impostor.token(Self.claims())), "signature does not verify")
            // None of these named a key the set lacks: no fetch since the set loaded.
            #expect(jwks.fetches == loaded)
            #expect(try await Self.metric(server, "outpost_jwks_fetches_total{result=\"ok\"}", admin) == 1)
        }
    }

    @Test func rotationRefreshesOnceRemovedAndUnknownKeysAreRefusedAndAFloodIsRateLimited() async throws {
        let old = try await ProviderKey.rsa("2024-old")
        let ec = try await ProviderKey.ec("ec-stays")
        let new = try await ProviderKey.rsa("2025-new")
        let cooldown = 30
        try await Self.withProvider(arguments: ["--jwks-refresh-cooldown", String(cooldown)], serve: { $0.serve(keys: [old, ec]) }) { jwks, server in
            let admin = try await blocking { try server.token(spaces: [], admin: true) }
            try await Self.keysLoaded(server, 2, admin: admin)
            #expect(try await Self.pull(server, try old.token(Self.claims())).status == 200)
            let loaded = jwks.fetches

            // The provider rotates: a new key in, the old one out. The first token of the new
            // key makes the server fetch once, and passes.
            jwks.serve(keys: [new, ec])
            let rotated = ContinuousClock.now
            let first = try await Self.push(server, try new.token(Self.claims()), [put("n1", "x")])
            #expect(try first.status == 200 && Self.appliedCount(first) == 1, "\(first.text)")
            #expect(jwks.fetches == loaded + 1)
            #expect(try await Self.pull(server, try new.token(Self.claims())).status == 200)
            #expect(try await Self.pull(server, try ec.token(Self.claims())).status == 200)
            #expect(jwks.fetches == loaded + 1)
            // The removed key is refused now; so is a key the provider never had.
            Self.expectRefused(try await Self.pull(server, try old.token(Self.claims())), "\"2024-old\" is not in the identity provider's key set")
            let stranger = ProviderKey(kid: "never-published", material: .rsa(try await blocking { try RSAPrivateKey.generate() }))
            Self.expectRefused(try await Self.pull(server, try stranger.token(Self.claims())), "is not in the identity provider's key set")

            // A flood of tokens with random kids, all at once.
            let before = jwks.fetches
            let signer = try P256PrivateKey.generate()
            var rng = SplitMix64(seed: 20)
            let tokens = try (0..<40).map { _ in
                try ProviderKey(kid: "flood-\(UInt64.random(in: 0...UInt64.max, using: &rng))", material: .ec(signer)).token(Self.claims())
            }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for token in tokens { group.addTask { try await Self.pull(server, token).status } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.count == 40 && statuses.allSatisfy { $0 == 401 }, "\(statuses)")
            // At most one fetch per cooldown since the rotation's fetch: none when the test
            // ran within a cooldown, one more for each cooldown it took beyond.
            let allowed = Int((ContinuousClock.now - rotated) / .seconds(cooldown))
            #expect(jwks.fetches - before <= allowed, "\(jwks.fetches - before) fetches for 40 unknown kids, \(allowed) allowed")
            // Every unknown kid is counted by what followed: two fetched, the rest waited for a
            // fetch under way or were held back.
            var outcomes = 0.0
            for outcome in ["fetched", "joined", "limited"] {
                outcomes += try await Self.metric(server, "outpost_jwks_unknown_kid_total{outcome=\"\(outcome)\"}", admin)
            }
            #expect(outcomes == 43)
            if allowed == 0 {
                // Within one cooldown: the rotation's token fetched, every later one was held back.
                #expect(try await Self.metric(server, "outpost_jwks_unknown_kid_total{outcome=\"fetched\"}", admin) == 1)
                #expect(try await Self.metric(server, "outpost_jwks_unknown_kid_total{outcome=\"limited\"}", admin) == 42)
            }
            // The good keys still verify.
            #expect(try await Self.pull(server, try new.token(Self.claims())).status == 200)
        }
    }

    /// The server keeps the tokens that verified: the same token again passes, one byte
    /// changed is verified (and refused), and a key the provider drops stops its tokens as
    /// soon as the server has the new set, cached or not.
    @Test func cachedTokensStopWhenTheirKeyLeavesTheSetAndAChangedByteIsVerified() async throws {
        let old = try await ProviderKey.rsa("cache-old")
        let ec = try await ProviderKey.ec("cache-stays")
        let new = try await ProviderKey.rsa("cache-new")
        try await Self.withProvider(serve: { $0.serve(keys: [old, ec]) }) { jwks, server in
            let admin = try await blocking { try server.token(spaces: [], admin: true) }
            try await Self.keysLoaded(server, 2, admin: admin)
            let oldToken = try old.token(Self.claims()), ecToken = try ec.token(Self.claims(sub: "bob"))
            for _ in 0..<3 {
                #expect(try await Self.pull(server, oldToken).status == 200)
                #expect(try await Self.pull(server, ecToken).status == 200)
            }
            var bytes = Array(oldToken.utf8)
            bytes[bytes.count - 20] = bytes[bytes.count - 20] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            Self.expectRefused(try await Self.pull(server, String(decoding: bytes, as: UTF8.self)), "signature does not verify")
            #expect(try await Self.pull(server, oldToken).status == 200)

            // The provider rotates; the new key's first token makes the server fetch the set.
            let loaded = jwks.fetches
            jwks.serve(keys: [new, ec])
            let pushed = try await Self.push(server, try new.token(Self.claims()), [put("c1", "r1")])
            #expect(try pushed.status == 200 && Self.appliedCount(pushed) == 1, "\(pushed.text)")
            #expect(jwks.fetches == loaded + 1)
            Self.expectRefused(try await Self.pull(server, oldToken), "\"cache-old\" is not in the identity provider's key set")
            #expect(try await Self.pull(server, ecToken).status == 200)
        }
    }

    @Test func aProviderUnreachableAtStartIsRetriedWhileHS256Serves() async throws {
        let key = try await ProviderKey.ec("late")
        try await Self.withProvider(serve: { $0.serve(.status(503)) }) { jwks, server in
            let admin = try await blocking { try server.token(spaces: [], admin: true) }
            try await server.logLine("the first fetch failed", where: ServerProcess.logged("JWKS fetch failed; provider tokens are refused until the keys load",
                                                                                         ["result": "http_error"]))
            // The server serves its own tokens, and refuses the provider's until the keys load.
            let hs = try await blocking { try server.token(spaces: ["team-1"]) }
            #expect(try await Self.push(server, hs, [put("h1", "a")]).status == 200)
            Self.expectRefused(try await Self.pull(server, try key.token(Self.claims())), "keys are not loaded")
            #expect(try await Self.metric(server, "outpost_jwks_keys", admin) == 0)
            // The provider comes back: the server's retries load the keys on their own, the
            // next one within the backoff its failures so far have grown to (1 s doubling,
            // at most 300 s: on a busy machine the steps above can see many), plus the
            // tests' deadline.
            jwks.serve(keys: [key])
            let failures = Int(try await Self.metric(server, "outpost_jwks_fetches_total{result=\"http_error\"}", admin))
            let backoff = JWKSRefreshPolicy.retryDelay(afterFailures: failures)
            try await Self.keysLoaded(server, 1, admin: admin, within: backoff + .seconds(testDeadlineSeconds))
            let pulled = try await Self.pull(server, try key.token(Self.claims()))
            #expect(try pulled.status == 200 && PullPage.decode(pulled.body).changes.map(\.id) == ["a"])
        }
    }

    @Test func aKeySetTooLargeIsRefusedWhileReadingAndTheLastGoodKeysStay() async throws {
        let key = try await ProviderKey.rsa("good")
        let later = try await ProviderKey.rsa("later")
        let limit = 64 * 1024
        try await Self.withProvider(arguments: ["--jwks-max-bytes", String(limit)], serve: { $0.serve(keys: [key]) }) { jwks, server in
            let admin = try await blocking { try server.token(spaces: [], admin: true) }
            try await Self.keysLoaded(server, 1, admin: admin)
            // The provider now answers 16 times the limit, with Content-Length: the token of an
            // unknown key causes a fetch, refused before the body is read; the token is refused.
            jwks.serve(.huge(bytes: 16 * limit, chunked: false))
            Self.expectRefused(try await Self.pull(server, try later.token(Self.claims())), "\"later\" is not in the identity provider's key set")
            #expect(try await Self.metric(server, "outpost_jwks_fetches_total{result=\"too_large\"}", admin) >= 1)
            // Then streamed without a length: the retries that follow the failure stop reading
            // at the limit.
            jwks.serve(.huge(bytes: 16 * limit, chunked: true))
            let streamedBefore = jwks.streamedAnswers
            // A fetch refused for what it read, not for its Content-Length.
            try await server.logLine("a retry refused the streamed body", where: ServerProcess.logged(
                "JWKS fetch failed; the last good keys stay in use", ["result": "too_large", "error": "the answer is over the limit of \(limit) bytes"]))
            #expect(jwks.streamedAnswers > streamedBefore)
            #expect(try await Self.metric(server, "outpost_jwks_fetches_total{result=\"too_large\"}", admin) >= 2)
            #expect(try await Self.metric(server, "outpost_jwks_fetches_total{result=\"ok\"}", admin) == 1)
            // The last good keys stay in use, and the server serves as before.
            #expect(try await Self.metric(server, "outpost_jwks_keys", admin) == 1)
            #expect(try await Self.pull(server, try key.token(Self.claims())).status == 200)
            let hs = try await blocking { try server.token(spaces: ["team-1"]) }
            #expect(try await Self.push(server, hs, [put("h1", "a")]).status == 200)
            #expect(try await httpRequestAsync(port: server.port, "GET", "/healthz").status == 200)
        }
    }

    @Test func aKeySetTooSlowIsGivenUpAtTheTimeoutWhileHS256Serves() async throws {
        let key = try await ProviderKey.ec("slow")
        // A cooldown of a second: once the provider answers again, a provider token soon
        // causes a fetch of its own, whatever the backoff of the scheduled retries has grown
        // to while the provider held them (it doubles after every failure, up to 300 s: on a
        // busy machine, longer than the test waits).
        try await Self.withProvider(arguments: ["--jwks-timeout", "1", "--jwks-refresh-cooldown", "1"],
                                    serve: { $0.serve(keys: [key]); $0.hold() }) { jwks, server in
            try await jwks.untilHolding()
            // While the provider holds the server's fetch, HS256 tokens are served at once.
            let hs = try await blocking { try server.token(spaces: ["team-1"]) }
            #expect(try await Self.push(server, hs, [put("h1", "a")]).status == 200)
            #expect(jwks.heldCount >= 1)
            // The provider token waits for the fetch, which gives up at the timeout: refused.
            Self.expectRefused(try await Self.pull(server, try key.token(Self.claims())), "keys are not loaded")
            let admin = try await blocking { try server.token(spaces: [], admin: true) }
            #expect(try await Self.metric(server, "outpost_jwks_fetches_total{result=\"timeout\"}", admin) >= 1)
            #expect(try await Self.metric(server, "outpost_jwks_keys", admin) == 0)
            #expect(try await Self.pull(server, hs).status == 200)
            // Once the provider answers again, a token naming its key loads the keys (each
            // try is refused while the cooldown runs, then fetches or joins a fetch).
            jwks.release()
            let token = try key.token(Self.claims())
            try await eventually("a provider token loaded the keys") { try await Self.pull(server, token).status == 200 }
            #expect(try await Self.metric(server, "outpost_jwks_keys", admin) == 1)
        }
    }

    @Test func algorithmConfusionAndKeysOfTheWrongKindAreRefused() async throws {
        let rsa = try await ProviderKey.rsa("rsa-1")
        let ec = try await ProviderKey.ec("ec-1")
        // Keys a provider may publish that must not verify these tokens.
        var rs384 = try await ProviderKey.rsa("rsa-384")
        rs384.jwkExtra = ["alg": "RS384"]
        var encryption = try await ProviderKey.rsa("rsa-enc")
        encryption.jwkExtra = ["use": "enc", "alg": "RSA-OAEP"]
        let small = try await ProviderKey.rsa("rsa-1024", bits: 1024)
        var p384 = try await ProviderKey.ec("ec-p384")
        p384.jwkExtra = ["crv": "P-384"]
        var verifyOnly = try await ProviderKey.ec("ec-sign-only")
        verifyOnly.jwkExtra = ["key_ops": ["sign"]]
        let symmetric: JSONValue = ["kty": "oct", "kid": "oct-1", "k": .string(Base64.encodeURL(Array("shared".utf8)))]
        try await Self.withProvider(serve: { $0.serve(keys: [rsa, ec, rs384, encryption, small, p384, verifyOnly], extra: [symmetric]) }) { jwks, server in
            let admin = try await blocking { try server.token(spaces: [], admin: true) }
            try await Self.keysLoaded(server, 2, admin: admin)
            let loaded = jwks.fetches
            let claims = Self.claims()
            #expect(try await Self.pull(server, try rsa.token(claims)).status == 200)

            // HS256 with the provider's public key as the HMAC secret, in every form an
            // attacker might guess the server uses: DER, PEM, the JWK's JSON, the modulus.
            guard case .rsa(let rsaKey) = rsa.material else { return }
            let publicForms: [[UInt8]] = [
                rsa.publicKeyDER, Array(try rsaKey.publicKey().pemRepresentation.utf8), rsa.jwk.encoded(), rsaKey.modulus,
                ec.publicKeyDER, ec.jwk.encoded(),
            ]
            for key in publicForms {
                Self.expectRefused(try await Self.pull(server, hmacToken(claims, key: key)), "signature does not verify")
                Self.expectRefused(try await Self.pull(server, hmacToken(claims, key: key, header: ["alg": "HS256", "kid": "rsa-1"])), "signature does not verify")
            }
            // alg none, and algorithms the server does not take.
            let payload = Base64.encodeURL(JSONValue.object(claims).encoded())
            for alg in ["none", "None", "RS384", "PS256", "ES384", "HS512", "rs256"] {
                let header = Base64.encodeURL(JSONValue.object(["alg": .string(alg), "kid": "rsa-1"]).encoded())
                Self.expectRefused(try await Self.pull(server, "\(header).\(payload)."), "is not accepted")
                Self.expectRefused(try await Self.pull(server, try rsa.token(claims, header: ["alg": .string(alg)])), "is not accepted")
            }
            // A key of the wrong type for the token's alg.
            Self.expectRefused(try await Self.pull(server, try ec.token(claims, header: ["kid": "rsa-1"])), "an RSA key (2048 bits), which verifies RS256, not ES256")
            Self.expectRefused(try await Self.pull(server, try rsa.token(claims, header: ["kid": "ec-1"])), "a P-256 key, which verifies ES256, not RS256")
            Self.expectRefused(try await Self.pull(server, try p384.token(claims)), "its curve is P-384; ES256 needs P-256")
            // A JWK whose own alg, use or key_ops disagree, an RSA key under 2048 bits, a symmetric key.
            Self.expectRefused(try await Self.pull(server, try rs384.token(claims)), "its alg is RS384")
            Self.expectRefused(try await Self.pull(server, try encryption.token(claims)), "its use is \"enc\"")
            Self.expectRefused(try await Self.pull(server, try verifyOnly.token(claims)), "key_ops")
            Self.expectRefused(try await Self.pull(server, try small.token(claims)), "an RSA key of 1024 bits; at least 2048 are required")
            Self.expectRefused(try await Self.pull(server, try rsa.token(claims, header: ["kid": "oct-1"])), "key type is oct")
            Self.expectRefused(try await Self.pull(server, hmacToken(claims, key: Array("shared".utf8), header: ["alg": "HS256", "kid": "oct-1"])), "signature does not verify")
            // A token that brings its own key, or points at one elsewhere, is refused unread,
            // and the server never fetches what it points at.
            let attacker = try await ProviderKey.ec("ec-1")
            Self.expectRefused(try await Self.pull(server, try attacker.token(claims, header: ["jku": .string(jwks.elsewhereURL("jwks.json"))])), "header jku is not accepted")
            Self.expectRefused(try await Self.pull(server, try attacker.token(claims, header: ["jwk": attacker.jwk])), "header jwk is not accepted")
            Self.expectRefused(try await Self.pull(server, try attacker.token(claims, header: ["x5u": .string(jwks.elsewhereURL("cert.pem"))])), "header x5u is not accepted")
            Self.expectRefused(try await Self.pull(server, try rsa.token(claims, header: ["crit": ["exp"], "exp": 1])), "header crit is not accepted")
            #expect(jwks.elsewhereRequests == 0)
            // The same holds for the server's own HS256 tokens.
            let own: JSONObject = ["sub": "ops", "exp": .number(JSONNumber(epochSeconds() + 600)), "spaces": ["team-1"]]
            #expect(try await Self.pull(server, hmacToken(own, key: Array(server.secret.utf8))).status == 200)
            Self.expectRefused(try await Self.pull(server, hmacToken(own, key: Array(server.secret.utf8),
                                                                     header: ["alg": "HS256", "jku": .string(jwks.elsewhereURL("hs"))])), "header jku is not accepted")
            // ES256's signature is r || s; the DER form, or any other length, does not verify.
            let signed = try ec.token(claims)
            let parts = signed.split(separator: ".").map(String.init)
            let raw = try #require(Base64.decodeURL(parts[2]))
            let der = try #require(ECDSASignature.der(fromRaw: raw))
            for signature in [der, Array(raw.dropLast()), raw + [0], []] {
                Self.expectRefused(try await Self.pull(server, parts[0] + "." + parts[1] + "." + Base64.encodeURL(signature)), "signature does not verify")
            }
            #expect(try await Self.pull(server, signed).status == 200)
            // No refusal above named a key the set lacks: no fetch since the set loaded.
            #expect(jwks.fetches == loaded)
        }
    }

    /// A Keycloak-shaped provider: spaces from group membership, roles from the nested
    /// `realm_access.roles` (read by the rules as `auth.roles`), write from a client scope,
    /// admin from a realm role.
    @Test func aKeycloakShapedTokenDrivesSpacesScopeRolesAndAdminThroughTheMapping() async throws {
        let key = try await ProviderKey.rsa("keycloak-rs256")
        try await withTemporaryDirectory(prefix: "outpost-rules") { dir in
            let rules = dir.appending("rules.json")
            try Data(#"{"collections": {"notes": {"write": "'editor' in auth.roles"}}, "default": {"read": "true", "write": "true"}}"#.utf8)
                .write(to: URL(fileURLWithPath: rules))
            let mapping = ["--claim-spaces", "/groups", "--claim-roles", "/realm_access/roles", "--claim-scope-write", "outpost:write",
                           "--claim-admin", "/realm_access/roles=outpost-admin", "--rules", rules]
            try await Self.withProvider(arguments: mapping, serve: { $0.serve(keys: [key]) }) { _, server in
                func keycloak(groups: [String], scope: String, roles: [String], extra: JSONObject = [:]) throws -> String {
                    var c = Self.claims(spaces: [], scope: scope, aud: ["account", .string(Self.audience)], extra: extra)
                    c["spaces"] = nil
                    c["groups"] = .array(groups.map { .string($0) })
                    c["realm_access"] = ["roles": .array(roles.map { .string($0) })]
                    c["preferred_username"] = "alice"
                    return try key.token(c)
                }
                let editor = try keycloak(groups: ["team-1"], scope: "openid profile email outpost:write", roles: ["editor", "offline_access"])
                let pushed = try await Self.push(server, editor, [put("k1", "n1", ["t": "x"], collection: "notes")])
                #expect(try pushed.status == 200 && Self.appliedCount(pushed) == 1, "\(pushed.text)")
                #expect(try await Self.push(server, editor, [put("k2", "n2", collection: "notes")], space: "team-2").status == 403)
                // Without the write scope word: read only.
                let reader = try keycloak(groups: ["team-1"], scope: "openid profile email", roles: ["editor"])
                #expect(try await Self.push(server, reader, [put("k3", "n3", collection: "notes")]).status == 403)
                #expect(try await Self.pull(server, reader).status == 200)
                // Write scope but not the editor role: the rules refuse the note, not the todo.
                let writer = try keycloak(groups: ["team-1"], scope: "outpost:write", roles: ["offline_access"])
                let judged = try PushResponse.decode(try await Self.push(server, writer, [put("k4", "n4", collection: "notes"), put("k5", "t5")]).body)
                #expect(judged.results.map(\.status) == [.rejected, .applied])
                #expect(judged.results.first?.error?.code == "forbidden")
                // Admin only from the realm role; a token's own "admin": true counts for nothing.
                let notAdmin = try keycloak(groups: [], scope: "openid", roles: ["editor"], extra: ["admin": true])
                #expect(try await httpRequestAsync(port: server.port, "GET", "/v1/admin/spaces", headers: [("Authorization", "Bearer \(notAdmin)")]).status == 403)
                let operatorToken = try keycloak(groups: [], scope: "openid", roles: ["outpost-admin"])
                let spaces = try await httpRequestAsync(port: server.port, "GET", "/v1/admin/spaces", headers: [("Authorization", "Bearer \(operatorToken)")])
                #expect(spaces.status == 200 && spaces.text.contains("team-1"), "\(spaces.text)")
                // The value matches exactly: a string claim equal to it, or an array element
                // equal to it; never a word inside a longer string.
                func admin(_ roles: JSONValue) async throws -> Int {
                    var c = Self.claims(spaces: [], scope: "openid", aud: .string(Self.audience))
                    c["realm_access"] = ["roles": roles]
                    let token = try key.token(c)
                    return try await httpRequestAsync(port: server.port, "GET", "/v1/admin/spaces", headers: [("Authorization", "Bearer \(token)")]).status
                }
                #expect(try await admin("outpost-admin") == 200)
                #expect(try await admin(["x", "outpost-admin"]) == 200)
                #expect(try await admin("offline_access outpost-admin") == 403)
                #expect(try await admin(["offline_access outpost-admin"]) == 403)
                #expect(try await admin("outpost-admin ") == 403)
                #expect(try await admin(["outpost-administrator"]) == 403)
            }
        }
    }

    /// The JWK Set URL is logged without the credentials and the query it may carry: a
    /// fetch through a URL with both loads the keys, and the server's log names the URL as
    /// scheme, host, port and path only.
    @Test func theKeySetURLIsLoggedWithoutItsCredentialsOrQuery() async throws {
        let key = try await ProviderKey.rsa("logged-key")
        try await withTemporaryDirectory(prefix: "outpost-jwks-log") { dir in
            let provider = try JWKSTestServer()
            provider.serve(keys: [key])
            let url = "http://operator:pa55word@127.0.0.1:\(provider.port)\(JWKSTestServer.path)?client_secret=s3cret"
            let text: String
            do {
                let server = try await blocking {
                    try ServerProcess(dataDirectory: dir.appending("data"),
                                      arguments: ["--jwks-url", url, "--jwt-issuer", Self.issuer, "--jwks-timeout", "30"])
                }
                let admin = try await blocking { try server.token(spaces: [], admin: true) }
                try await Self.keysLoaded(server, 1, admin: admin)
                #expect(try await blocking { server.stop() } == 0)
                text = server.log.value.joined(separator: "\n")
            } catch {
                await provider.stop()
                throw error
            }
            await provider.stop()
            #expect(text.contains("\"source\":\"http://127.0.0.1:\(provider.port)\(JWKSTestServer.path)\""), "\(text)")
            #expect(!text.contains("pa55word") && !text.contains("s3cret") && !text.contains("operator"), "\(text)")
        }
    }

    /// An Auth0-shaped provider: namespaced custom claims (names that are URLs), RBAC
    /// permissions as the scope, an audience among several.
    @Test func anAuth0ShapedTokenDrivesSpacesAndScopeThroughNamespacedClaims() async throws {
        let key = try await ProviderKey.rsa("auth0-key")
        let mapping = ["--claim-spaces", "https://outpost.example.com/spaces", "--claim-scope", "/permissions",
                       "--claim-scope-write", "write:records", "--claim-roles", "https://outpost.example.com/roles"]
        try await Self.withProvider(arguments: mapping, serve: { $0.serve(keys: [key]) }) { _, server in
            func auth0(spaces: [String], permissions: [String]) throws -> String {
                var c = Self.claims(spaces: [], scope: "openid profile", aud: [.string(Self.audience), "https://tenant.eu.auth0.com/userinfo"])
                c["spaces"] = nil
                c["https://outpost.example.com/spaces"] = .array(spaces.map { .string($0) })
                c["https://outpost.example.com/roles"] = ["supervisor"]
                c["permissions"] = .array(permissions.map { .string($0) })
                c["azp"] = "client-id"
                return try key.token(c)
            }
            let writer = try auth0(spaces: ["team-7"], permissions: ["read:records", "write:records"])
            let pushed = try await Self.push(server, writer, [put("a1", "r1")], space: "team-7")
            #expect(try pushed.status == 200 && Self.appliedCount(pushed) == 1, "\(pushed.text)")
            #expect(try await Self.push(server, writer, [put("a2", "r2")], space: "other").status == 403)
            // A provider's names are literal: a group named `team-*` or `*` names no space,
            // never every space it would match as a prefix in a token the server signs.
            for wildcard in [["team-*"], ["*"], ["team-7*"]] {
                let claimed = try auth0(spaces: wildcard, permissions: ["read:records", "write:records"])
                #expect(try await Self.push(server, claimed, [put("a4", "r4")], space: "team-7").status == 403, "\(wildcard)")
                #expect(try await Self.pull(server, claimed, "team-7").status == 403, "\(wildcard)")
            }
            let reader = try auth0(spaces: ["team-7"], permissions: ["read:records"])
            #expect(try await Self.push(server, reader, [put("a3", "r3")], space: "team-7").status == 403)
            let pulled = try await Self.pull(server, reader, "team-7")
            #expect(try pulled.status == 200 && PullPage.decode(pulled.body).changes.map(\.id) == ["r1"])
        }
    }
}
