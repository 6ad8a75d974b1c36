import Foundation
import OutpostCore

// The words of a query on the device (docs/client.md, "Queries"): fields, values, filters and
// sorts. They are plain values; `QueryCompiler` turns them into SQL.

/// A field of a record, by its path of object member names: `status`, or `site.name` for the
/// member `name` of the object in `site`.
///
/// In a filter closure the fields are spelled as members (`$0.site.name`); a member whose
/// name is also a method of `QueryField` (`contains`, say) or holds a dot is spelled with a
/// subscript (`$0["contains"]`, `QueryField(path: ["a.b"])`).
@dynamicMemberLookup
public struct QueryField: Sendable, Hashable, CustomStringConvertible {
    /// The member names from the record's top level down.
    public let path: [String]

    /// The field `dotted`, split at its dots: `"site.name"` is `name` inside `site`.
    public init(_ dotted: String) {
        path = dotted.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    }

    /// The field at `path`, one member name per element (a name may hold a dot).
    public init(path: [String]) {
        self.path = path
    }

    /// The member `name` of this field's object.
    public subscript(dynamicMember name: String) -> QueryField {
        QueryField(path: path + [name])
    }

    /// The member `name` of this field's object (for names a member cannot spell).
    public subscript(name: String) -> QueryField {
        QueryField(path: path + [name])
    }

    /// The path with dots, as in `site.name`.
    public var description: String { path.joined(separator: ".") }

    /// Why the field cannot be queried, or nil: every name must be 1 to 256 bytes with no
    /// control character and no double quote (SQLite's JSON paths cannot quote one), and a
    /// path has 1 to 32 names.
    var problem: String? {
        guard !path.isEmpty, path.count <= 32 else { return "a field's path has 1 to 32 member names" }
        for name in path {
            guard !name.isEmpty, name.utf8.count <= 256 else { return "the field \"\(self)\" has an empty or too long member name" }
            guard !name.unicodeScalars.contains(where: { $0 == "\"" || $0.value < 0x20 || $0.value == 0x7F }) else {
                return "the field \"\(self)\" has a member name with a double quote or a control character"
            }
        }
        return nil
    }

    /// The field's SQLite JSON path (`$."site"."name"`), every name quoted so that no name
    /// is read as path syntax.
    var jsonPath: String {
        "$" + path.map { ".\"\($0)\"" }.joined()
    }
}

/// The fields of a record, for a filter closure: `$0.status`, `$0.site.name`, `$0["a.b"]`.
@dynamicMemberLookup
public struct QueryFields: Sendable {
    init() {}

    /// The top-level member `name`.
    public subscript(dynamicMember name: String) -> QueryField { QueryField(path: [name]) }

    /// The field `dotted` (split at its dots), for names a member cannot spell.
    public subscript(dotted: String) -> QueryField { QueryField(dotted) }

    /// The field at `path`, one member name per element.
    public subscript(path path: [String]) -> QueryField { QueryField(path: path) }
}

/// A value a field is compared with. Literals of every JSON type work (`"open"`, `3`, `2.5`,
/// `true`, `nil`); a `Date` is compared as the collection's encoder writes it (as a date
/// when the field is declared one: `CollectionSchema.dates`).
public struct QueryValue: Sendable, Hashable, CustomStringConvertible {
    enum Kind: Sendable, Hashable {
        case json(JSONValue)
        case date(Date)
    }

    let kind: Kind

    init(_ kind: Kind) { self.kind = kind }

    /// JSON's null.
    public static let null = QueryValue(.json(.null))

    /// A string.
    public static func string(_ value: String) -> QueryValue { QueryValue(.json(.string(value))) }
    /// An integer.
    public static func int(_ value: Int64) -> QueryValue { QueryValue(.json(.number(JSONNumber(value)))) }
    /// A floating-point number (finite; NaN and infinities match nothing, JSON has none).
    public static func double(_ value: Double) -> QueryValue {
        value.isFinite ? QueryValue(.json(.number(JSONNumber(value)))) : QueryValue(.json(.null))
    }
    /// A Boolean.
    public static func bool(_ value: Bool) -> QueryValue { QueryValue(.json(.bool(value))) }
    /// A point in time.
    public static func date(_ value: Date) -> QueryValue { QueryValue(.date(value)) }
    /// Any JSON value (arrays and objects match equal arrays and objects).
    public static func json(_ value: JSONValue) -> QueryValue { QueryValue(.json(value)) }

    /// A string-backed enum's raw value.
    public init<R: RawRepresentable>(_ value: R) where R.RawValue == String { self = .string(value.rawValue) }
    /// An integer-backed enum's raw value.
    public init<R: RawRepresentable>(_ value: R) where R.RawValue == Int { self = .int(Int64(value.rawValue)) }

    public var description: String {
        switch kind {
        case .json(let v): String(decoding: v.encoded(), as: UTF8.self)
        case .date(let d): "date(\(RecordCoder.isoText(d)))"
        }
    }
}

extension QueryValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(nilLiteral: ()) { self = .null }
}

/// A condition on a record's fields: comparisons, joined by `&&`, `||` and `!`.
///
/// ```swift
/// inspections.filter { $0.status == "open" && $0.dueDate < .date(.now) && !$0.site.name.hasPrefix("Test") }
/// ```
///
/// What matches (docs/client.md, "Queries"): `==` and `!=` compare any JSON value (numbers by
/// value, so `1 == 1.0`; strings by Unicode code point); `<`, `<=`, `>`, `>=` and `hasPrefix`
/// match only values of the compared value's type (a number field is never "less than" a
/// string, and a record whose field has another type, or none, does not match). `!=` is the
/// negation of `==`, so it matches records without the field.
public struct QueryFilter: Sendable, Hashable {
    /// The deepest nesting of `&&`, `||` and `!` a query takes: a comparison alone is one
    /// level. SQLite's parser has a fixed stack, and each level is a parenthesis in the SQL.
    public static let maxDepth = 20

    indirect enum Node: Sendable, Hashable {
        case compare(QueryField, Comparison, QueryValue)
        case oneOf(QueryField, [QueryValue])
        case contains(QueryField, QueryValue)
        case hasPrefix(QueryField, String)
        case isNull(QueryField)
        case isMissing(QueryField)
        case pending
        case ids([String])
        case all([Node])
        case any([Node])
        case not(Node)
        case constant(Bool)
    }

    enum Comparison: String, Sendable, Hashable, CaseIterable {
        case equal = "=="
        case notEqual = "!="
        case less = "<"
        case lessOrEqual = "<="
        case greater = ">"
        case greaterOrEqual = ">="
    }

    let node: Node

    init(_ node: Node) { self.node = node }

    /// Every record.
    public static let everything = QueryFilter(.constant(true))
    /// No record.
    public static let nothing = QueryFilter(.constant(false))
    /// Records with a local edit waiting for the server.
    public static let isPending = QueryFilter(.pending)
    /// The records of these ids (the records' own ids, not a field of their data).
    public static func recordIDs(_ ids: [String]) -> QueryFilter { QueryFilter(.ids(ids)) }

    /// All of `filters` (every record when empty).
    public static func all(_ filters: [QueryFilter]) -> QueryFilter { QueryFilter(.all(filters.map(\.node))) }
    /// Any of `filters` (no record when empty).
    public static func any(_ filters: [QueryFilter]) -> QueryFilter { QueryFilter(.any(filters.map(\.node))) }

    public static func && (a: QueryFilter, b: QueryFilter) -> QueryFilter { QueryFilter(.all([a.node, b.node])) }
    public static func || (a: QueryFilter, b: QueryFilter) -> QueryFilter { QueryFilter(.any([a.node, b.node])) }
    public static prefix func ! (a: QueryFilter) -> QueryFilter { QueryFilter(.not(a.node)) }
}

extension QueryField {
    public static func == (field: QueryField, value: QueryValue) -> QueryFilter { QueryFilter(.compare(field, .equal, value)) }
    public static func != (field: QueryField, value: QueryValue) -> QueryFilter { QueryFilter(.compare(field, .notEqual, value)) }
    public static func < (field: QueryField, value: QueryValue) -> QueryFilter { QueryFilter(.compare(field, .less, value)) }
    public static func <= (field: QueryField, value: QueryValue) -> QueryFilter { QueryFilter(.compare(field, .lessOrEqual, value)) }
    public static func > (field: QueryField, value: QueryValue) -> QueryFilter { QueryFilter(.compare(field, .greater, value)) }
    public static func >= (field: QueryField, value: QueryValue) -> QueryFilter { QueryFilter(.compare(field, .greaterOrEqual, value)) }

    /// The field equals one of `values`.
    public func isIn(_ values: [QueryValue]) -> QueryFilter { QueryFilter(.oneOf(self, values)) }
    /// The field is an array holding an element equal to `value`.
    public func contains(_ value: QueryValue) -> QueryFilter { QueryFilter(.contains(self, value)) }
    /// The field is a string that starts with `prefix` (code point by code point; use
    /// `search` for a match that ignores case and accents).
    public func hasPrefix(_ prefix: String) -> QueryFilter { QueryFilter(.hasPrefix(self, prefix)) }
    /// The field holds JSON's null.
    public var isNull: QueryFilter { QueryFilter(.isNull(self)) }
    /// The record has no such field.
    public var isMissing: QueryFilter { QueryFilter(.isMissing(self)) }
    /// The field is null or missing.
    public var isNil: QueryFilter { QueryFilter(.any([.isNull(self), .isMissing(self)])) }
}

/// One key of a query's order.
public struct QuerySort: Sendable, Hashable {
    /// The field.
    public let field: QueryField
    /// True for largest first.
    public let descending: Bool

    /// Smallest first: null and missing values, numbers, strings, then `false`, `true`,
    /// arrays and objects (docs/client.md, "Queries").
    public static func ascending(_ field: String) -> QuerySort { QuerySort(field: QueryField(field), descending: false) }
    /// Largest first: the reverse of `ascending`.
    public static func descending(_ field: String) -> QuerySort { QuerySort(field: QueryField(field), descending: true) }
    /// Smallest first.
    public static func ascending(_ field: QueryField) -> QuerySort { QuerySort(field: field, descending: false) }
    /// Largest first.
    public static func descending(_ field: QueryField) -> QuerySort { QuerySort(field: field, descending: true) }
}
