import Foundation
import Testing
@testable import OutpostCore

/// Random JSON values from a seeded generator.
struct JSONValueGenerator {
    var random: SplitMix64

    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &random) }

    mutating func string() -> String {
        let pieces: [String] = ["a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\u{0}", "\u{1F}", "\u{7F}", "é",
                                "e\u{301}", "€", "\u{FFFF}", "😀", "\u{10FFFF}", "\u{2028}", "key", "hello world"]
        var text = ""
        for _ in 0..<int(0...12) { text += pieces[int(0...pieces.count - 1)] }
        return text
    }

    mutating func numberLexeme() -> String {
        var text = int(0...3) == 0 ? "-" : ""
        if int(0...4) == 0 {
            text += "0"
        } else {
            text += String(int(1...9))
            for _ in 0..<int(0...(int(0...5) == 0 ? 30 : 12)) { text += String(int(0...9)) }
        }
        if int(0...2) == 0 {
            text += "."
            for _ in 0..<int(1...6) { text += String(int(0...9)) }
        }
        if int(0...4) == 0 {
            text += ["e", "E"][int(0...1)] + ["", "+", "-"][int(0...2)] + String(int(0...400))
        }
        return text
    }

    mutating func value(depth: Int = 0) -> JSONValue {
        switch int(0...(depth > 5 ? 4 : 7)) {
        case 0: return .null
        case 1: return .bool(int(0...1) == 1)
        case 2: return .number(JSONNumber(lexeme: numberLexeme())!)
        case 3: return .number(JSONNumber(Int64.random(in: .min ... .max, using: &random)))
        case 4: return .string(string())
        case 5, 6:
            var object = JSONObject()
            for _ in 0..<int(0...(int(0...6) == 0 ? 40 : 6)) { object[string()] = value(depth: depth + 1) }
            return .object(object)
        default:
            return .array((0..<int(0...6)).map { _ in value(depth: depth + 1) })
        }
    }
}

/// Whether Foundation's reading of some JSON equals ours.
func foundationMatches(_ any: Any, _ value: JSONValue) -> Bool {
    switch value {
    case .null:
        return any is NSNull
    case .bool(let flag):
        guard let number = any as? NSNumber else { return false }
        return number.boolValue == flag
    case .number(let number):
        guard let other = any as? NSNumber else { return false }
        let expected = number.doubleValue
        let actual = other.doubleValue
        return actual == expected || abs(actual - expected) <= abs(expected) * 1e-15
    case .string(let string):
        guard let other = any as? String else { return false }
        return other.utf8.elementsEqual(string.utf8)
    case .array(let elements):
        guard let other = any as? [Any], other.count == elements.count else { return false }
        return zip(other, elements).allSatisfy { foundationMatches($0, $1) }
    case .object(let object):
        guard let other = any as? [String: Any], other.count == object.count else { return false }
        return object.allSatisfy { key, member in other[key].map { foundationMatches($0, member) } ?? false }
    }
}

@Suite struct JSONRoundTripTests {
    @Test func generatedValuesRoundTrip() throws {
        var generator = JSONValueGenerator(random: SplitMix64(seed: 20_251_129))
        for _ in 0..<1500 {
            let value = generator.value()
            let compact = value.encoded()
            let parsed = try JSONParser.parse(compact)
            #expect(parsed == value)
            #expect(parsed.encoded() == compact)  // byte for byte: order, lexemes, escapes
            let canonical = value.encoded(canonical: true)
            #expect(try JSONParser.parse(canonical) == value)
            #expect(parsed.encoded(canonical: true) == canonical)
        }
    }

    @Test func foundationReadsWhatWeWrite() throws {
        var generator = JSONValueGenerator(random: SplitMix64(seed: 7))
        var compared = 0
        for _ in 0..<500 {
            let value = generator.value()
            // Foundation folds canonically equivalent keys together and refuses numbers beyond
            // Double's range; keep those out of its way.
            guard !containsEquivalentKeys(value), !containsHugeNumbers(value) else { continue }
            let any = try JSONSerialization.jsonObject(with: Data(value.encoded()), options: [.fragmentsAllowed])
            #expect(foundationMatches(any, value), "\(value)")
            compared += 1
        }
        #expect(compared > 250)
    }

    @Test func weReadWhatFoundationWrites() throws {
        let object: [String: Any] = [
            "title": "Buy \"milk\" / ü \u{1}", "n": 42, "f": 0.1, "b": true, "z": NSNull(),
            "list": [1, "two", ["three": 3]], "big": Int64.max,
        ]
        for options: JSONSerialization.WritingOptions in [[], [.prettyPrinted], [.sortedKeys, .withoutEscapingSlashes]] {
            let data = try JSONSerialization.data(withJSONObject: object, options: options)
            let value = try JSONParser().parse(data)
            #expect(foundationMatches(object, value))
            #expect(value["big"]?.int64Value == Int64.max)
            #expect(value["title"] == "Buy \"milk\" / ü \u{1}")
        }
    }

    @Test func compactInputIsReproducedExactly() throws {
        let samples = [
            #"{"clientId":"phone-7f3a","changes":[{"changeId":"8c1d","collection":"todos","id":"a1b2","op":"put","data":{"title":"Buy milk","n":1.50,"big":12345678901234567890},"baseVersion":null,"clientTime":1764430000000}]}"#,
            #"[-0,0.0,1E+2,"\u001f\\\"",{},[],"é😀"]"#,
        ]
        for sample in samples {
            #expect(try JSONParser.parse(sample).encoded() == Array(sample.utf8))
        }
        // Escapes come out in their shortest form; whitespace goes.
        #expect(try JSONParser.parse(#" { "a" : "\u0061\/\u00e9" } "#).encoded() == Array(#"{"a":"a/é"}"#.utf8))
    }

    private func containsHugeNumbers(_ value: JSONValue) -> Bool {
        switch value {
        case .number(let number): return !number.doubleValue.isFinite
        case .array(let elements): return elements.contains { containsHugeNumbers($0) }
        case .object(let object): return object.values.contains { containsHugeNumbers($0) }
        default: return false
        }
    }

    private func containsEquivalentKeys(_ value: JSONValue) -> Bool {
        switch value {
        case .array(let elements):
            return elements.contains { containsEquivalentKeys($0) }
        case .object(let object):
            return Set(object.keys).count != object.count || object.values.contains { containsEquivalentKeys($0) }
        default:
            return false
        }
    }
}
