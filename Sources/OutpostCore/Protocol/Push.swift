/// What a change does to its record (docs/protocol.md section 4).
public enum ChangeOp: String, Sendable, Hashable, Codable {
    case put
    case delete
}

/// What a re-offered change knew (protocol 1.1, docs/protocol.md section 4): the version at
/// which its content was committed in a history the server no longer holds, and the time of
/// that commit. How a server judges it is the server's (`OutpostSyncRules`,
/// LineageRules.swift).
public struct Lineage: Hashable, Sendable {
    /// The version of the copy in the history it came from (an earlier epoch).
    public var version: Version
    /// The server's commit time of that version there (ms since 1970).
    public var updatedAt: Int64

    public init(version: Version, updatedAt: Int64) {
        self.version = version
        self.updatedAt = updatedAt
    }

    public var json: JSONValue {
        .object(["version": .string(version.text), "updatedAt": .number(JSONNumber(updatedAt))])
    }
}

/// One intended write from a client (docs/protocol.md section 4).
public struct Change: Hashable, Sendable {
    /// Unique for ever within the space; chosen when the change is queued.
    public var changeId: String
    public var collection: String
    public var id: String
    public var op: ChangeOp
    /// The record for a put; nil for a delete.
    public var data: JSONObject?
    /// The version the client last saw, or nil when it believes the record does not exist.
    public var baseVersion: Version?
    /// Skip the base check (tools and operators only; the SDK never sends it).
    public var force: Bool
    /// The device's time of the edit, in ms since 1970.
    public var clientTime: Int64?
    /// Set on a re-offer (protocol 1.1): the copy of an earlier history this change carries
    /// again. Nil for an edit.
    public var lineage: Lineage?
    /// Set on a resolved write (added without a version change): what the device's
    /// resolver did with the conflict. The server keeps it with the state the write stores
    /// when that state replaces another (`RecordState.resolved`). Like `clientTime`, not
    /// part of the fingerprint.
    public var resolves: ResolutionMark?

    public init(changeId: String, collection: String, id: String, op: ChangeOp, data: JSONObject?, baseVersion: Version?, force: Bool = false, clientTime: Int64? = nil,
                lineage: Lineage? = nil, resolves: ResolutionMark? = nil) {
        self.changeId = changeId
        self.collection = collection
        self.id = id
        self.op = op
        self.data = data
        self.baseVersion = baseVersion
        self.force = force
        self.clientTime = clientTime
        self.lineage = lineage
        self.resolves = resolves
    }

    /// The JSON sent in a push.
    public var json: JSONValue {
        var o: JSONObject = [
            "changeId": .string(changeId),
            "collection": .string(collection),
            "id": .string(id),
            "op": .string(op.rawValue),
        ]
        if op == .put, let data { o["data"] = .object(data) }
        o["baseVersion"] = baseVersion.map { .string($0.text) } ?? .null
        if force { o["force"] = .bool(true) }
        if let clientTime { o["clientTime"] = .number(JSONNumber(clientTime)) }
        if let lineage { o["lineage"] = lineage.json }
        if let resolves { o["resolves"] = resolves.json }
        return .object(o)
    }

    /// The bytes whose SHA-256 is the change's fingerprint (docs/protocol.md section 4): the
    /// canonical JSON (object keys sorted, no whitespace) of collection, id, op, data,
    /// baseVersion and force. Semantically equal changes have equal fingerprints however
    /// their keys were ordered on the wire; `clientTime` is not part of the content.
    public func fingerprintMaterial() -> [UInt8] {
        fingerprintMaterial(canonicalData: canonicalData())
    }

    /// `data` in canonical JSON (keys sorted by their UTF-8 bytes, no whitespace), or nil
    /// for a delete. The server stores this form, so one encoding serves both storage and
    /// the fingerprint.
    public func canonicalData() -> [UInt8]? {
        guard let data else { return nil }
        var out: [UInt8] = []
        JSONWriter.append(data, to: &out, canonical: true)
        return out
    }

    /// The fingerprint material around an already canonical `data` encoding: the same
    /// bytes as the canonical JSON of the six fields, written without building an object.
    public func fingerprintMaterial(canonicalData: [UInt8]?) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity((canonicalData?.count ?? 0) + collection.utf8.count + id.utf8.count + 96)
        out.append(contentsOf: #"{"baseVersion":"#.utf8)
        if let baseVersion { JSONWriter.appendString(baseVersion.text, to: &out) } else { out.append(contentsOf: "null".utf8) }
        out.append(contentsOf: #","collection":"#.utf8)
        JSONWriter.appendString(collection, to: &out)
        out.append(contentsOf: #","data":"#.utf8)
        if let canonicalData { out.append(contentsOf: canonicalData) } else { out.append(contentsOf: "null".utf8) }
        out.append(contentsOf: force ? #","force":true,"id":"#.utf8 : #","force":false,"id":"#.utf8)
        JSONWriter.appendString(id, to: &out)
        if let lineage {
            // Only a re-offer has it, so the material of every other change is as in 1.0.
            out.append(contentsOf: #","lineage":{"updatedAt":"#.utf8)
            out.append(contentsOf: String(lineage.updatedAt).utf8)
            out.append(contentsOf: #","version":"#.utf8)
            JSONWriter.appendString(lineage.version.text, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: #","op":"#.utf8)
        JSONWriter.appendString(op.rawValue, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}

/// A change as the server reads it from a push body: either valid, or invalid in a way
/// that rejects only this change (`invalid_change`), so the others still apply.
public enum DecodedChange: Hashable, Sendable {
    case valid(Change)
    case invalid(changeId: String, message: String)

    public var changeId: String {
        switch self {
        case .valid(let c): return c.changeId
        case .invalid(let id, _): return id
        }
    }
}

/// The schema versions an app was built for, which a push names (`appVersion` and
/// `collectionVersions`, docs/protocol.md section 4): one number for the app, and, where a
/// collection's schema moves on its own, a number per collection. A push that names none
/// (a 1.1 client) is version 0 for every collection.
public struct AppVersions: Hashable, Sendable {
    /// The app's version; nil: none named.
    public var app: Int?
    /// Versions per collection, in place of `app` for those collections.
    public var collections: [String: Int]

    public init(app: Int? = nil, collections: [String: Int] = [:]) {
        self.app = app
        self.collections = collections
    }

    /// True when the push names no version.
    public var isEmpty: Bool { app == nil && collections.isEmpty }

    /// The version the app was built for in `collection`: its own, else the app's, else 0.
    public func version(for collection: String) -> Int {
        collections[collection] ?? app ?? 0
    }

    /// The largest version the wire carries: 2^53 − 1, exact in every JSON reader.
    public static let maxVersion = 9_007_199_254_740_991
}

/// `POST /v1/spaces/{space}/push` request body.
public struct PushRequest: Hashable, Sendable {
    public var clientId: String
    public var changes: [Change]
    /// The versions the app was built for (sent only when it names one).
    public var versions: AppVersions

    public init(clientId: String, changes: [Change], versions: AppVersions = AppVersions()) {
        self.clientId = clientId
        self.changes = changes
        self.versions = versions
    }

    public var json: JSONValue {
        var o: JSONObject = ["clientId": .string(clientId), "changes": .array(changes.map(\.json))]
        if let app = versions.app { o["appVersion"] = .number(JSONNumber(app)) }
        if !versions.collections.isEmpty {
            var c = JSONObject()
            for (name, v) in versions.collections.sorted(by: { $0.key < $1.key }) { c[name] = .number(JSONNumber(v)) }
            o["collectionVersions"] = .object(c)
        }
        return .object(o)
    }

    public func encoded() -> [UInt8] { json.encoded() }

    /// Decodes a push body as the server must (docs/protocol.md section 4). The request as a
    /// whole is refused (`WireError`, 422) when it is not an object, lacks a valid
    /// `clientId` or `changes` array, or has a change without a valid `changeId` (its
    /// result could not be named). Any other fault rejects only that change.
    ///
    /// `maxChanges` is checked before any change is decoded, so an oversized push costs
    /// no more work than counting.
    public static func decodeForServer(_ value: JSONValue, maxChanges: Int) throws(PushDecodeError) -> (clientId: String, changes: [DecodedChange], versions: AppVersions) {
        let r: FieldReader
        do { r = try FieldReader(value) } catch { throw .wire(error) }
        let clientId: String
        let items: [JSONValue]
        var versions = AppVersions()
        do throws(WireError) {
            clientId = try r.string("clientId")
            guard Names.isValidClientID(clientId) else { throw r.invalid("clientId", "must be 1 to 128 characters of [A-Za-z0-9_.:-]") }
            items = try r.array("changes")
            versions = try decodeVersions(r)
        } catch { throw .wire(error) }
        guard items.count <= maxChanges else { throw .tooManyChanges(count: items.count, limit: maxChanges) }
        var out: [DecodedChange] = []
        out.reserveCapacity(items.count)
        for (index, item) in items.enumerated() {
            let path = "changes[\(index)]"
            guard case .object(let o) = item else { throw .wire(WireError(field: path, message: "must be a JSON object")) }
            guard case .string(let changeId)? = o["changeId"], Names.isValidChangeID(changeId) else {
                throw .wire(WireError(field: "\(path).changeId", message: "is required: 1 to 128 characters of [A-Za-z0-9_.:-]"))
            }
            out.append(decodeChange(o, changeId: changeId))
        }
        return (clientId, out, versions)
    }

    /// `appVersion` and `collectionVersions`: integers from 0 to `AppVersions.maxVersion`.
    private static func decodeVersions(_ r: FieldReader) throws(WireError) -> AppVersions {
        func version(_ value: JSONValue, _ field: String) throws(WireError) -> Int? {
            if value.isNull { return nil }
            guard let v = value.int64Value, v >= 0, v <= Int64(AppVersions.maxVersion) else {
                throw WireError(field: field, message: "must be an integer from 0 to \(AppVersions.maxVersion)")
            }
            return Int(v)
        }
        var versions = AppVersions()
        if let app = r.object["appVersion"] { versions.app = try version(app, r.fieldPath("appVersion")) }
        switch r.object["collectionVersions"] {
        case nil, .null?: break
        case .object(let o)?:
            for (name, value) in o.elements {
                let field = r.fieldPath("collectionVersions") + "." + name
                guard Names.isValidCollection(name) else {
                    throw WireError(field: field, message: "is not a collection name", keptField: r.fieldPath("collectionVersions") + ".…")
                }
                if let v = try version(value, field) { versions.collections[name] = v }
            }
        default: throw r.invalid("collectionVersions", "must be an object from collection name to version")
        }
        return versions
    }

    private static func decodeChange(_ o: JSONObject, changeId: String) -> DecodedChange {
        func invalid(_ message: String) -> DecodedChange { .invalid(changeId: changeId, message: message) }
        guard case .string(let collection)? = o["collection"], Names.isValidCollection(collection) else {
            return invalid("collection must match ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
        }
        guard case .string(let id)? = o["id"], Names.isValidRecordID(id) else {
            return invalid("id must be 1 to 256 bytes of UTF-8 without control characters")
        }
        guard case .string(let opText)? = o["op"], let op = ChangeOp(rawValue: opText) else {
            return invalid("op must be \"put\" or \"delete\"")
        }
        var data: JSONObject?
        switch (op, o["data"]) {
        case (.put, .object(let d)?): data = d
        case (.put, _): return invalid("a put needs data, a JSON object")
        case (.delete, nil), (.delete, .null?): data = nil
        case (.delete, _): return invalid("a delete carries no data")
        }
        let baseVersion: Version?
        switch o["baseVersion"] {
        case nil: return invalid("baseVersion is required (null when the record does not exist)")
        case .null?: baseVersion = nil
        case .string(let text)?:
            guard let v = Version(text), v.seq > 0 else { return invalid("baseVersion is not a version") }
            baseVersion = v
        default: return invalid("baseVersion must be a version string or null")
        }
        var force = false
        switch o["force"] {
        case nil, .null?: break
        case .bool(let b)?: force = b
        default: return invalid("force must be a boolean")
        }
        var clientTime: Int64?
        switch o["clientTime"] {
        case nil, .null?: break
        case let value?:
            guard let t = value.int64Value else { return invalid("clientTime must be an integer (ms since 1970)") }
            clientTime = t
        }
        var lineage: Lineage?
        switch o["lineage"] {
        case nil, .null?: break
        case .object(let l)?:
            guard case .string(let text)? = l["version"], let v = Version(text), v.seq > 0 else { return invalid("lineage.version is not a version") }
            guard let t = l["updatedAt"]?.int64Value else { return invalid("lineage.updatedAt must be an integer (ms since 1970)") }
            lineage = Lineage(version: v, updatedAt: t)
        default: return invalid("lineage must be an object {version, updatedAt} or null")
        }
        var resolves: ResolutionMark?
        switch o["resolves"].map({ ResolutionMark.decode($0, field: "resolves") }) {
        case nil: break
        case .success(let mark)?: resolves = mark
        case .failure(let error)?: return invalid("\(error.field) \(error.message)")
        }
        return .valid(Change(changeId: changeId, collection: collection, id: id, op: op, data: data, baseVersion: baseVersion, force: force, clientTime: clientTime,
                             lineage: lineage, resolves: resolves))
    }
}

/// Why a push body was refused as a whole.
public enum PushDecodeError: Error, Equatable, Sendable {
    /// `422 invalid_request` with `details.field`.
    case wire(WireError)
    /// `413 too_many_changes` with `details.limit`.
    case tooManyChanges(count: Int, limit: Int)
}

/// The outcome of one change (docs/protocol.md section 4).
public enum PushStatus: String, Sendable, Hashable, Codable {
    case applied
    case conflict
    case rejected
}

/// One entry of a push answer's `results`, in the order of the request's changes.
public struct PushResult: Hashable, Sendable, JSONWireType {
    public var changeId: String
    public var status: PushStatus
    /// The new version, for `applied`.
    public var version: Version?
    /// True when this answer repeats the original one of an already applied change.
    public var replayed: Bool
    /// For `applied`: the server's commit time of `version` (ms since 1970), the record's
    /// `updatedAt` at that version (the original's for a replay). Optional on the wire: a
    /// server may leave it out, and a client then learns it from the next pull.
    public var updatedAt: Int64?
    /// The record as it is now, for `conflict` (nil when the record does not exist).
    public var current: RecordState?
    /// The reason, for `rejected`.
    public var error: RejectReason?

    public struct RejectReason: Hashable, Sendable {
        public var code: String
        public var message: String
        /// What the code needs said more precisely, e.g. for a change that fails the
        /// collection's schema (`invalid_change`): `path` (a JSON Pointer into `data`) and
        /// `reason`. Nil when the server gives none.
        public var details: JSONObject?
        public init(code: String, message: String, details: JSONObject? = nil) {
            self.code = code
            self.message = message
            self.details = details
        }
        public init(_ code: ErrorCode, _ message: String, details: JSONObject? = nil) {
            self.init(code: code.rawValue, message: message, details: details)
        }
    }

    public init(changeId: String, status: PushStatus, version: Version? = nil, replayed: Bool = false, current: RecordState? = nil, error: RejectReason? = nil,
                updatedAt: Int64? = nil) {
        self.changeId = changeId
        self.status = status
        self.version = version
        self.replayed = replayed
        self.updatedAt = updatedAt
        self.current = current
        self.error = error
    }

    public static func applied(_ changeId: String, version: Version, replayed: Bool = false, updatedAt: Int64? = nil) -> PushResult {
        PushResult(changeId: changeId, status: .applied, version: version, replayed: replayed, updatedAt: updatedAt)
    }

    public static func conflict(_ changeId: String, current: RecordState?) -> PushResult {
        PushResult(changeId: changeId, status: .conflict, current: current)
    }

    public static func rejected(_ changeId: String, _ code: ErrorCode, _ message: String, details: JSONObject? = nil) -> PushResult {
        PushResult(changeId: changeId, status: .rejected, error: RejectReason(code, message, details: details))
    }

    public init(json: JSONValue) throws(WireError) {
        try self.init(json: json, path: "")
    }

    public init(json: JSONValue, path: String) throws(WireError) {
        let r = try FieldReader(json, path: path)
        changeId = try r.string("changeId")
        guard let s = PushStatus(rawValue: try r.string("status")) else { throw r.invalid("status", "is not applied, conflict or rejected") }
        status = s
        if let v = try r.optionalString("version") {
            guard let parsed = Version(v), parsed.seq > 0 else { throw r.invalid("version", "is not a version") }
            version = parsed
        }
        replayed = try r.optionalBool("replayed") ?? false
        updatedAt = try r.optionalInt64("updatedAt")
        if let c = r.object["current"], !c.isNull {
            current = try RecordState(json: c, path: r.fieldPath("current"))
        }
        if let e = try r.optionalObject("error") {
            let er = FieldReader(object: e, path: r.fieldPath("error"))
            error = RejectReason(code: try er.string("code"), message: try er.string("message"), details: try er.optionalObject("details"))
        }
        if status == .applied && version == nil { throw r.missing("version") }
        if status == .rejected && error == nil { throw r.missing("error") }
    }

    public var json: JSONValue {
        var o: JSONObject = ["changeId": .string(changeId), "status": .string(status.rawValue)]
        if let version { o["version"] = .string(version.text) }
        if replayed { o["replayed"] = .bool(true) }
        if let updatedAt { o["updatedAt"] = .number(JSONNumber(updatedAt)) }
        if status == .conflict { o["current"] = current?.json ?? .null }
        if let error {
            var e: JSONObject = ["code": .string(error.code), "message": .string(error.message)]
            if let details = error.details { e["details"] = .object(details) }
            o["error"] = .object(e)
        }
        return .object(o)
    }
}

/// `POST /v1/spaces/{space}/push` answer.
public struct PushResponse: Hashable, Sendable, JSONWireType {
    public var epoch: Epoch
    public var results: [PushResult]

    public init(epoch: Epoch, results: [PushResult]) {
        self.epoch = epoch
        self.results = results
    }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        guard let e = Epoch(try r.string("epoch")) else { throw r.invalid("epoch", "is not an epoch") }
        epoch = e
        var results: [PushResult] = []
        for (i, item) in try r.array("results").enumerated() {
            results.append(try PushResult(json: item, path: "results[\(i)]"))
        }
        self.results = results
    }

    public var json: JSONValue {
        .object(["epoch": .string(epoch.rawValue), "results": .array(results.map(\.json))])
    }

    /// The compact encoding, written straight into bytes: a push answer has one result per
    /// change (up to `maxChangesPerPush`), and building a `JSONValue` tree for each would
    /// cost more than the rest of the answer. Equal to `json.encoded()`.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(32 + results.count * 96)
        out.append(contentsOf: #"{"epoch":"#.utf8)
        JSONWriter.appendString(epoch.rawValue, to: &out)
        out.append(contentsOf: #","results":["#.utf8)
        for (i, r) in results.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            switch r.status {
            case .applied:
                out.append(contentsOf: #"{"changeId":"#.utf8)
                JSONWriter.appendString(r.changeId, to: &out)
                out.append(contentsOf: #","status":"applied""#.utf8)
                if let version = r.version {
                    out.append(contentsOf: #","version":"#.utf8)
                    JSONWriter.appendString(version.text, to: &out)
                }
                if r.replayed { out.append(contentsOf: #","replayed":true"#.utf8) }
                if let updatedAt = r.updatedAt {
                    out.append(contentsOf: #","updatedAt":"#.utf8)
                    out.append(contentsOf: String(updatedAt).utf8)
                }
                out.append(UInt8(ascii: "}"))
            case .conflict, .rejected:
                JSONWriter.append(r.json, to: &out)
            }
        }
        out.append(contentsOf: "]}".utf8)
        return out
    }
}
