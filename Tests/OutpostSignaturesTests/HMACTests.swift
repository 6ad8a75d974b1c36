import OutpostCrypto
import Testing
@testable import OutpostSignatures

@Suite struct HMACTests {
    // RFC 4231 test cases 1, 2 and 6.
    @Test func rfc4231() {
        let key1 = [UInt8](repeating: 0x0b, count: 20)
        #expect(Hex.encode(HMACSHA256.authenticate(Array("Hi There".utf8), key: key1))
            == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        #expect(Hex.encode(HMACSHA256.authenticate(Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8)))
            == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let key6 = [UInt8](repeating: 0xaa, count: 131)
        #expect(Hex.encode(HMACSHA256.authenticate(Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8), key: key6))
            == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

    @Test func emptyKeyAndMessage() {
        #expect(Hex.encode(HMACSHA256.authenticate([UInt8](), key: [UInt8]()))
            == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
    }

    @Test func verifyAcceptsTheRightMacOnly() {
        let key = Array("k".utf8), msg = Array("m".utf8)
        var mac = HMACSHA256.authenticate(msg, key: key)
        #expect(HMACSHA256.verify(mac, message: msg, key: key))
        mac[31] ^= 1
        #expect(!HMACSHA256.verify(mac, message: msg, key: key))
        #expect(!HMACSHA256.verify(Array(mac.prefix(31)), message: msg, key: key))
    }
}
