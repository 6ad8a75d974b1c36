import Testing
@testable import OutpostCore

private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

@Suite struct JSONWriterTests {
    @Test func escapesOnlyWhatRFC8259Requires() {
        var expected = ""
        var input = ""
        let short: [UInt32: String] = [0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"]
        for code in UInt32(0)..<0x20 {
            input.unicodeScalars.append(Unicode.Scalar(code)!)
            expected += short[code] ?? "\\u00" + (code < 0x10 ? "0" : "1") + String(code & 0xF, radix: 16)
        }
        #expect(text(JSONValue.string(input).encoded()) == "\"\(expected)\"")
        #expect(text(JSONValue.string("\"\\/").encoded()) == #""\"\\/""#)
        #expect(text(JSONValue.string("é😀\u{7F}\u{2028}").encoded()) == "\"é😀\u{7F}\u{2028}\"")
        #expect(text(JSONValue.string("").encoded()) == #""""#)
        #expect(text(JSONValue.string("a\u{0}b").encoded()) == #""a\u0000b""#)
        #expect(text(JSONValue.string("\u{1F}x\u{1A}").encoded()) == #""\u001fx\u001a""#)
    }

    /// Escaping written the slow, obvious way, to check the word-at-a-time writer against.
    static func referenceEscape(_ string: String) -> String {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        for byte in string.utf8 {
            switch byte {
            case 0x22: out += Array(#"\""#.utf8)
            case 0x5C: out += Array(#"\\"#.utf8)
            case 0x08: out += Array(#"\b"#.utf8)
            case 0x0C: out += Array(#"\f"#.utf8)
            case 0x0A: out += Array(#"\n"#.utf8)
            case 0x0D: out += Array(#"\r"#.utf8)
            case 0x09: out += Array(#"\t"#.utf8)
            case 0..<0x10: out += Array(#"\u000"#.utf8) + Array(String(byte, radix: 16).utf8)
            case 0x10..<0x20: out += Array(#"\u00"#.utf8) + Array(String(byte, radix: 16).utf8)
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
        return String(decoding: out, as: UTF8.self)
    }

    @Test func escapesAtEveryPositionOfTheWordScan() {
        for special in ["\"", "\\", "\n", "\u{1}", "é", "\u{7F}", "😀"] {
            for length in 0...24 {
                for position in 0...length {
                    var input = String(repeating: "a", count: length)
                    input.insert(contentsOf: special, at: input.index(input.startIndex, offsetBy: position))
                    let expected = JSONWriterTests.referenceEscape(input)
                    #expect(text(JSONValue.string(input).encoded()) == expected)
                    var bytes: [UInt8] = []
                    JSONWriter.appendString(input, to: &bytes)
                    #expect(String(decoding: bytes, as: UTF8.self) == expected)
                }
            }
        }
    }

    @Test func canonicalOrderForManyKeysAndSharedPrefixes() throws {
        var keys = (0..<40).map { "k\(($0 * 7919) % 40)" }
        keys += ["prefix__", "prefix__a", "prefix__\u{0}", "prefix_", "prefix__b", "prefiy", "p", "", "é", "\u{7F}"]
        for count in [2, 3, 8, 16, 17, keys.count] {
            let chosen = Array(keys.prefix(count).reversed())
            let object = JSONObject(chosen.map { ($0, JSONValue.string($0)) })
            let sorted = chosen.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
            let expected = "{" + sorted.map { "\(JSONWriterTests.referenceEscape($0)):\(JSONWriterTests.referenceEscape($0))" }
                .joined(separator: ",") + "}"
            #expect(text(JSONValue.object(object).encoded(canonical: true)) == expected)
            #expect(try JSONParser.parse(JSONValue.object(object).encoded(canonical: true)).objectValue?.keys == sorted)
        }
    }

    @Test func compactOutputKeepsOrderAndLexemes() throws {
        let value: JSONValue = [
            "z": 1, "a": [true, false, nil, 1.5, -0.25], "m": ["y": "Y", "b": "B"],
            "big": .number(JSONNumber(lexeme: "12345678901234567890")!),
            "exp": .number(JSONNumber(lexeme: "1.50E-7")!),
        ]
        #expect(text(value.encoded())
            == #"{"z":1,"a":[true,false,null,1.5,-0.25],"m":{"y":"Y","b":"B"},"big":12345678901234567890,"exp":1.50E-7}"#)
    }

    @Test func canonicalSortsKeysByUTF8BytesAtEveryLevel() throws {
        let value = try JSONParser.parse(#"{"b":1,"a":{"d":[{"y":1,"x":2}],"c":3},"B":0,"":0,"aa":0,"é":0}"#)
        #expect(text(value.encoded(canonical: true))
            == #"{"":0,"B":0,"a":{"c":3,"d":[{"x":2,"y":1}]},"aa":0,"b":1,"é":0}"#)
        // U+FF61 is EF BD A1 in UTF-8 and FF61 in UTF-16; U+1F600 is F0 9F 98 80 and D83D DE00.
        // Byte order puts U+FF61 first; UTF-16 order would not.
        let astral: JSONValue = ["\u{1F600}": 1, "\u{FF61}": 2]
        #expect(text(astral.encoded(canonical: true)) == "{\"\u{FF61}\":2,\"\u{1F600}\":1}")
        // Reordered keys give one canonical form; compact forms differ.
        let reordered = try JSONParser.parse(#"{"é":0,"aa":0,"":0,"B":0,"a":{"c":3,"d":[{"x":2,"y":1}]},"b":1}"#)
        #expect(reordered.encoded(canonical: true) == value.encoded(canonical: true))
        #expect(reordered.encoded() != value.encoded())
        // Array order is data: never sorted.
        #expect(text(JSONValue.array(["b", "a"]).encoded(canonical: true)) == #"["b","a"]"#)
    }

    @Test func piecewiseHelpersWriteWhatTheValueWriterWrites() throws {
        var page: [UInt8] = []
        page.append(UInt8(ascii: "{"))
        JSONWriter.appendKey("collection", to: &page)
        JSONWriter.appendString("to\"dos", to: &page)
        page.append(UInt8(ascii: ","))
        JSONWriter.appendKey("seq", to: &page)
        JSONWriter.appendInt(Int64.min, to: &page)
        page.append(UInt8(ascii: ","))
        JSONWriter.appendKey("n", to: &page)
        JSONWriter.appendInt(42 as Int, to: &page)
        page.append(UInt8(ascii: ","))
        JSONWriter.appendKey("deleted", to: &page)
        JSONWriter.appendBool(false, to: &page)
        page.append(UInt8(ascii: ","))
        JSONWriter.appendKey("clientTime", to: &page)
        JSONWriter.appendNull(to: &page)
        page.append(UInt8(ascii: ","))
        JSONWriter.appendKey("data", to: &page)
        JSONWriter.appendRaw(Array(#"{"title":"Buy milk"}"#.utf8), to: &page)
        page.append(UInt8(ascii: ","))
        JSONWriter.appendKey("by", to: &page)
        Array("phone\n7f3a".utf8).withUnsafeBytes { JSONWriter.appendString(utf8: $0, to: &page) }
        page.append(UInt8(ascii: ","))
        JSONWriter.appendKey("x", to: &page)
        JSONWriter.writeString("é", into: &page)
        page.append(UInt8(ascii: "}"))
        let expected: JSONValue = [
            "collection": "to\"dos", "seq": .number(JSONNumber(Int64.min)), "n": 42, "deleted": false,
            "clientTime": nil, "data": ["title": "Buy milk"], "by": "phone\n7f3a", "x": "é",
        ]
        #expect(page == expected.encoded())
        #expect(try JSONParser.parse(page) == expected)
    }

    @Test func integersInDecimal() {
        for value: Int64 in [0, 1, -1, 9, 10, -10, 99, 100, 1_764_430_000_000, Int64.max, Int64.min, Int64.min + 1] {
            var bytes: [UInt8] = []
            JSONWriter.appendInt(value, to: &bytes)
            #expect(text(bytes) == String(value))
        }
    }
}
