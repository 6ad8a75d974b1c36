import Foundation
import OutpostTestSupport
import Testing

/// `outpost-sim` itself: its output, its closing line, its exit status.
@Suite("outpost-sim command")
struct CommandTests {
    /// Runs `outpost-sim` off the cooperative pool and returns its exit status and output.
    private func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await blocking { try Self.runBlocking(arguments) }
    }

    private static func runBlocking(_ arguments: [String]) throws -> (status: Int32, output: String) {
        try runToCompletion(BuildProducts.executable("outpost-sim"), arguments, standardError: true)
    }

    @Test func aPassingRangePrintsRunsPerSecondAndItsClosingLine() async throws {
        let (status, output) = try await run(["--first-seed", "100", "--seeds", "6", "--steps", "15"])
        #expect(status == 0, "\(output)")
        let lines = output.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("outpost-sim: seeds 100..<106, 15 steps") == true, "\(output)")
        #expect(lines.contains { $0.contains("runs/s") })
        #expect(lines.last == "6 passed, 0 failed")
    }

    @Test func aUsageErrorExits64() async throws {
        let (status, output) = try await run(["--devices", "9"])
        #expect(status == 64)
        #expect(output.contains("usage: outpost-sim"))
    }
}
