import Foundation
import Outpost
import OutpostTesting
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing

// The README's "Using the SDK" section shows the code between the `readme:` markers of
// this file, verbatim; `readmeShowsTheseSamples` keeps the two equal, and the tests below
// run every sample.
enum ReadmeSamples {
    // readme:begin two-devices
    struct Todo: Codable, Sendable, Equatable {
        var title: String
        var done = false
    }

    /// Two devices, one server: the phone saves offline and syncs; the laptop receives it.
    static func twoDevices() async throws -> [Todo] {
        let server = InMemorySyncServer()  // OutpostTesting, in tests and previews; HTTPSyncTransport in the app
        let phone = try OutpostStore.inMemory(configuration: .init(space: "team"), transport: server.transport(device: "phone"))
        let laptop = try OutpostStore.inMemory(configuration: .init(space: "team"), transport: server.transport(device: "laptop"))

        try await phone.save(Todo(title: "Buy milk"), in: "todos", id: "t1")  // local only, never waits
        try await phone.sync()  // pushes the queue, then pulls to the end
        try await laptop.sync()
        return try await laptop.all(Todo.self, in: "todos")
    }
    // readme:end two-devices

    // readme:begin app
    /// In an app: a store file, a real server, and a scheduler that syncs after every edit,
    /// on an interval, and holds a long poll open for other devices' writes.
    static func app(server: URL, token: String, file: String) async throws -> SyncScheduler {
        var configuration = OutpostStore.Configuration(space: "team")
        configuration.resolver = .mergeFields(fallback: .lastWriteWins())  // the default
        configuration.validate(Todo.self, in: "todos")  // undecodable records go to quarantine
        let store = try OutpostStore(path: file, configuration: configuration,
                                     transport: HTTPSyncTransport(baseURL: server) { refresh in token })
        let scheduler = SyncScheduler(store: store)
        await scheduler.start()
        try await store.save(Todo(title: "Call the plumber"), in: "todos", id: UUID().uuidString)
        return scheduler
    }
    // readme:end app

    // readme:begin media
    struct Photo: Codable, Sendable, Equatable {
        var caption: String
        var image: MediaReference  // records point at media by its id; the bytes never enter a record
    }

    /// Upload first, then save a record that points at the file; another device syncs the
    /// record and downloads the file, checked against its SHA-256.
    static func photo(server: URL, token: String, file: URL, directory: URL) async throws -> URL {
        let transport = HTTPSyncTransport(baseURL: server) { refresh in token }
        let phone = try OutpostStore(path: directory.appendingPathComponent("phone.sqlite").path,
                                     configuration: .init(space: "team"), transport: transport)
        let uploader = MediaUploader(store: phone, transport: HTTPMediaTransport(sharing: transport))
        let media = try await uploader.upload(file: file, contentType: "image/jpeg")  // resumes if interrupted
        try await phone.save(Photo(caption: "Shed roof", image: MediaReference(media)), in: "photos", id: "p1")
        try await phone.sync()

        let laptop = try OutpostStore(path: directory.appendingPathComponent("laptop.sqlite").path,
                                      configuration: .init(space: "team"), transport: transport)
        try await laptop.sync()
        let photo = try await laptop.get(Photo.self, from: "photos", id: "p1")!
        let copy = directory.appendingPathComponent("roof.jpg")
        try await MediaUploader(store: laptop, transport: HTTPMediaTransport(sharing: transport)).download(photo.image, to: copy)
        await phone.close()
        await laptop.close()
        return copy
    }
    // readme:end media

    // readme:begin queries
    struct Inspection: Codable, Sendable {
        var title: String
        var status: String
        var dueDate: Date  // written as RFC 3339 text: "2026-12-07T09:30:00.000Z"
        var notes: String
    }

    /// A screen's questions, answered by the store: filtered, sorted, searched, counted, live.
    static func inspectionsScreen(file: String) async throws -> [String] {
        var configuration = OutpostStore.Configuration(space: "team")
        configuration.collections["inspections"] = CollectionSchema(
            indexes: [["status", "dueDate"]], searchable: ["notes"], dates: ["dueDate"])
        let store = try OutpostStore(path: file, configuration: configuration)
        let inspections = store.collection("inspections", of: Inspection.self)  // name and type, once
        try await inspections.save(Inspection(title: "Pump", status: "open", dueDate: .now, notes: "São Paulo depot"), id: "i1")

        let open = inspections.filter { $0.status == "open" }.sorted(by: .ascending("dueDate"))
        let firstPage = try await open.limit(50).fetch()          // rows with ids, decoded
        let count = try await open.count()                       // served by the index
        let found = try await open.search("sao pau").fetch()     // case, accents, as you type
        for try await update in open.live() {                    // now, then after each change
            print(update.results.map(\.id), update.changes.inserted)
            break
        }
        await store.close()
        return firstPage.map(\.id) + ["\(count)"] + found.map(\.value.title)
    }
    // readme:end queries

    // readme:begin write-block
    /// An inspection and its checklist items saved at once: one commit, all or nothing.
    static func saveVisit(store: OutpostStore, inspection: Inspection, items: [String: Inspection]) async throws {
        let inspections = store.collection("inspections", of: Inspection.self)
        try await store.transaction { tx in
            try tx.save(inspection, id: "i1", in: inspections)
            for (id, item) in items { try tx.save(item, id: id, in: inspections) }
            try tx.delete(from: "drafts", id: "i1")
        }  // 10,000 saves in about 0.25 s (docs/benchmarks.md, "Write blocks")
    }
    // readme:end write-block

    // readme:begin conflicts
    /// Conflicts on inspections wait for the inspector; other collections merge by themselves.
    static let resolver = ConflictResolver.custom(name: "inspectionsByHand") { conflict in
        conflict.collection == "inspections" ? .leaveForPerson : ConflictResolver.mergeFields().resolve(conflict, now: conflict.local.clientTime)
    }

    /// The conflict screen: both versions side by side, then the inspector's choice.
    static func settle(store: OutpostStore) async throws -> [String] {
        let inspections = store.collection("inspections", of: Inspection.self)
        var shown: [String] = []
        for conflict in try await inspections.unsettledConflicts() {  // kept across restarts
            let mine = try conflict.local(as: Inspection.self), theirs = try conflict.server(as: Inspection.self)
            shown.append("\(mine?.notes ?? "deleted") | \(theirs?.notes ?? "deleted")")
            if let mine, let theirs {
                var merged = theirs
                merged.notes = theirs.notes + "; " + mine.notes
                try await inspections.settleConflict(conflict.id, with: merged)  // sent as an ordinary edit
            } else {
                try await inspections.settleConflict(conflict.id, .keepServer)
            }
        }
        return shown
    }
    // readme:end conflicts

    // readme:begin status-line
    /// A status line: one value to switch over, and a sentence for a person.
    @MainActor
    static func statusLine(_ model: SyncStatusModel) -> String {
        switch model.state {
        case .failed(.unauthorized, _): return "Sign in again"   // the app's own action
        case .syncing(let progress): return progress.map { "\($0.pulled) received" } ?? "Syncing…"
        default: return model.message   // "Offline. Your changes are saved on this device…"
        }
    }
    // readme:end status-line
}

@Suite("README samples", .offPoolWhileBlocking, .serverLogs)
struct ReadmeSampleTests {
    @Test func theTwoDeviceSampleRuns() async throws {
        #expect(try await ReadmeSamples.twoDevices() == [ReadmeSamples.Todo(title: "Buy milk")])
    }

    #if canImport(OutpostTestSupport)
    @Test func theAppSampleRunsAgainstARealServer() async throws {
        let world = try RealWorld()
        let scheduler = try await ReadmeSamples.app(server: world.server.baseURL, token: world.token, file: world.dir.appending("app.sqlite"))
        for await event in scheduler.events {
            if case .synced(let report) = event, report.pushed == 1 { break }
        }
        await scheduler.stop()
        await scheduler.store.close()
        #expect(try await world.serverRecords().values.first?.data?["title"] == "Call the plumber")
    }

    @Test func theMediaSampleRunsAgainstARealServer() async throws {
        let world = try await MediaWorld.make()
        let file = world.dir.url.appendingPathComponent("roof.source.jpg")
        let directory = world.dir.url.appendingPathComponent("sample")
        let bytes = Data((0..<700_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) })
        try await blocking {
            try bytes.write(to: file)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        let copy = try await ReadmeSamples.photo(server: world.server.baseURL, token: world.token, file: file, directory: directory)
        #expect(try await blocking { try Data(contentsOf: copy) } == bytes)
    }
    #endif

    @Test func theQueriesSampleRuns() async throws {
        try await withTemporaryDirectory { dir in
            let shown = try await ReadmeSamples.inspectionsScreen(file: dir.appending("app.sqlite"))
            #expect(shown == ["i1", "1", "Pump"])
        }
    }

    #if canImport(OutpostTestSupport)
    @Test func theWriteBlockConflictAndStatusSamplesRunAgainstARealServer() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-readme-conflicts")
        defer { dir.remove() }
        let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data")) }
        defer { server.stop() }
        let token = try server.token(sub: "u", spaces: ["team"])
        let phone = try serverDevice("phone", server, dir, token: token, space: "team", seed: 21) { $0.resolver = ReadmeSamples.resolver }
        let office = try serverDevice("office", server, dir, token: token, space: "team", seed: 21)
        let due = Date(timeIntervalSince1970: 1_790_000_000)
        let visit = ReadmeSamples.Inspection(title: "Pump", status: "open", dueDate: due, notes: "first visit")
        try await ReadmeSamples.saveVisit(store: phone, inspection: visit, items: ["c1": visit, "c2": visit])
        try await phone.sync()
        try await office.sync()
        #expect(try await office.collection("inspections", of: ReadmeSamples.Inspection.self).count() == 3)

        // Both edit i1 offline; the office syncs first, the phone leaves the conflict for its inspector.
        var theirs = visit, mine = visit
        theirs.notes = "office: parts ordered"
        mine.notes = "valve leaks"
        try await office.collection("inspections", of: ReadmeSamples.Inspection.self).save(theirs, id: "i1")
        try await office.sync()
        try await phone.collection("inspections", of: ReadmeSamples.Inspection.self).save(mine, id: "i1")
        try await phone.sync()
        let model = await SyncStatusModel(store: phone)
        await model.start()
        await ProgressTests.wait(for: model, "one conflict") { $0.state == .conflicts(count: 1) }
        #expect(await ReadmeSamples.statusLine(model) == "1 record has changes from two devices to settle.")
        await model.stop()
        #expect(try await ReadmeSamples.settle(store: phone) == ["valve leaks | office: parts ordered"])
        try await phone.sync()
        try await office.sync()
        #expect(try await office.collection("inspections", of: ReadmeSamples.Inspection.self).get("i1")?.notes == "office: parts ordered; valve leaks")
        await phone.close()
        await office.close()
    }
    #endif

    /// The code blocks of README.md's "Using the SDK" section, and the marked regions here.
    @Test func readmeShowsTheseSamples() throws {
        let here = URL(fileURLWithPath: #filePath)
        let root = here.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let source = try String(contentsOf: here, encoding: .utf8)
        for name in ["two-devices", "app", "media", "queries", "write-block", "conflicts", "status-line"] {
            let begin = "    // readme:begin \(name)\n", end = "    // readme:end \(name)\n"
            let region = try #require(source.range(of: begin).flatMap { b in source.range(of: end, range: b.upperBound..<source.endIndex).map { b.upperBound..<$0.lowerBound } })
            let sample = source[region].split(separator: "\n", omittingEmptySubsequences: false)
                .map { $0.hasPrefix("    ") ? String($0.dropFirst(4)) : String($0) }.joined(separator: "\n")
            #expect(readme.contains("```swift\n" + sample + "```"), "README.md shows the \(name) sample as it is in ReadmeSamples.swift")
        }
    }
}
