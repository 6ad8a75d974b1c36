/// One record in its current state, as pull pages and push conflicts carry it
/// (docs/protocol.md sections 4 and 5). A tombstone has `deleted == true` and no `data`.
public struct RecordState: Hashable, Sendable, JSONWireType {
    public var collection: String
    public var id: String
    public var version: Version
    public var deleted: Bool
    /// The record's JSON object; nil for a tombstone.
    public var data: JSONObject?
    /// The server's time (ms since 1970) when this version was committed.
    public var updatedAt: Int64
    /// The `clientId` of the push that wrote this version.
    public var updatedBy: String
    /// The device's time of the edit, as that push sent it.
    public var clientTime: Int64?
    /// Protocol 1.1: the version of an earlier history this state descends from (the state
    /// it was restored from, or the copy a re-offer carried, kept through the writes made
    /// on it since). Nil when it descends from nothing earlier, or from a 1.0 server.
    public var lineage: Version?
    /// Protocol 1.1: set when this state *is* that state of an earlier history (restored
    /// from it, or written by a re-offer carrying it) and nothing was written on it since.
    /// `lineage` says "descends from"; `sameAs` says "is".
    public var sameAs: Version?
    /// Set when a device's resolved write stored this state over another (added without a
    /// version change, docs/protocol.md section 4, "Resolutions"): the version it replaced
    /// and what the resolver did. A device whose acknowledged write was that version learns
    /// that another device's resolution replaced it.
    public var resolved: Resolved?

    public init(collection: String, id: String, version: Version, deleted: Bool, data: JSONObject?, updatedAt: Int64, updatedBy: String, clientTime: Int64?,
                lineage: Version? = nil, sameAs: Version? = nil, resolved: Resolved? = nil) {
        self.collection = collection
        self.id = id
        self.version = version
        self.deleted = deleted
        self.data = data
        self.updatedAt = updatedAt
        self.updatedBy = updatedBy
        self.clientTime = clientTime
        self.lineage = lineage
        self.sameAs = sameAs
        self.resolved = resolved
    }

    public init(json: JSONValue) throws(WireError) {
        try self.init(json: json, path: "")
    }

    public init(json: JSONValue, path: String) throws(WireError) {
        let r = try FieldReader(json, path: path)
        collection = try r.string("collection")
        id = try r.string("id")
        let versionText = try r.string("version")
        guard let v = Version(versionText), v.seq > 0 else { throw r.invalid("version", "is not a version") }
        version = v
        deleted = try r.bool("deleted")
        data = try r.optionalObject("data")
        if !deleted && data == nil { throw r.missing("data") }
        updatedAt = try r.int64("updatedAt")
        updatedBy = try r.string("updatedBy")
        clientTime = try r.optionalInt64("clientTime")
        if let text = try r.optionalString("lineage") {
            guard let v = Version(text), v.seq > 0 else { throw r.invalid("lineage", "is not a version") }
            lineage = v
        }
        if let text = try r.optionalString("sameAs") {
            guard let v = Version(text), v.seq > 0 else { throw r.invalid("sameAs", "is not a version") }
            sameAs = v
        }
        if let value = r.object["resolved"], !value.isNull { resolved = try Resolved(json: value, field: r.fieldPath("resolved")) }
    }

    public var json: JSONValue {
        var o: JSONObject = [
            "collection": .string(collection),
            "id": .string(id),
            "version": .string(version.text),
            "deleted": .bool(deleted),
        ]
        if let data, !deleted { o["data"] = .object(data) }
        o["updatedAt"] = .number(JSONNumber(updatedAt))
        o["updatedBy"] = .string(updatedBy)
        if let clientTime { o["clientTime"] = .number(JSONNumber(clientTime)) }
        if let lineage { o["lineage"] = .string(lineage.text) }
        if let sameAs { o["sameAs"] = .string(sameAs.text) }
        if let resolved { o["resolved"] = resolved.json }
        return .object(o)
    }
}

/// The error envelope every non-2xx answer carries (docs/protocol.md section 2):
/// `{"error": {"code": ..., "message": ..., "details": {...}}}`.
public struct ErrorEnvelope: Hashable, Sendable, JSONWireType, Error {
    public var code: String
    public var message: String
    public var details: JSONObject?

    public init(code: String, message: String, details: JSONObject? = nil) {
        self.code = code
        self.message = message
        self.details = details
    }

    public init(json: JSONValue) throws(WireError) {
        let top = try FieldReader(json)
        let e = try top.nested("error")
        code = try e.string("code")
        message = try e.string("message")
        details = try e.optionalObject("details")
    }

    public var json: JSONValue {
        var inner: JSONObject = ["code": .string(code), "message": .string(message)]
        if let details, details.count > 0 { inner["details"] = .object(details) }
        return .object(["error": .object(inner)])
    }
}

/// `GET /v1/info` (docs/protocol.md section 3).
public struct ServerInfo: Hashable, Sendable, JSONWireType {
    /// The major version (`protocol`): 1.
    public var protocolVersion: Int
    /// The full version (`protocolVersion`, e.g. "1.1"); a 1.0 server leaves it out, and it
    /// then reads as "1.0".
    public var protocolRevision: String
    public var server: String
    public var epoch: Epoch
    public var limits: Limits

    public init(protocolVersion: Int = OutpostProtocol.version, protocolRevision: String = OutpostProtocol.revision,
                server: String = "outpost/\(OutpostProtocol.productVersion)", epoch: Epoch, limits: Limits) {
        self.protocolVersion = protocolVersion
        self.protocolRevision = protocolRevision
        self.server = server
        self.epoch = epoch
        self.limits = limits
    }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        protocolVersion = try r.int("protocol")
        protocolRevision = try r.optionalString("protocolVersion") ?? "\(protocolVersion).0"
        server = try r.string("server")
        guard let e = Epoch(try r.string("epoch")) else { throw r.invalid("epoch", "is not an epoch") }
        epoch = e
        let l = try r.nested("limits")
        var limits = Limits()
        for field in Limits.fields {
            let value = try l.int(field.name)
            guard value > 0 || field.name == "maxMediaBytes" else { throw l.invalid(field.name, "must be positive") }
            limits[keyPath: field.keyPath] = value
        }
        self.limits = limits
    }

    public var json: JSONValue {
        var l = JSONObject()
        for field in Limits.fields { l[field.name] = .number(JSONNumber(Int64(limits[keyPath: field.keyPath]))) }
        return .object([
            "protocol": .number(JSONNumber(Int64(protocolVersion))),
            "protocolVersion": .string(protocolRevision),
            "server": .string(server),
            "epoch": .string(epoch.rawValue),
            "limits": .object(l),
        ])
    }
}
