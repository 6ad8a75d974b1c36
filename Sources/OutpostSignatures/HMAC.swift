import OutpostCCrypto
import OutpostCrypto

/// HMAC-SHA256 (RFC 2104) through libcrypto: the server's HS256 tokens and webhook
/// signatures. The SDK has no use for it, so it is not one of OutpostCrypto's primitives.
public enum HMACSHA256 {
    /// The 32-byte authentication code of `message` under `key`.
    public static func authenticate<Key: Sequence, Message: Sequence>(_ message: Message, key: Key) -> [UInt8]
    where Key.Element == UInt8, Message.Element == UInt8 {
        let keyBytes = Array(key)
        let messageBytes = Array(message)
        var out = [UInt8](repeating: 0, count: SHA256.byteCount)
        var length: UInt32 = 0
        let result = keyBytes.withUnsafeBytes { k in
            messageBytes.withUnsafeBytes { m in
                out.withUnsafeMutableBufferPointer { o in
                    HMAC(EVP_sha256(), k.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(k.count),
                         m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count, o.baseAddress, &length)
                }
            }
        }
        guard result != nil, length == UInt32(SHA256.byteCount) else { fatalError("HMAC-SHA256 failed") }
        return out
    }

    /// True when `mac` is the authentication code of `message` under `key`; compared in
    /// constant time so that the comparison leaks nothing about where the bytes differ.
    public static func verify<Key: Sequence, Message: Sequence>(_ mac: [UInt8], message: Message, key: Key) -> Bool
    where Key.Element == UInt8, Message.Element == UInt8 {
        constantTimeEquals(mac, authenticate(message, key: key))
    }
}
