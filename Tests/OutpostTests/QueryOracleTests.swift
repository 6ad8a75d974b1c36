import Foundation
import OutpostCore
import OutpostSQLite
import OutpostTestBasics
import Testing
@testable import Outpost

/// Every query's rows against the same filter and order computed in Swift over the records
/// `records(in:)` shows (what `get` sees), on real store files with random records: Unicode
/// strings, nulls and missing fields, mixed types, nested fields, integers past 2^53, both
/// date forms, local edits waiting for the server, deletes, quarantined records, and an end-to-end
/// encrypted space. The oracle below is the order and the matching of docs/client.md
/// ("Queries"), written without SQL.
@Suite("Queries against an oracle")
struct QueryOracleTests {
    static let collection = "items"
    static let schema = CollectionSchema(indexes: [["a"], ["b", "c"], ["n.x"], ["d"]], searchable: [], dates: ["d"])

    // MARK: The oracle

    /// A sort key as docs/client.md defines it, compared without SQLite.
    enum Key: Comparable {
        case none
        case number(int: Int64?, double: Double)
        case string([UInt8])
        case boolean(Bool)
        case array([UInt8])
        case object([UInt8])

        var rank: Int {
            switch self {
            case .none: 0
            case .number: 1
            case .string: 2
            case .boolean: 3
            case .array: 4
            case .object: 5
            }
        }

        static func < (a: Key, b: Key) -> Bool {
            if a.rank != b.rank { return a.rank < b.rank }
            switch (a, b) {
            case (.number(let ia, let da), .number(let ib, let db)): return compareNumbers(ia, da, ib, db) < 0
            case (.string(let x), .string(let y)), (.array(let x), .array(let y)), (.object(let x), .object(let y)):
                return x.lexicographicallyPrecedes(y)
            case (.boolean(let x), .boolean(let y)): return !x && y
            default: return false
            }
        }

        static func == (a: Key, b: Key) -> Bool { !(a < b) && !(b < a) }

        /// Exact comparison of two numbers, each an Int64 or a Double.
        static func compareNumbers(_ ia: Int64?, _ da: Double, _ ib: Int64?, _ db: Double) -> Int {
            switch (ia, ib) {
            case (let x?, let y?): return x < y ? -1 : (x > y ? 1 : 0)
            case (nil, nil): return da < db ? -1 : (da > db ? 1 : 0)
            case (let x?, nil): return compare(int: x, double: db)
            case (nil, let y?): return -compare(int: y, double: da)
            }
        }

        static func compare(int i: Int64, double d: Double) -> Int {
            if d >= 9_223_372_036_854_775_808.0 { return -1 }
            if d < -9_223_372_036_854_775_808.0 { return 1 }
            let t = d.rounded(.towardZero)
            let ti = Int64(t)
            if i != ti { return i < ti ? -1 : 1 }
            let f = d - t
            return f > 0 ? -1 : (f < 0 ? 1 : 0)
        }
    }

    /// The value at `path` in `object`; nil when missing (a step through a non-object too).
    static func value(_ object: JSONObject, _ path: [String]) -> JSONValue? {
        var current: JSONValue = .object(object)
        for name in path {
            guard case .object(let o) = current, let next = o[name] else { return nil }
            current = next
        }
        return current
    }

    static func numberKey(_ n: JSONNumber) -> Key {
        let lexeme = n.lexeme
        if !lexeme.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }), let i = Int64(lexeme) { return .number(int: i, double: Double(i)) }
        return .number(int: nil, double: Double(lexeme)!)
    }

    /// The key of a JSON value of a field that is not a date.
    static func key(_ v: JSONValue?) -> Key {
        switch v {
        case nil, .null?: return .none
        case .bool(let b)?: return .boolean(b)
        case .number(let n)?: return numberKey(n)
        case .string(let s)?: return .string(Array(s.utf8))
        case .array?: return .array(v!.encoded())
        case .object?: return .object(v!.encoded())
        }
    }

    /// Milliseconds since 1970 of a date field's value, by its two forms; nil otherwise.
    static func dateMilliseconds(_ v: JSONValue?) -> Int64? {
        switch v {
        case .string(let s)?:
            return oracleISO(s)
        case .number(let n)?:
            // Seconds since 2001, rounded to the nearest millisecond.
            let seconds = n.doubleValue + 978_307_200
            let r = seconds * 1000 + 210_866_760_000_000
            guard r >= 0, r < 464_269_060_800_000 else { return nil }
            return Int64(r + 0.5) - 210_866_760_000_000
        default:
            return nil
        }
    }

    /// The test's own reading of the RFC 3339 forms it writes: date, time to the second or
    /// millisecond, `Z` or `±HH:MM`.
    static func oracleISO(_ s: String) -> Int64? {
        let scanner = Array(s.utf8)
        func int(_ from: Int, _ count: Int) -> Int64? {
            guard from + count <= scanner.count else { return nil }
            let slice = scanner[from..<(from + count)]
            guard slice.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
            return Int64(String(decoding: slice, as: UTF8.self))
        }
        guard let y = int(0, 4), let mo = int(5, 2), let d = int(8, 2) else { return nil }
        var comps = DateComponents()
        comps.year = Int(y); comps.month = Int(mo); comps.day = Int(d)
        comps.timeZone = TimeZone(identifier: "UTC")
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        guard let day = calendar.date(from: comps) else { return nil }
        var ms = Int64((day.timeIntervalSince1970 * 1000).rounded())
        if scanner.count == 10 { return ms }
        guard let h = int(11, 2), let mi = int(14, 2), let sec = int(17, 2) else { return nil }
        ms += h * 3_600_000 + mi * 60_000 + sec * 1000
        var i = 19
        if i < scanner.count, scanner[i] == UInt8(ascii: ".") {
            guard let frac = int(20, 3) else { return nil }
            ms += frac
            i = 23
        }
        if i < scanner.count, scanner[i] == UInt8(ascii: "Z") { return ms }
        if i + 6 == scanner.count, let oh = int(i + 1, 2), let om = int(i + 4, 2) {
            let offset = (oh * 60 + om) * 60_000
            return scanner[i] == UInt8(ascii: "-") ? ms + offset : ms - offset
        }
        return i == scanner.count ? ms : nil
    }

    static func dateKey(_ v: JSONValue?) -> Key {
        guard let ms = dateMilliseconds(v) else { return .none }
        return .string(Array(RecordCoder.isoText(milliseconds: ms).utf8))
    }

    static func fieldKey(_ object: JSONObject, _ field: QueryField) -> Key {
        let v = value(object, field.path)
        return schema.kind(of: field) == .date ? dateKey(v) : key(v)
    }

    /// The key of a query value for `field`, nil for JSON null, `.none`-like `nil?` for a
    /// value no record can equal.
    static func valueKey(_ q: QueryValue, _ field: QueryField) -> Key?? {
        let date = schema.kind(of: field) == .date
        switch q.kind {
        case .date(let d):
            if date { return .some(.some(.string(Array(RecordCoder.isoText(d).utf8)))) }
            return .some(.some(.string(Array(RecordCoder.isoText(d).utf8))))
        case .json(.null):
            return .some(nil)
        case .json(let j):
            if date {
                guard let ms = dateMilliseconds(j) else { return nil }
                return .some(.some(.string(Array(RecordCoder.isoText(milliseconds: ms).utf8))))
            }
            return .some(.some(key(j)))
        }
    }

    struct Visible {
        let id: String
        let data: JSONObject
        let pending: Bool
    }

    static func matches(_ node: QueryFilter.Node, _ r: Visible) -> Bool {
        switch node {
        case .constant(let b): return b
        case .all(let ns): return ns.allSatisfy { matches($0, r) }
        case .any(let ns): return ns.contains { matches($0, r) }
        case .not(let n): return !matches(n, r)
        case .pending: return r.pending
        case .ids(let ids): return ids.contains(r.id)
        case .isNull(let f): return value(r.data, f.path) == .null
        case .isMissing(let f): return value(r.data, f.path) == nil
        case .hasPrefix(let f, let p):
            guard case .string(let bytes) = fieldKey(r.data, f) else { return false }
            return bytes.starts(with: Array(p.utf8))
        case .contains(let f, let q):
            guard case .array(let elements)? = value(r.data, f.path) else { return false }
            if case .json(.null) = q.kind { return elements.contains(.null) }
            guard case .json(let j) = q.kind else { return false }
            return elements.contains { $0 != .null && key($0) == key(j) }
        case .oneOf(let f, let list):
            return list.contains { matches(.compare(f, .equal, $0), r) }
        case .compare(let f, let op, let q):
            let k = fieldKey(r.data, f)
            switch valueKey(q, f) {
            case nil: return op == .notEqual
            case .some(nil):
                let isNull = value(r.data, f.path) == .null
                switch op {
                case .equal: return isNull
                case .notEqual: return !isNull
                default: return false
                }
            case .some(.some(let v)):
                switch op {
                case .equal: return k != .none && k == v
                case .notEqual: return !(k != .none && k == v)
                default:
                    guard k.rank == v.rank, k != .none else { return false }
                    switch op {
                    case .less: return k < v
                    case .lessOrEqual: return k < v || k == v
                    case .greater: return v < k
                    default: return v < k || k == v
                    }
                }
            }
        }
    }

    /// The oracle's rows: filter, then the sorts, ties by id in the last sort's direction.
    static func expected(_ records: [Visible], _ spec: QuerySpec) -> [String] {
        let matching = records.filter { r in spec.filter.map { f in matches(f, r) } ?? true }
        let idDescending = spec.sorts.last?.descending ?? false
        let sorted = matching.sorted { x, y in
            for s in spec.sorts {
                let kx = fieldKey(x.data, s.field), ky = fieldKey(y.data, s.field)
                if kx == ky { continue }
                return s.descending ? ky < kx : kx < ky
            }
            let xi = Array(x.id.utf8), yi = Array(y.id.utf8)
            return idDescending ? yi.lexicographicallyPrecedes(xi) : xi.lexicographicallyPrecedes(yi)
        }
        var ids = sorted.map(\.id)
        ids = Array(ids.dropFirst(spec.offset))
        if let limit = spec.limit { ids = Array(ids.prefix(limit)) }
        return ids
    }

    // MARK: Random records and queries

    struct Generator {
        var rng: SplitMix64

        mutating func int(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
        mutating func chance(_ p: Double) -> Bool { Double(rng.next() % 10_000) / 10_000 < p }

        static let words = ["a", "A", "b", "é", "e\u{301}", "z", "Zürich", "zürich", "São Paulo", "sao", "ä", "日本", "😀", "😀x", "", " ", "a b", "ab", "abc", "Ω", "\u{FFFF}", "\u{10FFFF}"]

        mutating func string() -> String { Self.words[int(Self.words.count)] }

        mutating func number() -> JSONValue {
            let lexemes = ["0", "-0", "1", "1.0", "1.5", "-2", "2", "3", "10", "1e2", "100", "9007199254740992", "9007199254740993", "9007199254740993.0",
                           "-9007199254740993", "9223372036854775807", "12345678901234567890", "0.1", "0.30000000000000004", "-1.5e-7", "42"]
            return .number(JSONNumber(lexeme: lexemes[int(lexemes.count)])!)
        }

        mutating func scalar() -> JSONValue {
            switch int(6) {
            case 0: return .null
            case 1: return .bool(chance(0.5))
            case 2, 3: return number()
            default: return .string(string())
            }
        }

        mutating func any(depth: Int = 0) -> JSONValue {
            if depth < 2, chance(0.15) { return .array((0..<int(3)).map { _ in any(depth: depth + 1) }) }
            if depth < 2, chance(0.1) { return .object(JSONObject([("x", any(depth: depth + 1))])) }
            return scalar()
        }

        mutating func date() -> JSONValue? {
            let ms = Int64(1_700_000_000_000) + Int64(int(40)) * 3_600_000 * 13 + Int64(int(3)) * 500
            switch int(7) {
            case 0: return nil
            case 1: return .string("not a date")
            case 2: return .bool(true)
            case 3: // Foundation's default: seconds since 2001 as a double.
                return .number(JSONNumber(Double(ms) / 1000 - 978_307_200))
            case 4: // Another offset.
                let text = RecordCoder.isoText(milliseconds: ms + 2 * 3_600_000)
                return .string(String(text.dropLast()) + "+02:00")
            case 5: // To the second, a date alone.
                return .string(chance(0.5) ? String(RecordCoder.isoText(milliseconds: ms / 1000 * 1000).prefix(19)) + "Z" : String(RecordCoder.isoText(milliseconds: ms).prefix(10)))
            default:
                return .string(RecordCoder.isoText(milliseconds: ms))
            }
        }

        mutating func record() -> JSONObject {
            var o = JSONObject()
            if !chance(0.1) { o["a"] = any() }
            if !chance(0.1) { o["b"] = chance(0.8) ? .string(["x", "y", "z", "Y"][int(4)]) : scalar() }
            if !chance(0.1) { o["c"] = chance(0.8) ? number() : scalar() }
            switch int(5) {
            case 0: break
            case 1: o["n"] = scalar()
            default:
                var inner = JSONObject()
                if !chance(0.2) { inner["x"] = chance(0.5) ? .string(string()) : scalar() }
                o["n"] = .object(inner)
            }
            if let d = date() { o["d"] = d }
            if chance(0.7) { o["t"] = .array((0..<int(4)).map { _ in chance(0.6) ? .string(["red", "green", "blue"][int(3)]) : scalar() }) }
            return o
        }

        static let fields = [QueryField("a"), QueryField("b"), QueryField("c"), QueryField("n.x"), QueryField("d"), QueryField("t"), QueryField("nope"), QueryField("n")]

        mutating func value(for field: QueryField) -> QueryValue {
            if field == QueryField("d") {
                switch int(4) {
                case 0: return .date(Date(timeIntervalSince1970: Double(1_700_000_000_000 + Int64(int(40)) * 3_600_000 * 13) / 1000))
                case 1: return .json(date() ?? .null)
                default: break
                }
            }
            if chance(0.05) { return .json(any()) }
            // Half the time a value of the field's own domain, so comparisons meet equals.
            if chance(0.5) {
                switch field {
                case QueryField("b"): return .string(["x", "y", "z", "Y"][int(4)])
                case QueryField("c"): return .json(number())
                case QueryField("a"), QueryField("n.x"): return .string(string())
                default: break
                }
            }
            return .json(scalar())
        }

        mutating func filter(depth: Int = 0) -> QueryFilter.Node {
            if depth < 3, chance(0.35) {
                let parts = (0..<(1 + int(3))).map { _ in filter(depth: depth + 1) }
                return chance(0.5) ? .all(parts) : .any(parts)
            }
            if depth < 3, chance(0.1) { return .not(filter(depth: depth + 1)) }
            let f = Self.fields[int(Self.fields.count)]
            switch int(12) {
            case 0: return .isNull(f)
            case 1: return .isMissing(f)
            case 2: return .hasPrefix(f, [string(), "", "Z", "20", "x"][int(5)])
            case 3: return .oneOf(f, (0..<int(4)).map { _ in value(for: f) })
            case 4: return .contains(QueryField("t"), chance(0.7) ? .string(["red", "green", "blue"][int(3)]) : .json(scalar()))
            case 5: return .pending
            default:
                return .compare(f, QueryFilter.Comparison.allCases[int(6)], value(for: f))
            }
        }

        mutating func spec() -> QuerySpec {
            var spec = QuerySpec(collection: QueryOracleTests.collection)
            if !chance(0.1) { spec.filter = filter() }
            let sortable = [QueryField("a"), QueryField("b"), QueryField("c"), QueryField("n.x"), QueryField("d"), QueryField("t")]
            spec.sorts = (0..<int(4)).map { _ in QuerySort(field: sortable[int(sortable.count)], descending: chance(0.4)) }
            if chance(0.4) { spec.limit = int(20) }
            if chance(0.2) { spec.offset = int(10) }
            return spec
        }
    }

    // MARK: The run

    /// Builds a world for `seed`: a writer device pushes random records (some the reader's
    /// validator refuses); the reader pulls them (those go to its quarantine), then edits,
    /// creates and deletes some without syncing (so `pending` rows and local tombstones mix
    /// with the server's copies).
    static func reader(seed: UInt64, dir: TemporaryDirectory, encrypted: Bool) async throws -> (OutpostStore, Generator) {
        let world = World(seed: seed)
        var g = Generator(rng: SplitMix64(seed: seed))
        let keys = FileKeyStore(path: dir.appending("keys"))
        if encrypted { _ = try SpaceKeys.create(space: world.space, in: keys) }
        func configure(_ c: inout OutpostStore.Configuration) {
            c.collections = [collection: schema]
            if encrypted { c.encryption = .spaceKey(keys) }
        }
        let writer = try world.device("writer", path: dir.appending("writer.sqlite"), configure: configure)
        for i in 0..<120 {
            var o = g.record()
            if g.chance(0.05) { o["bad"] = true }
            try await writer.put(o, in: collection, id: String(format: "r%03d", i))
        }
        try await writer.sync()
        let reader = try world.device("reader", path: dir.appending("reader.sqlite")) { c in
            configure(&c)
            c.validators[collection] = { object in if object["bad"] != nil { throw OutpostError.encoding("refused by the test's validator") } }
        }
        try await reader.sync()
        for i in 0..<60 {
            let id = String(format: "r%03d", g.int(140))
            if g.chance(0.25) {
                try await reader.delete(from: collection, id: id)
            } else {
                var o = g.record()
                if i % 7 == 0 { o["a"] = .string("edited") }
                try await reader.put(o, in: collection, id: id)
            }
        }
        return (reader, g)
    }

    static func visible(_ store: OutpostStore) async throws -> [Visible] {
        try await store.records(in: collection).map { Visible(id: $0.id, data: $0.data!, pending: $0.pending) }
    }

    /// The rows the store gives for `spec`, through the public API.
    static func actual(_ store: OutpostStore, _ spec: QuerySpec) async throws -> [String] {
        let items = store.collection(collection, of: JSONValue.self)
        let first = try await OutpostQuery(collection: items, spec: spec).fetch()
        #expect(first.skipped.isEmpty)
        return first.map(\.id)
    }

    static func check(seed: UInt64, encrypted: Bool, queries: Int) async throws {
        try await withTemporaryDirectory(prefix: "outpost-query-oracle") { dir in
            var (store, g) = try await reader(seed: seed, dir: dir, encrypted: encrypted)
            let records = try await visible(store)
            #expect(try await store.quarantinedRecords().count > 0, "seed \(seed): the run has quarantined records")
            #expect(records.contains { $0.pending } && records.count > 50)
            let items = store.collection(collection, of: JSONValue.self)
            for q in 0..<queries {
                let spec = g.spec()
                let want = expected(records, spec)
                let got = try await actual(store, spec)
                #expect(got == want, "seed \(seed) query \(q): \(spec)")
                if got != want { return }
                #expect(try await OutpostQuery(collection: items, spec: spec).count() == expected(records, QuerySpec(filter: spec.filter)).count,
                        "seed \(seed) query \(q) count")
                // Keyset pages of 7 give the whole order.
                if q % 3 == 0 {
                    var paged = spec
                    paged.limit = 7
                    paged.offset = 0
                    var ids: [String] = []
                    var cursor: QueryCursor?
                    repeat {
                        paged.after = cursor
                        let page = try await OutpostQuery(collection: items, spec: paged).fetch()
                        ids += page.map(\.id)
                        cursor = page.count == 7 ? page.cursor : nil
                    } while cursor != nil
                    var whole = spec
                    whole.limit = nil
                    whole.offset = 0
                    #expect(ids == expected(records, whole), "seed \(seed) query \(q) by pages: \(spec)")
                }
            }
            await store.close()
        }
    }

    /// How many of `queries` random queries give other rows than the oracle when the
    /// engine's SQL is changed by `mutate` (run on the reader's file).
    static func mismatches(seed: UInt64, queries: Int, mutate: @escaping @Sendable (String) -> String) async throws -> (mismatches: Int, nonEmpty: Int) {
        try await withTemporaryDirectory(prefix: "outpost-query-mutant") { dir in
            var (store, g) = try await reader(seed: seed, dir: dir, encrypted: false)
            let records = try await visible(store)
            await store.close()
            let d = try LocalDatabase(readingAt: dir.appending("reader.sqlite"))
            defer { d.close() }
            var mismatches = 0, nonEmpty = 0
            for _ in 0..<queries {
                let spec = g.spec()
                let compiled = try d.compile(spec, schema: schema, encoder: RecordCoder.standard.encoder)
                let mutant = CompiledQuery(sql: mutate(compiled.sql), values: compiled.values, countSQL: compiled.countSQL, countValues: compiled.countValues,
                                           keyCount: compiled.keyCount, shape: compiled.shape, index: compiled.index, searchIndex: compiled.searchIndex)
                let want = expected(records, spec)
                if !want.isEmpty { nonEmpty += 1 }
                if try d.rows(mutant).rows.map(\.id) != want { mismatches += 1 }
            }
            return (mismatches, nonEmpty)
        }
    }

    /// The oracle catches an engine with a wrong comparison: each mutant below, applied to
    /// the SQL the engine runs, gives other rows than the oracle for some of the queries;
    /// the engine as it is, for none.
    @Test func theOracleCatchesAWrongComparison() async throws {
        let unchanged = try await Self.mismatches(seed: 3, queries: 150) { $0 }
        #expect(unchanged.mismatches == 0)
        #expect(unchanged.nonEmpty > 90, "most random queries match some records")
        let mutants: [(String, @Sendable (String) -> String)] = [
            ("> for >=", { $0.replacingOccurrences(of: " >= ?", with: " > ?") }),
            ("numbers not bounded below strings", { $0.replacingOccurrences(of: " < ''", with: " < x''") }),
            ("strings compared with their case folded", { $0.replacingOccurrences(of: " = ?", with: " = ? COLLATE NOCASE") }),
            ("negation of an unknown is unknown", { $0.replacingOccurrences(of: ") IS NOT 1)", with: ") = 0)") }),
            ("ties not broken by id", { $0.replacingOccurrences(of: ", r.id DESC", with: "").replacingOccurrences(of: ", r.id", with: ", random()") }),
        ]
        for (name, mutate) in mutants {
            let found = try await Self.mismatches(seed: 3, queries: 150, mutate: mutate)
            #expect(found.mismatches > 0, "the mutant \(name) went unseen")
        }
    }

    @Test(arguments: 1...8 as ClosedRange<UInt64>)
    func everyQueryGivesTheOraclesRows(seed: UInt64) async throws {
        try await Self.check(seed: seed, encrypted: false, queries: 120)
    }

    @Test(arguments: [101, 102] as [UInt64])
    func everyQueryGivesTheOraclesRowsInAnEncryptedSpace(seed: UInt64) async throws {
        try await Self.check(seed: seed, encrypted: true, queries: 60)
    }
}

extension QuerySpec {
    init(filter: QueryFilter.Node?) {
        self.init(collection: QueryOracleTests.collection)
        self.filter = filter
    }
}
