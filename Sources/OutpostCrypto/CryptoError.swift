import CCrypto

/// Errors of the primitives.
public enum CryptoError: Error, Equatable, CustomStringConvertible {
    /// The GCM tag did not verify: the sealed bytes were tampered with, or the key, the
    /// associated data or the nonce is not the one they were sealed with.
    case authenticationFailed
    /// A key of this many bytes was given where another length is required.
    case invalidKeyLength(Int)
    /// A nonce of this many bytes was given where another length is required.
    case invalidNonceLength(Int)
    /// The input cannot be processed as given (sealed text shorter than a tag, an output
    /// buffer too small, KDF parameters out of range, ...).
    case invalidInput(String)
    /// A libcrypto call failed where it should not have; the text names the function and
    /// carries libcrypto's own error text when it left one.
    case libraryFailure(String)

    public var description: String {
        switch self {
        case .authenticationFailed: return "authentication failed"
        case .invalidKeyLength(let n): return "invalid key length: \(n) bytes"
        case .invalidNonceLength(let n): return "invalid nonce length: \(n) bytes"
        case .invalidInput(let why): return "invalid input: \(why)"
        case .libraryFailure(let what): return "libcrypto failure: \(what)"
        }
    }

    /// A `.libraryFailure` naming `function`, with the oldest error libcrypto queued on this
    /// thread; the queue is then cleared so that a later failure does not report this one.
    static func library(_ function: String) -> CryptoError {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0 else { return .libraryFailure("\(function) failed") }
        var text = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &text, text.count)
        let message = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return .libraryFailure("\(function) failed: \(message)")
    }
}

/// Overwrites `buffer` with zeros in a way the optimizer may not remove, for key material
/// and unverified plaintext that must not outlive its use.
func cleanse(_ buffer: UnsafeMutableRawBufferPointer) {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return }
    OPENSSL_cleanse(base, buffer.count)
}

/// Overwrites the bytes of `array` with zeros. Best effort: Swift may already have made
/// copies of the array's storage that this cannot reach.
func cleanse(_ array: inout [UInt8]) {
    array.withUnsafeMutableBytes { cleanse($0) }
}
