import Dispatch
import Foundation
import OutpostSubprocess
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Something the suite asks the operator's environment to do to the server: restart it
/// on the same data, or stop it, give its store a new epoch and start it again.
public struct ServerHook: Sendable, CustomStringConvertible {
    /// What it runs, for messages.
    public let description: String
    /// Does it; returns the server's new base URL when it moved (a test's child process
    /// may come back on another port), nil when it is where it was.
    let action: @Sendable () async throws -> String?

    /// A shell command run with `/bin/sh -c`; it must exit 0 once the server is back (the
    /// suite then waits for `/readyz` as well).
    public static func shell(_ command: String) -> ServerHook {
        ServerHook(description: command) {
            try await runShell(command)
            return nil
        }
    }

    /// A Swift closure (for tests that own the server); it returns the new base URL when
    /// the server moved.
    public static func closure(_ description: String, _ action: @escaping @Sendable () async throws -> String?) -> ServerHook {
        ServerHook(description: description, action: action)
    }

    private static func runShell(_ command: String) async throws {
        let outcome: Result<(Int32, String), any Error> = await withCheckedContinuation { continuation in
            DispatchQueue(label: "outpost-conformance.hook").async {
                continuation.resume(returning: Result { try spawnAndWait(command) })
            }
        }
        let (status, errorText) = try outcome.get()
        guard status == 0 else {
            throw CheckFailure("command `\(command)` exited \(status): \(errorText.trimmingCharacters(in: .whitespacesAndNewlines).suffix(400))")
        }
    }

    /// Runs `/bin/sh -c command`, waits for it to exit, and returns its exit status
    /// (128 + the signal when killed) and standard error.
    ///
    /// A restart command leaves the server running in the background, and that server
    /// inherits the shell's standard error: so it goes to a file, and only the shell's exit
    /// is waited for, never the end of its output.
    private static func spawnAndWait(_ command: String) throws -> (Int32, String) {
        let errorPath = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-conformance-hook-\(UUID().uuidString)").path
        defer { unlink(errorPath) }
        let shell: Subprocess
        do {
            shell = try Subprocess("/bin/sh", ["-c", command], error: .file(errorPath))
        } catch {
            throw CheckFailure("cannot run /bin/sh for `\(command)`: \(error)")
        }
        let status = shell.wait().status
        let errorText = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        return (status, errorText)
    }
}

/// Everything a run needs to know about the server under test.
public struct Configuration: Sendable {
    /// `http://HOST:PORT[/PREFIX]`.
    public var baseURL: String
    /// The HS256 secret the server verifies tokens with.
    public var secret: [UInt8]
    /// Restarts the server on the same data; checks that need it are skipped without it.
    public var restart: ServerHook?
    /// Stops the server, runs `outpost-server rotate-epoch` on its data and starts it again.
    public var rotateEpoch: ServerHook?
    /// Gives the server a rules file (docs/rules.md), or takes it away, on the same data;
    /// the rules checks are skipped without it.
    public var rules: RulesHook?
    /// The server's header timeout (docs/protocol.md section 2: 10 s).
    public var headerTimeout: Duration = .seconds(10)
    /// How long a body may make no progress before the server answers 408 (10 s by default).
    public var bodyTimeout: Duration = .seconds(10)
    /// Whether `/metrics` needs an admin token (the default; an operator may turn it off).
    public var metricsRequireAdmin = true
    /// Longest wait for any one response.
    public var responseTimeout: Duration = .seconds(30)
    /// How late a long poll may answer after the push that should wake it before the check
    /// fails. The protocol's 50 ms is a benchmark goal; this only catches a poll that is not
    /// woken at all.
    public var longPollWakeLimit: Duration = .seconds(1)
    /// How long to wait for `/readyz` after a restart or an epoch rotation.
    public var readyTimeout: Duration = .seconds(60)

    /// A configuration for the server at `baseURL` with `secret`.
    public init(baseURL: String, secret: [UInt8]) {
        self.baseURL = baseURL
        self.secret = secret
    }

    /// The same with a UTF-8 secret.
    public init(baseURL: String, secret: String) {
        self.init(baseURL: baseURL, secret: Array(secret.utf8))
    }
}

/// How the suite gives the server under test a rules file, or takes it away.
public struct RulesHook: Sendable, CustomStringConvertible {
    public let description: String
    /// Gets the path of the rules file to serve with, or nil for none; returns the server's
    /// new base URL when it moved.
    let action: @Sendable (String?) async throws -> String?

    /// A shell command, run with `CONFORMANCE_RULES` set to the file's path (empty
    /// for none). It must exit 0 once the server serves with those rules: restarted with
    /// `--rules "$CONFORMANCE_RULES"` (or without), or sent SIGHUP after the file
    /// it reads was replaced.
    public static func shell(_ command: String) -> RulesHook {
        RulesHook(description: command) { path in
            let quoted = "'" + (path ?? "").replacingOccurrences(of: "'", with: "'\\''") + "'"
            _ = try await ServerHook.shell("CONFORMANCE_RULES=\(quoted) \(command)").action()
            return nil
        }
    }

    /// A Swift closure (for tests that own the server).
    public static func closure(_ description: String, _ action: @escaping @Sendable (String?) async throws -> String?) -> RulesHook {
        RulesHook(description: description, action: action)
    }
}

/// Runs the conformance suite against a live server.
///
/// ```swift
/// let configuration = Configuration(baseURL: "http://127.0.0.1:8080", secret: "…")
/// let report = try await Conformance.run(configuration, skip: ["http-header-timeout-408"]) { print($0.line) }
/// print(report.summaryLine)   // "97 passed, 0 failed, 4 skipped"
/// ```
public enum Conformance {
    /// Every check, in the order of docs/protocol.md.
    public static var checks: [Check] { CheckRegistry.all }

    /// `only` or `skip` named checks that do not exist.
    public struct UnknownChecks: Error, CustomStringConvertible {
        /// The names that match no check.
        public let names: [String]
        /// The names, for people.
        public var description: String { "unknown check name(s): \(names.joined(separator: ", ")) (see --list)" }
    }

    /// Runs the checks of `categories` (all when empty) that are named in `only` (all when
    /// empty) except those in `skip`, one after the other, calling `progress` after each.
    /// Checks outside `categories` or `only` are not considered and not reported; checks
    /// named in `skip`, and checks whose requirements the configuration does not meet, are
    /// reported as skipped with the reason.
    public static func run(_ configuration: Configuration, categories: Set<Check.Category> = [], only: [String] = [], skip: [String] = [],
                           progress: @Sendable (CheckResult) -> Void = { _ in }) async throws -> Report {
        let all = checks
        let known = Set(all.map(\.name))
        let unknown = (only + skip).filter { !known.contains($0) }
        guard unknown.isEmpty else { throw UnknownChecks(names: unknown) }
        let endpoint = try Endpoint(url: configuration.baseURL)
        let server = ServerUnderTest(configuration: configuration, endpoint: endpoint)
        var results: [CheckResult] = []
        for check in all where (categories.isEmpty || check.category.map(categories.contains) == true) && (only.isEmpty || only.contains(check.name)) {
            let result: CheckResult
            if skip.contains(check.name) {
                result = CheckResult(name: check.name, section: check.section, outcome: .skipped(reason: "skipped by request"), duration: .zero)
            } else if let missing = missingRequirement(check, configuration) {
                result = CheckResult(name: check.name, section: check.section, outcome: .skipped(reason: missing), duration: .zero)
            } else {
                result = await run(check, server: server)
            }
            progress(result)
            results.append(result)
        }
        return Report(results: results)
    }

    static func missingRequirement(_ check: Check, _ configuration: Configuration) -> String? {
        if check.requirements.contains(.restart) && configuration.restart == nil {
            return "needs a restart of the server (--restart-command)"
        }
        if check.requirements.contains(.rotateEpoch) && configuration.rotateEpoch == nil {
            return "needs an epoch rotation (--rotate-epoch-command)"
        }
        if check.requirements.contains(.rules) && configuration.rules == nil {
            return "needs a way to give the server a rules file (--rules-command)"
        }
        return nil
    }

    static func run(_ check: Check, server: ServerUnderTest) async -> CheckResult {
        let context = CheckContext(check: check, server: server)
        let start = ContinuousClock.now
        let outcome: CheckResult.Outcome
        do {
            try await check.body(context)
            outcome = .passed(note: context.notes.joined(separator: "; "))
        } catch let skip as CheckSkipped {
            outcome = .skipped(reason: skip.description)
        } catch let failure as CheckFailure {
            outcome = .failed(reason: failure.description)
        } catch {
            outcome = .failed(reason: "\(error)")
        }
        return CheckResult(name: check.name, section: check.section, outcome: outcome, duration: ContinuousClock.now - start)
    }
}

/// The server as the checks see it: its configuration and current address (a restart
/// hook may move it).
final class ServerUnderTest: Sendable {
    let configuration: Configuration
    let signer: TokenSigner
    private let current: Mutex<Endpoint>

    init(configuration: Configuration, endpoint: Endpoint) {
        self.configuration = configuration
        self.signer = TokenSigner(secret: configuration.secret)
        self.current = Mutex(endpoint)
    }

    var endpoint: Endpoint { current.withLock { $0 } }

    /// Runs `hook`, follows the server if it moved, and waits until `/readyz` says 200.
    func perform(_ hook: ServerHook) async throws {
        if let moved = try await hook.action() {
            let endpoint = try Endpoint(url: moved)
            current.withLock { $0 = endpoint }
        }
        let deadline = ContinuousClock.now + configuration.readyTimeout
        var last = "no answer"
        while ContinuousClock.now < deadline {
            do {
                let connection = try await RawConnection.open(endpoint, timeout: .seconds(2))
                defer { connection.close() }
                try await connection.send(HTTPRequestBytes.make("GET", endpoint.target("/readyz"), host: endpoint.hostHeader))
                let response = try await connection.response(timeout: .seconds(5))
                if response.status == 200 { return }
                last = "\(response.status)"
            } catch {
                last = "\(error)"
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw CheckFailure("the server was not ready within \(configuration.readyTimeout) after `\(hook.description)` (last /readyz: \(last))")
    }
}
