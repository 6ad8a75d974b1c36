import OutpostCore
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import OutpostCrypto

/// scrypt of 128 MiB and PBKDF2 of 600,000 rounds keep a core busy: off the pool.
@Suite(.offPool) struct PassphraseWrapTests {
    let key = (0..<32).map { UInt8($0 * 7 & 0xFF) }
    let context = Array("key:k1 space:notes".utf8)

    /// The product's scrypt default: three derivations of N = 2^17, r = 8 (128 MiB each),
    /// which libcrypto refuses unless it is given a larger memory limit than its default.
    @Test func scryptDefaultRoundTrip() throws {
        let wrap = try PassphraseWrap.wrap(key: key, passphrase: "correct horse battery staple", context: context)
        #expect(wrap.function == .scrypt(n: 1 << 17, r: 8, p: 1))
        #expect(wrap.salt.count == 16 && wrap.nonce.count == 12 && wrap.sealed.count == 48)
        #expect(try wrap.unwrap(passphrase: "correct horse battery staple", context: context) == key)
        #expect(throws: CryptoError.authenticationFailed) {
            try wrap.unwrap(passphrase: "correct horse battery stapler", context: context)
        }
    }

    @Test func pbkdf2DefaultRoundTripAndFailures() throws {
        let wrap = try PassphraseWrap.wrap(key: key, passphrase: "pässwörd", context: context, function: PassphraseWrap.defaultPBKDF2)
        #expect(wrap.function == .pbkdf2SHA256(iterations: 600_000))
        #expect(try wrap.unwrap(passphrase: "pässwörd", context: context) == key)
        // The UTF-8 as given, without normalization: a decomposed "ä" is another passphrase.
        #expect(throws: CryptoError.authenticationFailed) {
            try wrap.unwrap(passphrase: "pa\u{0308}sswörd", context: context)
        }
        #expect(throws: CryptoError.authenticationFailed) {
            try wrap.unwrap(passphrase: "pässwörd", context: Array("key:k2 space:notes".utf8))
        }
        #expect(throws: CryptoError.authenticationFailed) { try wrap.unwrap(passphrase: "pässwörd", context: []) }
        var tampered = wrap
        tampered.sealed[40] ^= 1
        #expect(throws: CryptoError.authenticationFailed) { try tampered.unwrap(passphrase: "pässwörd", context: context) }
        tampered = wrap
        tampered.salt[0] ^= 1
        #expect(throws: CryptoError.authenticationFailed) { try tampered.unwrap(passphrase: "pässwörd", context: context) }
        // A function changed to another accepted one derives another key.
        tampered = wrap
        tampered.function = .pbkdf2SHA256(iterations: 600_001)
        #expect(throws: CryptoError.authenticationFailed) { try tampered.unwrap(passphrase: "pässwörd", context: context) }
        // Fresh salt and nonce each time; the fields round-trip through the public init.
        let again = try PassphraseWrap.wrap(key: key, passphrase: "pässwörd", context: context, function: PassphraseWrap.defaultPBKDF2)
        #expect(again.salt != wrap.salt && again.nonce != wrap.nonce && again.sealed != wrap.sealed)
        let rebuilt = PassphraseWrap(function: again.function, salt: again.salt, nonce: again.nonce, sealed: again.sealed)
        #expect(rebuilt == again)
    }

    /// Weak parameters are refused before anything is derived, on wrap and on unwrap.
    @Test func weakerParametersAreRefused() throws {
        let weak: [PassphraseWrap.Function] = [
            .scrypt(n: 1 << 16, r: 8, p: 1), .scrypt(n: 16, r: 1, p: 1), .scrypt(n: 1 << 17, r: 4, p: 1),
            .scrypt(n: 1 << 17, r: 8, p: 0), .pbkdf2SHA256(iterations: 599_999), .pbkdf2SHA256(iterations: 1),
            .pbkdf2SHA256(iterations: 0),
        ]
        // A crafted export: well-formed fields under a weak function (sealed with the key it
        // claims, so only the parameter check can stop it).
        let salt = [UInt8](repeating: 1, count: 16), nonce = [UInt8](repeating: 2, count: 12)
        let weakKey = try KDF.pbkdf2SHA256(password: Array("pw".utf8), salt: salt, iterations: 1, length: 32)
        let sealed = try AESGCM.seal(key, key: weakKey, nonce: nonce, aad: context)
        for function in weak {
            let wrapError = #expect(throws: CryptoError.self) {
                try PassphraseWrap.wrap(key: key, passphrase: "pw", context: context, function: function)
            }
            #expect(wrapError.map(isInvalidInput) == true, "\(function)")
            let crafted = PassphraseWrap(function: function, salt: salt, nonce: nonce, sealed: sealed)
            let unwrapError = #expect(throws: CryptoError.self) { try crafted.unwrap(passphrase: "pw", context: context) }
            #expect(unwrapError.map(isInvalidInput) == true, "\(function)")
        }
    }

    /// Parameters that would cost unbounded memory or time are refused too.
    @Test func costlierParametersAreRefused() throws {
        let costly: [PassphraseWrap.Function] = [
            .scrypt(n: 1 << 21, r: 8, p: 1), .scrypt(n: 1 << 17, r: 1 << 20, p: 1), .scrypt(n: 1 << 17, r: 8, p: 1 << 20),
            .scrypt(n: 1 << 63, r: 1 << 40, p: 1 << 40), .scrypt(n: 3 << 17, r: 8, p: 1),
            .pbkdf2SHA256(iterations: 60_000_001), .pbkdf2SHA256(iterations: Int.max),
        ]
        let crafted = { (function: PassphraseWrap.Function) in
            PassphraseWrap(function: function, salt: [UInt8](repeating: 0, count: 16), nonce: [UInt8](repeating: 0, count: 12),
                           sealed: [UInt8](repeating: 0, count: 48))
        }
        for function in costly {
            let error = #expect(throws: CryptoError.self) { try crafted(function).unwrap(passphrase: "pw", context: []) }
            #expect(error.map(isInvalidInput) == true, "\(function)")
            let wrapError = #expect(throws: CryptoError.self) {
                try PassphraseWrap.wrap(key: key, passphrase: "pw", context: [], function: function)
            }
            #expect(wrapError.map(isInvalidInput) == true, "\(function)")
        }
    }

    @Test func malformedFieldsAreRefused() throws {
        #expect(throws: CryptoError.invalidKeyLength(16)) {
            try PassphraseWrap.wrap(key: [UInt8](repeating: 0, count: 16), passphrase: "pw", context: [])
        }
        let good = PassphraseWrap(function: PassphraseWrap.defaultPBKDF2, salt: [UInt8](repeating: 0, count: 16),
                                  nonce: [UInt8](repeating: 0, count: 12), sealed: [UInt8](repeating: 0, count: 48))
        var w = good
        w.salt = [UInt8](repeating: 0, count: 15)
        #expect((#expect(throws: CryptoError.self) { try w.unwrap(passphrase: "pw", context: []) }).map(isInvalidInput) == true)
        w = good
        w.nonce = [UInt8](repeating: 0, count: 11)
        #expect(throws: CryptoError.invalidNonceLength(11)) { try w.unwrap(passphrase: "pw", context: []) }
        w = good
        w.sealed = [UInt8](repeating: 0, count: 47)
        #expect((#expect(throws: CryptoError.self) { try w.unwrap(passphrase: "pw", context: []) }).map(isInvalidInput) == true)
    }
}
