import Foundation
import OutpostCore
import OutpostSyncRules
import OutpostRules
import OutpostCrypto

/// The view index of a rules file (docs/rules.md, "Cost"): which members of which
/// collections' records are kept as index keys at write time, how a member's value becomes
/// a key, and how a read rule bound to a token's claims becomes the index lookups that
/// find every record it may admit.
///
/// The index finds a superset of a view: a page reads the records its lookups find, in seq
/// order, and checks each against the bound rule, so a lookup may find records the rule
/// refuses, never miss one it admits. That is what lets a key stand for several values
/// (every number by its double, an array by its elements) and a marker stand for "any"
/// (`wildcard`), where an exact key would cost more than it saves.
///
/// Index keys, by the value at the path (a missing member is null):
///
/// | value | keys |
/// |---|---|
/// | null | `z` |
/// | true, false | `t`, `f` |
/// | number | `n:` and its value as a double |
/// | string | `s:` and the string in Unicode NFC |
/// | array, where a rule asks `x in data.f` | `e` and the key of each scalar element, for at most 256 elements; `*` for a longer one |
/// | array elsewhere, object | none (neither equals a value a lookup names) |
///
/// Every indexed record also has the key `""` at path `""`: the lookup of all the records
/// of a scope, for a rule that the token's claims make `true` or that has no indexed form.
///
/// A lookup is *exact* when the records it finds are exactly those the rule admits (an
/// equality with a string, `true`, `false` or `null`, or `true`), so a page from the start
/// sends them without checking each; a number's key stands for every number with the same
/// double, and an array membership is checked on each record found.
public struct ViewIndex: Sendable {
    /// One indexed path of `data`, and whether some rule asks whether a value is *in* it
    /// (an array holding the value).
    struct IndexedPath: Sendable, Hashable {
        var names: [String]
        var contains: Bool
        var text: String { names.joined(separator: ".") }
    }

    /// The indexed paths by scope: each collection the rules name, and "" for `default`.
    let paths: [String: [IndexedPath]]
    /// The collections the rules name: a record of any other collection is in scope "".
    let named: Set<String>
    /// What the index holds, as a digest: an index built for another spec is rebuilt.
    public let spec: String

    /// Arrays longer than this are keyed `*`: found by every lookup of their path.
    static let maxArrayKeys = 256
    static let wildcard = "*"

    init(collections: [String: ServerRules.Collection], fallback: ServerRules.Collection?) {
        var paths: [String: [IndexedPath]] = [:]
        for (name, rules) in collections { paths[name] = Self.indexedPaths(rules.read) }
        if let fallback { paths[""] = Self.indexedPaths(fallback.read) }
        self.paths = paths
        named = Set(collections.keys)
        var material = "outpost-view-index-2\n"
        for scope in paths.keys.sorted() {
            material += "scope \(scope)\n"
            for path in paths[scope]! { material += "\(path.text) \(path.contains)\n" }
        }
        material += "named \(named.sorted().joined(separator: ","))\n"
        spec = Hex.encode(Array(SHA256.hash(Array(material.utf8)).prefix(8)))
    }

    /// The scope of a record of `collection`.
    func scope(of collection: String) -> String { named.contains(collection) ? collection : "" }

    // MARK: Keys at write time

    /// The index keys of a live record of `collection` with `data`.
    public func keys(collection: String, data: JSONObject) -> [PushRules.IndexKey] {
        let scope = scope(of: collection)
        guard let indexed = paths[scope] else { return [] }
        var out = [PushRules.IndexKey(scope: scope, path: "", key: "")]
        for path in indexed {
            var value = JSONValue.object(data)
            for name in path.names { value = value.objectValue?[name] ?? .null }
            for key in Self.keys(of: value, contains: path.contains) {
                out.append(PushRules.IndexKey(scope: scope, path: path.text, key: key))
            }
        }
        return out
    }

    /// `keys(collection:data:)` for data as stored (JSON); none when it is not an object.
    public func keys(collection: String, stored data: [UInt8]) -> [PushRules.IndexKey] {
        guard case .object(let object)? = try? JSONParser.parse(data) else { return [] }
        return keys(collection: collection, data: object)
    }

    static func keys(of value: JSONValue, contains: Bool) -> [String] {
        switch value {
        case .array(let items):
            guard contains else { return [] }
            guard items.count <= maxArrayKeys else { return [wildcard] }
            var keys: [String] = []
            for item in items { if let key = key(item).map({ "e" + $0 }), !keys.contains(key) { keys.append(key) } }
            return keys
        default:
            return key(value).map { [$0] } ?? []
        }
    }

    /// The key of a scalar; nil for an array or an object.
    static func key(_ value: JSONValue) -> String? {
        switch value {
        case .null: return "z"
        case .bool(let b): return b ? "t" : "f"
        case .number(let n):
            // Equal numbers have equal doubles (RuleExpression.equal); -0 is 0.
            let d = n.doubleValue
            return "n:\(d == 0 ? 0 : d)"
        case .string(let s): return "s:" + (s.utf8.allSatisfy { $0 < 0x80 } ? s : s.precomposedStringWithCanonicalMapping)
        case .array, .object: return nil
        }
    }

    // MARK: The paths a rules file indexes

    /// The paths of `data` that `rule` compares with something that holds no record
    /// member (a literal, or the token's claims): `data.f == auth.c`, `auth.c in data.f`,
    /// `data.f in auth.c`, and their mirrors.
    static func indexedPaths(_ rule: RuleExpression?) -> [IndexedPath] {
        guard let rule else { return [] }
        var found: [IndexedPath] = []
        func add(_ names: [String], contains: Bool) {
            if let i = found.firstIndex(where: { $0.names == names }) {
                found[i].contains = found[i].contains || contains
            } else {
                found.append(IndexedPath(names: names, contains: contains))
            }
        }
        func walk(_ node: RuleExpression.Node) {
            switch node {
            case .literal, .path: break
            case .not(let inner): walk(inner)
            case .and(let a, let b), .or(let a, let b): walk(a); walk(b)
            case .choice(let c, let a, let b): walk(c); walk(a); walk(b)
            case .binary(let op, let a, let b):
                switch (op, dataPath(a), dataPath(b)) {
                case (.equal, let p?, nil) where isConstant(b): add(p, contains: false)
                case (.equal, nil, let p?) where isConstant(a): add(p, contains: false)
                case (.member, nil, let p?) where isConstant(a): add(p, contains: true)
                case (.member, let p?, nil) where isConstant(b): add(p, contains: false)
                default: walk(a); walk(b)
                }
            }
        }
        walk(rule.root)
        return found
    }

    static func dataPath(_ node: RuleExpression.Node) -> [String]? {
        if case .path(.data, let names) = node, !names.isEmpty { return names }
        return nil
    }

    /// Whether `node` reads nothing of the record: it binds to a literal for a token.
    static func isConstant(_ node: RuleExpression.Node) -> Bool {
        switch node {
        case .literal: return true
        case .path(let root, _): return root == .auth
        case .not(let a): return isConstant(a)
        case .and(let a, let b), .or(let a, let b), .binary(_, let a, let b): return isConstant(a) && isConstant(b)
        case .choice(let c, let a, let b): return isConstant(c) && isConstant(a) && isConstant(b)
        }
    }

    // MARK: Lookups at read time

    /// What a bound rule reads of the index: every record of its scope, none, or the
    /// records under any of some keys; `exact` when those are exactly the records the rule
    /// admits.
    struct Plan: Equatable {
        enum Records: Equatable {
            case all
            case none
            case keys(Set<PathKey>)
        }
        var records: Records
        var exact: Bool
        static let all = Plan(records: .all, exact: true)
        static let nothing = Plan(records: .none, exact: true)
    }

    struct PathKey: Hashable {
        var path: String
        var key: String
    }

    /// The lookups that find every record `rule` (bound to a token's claims) admits in
    /// `scope`; nil when the rule has no indexed form (the page then reads the scope
    /// whole and filters it).
    func plan(_ rule: RuleExpression, scope: String) -> Plan? {
        let indexed = paths[scope] ?? []
        func path(_ names: [String], contains: Bool) -> String? {
            indexed.first { $0.names == names && (!contains || $0.contains) }?.text
        }
        /// Whether a key names exactly the values equal to `v`.
        func exactly(_ v: JSONValue) -> Bool {
            switch v {
            case .string, .bool, .null: return true
            default: return false
            }
        }
        func plan(_ node: RuleExpression.Node) -> Plan? {
            switch node {
            case .literal(let v):
                return RuleExpression.isTrue(v) ? .all : .nothing
            case .not(.not(let inner)):
                return plan(inner)
            case .or(let a, let b):
                guard let x = plan(a), let y = plan(b) else { return nil }
                let exact = x.exact && y.exact
                switch (x.records, y.records) {
                case (.all, _): return Plan(records: .all, exact: x.exact)
                case (_, .all): return Plan(records: .all, exact: y.exact)
                case (.none, _): return y
                case (_, .none): return x
                case (.keys(let p), .keys(let q)): return Plan(records: .keys(p.union(q)), exact: exact)
                }
            case .and(let a, let b):
                // Either side alone finds a superset of both; the smaller lookup wins.
                let x = plan(a), y = plan(b)
                if x?.records == Plan.Records.none || y?.records == Plan.Records.none { return .nothing }
                switch (x?.records, y?.records) {
                case (.keys(let p)?, .keys(let q)?): return Plan(records: .keys(p.count <= q.count ? p : q), exact: false)
                case (.keys(let p)?, _), (_, .keys(let p)?): return Plan(records: .keys(p), exact: false)
                case (.all?, .all?): return Plan(records: .all, exact: x!.exact && y!.exact)
                default: return nil
                }
            case .binary(.equal, .path(.data, let names), .literal(let v)), .binary(.equal, .literal(let v), .path(.data, let names)):
                // An array or an object never equals a scalar: a scalar's key alone finds them all.
                guard let p = path(names, contains: false), let key = Self.key(v) else { return nil }
                return Plan(records: .keys([PathKey(path: p, key: key)]), exact: exactly(v))
            case .binary(.member, .literal(let v), .path(.data, let names)):
                guard let p = path(names, contains: true), let key = Self.key(v) else { return nil }
                let keys: Set<PathKey> = [PathKey(path: p, key: "e" + key), PathKey(path: p, key: Self.wildcard)]
                return Plan(records: .keys(keys), exact: false)
            case .binary(.member, .path(.data, let names), .literal(.array(let items))):
                guard let p = path(names, contains: false) else { return nil }
                guard !items.isEmpty else { return .nothing }
                var keys: Set<PathKey> = []
                for item in items {
                    guard let key = Self.key(item) else { return nil }
                    keys.insert(PathKey(path: p, key: key))
                }
                return Plan(records: .keys(keys), exact: items.allSatisfy(exactly))
            default:
                return nil
            }
        }
        return plan(rule.root)
    }
}
