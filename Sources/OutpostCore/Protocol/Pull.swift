/// `GET /v1/spaces/{space}/pull` answer (docs/protocol.md section 5).
public struct PullPage: Hashable, Sendable, JSONWireType {
    public var epoch: Epoch
    /// Records whose latest version is after the cursor, in seq order, each once.
    public var changes: [RecordState]
    /// On a server with rules: records whose latest write took them out of the token's
    /// view (`"revoked": true` entries of `changes`, docs/rules.md). The client drops its
    /// copy and keeps its own unsettled edits of them.
    public var revoked: [Revocation]
    /// The cursor for the next page: the last record's version, or the request's `since`.
    public var next: Version
    /// The view `next` was made under, on a server with rules (the third part of the
    /// cursor's text); nil on a server without.
    public var view: String?
    /// True when records after `next` exist.
    public var hasMore: Bool
    /// The space's newest seq in the snapshot the page was read from, when the server says
    /// (an addition to version 1: older servers leave it out). At most `head - next.seq`
    /// records follow, so a client can show how far a long pull has come.
    public var head: Int64?
    /// On a server with rules: the field kinds of the space's collections (docs/rules.md,
    /// "Field kinds"), in every page; nil from a server without rules or before this
    /// addition to version 1, which is the same as no declarations.
    public var fields: FieldKinds?

    public init(epoch: Epoch, changes: [RecordState], next: Version, hasMore: Bool, head: Int64? = nil, revoked: [Revocation] = [], view: String? = nil,
                fields: FieldKinds? = nil) {
        self.fields = fields
        self.epoch = epoch
        self.changes = changes
        self.revoked = revoked
        self.next = next
        self.view = view
        self.hasMore = hasMore
        self.head = head
    }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        guard let e = Epoch(try r.string("epoch")) else { throw r.invalid("epoch", "is not an epoch") }
        epoch = e
        var changes: [RecordState] = []
        var revoked: [Revocation] = []
        for (i, item) in try r.array("changes").enumerated() {
            if case .object(let o) = item, o["revoked"] == .bool(true) {
                revoked.append(try Revocation(json: item, path: "changes[\(i)]"))
            } else {
                changes.append(try RecordState(json: item, path: "changes[\(i)]"))
            }
        }
        self.changes = changes
        self.revoked = revoked
        guard let n = Cursor(try r.string("next")) else { throw r.invalid("next", "is not a cursor") }
        next = n.version
        view = n.view
        hasMore = try r.bool("hasMore")
        head = try r.optionalInt64("head")
        if let head, head < 0 { throw r.invalid("head", "is negative") }
        fields = try r.optionalObject("fields").map { FieldKinds(json: .object($0)) }
    }

    public var json: JSONValue {
        var object: JSONObject = [
            "epoch": .string(epoch.rawValue),
            "changes": .array((changes.map { ($0.version.seq, $0.json) } + revoked.map { ($0.version.seq, $0.json) }).sorted { $0.0 < $1.0 }.map(\.1)),
            "next": .string(Cursor(next, view: view).text),
            "hasMore": .bool(hasMore),
        ]
        if let head { object["head"] = .number(JSONNumber(head)) }
        if let fields { object["fields"] = fields.json }
        return .object(object)
    }
}

/// A `"revoked": true` entry of a pull page (docs/rules.md): the record's latest write,
/// at `version`, made it unreadable for the token; the entry carries no data.
public struct Revocation: Hashable, Sendable, JSONWireType {
    public var collection: String
    public var id: String
    public var version: Version

    public init(collection: String, id: String, version: Version) {
        self.collection = collection
        self.id = id
        self.version = version
    }

    public init(json: JSONValue) throws(WireError) {
        try self.init(json: json, path: "")
    }

    public init(json: JSONValue, path: String) throws(WireError) {
        let r = try FieldReader(json, path: path)
        collection = try r.string("collection")
        id = try r.string("id")
        guard let v = Version(try r.string("version")), v.seq > 0 else { throw r.invalid("version", "is not a version") }
        version = v
        guard try r.bool("revoked") else { throw r.invalid("revoked", "must be true") }
    }

    public var json: JSONValue {
        .object(["collection": .string(collection), "id": .string(id), "version": .string(version.text), "revoked": .bool(true)])
    }
}

/// The query of a pull request (docs/protocol.md section 5), parsed and validated.
public struct PullQuery: Hashable, Sendable {
    /// The cursor; nil means the start of the current epoch.
    public var since: Version?
    /// The view part of the cursor (docs/rules.md); nil for a cursor without one.
    public var sinceView: String?
    public var limit: Int?
    public var maxBytes: Int?
    /// Only these collections; nil means all.
    public var collections: [String]?
    /// Long-poll time in ms (0 to 60000).
    public var waitMs: Int
    /// The device keeps copies from before this history's start (a re-pull of a new epoch,
    /// a refresh): under rules the server decides every page as for a device that held
    /// the view at the start, so it also sends the deletes and revocations of records the
    /// view admitted then (docs/protocol.md section 5, `holding`). A server without rules
    /// sends tombstones anyway; an older server ignores it.
    public var holding: Bool
    /// The device's clientId, sent as the `X-Outpost-Client-Id` header (not in the query,
    /// so it never splits a cache key or a log's URL): the server notes when each device
    /// last pulled and under which cursor and view, for its operator (docs/protocol.md
    /// section 5; added without a version change, ignored by older servers).
    public var clientId: String?

    /// The request header that carries `clientId`.
    public static let clientIdHeader = "X-Outpost-Client-Id"

    public init(since: Version? = nil, sinceView: String? = nil, limit: Int? = nil, maxBytes: Int? = nil, collections: [String]? = nil, waitMs: Int = 0,
                holding: Bool = false, clientId: String? = nil) {
        self.clientId = clientId
        self.since = since
        self.sinceView = sinceView
        self.limit = limit
        self.maxBytes = maxBytes
        self.collections = collections
        self.waitMs = waitMs
        self.holding = holding
    }

    /// The longest long poll the protocol allows.
    public static let maxWaitMs = 60_000

    /// Query items for a request.
    public var queryItems: [(String, String)] {
        var items: [(String, String)] = []
        if let since { items.append(("since", Cursor(since, view: sinceView).text)) }
        if let limit { items.append(("limit", String(limit))) }
        if let maxBytes { items.append(("maxBytes", String(maxBytes))) }
        if let collections, !collections.isEmpty { items.append(("collections", collections.joined(separator: ","))) }
        if waitMs > 0 { items.append(("wait", String(waitMs))) }
        if holding { items.append(("holding", "true")) }
        return items
    }
}
