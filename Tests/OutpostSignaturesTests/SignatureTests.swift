import OutpostCrypto
import OutpostTestSupport
import Testing
@testable import OutpostSignatures

/// RS256 and ES256 (RFC 7518 section 3) against the examples of RFC 7515 appendix A, and
/// the refusals the verifiers make before libcrypto sees a byte.
@Suite struct SignatureTests {
    static func b64(_ text: String) -> [UInt8] {
        guard let bytes = Base64.decodeURL(text) else { fatalError("not base64url: \(text)") }
        return bytes
    }

    /// The JWS Signing Input of appendices A.2 and A.3: their protected header and the
    /// payload they share with A.1.
    static let payload = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"

    // RFC 7515 appendix A.2: the RSA key (A.2.1) and the RS256 signature (A.2.1, deterministic).
    enum A2 {
        static let n = b64("ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ")
        static let e = b64("AQAB")
        static let d = b64("Eq5xpGnNCivDflJsRQBXHx1hdR1k6Ulwe2JZD50LpXyWPEAeP88vLNO97IjlA7_GQ5sLKMgvfTeXZx9SE-7YwVol2NXOoAJe46sui395IW_GO-pWJ1O0BkTGoVEn2bKVRUCgu-GjBVaYLU6f3l9kJfFNS3E0QbVdxzubSu3Mkqzjkn439X0M_V51gfpRLI9JYanrC4D4qAdGcopV_0ZHHzQlBjudU2QvXt4ehNYTCBr6XCLQUShb1juUO1ZdiYoFaFQT5Tw8bGUl_x_jTj3ccPDVZFD9pIuhLhBOneufuBiB4cS98l2SR_RQyGWSeWjnczT0QU91p1DhOVRuOopznQ")
        static let p = b64("4BzEEOtIpmVdVEZNCqS7baC4crd0pqnRH_5IB3jw3bcxGn6QLvnEtfdUdiYrqBdss1l58BQ3KhooKeQTa9AB0Hw_Py5PJdTJNPY8cQn7ouZ2KKDcmnPGBY5t7yLc1QlQ5xHdwW1VhvKn-nXqhJTBgIPgtldC-KDV5z-y2XDwGUc")
        static let q = b64("uQPEfgmVtjL0Uyyx88GZFF1fOunH3-7cepKmtH4pxhtCoHqpWmT8YAmZxaewHgHAjLYsp1ZSe7zFYHj7C6ul7TjeLQeZD_YwD66t62wDmpe_HlB-TnBA-njbglfIsRLtXlnDzQkv5dTltRJ11BKBBypeeF6689rjcJIDEz9RWdc")
        static let dp = b64("BwKfV3Akq5_MFZDFZCnW-wzl-CCo83WoZvnLQwCTeDv8uzluRSnm71I3QCLdhrqE2e9YkxvuxdBfpT_PI7Yz-FOKnu1R6HsJeDCjn12Sk3vmAktV2zb34MCdy7cpdTh_YVr7tss2u6vneTwrA86rZtu5Mbr1C1XsmvkxHQAdYo0")
        static let dq = b64("h_96-mK1R_7glhsum81dZxjTnYynPbZpHziZjeeHcXYsXaaMwkOlODsWa7I9xXDoRwbKgB719rrmI2oKr6N3Do9U0ajaHF-NKJnwgjMd2w9cjz3_-kyNlxAr2v4IKhGNpmM5iIgOS1VZnOZ68m6_pbLBSp3nssTdlqvd0tIiTHU")
        static let qi = b64("IYd7DHOhrWvxkwPQsRM2tOgrjbcrfvtQJipd-DlcxyVuuM9sQLdgjVk2oy26F0EmpScGLq2MowX7fhd_QJQ3ydy5cY7YIBi87w93IKLEdfnbJtoOPLUW0ITrJReOgo1cq9SbsxYawBgfp_gh6A5603k2-ZQwVK0JKSHuLFkuQ3U")
        static let signingInput = Array(("eyJhbGciOiJSUzI1NiJ9." + payload).utf8)
        static let signature = b64("cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw")
    }

    // RFC 7515 appendix A.3: the P-256 key (A.3.1) and one ES256 signature (A.3.1; ECDSA
    // is randomized, so signing again gives another one that must verify too).
    enum A3 {
        static let x = b64("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU")
        static let y = b64("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0")
        static let d = b64("jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI")
        static let signingInput = Array(("eyJhbGciOiJFUzI1NiJ9." + payload).utf8)
        static let signature = b64("DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q")
    }

    @Test func rs256VerifiesAndReproducesTheRFC7515A2Example() throws {
        let key = try RSAPublicKey(modulus: A2.n, exponent: A2.e)
        #expect(key.bits == 2048 && key.signatureByteCount == 256)
        #expect(key.isValidRS256Signature(A2.signature, for: A2.signingInput))
        // PKCS #1 v1.5 is deterministic: the private key of A.2 signs the same bytes.
        let privateKey = try RSAPrivateKey(modulus: A2.n, publicExponent: A2.e, privateExponent: A2.d, prime1: A2.p, prime2: A2.q,
                                           exponent1: A2.dp, exponent2: A2.dq, coefficient: A2.qi)
        #expect(try privateKey.signRS256(A2.signingInput) == A2.signature)
        #expect(privateKey.modulus == A2.n && privateKey.publicExponent == A2.e)
    }

    @Test func rs256RefusesAnyChangeToTheSignatureOrTheMessage() throws {
        let key = try RSAPublicKey(modulus: A2.n, exponent: A2.e)
        var flipped = A2.signature
        flipped[100] ^= 0x01
        #expect(!key.isValidRS256Signature(flipped, for: A2.signingInput))
        var message = A2.signingInput
        message[message.count - 1] ^= 0x01
        #expect(!key.isValidRS256Signature(A2.signature, for: message))
        // Wrong lengths are refused before libcrypto: one byte short, one byte long, empty.
        #expect(!key.isValidRS256Signature(Array(A2.signature.dropLast()), for: A2.signingInput))
        #expect(!key.isValidRS256Signature(A2.signature + [0], for: A2.signingInput))
        #expect(!key.isValidRS256Signature([], for: A2.signingInput))
        // Leading zero bytes of a JWK's n are not part of the key's size.
        #expect(try RSAPublicKey(modulus: [0, 0] + A2.n, exponent: A2.e).bits == 2048)
    }

    @Test(.offPool) func rsaKeysUnder2048BitsAndBrokenKeysAreRefused() throws {
        let small = try RSAPrivateKey.generate(bits: 1024)
        #expect(small.bits == 1024)
        #expect(throws: CryptoError.invalidInput("an RSA key of 1024 bits; at least 2048 are required")) {
            try RSAPublicKey(modulus: small.modulus, exponent: small.publicExponent)
        }
        // One bit short of 2048.
        var short = A2.n
        short[0] = 0x7F
        #expect(throws: CryptoError.invalidInput("an RSA key of 2047 bits; at least 2048 are required")) {
            try RSAPublicKey(modulus: short, exponent: A2.e)
        }
        // An even modulus and an even exponent fail libcrypto's public check.
        var even = A2.n
        even[even.count - 1] &= 0xFE
        #expect(throws: CryptoError.self) { try RSAPublicKey(modulus: even, exponent: A2.e) }
        #expect(throws: CryptoError.self) { try RSAPublicKey(modulus: A2.n, exponent: [0x01, 0x00, 0x00]) }
        #expect(throws: CryptoError.self) { try RSAPublicKey(modulus: [], exponent: A2.e) }
        #expect(throws: CryptoError.self) { try RSAPublicKey(modulus: [UInt8](repeating: 0xFF, count: 1025), exponent: A2.e) }
    }

    @Test func es256VerifiesTheRFC7515A3ExampleAndItsOwnSignatures() throws {
        let key = try P256PublicKey(x: A3.x, y: A3.y)
        #expect(key.isValidES256Signature(A3.signature, for: A3.signingInput))
        let privateKey = try P256PrivateKey(x: A3.x, y: A3.y, d: A3.d)
        #expect(privateKey.x == A3.x && privateKey.y == A3.y)
        let signature = try privateKey.signES256(A3.signingInput)
        #expect(signature.count == 64)
        #expect(signature != A3.signature, "ECDSA signatures are randomized")
        #expect(key.isValidES256Signature(signature, for: A3.signingInput))
    }

    @Test func es256RefusesWrongLengthsDERAndChangedBytes() throws {
        let key = try P256PublicKey(x: A3.x, y: A3.y)
        var flipped = A3.signature
        flipped[5] ^= 0x01
        #expect(!key.isValidES256Signature(flipped, for: A3.signingInput))
        #expect(!key.isValidES256Signature(Array(A3.signature.dropLast()), for: A3.signingInput))
        #expect(!key.isValidES256Signature(A3.signature + [0], for: A3.signingInput))
        #expect(!key.isValidES256Signature(Array(A3.signature.prefix(32)), for: A3.signingInput))
        // The DER form of the same signature is not a JWS signature.
        let der = try #require(ECDSASignature.der(fromRaw: A3.signature))
        #expect(!key.isValidES256Signature(der, for: A3.signingInput))
        // r = 0 and s = 0 are never valid.
        #expect(!key.isValidES256Signature([UInt8](repeating: 0, count: 64), for: A3.signingInput))
    }

    @Test func ecdsaSignaturesConvertBetweenRawAndDERBothWays() throws {
        let der = try #require(ECDSASignature.der(fromRaw: A3.signature))
        #expect(der.first == 0x30)
        #expect(ECDSASignature.raw(fromDER: der) == A3.signature)
        // Small values are padded back to 32 bytes: r = 1, s = 2.
        let tiny = [UInt8](repeating: 0, count: 31) + [1] + [UInt8](repeating: 0, count: 31) + [2]
        let tinyDER = try #require(ECDSASignature.der(fromRaw: tiny))
        #expect(tinyDER == [0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x02])
        #expect(ECDSASignature.raw(fromDER: tinyDER) == tiny)
        // A high bit gets DER's leading zero.
        let high = [0x80] + [UInt8](repeating: 0, count: 31) + [0x80] + [UInt8](repeating: 0, count: 31)
        let highDER = try #require(ECDSASignature.der(fromRaw: high))
        #expect(highDER.count == 2 + 2 * (2 + 33) && highDER[4] == 0x00)
        #expect(ECDSASignature.der(fromRaw: []) == nil && ECDSASignature.der(fromRaw: [1, 2, 3]) == nil)
        #expect(ECDSASignature.raw(fromDER: [0x30, 0x00, 0x01]) == nil)
        #expect(ECDSASignature.raw(fromDER: [0x30, 0x02, 0x02, 0x00]) == nil)
    }

    @Test func p256PointsOffTheCurveAndWrongSizesAreRefused() throws {
        var offCurve = A3.y
        offCurve[31] ^= 0x01
        #expect(throws: CryptoError.self) { try P256PublicKey(x: A3.x, y: offCurve) }
        #expect(throws: CryptoError.self) { try P256PublicKey(x: Array(A3.x.dropFirst()), y: A3.y) }
        #expect(throws: CryptoError.self) { try P256PublicKey(x: A3.x + [0], y: A3.y) }
        #expect(throws: CryptoError.self) { try P256PublicKey(x: [UInt8](repeating: 0, count: 32), y: [UInt8](repeating: 0, count: 32)) }
    }

    @Test(.offPool) func generatedKeysSignAndVerifyAndExportTheirPublicHalf() throws {
        let rsa = try RSAPrivateKey.generate(bits: 2048)
        let message = Array("header.payload".utf8)
        let rsaPublic = try rsa.publicKey()
        let rsaSignature = try rsa.signRS256(message)
        #expect(rsaPublic.isValidRS256Signature(rsaSignature, for: message))
        #expect(rsaPublic.derRepresentation == rsa.publicKeyDER)
        #expect(rsaPublic.pemRepresentation.hasPrefix("-----BEGIN PUBLIC KEY-----\n") && rsaPublic.pemRepresentation.hasSuffix("-----END PUBLIC KEY-----\n"))
        // The PEM body is the DER in base64, 64 characters a line.
        let body = rsaPublic.pemRepresentation.split(separator: "\n").dropFirst().dropLast()
        #expect(body.dropLast().allSatisfy { $0.count == 64 })
        #expect(Base64.decode(body.joined()) == rsaPublic.derRepresentation)

        let ec = try P256PrivateKey.generate()
        let ecPublic = try ec.publicKey()
        let ecSignature = try ec.signES256(message)
        #expect(ecPublic.isValidES256Signature(ecSignature, for: message))
        #expect(!ecPublic.isValidES256Signature(ecSignature, for: Array("header.payloaD".utf8)))
        // A signature under one key does not verify under another.
        let other = try P256PrivateKey.generate().publicKey()
        #expect(!other.isValidES256Signature(ecSignature, for: message))
        #expect(!(try RSAPrivateKey.generate(bits: 2048).publicKey()).isValidRS256Signature(rsaSignature, for: message))
    }
}
