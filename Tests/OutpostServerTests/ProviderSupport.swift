import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import OutpostSignatures
import OutpostTestSupport
import Synchronization

/// An identity provider's JWKS endpoint for the tests: an `HTTPServer` on 127.0.0.1 port 0
/// in this process, whose answer the test sets (a key set, an error status, a huge body,
/// or a response held until the test releases it) and which counts the requests it gets.
final class JWKSTestServer: Sendable {
    enum Answer: Sendable {
        /// A JWK Set, with a `Cache-Control` header when given.
        case keys(JSONValue, cacheControl: String?)
        /// An error status with a small body.
        case status(Int)
        /// `bytes` bytes of JSON-looking filler: with `Content-Length`, or streamed with
        /// chunked encoding (so only the reader's count can stop it).
        case huge(bytes: Int, chunked: Bool)
    }

    private struct State {
        var answer: Answer = .status(503)
        /// When true, requests wait (counted) until `release`.
        var holding = false
        var held: [CheckedContinuation<Void, Never>] = []
        var fetches = 0
        /// Requests to any other path (a `jku` a token pointed at, say).
        var elsewhere = 0
        /// Streamed (chunked) huge answers begun.
        var streamed = 0
    }

    private let state = Mutex(State())
    /// Requests that began to wait for `release`, counted as each begins.
    private let heldSoFar = Watched(0)
    private let http: HTTPServer
    let port: Int

    static let path = "/realms/outpost/protocol/openid-connect/certs"

    init() throws {
        let state = Box()
        var router = Router()
        router.add(.GET, Self.path) { _ in try await state.server!.answer() }
        router.add(.GET, "/elsewhere/{name}") { _ in
            state.server!.state.withLock { $0.elsewhere += 1 }
            return HTTPResponse(json: Array(#"{"keys":[]}"#.utf8))
        }
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.eventLoopCount = 1
        configuration.shutdownGrace = .seconds(2)
        http = HTTPServer(configuration: configuration, router: router)
        port = try http.start()
        state.server = self
    }

    /// Lets the router's handler reach the server it belongs to (set once, after `init`).
    private final class Box: @unchecked Sendable {
        // @unchecked: written once in `init` before the first request can arrive, read after.
        var server: JWKSTestServer?
    }

    var url: String { "http://127.0.0.1:\(port)\(Self.path)" }
    func elsewhereURL(_ name: String) -> String { "http://127.0.0.1:\(port)/elsewhere/\(name)" }

    /// Requests received on the key set's path (held ones included).
    var fetches: Int { state.withLock { $0.fetches } }
    var elsewhereRequests: Int { state.withLock { $0.elsewhere } }
    var streamedAnswers: Int { state.withLock { $0.streamed } }
    /// Requests waiting for `release`.
    var heldCount: Int { state.withLock { $0.held.count } }

    /// Waits until a request has begun to wait for `release`.
    func untilHolding() async throws {
        try await heldSoFar.until("a request held by the provider") { $0 >= 1 }
    }

    func serve(_ answer: Answer) {
        state.withLock { $0.answer = answer }
    }

    /// Serves `keys` as a JWK Set.
    func serve(keys: [ProviderKey], extra: [JSONValue] = [], cacheControl: String? = "public, max-age=3600") {
        serve(.keys(.object(["keys": .array(keys.map(\.jwk) + extra)]), cacheControl: cacheControl))
    }

    /// From now on, requests wait until `release`.
    func hold() {
        state.withLock { $0.holding = true }
    }

    /// Answers every waiting request and stops holding.
    func release() {
        let waiting = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.holding = false
            defer { s.held = [] }
            return s.held
        }
        for c in waiting { c.resume() }
    }

    private func answer() async throws -> HTTPResponse {
        let hold = state.withLock { s -> Bool in
            s.fetches += 1
            return s.holding
        }
        if hold {
            await withCheckedContinuation { c in
                let now = state.withLock { s -> Bool in
                    guard s.holding else { return true }
                    s.held.append(c)
                    return false
                }
                if now { c.resume() } else { heldSoFar.add() }
            }
        }
        switch state.withLock({ $0.answer }) {
        case .keys(let set, let cacheControl):
            var headers = HTTPHeaders()
            if let cacheControl { headers.add(name: "Cache-Control", value: cacheControl) }
            return HTTPResponse(json: set.encoded(), headers: headers)
        case .status(let code):
            return HTTPResponse(status: HTTPStatus(code: code), json: Array(#"{"error":"unavailable"}"#.utf8))
        case .huge(let bytes, let chunked):
            var headers = HTTPHeaders()
            // Not a textual type: the engine sends it as it is, never gzipped.
            headers.add(name: "Content-Type", value: "application/octet-stream")
            let chunk = [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024)
            if !chunked {
                return HTTPResponse(headers: headers, body: .bytes(Array(#"{"keys":["#.utf8) + [UInt8](repeating: UInt8(ascii: " "), count: bytes)))
            }
            state.withLock { $0.streamed += 1 }
            return HTTPResponse(headers: headers, body: .stream(length: nil) { writer in
                try await writer.write(#"{"keys":["#)
                var sent = 0
                while sent < bytes {
                    try await writer.write(chunk)
                    sent += chunk.count
                }
            })
        }
    }

    func stop() async {
        release()
        await http.shutdown(grace: .seconds(2))
    }
}

/// A signing key of the test's identity provider, with its public JWK.
struct ProviderKey: Sendable {
    enum Material: Sendable {
        case rsa(RSAPrivateKey)
        case ec(P256PrivateKey)
    }

    let kid: String
    let material: Material
    /// Members added to (or replacing those of) the public JWK: `alg`, `use`, `crv`…
    var jwkExtra: JSONObject = [:]

    /// A new RSA key, generated on a thread of its own: key generation takes a core for a
    /// while, and the concurrency pool must stay free for the in-process servers' handlers.
    static func rsa(_ kid: String, bits: Int = 2048) async throws -> ProviderKey {
        ProviderKey(kid: kid, material: .rsa(try await blocking { try RSAPrivateKey.generate(bits: bits) }))
    }

    static func ec(_ kid: String) async throws -> ProviderKey {
        ProviderKey(kid: kid, material: .ec(try await blocking { try P256PrivateKey.generate() }))
    }

    /// The algorithm this key signs.
    var alg: String {
        switch material {
        case .rsa: "RS256"
        case .ec: "ES256"
        }
    }

    /// The public JWK, as a provider publishes it.
    var jwk: JSONValue {
        var o: JSONObject
        switch material {
        case .rsa(let key):
            o = ["kty": "RSA", "kid": .string(kid), "use": "sig", "alg": "RS256",
                 "n": .string(Base64.encodeURL(key.modulus)), "e": .string(Base64.encodeURL(key.publicExponent))]
        case .ec(let key):
            o = ["kty": "EC", "kid": .string(kid), "use": "sig", "alg": "ES256", "crv": "P-256",
                 "x": .string(Base64.encodeURL(key.x)), "y": .string(Base64.encodeURL(key.y))]
        }
        for (k, v) in jwkExtra { o[k] = v }
        return .object(o)
    }

    /// The public key as DER SubjectPublicKeyInfo.
    var publicKeyDER: [UInt8] {
        switch material {
        case .rsa(let key): key.publicKeyDER
        case .ec(let key): (try? key.publicKey().derRepresentation) ?? []
        }
    }

    /// A compact token: the header is `{"alg", "typ": "JWT", "kid"}` with `header`'s members
    /// over it, signed by this key whatever the header says (`alg` in `header` lies about it).
    func token(_ payload: JSONObject, header: JSONObject = [:]) throws -> String {
        var h: JSONObject = ["alg": .string(alg), "typ": "JWT", "kid": .string(kid)]
        for (k, v) in header { h[k] = v }
        let input = Base64.encodeURL(JSONValue.object(h).encoded()) + "." + Base64.encodeURL(JSONValue.object(payload).encoded())
        let signature: [UInt8]
        switch material {
        case .rsa(let key): signature = try key.signRS256(Array(input.utf8))
        case .ec(let key): signature = try key.signES256(Array(input.utf8))
        }
        return input + "." + Base64.encodeURL(signature)
    }
}

/// A compact HS256 token over `header` and `payload`, keyed by `key`: what an attacker
/// makes with a provider's public key as the "secret".
func hmacToken(_ payload: JSONObject, key: [UInt8], header: JSONObject = ["alg": "HS256", "typ": "JWT"]) -> String {
    let input = Base64.encodeURL(JSONValue.object(header).encoded()) + "." + Base64.encodeURL(JSONValue.object(payload).encoded())
    return input + "." + Base64.encodeURL(HMACSHA256.authenticate(Array(input.utf8), key: key))
}

/// Seconds since 1970, now.
func epochSeconds() -> Int64 { Int64(Date().timeIntervalSince1970) }
