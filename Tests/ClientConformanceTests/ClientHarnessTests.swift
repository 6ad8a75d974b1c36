import Foundation
import OutpostConformance
import OutpostTestSupport
import Testing

/// `outpost-conformance client` (docs/conformance.md): the SDK's driver held to the
/// protocol by a real server child under faults, and the harness shown able to fail.
@Suite("Client conformance harness", .offPoolWhileBlocking)
struct ClientHarnessTests {
    /// The mutated drivers, Python relays in front of the SDK's driver.
    static let drivers = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("drivers").path

    static func configuration(seed: UInt64, driver: String) -> ClientHarness.Configuration {
        ClientHarness.Configuration(seed: seed, driver: driver, server: BuildProducts.executable("outpost-server"))
    }

    /// The CI slice: seeds 0 to 4 against the SDK's driver on SQLite.
    /// `outpost-conformance client --seeds 200` is the large run.
    @Test func theSDKsDriverKeepsEveryPromiseOnSQLite() throws {
        let driver = BuildProducts.executable("outpost-driver")
        for seed in UInt64(0)..<5 {
            let result = ClientHarness.run(Self.configuration(seed: seed, driver: driver))
            #expect(result.passed, "\(result.report)")
            #expect(result.log.count > 40, "seed \(seed) ran its schedule")
        }
    }

    /// A driver that drops every third save, answering ok, breaks `local-edit` (or another
    /// promise about edits) within a few seeds, and the report names the seed and replay.
    @Test func aDriverThatDropsSavesFails() throws {
        let failure = try Self.firstFailure(mutant: "drops-saves.py")
        let promises = Set(failure.violations.map(\.promise))
        #expect(!promises.isDisjoint(with: ["local-edit", "acknowledged-write", "convergence"]), "\(failure.report)")
        #expect(!promises.contains("harness"), "\(failure.report)")
        #expect(failure.report.contains("replay: outpost-conformance client --seed \(failure.configuration.seed)"))
    }

    /// A driver whose `all` keeps records deleted since breaks `convergence`.
    @Test func aDriverThatKeepsDeletedRecordsFails() throws {
        let failure = try Self.firstFailure(mutant: "keeps-deleted.py")
        let messages = failure.violations.filter { $0.promise == "convergence" }.map(\.message)
        #expect(messages.contains { $0.contains("the server holds a tombstone") || $0.contains("the server holds nothing") }, "\(failure.report)")
        #expect(!failure.violations.contains { $0.promise == "harness" }, "\(failure.report)")
    }

    /// The first failing run of seeds 0 to 7 with the mutated driver `mutant`.
    static func firstFailure(mutant: String) throws -> ClientHarness.Result {
        let driver = "/usr/bin/python3 \(drivers)/\(mutant) \(BuildProducts.executable("outpost-driver"))"
        for seed in UInt64(0)..<8 {
            let result = ClientHarness.run(configuration(seed: seed, driver: driver))
            if !result.passed { return result }
        }
        throw ProcessFailure("\(mutant) passed seeds 0 to 7: the harness did not catch it")
    }
}
