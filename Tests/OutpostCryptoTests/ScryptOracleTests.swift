// OpenSSL as the oracle of the Swift scrypt: where libcrypto is linked (Linux), every
// derivation here is made by both and must agree byte for byte. On Apple platforms there
// is no libcrypto, and RFC 7914's vectors (KDFTests) are the check.
#if os(Linux)
import OutpostCCrypto
import OutpostCore
import Testing
@testable import OutpostCrypto

@Suite struct ScryptOracleTests {
    /// `EVP_PBE_scrypt` of the same inputs, with a memory limit that never refuses them.
    static func openSSL(_ password: [UInt8], _ salt: [UInt8], n: UInt64, r: UInt64, p: UInt64, length: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: length)
        let one: UInt8 = 0
        let ok = withUnsafePointer(to: one) { empty in
            password.withUnsafeBytes { pw in
                salt.withUnsafeBytes { s in
                    out.withUnsafeMutableBufferPointer { o in
                        EVP_PBE_scrypt(
                            UnsafeRawPointer(pw.baseAddress ?? UnsafeRawPointer(empty)).assumingMemoryBound(to: CChar.self), pw.count,
                            (s.baseAddress ?? UnsafeRawPointer(empty)).assumingMemoryBound(to: UInt8.self), s.count,
                            n, r, p, 4 << 30, o.baseAddress, o.count)
                    }
                }
            }
        }
        precondition(ok == 1, "EVP_PBE_scrypt refused N=\(n) r=\(r) p=\(p)")
        return out
    }

    /// 300 random inputs from a fixed seed: passwords and salts of 0 to 80 bytes, N from 2
    /// to 2^10, r from 1 to 9, p from 1 to 3, keys of 1 to 130 bytes.
    @Test func matchesOpenSSLOnRandomInputs() throws {
        var rng = SplitMix64(seed: 7914)
        for index in 0..<300 {
            let password = (0..<Int.random(in: 0...80, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let salt = (0..<Int.random(in: 0...80, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let n = UInt64(1) << UInt64.random(in: 1...10, using: &rng)
            let r = UInt64.random(in: 1...9, using: &rng)
            let p = UInt64.random(in: 1...3, using: &rng)
            let length = Int.random(in: 1...130, using: &rng)
            let ours = try KDF.scrypt(password: password, salt: salt, n: n, r: r, p: p, length: length)
            #expect(ours == Self.openSSL(password, salt, n: n, r: r, p: p, length: length),
                    "case \(index): N=\(n) r=\(r) p=\(p) length=\(length) password=\(Hex.encode(password)) salt=\(Hex.encode(salt))")
        }
    }

    /// The parameters the SDK ships (`PassphraseWrap.defaultScrypt`: N = 2^17, r = 8, p = 1)
    /// with a 32-byte key, as an export derives it.
    @Test func matchesOpenSSLAtTheShippedParameters() throws {
        guard case let .scrypt(n, r, p) = PassphraseWrap.defaultScrypt else { Issue.record("the default is not scrypt"); return }
        var rng = SplitMix64(seed: 17)
        for passphrase in ["correct horse battery staple", "é"] {
            let salt = (0..<PassphraseWrap.saltByteCount).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let password = Array(passphrase.utf8)
            #expect(try KDF.scrypt(password: password, salt: salt, n: n, r: r, p: p, length: 32)
                    == Self.openSSL(password, salt, n: n, r: r, p: p, length: 32), "\(passphrase)")
        }
    }

    /// Larger r and p than an export uses, and a long key, where BlockMix's shuffle and the
    /// p independent blocks matter most.
    @Test func matchesOpenSSLWithWideBlocks() throws {
        for (n, r, p) in [(UInt64(256), UInt64(32), UInt64(1)), (16, 16, 8), (1 << 12, 3, 5)] {
            let password = Array("wide".utf8), salt = Array("blocks".utf8)
            #expect(try KDF.scrypt(password: password, salt: salt, n: n, r: r, p: p, length: 257)
                    == Self.openSSL(password, salt, n: n, r: r, p: p, length: 257), "N=\(n) r=\(r) p=\(p)")
        }
    }
}
#endif
