import CCrypto

/// Password-based key derivation through libcrypto.
public enum KDF {
    /// scrypt (RFC 7914) through `EVP_PBE_scrypt`: `n` is the CPU/memory cost (a power of
    /// two greater than 1), `r` the block size, `p` the parallelization; returns `length`
    /// bytes.
    ///
    /// libcrypto refuses to use more than 32 MiB unless told otherwise, which rules out
    /// N = 2^17, r = 8; the limit passed here is what these parameters need (128·r·(N + p)
    /// bytes, as libcrypto counts it) plus some slack, so the parameters alone decide.
    /// Callers that take parameters from outside must bound them themselves, as
    /// `PassphraseWrap` does.
    public static func scrypt(password: [UInt8], salt: [UInt8], n: UInt64, r: UInt64, p: UInt64, length: Int) throws -> [UInt8] {
        guard n > 1, n & (n - 1) == 0 else { throw CryptoError.invalidInput("scrypt N must be a power of two greater than 1, not \(n)") }
        guard r >= 1 else { throw CryptoError.invalidInput("scrypt r must be at least 1") }
        guard p >= 1 else { throw CryptoError.invalidInput("scrypt p must be at least 1") }
        guard length > 0 else { throw CryptoError.invalidInput("key length must be positive, not \(length)") }
        guard let memory = scryptMemory(n: n, r: r, p: p), memory <= UInt64(Int.max) - slack else {
            throw CryptoError.invalidInput("scrypt parameters N=\(n) r=\(r) p=\(p) need more memory than can be addressed")
        }
        var out = [UInt8](repeating: 0, count: length)
        let ok = password.withUnsafeBytes { pw in
            salt.withUnsafeBytes { s in
                out.withUnsafeMutableBufferPointer { o in
                    EVP_PBE_scrypt(
                        chars(pw), pw.count, s.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? empty, s.count,
                        n, r, p, memory + slack, o.baseAddress, o.count)
                }
            }
        }
        guard ok == 1 else { throw CryptoError.library("EVP_PBE_scrypt(N=\(n), r=\(r), p=\(p))") }
        return out
    }

    /// The bytes of working memory scrypt needs for these parameters, counted as libcrypto
    /// counts it (the p blocks B of 128·r bytes and the table V of N + 2 such blocks), or
    /// nil when that does not fit in 64 bits.
    static func scryptMemory(n: UInt64, r: UInt64, p: UInt64) -> UInt64? {
        let (block, o1) = r.multipliedReportingOverflow(by: 128)
        let (blocks, o2) = n.addingReportingOverflow(2)
        let (blocks2, o3) = blocks.addingReportingOverflow(p)
        let (total, o4) = block.multipliedReportingOverflow(by: blocks2)
        return o1 || o2 || o3 || o4 ? nil : total
    }

    /// Headroom above the computed memory need, so that rounding inside libcrypto never
    /// turns an acceptable parameter set into a refusal.
    private static let slack: UInt64 = 1 << 20

    /// PBKDF2 (RFC 8018) with HMAC-SHA256 through `PKCS5_PBKDF2_HMAC` and `EVP_sha256()`;
    /// returns `length` bytes after `iterations` rounds.
    public static func pbkdf2SHA256(password: [UInt8], salt: [UInt8], iterations: Int, length: Int) throws -> [UInt8] {
        guard iterations >= 1, iterations <= Int(Int32.max) else {
            throw CryptoError.invalidInput("PBKDF2 iterations must be between 1 and \(Int32.max), not \(iterations)")
        }
        guard length > 0, length <= Int(Int32.max) else { throw CryptoError.invalidInput("key length must be positive, not \(length)") }
        guard password.count <= Int(Int32.max), salt.count <= Int(Int32.max) else {
            throw CryptoError.invalidInput("password or salt longer than libcrypto accepts")
        }
        var out = [UInt8](repeating: 0, count: length)
        let ok = password.withUnsafeBytes { pw in
            salt.withUnsafeBytes { s in
                out.withUnsafeMutableBufferPointer { o in
                    PKCS5_PBKDF2_HMAC(
                        chars(pw), Int32(pw.count), s.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? empty, Int32(s.count),
                        Int32(iterations), EVP_sha256(), Int32(o.count), o.baseAddress)
                }
            }
        }
        guard ok == 1 else { throw CryptoError.library("PKCS5_PBKDF2_HMAC") }
        return out
    }

    /// The password as libcrypto's `const char *`; a valid pointer even when it is empty,
    /// since an empty array may have no storage.
    private static func chars(_ bytes: UnsafeRawBufferPointer) -> UnsafePointer<CChar> {
        bytes.baseAddress?.assumingMemoryBound(to: CChar.self) ?? UnsafeRawPointer(empty).assumingMemoryBound(to: CChar.self)
    }

    /// A valid address for empty inputs (never read, since the length passed with it is 0).
    private static var empty: UnsafePointer<UInt8> { UnsafePointer(bitPattern: 1)! }
}
