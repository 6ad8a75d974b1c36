/// How one field of a record merges when two devices changed it (docs/rules.md, "Field
/// kinds"). The rules file declares kinds per collection and field path; the server checks
/// the values and serves the declarations in every pull page under rules, so every device
/// of a space merges alike whatever app version it runs.
public enum FieldKind: Sendable, Hashable {
    /// A number; a three-way merge gives server + local − base.
    case counter
    /// An array of scalars (string, number, Boolean) taken as a set: the additions and the
    /// removals of both sides.
    case set
    /// An array of objects, each named by the value of its member `key` (a string or a
    /// number, once per list): merged element by element, an element changed on both sides
    /// member by member (`FieldKinds.mergeList`).
    case list(key: String)
    /// Last write wins (through the resolver's fallback): what a field without a declaration does.
    case lww

    /// The string kinds, as the rules file and the pages spell them.
    public init?(name: String) {
        switch name {
        case "counter": self = .counter
        case "set": self = .set
        case "lww": self = .lww
        default: return nil
        }
    }

    /// The kind's name: `counter`, `set`, `list` or `lww` (a refusal's `details.kind`).
    public var name: String {
        switch self {
        case .counter: "counter"
        case .set: "set"
        case .list: "list"
        case .lww: "lww"
        }
    }

    /// The wire and rules-file form: a string kind, or `{"list": "<key member>"}`.
    public var json: JSONValue {
        switch self {
        case .list(let key): .object(["list": .string(key)])
        case .counter, .set, .lww: .string(name)
        }
    }

    /// Reads the wire form: a string kind, or an object whose only member is `list`, a
    /// non-empty string. Nil for anything else (a later server's kind or form), which the
    /// caller leaves out.
    public init?(json: JSONValue) {
        switch json {
        case .string(let name):
            self.init(name: name)
        case .object(let o):
            guard o.count == 1, case .string(let key)? = o["list"], !key.isEmpty else { return nil }
            self = .list(key: key)
        default:
            return nil
        }
    }
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
    /// page: a kind this version does not know (a name, or an object form other than
    /// `{"list": "<key member>"}`), or a member of another shape, is left out (its field
    /// merges as `lww`, as it did before the server declared it).
    public init(json: JSONValue) {
        var out: [String: [String: FieldKind]] = [:]
        for (collection, paths) in json.objectValue ?? [:] {
            for (path, kind) in paths.objectValue ?? [:] {
                if let kind = FieldKind(json: kind), kind != .lww { out[collection, default: [:]][path] = kind }
            }
        }
        self.init(out)
    }

    public var json: JSONValue {
        .object(JSONObject(collections.sorted { $0.key < $1.key }.map { collection, paths in
            (collection, .object(JSONObject(paths.sorted { $0.key < $1.key }.map { ($0.key, $0.value.json) })))
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
    /// be a number, a set an array of scalars, a list an array of objects each holding its
    /// key member, a string or a number, no key twice. A field that is absent (or under a
    /// member that is not an object) has no value to check: a declaration does not make a
    /// field required (a schema's `required` does).
    public func violation(collection: String, data: JSONObject) -> Violation? {
        Self.violation(of: kinds(of: collection), in: data)
    }

    /// `violation(collection:data:)` for one collection's declarations.
    public static func violation(of kinds: [String: FieldKind], in data: JSONObject) -> Violation? {
        for (path, kind) in kinds.sorted(by: { $0.key < $1.key }) {
            let names = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard let value = value(at: names, in: data) else { continue }
            let pointer = "/" + names.map(pointerToken).joined(separator: "/")
            switch kind {
            case .counter:
                guard let number = value.numberValue else { return Violation(path: pointer, kind: kind, reason: "is a counter: it must be a number") }
                if !survivesAsDouble(number) {
                    return Violation(path: pointer, kind: kind, reason: "is a counter: it must be a number a double holds (finite, and the same when written back)")
                }
            case .set:
                guard case .array(let elements) = value else { return Violation(path: pointer, kind: kind, reason: "is a set: it must be an array") }
                for element in elements {
                    switch element {
                    case .string, .number, .bool: continue
                    case .null, .array, .object:
                        return Violation(path: pointer, kind: kind, reason: "is a set: its elements must be strings, numbers or Booleans")
                    }
                }
            case .list(let key):
                if let (at, reason) = listViolation(value, key: key, at: pointer) { return Violation(path: at, kind: kind, reason: reason) }
            case .lww:
                continue
            }
        }
        return nil
    }

    /// Where and why `value` is not a list keyed by `key` (`pointer` is the list's place):
    /// the list itself when it is no array, an element that is no object or lacks its key,
    /// the key member when its value is neither a string nor a number or repeats an earlier
    /// element's. Nil when it is one.
    static func listViolation(_ value: JSONValue, key: String, at pointer: String) -> (path: String, reason: String)? {
        guard case .array(let elements) = value else { return (pointer, "is a list: it must be an array of objects") }
        var seen: [JSONValue: Int] = [:]
        for (i, element) in elements.enumerated() {
            let at = pointer + "/" + String(i)
            guard case .object(let o) = element else { return (at, "is an element of a list: it must be an object") }
            guard let id = o[key] else { return (at, "is an element of a list keyed by \"\(key)\": it has no member \"\(key)\"") }
            let keyAt = at + "/" + pointerToken(key)
            guard isListKey(id) else { return (keyAt, "is a list's key: it must be a string or a number") }
            if let first = seen[id] { return (keyAt, "repeats the key of \(pointer)/\(first): a list's keys are unique") }
            seen[id] = i
        }
        return nil
    }

    /// A value that can name a list's element: a string or a number (numbers compare by
    /// their text, as JSON values do here: `1` and `1.0` are two keys).
    static func isListKey(_ value: JSONValue) -> Bool {
        switch value {
        case .string, .number: true
        case .null, .bool, .array, .object: false
        }
    }

    /// The elements of a list keyed by `key` with their keys, in order; nil when `value`
    /// is not such a list (`listViolation`).
    static func listElements(_ value: JSONValue, key: String) -> [(key: JSONValue, element: JSONObject)]? {
        guard case .array(let elements) = value else { return nil }
        var out: [(key: JSONValue, element: JSONObject)] = []
        var seen = Set<JSONValue>()
        for element in elements {
            guard case .object(let o) = element, let id = o[key], isListKey(id), seen.insert(id).inserted else { return nil }
            out.append((id, o))
        }
        return out
    }

    /// A member name as a JSON Pointer token (RFC 6901: `~` is `~0`, `/` is `~1`).
    static func pointerToken(_ name: String) -> String {
        name.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }

    /// Whether every device's counter merge (`mergeCounter`) takes `number` as written: an
    /// integer of 64 bits (merged as one), or a number whose double is finite and, written
    /// back in its shortest form, the same decimal value. `1e400` (infinite),
    /// `1e-99999999999999999999` (zero) and an integer of 5,000 digits do not; `0.1`,
    /// `1.50` and `9007199254740993` do.
    public static func survivesAsDouble(_ number: JSONNumber) -> Bool {
        if number.isIntegerLexeme, number.int64Value != nil { return true }
        let double = number.doubleValue
        guard double.isFinite, let written = decimal(number.lexeme), let back = decimal(double.description) else { return false }
        return written == back
    }

    /// A decimal number's text as (negative, significant digits, exponent): its value is
    /// 0.DIGITS × 10^exponent; zero is (false, "", 0). Nil for an exponent that does not
    /// fit an `Int`, or text that is not a number.
    static func decimal(_ text: String) -> (negative: Bool, digits: String, exponent: Int)? {
        var rest = Substring(text)
        let negative = rest.first == "-"
        if negative || rest.first == "+" { rest = rest.dropFirst() }
        var exponent = 0
        if let e = rest.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            guard let value = Int(rest[rest.index(after: e)...]) else { return nil }
            exponent = value
            rest = rest[..<e]
        }
        let parts = rest.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        let whole = parts[0], fraction = parts.count > 1 ? parts[1] : ""
        guard (whole + fraction).allSatisfy(\.isASCII), (whole + fraction).allSatisfy(\.isNumber) else { return nil }
        var digits = Substring(whole + fraction)
        let (shifted, overflow) = exponent.addingReportingOverflow(whole.count)
        guard !overflow else { return nil }
        exponent = shifted
        while digits.first == "0" {
            digits = digits.dropFirst()
            exponent -= 1
        }
        while digits.last == "0" { digits = digits.dropLast() }
        if digits.isEmpty { return (false, "", 0) }
        return (negative, String(digits), exponent)
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

    /// The three-way merge of a record's data against the copy the local edit was made on,
    /// member by member: what `ConflictResolver.mergeFields` writes, and how `mergeList`
    /// merges an element both sides kept. For each member:
    ///
    /// - a member `kinds` declares (by dotted path from the top) merges by its kind when
    ///   both sides have its shape (`merge(_:base:local:server:localWins:)`), whether one
    ///   side changed it or both;
    /// - else a member changed on one side takes that side's value (an absent value too:
    ///   a removal), one changed on both sides to equal values keeps it, two objects merge
    ///   the same way recursively, and any other pair is decided by `localWins`: true takes
    ///   the local value, false the server's. `localWins` is asked only for such members
    ///   (the caller asks its fallback once and answers alike for all of them);
    /// - members come in the server's order, then the local side's new ones, so equal
    ///   merges encode alike on every device.
    public static func mergeObject(base: JSONObject, local: JSONObject, server: JSONObject, kinds: [String: FieldKind] = [:],
                                   localWins: () -> Bool) -> JSONObject {
        mergeObject(base, local, server, kinds: kinds, at: "", localWins: localWins)
    }

    /// `prefix` is the dotted path of the members merged; nil under a member whose name
    /// holds a dot, which no declaration names (a declared path's members are split at its
    /// dots), so a member named `totals.weight` is never taken for `totals` → `weight`.
    private static func mergeObject(_ b: JSONObject, _ l: JSONObject, _ s: JSONObject, kinds: [String: FieldKind], at prefix: String?,
                                    localWins: () -> Bool) -> JSONObject {
        var names: [String] = []
        var listed = Set<String>()
        for name in s.keys + l.keys + b.keys where listed.insert(name).inserted { names.append(name) }
        var out = JSONObject()
        for name in names {
            let lv = l[name], sv = s[name], bv = b[name]
            let path = name.contains(".") ? nil : prefix.map { $0.isEmpty ? name : $0 + "." + name }
            let chosen: JSONValue?
            if !kinds.isEmpty, let path, let kind = kinds[path], let byKind = merge(kind, base: bv, local: lv, server: sv, localWins: localWins) {
                // Before the equality test: two devices that both took 10 to 9 make 8.
                chosen = byKind
            } else if lv == sv {
                chosen = lv
            } else if lv == bv {
                chosen = sv
            } else if sv == bv {
                chosen = lv
            } else if case .object(let lo)? = lv, case .object(let so)? = sv {
                let bo: JSONObject
                if case .object(let o)? = bv { bo = o } else { bo = [:] }
                chosen = .object(mergeObject(bo, lo, so, kinds: kinds, at: path, localWins: localWins))
            } else {
                chosen = localWins() ? lv : sv
            }
            if let chosen { out[name] = chosen }
        }
        return out
    }

    /// One declared field's merge; nil when its values do not have the kind's shape (a
    /// field of a record written before the declaration), which then merges as any other.
    /// `localWins` decides a list element's member changed on both sides (`mergeList`).
    public static func merge(_ kind: FieldKind, base: JSONValue?, local: JSONValue?, server: JSONValue?, localWins: () -> Bool) -> JSONValue? {
        switch kind {
        case .counter: mergeCounter(base: base, local: local, server: server)
        case .set: mergeSet(base: base, local: local, server: server)
        case .list(let key): mergeList(key: key, base: base, local: local, server: server, localWins: localWins)
        case .lww: nil
        }
    }

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

    /// A keyed list's three-way merge, element by element, the elements named by the value
    /// of their member `key` (a checklist whose items two inspectors tick offline):
    ///
    /// - a list one side left as the base had it gives the other side's list, order and all;
    /// - an element both sides hold merges member by member (`mergeObject`, `localWins`
    ///   deciding a member both changed), whether it was in the base or both added it;
    /// - an element one side added is kept;
    /// - an element one side removed is removed when the other side left it as the base
    ///   had it, and kept as the other side has it when that side changed it: a removal
    ///   never takes an edit made without seeing it;
    /// - order: the server's list, then the local side's elements the server lacks (its
    ///   additions, and its edits of elements the server removed) in local order.
    ///
    /// An absent base is empty; a base element that is not an object with a key counts as
    /// absent (the first of a repeated key counts). Nil when local or server is not a list
    /// keyed by `key` (`listViolation`), which then merges as any other value.
    public static func mergeList(key: String, base: JSONValue?, local: JSONValue?, server: JSONValue?, localWins: () -> Bool) -> JSONValue? {
        guard let local, let server, let l = listElements(local, key: key), let s = listElements(server, key: key) else { return nil }
        if let base, server == base { return local }
        if let base, local == base { return server }
        var b: [JSONValue: JSONObject] = [:]
        for element in base?.arrayValue ?? [] {
            if case .object(let o) = element, let id = o[key], isListKey(id), b[id] == nil { b[id] = o }
        }
        var onLocal: [JSONValue: JSONObject] = [:]
        for (id, element) in l { onLocal[id] = element }
        var out: [JSONValue] = []
        var onServer = Set<JSONValue>()
        for (id, se) in s {
            onServer.insert(id)
            if let le = onLocal[id] {
                out.append(.object(le == se ? se : mergeObject(b[id] ?? [:], le, se, kinds: [:], at: "", localWins: localWins)))
            } else if let be = b[id], be == se {
                continue  // removed locally, left as it was on the server
            } else {
                out.append(.object(se))  // added on the server, or changed there while the local side removed it
            }
        }
        for (id, le) in l where !onServer.contains(id) {
            if let be = b[id], be == le { continue }  // removed on the server, left as it was locally
            out.append(.object(le))  // added locally, or changed here while the server removed it
        }
        return .array(out)
    }
}
