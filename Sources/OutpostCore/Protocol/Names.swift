/// Validation of the names docs/protocol.md section 1 defines. Every check works on UTF-8 bytes
/// and allocates nothing, because the server runs them for every change it receives.
public enum Names {
    /// Why `name` is not a space name, for the `400 invalid_space` answer (docs/protocol.md
    /// section 2); the name is cut to 80 characters.
    public static func invalidSpaceMessage(_ name: String) -> String {
        "\"\(name.prefix(80))\" is not a space name: 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-', starting with a letter or a digit (spaces need no creation)"
    }

    /// A space name: `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`.
    public static func isValidSpace(_ name: String) -> Bool {
        let utf8 = name.utf8
        guard let first = utf8.first, utf8.count <= 64, isAlphanumeric(first) else { return false }
        return utf8.dropFirst().allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }
    }

    /// A collection name: `^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`.
    public static func isValidCollection(_ name: String) -> Bool {
        let utf8 = name.utf8
        guard let first = utf8.first, utf8.count <= 64, isAlphanumeric(first) || first == UInt8(ascii: "_") else { return false }
        return utf8.dropFirst().allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }
    }

    /// A record id: 1 to 256 bytes of UTF-8 with no control characters (C0, DEL, C1).
    public static func isValidRecordID(_ id: String) -> Bool {
        let utf8 = id.utf8
        guard !utf8.isEmpty, utf8.count <= 256 else { return false }
        return id.unicodeScalars.allSatisfy { scalar in
            let v = scalar.value
            return !(v < 0x20 || v == 0x7F || (v >= 0x80 && v <= 0x9F))
        }
    }

    /// A change id or client id: 1 to 128 characters of `[A-Za-z0-9_.:-]`.
    public static func isValidChangeID(_ id: String) -> Bool {
        let utf8 = id.utf8
        guard !utf8.isEmpty, utf8.count <= 128 else { return false }
        return utf8.allSatisfy(isTokenByte)
    }

    /// A client id: the same alphabet and length as a change id.
    public static func isValidClientID(_ id: String) -> Bool { isValidChangeID(id) }

    /// A media id: 64 lowercase hex characters (the file's SHA-256).
    public static func isValidMediaID(_ id: String) -> Bool {
        let utf8 = id.utf8
        return utf8.count == 64 && utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }

    @inline(__always)
    static func isAlphanumeric(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
    }

    @inline(__always)
    static func isTokenByte(_ b: UInt8) -> Bool {
        isAlphanumeric(b) || b == UInt8(ascii: "_") || b == UInt8(ascii: ".") || b == UInt8(ascii: ":") || b == UInt8(ascii: "-")
    }
}
