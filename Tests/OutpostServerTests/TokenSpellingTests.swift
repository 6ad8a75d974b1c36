import Foundation
import OutpostCore
import OutpostCrypto
import OutpostSignatures
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// A token has one spelling: every part of a compact JWS must be canonical base64url, so
/// `=` padding on any part, signed or not, is refused (docs/security.md, "Tokens").
/// Over a real socket against an in-process server on a real SQLite file.
@Suite struct TokenSpellingTests {
    /// An HS256 token over the three parts as given, `=` appended to the parts named, and
    /// signed over the header and payload exactly as spelled.
    static func token(padding parts: Set<Int>, with pad: String = "=", secret: String = TestServer.secret, space: String = "sp") -> String {
        let header = JSONValue.object(["alg": "HS256", "typ": "JWT"]).encoded()
        let payload = JSONValue.object(["sub": "mallory", "exp": .number(JSONNumber(epochSeconds() + 3600)),
                                        "spaces": [.string(space)], "scope": "write"]).encoded()
        var h = Base64.encodeURL(header), p = Base64.encodeURL(payload)
        if parts.contains(0) { h += pad }
        if parts.contains(1) { p += pad }
        let input = h + "." + p
        var s = Base64.encodeURL(HMACSHA256.authenticate(Array(input.utf8), key: Array(secret.utf8)))
        if parts.contains(2) { s += pad }
        return input + "." + s
    }

    @Test func paddingOnAnyPartOfAnHS256TokenIsRefused() async throws {
        try await withServer { server in
            let good = try await server.pull("sp", token: Self.token(padding: []))
            #expect(good.status == 200, "\(good.text)")
            for part in 0..<3 {
                for padding in ["=", "=="] {
                    let r = try await server.pull("sp", token: Self.token(padding: [part], with: padding))
                    #expect(r.status == 401, "part \(part) \(padding): \(r.status) \(r.text)")
                    #expect(r.text.contains("canonical base64url"), "\(r.text)")
                }
            }
        }
    }

    /// The same rule holds for provider tokens, which go through the same parser.
    @Test func compactJWSRefusesPaddingOnEveryPart() throws {
        let token = Self.token(padding: [])
        #expect(throws: Never.self) { try CompactJWS(token, accepted: ["HS256"]) }
        for part in 0..<3 {
            let padded = Self.token(padding: [part])
            do {
                let jws = try CompactJWS(padded, accepted: ["HS256", "RS256"])
                // The header parsed: the payload or the signature is the padded part.
                #expect(part != 0)
                if part == 1 { #expect(throws: TokenError.self) { try jws.claims() } }
                if part == 2 { #expect(jws.signature == nil) }
            } catch {
                #expect(part == 0 && error == .malformed("header is not canonical base64url JSON"))
            }
        }
    }
}
