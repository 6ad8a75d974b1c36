/// `GET /v1/spaces/{space}/pull` answer (PROTOCOL.md section 5).
public struct PullPage: Hashable, Sendable, JSONWireType {
    public var epoch: Epoch
    /// Records whose latest version is after the cursor, in seq order, each once.
    public var changes: [RecordState]
    /// The cursor for the next page: the last record's version, or the request's `since`.
    public var next: Version
    /// True when records after `next` exist.
    public var hasMore: Bool
    /// The space's newest seq in the snapshot the page was read from, when the server says
    /// (an addition to version 1: older servers leave it out). At most `head - next.seq`
    /// records follow, so a client can show how far a long pull has come.
    public var head: Int64?

    public init(epoch: Epoch, changes: [RecordState], next: Version, hasMore: Bool, head: Int64? = nil) {
        self.epoch = epoch
        self.changes = changes
        self.next = next
        self.hasMore = hasMore
        self.head = head
    }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        guard let e = Epoch(try r.string("epoch")) else { throw r.invalid("epoch", "is not an epoch") }
        epoch = e
        var changes: [RecordState] = []
        for (i, item) in try r.array("changes").enumerated() {
            changes.append(try RecordState(json: item, path: "changes[\(i)]"))
        }
        self.changes = changes
        guard let n = Version(try r.string("next")) else { throw r.invalid("next", "is not a cursor") }
        next = n
        hasMore = try r.bool("hasMore")
        head = try r.optionalInt64("head")
        if let head, head < 0 { throw r.invalid("head", "is negative") }
    }

    public var json: JSONValue {
        var object: JSONObject = [
            "epoch": .string(epoch.rawValue),
            "changes": .array(changes.map(\.json)),
            "next": .string(next.text),
            "hasMore": .bool(hasMore),
        ]
        if let head { object["head"] = .number(JSONNumber(head)) }
        return .object(object)
    }
}

/// The query of a pull request (PROTOCOL.md section 5), parsed and validated.
public struct PullQuery: Hashable, Sendable {
    /// The cursor; nil means the start of the current epoch.
    public var since: Version?
    public var limit: Int?
    public var maxBytes: Int?
    /// Only these collections; nil means all.
    public var collections: [String]?
    /// Long-poll time in ms (0 to 60000).
    public var waitMs: Int

    public init(since: Version? = nil, limit: Int? = nil, maxBytes: Int? = nil, collections: [String]? = nil, waitMs: Int = 0) {
        self.since = since
        self.limit = limit
        self.maxBytes = maxBytes
        self.collections = collections
        self.waitMs = waitMs
    }

    /// The longest long poll the protocol allows.
    public static let maxWaitMs = 60_000

    /// Query items for a request.
    public var queryItems: [(String, String)] {
        var items: [(String, String)] = []
        if let since { items.append(("since", since.text)) }
        if let limit { items.append(("limit", String(limit))) }
        if let maxBytes { items.append(("maxBytes", String(maxBytes))) }
        if let collections, !collections.isEmpty { items.append(("collections", collections.joined(separator: ","))) }
        if waitMs > 0 { items.append(("wait", String(waitMs))) }
        return items
    }
}
