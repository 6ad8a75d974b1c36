import OutpostCore
import OutpostSyncRules

/// What a page under rules reads from the view index (docs/rules.md, "Cost"): the records
/// after `afterSeq` that any of `lookups` finds (those of scope "" only among
/// `collections`, when set), and the records that departed after `heldAt` (none when it is
/// nil: a device at the start holds nothing), at most `limit` of them.
public struct ViewScanRequest: Sendable {
    public var space: String
    public var afterSeq: Int64
    public var heldAt: Int64?
    public var limit: Int
    public var lookups: [PushRules.IndexKey]
    public var collections: [String]?

    public init(space: String, afterSeq: Int64, heldAt: Int64?, limit: Int, lookups: [PushRules.IndexKey], collections: [String]?) {
        self.space = space
        self.afterSeq = afterSeq
        self.heldAt = heldAt
        self.limit = limit
        self.lookups = lookups
        self.collections = collections
    }

    /// The scan of only the records departed since `heldAt`: a page of exact lookups is
    /// whole when it finds none after its start.
    var departedOnly: ViewScanRequest {
        var request = self
        request.lookups = []
        return request
    }

    /// Whether the scan can find anything.
    var isEmpty: Bool { lookups.isEmpty && heldAt == nil }

    /// A parameter of `seqsSQL`.
    enum Parameter {
        case integer(Int64)
        case text(String)
        case texts([String])
    }

    /// The statement of the scan's seqs, for both stores (they share the tables), and its
    /// parameters: each lookup reads its first `limit + 1` seqs from the index, the
    /// departures their records' first `limit + 1`, so the union holds the first
    /// `limit + 1` of all of them. `space` is the space id's SQL, `placeholder(n)` the
    /// store's n-th parameter (after `first - 1` of its own), and `inList(column, p)` the
    /// condition that `column` is in the list parameter `p`.
    func seqsSQL(space: String, first: Int, placeholder: (Int) -> String,
                 inList: (String, String) -> String) -> (sql: String, parameters: [Parameter]) {
        var parameters: [Parameter] = []
        func p(_ value: Parameter) -> String {
            parameters.append(value)
            return placeholder(first + parameters.count - 1)
        }
        let after = p(.integer(afterSeq)), limit = p(.integer(Int64(self.limit) + 1))
        // The list is a parameter only where a part uses it (PostgreSQL types every parameter
        // from its use).
        var listPlaceholder: String?
        func filter(_ column: String) -> String {
            guard let collections else { return "" }
            if listPlaceholder == nil { listPlaceholder = p(.texts(collections)) }
            return " AND " + inList(column, listPlaceholder!)
        }
        var parts: [String] = []
        for (i, lookup) in lookups.enumerated() {
            let head = "SELECT seq FROM (SELECT seq FROM view_index WHERE space_id = \(space) AND scope = \(p(.text(lookup.scope))) "
            let scoped = lookup.scope.isEmpty ? filter("collection") : ""
            parts.append(head + "AND path = \(p(.text(lookup.path))) AND key = \(p(.text(lookup.key))) AND seq > \(after)\(scoped) "
                         + "ORDER BY seq LIMIT \(limit)) l\(i)")
        }
        if let heldAt {
            let held = p(.integer(heldAt))
            parts.append("SELECT seq FROM (SELECT r.seq FROM records r JOIN (SELECT DISTINCT collection, id FROM departures "
                         + "WHERE space_id = \(space) AND seq > \(held)) d ON r.collection = d.collection AND r.id = d.id "
                         + "WHERE r.space_id = \(space) AND r.seq > \(after)\(filter("r.collection")) ORDER BY r.seq LIMIT \(limit)) dd")
        }
        return (parts.joined(separator: " UNION ALL "), parameters)
    }
}
