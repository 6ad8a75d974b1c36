/// The version of one record state, `"<epoch>.<seq>"` (docs/protocol.md section 1), also used
/// as a cursor (a position in a space's history; `"<epoch>.0"` is the start).
public struct Version: Hashable, Sendable, CustomStringConvertible {
    /// The largest seq the protocol allows (2^53 - 1, exact in every JSON implementation).
    public static let maxSeq: Int64 = (1 << 53) - 1

    public let epoch: Epoch
    /// Positive for a record version; 0 only for the cursor at the start of an epoch.
    public let seq: Int64

    public init(epoch: Epoch, seq: Int64) {
        precondition(seq >= 0 && seq <= Version.maxSeq, "seq out of range: \(seq)")
        self.epoch = epoch
        self.seq = seq
    }

    /// The start of `epoch`, as a cursor.
    public static func start(of epoch: Epoch) -> Version { Version(epoch: epoch, seq: 0) }

    /// Parses `"<epoch>.<seq>"`; nil when the text is not one. `seq` is decimal without
    /// sign or leading zeros and at most 2^53 - 1.
    public init?(_ text: String) {
        let utf8 = Array(text.utf8)
        guard let dot = utf8.lastIndex(of: UInt8(ascii: ".")), dot > 0, dot < utf8.count - 1 else { return nil }
        guard let epoch = Epoch(String(decoding: utf8[..<dot], as: UTF8.self)) else { return nil }
        let digits = utf8[(dot + 1)...]
        guard digits.count <= 16, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        if digits.count > 1 && digits.first == UInt8(ascii: "0") { return nil }
        var seq: Int64 = 0
        for d in digits { seq = seq * 10 + Int64(d - 0x30) }
        guard seq <= Version.maxSeq else { return nil }
        self.epoch = epoch
        self.seq = seq
    }

    /// The wire text, `"<epoch>.<seq>"`.
    public var description: String { "\(epoch.rawValue).\(seq)" }

    /// The wire text.
    public var text: String { description }
}

/// A pull cursor (docs/protocol.md section 5): where a pull ends, and, on a server with rules,
/// the view of the space it was made under (docs/rules.md). Its text is
/// `"<epoch>.<seq>"`, or `"<epoch>.<seq>.<view>"` with a view; a view is 1 to 64 lowercase
/// letters and digits, opaque to the client.
public struct Cursor: Hashable, Sendable, CustomStringConvertible {
    public var version: Version
    public var view: String?

    public init(_ version: Version, view: String? = nil) {
        precondition(view.map(Cursor.isValidView) ?? true, "not a view: \(view ?? "")")
        self.version = version
        self.view = view
    }

    /// Parses either form; nil when the text is neither.
    public init?(_ text: String) {
        if let version = Version(text) {
            self.init(version)
            return
        }
        guard let dot = text.lastIndex(of: "."), let version = Version(String(text[..<dot])) else { return nil }
        let view = String(text[text.index(after: dot)...])
        guard Self.isValidView(view) else { return nil }
        self.init(version, view: view)
    }

    public static func isValidView(_ view: String) -> Bool {
        let utf8 = view.utf8
        return !utf8.isEmpty && utf8.count <= 64 && utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) }
    }

    /// The wire text.
    public var text: String { view.map { "\(version.text).\($0)" } ?? version.text }
    public var description: String { text }
}
