import OutpostSQLite

// FROZEN: the data step of the released migration "3 record models" (Store/StoreMigrations.swift).
// Never used by live code, and never changed: it converts the rows of schema 2 into the
// tables that migration creates, exactly as the SDK of that release did. It reads and writes
// SQL of those two schemas only, with its own copies of the rules it needs (versions, their
// order, an edit's order and what the app sees), so a change to the engine or the model
// storage cannot change what it writes. A fix is a new migration at the end of the list.
// MigrationTests pins `version` and this file's SHA-256.

enum Migration3 {
    /// Bumped by hand with any change to what this file writes (which then needs a new
    /// migration instead: the released one is frozen).
    static let version = "Migration3 1: records, aside and queue of schema 2 as one model per record"

    /// A version of schema 2's text, `"<epoch>.<seq>"`: an epoch of 1 to 64 ASCII letters and
    /// digits, a seq of decimal digits without a leading zero, at most 2^53 - 1.
    struct Version: Equatable {
        let epoch: [UInt8]
        let seq: Int64

        init?(_ text: String) {
            let utf8 = Array(text.utf8)
            guard let dot = utf8.lastIndex(of: UInt8(ascii: ".")), dot > 0, dot < utf8.count - 1 else { return nil }
            let epoch = Array(utf8[..<dot])
            guard epoch.count <= 64, epoch.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) }) else {
                return nil
            }
            let digits = utf8[(dot + 1)...]
            guard digits.count <= 16, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            if digits.count > 1 && digits.first == UInt8(ascii: "0") { return nil }
            var seq: Int64 = 0
            for d in digits { seq = seq * 10 + Int64(d - 0x30) }
            guard seq <= (1 << 53) - 1 else { return nil }
            self.epoch = epoch
            self.seq = seq
        }

        var text: String { String(decoding: epoch, as: UTF8.self) + "." + String(seq) }

        /// A later state: of a later epoch (a longer one, else the greater byte by byte), or
        /// of the same epoch with a greater seq.
        func isLater(than other: Version) -> Bool {
            if epoch != other.epoch {
                if epoch.count != other.epoch.count { return other.epoch.count < epoch.count }
                return other.epoch.lexicographicallyPrecedes(epoch)
            }
            return seq > other.seq
        }
    }

    /// Content: data, or nil for a tombstone.
    struct Body: Equatable {
        var data: [UInt8]?
    }

    /// A server's copy. `body` nil: unreadable (a base the file holds no copy of).
    struct Copy {
        var version: Version
        var body: Body?
        var updatedAt: Int64?
        var updatedBy: String?
        var clientTime: Int64?
        var changeId: String?

        /// The ten columns of a stored copy: version, data, deleted, readable, updated_at,
        /// updated_by, client_time, lineage, change_id, same_as.
        static func values(_ c: Copy?) -> [SQLiteValue] {
            guard let c else { return Array(repeating: .null, count: 10) }
            return [
                .text(c.version.text), c.body?.data.map { .blob($0) } ?? .null, .integer(c.body != nil && c.body?.data == nil ? 1 : 0),
                .integer(c.body == nil ? 0 : 1), c.updatedAt.map { .integer($0) } ?? .null, c.updatedBy.map { .text($0) } ?? .null,
                c.clientTime.map { .integer($0) } ?? .null, .null, c.changeId.map { .text($0) } ?? .null, .null,
            ]
        }
    }

    enum MadeOn {
        case nothing
        case copy(Copy)
        case edit(String)
    }

    enum Delivery {
        case queued
        case sent(base: Version?)
        case rejected(code: String)
    }

    struct Edit {
        var position: Int64
        var changeId: String
        var body: Body
        var clientTime: Int64
        var createdAt: Int64
        var madeOn: MadeOn
        var delivery: Delivery
        var attempts: Int64
        var nextAttemptAt: Int64
        var lastError: String?

        var isSent: Bool {
            if case .sent = delivery { return true }
            return false
        }

        var isUnsettled: Bool {
            if case .rejected = delivery { return false }
            return true
        }
    }

    struct Key: Hashable, Comparable {
        let collection: String
        let id: String

        static func < (a: Key, b: Key) -> Bool { (a.collection, a.id) < (b.collection, b.id) }
    }

    static let insertRecordSQL = """
        INSERT INTO records(collection, id, shows, view_data, view_deleted, pending, \
        s_version, s_data, s_deleted, s_readable, s_updated_at, s_updated_by, s_client_time, s_lineage, s_change_id, s_same_as, \
        l_version, l_data, l_deleted, l_readable, l_updated_at, l_updated_by, l_client_time, l_lineage, l_change_id, l_same_as) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    static let insertEditSQL = """
        INSERT INTO edits(position, change_id, collection, id, local_id, kind, lineage_version, lineage_updated_at, carried_lineage, \
        deleted, data, client_time, created_at, made_on, made_on_edit, \
        m_version, m_data, m_deleted, m_readable, m_updated_at, m_updated_by, m_client_time, m_lineage, m_change_id, m_same_as, \
        delivery, sent_base, \
        a_version, a_data, a_deleted, a_readable, a_updated_at, a_updated_by, a_client_time, a_lineage, a_change_id, a_same_as, \
        error_code, last_error, attempts, next_attempt_at) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    /// Runs between the migration's SQL that renamed schema 2's `records` and `queue` to
    /// `records_v2` and `queue_v2` and created the model tables, and its SQL that drops the
    /// old tables. Each record becomes one model: its copy (the newer of the row's and the one
    /// kept aside; a copy marked for the re-pull of a new history is a left copy), and its
    /// queue entries as edits, each made on the one before it, the first on the copy its base
    /// names. An entry sent and unanswered stays sent with its base; a rejected one stays
    /// rejected; any other is queued with its attempts and retry time.
    static func convert(_ db: Connection) throws {
        let rePulling = try db.scalarInt("SELECT count(*) FROM meta WHERE key = 'rebasing'") != 0
        var rows: [Key: (server: Copy?, epochCheck: Bool)] = [:]
        _ = try db.query("""
            SELECT collection, id, data, deleted, pending, version, server_data, server_deleted, updated_at, updated_by, client_time, own_change_id, epoch_check
            FROM records_v2
            """) { s in
            let key = Key(collection: s.text(0), id: s.text(1))
            var server: Copy?
            if let v = s.optionalText(5).flatMap(Version.init) {
                let pending = s.int64(4) != 0
                let body = pending ? Body(data: s.int64(7) != 0 ? nil : s.blob(6)) : Body(data: s.int64(3) != 0 ? nil : s.blob(2))
                server = Copy(version: v, body: body, updatedAt: s.optionalInt64(8), updatedBy: s.optionalText(9), clientTime: s.optionalInt64(10),
                              changeId: s.optionalText(11))
            }
            rows[key] = (server, s.int64(12) != 0)
        }
        _ = try db.query("SELECT collection, id, version, deleted, data, updated_at, updated_by, client_time FROM aside") { s in
            let key = Key(collection: s.text(0), id: s.text(1))
            guard let v = Version(s.text(2)) else { return }
            let copy = Copy(version: v, body: Body(data: s.int64(3) != 0 ? nil : s.blob(4)), updatedAt: s.int64(5), updatedBy: s.text(6),
                            clientTime: s.optionalInt64(7), changeId: nil)
            var row = rows[key] ?? (nil, false)
            if row.server.map({ copy.version.isLater(than: $0.version) }) ?? true { row.server = copy }
            rows[key] = row
        }
        var edits: [Key: [Edit]] = [:]
        _ = try db.query("""
            SELECT position, change_id, collection, id, op, data, base_version, client_time, state, attempts, next_attempt_at, last_error, error_code, created_at
            FROM queue_v2 ORDER BY position
            """) { s in
            let key = Key(collection: s.text(2), id: s.text(3))
            let body = s.text(4) == "delete" ? Body(data: nil) : Body(data: s.optionalBlob(5))
            let base = s.optionalText(6).flatMap(Version.init)
            var list = edits[key] ?? []
            let madeOn: MadeOn
            if let previous = list.last {
                madeOn = .edit(previous.changeId)
            } else if let base {
                let server = rows[key]?.server
                madeOn = .copy(server?.version == base ? server! : Copy(version: base, body: nil))
            } else {
                madeOn = .nothing
            }
            let delivery: Delivery
            switch s.text(8) {
            case "in_flight", "in_doubt": delivery = .sent(base: base)
            case "rejected": delivery = .rejected(code: s.optionalText(12) ?? "unknown")
            default: delivery = .queued
            }
            list.append(Edit(position: s.int64(0), changeId: s.text(1), body: body, clientTime: s.int64(7), createdAt: s.int64(13), madeOn: madeOn,
                             delivery: delivery, attempts: s.int64(9), nextAttemptAt: s.int64(10), lastError: s.optionalText(11)))
            edits[key] = list
        }
        for key in Set(rows.keys).union(edits.keys).sorted() {
            var server: Copy?, left: Copy?
            if let row = rows[key], let copy = row.server {
                if rePulling && row.epochCheck { left = copy } else { server = copy }
            }
            // The order edits go out: the sent ones first, then the others as they were made.
            let list = edits[key] ?? []
            let ordered = list.filter(\.isSent) + list.filter { !$0.isSent }
            guard server != nil || left != nil || !ordered.isEmpty else { continue }
            try write(key, server: server, left: left, edits: ordered, db)
        }
    }

    /// Stores one model: its `records` row (with what the app sees: the last edit waiting
    /// in the order they go out, else the copy) and its edits.
    static func write(_ key: Key, server: Copy?, left: Copy?, edits: [Edit], _ db: Connection) throws {
        let pending = edits.contains { $0.isUnsettled }
        let view: Body? = edits.last { $0.isUnsettled }?.body ?? server?.body ?? left?.body
        let shows: Int64
        if view == nil { shows = 2 } else if !pending && server?.body != nil && view == server?.body { shows = 0 } else { shows = 1 }
        var values: [SQLiteValue] = [.text(key.collection), .text(key.id), .integer(shows)]
        values.append(shows == 1 ? (view?.data.map { .blob($0) } ?? .null) : .null)
        values.append(.integer(view != nil && view?.data == nil ? 1 : 0))
        values.append(.integer(pending ? 1 : 0))
        values += Copy.values(server) + Copy.values(left)
        try db.run(insertRecordSQL, values)
        for e in edits {
            var v: [SQLiteValue] = [.integer(e.position), .text(e.changeId), .text(key.collection), .text(key.id), .text(e.changeId),
                                    .text("app"), .null, .null, .null]
            v += [.integer(e.body.data == nil ? 1 : 0), e.body.data.map { .blob($0) } ?? .null, .integer(e.clientTime), .integer(e.createdAt)]
            switch e.madeOn {
            case .nothing: v += [.text("nothing"), .null] + Copy.values(nil)
            case .copy(let c): v += [.text("copy"), .null] + Copy.values(c)
            case .edit(let id): v += [.text("edit"), .text(id)] + Copy.values(nil)
            }
            var code: SQLiteValue = .null
            switch e.delivery {
            case .queued: v += [.text("queued"), .null] + Copy.values(nil)
            case .sent(let base): v += [.text("sent"), base.map { .text($0.text) } ?? .null] + Copy.values(nil)
            case .rejected(let c):
                v += [.text("rejected"), .null] + Copy.values(nil)
                code = .text(c)
            }
            v += [code, e.lastError.map { .text($0) } ?? .null, .integer(e.attempts), .integer(e.nextAttemptAt)]
            try db.run(insertEditSQL, v)
        }
    }
}
