import Foundation
import OutpostTestSupport
import Testing

/// The README's shell blocks marked `<!-- readme-test: runs after `make run` -->`, run by
/// bash as a newcomer would run them in a second terminal: against a server started as
/// `make run` starts it (`serve --data ./outpost-data`, on its first start, with no
/// `OUTPOST_JWT_SECRET`), from a directory whose `.build/release` holds the executables.
///
/// Two things differ from a newcomer's terminal, and only these: the executables are the
/// ones this test run built (so `swift build -c release` lines are left out), and the
/// server listens on a free port, which replaces `8080` in the blocks.
@Suite(.offPoolWhileBlocking, .serverLogs) struct ReadmeCommandsTests {
    static let marker = "<!-- readme-test: runs after `make run` -->"

    /// The marked blocks of `text`, each as its lines.
    static func markedBlocks(_ text: String) -> [[String]] {
        var blocks: [[String]] = []
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var i = 0
        while i < lines.count {
            if lines[i] == marker, i + 1 < lines.count, lines[i + 1] == "```sh" {
                var block: [String] = []
                i += 2
                while i < lines.count, lines[i] != "```" {
                    block.append(lines[i])
                    i += 1
                }
                blocks.append(block)
            }
            i += 1
        }
        return blocks
    }

    @Test func theMarkedBlocksOfTheReadmeRunAsWrittenAfterMakeRun() async throws {
        let blocks = Self.markedBlocks(try DockerfileTests.read("README.md"))
        #expect(blocks.count >= 2, "the README has no marked blocks")
        try await withTemporaryDirectory(prefix: "outpost-readme") { dir in
            try FileManager.default.createDirectory(atPath: dir.appending(".build"), withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: dir.appending(".build/release"), withDestinationPath: BuildProducts.directory.path)
            let environment = Subprocess.environment { $0.hasPrefix("OUTPOST_") }
            let server = try Subprocess(dir.appending(".build/release/outpost-server"), ["serve", "--port", "0", "--data", "./outpost-data"],
                                        environment: environment, workingDirectory: dir.path, output: .capture,
                                        error: .file(TestLogs.newFile(named: "readme-server")))
            defer { server.stop(grace: 30) }
            let port = try server.listeningAddress(timeout: 30).port
            for block in blocks {
                let script = block.filter { !$0.hasPrefix("swift build") }
                    .map { $0.replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(port)") }
                    .joined(separator: "\n")
                let run = try await blocking {
                    try Subprocess.run("/bin/bash", ["-e", "-o", "pipefail", "-c", script], environment: environment, workingDirectory: dir.path)
                }
                if script.contains("outpost-conformance --url") {
                    #expect(run.output.contains(" passed, 0 failed"), "the conformance suite did not pass: \(run.output.suffix(2000))")
                }
                #expect(run.status == 0, "the README block failed (exit \(run.status)):\n\(script)\n--- output:\n\(run.output.suffix(3000))\n--- error:\n\(run.error.suffix(2000))")
            }
        }
    }
}
