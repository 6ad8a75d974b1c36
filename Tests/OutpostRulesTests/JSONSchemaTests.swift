import OutpostCore
import OutpostRules
import Testing

/// The rules file's JSON Schema subset: every keyword passing and failing with the failing
/// value's pointer, numbers by value, the order failures are reported in, refused keywords
/// and keyword values, the pattern language and its limits, and the depth cap.
@Suite struct JSONSchemaTests {
    static func json(_ text: String) -> JSONValue {
        try! JSONParser().parse(text)
    }

    /// The failure of `instance` against `schema`, both JSON text.
    static func failure(_ schema: String, _ instance: String) throws -> JSONSchema.Failure? {
        try JSONSchema(json(schema)).validate(json(instance))
    }

    /// The error compiling `schema`, or `nil` when it compiles.
    static func compileError(_ schema: String) -> JSONSchema.CompileError? {
        do {
            _ = try JSONSchema(json(schema))
            return nil
        } catch {
            return error
        }
    }

    static func fail(_ path: String, _ reason: String) -> JSONSchema.Failure {
        JSONSchema.Failure(path: path, reason: reason)
    }

    static let example = #"""
        {"type":"object","required":["title","assignee"],"properties":{"title":{"type":"string","minLength":1,"maxLength":200},"assignee":{"type":"string"},"status":{"enum":["open","done"]}},"additionalProperties":true}
        """#

    @Test func theExampleSchemaChecksRecords() throws {
        let schema = try JSONSchema(Self.json(Self.example))
        let valid = [
            #"{"title":"x","assignee":"a"}"#,
            #"{"title":"x","assignee":"a","status":"open"}"#,
            #"{"title":"x","assignee":"a","status":"done","extra":[1,2]}"#,
        ]
        for record in valid {
            #expect(schema.validate(Self.json(record)) == nil, "\(record)")
        }
        let missing = try #require(schema.validate(Self.json(#"{"assignee":"a"}"#)))
        #expect(missing.path == "/title")
        #expect(missing.reason.contains("required"))
        #expect(schema.validate(Self.json(#"{"title":"","assignee":"a"}"#)) == Self.fail("/title", "is 0 characters long; the minimum is 1"))
        #expect(schema.validate(Self.json(#"{"title":"x","assignee":"a","status":"closed"}"#)) == Self.fail("/status", "is not one of the allowed values"))
        let long = "\"" + String(repeating: "x", count: 201) + "\""
        #expect(schema.validate(Self.json(#"{"title":\#(long),"assignee":"a"}"#)) == Self.fail("/title", "is 201 characters long; the maximum is 200"))
        #expect(schema.validate(Self.json(#"{"title":5,"assignee":"a"}"#)) == Self.fail("/title", "is not a string"))
        #expect(schema.validate(Self.json(#"{"title":"x"}"#)) == Self.fail("/assignee", "is required"))
        #expect(schema.validate(Self.json("[]")) == Self.fail("", "is not an object"))
    }

    @Test func typeNamesAndIntegersWithoutAFraction() throws {
        let cases: [(type: String, instance: String, conforms: Bool)] = [
            (#""integer""#, "1", true),
            (#""integer""#, "1.0", true),
            (#""integer""#, "1e2", true),
            (#""integer""#, "-0", true),
            (#""integer""#, "2.55e1", false),
            (#""integer""#, "2.50e2", true),
            (#""integer""#, "12345678901234567890", true),
            (#""integer""#, "1e400", true),
            (#""integer""#, "1.5", false),
            (#""integer""#, "1e-1", false),
            (#""integer""#, #""1""#, false),
            (#""number""#, "1.5", true),
            (#""number""#, "1", true),
            (#""number""#, #""1""#, false),
            (#""string""#, #""""#, true),
            (#""string""#, "null", false),
            (#""boolean""#, "false", true),
            (#""boolean""#, "0", false),
            (#""null""#, "null", true),
            (#""null""#, "false", false),
            (#""array""#, "[]", true),
            (#""array""#, "{}", false),
            (#""object""#, "{}", true),
            (#""object""#, "[]", false),
            (#"["string","null"]"#, "null", true),
            (#"["string","null"]"#, #""a""#, true),
            (#"["string","null"]"#, "1", false),
            (#"["integer","boolean"]"#, "true", true),
            (#"["integer","boolean"]"#, "7.0", true),
        ]
        for (type, instance, conforms) in cases {
            let result = try Self.failure(#"{"type":\#(type)}"#, instance)
            #expect((result == nil) == conforms, "type \(type), value \(instance): \(String(describing: result))")
        }
        #expect(try Self.failure(#"{"type":"integer"}"#, "1.5") == Self.fail("", "is not an integer"))
        #expect(try Self.failure(#"{"type":["string","null"]}"#, "1") == Self.fail("", "is not a string or null"))
        #expect(try Self.failure(#"{"type":["null","array","object"]}"#, "1") == Self.fail("", "is not an object, an array or null"))
    }

    @Test func enumAndConstCompareDeeplyWithNumbersByValue() throws {
        let enumSchema = #"{"enum":[1,"a",{"k":[1,2]},null,[]]}"#
        for member in ["1", "1.0", "1e0", "10e-1", "0.1e1", #""a""#, #"{"k":[1.0,2]}"#, #"{"k":[1,2e0]}"#, "null", "[]"] {
            #expect(try Self.failure(enumSchema, member) == nil, "\(member)")
        }
        for other in ["2", "1.0000001", #""A""#, #"{"k":[2,1]}"#, #"{"k":[1,2],"j":0}"#, "true", "false", "[null]", "{}"] {
            #expect(try Self.failure(enumSchema, other) == Self.fail("", "is not one of the allowed values"), "\(other)")
        }
        let constSchema = #"{"properties":{"kind":{"const":{"a":1,"b":[true]}}}}"#
        #expect(try Self.failure(constSchema, #"{"kind":{"b":[true],"a":1.00}}"#) == nil)
        #expect(try Self.failure(constSchema, #"{"kind":{"a":1}}"#) == Self.fail("/kind", "is not the allowed value"))
        #expect(try Self.failure(constSchema, #"{"kind":{"a":1,"b":[1]}}"#) == Self.fail("/kind", "is not the allowed value"))
        #expect(try Self.failure(#"{"const":0}"#, "false") == Self.fail("", "is not the allowed value"))
        #expect(try Self.failure(#"{"const":null}"#, "null") == nil)
        // Strings compare byte for byte: precomposed "é" is not "e" plus a combining accent.
        #expect(try Self.failure(#"{"const":"\u00e9"}"#, #""e\u0301""#) == Self.fail("", "is not the allowed value"))
    }

    @Test func minimumAndMaximumAreInclusiveAndExact() throws {
        let schema = #"{"properties":{"n":{"minimum":1,"maximum":10.5}}}"#
        for value in ["1", "1.0", "5", "10.5", "10.50", "1.05e1"] {
            #expect(try Self.failure(schema, #"{"n":\#(value)}"#) == nil, "\(value)")
        }
        #expect(try Self.failure(schema, #"{"n":0.999}"#) == Self.fail("/n", "is 0.999; the minimum is 1"))
        #expect(try Self.failure(schema, #"{"n":-3}"#) == Self.fail("/n", "is -3; the minimum is 1"))
        #expect(try Self.failure(schema, #"{"n":10.50001}"#) == Self.fail("/n", "is 10.50001; the maximum is 10.5"))
        #expect(try Self.failure(schema, #"{"n":"0"}"#) == nil)
        // Beyond a double's precision: 2^53 + 1 against 2^53.
        #expect(try Self.failure(#"{"minimum":9007199254740993}"#, "9007199254740992") == Self.fail("", "is 9007199254740992; the minimum is 9007199254740993"))
        #expect(try Self.failure(#"{"minimum":9007199254740993}"#, "9007199254740993.0") == nil)
        #expect(try Self.failure(#"{"maximum":1e400}"#, "1e399") == nil)
        #expect(try Self.failure(#"{"maximum":-1e-400}"#, "-1e-401") == Self.fail("", "is -1e-401; the maximum is -1e-400"))
        #expect(try Self.failure(#"{"minimum":0}"#, "-0.0") == nil)
        #expect(try Self.failure(#"{"minimum":0.1}"#, "0.09999999999999999999") == Self.fail("", "is 0.09999999999999999999; the minimum is 0.1"))
    }

    @Test func lengthsCountCodePoints() throws {
        let schema = #"{"minLength":2,"maxLength":3}"#
        for value in [#""ab""#, #""abc""#, #""e\u0301""#, #""\ud83d\udc4d\ud83c\udffd""#] {
            #expect(try Self.failure(schema, value) == nil, "\(value)")
        }
        #expect(try Self.failure(schema, #""a""#) == Self.fail("", "is 1 character long; the minimum is 2"))
        #expect(try Self.failure(schema, #""\u00e9""#) == Self.fail("", "is 1 character long; the minimum is 2"))
        #expect(try Self.failure(schema, #""abcd""#) == Self.fail("", "is 4 characters long; the maximum is 3"))
        #expect(try Self.failure(#"{"minLength":2.0}"#, #""a""#) == Self.fail("", "is 1 character long; the minimum is 2"))
    }

    @Test func arraysCheckCountsThenEveryElement() throws {
        let schema = #"{"properties":{"tags":{"items":{"type":"string","minLength":1},"minItems":1,"maxItems":3}}}"#
        #expect(try Self.failure(schema, #"{"tags":["a","b","c"]}"#) == nil)
        #expect(try Self.failure(schema, #"{"tags":["a","b",3]}"#) == Self.fail("/tags/2", "is not a string"))
        #expect(try Self.failure(schema, #"{"tags":["a",""]}"#) == Self.fail("/tags/1", "is 0 characters long; the minimum is 1"))
        #expect(try Self.failure(schema, #"{"tags":[]}"#) == Self.fail("/tags", "has 0 items; the minimum is 1"))
        #expect(try Self.failure(schema, #"{"tags":["a","b","c","d"]}"#) == Self.fail("/tags", "has 4 items; the maximum is 3"))
        #expect(try Self.failure(#"{"maxItems":0}"#, "[1]") == Self.fail("", "has 1 item; the maximum is 0"))
        #expect(try Self.failure(schema, #"{"tags":"not an array"}"#) == nil)
        let nested = #"{"properties":{"list":{"items":{"required":["name"],"properties":{"name":{"type":"string"}}}}}}"#
        #expect(try Self.failure(nested, #"{"list":[{"name":"a"},{"name":1}]}"#) == Self.fail("/list/1/name", "is not a string"))
        #expect(try Self.failure(nested, #"{"list":[{"name":"a"},{}]}"#) == Self.fail("/list/1/name", "is required"))
    }

    @Test func pointersEscapeTildeAndSlash() throws {
        let schema = #"{"required":["~/"],"properties":{"a/b":{"properties":{"c~d":{"type":"integer"}}}}}"#
        #expect(try Self.failure(schema, #"{"~/":0,"a/b":{"c~d":"x"}}"#) == Self.fail("/a~1b/c~0d", "is not an integer"))
        #expect(try Self.failure(schema, #"{"a/b":{"c~d":1}}"#) == Self.fail("/~0~1", "is required"))
        #expect(try Self.failure(schema, #"{"~/":0,"a/b":{"c~d":1}}"#) == nil)
        #expect(try Self.failure(#"{"properties":{"":{"type":"null"}}}"#, #"{"":1}"#) == Self.fail("/", "is not null"))
    }

    @Test func additionalPropertiesFalseRefusesUnnamedMembers() throws {
        let schema = #"{"properties":{"a":{},"b":{}},"additionalProperties":false}"#
        #expect(try Self.failure(schema, #"{"a":1,"b":2}"#) == nil)
        #expect(try Self.failure(schema, "{}") == nil)
        #expect(try Self.failure(schema, #"{"a":1,"c/d":2}"#) == Self.fail("/c~1d", "is not an allowed property"))
        #expect(try Self.failure(#"{"additionalProperties":false}"#, #"{"x":1}"#) == Self.fail("/x", "is not an allowed property"))
        #expect(try Self.failure(#"{"properties":{"a":{}}}"#, #"{"z":1}"#) == nil)
        #expect(try Self.failure(#"{"properties":{"a":{}},"additionalProperties":true}"#, #"{"z":1}"#) == nil)
    }

    @Test func additionalPropertiesAsASchemaChecksUnnamedMembers() throws {
        let schema = #"{"properties":{"a":{"type":"string"}},"additionalProperties":{"type":"integer"}}"#
        #expect(try Self.failure(schema, #"{"a":"x","b":1,"c":2.0}"#) == nil)
        #expect(try Self.failure(schema, #"{"a":"x","b":"y"}"#) == Self.fail("/b", "is not an integer"))
        #expect(try Self.failure(schema, #"{"a":1}"#) == Self.fail("/a", "is not a string"))
        let deeper = #"{"additionalProperties":{"items":{"enum":[1]}}}"#
        #expect(try Self.failure(deeper, #"{"xs":[1,1.0,2]}"#) == Self.fail("/xs/2", "is not one of the allowed values"))
    }

    @Test func theFirstFailureIsInDocumentOrder() throws {
        let schema = #"{"required":["b","d"],"properties":{"a":{"properties":{"z":{"type":"string"}}},"c":{"type":"string"}}}"#
        #expect(try Self.failure(schema, #"{"c":1,"a":{"z":2},"b":0,"d":0}"#) == Self.fail("/a/z", "is not a string"))
        #expect(try Self.failure(schema, #"{"c":1,"a":{"z":"x"}}"#) == Self.fail("/b", "is required"))
        #expect(try Self.failure(schema, #"{"c":1,"b":0}"#) == Self.fail("/c", "is not a string"))
        #expect(try Self.failure(schema, #"{"c":"x","b":0}"#) == Self.fail("/d", "is required"))
        // A value's own keywords come before its contents.
        #expect(try Self.failure(#"{"maxItems":1,"items":{"type":"string"}}"#, "[1,2]") == Self.fail("", "has 2 items; the maximum is 1"))
        #expect(try Self.failure(#"{"type":"string","minLength":5}"#, "1") == Self.fail("", "is not a string"))
    }

    @Test func keywordsIgnoreValuesOfOtherTypes() throws {
        let schema = #"""
            {"minimum":5,"maximum":6,"minLength":3,"maxLength":4,"pattern":"^x","items":{"type":"string"},"minItems":2,
             "maxItems":3,"required":["a"],"properties":{"a":{"type":"string"}},"additionalProperties":false}
            """#
        for value in ["5.5", #""xyz""#, #"["a","b"]"#, #"{"a":"x"}"#, "true", "null"] {
            #expect(try Self.failure(schema, value) == nil, "\(value)")
        }
        #expect(try Self.failure(schema, "7") == Self.fail("", "is 7; the maximum is 6"))
        #expect(try Self.failure(schema, #""abc""#) == Self.fail("", "does not match the pattern ^x"))
    }

    @Test func annotationsAreAcceptedAndIgnored() throws {
        let schema = #"{"title":"Job","description":"A job","$comment":"internal","default":{"a":1},"examples":[1,"x"],"type":"integer"}"#
        #expect(try Self.failure(schema, "3") == nil)
        #expect(try Self.failure(schema, #""x""#) == Self.fail("", "is not an integer"))
        #expect(try Self.failure("{}", #"{"anything":[1,{"at":"all"}]}"#) == nil)
    }

    @Test func unsupportedKeywordsAreRefusedAtTheirPointer() {
        let cases: [(schema: String, path: String, keyword: String)] = [
            (##"{"$ref":"#/definitions/x"}"##, "/$ref", "$ref"),
            (#"{"oneOf":[{},{}]}"#, "/oneOf", "oneOf"),
            (#"{"properties":{"email":{"type":"string","format":"email"}}}"#, "/properties/email/format", "format"),
            (#"{"items":{"properties":{"x/y":{"anyOf":[]}}}}"#, "/items/properties/x~1y/anyOf", "anyOf"),
            (#"{"additionalProperties":{"if":{}}}"#, "/additionalProperties/if", "if"),
            (#"{"type":"object","maxProperties":3}"#, "/maxProperties", "maxProperties"),
            (#"{"exclusiveMinimum":0}"#, "/exclusiveMinimum", "exclusiveMinimum"),
            (#"{"properties":{"a~b":{"uniqueItems":true}}}"#, "/properties/a~0b/uniqueItems", "uniqueItems"),
        ]
        for (schema, path, keyword) in cases {
            #expect(Self.compileError(schema) == JSONSchema.CompileError(path: path, reason: "unsupported keyword \(keyword)"), "\(schema)")
        }
    }

    @Test func keywordValuesOfTheWrongTypeAreRefused() throws {
        let cases: [(schema: String, path: String, reason: String)] = [
            ("5", "", "is not a schema"),
            (#"{"minLength":-1}"#, "/minLength", "non-negative integer"),
            (#"{"maxLength":1.5}"#, "/maxLength", "non-negative integer"),
            (#"{"minItems":"2"}"#, "/minItems", "non-negative integer"),
            (#"{"maxItems":null}"#, "/maxItems", "non-negative integer"),
            (#"{"required":"a"}"#, "/required", "array of strings"),
            (#"{"required":["a",1]}"#, "/required/1", "must be a string"),
            (#"{"required":["a","b","a"]}"#, "/required/2", "repeats \"a\""),
            (#"{"type":"text"}"#, "/type", "unknown type \"text\""),
            (#"{"type":["string",3]}"#, "/type/1", "must be a type name"),
            (#"{"type":["string","float"]}"#, "/type/1", "unknown type \"float\""),
            (#"{"type":["string","string"]}"#, "/type/1", "repeats \"string\""),
            (#"{"type":[]}"#, "/type", "non-empty array"),
            (#"{"type":7}"#, "/type", "type name"),
            (#"{"enum":[]}"#, "/enum", "non-empty array"),
            (#"{"enum":"a"}"#, "/enum", "non-empty array"),
            (#"{"minimum":"1"}"#, "/minimum", "must be a number"),
            (#"{"maximum":true}"#, "/maximum", "must be a number"),
            (#"{"pattern":5}"#, "/pattern", "must be a string"),
            (#"{"properties":[]}"#, "/properties", "object of schemas"),
            (#"{"properties":{"a":5}}"#, "/properties/a", "is not a schema"),
            (#"{"properties":{"a":true}}"#, "/properties/a", "is not a schema"),
            (#"{"items":[{}]}"#, "/items", "an array of schemas is not supported"),
            (#"{"items":"string"}"#, "/items", "is not a schema"),
            (#"{"additionalProperties":"no"}"#, "/additionalProperties", "boolean or a schema"),
            (#"{"title":5}"#, "/title", "must be a string"),
            (#"{"description":[]}"#, "/description", "must be a string"),
            (#"{"examples":1}"#, "/examples", "must be an array"),
            (#"{"properties":{"n":{"properties":{"m":{"minimum":"0"}}}}}"#, "/properties/n/properties/m/minimum", "must be a number"),
        ]
        for (schema, path, reason) in cases {
            let error = Self.compileError(schema)
            #expect(error?.path == path, "\(schema): \(String(describing: error))")
            #expect(error?.reason.contains(reason) == true, "\(schema): \(String(describing: error))")
        }
        #expect(Self.compileError(#"{"minLength":-1}"#)?.description == "/minLength: must be a non-negative integer")
        #expect(Self.compileError(#"{"required":[],"minLength":0,"maxItems":2.0}"#) == nil)
    }

    @Test func schemasNestAtMostThirtyTwoLevels() throws {
        func nested(_ levels: Int) -> String {
            String(repeating: #"{"items":"#, count: levels - 1) + #"{"type":"integer"}"# + String(repeating: "}", count: levels - 1)
        }
        func array(_ levels: Int, _ leaf: String) -> String {
            String(repeating: "[", count: levels) + leaf + String(repeating: "]", count: levels)
        }
        let deepest = try JSONSchema(Self.json(nested(32)))
        #expect(deepest.validate(Self.json(array(31, "1"))) == nil)
        let failure = deepest.validate(Self.json(array(31, #""x""#)))
        #expect(failure == Self.fail(String(repeating: "/0", count: 31), "is not an integer"))
        let error = Self.compileError(nested(33))
        #expect(error?.path == String(repeating: "/items", count: 32))
        #expect(error?.reason == "schemas nest deeper than 32 levels")
        let mixed = String(repeating: #"{"properties":{"p":{"additionalProperties":"#, count: 16) + "{}" + String(repeating: "}}}", count: 16)
        #expect(Self.compileError(mixed)?.path == String(repeating: "/properties/p/additionalProperties", count: 16))
        // A value nested deeper than its schema is not walked past the schema.
        #expect(try Self.failure(#"{"items":{}}"#, array(60, "1")) == nil)
    }

    @Test func patternsMatchTheDocumentedSubset() throws {
        let cases: [(pattern: String, string: String, matches: Bool)] = [
            ("abc", "xxabcxx", true),
            ("abc", "ab", false),
            ("^abc$", "abc", true),
            ("^abc$", "xabc", false),
            ("^abc$", "abcx", false),
            ("^abc$", "abc\n", false),
            ("a.c", "abc", true),
            ("a.c", "a\nc", false),
            ("^.$", "👍", true),
            ("^[a-z]+$", "hello", true),
            ("^[a-z]+$", "Hello", false),
            ("^[^0-9]*$", "abc", true),
            ("^[^0-9]*$", "a1", false),
            ("^[a-cx-z]$", "y", true),
            ("^[a-cx-z]$", "d", false),
            ("^[-a]+$", "-a-", true),
            ("^[a-]+$", "a-", true),
            ("^[a\\-z]+$", "-za", true),
            ("^[a\\-z]+$", "b", false),
            ("^[\\d.]+$", "1.5", true),
            ("^[\\]\\[]+$", "][", true),
            ("^[é-ë]$", "ê", true),
            ("^[]$", "", false),
            ("^[^]$", "\n", true),
            ("^\\d{3}-\\d{4}$", "555-1234", true),
            ("^\\d{3}-\\d{4}$", "555-123", false),
            ("^\\d$", "٣", false),
            ("^\\w+$", "a_Z9", true),
            ("^\\w+$", "a-1", false),
            ("^\\s$", " ", true),
            ("^\\s$", "\u{3000}", true),
            ("^\\s$", "x", false),
            ("^\\D\\W\\S$", "a-x", true),
            ("^\\D$", "5", false),
            ("^\\.\\\\\\/\\-\\[\\]\\(\\)\\{\\}\\*\\+\\?\\|\\^\\$$", ".\\/-[](){}*+?|^$", true),
            ("^\\t\\n\\r\\v\\f\\0$", "\t\n\r\u{0B}\u{0C}\u{00}", true),
            ("^\\x41\\u00e9\\u{1F44D}\\uD83D\\uDC4D\\cJ$", "Aé👍👍\n", true),
            ("^(ab)+$", "abab", true),
            ("^(ab)+$", "aba", false),
            ("^(?:ab|cd){2}$", "abcd", true),
            ("^(?:ab|cd){2}$", "ab", false),
            ("^a{2,}$", "aa", true),
            ("^a{2,}$", "a", false),
            ("^a{1,3}$", "aaa", true),
            ("^a{1,3}$", "aaaa", false),
            ("^a{0}b$", "b", true),
            ("^a?b*c+$", "c", true),
            ("^a?b*c+$", "abbcc", true),
            ("^a?b*c+$", "ab", false),
            ("^(cat|dog)s?$", "dogs", true),
            ("^(cat|dog)s?$", "cow", false),
            ("colou?r", "my color", true),
            ("a|^b", "cb", false),
            ("a|^b", "ba", true),
            ("^$", "", true),
            ("^$", "a", false),
            ("", "anything", true),
            ("x*", "", true),
            ("^a+?$", "aaa", true),
            ("^(a|)+$", "aaa", true),
            ("^(a*)*b$", "aaab", true),
            ("^()*$", "", true),
            ("^((a|b)(c|d))+$", "acbdad", true),
            ("^((a|b)(c|d))+$", "acbda", false),
            ("(?:^|,)x", "a,x", true),
            ("(?:^|,)x", "ax", false),
            ("(^a)?b", "cb", true),
            ("^(?:$)*$", "", true),
            ("a]}", "xa]}", true),
            ("^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$", "ann@example.org", true),
            ("^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$", "ann@example", false),
        ]
        for (pattern, string, matches) in cases {
            let schema = try JSONSchema(.object(["pattern": .string(pattern)]))
            let result = schema.validate(.string(string))
            #expect((result == nil) == matches, "\(pattern) against \(string.debugDescription)")
            if !matches {
                #expect(result == Self.fail("", "does not match the pattern \(pattern)"))
            }
        }
    }

    @Test func unsupportedPatternFeaturesAreRefused() {
        let cases: [(pattern: String, what: String)] = [
            ("(a)\\1", "backreferences"),
            ("a(?=b)", "lookahead"),
            ("a(?!b)", "lookahead"),
            ("(?<=a)b", "lookbehind"),
            ("(?<!a)b", "lookbehind"),
            ("(?<year>\\d{4})", "named groups"),
            ("\\k<year>", "named backreferences"),
            ("(?i)abc", "flags"),
            ("(?s:.)", "flags"),
            ("\\bword\\b", "word boundaries"),
            ("\\Bx", "word boundaries"),
            ("[\\b]", "word boundaries"),
            ("\\p{L}", "Unicode property"),
            ("\\q", "the escape \\q"),
            ("\\é", "the escape \\é"),
            ("\\012", "octal"),
            ("\\uD800", "lone surrogates"),
            ("a{,3}", "'{'"),
            ("x{", "'{'"),
            ("[\\d-z]", "range with a class escape"),
            ("a{1001}", "above 1000"),
            ("a{0,1001}", "above 1000"),
            ("a{99999999999999999999}", "above 1000"),
            (String(repeating: "(", count: 65) + String(repeating: ")", count: 65), "nested deeper than 64"),
        ]
        for (pattern, what) in cases {
            let schema = JSONValue.object(["properties": .object(["code": .object(["pattern": .string(pattern)])])])
            do {
                _ = try JSONSchema(schema)
                Issue.record("\(pattern) compiled")
            } catch {
                #expect(error.path == "/properties/code/pattern", "\(pattern): \(error)")
                #expect(error.reason.hasPrefix("unsupported in pattern: "), "\(pattern): \(error)")
                #expect(error.reason.contains(what), "\(pattern): \(error)")
            }
        }
        #expect(throws: Never.self) { try JSONSchema(.object(["pattern": "a{1000}b{0,1000}"])) }
    }

    @Test func malformedAndOversizedPatternsAreRefused() {
        let cases: [(pattern: String, reason: String)] = [
            ("(a", "unclosed '('"),
            ("a)", "unmatched ')'"),
            ("[a", "unclosed '['"),
            ("[a-", "unclosed '['"),
            ("*a", "nothing to repeat"),
            ("a|+", "nothing to repeat"),
            ("a**", "nothing to repeat"),
            ("a{2}{3}", "nothing to repeat"),
            ("^*", "nothing to repeat"),
            ("{2}", "nothing to repeat"),
            ("[z-a]", "out of order"),
            ("a{3,2}", "out of order"),
            ("a\\", "lone '\\'"),
            ("\\x4", "two hex digits"),
            ("\\u12", "four hex digits"),
            ("\\u{110000}", "U+10FFFF"),
            ("\\c1", "letter"),
            (String(repeating: "a", count: 1_025), "longer than 1024"),
            ("(a{1000}){1000}", "too large"),
            ("(?:[a-z]{1000}){11}", "too large"),
        ]
        for (pattern, reason) in cases {
            do {
                _ = try JSONSchema(.object(["pattern": .string(pattern)]))
                Issue.record("\(pattern) compiled")
            } catch {
                #expect(error.path == "/pattern", "\(pattern): \(error)")
                #expect(error.reason.contains(reason), "\(pattern): \(error)")
            }
        }
        #expect(throws: Never.self) { try JSONSchema(.object(["pattern": .string(String(repeating: "a", count: 1_024))])) }
    }

    @Test func matchingNeverBacktracks() throws {
        let input = JSONValue.string(String(repeating: "a", count: 5_000) + "!")
        let nested = try JSONSchema(.object(["pattern": "(a+)+$"]))
        #expect(nested.validate(input) == Self.fail("", "does not match the pattern (a+)+$"))
        let alternatives = try JSONSchema(.object(["pattern": "^(a|a|aa)*$"]))
        #expect(alternatives.validate(input) != nil)
        let counted = try JSONSchema(.object(["pattern": "(?:a?){30}a{30}b"]))
        #expect(counted.validate(input) != nil)
        let classic = try JSONSchema(.object(["pattern": "^(?:a?){30}a{30}$"]))
        #expect(classic.validate(.string(String(repeating: "a", count: 30))) == nil)
        let matching = try JSONSchema(.object(["pattern": "(a+)+!$"]))
        #expect(matching.validate(input) == nil)
    }
}
