import Foundation
import Testing
@testable import OutpostCore

@Suite struct JSONNumberTests {
    @Test(arguments: [
        ("0", Int64?(0)), ("-0", 0), ("42", 42), ("1.0", 1), ("1e3", 1000), ("4.20e1", 42), ("100e-2", 1),
        ("0.000", 0), ("0e999999999999", 0), ("-1.5e1", -15), ("1.5", nil), ("1e-1", nil), ("0.5e1", 5),
        ("9223372036854775807", Int64.max), ("9223372036854775808", nil), ("-9223372036854775808", Int64.min),
        ("-9223372036854775809", nil), ("92233720368547758.07e2", Int64.max), ("1e18", 1_000_000_000_000_000_000),
        ("1e19", nil), ("1e999999999999", nil), ("12345678901234567890", nil), ("00001", nil),
    ])
    func int64Value(_ lexeme: String, _ expected: Int64?) throws {
        guard lexeme != "00001" else {
            #expect(JSONNumber(lexeme: lexeme) == nil)
            return
        }
        let number = try #require(JSONNumber(lexeme: lexeme))
        #expect(number.int64Value == expected)
        #expect(number.lexeme == lexeme)
        #expect(try JSONParser.parse(lexeme).numberValue == number)
    }

    @Test func doubleValue() throws {
        #expect(JSONNumber(lexeme: "1.5")?.doubleValue == 1.5)
        #expect(JSONNumber(lexeme: "-122.026020")?.doubleValue == -122.02602)
        #expect(JSONNumber(lexeme: "1e400")?.doubleValue == .infinity)
        #expect(JSONNumber(lexeme: "-1e400")?.doubleValue == -.infinity)
        #expect(JSONNumber(lexeme: "1e-400")?.doubleValue == 0)
        #expect(JSONNumber(lexeme: "12345678901234567890")?.doubleValue == 12345678901234567890.0)
        #expect(JSONNumber(lexeme: "0.1")?.doubleValue == 0.1)
        #expect(JSONNumber(7).doubleValue == 7)
    }

    @Test func lexemesFromSwiftValues() {
        #expect(JSONNumber(1.0).lexeme == "1.0")
        #expect(JSONNumber(0.1).lexeme == "0.1")
        #expect(JSONNumber(1e-5).lexeme == "1e-05")
        #expect(JSONNumber(-0.0).lexeme == "-0.0")
        #expect(JSONNumber(Double.greatestFiniteMagnitude).doubleValue == .greatestFiniteMagnitude)
        #expect(JSONNumber(Int64(-42)).lexeme == "-42")
        #expect(JSONNumber(-42 as Int).lexeme == "-42")
        let literal: JSONNumber = 2.5
        #expect(literal.lexeme == "2.5")
        for bad in ["", " 1", "1 ", "01", "+1", "1.", ".5", "NaN", "-", "1e", "0x1", "1,0", "--1", "inf"] {
            #expect(JSONNumber(lexeme: bad) == nil, "\(bad)")
        }
    }

    @Test func equalityIsByLexeme() {
        #expect(JSONNumber(lexeme: "5") == JSONNumber(5))
        #expect(JSONNumber(lexeme: "5")!.hashValue == JSONNumber(5).hashValue)
        #expect(JSONNumber(lexeme: "-0") != JSONNumber(0))
        #expect(JSONNumber(lexeme: "1.0") != JSONNumber(1))
        #expect(JSONNumber(lexeme: "1.0")!.int64Value == JSONNumber(1).int64Value)
        #expect(JSONNumber(lexeme: "1.0")!.isIntegerLexeme == false)
        #expect(JSONNumber(lexeme: "12345678901234567890")!.isIntegerLexeme)
    }
}

@Suite struct JSONObjectTests {
    @Test func keepsOrderAndMutatesInPlace() {
        var todo: JSONObject = ["title": "Buy milk", "done": false]
        todo["done"] = true
        todo["due"] = 1_764_430_000_000
        #expect(todo.keys == ["title", "done", "due"])
        #expect(todo["done"] == true)
        todo["title"] = nil
        #expect(todo.keys == ["done", "due"])
        #expect(todo.removeValue(forKey: "due") == 1_764_430_000_000)
        #expect(todo.removeValue(forKey: "due") == nil)
        #expect(todo.count == 1)
        #expect(todo.map(\.key) == ["done"])
        #expect(todo[0].key == "done")
        #expect(!todo.isEmpty && JSONObject().isEmpty)
    }

    @Test func keysCompareByBytes() {
        var object = JSONObject()
        object["é"] = 1
        object["e\u{301}"] = 2  // canonically equivalent to "é" in Swift, but other bytes
        #expect(object.count == 2)
        #expect(object["é"] == 1 && object["e\u{301}"] == 2)
        #expect(JSONValue.string("é") != .string("e\u{301}"))
        #expect(Set([JSONValue.string("é"), .string("e\u{301}")]).count == 2)
    }

    @Test func largeObjectsIndexAcrossMutations() {
        var object = JSONObject((0..<100).map { ("k\($0)", JSONValue.number(JSONNumber($0))) })
        #expect(object["k73"] == 73)
        object["k50"] = nil
        #expect(object["k50"] == nil && object["k51"] == 51 && object["k99"] == 99 && object.count == 99)
        object["k50"] = "back"
        #expect(object.keys.last == "k50" && object["k50"] == "back")
        for index in 0..<95 where index != 50 { object["k\(index)"] = nil }
        #expect(object.keys == ["k95", "k96", "k97", "k98", "k99", "k50"])
        #expect(object["k97"] == 97)
    }

    @Test func equalityAndHashIgnoreOrder() {
        let a: JSONValue = ["x": 1, "y": [1, 2], "z": ["p": nil, "q": true]]
        let b: JSONValue = ["z": ["q": true, "p": nil], "y": [1, 2], "x": 1]
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
        #expect(a != ["x": 1, "y": [2, 1], "z": ["p": nil, "q": true]])
        #expect(a != ["x": 1, "y": [1, 2]])
        #expect(JSONValue.object(["a": 1]) != .object(["b": 1]))
        #expect(JSONValue.array([]) != .object([:]))
        #expect(JSONValue.null != false)
        #expect(JSONValue.string("1") != 1)
    }

    @Test func accessors() throws {
        let value: JSONValue = ["s": "t", "n": 3, "d": 2.5, "b": true, "z": nil, "a": [1], "o": ["k": "v"]]
        #expect(value["s"]?.stringValue == "t")
        #expect(value["n"]?.int64Value == 3 && value["d"]?.int64Value == nil)
        #expect(value["d"]?.doubleValue == 2.5)
        #expect(value["b"]?.boolValue == true)
        #expect(value["z"]?.isNull == true && value["s"]?.isNull == false)
        #expect(value["a"]?.arrayValue == [1])
        #expect(value["a"]?[0] == 1 && value["a"]?[1] == nil && value["a"]?[-1] == nil)
        #expect(value["o"]?.objectValue?["k"] == "v")
        #expect(value["missing"] == nil && value["s"]?["x"] == nil)
        #expect(value["s"]?.objectValue == nil && value["s"]?.arrayValue == nil && value["s"]?.boolValue == nil)
        #expect(value.description == #"{"s":"t","n":3,"d":2.5,"b":true,"z":null,"a":[1],"o":{"k":"v"}}"#)
    }
}

@Suite struct JSONCodableTests {
    struct Todo: Codable, Equatable {
        var title: String
        var done: Bool
        var tags: [String]
        var rank: Double
        var due: Int64?
        var extra: JSONValue
    }

    @Test func jsonValueInsideCodableStructs() throws {
        let todo = Todo(title: "Buy milk", done: false, tags: ["a"], rank: 1.5, due: 1_764_430_000_000,
                        extra: ["n": 7, "big": .number(JSONNumber(lexeme: "18446744073709551615")!), "f": 0.25,
                                "list": [nil, true, "x"], "nested": ["deep": [:]]])
        let encoded = try JSONEncoder().encode(todo)
        let decoded = try JSONDecoder().decode(Todo.self, from: encoded)
        #expect(decoded == todo)
        #expect(decoded.extra["big"]?.numberValue?.lexeme == "18446744073709551615")
        #expect(decoded.extra["n"]?.numberValue?.lexeme == "7")
        #expect(decoded.extra["f"]?.doubleValue == 0.25)
    }

    @Test func encodingAndDecodingHelpers() throws {
        let todo = Todo(title: "Ünïcode \"q\"", done: true, tags: [], rank: -0.5, due: nil, extra: nil)
        let value = try JSONValue(encoding: todo)
        #expect(value["title"] == "Ünïcode \"q\"")
        #expect(value["done"] == true)
        #expect(value["rank"]?.doubleValue == -0.5)
        #expect(try value.decode(Todo.self) == todo)
        let typed: Todo = try value.decode()
        #expect(typed == todo)
        #expect(throws: (any Error).self) { try JSONValue.object(["title": 1]).decode(Todo.self) }
        #expect(try JSONValue(encoding: [1, 2, 3]) == [1, 2, 3])
        #expect(try JSONValue(encoding: "x") == "x")
    }

    @Test func parsesFoundationData() throws {
        #expect(try JSONParser().parse(Data("[1]".utf8)) == [1])
    }
}
