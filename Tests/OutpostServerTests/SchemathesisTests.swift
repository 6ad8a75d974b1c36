import Foundation
import Testing
import OutpostTestSupport

/// schemathesis, at the version scripts/install-deps.sh pins, against a live
/// `outpost-server` with every check on and none turned off (openapi/schemathesis.toml holds
/// the tokens, the space and the statuses a setting or an upload's state decides): any finding is a place where openapi/outpost.yaml and the server
/// disagree, and fails the test with schemathesis's report. The run is deterministic
/// (`--generation-deterministic`, one worker) and bounded (`--max-examples`).
///
/// A missing schemathesis is a failure, never a skip, as for PostgreSQL: the test runs in
/// CI, where `make test` installs it (`scripts/install-deps.sh test`).
@Suite(.offPoolWhileBlocking, .serverLogs) struct SchemathesisTests {
    static let root = PinnedTools.root

    /// Test cases per operation and phase: enough to reach every operation's status codes,
    /// few enough for a run of about 20 s on two cores.
    static let maxExamples = 20

    /// The schemathesis executable: `OUTPOST_SCHEMATHESIS`, or the venv install-deps.sh makes.
    static func executable(version: String) throws -> String {
        let path = ProcessInfo.processInfo.environment["OUTPOST_SCHEMATHESIS"]
            ?? PinnedTools.venvPath("schemathesis", version: version, "schemathesis")
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw ProcessFailure("schemathesis \(version) is not installed at \(path): run scripts/install-deps.sh test (or set OUTPOST_SCHEMATHESIS to a schemathesis \(version) executable)")
        }
        return path
    }

    @Test func theOpenAPIDocumentIsTrueToALiveServer() async throws {
        let version = try PinnedTools.version("schemathesis")
        let schemathesis = try Self.executable(version: version)
        let reported = try await blocking { try runToCompletion(schemathesis, ["--version"], standardError: true) }
        try #require(reported.status == 0 && reported.output.contains("version \(version)\n"),
                     "\(schemathesis) is not schemathesis \(version): \(reported.output)")
        let operations = OpenAPITests.operations(try OpenAPITests.specText).count
        // Not while the test run's PostgreSQL cluster starts: the tests that wait for it
        // would wait longer, with schemathesis's load on the same two cores.
        _ = try await PostgresCluster.started()

        let (ended, output, serverExit) = try await withTemporaryDirectory(prefix: "outpost-schemathesis") { dir in
            try await blocking { () throws -> (Subprocess.Termination?, String, Int32) in
                let server = try ServerProcess(dataDirectory: dir.appending("data"))
                defer { server.stop() }
                // The space `s` is the one openapi/schemathesis.toml sends every request to.
                let token = try server.token(sub: "x", spaces: ["s"], scope: "write")
                let admin = try server.token(sub: "admin", spaces: [], admin: true)
                let arguments = [
                    "--config-file", Self.root.appendingPathComponent("openapi/schemathesis.toml").path,
                    "run", Self.root.appendingPathComponent("openapi/outpost.yaml").path,
                    "--url", server.baseURL.absoluteString, "--checks", "all",
                    "--max-examples", String(Self.maxExamples), "--generation-deterministic", "--workers", "1",
                    "--no-color",
                ]
                // Its working directory is the temporary one: whatever it writes goes there.
                // At the usual CPU priority: at the lowest, two busy processes beside the
                // suite (scripts/test-under-load.sh) left it a few percent of a core, and it
                // did not finish in 300 s; the in-process servers of the other tests answer
                // on their own loop threads whatever it takes.
                let run = try Subprocess(schemathesis, arguments,
                                         environment: Subprocess.environment(adding: [
                                             "OUTPOST_SCHEMATHESIS_TOKEN": token, "OUTPOST_SCHEMATHESIS_ADMIN_TOKEN": admin,
                                             // The serializer of the tus PATCH body's media type.
                                             "SCHEMATHESIS_HOOKS": Self.root.appendingPathComponent("openapi/schemathesis_hooks.py").path,
                                         ]),
                                         workingDirectory: dir.path, output: .capture, errorToOutput: true)
                // A deadline well past the usual 20 s, for a machine whose cores other work
                // holds (its CPU time, not a signal, sets how long it takes); past it the run
                // is stopped by its PID and reported with what it printed.
                let ended = run.wait(timeout: 900)
                if ended == nil { run.stop(grace: 5) }
                run.waitForStreams()
                return (ended, run.outputText(), server.stop())
            }
        }
        guard let ended else {
            Issue.record("schemathesis did not finish within 900 s; its output:\n\(output)")
            return
        }
        #expect(ended == .exited(0), "schemathesis \(version) reports findings (\(ended)): openapi/outpost.yaml and the server disagree\n\(output)")
        // Every operation of the document was run, not a filtered few.
        #expect(output.contains("Tested: \(operations)\n"), "schemathesis did not test all \(operations) operations:\n\(output)")
        #expect(serverExit == 0, "outpost-server exited \(serverExit) after the run")
    }
}
