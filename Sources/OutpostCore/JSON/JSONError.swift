/// Why a byte sequence is not JSON that Outpost accepts, and where.
///
/// `offset` is the zero-based index of the byte at which the parser gave up, counted from
/// the start of the input, so a server can answer `400 invalid_json` with a message such as
/// `invalid JSON at byte 1234: unexpected character` (docs/protocol.md section 2).
public struct JSONError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong at `offset`.
    public enum Reason: Sendable, Hashable, CustomStringConvertible {
        /// The input ended inside a value, or held no value at all.
        case unexpectedEnd
        /// A byte that cannot start or continue the value being read.
        case unexpectedCharacter
        /// A number that breaks RFC 8259's grammar (leading zero, lone `-`, `1.`, `.5`, `1e`).
        case invalidNumber
        /// A backslash followed by something other than `" \ / b f n r t u`.
        case invalidEscape
        /// A `\u` escape without four hex digits, or a surrogate without its pair.
        case invalidUnicodeEscape
        /// A raw control character (U+0000 to U+001F) inside a string.
        case controlCharacterInString
        /// Bytes that are not well-formed UTF-8 (overlong forms, encoded surrogates, > U+10FFFF).
        case invalidUTF8
        /// An object that names the same key twice (compared byte for byte after unescaping).
        case duplicateKey(String)
        /// Arrays and objects nested deeper than the parser's `maxDepth`.
        case tooDeep(limit: Int)
        /// Something other than whitespace after the value.
        case trailingCharacters
        /// The input starts with a UTF-8 byte order mark, which RFC 8259 section 8.1 forbids.
        case byteOrderMark

        /// A short phrase for people, e.g. `unexpected character`.
        public var description: String {
            switch self {
            case .unexpectedEnd: "unexpected end of input"
            case .unexpectedCharacter: "unexpected character"
            case .invalidNumber: "invalid number"
            case .invalidEscape: "invalid escape sequence"
            case .invalidUnicodeEscape: "invalid \\u escape"
            case .controlCharacterInString: "control character in string"
            case .invalidUTF8: "invalid UTF-8"
            case .duplicateKey(let key): "duplicate key \"\(key.count > 64 ? String(key.prefix(64)) + "…" : key)\""
            case .tooDeep(let limit): "nesting deeper than \(limit) levels"
            case .trailingCharacters: "unexpected data after the value"
            case .byteOrderMark: "byte order mark not allowed"
            }
        }
    }

    /// Zero-based byte offset into the input where the problem was found.
    public var offset: Int
    /// What the problem is.
    public var reason: Reason

    /// Creates an error for `reason` at byte `offset`.
    public init(_ reason: Reason, at offset: Int) {
        self.reason = reason
        self.offset = offset
    }

    /// `invalid JSON at byte 1234: unexpected character`.
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}
