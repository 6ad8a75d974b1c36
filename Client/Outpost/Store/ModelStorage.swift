import OutpostCore
import OutpostSQLite

// How `RecordModel`s are stored (schema 3): one `records` row per record with its two
// copies and what the app sees, and one `edits` row per edit. Every column is written from
// the model; `shows`, `view_*` and `pending` are derived from it so reads need no edits.

extension LocalDatabase {
    /// A `records` row: the key, what the app sees (`shows`, `view_*`, `pending`), the
    /// server's copy (`s_*`) and the left copy (`l_*`).
    private enum RecordRow {
        static let columns = RowColumns(["collection", "id", "shows", "view_data", "view_deleted", "pending"] + CopyColumns.names("s") + CopyColumns.names("l"))
        static let collection = columns.index("collection"), id = columns.index("id"), shows = columns.index("shows")
        static let viewData = columns.index("view_data"), viewDeleted = columns.index("view_deleted"), pending = columns.index("pending")
        static let server = columns.index("s_version"), left = columns.index("l_version")
        static let selectSQL = "SELECT \(columns.list) FROM records WHERE collection = ? AND id = ?"
        /// An upsert, not `INSERT OR REPLACE`: a replace deletes the row without telling the
        /// delete triggers and would impose its conflict rule on the statements of the query
        /// indexes' triggers (Records/QueryIndexes.swift); an update lets them skip a row
        /// whose content is unchanged.
        static let saveSQL = """
            INSERT INTO records(\(columns.list)) VALUES (\(columns.placeholders))
            ON CONFLICT(collection, id) DO UPDATE SET \(columns.names.dropFirst(2).map { "\($0) = excluded.\($0)" }.joined(separator: ", "))
            """
    }

    /// An `edits` row: one edit of a record, with the copy it was made on (`m_*`) and the
    /// copy its acknowledgement brought (`a_*`).
    private enum EditRow {
        static let columns = RowColumns(["position", "change_id", "collection", "id", "local_id", "kind", "lineage_version", "lineage_updated_at", "carried_lineage",
                                         "deleted", "data", "client_time", "created_at", "made_on", "made_on_edit"] + CopyColumns.names("m")
                                        + ["delivery", "sent_base"] + CopyColumns.names("a")
                                        + ["error_code", "last_error", "attempts", "next_attempt_at", "upgrade_to", "in_conflict", "resolves"])
        static let position = columns.index("position"), changeId = columns.index("change_id"), collection = columns.index("collection")
        static let id = columns.index("id"), localId = columns.index("local_id"), kind = columns.index("kind")
        static let lineageVersion = columns.index("lineage_version"), lineageTime = columns.index("lineage_updated_at")
        static let carriedLineage = columns.index("carried_lineage"), deleted = columns.index("deleted"), data = columns.index("data")
        static let clientTime = columns.index("client_time"), createdAt = columns.index("created_at"), madeOn = columns.index("made_on")
        static let madeOnEdit = columns.index("made_on_edit"), madeOnCopy = columns.index("m_version"), delivery = columns.index("delivery")
        static let sentBase = columns.index("sent_base"), ackCopy = columns.index("a_version"), errorCode = columns.index("error_code")
        static let lastError = columns.index("last_error"), attempts = columns.index("attempts"), nextAttempt = columns.index("next_attempt_at")
        static let upgradeTo = columns.index("upgrade_to"), inConflict = columns.index("in_conflict"), resolves = columns.index("resolves")
        static let selectSQL = "SELECT \(columns.list) FROM edits WHERE collection = ? AND id = ? ORDER BY position"
        static let insertSQL = "INSERT INTO edits(\(columns.list)) VALUES (\(columns.placeholders))"
    }

    private static func readEdit(_ s: Statement) -> Edit {
        typealias E = EditRow
        let kind: EditKind
        if s.text(E.kind) == "reoffer", let v = s.optionalText(E.lineageVersion).flatMap(Version.init) {
            kind = .reoffer(Lineage(version: v, updatedAt: s.optionalInt64(E.lineageTime) ?? 0), descendsFrom: s.optionalText(E.carriedLineage).flatMap(Version.init))
        } else {
            kind = .app
        }
        let body = Body(data: s.int64(E.deleted) != 0 ? nil : s.blob(E.data))
        let madeOn: MadeOn
        switch s.text(E.madeOn) {
        case "copy": madeOn = CopyColumns.read(s, at: E.madeOnCopy).map { .copy($0) } ?? .nothing
        case "edit": madeOn = .edit(s.text(E.madeOnEdit))
        default: madeOn = .nothing
        }
        let delivery: Delivery
        let lastError = s.optionalText(E.lastError)
        switch s.text(E.delivery) {
        case "sent": delivery = .sent(base: s.optionalText(E.sentBase).flatMap(Version.init))
        case "acknowledged":
            if var copy = CopyColumns.read(s, at: E.ackCopy) {
                copy.body = body
                delivery = .acknowledged(copy)
            } else {
                delivery = .queued
            }
        case "rejected": delivery = .rejected(code: s.optionalText(E.errorCode) ?? "unknown", message: lastError ?? "rejected")
        default: delivery = .queued
        }
        return Edit(position: s.int64(E.position), localId: s.text(E.localId), changeId: s.text(E.changeId), kind: kind, body: body, clientTime: s.int64(E.clientTime),
                    createdAt: s.int64(E.createdAt), madeOn: madeOn, delivery: delivery, attempts: s.int(E.attempts), nextAttemptAt: s.int64(E.nextAttempt),
                    lastError: lastError, upgradeTo: s.optionalInt64(E.upgradeTo).map { Int(clamping: $0) }, inConflict: s.optionalInt64(E.inConflict) == 1,
                    resolves: s.optionalText(E.resolves).flatMap(readMark))
    }

    /// A resolution's mark as `edits.resolves` keeps it (`{"resolver", "outcome"}`).
    private static func readMark(_ text: String) -> ResolutionMark? {
        guard let value = try? JSONParser.parse(Array(text.utf8)), case .success(let mark) = ResolutionMark.decode(value, field: "resolves") else { return nil }
        return mark
    }

    /// The record's model; nil when the store holds nothing of it.
    func model(_ key: RecordKey) throws -> RecordModel? {
        let row = try db.cached(RecordRow.selectSQL)
            .queryOne([.text(key.collection), .text(key.id)]) { s in (CopyColumns.read(s, at: RecordRow.server), CopyColumns.read(s, at: RecordRow.left)) }
        let edits = try db.cached(EditRow.selectSQL)
            .query([.text(key.collection), .text(key.id)], Self.readEdit)
        guard row != nil || !edits.isEmpty else { return nil }
        var model = RecordModel(key: key, server: row?.0, left: row?.1, edits: edits)
        Engine.normalize(&model)
        return model
    }

    /// Stores `model` (or removes the record when it holds nothing).
    func save(_ model: RecordModel) throws {
        let key = model.key
        try db.cached("DELETE FROM edits WHERE collection = ? AND id = ?").run([.text(key.collection), .text(key.id)])
        guard !model.isEmpty else {
            try db.cached("DELETE FROM records WHERE collection = ? AND id = ?").run([.text(key.collection), .text(key.id)])
            return
        }
        let view = model.view
        let shows: Int64
        if view == nil { shows = 2 } else if !model.pending && model.server?.body != nil && view == model.server?.body { shows = 0 } else { shows = 1 }
        typealias R = RecordRow
        var row = R.columns.row()
        row[R.collection] = .text(key.collection)
        row[R.id] = .text(key.id)
        row[R.shows] = .integer(shows)
        row[R.viewData] = shows == 1 ? (view?.data.map { .blob($0) } ?? .null) : .null
        row[R.viewDeleted] = .integer(view?.deleted == true ? 1 : 0)
        row[R.pending] = .integer(model.pending ? 1 : 0)
        CopyColumns.write(model.server, into: &row, at: R.server)
        CopyColumns.write(model.left, into: &row, at: R.left)
        try db.cached(R.saveSQL).run(row.values)
        for edit in model.edits { try insert(edit, key) }
        if let cipher { try keepSealed(model, cipher) }
    }

    private func insert(_ e: Edit, _ key: RecordKey) throws {
        typealias E = EditRow
        var row = E.columns.row()
        row[E.position] = e.position.map { .integer($0) } ?? .null
        row[E.changeId] = .text(e.changeId)
        row[E.collection] = .text(key.collection)
        row[E.id] = .text(key.id)
        row[E.localId] = .text(e.localId)
        switch e.kind {
        case .app: row[E.kind] = .text("app")
        case .reoffer(let l, let from):
            row[E.kind] = .text("reoffer")
            row[E.lineageVersion] = .text(l.version.text)
            row[E.lineageTime] = .integer(l.updatedAt)
            row[E.carriedLineage] = from.map { .text($0.text) } ?? .null
        }
        row[E.deleted] = .integer(e.body.deleted ? 1 : 0)
        row[E.data] = e.body.data.map { .blob($0) } ?? .null
        row[E.clientTime] = .integer(e.clientTime)
        row[E.createdAt] = .integer(e.createdAt)
        switch e.madeOn {
        case .nothing: row[E.madeOn] = .text("nothing")
        case .copy(let c):
            row[E.madeOn] = .text("copy")
            CopyColumns.write(c, into: &row, at: E.madeOnCopy)
        case .edit(let id):
            row[E.madeOn] = .text("edit")
            row[E.madeOnEdit] = .text(id)
        }
        switch e.delivery {
        case .queued: row[E.delivery] = .text("queued")
        case .sent(let base):
            row[E.delivery] = .text("sent")
            row[E.sentBase] = base.map { .text($0.text) } ?? .null
        case .acknowledged(var c):
            c.body = Body(data: nil)
            row[E.delivery] = .text("acknowledged")
            CopyColumns.write(c, into: &row, at: E.ackCopy)
        case .rejected(let code, _):
            row[E.delivery] = .text("rejected")
            row[E.errorCode] = .text(code)
        }
        row[E.lastError] = e.lastError.map { .text($0) } ?? .null
        row[E.attempts] = .integer(Int64(e.attempts))
        row[E.nextAttempt] = .integer(e.nextAttemptAt)
        // NULL, as the migrations that added these columns left every edit, when unset.
        row[E.upgradeTo] = e.upgradeTo.map { .integer(Int64($0)) } ?? .null
        row[E.inConflict] = e.inConflict ? .integer(1) : .null
        row[E.resolves] = e.resolves.map { .text(String(decoding: $0.json.encoded(), as: UTF8.self)) } ?? .null
        try db.cached(E.insertSQL).run(row.values)
    }

    /// The SQL condition (on `edits`) of an edit the engine holds from the server
    /// (`Engine.isHeld`): held for a later app version, or in a conflict left for a person.
    static func heldCondition(_ versions: AppVersions) -> (sql: String, values: [SQLiteValue]) {
        let (upgrade, values) = upgradeCondition(versions)
        return ("(\(upgrade) OR (delivery = 'queued' AND in_conflict IS 1))", values)
    }

    /// The SQL condition (on `edits`) of an edit held for a later app version than
    /// `versions` names for its collection, and its bound values.
    static func upgradeCondition(_ versions: AppVersions) -> (sql: String, values: [SQLiteValue]) {
        var values: [SQLiteValue] = []
        var version = "?"
        if !versions.collections.isEmpty {
            version = "CASE collection"
            for (name, v) in versions.collections.sorted(by: { $0.key < $1.key }) {
                version += " WHEN ? THEN ?"
                values += [.text(name), .integer(Int64(v))]
            }
            version += " ELSE ? END"
        }
        values.append(.integer(Int64(versions.app ?? 0)))
        return ("(delivery = 'queued' AND upgrade_to IS NOT NULL AND upgrade_to > \(version))", values)
    }

    /// How many edits are held for a later app version (`SyncStatus.upgradeRequired`).
    func heldCount(_ versions: AppVersions) throws -> Int {
        let (held, values) = Self.upgradeCondition(versions)
        return Int(try db.scalarInt("SELECT count(*) FROM edits WHERE \(held)", values) ?? 0)
    }

    /// How many edits wait for a person to settle their conflict (`SyncStatus.conflicts`).
    func conflictCount() throws -> Int {
        Int(try db.scalarInt("SELECT count(*) FROM edits WHERE delivery = 'queued' AND in_conflict = 1") ?? 0)
    }

    /// The row `insertIfAbsent` writes: the key, what the app sees, and the server's copy;
    /// its indexes are bindings (1-based).
    private enum AbsentRow {
        static let columns = RowColumns(["collection", "id", "shows", "pending"] + CopyColumns.names("s"))
        static let collection = columns.index("collection") + 1, id = columns.index("id") + 1, shows = columns.index("shows") + 1
        static let pending = columns.index("pending") + 1, server = columns.index("s_version") + 1
        static let sql = "INSERT INTO records(\(columns.list)) VALUES (\(columns.placeholders)) ON CONFLICT(collection, id) DO NOTHING"
    }

    /// Stores the model of a record the store has no row of, written without reading first
    /// (the common case of an initial sync, bound column by column): a readable copy and
    /// nothing else; any other model goes through `save`. Returns false (writing nothing)
    /// when the store holds the record or the model is not of that form.
    func insertIfAbsent(_ model: RecordModel) throws -> Bool {
        guard let copy = model.server, copy.body != nil, model.left == nil, model.edits.isEmpty else { return false }
        let key = model.key
        typealias A = AbsentRow
        let stmt = try db.cached(A.sql)
        // Bound column by column (no array of values per record).
        try stmt.bind(text: key.collection, at: A.collection)
        try stmt.bind(text: key.id, at: A.id)
        try stmt.bind(int: 0, at: A.shows)
        try stmt.bind(int: 0, at: A.pending)
        try CopyColumns.forEachValue(copy) { offset, value in try stmt.bind(value, at: A.server + offset) }
        while try stmt.step() {}
        stmt.reset()
        // A record with edits always has a row (see `save`), so an insert means none.
        return db.changes == 1
    }

    /// Every record key the store holds (records or edits).
    func allKeys() throws -> [RecordKey] {
        try db.query("SELECT collection, id FROM records UNION SELECT collection, id FROM edits ORDER BY 1, 2") { RecordKey(collection: $0.text(0), id: $0.text(1)) }
    }

    /// Keys of records holding a left copy.
    func keysWithLeftCopies() throws -> [RecordKey] {
        try db.query("SELECT collection, id FROM records WHERE l_version IS NOT NULL ORDER BY collection, id") { RecordKey(collection: $0.text(0), id: $0.text(1)) }
    }

    /// Keys of records with an edit waiting for the server, by the queue position of their
    /// first such edit.
    func keysWithUnsettledEdits() throws -> [RecordKey] {
        try db.query("SELECT collection, id, min(position) AS p FROM edits WHERE delivery IN ('queued', 'sent') GROUP BY collection, id ORDER BY p") {
            RecordKey(collection: $0.text(0), id: $0.text(1))
        }
    }

    /// Keys of records with an edit in `deliveries`, by queue position.
    func keysWithEdits(in deliveries: [String]) throws -> [RecordKey] {
        let list = deliveries.map { "'\($0)'" }.joined(separator: ",")
        return try db.query("SELECT collection, id, min(position) AS p FROM edits WHERE delivery IN (\(list)) GROUP BY collection, id ORDER BY p") {
            RecordKey(collection: $0.text(0), id: $0.text(1))
        }
    }

    func count(deliveries: [String]) throws -> Int {
        let list = deliveries.map { "'\($0)'" }.joined(separator: ",")
        return Int(try db.scalarInt("SELECT count(*) FROM edits WHERE delivery IN (\(list))") ?? 0)
    }

    func key(ofChange changeId: String) throws -> RecordKey? {
        try db.queryOne("SELECT collection, id FROM edits WHERE change_id = ?", [.text(changeId)]) { RecordKey(collection: $0.text(0), id: $0.text(1)) }
    }

    // MARK: What the app reads

    /// A record as the app sees it, read from `records`: the server's copy's columns when it
    /// shows that (`shows` 0), the derived `view_*` otherwise.
    private enum ShownRow {
        static let columns = RowColumns(selecting: [
            ("collection", "collection"), ("id", "id"),
            ("data", "CASE shows WHEN 0 THEN s_data ELSE view_data END"),
            ("deleted", "CASE shows WHEN 0 THEN s_deleted ELSE view_deleted END"),
            ("pending", "pending"),
            ("version", "coalesce(s_version, l_version)"),
            ("updated_at", "CASE WHEN s_version IS NULL THEN l_updated_at ELSE s_updated_at END"),
            ("updated_by", "CASE WHEN s_version IS NULL THEN l_updated_by ELSE s_updated_by END"),
        ])
        static let collection = columns.index("collection"), id = columns.index("id"), data = columns.index("data")
        static let deleted = columns.index("deleted"), pending = columns.index("pending"), version = columns.index("version")
        static let updatedAt = columns.index("updated_at"), updatedBy = columns.index("updated_by")
    }

    /// A record as the app sees it: (key, body, pending, version, updatedAt, updatedBy).
    struct Shown: Sendable {
        let key: RecordKey
        let body: Body
        let pending: Bool
        let version: Version?
        let updatedAt: Int64?
        let updatedBy: String?
    }

    private static func readShown(_ s: Statement) -> Shown {
        typealias S = ShownRow
        return Shown(key: RecordKey(collection: s.text(S.collection), id: s.text(S.id)), body: Body(data: s.int64(S.deleted) != 0 ? nil : s.blob(S.data)),
                     pending: s.int64(S.pending) != 0, version: s.optionalText(S.version).flatMap(Version.init), updatedAt: s.optionalInt64(S.updatedAt),
                     updatedBy: s.optionalText(S.updatedBy))
    }

    func shown(_ key: RecordKey) throws -> Shown? {
        try db.cached("SELECT \(ShownRow.columns.list) FROM records WHERE collection = ? AND id = ? AND shows != 2")
            .queryOne([.text(key.collection), .text(key.id)], Self.readShown)
    }

    func shown(collection: String?) throws -> [Shown] {
        if let collection {
            return try db.query("SELECT \(ShownRow.columns.list) FROM records WHERE collection = ? AND shows != 2 ORDER BY id", [.text(collection)], Self.readShown)
        }
        return try db.query("SELECT \(ShownRow.columns.list) FROM records WHERE shows != 2 ORDER BY collection, id", [], Self.readShown)
    }
}
