// outpost-sim: the integrity harness (docs/simulation.md).
//
//   outpost-sim --seeds 100000 --steps 80          every resolver × fault set, rotating by seed
//   outpost-sim --first-seed 5000 --seeds 1000     any range
//   outpost-sim --seed 123 --verbose               replays one run with its step log
//
// Prints runs per second and a closing line "N passed, N failed"; exits 1 on any failure.
import Foundation
import OutpostSimulation

let usage = """
    usage: outpost-sim [--seeds N] [--first-seed N] [--seed N] [--steps N]
                       [--resolver server-wins|client-wins|last-write-wins|custom]
                       [--faults none|network|server|crash|skew|all] [--devices 2|3|4]
                       [--jobs N] [--scratch DIR] [--verbose] [--no-shrink] [--store postgres://…]
                       [--field-kinds] [--list-kind] [--leave-conflicts]
      --seeds N        how many seeds to run (default 1000), from --first-seed (default 0)
      --seed N         run seed N only (--first-seed N --seeds 1)
      --steps N        random steps per run before the network heals (default 80)
      --resolver, --faults, --devices
                       pin one; by default a seed picks resolver and fault set (seed mod 24,
                       all 24 combinations) and 2 to 4 devices (seed / 24 mod 3)
      --jobs N         runs at once (default: the number of cores)
      --scratch DIR    where the runs' SQLite files live (default /dev/shm when present)
      --verbose        print the step log of every run, not only of failures
      --no-shrink      print a failure's own log instead of its shortest failing prefix
      --store URL      run the server on PostgreSQL: each run creates its own database
                       through URL (whose user may create databases) and drops it after
      --field-kinds    add counter and set fields (a rules file declares them) and check
                       their sums (docs/simulation.md, "Field kinds")
      --list-kind      add a checklist, a list keyed by id (a rules file declares it), and
                       check that no item or mark is lost (docs/simulation.md, "Field kinds")
      --leave-conflicts
                       resolvers leave the conflicts of some records for a person, steps and
                       healing settle them; check that a held record is never sent and blocks
                       no other (docs/simulation.md, "Conflicts left for a person")
    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("outpost-sim: \(message)\n\(usage)\n".utf8))
    exit(64)
}

var seeds = 1000
var firstSeed: UInt64 = 0
var steps = 80
var resolver: ResolverKind?
var faults: FaultSet?
var deviceCount: Int?
var jobs = ProcessInfo.processInfo.activeProcessorCount
var scratch = Simulation.defaultScratch
var verbose = false
var shrink = true
var store = SimStore.sqlite
var fieldKinds = false
var listKind = false
var leaveConflicts = false

/// `v`, or the usage and exit 64.
func required<T>(_ v: T?, _ message: String) -> T {
    guard let v else { fail(message) }
    return v
}

var arguments = CommandLine.arguments.dropFirst()
@MainActor func value(_ flag: String) -> String {
    guard let v = arguments.popFirst() else { fail("\(flag) needs a value") }
    return v
}
while let argument = arguments.popFirst() {
    switch argument {
    case "--seeds": seeds = required(Int(value(argument)), "--seeds needs a number")
    case "--first-seed": firstSeed = required(UInt64(value(argument)), "--first-seed needs a number")
    case "--seed":
        firstSeed = required(UInt64(value(argument)), "--seed needs a number")
        seeds = 1
    case "--steps": steps = required(Int(value(argument)), "--steps needs a number")
    case "--resolver": resolver = required(ResolverKind(rawValue: value(argument)), "unknown resolver")
    case "--faults": faults = required(FaultSet(rawValue: value(argument)), "unknown fault set")
    case "--devices":
        guard let n = Int(value(argument)), (2...4).contains(n) else { fail("--devices takes 2, 3 or 4") }
        deviceCount = n
    case "--jobs": jobs = max(1, required(Int(value(argument)), "--jobs needs a number"))
    case "--scratch": scratch = value(argument)
    case "--verbose": verbose = true
    case "--no-shrink": shrink = false
    case "--store":
        let url = value(argument)
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else { fail("--store takes a postgres:// URL") }
        store = .postgres(url)
    case "--field-kinds": fieldKinds = true
    case "--list-kind": listKind = true
    case "--leave-conflicts": leaveConflicts = true
    case "-h", "--help":
        print(usage)
        exit(0)
    default: fail("unknown argument \(argument)")
    }
}
guard seeds >= 0, steps >= 0 else { fail("--seeds and --steps must not be negative") }

let pinnedResolver = resolver, pinnedFaults = faults, pinnedDevices = deviceCount, runSteps = steps
let runStore = store, runFieldKinds = fieldKinds, runListKind = listKind, runLeaveConflicts = leaveConflicts
let make: @Sendable (UInt64) -> RunConfiguration = { seed in
    var c = RunConfiguration.forSeed(seed, steps: runSteps, resolver: pinnedResolver, faults: pinnedFaults, devices: pinnedDevices)
    c.store = runStore
    c.fieldKinds = runFieldKinds
    c.listKind = runListKind
    c.leaveConflicts = runLeaveConflicts
    return c
}

let rotation = pinnedResolver == nil && pinnedFaults == nil ? "resolver × fault set rotating over all 24 combinations"
    : "resolver \(pinnedResolver?.rawValue ?? "rotating"), faults \(pinnedFaults?.rawValue ?? "rotating")"
print("outpost-sim: seeds \(firstSeed)..<\(firstSeed &+ UInt64(seeds)), \(steps) steps, \(rotation), \(jobs) job(s), files in \(scratch)")

let start = ContinuousClock.now
var tally = RunTally()
var failures: [RunResult] = []
var lastProgress = start

func seconds(_ d: Duration) -> Double {
    Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
}

await Runner.run(first: firstSeed, count: seeds, jobs: jobs, scratch: scratch, configuration: make) { result in
    tally.add(result)
    if verbose {
        print(result.log.joined(separator: "\n"))
        print(result.passed ? "  passed" : "  FAILED")
    }
    if !result.passed {
        failures.append(result)
        print("FAIL \(result.configuration)")
        for violation in result.violations.prefix(10) { print("  \(violation)") }
    }
    let now = ContinuousClock.now
    if now - lastProgress > .seconds(10) {
        lastProgress = now
        let rate = Double(tally.runs) / seconds(now - start)
        print(String(format: "  %d/%d runs, %d failed, %.1f runs/s", tally.runs, seeds, tally.failed, rate))
        fflush(nil)  // every output stream: progress shows when the output is a pipe
    }
}
let elapsed = seconds(ContinuousClock.now - start)

// A minimal reproduction of each failure (the first five in full).
for (i, failure) in failures.sorted(by: { $0.configuration.seed < $1.configuration.seed }).enumerated() {
    guard i < 5 else {
        print("FAIL \(failure.configuration) (reproduce: \(failure.configuration.reproduction))")
        continue
    }
    print("")
    print(await Simulation.failureReport(failure, shrink: shrink && !verbose, scratch: scratch).joined(separator: "\n"))
}

print("")
if tally.byConfiguration.count > 1 {
    print("runs by resolver · faults:")
    for (name, entry) in tally.byConfiguration.sorted(by: { $0.key < $1.key }) {
        print("  \(name.padding(toLength: 28, withPad: " ", startingAt: 0)) \(entry.runs) runs, \(entry.failed) failed")
    }
}
if !tally.invariants.isEmpty {
    print("broken invariants: " + tally.invariants.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue) in \($0.value) runs" }.joined(separator: ", "))
}
print(String(format: "%d runs in %.1f s: %.1f runs/s (%d requests, %d faults injected)", tally.runs, elapsed,
             elapsed > 0 ? Double(tally.runs) / elapsed : 0, tally.requests, tally.faults))
print("\(tally.passed) passed, \(tally.failed) failed")
exit(tally.failed == 0 ? 0 : 1)
