import Testing
@testable import OutpostCore

/// One input for the accept/reject tables, given as bytes so invalid UTF-8 can be written.
struct JSONCase: Sendable, CustomTestStringConvertible {
    let name: String
    let bytes: [UInt8]
    /// For rejects: the expected reason and offset.
    let reason: JSONError.Reason?
    let offset: Int?

    init(_ text: String, _ reason: JSONError.Reason? = nil, at offset: Int? = nil) {
        name = text
        bytes = Array(text.utf8)
        self.reason = reason
        self.offset = offset
    }

    init(name: String, bytes: [UInt8], _ reason: JSONError.Reason? = nil, at offset: Int? = nil) {
        self.name = name
        self.bytes = bytes
        self.reason = reason
        self.offset = offset
    }

    var testDescription: String { name }
}

private let q = UInt8(ascii: "\"")

@Suite struct JSONParserTests {
    // MARK: Accepted (JSONTestSuite y_ style)

    static let accepted: [JSONCase] = [
        JSONCase("[]"), JSONCase("{}"), JSONCase("0"), JSONCase("-0"), JSONCase("1"), JSONCase("-1"),
        JSONCase("1.5"), JSONCase("1E3"), JSONCase("1e-3"), JSONCase("1E+3"), JSONCase("-0.0e-0"),
        JSONCase("0e0"), JSONCase("123456789012345678901234567890"), JSONCase("1.000000000000000000001"),
        JSONCase("1e999"), JSONCase("-1e-999"),
        JSONCase(#""""#), JSONCase(#"" ""#), JSONCase(#""\u0000""#), JSONCase(#""\uD834\uDD1E""#),
        JSONCase(#""\/\\\"\b\f\n\r\t""#), JSONCase("\"é\""), JSONCase("\"\u{10FFFF}\""), JSONCase("\"\u{FFFF}\""),
        JSONCase("\"\u{E000}\""), JSONCase("\"\u{D7FF}\""), JSONCase(#""\uDBFF\uDFFF""#), JSONCase("\"\u{7F}\""),
        JSONCase(#""\u00e9\u00E9""#), JSONCase("\"\u{1F600}\""),
        JSONCase("[1,2,3]"), JSONCase(" \t\r\n[ 1 , 2 ] \n"), JSONCase("true"), JSONCase("false"), JSONCase("null"),
        JSONCase(#"{"a":{"a":1}}"#), JSONCase(#"["a","a"]"#), JSONCase(#"{"":1}"#), JSONCase(#"{"a":1,"b":2}"#),
        JSONCase("{\"é\":1,\"e\u{301}\":2}"),  // canonically equivalent, different bytes: two keys
        JSONCase(#"{"a":1,"A":2}"#), JSONCase(#"[[],{},[{}],{"x":[]}]"#), JSONCase(#"[null,true,false,"",0]"#),
        JSONCase(#"{ "a" : [ 1 , { "b" : null } ] }"#),
    ]

    @Test(arguments: accepted)
    func accepts(_ input: JSONCase) throws {
        let value = try JSONParser.parse(input.bytes)
        // Whatever was accepted writes out as JSON that reads back the same.
        #expect(try JSONParser.parse(value.encoded()) == value)
    }

    // MARK: Rejected (JSONTestSuite n_ style), with reason and offset

    static let rejected: [JSONCase] = [
        // Empty and structure
        JSONCase("", .unexpectedEnd, at: 0), JSONCase("   ", .unexpectedEnd, at: 3),
        JSONCase("[", .unexpectedEnd, at: 1), JSONCase("]", .unexpectedCharacter, at: 0),
        JSONCase("{", .unexpectedEnd, at: 1), JSONCase("}", .unexpectedCharacter, at: 0),
        JSONCase("[1", .unexpectedEnd, at: 2), JSONCase("[1,]", .unexpectedCharacter, at: 3),
        JSONCase("[,1]", .unexpectedCharacter, at: 1), JSONCase("[1,,2]", .unexpectedCharacter, at: 3),
        JSONCase("[1 2]", .unexpectedCharacter, at: 3), JSONCase("[true false]", .unexpectedCharacter, at: 6),
        JSONCase("[1}", .unexpectedCharacter, at: 2), JSONCase(#"{"a":1]"#, .unexpectedCharacter, at: 6),
        JSONCase(#"{"a"}"#, .unexpectedCharacter, at: 4), JSONCase(#"{"a":}"#, .unexpectedCharacter, at: 5),
        JSONCase(#"{"a" 1}"#, .unexpectedCharacter, at: 5), JSONCase("{a:1}", .unexpectedCharacter, at: 1),
        JSONCase("{'a':1}", .unexpectedCharacter, at: 1), JSONCase(#"{"a":1,}"#, .unexpectedCharacter, at: 7),
        JSONCase("{,}", .unexpectedCharacter, at: 1), JSONCase(#"{"a":1 "b":2}"#, .unexpectedCharacter, at: 7),
        JSONCase("{1:1}", .unexpectedCharacter, at: 1), JSONCase(#"{"a"::1}"#, .unexpectedCharacter, at: 5),
        JSONCase(#"["a":1]"#, .unexpectedCharacter, at: 4),
        // Literals
        JSONCase("tru", .unexpectedEnd, at: 3), JSONCase("True", .unexpectedCharacter, at: 0),
        JSONCase("nul", .unexpectedEnd, at: 3), JSONCase("nulll", .trailingCharacters, at: 4),
        JSONCase("[nulx]", .unexpectedCharacter, at: 4), JSONCase("NaN", .unexpectedCharacter, at: 0),
        JSONCase("Infinity", .unexpectedCharacter, at: 0), JSONCase("[-Infinity]", .invalidNumber, at: 2),
        JSONCase("undefined", .unexpectedCharacter, at: 0), JSONCase("[None]", .unexpectedCharacter, at: 1),
        // Numbers
        JSONCase("01", .invalidNumber, at: 0), JSONCase("-01", .invalidNumber, at: 0),
        JSONCase("[00]", .invalidNumber, at: 1), JSONCase("+1", .unexpectedCharacter, at: 0),
        JSONCase(".5", .unexpectedCharacter, at: 0), JSONCase("1.", .invalidNumber, at: 2),
        JSONCase("1.e1", .invalidNumber, at: 2), JSONCase("1e", .invalidNumber, at: 2),
        JSONCase("1e+", .invalidNumber, at: 3), JSONCase("1E-x", .invalidNumber, at: 3),
        JSONCase("-", .invalidNumber, at: 1), JSONCase("--1", .invalidNumber, at: 1),
        JSONCase("- 1", .invalidNumber, at: 1), JSONCase("0x10", .trailingCharacters, at: 1),
        JSONCase("[1ee2]", .invalidNumber, at: 3), JSONCase("[1_000]", .unexpectedCharacter, at: 2),
        JSONCase("[0.e1]", .invalidNumber, at: 3), JSONCase("[1.2.3]", .unexpectedCharacter, at: 4),
        JSONCase("\u{663}", .unexpectedCharacter, at: 0),  // Arabic-Indic digit three
        JSONCase("[1e1.5]", .unexpectedCharacter, at: 4), JSONCase("[-.5]", .invalidNumber, at: 2),
        // Strings and escapes
        JSONCase(#""abc"#, .unexpectedEnd, at: 4), JSONCase(#"""#, .unexpectedEnd, at: 1),
        JSONCase(#""\x""#, .invalidEscape, at: 1), JSONCase(#""ab\'""#, .invalidEscape, at: 3),
        JSONCase(#""\a""#, .invalidEscape, at: 1), JSONCase(#""\U0041""#, .invalidEscape, at: 1),
        JSONCase(#""\u12""#, .invalidUnicodeEscape, at: 1), JSONCase(#""\u12G4""#, .invalidUnicodeEscape, at: 1),
        JSONCase(#""\u""#, .invalidUnicodeEscape, at: 1), JSONCase(#""\"#, .unexpectedEnd, at: 2),
        JSONCase(#""\uD800""#, .invalidUnicodeEscape, at: 1), JSONCase(#""\uDC00""#, .invalidUnicodeEscape, at: 1),
        JSONCase(#""\uD800\u0041""#, .invalidUnicodeEscape, at: 1), JSONCase(#""\uD800\""#, .invalidUnicodeEscape, at: 1),
        JSONCase(#""\uDBFF\uDBFF""#, .invalidUnicodeEscape, at: 1), JSONCase(#""x\uDFFF\uD800""#, .invalidUnicodeEscape, at: 2),
        JSONCase(#""\uD834x""#, .invalidUnicodeEscape, at: 1), JSONCase(#""\uD834\n""#, .invalidUnicodeEscape, at: 1),
        JSONCase("\"\t\"", .controlCharacterInString, at: 1), JSONCase("\"a\nb\"", .controlCharacterInString, at: 2),
        JSONCase("\"\u{0}\"", .controlCharacterInString, at: 1), JSONCase("\"\u{1F}\"", .controlCharacterInString, at: 1),
        JSONCase("[\"0123456789abcdef\r\"]", .controlCharacterInString, at: 18),
        JSONCase("'single'", .unexpectedCharacter, at: 0),
        // UTF-8 validity (bytes inside a string)
        JSONCase(name: "overlong NUL C0 80", bytes: [q, 0xC0, 0x80, q], .invalidUTF8, at: 1),
        JSONCase(name: "overlong C1 BF", bytes: [q, 0xC1, 0xBF, q], .invalidUTF8, at: 1),
        JSONCase(name: "overlong E0 80 80", bytes: [q, 0xE0, 0x80, 0x80, q], .invalidUTF8, at: 1),
        JSONCase(name: "overlong E0 9F BF", bytes: [q, 0xE0, 0x9F, 0xBF, q], .invalidUTF8, at: 1),
        JSONCase(name: "surrogate ED A0 80", bytes: [q, 0xED, 0xA0, 0x80, q], .invalidUTF8, at: 1),
        JSONCase(name: "surrogate ED BF BF", bytes: [q, 0xED, 0xBF, 0xBF, q], .invalidUTF8, at: 1),
        JSONCase(name: "overlong F0 80 80 80", bytes: [q, 0xF0, 0x80, 0x80, 0x80, q], .invalidUTF8, at: 1),
        JSONCase(name: "overlong F0 8F BF BF", bytes: [q, 0xF0, 0x8F, 0xBF, 0xBF, q], .invalidUTF8, at: 1),
        JSONCase(name: "past U+10FFFF F4 90 80 80", bytes: [q, 0xF4, 0x90, 0x80, 0x80, q], .invalidUTF8, at: 1),
        JSONCase(name: "F5 lead", bytes: [q, 0xF5, 0x80, 0x80, 0x80, q], .invalidUTF8, at: 1),
        JSONCase(name: "FF", bytes: [q, 0xFF, q], .invalidUTF8, at: 1),
        JSONCase(name: "FE", bytes: [q, 0x61, 0xFE, q], .invalidUTF8, at: 2),
        JSONCase(name: "lone continuation", bytes: [q, 0x80, q], .invalidUTF8, at: 1),
        JSONCase(name: "truncated two-byte", bytes: [q, 0xC3, q], .invalidUTF8, at: 1),
        JSONCase(name: "truncated three-byte", bytes: [q, 0xE2, 0x82, q], .invalidUTF8, at: 1),
        JSONCase(name: "bad third byte", bytes: [q, 0xE2, 0x82, 0x41, q], .invalidUTF8, at: 1),
        JSONCase(name: "bad fourth byte", bytes: [q, 0xF0, 0x9F, 0x98, 0xC0, q], .invalidUTF8, at: 1),
        JSONCase(name: "input ends mid-sequence", bytes: [q, 0xF0, 0x9F], .unexpectedEnd, at: 3),
        JSONCase(name: "invalid after ASCII fast path", bytes: [q] + Array("0123456789abcdef".utf8) + [0xC0, 0xAF, q],
                 .invalidUTF8, at: 17),
        JSONCase(name: "UTF-8 outside a string", bytes: [0xC3, 0xA9], .unexpectedCharacter, at: 0),
        JSONCase(name: "UTF-8 key invalid", bytes: Array(#"{""#.utf8) + [0xED, 0xA0, 0x80] + Array(#"":1}"#.utf8),
                 .invalidUTF8, at: 2),
        // Byte order mark, whitespace, comments, trailing data
        JSONCase(name: "BOM", bytes: [0xEF, 0xBB, 0xBF] + Array("[]".utf8), .byteOrderMark, at: 0),
        JSONCase("\u{0B}[]", .unexpectedCharacter, at: 0), JSONCase("\u{0C}[]", .unexpectedCharacter, at: 0),
        JSONCase("[\u{A0}1]", .unexpectedCharacter, at: 1), JSONCase("[1\u{2028}]", .unexpectedCharacter, at: 2),
        JSONCase("[1]//x", .trailingCharacters, at: 3), JSONCase("/*x*/[1]", .unexpectedCharacter, at: 0),
        JSONCase("[1/*x*/]", .unexpectedCharacter, at: 2), JSONCase("[1]#", .trailingCharacters, at: 3),
        JSONCase("[1] x", .trailingCharacters, at: 4), JSONCase("{} {}", .trailingCharacters, at: 3),
        JSONCase("1 1", .trailingCharacters, at: 2), JSONCase(#""a" "b""#, .trailingCharacters, at: 4),
        JSONCase("[]\u{0}", .trailingCharacters, at: 2), JSONCase("[1]]", .trailingCharacters, at: 3),
        // Duplicate keys, byte for byte after unescaping
        JSONCase(#"{"a":1,"a":2}"#, .duplicateKey("a"), at: 7),
        JSONCase(#"{"a":1,"\u0061":2}"#, .duplicateKey("a"), at: 7),
        JSONCase(#"{"a":1,"b":{"c":1,"c":1}}"#, .duplicateKey("c"), at: 18),
        JSONCase(#"[{"x":null,"y":[],"x":[]}]"#, .duplicateKey("x"), at: 18),
        JSONCase(#"{"":1,"":2}"#, .duplicateKey(""), at: 6),
        JSONCase("{\"é\":1,\"\\u00e9\":2}", .duplicateKey("é"), at: 8),
    ]

    @Test(arguments: rejected)
    func rejects(_ input: JSONCase) {
        #expect(throws: JSONError(input.reason!, at: input.offset!)) {
            try JSONParser.parse(input.bytes)
        }
    }

    @Test func errorDescriptionNamesByteAndReason() {
        #expect(JSONError(.unexpectedCharacter, at: 1234).description == "invalid JSON at byte 1234: unexpected character")
        do {
            _ = try JSONParser.parse("[1,]")
            Issue.record("accepted a trailing comma")
        } catch {
            #expect("\(error)" == "invalid JSON at byte 3: unexpected character")
        }
    }

    // MARK: RFC 8259 section 13 examples

    @Test func rfc8259Examples() throws {
        let image = """
            {
              "Image": {
                  "Width":  800,
                  "Height": 600,
                  "Title":  "View from 15th Floor",
                  "Thumbnail": {
                      "Url":    "http://www.example.com/image/481989943",
                      "Height": 125,
                      "Width":  100
                  },
                  "Animated" : false,
                  "IDs": [116, 943, 234, 38793]
                }
            }
            """
        let value = try JSONParser.parse(image)
        #expect(value["Image"]?["Width"]?.int64Value == 800)
        #expect(value["Image"]?["Title"]?.stringValue == "View from 15th Floor")
        #expect(value["Image"]?["Thumbnail"]?["Url"]?.stringValue == "http://www.example.com/image/481989943")
        #expect(value["Image"]?["Animated"]?.boolValue == false)
        #expect(value["Image"]?["IDs"]?.arrayValue?.compactMap(\.int64Value) == [116, 943, 234, 38793])
        #expect(value["Image"]?.objectValue?.keys == ["Width", "Height", "Title", "Thumbnail", "Animated", "IDs"])

        let places = """
            [
              {
                 "precision": "zip",
                 "Latitude":  37.7668,
                 "Longitude": -122.3959,
                 "Address":   "",
                 "City":      "SAN FRANCISCO",
                 "State":     "CA",
                 "Zip":       "94107",
                 "Country":   "US"
              },
              {
                 "precision": "zip",
                 "Latitude":  37.371991,
                 "Longitude": -122.026020,
                 "Address":   "",
                 "City":      "SUNNYVALE",
                 "State":     "CA",
                 "Zip":       "94085",
                 "Country":   "US"
              }
            ]
            """
        let list = try #require(try JSONParser.parse(places).arrayValue)
        #expect(list.count == 2)
        #expect(list[1]["Longitude"]?.numberValue?.lexeme == "-122.026020")
        #expect(list[1]["Longitude"]?.doubleValue == -122.02602)
        #expect(list[0]["Latitude"]?.doubleValue == 37.7668)

        // Section 13's small texts are JSON too.
        #expect(try JSONParser.parse(#""Hello world!""#) == .string("Hello world!"))
        #expect(try JSONParser.parse("42") == 42)
        #expect(try JSONParser.parse("true") == true)
    }

    // MARK: Values

    @Test func decodesEscapesAndUnicode() throws {
        #expect(try JSONParser.parse(#""\/\\\"\b\f\n\r\t""#) == .string("/\\\"\u{8}\u{C}\n\r\t"))
        #expect(try JSONParser.parse(#""\uD834\uDD1E = \u00e9 \u0000""#) == .string("\u{1D11E} = é \u{0}"))
        #expect(try JSONParser.parse(#""\ud83d\ude00""#) == .string("😀"))
        #expect(try JSONParser.parse("\"a\u{10FFFF}b\"") == .string("a\u{10FFFF}b"))
        // Long strings cross the eight-byte fast path and then a slow path.
        let long = String(repeating: "abcdefgh", count: 20) + "é" + String(repeating: "x", count: 13) + "\\n" + "tail"
        #expect(try JSONParser.parse("\"\(long)\"") == .string(String(repeating: "abcdefgh", count: 20)
            + "é" + String(repeating: "x", count: 13) + "\n" + "tail"))
        // Key and value strings of every length up to 40 around the fast path's word size.
        for length in 0...40 {
            let text = String(repeating: "k", count: length)
            let value = try JSONParser.parse("{\"\(text)\":\"\(text)\"}")
            #expect(value[text]?.stringValue == text)
        }
    }

    @Test func bigAndExactNumbersKeepTheirText() throws {
        let value = try JSONParser.parse("[12345678901234567890,1.50,-0,1E+3,0.1,9223372036854775807,-9223372036854775808]")
        let lexemes = try #require(value.arrayValue).compactMap { $0.numberValue?.lexeme }
        #expect(lexemes == ["12345678901234567890", "1.50", "-0", "1E+3", "0.1", "9223372036854775807", "-9223372036854775808"])
        #expect(String(decoding: value.encoded(), as: UTF8.self)
            == "[12345678901234567890,1.50,-0,1E+3,0.1,9223372036854775807,-9223372036854775808]")
        #expect(value[0]?.int64Value == nil)
        #expect(value[5]?.int64Value == Int64.max)
        #expect(value[6]?.int64Value == Int64.min)
        let huge = "-" + String(repeating: "9", count: 400) + ".5e-3"
        #expect(try JSONParser.parse(huge).numberValue?.lexeme == huge)
    }

    @Test func sliceOffsetsCountFromTheSliceStart() throws {
        let bytes = Array("xx[1,2]yy".utf8)
        #expect(try JSONParser.parse(bytes[2..<7]) == [1, 2])
        #expect(throws: JSONError(.trailingCharacters, at: 5)) { try JSONParser.parse(bytes[2..<8]) }
        let fromRaw = try bytes.withUnsafeBytes { raw in
            try JSONParser.parse(UnsafeRawBufferPointer(rebasing: raw[2..<7]))
        }
        #expect(fromRaw == [1, 2])
    }

    @Test func largeObjectsUseAnIndexAndStillRefuseDuplicates() throws {
        let keys = (0..<200).map { "key\($0)" }
        let text = "{" + keys.enumerated().map { "\"\($1)\":\($0)" }.joined(separator: ",") + "}"
        let object = try #require(try JSONParser.parse(text).objectValue)
        #expect(object.keys == keys)
        for (position, key) in keys.enumerated() { #expect(object[key]?.int64Value == Int64(position)) }
        #expect(object["key200"] == nil)
        for duplicate in [0, 5, 11, 12, 13, 150] {
            let bad = String(text.dropLast()) + ",\"key\(duplicate)\":true}"
            #expect(throws: JSONError(.duplicateKey("key\(duplicate)"), at: text.utf8.count)) {
                try JSONParser.parse(bad)
            }
        }
        // A duplicate at every count around the index threshold.
        for count in 1...30 {
            let members = (0..<count).map { "\"m\($0)\":\($0)" }.joined(separator: ",")
            #expect(throws: JSONError.self) { try JSONParser.parse("{\(members),\"m\(count - 1)\":0}") }
            #expect(try JSONParser.parse("{\(members)}").objectValue?.count == count)
        }
    }

    // MARK: Depth

    @Test func depthLimit() throws {
        func nested(_ depth: Int) -> String {
            String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        }
        #expect(try JSONParser.parse(nested(64)) != .null)
        #expect(throws: JSONError(.tooDeep(limit: 64), at: 64)) { try JSONParser.parse(nested(65)) }
        #expect(throws: JSONError(.tooDeep(limit: 2), at: 10)) { try JSONParser(maxDepth: 2).parse(#"{"a":{"b":{}}}"#) }
        #expect(try JSONParser(maxDepth: 2).parse(#"{"a":{"b":1}}"#)["a"]?["b"] == 1)
        #expect(try JSONParser(maxDepth: 0).parse("1") == 1)
        #expect(throws: JSONError(.tooDeep(limit: 0), at: 0)) { try JSONParser(maxDepth: 0).parse("[]") }
        // The ceiling parses, writes, compares and is released without exhausting the stack.
        let deepest = try JSONParser(maxDepth: JSONParser.depthCeiling).parse(nested(JSONParser.depthCeiling))
        #expect(deepest.encoded() == Array(nested(JSONParser.depthCeiling).utf8))
        #expect(deepest == deepest)
    }

    @Test func hostileNestingErrorsInsteadOfCrashing() {
        let brackets = [UInt8](repeating: UInt8(ascii: "["), count: 1_000_000)
        #expect(throws: JSONError(.tooDeep(limit: 64), at: 64)) { try JSONParser.parse(brackets) }
        #expect(throws: JSONError(.tooDeep(limit: 1000), at: 1000)) {
            try JSONParser(maxDepth: 1000).parse(brackets)
        }
        let objects = Array(String(repeating: #"{"a":"#, count: 200_000).utf8)
        #expect(throws: JSONError(.tooDeep(limit: 64), at: 64 * 5)) { try JSONParser.parse(objects) }
        let tenMegabytes = [UInt8](repeating: UInt8(ascii: "["), count: 10 << 20)
        #expect(throws: JSONError.self) { try JSONParser(maxDepth: 1000).parse(tenMegabytes) }
    }

    // MARK: Robustness

    @Test func everyProperPrefixOfAContainerIsRejected() throws {
        let text = #"{"a":[1,-2.5e+3,"x\u00e9\n",true,false,null,{"b":{}}],"c":"\ud83d\ude00"}"#
        let bytes = Array(text.utf8)
        _ = try JSONParser.parse(bytes)
        for length in 0..<bytes.count {
            #expect(throws: JSONError.self) { try JSONParser.parse(bytes[0..<length]) }
        }
    }

    @Test func mutatedInputNeverCrashesAndWhatParsesRoundTrips() throws {
        let text = #"{"changes":[{"id":"a1","data":{"t":"B\u00fcy m\"ilk","n":[1,2.5,-0,1e3],"ok":true,"z":null}}]}"#
        let original = Array(text.utf8)
        var random = SplitMix64(seed: 0x5EED)
        let alphabet = Array(#"{}[],:"\\u0aeE+-.19 tfn"#.utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xED, 0xF4, 0xFF]
        var accepted = 0
        for _ in 0..<5000 {
            var bytes = original
            for _ in 0..<Int(random.next() % 3 + 1) {
                let position = Int(random.next() % UInt64(bytes.count))
                switch random.next() % 3 {
                case 0: bytes[position] = alphabet[Int(random.next() % UInt64(alphabet.count))]
                case 1: bytes.remove(at: position)
                default: bytes.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: position)
                }
            }
            if let value = try? JSONParser.parse(bytes) {
                accepted += 1
                #expect(try JSONParser.parse(value.encoded()) == value)
            }
        }
        #expect(accepted > 0)
    }
}


