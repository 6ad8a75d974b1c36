import Foundation
import Glibc
import OutpostCore
import OutpostCrypto

/// `outpost-conformance client`: holds a client driver (docs/conformance.md) to the
/// protocol's promises against a real `outpost-server` child under real faults. A run is
/// one seed: a server, a fault proxy per device, N driver processes, a seeded schedule of
/// offline edits, syncs through the proxies, driver crashes (between steps and mid-sync)
/// and server crashes; then healing, and the oracle's checks.
public enum ClientHarness {
    /// Where the server keeps its records.
    public enum Store: Sendable, Equatable {
        case sqlite
        /// A PostgreSQL database URL (`postgres://…`), shared by runs: each run uses a space
        /// of its own.
        case postgres(String)
    }

    /// One run's settings.
    public struct Configuration: Sendable {
        public var seed: UInt64
        /// The driver, a shell command line (`exec` is put before it).
        public var driver: String
        /// The `outpost-server` executable.
        public var server: String
        public var store: Store = .sqlite
        public var devices = 3
        public var steps = 40
        /// The directory the run's directory is made in.
        public var scratch: String = NSTemporaryDirectory()
        /// Whether a cut answer may end inside its head (off by default: FoundationNetworking
        /// on Linux traps on that, docs/conformance.md, "Found").
        public var cutHeads = false

        public init(seed: UInt64, driver: String, server: String) {
            self.seed = seed
            self.driver = driver
            self.server = server
        }

        /// The command line that replays this run.
        public var reproduction: String {
            var line = "outpost-conformance client --seed \(seed) --devices \(devices) --steps \(steps) --driver '\(driver)'"
            if case .postgres(let url) = store { line += " --store postgres --postgres-url '\(url)'" }
            if cutHeads { line += " --cut-heads" }
            return line
        }
    }

    /// A promise a run found broken.
    public struct Violation: Sendable, CustomStringConvertible {
        /// `convergence`, `acknowledged-write`, `local-edit`, `rejected-visible`,
        /// `no-fabrication`, `no-crash` (a driver ended by itself mid-request), or `harness` (the run could not go on: a driver that broke the
        /// driver protocol, a process that did not start).
        public let promise: String
        public let message: String
        public var description: String { "\(promise): \(message)" }
    }

    /// What one run found.
    public struct Result: Sendable {
        public let configuration: Configuration
        public let violations: [Violation]
        /// Every step as run, with the faults the proxies dealt and each driver's answer.
        public let log: [String]
        public var passed: Bool { violations.isEmpty }

        /// The seed, the broken promises, the replay command and the schedule.
        public var report: String {
            (["FAIL seed \(configuration.seed)"] + violations.map { "  \($0)" }
                + ["  replay: \(configuration.reproduction)", "  schedule:"] + log.map { "    \($0)" }).joined(separator: "\n")
        }
    }

    /// Runs one seed. Blocking: call it off the cooperative pool.
    public static func run(_ configuration: Configuration) -> Result {
        // A driver that died mid-request must not take the harness with it.
        signal(SIGPIPE, SIG_IGN)
        let run = ClientRun(configuration)
        do {
            try run.execute()
        } catch let exited as DriverExited {
            run.violations.append(Violation(promise: "no-crash", message: exited.description))
        } catch {
            run.violations.append(Violation(promise: "harness", message: "\(error)"))
        }
        run.tearDown()
        return Result(configuration: configuration, violations: run.violations, log: run.log)
    }
}

/// One write a device made, as the harness follows it.
struct Edit {
    let step: Int
    let device: Int
    let id: String
    /// The put's data; nil for a delete.
    let data: JSONObject?
    /// The step of the clean sync that acknowledged it (the server applied it as written).
    var acknowledgedAt: Int?
    /// The number of that sync in the run (syncs of one step are ordered too).
    var acknowledgedBySync: Int?
    /// A delete of a copy the server never confirmed to the device (its version was null):
    /// it may cancel a put that was never sent, and then nothing reaches the server, so it
    /// is never taken as acknowledged.
    var unconfirmed = false
}

/// The state of one run.
final class ClientRun {
    let configuration: ClientHarness.Configuration
    var violations: [ClientHarness.Violation] = []
    var log: [String] = []

    let collection = "notes"
    let directory: String
    let space: String
    let secret: String
    var random: SplitMix64
    var server: ServerChild!
    var proxies: [FaultProxy] = []
    var drivers: [DriverProcess?] = []
    var serverDownUntil: Int?
    /// Syncs so far, every device's (the order acknowledgements are compared in).
    var syncs = 0

    var edits: [Edit] = []
    /// Per device: the edits saved since its last sync, not yet acknowledged.
    var unsettled: [[Int]] = []
    /// The oversized puts each device saved (`ok` answers): the server must refuse them.
    var oversized: [(device: Int, id: String)] = []
    /// Per device: the oversized puts saved since its last sync.
    var unsettledOversized: [Int] = []

    init(_ configuration: ClientHarness.Configuration) {
        self.configuration = configuration
        random = SplitMix64(seed: configuration.seed)
        let suffix = hex(randomBytes(4))
        directory = (configuration.scratch as NSString).appendingPathComponent("outpost-client-\(configuration.seed)-\(suffix)")
        space = "conf-\(configuration.seed)-\(suffix)"
        secret = hex(randomBytes(32))
    }

    func token(_ device: Int) -> String {
        TokenSigner(secret: Array(secret.utf8)).token(.init(spaces: [space], scope: "write", lifetime: 7200, sub: "device-\(device)"))
    }

    func draw(_ n: Int) -> Int { Int(random.next() % UInt64(n)) }

    // MARK: The run

    func execute() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var arguments = ["--data", directory + "/server", "--max-record-bytes", "2048", "--max-changes-per-push", "4", "--max-page-limit", "3"]
        if case .postgres(let url) = configuration.store {
            // Every instance of a database must keep media in the same directory (the
            // server checks): one per database URL, beside the runs, kept between them.
            let hash = url.utf8.reduce(UInt64(0xcbf2_9ce4_8422_2325)) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
            let media = (configuration.scratch as NSString).appendingPathComponent("outpost-client-media-\(String(hash, radix: 16))")
            arguments += ["--store", url, "--media-dir", media]
        }
        server = ServerChild(executable: configuration.server, arguments: arguments, secret: secret, log: directory + "/server.log")
        try server.start()
        for d in 0..<configuration.devices {
            let proxy = try FaultProxy(name: "d\(d)", seed: configuration.seed &* 1_000_003 &+ UInt64(d), cutsHeads: configuration.cutHeads)
            proxy.setUpstream(server.port)
            proxies.append(proxy)
            drivers.append(nil)
            unsettled.append([])
            unsettledOversized.append(0)
            try open(d)
        }
        for step in 0..<configuration.steps {
            if let until = serverDownUntil, until <= step { try restartServer(step) }
            try perform(step)
        }
        try heal()
        try check()
    }

    func tearDown() {
        for driver in drivers { driver?.close() }
        for proxy in proxies { proxy.stop() }
        server?.stop()
        if violations.isEmpty { try? FileManager.default.removeItem(atPath: directory) }
    }

    func driver(_ d: Int) throws -> DriverProcess {
        guard let driver = drivers[d] else { throw HarnessError("d\(d) has no driver") }
        return driver
    }

    /// Starts device `d`'s driver and opens its store (the same file after a crash).
    func open(_ d: Int) throws {
        let driver = try DriverProcess(name: "d\(d)", command: configuration.driver, log: directory + "/d\(d).log")
        drivers[d] = driver
        let answer = try driver.request("open", [
            "path": .string(directory + "/d\(d).sqlite"), "server": .string("http://127.0.0.1:\(proxies[d].port)"),
            "token": .string(token(d)), "space": .string(space),
        ])
        guard answer["ok"]?.boolValue == true else { throw HarnessError("d\(d) could not open its store: \(answer)") }
    }

    func perform(_ step: Int) throws {
        let roll = draw(100)
        let d = draw(configuration.devices)
        switch roll {
        case ..<28: try save(step, d, id: "s\(draw(4))")
        case ..<40: try save(step, d, id: "o\(d)-\(draw(3))")
        case ..<48: try delete(step, d, id: "s\(draw(4))")
        case ..<52: try delete(step, d, id: "o\(d)-\(draw(3))")
        case ..<55: try save(step, d, id: "big\(d)-\(step)", oversized: true)
        case ..<82: try sync(step, d, faulty: draw(3) != 0)
        case ..<87:
            try driver(d).crash()
            log.append("\(step) d\(d) crash (between steps), reopen")
            try open(d)
        case ..<92: try crashMidSync(step, d)
        case ..<94: try crashServerMidPush(step, d)
        case ..<96:
            if server.isRunning {
                server.kill9()
                for proxy in proxies { proxy.setUpstream(nil) }
                serverDownUntil = step + 1 + draw(3)
                log.append("\(step) server kill -9 (down until step \(serverDownUntil!))")
            } else {
                log.append("\(step) server already down")
            }
        default:
            let faulty = draw(3) != 0
            for each in 0..<configuration.devices { try sync(step, each, faulty: faulty) }
        }
    }

    func restartServer(_ step: Int) throws {
        try server.start()
        for proxy in proxies { proxy.setUpstream(server.port) }
        serverDownUntil = nil
        log.append("\(step) server restarted")
    }

    func save(_ step: Int, _ d: Int, id: String, oversized isOversized: Bool = false) throws {
        var data: JSONObject = ["w": .string("d\(d).\(step)")]
        if isOversized { data["pad"] = .string(String(repeating: "x", count: 3000)) }
        let answer = try driver(d).request("save", ["collection": .string(collection), "record": .string(id), "data": .object(data)])
        log.append("\(step) d\(d) save \(collection)/\(id) \(isOversized ? "(oversized)" : JSONValue.object(data).description) -> \(brief(answer))")
        guard answer["ok"]?.boolValue == true else { return }
        if isOversized {
            oversized.append((d, id))
            unsettledOversized[d] += 1
        } else {
            unsettled[d].append(edits.count)
            edits.append(Edit(step: step, device: d, id: id, data: data))
        }
    }

    func delete(_ step: Int, _ d: Int, id: String) throws {
        // The copy's version first: a delete of a copy the server never confirmed may send nothing.
        let copy = try driver(d).request("get", ["collection": .string(collection), "record": .string(id)])
        guard copy["ok"]?.boolValue == true else { throw HarnessError("d\(d) answered get with \(brief(copy))") }
        let unconfirmed = copy["record"]?["version"]?.stringValue == nil
        let answer = try driver(d).request("delete", ["collection": .string(collection), "record": .string(id)])
        log.append("\(step) d\(d) delete \(collection)/\(id)\(unconfirmed && copy["record"]?.objectValue != nil ? " (a copy the server never confirmed)" : "") -> \(brief(answer))")
        guard answer["ok"]?.boolValue == true, answer["deleted"]?.boolValue == true else { return }
        unsettled[d].append(edits.count)
        var edit = Edit(step: step, device: d, id: id, data: nil)
        edit.unconfirmed = unconfirmed
        edits.append(edit)
    }

    /// One sync of device `d`; returns the answer.
    @discardableResult
    func sync(_ step: Int, _ d: Int, faulty: Bool) throws -> JSONObject {
        proxies[d].setFaulty(faulty)
        defer { proxies[d].setFaulty(false) }
        let answer = try driver(d).request("sync")
        log.append("\(step) d\(d) sync\(faulty ? " (faults)" : "") -> \(brief(answer))")
        log += proxies[d].takeLog().map { "    \($0)" }
        settle(step, d, answer)
        return answer
    }

    /// A sync's answer settles the device's edits: a clean one (no error, conflict or
    /// change left, and no rejection but one for each oversized put saved since the last
    /// sync) acknowledges them as written, the newest of each record;
    /// any other leaves them in doubt for good (a resolver, a lost answer or a crash may
    /// have decided them), and the oracle then checks nothing of them but convergence.
    func settle(_ step: Int, _ d: Int, _ answer: JSONObject?) {
        syncs += 1
        let clean = answer.map { a in
            a["ok"]?.boolValue == true && a["conflicts"]?.int64Value == 0 && a["pending"]?.int64Value == 0
                && a["rejected"]?.int64Value == Int64(unsettledOversized[d])
        } ?? false
        if clean {
            var newest: [String: Int] = [:]
            for index in unsettled[d] { newest[edits[index].id] = index }
            for index in newest.values where !edits[index].unconfirmed {
                edits[index].acknowledgedAt = step
                edits[index].acknowledgedBySync = syncs
            }
        }
        unsettled[d] = []
        unsettledOversized[d] = 0
    }

    /// Kills device `d`'s driver once the server has answered its next push (its next
    /// request when nothing is queued), loses that answer, and reopens the store.
    func crashMidSync(_ step: Int, _ d: Int) throws {
        let driver = try driver(d)
        let pushOnly = try pending(d) > 0
        let process = driver.process
        proxies[d].armCrash(pushOnly: pushOnly) {
            process.signalGroup(SIGKILL)
            process.wait()
        }
        var answered: JSONObject?
        do { answered = try driver.request("sync") } catch {}
        let fired = proxies[d].disarmCrash()
        driver.kill9()
        log.append("\(step) d\(d) kill -9 \(fired ? "mid-sync, after the server answered its \(pushOnly ? "push" : "first request")" : "after a sync that sent no push (\(answered.map(brief) ?? "no answer"))"), reopen")
        log += proxies[d].takeLog().map { "    \($0)" }
        settle(step, d, nil)
        try open(d)
    }

    /// How many changes device `d` has queued (`status`).
    func pending(_ d: Int) throws -> Int64 {
        let status = try driver(d).request("status")
        guard status["ok"]?.boolValue == true, let pending = status["pending"]?.int64Value else { throw HarnessError("d\(d) answered status with \(brief(status))") }
        return pending
    }

    /// Kills the server (kill -9) once it has answered device `d`'s next push, which
    /// it committed, and loses the answer; the server stays down for a few steps.
    func crashServerMidPush(_ step: Int, _ d: Int) throws {
        guard server.isRunning, let process = server.process else {
            try sync(step, d, faulty: false)
            return
        }
        proxies[d].armCrash(pushOnly: true) {
            process.send(SIGKILL)
            process.wait()
        }
        let answer = try driver(d).request("sync")
        let fired = proxies[d].disarmCrash()
        settle(step, d, fired ? nil : answer)
        if fired {
            server.kill9()
            for proxy in proxies { proxy.setUpstream(nil) }
            serverDownUntil = step + 1 + draw(3)
        }
        log.append("\(step) d\(d) sync; server kill -9 after committing its push -> \(fired ? "fired (down until step \(serverDownUntil!))" : "no push sent"), \(brief(answer))")
        log += proxies[d].takeLog().map { "    \($0)" }
    }

    /// No more faults: the server up, every device syncs, round after round, until a
    /// round in which every sync succeeds and moves nothing.
    func heal() throws {
        log.append("heal")
        if !server.isRunning { try restartServer(configuration.steps) }
        for round in 1...10 {
            var moved = false
            for d in 0..<configuration.devices {
                let answer = try sync(configuration.steps + round, d, faulty: false)
                if answer["ok"]?.boolValue != true || answer["pushed"]?.int64Value != 0 || answer["pulled"]?.int64Value != 0 { moved = true }
            }
            if !moved { return }
        }
        violations.append(.init(promise: "convergence", message: "the devices still moved records after 10 rounds of syncs without faults"))
    }

    // MARK: The oracle

    /// The server's records of the space, read by pulls from its start (not through a proxy).
    func serverState() throws -> [String: JSONObject?] {
        guard let port = server.port else { throw HarnessError("the server is down at the end") }
        var records: [String: JSONObject?] = [:]
        var since: String?
        let reader = token(99)
        for _ in 0..<100_000 {
            let path = "/v1/spaces/\(space)/pull?limit=1000" + (since.map { "&since=\($0)" } ?? "")
            let (status, body) = try httpGet(port: port, path: path, token: reader)
            guard status == 200, let page = (try? JSONParser.parse(body))?.objectValue else {
                throw HarnessError("the server's pull answered \(status): \(String(decoding: body.prefix(200), as: UTF8.self))")
            }
            for change in page["changes"]?.arrayValue ?? [] {
                guard change["collection"]?.stringValue == collection, let id = change["id"]?.stringValue else { continue }
                records[id] = change["deleted"]?.boolValue == true ? .some(nil) : .some(change["data"]?.objectValue)
            }
            since = page["next"]?.stringValue
            if page["hasMore"]?.boolValue != true { return records }
        }
        throw HarnessError("the server's pull did not end")
    }

    func check() throws {
        let server = try serverState()
        let live = server.compactMapValues { $0 }
        func shown(_ data: JSONObject?) -> String { data.map { JSONValue.object($0).description } ?? "deleted" }
        func fail(_ promise: String, _ message: String) { violations.append(.init(promise: promise, message: message)) }

        // convergence: every device shows the server's live records, as the server holds
        // them, and has nothing left to send.
        for d in 0..<configuration.devices {
            let driver = try driver(d)
            let all = try driver.request("all", ["collection": .string(collection)])
            guard all["ok"]?.boolValue == true, let records = all["records"]?.arrayValue else { throw HarnessError("d\(d) answered all with \(all)") }
            var held: [String: JSONObject] = [:]
            for record in records {
                guard let id = record["id"]?.stringValue, let data = record["data"]?.objectValue else { throw HarnessError("d\(d)'s all has a record without id or data: \(record)") }
                held[id] = data
            }
            for (id, data) in held where live[id].map({ JSONValue.object($0) != JSONValue.object(data) }) ?? true {
                fail("convergence", "d\(d) holds \(collection)/\(id) \(shown(data)); the server holds \(live[id].map { shown($0) } ?? (server[id] != nil ? "a tombstone" : "nothing"))")
            }
            for (id, data) in live where held[id] == nil {
                fail("convergence", "d\(d) lacks \(collection)/\(id), which the server holds: \(shown(data))")
            }
            let status = try driver.request("status")
            if status["pending"]?.int64Value != 0 { fail("convergence", "d\(d) still has \(status["pending"].map { "\($0)" } ?? "no count of") changes pending after healing") }

            // rejected-visible: each oversized put the device saved was refused by the
            // server and is listed by `rejected` (an app must be able to show it).
            let rejected = try driver.request("rejected")
            let listed = Set((rejected["changes"]?.arrayValue ?? []).compactMap { $0["collection"]?.stringValue == collection ? $0["id"]?.stringValue : nil })
            for big in oversized where big.device == d {
                if live[big.id] != nil { fail("rejected-visible", "the server holds \(collection)/\(big.id), a put over its record limit") }
                if !listed.contains(big.id) { fail("rejected-visible", "d\(d) saved \(collection)/\(big.id) over the server's record limit and its rejected list lacks it: refused silently") }
            }
        }

        // acknowledged-write: a write a clean sync acknowledged is the server's final state
        // of its record, unless another write of that record was not yet acknowledged when
        // it was (that one may have seen it, or been resolved against it).
        for edit in edits {
            guard let acknowledged = edit.acknowledgedAt, let sync = edit.acknowledgedBySync else { continue }
            let replaceable = edits.contains { other in
                other.id == edit.id && other.device != edit.device && (other.acknowledgedBySync.map { $0 > sync } ?? true)
                    || other.id == edit.id && other.device == edit.device && other.step > edit.step
            }
            if replaceable { continue }
            let final = server[edit.id] ?? nil
            if final.map({ JSONValue.object($0) }) != edit.data.map({ JSONValue.object($0) }) {
                fail("acknowledged-write", "d\(edit.device)'s \(edit.data == nil ? "delete" : "put") of \(collection)/\(edit.id) at step \(edit.step) (\(shown(edit.data))) was acknowledged at step \(acknowledged), no later write touched the record, yet the server holds \(shown(final))")
            }
        }

        // local-edit: a record only one device writes ends as that device's last write:
        // no saved edit is lost, by a crash or otherwise.
        var lastOwn: [String: Edit] = [:]
        for edit in edits where edit.id.hasPrefix("o") { lastOwn[edit.id] = edit }
        for (id, edit) in lastOwn.sorted(by: { $0.key < $1.key }) {
            let final = server[id] ?? nil
            if final.map({ JSONValue.object($0) }) != edit.data.map({ JSONValue.object($0) }) {
                fail("local-edit", "d\(edit.device) alone writes \(collection)/\(id); its last write (step \(edit.step)) was \(shown(edit.data)), the server holds \(shown(final))")
            }
        }

        log.append("checked: \(live.count) live records on \(configuration.devices) devices, \(edits.count) edits, \(edits.filter { $0.acknowledgedAt != nil }.count) acknowledged as written, \(lastOwn.count) single-writer records, \(oversized.count) oversized puts")

        // no-fabrication: every record the server holds is one some device wrote.
        for (id, data) in live.sorted(by: { $0.key < $1.key }) where !edits.contains(where: { $0.id == id && $0.data.map { JSONValue.object($0) } == JSONValue.object(data) }) {
            fail("no-fabrication", "the server holds \(collection)/\(id) \(shown(data)), which no device wrote")
        }
    }
}

/// An answer without its id, shortened for the schedule.
func brief(_ answer: JSONObject) -> String {
    var copy = answer
    copy["id"] = nil
    let text = JSONValue.object(copy).description
    return text.count > 160 ? String(text.prefix(160)) + "…" : text
}

func randomBytes(_ count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
}

func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
}
