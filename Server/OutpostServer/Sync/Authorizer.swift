import Foundation
import OutpostCore
import OutpostHTTP

/// Turns a request's `Authorization` header into claims and checks them against a space
/// and scope (docs/protocol.md section 2). Runs before the body is read, so an unauthorized
/// client never gets to upload its body. Async because a provider token may wait for its
/// key set (`ServerTokens`); an HS256 token never suspends.
public struct Authorizer: Sendable {
    /// What verifies the tokens (`JWTAuthority` with the server's secrets, behind
    /// `ServerTokens` when an identity provider is configured).
    public let authority: any TokenVerifier
    /// Time source in seconds since 1970 (tests move it).
    let now: @Sendable () -> Int64

    public init(authority: any TokenVerifier, now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) {
        self.authority = authority
        self.now = now
    }

    /// The verified claims of the request's bearer token: `401` when missing or invalid.
    public func claims(_ head: HTTPRequestHead) async throws(HTTPError) -> Claims {
        guard let header = head.headers["Authorization"] else {
            throw .unauthorizedToken("an Authorization: Bearer token is required", error: nil)
        }
        guard let token = Self.bearerToken(header) else {
            throw .unauthorizedToken("the Authorization header must be Bearer <token>", error: "invalid_request")
        }
        do {
            return try await authority.verify(token, now: now())
        } catch {
            throw .unauthorizedToken(error.message)
        }
    }

    /// The token of an `Authorization: Bearer <token>` value, read on its UTF-8 bytes: the
    /// scheme (any case) after any spaces, one space, then the token without the spaces
    /// and tabs around it; nil when the value is not of that shape.
    static func bearerToken(_ value: String) -> String? {
        let utf8 = value.utf8
        let space = UInt8(ascii: " "), tab = UInt8(ascii: "\t")
        guard let schemeStart = utf8.firstIndex(where: { $0 != space }) else { return nil }
        guard let schemeEnd = utf8[schemeStart...].firstIndex(of: space) else { return nil }
        let scheme = utf8[schemeStart..<schemeEnd]
        guard scheme.count == 6, zip(scheme, "bearer".utf8).allSatisfy({ $0 | 0x20 == $1 }) else { return nil }
        let rest = utf8[utf8.index(after: schemeEnd)...]
        guard !rest.isEmpty else { return nil }
        guard let first = rest.firstIndex(where: { $0 != space && $0 != tab }),
              let last = rest.lastIndex(where: { $0 != space && $0 != tab })
        else { return "" }
        return String(Substring(value.utf8[first...last]))
    }

    /// Claims that allow `scope` in `space`: `401` for a bad token, `403` otherwise.
    public func authorize(_ head: HTTPRequestHead, space: String, scope: Claims.Scope) async throws(HTTPError) -> Claims {
        let claims = try await claims(head)
        guard claims.allows(space: space) else {
            throw HTTPError(HTTPStatus(code: 403), .forbidden, "the token gives no access to space \(space)")
        }
        guard claims.permits(scope, in: space) else {
            throw HTTPError(HTTPStatus(code: 403), .forbidden, "the token's scope is read; this needs write")
        }
        return claims
    }

    /// Claims of an admin token: `401`, or `403` when not admin.
    public func authorizeAdmin(_ head: HTTPRequestHead) async throws(HTTPError) -> Claims {
        let claims = try await claims(head)
        guard claims.admin else { throw HTTPError(HTTPStatus(code: 403), .forbidden, "this needs an admin token") }
        return claims
    }
}
