import OutpostCore
@testable import OutpostRules
import Testing

/// The rules language (docs/rules.md): every operator, null for missing paths, numbers by
/// value, and parse errors with their line, column and reason.
@Suite struct RuleExpressionTests {
    static func json(_ text: String) -> JSONValue {
        try! JSONParser().parse(text)
    }

    static let worker = RuleExpression.Context(
        auth: json(#"{"sub":"ann","roles":["worker"],"level":3}"#).objectValue!,
        data: json(#"{"title":"Fix pump","assignee":"ann","status":"open","hours":2.0,"tags":["urgent","site-4"],"site":{"name":"North"}}"#),
        prev: .null, op: "put", collection: "jobs", id: "j1")

    static let table: [(String, Bool)] = [
        ("true", true),
        ("false", false),
        ("null", false),
        ("data.assignee == auth.sub", true),
        ("data.assignee != auth.sub", false),
        ("'supervisor' in auth.roles", false),
        ("'worker' in auth.roles", true),
        ("data.assignee == auth.sub || 'supervisor' in auth.roles", true),
        ("data.assignee == auth.sub && 'supervisor' in auth.roles", false),
        ("prev == null", true),
        ("prev.assignee == null", true),
        ("data.missing.deeper == null", true),
        ("auth.level >= 3 && auth.level < 4", true),
        ("auth.level > 3", false),
        ("data.hours == 2", true),
        ("data.hours <= 1.5", false),
        ("data.hours > 1e0", true),
        ("-1 < 0", true),
        ("'abc' < 'abd'", true),
        ("'b' < 'a'", false),
        ("'2' < 10", false),
        // `in` is list membership only: a string on the right is never searched.
        ("'pump' in data.title", false),
        ("'Fix pump' in data.title", false),
        ("'' in data.title", false),
        ("'site-4' in data.tags", true),
        ("data.site.name == 'North'", true),
        ("data.site == data.site", true),
        ("!(data.status == 'done')", true),
        ("!!true", true),
        ("!data.title", true),
        ("op == 'delete' ? false : data.status == 'open'", true),
        ("op == 'put' ? collection == 'jobs' && id == 'j1' : false", true),
        ("data.status == 'open' ? 'yes' : 'no'", false),
        ("(true || false) && !(false)", true),
        ("true || false && false", true),
        ("1 == 1 == true", true),
        ("'it\\'s' == \"it's\"", true),
    ]

    @Test func theTableEvaluatesAsDocumented() throws {
        for (source, expected) in Self.table {
            let expression = try RuleExpression(source)
            #expect(expression.admits(Self.worker) == expected, "\(source)")
        }
    }

    @Test func onlyExactlyTrueAdmits() throws {
        #expect(try RuleExpression("data.status == 'open' ? 'yes' : 'no'").value(in: Self.worker) == .string("yes"))
        #expect(try !RuleExpression("data.title").admits(Self.worker))
        #expect(try !RuleExpression("1").admits(Self.worker))
    }

    @Test func parseErrorsSayWhereAndWhy() {
        let cases: [(String, Int, Int, String)] = [
            ("", 1, 1, "empty"),
            ("data.assignee = auth.sub", 1, 15, "'=='"),
            ("data.assignee ==", 1, 17, "expected a value"),
            ("user.name == 'x'", 1, 1, "unknown name 'user'"),
            ("op.kind == 'x'", 1, 1, "has no fields"),
            ("(true", 1, 6, "expected ')'"),
            ("true ? 1", 1, 9, "expected ':'"),
            ("'open", 1, 1, "not closed"),
            ("true\n && data.x ==\n  #", 3, 3, "unexpected character '#'"),
            ("data.", 1, 6, "field name"),
            ("true false", 1, 6, "unexpected 'false'"),
            ("'a\\q'", 1, 3, "unknown escape"),
            ("'super' in 'supervisor'", 1, 12, "always a string"),
            ("auth.sub in id", 1, 13, "not a substring test"),
            ("'p' in (data.x ? op : collection)", 1, 8, "always a string"),
        ]
        for (source, line, column, reason) in cases {
            do {
                _ = try RuleExpression(source)
                Issue.record("\(source) parsed")
            } catch {
                #expect(error.line == line && error.column == column, "\(source): \(error)")
                #expect(error.reason.contains(reason), "\(source): \(error)")
            }
        }
    }

    @Test func sizeAndDepthAreBounded() throws {
        #expect(throws: RuleExpression.ParseError.self) { try RuleExpression(String(repeating: "(", count: 100) + "true" + String(repeating: ")", count: 100)) }
        #expect(throws: RuleExpression.ParseError.self) { try RuleExpression(String(repeating: "!", count: 100) + "true") }
        #expect(throws: RuleExpression.ParseError.self) { try RuleExpression("'" + String(repeating: "a", count: RuleExpression.maxLength) + "'") }
        let wide = Array(repeating: "data.assignee == auth.sub", count: 100).joined(separator: " || ")
        #expect(try RuleExpression(wide).admits(Self.worker))
    }

    /// Binding the token's claims gives the same value in every context with those claims,
    /// and leaves nothing of `auth` behind.
    @Test func bindingTheClaimsKeepsEveryValue() throws {
        let sources = [
            "data.assignee == auth.sub || 'supervisor' in auth.roles",
            "'supervisor' in auth.roles || (op == 'put' && data.assignee == auth.sub && (prev == null || prev.assignee == auth.sub))",
            "auth.level > 2 ? data.open : !data.open",
            "auth.team in data.teams && data.n >= auth.level",
            "!(auth.sub == 'w1') || data.x",
            "auth.missing == null && data.a != auth.sub",
            "auth.roles",
        ]
        let claims: [JSONObject] = [
            ["sub": "w1", "roles": [], "level": 1, "team": "north"],
            ["sub": "boss", "roles": ["supervisor"], "level": 3, "team": "south"],
            ["sub": "w2"],
        ]
        let records: [JSONValue] = [
            .object(["assignee": "w1", "open": true, "teams": ["north"], "n": 2, "x": true, "a": "w1"]),
            .object(["assignee": "w2", "open": false, "teams": [], "n": 0, "x": 1]),
            .null,
        ]
        for source in sources {
            let rule = try RuleExpression(source)
            for auth in claims {
                let bound = rule.binding(.auth, to: .object(auth))
                #expect(bound.paths(from: .auth).isEmpty, "\(source) bound still reads auth")
                for data in records {
                    for prev in records {
                        let context = RuleExpression.Context(auth: auth, data: data, prev: prev, op: "put", collection: "jobs", id: "j")
                        #expect(RuleExpression.equal(bound.value(in: context), rule.value(in: context)), "\(source) with \(auth), \(data), \(prev)")
                    }
                }
            }
        }
        let read = try RuleExpression("data.assignee == auth.sub || 'supervisor' in auth.roles")
        #expect(read.binding(.auth, to: .object(["sub": "boss", "roles": ["supervisor"]])).literalValue == .bool(true))
        #expect(read.binding(.auth, to: .object(["sub": "w1", "roles": []])).paths(from: .data) == [["assignee"]])
    }
}
