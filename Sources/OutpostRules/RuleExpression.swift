import OutpostCore

/// The expression language of a rules file (docs/rules.md): a condition over the token's
/// claims and a record, with no side effects and a cost bounded by its size.
///
/// Grammar, loosest first:
///
///     expression  = or [ "?" expression ":" expression ]
///     or          = and { "||" and }
///     and         = equality { "&&" equality }
///     equality    = comparison { ( "==" | "!=" ) comparison }
///     comparison  = unary { ( "<" | "<=" | ">" | ">=" | "in" ) unary }
///     unary       = "!" unary | primary
///     primary     = literal | path | "(" expression ")"
///     literal     = string | number | "true" | "false" | "null"
///     path        = root { "." name }
///     root        = "auth" | "data" | "prev" | "op" | "collection" | "id"
///
/// Strings are in single or double quotes, with `\\`, `\'`, `\"`, `\n` and `\t` escapes.
/// Numbers are decimal, with an optional fraction and exponent.
///
/// Values are JSON values. A path that does not exist is `null`. `==` and `!=` compare
/// values deeply (numbers by value). `<` `<=` `>` `>=` compare two numbers, or two strings
/// byte-wise; any other pair is `false`. `a in b` is `true` when `b` is an array holding a
/// value equal to `a`, and `false` for any other `b`: it is never a substring test, so a
/// string claim where a rule expects a list cannot pass by holding the name. An `in` whose
/// right side is always a string (a string literal, `op`, `collection`, `id`) is refused
/// at parse time. `!`, `&&`, `||` and the condition of `? :` take `true` as true and
/// anything else as false. A rule admits a request only when its expression evaluates to
/// exactly `true`.
public struct RuleExpression: Sendable, CustomStringConvertible {
    /// The largest expression accepted, in bytes, and the deepest nesting: what keeps a
    /// rule's cost bounded and its parse off the stack's limits.
    public static let maxLength = 4096
    public static let maxDepth = 64

    /// The roots a path may start from.
    public enum Root: String, Sendable, CaseIterable {
        case auth, data, prev, op, collection, id
    }

    /// The expression's syntax tree, for what reads its shape (the view index).
    public indirect enum Node: Sendable {
        case literal(JSONValue)
        case path(Root, [String])
        case not(Node)
        case binary(Operator, Node, Node)
        case and(Node, Node)
        case or(Node, Node)
        case choice(Node, Node, Node)
    }

    public enum Operator: String, Sendable {
        case equal = "==", notEqual = "!=", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">=", member = "in"
    }

    /// What the expression reads a record as, and the token.
    public struct Context: Sendable {
        public var auth: JSONObject
        public var data: JSONValue
        public var prev: JSONValue
        public var op: String
        public var collection: String
        public var id: String

        public init(auth: JSONObject, data: JSONValue, prev: JSONValue, op: String, collection: String, id: String) {
            self.auth = auth
            self.data = data
            self.prev = prev
            self.op = op
            self.collection = collection
            self.id = id
        }
    }

    /// An expression that cannot be parsed: what is wrong, at which line and column of the
    /// expression's text (both from 1).
    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        public let line: Int
        public let column: Int
        public let reason: String
        /// The byte offset in the expression's text.
        public let offset: Int

        public var description: String { "line \(line), column \(column): \(reason)" }
    }

    public let root: Node
    public let source: String

    public var description: String { source }

    /// Parses `source`, refusing what the grammar does not allow and paths from unknown roots.
    public init(_ source: String) throws(ParseError) {
        var parser = Parser(source)
        root = try parser.parseAll()
        self.source = source
    }

    /// Whether the expression evaluates to exactly `true` in `context`.
    public func admits(_ context: Context) -> Bool {
        var untraced: Trace?
        if case .bool(true) = Self.evaluate(root, context, &untraced) { return true }
        return false
    }

    /// The value of the expression in `context`.
    public func value(in context: Context) -> JSONValue {
        var untraced: Trace?
        return Self.evaluate(root, context, &untraced)
    }

    /// The value of the expression in `context`, and the trace of that same evaluation:
    /// every sub-expression it evaluated, with its value (`Trace`). What the admin
    /// console's explanation of a record's rules shows (docs/operating.md).
    public func traced(in context: Context) -> (value: JSONValue, trace: Trace) {
        var trace: Trace? = Trace()
        let value = Self.evaluate(root, context, &trace)
        return (value, trace!)
    }

    /// Evaluates `node`. With a `trace`, each node evaluated is recorded in it as it is
    /// entered, and given its value as it is left: one evaluator, whether traced or not,
    /// so an explanation cannot differ from a verdict.
    static func evaluate(_ node: Node, _ c: Context, _ trace: inout Trace?) -> JSONValue {
        guard trace != nil else { return compute(node, c, &trace) }
        trace!.enter(node)
        let value = compute(node, c, &trace)
        trace!.leave(value)
        return value
    }

    /// One node's value; its operands are evaluated by `evaluate`, in the order and as far
    /// as the operator needs them (`&&` and `||` stop at their first operand that decides).
    private static func compute(_ node: Node, _ c: Context, _ trace: inout Trace?) -> JSONValue {
        switch node {
        case .literal(let v):
            return v
        case .path(let root, let names):
            var value: JSONValue
            switch root {
            case .auth: value = .object(c.auth)
            case .data: value = c.data
            case .prev: value = c.prev
            case .op: value = .string(c.op)
            case .collection: value = .string(c.collection)
            case .id: value = .string(c.id)
            }
            for name in names {
                guard case .object(let object) = value, let next = object[name] else { return .null }
                value = next
            }
            return value
        case .not(let inner):
            return .bool(!isTrue(evaluate(inner, c, &trace)))
        case .and(let a, let b):
            return .bool(isTrue(evaluate(a, c, &trace)) && isTrue(evaluate(b, c, &trace)))
        case .or(let a, let b):
            return .bool(isTrue(evaluate(a, c, &trace)) || isTrue(evaluate(b, c, &trace)))
        case .choice(let condition, let yes, let no):
            return isTrue(evaluate(condition, c, &trace)) ? evaluate(yes, c, &trace) : evaluate(no, c, &trace)
        case .binary(let op, let a, let b):
            let x = evaluate(a, c, &trace), y = evaluate(b, c, &trace)
            trace?.compared(x, op, y)
            switch op {
            case .equal: return .bool(equal(x, y))
            case .notEqual: return .bool(!equal(x, y))
            case .less, .lessOrEqual, .greater, .greaterOrEqual:
                guard let order = compare(x, y) else { return .bool(false) }
                switch op {
                case .less: return .bool(order < 0)
                case .lessOrEqual: return .bool(order <= 0)
                case .greater: return .bool(order > 0)
                default: return .bool(order >= 0)
                }
            case .member:
                guard case .array(let items) = y else { return .bool(false) }
                return .bool(items.contains { equal(x, $0) })
            }
        }
    }

    /// Deep equality with numbers compared by value (`1 == 1.0`), unlike `JSONValue`'s `==`,
    /// which compares numbers by their text.
    static func equal(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.number(let x), .number(let y)):
            if let p = x.int64Value, let q = y.int64Value { return p == q }
            return x.doubleValue == y.doubleValue
        case (.array(let x), .array(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { equal($0, $1) }
        case (.object(let x), .object(let y)):
            guard x.count == y.count else { return false }
            for (key, value) in x {
                guard let other = y[key], equal(value, other) else { return false }
            }
            return true
        default:
            return a == b
        }
    }

    public static func isTrue(_ v: JSONValue) -> Bool {
        if case .bool(true) = v { return true }
        return false
    }

    /// -1, 0 or 1 for two numbers or two strings (byte-wise); nil for any other pair.
    static func compare(_ a: JSONValue, _ b: JSONValue) -> Int? {
        switch (a, b) {
        case (.number(let x), .number(let y)):
            if let p = x.int64Value, let q = y.int64Value { return p < q ? -1 : (p > q ? 1 : 0) }
            let p = x.doubleValue, q = y.doubleValue
            return p < q ? -1 : (p > q ? 1 : 0)
        case (.string(let x), .string(let y)):
            if x == y { return 0 }
            return x.utf8.lexicographicallyPrecedes(y.utf8) ? -1 : 1
        default:
            return nil
        }
    }
}

// MARK: - Parser

extension RuleExpression {
    struct Parser {
        enum Token: Equatable {
            case string(String)
            case number(String)
            case name(String)
            case symbol(String)
            case end
        }

        let bytes: [UInt8]
        var position = 0
        /// The current token and where it starts.
        var token: Token = .end
        var tokenStart = 0
        var depth = 0

        init(_ source: String) {
            bytes = Array(source.utf8)
        }

        mutating func parseAll() throws(ParseError) -> Node {
            guard bytes.count <= RuleExpression.maxLength else {
                throw error("the expression is longer than \(RuleExpression.maxLength) bytes", at: RuleExpression.maxLength)
            }
            try advance()
            guard token != .end else { throw error("the expression is empty", at: 0) }
            let node = try expression()
            guard token == .end else { throw error("unexpected \(describe(token))", at: tokenStart) }
            return node
        }

        // MARK: Grammar

        mutating func expression() throws(ParseError) -> Node {
            depth += 1
            defer { depth -= 1 }
            guard depth <= RuleExpression.maxDepth else { throw error("the expression nests deeper than \(RuleExpression.maxDepth)", at: tokenStart) }
            let condition = try or()
            guard token == .symbol("?") else { return condition }
            try advance()
            let yes = try expression()
            guard token == .symbol(":") else { throw error("expected ':' of '? :', found \(describe(token))", at: tokenStart) }
            try advance()
            let no = try expression()
            return .choice(condition, yes, no)
        }

        mutating func or() throws(ParseError) -> Node {
            var node = try and()
            while token == .symbol("||") {
                try advance()
                node = .or(node, try and())
            }
            return node
        }

        mutating func and() throws(ParseError) -> Node {
            var node = try equality()
            while token == .symbol("&&") {
                try advance()
                node = .and(node, try equality())
            }
            return node
        }

        mutating func equality() throws(ParseError) -> Node {
            var node = try comparison()
            while case .symbol(let s) = token, s == "==" || s == "!=" {
                try advance()
                node = .binary(Operator(rawValue: s)!, node, try comparison())
            }
            return node
        }

        mutating func comparison() throws(ParseError) -> Node {
            var node = try unary()
            while true {
                let op: Operator
                switch token {
                case .symbol(let s) where ["<", "<=", ">", ">="].contains(s): op = Operator(rawValue: s)!
                case .name("in"): op = .member
                default: return node
                }
                try advance()
                let start = tokenStart
                let right = try unary()
                if op == .member, Self.isAlwaysString(right) {
                    throw error("'in' asks whether a list holds a value; its right side here is always a string (it is not a substring test)", at: start)
                }
                node = .binary(op, node, right)
            }
        }

        mutating func unary() throws(ParseError) -> Node {
            if token == .symbol("!") {
                depth += 1
                defer { depth -= 1 }
                guard depth <= RuleExpression.maxDepth else { throw error("the expression nests deeper than \(RuleExpression.maxDepth)", at: tokenStart) }
                try advance()
                return .not(try unary())
            }
            return try primary()
        }

        mutating func primary() throws(ParseError) -> Node {
            let start = tokenStart
            switch token {
            case .string(let s):
                try advance()
                return .literal(.string(s))
            case .number(let text):
                guard let number = JSONNumber(lexeme: text) else { throw error("\(text) is not a number", at: start) }
                try advance()
                return .literal(.number(number))
            case .name("true"):
                try advance()
                return .literal(.bool(true))
            case .name("false"):
                try advance()
                return .literal(.bool(false))
            case .name("null"):
                try advance()
                return .literal(.null)
            case .name(let name):
                guard let root = Root(rawValue: name) else {
                    throw error("unknown name '\(name)' (a path starts with \(Root.allCases.map(\.rawValue).joined(separator: ", ")))", at: start)
                }
                try advance()
                var names: [String] = []
                while token == .symbol(".") {
                    try advance()
                    guard case .name(let field) = token else { throw error("expected a field name after '.', found \(describe(token))", at: tokenStart) }
                    names.append(field)
                    try advance()
                }
                if (root == .op || root == .collection || root == .id) && !names.isEmpty {
                    throw error("'\(root.rawValue)' is a string and has no fields", at: start)
                }
                return .path(root, names)
            case .symbol("("):
                try advance()
                let inner = try expression()
                guard token == .symbol(")") else { throw error("expected ')', found \(describe(token))", at: tokenStart) }
                try advance()
                return inner
            default:
                throw error("expected a value, found \(describe(token))", at: start)
            }
        }

        // MARK: Tokens

        mutating func advance() throws(ParseError) {
            while position < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[position]) { position += 1 }
            tokenStart = position
            guard position < bytes.count else {
                token = .end
                return
            }
            let c = bytes[position]
            switch c {
            case UInt8(ascii: "'"), UInt8(ascii: "\""):
                token = .string(try string(quote: c))
            // A number starts with a digit, or with a minus sign right before a digit.
            case _ where (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(c)
                || (c == UInt8(ascii: "-") && position + 1 < bytes.count && (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position + 1])):
                var end = position + 1
                while end < bytes.count, Self.isNumberByte(bytes[end]) || ((bytes[end] == UInt8(ascii: "-") || bytes[end] == UInt8(ascii: "+")) && (bytes[end - 1] | 0x20) == UInt8(ascii: "e")) {
                    end += 1
                }
                token = .number(String(decoding: bytes[position..<end], as: UTF8.self))
                position = end
            case _ where Self.isNameStart(c):
                var end = position + 1
                while end < bytes.count, Self.isNameStart(bytes[end]) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[end]) { end += 1 }
                token = .name(String(decoding: bytes[position..<end], as: UTF8.self))
                position = end
            default:
                let two = position + 1 < bytes.count ? String(decoding: bytes[position...position + 1], as: UTF8.self) : ""
                if ["==", "!=", "<=", ">=", "&&", "||"].contains(two) {
                    token = .symbol(two)
                    position += 2
                } else if "<>!?:().".utf8.contains(c) {
                    token = .symbol(String(UnicodeScalar(c)))
                    position += 1
                } else if c == UInt8(ascii: "=") {
                    throw error("'=' is not an operator; compare with '=='", at: position)
                } else {
                    throw error("unexpected character '\(String(decoding: [c], as: UTF8.self))'", at: position)
                }
            }
        }

        mutating func string(quote: UInt8) throws(ParseError) -> String {
            let start = position
            position += 1
            var out: [UInt8] = []
            while position < bytes.count {
                let c = bytes[position]
                if c == quote {
                    position += 1
                    return String(decoding: out, as: UTF8.self)
                }
                if c == UInt8(ascii: "\\") {
                    guard position + 1 < bytes.count else { break }
                    switch bytes[position + 1] {
                    case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
                    case UInt8(ascii: "'"): out.append(UInt8(ascii: "'"))
                    case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "t"): out.append(0x09)
                    default: throw error("unknown escape '\\\(String(decoding: [bytes[position + 1]], as: UTF8.self))'", at: position)
                    }
                    position += 2
                    continue
                }
                out.append(c)
                position += 1
            }
            throw error("the string is not closed", at: start)
        }

        /// Whether `node` evaluates to a string in every context: a string literal, `op`,
        /// `collection`, `id`, or a `? :` whose both sides are.
        static func isAlwaysString(_ node: Node) -> Bool {
            switch node {
            case .literal(.string): return true
            case .path(let root, _): return root == .op || root == .collection || root == .id
            case .choice(_, let a, let b): return isAlwaysString(a) && isAlwaysString(b)
            default: return false
            }
        }

        static func isNameStart(_ c: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(c) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(c) || c == UInt8(ascii: "_") || c == UInt8(ascii: "$")
        }

        static func isNumberByte(_ c: UInt8) -> Bool {
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(c) || c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E")
        }

        func describe(_ token: Token) -> String {
            switch token {
            case .string(let s): return "the string '\(s)'"
            case .number(let n): return "the number \(n)"
            case .name(let n): return "'\(n)'"
            case .symbol(let s): return "'\(s)'"
            case .end: return "the end of the expression"
            }
        }

        func error(_ reason: String, at offset: Int) -> ParseError {
            var line = 1, column = 1
            for b in bytes.prefix(offset) {
                if b == 0x0A {
                    line += 1
                    column = 1
                } else if b & 0xC0 != 0x80 {
                    column += 1
                }
            }
            return ParseError(line: line, column: column, reason: reason, offset: offset)
        }
    }
}

extension RuleExpression {
    /// The paths the expression reads from `root` (each as its names after the root; `[]`
    /// for the root itself), in the order they appear, each once: what a value outside
    /// them cannot change.
    public func paths(from root: Root) -> [[String]] {
        var found: [[String]] = []
        func walk(_ node: Node) {
            switch node {
            case .literal: break
            case .path(let r, let names): if r == root, !found.contains(names) { found.append(names) }
            case .not(let inner): walk(inner)
            case .binary(_, let a, let b), .and(let a, let b), .or(let a, let b): walk(a); walk(b)
            case .choice(let c, let a, let b): walk(c); walk(a); walk(b)
            }
        }
        walk(self.root)
        return found
    }

    /// The expression's value when it is a literal (`"true"`, `"'x'"`), else nil.
    public var literalValue: JSONValue? {
        if case .literal(let v) = root { return v }
        return nil
    }
}

extension RuleExpression {
    init(root: Node, source: String) {
        self.root = root
        self.source = source
    }

    /// The expression with every path from `root` replaced by its value in `value`, and each
    /// part that then reads nothing else computed. What is left reads the other roots only:
    /// bound to a token's claims, `data.assignee == auth.sub || 'supervisor' in auth.roles`
    /// is `true` for a supervisor and `data.assignee == "w1"` for worker w1, so a page of
    /// records evaluates the token's part once, not once per record. It evaluates to the
    /// same value as the original in every context whose `root` is `value`.
    public func binding(_ root: Root, to value: JSONValue) -> RuleExpression {
        RuleExpression(root: Self.fold(self.root, root, value), source: source)
    }

    static func fold(_ node: Node, _ root: Root, _ value: JSONValue) -> Node {
        let empty = Context(auth: [:], data: .null, prev: .null, op: "", collection: "", id: "")
        func literal(_ n: Node) -> JSONValue? {
            if case .literal(let v) = n { return v }
            return nil
        }
        /// `!!n`: `n`'s truth as a Boolean, as `&&` and `||` give it.
        func truth(_ n: Node) -> Node {
            if let v = literal(n) { return .literal(.bool(isTrue(v))) }
            return .not(.not(n))
        }
        switch node {
        case .literal:
            return node
        case .path(let r, let names):
            guard r == root else { return node }
            var v = value
            for name in names {
                guard case .object(let o) = v, let next = o[name] else { return .literal(.null) }
                v = next
            }
            return .literal(v)
        case .not(let inner):
            let a = fold(inner, root, value)
            if let v = literal(a) { return .literal(.bool(!isTrue(v))) }
            return .not(a)
        case .and(let x, let y):
            let a = fold(x, root, value), b = fold(y, root, value)
            if let v = literal(a) { return isTrue(v) ? truth(b) : .literal(.bool(false)) }
            if let v = literal(b) { return isTrue(v) ? truth(a) : .literal(.bool(false)) }
            return .and(a, b)
        case .or(let x, let y):
            let a = fold(x, root, value), b = fold(y, root, value)
            if let v = literal(a) { return isTrue(v) ? .literal(.bool(true)) : truth(b) }
            if let v = literal(b) { return isTrue(v) ? .literal(.bool(true)) : truth(a) }
            return .or(a, b)
        case .choice(let c, let x, let y):
            let condition = fold(c, root, value), a = fold(x, root, value), b = fold(y, root, value)
            if let v = literal(condition) { return isTrue(v) ? a : b }
            return .choice(condition, a, b)
        case .binary(let op, let x, let y):
            let a = fold(x, root, value), b = fold(y, root, value)
            let folded = Node.binary(op, a, b)
            if literal(a) != nil && literal(b) != nil {
                var untraced: Trace?
                return .literal(evaluate(folded, empty, &untraced))
            }
            return folded
        }
    }
}

// MARK: - Trace

extension RuleExpression {
    /// What one evaluation did, node by node, in the order it entered them (a pre-order
    /// walk of the nodes it evaluated): each sub-expression's text, its depth under the
    /// whole expression (0), and the value it had. A node an operator did not need (the
    /// right side of a `&&` whose left side was not `true`, the branch of `? :` not taken)
    /// has no step: it was not evaluated. Filled by `traced(in:)` only.
    public struct Trace: Sendable {
        /// One sub-expression evaluated.
        public struct Step: Sendable {
            /// How many operators it sits under (0: the whole expression).
            public let depth: Int
            /// Its text, written again from the syntax tree (`Node.text`).
            public let expression: String
            /// Its value (`null` until the evaluation leaves it).
            public internal(set) var value: JSONValue
            /// For a comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`, `in`), the two values it
            /// compared, as JSON around the operator: `"north" == "south"` (each side at most
            /// `maxComparedBytes`).
            public internal(set) var compared: String?
        }

        /// The steps, in the order the evaluation entered them.
        public private(set) var steps: [Step] = []
        /// The steps entered and not yet left, innermost last.
        private var open: [Int] = []

        init() {}

        mutating func enter(_ node: Node) {
            open.append(steps.count)
            steps.append(Step(depth: open.count - 1, expression: node.text, value: .null, compared: nil))
        }

        mutating func leave(_ value: JSONValue) {
            steps[open.removeLast()].value = value
        }

        /// The most bytes of each side's JSON in `compared`; a longer side is cut and ends
        /// with `…`, so a comparison of two large records costs no more to keep than this.
        public static let maxComparedBytes = 1024

        mutating func compared(_ x: JSONValue, _ op: Operator, _ y: JSONValue) {
            guard let current = open.last else { return }
            func shown(_ v: JSONValue) -> String {
                let bytes = v.encoded()
                guard bytes.count > Self.maxComparedBytes else { return String(decoding: bytes, as: UTF8.self) }
                return String(decoding: bytes.prefix(Self.maxComparedBytes), as: UTF8.self) + "…"
            }
            steps[current].compared = "\(shown(x)) \(op.rawValue) \(shown(y))"
        }
    }
}

extension RuleExpression.Node {
    /// The node as expression text: paths, JSON literals (strings in double quotes) and
    /// operators, with parentheses only where the grammar's precedence needs them. It
    /// parses to the same tree.
    public var text: String {
        switch self {
        case .literal(let v):
            return String(decoding: v.encoded(), as: UTF8.self)
        case .path(let root, let names):
            return ([root.rawValue] + names).joined(separator: ".")
        case .not(let inner):
            return "!" + inner.operand(above: precedence, right: false)
        case .and(let a, let b):
            return a.operand(above: precedence, right: false) + " && " + b.operand(above: precedence, right: true)
        case .or(let a, let b):
            return a.operand(above: precedence, right: false) + " || " + b.operand(above: precedence, right: true)
        case .binary(let op, let a, let b):
            return a.operand(above: precedence, right: false) + " \(op.rawValue) " + b.operand(above: precedence, right: true)
        case .choice(let c, let a, let b):
            // The condition is an `or` in the grammar: a `? :` there needs parentheses.
            return c.operand(above: 1, right: false) + " ? " + a.text + " : " + b.text
        }
    }

    /// The grammar's levels, loosest first (`RuleExpression`'s grammar).
    private var precedence: Int {
        switch self {
        case .choice: return 0
        case .or: return 1
        case .and: return 2
        case .binary(let op, _, _): return op == .equal || op == .notEqual ? 3 : 4
        case .not: return 5
        case .literal, .path: return 6
        }
    }

    /// The node's text as an operand of an operator at `parent`'s level: in parentheses
    /// when looser, or as loose and on the right (the operators group to the left).
    private func operand(above parent: Int, right: Bool) -> String {
        precedence < parent || (right && precedence == parent) ? "(\(text))" : text
    }
}
