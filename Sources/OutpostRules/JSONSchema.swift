import OutpostCore

/// The JSON Schema subset a rules file uses to check every record a client writes.
///
/// A schema is compiled once, when the rules file is loaded, and refuses anything outside
/// the subset, so that a rules file never silently ignores a constraint it appears to set.
///
/// ```swift
/// let schema = try JSONSchema(try JSONParser().parse(#"""
///     {"type":"object","required":["title"],
///      "properties":{"title":{"type":"string","minLength":1,"maxLength":200}}}
///     """#))
/// schema.validate(["title": ""])
/// // Failure(path: "/title", reason: "is 0 characters long; the minimum is 1")
/// ```
///
/// Keywords:
///
/// - `type`: a name or a non-empty array of distinct names among `object`, `array`,
///   `string`, `number`, `integer`, `boolean` and `null`. An integer is a number with no
///   fractional part, whatever its text: `1.0` and `1e2` are integers, `1.5` is not.
/// - `enum` (a non-empty array) and `const`: the value must equal one of the listed values,
///   or the constant. Equality is deep, with numbers compared by value (`1 == 1.0`) and
///   strings and keys byte for byte.
/// - `minimum`, `maximum` (numbers, inclusive, compared exactly in decimal): numbers only.
/// - `minLength`, `maxLength` (non-negative integers): strings only, counting Unicode code
///   points (`unicodeScalars.count`), as JSON Schema does.
/// - `pattern` (below): strings only.
/// - `items` (a schema for every element), `minItems`, `maxItems`: arrays only.
/// - `properties` (an object of schemas), `required` (an array of distinct names) and
///   `additionalProperties` (a Boolean or a schema, applied to members `properties` does not
///   name; `true` when absent): objects only.
/// - `title`, `description` and `$comment` (strings), `default` and `examples` (an array)
///   are annotations and do not affect validation.
///
/// Any other keyword (`$ref`, `oneOf`, `format`, …) is a `CompileError`, as is a keyword
/// whose value has the wrong type (`minLength: -1`, `required: "a"`). As in JSON Schema,
/// a keyword for one type ignores values of other types: `{"minLength": 1}` admits `5`;
/// use `type` to require a type. A schema is a JSON object (`true` and `false` are schemas
/// only as `additionalProperties`), and schemas nest at most `maxDepth` levels, the root
/// being level 1, so validation recurses no deeper than that.
///
/// `pattern` is an ECMAScript regular expression subset, matched over Unicode scalars and,
/// as JSON Schema specifies, anywhere in the string unless anchored:
///
/// - literal characters; `.` (any character but `\n`, `\r`, U+2028 and U+2029);
/// - classes `[a-z_]`, negated classes `[^0-9]`, `[]` (nothing) and `[^]` (anything);
/// - escapes `\d \w \s \D \W \S` (ASCII digits and word characters; ECMAScript's white
///   space), `\t \n \r \v \f \0`, `\xHH`, `\uHHHH` (surrogate pairs combined), `\u{H…}`,
///   `\cA`…`\cZ`, and any ASCII punctuation for itself (`\. \\ \/ \- \[ \] \( \{ \$` …);
/// - anchors `^` and `$` (start and end of the whole string: there is no multiline flag);
/// - groups `( )` and `(?: )`, alternation `|`;
/// - quantifiers `*`, `+`, `?`, `{n}`, `{n,}` and `{n,m}` with counts up to
///   `maxRepetition`; a lazy `?` suffix is accepted and changes nothing, since only whether
///   the string matches is asked.
///
/// Backreferences, lookahead and lookbehind, named groups, flags, `\b` and `\B`, `\p{…}`
/// and any other escape are refused with a reason starting "unsupported in pattern", and a
/// `{` that starts no quantifier must be written `\{`. Patterns are at most
/// `maxPatternLength` scalars and compile to at most `maxPatternStates` NFA states (a
/// repeated group counts once per copy); matching runs the NFA as a set of states, so its
/// cost is at most the string's length times the number of states, with no backtracking.
public struct JSONSchema: Sendable {
    /// The deepest nesting of schemas accepted; the root is level 1.
    public static let maxDepth = 32
    /// The longest `pattern` accepted, in Unicode scalars.
    public static let maxPatternLength = 1_024
    /// The largest count accepted in a `{n,m}` quantifier.
    public static let maxRepetition = 1_000
    /// The most NFA states a `pattern` may compile to: what bounds the cost of matching
    /// one character.
    public static let maxPatternStates = 10_000

    /// Why a value does not conform: where, as an RFC 6901 JSON Pointer into the value
    /// (`""` for the value itself, `/tags/2`, `/a~1b` for the key `a/b`), and a short
    /// sentence about the value there, such as `is required` or `is not a string`.
    public struct Failure: Sendable, Equatable {
        public let path: String
        public let reason: String

        public init(path: String, reason: String) {
            self.path = path
            self.reason = reason
        }
    }

    /// Why a schema cannot be compiled: the JSON Pointer of the offending keyword (or
    /// subschema) inside the schema, and what is wrong with it.
    public struct CompileError: Error, Sendable, Equatable, CustomStringConvertible {
        public let path: String
        public let reason: String

        public init(path: String, reason: String) {
            self.path = path
            self.reason = reason
        }

        /// `/properties/title/minLength: must be a non-negative integer`.
        public var description: String { path.isEmpty ? reason : "\(path): \(reason)" }
    }

    let root: Node

    /// Compiles a schema given as a JSON value, refusing anything outside the subset.
    public init(_ value: JSONValue) throws(CompileError) {
        var pointer: [PointerToken] = []
        root = try Self.compile(value, at: &pointer, depth: 1)
    }

    /// `nil` when `value` conforms; otherwise the first failure in document order: a value's
    /// own keywords before its contents, elements in order, members in sorted key order
    /// (UTF-8 bytes), a missing required member taking its place in that order.
    public func validate(_ value: JSONValue) -> Failure? {
        var pointer: [PointerToken] = []
        return root.validate(value, at: &pointer)
    }
}

// MARK: - Compiled schemas

extension JSONSchema {
    /// One step of a JSON Pointer.
    enum PointerToken {
        case key(String)
        case index(Int)
    }

    /// `tokens` as an RFC 6901 JSON Pointer: `~` is written `~0` and `/` is written `~1`.
    static func pointer(_ tokens: [PointerToken]) -> String {
        var text = ""
        for token in tokens {
            text += "/"
            switch token {
            case .index(let index):
                text += String(index)
            case .key(let key):
                for scalar in key.unicodeScalars {
                    switch scalar {
                    case "~": text += "~0"
                    case "/": text += "~1"
                    default: text.unicodeScalars.append(scalar)
                    }
                }
            }
        }
        return text
    }

    /// The names `type` accepts.
    struct TypeSet: OptionSet, Sendable {
        let rawValue: UInt8
        static let object = TypeSet(rawValue: 1 << 0)
        static let array = TypeSet(rawValue: 1 << 1)
        static let string = TypeSet(rawValue: 1 << 2)
        static let number = TypeSet(rawValue: 1 << 3)
        static let integer = TypeSet(rawValue: 1 << 4)
        static let boolean = TypeSet(rawValue: 1 << 5)
        static let null = TypeSet(rawValue: 1 << 6)

        /// Each name, its member, and how a reason names it.
        static let names: [(name: String, type: TypeSet, phrase: String)] = [
            ("object", .object, "an object"), ("array", .array, "an array"), ("string", .string, "a string"),
            ("number", .number, "a number"), ("integer", .integer, "an integer"), ("boolean", .boolean, "a boolean"),
            ("null", .null, "null"),
        ]

        func admits(_ value: JSONValue) -> Bool {
            switch value {
            case .object: contains(.object)
            case .array: contains(.array)
            case .string: contains(.string)
            case .number(let number): contains(.number) || (contains(.integer) && JSONSchema.isInteger(number))
            case .bool: contains(.boolean)
            case .null: contains(.null)
            }
        }

        /// `a string`, `a string or null`, `an object, an array or null`.
        var phrase: String {
            let phrases = Self.names.filter { contains($0.type) }.map(\.phrase)
            guard phrases.count > 1 else { return phrases.first ?? "" }
            return phrases.dropLast().joined(separator: ", ") + " or " + phrases.last!
        }
    }

    /// What `additionalProperties` says about members `properties` does not name.
    enum Additional: Sendable {
        case allowed
        case forbidden
        case schema(Node)
    }

    /// A compiled schema's keywords; absent ones are `nil` or empty.
    struct Keywords: Sendable {
        var types: TypeSet?
        var constant: JSONValue?
        var allowed: [JSONValue]?
        var minimum: JSONNumber?
        var maximum: JSONNumber?
        var minLength: Int?
        var maxLength: Int?
        var pattern: Pattern?
        var items: Node?
        var minItems: Int?
        var maxItems: Int?
        var properties: [UTF8Key: Node] = [:]
        /// Sorted by UTF-8 bytes.
        var required: [String] = []
        var additional: Additional = .allowed
    }

    /// A compiled schema: a class so that schemas can hold their subschemas.
    final class Node: Sendable {
        let keywords: Keywords

        init(_ keywords: Keywords) { self.keywords = keywords }
    }
}

// MARK: - Compiling

extension JSONSchema {
    static func compile(_ value: JSONValue, at pointer: inout [PointerToken], depth: Int) throws(CompileError) -> Node {
        guard depth <= maxDepth else { throw failure(pointer, "schemas nest deeper than \(maxDepth) levels") }
        guard case .object(let object) = value else { throw failure(pointer, "is not a schema (a schema is a JSON object)") }
        var keywords = Keywords()
        for (key, member) in object.sorted(by: { utf8Less($0.key, $1.key) }) {
            pointer.append(.key(key))
            defer { pointer.removeLast() }
            switch key {
            case "type":
                keywords.types = try compileType(member, at: &pointer)
            case "enum":
                guard case .array(let values) = member, !values.isEmpty else { throw failure(pointer, "must be a non-empty array") }
                keywords.allowed = values
            case "const":
                keywords.constant = member
            case "minimum", "maximum":
                guard case .number(let number) = member else { throw failure(pointer, "must be a number") }
                if key == "minimum" { keywords.minimum = number } else { keywords.maximum = number }
            case "minLength":
                keywords.minLength = try count(member, at: pointer)
            case "maxLength":
                keywords.maxLength = try count(member, at: pointer)
            case "minItems":
                keywords.minItems = try count(member, at: pointer)
            case "maxItems":
                keywords.maxItems = try count(member, at: pointer)
            case "pattern":
                guard case .string(let source) = member else { throw failure(pointer, "must be a string") }
                do throws(Pattern.SyntaxError) {
                    keywords.pattern = try Pattern(source)
                } catch {
                    throw failure(pointer, error.reason)
                }
            case "items":
                if case .array = member { throw failure(pointer, "must be a schema; an array of schemas is not supported") }
                keywords.items = try compile(member, at: &pointer, depth: depth + 1)
            case "properties":
                guard case .object(let properties) = member else { throw failure(pointer, "must be an object of schemas") }
                for (name, schema) in properties.sorted(by: { utf8Less($0.key, $1.key) }) {
                    pointer.append(.key(name))
                    defer { pointer.removeLast() }
                    keywords.properties[UTF8Key(name)] = try compile(schema, at: &pointer, depth: depth + 1)
                }
            case "required":
                guard case .array(let names) = member else { throw failure(pointer, "must be an array of strings") }
                var seen: Set<UTF8Key> = []
                for (index, name) in names.enumerated() {
                    pointer.append(.index(index))
                    defer { pointer.removeLast() }
                    guard case .string(let name) = name else { throw failure(pointer, "must be a string") }
                    guard seen.insert(UTF8Key(name)).inserted else { throw failure(pointer, "repeats \"\(name)\"") }
                    keywords.required.append(name)
                }
                keywords.required.sort(by: utf8Less)
            case "additionalProperties":
                switch member {
                case .bool(let allowed): keywords.additional = allowed ? .allowed : .forbidden
                case .object: keywords.additional = .schema(try compile(member, at: &pointer, depth: depth + 1))
                default: throw failure(pointer, "must be a boolean or a schema")
                }
            case "title", "description", "$comment":
                guard case .string = member else { throw failure(pointer, "must be a string") }
            case "examples":
                guard case .array = member else { throw failure(pointer, "must be an array") }
            case "default":
                break
            default:
                throw failure(pointer, "unsupported keyword \(key)")
            }
        }
        return Node(keywords)
    }

    static func compileType(_ value: JSONValue, at pointer: inout [PointerToken]) throws(CompileError) -> TypeSet {
        func named(_ name: String, at pointer: [PointerToken]) throws(CompileError) -> TypeSet {
            guard let entry = TypeSet.names.first(where: { utf8Equal($0.name, name) }) else {
                throw failure(pointer, "unknown type \"\(name)\" (the types are \(TypeSet.names.map(\.name).joined(separator: ", ")))")
            }
            return entry.type
        }
        switch value {
        case .string(let name):
            return try named(name, at: pointer)
        case .array(let names) where !names.isEmpty:
            var types: TypeSet = []
            for (index, name) in names.enumerated() {
                pointer.append(.index(index))
                defer { pointer.removeLast() }
                guard case .string(let name) = name else { throw failure(pointer, "must be a type name") }
                let type = try named(name, at: pointer)
                guard !types.contains(type) else { throw failure(pointer, "repeats \"\(name)\"") }
                types.insert(type)
            }
            return types
        default:
            throw failure(pointer, "must be a type name or a non-empty array of type names")
        }
    }

    /// A non-negative integer keyword value; `2.0` counts as `2`, as in JSON Schema.
    static func count(_ value: JSONValue, at pointer: [PointerToken]) throws(CompileError) -> Int {
        guard case .number(let number) = value, let count = number.int64Value, count >= 0 else {
            throw failure(pointer, "must be a non-negative integer")
        }
        return Int(count)
    }

    static func failure(_ pointer: [PointerToken], _ reason: String) -> CompileError {
        CompileError(path: JSONSchema.pointer(pointer), reason: reason)
    }
}

// MARK: - Validating

extension JSONSchema.Node {
    typealias PointerToken = JSONSchema.PointerToken

    /// The first failure of `value`, found at `pointer`; recursion follows the schema, so it
    /// is at most `JSONSchema.maxDepth` deep.
    func validate(_ value: JSONValue, at pointer: inout [PointerToken]) -> JSONSchema.Failure? {
        let k = keywords
        func failure(_ reason: String) -> JSONSchema.Failure {
            JSONSchema.Failure(path: JSONSchema.pointer(pointer), reason: reason)
        }
        if let types = k.types, !types.admits(value) { return failure("is not \(types.phrase)") }
        if let constant = k.constant, !JSONSchema.equal(value, constant) { return failure("is not the allowed value") }
        if let allowed = k.allowed, !allowed.contains(where: { JSONSchema.equal(value, $0) }) {
            return failure("is not one of the allowed values")
        }
        switch value {
        case .number(let number):
            if let minimum = k.minimum, JSONSchema.compare(number, minimum) < 0 {
                return failure("is \(number.lexeme); the minimum is \(minimum.lexeme)")
            }
            if let maximum = k.maximum, JSONSchema.compare(number, maximum) > 0 {
                return failure("is \(number.lexeme); the maximum is \(maximum.lexeme)")
            }
        case .string(let string):
            if k.minLength != nil || k.maxLength != nil {
                let length = string.unicodeScalars.count
                let long = "is \(length) character\(length == 1 ? "" : "s") long"
                if let minimum = k.minLength, length < minimum { return failure("\(long); the minimum is \(minimum)") }
                if let maximum = k.maxLength, length > maximum { return failure("\(long); the maximum is \(maximum)") }
            }
            if let pattern = k.pattern, !pattern.matches(string) {
                return failure("does not match the pattern \(pattern.source)")
            }
        case .array(let elements):
            let has = "has \(elements.count) item\(elements.count == 1 ? "" : "s")"
            if let minimum = k.minItems, elements.count < minimum { return failure("\(has); the minimum is \(minimum)") }
            if let maximum = k.maxItems, elements.count > maximum { return failure("\(has); the maximum is \(maximum)") }
            if let items = k.items {
                for (index, element) in elements.enumerated() {
                    pointer.append(.index(index))
                    defer { pointer.removeLast() }
                    if let failure = items.validate(element, at: &pointer) { return failure }
                }
            }
        case .object(let object):
            return validateMembers(object, at: &pointer)
        case .bool, .null:
            break
        }
        return nil
    }

    /// `properties`, `required` and `additionalProperties`, member by member in sorted key order.
    func validateMembers(_ object: JSONObject, at pointer: inout [PointerToken]) -> JSONSchema.Failure? {
        let k = keywords
        if k.properties.isEmpty, k.required.isEmpty, case .allowed = k.additional { return nil }
        var keys = object.keys
        for name in k.required where object[name] == nil { keys.append(name) }
        keys.sort(by: utf8Less)
        for key in keys {
            pointer.append(.key(key))
            defer { pointer.removeLast() }
            guard let member = object[key] else {
                return JSONSchema.Failure(path: JSONSchema.pointer(pointer), reason: "is required")
            }
            let schema: JSONSchema.Node
            if let named = k.properties[UTF8Key(key)] {
                schema = named
            } else {
                switch k.additional {
                case .allowed:
                    continue
                case .forbidden:
                    return JSONSchema.Failure(path: JSONSchema.pointer(pointer), reason: "is not an allowed property")
                case .schema(let additional):
                    schema = additional
                }
            }
            if let failure = schema.validate(member, at: &pointer) { return failure }
        }
        return nil
    }
}

// MARK: - Values and numbers

extension JSONSchema {
    /// Deep equality with numbers by value and strings byte for byte. Iterative, so that a
    /// deeply nested `const` costs heap rather than stack.
    static func equal(_ a: JSONValue, _ b: JSONValue) -> Bool {
        var pending: [(JSONValue, JSONValue)] = [(a, b)]
        while let (x, y) = pending.popLast() {
            switch (x, y) {
            case (.null, .null):
                continue
            case (.bool(let p), .bool(let q)):
                guard p == q else { return false }
            case (.number(let p), .number(let q)):
                guard compare(p, q) == 0 else { return false }
            case (.string(let p), .string(let q)):
                guard utf8Equal(p, q) else { return false }
            case (.array(let p), .array(let q)):
                guard p.count == q.count else { return false }
                pending.append(contentsOf: zip(p, q))
            case (.object(let p), .object(let q)):
                guard p.count == q.count else { return false }
                for (key, value) in p {
                    guard let other = q[key] else { return false }
                    pending.append((value, other))
                }
            default:
                return false
            }
        }
        return true
    }

    /// -1, 0 or 1 as `a` is less than, equal to or greater than `b`, by exact decimal value.
    static func compare(_ a: JSONNumber, _ b: JSONNumber) -> Int {
        if case .int(let x) = a.storage, case .int(let y) = b.storage { return x < y ? -1 : (x > y ? 1 : 0) }
        return ExactNumber(a).compare(ExactNumber(b))
    }

    /// Whether `number` has no fractional part (`1.0`, `1e2`, `-0`, `1e400`).
    static func isInteger(_ number: JSONNumber) -> Bool {
        if case .int = number.storage { return true }
        return ExactNumber(number).isInteger
    }

    /// A JSON number's exact value, `digits × 10^exponent`, with no leading or trailing zero
    /// digits (none at all for zero), so that equal values have equal representations.
    /// Exponents are read up to ±10^15, far beyond any number a double can hold.
    struct ExactNumber {
        let negative: Bool
        let digits: [UInt8]
        let exponent: Int

        init(_ number: JSONNumber) {
            var lexeme = number.lexeme  // a valid RFC 8259 lexeme
            let parts = lexeme.withUTF8 { DecimalParts(lexeme: $0) }
            negative = parts.negative
            digits = parts.digits
            exponent = parts.exponent
        }

        var isInteger: Bool { exponent >= 0 }

        func compare(_ other: ExactNumber) -> Int {
            let sign = digits.isEmpty ? 0 : (negative ? -1 : 1)
            let otherSign = other.digits.isEmpty ? 0 : (other.negative ? -1 : 1)
            if sign != otherSign { return sign < otherSign ? -1 : 1 }
            if sign == 0 { return 0 }
            // Both non-zero with one sign: compare magnitudes, first by where the leading
            // digit sits, then digit by digit (a missing digit is a zero).
            let magnitude: Int
            let lead = digits.count + exponent, otherLead = other.digits.count + other.exponent
            if lead != otherLead {
                magnitude = lead < otherLead ? -1 : 1
            } else if digits == other.digits {
                magnitude = 0
            } else {
                magnitude = digits.lexicographicallyPrecedes(other.digits) ? -1 : 1
            }
            return sign * magnitude
        }
    }
}

// MARK: - Patterns

extension JSONSchema {
    /// A compiled `pattern`: a Thompson NFA over Unicode scalars, run by keeping the set of
    /// live states (each state at most once per position), so matching never backtracks.
    struct Pattern: Sendable {
        struct SyntaxError: Error {
            let reason: String
        }

        /// One NFA state. Payloads are plain integers so that stepping copies no references.
        enum Instruction: Sendable {
            /// Consume this scalar.
            case scalar(UInt32)
            /// Consume one scalar in `sets[index]`.
            case set(Int)
            /// Continue at both targets.
            case split(Int, Int)
            case jump(Int)
            /// `^` and `$`.
            case atStart
            case atEnd
            case match
        }

        let source: String
        let program: [Instruction]
        let sets: [ScalarSet]

        init(_ source: String) throws(SyntaxError) {
            let scalars = Array(source.unicodeScalars)
            guard scalars.count <= maxPatternLength else {
                throw SyntaxError(reason: "the pattern is longer than \(maxPatternLength) characters")
            }
            var parser = PatternParser(scalars: scalars)
            let tree = try parser.parse()
            guard tree.size <= maxPatternStates - 1 else {
                throw SyntaxError(reason: "the pattern is too large: it needs more than \(maxPatternStates) states (repeated groups count once per repetition)")
            }
            var program = Program()
            program.instructions.reserveCapacity(tree.size + 1)
            tree.emit(into: &program)
            program.instructions.append(.match)
            self.source = source
            self.program = program.instructions
            self.sets = program.sets
        }

        /// Whether the pattern matches anywhere in `string`.
        func matches(_ string: String) -> Bool {
            let count = program.count
            let anchored: Bool
            if case .atStart = program[0] { anchored = true } else { anchored = false }
            // `seen[pc] == position` when state `pc` is already in the list for `position`.
            var seen = [Int](repeating: -1, count: count)
            var current: [Int] = [], next: [Int] = [], stack: [Int] = []
            current.reserveCapacity(count)
            next.reserveCapacity(count)

            /// Adds `start` and every state it reaches without consuming a scalar to `list`;
            /// `true` when that reaches `match`.
            func add(_ start: Int, to list: inout [Int], position: Int, atEnd: Bool) -> Bool {
                stack.append(start)
                while let pc = stack.popLast() {
                    guard seen[pc] != position else { continue }
                    seen[pc] = position
                    switch program[pc] {
                    case .scalar, .set: list.append(pc)
                    case .split(let first, let second):
                        stack.append(second)
                        stack.append(first)
                    case .jump(let target): stack.append(target)
                    case .atStart: if position == 0 { stack.append(pc + 1) }
                    case .atEnd: if atEnd { stack.append(pc + 1) }
                    case .match:
                        stack.removeAll()
                        return true
                    }
                }
                return false
            }

            let scalars = string.unicodeScalars
            var index = scalars.startIndex
            var position = 0
            if add(0, to: &current, position: 0, atEnd: index == scalars.endIndex) { return true }
            while index != scalars.endIndex {
                if anchored && current.isEmpty { return false }
                let scalar = scalars[index].value
                scalars.formIndex(after: &index)
                position += 1
                let atEnd = index == scalars.endIndex
                next.removeAll(keepingCapacity: true)
                for pc in current {
                    switch program[pc] {
                    case .scalar(let expected): guard scalar == expected else { continue }
                    case .set(let index): guard sets[index].contains(scalar) else { continue }
                    default: continue
                    }
                    if add(pc + 1, to: &next, position: position, atEnd: atEnd) { return true }
                }
                // Unanchored search: a match may also start here.
                if !anchored, add(0, to: &next, position: position, atEnd: atEnd) { return true }
                swap(&current, &next)
            }
            return false
        }
    }

    /// A pattern's instructions as they are written, with its character sets stored once each.
    struct Program {
        var instructions: [Pattern.Instruction] = []
        var sets: [ScalarSet] = []
        var setIndex: [ScalarSet: Int] = [:]

        mutating func append(_ instruction: Pattern.Instruction) { instructions.append(instruction) }

        mutating func append(_ set: ScalarSet) {
            if set.ranges.count == 1, set.ranges[0].lowerBound == set.ranges[0].upperBound {
                instructions.append(.scalar(set.ranges[0].lowerBound))
                return
            }
            if let index = setIndex[set] {
                instructions.append(.set(index))
                return
            }
            setIndex[set] = sets.count
            instructions.append(.set(sets.count))
            sets.append(set)
        }

        var count: Int { instructions.count }

        subscript(index: Int) -> Pattern.Instruction {
            get { instructions[index] }
            set { instructions[index] = newValue }
        }
    }

    /// A set of Unicode scalar values as sorted, disjoint, non-adjacent ranges.
    struct ScalarSet: Sendable, Hashable {
        let ranges: [ClosedRange<UInt32>]

        init(_ ranges: [ClosedRange<UInt32>]) {
            var merged: [ClosedRange<UInt32>] = []
            for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
                if let last = merged.last, range.lowerBound <= last.upperBound &+ 1 {
                    merged[merged.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
                } else {
                    merged.append(range)
                }
            }
            self.ranges = merged
        }

        init(_ scalar: UInt32) { ranges = [scalar...scalar] }

        func contains(_ scalar: UInt32) -> Bool {
            var low = 0, high = ranges.count
            while low < high {
                let middle = (low + high) / 2
                if ranges[middle].upperBound < scalar {
                    low = middle + 1
                } else if ranges[middle].lowerBound > scalar {
                    high = middle
                } else {
                    return true
                }
            }
            return false
        }

        /// Every scalar value (0 to U+10FFFF) not in the set.
        var inverted: ScalarSet {
            var result: [ClosedRange<UInt32>] = []
            var next: UInt32 = 0
            for range in ranges {
                if range.lowerBound > next { result.append(next...(range.lowerBound - 1)) }
                next = range.upperBound + 1
            }
            if next <= 0x10FFFF { result.append(next...0x10FFFF) }
            return ScalarSet(result)
        }

        static let digit = ScalarSet([0x30...0x39])
        static let word = ScalarSet([0x30...0x39, 0x41...0x5A, 0x5F...0x5F, 0x61...0x7A])
        /// ECMAScript's WhiteSpace and LineTerminator.
        static let space = ScalarSet([
            0x09...0x0D, 0x20...0x20, 0xA0...0xA0, 0x1680...0x1680, 0x2000...0x200A, 0x2028...0x2029,
            0x202F...0x202F, 0x205F...0x205F, 0x3000...0x3000, 0xFEFF...0xFEFF,
        ])
        /// What `.` matches: anything but a line terminator.
        static let dot = ScalarSet([0x0A...0x0A, 0x0D...0x0D, 0x2028...0x2029]).inverted
    }

    /// A parsed pattern.
    indirect enum PatternTree {
        case scalars(ScalarSet)
        case atStart
        case atEnd
        case sequence([PatternTree])
        case choice([PatternTree])
        case repetition(PatternTree, min: Int, max: Int?)

        /// The number of instructions `emit` writes, saturating above `maxPatternStates`.
        var size: Int {
            let cap = maxPatternStates + 1
            switch self {
            case .scalars, .atStart, .atEnd:
                return 1
            case .sequence(let items):
                return items.reduce(0) { min($0 + $1.size, cap) }
            case .choice(let branches):
                return min(branches.reduce(2 * (branches.count - 1)) { min($0 + $1.size, cap) }, cap)
            case .repetition(let body, let low, let high):
                let size = body.size
                guard size > 0 else { return 0 }
                let optional = high.map { ($0 - low) * (size + 1) } ?? (size + 2)
                return min(low * size + optional, cap)
            }
        }

        /// Appends this tree's instructions; jumps to the end land on `program.count` after it.
        func emit(into program: inout Program) {
            switch self {
            case .scalars(let set):
                program.append(set)
            case .atStart:
                program.append(.atStart)
            case .atEnd:
                program.append(.atEnd)
            case .sequence(let items):
                for item in items { item.emit(into: &program) }
            case .choice(let branches):
                var exits: [Int] = []
                for branch in branches.dropLast() {
                    let split = program.count
                    program.append(.split(0, 0))
                    branch.emit(into: &program)
                    exits.append(program.count)
                    program.append(.jump(0))
                    program[split] = .split(split + 1, program.count)
                }
                branches.last!.emit(into: &program)
                for exit in exits { program[exit] = .jump(program.count) }
            case .repetition(let body, let low, let high):
                guard body.size > 0 else { return }  // repeating nothing matches nothing more
                for _ in 0..<low { body.emit(into: &program) }
                if let high {
                    var splits: [Int] = []
                    for _ in low..<high {
                        splits.append(program.count)
                        program.append(.split(0, 0))
                        body.emit(into: &program)
                    }
                    for split in splits { program[split] = .split(split + 1, program.count) }
                } else {
                    let loop = program.count
                    program.append(.split(0, 0))
                    body.emit(into: &program)
                    program.append(.jump(loop))
                    program[loop] = .split(loop + 1, program.count)
                }
            }
        }
    }

    /// Reads the pattern subset described on `JSONSchema`.
    struct PatternParser {
        typealias SyntaxError = Pattern.SyntaxError

        /// The deepest nesting of groups accepted.
        static let maxGroupDepth = 64

        let scalars: [Unicode.Scalar]
        var position = 0
        var depth = 0

        init(scalars: [Unicode.Scalar]) { self.scalars = scalars }

        var peek: Unicode.Scalar? { position < scalars.count ? scalars[position] : nil }

        func peek(_ offset: Int) -> Unicode.Scalar? {
            position + offset < scalars.count ? scalars[position + offset] : nil
        }

        static func invalid(_ reason: String) -> SyntaxError { SyntaxError(reason: "invalid pattern: \(reason)") }
        static func unsupported(_ what: String) -> SyntaxError { SyntaxError(reason: "unsupported in pattern: \(what)") }

        mutating func parse() throws(SyntaxError) -> PatternTree {
            let tree = try alternation()
            if peek != nil { throw Self.invalid("unmatched ')'") }  // alternation stops only at ')' or the end
            return tree
        }

        mutating func alternation() throws(SyntaxError) -> PatternTree {
            var branches = [try sequence()]
            while peek == "|" {
                position += 1
                branches.append(try sequence())
            }
            return branches.count == 1 ? branches[0] : .choice(branches)
        }

        mutating func sequence() throws(SyntaxError) -> PatternTree {
            var items: [PatternTree] = []
            while let scalar = peek, scalar != "|", scalar != ")" {
                var item = try atom()
                if let (low, high) = try quantifier() {
                    // A bare anchor cannot be repeated, as in ECMAScript; a group holding one can.
                    if scalar == "^" || scalar == "$" { throw Self.invalid("nothing to repeat before a quantifier") }
                    item = .repetition(item, min: low, max: high)
                    if peek == "?" { position += 1 }  // lazy: matches the same strings
                    if let next = peek, "*+?".unicodeScalars.contains(next) || (next == "{" && isQuantifierBrace()) {
                        throw Self.invalid("nothing to repeat before a quantifier")
                    }
                }
                items.append(item)
            }
            return items.count == 1 ? items[0] : .sequence(items)
        }

        mutating func atom() throws(SyntaxError) -> PatternTree {
            let scalar = scalars[position]
            position += 1
            switch scalar {
            case "(":
                return try group()
            case "[":
                return .scalars(try characterClass())
            case ".":
                return .scalars(ScalarSet.dot)
            case "^":
                return .atStart
            case "$":
                return .atEnd
            case "\\":
                switch try escape() {
                case .scalar(let value): return .scalars(ScalarSet(value))
                case .set(let set): return .scalars(set)
                }
            case "*", "+", "?":
                throw Self.invalid("nothing to repeat before '\(scalar)'")
            case "{":
                position -= 1
                if isQuantifierBrace() { throw Self.invalid("nothing to repeat before '{'") }
                throw Self.unsupported("a '{' that starts no quantifier (write \\{ for the character)")
            default:
                return .scalars(ScalarSet(scalar.value))
            }
        }

        /// After `(`.
        mutating func group() throws(SyntaxError) -> PatternTree {
            if peek == "?" {
                switch (peek(1), peek(2)) {
                case (":", _): position += 2
                case ("=", _), ("!", _): throw Self.unsupported("lookahead (?\(peek(1)!)")
                case ("<", "="), ("<", "!"): throw Self.unsupported("lookbehind (?<\(peek(2)!)")
                case ("<", _): throw Self.unsupported("named groups (?<name>")
                default: throw Self.unsupported("flags and other (? groups; only (?: is supported")
                }
            }
            depth += 1
            defer { depth -= 1 }
            guard depth <= Self.maxGroupDepth else { throw Self.unsupported("groups nested deeper than \(Self.maxGroupDepth)") }
            let inner = try alternation()
            guard peek == ")" else { throw Self.invalid("unclosed '('") }
            position += 1
            return inner
        }

        /// Whether the scalars from `position` are `{n}`, `{n,}` or `{n,m}`.
        func isQuantifierBrace() -> Bool {
            var index = position
            guard index < scalars.count, scalars[index] == "{" else { return false }
            index += 1
            func digits() -> Int {
                let start = index
                while index < scalars.count, ("0"..."9").contains(scalars[index]) { index += 1 }
                return index - start
            }
            guard digits() > 0 else { return false }
            if index < scalars.count, scalars[index] == "," {
                index += 1
                _ = digits()
            }
            return index < scalars.count && scalars[index] == "}"
        }

        /// A quantifier at `position`, consumed, as its bounds (`nil` for no upper bound).
        mutating func quantifier() throws(SyntaxError) -> (Int, Int?)? {
            switch peek {
            case "*":
                position += 1
                return (0, nil)
            case "+":
                position += 1
                return (1, nil)
            case "?":
                position += 1
                return (0, 1)
            case "{":
                guard isQuantifierBrace() else {
                    throw Self.unsupported("a '{' that starts no quantifier (write \\{ for the character)")
                }
                position += 1
                let low = number()
                var high: Int? = low
                if peek == "," {
                    position += 1
                    high = peek == "}" ? nil : number()
                }
                position += 1  // "}"
                let limit = JSONSchema.maxRepetition
                guard low <= limit, (high ?? 0) <= limit else { throw Self.unsupported("repetition counts above \(limit)") }
                if let high, high < low { throw Self.invalid("{\(low),\(high)} has its numbers out of order") }
                return (low, high)
            default:
                return nil
            }
        }

        /// Decimal digits at `position`, saturating well above any accepted count.
        mutating func number() -> Int {
            var value = 0
            while let scalar = peek, ("0"..."9").contains(scalar) {
                value = min(value * 10 + Int(scalar.value - 0x30), 1_000_000)
                position += 1
            }
            return value
        }

        enum ClassAtom {
            case scalar(UInt32)
            case set(ScalarSet)
        }

        /// After `[`.
        mutating func characterClass() throws(SyntaxError) -> ScalarSet {
            var negated = false
            if peek == "^" {
                negated = true
                position += 1
            }
            var ranges: [ClosedRange<UInt32>] = []
            while true {
                guard let scalar = peek else { throw Self.invalid("unclosed '['") }
                if scalar == "]" {
                    position += 1
                    break
                }
                let first = try classAtom()
                if peek == "-", let after = peek(1), after != "]" {
                    position += 1
                    let last = try classAtom()
                    guard case .scalar(let low) = first, case .scalar(let high) = last else {
                        throw Self.unsupported("a range with a class escape such as \\d at one end")
                    }
                    guard low <= high else { throw Self.invalid("the range \(Self.show(low))-\(Self.show(high)) is out of order") }
                    ranges.append(low...high)
                } else {
                    switch first {
                    case .scalar(let value): ranges.append(value...value)
                    case .set(let set): ranges.append(contentsOf: set.ranges)
                    }
                }
            }
            let set = ScalarSet(ranges)
            return negated ? set.inverted : set
        }

        mutating func classAtom() throws(SyntaxError) -> ClassAtom {
            guard let scalar = peek else { throw Self.invalid("unclosed '['") }
            position += 1
            if scalar == "\\" { return try escape() }
            return .scalar(scalar.value)
        }

        /// After `\`.
        mutating func escape() throws(SyntaxError) -> ClassAtom {
            guard let scalar = peek else { throw Self.invalid("a lone '\\' at the end") }
            position += 1
            switch scalar {
            case "d": return .set(ScalarSet.digit)
            case "D": return .set(ScalarSet.digit.inverted)
            case "w": return .set(ScalarSet.word)
            case "W": return .set(ScalarSet.word.inverted)
            case "s": return .set(ScalarSet.space)
            case "S": return .set(ScalarSet.space.inverted)
            case "t": return .scalar(0x09)
            case "n": return .scalar(0x0A)
            case "v": return .scalar(0x0B)
            case "f": return .scalar(0x0C)
            case "r": return .scalar(0x0D)
            case "0":
                if let next = peek, ("0"..."9").contains(next) { throw Self.unsupported("octal escapes (\\0\(next))") }
                return .scalar(0)
            case "1"..."9": throw Self.unsupported("backreferences (\\\(scalar))")
            case "b", "B": throw Self.unsupported("word boundaries (\\\(scalar))")
            case "k": throw Self.unsupported("named backreferences (\\k)")
            case "p", "P": throw Self.unsupported("Unicode property escapes (\\\(scalar))")
            case "c":
                guard let letter = peek, ("a"..."z").contains(letter) || ("A"..."Z").contains(letter) else {
                    throw Self.invalid("\\c must be followed by a letter")
                }
                position += 1
                return .scalar(letter.value % 32)
            case "x":
                guard let value = hex(count: 2) else { throw Self.invalid("\\x must be followed by two hex digits") }
                return .scalar(value)
            case "u":
                return .scalar(try unicodeEscape())
            default:
                if scalar.isASCII, !("a"..."z").contains(scalar), !("A"..."Z").contains(scalar), !("0"..."9").contains(scalar),
                    scalar.value >= 0x20, scalar.value < 0x7F
                {
                    return .scalar(scalar.value)  // identity escape of punctuation
                }
                throw Self.unsupported("the escape \\\(scalar)")
            }
        }

        /// After `\u`: `HHHH` (a surrogate pair as `\uHHHH\uHHHH`) or `{H…}`.
        mutating func unicodeEscape() throws(SyntaxError) -> UInt32 {
            if peek == "{" {
                position += 1
                var value: UInt32 = 0
                var digits = 0
                while let scalar = peek, let digit = Self.hexValue(scalar) {
                    value = min(value * 16 + digit, 0x110000)
                    digits += 1
                    position += 1
                }
                guard digits > 0, peek == "}" else { throw Self.invalid("\\u{ must hold hex digits and end with }") }
                position += 1
                guard value <= 0x10FFFF else { throw Self.invalid("\\u{…} beyond U+10FFFF") }
                guard !(0xD800...0xDFFF).contains(value) else { throw Self.unsupported("lone surrogates (\(Self.show(value)))") }
                return value
            }
            guard let value = hex(count: 4) else { throw Self.invalid("\\u must be followed by four hex digits or {…}") }
            if (0xD800...0xDBFF).contains(value), peek == "\\", peek(1) == "u" {
                let mark = position
                position += 2
                if let low = hex(count: 4), (0xDC00...0xDFFF).contains(low) {
                    return 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
                }
                position = mark
            }
            guard !(0xD800...0xDFFF).contains(value) else { throw Self.unsupported("lone surrogates (\(Self.show(value)))") }
            return value
        }

        mutating func hex(count: Int) -> UInt32? {
            var value: UInt32 = 0
            for offset in 0..<count {
                guard let scalar = peek(offset), let digit = Self.hexValue(scalar) else { return nil }
                value = value * 16 + digit
            }
            position += count
            return value
        }

        static func hexValue(_ scalar: Unicode.Scalar) -> UInt32? {
            switch scalar {
            case "0"..."9": scalar.value - 0x30
            case "a"..."f": scalar.value - 0x61 + 10
            case "A"..."F": scalar.value - 0x41 + 10
            default: nil
            }
        }

        /// A scalar value for a reason: the character when printable ASCII, else `U+XXXX`.
        static func show(_ value: UInt32) -> String {
            if (0x21..<0x7F).contains(value) { return String(Unicode.Scalar(UInt8(value))) }
            let digits = String(value, radix: 16, uppercase: true)
            return "U+" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits
        }
    }
}
