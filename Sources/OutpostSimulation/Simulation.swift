import Foundation
import Outpost
import OutpostCore
import OutpostServer

/// The outcome of one run.
public struct RunResult: Sendable {
    /// What was run.
    public let configuration: RunConfiguration
    /// The invariants it broke (empty: it passed).
    public let violations: [Violation]
    /// Outcomes the protocol allows on purpose (counted, never failures).
    /// The step log: every step, every fault, every answer that mattered.
    public let log: [String]
    /// Requests the devices sent.
    public let requests: Int
    /// Faults injected.
    public let faults: Int

    /// True when no invariant broke.
    public var passed: Bool { violations.isEmpty }
}

/// The integrity harness: a seeded simulation of several devices (real `OutpostStore`s on
/// real SQLite files) and the real server (`SyncService` on `SQLiteSyncStore`) in process,
/// joined by a simulated network that loses, duplicates, delays and cuts requests and
/// answers. Random steps (edits, deletes, syncs, crashes, faults), then the network heals
/// and every device syncs until nothing changes, then the invariants are checked
/// (docs/simulation.md).
///
/// ```swift
/// let result = await Simulation.run(.forSeed(42), scratch: "/dev/shm")
/// if !result.passed { print(result.violations, result.log) }
/// ```
public enum Simulation {
    /// The server's limits in a run: small, so that pushes are split, pages are cut and
    /// oversized records are rejected.
    public static let limits: Limits = {
        var limits = Limits()
        limits.maxRequestBytes = 16_384
        limits.maxChangesPerPush = 4
        limits.maxRecordBytes = 2_048
        return limits
    }()

    /// Where runs keep their files by default: tmpfs when there is one (the files are real
    /// SQLite files either way).
    public static var defaultScratch: String {
        FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
    }

    /// Runs one seed. The files live in a directory under `scratch`, removed afterwards.
    public static func run(_ configuration: RunConfiguration, scratch: String = defaultScratch) async -> RunResult {
        let run = Run(configuration, scratch: scratch)
        await run.execute()
        return run.result()
    }

    /// The shortest prefix of a failing run that still fails (the steps of a seed do not
    /// depend on how many there are), for a minimal reproduction.
    public static func shortestFailure(_ configuration: RunConfiguration, scratch: String = defaultScratch) async -> RunResult? {
        for steps in 0...configuration.steps {
            var shorter = configuration
            shorter.steps = steps
            let result = await run(shorter, scratch: scratch)
            if !result.passed { return result }
        }
        return nil
    }

    /// What `outpost-sim` prints of a failed run: its configuration and violations, the
    /// command that replays its shortest failing prefix (when `shrink`), and that run's
    /// step log.
    public static func failureReport(_ failure: RunResult, shrink: Bool, scratch: String = defaultScratch) async -> [String] {
        var shown = failure
        if shrink, let shorter = await shortestFailure(failure.configuration, scratch: scratch) { shown = shorter }
        var lines = ["FAIL \(failure.configuration)"]
        lines += shown.violations.map { "  \($0)" }
        lines.append("minimal reproduction (\(shown.configuration.steps) steps): \(shown.configuration.reproduction)")
        lines.append("step log:")
        lines += shown.log.map { "  " + $0 }
        return lines
    }
}

/// One device of a run, owned by the run's task.
private final class DeviceHandle {
    let index: Int
    let path: String
    let offset = ClockOffset()
    var store: OutpostStore?
    var incarnation: UInt64 = 0

    init(index: Int, path: String) {
        self.index = index
        self.path = path
    }
}

private enum Action {
    case put, delete, sync, poll, resetSync, discardRejected
    /// An edit of a `Ledger` record's count and tags (runs with field kinds only).
    case count
    /// An edit of a `Ledger` record's checklist (runs with the list kind only).
    case tick
    /// A person settles one of the device's conflicts left for them (runs with conflicts left).
    case settle
    case crash, armCrash, skew
    case restart, restartEmpty, backup, restore, down
}

/// One run: its generator, clock, server, devices and world.
private final class Run {
    let configuration: RunConfiguration
    let directory: String
    var rng: SimRandom
    let clock = VirtualClock(start: 1_800_000_000_000)
    let world: RunWorld
    var server: SimServer?
    var devices: [DeviceHandle] = []
    var backups: [(name: String, epoch: Epoch)] = []
    var downSteps = 0
    /// The counter, set and checklist edits (runs with field kinds or the list kind).
    var ledger: Ledger
    /// The records whose conflicts every device's resolver leaves for a person (runs with
    /// conflicts left): a seeded coin per record, at least one.
    var leftKeys: Set<Key> = []
    /// Settles made, for the tags of the values a person writes.
    var settles = 0

    static let keys: [Key] = [Key("todos", "k0"), Key("todos", "k1"), Key("todos", "k2"), Key("todos", "k3"), Key("notes", "n0"), Key("notes", "n1")]

    init(_ configuration: RunConfiguration, scratch: String) {
        self.configuration = configuration
        let directory = scratch + "/outpost-sim-\(getpid())-\(configuration.seed)-\(UUID().uuidString.prefix(8))"
        self.directory = directory
        rng = SimRandom(seed: configuration.seed ^ 0x5EED_0F_0D_7A15)
        ledger = Ledger(counters: configuration.fieldKinds, checklist: configuration.listKind)
        let networkSeed = rng.derive()
        let runtimes = (0..<configuration.devices).map { DeviceRuntime(path: "\(directory)/d\($0).sqlite") }
        world = RunWorld(
            state: WorldState(rng: SimRandom(seed: networkSeed), oracle: Oracle(devices: configuration.devices, resolver: configuration.resolver),
                              networkFaults: configuration.faults.network, devices: runtimes),
            clock: clock, limits: Simulation.limits, token: SimServer.token)
        if configuration.leaveConflicts {
            leftKeys = Set(Run.keys.filter { _ in rng.chance(0.5) })
            if leftKeys.isEmpty { leftKeys = [Run.keys[rng.below(Run.keys.count)]] }
            let holdsPush = configuration.broken?.holdsPush
            world.state.withLock { $0.holdsPush = holdsPush }
        }
    }

    func result() -> RunResult {
        world.state.withLock { s in
            RunResult(configuration: configuration, violations: s.oracle.violations, log: s.log,
                      requests: s.requests, faults: s.faultsInjected)
        }
    }

    func log(_ line: String) { world.log(line) }

    func fail(_ invariant: Invariant, _ message: String) {
        world.state.withLock { $0.oracle.fail(invariant, message) }
    }

    // MARK: The run

    func execute() async {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let server = try SimServer(directory: directory + "/server", store: configuration.store, limits: Simulation.limits, clock: clock, seed: rng.derive(),
                                       wrapStore: configuration.broken?.store, rules: ledger.isOn ? ledger.rules : nil)
            self.server = server
            try server.open()
            let epoch = server.epoch, underRules = ledger.isOn
            world.state.withLock { s in
                s.service = server.service
                s.oracle.serverEpoch(epoch)
                s.oracle.underRules = underRules
            }
            log("run \(configuration)")
            if configuration.leaveConflicts { log("   0 conflicts of \(leftKeys.sorted().map(\.description).joined(separator: ", ")) are left for a person") }
            log("   0 server starts in epoch \(epoch)")
            for i in 0..<configuration.devices {
                let device = DeviceHandle(index: i, path: "\(directory)/d\(i).sqlite")
                devices.append(device)
                try open(device)
            }
            if ledger.isOn, let first = devices.first?.store {
                for key in Ledger.keys { try await first.put(ledger.initialData, in: key.collection, id: key.id) }
                let what = [ledger.counters ? "at count \(Ledger.initial)" : nil, ledger.checklist ? "with a checklist of \(Ledger.firstItems.count) items" : nil]
                log("   0 d0 creates \(Ledger.keys.map(\.description).joined(separator: ", ")) " + what.compactMap { $0 }.joined(separator: ", "))
            }
            for step in 1...max(1, configuration.steps) where configuration.steps > 0 {
                world.state.withLock { $0.oracle.step = step }
                try await self.step(step)
            }
            world.state.withLock { $0.oracle.step = configuration.steps + 1 }
            try await heal()
            try await finalCheck()
        } catch {
            fail(.harness, "the run stopped: \(error)")
        }
        world.state.withLock { $0.finished = true }
        for device in devices { await device.store?.close() }
        await server?.destroy()
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: Devices

    /// The device's resolver: in a run with conflicts left, those of the left records go to
    /// a person (`.leaveForPerson`, the oracle told); every other one to `ledgerResolver`.
    func resolver(for device: Int) -> ConflictResolver {
        let inner = ledgerResolver(for: device)
        guard configuration.leaveConflicts else { return inner }
        // Conflicts of the left records go to a person (before any merge the oracle follows).
        let world = self.world, clock = self.clock, left = leftKeys
        return .custom { c in
            let key = Key(c.collection, c.id)
            guard left.contains(key) else { return inner.resolve(c, now: clock.now) }
            world.state.withLock { s in
                s.oracle.leftForPerson(device: device, key: key)
                let local = c.local.deleted ? "deleted" : tag(of: c.local.data) ?? "?"
                let server = c.server.deleted ? "deleted" : tag(of: c.server.data) ?? "?"
                s.log.append("      d\(device) resolver: \(key) \(local) + \(c.server.version) \(server) → left for a person")
            }
            return .leaveForPerson
        }
    }

    /// The run's resolver; in a run with field kinds or the list kind, `stock`'s conflicts go to `.mergeFields`
    /// with the run's resolver as fallback, except the custom one (whose merges the main
    /// oracle follows): last-write-wins there, and a broken part's resolver in its place.
    func ledgerResolver(for device: Int) -> ConflictResolver {
        guard ledger.isOn else { return runResolver(for: device) }
        let base: ConflictResolver, stock: ConflictResolver
        if configuration.resolver == .custom {
            let world = self.world
            base = .custom { world.merge(device: device, $0) }
            stock = configuration.broken?.resolver?(device) ?? .mergeFields(fallback: .lastWriteWins(maxClockDrift: .seconds(300)))
        } else {
            base = runResolver(for: device)
            stock = .mergeFields(fallback: base)
        }
        let clock = self.clock
        return .custom { c in c.collection == Ledger.collection ? stock.resolve(c, now: clock.now) : base.resolve(c, now: clock.now) }
    }

    func runResolver(for device: Int) -> ConflictResolver {
        switch configuration.resolver {
        case .serverWins: return .serverWins
        case .clientWins: return .clientWins
        case .lastWriteWins: return .lastWriteWins(maxClockDrift: .seconds(300))
        case .custom:
            let world = self.world
            if let broken = configuration.broken?.resolver { return broken(device) }
            return .custom { world.merge(device: device, $0) }
        }
    }

    func open(_ device: DeviceHandle) throws {
        var c = OutpostStore.Configuration(space: SimServer.space)
        c.clientId = "d\(device.index)"
        c.resolver = resolver(for: device.index)
        let clock = self.clock, offset = device.offset
        c.clock = { Date(timeIntervalSince1970: Double(clock.now + offset.ms) / 1000) }
        c.randomSeed = configuration.seed &* 1_000_003 &+ UInt64(device.index) &* 7919 &+ device.incarnation &* 104_729 &+ 1
        c.pageLimit = 3
        c.validators["notes"] = { object in
            if isBad(object) { throw ValidationFailure() }
        }
        device.store = try OutpostStore(path: device.path, configuration: c, transport: SimulatedTransport(world: world, device: device.index))
        device.incarnation += 1
    }

    /// The process dies and the store is opened again from its files: the files as they
    /// were at the instant of the crash (a snapshot taken while a push was being sent), or
    /// as they are now (a crash between two steps, or between two pages of a pull).
    func crashAndReopen(_ device: DeviceHandle) async throws {
        let snapshot = world.state.withLock { s -> FileSnapshot? in
            let snapshot = s.devices[device.index].snapshot
            s.devices[device.index].snapshot = nil
            s.devices[device.index].dead = false
            return snapshot
        } ?? FileSnapshot(path: device.path)
        await device.store?.close()
        device.store = nil
        try snapshot.restore(path: device.path)
        try open(device)
    }

    /// Checks a device after it acted.
    func check(_ device: DeviceHandle) async throws {
        guard let store = device.store else { return }
        let records = try await store.records(includeDeleted: true).filter { $0.collection != Ledger.collection }
        let pending = try await store.pendingChanges().filter { $0.collection != Ledger.collection }
        let rejected = try await store.rejectedChanges().filter { $0.collection != Ledger.collection }
        let epoch = try await store.status().epoch
        let held: Set<Key>? = configuration.leaveConflicts ? Set(try await store.unsettledConflicts().map { Key($0.collection, $0.id) }) : nil
        world.state.withLock { s in
            s.oracle.checkDevice(device.index, records: records, pending: pending, rejected: rejected, epoch: epoch)
            if let held { s.oracle.held(device: device.index, keys: held) }
        }
    }

    /// A person settles `device`'s held conflict `c` with a seeded choice: keep the local
    /// edit, keep the server's copy, write a merge naming both (tag `t`), or delete.
    func settle(_ device: DeviceHandle, _ c: UnsettledConflict, prefix: String) async throws {
        guard let store = device.store else { return }
        settles += 1
        let key = Key(c.collection, c.id), d = "d\(device.index)"
        let local = c.local.map { tag(of: $0) ?? "?" } ?? "deleted"
        let server = c.serverVersion == nil ? "nothing" : c.server.map { tag(of: $0) ?? "?" } ?? "deleted"
        let t = "p\(device.index).\(settles)"
        let resolution: Resolution = rng.weighted([
            (.keepLocal, 3), (.keepServer, 3), (.write(["t": .string(t), "l": .string(local), "s": .string(server)]), 3), (.delete, 1),
        ])
        let note: String
        switch resolution {
        case .keepLocal: note = "keeps its \(local)"
        case .keepServer: note = "keeps the server's \(server)"
        case .write: note = "writes \(t) (\(local) + \(server))"
        case .delete: note = "deletes it"
        case .leaveForPerson: note = "leaves it"
        }
        let write = world.state.withLock { s in
            s.oracle.settle(device: device.index, key: key, local: c.local, serverVersion: c.serverVersion, resolution: resolution)
        }
        let given = configuration.broken?.settle?(resolution) ?? resolution
        guard try await store.settleConflict(in: c.collection, id: c.id, given) else {
            fail(.harness, "\(d) listed \(key) as an unsettled conflict, and settleConflict found none there")
            return
        }
        if case .delete = resolution, let write,
           let entry = try await store.pendingChanges().last(where: { $0.collection == key.collection && $0.id == key.id && $0.op == .delete }) {
            world.state.withLock { $0.oracle.nameChange(entry.changeId, write: write) }
        }
        log(prefix + "\(d) settles its conflict of \(key) (\(local) beside \(c.serverVersion?.text ?? "no copy") \(server)): \(note)")
    }

    // MARK: Steps

    func chooseAction() -> Action {
        let f = configuration.faults
        let hasBackup = !backups.isEmpty
        return rng.weighted([
            (.put, 30), (.delete, 8), (.sync, 30), (.poll, 2), (.resetSync, 1), (.discardRejected, 1),
            (.crash, f.crash ? 3 : 0), (.armCrash, f.crash ? 4 : 0), (.skew, f.skew ? 3 : 0),
            (.restart, f.server ? 2 : 0), (.restartEmpty, f.server ? 0.8 : 0), (.backup, f.server ? 2 : 0),
            (.restore, f.server && hasBackup ? 1.2 : 0), (.down, f.server && downSteps == 0 ? 1.5 : 0),
        ] + (configuration.fieldKinds ? [(.count, 20)] : []) + (configuration.listKind ? [(.tick, 20)] : [])
          + (configuration.leaveConflicts ? [(.settle, 6)] : []))
    }

    func step(_ step: Int) async throws {
        await advance(step)
        let action = chooseAction()
        let device = devices[rng.below(devices.count)]
        let d = "d\(device.index)"
        let prefix = String(format: "%4d", step) + " "
        guard let store = device.store else { return }
        switch action {
        case .put:
            try await put(store, device, step: step, prefix: prefix)
        case .delete:
            try await delete(store, device, prefix: prefix)
        case .sync:
            log(prefix + "\(d) sync")
            await sync(device)
            try await afterNetwork(device)
        case .poll:
            log(prefix + "\(d) waitForChanges")
            do { log("      → \(try await store.waitForChanges(timeout: .zero))") } catch { log("      → failed: \(error)") }
            try await afterNetwork(device)
        case .count, .tick:
            try await editLedger(store, device, tick: action == .tick, step: step, prefix: prefix)
        case .settle:
            let held = try await store.unsettledConflicts().filter { $0.collection != Ledger.collection }
            guard !held.isEmpty else {
                log(prefix + "\(d) settles a conflict: none left")
                return
            }
            try await settle(device, held[rng.below(held.count)], prefix: prefix)
            try await check(device)
        case .resetSync:
            try await store.resetSync()
            log(prefix + "\(d) resetSync")
        case .discardRejected:
            let rejected = try await store.rejectedChanges()
            guard !rejected.isEmpty else {
                log(prefix + "\(d) discard a rejected change: none")
                return
            }
            let change = rejected[rng.below(rejected.count)]
            try await store.discardRejectedChange(change.changeId)
            world.state.withLock { $0.oracle.discarded(device: device.index, changeId: change.changeId) }
            log(prefix + "\(d) discards rejected \(change.collection)/\(change.id) \(change.changeId)")
            try await check(device)
        case .crash:
            log(prefix + "\(d) crashes and reopens its store")
            try await crashAndReopen(device)
            try await check(device)
        case .armCrash:
            world.state.withLock { $0.devices[device.index].crashArmed = true }
            log(prefix + "\(d) will crash at its next request")
        case .skew:
            let year: Int64 = 365 * 86_400_000
            let offset = rng.pick([year, -year, 600_000, -600_000, 0])
            device.offset.ms = offset
            log(prefix + "\(d) clock offset \(offset / 1000) s")
        case .restart:
            try await restartServer(prefix, "restarts keeping its data") { try await $0.restart() }
        case .restartEmpty:
            ledger.historyLost = true
            try await restartServer(prefix, "restarts with its data directory lost") { try await $0.restartEmpty() }
        case .backup:
            guard let server else { return }
            let name = "backup-\(backups.count)"
            let epoch = try server.backup(named: name)
            backups.append((name, epoch))
            log(prefix + "server backed up (backup \(backups.count - 1), epoch \(epoch))")
        case .restore:
            try await restoreServer(prefix)
        case .down:
            downSteps = 1 + rng.below(4)
            world.state.withLock { $0.down = true }
            log(prefix + "server down for \(downSteps) step(s)")
        }
    }

    /// Moves the clock on (mostly by seconds, sometimes minutes), brings a server that was
    /// down up again when its time is over, and sometimes delivers a request the network held.
    func advance(_ step: Int) async {
        let delta = rng.weighted([(Int64(1), 0.7), (2, 0.25), (3, 0.05)])
        switch delta {
        case 1: clock.advance(rng.int(in: 100...5_000))
        case 2: clock.advance(rng.int(in: 5_000...120_000))
        default: clock.advance(rng.int(in: 120_000...1_200_000))
        }
        if downSteps > 0 {
            downSteps -= 1
            if downSteps == 0 {
                world.state.withLock { $0.down = false }
                log(String(format: "%4d", step) + " server is up again")
            }
        }
        if configuration.faults.network {
            let held = world.state.withLock { $0.held.count }
            if held > 0 && rng.chance(0.2) { await world.deliverHeld(at: rng.below(held)) }
        }
    }

    /// A device puts a record: sometimes one over the server's record or request limit, or
    /// of a shape the validator refuses.
    func put(_ store: OutpostStore, _ device: DeviceHandle, step: Int, prefix: String) async throws {
        let d = "d\(device.index)"
        let key = Run.keys[rng.below(Run.keys.count)]
        let t = "\(d).\(step)"
        var data: JSONObject = ["t": .string(t), "n": .number(JSONNumber(step))]
        var note = ""
        let variant = rng.unit()
        if variant < 0.03 {
            data["pad"] = .string(String(repeating: "x", count: 3_000))
            note = " (over the server's record limit)"
        } else if variant < 0.04 {
            data["pad"] = .string(String(repeating: "y", count: 20_000))
            note = " (over the server's request limit)"
        } else if key.collection == "notes" && variant < 0.12 {
            data["bad"] = .bool(true)
            note = " (a shape the validator refuses)"
        }
        let view = try await store.record(in: key.collection, id: key.id)
        world.state.withLock { s in _ = s.oracle.localEdit(device: device.index, key: key, data: data, view: view) }
        try await store.put(data, in: key.collection, id: key.id)
        log(prefix + "\(d) put \(key) \(t)\(note)")
    }

    /// A device deletes a record it has (a create never sent is cancelled instead).
    func delete(_ store: OutpostStore, _ device: DeviceHandle, prefix: String) async throws {
        let d = "d\(device.index)"
        let key = Run.keys[rng.below(Run.keys.count)]
        let view = try await store.record(in: key.collection, id: key.id)
        guard let view, !view.deleted else {
            log(prefix + "\(d) delete \(key): nothing to delete")
            return
        }
        let write = world.state.withLock { s in s.oracle.localEdit(device: device.index, key: key, data: nil, view: view) }
        try await store.delete(from: key.collection, id: key.id)
        if try await store.record(in: key.collection, id: key.id) == nil {
            world.state.withLock { $0.oracle.latest[device.index][key]?.fate = .cancelled }
            log(prefix + "\(d) delete \(key) (cancels a create never sent)")
        } else {
            if let entry = try await store.pendingChanges().last(where: { $0.collection == key.collection && $0.id == key.id && $0.op == .delete }) {
                world.state.withLock { $0.oracle.nameChange(entry.changeId, write: write) }
            }
            log(prefix + "\(d) delete \(key)")
        }
    }

    /// A device counts on a ledger record's counters, or (`tick`) edits its checklist.
    func editLedger(_ store: OutpostStore, _ device: DeviceHandle, tick: Bool, step: Int, prefix: String) async throws {
        let d = "d\(device.index)"
        let key = Ledger.keys[rng.below(Ledger.keys.count)]
        guard let view = try await store.record(in: key.collection, id: key.id), !view.deleted, let data = view.data,
              let (edited, note) = tick ? ledger.tick(key, data, device: device.index, step: step, rng: &rng)
                                        : ledger.edit(key, data, tag: "\(d).\(step)", rng: &rng) else {
            log(prefix + "\(d) " + (tick ? "checklist of \(key): no copy to edit" : "count \(key): no copy to count on"))
            return
        }
        try await store.put(edited, in: key.collection, id: key.id)
        log(prefix + "\(d) \(key) \(note)")
    }

    /// The server is restored from one of its backups (a new epoch); the oracle learns what
    /// it holds.
    func restoreServer(_ prefix: String) async throws {
        guard let server else { return }
        let index = rng.below(backups.count)
        let backup = backups[index]
        world.state.withLock { s in
            s.service = nil
            s.held.removeAll()
        }
        ledger.historyLost = true
        let epoch = try await server.restore(named: backup.name)
        let rows = try server.rows().filter { $0.key.collection != Ledger.collection }
        world.state.withLock { s in
            s.service = server.service
            s.oracle.serverRestored(epoch: epoch, backupEpoch: backup.epoch, rows: rows)
        }
        log(prefix + "server restored from backup \(index) (epoch \(backup.epoch)), rotate-epoch: \(epoch)")
    }

    func restartServer(_ prefix: String, _ what: String, _ body: (SimServer) async throws -> Void) async throws {
        guard let server else { return }
        let before = server.epoch
        world.state.withLock { s in
            s.service = nil
            s.held.removeAll()  // connections die with the process
        }
        try await body(server)
        let epoch = server.epoch
        world.state.withLock { s in
            s.service = server.service
            if epoch != before { s.oracle.serverEpoch(epoch) }
        }
        log(prefix + "server \(what)" + (epoch != before ? ", epoch \(epoch)" : ""))
    }

    func sync(_ device: DeviceHandle) async {
        guard let store = device.store else { return }
        do {
            let r = try await store.sync()
            var parts: [String] = []
            if r.pushed > 0 { parts.append("pushed \(r.pushed)") }
            if r.pulled > 0 { parts.append("pulled \(r.pulled)") }
            if r.conflicts > 0 { parts.append("conflicts \(r.conflicts)") }
            if r.rejected > 0 { parts.append("rejected \(r.rejected)") }
            if r.quarantined > 0 { parts.append("quarantined \(r.quarantined)") }
            if r.reoffered > 0 { parts.append("re-offered \(r.reoffered)") }
            if r.epochChanged { parts.append("new epoch \(r.epoch?.rawValue ?? "?")") }
            if r.pending > 0 { parts.append("\(r.pending) pending") }
            log("      → ok" + (parts.isEmpty ? "" : ": " + parts.joined(separator: ", ")))
        } catch {
            log("      → failed: \(error)")
        }
    }

    /// After a device used the network: a crash in the middle reopens its store; then the checks.
    func afterNetwork(_ device: DeviceHandle) async throws {
        let crashed = world.state.withLock { $0.devices[device.index].dead }
        if crashed {
            log("      d\(device.index) reopens its store from disk")
            try await crashAndReopen(device)
        }
        try await check(device)
    }

    // MARK: Healing

    func heal() async throws {
        log("---- the network heals: no more faults; every device syncs until nothing changes")
        let held = world.state.withLock { s -> Int in
            s.healed = true
            s.down = false
            for i in s.devices.indices { s.devices[i].crashArmed = false }
            return s.held.count
        }
        downSteps = 0
        for _ in 0..<held { await world.deliverHeld(at: 0) }
        for device in devices where world.state.withLock({ $0.devices[device.index].dead }) {
            try await crashAndReopen(device)
        }
        if try await syncUntilQuiet("heal") { return }
        fail(.convergence, "the devices still change after 12 rounds of syncing on a healed network")
    }

    /// Every device syncs, round after round, until a round changes nothing (at most 12
    /// rounds): true when it did. A held conflict does not count as a change. In a run with
    /// conflicts left, then the check that they blocked nothing: every change still pending
    /// is held; and the person settles every one left (settled values may meet the resolver
    /// and be left again), and the devices sync until quiet again.
    func syncUntilQuiet(_ name: String) async throws -> Bool {
        guard try await syncRounds(name) else { return false }
        guard configuration.leaveConflicts else { return true }
        try await checkNothingBlocked()
        for pass in 1...8 {
            var settled = 0
            for device in devices {
                guard let store = device.store else { continue }
                for c in try await store.unsettledConflicts() where c.collection != Ledger.collection {
                    try await settle(device, c, prefix: "  settle \(pass) ")
                    settled += 1
                }
                try await check(device)
            }
            if settled == 0 { return true }
            guard try await syncRounds("heal after settling \(pass)") else { return false }
            try await checkNothingBlocked()
        }
        fail(.convergence, "conflicts are still left for a person after 8 passes of settling them all and syncing")
        return true
    }

    func syncRounds(_ name: String) async throws -> Bool {
        for round in 1...12 {
            clock.advance(360_000)  // every retry time has come (backoff is at most 5 minutes)
            var changed = false
            for device in devices {
                guard let store = device.store else { continue }
                do {
                    let r = try await store.sync()
                    let held = configuration.leaveConflicts ? try await store.status().conflicts : 0
                    if r.pushed + r.pulled + r.conflicts + r.rejected + r.reoffered + r.quarantined + (r.pending - held) > 0 || r.epochChanged {
                        changed = true
                        log("  \(name) \(round) d\(device.index): pushed \(r.pushed), pulled \(r.pulled), conflicts \(r.conflicts), rejected \(r.rejected), re-offered \(r.reoffered), pending \(r.pending)\(held > 0 ? " (\(held) held)" : "")\(r.epochChanged ? ", new epoch" : "")")
                    }
                } catch {
                    changed = true
                    log("  \(name) \(round) d\(device.index): failed: \(error)")
                }
                try await check(device)
            }
            if !changed { return true }
        }
        if configuration.leaveConflicts { try await checkNothingBlocked() }
        return false
    }

    /// No queue blocked: after syncing on a healed network, a device's only pending changes
    /// are those it holds in conflict; every other record's change reached the server.
    func checkNothingBlocked() async throws {
        for device in devices {
            guard let store = device.store else { continue }
            let pending = try await store.pendingChanges()
            let others = pending.filter { $0.state != .inConflict }
            guard !others.isEmpty else { continue }
            let held = pending.count - others.count
            fail(.queueBlocked, "d\(device.index) holds \(held) conflict(s) left for a person and still has other changes pending after syncing on a healed network: \(others.map { "\($0.collection)/\($0.id) \($0.state.rawValue)" }.joined(separator: ", "))")
        }
    }

    func finalCheck() async throws {
        guard let server else { return }
        let all = try server.rows()
        let rows = all.filter { $0.key.collection != Ledger.collection }
        var finals: [DeviceFinal] = []
        var held: [[Key: JSONObject]] = [], rejected: [[QueuedChange]] = []
        for device in devices {
            guard let store = device.store else { continue }
            let records = try await store.records(includeDeleted: true)
            let refused = try await store.rejectedChanges()
            finals.append(DeviceFinal(
                records: records.filter { $0.collection != Ledger.collection },
                pending: try await store.pendingChanges().filter { $0.collection != Ledger.collection },
                rejected: refused.filter { $0.collection != Ledger.collection }, quarantined: try await store.quarantinedRecords(),
                epoch: try await store.status().epoch))
            var copies: [Key: JSONObject] = [:]
            for r in records where r.collection == Ledger.collection && !r.deleted { copies[Key(r.collection, r.id)] = r.data }
            held.append(copies)
            rejected.append(refused)
        }
        let epoch = server.epoch
        world.state.withLock { $0.oracle.finalCheck(serverEpoch: epoch, server: rows, devices: finals) }
        if ledger.isOn {
            var onServer: [Key: JSONObject] = [:]
            for row in all where row.key.collection == Ledger.collection && !row.deleted { onServer[row.key] = row.data }
            for problem in ledger.check(server: onServer, devices: held, rejected: rejected) { fail(.fieldKinds, problem) }
        }
        log("---- end: server epoch \(epoch), \(rows.count) records")
    }
}

/// The simulation's validator refused a record (another app version wrote it).
struct ValidationFailure: Error, CustomStringConvertible {
    var description: String { "the record has a shape this app version does not read" }
}
