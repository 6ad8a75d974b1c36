import OutpostCore
import Testing
@testable import OutpostCrypto

@Suite struct SHA256Tests {
    // FIPS 180-4 / NIST CAVP vectors.
    @Test func knownVectors() {
        #expect(SHA256.hex([UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256.hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
            == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }

    @Test func streamingEqualsOneShotAtEverySplit() {
        var rng = SplitMix64(seed: 7)
        let data = (0..<4099).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let expected = SHA256.hash(data)
        for split in [0, 1, 63, 64, 65, 1000, 4098, 4099] {
            var h = SHA256()
            h.update(data[0..<split])
            h.update(data[split...])
            #expect(h.finalize() == expected)
        }
        var h = SHA256()
        for byte in data { h.update([byte]) }
        #expect(h.finalize() == expected)
    }

    @Test func millionAs() {
        var h = SHA256()
        let block = [UInt8](repeating: UInt8(ascii: "a"), count: 1000)
        for _ in 0..<1000 { h.update(block) }
        #expect(Hex.encode(h.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }
}

@Suite struct ConstantTimeTests {
    @Test func constantTimeEquality() {
        #expect(constantTimeEquals([], []))
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
    }
}

@Suite struct RandomTests {
    @Test func bytesHaveTheRequestedLengthAndDiffer() {
        #expect(SecureRandom.bytes(0).isEmpty)
        let a = SecureRandom.bytes(32), b = SecureRandom.bytes(32)
        #expect(a.count == 32 && b.count == 32)
        #expect(a != b)
        var g = SecureRandomGenerator()
        let values = Set((0..<100).map { _ in Int.random(in: 0..<1_000_000_000, using: &g) })
        #expect(values.count > 95)
    }
}

@Suite struct EncodingTests {
    @Test func hexRoundTrip() {
        #expect(Hex.encode([0x00, 0xab, 0xff]) == "00abff")
        #expect(Hex.decode("00ABff") == [0x00, 0xab, 0xff])
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("zz") == nil)
        #expect(Hex.isLowercaseHex("00abff", length: 6))
        #expect(!Hex.isLowercaseHex("00ABff", length: 6))
    }

    // RFC 4648 section 10 vectors.
    @Test func base64Vectors() {
        let cases = ["": "", "f": "Zg==", "fo": "Zm8=", "foo": "Zm9v", "foob": "Zm9vYg==", "fooba": "Zm9vYmE=", "foobar": "Zm9vYmFy"]
        for (plain, encoded) in cases {
            #expect(Base64.encode(Array(plain.utf8)) == encoded)
            #expect(Base64.decode(encoded) == Array(plain.utf8))
            let url = String(encoded.filter { $0 != "=" })
            #expect(Base64.encodeURL(Array(plain.utf8)) == url)
            #expect(Base64.decodeURL(url) == Array(plain.utf8))
        }
        #expect(Base64.encodeURL([0xfb, 0xff]) == "-_8")
        #expect(Base64.decodeURL("-_8") == [0xfb, 0xff])
        #expect(Base64.decode("Zm9v!") == nil)
        #expect(Base64.decode("Zg") == nil)      // standard base64 needs padding
        #expect(Base64.decodeURL("Zh") == nil)   // non-canonical trailing bits
        #expect(Base64.decodeURL("Z") == nil)
    }
}
