/// What an app declares about one collection for its queries (`Configuration.collections`):
/// the indexes that serve them, the fields full-text search looks in, and the fields that
/// hold dates.
///
/// ```swift
/// configuration.collections["inspections"] = CollectionSchema(
///     indexes: [["status", "dueDate"], ["site.name"]],
///     searchable: ["notes", "site.name"],
///     dates: ["dueDate"])
/// ```
///
/// The store creates and drops indexes as the declarations change between versions of the
/// app, when it opens (a new index is built from the records already held; one no longer
/// declared is dropped; the others are kept as they are). A query no index serves still
/// answers, by reading the collection (`Query.explain()` tells which index a query uses).
public struct CollectionSchema: Sendable, Hashable {
    /// Indexes, each a list of fields (dotted: `site.name`). A query uses the index whose
    /// first fields its equalities name, then a range or the sort on the next field.
    public var indexes: [[String]]
    /// The fields full-text search looks in (strings, and arrays of strings), kept in
    /// SQLite's FTS5 (`Query.search(_:)`).
    public var searchable: [String]
    /// Fields that hold dates. A date field is compared and sorted as a time, whichever
    /// form a record holds it in: RFC 3339 text (the default coder's form, any offset) or
    /// the number of seconds since 2001 that Foundation's default encoder writes (docs/client.md,
    /// "Dates"). Other values of the field sort with null and missing ones.
    public var dates: [String]

    /// A declaration.
    public init(indexes: [[String]] = [], searchable: [String] = [], dates: [String] = []) {
        self.indexes = indexes
        self.searchable = searchable
        self.dates = dates
    }

    /// How the key of `field` is made in this collection.
    func kind(of field: QueryField) -> SortKey.Kind {
        dates.contains { QueryField($0) == field } ? .date : .value
    }
}
