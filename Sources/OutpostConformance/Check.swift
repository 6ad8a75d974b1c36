/// One named rule of docs/protocol.md, checked over HTTP against a running server.
///
/// A check creates what it needs in a fresh space of its own, so checks are independent
/// and may run against a server others use. It passes by returning and fails by
/// throwing `CheckFailure` with what was expected and what came.
public struct Check: Sendable, Identifiable {
    /// Unique kebab-case name, e.g. `push-replay-returns-original-version`.
    public let name: String
    /// The docs/protocol.md section it checks, e.g. `"4"` or `"2"`.
    public let section: String
    /// The rule, in one sentence.
    public let summary: String
    /// What the check needs besides the server's URL and secret.
    public let requirements: Set<Requirement>
    /// It waits on one of the server's timeouts (header or body timeout, a long poll).
    public let waitsOnServerTimeout: Bool
    /// The part of the suite it belongs to; the registry files every check under one, and a
    /// run may be limited to some (`Conformance.run(categories:)`). Nil only for a check
    /// declared outside the registry.
    public internal(set) var category: Category?
    let body: @Sendable (CheckContext) async throws -> Void

    /// The name.
    public var id: String { name }

    /// The parts of the suite, one per group of checks in `CheckRegistry`. A server that
    /// implements only some of the protocol (the SDK's in-memory server implements sync,
    /// not media or operations) is run on the categories it implements.
    public enum Category: String, Sendable, Hashable, CaseIterable {
        /// `/v1/info`, `/healthz`, `/readyz`, `/metrics`, routing (sections 2, 3, 7).
        case operations
        /// Tokens, spaces and scopes (section 2).
        case auth
        /// Push (section 4).
        case push
        /// Pull pages and cursors (section 5).
        case pull
        /// Long polls, restarts and epoch rotations (sections 1, 4, 5, 8).
        case lifecycle
        /// Re-offers and lineage (sections 4, 5; protocol 1.1).
        case lineage
        /// HTTP framing, timeouts, compression and limits of the engine (section 2).
        case http
        /// Media uploads and downloads (section 6).
        case media
        /// A server with a rules file: writes judged, a view per token (docs/rules.md).
        case rules
    }

    /// What a check needs from the operator.
    public enum Requirement: String, Sendable, Hashable {
        /// A way to restart the server on the same data (`--restart-command`).
        case restart
        /// A way to stop the server, run `outpost-server rotate-epoch` and start it again
        /// (`--rotate-epoch-command`).
        case rotateEpoch
        /// A way to give the server a rules file (`--rules-command`).
        case rules
    }

    /// Declares a check.
    public init(_ name: String, section: String, _ summary: String, requires requirements: Set<Requirement> = [],
                waitsOnServerTimeout: Bool = false, _ body: @escaping @Sendable (CheckContext) async throws -> Void) {
        precondition(Check.isKebabCase(name), "check names are kebab-case: \(name)")
        self.name = name
        self.section = section
        self.summary = summary
        self.requirements = requirements
        self.waitsOnServerTimeout = waitsOnServerTimeout
        self.body = body
    }

    static func isKebabCase(_ name: String) -> Bool {
        let utf8 = name.utf8
        guard let first = utf8.first, first >= 0x61 && first <= 0x7A, utf8.last != UInt8(ascii: "-") else { return false }
        return utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: "-") } && !name.contains("--")
    }
}

/// A check's verdict that the server broke a rule: what was expected and what came.
public struct CheckFailure: Error, CustomStringConvertible, Sendable {
    /// Expected versus got, in one or two sentences.
    public let description: String

    /// A failure with `message`.
    public init(_ message: String) {
        self.description = message
    }
}

/// Thrown by a check that cannot run here (the reason is printed with `SKIP`).
public struct CheckSkipped: Error, CustomStringConvertible, Sendable {
    /// Why the check did not run.
    public let description: String

    /// A skip with `reason`.
    public init(_ reason: String) {
        self.description = reason
    }
}

/// The outcome of one check.
public struct CheckResult: Sendable {
    /// Passed, failed or skipped.
    public enum Outcome: Sendable, Equatable {
        /// Passed; the note (e.g. a measured latency) may be empty.
        case passed(note: String)
        /// The server broke the rule: expected versus got.
        case failed(reason: String)
        /// Not run: a missing requirement or a request to skip.
        case skipped(reason: String)
    }

    /// The check's name.
    public let name: String
    /// Its docs/protocol.md section.
    public let section: String
    /// What happened.
    public let outcome: Outcome
    /// How long it ran.
    public let duration: Duration

    /// `PASS name`, `FAIL name: reason` or `SKIP name: reason`, on one line.
    public var line: String {
        switch outcome {
        case .passed(let note): return note.isEmpty ? "PASS \(name)" : "PASS \(name) (\(note))"
        case .failed(let reason): return "FAIL \(name): \(Self.oneLine(reason))"
        case .skipped(let reason): return "SKIP \(name): \(Self.oneLine(reason))"
        }
    }

    /// The check passed.
    public var passed: Bool { if case .passed = outcome { true } else { false } }
    /// The check failed.
    public var failed: Bool { if case .failed = outcome { true } else { false } }
    /// The check did not run.
    public var skipped: Bool { if case .skipped = outcome { true } else { false } }

    static func oneLine(_ text: String) -> String {
        String(text.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }
}

/// The results of a run, in the order the checks ran.
public struct Report: Sendable {
    /// One result per check considered.
    public let results: [CheckResult]

    /// How many passed.
    public var passedCount: Int { results.filter(\.passed).count }
    /// How many failed.
    public var failedCount: Int { results.filter(\.failed).count }
    /// How many were skipped.
    public var skippedCount: Int { results.filter(\.skipped).count }
    /// Names of the checks that failed.
    public var failedNames: [String] { results.filter(\.failed).map(\.name) }
    /// True when no check failed.
    public var allPassed: Bool { failedCount == 0 }

    /// `N passed, N failed` (and `, N skipped` when some were).
    public var summaryLine: String {
        var line = "\(passedCount) passed, \(failedCount) failed"
        if skippedCount > 0 { line += ", \(skippedCount) skipped" }
        return line
    }

    /// The result of check `name`, if it ran.
    public func result(_ name: String) -> CheckResult? { results.first { $0.name == name } }
}
