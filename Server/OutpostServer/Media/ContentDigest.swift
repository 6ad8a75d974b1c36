import OutpostCrypto

/// The `Content-Digest` request field (RFC 9530 section 2), as docs/protocol.md section 6 uses
/// it: `Content-Digest: sha-256=:<base64 of the chunk's SHA-256>:`.
///
/// The field is an RFC 8941 Dictionary, so other algorithms may be listed alongside
/// (`sha-512=:…:, sha-256=:…:`) and members may carry parameters; those are parsed and
/// ignored. `sha-256` is required. Several field lines are combined with commas first
/// (RFC 9110 section 5.3). The digest covers the chunk's bytes as the handler sees them,
/// which for a gzip-coded request are the decoded bytes (section 6 defines it as the
/// digest of the chunk).
enum ContentDigest {
    /// Why a request's digest cannot be used. Every case is answered `400 digest_required`:
    /// the client's fix is the same, sending a correct `sha-256` member.
    enum Problem: Error, Equatable, CustomStringConvertible {
        /// No `Content-Digest` field.
        case missing
        /// The field is not an RFC 8941 Dictionary.
        case malformed
        /// The dictionary has no `sha-256` member.
        case noSHA256
        /// The `sha-256` member is not a Byte Sequence of 32 bytes.
        case invalidSHA256

        var description: String {
            switch self {
            case .missing: "a Content-Digest: sha-256=:<base64>: header is required (RFC 9530)"
            case .malformed: "the Content-Digest header is not a valid RFC 8941 dictionary"
            case .noSHA256: "the Content-Digest header has no sha-256 member"
            case .invalidSHA256: "the sha-256 member of Content-Digest must be a byte sequence (:<base64>:) of 32 bytes"
            }
        }
    }

    /// The 32-byte SHA-256 the field values declare.
    static func sha256(fieldValues: [String]) -> Result<[UInt8], Problem> {
        guard !fieldValues.isEmpty else { return .failure(.missing) }
        let combined = fieldValues.joined(separator: ",")
        var parser = StructuredFieldParser(Array(combined.utf8))
        guard let dictionary = parser.parseDictionary() else { return .failure(.malformed) }
        // RFC 8941 section 3.2: a repeated key keeps the last value.
        guard let member = dictionary.last(where: { $0.key == "sha-256" }) else { return .failure(.noSHA256) }
        guard case .binary(let bytes) = member.value, bytes.count == SHA256.byteCount else {
            return .failure(.invalidSHA256)
        }
        return .success(bytes)
    }
}

/// An RFC 8941 value, as much of it as a digest field needs to be skipped or read.
enum StructuredFieldValue: Equatable {
    case integer(Int64)
    case decimal(String)
    case string(String)
    case token(String)
    case binary([UInt8])
    case boolean(Bool)
    case innerList([StructuredFieldValue])
}

/// A parser for RFC 8941 Dictionaries (section 4.2), over bytes. Parameters are parsed
/// and dropped. Returns nil on any syntax error, as the RFC requires (the whole field
/// fails, nothing of it is used).
struct StructuredFieldParser {
    private let input: [UInt8]
    private var position = 0

    init(_ input: [UInt8]) { self.input = input }

    private var current: UInt8? { position < input.count ? input[position] : nil }

    private mutating func skipSP() {
        while current == 0x20 { position += 1 }
    }

    private mutating func skipOWS() {
        while current == 0x20 || current == 0x09 { position += 1 }
    }

    /// Section 4.2: leading and trailing spaces are discarded; anything left over fails.
    mutating func parseDictionary() -> [(key: String, value: StructuredFieldValue)]? {
        skipSP()
        var members: [(key: String, value: StructuredFieldValue)] = []
        guard current != nil else { return members }  // an empty field is an empty dictionary
        while true {
            guard let key = parseKey() else { return nil }
            let value: StructuredFieldValue
            if current == UInt8(ascii: "=") {
                position += 1
                guard let v = parseItemOrInnerList() else { return nil }
                value = v
            } else {
                value = .boolean(true)
                guard parseParameters() else { return nil }
            }
            members.append((key, value))
            skipOWS()
            guard let c = current else { break }
            guard c == UInt8(ascii: ",") else { return nil }
            position += 1
            skipOWS()
            guard current != nil else { return nil }  // a trailing comma
        }
        return members
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
    private mutating func parseKey() -> String? {
        guard let first = current, isLowerAlpha(first) || first == UInt8(ascii: "*") else { return nil }
        let start = position
        while let c = current, isLowerAlpha(c) || isDigit(c) || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
            || c == UInt8(ascii: ".") || c == UInt8(ascii: "*") {
            position += 1
        }
        return String(decoding: input[start..<position], as: UTF8.self)
    }

    private mutating func parseItemOrInnerList() -> StructuredFieldValue? {
        if current == UInt8(ascii: "(") { return parseInnerList() }
        guard let item = parseBareItem(), parseParameters() else { return nil }
        return item
    }

    private mutating func parseInnerList() -> StructuredFieldValue? {
        position += 1  // "("
        var items: [StructuredFieldValue] = []
        while true {
            skipSP()
            guard let c = current else { return nil }
            if c == UInt8(ascii: ")") {
                position += 1
                guard parseParameters() else { return nil }
                return .innerList(items)
            }
            guard let item = parseBareItem(), parseParameters() else { return nil }
            items.append(item)
            guard let next = current, next == 0x20 || next == UInt8(ascii: ")") else { return nil }
        }
    }

    /// `*( ";" *SP param-key [ "=" param-value ] )`
    private mutating func parseParameters() -> Bool {
        while current == UInt8(ascii: ";") {
            position += 1
            skipSP()
            guard parseKey() != nil else { return false }
            if current == UInt8(ascii: "=") {
                position += 1
                guard parseBareItem() != nil else { return false }
            }
        }
        return true
    }

    private mutating func parseBareItem() -> StructuredFieldValue? {
        guard let c = current else { return nil }
        switch c {
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return parseNumber()
        case UInt8(ascii: "\""): return parseString()
        case UInt8(ascii: ":"): return parseBinary()
        case UInt8(ascii: "?"): return parseBoolean()
        case UInt8(ascii: "*"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"): return parseToken()
        default: return nil
        }
    }

    /// Section 4.2.4: at most 15 integer digits, or 12 before and 1 to 3 after a dot.
    private mutating func parseNumber() -> StructuredFieldValue? {
        var negative = false
        if current == UInt8(ascii: "-") {
            negative = true
            position += 1
        }
        var integerDigits: [UInt8] = []
        while let c = current, isDigit(c) {
            integerDigits.append(c)
            position += 1
        }
        guard !integerDigits.isEmpty else { return nil }
        if current == UInt8(ascii: ".") {
            position += 1
            var fraction: [UInt8] = []
            while let c = current, isDigit(c) {
                fraction.append(c)
                position += 1
            }
            guard integerDigits.count <= 12, (1...3).contains(fraction.count) else { return nil }
            let text = (negative ? "-" : "") + String(decoding: integerDigits, as: UTF8.self) + "." + String(decoding: fraction, as: UTF8.self)
            return .decimal(text)
        }
        guard integerDigits.count <= 15, let value = Int64(String(decoding: integerDigits, as: UTF8.self)) else { return nil }
        return .integer(negative ? -value : value)
    }

    /// Section 4.2.5: printable ASCII; `\` escapes only `"` and `\`.
    private mutating func parseString() -> StructuredFieldValue? {
        position += 1
        var out: [UInt8] = []
        while let c = current {
            position += 1
            if c == UInt8(ascii: "\\") {
                guard let next = current, next == UInt8(ascii: "\"") || next == UInt8(ascii: "\\") else { return nil }
                out.append(next)
                position += 1
            } else if c == UInt8(ascii: "\"") {
                return .string(String(decoding: out, as: UTF8.self))
            } else if c < 0x20 || c > 0x7E {
                return nil
            } else {
                out.append(c)
            }
        }
        return nil  // no closing quote
    }

    /// Section 4.2.6: `( ALPHA / "*" ) *( tchar / ":" / "/" )`.
    private mutating func parseToken() -> StructuredFieldValue? {
        let start = position
        position += 1
        while let c = current, isTChar(c) || c == UInt8(ascii: ":") || c == UInt8(ascii: "/") {
            position += 1
        }
        return .token(String(decoding: input[start..<position], as: UTF8.self))
    }

    /// Section 4.2.7: `":" *(base64) ":"`. Missing padding is accepted, as the RFC asks
    /// parsers to do.
    private mutating func parseBinary() -> StructuredFieldValue? {
        position += 1
        let start = position
        while let c = current, c != UInt8(ascii: ":") {
            guard isAlpha(c) || isDigit(c) || c == UInt8(ascii: "+") || c == UInt8(ascii: "/") || c == UInt8(ascii: "=") else { return nil }
            position += 1
        }
        guard current == UInt8(ascii: ":") else { return nil }
        var text = String(decoding: input[start..<position], as: UTF8.self)
        position += 1
        if !text.contains("=") {
            while text.utf8.count % 4 != 0 { text += "=" }
        }
        guard let bytes = Base64.decode(text) else { return nil }
        return .binary(bytes)
    }

    private mutating func parseBoolean() -> StructuredFieldValue? {
        position += 1
        guard let c = current, c == UInt8(ascii: "0") || c == UInt8(ascii: "1") else { return nil }
        position += 1
        return .boolean(c == UInt8(ascii: "1"))
    }

    private func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
    private func isLowerAlpha(_ c: UInt8) -> Bool { c >= 0x61 && c <= 0x7A }
    private func isAlpha(_ c: UInt8) -> Bool { isLowerAlpha(c) || (c >= 0x41 && c <= 0x5A) }
    /// RFC 9110 section 5.6.2 `tchar`.
    private func isTChar(_ c: UInt8) -> Bool {
        if isAlpha(c) || isDigit(c) { return true }
        return Array("!#$%&'*+-.^_`|~".utf8).contains(c)
    }
}
