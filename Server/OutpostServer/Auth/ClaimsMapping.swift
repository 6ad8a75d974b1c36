import OutpostCore

/// Where a claim sits in a token's payload: a JSON Pointer (RFC 6901) when it starts with
/// `/` (`/realm_access/roles`; `~1` stands for `/` and `~0` for `~` inside a name, and a
/// number steps into an array), else one top-level claim named exactly as written
/// (`cognito:groups`, `https://outpost.example.com/spaces`: Auth0's namespaced claims are
/// URLs, with dots and slashes).
public struct ClaimPath: Sendable, Equatable, CustomStringConvertible {
    /// The member names (or array indexes) from the payload's root.
    public let tokens: [String]
    /// The path as configured.
    public let description: String

    /// A bad path: the message says why.
    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    public init(_ text: String) throws(Invalid) {
        guard !text.isEmpty else { throw Invalid(description: "a claim path cannot be empty") }
        description = text
        guard text.hasPrefix("/") else {
            tokens = [text]
            return
        }
        var tokens: [String] = []
        for raw in text.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            var token = ""
            var escape = false
            for c in raw {
                if escape {
                    switch c {
                    case "0": token.append("~")
                    case "1": token.append("/")
                    default: throw Invalid(description: "\(text) is not a JSON Pointer: ~ must be followed by 0 or 1 (RFC 6901)")
                    }
                    escape = false
                } else if c == "~" {
                    escape = true
                } else {
                    token.append(c)
                }
            }
            guard !escape else { throw Invalid(description: "\(text) is not a JSON Pointer: it ends in a lone ~ (RFC 6901)") }
            tokens.append(token)
        }
        self.tokens = tokens
    }

    /// The value at this path in `payload`, nil when some step is missing.
    public func value(in payload: JSONObject) -> JSONValue? {
        var current = JSONValue.object(payload)
        for token in tokens {
            switch current {
            case .object(let members):
                guard let next = members[token] else { return nil }
                current = next
            case .array(let items):
                // RFC 6901 section 4: a decimal index without leading zeros.
                guard let index = Int(token), index >= 0, index < items.count, token == String(index) else { return nil }
                current = items[index]
            default:
                return nil
            }
        }
        return current
    }
}

/// How a provider token's claims become Outpost's (docs/deploying.md, "Identity
/// providers"): which claim holds the spaces, which the scope and the word in it that
/// grants write, which the roles the rules see as `auth.roles`, and which claim and value,
/// if any, make a token admin. HS256 tokens, which the server's own secret signs, keep the
/// fixed claims of docs/protocol.md section 2 and never go through a mapping.
public struct ClaimsMapping: Sendable {
    /// The claim naming the spaces: an array of names, or one string of names separated by
    /// spaces. Absent: no space. Each name is literal: one that is not a space name (a
    /// group `team-*`, say) names no space, never a wildcard as in a token the server signs.
    public var spaces: ClaimPath
    /// The claim holding the scope: a string of words separated by spaces (OAuth 2.0,
    /// RFC 6749 section 3.3), or an array of words (Auth0's `permissions`).
    public var scope: ClaimPath
    /// The word of `scope` that grants write; any other scope, or none, is read.
    public var writeScope: String
    /// The claim holding the roles, given to the rules as `auth.roles` (always an array,
    /// empty when the claim is absent).
    public var roles: ClaimPath
    /// The claim and the value that make a token admin: the claim is a string equal to the
    /// value, or an array with a string element equal to it (`true` matches a boolean
    /// true). Exact: a string that holds the value among other words is not it. Nil: a
    /// provider token is never admin, whatever it carries.
    public var admin: (path: ClaimPath, value: String)?

    /// The defaults: the same claim names an HS256 token uses.
    public init() {
        // Literal paths that parse: a failure here is a programming error.
        spaces = try! ClaimPath("/spaces")
        scope = try! ClaimPath("/scope")
        writeScope = "write"
        roles = try! ClaimPath("/roles")
        admin = nil
    }

    /// Parses `--claim-admin`'s `CLAIM=VALUE` (split at the first `=`).
    public static func adminRule(_ text: String) throws(ClaimPath.Invalid) -> (path: ClaimPath, value: String) {
        guard let eq = text.firstIndex(of: "="), eq != text.startIndex, text.index(after: eq) != text.endIndex else {
            throw ClaimPath.Invalid(description: "--claim-admin must be CLAIM=VALUE (for example /realm_access/roles=outpost-admin), not \"\(text)\"")
        }
        return (try ClaimPath(String(text[..<eq])), String(text[text.index(after: eq)...]))
    }

    /// The claims of a verified provider token's `payload` with subject `sub` and expiry `exp`.
    func claims(_ payload: JSONObject, sub: String, exp: Int64) throws(TokenError) -> Claims {
        guard let claimed = Self.words(spaces.value(in: payload)) else { throw .missingClaim("spaces (\(spaces))") }
        // A provider's names are literal: `Claims.allows` reads a trailing `*` as a prefix,
        // so only real space names go through (a space name never holds `*`).
        let spaceNames = claimed.filter(Names.isValidSpace)
        guard let scopeWords = Self.words(scope.value(in: payload)) else { throw .missingClaim("scope (\(scope))") }
        guard let roleNames = Self.words(roles.value(in: payload)) else { throw .missingClaim("roles (\(roles))") }
        var isAdmin = false
        if let admin {
            switch admin.path.value(in: payload) {
            case .bool(let b)?: isAdmin = b && admin.value == "true"
            case .string(let s)?: isAdmin = s == admin.value
            case .array(let items)?: isAdmin = items.contains(.string(admin.value))
            default: isAdmin = false
            }
        }
        var extra = payload
        extra["roles"] = .array(roleNames.map { .string($0) })
        return Claims(sub: sub, exp: exp, spaces: spaceNames, scope: scopeWords.contains(writeScope) ? .write : .read,
                      admin: isAdmin, extra: extra)
    }

    /// A claim read as a list of words: an array of strings, or a string split at spaces;
    /// absent or null is empty. Nil for any other shape.
    static func words(_ value: JSONValue?) -> [String]? {
        switch value {
        case nil, .null?: return []
        case .string(let s)?: return s.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).map(String.init)
        case .array(let items)?:
            var out: [String] = []
            for item in items {
                guard case .string(let s) = item else { return nil }
                out.append(s)
            }
            return out
        default: return nil
        }
    }
}
