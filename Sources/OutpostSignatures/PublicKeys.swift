import OutpostCCrypto
import OutpostCrypto

// Public-key signatures for JSON Web Tokens (RFC 7518 section 3): RS256 (RSASSA-PKCS1-v1_5
// with SHA-256) and ES256 (ECDSA on P-256 with SHA-256), through libcrypto's EVP
// interface. Keys are built from the members of a JWK (RFC 7518 section 6): an RSA key
// from `n` and `e`, a P-256 key from `x` and `y`.

/// An RSA public key for RS256, built from a JWK's modulus `n` and exponent `e`
/// (big-endian bytes, RFC 7518 section 6.3.1).
///
/// Keys under 2048 bits are refused (RFC 7518 section 3.3 requires at least 2048), and so
/// are keys over 8192 bits, whose verifications would cost a server more than any
/// identity provider's keys do.
public struct RSAPublicKey: Sendable {
    /// The smallest modulus accepted, in bits.
    public static let minimumBits = 2048
    /// The largest modulus accepted, in bits.
    public static let maximumBits = 8192

    let key: EVPKey
    /// The modulus's size in bits.
    public let bits: Int

    /// Builds the key; `.invalidInput` names what is wrong (too small, not an RSA public
    /// key libcrypto accepts).
    public init(modulus: [UInt8], exponent: [UInt8]) throws(CryptoError) {
        let n = Array(modulus.drop { $0 == 0 })
        let e = Array(exponent.drop { $0 == 0 })
        guard !n.isEmpty, !e.isEmpty else { throw .invalidInput("an RSA key needs a modulus and an exponent") }
        // Sized from the bytes before libcrypto sees them, so an oversized key costs nothing.
        let bits = (n.count - 1) * 8 + (8 - n[0].leadingZeroBitCount)
        guard bits >= Self.minimumBits else {
            throw .invalidInput("an RSA key of \(bits) bits; at least \(Self.minimumBits) are required")
        }
        guard bits <= Self.maximumBits else {
            throw .invalidInput("an RSA key of \(bits) bits; at most \(Self.maximumBits) are accepted")
        }
        guard e.count <= 32 else { throw .invalidInput("an RSA exponent of \(e.count) bytes; at most 32 are accepted") }
        let params = try ParamBuilder()
        try params.bignum(CName.rsaN, n)
        try params.bignum(CName.rsaE, e)
        key = try params.makeKey(type: CName.rsa, selection: outpost_evp_pkey_public_key())
        // Odd modulus, odd exponent of at least 65537, no small factors (SP 800-56B).
        guard key.passesPublicCheck() else { throw .invalidInput("not a valid RSA public key") }
        self.bits = bits
    }

    /// The modulus's size in bytes: the length of every RS256 signature under this key.
    public var signatureByteCount: Int { (bits + 7) / 8 }

    /// True when `signature` is this key's RS256 signature of `message`. A signature of any
    /// other length than the modulus's is refused before libcrypto sees it.
    public func isValidRS256Signature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard signature.count == signatureByteCount else { return false }
        return key.verify(signature, message, rsaPadding: true)
    }

    /// The key as DER SubjectPublicKeyInfo (RFC 5280).
    public var derRepresentation: [UInt8] { key.publicKeyDER() }

    /// The key as a PEM `PUBLIC KEY` block.
    public var pemRepresentation: String { PEM.publicKey(derRepresentation) }
}

/// A P-256 public key for ES256, built from a JWK's coordinates `x` and `y` (32 bytes
/// each, RFC 7518 section 6.2.1). A point that is not on the curve is refused.
public struct P256PublicKey: Sendable {
    /// The size of each coordinate and of each half of a signature.
    public static let coordinateByteCount = 32

    let key: EVPKey

    /// Builds the key; `.invalidInput` when a coordinate has the wrong length or the point
    /// is not on P-256.
    public init(x: [UInt8], y: [UInt8]) throws(CryptoError) {
        guard x.count == Self.coordinateByteCount, y.count == Self.coordinateByteCount else {
            throw .invalidInput("P-256 coordinates are \(Self.coordinateByteCount) bytes each, not \(x.count) and \(y.count)")
        }
        let params = try ParamBuilder()
        try params.utf8(CName.group, "prime256v1")
        // SEC 1 uncompressed point: 0x04 || x || y.
        try params.octets(CName.publicKey, [0x04] + x + y)
        do {
            key = try params.makeKey(type: CName.ec, selection: outpost_evp_pkey_public_key())
        } catch {
            throw .invalidInput("the point (x, y) is not on P-256")
        }
        guard key.passesPublicCheck() else { throw .invalidInput("the point (x, y) is not a valid P-256 public key") }
    }

    /// True when `signature` is this key's ES256 signature of `message`, in JWS form: the
    /// 64 bytes `r || s` (RFC 7518 section 3.4), turned into DER for libcrypto here. A
    /// signature of any other length is refused.
    public func isValidES256Signature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard signature.count == 2 * Self.coordinateByteCount, let der = ECDSASignature.der(fromRaw: signature) else { return false }
        return key.verify(der, message, rsaPadding: false)
    }

    /// The key as DER SubjectPublicKeyInfo (RFC 5280).
    public var derRepresentation: [UInt8] { key.publicKeyDER() }

    /// The key as a PEM `PUBLIC KEY` block.
    public var pemRepresentation: String { PEM.publicKey(derRepresentation) }
}

/// ECDSA signatures in the two forms they travel in: JWS's fixed-size `r || s` (RFC 7518
/// section 3.4) and the DER `SEQUENCE { r INTEGER, s INTEGER }` libcrypto signs and
/// verifies (RFC 3279 section 2.2.3).
public enum ECDSASignature {
    /// DER of the raw `r || s` (two halves of equal length); nil for an empty or
    /// odd-length input.
    public static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard !raw.isEmpty, raw.count % 2 == 0 else { return nil }
        let half = raw.count / 2
        guard let sig = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(sig) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(half), nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + half, Int32(half), nil) }
        guard let r, let s else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        // set0 takes ownership of r and s: ECDSA_SIG_free frees them.
        guard ECDSA_SIG_set0(sig, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(sig, nil)
        guard length > 0 else { return nil }
        var out = [UInt8](repeating: 0, count: Int(length))
        let written = out.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(sig, &cursor)
        }
        return written == length ? out : nil
    }

    /// The raw `r || s`, each half `coordinateByteCount` bytes, of a DER signature; nil when
    /// the DER does not parse or a value does not fit.
    public static func raw(fromDER der: [UInt8], coordinateByteCount: Int = P256PublicKey.coordinateByteCount) -> [UInt8]? {
        let parsed = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, der.count)
        }
        guard let sig = parsed else {
            ERR_clear_error()
            return nil
        }
        defer { ECDSA_SIG_free(sig) }
        var out = [UInt8](repeating: 0, count: 2 * coordinateByteCount)
        let ok = out.withUnsafeMutableBufferPointer { buffer -> Bool in
            BN_bn2binpad(ECDSA_SIG_get0_r(sig), buffer.baseAddress, Int32(coordinateByteCount)) == coordinateByteCount
                && BN_bn2binpad(ECDSA_SIG_get0_s(sig), buffer.baseAddress! + coordinateByteCount, Int32(coordinateByteCount)) == coordinateByteCount
        }
        return ok ? out : nil
    }
}

/// PEM armour (RFC 7468).
enum PEM {
    /// A `PUBLIC KEY` block of `der`, 64 characters a line.
    static func publicKey(_ der: [UInt8]) -> String {
        let text = Array(Base64.encode(der))
        var out = "-----BEGIN PUBLIC KEY-----\n"
        var i = 0
        while i < text.count {
            out += String(text[i..<min(i + 64, text.count)]) + "\n"
            i += 64
        }
        return out + "-----END PUBLIC KEY-----\n"
    }
}

// MARK: libcrypto plumbing

/// One libcrypto key (`EVP_PKEY`), freed with the instance.
final class EVPKey: @unchecked Sendable {
    // @unchecked: the key is complete when `init` returns and is never modified after.
    // libcrypto allows one EVP_PKEY to be used by many threads at once for signing and
    // verifying, as long as each operation has its own EVP_MD_CTX, which every method here
    // creates (OpenSSL 3 crypto(7), "Thread safety"; its operation cache is locked inside).
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        EVP_PKEY_free(pointer)
    }

    /// libcrypto's own check of a public key (`EVP_PKEY_public_check`).
    func passesPublicCheck() -> Bool {
        guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pointer, nil) else { return false }
        defer { EVP_PKEY_CTX_free(ctx) }
        let ok = EVP_PKEY_public_check(ctx) == 1
        ERR_clear_error()
        return ok
    }

    /// True when `signature` verifies over `message` with SHA-256 (PKCS #1 v1.5 padding for
    /// RSA when `rsaPadding`).
    func verify(_ signature: [UInt8], _ message: [UInt8], rsaPadding: Bool) -> Bool {
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer {
            EVP_MD_CTX_free(ctx)
            ERR_clear_error()
        }
        var pctx: OpaquePointer?
        guard EVP_DigestVerifyInit(ctx, &pctx, EVP_sha256(), nil, pointer) == 1 else { return false }
        if rsaPadding {
            guard EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1 else { return false }
        }
        let result = signature.withUnsafeBufferPointer { s in
            message.withUnsafeBufferPointer { m in
                EVP_DigestVerify(ctx, s.baseAddress, s.count, m.baseAddress, m.count)
            }
        }
        return result == 1
    }

    /// The signature of `message` with SHA-256 (PKCS #1 v1.5 for RSA, DER for ECDSA).
    func sign(_ message: [UInt8], rsaPadding: Bool) throws(CryptoError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw .library("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        var pctx: OpaquePointer?
        guard EVP_DigestSignInit(ctx, &pctx, EVP_sha256(), nil, pointer) == 1 else { throw .library("EVP_DigestSignInit") }
        if rsaPadding {
            guard EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1 else { throw .library("EVP_PKEY_CTX_set_rsa_padding") }
        }
        var length = 0
        let sized = message.withUnsafeBufferPointer { m in EVP_DigestSign(ctx, nil, &length, m.baseAddress, m.count) }
        guard sized == 1, length > 0 else { throw .library("EVP_DigestSign") }
        var out = [UInt8](repeating: 0, count: length)
        let signed = out.withUnsafeMutableBufferPointer { o in
            message.withUnsafeBufferPointer { m in EVP_DigestSign(ctx, o.baseAddress, &length, m.baseAddress, m.count) }
        }
        guard signed == 1 else { throw .library("EVP_DigestSign") }
        return Array(out.prefix(length))
    }

    /// The public part as DER SubjectPublicKeyInfo.
    func publicKeyDER() -> [UInt8] {
        let length = i2d_PUBKEY(pointer, nil)
        guard length > 0 else { fatalError("i2d_PUBKEY failed on a complete key") }
        var out = [UInt8](repeating: 0, count: Int(length))
        out.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            _ = i2d_PUBKEY(pointer, &cursor)
        }
        return out
    }

    /// A big-number parameter of the key (`n`, `e`, `qx`…) as big-endian bytes, left-padded
    /// to `width` when given.
    func bignumParameter(_ name: UnsafePointer<CChar>, width: Int? = nil) throws(CryptoError) -> [UInt8] {
        var bn: OpaquePointer?
        guard EVP_PKEY_get_bn_param(pointer, name, &bn) == 1, let bn else { throw .library("EVP_PKEY_get_bn_param") }
        defer { BN_free(bn) }
        let count = width ?? Int((BN_num_bits(bn) + 7) / 8)
        var out = [UInt8](repeating: 0, count: count)
        let written = out.withUnsafeMutableBufferPointer { BN_bn2binpad(bn, $0.baseAddress, Int32(count)) }
        guard written == count else { throw .library("BN_bn2binpad") }
        return out
    }
}

/// Parameter names and key types as C strings that live as long as the process:
/// libcrypto keeps the pointers it is given for names (`OSSL_PARAM_BLD` stores the key
/// pointer in the parameters it builds), so temporaries bridged from Swift strings will not do.
enum CName {
    private static func make(_ text: String) -> UnsafePointer<CChar> { UnsafePointer(strdup(text)!) }
    // Key types (EVP_PKEY-RSA(7), EVP_PKEY-EC(7)).
    nonisolated(unsafe) static let rsa = make("RSA")
    nonisolated(unsafe) static let ec = make("EC")
    nonisolated(unsafe) static let p256 = make("prime256v1")
    // OSSL_PKEY_PARAM_RSA_N, _E, _D, _FACTOR1/2, _EXPONENT1/2, _COEFFICIENT1.
    nonisolated(unsafe) static let rsaN = make("n")
    nonisolated(unsafe) static let rsaE = make("e")
    nonisolated(unsafe) static let rsaD = make("d")
    nonisolated(unsafe) static let rsaP = make("rsa-factor1")
    nonisolated(unsafe) static let rsaQ = make("rsa-factor2")
    nonisolated(unsafe) static let rsaDP = make("rsa-exponent1")
    nonisolated(unsafe) static let rsaDQ = make("rsa-exponent2")
    nonisolated(unsafe) static let rsaQInv = make("rsa-coefficient1")
    // OSSL_PKEY_PARAM_GROUP_NAME, _PUB_KEY, _PRIV_KEY, _EC_PUB_X, _EC_PUB_Y.
    nonisolated(unsafe) static let group = make("group")
    nonisolated(unsafe) static let publicKey = make("pub")
    nonisolated(unsafe) static let privateKey = make("priv")
    nonisolated(unsafe) static let ecX = make("qx")
    nonisolated(unsafe) static let ecY = make("qy")
}

/// Builds the parameters of a key (`OSSL_PARAM_BLD`) and the key from them
/// (`EVP_PKEY_fromdata`), keeping every value it was given alive until then.
final class ParamBuilder {
    private let builder: OpaquePointer
    private var bignums: [OpaquePointer] = []
    private var buffers: [UnsafeMutableRawPointer] = []

    init() throws(CryptoError) {
        guard let builder = OSSL_PARAM_BLD_new() else { throw .library("OSSL_PARAM_BLD_new") }
        self.builder = builder
    }

    deinit {
        // BN_clear_free: private exponents and factors pass through here too.
        for bn in bignums { BN_clear_free(bn) }
        for buffer in buffers { free(buffer) }
        OSSL_PARAM_BLD_free(builder)
    }

    /// A big-endian unsigned integer.
    func bignum(_ name: UnsafePointer<CChar>, _ bytes: [UInt8]) throws(CryptoError) {
        guard !bytes.isEmpty, let bn = bytes.withUnsafeBufferPointer({ BN_bin2bn($0.baseAddress, Int32($0.count), nil) }) else {
            throw .invalidInput("an empty integer")
        }
        bignums.append(bn)
        guard OSSL_PARAM_BLD_push_BN(builder, name, bn) == 1 else { throw .library("OSSL_PARAM_BLD_push_BN") }
    }

    /// A UTF-8 string.
    func utf8(_ name: UnsafePointer<CChar>, _ value: String) throws(CryptoError) {
        guard let copy = strdup(value) else { throw .library("strdup") }
        buffers.append(UnsafeMutableRawPointer(copy))
        guard OSSL_PARAM_BLD_push_utf8_string(builder, name, copy, 0) == 1 else { throw .library("OSSL_PARAM_BLD_push_utf8_string") }
    }

    /// An octet string.
    func octets(_ name: UnsafePointer<CChar>, _ bytes: [UInt8]) throws(CryptoError) {
        guard let copy = malloc(max(bytes.count, 1)) else { throw .library("malloc") }
        buffers.append(copy)
        bytes.withUnsafeBytes { copy.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        guard OSSL_PARAM_BLD_push_octet_string(builder, name, copy, bytes.count) == 1 else { throw .library("OSSL_PARAM_BLD_push_octet_string") }
    }

    /// The key of `type` with the parameters pushed so far.
    func makeKey(type: UnsafePointer<CChar>, selection: Int32) throws(CryptoError) -> EVPKey {
        guard let params = OSSL_PARAM_BLD_to_param(builder) else { throw .library("OSSL_PARAM_BLD_to_param") }
        defer { OSSL_PARAM_free(params) }
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw .library("EVP_PKEY_CTX_new_from_name") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_fromdata_init(ctx) == 1 else { throw .library("EVP_PKEY_fromdata_init") }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata(ctx, &key, selection, params) == 1, let key else { throw .library("EVP_PKEY_fromdata") }
        return EVPKey(key)
    }
}
