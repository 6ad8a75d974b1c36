import Foundation
import OutpostCore
import OutpostSyncRules
import OutpostRules
import OutpostCrypto
import Synchronization

/// A rules file (docs/rules.md), read and checked: per collection, who may read a record,
/// who may write it, and the shape its data must have. A file that does not parse or
/// check is refused whole, with its path, the line and column, and the reason.
///
/// ```json
/// {"collections": {"jobs": {"read": "…", "write": "…", "schema": {…}}},
///  "default": {"read": "true", "write": "true"}}
/// ```
///
/// A collection the file does not name gets `default`; without one, it is closed (every
/// read and write refused). A named collection that leaves out `read` or `write` takes
/// that rule from `default`, and is closed for it without one.
public struct ServerRules: Sendable {
    /// One condition of a collection's write rule, and the reason its refusal gives.
    public struct WriteCondition: Sendable {
        public let rule: RuleExpression
        /// Said in a refusal by this condition (`forbidden`, in the message and as
        /// `details.reason`); nil: the generic message.
        public let reason: String?
    }

    /// The rules of one collection.
    public struct Collection: Sendable {
        /// Who may read a record: evaluated with `auth`, `data` (the record), `collection`, `id`.
        public let read: RuleExpression?
        /// Who may write it: evaluated with every root (`prev` is the record's current
        /// data, `null` when it has none; `data` is what the change writes, `null` for a delete).
        /// Every condition must admit the change; the first that refuses gives its reason.
        public let write: [WriteCondition]?
        /// The shape of every put's data.
        public let schema: JSONSchema?
        /// The field kinds it declares (`fields`), by dotted path: checked on every put,
        /// and served to the devices, which merge by them.
        public let fields: [String: FieldKind]
        /// The app version a push must name for writes to the collection (`minAppVersion`:
        /// the collection's own, else the file's); nil: any.
        public let minAppVersion: Int?
        /// The paths of `data` the read rule reads: a write that changes none of them (and
        /// is no delete) cannot move the record in or out of any view.
        let readDataPaths: [[String]]
        /// The members of a change's data (and of the copy it replaces) the write and read
        /// rules read (nil: the whole object): what the judge keeps of a push.
        let judgedKeys: Set<String>?

        init(read: RuleExpression?, write: [WriteCondition]?, schema: JSONSchema?, fields: [String: FieldKind] = [:], minAppVersion: Int? = nil) {
            self.read = read
            self.write = write
            self.schema = schema
            self.fields = fields
            self.minAppVersion = minAppVersion
            readDataPaths = read?.paths(from: .data) ?? []
            let written = (write ?? []).flatMap { $0.rule.paths(from: .data) + $0.rule.paths(from: .prev) } + readDataPaths
            judgedKeys = Self.keys(written)
        }

        /// The first names of `paths`; nil when one of them is the whole object.
        static func keys(_ paths: [[String]]) -> Set<String>? {
            var keys = Set<String>()
            for path in paths {
                guard let first = path.first else { return nil }
                keys.insert(first)
            }
            return keys
        }
    }

    /// Where the rules were read from.
    public let path: String
    let collections: [String: Collection]
    let fallback: Collection?
    /// What every view is made of besides the token: each read rule, by collection.
    let viewMaterial: String
    /// The claims the read rules read (`auth.<path>`): a token's view depends on these only.
    let viewClaims: [[String]]
    /// What the view index keeps of the records under these rules.
    public let index: ViewIndex
    /// The field kinds of the collections that are open to reads (a closed collection's
    /// name, or one whose read rule is `false`, is not shown), as every pull page under
    /// these rules serves them.
    public let fieldKinds: FieldKinds
    /// `fieldKinds` encoded, for the pages.
    let fieldKindsJSON: [UInt8]

    /// The rules of `collection`; nil when it is closed.
    public func rules(for collection: String) -> Collection? {
        collections[collection] ?? fallback
    }

    /// Reads and checks the file at `path`.
    public static func load(path: String) throws(RulesError) -> ServerRules {
        // The size is checked before the file is read.
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue
        if let size, size > maxFileBytes {
            throw RulesError(path: path, line: nil, column: nil, reason: "is \(size) bytes; a rules file is at most \(maxFileBytes)")
        }
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw RulesError(path: path, line: nil, column: nil, reason: "cannot be read: \(error.localizedDescription)")
        }
        return try parse(bytes, path: path)
    }

    /// The largest rules file accepted.
    public static let maxFileBytes = 1 << 20

    /// Checks the text of a rules file; `path` names it in errors.
    public static func parse(_ bytes: [UInt8], path: String) throws(RulesError) -> ServerRules {
        let file = RulesFileText(path: path, bytes: bytes)
        guard bytes.count <= maxFileBytes else { throw file.error(at: nil, "is larger than \(maxFileBytes) bytes") }
        let root: JSONValue
        do {
            root = try JSONParser(maxDepth: 64).parse(bytes)
        } catch {
            throw file.error(offset: error.offset, "is not JSON: \(error.reason)")
        }
        guard case .object(let top) = root else { throw file.error(at: [], "must be a JSON object") }
        for key in top.keys where !["collections", "default", "minAppVersion", "$comment"].contains(key) {
            throw file.error(at: [key], "unknown key \"\(key)\" (expected collections, default, minAppVersion)")
        }
        let spaceMinimum = try minAppVersion(top["minAppVersion"], at: ["minAppVersion"], file)
        var fallback: Collection?
        if let value = top["default"] {
            fallback = try collection(value, at: ["default"], fallback: nil, spaceMinimum: spaceMinimum, file)
        }
        var collections: [String: Collection] = [:]
        if let value = top["collections"] {
            guard case .object(let named) = value else { throw file.error(at: ["collections"], "must be an object of collections") }
            for (name, rules) in named.elements {
                guard Names.isValidCollection(name) else { throw file.error(at: ["collections", name], "\"\(name)\" is not a collection name") }
                collections[name] = try collection(rules, at: ["collections", name], fallback: fallback, spaceMinimum: spaceMinimum, file)
            }
        }
        // A view is the read rules and the values of the claims they read.
        var material = "outpost-view-1\n"
        var claims: [[String]] = []
        for name in collections.keys.sorted() {
            material += "c \(name)\n\(collections[name]!.read?.source ?? "<closed>")\n"
        }
        material += "d\n\(fallback?.read?.source ?? "<closed>")\n"
        for rules in Array(collections.values) + (fallback.map { [$0] } ?? []) {
            for claim in rules.read?.paths(from: .auth) ?? [] where !claims.contains(claim) { claims.append(claim) }
        }
        claims.sort { $0.joined(separator: ".") < $1.joined(separator: ".") }
        let kinds = FieldKinds(collections.filter { $0.value.read.map { $0.literalValue != .bool(false) } ?? false }.mapValues(\.fields))
        return ServerRules(path: path, collections: collections, fallback: fallback, viewMaterial: material, viewClaims: claims,
                           index: ViewIndex(collections: collections, fallback: fallback), fieldKinds: kinds, fieldKindsJSON: kinds.encoded())
    }

    private static func collection(_ value: JSONValue, at path: [String], fallback: Collection?, spaceMinimum: Int?,
                                   _ file: RulesFileText) throws(RulesError) -> Collection {
        guard case .object(let o) = value else { throw file.error(at: path, "must be an object with read, write and schema") }
        let named = path.first == "collections"
        for key in o.keys where !["read", "write", "schema", "minAppVersion", "$comment"].contains(key) && !(named && key == "fields") {
            throw file.error(at: path + [key], "unknown key \"\(key)\" (expected read, write, schema, minAppVersion\(named ? ", fields" : ""))")
        }
        let minimum = try minAppVersion(o["minAppVersion"], at: path + ["minAppVersion"], file) ?? spaceMinimum
        let read = try expression(o["read"], at: path + ["read"], roots: [.auth, .data, .collection, .id], file) ?? fallback?.read
        let write = try writeConditions(o["write"], at: path + ["write"], file) ?? fallback?.write
        var schema: JSONSchema?
        if let s = o["schema"] {
            do {
                schema = try JSONSchema(s)
            } catch {
                throw file.error(at: path + ["schema"] + JSONPointer.tokens(error.path), "schema: \(error.reason)")
            }
        }
        return Collection(read: read, write: write, schema: schema, fields: try fields(o["fields"], at: path + ["fields"], file),
                          minAppVersion: minimum)
    }

    /// A collection's `fields`: an object from dotted path (`"stock"`, `"totals.count"`) to
    /// `"counter"`, `"set"`, `"lww"` or `{"list": "<key member>"}` (docs/rules.md, "Field kinds").
    private static func fields(_ value: JSONValue?, at path: [String], _ file: RulesFileText) throws(RulesError) -> [String: FieldKind] {
        guard let value else { return [:] }
        guard case .object(let o) = value else { throw file.error(at: path, "must be an object from field path to kind") }
        var out: [String: FieldKind] = [:]
        for (field, kind) in o.elements {
            let names = field.split(separator: ".", omittingEmptySubsequences: false)
            guard !field.isEmpty, !names.contains(where: \.isEmpty) else {
                throw file.error(at: path + [field], "\"\(field)\" is not a field path (member names joined by dots)")
            }
            let k = try fieldKind(kind, at: path + [field], file)
            if let clash = out.keys.first(where: { $0.hasPrefix(field + ".") || field.hasPrefix($0 + ".") }) {
                throw file.error(at: path + [field], "\"\(field)\" and \"\(clash)\" overlap: a declared field cannot hold another")
            }
            if k != .lww { out[field] = k }
        }
        return out
    }

    /// One declared kind: a name, or the object form `{"list": "<key member>"}` whose only
    /// member names the member that keys the list's elements (a non-empty string). Anything
    /// else is refused where it stands, so that a typo never declares a field `lww`.
    private static func fieldKind(_ value: JSONValue, at path: [String], _ file: RulesFileText) throws(RulesError) -> FieldKind {
        switch value {
        case .string(let name):
            if let kind = FieldKind(name: name) { return kind }
        case .object(let o):
            for member in o.keys where member != "list" {
                throw file.error(at: path + [member], "unknown key \"\(member)\" (a field kind object is {\"list\": \"<key member>\"})")
            }
            guard let key = o["list"] else { throw file.error(at: path, "a field kind object is {\"list\": \"<key member>\"}") }
            guard case .string(let name) = key, !name.isEmpty else {
                throw file.error(at: path + ["list"], "a list's key is the name of a member of its elements: a non-empty string")
            }
            return .list(key: name)
        default:
            break
        }
        throw file.error(at: path, "a field kind is \"counter\", \"set\" or \"lww\", or {\"list\": \"<key member>\"}")
    }


    /// `write`: one expression, or a list of `{"rule", "reason"}` that must all admit a
    /// change (the first that refuses names the reason).
    private static func writeConditions(_ value: JSONValue?, at path: [String], _ file: RulesFileText) throws(RulesError) -> [WriteCondition]? {
        let roots = Set(RuleExpression.Root.allCases)
        guard case .array(let items)? = value else {
            return try expression(value, at: path, roots: roots, file).map { [WriteCondition(rule: $0, reason: nil)] }
        }
        guard !items.isEmpty else { throw file.error(at: path, "a list of write conditions needs at least one") }
        var out: [WriteCondition] = []
        for (i, item) in items.enumerated() {
            let at = path + [String(i)]
            guard case .object(let o) = item else { throw file.error(at: at, "must be an object with rule and reason") }
            for key in o.keys where !["rule", "reason", "$comment"].contains(key) {
                throw file.error(at: at + [key], "unknown key \"\(key)\" (expected rule, reason)")
            }
            guard let rule = try expression(o["rule"], at: at + ["rule"], roots: roots, file) else { throw file.error(at: at, "needs a rule") }
            var reason: String?
            switch o["reason"] {
            case nil: break
            case .string(let text)? where !text.isEmpty && text.utf8.count <= 500: reason = text
            default: throw file.error(at: at + ["reason"], "must be a string of 1 to 500 bytes")
            }
            out.append(WriteCondition(rule: rule, reason: reason))
        }
        return out
    }

    /// `minAppVersion`: an integer from 0 to `AppVersions.maxVersion`.
    private static func minAppVersion(_ value: JSONValue?, at path: [String], _ file: RulesFileText) throws(RulesError) -> Int? {
        guard let value else { return nil }
        guard let v = value.int64Value, v >= 0, v <= Int64(AppVersions.maxVersion) else {
            throw file.error(at: path, "must be an integer from 0 to \(AppVersions.maxVersion)")
        }
        return Int(v)
    }

    private static func expression(_ value: JSONValue?, at path: [String], roots: Set<RuleExpression.Root>, _ file: RulesFileText) throws(RulesError) -> RuleExpression? {
        guard let value else { return nil }
        guard case .string(let text) = value else { throw file.error(at: path, "must be a string holding an expression") }
        let expression: RuleExpression
        do {
            expression = try RuleExpression(text)
        } catch {
            throw file.error(inString: path, offset: error.offset, "\(error.reason)")
        }
        for root in RuleExpression.Root.allCases where !roots.contains(root) && !expression.paths(from: root).isEmpty {
            throw file.error(at: path, "a read rule cannot use \(root.rawValue): a read has no \(root == .prev ? "previous copy" : "operation")")
        }
        if let literal = expression.literalValue, case .bool = literal {} else if expression.literalValue != nil {
            throw file.error(at: path, "a rule must be a condition; a literal other than true or false always refuses")
        }
        return expression
    }

    // MARK: Views

    /// The view of the space that `claims` gives: its id goes in every cursor made under
    /// it, so a cursor outlives a change of the rules or claims only when the view is the
    /// same (docs/rules.md).
    public func view(for claims: Claims) -> ReadView {
        let auth = claims.all
        var material = viewMaterial
        for path in viewClaims {
            var value = JSONValue.object(auth)
            for name in path {
                guard case .object(let o) = value, let next = o[name] else { value = .null; break }
                value = next
            }
            material += "a \(path.joined(separator: "."))\n" + String(decoding: value.encoded(), as: UTF8.self) + "\n"
        }
        let id = Hex.encode(Array(SHA256.hash(Array(material.utf8)).prefix(8)))
        return ReadView(id: id, rules: self, auth: auth)
    }

    /// Every read rule bound to `auth` (`RuleExpression.binding`), by collection; the
    /// fallback's under "".
    func boundReads(_ auth: JSONObject) -> [String: RuleExpression] {
        var out: [String: RuleExpression] = [:]
        for (name, rules) in collections { if let read = rules.read { out[name] = read.binding(.auth, to: .object(auth)) } }
        if let read = fallback?.read { out[""] = read.binding(.auth, to: .object(auth)) }
        return out
    }
}

/// One token's view of a space under a rules file: which records it may read.
public struct ReadView: Sendable {
    /// The view's id (16 hex digits), the third part of its cursors.
    public let id: String
    public let rules: ServerRules
    /// The token's claims.
    public let auth: JSONObject
    /// The read rules with the token's claims bound, by collection (the fallback's under ""),
    /// and the members of a record's data each then reads (nil: the whole object).
    private let bound: [String: (rule: RuleExpression, keys: Set<String>?)]

    init(id: String, rules: ServerRules, auth: JSONObject) {
        self.id = id
        self.rules = rules
        self.auth = auth
        bound = rules.boundReads(auth).mapValues { ($0, ServerRules.Collection.keys($0.paths(from: .data))) }
    }

    /// Whether the token may read `data` (live data of `collection`/`id`).
    public func admits(collection: String, id: String, data: JSONObject) -> Bool {
        guard let read = rules.rules(for: collection)?.read else { return false }
        return read.admits(readContext(collection: collection, id: id, data: data))
    }

    /// What a read rule reads of the live record `collection`/`id` holding `data`: the
    /// token's claims and the record (a read has no previous copy and no operation).
    func readContext(collection: String, id: String, data: JSONObject) -> RuleExpression.Context {
        RuleExpression.Context(auth: auth, data: .object(data), prev: .null, op: "", collection: collection, id: id)
    }

    /// True when the token's claims alone make the read rule of `collection` admit its
    /// records, whatever their data.
    public func admitsWithoutData(collection: String) -> Bool {
        guard let (rule, _) = rules.collections[collection] != nil ? bound[collection] : bound[""] else { return false }
        return rule.literalValue == .bool(true)
    }

    /// The view index lookups that find every record this view admits (`ViewIndex.plan`):
    /// per scope, its bound rule's keys; every record of the scope where the claims make
    /// the rule `true` or it has no indexed form (the page then filters them); nothing of
    /// a closed scope, or of a scope outside `collections` when set. `exact` holds the
    /// scopes whose lookups find only records the view admits.
    public func lookups(collections: [String]?) -> (keys: [PushRules.IndexKey], exact: Set<String>) {
        var out: [PushRules.IndexKey] = []
        var exact = Set<String>()
        for (scope, (rule, _)) in bound.sorted(by: { $0.key < $1.key }) {
            if let collections {
                let wanted = scope.isEmpty ? collections.contains { rules.collections[$0] == nil } : collections.contains(scope)
                guard wanted else { continue }
            }
            let plan = rules.index.plan(rule, scope: scope) ?? ViewIndex.Plan(records: .all, exact: false)
            if plan.exact { exact.insert(scope) }
            switch plan.records {
            case .all: out.append(PushRules.IndexKey(scope: scope, path: "", key: ""))
            case .none: break
            case .keys(let keys):
                for k in keys.sorted(by: { ($0.path, $0.key) < ($1.path, $1.key) }) {
                    out.append(PushRules.IndexKey(scope: scope, path: k.path, key: k.key))
                }
            }
        }
        return (out, exact)
    }

    /// `admits` for data as stored (JSON), by the rule bound to the token: a rule the
    /// token's claims decide reads no data at all, and another parses only the members it
    /// reads.
    public func admits(collection: String, id: String, stored data: [UInt8]) -> Bool {
        guard let (rule, keys) = rules.collections[collection] != nil ? bound[collection] : bound[""] else { return false }
        if let decided = rule.literalValue { return decided == .bool(true) }
        let object: JSONObject?
        if let keys {
            object = JSONMembers.pick(keys, from: data)
        } else if case .object(let o)? = try? JSONParser.parse(data) {
            object = o
        } else {
            object = nil
        }
        guard let object else { return false }
        return rule.admits(readContext(collection: collection, id: id, data: object))
    }
}

/// The rules as a push's judge (`PushRules.apply`), for one token.
public struct RulesJudge: PushJudge {
    public let view: ReadView
    /// The versions the push names.
    public let versions: AppVersions

    public init(view: ReadView, versions: AppVersions = AppVersions()) {
        self.view = view
        self.versions = versions
    }

    public func judge(_ change: Change, current: RecordState?, deletedCopy: JSONObject?) -> PushResult.RejectReason? {
        guard let rules = view.rules.rules(for: change.collection), let write = rules.write else {
            return .init(.forbidden, "the rules give no access to collection \(change.collection)")
        }
        // An app too old for the collection's writes is told so before anything else: it
        // shows no data, and a later app may write what this one cannot.
        let version = versions.version(for: change.collection)
        if let minimum = rules.minAppVersion, version < minimum {
            return .init(.upgradeRequired, "writes to \(change.collection) need app version \(minimum) or later; this app is version \(version)",
                         details: ["minimum": .number(JSONNumber(minimum)), "version": .number(JSONNumber(version))])
        }
        let prev = current.flatMap { $0.deleted ? nil : $0.data }
        // A token never writes over what it cannot read: the answer to its change (a
        // conflict's current copy, a tombstone's time and writer among it) would show it.
        // A tombstone is readable when the copy it deleted was (a pull sends a tombstone
        // only to a device that held that copy in view); without a kept copy, only when the
        // token reads the collection whatever the data.
        let readable: Bool
        if let current, current.deleted {
            readable = deletedCopy.map { view.admits(collection: change.collection, id: change.id, data: $0) }
                ?? view.admitsWithoutData(collection: change.collection)
        } else {
            readable = prev.map { view.admits(collection: change.collection, id: change.id, data: $0) } ?? true
        }
        if !readable {
            return .init(.forbidden, "the rules do not let this token read \(change.collection)/\(change.id)")
        }
        let context = writeContext(change, prev: prev)
        for condition in write where !condition.rule.admits(context) {
            guard let reason = condition.reason else {
                return .init(.forbidden, "the write rule of \(change.collection) refuses this \(change.op.rawValue)")
            }
            return .init(.forbidden, "the write rule of \(change.collection) refuses this \(change.op.rawValue): \(reason)", details: ["reason": .string(reason)])
        }
        return nil
    }

    /// What the write rule reads for `change` over the live copy `prev` (nil: none): the
    /// token's claims, the change's data (`null` for a delete), the copy it replaces, the
    /// operation and the record's key.
    func writeContext(_ change: Change, prev: JSONObject?) -> RuleExpression.Context {
        RuleExpression.Context(auth: view.auth, data: change.op == .put ? change.data.map { .object($0) } ?? .null : .null,
                               prev: prev.map { .object($0) } ?? .null, op: change.op.rawValue,
                               collection: change.collection, id: change.id)
    }

    /// What the handler checks before the store, off the store's writer: the schema of a
    /// put (`invalid_change` with `details.path` and `details.reason`, which `PushRules`
    /// answers after the replay check and the judge), and the members of its data the
    /// judge reads, which is all of the parsed data the push keeps.
    public func prepare(_ change: inout Change) -> PushResult.RejectReason? {
        guard change.op == .put, let data = change.data, let rules = view.rules.rules(for: change.collection) else { return nil }
        var refusal: PushResult.RejectReason?
        if let schema = rules.schema, let failure = schema.validate(.object(data)) {
            refusal = .init(.invalidChange, "data\(failure.path.isEmpty ? "" : " at \(failure.path)") \(failure.reason)",
                            details: ["path": .string(failure.path), "reason": .string(failure.reason)])
        } else if let bad = FieldKinds.violation(of: rules.fields, in: data) {
            // A declared field's value must fit its kind, or no device could merge it.
            refusal = .init(.invalidChange, "data at \(bad.path) \(bad.reason)",
                            details: ["path": .string(bad.path), "reason": .string(bad.reason), "kind": .string(bad.kind.name)])
        }
        if let keys = rules.judgedKeys {
            var kept = JSONObject()
            for key in keys { if let value = data[key] { kept[key] = value } }
            change.data = kept
        }
        return refusal
    }

    public func indexKeys(collection: String, data: JSONObject) -> [PushRules.IndexKey] {
        view.rules.index.keys(collection: collection, data: data)
    }

    public func departs(collection: String, old: JSONObject, new: JSONObject?) -> Bool {
        guard let new else { return true }
        guard let rules = view.rules.rules(for: collection) else { return false }
        for path in rules.readDataPaths {
            var a = JSONValue.object(old), b = JSONValue.object(new)
            for name in path {
                a = a.objectValue?[name] ?? .null
                b = b.objectValue?[name] ?? .null
            }
            if a != b { return true }
        }
        return false
    }
}

/// A rules file that cannot be used: where, and why. Printed as `PATH:LINE:COLUMN: REASON`.
public struct RulesError: Error, Sendable, Equatable, CustomStringConvertible {
    public let path: String
    /// From 1; nil when the fault has no place in the text (the file cannot be read).
    public let line: Int?
    public let column: Int?
    public let reason: String

    public var description: String {
        if let line, let column { return "\(path):\(line):\(column): \(reason)" }
        return "\(path): \(reason)"
    }
}

/// JSON Pointer tokens (RFC 6901).
enum JSONPointer {
    static func tokens(_ pointer: String) -> [String] {
        guard !pointer.isEmpty else { return [] }
        return pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
    }
}

/// The text of a rules file, to turn a place in its JSON into a line and a column.
struct RulesFileText {
    let path: String
    let bytes: [UInt8]

    func error(at keys: [String]?, _ reason: String) -> RulesError {
        error(offset: keys.flatMap { JSONLocator(bytes).offset(of: $0) }, reason)
    }

    /// An error inside the JSON string at `keys`, at `offset` bytes into its decoded text.
    /// The place is exact for strings without escapes before it, and the string's start
    /// otherwise.
    func error(inString keys: [String], offset: Int, _ reason: String) -> RulesError {
        guard let start = JSONLocator(bytes).offset(of: keys) else { return error(offset: nil, reason) }
        var i = start + 1, decoded = 0
        while decoded < offset, i < bytes.count, bytes[i] != UInt8(ascii: "\"") {
            if bytes[i] == UInt8(ascii: "\\") { return error(offset: start, reason) }
            i += 1
            decoded += 1
        }
        return error(offset: i, reason)
    }

    func error(offset: Int?, _ reason: String) -> RulesError {
        guard let offset else { return RulesError(path: path, line: nil, column: nil, reason: reason) }
        var line = 1, column = 1, i = 0
        while i < min(offset, bytes.count) {
            if bytes[i] == 0x0A { line += 1; column = 1 } else if bytes[i] & 0xC0 != 0x80 { column += 1 }
            i += 1
        }
        return RulesError(path: path, line: line, column: column, reason: reason)
    }
}

/// Finds where a value sits in JSON text (already known to parse), by its object keys.
struct JSONLocator {
    let bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The byte offset of the value at `keys` (the root for none; a key of an array is its
    /// element's index); nil when absent.
    func offset(of keys: [String]) -> Int? {
        var i = skipSpace(0)
        for key in keys {
            if i < bytes.count, bytes[i] == UInt8(ascii: "["), let index = Int(key) {
                i = skipSpace(i + 1)
                for _ in 0..<index {
                    guard i < bytes.count, bytes[i] != UInt8(ascii: "]") else { return nil }
                    i = skipSpace(skipValue(i))
                    guard i < bytes.count, bytes[i] == UInt8(ascii: ",") else { return nil }
                    i = skipSpace(i + 1)
                }
                guard i < bytes.count, bytes[i] != UInt8(ascii: "]") else { return nil }
                continue
            }
            guard i < bytes.count, bytes[i] == UInt8(ascii: "{") else { return nil }
            i = skipSpace(i + 1)
            var found = false
            while i < bytes.count, bytes[i] != UInt8(ascii: "}") {
                let (name, afterName) = string(at: i)
                i = skipSpace(afterName)
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
                i = skipSpace(i + 1)
                if name == key { found = true; break }
                i = skipSpace(skipValue(i))
                if i < bytes.count, bytes[i] == UInt8(ascii: ",") { i = skipSpace(i + 1) }
            }
            guard found else { return nil }
        }
        return i
    }

    private func skipSpace(_ start: Int) -> Int { JSONMembers.skipSpace(bytes, start) }

    private func skipValue(_ start: Int) -> Int { JSONMembers.skipValue(bytes, start) }

    /// A string's decoded text and the offset after its closing quote.
    private func string(at start: Int) -> (String, Int) {
        let end = skipValue(start)
        let text = end <= bytes.count ? (try? JSONParser.parse(bytes[start..<end]))?.stringValue : nil
        return (text ?? "", end)
    }
}

/// The rules in force, replaced whole by a reload (`SIGHUP`); a reload that fails leaves
/// them as they were.
public final class RulesHolder: Sendable {
    private let current: Mutex<ServerRules?>
    /// The file to reload from; nil when the server runs without rules.
    public let path: String?

    /// No rules: a space's tokens read and write everything in it.
    public init() {
        path = nil
        current = Mutex(nil)
    }

    /// Loads `path` (nil: no rules).
    public init(path: String?) throws(RulesError) {
        self.path = path
        current = Mutex(try path.map { p throws(RulesError) in try ServerRules.load(path: p) })
    }

    /// The rules now; nil without a rules file.
    public var rules: ServerRules? { current.withLock { $0 } }

    /// Reads the file again; on success the new rules apply to every request from now on.
    public func reload() throws(RulesError) {
        guard let path else { return }
        let fresh = try ServerRules.load(path: path)
        current.withLock { $0 = fresh }
    }
}
