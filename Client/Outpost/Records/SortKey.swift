import Foundation
import OutpostCore
import OutpostSQLite

/// The sort key of a field: one SQLite value per record whose SQLite order is the query
/// order (docs/client.md, "Queries"), made by one SQL expression that the index triggers, the
/// index builds and the queries all use, so an index and a scan always agree.
///
/// The key of a field of a record, by the JSON type of its value:
///
/// | value | key | order |
/// |---|---|---|
/// | missing, `null` | NULL | first |
/// | number | INTEGER (an integer that fits 64 bits) or REAL | by value (`1 == 1.0`) |
/// | string | TEXT | by Unicode code point (UTF-8 bytes) |
/// | `false`, `true` | BLOB `00`, `01` | after strings |
/// | array, object | BLOB `02` or `03` then its JSON text | last, by that text |
///
/// SQLite orders NULL < numbers < text < BLOBs, so a comparison bounded to one class
/// (`key > 5 AND key < ''` for numbers) matches only values of one JSON type, and an index
/// range serves it. A field declared a date (`CollectionSchema.dates`) has as key the
/// canonical RFC 3339 text of its time in UTC with milliseconds, whether the record holds
/// RFC 3339 text or the seconds since 2001 that Foundation's default encoder writes; any
/// other value has no key (NULL).
enum SortKey {
    enum Kind: String, Sendable, Hashable {
        case value
        case date
    }

    /// The key of `field` over the JSON text `doc` (an SQL expression).
    static func sql(_ field: QueryField, _ kind: Kind, doc: String) -> String {
        let path = sqlString(field.jsonPath)
        let type = "json_type(\(doc), \(path))"
        let value = "json_extract(\(doc), \(path))"
        switch kind {
        case .value:
            return "(CASE \(type) WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' WHEN 'array' THEN CAST(x'02' || \(value) AS BLOB) "
                + "WHEN 'object' THEN CAST(x'03' || \(value) AS BLOB) ELSE \(value) END)"
        case .date:
            // 978307200: seconds from 1970 to 2001, the reference date of Foundation's
            // default date encoding. Text is read only when it starts as a date does, so no
            // other text (`now`, a Julian day number) is taken for one.
            let format = "'%Y-%m-%dT%H:%M:%fZ'"
            return "(CASE \(type) WHEN 'integer' THEN strftime(\(format), \(value) + 978307200, 'unixepoch') "
                + "WHEN 'real' THEN strftime(\(format), \(value) + 978307200, 'unixepoch') "
                + "WHEN 'text' THEN CASE WHEN \(value) GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' THEN strftime(\(format), \(value)) END END)"
        }
    }

    /// The key of an element of `json_each` (its `type` and `value` columns), for
    /// `contains`.
    static func elementSQL(type: String, value: String) -> String {
        "(CASE \(type) WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' WHEN 'array' THEN CAST(x'02' || \(value) AS BLOB) "
            + "WHEN 'object' THEN CAST(x'03' || \(value) AS BLOB) ELSE \(value) END)"
    }

    /// What a query value's key is.
    enum Value: Hashable {
        /// JSON's null: no key (compared with `isNull`).
        case null
        /// A key of one class (`Class`).
        case key(SQLiteValue, Class)
        /// A value no record's key can equal (a date field compared with a number, say).
        case none
    }

    /// The classes of keys an ordered comparison stays within (bounds:
    /// `QueryCompiler`'s `lowerBound` and `upperBound`).
    enum Class: Hashable {
        case number, string, boolean, array, object
    }

    /// The key of `value` for a field of `kind`. A `Date` is written as `encoder` writes it
    /// (for a date field: as the key of a time).
    static func value(_ value: QueryValue, _ kind: Kind, encoder: JSONEncoder) -> Value {
        switch (value.kind, kind) {
        case (.date(let date), .date):
            return .key(.text(RecordCoder.isoText(date)), .string)
        case (.date(let date), .value):
            guard let json = try? JSONValue(encoding: [date], encoder: encoder), case .array(let a) = json, let first = a.first else { return .none }
            return Self.value(.json(first), .value, encoder: encoder)
        case (.json(let json), .date):
            switch json {
            case .null: return .null
            case .string(let text):
                guard let ms = RecordCoder.milliseconds(iso: text) else { return .none }
                return .key(.text(RecordCoder.isoText(milliseconds: ms)), .string)
            case .number(let n):
                let seconds = n.doubleValue + 978_307_200
                guard seconds.isFinite, let ms = unixEpochMilliseconds(seconds) else { return .none }
                return .key(.text(RecordCoder.isoText(milliseconds: ms)), .string)
            default: return .none
            }
        case (.json(let json), .value):
            return key(of: json)
        }
    }

    /// The key of a JSON value (for a field that is not a date).
    static func key(of json: JSONValue) -> Value {
        switch json {
        case .null: return .null
        case .bool(let b): return .key(.blob([b ? 1 : 0]), .boolean)
        case .number(let n): return .key(number(n), .number)
        case .string(let s): return .key(.text(s), .string)
        case .array: return .key(.blob([2] + json.encoded()), .array)
        case .object: return .key(.blob([3] + json.encoded()), .object)
        }
    }

    /// A number as SQLite's JSON functions read it: an integer lexeme that fits 64 bits as an
    /// INTEGER, anything else as a REAL.
    static func number(_ n: JSONNumber) -> SQLiteValue {
        let lexeme = n.lexeme
        if !lexeme.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }), let int = Int64(lexeme) { return .integer(int) }
        return .real(n.doubleValue)
    }

    /// Milliseconds since 1970 of `seconds`, rounded as SQLite's `unixepoch` modifier does;
    /// nil out of its range.
    static func unixEpochMilliseconds(_ seconds: Double) -> Int64? {
        // SQLite keeps a time as ms since the Julian day origin: seconds × 1000 plus
        // 210866760000000, rounded half up, within years 0000 to 9999.
        let r = seconds * 1000 + 210_866_760_000_000
        guard r >= 0, r < 464_269_060_800_000 else { return nil }
        return Int64(r + 0.5) - 210_866_760_000_000
    }
}

/// `text` as an SQL string literal.
func sqlString(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
}
