import Outpost
import OutpostCore

/// Counter, set and keyed-list fields in a run (`RunConfiguration.fieldKinds` and
/// `listKind`, docs/simulation.md, "Field kinds"): the server's rules file declares `count`
/// a counter and `tags` a set (with field kinds), `checklist` a list keyed by `id` (with the
/// list kind), in the collection `stock`; device 0 creates its records before the first
/// step, and a step may add a random amount to a record's count (negative or positive) and
/// add a tag of its own or remove one it sees, or edit the checklist: add an item, mark
/// one (its own member), or remove one. Every device resolves conflicts of `stock` with
/// `.mergeFields` (its fallback being the run's resolver; last-write-wins in place of the
/// custom one, whose merges the main oracle follows); other collections go to the run's
/// resolver as in any run, and the main oracle ignores `stock`.
///
/// What the ledger knows, and checks after healing:
/// - every edit of a count is sent under one changeId until the server answers it, the
///   server applies a changeId at most once, and no `stock` change can be refused (no rule
///   refuses it, the records stay small, no step deletes them): each edit is applied exactly
///   once, so the final count on every device and on the server is the initial value plus
///   the sum of every edit's amount, and the final tags are those added and not removed;
/// - the same way, every checklist item added and never removed is there, and no other
///   item but a removed one; an item no step removed holds, for each device that marked
///   it, that device's last mark (a device marks only its own member, so no member is
///   changed on two sides, and the merge keeps each mark). A removed item may stay: a
///   removal never takes an item another device marked without seeing the removal;
/// - unless the run lost server history (a data loss, or a restore from a backup): copies
///   are then offered again to a new history without the state they were made on, and meet
///   the fallback whole, so a count may lose or repeat amounts. Those runs check that every
///   device and the server hold the same record, with a number and an array of scalars,
///   and a list keyed by `id`.
struct Ledger {
    static let collection = "stock"
    static let keys: [Key] = [Key(collection, "s0"), Key(collection, "s1")]
    static let initial: Int64 = 100
    /// The declarations of a run with field kinds only (as it was before the list kind).
    static let rules = #"""
        {"collections": {"stock": {"fields": {"count": "counter", "tags": "set"}}},
         "default": {"read": "true", "write": "true"}}
        """#
    /// The list's declaration, and the items every record starts with (a string key and a number key).
    static let list: FieldKind = .list(key: "id")
    static let firstItems: [JSONValue] = [["id": "start"], ["id": 0]]

    /// Counters and sets in the records (`RunConfiguration.fieldKinds`).
    let counters: Bool
    /// A checklist in the records (`RunConfiguration.listKind`).
    let checklist: Bool

    init(counters: Bool = false, checklist: Bool = false) {
        self.counters = counters
        self.checklist = checklist
        for key in Self.keys { added[key] = Set(Self.firstItems.compactMap { $0["id"] }) }
    }

    /// True when the run has ledger records at all.
    var isOn: Bool { counters || checklist }

    /// The run's rules file.
    var rules: String {
        guard checklist else { return Self.rules }
        let fields = (counters ? #""count": "counter", "tags": "set", "# : "") + #""checklist": {"list": "id"}"#
        return #"{"collections": {"stock": {"fields": {"# + fields + #"}}}, "default": {"read": "true", "write": "true"}}"#
    }

    /// A record's data before the first step.
    var initialData: JSONObject {
        var data: JSONObject = [:]
        if counters {
            data["count"] = .number(JSONNumber(Self.initial))
            data["tags"] = []
        }
        if checklist { data["checklist"] = .array(Self.firstItems) }
        return data
    }

    /// The sum of the amounts of every edit of a record's count.
    var sums: [Key: Int64] = [:]
    /// Tags added, and tags removed (each tag is added once, by the device that made it).
    var tagsAdded: [Key: Set<String>] = [:]
    var tagsRemoved: [Key: Set<String>] = [:]
    /// Checklist items (by key) added, and removed (each added once, by one step).
    var added: [Key: Set<JSONValue>] = [:]
    var removed: [Key: Set<JSONValue>] = [:]
    /// Each item's marks: the device's member (`d1`) to the step of its last mark.
    var marks: [Key: [JSONValue: [String: Int64]]] = [:]
    /// Set by a data loss or a restore.
    var historyLost = false

    /// One step's edit of `data` (a device's view of `key`): the new data, and what the log says.
    mutating func edit(_ key: Key, _ data: JSONObject, tag: String, rng: inout SimRandom) -> (JSONObject, String)? {
        guard let count = data["count"]?.int64Value, case .array(var tags)? = data["tags"] else { return nil }
        var amount = rng.int(in: -3...3)
        if amount == 0 { amount = 5 }
        var out = data
        out["count"] = .number(JSONNumber(count + amount))
        var note = "count \(amount > 0 ? "+" : "")\(amount)"
        if tags.isEmpty || rng.chance(0.6) {
            tags.append(.string(tag))
            tagsAdded[key, default: []].insert(tag)
            note += ", tag +\(tag)"
        } else {
            let gone = tags.remove(at: rng.below(tags.count))
            if let t = gone.stringValue { tagsRemoved[key, default: []].insert(t) }
            note += ", tag -\(gone.stringValue ?? "?")"
        }
        out["tags"] = .array(tags)
        sums[key, default: 0] += amount
        return (out, note)
    }

    /// One step's edit of the checklist in `data` (device `device`'s view of `key`, at
    /// `step`): an item added (its key a string, or a number for some, unique to the step),
    /// an item marked (the device's own member set to the step), or an item removed.
    mutating func tick(_ key: Key, _ data: JSONObject, device: Int, step: Int, rng: inout SimRandom) -> (JSONObject, String)? {
        guard case .array(var items)? = data["checklist"] else { return nil }
        let member = "d\(device)"
        let roll = rng.unit()
        let note: String
        if items.isEmpty || roll < 0.35 {
            let id: JSONValue = rng.chance(0.3) ? .number(JSONNumber(Int64(step) * 10 + Int64(device))) : .string("\(member).\(step)")
            items.insert(["id": id], at: rng.below(items.count + 1))
            added[key, default: []].insert(id)
            note = "checklist +\(id)"
        } else {
            let i = rng.below(items.count)
            guard case .object(var item) = items[i], let id = item["id"] else { return nil }
            if roll < 0.8 {
                item[member] = .number(JSONNumber(Int64(step)))
                items[i] = .object(item)
                marks[key, default: [:]][id, default: [:]][member] = Int64(step)
                note = "checklist \(id) marked by \(member)"
            } else {
                items.remove(at: i)
                removed[key, default: []].insert(id)
                note = "checklist -\(id)"
            }
        }
        var out = data
        out["checklist"] = .array(items)
        return (out, note)
    }

    /// The checks after healing: `server` and each device's copy of every ledger record.
    func check(server: [Key: JSONObject], devices: [[Key: JSONObject]], rejected: [[QueuedChange]]) -> [String] {
        var problems: [String] = []
        for (i, changes) in rejected.enumerated() {
            for c in changes where c.collection == Self.collection {
                problems.append("d\(i)'s change of \(c.collection)/\(c.id) was rejected (\(c.errorCode ?? "?")): no stock change may be")
            }
        }
        for key in Self.keys {
            guard let data = server[key] else {
                problems.append("the server does not hold \(key)")
                continue
            }
            for (i, held) in devices.enumerated() where held[key] != data {
                problems.append("d\(i) holds \(key) as \(held[key].map { "\(JSONValue.object($0))" } ?? "nothing"); the server holds \(JSONValue.object(data))")
            }
            if counters { problems += checkCounters(key, data) }
            if checklist { problems += checkChecklist(key, data) }
        }
        return problems
    }

    func checkCounters(_ key: Key, _ data: JSONObject) -> [String] {
        guard data["count"]?.int64Value != nil, case .array(let tags)? = data["tags"] else {
            return ["the server holds \(key) as \(JSONValue.object(data)): no counter and set"]
        }
        if historyLost { return [] }
        var problems: [String] = []
        let expected = Self.initial + sums[key, default: 0]
        if data["count"]?.int64Value != expected {
            problems.append("\(key) counts \(data["count"]!), but \(Self.initial) plus every edit's amount is \(expected)")
        }
        let want = tagsAdded[key, default: []].subtracting(tagsRemoved[key, default: []])
        let have = Set(tags.compactMap(\.stringValue))
        if have != want || have.count != tags.count {
            problems.append("\(key) has tags \(tags.compactMap(\.stringValue).sorted()), but the tags added and not removed are \(want.sorted())")
        }
        return problems
    }

    func checkChecklist(_ key: Key, _ data: JSONObject) -> [String] {
        guard case .array(let items)? = data["checklist"], FieldKinds.violation(of: ["checklist": Self.list], in: data) == nil else {
            return ["the server holds \(key) as \(JSONValue.object(data)): no list keyed by id"]
        }
        if historyLost { return [] }
        var problems: [String] = []
        let added = added[key, default: []], removed = removed[key, default: []]
        var held: [(id: JSONValue, item: JSONObject)] = []
        for case .object(let item) in items { if let id = item["id"] { held.append((id, item)) } }
        let ids = Set(held.map(\.id))
        let lost = added.subtracting(removed).filter { !ids.contains($0) }
        if !lost.isEmpty { problems.append("\(key)'s checklist lost \(lost.map(\.description).sorted()), added and never removed") }
        for (id, _) in held where !added.contains(id) { problems.append("\(key)'s checklist holds \(id), which no step added") }
        for (id, item) in held where !removed.contains(id) {
            let want = marks[key]?[id] ?? [:]
            var have: [String: Int64] = [:]
            for (member, value) in item where member != "id" { have[member] = value.int64Value ?? -1 }
            if have != want {
                problems.append("\(key)'s checklist item \(id) holds the marks \(have.sorted { $0.key < $1.key }), but each device's last are \(want.sorted { $0.key < $1.key })")
            }
        }
        return problems
    }
}
