// `outpost-bench kdf`: the Swift scrypt (OutpostCrypto's, the same code on every platform)
// beside OpenSSL's `EVP_PBE_scrypt` at the parameters a key export ships (N = 2^17, r = 8,
// p = 1, a 32-byte key), alternating, `--rounds` each; the medians are compared. Every
// round's two keys must agree. Goal: the Swift scrypt no slower than OpenSSL (≤ 1.0 × its time).
import Foundation
import OutpostCCrypto
import OutpostCrypto

enum KDFBench {
    static func run(arguments: [String]) throws {
        var rounds = 7
        var log2N = 17
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--rounds" where i + 1 < arguments.count: rounds = Int(arguments[i + 1]) ?? rounds; i += 1
            case "--log2n" where i + 1 < arguments.count: log2N = Int(arguments[i + 1]) ?? log2N; i += 1
            case "-h", "--help":
                print("usage: outpost-bench kdf [--rounds 7] [--log2n 17]")
                return
            default: throw HTTPBench.BenchError("unknown option \(arguments[i])")
            }
            i += 1
        }
        let n = UInt64(1) << UInt64(log2N), r: UInt64 = 8, p: UInt64 = 1
        print("outpost-bench kdf: load average \(HTTPBench.loadAverage())")
        print("scrypt N=2^\(log2N) r=\(r) p=\(p), 32-byte key, \(rounds) alternating rounds each")
        let clock = ContinuousClock()
        var swift: [Double] = [], openSSL: [Double] = []
        for round in 0..<rounds {
            let password = Array("outpost-bench round \(round)".utf8), salt = SecureRandom.bytes(16)
            // Which goes first alternates, so that neither always runs on a warm cache.
            var ours: [UInt8] = [], theirs: [UInt8] = []
            for first in round % 2 == 0 ? [true, false] : [false, true] {
                let start = clock.now
                if first {
                    ours = try KDF.scrypt(password: password, salt: salt, n: n, r: r, p: p, length: 32)
                    swift.append(seconds(clock.now - start))
                } else {
                    theirs = try Self.openSSL(password, salt, n: n, r: r, p: p)
                    openSSL.append(seconds(clock.now - start))
                }
            }
            guard ours == theirs else { throw HTTPBench.BenchError("round \(round): the two keys differ") }
        }
        let s = median(swift), o = median(openSSL)
        print(String(format: "Swift scrypt:   median %.3f s  (%@)", s, swift.map { String(format: "%.3f", $0) }.joined(separator: " ")))
        print(String(format: "EVP_PBE_scrypt: median %.3f s  (%@)", o, openSSL.map { String(format: "%.3f", $0) }.joined(separator: " ")))
        print(String(format: "ratio %.2f × (goal ≤ 1.0 ×: %@)", s / o, s / o <= 1.0 ? "met" : "NOT met"))
        print("load average after: \(HTTPBench.loadAverage())")
    }

    static func openSSL(_ password: [UInt8], _ salt: [UInt8], n: UInt64, r: UInt64, p: UInt64) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let ok = password.withUnsafeBytes { pw in
            salt.withUnsafeBytes { s in
                out.withUnsafeMutableBufferPointer { o in
                    EVP_PBE_scrypt(pw.baseAddress?.assumingMemoryBound(to: CChar.self), pw.count, s.baseAddress?.assumingMemoryBound(to: UInt8.self), s.count,
                                   n, r, p, 2 << 30, o.baseAddress, o.count)
                }
            }
        }
        guard ok == 1 else { throw HTTPBench.BenchError("EVP_PBE_scrypt failed") }
        return out
    }

    static func seconds(_ d: Duration) -> Double {
        let (s, a) = d.components
        return Double(s) + Double(a) / 1e18
    }

    static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
}
