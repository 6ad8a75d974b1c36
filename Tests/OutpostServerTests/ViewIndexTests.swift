import Foundation
import Testing
import OutpostCore
import OutpostTestSupport
@testable import OutpostServer

/// Rules whose read rules have every form the view index serves (`==`, `in` both ways,
/// `in` on a string member (never true), `&&` and `||`, named collections and `default`) and one it does not
/// (`open`: a comparison, read whole and filtered).
let viewIndexRules = #"""
{
  "collections": {
    "jobs":  {"read": "data.assignee == auth.sub || auth.sub in data.watchers || 'boss' in auth.roles"},
    "notes": {"read": "(data.team in auth.teams && data.level == 3) || data.team == auth.lead"},
    "tags":  {"read": "auth.sub in data.label"},
    "open":  {"read": "data.n > 2 || auth.sub == 'u0'"},
    "shut":  {"write": "true"}
  },
  "default": {"read": "data.owner == auth.sub || data.public == true || 'boss' in auth.roles", "write": "true"}
}
"""#

@Suite struct ViewIndexTests {
    /// Data for `collection` from a small domain, so views overlap and records move in
    /// and out of them.
    static func data(_ collection: String, _ rng: inout SplitMix64) -> JSONObject {
        func pick<T>(_ values: [T]) -> T { values[Int(rng.next() % UInt64(values.count))] }
        let subs: [JSONValue] = ["u0", "u1", "u2", "u3", .null, .number(JSONNumber(3)), "u1\u{301}"]
        var o: JSONObject = ["title": .string("t\(rng.next() % 100)")]
        switch collection {
        case "jobs":
            if rng.next() % 5 != 0 { o["assignee"] = pick(subs) }
            if rng.next() % 2 == 0 { o["watchers"] = .array((0..<Int(rng.next() % 3)).map { _ in pick(subs) }) }
            if rng.next() % 7 == 0 { o["watchers"] = .array((0..<300).map { .string("w\($0)") } + ["u2"]) }
            if rng.next() % 9 == 0 { o["watchers"] = "u1u2" }
        case "notes":
            o["team"] = pick(["t0", "t1", "t2", .null, .array(["t0"])])
            o["level"] = pick([.number(JSONNumber(3)), .number(JSONNumber(lexeme: "3.0")!), .number(JSONNumber(2)), "3"])
        case "tags":
            o["label"] = pick(["xu1y", "u2", "u0u3", .array(["u1"]), .number(JSONNumber(1)), "", .null])
        case "open":
            o["n"] = .number(JSONNumber(Int64(rng.next() % 5)))
        default:
            if rng.next() % 3 != 0 { o["owner"] = pick(subs) }
            o["public"] = pick([.bool(true), .bool(false), "true", .null])
        }
        return o
    }

    static let collections = ["jobs", "notes", "tags", "open", "shut", "misc", "other"]

    static func claims(_ sub: String, roles: [String] = [], teams: [String] = [], lead: String? = nil) -> Claims {
        var extra: JSONObject = ["roles": .array(roles.map { .string($0) }), "teams": .array(teams.map { .string($0) })]
        if let lead { extra["lead"] = .string(lead) }
        return Claims(sub: sub, exp: Int64(Date().timeIntervalSince1970) + 3600, spaces: ["team"], scope: .write, extra: extra)
    }

    static let readers: [Claims] = [
        claims("u0"), claims("u1", teams: ["t0", "t1"]), claims("u2", teams: ["t2"], lead: "t0"), claims("u1\u{301}"),
        claims("u3", roles: ["boss"]), claims("nobody"),
    ]

    /// Every entry of the view from `since` to the head, page by page, as the pager with
    /// or without the index gives them: the records (id, seq, deleted, data) and the
    /// revocations, each in seq order. `holding`: for a device that keeps copies from
    /// before the start (the pull's `holding`).
    static func entries(_ s: TestServer, _ view: ReadView, since: Int64, holding: Bool = false, indexed: Bool, limit: Int,
                        collections: [String]?) async throws -> [String] {
        let heldAt: Int64? = holding ? 0 : (since > 0 ? since : nil)
        let pager = ViewPager(store: s.app.store, view: view, indexed: indexed)
        var after = since, out: [String] = [], pages = 0
        while true {
            let page = try await pager.page(space: "team", afterSeq: after, heldAt: heldAt, limit: limit, maxBytes: 1 << 20,
                                            collections: collections, epoch: s.app.store.epoch)
            guard case .array(let items) = try JSONParser.parse(page.json) else { throw StoreError("a page is not an array") }
            #expect(items.count <= limit)
            for item in items { out.append(String(decoding: item.encoded(), as: UTF8.self)) }
            after = page.lastSeq ?? after
            pages += 1
            if !page.hasMore { break }
            #expect(pages < 10_000, "pages never end")
        }
        return out
    }

    func withIndexedServer(_ store: StoreKind, _ body: (TestServer) async throws -> Void) async throws {
        try await RulesHTTPTests().withRulesServer(store, rules: viewIndexRules) { s, _ in
            // The tests read the store's index through the pager and the store themselves.
            try await s.viewIndexBuilt(s.app.rules.rules!.index.spec)
            try await body(s)
        }
    }

    /// A random history of puts, reassignments and deletes: from the start and from
    /// cursors taken along it, every token's entries read through the index are exactly
    /// those of the filtered scan, whatever the page size and collection filter.
    @Test(arguments: StoreKind.allCases)
    func pagesReadThroughTheIndexEqualTheFilteredScan(store: StoreKind) async throws {
        try await withIndexedServer(store) { s in
            let admin = s.authority.sign(Self.claims("u3", roles: ["boss"]))
            var rng = SplitMix64(seed: 17)
            var versions: [String: Version] = [:]
            var cursors: [Int64] = [0]
            for round in 0..<12 {
                var changes: [Change] = []
                for i in 0..<25 {
                    let collection = Self.collections[Int(rng.next() % UInt64(Self.collections.count))]
                    let id = "r\(rng.next() % 40)"
                    let key = collection + "/" + id
                    let delete = versions[key] != nil && rng.next() % 6 == 0
                    changes.append(Change(changeId: "c\(round)-\(i)", collection: collection, id: id, op: delete ? .delete : .put,
                                          data: delete ? nil : Self.data(collection, &rng), baseVersion: nil, force: true))
                }
                let r = try await s.push("team", changes, token: admin)
                #expect(r.status == 200, "\(r.text)")
                for (change, result) in zip(changes, try PushResponse.decode(r.body).results) where result.status == .applied {
                    versions[change.collection + "/" + change.id] = result.version
                }
                cursors.append(try await s.app.store.head(space: "team"))
            }
            let rules = s.app.rules.rules!
            for claims in Self.readers {
                let view = rules.view(for: claims)
                for since in cursors.enumerated().filter({ $0.offset % 3 == 0 }).map(\.element) {
                    for (limit, filter) in [(7, nil), (100, nil), (3, ["jobs", "misc"]), (50, ["open", "other", "shut"])] as [(Int, [String]?)] {
                        for holding in since == 0 ? [false, true] : [false] {
                            let scanned = try await Self.entries(s, view, since: since, holding: holding, indexed: false, limit: limit, collections: filter)
                            let indexed = try await Self.entries(s, view, since: since, holding: holding, indexed: true, limit: limit, collections: filter)
                            #expect(indexed == scanned, "\(claims.sub) from \(since)\(holding ? " holding" : ""), limit \(limit), collections \(filter ?? [])")
                        }
                    }
                }
            }
        }
    }

    /// A page through the index reads no record the token cannot see: a worker with 3
    /// jobs among 2,000 gets them and the head in one page.
    @Test func aPageThroughTheIndexSkipsWhatTheViewCannotAdmit() async throws {
        try await withIndexedServer(.sqlite) { s in
            let admin = s.authority.sign(Self.claims("u3", roles: ["boss"]))
            for batch in 0..<4 {
                let changes = (0..<500).map { i -> Change in
                    let n = batch * 500 + i
                    return Change(changeId: "c\(n)", collection: "jobs", id: "j\(n)", op: .put,
                                  data: ["assignee": .string(n % 700 == 0 ? "u0" : "u9")], baseVersion: nil)
                }
                #expect(try await s.push("team", changes, token: admin).status == 200)
            }
            let view = s.app.rules.rules!.view(for: Self.claims("u0"))
            let page = try await ViewPager(store: s.app.store, view: view, indexed: true)
                .page(space: "team", afterSeq: 0, heldAt: nil, limit: 100, maxBytes: 1 << 20, collections: nil, epoch: s.app.store.epoch)
            #expect(page.count == 3 && !page.hasMore)
            #expect(page.lastSeq == 2000, "the cursor moves to the head")
            let scan = try await s.app.store.viewScan(ViewScanRequest(space: "team", afterSeq: 0, heldAt: nil, limit: 100,
                                                                       lookups: view.lookups(collections: nil).keys, collections: nil))
            #expect(scan.records.map(\.id) == ["j0", "j700", "j1400"], "only the view's records are read")
        }
    }

    /// A reload that changes what the read rules compare rebuilds the index; until it is
    /// built pages read the space whole, and after it they read the new keys.
    @Test(arguments: StoreKind.allCases)
    func aReloadThatChangesTheIndexedPathsRebuildsIt(store: StoreKind) async throws {
        try await RulesHTTPTests().withRulesServer(store, rules: viewIndexRules) { s, path in
            try await s.viewIndexBuilt(s.app.rules.rules!.index.spec)
            let admin = s.authority.sign(Self.claims("u3", roles: ["boss"]))
            let changes = (0..<30).map { i in
                Change(changeId: "c\(i)", collection: "jobs", id: "j\(i)", op: .put,
                       data: ["assignee": .string("u\(i % 3)"), "crew": .string("k\(i % 5)")], baseVersion: nil)
            }
            #expect(try await s.push("team", changes, token: admin).status == 200)
            let before = s.app.rules.rules!.index.spec
            try Data(viewIndexRules.replacingOccurrences(of: "data.assignee == auth.sub", with: "data.crew == auth.crew").utf8)
                .write(to: URL(fileURLWithPath: path))
            guard case .success = s.app.reloadRules() else { Issue.record("the new rules were refused"); return }
            let rules = s.app.rules.rules!
            #expect(rules.index.spec != before)
            try await eventually("the view index is rebuilt") { s.app.sync.viewIndex.isReady(rules.index) }
            #expect(try await s.app.store.viewIndexSpec() == rules.index.spec)
            var claims = Self.claims("u9")
            claims.extra["crew"] = "k2"
            let view = rules.view(for: claims)
            let scan = try await s.app.store.viewScan(ViewScanRequest(space: "team", afterSeq: 0, heldAt: nil, limit: 100,
                                                                       lookups: view.lookups(collections: ["jobs"]).keys, collections: ["jobs"]))
            #expect(scan.records.map(\.id) == ["j2", "j7", "j12", "j17", "j22", "j27"])
        }
    }

    /// A server started without rules writes without the index, so it marks the index as
    /// not built; the next start with rules rebuilds it and finds what was written between.
    @Test func aStartWithoutRulesLeavesTheIndexToBeRebuilt() async throws {
        let directory = try TemporaryDirectory(prefix: "outpost-index-restart")
        defer { directory.remove() }
        let rulesPath = directory.appending("rules.json")
        try Data(viewIndexRules.utf8).write(to: URL(fileURLWithPath: rulesPath))
        func run(rules: Bool, _ body: (TestServer) async throws -> Void) async throws {
            try await withServer(configure: { settings in
                settings.dataDirectory = directory.appending("data")
                if rules { settings.rulesPath = rulesPath }
            }, body)
        }
        func put(_ s: TestServer, _ id: String) async throws {
            let admin = s.authority.sign(Self.claims("u3", roles: ["boss"]))
            let change = Change(changeId: "c-" + id, collection: "jobs", id: id, op: .put, data: ["assignee": "u0"], baseVersion: nil)
            #expect(try await s.push("team", [change], token: admin).status == 200)
        }
        try await run(rules: true) { s in
            try await s.viewIndexBuilt(s.app.rules.rules!.index.spec)
            try await put(s, "j1")
        }
        try await run(rules: false) { s in
            try await s.reports.until("the index is marked as not built") { $0.forgotten == 1 }
            #expect(try await s.app.store.viewIndexSpec() == nil)
            try await put(s, "j2")
        }
        try await run(rules: true) { s in
            let rules = s.app.rules.rules!
            try await eventually("the view index is rebuilt") { s.app.sync.viewIndex.isReady(rules.index) }
            let view = rules.view(for: Self.claims("u0"))
            let scan = try await s.app.store.viewScan(ViewScanRequest(space: "team", afterSeq: 0, heldAt: nil, limit: 10,
                                                                       lookups: view.lookups(collections: nil).keys, collections: nil))
            #expect(scan.records.map(\.id) == ["j1", "j2"])
        }
    }
}
