import Testing
@testable import OutpostCore

@Suite struct JSONMembersTests {
    @Test func picksTheNamedMembersAndStepsOverTheRest() throws {
        let text = #"{"a":{"x":[1,{"y":"}]"}]},"b\"q":"he said \"hi\" \\","assignee":"w1","n":-1.5e3,"t":true,"z":null,"list":["a","b"]}"#
        let picked = try #require(JSONMembers.pick(["assignee", "n", "list", "b\"q", "missing"], from: Array(text.utf8)))
        #expect(picked["assignee"] == "w1")
        guard case .number(let n)? = picked["n"] else { Issue.record("n is \(String(describing: picked["n"]))"); return }
        #expect(n.doubleValue == -1500)
        #expect(picked["list"] == ["a", "b"])
        #expect(picked["b\"q"] == .string(#"he said "hi" \"#))
        #expect(picked["missing"] == nil && picked["a"] == nil && picked.count == 4)
        // The same as a full parse for every member.
        let all = try #require(JSONParser.parse(Array(text.utf8)).objectValue)
        #expect(JSONMembers.pick(Set(all.keys), from: Array(text.utf8)) == all)
        #expect(JSONMembers.pick(["a"], from: Array(" { } ".utf8)) == JSONObject())
    }

    @Test func whatIsNotAnObjectPicksNothing() {
        #expect(JSONMembers.pick(["a"], from: Array("[1,2]".utf8)) == nil)
        #expect(JSONMembers.pick(["a"], from: Array(#"{"a":tru"#.utf8)) == nil)
        #expect(JSONMembers.pick(["a"], from: Array(#"{"a"#.utf8)) == nil)
    }
}
