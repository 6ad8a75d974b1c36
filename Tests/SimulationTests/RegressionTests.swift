import OutpostTestSupport
import Testing
@testable import OutpostSimulation

/// Every seed on which the harness found a bug, replayed on every run of the suite
/// (docs/simulation.md, "Bugs found"). A seed names a run of the step generator as it is in
/// `Simulation.swift`: a change to how steps are drawn must re-derive these seeds (the
/// scenario tests in `Tests/OutpostTests/SimulationFindingsTests.swift` do not depend on it).
@Suite("Simulation regressions", .offPool)
struct RegressionTests {
    static let seeds: [(seed: UInt64, bug: String)] = [
        (92, "a pending edit re-based over a write made after a data loss, without the resolver"),
        (227, "a pending edit re-based over a write made after a restore, without the resolver"),
        (356, "a retry time stored before the clock was set back a year held the queue for a year"),
        (334, "the same, with two changes held"),
        (359, "the same, with three changes held"),
        (275, "a copy known from a push answer (no updatedAt) let a pending edit be re-based blindly"),
        (10, "the same, after the pull that follows the push was lost"),
        (285, "the same, with the client-wins resolver"),
        (797, "a re-pull finished by a later sync pushed nothing; a delete then cancelled out the record's tombstone"),
        (943, "the same, with the custom resolver"),
        (2612, "a pending edit on an acknowledged copy, whose record the restored history holds in a shape the app refuses, went as a create and lost the copy to the resolver"),
        (3430, "an edit merged into the re-offer of an acknowledged copy the new history lacked; its rejection took the copy with it"),
        (1064, "the fix for 3430 put a delete made on an older copy on top of the newer copy it never saw"),
        (9368, "a pending edit re-based onto an older restored copy; its rejection took the device's newer acknowledged copy (a delete) with it"),
        (7377, "harness: a copy written over a tombstone knows the deletion below it; a device that showed that copy knows it too"),
        (7773, "harness: an edit a client-wins conflict kept goes again on the conflict's current copy, as if made on it"),
        (12380, "a queued re-offer was re-based by content onto a new history holding that content committed later; it replaced a newer acknowledged write"),
        (20564, "an in-doubt change that a new history refused (epoch_mismatch) went as a create and lost to the resolver, instead of meeting the copy the re-pull kept aside"),
        (27164, "the same, with an edit made on a newer acknowledged copy"),
        (30404, "the same"),
        (31702, "the same, with last-write-wins"),
        (35684, "the same"),
        (24407, "an edit queued behind an in-doubt create took the device's newer server copy as its base, which the app never showed"),
        (34667, "harness: an acknowledged write replaced, in a lost history, by a later write that saw it, whose content the server holds"),
        (12742, "an edit queued behind a change of the old history kept that history's base after the re-pull and was refused for ever"),
        (9599, "harness: an edit made on the device's own pending edit knows what that edit's state knew once applied"),
        (39551, "a change rejected after its record met a new history took the new history's older copy over the device's newer acknowledged one"),
        (49820, "harness: an applied answer read in an epoch the device did not follow is not an acknowledgement"),
        (586, "harness: a delete a device held was not offered again over the restored tombstone of an older delete, and the oracle wanted it"),
        (56303, "an edit over the record limit, in doubt while its record met a new history that lacked it; its rejection took the device's acknowledged copy with it"),
        (71962, "harness: an acknowledged write replaced by a delete committed in the same push, in a history since lost, whose content the server holds"),
        (28533, "harness: a tombstone kept aside while a change was in doubt, offered again to a new history after the change was rejected (the fix for 56303)"),
        (83108, "a record a restored history lacked, with a local edit not made on the device's copy: the re-pull dropped the copy, and the edit's rejection left the record gone"),
        (95924, "an in-doubt edit made on an acknowledged tombstone, whose record the restored history holds in a shape the app refuses, went as a create once refused and lost the tombstone to the resolver"),
        // Found while the engine became one transition function (protocol 1.1).
        (14, "an edit made while the app could read no copy (a pulled copy it refuses) went on that copy, over a write it never saw"),
        (202, "a re-offer admitted by lineage replaced a write made in the new history on a restored state (lineage is 'descends from', sameAs is 'is')"),
        (20, "harness: an acknowledged write that a resolver saw against the final state's ancestor counts as decided"),
        (374, "an acknowledged edit kept as a reference for a rejected one was shown instead of the newer copy"),
        (455, "an own write the app's validator refuses, pulled before its answer was read, stayed unreadable and was not offered again after a data loss"),
        (1907, "a restored copy of the device's own refused-shape write stayed unreadable and was not offered again after a data loss"),
        (1605, "a re-offer waiting behind a sent app edit was taken for the newest local content, and the conflict dropped the app's edit"),
        (3935, "of two left copies that did not descend from one another (two data losses), the one of the later epoch was kept and the other dropped"),
        (4269, "the same, with the client-wins resolver"),
        (55055, "harness: a re-offer of another device's delete was credited to this device's own pending delete; a re-offer names the state it carries"),
        (309861, "harness: a client-wins resolver kept a queued edit carrying another device's content (a resolver's write sent again to a new history); the oracle did not credit that edit with the conflict's current copy"),
    ]

    @Test(arguments: seeds.map(\.seed))
    func seedStaysFixed(seed: UInt64) async {
        let result = await Simulation.run(.forSeed(seed))
        let bug = Self.seeds.first { $0.seed == seed }!.bug
        let passed = result.passed
        #expect(passed, "seed \(seed) (\(bug)):\n\(result.violations.map(\.description).joined(separator: "\n"))\nreproduce: \(result.configuration.reproduction)")
    }

    /// Seeds of runs with field kinds (`outpost-sim --field-kinds`), which run under a rules file.
    static let fieldKindSeeds: [(seed: UInt64, bug: String)] = [
        (15, "harness: under rules a delete of a deleted record departs no copy and reaches no device; a device keeps the tombstone it was sent"),
        (168, "resetSync() pulled from the start keeping every copy, and under rules such a pull sends no tombstone: a record deleted since stayed (the refresh now drops the live copies it did not bring)"),
        (83, "a refresh that dropped every copy it did not bring, tombstones too, left nothing to offer again to a new history: an acknowledged write was lost (the refresh keeps tombstone copies, and a new epoch met during it re-pulls as usual)"),
        (165, "a refresh that dropped the tombstone copies it did not bring: the device's acknowledged delete was not offered again to a new history"),
        (940, "a device whose cursor was still at the start held a conflict's current copy, and a page from the start under rules sent no tombstone: the copy stayed after its delete (holding)"),
        (910, "the same as 940: a copy from a push answer while the cursor was at the start, deleted since"),
        (1149, "the same as 940, with four devices"),
        (1182, "a device held a tombstone older than the server's, its cursor at the start (holding)"),
        (217, "holding decided per page: a following store's first page from cursor 0 said holding and the page fetched ahead did not, so it was fetched again while the first request ran (the pull now decides holding once, at its start)"),
        (29, "the same as 217, with three devices and network faults"),
    ]

    @Test(arguments: fieldKindSeeds.map(\.seed))
    func fieldKindSeedStaysFixed(seed: UInt64) async {
        var configuration = RunConfiguration.forSeed(seed)
        configuration.fieldKinds = true
        let result = await Simulation.run(configuration)
        let bug = Self.fieldKindSeeds.first { $0.seed == seed }!.bug
        #expect(result.passed, "seed \(seed) (\(bug)):\n\(result.violations.map(\.description).joined(separator: "\n"))\nreproduce: \(result.configuration.reproduction)")
    }
    /// Seeds of runs with conflicts left for a person (`outpost-sim --leave-conflicts`).
    static let leftConflictSeeds: [(seed: UInt64, bug: String)] = [
        (11, "harness: a re-offer of a held record's server copy to a new history (a restore) is sent while the conflict is held; it carries the copy, not the held edit"),
        (419, "harness: a held delete can be a tombstone the device offered again to a new history (a re-offer decided in a conflict is held as the copy it carries)"),
    ]

    @Test(arguments: leftConflictSeeds.map(\.seed))
    func leftConflictSeedStaysFixed(seed: UInt64) async {
        var configuration = RunConfiguration.forSeed(seed)
        configuration.leaveConflicts = true
        let result = await Simulation.run(configuration)
        let bug = Self.leftConflictSeeds.first { $0.seed == seed }!.bug
        #expect(result.passed, "seed \(seed) (\(bug)):\n\(result.violations.map(\.description).joined(separator: "\n"))\nreproduce: \(result.configuration.reproduction)")
    }
}
