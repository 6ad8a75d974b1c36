/// How one field of a record merges when two devices changed it (docs/rules.md, "Field
/// kinds"). The rules file declares kinds per collection and field path; the server checks
/// the values and serves the declarations in every pull page under rules, so every device
/// of a space merges alike whatever app version it runs.
public enum FieldKind: String, Sendable, Hashable, CaseIterable {
    /// A number; a three-way merge gives server + local − base.
    case counter
    /// An array of scalars (string, number, Boolean) taken as a set: the additions and the
    /// removals of both sides.
    case set
    /// Last write wins (through the resolver's fallback): what a field without a declaration does.
    case lww
}

/// The field kinds of a space: by collection, by dotted path into the record's data
/// (`"stock"`, `"totals.count"`). On the wire, a pull page's optional `fields` member
/// (docs/protocol.md section 5): `{"items": {"stock": "counter", "tags": "set"}}`.
public struct FieldKinds: Sendable, Hashable, JSONWireType {
    /// Collection, then dotted path, to kind.
    public var collections: [String: [String: FieldKind]]

    public init(_ collections: [String: [String: FieldKind]] = [:]) {
        self.collections = collections.filter { !$0.value.isEmpty }
    }

    public var isEmpty: Bool { collections.isEmpty }

    /// The declarations of `collection`, by dotted path (empty: every field is `lww`).
    public func kinds(of collection: String) -> [String: FieldKind] { collections[collection] ?? [:] }

    /// Reads the wire form leniently, so that a later server's additions never fail a
    /// page: a kind this version does not know, or a member of another shape, is left out
    /// (its field merges as `lww`).
    public init(json: JSONValue) {
        var out: [String: [String: FieldKind]] = [:]
        for (collection, paths) in json.objectValue ?? [:] {
            for (path, kind) in paths.objectValue ?? [:] {
                if let kind = kind.stringValue.flatMap(FieldKind.init(rawValue:)), kind != .lww { out[collection, default: [:]][path] = kind }
            }
        }
        self.init(out)
    }

    public var json: JSONValue {
        .object(JSONObject(collections.sorted { $0.key < $1.key }.map { collection, paths in
            (collection, .object(JSONObject(paths.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value.rawValue)) })))
        }))
    }

    /// A value that does not fit its declaration: where (a JSON Pointer into the data, as
    /// schema refusals give it) and why.
    public struct Violation: Sendable, Hashable {
        public let path: String
        public let kind: FieldKind
        public let reason: String
    }

    /// The first declared field of `data` whose value does not fit its kind: a counter must
    /// be a number, a set an array of scalars. A field that is absent (or under a member
    /// that is not an object) has no value to check: a declaration does not make a field
    /// required (a schema's `required` does).
    public func violation(collection: String, data: JSONObject) -> Violation? {
        Self.violation(of: kinds(of: collection), in: data)
    }

    /// `violation(collection:data:)` for one collection's declarations.
    public static func violation(of kinds: [String: FieldKind], in data: JSONObject) -> Violation? {
        for (path, kind) in kinds.sorted(by: { $0.key < $1.key }) {
            let names = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard let value = value(at: names, in: data) else { continue }
            let pointer = "/" + names.map { $0.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1") }.joined(separator: "/")
            switch kind {
            case .counter:
                if value.numberValue == nil { return Violation(path: pointer, kind: kind, reason: "is a counter: it must be a number") }
            case .set:
                guard case .array(let elements) = value else { return Violation(path: pointer, kind: kind, reason: "is a set: it must be an array") }
                for element in elements {
                    switch element {
                    case .string, .number, .bool: continue
                    case .null, .array, .object:
                        return Violation(path: pointer, kind: kind, reason: "is a set: its elements must be strings, numbers or Booleans")
                    }
                }
            case .lww:
                continue
            }
        }
        return nil
    }

    /// The value at `names` in `data`; nil when a member on the way is absent or not an object.
    static func value(at names: [String], in data: JSONObject) -> JSONValue? {
        var current = JSONValue.object(data)
        for name in names {
            guard case .object(let o) = current, let next = o[name] else { return nil }
            current = next
        }
        return current
    }

    // MARK: Merging

    /// A counter's three-way merge, server + local − base (an absent base counts 0); nil
    /// when local or server is not a number. Integers stay integers, unless the sum leaves
    /// `Int64`; any fraction or exponent makes the result a double.
    public static func mergeCounter(base: JSONValue?, local: JSONValue?, server: JSONValue?) -> JSONValue? {
        guard let l = local?.numberValue, let s = server?.numberValue else { return nil }
        let b = base?.numberValue ?? JSONNumber(0)
        if l.isIntegerLexeme, s.isIntegerLexeme, b.isIntegerLexeme, let li = l.int64Value, let si = s.int64Value, let bi = b.int64Value {
            let (sum, o1) = si.addingReportingOverflow(li)
            let (result, o2) = sum.subtractingReportingOverflow(bi)
            if !o1 && !o2 { return .number(JSONNumber(result)) }
        }
        let result = s.doubleValue + l.doubleValue - b.doubleValue
        guard result.isFinite else { return nil }
        return .number(JSONNumber(result))
    }

    /// A set's three-way merge: an element is in the result when the server has it and the
    /// local side did not remove it (it was in the base and is not in local), or when the
    /// local side added it (it is in local and not in the base). Order: the server's, then
    /// the local additions in local order; each element once. An absent base is empty. Nil
    /// when local or server is not an array.
    public static func mergeSet(base: JSONValue?, local: JSONValue?, server: JSONValue?) -> JSONValue? {
        guard case .array(let l)? = local, case .array(let s)? = server else { return nil }
        let b = Set(base?.arrayValue ?? [])
        let localSet = Set(l)
        var out: [JSONValue] = []
        var seen = Set<JSONValue>()
        for element in s where !(b.contains(element) && !localSet.contains(element)) && seen.insert(element).inserted {
            out.append(element)
        }
        for element in l where !b.contains(element) && seen.insert(element).inserted {
            out.append(element)
        }
        return .array(out)
    }
}
