import OutpostCore
import OutpostSQLite

// How `RecordModel`s are stored (schema 3): one `records` row per record with its two
// copies and what the app sees, and one `edits` row per edit. Every column is written from
// the model; `shows`, `view_*` and `pending` are derived from it so reads need no edits.

extension LocalDatabase {
    /// The columns of a stored copy, by prefix.
    static func copyColumns(_ p: String) -> [String] {
        ["version", "data", "deleted", "readable", "updated_at", "updated_by", "client_time", "lineage", "change_id", "same_as"].map { "\(p)_\($0)" }
    }

    static let copyColumnCount: Int32 = 10

    static func copyValues(_ c: Copy?) -> [SQLiteValue] {
        guard let c else { return Array(repeating: .null, count: Int(copyColumnCount)) }
        return [
            .text(c.version.text), c.body?.data.map { .blob($0) } ?? .null, .integer(c.body?.deleted == true ? 1 : 0),
            .integer(c.body == nil ? 0 : 1), c.updatedAt.map { .integer($0) } ?? .null, c.updatedBy.map { .text($0) } ?? .null,
            c.clientTime.map { .integer($0) } ?? .null, c.lineage.map { .text($0.text) } ?? .null, c.changeId.map { .text($0) } ?? .null,
            c.sameAs.map { .text($0.text) } ?? .null,
        ]
    }

    static func readCopy(_ s: Statement, _ i: Int32) -> Copy? {
        guard let text = s.optionalText(i), let version = Version(text) else { return nil }
        let body: Body? = s.int64(i + 3) == 0 ? nil : Body(data: s.int64(i + 2) != 0 ? nil : s.blob(i + 1))
        return Copy(version: version, body: body, updatedAt: s.optionalInt64(i + 4), updatedBy: s.optionalText(i + 5),
                    clientTime: s.optionalInt64(i + 6), lineage: s.optionalText(i + 7).flatMap(Version.init), changeId: s.optionalText(i + 8),
                    sameAs: s.optionalText(i + 9).flatMap(Version.init))
    }

    // MARK: Models

    private static let recordColumns = "collection, id, " + copyColumns("s").joined(separator: ", ") + ", " + copyColumns("l").joined(separator: ", ")

    private static let editColumns = (["position", "change_id", "local_id", "kind", "lineage_version", "lineage_updated_at", "carried_lineage", "deleted", "data", "client_time", "created_at",
                                       "made_on", "made_on_edit"] + copyColumns("m") + ["delivery", "sent_base"] + copyColumns("a")
                                      + ["error_code", "last_error", "attempts", "next_attempt_at"]).joined(separator: ", ")

    private static func readEdit(_ s: Statement) -> Edit {
        // Columns in the order of `editColumns`.
        let n = copyColumnCount
        let position: Int32 = 0, changeId: Int32 = 1, localId: Int32 = 2, kindColumn: Int32 = 3, lineageVersion: Int32 = 4, lineageTime: Int32 = 5
        let carriedLineage: Int32 = 6, deleted: Int32 = 7, data: Int32 = 8, clientTime: Int32 = 9, createdAt: Int32 = 10, madeOnKind: Int32 = 11
        let madeOnEdit: Int32 = 12, madeOnCopy: Int32 = 13, deliveryColumn = madeOnCopy + n, sentBase = deliveryColumn + 1, ackCopy = sentBase + 1
        let errorCode = ackCopy + n, lastErrorColumn = errorCode + 1, attempts = lastErrorColumn + 1, nextAttempt = attempts + 1, upgradeTo = nextAttempt + 1
        let inConflict = upgradeTo + 1, resolves = inConflict + 1
        let kind: EditKind
        if s.text(kindColumn) == "reoffer", let v = s.optionalText(lineageVersion).flatMap(Version.init) {
            kind = .reoffer(Lineage(version: v, updatedAt: s.optionalInt64(lineageTime) ?? 0), descendsFrom: s.optionalText(carriedLineage).flatMap(Version.init))
        } else {
            kind = .app
        }
        let body = Body(data: s.int64(deleted) != 0 ? nil : s.blob(data))
        let madeOn: MadeOn
        switch s.text(madeOnKind) {
        case "copy": madeOn = readCopy(s, madeOnCopy).map { .copy($0) } ?? .nothing
        case "edit": madeOn = .edit(s.text(madeOnEdit))
        default: madeOn = .nothing
        }
        let delivery: Delivery
        let lastError = s.optionalText(lastErrorColumn)
        switch s.text(deliveryColumn) {
        case "sent": delivery = .sent(base: s.optionalText(sentBase).flatMap(Version.init))
        case "acknowledged":
            if var copy = readCopy(s, ackCopy) {
                copy.body = body
                delivery = .acknowledged(copy)
            } else {
                delivery = .queued
            }
        case "rejected": delivery = .rejected(code: s.optionalText(errorCode) ?? "unknown", message: lastError ?? "rejected")
        default: delivery = .queued
        }
        return Edit(position: s.int64(position), localId: s.text(localId), changeId: s.text(changeId), kind: kind, body: body, clientTime: s.int64(clientTime),
                    createdAt: s.int64(createdAt), madeOn: madeOn, delivery: delivery, attempts: s.int(attempts), nextAttemptAt: s.int64(nextAttempt),
                    lastError: lastError, upgradeTo: s.optionalInt64(upgradeTo).map { Int(clamping: $0) }, inConflict: s.optionalInt64(inConflict) == 1,
                    resolves: s.optionalText(resolves).flatMap(readMark))
    }

    private static let selectRecordSQL = "SELECT \(recordColumns) FROM records WHERE collection = ? AND id = ?"
    /// A resolution's mark as `edits.resolves` keeps it (`{"resolver", "outcome"}`).
    private static func readMark(_ text: String) -> ResolutionMark? {
        guard let value = try? JSONParser.parse(Array(text.utf8)), case .success(let mark) = ResolutionMark.decode(value, field: "resolves") else { return nil }
        return mark
    }

    // `upgrade_to` (migration 10), `in_conflict` (migration 12) and `resolves` (migration 13)
    // are read here and written by `save` only when set.
    private static let selectEditsSQL = "SELECT \(editColumns), upgrade_to, in_conflict, resolves FROM edits WHERE collection = ? AND id = ? ORDER BY position"
    /// An upsert, not `INSERT OR REPLACE`: a replace deletes the row without telling the
    /// delete triggers and would impose its conflict rule on the statements of the query
    /// indexes' triggers (Records/QueryIndexes.swift); an update lets them skip a row whose
    /// content is unchanged.
    private static let saveRecordSQL: String = {
        let columns = ["shows", "view_data", "view_deleted", "pending"] + copyColumns("s") + copyColumns("l")
        return """
            INSERT INTO records(collection, id, \(columns.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: 2 + columns.count).joined(separator: ", ")))
            ON CONFLICT(collection, id) DO UPDATE SET \(columns.map { "\($0) = excluded.\($0)" }.joined(separator: ", "))
            """
    }()
    private static let insertEditSQL: String = {
        let columns = editColumns.replacingOccurrences(of: "position, change_id, local_id, ", with: "position, change_id, collection, id, local_id, ")
        let count = columns.split(separator: ",").count
        return "INSERT INTO edits(\(columns)) VALUES (\(Array(repeating: "?", count: count).joined(separator: ", ")))"
    }()

    /// The record's model; nil when the store holds nothing of it.
    func model(_ key: RecordKey) throws -> RecordModel? {
        let row = try db.cached(Self.selectRecordSQL)
            .queryOne([.text(key.collection), .text(key.id)]) { s in (Self.readCopy(s, 2), Self.readCopy(s, 2 + Self.copyColumnCount)) }
        let edits = try db.cached(Self.selectEditsSQL)
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
        var values: [SQLiteValue] = [.text(key.collection), .text(key.id), .integer(shows)]
        values.append(shows == 1 ? (view?.data.map { .blob($0) } ?? .null) : .null)
        values.append(.integer(view?.deleted == true ? 1 : 0))
        values.append(.integer(model.pending ? 1 : 0))
        values += Self.copyValues(model.server) + Self.copyValues(model.left)
        try db.cached(Self.saveRecordSQL).run(values)
        for edit in model.edits { try insert(edit, key) }
        if let cipher { try keepSealed(model, cipher) }
    }

    private func insert(_ e: Edit, _ key: RecordKey) throws {
        var values: [SQLiteValue] = [e.position.map { .integer($0) } ?? .null, .text(e.changeId), .text(key.collection), .text(key.id), .text(e.localId)]
        switch e.kind {
        case .app: values += [.text("app"), .null, .null, .null]
        case .reoffer(let l, let from): values += [.text("reoffer"), .text(l.version.text), .integer(l.updatedAt), from.map { .text($0.text) } ?? .null]
        }
        values += [.integer(e.body.deleted ? 1 : 0), e.body.data.map { .blob($0) } ?? .null, .integer(e.clientTime), .integer(e.createdAt)]
        switch e.madeOn {
        case .nothing: values += [.text("nothing"), .null] + Self.copyValues(nil)
        case .copy(let c): values += [.text("copy"), .null] + Self.copyValues(c)
        case .edit(let id): values += [.text("edit"), .text(id)] + Self.copyValues(nil)
        }
        var code: SQLiteValue = .null
        switch e.delivery {
        case .queued: values += [.text("queued"), .null] + Self.copyValues(nil)
        case .sent(let base): values += [.text("sent"), base.map { .text($0.text) } ?? .null] + Self.copyValues(nil)
        case .acknowledged(var c):
            c.body = Body(data: nil)
            values += [.text("acknowledged"), .null] + Self.copyValues(c)
        case .rejected(let c, _):
            values += [.text("rejected"), .null] + Self.copyValues(nil)
            code = .text(c)
        }
        values += [code, e.lastError.map { .text($0) } ?? .null, .integer(Int64(e.attempts)), .integer(e.nextAttemptAt)]
        try db.cached(Self.insertEditSQL).run(values)
        if let needed = e.upgradeTo {
            try db.cached("UPDATE edits SET upgrade_to = ? WHERE change_id = ?").run([.integer(Int64(needed)), .text(e.changeId)])
        }
        if e.inConflict {
            try db.cached("UPDATE edits SET in_conflict = 1 WHERE change_id = ?").run([.text(e.changeId)])
        }
        if let mark = e.resolves {
            try db.cached("UPDATE edits SET resolves = ? WHERE change_id = ?").run([.text(String(decoding: mark.json.encoded(), as: UTF8.self)), .text(e.changeId)])
        }
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

    private static let insertIfAbsentSQL = """
        INSERT INTO records(collection, id, shows, pending, \(copyColumns("s").joined(separator: ", ")))
        VALUES (?, ?, 0, 0, \(Array(repeating: "?", count: Int(copyColumnCount)).joined(separator: ", "))) ON CONFLICT(collection, id) DO NOTHING
        """

    /// Stores the model of a record the store has no row of, written without reading first
    /// (the common case of an initial sync, bound column by column): a readable copy and
    /// nothing else; any other model goes through `save`. Returns false (writing nothing)
    /// when the store holds the record or the model is not of that form.
    func insertIfAbsent(_ model: RecordModel) throws -> Bool {
        guard let copy = model.server, let body = copy.body, model.left == nil, model.edits.isEmpty else { return false }
        let key = model.key
        let stmt = try db.cached(Self.insertIfAbsentSQL)
        try stmt.bind(text: key.collection, at: 1)
        try stmt.bind(text: key.id, at: 2)
        try stmt.bind(text: copy.version.text, at: 3)
        if let data = body.data { try stmt.bind(blob: data, at: 4) } else { try stmt.bindNull(at: 4) }
        try stmt.bind(int: body.deleted ? 1 : 0, at: 5)
        try stmt.bind(int: 1, at: 6)
        if let t = copy.updatedAt { try stmt.bind(int: t, at: 7) } else { try stmt.bindNull(at: 7) }
        if let b = copy.updatedBy { try stmt.bind(text: b, at: 8) } else { try stmt.bindNull(at: 8) }
        if let t = copy.clientTime { try stmt.bind(int: t, at: 9) } else { try stmt.bindNull(at: 9) }
        if let l = copy.lineage { try stmt.bind(text: l.text, at: 10) } else { try stmt.bindNull(at: 10) }
        if let c = copy.changeId { try stmt.bind(text: c, at: 11) } else { try stmt.bindNull(at: 11) }
        if let a = copy.sameAs { try stmt.bind(text: a.text, at: 12) } else { try stmt.bindNull(at: 12) }
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

    private static let shownColumns = """
        collection, id, CASE shows WHEN 0 THEN s_data ELSE view_data END, CASE shows WHEN 0 THEN s_deleted ELSE view_deleted END,
        pending, coalesce(s_version, l_version), CASE WHEN s_version IS NULL THEN l_updated_at ELSE s_updated_at END,
        CASE WHEN s_version IS NULL THEN l_updated_by ELSE s_updated_by END
        """

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
        Shown(key: RecordKey(collection: s.text(0), id: s.text(1)), body: Body(data: s.int64(3) != 0 ? nil : s.blob(2)), pending: s.int64(4) != 0,
              version: s.optionalText(5).flatMap(Version.init), updatedAt: s.optionalInt64(6), updatedBy: s.optionalText(7))
    }

    func shown(_ key: RecordKey) throws -> Shown? {
        try db.cached("SELECT \(Self.shownColumns) FROM records WHERE collection = ? AND id = ? AND shows != 2")
            .queryOne([.text(key.collection), .text(key.id)], Self.readShown)
    }

    func shown(collection: String?) throws -> [Shown] {
        if let collection {
            return try db.query("SELECT \(Self.shownColumns) FROM records WHERE collection = ? AND shows != 2 ORDER BY id", [.text(collection)], Self.readShown)
        }
        return try db.query("SELECT \(Self.shownColumns) FROM records WHERE shows != 2 ORDER BY collection, id", [], Self.readShown)
    }
}
