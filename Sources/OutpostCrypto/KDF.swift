/// Password-based key derivation: scrypt in Swift (Scrypt.swift), PBKDF2-HMAC-SHA256 from
/// the platform (Primitives/).
public enum KDF {
    /// scrypt (RFC 7914): `n` is the CPU/memory cost (a power of two greater than 1), `r`
    /// the block size, `p` the parallelization; returns `length` bytes. Byte for byte what
    /// OpenSSL's `EVP_PBE_scrypt` returns for the same inputs (ScryptOracleTests).
    ///
    /// The parameters are checked against RFC 7914's bounds (N < 2^(16·r); p·128·r and the
    /// lengths under 2^31, as OpenSSL has them), and the working memory, 128·r·(N + 2)
    /// bytes, must be addressable and allocatable; beyond that the parameters alone decide
    /// what it costs. Callers that take parameters from outside must bound them themselves,
    /// as `PassphraseWrap` does.
    public static func scrypt(password: [UInt8], salt: [UInt8], n: UInt64, r: UInt64, p: UInt64, length: Int) throws -> [UInt8] {
        guard n > 1, n & (n - 1) == 0 else { throw CryptoError.invalidInput("scrypt N must be a power of two greater than 1, not \(n)") }
        guard r >= 1 else { throw CryptoError.invalidInput("scrypt r must be at least 1") }
        guard p >= 1 else { throw CryptoError.invalidInput("scrypt p must be at least 1") }
        guard length > 0 else { throw CryptoError.invalidInput("key length must be positive, not \(length)") }
        // Both PBKDF2 calls take 32-bit lengths: the key, the password, and B (p·128·r bytes).
        guard length <= Int(Int32.max), password.count <= Int(Int32.max), salt.count <= Int(Int32.max) else {
            throw CryptoError.invalidInput("scrypt key, password or salt longer than 2^31 - 1 bytes")
        }
        guard let memory = scryptMemory(n: n, r: r, p: p), memory <= UInt64(Int.max) else {
            throw CryptoError.invalidInput("scrypt parameters N=\(n) r=\(r) p=\(p) need more memory than can be addressed")
        }
        // RFC 7914 section 2 bounds p·r by 2^30 and N by 2^(128 · r / 8); B must also fit the
        // 32-bit length PBKDF2 takes.
        guard r < 1 << 24, p < 1 << 24, r * p * 128 <= UInt64(Int32.max) else {
            throw CryptoError.invalidInput("scrypt p·128·r must be under 2^31, not \(p)·128·\(r)")
        }
        guard r >= 4 || n < UInt64(1) << (16 * r) else { throw CryptoError.invalidInput("scrypt N must be under 2^(16·r) = 2^\(16 * r), not \(n)") }
        return try Scrypt.derive(password: password, salt: salt, n: Int(n), r: Int(r), p: Int(p), length: length)
    }

    /// The bytes of working memory scrypt needs for these parameters (the p blocks B of
    /// 128·r bytes and the table V of N + 2 such blocks, as OpenSSL counts it too), or nil
    /// when that does not fit in 64 bits.
    static func scryptMemory(n: UInt64, r: UInt64, p: UInt64) -> UInt64? {
        let (block, o1) = r.multipliedReportingOverflow(by: 128)
        let (blocks, o2) = n.addingReportingOverflow(2)
        let (blocks2, o3) = blocks.addingReportingOverflow(p)
        let (total, o4) = block.multipliedReportingOverflow(by: blocks2)
        return o1 || o2 || o3 || o4 ? nil : total
    }

    /// PBKDF2 (RFC 8018) with HMAC-SHA256; returns `length` bytes after `iterations` rounds.
    /// The derivation is the platform's (libcrypto's `PKCS5_PBKDF2_HMAC` on Linux,
    /// CommonCrypto's `CCKeyDerivationPBKDF` on Apple platforms); every count is checked
    /// here to fit both (32-bit lengths and rounds).
    public static func pbkdf2SHA256(password: [UInt8], salt: [UInt8], iterations: Int, length: Int) throws -> [UInt8] {
        guard iterations >= 1, iterations <= Int(Int32.max) else {
            throw CryptoError.invalidInput("PBKDF2 iterations must be between 1 and \(Int32.max), not \(iterations)")
        }
        guard length > 0, length <= Int(Int32.max) else { throw CryptoError.invalidInput("key length must be positive, not \(length)") }
        guard password.count <= Int(Int32.max), salt.count <= Int(Int32.max) else {
            throw CryptoError.invalidInput("password or salt longer than 2^31 - 1 bytes")
        }
        var out = [UInt8](repeating: 0, count: length)
        try password.withUnsafeBytes { pw in
            try salt.withUnsafeBytes { s in
                try out.withUnsafeMutableBytes { try PBKDF2Primitive.derive(password: pw, salt: s, iterations: iterations, into: $0) }
            }
        }
        return out
    }
}
