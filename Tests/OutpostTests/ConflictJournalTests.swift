import Foundation
import OutpostCore
import OutpostSQLite
import OutpostTestBasics
import Synchronization
import Testing
@testable import Outpost
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// The conflict journal (docs/client.md, "The conflict journal") against a real
/// `outpost-server` child and real SQLite files: what an entry keeps, `conflicts(since:)`,
/// `observeConflicts()`, retention, `outpost conflicts`, and the counts telemetry reports
/// (never a value, in clear and end-to-end encrypted spaces).
@Suite("The conflict journal", .offPoolWhileBlocking, .serialized, .serverLogs)
struct ConflictJournalTests {
    static let day: Int64 = 86_400_000

    /// A seed of its own for each device: two devices of one seed that save in the same
    /// millisecond would draw the same change id, and the server would take the second
    /// change for a replay of the first.
    static func seed(_ name: String) -> UInt64 {
        name.utf8.reduce(1469598103934665603) { ($0 ^ UInt64($1)) &* 1099511628211 }
    }

    /// Both devices edit `n1` of `notes` offline: the phone its title and `n`, the laptop its
    /// title (later) and its note. The phone syncs first; the laptop's sync meets the
    /// conflict and its merge writes {title: laptop's, note: laptop's, n: phone's}.
    static func conflict(_ phone: OutpostStore, _ laptop: OutpostStore, id: String = "n1", clock: ManualClock?, marker: String = "") async throws
        -> (local: JSONObject, server: JSONObject, base: JSONObject, merged: JSONObject) {
        let base: JSONObject = ["title": .string("\(marker)first"), "note": "plain", "n": 1]
        try await phone.put(base, in: "notes", id: id)
        try await phone.sync()
        try await laptop.sync()
        let server: JSONObject = ["title": .string("\(marker)phone"), "note": "plain", "n": 2]
        try await phone.put(server, in: "notes", id: id)
        clock?.advance(1_000)
        let local: JSONObject = ["title": .string("\(marker)laptop"), "note": .string("\(marker)laptop-note"), "n": 1]
        try await laptop.put(local, in: "notes", id: id)
        try await phone.sync()
        return (local, server, base, ["title": .string("\(marker)laptop"), "note": .string("\(marker)laptop-note"), "n": 2])
    }

    @Test func aResolversDecisionIsJournaledWithLocalServerBaseAndResultAndTold() async throws {
        let world = try RealWorld()
        let merge = ConflictResolver.mergeFields(fallback: .lastWriteWins())
        func open(_ name: String) throws -> OutpostStore {
            try world.device(name, direct: true, resolver: merge) {
                $0.clock = world.clock.dates()
                $0.randomSeed = Self.seed(name)
            }
        }
        let phone = try open("phone")
        var laptop = try open("laptop")
        let told = await laptop.observeConflicts()
        let (local, server, base, merged) = try await Self.conflict(phone, laptop, clock: world.clock)
        let changeId = try #require(try await laptop.pendingChanges().first?.changeId)
        let decidedAt = world.clock.now
        let report = try await laptop.sync()
        #expect(report.conflicts == 1 && report.resolved == 1)
        #expect(try await laptop.data("notes", "n1") == merged)

        let entries = try await laptop.conflicts()
        #expect(entries.count == 1)
        let entry = try #require(entries.first)
        #expect(entry.collection == "notes" && entry.id == "n1" && entry.changeId == changeId)
        #expect(entry.local == local && entry.server == server && entry.base?.data == base && entry.base?.deleted == false)
        #expect(entry.resolution == .write(merged) && entry.result == merged)
        #expect(entry.resolver == "mergeFields(lastWriteWins)" && entry.decidedAt.milliseconds == decidedAt)
        let serverVersion = try #require(try await phone.record(in: "notes", id: "n1")?.version)
        #expect(entry.serverVersion == serverVersion && entry.base?.version != nil)
        // The decision's write is the change the laptop queued and then pushed.
        #expect(entry.writtenChangeId != nil && entry.writtenChangeId != changeId)
        try await phone.sync()
        #expect(try await phone.data("notes", "n1") == merged)

        // The stream told the entry once its transaction committed; it ends with the store.
        await laptop.close()
        var streamed: [ConflictEntry] = []
        for await e in told { streamed.append(e) }
        #expect(streamed == [entry])
        // The entry is in the file.
        laptop = try open("laptop")
        #expect(try await laptop.conflicts() == [entry])
        await laptop.close()
        await phone.close()
    }

    /// The decision and its entry commit in one transaction: when the entry cannot be
    /// written (a trigger in the file refuses it, as a full disk would), the record keeps its
    /// edit undecided and nothing is told; the next sync decides it, and journals it, once.
    @Test func aDecisionAndItsEntryCommitTogetherOrNotAtAll() async throws {
        let world = try RealWorld()
        let merge = ConflictResolver.mergeFields(fallback: .lastWriteWins())
        let phone = try world.device("phone", direct: true, resolver: merge) {
            $0.clock = world.clock.dates()
            $0.randomSeed = Self.seed("phone")
        }
        let laptop = try world.device("laptop", direct: true, resolver: merge) {
            $0.clock = world.clock.dates()
            $0.randomSeed = Self.seed("laptop")
        }
        let told = await laptop.observeConflicts()
        let (local, _, _, merged) = try await Self.conflict(phone, laptop, clock: world.clock)
        let changeId = try #require(try await laptop.pendingChanges().first?.changeId)
        let path = world.dir.appending("laptop.sqlite")
        func sql(_ statement: String) throws {
            let c = try Connection(path: path)
            defer { c.close() }
            try c.execute(statement)
        }
        try sql("CREATE TRIGGER refuse_journal BEFORE INSERT ON conflict_journal BEGIN SELECT RAISE(ABORT, 'journal refused'); END")
        await #expect(throws: OutpostError.self) { try await laptop.sync() }
        #expect(try await laptop.conflicts().isEmpty)
        #expect(try await laptop.pendingChanges().map(\.changeId) == [changeId], "the edit is still the app's, undecided")
        #expect(try await laptop.data("notes", "n1") == local)

        try sql("DROP TRIGGER refuse_journal")
        let report = try await laptop.sync()
        #expect(report.resolved == 1 && report.pushed == 1)
        #expect(try await laptop.data("notes", "n1") == merged)
        let entries = try await laptop.conflicts()
        #expect(entries.count == 1 && entries.first?.changeId == changeId && entries.first?.result == merged)
        await laptop.close()
        var streamed: [ConflictEntry] = []
        for await e in told { streamed.append(e) }
        #expect(streamed == entries, "only the committed decision is told")
        await phone.close()
    }

    /// A conflict of two creates has no base; a delete's side is nil, and so is a result
    /// that leaves the record deleted.
    @Test func createsAndDeletesAreJournaledWithoutABaseAndAsNil() async throws {
        let world = try RealWorld()
        let phone = try world.device("phone", direct: true, resolver: .clientWins) { $0.randomSeed = Self.seed("phone") }
        let laptop = try world.device("laptop", direct: true, resolver: .clientWins) { $0.randomSeed = Self.seed("laptop") }
        try await phone.put(["from": "phone"], in: "notes", id: "same")
        try await laptop.put(["from": "laptop"], in: "notes", id: "same")
        try await phone.sync()
        try await laptop.sync()
        let create = try #require(try await laptop.conflicts().last)
        #expect(create.base == nil && create.local == ["from": "laptop"] && create.server == ["from": "phone"] && create.result == ["from": "laptop"])
        #expect(create.json["base"] == .null)

        try await phone.sync()
        try await phone.put(["from": "phone again"], in: "notes", id: "same")
        try await laptop.delete(from: "notes", id: "same")
        try await phone.sync()
        try await laptop.sync()
        let delete = try #require(try await laptop.conflicts().last)
        #expect(delete.local == nil && delete.server == ["from": "phone again"] && delete.resolution == .keepLocal && delete.result == nil)
        #expect(delete.base?.data == ["from": "laptop"] && delete.base?.deleted == false)
        #expect(delete.json["local"] == .null && delete.json["result"] == .null)
        #expect(try await laptop.record(in: "notes", id: "same")?.deleted == true)
        await laptop.close()
        await phone.close()
    }

    @Test func conflictsSinceFiltersAndRetentionPrunesAfterSyncsAndOnOpen() async throws {
        let world = try RealWorld()
        func open(_ name: String) throws -> OutpostStore {
            try world.device(name, direct: true, resolver: .serverWins) {
                $0.clock = world.clock.dates()
                $0.randomSeed = Self.seed(name)
            }
        }
        let phone = try open("phone")
        var laptop = try open("laptop")
        let start = world.clock.now
        _ = try await Self.conflict(phone, laptop, id: "a", clock: world.clock)
        try await laptop.sync()
        world.clock.advance(Self.day)
        let second = world.clock.now
        _ = try await Self.conflict(phone, laptop, id: "b", clock: world.clock)
        try await laptop.sync()
        let all = try await laptop.conflicts()
        #expect(all.map(\.id) == ["a", "b"] && all.allSatisfy { $0.resolution == .keepServer && $0.resolver == "serverWins" && $0.writtenChangeId == nil })
        #expect(all[0].result == all[0].server, "server wins: the result is the server's copy")
        #expect(try await laptop.conflicts(since: Date(milliseconds: second + 1_000)).map(\.id) == ["b"])
        #expect(try await laptop.conflicts(since: Date(milliseconds: second + 1_001)).isEmpty)
        #expect(try await laptop.conflicts(since: Date(timeIntervalSince1970: Double(start) / 1000)).map(\.id) == ["a", "b"])

        // Just past 30 days (the default) after the first: a sync prunes it, the second stays.
        world.clock.set(all[0].decidedAt.milliseconds + 30 * Self.day + 1)
        try await laptop.sync()
        #expect(try await laptop.conflicts().map(\.id) == ["b"])
        // Past 30 days after the second: opening the store prunes it, without a sync.
        await laptop.close()
        world.clock.set(all[1].decidedAt.milliseconds + 30 * Self.day + 1)
        laptop = try open("laptop")
        #expect(try await laptop.conflicts().isEmpty)
        await laptop.close()

        // The app sets the retention: one hour keeps nothing a day old. A custom resolver is
        // journaled under the name the app gave it.
        let shortPhone = try world.device("phone2", direct: true, resolver: .serverWins) {
            $0.clock = world.clock.dates()
            $0.randomSeed = Self.seed("phone2")
        }
        let short = try world.device("laptop2", direct: true, resolver: .custom(name: "keep-local-title") { _ in .keepLocal }) {
            $0.clock = world.clock.dates()
            $0.randomSeed = Self.seed("laptop2")
            $0.conflictRetention = .seconds(3_600)
        }
        _ = try await Self.conflict(shortPhone, short, id: "c", clock: world.clock)
        try await short.sync()
        #expect(try await short.conflicts().map { [$0.id, $0.resolver] } == [["c", "keep-local-title"]])
        world.clock.advance(3_600_000 + 1)
        try await short.sync()
        #expect(try await short.conflicts().isEmpty)
        await short.close()
        await shortPhone.close()
        await phone.close()
    }

    @Test func theCLIPrintsTheJournalAsJSONLines() async throws {
        let world = try RealWorld()
        let phone = try world.device("phone", direct: true, resolver: .mergeFields(fallback: .clientWins)) { $0.randomSeed = Self.seed("phone") }
        let laptop = try world.device("laptop", direct: true, resolver: .mergeFields(fallback: .clientWins)) { $0.randomSeed = Self.seed("laptop") }
        let (local, server, base, _) = try await Self.conflict(phone, laptop, clock: nil)
        await laptop.close()
        let store = world.dir.appending("laptop.sqlite")
        let url = world.server.baseURL.absoluteString, token = world.token
        let sync = try await blocking { try CLITests.outpost(["--store", store, "--server", url, "--token", token, "--resolve", "client-wins", "sync"]) }
        #expect(sync.status == 0 && sync.lines.first?["conflicts"] == 1 && sync.lines.first?["resolved"] == 1, "\(sync.stdout) \(sync.stderr)")
        let reopened = try world.device("laptop", direct: true, resolver: .mergeFields(fallback: .clientWins)) { $0.randomSeed = Self.seed("laptop") }
        let entry = try #require(try await reopened.conflicts().first)
        await reopened.close()
        await phone.close()

        let run = try await blocking { try CLITests.outpost(["--store", store, "conflicts"]) }
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map { try? JSONParser.parse(Array($0.utf8)) }
        #expect(lines.count == 1)
        let line = try #require(lines.first ?? nil)
        #expect(line == entry.json)
        #expect(line["collection"] == "notes" && line["id"] == "n1" && line["resolution"] == "keepLocal" && line["resolver"] == "clientWins")
        #expect(line["local"] == .object(local) && line["server"] == .object(server) && line["base"]?["data"] == .object(base) && line["result"] == .object(local))

        let later = try await blocking { try CLITests.outpost(["--store", store, "conflicts", "--since", String(entry.decidedAt.milliseconds + 1)]) }
        #expect(later.status == 0 && later.stdout.isEmpty, "\(later.stdout) \(later.stderr)")
        let iso = ISO8601DateFormatter().string(from: entry.decidedAt.addingTimeInterval(-1))
        let since = try await blocking { try CLITests.outpost(["--store", store, "conflicts", "--since", iso]) }
        #expect(since.status == 0 && since.stdout.split(separator: "\n").count == 1, "\(since.stdout) \(since.stderr)")
        let bad = try await blocking { try CLITests.outpost(["--store", store, "conflicts", "--since", "yesterday"]) }
        #expect(bad.status == 64 && bad.stderr.contains("--since"), "\(bad.stderr)")
    }

    /// A transport that keeps every telemetry body it sends (what goes over the wire).
    final class RecordingTransport: SyncTransport {
        let inner: HTTPSyncTransport
        let bodies = Mutex<[[UInt8]]>([])
        init(_ inner: HTTPSyncTransport) { self.inner = inner }
        func serverInfo() async throws -> ServerInfo { try await inner.serverInfo() }
        func push(_ request: PushRequest, space: String) async throws -> PushResponse { try await inner.push(request, space: space) }
        func pull(_ query: PullQuery, space: String) async throws -> PulledPage { try await inner.pull(query, space: space) }
        var maxResponseBytes: Int { inner.maxResponseBytes }
        func takeServerClockReading() -> ServerClockReading? { inner.takeServerClockReading() }
        func takeTraffic() -> TransportTraffic? { inner.takeTraffic() }
        func sendTelemetry(_ batch: TelemetryBatch, space: String) async throws {
            bodies.withLock { $0.append(batch.encoded()) }
            try await inner.sendTelemetry(batch, space: space)
        }
    }

    /// Telemetry reports the counts, which the console's API sums per space; no value of the
    /// journal goes to the server, in clear or end-to-end encrypted, on SQLite or PostgreSQL.
    @Test(arguments: [(false, false), (true, false), (false, true)])
    func telemetryReportsCountsOnlyAndTheConsoleShowsThemPerSpace(encrypted: Bool, postgres: Bool) async throws {
        let database = postgres ? try await PostgresCluster.database(prefix: "journal") : nil
        let world = try RealWorld(arguments: database.map { ["--store", $0] } ?? [])
        let keys = FileKeyStore(path: world.dir.appending("team.keys"))
        if encrypted { _ = try SpaceKeys.create(space: "team", in: keys) }
        let recorder = RecordingTransport(HTTPSyncTransport(baseURL: world.server.baseURL, token: world.token))
        func open(_ name: String) throws -> OutpostStore {
            var c = OutpostStore.Configuration(space: "team")
            c.clientId = name
            c.durability = .normal
            c.randomSeed = Self.seed(name)
            c.telemetry = true
            c.resolver = .mergeFields(fallback: .clientWins)
            if encrypted { c.encryption = .spaceKey(keys) }
            return try OutpostStore(path: world.dir.appending("\(name).sqlite"), configuration: c, transport: recorder)
        }
        let phone = try open("phone"), laptop = try open("laptop")
        let marker = "MARKER-J-"
        let (_, _, _, merged) = try await Self.conflict(phone, laptop, clock: nil, marker: marker)
        #expect(try await laptop.sync().resolved == 1)
        #expect(try await laptop.conflicts().first?.result == merged, "the journal on the device holds the values")

        let admin = try world.server.token(spaces: [], admin: true)
        func get(_ path: String) async throws -> JSONValue {
            let r = try await httpRequestAsync(port: world.server.port, "GET", path, headers: [("Authorization", "Bearer \(admin)")])
            #expect(r.status == 200, "\(path): \(r.text)")
            return try JSONParser.parse(r.body)
        }
        try await eventually("both devices' telemetry reached the server") {
            let phoneWaiting = try await phone.pendingTelemetry(), laptopWaiting = try await laptop.pendingTelemetry()
            let devices = try await get("/v1/admin/devices?space=team")["devices"]?.arrayValue ?? []
            return phoneWaiting == 0 && laptopWaiting == 0 && devices.count == 2
        }
        let devices = try await get("/v1/admin/devices?space=team")["devices"]?.arrayValue ?? []
        let row = try #require(devices.first { $0["clientId"] == "laptop" })
        #expect(row["conflicts"] == 1 && row["resolved"] == 1, "\(row)")
        let spaces = try await get("/v1/admin/conflicts")
        #expect(spaces == ["spaces": [["space": "team", "devices": 2, "conflicts": 1, "resolved": 1]], "next": .null], "\(spaces)")

        // What went over the wire: counts, never a value.
        let bodies = recorder.bodies.withLock { $0 }
        #expect(!bodies.isEmpty)
        for body in bodies {
            #expect(!String(decoding: body, as: UTF8.self).contains(marker), "a telemetry body holds a value: \(String(decoding: body, as: UTF8.self))")
        }
        await phone.close()
        await laptop.close()
        if encrypted && database == nil {
            // Nothing the server keeps holds a value: records are sealed, telemetry is counts.
            #expect(world.server.stop() == 0)
            #expect(try EncryptionTests.files(under: world.server.dataDirectory, holding: marker).isEmpty)
        }
    }
}
#endif
