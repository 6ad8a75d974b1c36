import OutpostCore
import OutpostSQLite

/// The columns of a table's row as its statements list them, each named once. A SELECT or
/// INSERT takes its column list and placeholders from here, and a reader or writer finds a
/// column's index by its name, resolved once into a constant when the layout is made
/// (never per row), so no code counts columns by position.
struct RowColumns: Sendable {
    /// The column names, or the select expressions named by them, in statement order.
    let names: [String]
    private let expressions: [String]
    private let indexes: [String: Int32]

    /// A layout of plain columns.
    init(_ names: [String]) {
        self.init(selecting: names.map { ($0, $0) })
    }

    /// A layout of select expressions, each read by the name it is given.
    init(selecting columns: [(name: String, sql: String)]) {
        names = columns.map(\.name)
        expressions = columns.map(\.sql)
        var indexes: [String: Int32] = [:]
        for (i, name) in names.enumerated() {
            precondition(indexes[name] == nil, "column \(name) listed twice")
            indexes[name] = Int32(i)
        }
        self.indexes = indexes
    }

    /// The 0-based index of `name` in a row (a reader's column; a binding is this plus 1).
    func index(_ name: String) -> Int32 {
        guard let i = indexes[name] else { preconditionFailure("no column \(name) in \(names)") }
        return i
    }

    /// The select list (expressions for a layout of expressions).
    var list: String { expressions.joined(separator: ", ") }

    /// One placeholder per column.
    var placeholders: String { Array(repeating: "?", count: names.count).joined(separator: ", ") }

    /// An empty row of this layout's values, to be filled by name.
    func row() -> RowValues { RowValues(count: names.count) }
}

/// The values of one row, set by the indexes a `RowColumns` resolved; NULL where unset.
struct RowValues {
    private(set) var values: [SQLiteValue]

    init(count: Int) { values = Array(repeating: .null, count: count) }

    subscript(_ index: Int32) -> SQLiteValue {
        get { values[Int(index)] }
        set { values[Int(index)] = newValue }
    }
}

/// The ten columns of a stored copy (`records.s_*`, `records.l_*`, `edits.m_*`, `edits.a_*`),
/// named once; a copy is written and read at the index of its first column in a row.
enum CopyColumns {
    private static let fields = RowColumns(["version", "data", "deleted", "readable", "updated_at", "updated_by", "client_time", "lineage", "change_id", "same_as"])
    private static let version = fields.index("version"), data = fields.index("data"), deleted = fields.index("deleted")
    private static let readable = fields.index("readable"), updatedAt = fields.index("updated_at"), updatedBy = fields.index("updated_by")
    private static let clientTime = fields.index("client_time"), lineage = fields.index("lineage"), changeId = fields.index("change_id")
    private static let sameAs = fields.index("same_as")

    /// The columns of the copy kept under `prefix`, in row order.
    static func names(_ prefix: String) -> [String] { fields.names.map { "\(prefix)_\($0)" } }

    /// Each column of `c` (NULL for no copy) with its offset from the copy's first column.
    static func forEachValue(_ c: Copy?, _ body: (Int32, SQLiteValue) throws -> Void) rethrows {
        guard let c else {
            for i in 0..<Int32(fields.names.count) { try body(i, .null) }
            return
        }
        try body(version, .text(c.version.text))
        try body(data, c.body?.data.map { .blob($0) } ?? .null)
        try body(deleted, .integer(c.body?.deleted == true ? 1 : 0))
        try body(readable, .integer(c.body == nil ? 0 : 1))
        try body(updatedAt, c.updatedAt.map { .integer($0) } ?? .null)
        try body(updatedBy, c.updatedBy.map { .text($0) } ?? .null)
        try body(clientTime, c.clientTime.map { .integer($0) } ?? .null)
        try body(lineage, c.lineage.map { .text($0.text) } ?? .null)
        try body(changeId, c.changeId.map { .text($0) } ?? .null)
        try body(sameAs, c.sameAs.map { .text($0.text) } ?? .null)
    }

    /// Sets the copy's columns in `row`, its first column at `first`.
    static func write(_ c: Copy?, into row: inout RowValues, at first: Int32) {
        forEachValue(c) { offset, value in row[first + offset] = value }
    }

    /// The copy whose first column is at `first` of the statement's row; nil when none.
    static func read(_ s: Statement, at first: Int32) -> Copy? {
        guard let text = s.optionalText(first + version), let v = Version(text) else { return nil }
        let body: Body? = s.int64(first + readable) == 0 ? nil : Body(data: s.int64(first + deleted) != 0 ? nil : s.blob(first + data))
        return Copy(version: v, body: body, updatedAt: s.optionalInt64(first + updatedAt), updatedBy: s.optionalText(first + updatedBy),
                    clientTime: s.optionalInt64(first + clientTime), lineage: s.optionalText(first + lineage).flatMap(Version.init),
                    changeId: s.optionalText(first + changeId), sameAs: s.optionalText(first + sameAs).flatMap(Version.init))
    }
}
