// `outpost-conformance client`: the other direction of the suite. Holds a client driver to
// the protocol's promises against a real outpost-server child under seeded faults
// (docs/conformance.md).
import Foundation
import OutpostConformance

let clientUsage = """
    usage: outpost-conformance client [--driver CMD] [--seeds N] [--first-seed S] [--seed S]
                                      [--devices N] [--steps N] [--store sqlite|postgres --postgres-url URL]
                                      [--server PATH] [--scratch DIR]

    Runs seeded schedules of offline edits, syncs through fault proxies, driver crashes and
    server crashes against a real outpost-server child, heals, and checks that every device
    holds what the server holds and that no acknowledged or local edit was lost
    (docs/conformance.md). Prints a FAIL block (the seed, the broken promises, the replay
    command, the schedule) for each failing seed, then "N passed, M failed".
    Exits 0 only when every seed passed.

      --driver CMD        the client driver, a shell command line speaking the driver protocol
                          (default: outpost-driver beside this executable, the SDK's driver)
      --seeds N           how many seeds (default 20), from --first-seed (default 0)
      --seed S            run the one seed S (a replay)
      --devices N         driver processes per run (default 3)
      --steps N           schedule steps per run (default 40)
      --store KIND        the server's store: sqlite (default) or postgres (needs --postgres-url)
      --postgres-url URL  postgres://user:password@host:port/db (each run uses a space of its own)
      --server PATH       the outpost-server executable (default: beside this executable)
      --cut-heads         let a cut answer end inside its head (FoundationNetworking on Linux
                          traps on that: docs/conformance.md, "Found")
      --verbose           print every run's schedule, passing or not
      --scratch DIR       where runs keep their files (default: the temporary directory); a
                          failing run's directory is kept
    """

func runClientHarness(_ arguments: [String]) -> Never {
    let beside = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    var driver = beside.appendingPathComponent("outpost-driver").path
    var server = beside.appendingPathComponent("outpost-server").path
    var first: UInt64 = 0, count: UInt64 = 20
    var devices = 3, steps = 40
    var storeKind = "sqlite"
    var postgresURL: String?
    var scratch = NSTemporaryDirectory()
    var verbose = false
    var cutHeads = false
    var index = 0
    func value(_ flag: String) -> String {
        index += 1
        guard index < arguments.count else { fail("\(flag) needs a value") }
        return arguments[index]
    }
    func integer(_ flag: String) -> UInt64 {
        guard let v = UInt64(value(flag)) else { fail("\(flag) takes a non-negative integer") }
        return v
    }
    while index < arguments.count {
        let argument = arguments[index]
        switch argument {
        case "--driver": driver = value(argument)
        case "--server": server = value(argument)
        case "--seeds": count = integer(argument)
        case "--first-seed": first = integer(argument)
        case "--seed":
            first = integer(argument)
            count = 1
        case "--devices": devices = Int(max(1, integer(argument)))
        case "--steps": steps = Int(integer(argument))
        case "--store": storeKind = value(argument)
        case "--postgres-url": postgresURL = value(argument)
        case "--scratch": scratch = value(argument)
        case "--verbose": verbose = true
        case "--cut-heads": cutHeads = true
        case "--help", "-h":
            print(clientUsage)
            exit(0)
        default: fail("unknown option \(argument)\n\n\(clientUsage)")
        }
        index += 1
    }
    let store: ClientHarness.Store
    switch storeKind {
    case "sqlite": store = .sqlite
    case "postgres":
        guard let postgresURL else { fail("--store postgres needs --postgres-url URL") }
        store = .postgres(postgresURL)
    default: fail("--store must be sqlite or postgres")
    }
    let started = ContinuousClock.now
    var passed = 0, failed = 0
    for seed in first..<(first + count) {
        var configuration = ClientHarness.Configuration(seed: seed, driver: driver, server: server)
        configuration.store = store
        configuration.devices = devices
        configuration.steps = steps
        configuration.scratch = scratch
        configuration.cutHeads = cutHeads
        let result = ClientHarness.run(configuration)
        if result.passed {
            passed += 1
            if verbose { emit((["PASS seed \(seed)"] + result.log.map { "    \($0)" }).joined(separator: "\n")) }
        } else {
            failed += 1
            emit(result.report)
        }
        if count > 1 && (seed - first + 1) % 10 == 0 {
            FileHandle.standardError.write(Data("\(seed - first + 1) of \(count) runs, \(failed) failed, \(started.duration(to: .now))\n".utf8))
        }
    }
    emit("\(passed) passed, \(failed) failed")
    exit(failed == 0 ? 0 : 1)
}
