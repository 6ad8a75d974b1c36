import Foundation
import OutpostConformance
import OutpostMutants
import OutpostServer
import OutpostTestSupport
import Testing

/// The whole suite against a real `outpost-server serve` child process, as CI runs it, and
/// the `outpost-conformance` command's output and exit status.
@Suite(.offPoolWhileBlocking, .serialized, .serverLogs) struct ConformanceSuiteTests {
    /// Every check, restart and epoch rotation included, against the server executable
    /// with its default limits (only the header and body timeouts are shortened).
    @Test func outpostServerConformsToTheProtocol() async throws {
        try await withTemporaryDirectory(prefix: "outpost-conformance-child") { directory in
            let child = try ServerProcess(dataDirectory: directory.path, arguments: ["--header-timeout", "1", "--body-timeout", "1"])
            defer { child.stop() }
            try await Self.runEveryCheck(against: child, rotateEpoch: ["rotate-epoch", "--data", directory.path])
        }
    }

    /// Runs every check against `child` (started with 1 s header and body timeouts),
    /// restarting it for the restart checks and running `outpost-server ROTATE-ARGUMENTS`
    /// between a stop and a start for the epoch checks; each failure is an issue. Shared by
    /// the SQLite and PostgreSQL runs.
    static func runEveryCheck(against child: ServerProcess, rotateEpoch arguments: [String]) async throws {
        var configuration = Configuration(baseURL: child.baseURL.absoluteString, secret: child.secret)
        configuration.headerTimeout = .seconds(1)
        configuration.bodyTimeout = .seconds(1)
        configuration.restart = .closure("restart the outpost-server child") {
            try await blocking {
                try child.restart()
                return child.baseURL.absoluteString
            }
        }
        configuration.rotateEpoch = .closure("stop the child, outpost-server \(arguments.joined(separator: " ")), start it") {
            try await blocking {
                child.stop()
                let (status, output) = try ServerProcess.run(arguments)
                guard status == 0 else { throw ProcessFailure("rotate-epoch exited \(status): \(output)") }
                try child.restart()
                return child.baseURL.absoluteString
            }
        }
        // The rules checks: the child again with `--rules FILE`, or with its first arguments.
        let plain = child.arguments
        configuration.rules = .closure("restart the outpost-server child with or without --rules") { path in
            try await blocking {
                try child.restart(arguments: plain + (path.map { ["--rules", $0] } ?? []))
                return child.baseURL.absoluteString
            }
        }
        let report = try await Conformance.run(configuration)
        for result in report.results where !result.passed {
            Issue.record("\(result.line)")
        }
        #expect(report.skippedCount == 0)
        #expect(report.results.count == Conformance.checks.count)
    }

    /// `outpost-conformance --url --secret --only …` prints one line per check and the
    /// totals, and exits 0 only when nothing failed; `--skip` and unknown names behave.
    @Test func commandLineOutputAndExitStatus() async throws {
        let clean = try await InProcessServer(mutation: nil)
        let broken = try await InProcessServer(mutation: .acceptAlgNone)
        do {
            let passing = try await runTool(["--url", clean.baseURL, "--secret", clean.secret, "--only", "info-shape-and-limits,healthz",
                                             "--only", "auth-alg-none-401", "--skip", "healthz"])
            #expect(passing.status == 0)
            #expect(passing.lines == ["PASS info-shape-and-limits", "SKIP healthz: skipped by request", "PASS auth-alg-none-401", "2 passed, 0 failed, 1 skipped"])

            let failing = try await runTool(["--url", broken.baseURL, "--secret", broken.secret, "--only", "auth-alg-none-401,readyz"])
            #expect(failing.status == 1)
            #expect(failing.lines.count == 3)
            #expect(failing.lines.first == "PASS readyz")
            let failure = failing.lines.dropFirst().first ?? ""
            #expect(failure.hasPrefix("FAIL auth-alg-none-401: pull with alg none and no signature: expected 401 unauthorized, got 200"), "\(failure)")
            #expect(failing.lines.last == "1 passed, 1 failed")

            let skipped = try await runTool(["--url", clean.baseURL, "--secret", clean.secret, "--only", "restart-seqs-continue"])
            #expect(skipped.status == 0)
            #expect(skipped.lines == ["SKIP restart-seqs-continue: needs a restart of the server (--restart-command)", "0 passed, 0 failed, 1 skipped"])

            let failedHook = try await runTool(["--url", clean.baseURL, "--secret", clean.secret, "--only", "restart-replay-survives",
                                                "--restart-command", "echo cannot restart >&2; exit 3"])
            #expect(failedHook.status == 1)
            #expect(failedHook.lines.first?.contains("exited 3: cannot restart") == true)

            let unknown = try await runTool(["--url", clean.baseURL, "--secret", clean.secret, "--only", "no-such-check"])
            #expect(unknown.status == 64)

            // --category leaves out the checks of other categories (healthz is an operations check).
            let lineage = try await runTool(["--url", clean.baseURL, "--secret", clean.secret, "--category", "lineage",
                                             "--only", "info-protocol-version,healthz"])
            #expect(lineage.status == 0)
            #expect(lineage.lines == ["PASS info-protocol-version (1.1)", "1 passed, 0 failed"])
            let unknownCategory = try await runTool(["--url", clean.baseURL, "--secret", clean.secret, "--category", "no-such-category"])
            #expect(unknownCategory.status == 64)

            let listed = try await runTool(["--list"])
            #expect(listed.status == 0 && listed.lines.count == Conformance.checks.count)
        } catch {
            await clean.stop()
            await broken.stop()
            throw error
        }
        await clean.stop()
        await broken.stop()
    }

    /// A shell restart command runs with /bin/sh; the suite then waits for /readyz. A
    /// command that leaves a process in the background (as a restart does: the server)
    /// is done when the shell exits, not when that process ends.
    @Test func shellHookRunsTheCommand() async throws {
        let server = try await InProcessServer(mutation: nil)
        let marker = server.directory.appending("hook-ran")
        let background = server.directory.appending("background-pid")
        var configuration = server.configuration()
        // The background `sleep` stands for the server a restart command leaves running.
        configuration.restart = .shell("touch '\(marker)'; sleep 600 & echo $! > '\(background)'")
        let report = try await Conformance.run(configuration, only: ["restart-replay-survives"])
        #expect(report.allPassed && report.passedCount == 1)
        #expect(FileManager.default.fileExists(atPath: marker))
        // The run ended while the background process still ran: the hook was done when
        // its shell exited.
        let pid = try #require(Int32((try String(contentsOfFile: background, encoding: .utf8)).trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(kill(pid, 0) == 0, "the background process had ended before the run did")
        kill(pid, SIGKILL)
        await server.stop()
    }

    struct ToolRun {
        let status: Int32
        let lines: [String]
    }

    /// Runs the built `outpost-conformance`.
    func runTool(_ arguments: [String]) async throws -> ToolRun {
        try await blocking {
            let (status, output) = try runToCompletion(BuildProducts.executable("outpost-conformance"), arguments)
            return ToolRun(status: status, lines: output.split(separator: "\n").map(String.init))
        }
    }
}
