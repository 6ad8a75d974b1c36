import Foundation
import Testing

/// docs/client.md's "Public API" section lists every public declaration of the SDK with all
/// its argument labels, and nothing else (issue 45, point 9). The test reads the sources under
/// `Client/Outpost` with a small scanner of its own (the package has no SwiftSyntax), names each
/// public declaration the way the section's first paragraph says, and compares the two lists:
/// a declaration the section does not list, and an entry that names no declaration, both fail.
/// The product `OutpostTesting` (`Client/OutpostTesting`) has a list of its own, in "Testing and
/// previews", held to its sources the same way; a declaration listed under the wrong module
/// fails both checks.
@Suite("The Public API list in docs/client.md")
struct PublicAPIDocsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The heading of `OutpostTesting`'s list in docs/client.md.
    static let testingHeading = "Every public declaration of `OutpostTesting`"

    @Test func everyPublicDeclarationIsListedAndEveryEntryNamesOne() throws {
        let scan = try Self.scan("Client/Outpost")
        // The scanner must be reading the SDK, not an empty or half-read tree.
        #expect(scan.declarations["OutpostStore"] != nil && scan.declarations.count > 100,
                "the scan found \(scan.declarations.count) public declarations")
        // The in-memory server is not the SDK's (an app that links only `Outpost` has none).
        #expect(scan.declarations["InMemorySyncServer"] == nil)

        let report = PublicAPIDocs.check(scan: scan, doc: try Self.doc())
        #expect(report.isClean, Comment(rawValue: report.message))
    }

    @Test func everyPublicDeclarationOfOutpostTestingIsListedInItsOwnList() throws {
        let scan = try Self.scan("Client/OutpostTesting")
        #expect(scan.declarations["InMemorySyncServer"] != nil && scan.declarations["InMemorySyncTransport"] != nil && scan.declarations.count > 30,
                "the scan found \(scan.declarations.count) public declarations")

        let report = PublicAPIDocs.check(scan: scan, doc: try Self.doc(), heading: Self.testingHeading)
        #expect(report.isClean, Comment(rawValue: report.message))
    }

    /// The public declarations of the Swift files under `folder` (relative to the root).
    static func scan(_ folder: String) throws -> PublicAPIScanner.Scan {
        let files = try #require(FileManager.default.enumerator(at: root.appendingPathComponent(folder), includingPropertiesForKeys: nil))
        var sources: [PublicAPIScanner.Source] = []
        for case let file as URL in files where file.pathExtension == "swift" {
            let relative = String(file.path.dropFirst(root.path.count + 1))
            sources.append(.init(path: relative, text: try String(contentsOf: file, encoding: .utf8)))
        }
        return PublicAPIScanner.scan(sources.sorted { $0.path < $1.path })
    }

    static func doc() throws -> String {
        try String(contentsOf: root.appendingPathComponent("docs/client.md"), encoding: .utf8)
    }

    /// The check can fail: a declaration the list leaves out and an entry naming nothing are
    /// both reported, together, in one message.
    @Test func theCheckReportsAMissingDeclarationAndAStaleEntry() {
        let source = """
            public struct Box {
                public var width: Int
                public func resize(to size: Int, animated: Bool = false) {}
            }
            """
        let doc = """
            # SDK

            ## Public API

            - `Box`: a box.
              - `Box.width`, `Box.height`: its sides.

            ## Elsewhere

            - `Box.resize(to:animated:)` is named here, outside the section.
            """
        let scan = PublicAPIScanner.scan([.init(path: "Box.swift", text: source)])
        let report = PublicAPIDocs.check(scan: scan, doc: doc)
        #expect(report.missing == ["Box.resize(to:animated:)"])
        #expect(report.stale == ["Box.height"])
        #expect(!report.isClean)
        #expect(report.message.contains("Box.resize(to:animated:)") && report.message.contains("Box.height"))

        let fixed = doc.replacingOccurrences(of: "`Box.height`", with: "`Box.resize(to:animated:)`")
        #expect(PublicAPIDocs.check(scan: scan, doc: fixed).isClean)
        #expect(PublicAPIDocs.check(scan: scan, doc: "# SDK\n").problems == ["docs: no heading contains \"Public API\""])

        // A list under another heading is read apart: the section of "Public API" ends at
        // the next heading of its level, and the other list is only its own heading's.
        let two = fixed + """

            ## Testing

            ### Every public declaration of `BoxTesting`

            - `FakeBox`, `FakeBox.open()`
            """
        #expect(PublicAPIDocs.check(scan: scan, doc: two).isClean)
        let fake = PublicAPIScanner.scan([.init(path: "FakeBox.swift", text: "public struct FakeBox { public func open() {} }")])
        #expect(PublicAPIDocs.check(scan: fake, doc: two, heading: "Every public declaration of `BoxTesting`").isClean)
        let misplaced = PublicAPIDocs.check(scan: fake, doc: fixed, heading: "Every public declaration of `BoxTesting`")
        #expect(misplaced.problems == ["docs: no heading contains \"Every public declaration of `BoxTesting`\""])
        let wrongList = PublicAPIDocs.check(scan: fake, doc: fixed)
        #expect(wrongList.missing == ["FakeBox", "FakeBox.open()"] && wrongList.stale.count == 3)
    }

    /// The shapes of declaration the SDK's sources use, and the ones the scanner must pass by.
    @Test func theScannerNamesDeclarationsWithAllTheirLabels() {
        let source = #"""
            import Foundation

            /// A doc comment with a public func inside: `public func nope()`.
            public actor Store {
                public nonisolated let configuration: Configuration
                public internal(set) var count = 0
                public private(set) var rows: [String: Int] = [:]
                var hidden = 0
                public static let limit = 32
                nonisolated(unsafe) public var legacy = 1

                @discardableResult
                public func save<T: Encodable & Sendable>(_ value: T, in collection: String,
                                                          id: String,
                                                          encoder: JSONEncoder = JSONEncoder(),
                                                          decoder: JSONDecoder = .init()) throws -> T { value }
                public func transaction<R>(isolation: isolated (any Actor)? = #isolation,
                                           _ body: (inout Int) throws -> R) async throws -> R { fatalError() }
                public func records(in collection: String? = nil, where filter: @escaping (Int) -> Bool = { ($0, 1).0 > 0 },
                                    names: [String: (Int, Int)] = ["a": (1, 2)], note: String = "a, b: (c") -> [Int] {
                    let local = { (x: Int) in x }
                    func inner(a: Int) {}
                    return [local(1)]
                }
                public init?(path: String, _ flag: Bool = true) { nil }
                public subscript(key: String) -> Int { 0 }
                public subscript(dynamicMember member: String) -> Int { 0 }
                public static func == (a: Store, b: Store) -> Bool { true }
                private func secret() {}
                public var computed: Int {
                    get { 1 }
                    set { _ = "\(newValue) }" }
                }
                #if os(Linux)
                public func linuxOnly(_ x: Int) {}
                #else
                public func appleOnly(_ x: Int) {}
                #endif
            }

            extension Store {
                public struct Configuration: Sendable {
                    public var space: String
                    public var clock: @Sendable () -> Date = { Date() }
                    public var map: Dictionary<String, Int> = [:]
                    public init(space: String, clock: @escaping @Sendable () -> Date = { Date() }) { self.space = space }
                }
                public enum Phase: String, Sendable { case idle = "idle", syncing; case failed }
                func internalHelper() {}
                public final class Handle {}
            }

            public extension Store.Configuration {
                func with(space: String) -> Self { self }
                internal func notPublic() {}
            }

            public enum Failure: Error {
                case refused(status: Int, envelope: [String: Int]?)
                case transport(String), decoding(Dictionary<String, Int>, detail: String)
                indirect case nested(Failure)
                public var code: String { "" }
            }

            public protocol Transport: Sendable {
                associatedtype Page
                func push(_ request: Int, space: String) async throws -> Int
                var maxResponseBytes: Int { get }
            }

            extension Transport {
                public var maxResponseBytes: Int { 1 }
                public func extra() {}
            }

            struct Internal {
                public var leaked: Int
                public struct AlsoInternal { public var field: Int }
            }
            extension Internal { public func stillInternal() {} }

            @_documentation(visibility: internal)
            public typealias Metatype = Any
            @_documentation(visibility: internal)
            public struct Hook { public var value: Int }
            public typealias Object = [String: Int]

            public final class Model {
                public let raw = #"a "quoted" { brace"#
                public let multi = """
                    public func notADeclaration() {
                    """
                public class func make() -> Model { Model() }
                public class var shared: Model { Model() }
            }
            @Sendable public func systemMilliseconds() -> Int64 { 0 }
            """#
        let scan = PublicAPIScanner.scan([.init(path: "Store.swift", text: source)])
        #expect(scan.problems == [])
        #expect(Set(scan.declarations.keys) == [
            "Store", "Store.configuration", "Store.count", "Store.rows", "Store.limit", "Store.legacy",
            "Store.save(_:in:id:encoder:decoder:)", "Store.transaction(isolation:_:)",
            "Store.records(in:where:names:note:)", "Store.init(path:_:)",
            "Store.subscript(_:)", "Store.subscript(dynamicMember:)", "Store.==(_:_:)", "Store.computed",
            "Store.linuxOnly(_:)", "Store.appleOnly(_:)",
            "Store.Configuration", "Store.Configuration.space", "Store.Configuration.clock", "Store.Configuration.map",
            "Store.Configuration.init(space:clock:)", "Store.Configuration.with(space:)",
            "Store.Phase", "Store.Phase.idle", "Store.Phase.syncing", "Store.Phase.failed", "Store.Handle",
            "Failure", "Failure.refused(status:envelope:)", "Failure.transport(_:)", "Failure.decoding(_:detail:)",
            "Failure.nested(_:)", "Failure.code",
            "Transport", "Transport.Page", "Transport.push(_:space:)", "Transport.maxResponseBytes", "Transport.extra()",
            "Object", "Model", "Model.raw", "Model.multi", "Model.make()", "Model.shared", "systemMilliseconds()",
        ])
    }
}

// MARK: - Reading Swift

/// Just enough of Swift's lexical structure to find declarations: identifiers, operators,
/// punctuation, and string literals and comments as things to pass over whole. Compiler
/// directives (`#if`, `#else`, ...) are dropped, so every branch's declarations count.
struct SwiftToken {
    enum Kind { case identifier, op, punctuation, string, number, attribute, pound }
    var kind: Kind
    var text: String
    var line: Int
    /// Whitespace or a comment comes right before it.
    var spaced: Bool

    func isPunctuation(_ text: String) -> Bool { kind == .punctuation && self.text == text }
}

enum SwiftTokenizer {
    static func tokens(_ source: String) -> (tokens: [SwiftToken], problems: [String]) {
        let b = Array(source.utf8)
        var tokens: [SwiftToken] = []
        var problems: [String] = []
        var i = 0, line = 1
        var spaced = true, lineStart = true

        func at(_ k: Int) -> UInt8 { k < b.count ? b[k] : 0 }
        func text(_ from: Int, _ to: Int) -> String { String(decoding: b[from..<to], as: UTF8.self) }
        func isIdentStart(_ c: UInt8) -> Bool { c == 95 || c == 36 || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c >= 0x80 }
        func isIdent(_ c: UInt8) -> Bool { isIdentStart(c) || (c >= 48 && c <= 57) }
        func isOperator(_ c: UInt8) -> Bool { Array("/=-+!*%<>&|^~?".utf8).contains(c) }

        /// Past a string literal starting at `start` (its `#`s or its first quote).
        func skipString(_ start: Int) -> Int {
            var k = start, hashes = 0
            while at(k) == UInt8(ascii: "#") { hashes += 1; k += 1 }
            let multiline = at(k + 1) == UInt8(ascii: "\"") && at(k + 2) == UInt8(ascii: "\"")
            k += multiline ? 3 : 1
            func closes(_ k: Int) -> Bool {
                let quotes = multiline ? 3 : 1
                return (0..<quotes).allSatisfy { at(k + $0) == UInt8(ascii: "\"") }
                    && (0..<hashes).allSatisfy { at(k + quotes + $0) == UInt8(ascii: "#") }
            }
            while k < b.count {
                let c = b[k]
                if c == UInt8(ascii: "\\") && (0..<hashes).allSatisfy({ at(k + 1 + $0) == UInt8(ascii: "#") }) {
                    k += 1 + hashes
                    if at(k) == UInt8(ascii: "(") { k = skipInterpolation(k + 1); continue }
                    if at(k) == 10 { line += 1 }
                    k += 1
                    continue
                }
                if c == UInt8(ascii: "\"") && closes(k) { return k + (multiline ? 3 : 1) + hashes }
                if c == 10 {
                    line += 1
                    if !multiline { problems.append("line \(line - 1): a string literal does not end"); return k }
                }
                k += 1
            }
            problems.append("a string literal runs to the end of the file")
            return k
        }
        /// Past the `)` that closes an interpolation whose `(` is right before `start`.
        func skipInterpolation(_ start: Int) -> Int {
            var k = start, depth = 1
            while k < b.count {
                let c = b[k]
                if c == UInt8(ascii: "\"") || (c == UInt8(ascii: "#") && (at(k + 1) == UInt8(ascii: "\"") || at(k + 1) == UInt8(ascii: "#"))) {
                    k = skipString(k); continue
                }
                if c == UInt8(ascii: "(") { depth += 1 }
                if c == UInt8(ascii: ")") { depth -= 1; if depth == 0 { return k + 1 } }
                if c == 10 { line += 1 }
                k += 1
            }
            return k
        }

        while i < b.count {
            let c = b[i]
            if c == 10 { line += 1; i += 1; spaced = true; lineStart = true; continue }
            if c == 32 || c == 9 || c == 13 { i += 1; spaced = true; continue }
            if c == UInt8(ascii: "/") && at(i + 1) == UInt8(ascii: "/") {
                while i < b.count && b[i] != 10 { i += 1 }
                spaced = true; continue
            }
            if c == UInt8(ascii: "/") && at(i + 1) == UInt8(ascii: "*") {
                var depth = 0
                repeat {
                    if at(i) == UInt8(ascii: "/") && at(i + 1) == UInt8(ascii: "*") { depth += 1; i += 2 }
                    else if at(i) == UInt8(ascii: "*") && at(i + 1) == UInt8(ascii: "/") { depth -= 1; i += 2 }
                    else { if at(i) == 10 { line += 1 }; i += 1 }
                } while depth > 0 && i < b.count
                if depth > 0 { problems.append("a block comment runs to the end of the file") }
                spaced = true; continue
            }
            let start = i, startLine = line, wasSpaced = spaced, atLineStart = lineStart
            spaced = false; lineStart = false
            func emit(_ kind: SwiftToken.Kind, _ string: String) {
                tokens.append(SwiftToken(kind: kind, text: string, line: startLine, spaced: wasSpaced))
            }
            if c == UInt8(ascii: "\"") || (c == UInt8(ascii: "#") && (at(i + 1) == UInt8(ascii: "\"") || at(i + 1) == UInt8(ascii: "#"))) {
                i = skipString(i)
                emit(.string, "\"…\"")
            } else if (c == UInt8(ascii: "#") || c == UInt8(ascii: "@")) && isIdentStart(at(i + 1)) {
                i += 1
                while i < b.count && isIdent(b[i]) { i += 1 }
                let word = text(start, i)
                if atLineStart && ["#if", "#elseif", "#else", "#endif"].contains(word) {
                    // A directive: its condition is not code; every branch's declarations count.
                    while i < b.count && b[i] != 10 { i += 1 }
                    spaced = true
                } else {
                    emit(c == UInt8(ascii: "@") ? .attribute : .pound, word)
                }
            } else if c == UInt8(ascii: "`") {
                i += 1
                while i < b.count && b[i] != UInt8(ascii: "`") && b[i] != 10 { i += 1 }
                emit(.identifier, text(start + 1, i))
                i += 1
            } else if isIdentStart(c) {
                while i < b.count && isIdent(b[i]) { i += 1 }
                emit(.identifier, text(start, i))
            } else if c >= 48 && c <= 57 {
                while i < b.count && (isIdent(b[i]) || (b[i] == UInt8(ascii: ".") && at(i + 1) >= 48 && at(i + 1) <= 57)) { i += 1 }
                emit(.number, text(start, i))
            } else if c == UInt8(ascii: ".") && at(i + 1) == UInt8(ascii: ".") {
                while i < b.count && (b[i] == UInt8(ascii: ".") || isOperator(b[i])) { i += 1 }
                emit(.op, text(start, i))
            } else if isOperator(c) {
                while i < b.count && isOperator(b[i]) && !(b[i] == UInt8(ascii: "/") && (at(i + 1) == UInt8(ascii: "/") || at(i + 1) == UInt8(ascii: "*"))) { i += 1 }
                emit(.op, text(start, i))
            } else {
                i += 1
                emit(.punctuation, text(start, i))
            }
        }
        return (tokens, problems)
    }
}

/// Finds the public declarations of a module's sources and names each one (docs/client.md,
/// "Public API"): `Type`, `Type.Nested`, `Type.property`, `Type.case`,
/// `Type.function(label:_:)`, `Type.init(label:)`, `Type.subscript(_:)`, `Type.case(label:_:)`.
enum PublicAPIScanner {
    struct Source {
        var path: String
        var text: String
    }

    struct Scan {
        /// Each public declaration's name, and where it is (the first place, for overloads).
        var declarations: [String: String] = [:]
        /// What the scanner could not read; a declaration may be missing when this is not empty.
        var problems: [String] = []
    }

    /// A declaration as written, before the types' own visibility is known.
    private struct Found {
        var container: [String]
        var name: String
        var isPublic: Bool
        var hidden: Bool
        var isType: Bool
        var place: String
    }

    private enum ScopeKind {
        /// A file, a type's or an extension's body: declarations are read here.
        case declarations(container: [String], membersPublic: Bool)
        /// Code: a function's, an accessor's or a closure's body.
        case code
    }

    private struct Scope {
        var kind: ScopeKind
        /// Parentheses and brackets open inside this scope.
        var depth = 0
    }

    private static let introducers: Set<String> = [
        "func", "init", "subscript", "var", "let", "case", "struct", "enum", "class", "actor", "protocol",
        "typealias", "associatedtype", "extension", "deinit", "import", "operator", "precedencegroup", "macro",
    ]
    private static let accessLevels: Set<String> = ["public", "open", "package", "internal", "fileprivate", "private"]
    private static let modifiers: Set<String> = accessLevels.union([
        "static", "final", "nonisolated", "mutating", "nonmutating", "override", "convenience", "required", "lazy",
        "weak", "unowned", "indirect", "dynamic", "optional", "prefix", "postfix", "infix", "distributed",
        "consuming", "borrowing", "isolated",
    ])

    static func scan(_ sources: [Source]) -> Scan {
        var found: [Found] = []
        var scan = Scan()
        for source in sources {
            let (tokens, problems) = SwiftTokenizer.tokens(source.text)
            scan.problems += problems.map { "\(source.path): \($0)" }
            found += declarations(in: tokens, path: source.path, problems: &scan.problems)
        }

        // A member is public API when it is public and so is every type around it. A type
        // the sources do not declare (an extension of `Array`, say) counts as public.
        var types: [String: [Found]] = [:]
        for f in found where f.isType { types[(f.container + [f.name]).joined(separator: "."), default: []].append(f) }
        func visible(_ container: [String]) -> Bool {
            guard !container.isEmpty else { return true }
            guard let declared = types[container.joined(separator: ".")] else { return true }
            return declared.contains { $0.isPublic && !$0.hidden && visible($0.container) }
        }
        for f in found where f.isPublic && !f.hidden && visible(f.container) {
            let name = (f.container + [f.name]).joined(separator: ".")
            if scan.declarations[name] == nil { scan.declarations[name] = f.place }
        }
        return scan
    }

    private static func declarations(in t: [SwiftToken], path: String, problems: inout [String]) -> [Found] {
        var found: [Found] = []
        var scopes = [Scope(kind: .declarations(container: [], membersPublic: false))]
        var attributes: [String] = []
        var modifiers: [String] = []
        /// The body that the next `{` opens: a type's (its name and its members' default access) or code.
        var next: ScopeKind = .code
        var i = 0

        func token(_ k: Int) -> SwiftToken? { k < t.count ? t[k] : nil }
        /// The tokens inside the brackets that open at `k`, and the index past their close.
        func group(_ k: Int) -> (inner: [SwiftToken], end: Int) {
            var depth = 0, j = k
            repeat {
                if t[j].kind == .punctuation {
                    if ["(", "[", "{"].contains(t[j].text) { depth += 1 }
                    if [")", "]", "}"].contains(t[j].text) { depth -= 1 }
                }
                j += 1
            } while depth > 0 && j < t.count
            return (Array(t[(k + 1)..<max(k + 1, j - 1)]), j)
        }
        /// Past a generic clause `<...>` at `k`, if there is one.
        func skipGenerics(_ k: Int) -> Int {
            guard let first = token(k), first.kind == .op, first.text.hasPrefix("<") else { return k }
            var depth = 0, j = k
            repeat {
                if t[j].kind == .op { depth += angleChange(t[j].text) }
                j += 1
            } while depth > 0 && j < t.count
            return j
        }
        /// The argument labels of the parameter clause at `k` (its `(`), and the index past it.
        func labels(_ k: Int, isSubscript: Bool, isOperator: Bool) -> (labels: [String], end: Int) {
            func label(at j: Int) -> String? {
                guard let a = token(j), a.kind == .identifier, let b = token(j + 1) else { return nil }
                if b.isPunctuation(":") { return isSubscript || isOperator ? "_" : a.text }
                if b.kind == .identifier, token(j + 2)?.isPunctuation(":") == true { return isOperator ? "_" : a.text }
                return nil
            }
            var result: [String] = []
            if let first = label(at: k + 1) { result.append(first) }
            var depth = 0, j = k
            repeat {
                let tok = t[j]
                if tok.kind == .punctuation {
                    if ["(", "[", "{"].contains(tok.text) { depth += 1 }
                    if [")", "]", "}"].contains(tok.text) { depth -= 1 }
                    // A comma between parameters, not inside a generic argument list: a label follows.
                    if tok.text == ",", depth == 1, let following = label(at: j + 1) { result.append(following) }
                }
                j += 1
            } while depth > 0 && j < t.count
            return (result, j)
        }
        /// The labels of an enum case's associated values (`_` where there is none).
        func payloadLabels(_ k: Int) -> (labels: [String], end: Int) {
            var result: [String] = []
            var depth = 0, angles = 0, j = k, elementStart = true
            repeat {
                let tok = t[j]
                if depth == 1 && elementStart {
                    let labelled = tok.kind == .identifier && token(j + 1)?.isPunctuation(":") == true
                    result.append(labelled ? tok.text : "_")
                    elementStart = false
                }
                if tok.kind == .punctuation {
                    if ["(", "[", "{"].contains(tok.text) { depth += 1 }
                    if [")", "]", "}"].contains(tok.text) { depth -= 1 }
                    if tok.text == ",", depth == 1, angles == 0 { elementStart = true }
                } else if tok.kind == .op, depth == 1 {
                    angles += angleChange(tok.text)
                }
                j += 1
            } while depth > 0 && j < t.count
            if k + 1 < t.count, t[k + 1].isPunctuation(")") { result = [] }
            return (result, j)
        }
        func signature(_ name: String, _ labels: [String]) -> String { name + "(" + labels.map { $0 + ":" }.joined() + ")" }

        while i < t.count {
            let tok = t[i]
            let top = scopes[scopes.count - 1]
            if tok.kind == .punctuation {
                switch tok.text {
                case "{":
                    if case .declarations = top.kind, top.depth == 0 {
                        scopes.append(Scope(kind: next))
                    } else {
                        scopes.append(Scope(kind: .code))
                    }
                    next = .code
                case "}":
                    if scopes.count > 1 { scopes.removeLast() } else { problems.append("\(path):\(tok.line): a `}` closes nothing") }
                    next = .code
                case "(", "[":
                    scopes[scopes.count - 1].depth += 1
                case ")", "]":
                    scopes[scopes.count - 1].depth -= 1
                    if scopes[scopes.count - 1].depth < 0 { problems.append("\(path):\(tok.line): a `\(tok.text)` closes nothing") }
                default:
                    break
                }
                attributes = []; modifiers = []
                i += 1
                continue
            }
            guard case .declarations(let container, let membersPublic) = top.kind, top.depth == 0 else { i += 1; continue }
            let afterDot = i > 0 && t[i - 1].isPunctuation(".")

            if tok.kind == .attribute {
                var text = tok.text
                i += 1
                if let open = token(i), open.isPunctuation("("), !open.spaced {
                    let (inner, end) = group(i)
                    text += "(" + inner.map(\.text).joined(separator: " ") + ")"
                    i = end
                }
                attributes.append(text)
                continue
            }
            let nextWord = token(i + 1).flatMap { $0.kind == .identifier ? $0.text : nil } ?? ""
            let isModifier = Self.modifiers.contains(tok.text)
                || (tok.text == "class" && (Self.introducers.contains(nextWord) || Self.modifiers.contains(nextWord)))
            if tok.kind == .identifier, !afterDot, isModifier {
                modifiers.append(tok.text)
                i += 1
                if let open = token(i), open.isPunctuation("(") {
                    let (inner, end) = group(i)
                    // `internal(set)` sets the setter's access, not the declaration's.
                    if Self.accessLevels.contains(tok.text), inner.contains(where: { $0.text == "set" }) { modifiers.removeLast() }
                    i = end
                }
                continue
            }
            guard tok.kind == .identifier, !afterDot, Self.introducers.contains(tok.text) else {
                attributes = []; modifiers = []
                i += 1
                continue
            }

            // A declaration.
            let explicit = modifiers.first { Self.accessLevels.contains($0) }
            let isPublic = explicit.map { $0 == "public" || $0 == "open" } ?? membersPublic
            let hidden = attributes.contains { attribute in
                if attribute.hasPrefix("@_spi") { return true }
                guard attribute.hasPrefix("@_documentation") else { return false }
                return !attribute.replacingOccurrences(of: " ", with: "").contains("visibility:public")
            }
            let place = "\(path):\(tok.line)"
            func add(_ name: String, isType: Bool = false, alwaysPublic: Bool = false) {
                found.append(Found(container: container, name: name, isPublic: alwaysPublic || isPublic, hidden: hidden, isType: isType, place: place))
            }
            var j = i + 1
            next = .code
            switch tok.text {
            case "func", "init", "subscript":
                var name = tok.text
                if tok.text == "func", let word = token(j) {
                    name = word.text
                    j += 1
                }
                if tok.text == "init", let mark = token(j), mark.kind == .op, mark.text == "?" || mark.text == "!" { j += 1 }
                j = skipGenerics(j)
                if let open = token(j), open.isPunctuation("(") {
                    let (names, end) = labels(j, isSubscript: tok.text == "subscript", isOperator: tok.text == "func" && token(i + 1)?.kind == .op)
                    add(signature(name, names))
                    j = end
                } else {
                    problems.append("\(place): no parameter clause after `\(tok.text) \(name)`")
                }
            case "var", "let":
                if let name = token(j), name.kind == .identifier {
                    add(name.text)
                    j += 1
                }
            case "case":
                // Enum cases: as public as their enum.
                while let name = token(j), name.kind == .identifier, !container.isEmpty {
                    j += 1
                    if let open = token(j), open.isPunctuation("(") {
                        let (names, end) = payloadLabels(j)
                        add(signature(name.text, names), alwaysPublic: true)
                        j = end
                    } else {
                        add(name.text, alwaysPublic: true)
                    }
                    if let equals = token(j), equals.kind == .op, equals.text == "=" {
                        j += 1
                        if token(j)?.kind == .op { j += 1 }
                        j += 1
                    }
                    guard let comma = token(j), comma.isPunctuation(",") else { break }
                    j += 1
                }
            case "struct", "enum", "class", "actor", "protocol":
                if let name = token(j), name.kind == .identifier {
                    add(name.text, isType: true)
                    next = .declarations(container: container + [name.text], membersPublic: tok.text == "protocol")
                    j += 1
                }
            case "typealias", "associatedtype":
                if let name = token(j), name.kind == .identifier {
                    add(name.text, isType: true)
                    j += 1
                }
            case "extension":
                var extended: [String] = []
                while let name = token(j), name.kind == .identifier {
                    extended.append(name.text)
                    j = skipGenerics(j + 1)
                    guard let dot = token(j), dot.isPunctuation(".") else { break }
                    j += 1
                }
                next = .declarations(container: extended, membersPublic: explicit == "public")
            default:
                break
            }
            attributes = []; modifiers = []
            i = j
        }
        if scopes.count != 1 || scopes[0].depth != 0 {
            problems.append("\(path): \(scopes.count - 1) braces and \(scopes[0].depth) brackets left open at the end")
        }
        return found
    }

    /// How far an operator token moves a generic clause's depth: `<` in, `>` out (not `->`).
    private static func angleChange(_ op: String) -> Int {
        let scalars = Array(op.unicodeScalars)
        var change = 0
        for (k, c) in scalars.enumerated() {
            if c == "<" { change += 1 }
            if c == ">" && !(k > 0 && scalars[k - 1] == "-") { change -= 1 }
        }
        return change
    }
}

// MARK: - Reading the docs

enum PublicAPIDocs {
    struct Report {
        /// The heading of the section checked.
        var heading = "Public API"
        /// Public declarations the section does not list.
        var missing: [String] = []
        /// Entries of the section that name no public declaration.
        var stale: [String] = []
        /// What could not be read: the scanner's troubles, a section not found.
        var problems: [String] = []

        var isClean: Bool { missing.isEmpty && stale.isEmpty && problems.isEmpty }

        var message: String {
            var parts: [String] = []
            if !missing.isEmpty {
                parts.append("\(missing.count) public declarations are not in docs/client.md's \"\(heading)\" list "
                    + "(add each as a list entry, spelled as the section's first paragraph says):\n"
                    + missing.map { "  `\($0)`" }.joined(separator: "\n"))
            }
            if !stale.isEmpty {
                parts.append("\(stale.count) entries of the \"\(heading)\" list name no public declaration "
                    + "(removed or renamed?):\n" + stale.map { "  `\($0)`" }.joined(separator: "\n"))
            }
            if !problems.isEmpty {
                parts.append("the check could not read everything:\n" + problems.map { "  \($0)" }.joined(separator: "\n"))
            }
            return parts.joined(separator: "\n")
        }
    }

    /// The entries of the Markdown section whose heading contains `heading`: the names in
    /// backticks that start a list item (`- `name`, `other`: what they are`), outside code blocks.
    static func entries(in markdown: String, heading: String = "Public API") -> [String]? {
        var inSection = false, sectionLevel = 0, inFence = false, found = false
        var entries: [String] = []
        for raw in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("```") || line.hasPrefix("~~~") { inFence.toggle(); continue }
            if inFence { continue }
            if line.hasPrefix("#") {
                let level = line.prefix { $0 == "#" }.count
                if line.dropFirst(level).hasPrefix(" ") {
                    if inSection && level <= sectionLevel { inSection = false }
                    if !found && line.contains(heading) { inSection = true; found = true; sectionLevel = level }
                    continue
                }
            }
            guard inSection, line.hasPrefix("- ") || line.hasPrefix("* ") else { continue }
            var rest = line.dropFirst(2)
            while rest.first == "`", let close = rest.dropFirst().firstIndex(of: "`") {
                entries.append(String(rest[rest.index(after: rest.startIndex)..<close]))
                rest = rest[rest.index(after: close)...]
                guard rest.hasPrefix(", `") else { break }
                rest = rest.dropFirst(2)
            }
        }
        return found ? entries : nil
    }

    static func check(scan: PublicAPIScanner.Scan, doc: String, heading: String = "Public API") -> Report {
        var report = Report(heading: heading, problems: scan.problems)
        guard let listed = entries(in: doc, heading: heading) else {
            report.problems.append("docs: no heading contains \"\(heading)\"")
            return report
        }
        let declared = Set(scan.declarations.keys)
        let documented = Set(listed)
        report.missing = declared.subtracting(documented).sorted()
        report.stale = documented.subtracting(declared).sorted()
        return report
    }
}
