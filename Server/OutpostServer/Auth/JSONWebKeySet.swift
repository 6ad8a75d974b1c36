import OutpostCore
import OutpostCrypto
import OutpostSignatures

/// A key that verifies provider tokens: RSA for RS256, P-256 for ES256.
enum VerificationKey: Sendable {
    case rsa(RSAPublicKey)
    case p256(P256PublicKey)

    /// The one algorithm this key verifies.
    var algorithm: String {
        switch self {
        case .rsa: "RS256"
        case .p256: "ES256"
        }
    }

    /// What the key is, for messages.
    var kind: String {
        switch self {
        case .rsa(let key): "an RSA key (\(key.bits) bits)"
        case .p256: "a P-256 key"
        }
    }

    /// True when `signature` is this key's signature of `message` under its algorithm.
    func verifies(_ signature: [UInt8], _ message: [UInt8]) -> Bool {
        switch self {
        case .rsa(let key): key.isValidRS256Signature(signature, for: message)
        case .p256(let key): key.isValidES256Signature(signature, for: message)
        }
    }
}

/// A JWK Set (RFC 7517 section 5) as the server uses it: by `kid`, the keys that verify
/// RS256 or ES256 tokens and, for every other key, why it cannot. A key that cannot be
/// used does not spoil the set (a provider may publish encryption keys, or keys of
/// algorithms Outpost does not take, beside its signing keys); a token naming it is
/// refused with the reason.
struct JSONWebKeySet: Sendable {
    /// One key of the set, usable or not.
    struct Entry: Sendable {
        let kid: String
        /// The JWK's own `alg`, when it has one.
        let alg: String?
        let key: Result<VerificationKey, Refusal>
    }

    /// Why a key of the set cannot verify anything.
    struct Refusal: Error, Sendable {
        let reason: String
    }

    /// Why a document is not a key set at all.
    struct Invalid: Error, Sendable, CustomStringConvertible {
        let description: String
    }

    /// The most keys a set may hold; a provider publishes a few.
    static let maximumKeys = 100

    /// Entries by `kid`; a kid may name several keys (one for signatures, one for
    /// encryption, say).
    let entries: [String: [Entry]]
    /// Keys without a `kid`: tokens must name their key, so these never verify one.
    let unnamed: Int

    /// Reads a JWK Set document: `Invalid` when it is not a JSON object with a `keys` array
    /// of objects, or holds more than `maximumKeys`.
    init(parsing bytes: [UInt8]) throws(Invalid) {
        guard case .object(let root)? = try? JSONParser(maxDepth: 8).parse(bytes) else {
            throw Invalid(description: "the JWK Set is not a JSON object")
        }
        guard case .array(let keys)? = root["keys"] else { throw Invalid(description: "the JWK Set has no keys array") }
        guard keys.count <= Self.maximumKeys else {
            throw Invalid(description: "the JWK Set holds \(keys.count) keys; at most \(Self.maximumKeys) are read")
        }
        var entries: [String: [Entry]] = [:]
        var unnamed = 0
        for item in keys {
            guard case .object(let jwk) = item else { throw Invalid(description: "an entry of keys is not a JSON object") }
            guard case .string(let kid)? = jwk["kid"], !kid.isEmpty else {
                unnamed += 1
                continue
            }
            let alg: String? = if case .string(let a)? = jwk["alg"] { a } else { nil }
            entries[kid, default: []].append(Entry(kid: kid, alg: alg, key: Self.key(jwk, alg: alg)))
        }
        self.entries = entries
        self.unnamed = unnamed
    }

    /// The keys that can verify something.
    var usableCount: Int {
        entries.values.reduce(0) { count, list in count + list.filter { if case .success = $0.key { true } else { false } }.count }
    }

    /// Every kid with the reason it cannot be used, for the log.
    var refusals: [String: String] {
        var out: [String: String] = [:]
        for (kid, list) in entries {
            for entry in list { if case .failure(let refusal) = entry.key { out[kid] = refusal.reason } }
        }
        return out
    }

    /// The outcome of looking up a token's key.
    enum Lookup {
        case found(VerificationKey)
        /// The set has no key of this kid.
        case unknown
        /// It has, but none can verify this token: why.
        case unusable(String)
    }

    /// The key `kid` names for a token of `alg`: a usable key of the right type whose own
    /// `alg`, when it has one, is the token's (RFC 7517 section 4.4).
    func lookup(kid: String, alg: String) -> Lookup {
        guard let list = entries[kid], !list.isEmpty else { return .unknown }
        var reason: String?
        for entry in list {
            switch entry.key {
            case .success(let key):
                if key.algorithm != alg {
                    reason = reason ?? "it is \(key.kind), which verifies \(key.algorithm), not \(alg)"
                } else if let own = entry.alg, own != alg {
                    reason = reason ?? "the key is for \(own), the token says \(alg)"
                } else {
                    return .found(key)
                }
            case .failure(let refusal):
                reason = reason ?? refusal.reason
            }
        }
        return .unusable(reason ?? "no key fits")
    }

    /// One JWK as a verification key, or why not (RFC 7517 section 4, RFC 7518 section 6).
    private static func key(_ jwk: JSONObject, alg: String?) -> Result<VerificationKey, Refusal> {
        if let use = jwk["use"] {
            guard use == .string("sig") else { return .failure(Refusal(reason: "its use is \(use.encodedText), not \"sig\"")) }
        }
        if let ops = jwk["key_ops"] {
            guard case .array(let list) = ops, list.contains(.string("verify")) else {
                return .failure(Refusal(reason: "its key_ops do not include \"verify\""))
            }
        }
        guard case .string(let kty)? = jwk["kty"] else { return .failure(Refusal(reason: "it has no kty")) }
        switch kty {
        case "RSA":
            if let alg, alg != "RS256" { return .failure(Refusal(reason: "its alg is \(alg); RSA keys are accepted for RS256 only")) }
            guard let n = member(jwk, "n"), let e = member(jwk, "e") else {
                return .failure(Refusal(reason: "an RSA key needs n and e in base64url"))
            }
            do {
                return .success(.rsa(try RSAPublicKey(modulus: n, exponent: e)))
            } catch {
                return .failure(Refusal(reason: Self.reason(error)))
            }
        case "EC":
            guard case .string(let crv)? = jwk["crv"] else { return .failure(Refusal(reason: "an EC key needs crv")) }
            guard crv == "P-256" else { return .failure(Refusal(reason: "its curve is \(crv); ES256 needs P-256")) }
            if let alg, alg != "ES256" { return .failure(Refusal(reason: "its alg is \(alg); P-256 keys are accepted for ES256 only")) }
            guard let x = member(jwk, "x"), let y = member(jwk, "y") else {
                return .failure(Refusal(reason: "an EC key needs x and y in base64url"))
            }
            do {
                return .success(.p256(try P256PublicKey(x: x, y: y)))
            } catch {
                return .failure(Refusal(reason: Self.reason(error)))
            }
        default:
            return .failure(Refusal(reason: "its key type is \(kty); only RSA and EC (P-256) keys are accepted"))
        }
    }

    private static func member(_ jwk: JSONObject, _ name: String) -> [UInt8]? {
        guard case .string(let text)? = jwk[name] else { return nil }
        return Base64.decodeURL(text)
    }

    private static func reason(_ error: CryptoError) -> String {
        switch error {
        case .invalidInput(let why): why
        default: error.description
        }
    }
}

private extension JSONValue {
    /// The value as compact JSON text, for messages.
    var encodedText: String { String(decoding: encoded(), as: UTF8.self) }
}
