import Outpost
import OutpostCore

/// Counter and set fields in a run (`RunConfiguration.fieldKinds`, docs/simulation.md,
/// "Field kinds"): the server's rules file declares `count` a counter and `tags` a set in
/// the collection `stock`, device 0 creates its records before the first step, and a step
/// may add a random amount to a record's count (negative or positive) and add a tag of its
/// own or remove one it sees. Every device resolves conflicts of `stock` with
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
/// - unless the run lost server history (a data loss, or a restore from a backup): copies
///   are then offered again to a new history without the state they were made on, and meet
///   the fallback whole, so a count may lose or repeat amounts. Those runs check that every
///   device and the server hold the same record, with a number and an array of scalars.
struct Ledger {
    static let collection = "stock"
    static let keys: [Key] = [Key(collection, "s0"), Key(collection, "s1")]
    static let initial: Int64 = 100
    static let rules = #"""
        {"collections": {"stock": {"fields": {"count": "counter", "tags": "set"}}},
         "default": {"read": "true", "write": "true"}}
        """#

    /// The sum of the amounts of every edit of a record's count.
    var sums: [Key: Int64] = [:]
    /// Tags added, and tags removed (each tag is added once, by the device that made it).
    var added: [Key: Set<String>] = [:]
    var removed: [Key: Set<String>] = [:]
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
            added[key, default: []].insert(tag)
            note += ", tag +\(tag)"
        } else {
            let gone = tags.remove(at: rng.below(tags.count))
            if let t = gone.stringValue { removed[key, default: []].insert(t) }
            note += ", tag -\(gone.stringValue ?? "?")"
        }
        out["tags"] = .array(tags)
        sums[key, default: 0] += amount
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
            guard data["count"]?.int64Value != nil, case .array(let tags)? = data["tags"] else {
                problems.append("the server holds \(key) as \(JSONValue.object(data)): no counter and set")
                continue
            }
            if historyLost { continue }
            let expected = Self.initial + sums[key, default: 0]
            if data["count"]?.int64Value != expected {
                problems.append("\(key) counts \(data["count"]!), but \(Self.initial) plus every edit's amount is \(expected)")
            }
            let want = added[key, default: []].subtracting(removed[key, default: []])
            let have = Set(tags.compactMap(\.stringValue))
            if have != want || have.count != tags.count {
                problems.append("\(key) has tags \(tags.compactMap(\.stringValue).sorted()), but the tags added and not removed are \(want.sorted())")
            }
        }
        return problems
    }
}
