import Foundation
import OutpostCore

// A filter written as text, for people and tools that cannot build one in Swift: the
// command-line client's `query --where`, a debug console, a filter kept in a setting.
//
//     status == "open" and (priority >= 3 or tags contains "urgent") and not site.name startsWith "Test"
//
// Grammar (keywords in any case; `and` binds tighter than `or`):
//
//     expr   := or
//     or     := and (("or" | "||") and)*
//     and    := unary (("and" | "&&") unary)*
//     unary  := ("not" | "!") unary | "(" expr ")" | atom
//     atom   := field op value | field "in" "[" value ("," value)* "]" | field "contains" value
//             | field "startsWith" string | field "is" ["not"] "null" | field "is" ["not"] "missing"
//             | "pending"
//     op     := "==" | "=" | "!=" | "<" | "<=" | ">" | ">="
//     value  := JSON literal (string, number, true, false, null) | date("RFC 3339 text")
//     field  := name ("." name)*
//     name   := [A-Za-z_][A-Za-z0-9_]* | `any text` (a backquote inside is doubled)
//
// A field whose first name is a keyword (`and`, `not`, `null`…) is written in backquotes;
// `pending` alone is the record's local state, and a field when an operator follows it.

extension QueryFilter {
    /// The filter `text` spells (the grammar is in FilterParser.swift): `status == "open" and
    /// not site.name startsWith "Test"`. Numbers keep their exact text, as in a record;
    /// `date("2026-12-07T10:00:00Z")` is a point in time.
    ///
    /// - Throws: `OutpostError.invalidQuery` naming the character (counted from 1) where the
    ///   text stops making sense, e.g. "at character 12: expected a value, found \")\"".
    ///   Text over 10,000 characters, or nesting parentheses, `not`s, `and`s and `or`s more
    ///   than `QueryFilter.maxDepth` (20) levels deep, is refused.
    public init(parsing text: String) throws {
        var parser = try FilterParser(text)
        self = try parser.parse()
    }
}

/// The recursive-descent parser of `QueryFilter(parsing:)`: a lexer over the text's Unicode
/// scalars, one token of lookahead, and one function per rule of the grammar.
struct FilterParser {
    /// The longest text parsed, in characters.
    static let maxLength = 10_000
    /// The deepest nesting: of parentheses and `not`s while parsing, and of the filter's
    /// `and`, `or` and `not` nodes, as the query compiler allows (`QueryCompiler.check`).
    static let maxDepth = QueryFilter.maxDepth

    enum Token: Equatable {
        /// A bare name or keyword.
        case word(String)
        /// A backquoted name.
        case quotedName(String)
        case string(String)
        case number(JSONNumber)
        /// Punctuation and operators: `(`, `)`, `[`, `]`, `,`, `.`, `==`, `=`, `!=`, `<`,
        /// `<=`, `>`, `>=`, `&&`, `||`, `!`.
        case symbol(String)
        case end
    }

    private let scalars: [Unicode.Scalar]
    /// Where the lexer reads next.
    private var cursor = 0
    /// The current token and the scalar offset it starts at.
    private var token: Token = .end
    private var tokenStart = 0
    /// Parentheses and `not`s open around the current token.
    private var nesting = 0

    init(_ text: String) throws {
        var count = 0
        for _ in text {
            count += 1
            guard count <= Self.maxLength else {
                throw OutpostError.invalidQuery("a filter is at most \(Self.maxLength) characters")
            }
        }
        scalars = Array(text.unicodeScalars)
    }

    /// The whole text as one filter.
    mutating func parse() throws -> QueryFilter {
        try advance()
        let (node, _) = try parseOr()
        guard token == .end else { throw error("expected \"and\", \"or\" or the end") }
        return QueryFilter(node)
    }

    // MARK: Rules

    /// A parsed part and its height in filter nodes (a comparison is 1).
    private typealias Part = (node: QueryFilter.Node, height: Int)

    private mutating func parseOr() throws -> Part {
        let start = tokenStart
        var parts = [try parseAnd()]
        while isWord("or") || token == .symbol("||") {
            try advance()
            parts.append(try parseAnd())
        }
        return try group(parts, start: start, QueryFilter.Node.any)
    }

    private mutating func parseAnd() throws -> Part {
        let start = tokenStart
        var parts = [try parseUnary()]
        while isWord("and") || token == .symbol("&&") {
            try advance()
            parts.append(try parseUnary())
        }
        return try group(parts, start: start, QueryFilter.Node.all)
    }

    /// One part alone, or a chain of them as one `all` or `any` (not nested pairs, so a
    /// long chain does not count as deep nesting).
    private func group(_ parts: [Part], start: Int, _ make: ([QueryFilter.Node]) -> QueryFilter.Node) throws -> Part {
        guard parts.count > 1 else { return parts[0] }
        let height = parts.map(\.height).max()! + 1
        guard height <= Self.maxDepth else { throw error("a filter nests at most \(Self.maxDepth) levels", at: start) }
        return (make(parts.map(\.node)), height)
    }

    private mutating func parseUnary() throws -> Part {
        let start = tokenStart
        if isWord("not") || token == .symbol("!") {
            try open()
            let (inner, height) = try parseUnary()
            nesting -= 1
            guard height < Self.maxDepth else { throw error("a filter nests at most \(Self.maxDepth) levels", at: start) }
            return (.not(inner), height + 1)
        }
        if token == .symbol("(") {
            try open()
            let part = try parseOr()
            guard token == .symbol(")") else { throw error("expected \")\" to close the \"(\" at character \(position(start))") }
            nesting -= 1
            try advance()
            return part
        }
        return (try parseAtom(), 1)
    }

    /// Steps into a parenthesis or a `not`, within the nesting limit.
    private mutating func open() throws {
        nesting += 1
        guard nesting <= Self.maxDepth else { throw error("a filter nests at most \(Self.maxDepth) levels", at: tokenStart) }
        try advance()
    }

    private mutating func parseAtom() throws -> QueryFilter.Node {
        let start = tokenStart
        let bare = token
        let field = try parseField()
        if isWord("in") {
            try advance()
            guard token == .symbol("[") else { throw error("expected \"[\" after \"in\"") }
            try advance()
            var values = [try parseValue()]
            while token == .symbol(",") {
                try advance()
                values.append(try parseValue())
            }
            guard token == .symbol("]") else { throw error("expected \",\" or \"]\"") }
            try advance()
            return .oneOf(field, values)
        }
        if isWord("contains") {
            try advance()
            return .contains(field, try parseValue())
        }
        if isWord("startsWith") {
            try advance()
            guard case .string(let prefix) = token else { throw error("expected a string after \"startsWith\"") }
            try advance()
            return .hasPrefix(field, prefix)
        }
        if isWord("is") {
            try advance()
            var negated = false
            if isWord("not") {
                negated = true
                try advance()
            }
            let node: QueryFilter.Node
            if isWord("null") {
                node = .isNull(field)
            } else if isWord("missing") {
                node = .isMissing(field)
            } else {
                throw error("expected \"null\" or \"missing\" after \"is\(negated ? " not" : "")\"")
            }
            try advance()
            return negated ? .not(node) : node
        }
        if case .symbol(let s) = token, let op = Self.comparison(s) {
            try advance()
            return .compare(field, op, try parseValue())
        }
        // `pending` alone (no operator after it) is the record's local state.
        if case .word(let w) = bare, w.lowercased() == "pending", field.path.count == 1 {
            return .pending
        }
        throw error("expected an operator (==, !=, <, <=, >, >=, in, contains, startsWith, is) after the field \(field) at character \(position(start))")
    }

    private static func comparison(_ symbol: String) -> QueryFilter.Comparison? {
        switch symbol {
        case "==", "=": .equal
        case "!=": .notEqual
        case "<": .less
        case "<=": .lessOrEqual
        case ">": .greater
        case ">=": .greaterOrEqual
        default: nil
        }
    }

    /// Words that cannot start a field unquoted: they would read as the grammar's own.
    private static let reserved: Set<String> = ["and", "or", "not", "in", "contains", "startswith", "is", "null", "missing", "true", "false", "date"]

    private mutating func parseField() throws -> QueryField {
        let start = tokenStart
        var path: [String] = []
        func name(first: Bool) throws -> String {
            switch token {
            case .quotedName(let n): return n
            case .word(let w) where !first || !Self.reserved.contains(w.lowercased()): return w
            case .word(let w): throw error("\"\(w)\" is a keyword: write a field of that name in backquotes (`\(w)`)", at: tokenStart)
            default: throw error(first ? "expected a field, \"not\", \"(\" or \"pending\"" : "expected a field name after \".\"")
            }
        }
        path.append(try name(first: true))
        try advance()
        while token == .symbol(".") {
            try advance()
            path.append(try name(first: false))
            try advance()
        }
        let field = QueryField(path: path)
        if let problem = field.problem { throw error(problem, at: start) }
        return field
    }

    private mutating func parseValue() throws -> QueryValue {
        let value: QueryValue
        switch token {
        case .string(let s): value = .string(s)
        case .number(let n): value = .json(.number(n))
        case .word(let w):
            switch w.lowercased() {
            case "true": value = .bool(true)
            case "false": value = .bool(false)
            case "null": value = .null
            case "date": return try parseDate()
            default: throw error("expected a value (a string, number, true, false, null or date(\"…\"))")
            }
        default: throw error("expected a value (a string, number, true, false, null or date(\"…\"))")
        }
        try advance()
        return value
    }

    /// `date("2026-12-07T10:00:00Z")`, the current token being `date`.
    private mutating func parseDate() throws -> QueryValue {
        try advance()
        guard token == .symbol("(") else { throw error("expected \"(\" after \"date\"") }
        try advance()
        guard case .string(let text) = token else { throw error("expected an RFC 3339 date in quotes, as in date(\"2026-12-07T10:00:00Z\")") }
        guard let ms = RecordCoder.milliseconds(iso: text) else {
            throw error("\"\(text)\" is not an RFC 3339 date and time (2026-12-07T10:00:00Z) or date (2026-12-07)", at: tokenStart)
        }
        try advance()
        guard token == .symbol(")") else { throw error("expected \")\" after the date") }
        try advance()
        return .date(Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    private func isWord(_ keyword: String) -> Bool {
        if case .word(let w) = token { return w.lowercased() == keyword.lowercased() }
        return false
    }

    // MARK: Lexer

    private func peek(_ offset: Int = 0) -> Unicode.Scalar? {
        cursor + offset < scalars.count ? scalars[cursor + offset] : nil
    }

    /// Reads the next token into `token`.
    private mutating func advance() throws {
        while let c = peek(), c == " " || c == "\t" || c == "\n" || c == "\r" { cursor += 1 }
        tokenStart = cursor
        guard let c = peek() else {
            token = .end
            return
        }
        switch c {
        case "(", ")", "[", "]", ",", ".":
            cursor += 1
            token = .symbol(String(c))
        case "=", "<", ">", "!":
            cursor += 1
            if peek() == "=" {
                cursor += 1
                token = .symbol(String(c) + "=")
            } else {
                token = .symbol(String(c))
            }
        case "&", "|":
            guard peek(1) == c else { throw error("expected \"\(c)\(c)\"", at: tokenStart) }
            cursor += 2
            token = .symbol(String(c) + String(c))
        case "\"":
            token = .string(try lexString())
        case "`":
            token = .quotedName(try lexQuotedName())
        case "-", "0"..."9":
            token = .number(try lexNumber())
        default:
            guard Self.isNameStart(c) else { throw error("unexpected character \"\(c)\"", at: tokenStart) }
            var word = String.UnicodeScalarView()
            while let d = peek(), Self.isNameStart(d) || ("0"..."9").contains(d) {
                word.append(d)
                cursor += 1
            }
            token = .word(String(word))
        }
    }

    private static func isNameStart(_ c: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(c) || ("A"..."Z").contains(c) || c == "_"
    }

    /// A JSON string, the cursor on its opening quote.
    private mutating func lexString() throws -> String {
        cursor += 1
        var out = String.UnicodeScalarView()
        while true {
            guard let c = peek() else { throw error("the string has no closing quote", at: tokenStart) }
            cursor += 1
            switch c {
            case "\"":
                return String(out)
            case "\\":
                guard let e = peek() else { throw error("the string has no closing quote", at: tokenStart) }
                cursor += 1
                switch e {
                case "\"", "\\", "/": out.append(e)
                case "b": out.append("\u{08}")
                case "f": out.append("\u{0C}")
                case "n": out.append("\n")
                case "r": out.append("\r")
                case "t": out.append("\t")
                case "u": out.append(try lexUnicodeEscape())
                default: throw error("invalid escape \"\\\(e)\" in a string", at: cursor - 2)
                }
            default:
                guard c.value >= 0x20 else { throw error("a control character in a string must be escaped", at: cursor - 1) }
                out.append(c)
            }
        }
    }

    /// The scalar of `\uXXXX` (and of the `\uXXXX` of its low surrogate), the cursor after the `u`.
    private mutating func lexUnicodeEscape() throws -> Unicode.Scalar {
        let escapeStart = cursor - 2
        func hex4() throws -> UInt32 {
            var v: UInt32 = 0
            for _ in 0..<4 {
                guard let c = peek(), let d = Self.hexValue(c) else { throw error("\\u takes four hexadecimal digits", at: escapeStart) }
                v = v * 16 + d
                cursor += 1
            }
            return v
        }
        let high = try hex4()
        if (0xDC00...0xDFFF).contains(high) { throw error("a lone low surrogate in a string", at: escapeStart) }
        guard (0xD800...0xDBFF).contains(high) else { return Unicode.Scalar(high)! }
        guard peek() == "\\", peek(1) == "u" else { throw error("a high surrogate must be followed by a low one", at: escapeStart) }
        cursor += 2
        let low = try hex4()
        guard (0xDC00...0xDFFF).contains(low) else { throw error("a high surrogate must be followed by a low one", at: escapeStart) }
        return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))!
    }

    private static func hexValue(_ c: Unicode.Scalar) -> UInt32? {
        switch c {
        case "0"..."9": c.value - 0x30
        case "a"..."f": c.value - 0x61 + 10
        case "A"..."F": c.value - 0x41 + 10
        default: nil
        }
    }

    /// A backquoted name, the cursor on its opening backquote; a doubled backquote is one.
    private mutating func lexQuotedName() throws -> String {
        cursor += 1
        var out = String.UnicodeScalarView()
        while true {
            guard let c = peek() else { throw error("the name has no closing backquote", at: tokenStart) }
            cursor += 1
            if c == "`" {
                guard peek() == "`" else { return String(out) }
                cursor += 1
            }
            out.append(c)
        }
    }

    /// A JSON number, kept as its text: the longest run of what numbers are made of, which
    /// must then be one (`01` and `1.` are not).
    private mutating func lexNumber() throws -> JSONNumber {
        var text = String.UnicodeScalarView()
        while let c = peek(), ("0"..."9").contains(c) || c == "-" || c == "+" || c == "." || c == "e" || c == "E" {
            text.append(c)
            cursor += 1
        }
        guard let number = JSONNumber(lexeme: String(text)) else { throw error("\"\(String(text))\" is not a JSON number", at: tokenStart) }
        return number
    }

    // MARK: Errors

    /// The character (from 1) at scalar offset `offset`, as an editor counts them.
    private func position(_ offset: Int) -> Int {
        var prefix = String.UnicodeScalarView()
        prefix.append(contentsOf: scalars[..<min(offset, scalars.count)])
        return String(prefix).count + 1
    }

    private func describe(_ token: Token) -> String {
        switch token {
        case .word(let w): "\"\(w)\""
        case .quotedName(let n): "`\(n)`"
        case .string: "a string"
        case .number(let n): n.lexeme
        case .symbol(let s): "\"\(s)\""
        case .end: "the end"
        }
    }

    /// An error at the current token, saying what was found there.
    private func error(_ message: String) -> OutpostError {
        OutpostError.invalidQuery("at character \(position(tokenStart)): \(message), found \(describe(token))")
    }

    /// An error at scalar offset `offset`.
    private func error(_ message: String, at offset: Int) -> OutpostError {
        OutpostError.invalidQuery("at character \(position(offset)): \(message)")
    }
}
