import Foundation
import OutpostCore
import OutpostHTTP
import OutpostRules
import OutpostSyncRules

/// The admin console's questions about one subject (docs/operating.md, "Admin console"):
/// why the rules let it read or write a record (`POST /v1/admin/spaces/{space}/explain`),
/// and what its pull would return (`POST /v1/admin/spaces/{space}/view`). Both take the
/// subject and the claims of a token it could hold and answer with what the server's own
/// rules engine decides for them: the read rule's trace is the one evaluation of
/// `RuleExpression` (`traced(in:)`), the verdicts are `ReadView`'s and `RulesJudge`'s,
/// and the records are `ViewPager`'s, the pull's own pages. Neither mints a token nor
/// writes anything; each is logged with the admin's subject.
extension AdminService {
    /// The largest body of either request.
    static let inspectionBodyLimit = 65_536
    /// The largest `claims` object, encoded.
    static let maxClaimsBytes = 16_384
    /// The most pages `…/view` reads, and its default; the most records in each.
    static let maxViewPages = 5
    static let defaultViewPages = 1
    static let maxViewPageRecords = 500
    static let defaultViewPageRecords = 50
    /// The byte budget of each page `…/view` reads (the pull's own is larger).
    static let maxViewPageBytes = 1 << 20
    /// A traced value longer than this, encoded, is shown cut (`valuePreview`).
    static let maxTracedValueBytes = 1024

    /// The subject and claims of a request body: the claims a token for the subject would
    /// carry (`sub` is the subject, whatever the claims say). `scope`, `spaces`, `exp` and
    /// `admin` are read as a token's; by default the token writes (scope `write`), names
    /// only `space` and lives an hour from now. Nothing is signed, so the claims' text is
    /// taken as it is.
    static func subjectClaims(_ body: JSONObject, space: String, now: Int64) throws(HTTPError) -> Claims {
        // The subject goes into the log line: no control character, as in a token's `sub`.
        guard case .string(let sub)? = body["subject"], (1...maxSubjectCharacters).contains(sub.unicodeScalars.count),
              !sub.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else {
            throw badField("subject", "must be a string of 1 to \(maxSubjectCharacters) characters with no control character")
        }
        var extra = JSONObject()
        if let value = body["claims"] {
            guard case .object(let claims) = value else { throw badField("claims", "must be a JSON object of a token's claims") }
            guard value.encoded().count <= maxClaimsBytes else { throw badField("claims", "must be at most \(maxClaimsBytes) bytes of JSON") }
            extra = claims
        }
        var scope = Claims.Scope.write
        if let value = extra["scope"] {
            guard case .string(let text) = value, let parsed = Claims.Scope(rawValue: text) else { throw badField("claims.scope", "must be read or write") }
            scope = parsed
        }
        var spaces = [space]
        if let value = extra["spaces"] {
            guard case .array(let items) = value, items.count <= 64 else { throw badField("claims.spaces", "must be a list of at most 64 space names") }
            spaces = []
            for item in items {
                guard case .string(let name) = item, (1...256).contains(name.unicodeScalars.count) else {
                    throw badField("claims.spaces", "must be a list of space names (or prefixes ending in *)")
                }
                spaces.append(name)
            }
        }
        var exp = now + 3600
        if let value = extra["exp"] {
            guard let seconds = value.int64Value, (-Int64(AppVersions.maxVersion)...Int64(AppVersions.maxVersion)).contains(seconds) else {
                throw badField("claims.exp", "must be an integer (seconds since 1970) of at most 2^53 - 1")
            }
            exp = seconds
        }
        var admin = false
        if let value = extra["admin"] {
            guard case .bool(let flag) = value else { throw badField("claims.admin", "must be true or false") }
            admin = flag
        }
        // A `sub` among the claims is the subject's place: `Claims` keeps the subject.
        return Claims(sub: sub, exp: exp, spaces: spaces, scope: scope, admin: admin, extra: extra)
    }

    /// A request body of either route: a JSON object.
    static func inspectionBody(_ request: HTTPRequest) throws(HTTPError) -> JSONObject {
        guard case .object(let body) = try parseJSONBody(request.body, maxDepth: 32) else { throw badField("body", "must be a JSON object") }
        return body
    }

    // MARK: Explain

    /// `POST /v1/admin/spaces/{space}/explain` with `{"collection", "id", "subject",
    /// "claims"?, "appVersion"?, "data"?}`: the record, the read rule's evaluation step by
    /// step with the verdict and whether the record is in the subject's view now, and the
    /// write rule's evaluation for a put (of `data`, by default the record's own data) and
    /// for a delete, with the schema's verdict and the push's verdict.
    func explain(_ request: HTTPRequest) async throws -> HTTPResponse {
        let asker = try await authorizer.authorizeAdmin(request.head)
        let space = try SyncService.space(request.pathParameters)
        let body = try Self.inspectionBody(request)
        guard case .string(let collection)? = body["collection"], Names.isValidCollection(collection) else {
            throw Self.badField("collection", "must be a collection name")
        }
        guard case .string(let id)? = body["id"], Self.isValidID(id) else {
            throw Self.badField("id", "must be a string of 1 to \(Self.maxIDCharacters) characters with no control character")
        }
        var versions = AppVersions()
        if let value = body["appVersion"] {
            guard let v = value.int64Value, v >= 0, v <= Int64(AppVersions.maxVersion) else {
                throw Self.badField("appVersion", "must be an integer from 0 to \(AppVersions.maxVersion)")
            }
            versions.app = Int(v)
        }
        var written: JSONObject?
        if let value = body["data"] {
            guard case .object(let o) = value else { throw Self.badField("data", "must be a JSON object (the data of a put)") }
            written = o
        }
        let claims = try Self.subjectClaims(body, space: space, now: Int64(Date().timeIntervalSince1970))
        let stored = try await storeCall { try await browser.record(space: space, collection: collection, id: id) }
        let live: JSONObject? = stored.flatMap { record in
            guard !record.deleted, let data = record.data, case .object(let o)? = try? JSONParser.parse(data) else { return nil }
            return o
        }
        let allowed = claims.allows(space: space)
        var answer: JSONObject = [
            "space": .string(space), "collection": .string(collection), "id": .string(id), "subject": .string(claims.sub),
            "spaceAllowed": .bool(allowed), "scope": .string(claims.scope.rawValue),
        ]
        if let stored {
            var out: [UInt8] = []
            stored.append(to: &out, epoch: browser.epoch)
            answer["record"] = (try? JSONParser.parse(out)) ?? .null
        } else {
            answer["record"] = .null
        }
        guard let rules = sync.rules.rules else {
            // Without a rules file a token for the space reads every record and, with write
            // scope, writes any (docs/rules.md).
            answer["rules"] = .null
            answer["view"] = .null
            answer["read"] = .object(["verdict": .bool(allowed), "rule": .null, "from": .null, "trace": .array([])])
            answer["inView"] = .bool(allowed && live != nil)
            let writes = JSONValue.object(["verdict": .bool(allowed && claims.scope == .write), "conditions": .array([])])
            answer["put"] = writes
            answer["delete"] = writes
            Self.logInspection("explain", space: space, subject: claims.sub, by: asker.sub, ["collection": collection])
            return Self.json(.object(answer))
        }
        let view = rules.view(for: claims)
        let collectionRules = rules.rules(for: collection)
        answer["rules"] = .string(rules.path)
        answer["view"] = .string(view.id)
        let from: JSONValue = rules.collections[collection] != nil ? "collection" : (collectionRules != nil ? "default" : .null)

        // Read: the rule traced on the live data; in view when the pull's own check admits
        // the data as stored.
        var read: JSONObject = ["rule": collectionRules?.read.map { .string($0.source) } ?? .null, "from": from]
        if let rule = collectionRules?.read, let live {
            let (value, trace) = rule.traced(in: view.readContext(collection: collection, id: id, data: live))
            read["verdict"] = .bool(RuleExpression.isTrue(value))
            read["trace"] = Self.steps(trace)
        } else {
            read["verdict"] = .bool(false)
            read["trace"] = .array([])
            read["note"] = .string(collectionRules?.read == nil ? "the rules give no read access to \(collection)"
                : stored == nil ? "no such record" : "the record is deleted: a pull sends its tombstone only to a device that held it")
        }
        answer["read"] = .object(read)
        let inView = allowed && stored.map { !$0.deleted && $0.data.map { view.admits(collection: collection, id: id, stored: $0) } ?? false } ?? false
        answer["inView"] = .bool(inView)

        // Write: a put and a delete by the subject, judged by the push's judge.
        let judge = RulesJudge(view: view, versions: versions)
        let current = stored.map { record in
            RecordState(collection: collection, id: id, version: Version(epoch: browser.epoch, seq: record.seq), deleted: record.deleted, data: live,
                        updatedAt: record.updatedAt, updatedBy: record.updatedBy, clientTime: record.clientTime)
        }
        for op in [ChangeOp.put, .delete] {
            var change = Change(changeId: "explain", collection: collection, id: id, op: op, data: op == .put ? (written ?? live ?? [:]) : nil,
                                baseVersion: current?.version)
            var write: JSONObject = ["data": op == .put ? .object(change.data ?? [:]) : .null]
            // The push's order: the schema is checked first (off the writer), its refusal
            // answered after the judge's.
            let schemaRefusal = judge.prepare(&change)
            let refusal = judge.judge(change, current: current, deletedCopy: nil) ?? schemaRefusal
            let scopeAllows = allowed && claims.scope == .write
            write["verdict"] = .bool(scopeAllows && refusal == nil)
            write["scopeAllows"] = .bool(scopeAllows)
            write["refusal"] = refusal.map { r in .object(["code": .string(r.code), "message": .string(r.message), "details": r.details.map { .object($0) } ?? .null]) } ?? .null
            if op == .put {
                write["schema"] = schemaRefusal.map { r in .object(["verdict": false, "message": .string(r.message), "details": r.details.map { .object($0) } ?? .null]) }
                    ?? .object(["verdict": true, "declared": .bool(collectionRules?.schema != nil)])
            }
            let context = judge.writeContext(change, prev: live)
            write["conditions"] = .array((collectionRules?.write ?? []).map { condition in
                let (value, trace) = condition.rule.traced(in: context)
                return .object(["rule": .string(condition.rule.source), "reason": condition.reason.map { .string($0) } ?? .null,
                                "verdict": .bool(RuleExpression.isTrue(value)), "trace": Self.steps(trace)])
            })
            answer[op.rawValue] = .object(write)
        }
        Self.logInspection("explain", space: space, subject: claims.sub, by: asker.sub, ["collection": collection])
        return Self.json(.object(answer))
    }

    /// A trace as the answer lists it: per step its depth, text, value (cut when long) and,
    /// for a comparison, the values it compared.
    static func steps(_ trace: RuleExpression.Trace) -> JSONValue {
        .array(trace.steps.map { step in
            var o: JSONObject = ["depth": .number(JSONNumber(step.depth)), "expression": .string(step.expression)]
            let encoded = step.value.encoded()
            if encoded.count <= maxTracedValueBytes {
                o["value"] = step.value
            } else {
                o["value"] = .null
                o["valuePreview"] = .string(String(decoding: encoded.prefix(maxTracedValueBytes), as: UTF8.self) + "…")
            }
            if let compared = step.compared { o["compared"] = .string(compared) }
            return .object(o)
        })
    }

    // MARK: View

    /// `POST /v1/admin/spaces/{space}/view` with `{"subject", "claims"?, "collections"?,
    /// "limit"?, "pages"?}`: the first `pages` pages a pull from the start would return to
    /// a token with those claims, read by the pull's own pager, with the records' count per
    /// collection, whether more follow, and the view's id. No token is made.
    func viewAs(_ request: HTTPRequest) async throws -> HTTPResponse {
        let asker = try await authorizer.authorizeAdmin(request.head)
        let space = try SyncService.space(request.pathParameters)
        let body = try Self.inspectionBody(request)
        let claims = try Self.subjectClaims(body, space: space, now: Int64(Date().timeIntervalSince1970))
        let limit = try Self.integerField(body, "limit", 1...Self.maxViewPageRecords) ?? Self.defaultViewPageRecords
        let pages = try Self.integerField(body, "pages", 1...Self.maxViewPages) ?? Self.defaultViewPages
        var collections: [String]?
        if let value = body["collections"] {
            let names = value.arrayValue?.compactMap(\.stringValue) ?? []
            guard case .array(let items) = value, items.count <= 64, names.count == items.count, names.allSatisfy(Names.isValidCollection) else {
                throw Self.badField("collections", "must be a list of at most 64 collection names")
            }
            collections = names.isEmpty ? nil : Array(Set(names)).sorted()
        }
        let allowed = claims.allows(space: space)
        let maxBytes = min(sync.limits.pageByteBudget(requested: nil), Self.maxViewPageBytes)
        let epoch = sync.store.epoch
        let view = sync.rules.rules.map { $0.view(for: claims) }
        var records: [JSONValue] = []
        var counts: [String: Int] = [:]
        var read = 0, hasMore = false, head: Int64 = 0, after: Int64 = 0
        while allowed && read < pages {
            let from = after
            let json: [UInt8]
            if let view {
                // The pull under rules from the start: a device that holds nothing.
                let pager = ViewPager(store: sync.store, view: view, indexed: sync.viewIndex.isReady(view.rules.index))
                let page = try await storeCall {
                    try await pager.page(space: space, afterSeq: from, heldAt: nil, limit: limit, maxBytes: maxBytes, collections: collections, epoch: epoch)
                }
                (json, hasMore, head, after) = (page.json, page.hasMore, page.head, page.lastSeq ?? from)
            } else {
                let pageRequest = PageRequest(space: space, afterSeq: from, limit: limit, maxBytes: maxBytes, collections: collections)
                let store = sync.store
                let page = try await storeCall { try await store.page(pageRequest) }
                (json, hasMore, head, after) = (page.changesJSON, page.hasMore, page.head, page.lastSeq ?? from)
            }
            read += 1
            for entry in (try JSONParser.parse(json)).arrayValue ?? [] {
                if let name = entry["collection"]?.stringValue { counts[name, default: 0] += 1 }
                records.append(entry)
            }
            if !hasMore { break }
        }
        Self.logInspection("view", space: space, subject: claims.sub, by: asker.sub, ["pages": String(read)])
        return Self.json(.object([
            "space": .string(space), "subject": .string(claims.sub), "spaceAllowed": .bool(allowed), "epoch": .string(epoch.rawValue),
            "view": view.map { .string($0.id) } ?? .null, "records": .array(records),
            "counts": .object(JSONObject(counts.sorted { $0.key < $1.key }.map { ($0.key, .number(JSONNumber($0.value))) })),
            "pages": .number(JSONNumber(read)), "hasMore": .bool(hasMore), "head": .number(JSONNumber(head)),
        ]))
    }

    // MARK: Helpers

    /// An optional integer member of a body, within `range`.
    static func integerField(_ body: JSONObject, _ name: String, _ range: ClosedRange<Int>) throws(HTTPError) -> Int? {
        guard let value = body[name] else { return nil }
        guard let v = value.int64Value, v >= Int64(range.lowerBound), v <= Int64(range.upperBound) else {
            throw badField(name, "must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return Int(v)
    }

    /// An id as a record may have it: 1 to `maxIDCharacters` characters, no control character.
    static func isValidID(_ id: String) -> Bool {
        let scalars = id.unicodeScalars
        return !id.isEmpty && scalars.count <= maxIDCharacters
            && !scalars.contains { $0.value < 0x20 || $0.value == 0x7F || ($0.value >= 0x80 && $0.value <= 0x9F) }
    }

    /// The operator's log line of an inspection: who asked (the admin token's subject), of
    /// which space and subject; never the claims or a record's data.
    static func logInspection(_ what: String, space: String, subject: String, by admin: String, _ more: [String: String]) {
        var fields = ["space": space, "subject": subject, "by": admin]
        for (k, v) in more { fields[k] = v }
        Log.info("admin console inspected a subject's \(what == "explain" ? "rules" : "view")", fields)
    }
}
