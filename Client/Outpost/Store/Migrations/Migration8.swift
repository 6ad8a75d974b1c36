import OutpostSQLite

// FROZEN: the data step of the released migration "8 sync session" (Store/StoreMigrations.swift).
// Never used by live code, and never changed: it moves the session's state from the `meta`
// keys of schema 7 into the `sync_session` row that migration creates, exactly as the SDK of
// that release did, with its own copies of the rules it needs (what an epoch and a cursor
// are, the phases' names in the row), so a change to the session's code cannot change what
// it writes. A fix is a new migration at the end of the list. MigrationTests pins `version`
// and this file's SHA-256.

enum Migration8 {
    /// Bumped by hand with any change to what this file writes (which then needs a new
    /// migration instead: the released one is frozen).
    static let version = "Migration8 1: meta epoch, cursor, rebasing and view_repull as the sync_session row"

    /// An epoch: 1 to 64 ASCII letters and digits.
    static func isEpoch<Bytes: Collection>(_ utf8: Bytes) -> Bool where Bytes.Element == UInt8 {
        !utf8.isEmpty && utf8.count <= 64 && utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) }
    }

    /// A version, `"<epoch>.<seq>"`: a seq of decimal digits without a leading zero, at
    /// most 2^53 - 1.
    static func isVersion(_ utf8: [UInt8]) -> Bool {
        guard let dot = utf8.lastIndex(of: UInt8(ascii: ".")), dot > 0, dot < utf8.count - 1, isEpoch(utf8[..<dot]) else { return false }
        let digits = utf8[(dot + 1)...]
        guard digits.count <= 16, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return false }
        if digits.count > 1 && digits.first == UInt8(ascii: "0") { return false }
        var seq: Int64 = 0
        for d in digits { seq = seq * 10 + Int64(d - 0x30) }
        return seq <= (1 << 53) - 1
    }

    /// A cursor: a version, or a version, a dot and a view of 1 to 64 lowercase letters
    /// and digits.
    static func isCursor(_ text: String) -> Bool {
        let utf8 = Array(text.utf8)
        if isVersion(utf8) { return true }
        guard let dot = utf8.lastIndex(of: UInt8(ascii: ".")), isVersion(Array(utf8[..<dot])) else { return false }
        let view = utf8[(dot + 1)...]
        return !view.isEmpty && view.count <= 64 && view.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) }
    }

    /// Runs after the migration's SQL created `sync_session` and before its SQL deletes the
    /// four `meta` keys. No valid epoch: detached, without a cursor. Else `rebasing`: a
    /// re-pull (`view_repull` says the view changed too); else `view_repull`: a view
    /// re-pull; else following. The cursor is kept when it is one.
    static func moveSession(_ db: Connection) throws {
        func meta(_ key: String) throws -> String? {
            try db.queryOne("SELECT value FROM meta WHERE key = ?", [.text(key)]) { $0.text(0) }
        }
        let epoch = try meta("epoch").flatMap { isEpoch($0.utf8) ? $0 : nil }
        let cursor = try meta("cursor").flatMap { isCursor($0) ? $0 : nil }
        let rePulling = try meta("rebasing") != nil
        let viewRePull = try meta("view_repull") != nil
        let phase: String
        switch (epoch, rePulling, viewRePull) {
        case (nil, _, _): phase = "detached"
        case (_?, true, let view): phase = view ? "re-pulling, view changed" : "re-pulling"
        case (_?, false, true): phase = "view re-pulling"
        case (_?, false, false): phase = "following"
        }
        try db.run("INSERT OR REPLACE INTO sync_session(one, phase, epoch, cursor) VALUES (1, ?, ?, ?)",
                   [.text(phase), epoch.map { .text($0) } ?? .null, epoch == nil ? .null : cursor.map { .text($0) } ?? .null])
    }
}
