import Foundation
import OutpostCore
import OutpostHTTP

/// Turns a request's `Authorization` header into claims and checks them against a space
/// and scope (PROTOCOL.md section 2). Runs before the body is read, so an unauthorized
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
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw .unauthorizedToken("the Authorization header must be Bearer <token>", error: "invalid_request")
        }
        do {
            return try await authority.verify(String(parts[1]).trimmingCharacters(in: .whitespaces), now: now())
        } catch {
            throw .unauthorizedToken(error.message)
        }
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
