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

    /// Without a rules file, pages carry no `fields` (as before this addition).
    @Test func aServerWithoutRulesSendsNoDeclarations() async throws {
        try await withServer { s in
            let r = try await s.pull("team", query: "", token: http.token(s, "w1"))
            #expect(r.status == 200 && !r.text.contains("\"fields\""), "\(r.text)")
        }
    }
}

