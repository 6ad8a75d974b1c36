import OutpostCore
import OutpostCrypto

/// Section 2, auth: bearer HS256 tokens, spaces, scopes.
enum AuthChecks {
    /// Fails unless `response` is `401 unauthorized` with `WWW-Authenticate: Bearer…`.
    static func expectUnauthorized(_ response: RawResponse, _ what: String) throws {
        try expectError(response, 401, "unauthorized", what)
        let challenge = response.header("WWW-Authenticate") ?? ""
        try expect(challenge.lowercased().hasPrefix("bearer"), "\(what): 401 must carry WWW-Authenticate: Bearer, got \"\(challenge)\"")
    }

    /// Pulls and pushes in `space` with `authorization` as the header value (nil: no
    /// header) and expects 401 for both.
    static func expectRefused(_ c: CheckContext, _ space: String, authorization: String?, _ what: String) async throws {
        let headers = authorization.map { [("Authorization", $0)] } ?? []
        let pull = try await c.send("GET", CheckContext.spacePath(space, "pull"), headers: headers)
        try expectUnauthorized(pull, "pull with \(what)")
        let change = ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)
        let body = JSONValue.object(["clientId": "conformance", "changes": [change]]).encoded()
        let push = try await c.send("POST", CheckContext.spacePath(space, "push"), headers: headers + [("Content-Type", "application/json")], body: body)
        try expectUnauthorized(push, "push with \(what)")
    }

    static func claims(_ space: String) -> TokenSigner.Claims {
        TokenSigner.Claims(spaces: [space], scope: "write")
    }

    static let all: [Check] = [
        Check("auth-missing-token-401", section: "2", "a request without Authorization is 401 unauthorized with WWW-Authenticate: Bearer") { c in
            let space = c.newSpace()
            try await expectRefused(c, space, authorization: nil, "no Authorization header")
        },
        Check("auth-malformed-token-401", section: "2", "a malformed bearer token, or another scheme, is 401") { c in
            let space = c.newSpace()
            for (value, what) in [("Bearer", "an empty bearer token"), ("Bearer abc", "a token of one part"),
                                  ("Bearer a.b", "a token of two parts"), ("Bearer !!.??.**", "a token that is not base64url"),
                                  ("Basic Y29uZm9ybWFuY2U6eA==", "Basic credentials")] {
                try await expectRefused(c, space, authorization: value, what)
            }
            let notJSON = "Bearer " + [Base64.encodeURL(Array("not json".utf8)), Base64.encodeURL(Array("{}".utf8)), "AAAA"].joined(separator: ".")
            let response = try await c.send("GET", CheckContext.spacePath(space, "pull"), headers: [("Authorization", notJSON)])
            try expectUnauthorized(response, "pull with a token whose header is not JSON")
        },
        Check("auth-expired-token-401", section: "2", "a token whose exp has passed is 401") { c in
            let space = c.newSpace()
            var claims = claims(space)
            claims.exp = unixNow() - 3600
            try await expectRefused(c, space, authorization: "Bearer " + c.signer.token(claims), "a token that expired an hour ago")
        },
        Check("auth-missing-claims-401", section: "2", "a token without the required sub or exp claim is 401") { c in
            let space = c.newSpace()
            var noExp = claims(space)
            noExp.exp = nil
            try await expectRefused(c, space, authorization: "Bearer " + c.signer.token(noExp), "a token without exp")
            var noSub = claims(space)
            noSub.sub = nil
            try await expectRefused(c, space, authorization: "Bearer " + c.signer.token(noSub), "a token without sub")
        },
        Check("auth-tampered-payload-401", section: "2", "a token whose payload was changed after signing is 401") { c in
            let space = c.newSpace()
            let original = c.signer.token(TokenSigner.Claims(spaces: ["someone-else"], scope: "read")).split(separator: ".")
            let forged = Base64.encodeURL(TokenSigner.Claims(spaces: [space, "*"], scope: "write", admin: true).json.encoded())
            try await expectRefused(c, space, authorization: "Bearer \(original[0]).\(forged).\(original[2])", "a forged payload under the original signature")
        },
        Check("auth-tampered-signature-401", section: "2", "a token with a changed signature, or signed with another secret, is 401") { c in
            let space = c.newSpace()
            var parts = c.signer.token(claims(space)).split(separator: ".").map(String.init)
            let first = parts[2].first!
            parts[2] = (first == "A" ? "B" : "A") + parts[2].dropFirst()
            try await expectRefused(c, space, authorization: "Bearer " + parts.joined(separator: "."), "a token with one signature character changed")
            let otherSecret = c.signer.token(header: ["alg": "HS256", "typ": "JWT"], payload: claims(space).json,
                                             key: Array("not-the-server-secret".utf8) + c.signer.secret)
            try await expectRefused(c, space, authorization: "Bearer " + otherSecret, "a token signed with another secret")
            let unsigned = c.signer.unsignedToken(header: ["alg": "HS256", "typ": "JWT"], payload: claims(space).json)
            try await expectRefused(c, space, authorization: "Bearer " + unsigned, "an HS256 token with an empty signature")
        },
        Check("auth-alg-none-401", section: "2", "a token with alg none is 401, with or without a signature") { c in
            let space = c.newSpace()
            let payload = claims(space).json
            for alg in ["none", "None", "NONE"] {
                let header: JSONValue = ["alg": .string(alg), "typ": "JWT"]
                try await expectRefused(c, space, authorization: "Bearer " + c.signer.unsignedToken(header: header, payload: payload), "alg \(alg) and no signature")
                try await expectRefused(c, space, authorization: "Bearer " + c.signer.token(header: header, payload: payload), "alg \(alg) with an HMAC signature")
            }
        },
        Check("auth-other-alg-401", section: "2", "a token naming an algorithm other than HS256 (HS512, RS256, hs256) is 401 even with a valid HMAC-SHA256 signature") { c in
            let space = c.newSpace()
            for alg in ["HS512", "HS384", "RS256", "ES256", "hs256"] {
                let token = c.signer.token(header: ["alg": .string(alg), "typ": "JWT"], payload: claims(space).json)
                try await expectRefused(c, space, authorization: "Bearer " + token, "alg \(alg)")
            }
            let noAlg = c.signer.token(header: ["typ": "JWT"], payload: claims(space).json)
            try await expectRefused(c, space, authorization: "Bearer " + noAlg, "a header without alg")
        },
        Check("auth-other-space-403", section: "2", "a valid token without access to the space is 403 forbidden, for push and pull") { c in
            let space = c.newSpace()
            let token = c.writeToken(c.newSpace())
            try expectError(try await c.pullResponse(space, token: token), 403, "forbidden", "pull with a token for another space")
            let change = ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)
            let push = try await c.postJSON(CheckContext.spacePath(space, "push"), ["clientId": "c", "changes": [change]], token: token)
            try expectError(push, 403, "forbidden", "push with a token for another space")
            let prefixOfName = c.token([String(space.dropLast())], scope: "write")
            try expectError(try await c.pullResponse(space, token: prefixOfName), 403, "forbidden",
                            "pull with a token naming a prefix of the space without *")
        },
        Check("auth-space-prefix-wildcard", section: "2", "a spaces entry ending in * grants every space with that prefix and no other") { c in
            let prefix = c.newSpace()
            let token = c.token([prefix + "*"], scope: "write")
            for space in [prefix, prefix + "-a", prefix + ".b"] {
                _ = try await c.pull(space, token: token)
                let reply = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)], token: token)
                _ = try expectApplied(reply.results[0], "push to \(space) with a token for \(prefix)*")
            }
            try expectError(try await c.pullResponse(c.newSpace(), token: token), 403, "forbidden", "pull outside the prefix")
        },
        Check("auth-all-spaces-star", section: "2", "a spaces entry \"*\" grants every space") { c in
            let token = c.token(["*"], scope: "write")
            let space = c.newSpace()
            _ = try await c.pull(space, token: token)
            let reply = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)], token: token)
            _ = try expectApplied(reply.results[0], "push with a token for \"*\"")
        },
        Check("auth-read-scope-cannot-push-403", section: "2", "a read-scope token may not push: 403 forbidden") { c in
            let space = c.newSpace()
            let change = ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)
            let push = try await c.postJSON(CheckContext.spacePath(space, "push"), ["clientId": "c", "changes": [change]], token: c.readToken(space))
            try expectError(push, 403, "forbidden", "push with a read token")
            let pull = try await c.pull(space)
            try expect(pull.page.changes.isEmpty, "a push refused with 403 wrote \(pull.page.changes.count) record(s)")
        },
        Check("auth-read-scope-can-pull", section: "2", "a read-scope token may pull") { c in
            let space = c.newSpace()
            try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)])
            let reply = try await c.pull(space, token: c.readToken(space))
            try expect(reply.page.changes.count == 1, "pull with a read token: expected the 1 record, got \(reply.page.changes.count)")
        },
        Check("auth-default-scope-is-read", section: "2", "a token without a scope claim is read-only: pull 200, push 403") { c in
            let space = c.newSpace()
            let token = c.token([space], scope: nil)
            _ = try await c.pull(space, token: token)
            let change = ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)
            let push = try await c.postJSON(CheckContext.spacePath(space, "push"), ["clientId": "c", "changes": [change]], token: token)
            try expectError(push, 403, "forbidden", "push with a token without scope")
        },
    ]
}
