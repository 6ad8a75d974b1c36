import OutpostCore
@testable import OutpostRules
import Testing

/// The trace of an evaluation (`RuleExpression.traced(in:)`, what the admin console's
/// explanation shows): it is the evaluation itself, so its value is the verdict's, each
/// step's value is its sub-expression's, and it holds only what the evaluation read.
@Suite struct RuleTraceTests {
    static func json(_ text: String) -> JSONValue {
        try! JSONParser().parse(text)
    }

    @Test func aComparisonShowsTheValuesItRead() throws {
        let rule = try RuleExpression("data.team == auth.team || 'lead' in auth.roles")
        let context = RuleExpression.Context(auth: Self.json(#"{"team":"south","roles":["worker"]}"#).objectValue!,
                                             data: Self.json(#"{"team":"north"}"#), prev: .null, op: "", collection: "jobs", id: "j1")
        let (value, trace) = rule.traced(in: context)
        #expect(value == .bool(false) && !rule.admits(context))
        #expect(trace.steps.map(\.expression) == ["data.team == auth.team || \"lead\" in auth.roles", "data.team == auth.team", "data.team", "auth.team",
                                                  "\"lead\" in auth.roles", "\"lead\"", "auth.roles"])
        #expect(trace.steps.map(\.depth) == [0, 1, 2, 2, 1, 2, 2])
        #expect(trace.steps[1].compared == #""north" == "south""# && trace.steps[1].value == .bool(false))
        #expect(trace.steps[4].compared == #""lead" in ["worker"]"# && trace.steps[6].value == Self.json(#"["worker"]"#))
    }

    /// What an operator did not need is not evaluated, so it is not in the trace.
    @Test func whatTheEvaluationSkippedHasNoStep() throws {
        let context = RuleExpression.Context(auth: [:], data: .null, prev: .null, op: "put", collection: "c", id: "i")
        #expect(try RuleExpression("false && data.x").traced(in: context).trace.steps.map(\.expression) == ["false && data.x", "false"])
        #expect(try RuleExpression("true || data.x").traced(in: context).trace.steps.count == 2)
        #expect(try RuleExpression("op == 'put' ? true : data.x").traced(in: context).trace.steps.map(\.expression)
                == [#"op == "put" ? true : data.x"#, #"op == "put""#, "op", #""put""#, "true"])
    }

    /// A comparison of large values keeps only the start of each side.
    @Test func aLargeComparedValueIsCut() throws {
        let big = JSONValue.string(String(repeating: "x", count: 100_000))
        let context = RuleExpression.Context(auth: ["blob": big], data: .object(["blob": big]), prev: .null, op: "put", collection: "c", id: "i")
        let (value, trace) = try RuleExpression("data.blob == auth.blob").traced(in: context)
        let compared = try #require(trace.steps[0].compared)
        #expect(value == .bool(true) && compared.utf8.count < 2 * RuleExpression.Trace.maxComparedBytes + 20 && compared.contains("… == "))
    }

    /// Random expressions (fixed seed) over random contexts: the traced value is the
    /// untraced one and the verdict's; every step's text parses again to a sub-expression
    /// whose value, evaluated alone, is the step's value; the whole text parses to the same tree.
    @Test func theTraceIsTheEvaluationOnRandomExpressions() throws {
        var random = SplitMix64(seed: 50_2026)
        var checked = 0
        for _ in 0..<400 {
            let source = Self.expression(depth: 4, &random)
            let rule: RuleExpression
            do { rule = try RuleExpression(source) } catch { continue }  // an `in` over a string, refused by the parser
            #expect(try RuleExpression(rule.root.text).root.text == rule.root.text, "\(source)")
            for _ in 0..<4 {
                let context = Self.context(&random)
                let (value, trace) = rule.traced(in: context)
                #expect(value == rule.value(in: context) && rule.admits(context) == RuleExpression.isTrue(value), "\(source)")
                #expect(trace.steps.first?.depth == 0 && trace.steps.first?.value == value, "\(source)")
                for step in trace.steps {
                    let alone = try RuleExpression(step.expression)
                    #expect(alone.value(in: context) == step.value, "\(step.expression) in \(source)")
                }
                checked += 1
            }
        }
        #expect(checked > 1000)
    }

    static let atoms = ["data.team", "auth.team", "data.level", "auth.level", "data.tags", "auth.roles", "prev.owner", "auth.sub", "data.owner",
                        "op", "id", "collection", "data.missing.deeper", "'north'", "'lead'", "2", "3.5", "true", "false", "null", "data", "prev"]
    static let operators = ["==", "!=", "<", "<=", ">", ">=", "in", "&&", "||"]

    static func expression(depth: Int, _ random: inout SplitMix64) -> String {
        if depth == 0 || random.next() % 4 == 0 { return atoms[Int(random.next() % UInt64(atoms.count))] }
        switch random.next() % 6 {
        case 0: return "!" + expression(depth: depth - 1, &random)
        case 1: return "(" + expression(depth: depth - 1, &random) + " ? " + expression(depth: depth - 1, &random) + " : " + expression(depth: depth - 1, &random) + ")"
        default:
            let op = operators[Int(random.next() % UInt64(operators.count))]
            return "(" + expression(depth: depth - 1, &random) + " \(op) " + expression(depth: depth - 1, &random) + ")"
        }
    }

    static func context(_ random: inout SplitMix64) -> RuleExpression.Context {
        func pick<T>(_ items: [T]) -> T { items[Int(random.next() % UInt64(items.count))] }
        let teams: [JSONValue] = ["north", "south", .null, 3]
        var data = JSONObject(), auth = JSONObject()
        data["team"] = pick(teams)
        data["level"] = pick([1, 2, 3.5, "2", .null] as [JSONValue])
        data["tags"] = pick([["north"], ["south", "north"], [], "north"] as [JSONValue])
        data["owner"] = pick(["ann", "bo"] as [JSONValue])
        auth["team"] = pick(teams)
        auth["level"] = pick([2, 3, 5] as [JSONValue])
        auth["roles"] = pick([[], ["lead"], ["worker", "lead"]] as [JSONValue])
        auth["sub"] = pick(["ann", "bo"] as [JSONValue])
        let prev: JSONValue = random.next() % 3 == 0 ? .null : .object(["owner": pick(["ann", "bo"] as [JSONValue])])
        return RuleExpression.Context(auth: auth, data: .object(data), prev: prev, op: pick(["put", "delete"]), collection: "jobs", id: pick(["j1", "north"]))
    }
}
