import OutpostCore
import OutpostCrypto

// Every value that becomes part of a path on disk is one of these types, and each can
// only be made by validating its text first (docs/protocol.md section 6; docs/media.md). A
// `String` from a request never reaches `MediaFiles` directly.

/// A space name that passed `Names.isValidSpace`: `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`,
/// so never empty, never `.` or `..`, never containing `/`.
struct SpaceName: Hashable, Sendable, CustomStringConvertible {
    let rawValue: String

    init?(_ text: String) {
        guard Names.isValidSpace(text) else { return nil }
        rawValue = text
    }

    var description: String { rawValue }
}

/// A media id: the file's SHA-256 as 64 lowercase hex characters.
struct MediaID: Hashable, Sendable, CustomStringConvertible {
    let rawValue: String

    init?(_ text: String) {
        guard Names.isValidMediaID(text) else { return nil }
        rawValue = text
    }

    /// The two hex digits that name the file's fan-out directory.
    var prefix: String { String(rawValue.prefix(2)) }

    var description: String { rawValue }
}

/// An upload id: 128 random bits as 32 lowercase hex characters.
struct UploadID: Hashable, Sendable, CustomStringConvertible {
    let rawValue: String

    init?(_ text: String) {
        guard Hex.isLowercaseHex(text, length: 32) else { return nil }
        rawValue = text
    }

    /// A new id from the CSPRNG: unguessable, so an upload cannot be found by trying ids.
    static func random() -> UploadID {
        UploadID(Hex.encode(SecureRandom.bytes(16)))!
    }

    var description: String { rawValue }
}

/// Parses a chunk index path segment: decimal digits, no sign, no leading zero (so one
/// chunk has one URL), at most 9 digits. Nil otherwise; the range is checked against the
/// upload's `chunkCount` separately.
func parseChunkIndex(_ text: String) -> Int? {
    let utf8 = text.utf8
    guard !utf8.isEmpty, utf8.count <= 9, utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
    if utf8.count > 1 && utf8.first == UInt8(ascii: "0") { return nil }
    return Int(text)
}
