// Byte-exact string comparison for JSON keys and string values.
//
// Swift's `String ==` compares by Unicode canonical equivalence, so "é" (U+00E9) equals
// "e\u{301}". RFC 8259 section 8.3 compares strings code unit by code unit, and Outpost
// must not treat two different byte sequences as one key (that would make the duplicate
// check reject valid objects and let a lookup return the wrong member), so JSON compares
// and hashes the UTF-8 bytes.

/// Calls `body` with the string's UTF-8 bytes, without copying the string when it is native
/// (always, on Linux; `withUTF8` would need a mutable copy and so a retain/release pair).
@inline(__always)
@usableFromInline
func withUTF8Bytes<R>(_ string: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
    if let result = string.utf8.withContiguousStorageIfAvailable(body) { return result }
    var copy = string
    return copy.withUTF8(body)
}

@inline(__always)
@usableFromInline
package func utf8Equal(_ lhs: String, _ rhs: String) -> Bool {
    let count = lhs.utf8.count
    guard count == rhs.utf8.count else { return false }
    return withUTF8Bytes(lhs) { a in
        withUTF8Bytes(rhs) { b in
            var i = 0
            while i < count {
                if a[i] != b[i] { return false }
                i += 1
            }
            return true
        }
    }
}

/// Whether `lhs` sorts before `rhs` by UTF-8 bytes (the canonical key order).
@usableFromInline
package func utf8Less(_ lhs: String, _ rhs: String) -> Bool {
    withUTF8Bytes(lhs) { a in
        withUTF8Bytes(rhs) { b in
            let n = min(a.count, b.count)
            var i = 0
            while i < n {
                if a[i] != b[i] { return a[i] < b[i] }
                i += 1
            }
            return a.count < b.count
        }
    }
}

@inline(__always)
@usableFromInline
func utf8Hash(_ string: String, into hasher: inout Hasher) {
    withUTF8Bytes(string) { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    hasher.combine(0xFF as UInt8)  // terminator: never a UTF-8 byte, keeps ("ab","c") != ("a","bc")
}

/// A `String` that hashes and compares by its UTF-8 bytes, for the key index of large objects.
@usableFromInline
package struct UTF8Key: Hashable, Sendable {
    @usableFromInline package let string: String
    @inlinable package init(_ string: String) { self.string = string }
    @inlinable package static func == (lhs: UTF8Key, rhs: UTF8Key) -> Bool { utf8Equal(lhs.string, rhs.string) }
    @inlinable package func hash(into hasher: inout Hasher) { utf8Hash(string, into: &hasher) }
}
