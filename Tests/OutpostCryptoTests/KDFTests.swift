import OutpostCore
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import OutpostCrypto

@Suite struct ScryptTests {
    // RFC 7914 section 12.
    @Test(.offPool) func rfc7914Vectors() throws {
        #expect(Hex.encode(try KDF.scrypt(password: [], salt: [], n: 16, r: 1, p: 1, length: 64))
            == "77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442"
            + "fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906")
        #expect(Hex.encode(try KDF.scrypt(password: Array("password".utf8), salt: Array("NaCl".utf8), n: 1024, r: 8, p: 16, length: 64))
            == "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162"
            + "2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640")
        #expect(Hex.encode(try KDF.scrypt(password: Array("pleaseletmein".utf8), salt: Array("SodiumChloride".utf8), n: 16384, r: 8, p: 1, length: 64))
            == "7023bdcb3afd7348461c06cd81fd38ebfda8fbba904f8e3ea9b543f6545da1f2"
            + "d5432955613f0fcf62d49705242a9af9e61e85dc0d651e40dfcf017b45575887")
    }

    @Test func outputLengthIsAPrefixProperty() throws {
        // scrypt's output is PBKDF2 over the mixed blocks, so a shorter output is a prefix.
        let long = try KDF.scrypt(password: Array("pw".utf8), salt: Array("salt".utf8), n: 16, r: 1, p: 1, length: 64)
        let short = try KDF.scrypt(password: Array("pw".utf8), salt: Array("salt".utf8), n: 16, r: 1, p: 1, length: 1)
        #expect(short == Array(long.prefix(1)))
        let other = try KDF.scrypt(password: Array("pw".utf8), salt: Array("salu".utf8), n: 16, r: 1, p: 1, length: 64)
        #expect(other != long)
    }

    @Test func invalidParametersAreRefused() {
        let cases: [(UInt64, UInt64, UInt64, Int)] = [
            (0, 1, 1, 32), (1, 1, 1, 32), (3, 1, 1, 32), (1000, 1, 1, 32), ((1 << 17) + 1, 8, 1, 32),
            (16, 0, 1, 32), (16, 1, 0, 32), (16, 1, 1, 0), (16, 1, 1, -1),
            (1 << 62, 1 << 40, 1, 32),   // memory beyond 64 bits
        ]
        for (n, r, p, length) in cases {
            let error = #expect(throws: CryptoError.self) { try KDF.scrypt(password: [1], salt: [2], n: n, r: r, p: p, length: length) }
            #expect(error.map(isInvalidInput) == true, "N=\(n) r=\(r) p=\(p) length=\(length)")
        }
    }
}

@Suite struct PBKDF2Tests {
    // The PBKDF2-HMAC-SHA256 vectors in the style of RFC 6070 (checked against
    // `openssl kdf ... PBKDF2`), and RFC 7914 section 11.
    @Test func knownVectors() throws {
        func derive(_ password: String, _ salt: String, _ c: Int, _ length: Int) throws -> String {
            Hex.encode(try KDF.pbkdf2SHA256(password: Array(password.utf8), salt: Array(salt.utf8), iterations: c, length: length))
        }
        #expect(try derive("password", "salt", 1, 32) == "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b")
        #expect(try derive("password", "salt", 2, 32) == "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43")
        #expect(try derive("password", "salt", 4096, 32) == "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a")
        #expect(try derive("passwordPASSWORDpassword", "saltSALTsaltSALTsaltSALTsaltSALTsalt", 4096, 40)
            == "348c89dbcbd32b2f32d814b8116e84cf2b17347ebc1800181c4e2a1fb8dd53e1c635518c7dac47e9")
        #expect(try derive("passwd", "salt", 1, 64)
            == "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
            + "49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783")
        #expect(try derive("Password", "NaCl", 80000, 64)
            == "4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08876b34ab56"
            + "a1d425a1225833549adb841b51c9b3176a272bdebba1d078478f62b397f33c8d")
    }

    @Test func emptyPasswordAndSalt() throws {
        let a = try KDF.pbkdf2SHA256(password: [], salt: [], iterations: 1, length: 32)
        #expect(a.count == 32)
        // T1 = U1 = HMAC-SHA256(P, S || INT(1)) = HMAC-SHA256("", 00000001), as Python's hmac has it.
        #expect(Hex.encode(a) == "f7ce0b653d2d72a4108cf5abe912ffdd777616dbbb27a70e8204f3ae2d0f6fad")
    }

    @Test func invalidParametersAreRefused() {
        for (iterations, length) in [(0, 32), (-1, 32), (1, 0), (1, -5), (Int(Int32.max) + 1, 32)] {
            let error = #expect(throws: CryptoError.self) {
                try KDF.pbkdf2SHA256(password: [1], salt: [2], iterations: iterations, length: length)
            }
            #expect(error.map(isInvalidInput) == true, "iterations=\(iterations) length=\(length)")
        }
    }
}
