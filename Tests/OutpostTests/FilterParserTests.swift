import Foundation
import OutpostCore
import Testing
@testable import Outpost

/// `QueryFilter(parsing:)`: filters written as text (Records/FilterParser.swift) parse to the
/// filters the Swift operators build, and bad text fails with the character it fails at.
@Suite("Filter parser")
struct FilterParserTests {
    static let f = QueryFields()

    static func parse(_ text: String) throws -> QueryFilter { try QueryFilter(parsing: text) }

    /// The message of the error parsing `text` throws.
    static func failure(_ text: String) -> String? {
        do {
            _ = try QueryFilter(parsing: text)
            return nil
        } catch let OutpostError.invalidQuery(message) {
            return message
        } catch {
            return "not an invalidQuery: \(error)"
        }
    }

    static let constructs: [(String, QueryFilter)] = [
        (#"status == "open""#, f.status == "open"),
        (#"status = "open""#, f.status == "open"),
        (#"status != "open""#, f.status != "open"),
        ("priority < 3", f.priority < 3),
        ("priority <= 3", f.priority <= 3),
        ("priority > 3", f.priority > 3),
        ("priority >= -3", f.priority >= -3),
        ("score == 2.5", f.score == 2.5),
        ("done == true", f.done == true),
        ("done == FALSE", f.done == false),
        ("site.name == null", f.site.name == nil),
        (#"status in ["open", "review"]"#, f.status.isIn(["open", "review"])),
        ("priority IN [1]", f.priority.isIn([1])),
        (#"tags contains "roof""#, f.tags.contains("roof")),
        ("tags contains 3", f.tags.contains(3)),
        (#"site.name startsWith "North""#, f.site.name.hasPrefix("North")),
        (#"site.name STARTSWITH "North""#, f.site.name.hasPrefix("North")),
        ("site.city is null", f.site.city.isNull),
        ("site.city is missing", f.site.city.isMissing),
        ("site.city IS NOT NULL", !f.site.city.isNull),
        ("site.city is not missing", !f.site.city.isMissing),
        ("pending", .isPending),
        ("Pending", .isPending),
        ("pending == true", f.pending == true),
        ("not pending", !QueryFilter.isPending),
        (#"!(status == "open")"#, !(f.status == "open")),
        (#"dueDate < date("2026-12-07T10:00:00Z")"#, f.dueDate < .date(Date(timeIntervalSince1970: 1_796_637_600))),
        (#"dueDate >= date("2026-12-07T12:00:00.5+02:00")"#, f.dueDate >= .date(Date(timeIntervalSince1970: 1_796_637_600.5))),
        (#"dueDate == date("2026-12-07")"#, f.dueDate == .date(Date(timeIntervalSince1970: 1_796_601_600))),
        ("`a.b` == 1", QueryField(path: ["a.b"]) == 1),
        ("`we``ird`.x == 1", QueryField(path: ["we`ird", "x"]) == 1),
        ("`not` == 1", f["not"] == 1),
        ("site.in == 1", f.site["in"] == 1),
        ("_x9.Y_ == 1", QueryField(path: ["_x9", "Y_"]) == 1),
        ("a==1&&b==2", f.a == 1 && f.b == 2),
        ("a==1||b==2", f.a == 1 || f.b == 2),
        ("a == 1 AND b == 2", f.a == 1 && f.b == 2),
        ("a == 1 Or b == 2", f.a == 1 || f.b == 2),
        ("  a\t==\n1  ", f.a == 1),
    ]

    @Test(arguments: constructs.indices)
    func everyConstructParsesToTheFilterTheOperatorsBuild(_ i: Int) throws {
        let (text, built) = Self.constructs[i]
        #expect(try Self.parse(text) == built, "\(text)")
    }

    @Test func valuesAreJSONLiteralsAndNumbersKeepTheirText() throws {
        let f = Self.f
        #expect(try Self.parse(#"s == "a\"b\\c\/d\b\f\n\r\t""#) == (f.s == .string("a\"b\\c/d\u{08}\u{0C}\n\r\t")))
        #expect(try Self.parse(#"s == "\u00e9\u20AC\ud83d\ude00""#) == (f.s == "é€😀"))
        #expect(try Self.parse(#"s == "Zürich 😀""#) == (f.s == "Zürich 😀"))
        #expect(try Self.parse("n == 1.50") == (f.n == .json(.number(JSONNumber(lexeme: "1.50")!))))
        #expect(try Self.parse("n == 1e400") == (f.n == .json(.number(JSONNumber(lexeme: "1e400")!))))
        #expect(try Self.parse("n == -0") == (f.n == .json(.number(JSONNumber(lexeme: "-0")!))))
        #expect(try Self.parse("n == 12345678901234567890") == (f.n == .json(.number(JSONNumber(lexeme: "12345678901234567890")!))))
        #expect(try Self.parse("n == 7") == (f.n == 7), "an integer is the same value as .int")
    }

    @Test func andBindsTighterThanOrAndNotTighterThanBoth() throws {
        let (a, b, c) = (Self.f.a == 1, Self.f.b == 2, Self.f.c == 3)
        #expect(try Self.parse("a == 1 or b == 2 and c == 3") == (a || (b && c)))
        #expect(try Self.parse("a == 1 and b == 2 or c == 3") == ((a && b) || c))
        #expect(try Self.parse("(a == 1 or b == 2) and c == 3") == ((a || b) && c))
        #expect(try Self.parse("not a == 1 and b == 2") == (!a && b))
        #expect(try Self.parse("not (a == 1 and b == 2)") == !(a && b))
        #expect(try Self.parse("!!a == 1") == !(!a))
        #expect(try Self.parse("((a == 1))") == a)
    }

    /// A chain of `and`s (or `or`s) is one `all` (`any`): long chains are not deep nesting.
    @Test func chainsAreOneGroupAndParenthesesKeepTheirShape() throws {
        let (a, b, c) = (Self.f.a == 1, Self.f.b == 2, Self.f.c == 3)
        #expect(try Self.parse("a == 1 and b == 2 and c == 3") == .all([a, b, c]))
        #expect(try Self.parse("a == 1 or b == 2 || c == 3") == .any([a, b, c]))
        #expect(try Self.parse("(a == 1 and b == 2) and c == 3") == (a && b && c), "Swift's && nests pairs, as parentheses do")
        #expect(try Self.parse("a == 1 and (b == 2 and c == 3)") == (a && (b && c)))
        let many = (0..<500).map { "a == \($0)" }.joined(separator: " or ")
        #expect(try Self.parse(many) == .any((0..<500).map { Self.f.a == .int(Int64($0)) }))
    }

    /// A filter parsed from text and the same filter built in Swift match the same records.
    @Test func aParsedFilterFetchesWhatTheBuiltOneFetches() async throws {
        let store = try OutpostStore.inMemory(configuration: .init(space: "team"))
        let todos = store.collection("todos", of: JSONValue.self)
        for i in 0..<12 {
            let site: JSONValue = i % 3 == 0 ? .null : ["name": .string(i % 2 == 0 ? "North" : "South")]
            let tags: JSONValue = i % 4 == 0 ? ["roof"] : []
            try await store.put(["n": .number(JSONNumber(i)), "site": site, "tags": tags], in: "todos", id: "t\(i)")
        }
        let text = #"(n >= 3 and n < 10 or tags contains "roof") and not site is null and site.name startsWith "N""#
        let f = Self.f
        let built = (f.n >= 3 && f.n < 10 || f.tags.contains("roof")) && !f.site.isNull && f.site.name.hasPrefix("N")
        let parsed = try await todos.filter(Self.parse(text)).fetch().map(\.id)
        #expect(parsed == (try await todos.filter(built).fetch().map(\.id)))
        #expect(parsed == ["t4", "t8"])
        // The deepest filter the parser takes runs too.
        let deep = String(repeating: "not ", count: QueryFilter.maxDepth - 1) + "n == 1"
        #expect(try await todos.filter(Self.parse(deep)).count() == 11)
        var groups = "n == 1"
        for _ in 0..<(QueryFilter.maxDepth / 2 - 1) { groups = "n >= 0 and (n == 2 or \(groups))" }
        #expect(try await todos.filter(Self.parse(groups)).fetch().map(\.id) == ["t1", "t2"])
        await store.close()
    }

    @Test(arguments: [
        ("status ==", #"at character 10: expected a value (a string, number, true, false, null or date("…")), found the end"#),
        (#"status == "open" and"#, "at character 21: expected a field, \"not\", \"(\" or \"pending\", found the end"),
        ("status", "at character 7: expected an operator (==, !=, <, <=, >, >=, in, contains, startsWith, is) after the field status at character 1, found the end"),
        ("a == 1)", #"at character 7: expected "and", "or" or the end, found ")""#),
        ("a == 1 b == 2", #"at character 8: expected "and", "or" or the end, found "b""#),
        ("(a == 1", #"at character 8: expected ")" to close the "(" at character 1, found the end"#),
        ("a === 1", #"at character 5: expected a value (a string, number, true, false, null or date("…")), found "=""#),
        ("a == 01", #"at character 6: "01" is not a JSON number"#),
        ("a == 1.", #"at character 6: "1." is not a JSON number"#),
        ("a == -", #"at character 6: "-" is not a JSON number"#),
        (#"a == "open"#, "at character 6: the string has no closing quote"),
        (#"a == "x\qy""#, #"at character 8: invalid escape "\q" in a string"#),
        (#"a == "\u12""#, #"at character 7: \u takes four hexadecimal digits"#),
        (#"a == "\udc00""#, "at character 7: a lone low surrogate in a string"),
        (#"a == "\ud83d""#, "at character 7: a high surrogate must be followed by a low one"),
        ("a == \"tab\there\"", "at character 10: a control character in a string must be escaped"),
        ("a == 1 & b == 2", #"at character 8: expected "&&""#),
        ("a == 1 | b == 2", #"at character 8: expected "||""#),
        ("a == 1 and % b", #"at character 12: unexpected character "%""#),
        ("`a == 1", "at character 1: the name has no closing backquote"),
        ("`` == 1", "at character 1: the field \"\" has an empty or too long member name"),
        (#"`a"b` == 1"#, #"at character 1: the field "a"b" has a member name with a double quote or a control character"#),
        ("and == 1", "at character 1: \"and\" is a keyword: write a field of that name in backquotes (`and`)"),
        ("a. == 1", #"at character 4: expected a field name after ".", found "==""#),
        ("a in 1", #"at character 6: expected "[" after "in", found 1"#),
        ("a in []", #"at character 7: expected a value (a string, number, true, false, null or date("…")), found "]""#),
        ("a in [1, 2", #"at character 11: expected "," or "]", found the end"#),
        ("a startsWith 3", #"at character 14: expected a string after "startsWith", found 3"#),
        ("a is maybe", #"at character 6: expected "null" or "missing" after "is", found "maybe""#),
        ("a is not 3", #"at character 10: expected "null" or "missing" after "is not", found 3"#),
        ("a < date(1)", #"at character 10: expected an RFC 3339 date in quotes, as in date("2026-12-07T10:00:00Z"), found 1"#),
        (#"a < date("yesterday")"#, #"at character 10: "yesterday" is not an RFC 3339 date and time (2026-12-07T10:00:00Z) or date (2026-12-07)"#),
        (#"a < date "2026-12-07""#, #"at character 10: expected "(" after "date", found a string"#),
        ("a < pending", #"at character 5: expected a value (a string, number, true, false, null or date("…")), found "pending""#),
        ("pending.x", "at character 10: expected an operator (==, !=, <, <=, >, >=, in, contains, startsWith, is) after the field pending.x at character 1, found the end"),
        ("", #"at character 1: expected a field, "not", "(" or "pending", found the end"#),
    ])
    func badTextFailsAtItsCharacter(_ text: String, _ message: String) {
        #expect(Self.failure(text) == message, "\(text)")
    }

    /// Positions count characters as an editor shows them: a letter with a combining accent
    /// is one.
    @Test func positionsCountCharactersNotScalars() {
        let text = "a == \"e\u{301}\" and b =="
        #expect(text.count == 17 && text.unicodeScalars.count == 18)
        #expect(Self.failure(text)?.hasPrefix("at character 18: expected a value") == true, "\(Self.failure(text) ?? "")")
    }

    @Test func textAndNestingAreLimited() throws {
        let longest = "a == \"" + String(repeating: "x", count: FilterParser.maxLength - 7) + "\""
        #expect(longest.count == 10_000)
        #expect(try Self.parse(longest) == (Self.f.a == .string(String(repeating: "x", count: 9_993))))
        #expect(Self.failure(longest + " ") == "a filter is at most 10000 characters")

        func parenthesized(_ depth: Int) -> String { String(repeating: "(", count: depth) + "a == 1" + String(repeating: ")", count: depth) }
        #expect(try Self.parse(parenthesized(20)) == (Self.f.a == 1))
        #expect(Self.failure(parenthesized(21)) == "at character 21: a filter nests at most 20 levels")
        #expect(Self.failure(String(repeating: "(", count: 100_000)) == "a filter is at most 10000 characters")

        // The filter's own nesting: 19 `not`s over a comparison is 20 levels.
        #expect(try Self.parse(String(repeating: "not ", count: 19) + "a == 1") == (0..<19).reduce(Self.f.a == 1) { f, _ in !f })
        #expect(Self.failure(String(repeating: "not ", count: 20) + "a == 1") == "at character 1: a filter nests at most 20 levels")
        // Groups nest too: 10 levels of an `or` inside an `and` is 21.
        var nested = "a == 1"
        for _ in 0..<10 { nested = "a == 1 and (a == 2 or \(nested))" }
        #expect(Self.failure(nested) == "at character 1: a filter nests at most 20 levels")
        var fits = "a == 1"
        for _ in 0..<9 { fits = "a == 1 and (a == 2 or \(fits))" }
        #expect((try? Self.parse(fits)) != nil)
    }
}
