import Foundation
import Testing
import OutpostCore
import OutpostTestSupport
@testable import OutpostServer

/// A rules file with a keyed list (docs/rules.md, "Field kinds"): `checklist` is a list of
/// objects keyed by `id`, `steps` one keyed by `n`, beside a counter.
let listKindRules = #"""
{
  "collections": {
    "inspections": {"fields": {"checklist": {"list": "id"}, "plan.steps": {"list": "n"}, "visits": "counter"}}
  },
  "default": {"read": "true", "write": "true"}
}
"""#

@Suite struct ListKindFileTests {
    func refusal(_ text: String) -> RulesError? { RulesFileTests().refusal(text) }

    @Test func aListDeclarationIsReadAndServedInItsObjectForm() throws {
        let rules = try ServerRules.parse(Array(listKindRules.utf8), path: "rules.json")
        let declared: [String: FieldKind] = ["checklist": .list(key: "id"), "plan.steps": .list(key: "n"), "visits": .counter]
        #expect(rules.rules(for: "inspections")?.fields == declared)
        #expect(rules.fieldKinds == FieldKinds(["inspections": declared]))
        // The wire form keeps the string kinds as they were and spells a list as the file does.
        let wire = String(decoding: rules.fieldKindsJSON, as: UTF8.self)
        #expect(wire == #"{"inspections":{"checklist":{"list":"id"},"plan.steps":{"list":"n"},"visits":"counter"}}"#, "\(wire)")
    }

    /// Each malformed declaration is refused with the place of what is wrong in it.
    @Test func malformedListDeclarationsAreRefusedWithTheirPlace() throws {
        func refused(_ kind: String) throws -> RulesError {
            try #require(refusal(#"{"collections": {"items": {"fields": {"checklist": "# + kind + "}}}}"))
        }
        // The text before the kind is 51 bytes long: the kind's own value starts at column 52.
        let number = try refused(#"{"list": 3}"#)
        #expect(number.reason.contains("non-empty string") && number.line == 1 && number.column == 61, "\(number)")
        let empty = try refused(#"{"list": ""}"#)
        #expect(empty.reason.contains("non-empty string") && empty.column == 61, "\(empty)")
        let unknown = try refused(#"{"map": "id"}"#)
        #expect(unknown.reason.contains(#"unknown key "map""#) && unknown.column == 60, "\(unknown)")
        let extra = try refused(#"{"list": "id", "order": "asc"}"#)
        #expect(extra.reason.contains(#"unknown key "order""#) && extra.column == 76, "\(extra)")
        let bare = try refused("{}")
        #expect(bare.reason.contains(#"{"list": "<key member>"}"#) && bare.column == 52, "\(bare)")
        let array = try refused(#"["list", "id"]"#)
        #expect(array.reason.contains(#"a field kind is "counter", "set" or "lww", or {"list""#) && array.column == 52, "\(array)")
        // A list cannot hold a declaration of its own: its elements are not reached by a path.
        let overlap = try #require(refusal(#"{"collections": {"items": {"fields": {"checklist": {"list": "id"}, "checklist.done": "counter"}}}}"#))
        #expect(overlap.reason.contains("overlap"), "\(overlap)")
    }
}

/// The server checks a declared list on every put, over a real socket, on each store.
@Suite struct ListKindHTTPTests {
    let http = RulesHTTPTests()

    func put(_ changeId: String, _ id: String, _ data: JSONObject) -> Change {
        Change(changeId: changeId, collection: "inspections", id: id, op: .put, data: data, baseVersion: nil, clientTime: 1_764_430_000_000)
    }

    @Test(arguments: StoreKind.allCases)
    func aMalformedListIsRefusedWithThePointerToWhatIsWrongAndNothingIsStored(store: StoreKind) async throws {
        try await http.withRulesServer(store, rules: listKindRules) { s, _ in
            let t = http.token(s, "w1")
            let results = try await http.pushed(s, t, [
                put("c1", "i1", ["checklist": [["id": "a", "done": false], ["id": 2, "done": true], ["id": "2"]],
                                 "plan": ["steps": [["n": 1], ["n": 1.0]]]]),
                put("c2", "i2", ["checklist": ["id": "a"]]),
                put("c3", "i3", ["checklist": [["id": "a"], "b"]]),
                put("c4", "i4", ["checklist": [["id": "a"], ["done": true]]]),
                put("c5", "i5", ["checklist": [["id": "a"], ["id": true]]]),
                put("c6", "i6", ["checklist": [["id": "a"], ["id": "b"], ["id": "a"]]]),
                put("c7", "i7", ["plan": ["steps": [["n": ["x": 1]]]]]),
                put("c8", "i8", ["checklist": [["id": nil]]]),
                put("c9", "i9", ["plan": ["steps": [["n": 7], ["n": 7]]]]),
                put("c10", "i10", ["checklist": []]),
            ])
            #expect(results.map(\.status) == [.applied, .rejected, .rejected, .rejected, .rejected, .rejected, .rejected, .rejected, .rejected, .applied])
            let refusals = results.compactMap(\.error)
            #expect(refusals.allSatisfy { $0.code == "invalid_change" }, "\(refusals)")
            #expect(refusals.map { $0.details?["path"]?.stringValue } == [
                "/checklist", "/checklist/1", "/checklist/1", "/checklist/1/id", "/checklist/2/id", "/plan/steps/0/n", "/checklist/0/id",
                "/plan/steps/1/n",
            ])
            #expect(refusals.allSatisfy { $0.details?["kind"]?.stringValue == "list" }, "\(refusals)")
            let reasons = refusals.map { $0.details?["reason"]?.stringValue ?? "" }
            #expect(reasons[0].contains("array of objects") && reasons[1].contains("must be an object"), "\(reasons)")
            #expect(reasons[2].contains(#"no member "id""#) && reasons[3].contains("a string or a number"), "\(reasons)")
            #expect(reasons[4].contains("repeats the key of /checklist/0"), "\(reasons)")
            #expect(refusals[4].message.contains("data at /checklist/2/id"), "\(refusals[4].message)")
            // Nothing refused was stored; the page serves the declaration in its object form.
            let page = try await http.pull(s, t)
            #expect(page.changes.map(\.id).sorted() == ["i1", "i10"])
            #expect(page.fields?.kinds(of: "inspections")["checklist"] == .list(key: "id"))
            #expect(page.fields?.kinds(of: "inspections")["plan.steps"] == .list(key: "n"))
        }
    }
}
