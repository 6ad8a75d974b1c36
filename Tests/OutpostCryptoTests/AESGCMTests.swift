import OutpostCore
import Testing
@testable import OutpostCrypto

/// The AES-256 test cases (13 to 16) of McGrew and Viega, "The Galois/Counter Mode of
/// Operation (GCM)", the vectors NIST's GCM validation also uses.
struct GCMVector: Sendable, CustomStringConvertible {
    let name: String
    let key: [UInt8]
    let nonce: [UInt8]
    let plaintext: [UInt8]
    let aad: [UInt8]
    let ciphertext: [UInt8]
    let tag: [UInt8]
    var description: String { name }

    init(_ name: String, key: String, nonce: String, plaintext: String, aad: String, ciphertext: String, tag: String) {
        self.name = name
        self.key = Hex.decode(key)!
        self.nonce = Hex.decode(nonce)!
        self.plaintext = Hex.decode(plaintext)!
        self.aad = Hex.decode(aad)!
        self.ciphertext = Hex.decode(ciphertext)!
        self.tag = Hex.decode(tag)!
    }

    static let zeroKey = String(repeating: "00", count: 32)
    static let key15 = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308"
    static let plain15 = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
        + "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255"
    static let cipher15 = "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
        + "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad"

    static let all: [GCMVector] = [
        GCMVector("13", key: zeroKey, nonce: "000000000000000000000000", plaintext: "", aad: "",
                  ciphertext: "", tag: "530f8afbc74536b9a963b4f1c4cb738b"),
        GCMVector("14", key: zeroKey, nonce: "000000000000000000000000", plaintext: "00000000000000000000000000000000", aad: "",
                  ciphertext: "cea7403d4d606b6e074ec5d3baf39d18", tag: "d0d1c8a799996bf0265b98b5d48ab919"),
        GCMVector("15", key: key15, nonce: "cafebabefacedbaddecaf888", plaintext: plain15, aad: "",
                  ciphertext: cipher15, tag: "b094dac5d93471bdec1a502270e3cc6c"),
        // 60 bytes of plaintext (a partial last block) and 20 bytes of AAD.
        GCMVector("16", key: key15, nonce: "cafebabefacedbaddecaf888", plaintext: String(plain15.dropLast(8)),
                  aad: "feedfacedeadbeeffeedfacedeadbeefabaddad2",
                  ciphertext: String(cipher15.dropLast(8)), tag: "76fc6ece0f4e1768cddf8853bb2d551b"),
    ]

    var sealed: [UInt8] { ciphertext + tag }
}

@Suite struct AESGCMTests {
    @Test(arguments: GCMVector.all) func publishedVectors(_ v: GCMVector) throws {
        #expect(try AESGCM.seal(v.plaintext, key: v.key, nonce: v.nonce, aad: v.aad) == v.sealed)
        #expect(try AESGCM.open(v.sealed, key: v.key, nonce: v.nonce, aad: v.aad) == v.plaintext)

        let key = try AESGCMKey(v.key)
        #expect(try key.seal(v.plaintext, nonce: v.nonce, aad: v.aad) == v.sealed)
        #expect(try key.open(v.sealed, nonce: v.nonce, aad: v.aad) == v.plaintext)
    }

    @Test(arguments: GCMVector.all) func bufferVariantsMatchTheVectors(_ v: GCMVector) throws {
        var out = [UInt8](repeating: 0xEE, count: v.plaintext.count + 16 + 5)
        let n = try v.plaintext.withUnsafeBytes { p in
            try out.withUnsafeMutableBytes { o in try AESGCM.seal(p, into: o, key: v.key, nonce: v.nonce, aad: v.aad) }
        }
        #expect(n == v.plaintext.count + 16)
        #expect(Array(out[0..<n]) == v.sealed)
        #expect(out[n...].allSatisfy { $0 == 0xEE })

        var plain = [UInt8](repeating: 0xEE, count: v.plaintext.count)
        let key = try AESGCMKey(v.key)
        let m = try v.sealed.withUnsafeBytes { s in
            try plain.withUnsafeMutableBytes { o in try key.open(s, into: o, nonce: v.nonce, aad: v.aad) }
        }
        #expect(m == v.plaintext.count)
        #expect(plain == v.plaintext)

        var sealed2 = [UInt8](repeating: 0, count: v.plaintext.count + 16)
        _ = try v.plaintext.withUnsafeBytes { p in
            try sealed2.withUnsafeMutableBytes { o in try key.seal(p, into: o, nonce: v.nonce, aad: v.aad) }
        }
        #expect(sealed2 == v.sealed)
        var plain2 = [UInt8](repeating: 0, count: v.plaintext.count)
        _ = try v.sealed.withUnsafeBytes { s in
            try plain2.withUnsafeMutableBytes { o in try AESGCM.open(s, into: o, key: v.key, nonce: v.nonce, aad: v.aad) }
        }
        #expect(plain2 == v.plaintext)
    }

    /// Every single-bit change to what is authenticated makes opening fail.
    @Test func anyFlippedBitFailsAuthentication() throws {
        let v = GCMVector.all[3]
        let key = try AESGCMKey(v.key)
        for byte in [0, 17, 59, 60, 75] {   // ciphertext bytes, then tag bytes (60 ..< 76)
            for bit in [0, 7] {
                var sealed = v.sealed
                sealed[byte] ^= 1 << bit
                #expect(throws: CryptoError.authenticationFailed) { try AESGCM.open(sealed, key: v.key, nonce: v.nonce, aad: v.aad) }
                #expect(throws: CryptoError.authenticationFailed) { try key.open(sealed, nonce: v.nonce, aad: v.aad) }
            }
        }
        for byte in [0, 19] {
            var aad = v.aad
            aad[byte] ^= 0x80
            #expect(throws: CryptoError.authenticationFailed) { try AESGCM.open(v.sealed, key: v.key, nonce: v.nonce, aad: aad) }
        }
        #expect(throws: CryptoError.authenticationFailed) { try AESGCM.open(v.sealed, key: v.key, nonce: v.nonce, aad: []) }
        #expect(throws: CryptoError.authenticationFailed) { try AESGCM.open(v.sealed, key: v.key, nonce: v.nonce, aad: v.aad + [0]) }
        for byte in [0, 11] {
            var nonce = v.nonce
            nonce[byte] ^= 1
            #expect(throws: CryptoError.authenticationFailed) { try AESGCM.open(v.sealed, key: v.key, nonce: nonce, aad: v.aad) }
        }
        var otherKey = v.key
        otherKey[31] ^= 1
        #expect(throws: CryptoError.authenticationFailed) { try AESGCM.open(v.sealed, key: otherKey, nonce: v.nonce, aad: v.aad) }
        // A tag alone, for an empty plaintext, is checked too.
        let empty = GCMVector.all[0]
        var tag = empty.sealed
        tag[0] ^= 1
        #expect(throws: CryptoError.authenticationFailed) { try AESGCM.open(tag, key: empty.key, nonce: empty.nonce) }
        // The context keeps working after a failure.
        #expect(try key.open(v.sealed, nonce: v.nonce, aad: v.aad) == v.plaintext)
    }

    @Test func failedOpenLeavesNoUnverifiedPlaintext() throws {
        let v = GCMVector.all[2]
        var sealed = v.sealed
        sealed[sealed.count - 1] ^= 1
        var out = [UInt8](repeating: 0xAA, count: v.plaintext.count)
        #expect(throws: CryptoError.authenticationFailed) {
            try sealed.withUnsafeBytes { s in
                try out.withUnsafeMutableBytes { o in try AESGCM.open(s, into: o, key: v.key, nonce: v.nonce, aad: v.aad) }
            }
        }
        #expect(out.allSatisfy { $0 == 0 })
    }

    @Test func lengthsAreChecked() throws {
        for length in [0, 16, 24, 31, 33, 64] {
            let key = [UInt8](repeating: 1, count: length)
            #expect(throws: CryptoError.invalidKeyLength(length)) { try AESGCM.seal([1], key: key, nonce: [UInt8](repeating: 0, count: 12)) }
            #expect(throws: CryptoError.invalidKeyLength(length)) { try AESGCM.open([UInt8](repeating: 0, count: 16), key: key, nonce: [UInt8](repeating: 0, count: 12)) }
            #expect(throws: CryptoError.invalidKeyLength(length)) { try AESGCMKey(key) }
        }
        let key = try AESGCMKey([UInt8](repeating: 1, count: 32))
        for length in [0, 8, 11, 13, 16] {
            let nonce = [UInt8](repeating: 0, count: length)
            #expect(throws: CryptoError.invalidNonceLength(length)) { try key.seal([1, 2], nonce: nonce, aad: []) }
            #expect(throws: CryptoError.invalidNonceLength(length)) { try key.open([UInt8](repeating: 0, count: 20), nonce: nonce, aad: []) }
        }
        let nonce = [UInt8](repeating: 0, count: 12)
        for length in [0, 1, 15] {
            let error = #expect(throws: CryptoError.self) { try key.open([UInt8](repeating: 0, count: length), nonce: nonce, aad: []) }
            #expect(error.map(isInvalidInput) == true)
        }
        // Output buffers that are one byte short.
        var small = [UInt8](repeating: 0, count: 20)
        let sealError = #expect(throws: CryptoError.self) {
            try [UInt8](repeating: 0, count: 5).withUnsafeBytes { p in
                try small.withUnsafeMutableBytes { o in try key.seal(p, into: o, nonce: nonce, aad: []) }
            }
        }
        #expect(sealError.map(isInvalidInput) == true)
        let sealed = try key.seal([UInt8](repeating: 0, count: 21), nonce: nonce, aad: [])
        let openError = #expect(throws: CryptoError.self) {
            try sealed.withUnsafeBytes { s in
                try small.withUnsafeMutableBytes { o in try key.open(s, into: o, nonce: nonce, aad: []) }
            }
        }
        #expect(openError.map(isInvalidInput) == true)
    }

    @Test func emptyPlaintextAndEmptyAAD() throws {
        let key = SecureRandom.bytes(32), nonce = SecureRandom.bytes(12)
        for (plaintext, aad) in [([UInt8](), [UInt8]()), ([], [1, 2, 3]), ([9, 8, 7], [])] {
            let sealed = try AESGCM.seal(plaintext, key: key, nonce: nonce, aad: aad)
            #expect(sealed.count == plaintext.count + 16)
            #expect(try AESGCM.open(sealed, key: key, nonce: nonce, aad: aad) == plaintext)
            var none: [UInt8] = []
            if plaintext.isEmpty {
                // Empty buffers, whose base address may be nil.
                let n = try sealed.withUnsafeBytes { s in
                    try none.withUnsafeMutableBytes { o in try AESGCM.open(s, into: o, key: key, nonce: nonce, aad: aad) }
                }
                #expect(n == 0)
            }
        }
    }

    /// One context across many records with different nonces gives what fresh contexts give,
    /// with seals and opens interleaved and failures in between.
    @Test func reusedKeyMatchesOneShotAcrossManyCalls() throws {
        var rng = SplitMix64(seed: 42)
        let keyBytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let key = try AESGCMKey(keyBytes)
        var records: [(nonce: [UInt8], aad: [UInt8], plain: [UInt8], sealed: [UInt8])] = []
        for i in 0..<500 {
            let nonce = (0..<12).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let aad = Array("record-\(i)".utf8)
            let plain = (0..<Int.random(in: 0...400, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let sealed = try key.seal(plain, nonce: nonce, aad: aad)
            #expect(try sealed == AESGCM.seal(plain, key: keyBytes, nonce: nonce, aad: aad))
            records.append((nonce, aad, plain, sealed))
            if i % 7 == 0 {
                var bad = sealed
                bad[Int.random(in: 0..<bad.count, using: &rng)] ^= 0x10
                #expect(throws: CryptoError.authenticationFailed) { try key.open(bad, nonce: nonce, aad: aad) }
            }
            #expect(try key.open(sealed, nonce: nonce, aad: aad) == plain)
        }
        for r in records {
            #expect(try key.open(r.sealed, nonce: r.nonce, aad: r.aad) == r.plain)
            #expect(try AESGCM.open(r.sealed, key: keyBytes, nonce: r.nonce, aad: r.aad) == r.plain)
        }
        // Distinct nonces give distinct ciphertexts for the same plaintext.
        let a = try key.seal([1, 2, 3], nonce: records[0].nonce, aad: [])
        let b = try key.seal([1, 2, 3], nonce: records[1].nonce, aad: [])
        #expect(a != b)
    }

    @Test func largeBufferRoundTrip() throws {
        var rng = SplitMix64(seed: 3)
        let plain = (0..<(1 << 20) + 3).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let key = SecureRandom.bytes(32), nonce = SecureRandom.bytes(12)
        let sealed = try AESGCM.seal(plain, key: key, nonce: nonce, aad: [7])
        #expect(try AESGCM.open(sealed, key: key, nonce: nonce, aad: [7]) == plain)
    }

    @Test func errorsDescribeThemselves() {
        #expect(CryptoError.authenticationFailed.description == "authentication failed")
        #expect(CryptoError.invalidKeyLength(5).description.contains("5"))
        #expect(CryptoError.libraryFailure("EVP_EncryptInit_ex failed").description.contains("EVP_EncryptInit_ex"))
    }
}

func isInvalidInput(_ error: CryptoError) -> Bool {
    if case .invalidInput = error { return true }
    return false
}
