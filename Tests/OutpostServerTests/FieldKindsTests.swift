import Foundation
import Testing
import OutpostCore
import OutpostTestSupport
@testable import OutpostServer

/// A rules file with field kinds (docs/rules.md, "Field kinds").
let fieldKindsRules = #"""
{
  "collections": {
    "items": {"fields": {"stock": "counter", "tags": "set", "totals.weight": "counter", "name": "lww"}},
    "secret": {"read": "false", "fields": {"n": "counter"}}
  },
  "default": {"read": "true", "write": "true"}
}
"""#

@Suite struct FieldKindsFileTests {
    func refusal(_ text: String) -> RulesError? { RulesFileTests().refusal(text) }

    @Test func declarationsAreReadAndServedForTheCollectionsOpenToReads() throws {
        let rules = try ServerRules.parse(Array(fieldKindsRules.utf8), path: "rules.json")
        #expect(rules.rules(for: "items")?.fields == ["stock": .counter, "tags": .set, "totals.weight": .counter])
        #expect(rules.fieldKinds == FieldKinds(["items": ["stock": .counter, "tags": .set, "totals.weight": .counter]]),
                "a closed collection's declarations (and name) are not served")
    }

    @Test func badDeclarationsAreRefusedWithTheirPlace() throws {
        let kind = try #require(refusal(#"{"collections": {"items": {"fields": {"stock": "count"}}}}"#))
        #expect(kind.reason.contains("\"counter\", \"set\" or \"lww\"") && kind.column == 48, "\(kind)")
        let path = try #require(refusal(#"{"collections": {"items": {"fields": {"a..b": "set"}}}}"#))
        #expect(path.reason.contains("not a field path"), "\(path)")
        let overlap = try #require(refusal(#"{"collections": {"items": {"fields": {"a": "set", "a.b": "counter"}}}}"#))
        #expect(overlap.reason.contains("overlap"), "\(overlap)")
        let shape = try #require(refusal(#"{"collections": {"items": {"fields": ["stock"]}}}"#))
        #expect(shape.reason.contains("must be an object"), "\(shape)")
        let inDefault = try #require(refusal(#"{"default": {"read": "true", "fields": {"n": "counter"}}}"#))
        #expect(inDefault.reason.contains("unknown key \"fields\""), "\(inDefault)")
    }
}

/// The server checks declared fields on every put and serves the declarations in its
/// pages, over a real socket, on each store.
@Suite struct FieldKindsHTTPTests {
    let http = RulesHTTPTests()

    func put(_ changeId: String, _ id: String, _ data: JSONObject) -> Change {
        Change(changeId: changeId, collection: "items", id: id, op: .put, data: data, baseVersion: nil, clientTime: 1_764_430_000_000)
    }

    @Test(arguments: StoreKind.allCases)
    func aStringInACounterAndAnObjectInASetAreRefusedAndNothingIsStored(store: StoreKind) async throws {
        try await http.withRulesServer(store, rules: fieldKindsRules) { s, _ in
            let t = http.token(s, "w1")
            let results = try await http.pushed(s, t, [
                put("c1", "i1", ["stock": 10, "tags": ["a", 1, true], "totals": ["weight": 2.5]]),
                put("c2", "i2", ["stock": "10"]),
                put("c3", "i3", ["tags": ["a", ["b": 1]]]),
                put("c4", "i4", ["totals": ["weight": [1]]]),
                put("c5", "i5", ["tags": "a"]),
                put("c6", "i6", ["name": "no declared field"]),
            ])
            #expect(results.map(\.status) == [.applied, .rejected, .rejected, .rejected, .rejected, .applied])
            let refusals = results.compactMap(\.error)
            #expect(refusals.map(\.code) == ["invalid_change", "invalid_change", "invalid_change", "invalid_change"])
            #expect(refusals.map { $0.details?["path"]?.stringValue } == ["/stock", "/tags", "/totals/weight", "/tags"])
            #expect(refusals.map { $0.details?["kind"]?.stringValue } == ["counter", "set", "counter", "set"])
            #expect(refusals[0].message.contains("counter") && refusals[1].message.contains("strings, numbers or Booleans"), "\(refusals)")
            // Nothing refused was stored; every page carries the declarations.
            let page = try await http.pull(s, t)
            #expect(page.changes.map(\.id).sorted() == ["i1", "i6"])
            #expect(page.fields == FieldKinds(["items": ["stock": .counter, "tags": .set, "totals.weight": .counter]]))
            // A refused change's retry with a number is judged again, and applied.
            let retry = try await http.pushed(s, t, [put("c2", "i2", ["stock": 10])])
            #expect(retry[0].status == .applied)
        }
    }

    /// A counter no device can merge as written (infinite, zero or rounded as a double) is
    /// refused per change with its place, and nothing of it is stored; 64-bit integers and
    /// decimals a double writes back alike pass. A member named `totals.weight` is not the
    /// nested counter `totals` → `weight`.
    @Test(arguments: StoreKind.allCases)
    func countersNoDeviceCanMergeAreRefusedAndADottedMemberIsNotTheNestedCounter(store: StoreKind) async throws {
        try await http.withRulesServer(store, rules: fieldKindsRules) { s, _ in
            let t = http.token(s, "w1")
            func n(_ text: String) -> JSONValue { .number(JSONNumber(lexeme: text)!) }
            let results = try await http.pushed(s, t, [
                put("c1", "i1", ["stock": n("1e400")]),
                put("c2", "i2", ["stock": n("1e-99999999999999999999")]),
                put("c3", "i3", ["stock": n("1" + String(repeating: "0", count: 5_000))]),
                put("c4", "i4", ["totals": ["weight": n("-1E+400")]]),
                put("c5", "i5", ["stock": n("0.1"), "totals": ["weight": n("1.50")]]),
                put("c6", "i6", ["stock": n("9007199254740993")]),
                put("c7", "i7", ["totals.weight": "not a counter", "totals": ["weight": 2]]),
            ])
            #expect(results.map(\.status) == [.rejected, .rejected, .rejected, .rejected, .applied, .applied, .applied], "\(results)")
            #expect(results.prefix(4).map { $0.error?.details?["path"]?.stringValue } == ["/stock", "/stock", "/stock", "/totals/weight"])
            #expect(results.prefix(4).allSatisfy { $0.error?.code == "invalid_change" && $0.error?.details?["kind"] == "counter" })
            #expect(try await http.pull(s, t).changes.map(\.id).sorted() == ["i5", "i6", "i7"])
        }
    }

    /// Every device's merge (`FieldKinds.mergeObject`) takes a member named
    /// `totals.weight` as last-write-wins, and only `totals` → `weight` as the counter.
    @Test func aMemberWhoseNameHoldsADotIsNeverADeclaredPath() {
        let kinds: [String: FieldKind] = ["totals.weight": .counter]
        let merged = FieldKinds.mergeObject(base: ["totals.weight": 1, "totals": ["weight": 1]],
                                            local: ["totals.weight": 2, "totals": ["weight": 2]],
                                            server: ["totals.weight": 5, "totals": ["weight": 5]], kinds: kinds, localWins: { true })
        #expect(merged["totals.weight"] == 2, "a dotted member is last-write-wins, never counted")
        #expect(merged["totals"]?["weight"] == 6, "the nested member is the counter")
    }

    /// Without a rules file, pages carry no `fields` (as before this addition).
    @Test func aServerWithoutRulesSendsNoDeclarations() async throws {
        try await withServer { s in
            let r = try await s.pull("team", query: "", token: http.token(s, "w1"))
            #expect(r.status == 200 && !r.text.contains("\"fields\""), "\(r.text)")
        }
    }
}

