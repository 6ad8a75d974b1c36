import Foundation

/// What a `Range` request field asks of a representation of `size` bytes (RFC 9110
/// section 14).
///
/// Decisions (docs/media.md): only one range is served. A field with several ranges, an
/// unknown unit or bad syntax is ignored and the whole file is sent with `200` (RFC 9110
/// section 14.2 lets a server ignore `Range`); a single range that cannot be satisfied
/// is `416` with `Content-Range: bytes */size`.
enum ByteRangeRequest: Equatable {
    /// Send the whole representation (`200`).
    case whole
    /// Send `length` bytes from `offset` (`206` with `Content-Range`).
    case partial(offset: Int64, length: Int64)
    /// `416` with `Content-Range: bytes */size`.
    case unsatisfiable

    /// Evaluates a `Range` field value against a representation of `size` bytes.
    static func evaluate(_ field: String?, size: Int64) -> ByteRangeRequest {
        guard let field else { return .whole }
        guard let eq = field.firstIndex(of: "=") else { return .whole }
        let unit = field[..<eq].trimmingCharacters(in: [" ", "\t"])
        guard unit.lowercased() == "bytes" else { return .whole }
        // `range-set = 1#range-spec`: empty list elements are allowed and ignored.
        let specs = field[field.index(after: eq)...]
            .split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: [" ", "\t"]) }
            .filter { !$0.isEmpty }
        guard specs.count == 1 else { return .whole }
        let spec = specs[0]
        guard let dash = spec.firstIndex(of: "-") else { return .whole }
        let firstText = spec[..<dash]
        let lastText = spec[spec.index(after: dash)...]
        if firstText.isEmpty {
            // suffix-range: the last n bytes.
            guard let n = digits(lastText) else { return .whole }
            guard n > 0, size > 0 else { return .unsatisfiable }
            let length = min(n, size)
            return .partial(offset: size - length, length: length)
        }
        guard let first = digits(firstText) else { return .whole }
        var last = size - 1
        if !lastText.isEmpty {
            guard let l = digits(lastText) else { return .whole }
            // first > last is an invalid range-spec: the field is ignored (section 14.1.1).
            guard l >= first else { return .whole }
            last = min(l, size - 1)
        }
        guard first < size else { return .unsatisfiable }
        return .partial(offset: first, length: last - first + 1)
    }

    /// `1*DIGIT` as an integer; values past Int64 saturate (they are past any file's end).
    private static func digits<S: StringProtocol>(_ text: S) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(text) ?? Int64.max
    }
}

/// Entity-tag matching for `If-None-Match` and `If-Range` (RFC 9110 sections 8.8.3, 13.1).
enum EntityTags {
    /// One entity-tag of a list: its opaque tag (with quotes) and whether it is weak.
    struct Tag: Equatable {
        var opaque: String
        var weak: Bool
    }

    /// The tags of an `If-None-Match`-style list, or nil for `*`. A malformed list gives
    /// the tags read before the error (they can only fail to match).
    static func parseList(_ value: String) -> [Tag]? {
        let bytes = Array(value.utf8)
        var i = 0
        var tags: [Tag] = []
        func skip() {
            while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 || bytes[i] == UInt8(ascii: ",") { i += 1 }
        }
        skip()
        if i < bytes.count, bytes[i] == UInt8(ascii: "*") {
            var j = i + 1
            while j < bytes.count, bytes[j] == 0x20 || bytes[j] == 0x09 { j += 1 }
            if j == bytes.count { return nil }
        }
        while i < bytes.count {
            var weak = false
            if i + 1 < bytes.count, bytes[i] == UInt8(ascii: "W"), bytes[i + 1] == UInt8(ascii: "/") {
                weak = true
                i += 2
            }
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { break }
            let start = i
            i += 1
            // etagc = %x21 / %x23-7E / obs-text
            while i < bytes.count, bytes[i] != UInt8(ascii: "\"") { i += 1 }
            guard i < bytes.count else { break }
            i += 1
            tags.append(Tag(opaque: String(decoding: bytes[start..<i], as: UTF8.self), weak: weak))
            skip()
        }
        return tags
    }

    /// `If-None-Match` (section 13.1.2, weak comparison): true when `*` or any listed tag
    /// has the same opaque tag as `etag`.
    static func noneMatchSatisfied(_ field: String, etag: String) -> Bool {
        guard let tags = parseList(field) else { return true }
        return tags.contains { $0.opaque == etag }
    }

    /// `If-Range` (section 13.1.5): the range is honoured only when the field is a strong
    /// entity-tag equal to `etag`. A date never matches: these responses carry no
    /// `Last-Modified`.
    static func ifRangeMatches(_ field: String, etag: String) -> Bool {
        let trimmed = field.trimmingCharacters(in: [" ", "\t"])
        return trimmed == etag
    }
}
