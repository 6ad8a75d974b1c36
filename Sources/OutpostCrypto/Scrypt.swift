#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// scrypt (RFC 7914) in Swift, the same code on every platform; only its two PBKDF2 calls
/// go to the platform's primitive.
///
///     B = PBKDF2-HMAC-SHA256(P, S, 1, p · 128 · r)
///     each of the p blocks of 128 · r bytes: B_i = ROMix_r(B_i, N)
///     DK = PBKDF2-HMAC-SHA256(P, B, 1, dkLen)
///
/// The work is all in ROMix's 2 · N BlockMix calls of 2 · r Salsa20/8 cores each (N = 2^17,
/// r = 8: four million cores over a 128 MiB table), so that part is written for speed:
/// words held in raw memory, the XOR of BlockMix's input fused into the core's loads, its
/// output written straight to its shuffled place, and the core on sixteen local words,
/// made only of operations the compiler inlines even in a debug build (`&+`, `^`, shifts
/// on `UInt32`), so the tests' debug builds are not much slower than a release build's.
/// OpenSSL's `EVP_PBE_scrypt` is the tests' oracle (ScryptOracleTests) and the benchmark's
/// reference (`outpost-bench kdf`).
enum Scrypt {
    /// The derived key; the parameters have been checked by `KDF.scrypt`, and `memory`
    /// bytes (the table V and the two working blocks) fit in an `Int`.
    static func derive(password: [UInt8], salt: [UInt8], n: Int, r: Int, p: Int, length: Int) throws -> [UInt8] {
        let blockBytes = 128 * r
        let words = 32 * r
        var b = [UInt8](repeating: 0, count: p * blockBytes)
        defer { cleanse(&b) }
        try pbkdf2(password, salt, into: &b)

        // V: N blocks; then X and Y, the block being mixed and the one it is mixed into.
        let tableBytes = n * blockBytes + 2 * blockBytes
        guard let raw = malloc(tableBytes) else {
            throw CryptoError.invalidInput("scrypt N=\(n) r=\(r) needs \(tableBytes >> 20) MiB, which cannot be allocated")
        }
        let table = UnsafeMutableRawBufferPointer(start: raw, count: tableBytes)
        defer {
            cleanse(table)
            free(raw)
        }
        let v = raw.bindMemory(to: UInt32.self, capacity: tableBytes / 4)
        b.withUnsafeMutableBytes { bytes in
            for i in 0..<p {
                romix(UnsafeMutableRawBufferPointer(rebasing: bytes[(i * blockBytes)..<((i + 1) * blockBytes)]),
                      v: v, x: v + n * words, y: v + (n + 1) * words, n: n, r: r)
            }
        }

        var out = [UInt8](repeating: 0, count: length)
        try pbkdf2(password, b, into: &out)
        return out
    }

    private static func pbkdf2(_ password: [UInt8], _ salt: [UInt8], into out: inout [UInt8]) throws {
        try password.withUnsafeBytes { pw in
            try salt.withUnsafeBytes { s in
                try out.withUnsafeMutableBytes { try PBKDF2Primitive.derive(password: pw, salt: s, iterations: 1, into: $0) }
            }
        }
    }

    /// ROMix (RFC 7914 section 5) of one block of 128 · r bytes, in place.
    ///
    ///     X = B; for i in 0 ..< N { V_i = X; X = BlockMix(X) }
    ///     for i in 0 ..< N { j = Integerify(X) mod N; X = BlockMix(X xor V_j) }; B = X
    ///
    /// V_0 is the block itself and each V_i+1 is mixed straight from V_i, so the first loop
    /// copies nothing; the second mixes X and V_j into Y and swaps the two.
    static func romix(_ block: UnsafeMutableRawBufferPointer, v: UnsafeMutablePointer<UInt32>, x: UnsafeMutablePointer<UInt32>,
                      y: UnsafeMutablePointer<UInt32>, n: Int, r: Int) {
        let words = 32 * r
        // The block's little-endian words (a no-op load on the little-endian machines Swift runs on).
        for k in 0..<words {
            v[k] = UInt32(littleEndian: block.loadUnaligned(fromByteOffset: 4 * k, as: UInt32.self))
        }
        var row = v
        for _ in 0..<(n - 1) {
            blockMix(row, nil, into: row + words, r: r)
            row += words
        }
        blockMix(row, nil, into: x, r: r)

        var x = x, y = y
        let mask = UInt64(n - 1)
        let last = (2 * r - 1) * 16
        for _ in 0..<n {
            // Integerify: the last 64-byte block's first eight bytes as a little-endian
            // integer (N ≤ 2^64, so the words past them never matter).
            let j = Int((UInt64(x[last + 1]) << 32 | UInt64(x[last])) & mask)
            blockMix(x, v + j * words, into: y, r: r)
            swap(&x, &y)
        }
        for k in 0..<words {
            block.storeBytes(of: x[k].littleEndian, toByteOffset: 4 * k, as: UInt32.self)
        }
    }

    /// BlockMix_salsa20/8,r (RFC 7914 section 4) of `a` (XOR `b` when given) into `out`:
    ///
    ///     X = B_2r-1; for i in 0 ..< 2r { X = Salsa20/8(X xor B_i); Y_i = X }
    ///     out = (Y_0, Y_2, ..., Y_2r-2, Y_1, Y_3, ..., Y_2r-1)
    ///
    /// `out` must not overlap `a` or `b`.
    @inline(__always)
    static func blockMix(_ a: UnsafePointer<UInt32>, _ b: UnsafePointer<UInt32>?, into out: UnsafeMutablePointer<UInt32>, r: Int) {
        let last = (2 * r - 1) * 16
        var s0 = a[last], s1 = a[last + 1], s2 = a[last + 2], s3 = a[last + 3]
        var s4 = a[last + 4], s5 = a[last + 5], s6 = a[last + 6], s7 = a[last + 7]
        var s8 = a[last + 8], s9 = a[last + 9], s10 = a[last + 10], s11 = a[last + 11]
        var s12 = a[last + 12], s13 = a[last + 13], s14 = a[last + 14], s15 = a[last + 15]
        if let b {
            s0 ^= b[last]; s1 ^= b[last + 1]; s2 ^= b[last + 2]; s3 ^= b[last + 3]
            s4 ^= b[last + 4]; s5 ^= b[last + 5]; s6 ^= b[last + 6]; s7 ^= b[last + 7]
            s8 ^= b[last + 8]; s9 ^= b[last + 9]; s10 ^= b[last + 10]; s11 ^= b[last + 11]
            s12 ^= b[last + 12]; s13 ^= b[last + 13]; s14 ^= b[last + 14]; s15 ^= b[last + 15]
        }
        var i = 0
        while i < 2 * r {
            let src = a + 16 * i
            s0 ^= src[0]; s1 ^= src[1]; s2 ^= src[2]; s3 ^= src[3]
            s4 ^= src[4]; s5 ^= src[5]; s6 ^= src[6]; s7 ^= src[7]
            s8 ^= src[8]; s9 ^= src[9]; s10 ^= src[10]; s11 ^= src[11]
            s12 ^= src[12]; s13 ^= src[13]; s14 ^= src[14]; s15 ^= src[15]
            if let b {
                let other = b + 16 * i
                s0 ^= other[0]; s1 ^= other[1]; s2 ^= other[2]; s3 ^= other[3]
                s4 ^= other[4]; s5 ^= other[5]; s6 ^= other[6]; s7 ^= other[7]
                s8 ^= other[8]; s9 ^= other[9]; s10 ^= other[10]; s11 ^= other[11]
                s12 ^= other[12]; s13 ^= other[13]; s14 ^= other[14]; s15 ^= other[15]
            }

            // Salsa20/8 (RFC 7914 section 3): four double rounds on a copy, then added in.
            var x0 = s0, x1 = s1, x2 = s2, x3 = s3, x4 = s4, x5 = s5, x6 = s6, x7 = s7
            var x8 = s8, x9 = s9, x10 = s10, x11 = s11, x12 = s12, x13 = s13, x14 = s14, x15 = s15
            var round = 0
            while round < 4 {
                // Columns.
                quarter(&x0, &x4, &x8, &x12)
                quarter(&x5, &x9, &x13, &x1)
                quarter(&x10, &x14, &x2, &x6)
                quarter(&x15, &x3, &x7, &x11)
                // Rows.
                quarter(&x0, &x1, &x2, &x3)
                quarter(&x5, &x6, &x7, &x4)
                quarter(&x10, &x11, &x8, &x9)
                quarter(&x15, &x12, &x13, &x14)
                round &+= 1
            }
            s0 = s0 &+ x0; s1 = s1 &+ x1; s2 = s2 &+ x2; s3 = s3 &+ x3
            s4 = s4 &+ x4; s5 = s5 &+ x5; s6 = s6 &+ x6; s7 = s7 &+ x7
            s8 = s8 &+ x8; s9 = s9 &+ x9; s10 = s10 &+ x10; s11 = s11 &+ x11
            s12 = s12 &+ x12; s13 = s13 &+ x13; s14 = s14 &+ x14; s15 = s15 &+ x15

            // Even blocks to the first half, odd ones to the second.
            let dst = out + 16 * ((i >> 1) + (i & 1) * r)
            dst[0] = s0; dst[1] = s1; dst[2] = s2; dst[3] = s3
            dst[4] = s4; dst[5] = s5; dst[6] = s6; dst[7] = s7
            dst[8] = s8; dst[9] = s9; dst[10] = s10; dst[11] = s11
            dst[12] = s12; dst[13] = s13; dst[14] = s14; dst[15] = s15
            i &+= 1
        }
    }

    /// Salsa20's quarter round on (a, b, c, d): b ^= (a + d) <<< 7, c ^= (b + a) <<< 9,
    /// d ^= (c + b) <<< 13, a ^= (d + c) <<< 18. Transparent, so inlined in debug builds too.
    @_transparent
    static func quarter(_ a: inout UInt32, _ b: inout UInt32, _ c: inout UInt32, _ d: inout UInt32) {
        var t = a &+ d
        b ^= (t &<< (7 as UInt32)) | (t &>> (25 as UInt32))
        t = b &+ a
        c ^= (t &<< (9 as UInt32)) | (t &>> (23 as UInt32))
        t = c &+ b
        d ^= (t &<< (13 as UInt32)) | (t &>> (19 as UInt32))
        t = d &+ c
        a ^= (t &<< (18 as UInt32)) | (t &>> (14 as UInt32))
    }
}
