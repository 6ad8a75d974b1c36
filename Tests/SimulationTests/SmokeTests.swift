import Testing
@testable import OutpostSimulation

@Suite("Simulation smoke")
struct SmokeTests {
    @Test func oneRunPasses() async throws {
        let result = await Simulation.run(.forSeed(0, steps: 20))
        #expect(result.passed, "\(result.violations)\n\(result.log.joined(separator: "\n"))")
    }
}
