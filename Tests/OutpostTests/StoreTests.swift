import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost
import OutpostTesting

@Suite("Store: local API, files, observation, quarantine, crashes")
struct StoreTests {
    @Test func newRecordIDsAreValidVersion7UUIDsThatCarryTheirTime() throws {
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let ids = (0..<100).map { _ in OutpostStore.newRecordID() }
        let after = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(Set(ids).count == 100)
        for id in ids {
            #expect(Names.isValidRecordID(id), "\(id)")
            let hex = Array(id)
            #expect(hex.count == 36 && hex[14] == "7", "\(id) is not a UUID version 7")
            let ms = try #require(Int64(String(hex[0..<8] + hex[9..<13]), radix: 16))
            #expect((before...after).contains(ms), "\(id) carries \(ms), made between \(before) and \(after)")
        }
        // Made in time order, they sort in time order (ids of one millisecond may not).
        let times = ids.map { String($0.prefix(13)) }
        #expect(times == times.sorted())
    }

    @Test func codableAndRawJSONRoundTrip() async throws {
        let store = try OutpostStore.inMemory(configuration: World().configuration("phone"))
        let saved = try await store.save(Todo(title: "Buy milk"), in: "todos", id: "t1")
        #expect(saved.pending && saved.version == nil)
        #expect(try await store.get(Todo.self, from: "todos", id: "t1") == Todo(title: "Buy milk"))
        try await store.put(["title": "raw", "done": true, "tags": ["a", "b"]], in: "todos", id: "t2")
        #expect(try await store.all(Todo.self, in: "todos") == [Todo(title: "Buy milk"), Todo(title: "raw", done: true)])
        #expect(try await store.delete(from: "todos", id: "t1"))
        #expect(try await store.get(Todo.self, from: "todos", id: "t1") == nil)
        #expect(try await store.delete(from: "todos", id: "missing") == false)
        await #expect(throws: OutpostError.self) { try await store.put([:], in: "bad/name", id: "x") }
        await #expect(throws: OutpostError.self) { try await store.put([:], in: "todos", id: "") }
        await #expect(throws: OutpostError.self) { try await store.save([1, 2], in: "todos", id: "x") }
        await #expect(throws: OutpostError.noTransport) { try await store.sync() }
    }

    @Test func oneStorePerFile() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("s.sqlite")
            let world = World()
            let first = try world.device("phone", path: path)
            #expect(throws: OutpostError.storeInUse(path: path)) { try world.device("phone", path: path) }
            // The same file through another spelling of its path.
            #expect(throws: OutpostError.self) { try world.device("phone", path: dir.path + "/./s.sqlite") }
            try await first.put(todo("kept"), in: "todos", id: "t1")
            await first.close()
            await #expect(throws: OutpostError.closed) { try await first.put(todo("x"), in: "todos", id: "t2") }
            let second = try world.device("phone", path: path)
            #expect(try await second.data("todos", "t1") == todo("kept"))
            #expect(try await second.pendingChanges().count == 1, "the queue survived")
            #expect(second.clientId == "phone")
            await second.close()
        }
    }

    @Test func aFileBelongsToOneSpace() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("s.sqlite")
            let store = try OutpostStore(path: path, configuration: .init(space: "team"))
            await store.close()
            #expect(throws: OutpostError.spaceMismatch(stored: "team", configured: "other")) {
                try OutpostStore(path: path, configuration: .init(space: "other"))
            }
        }
    }

    @Test func observersHearLocalEditsAndPulledChangesOfWhatTheyWatch() async throws {
        let world = World()
        let phone = try world.device("phone")
        let laptop = try world.device("laptop")
        var todos = await laptop.observe(collection: "todos").makeAsyncIterator()
        var one = await laptop.observe(collection: "todos", id: "t2").makeAsyncIterator()
        try await laptop.put(["name": "x"], in: "notes", id: "n1")  // another collection: not heard
        try await laptop.put(todo("local"), in: "todos", id: "t1")
        let local = await todos.next()
        #expect(local == StoreEvent(origin: .local, keys: [RecordKey(collection: "todos", id: "t1")]))
        try await phone.put(todo("remote"), in: "todos", id: "t2")
        try await phone.sync()
        try await laptop.sync()
        let remote = await todos.next()
        #expect(remote?.origin == .remote)
        #expect(remote?.keys.contains(RecordKey(collection: "todos", id: "t2")) == true)
        let single = await one.next()
        #expect(single?.keys == [RecordKey(collection: "todos", id: "t2")])
        // Typed values: now, then after each change.
        var values = await laptop.values(Todo.self, in: "todos").makeAsyncIterator()
        #expect(try await values.next()?.map(\.title) == ["local", "remote"])
        try await laptop.delete(from: "todos", id: "t1")
        #expect(try await values.next()?.map(\.title) == ["remote"])
        await laptop.close()
        #expect(await todos.next()?.keys == [RecordKey(collection: "todos", id: "t1")], "the delete, buffered")
        #expect(await todos.next() == nil, "observation ends with the store")
    }

    @Test func absenceFromAPageNeverDeletes() async throws {
        let world = World()
        let phone = try world.device("phone")
        try await phone.put(todo("synced"), in: "todos", id: "t1")
        try await phone.sync()
        try await phone.put(todo("local only"), in: "todos", id: "t2")
        world.server.inject(.refuseConnection, on: .push)
        _ = try? await phone.sync()
        // A full re-pull of the history: pages lack t2, and t1 has not changed.
        try await phone.resetSync()
        try await phone.sync()
        #expect(try await phone.data("todos", "t1") == todo("synced"))
        #expect(try await phone.data("todos", "t2") == todo("local only"))
    }

    @Test func anUndecodableRecordGoesToQuarantineAndThePullGoesOn() async throws {
        let world = World()
        let writer = try world.device("writer")
        for i in 0..<5 { try await writer.put(todo("t\(i)"), in: "todos", id: "t\(i)") }
        try await writer.put(["title": 42], in: "todos", id: "wrong-shape")  // another app version's shape
        try await writer.sync()
        // A validator for Todo, and a page in which one element is broken on the wire.
        let reader = try world.device("reader") { $0.validate(Todo.self, in: "todos") }
        world.server.inject(.rewritePage({ bytes in
            let text = String(decoding: bytes, as: UTF8.self)
            return Array(text.replacingOccurrences(of: #""id":"t2","version":""#, with: #""id":"t2","version":"not a version"#).utf8)
        }), on: .pull, device: "reader")
        let report = try await reader.sync()
        #expect(report.quarantined == 2)
        #expect(report.pulled == 4)
        #expect(try await reader.all(Todo.self, in: "todos").count == 4, "the app's reads are not broken by the bad record")
        let quarantined = try await reader.quarantinedRecords()
        #expect(Set(quarantined.compactMap(\.id)) == ["t2", "wrong-shape"])
        #expect(quarantined.allSatisfy { !$0.reason.isEmpty && !$0.raw.isEmpty })
        #expect(try await reader.status().cursor?.seq == 6, "the cursor moved past them")
        // t2 comes right when it changes again.
        try await writer.put(todo("t2 again"), in: "todos", id: "t2")
        try await writer.sync()
        try await reader.sync()
        #expect(try await reader.get(Todo.self, from: "todos", id: "t2") == Todo(title: "t2 again"))
        for q in quarantined where q.id == "t2" { try await reader.discardQuarantined(q.number) }
        #expect(try await reader.quarantinedRecords().count == 1)
    }

    @Test func quarantinedRecordsApplyWhenTheAppLearnsTheirShape() async throws {
        try await withTemporaryDirectory { dir in
            let world = World()
            let writer = try world.device("writer")
            try await writer.put(["title": "fine", "done": false], in: "todos", id: "a")
            try await writer.put(["title": "new shape", "done": "yes"], in: "todos", id: "b")
            try await writer.sync()
            let path = dir.appending("r.sqlite")
            var reader = try world.device("reader", path: path) { $0.validate(Todo.self, in: "todos") }
            try await reader.sync()
            #expect(try await reader.quarantinedRecords().count == 1)
            await reader.close()
            // The next app version reads "done" as a string.
            struct TodoV2: Codable { var title: String; var done: String? }
            reader = try world.device("reader", path: path) { $0.validate(TodoV2.self, in: "todos") }
            #expect(try await reader.retryQuarantined() == 1)
            #expect(try await reader.data("todos", "b") == ["title": "new shape", "done": "yes"])
            #expect(try await reader.quarantinedRecords().isEmpty)
            await reader.close()
        }
    }

    @Test func aClientKilledInTheMiddleOfAPushFindsItsChangesInDoubtAndAppliesThemOnce() async throws {
        try await withTemporaryDirectory { dir in
            let world = World()
            let path = dir.appending("phone.sqlite")
            let transport = WatchedTransport(world.server.transport(device: "phone"))
            var phone = try world.device("phone", path: path, transport: transport)
            for i in 0..<50 { try await phone.put(todo("item \(i)"), in: "todos", id: "t\(i)") }
            transport.holdAnswer(of: .push)
            let sync = Task { [phone] in try await phone.sync() }
            try await transport.until("the push reaches the server, its answer held") { $0.held == 1 }
            // The process dies: nothing more runs in it; the file stays as it was.
            await phone.close()
            sync.cancel()
            _ = await sync.result
            #expect(world.server.head(space: "team") == 50, "the server applied the push")
            phone = try world.device("phone", path: path)
            let states = try await phone.queueStates()
            #expect(states.count == 50 && states.allSatisfy { $0 == .inDoubt }, "in flight at the crash: in doubt now")
            let report = try await phone.sync()
            #expect(report.pushed == 50)
            #expect(world.server.head(space: "team") == 50, "replayed, not applied twice")
            #expect(try await phone.pendingChanges().isEmpty)
            #expect(try await phone.records().allSatisfy { $0.version != nil && !$0.pending })
            await phone.close()
        }
    }

    @Test func aClientKilledInTheMiddleOfAPullResumesFromTheLastAppliedPage() async throws {
        try await withTemporaryDirectory { dir in
            let world = World()
            let writer = try world.device("writer")
            for i in 0..<40 { try await writer.put(todo("item \(i)"), in: "todos", id: String(format: "t%02d", i)) }
            try await writer.sync()
            let path = dir.appending("reader.sqlite")
            let small: (inout OutpostStore.Configuration) -> Void = { $0.pageLimit = 5 }
            let transport = WatchedTransport(world.server.transport(device: "reader"))
            var reader = try world.device("reader", path: path, transport: transport, configure: small)
            transport.holdAnswer(of: .pull, skip: 4)
            let sync = Task { [reader] in try await reader.sync() }
            try await transport.until("the fifth pull reaches the server, its answer held") { $0.held == 1 }
            await reader.close()
            sync.cancel()
            _ = await sync.result
            reader = try world.device("reader", path: path, configure: small)
            let status = try await reader.status()
            let held = try await reader.records()
            #expect(held.count == 20, "four pages were applied")
            #expect(status.cursor?.seq == held.compactMap(\.version?.seq).max(), "the cursor is where the applied pages end")
            try await reader.sync()
            #expect(try await reader.records().count == 40)
            await reader.close()
        }
    }

    @Test func aCutOffPageOrA504ChangesNothingAndTheNextSyncCatchesUp() async throws {
        let world = World()
        let writer = try world.device("writer")
        let reader = try world.device("reader")
        try await writer.put(todo("a"), in: "todos", id: "a")
        try await writer.sync()
        try await reader.sync()
        try await writer.put(todo("b"), in: "todos", id: "b")
        try await writer.sync()
        for fault in [InMemorySyncServer.Fault.cutOff, .gatewayTimeout(applied: false), .loseAnswer] {
            let cursor = try await reader.status().cursor
            world.server.inject(fault, on: .pull, device: "reader")
            await #expect(throws: OutpostError.self) { try await reader.sync() }
            #expect(try await reader.status().cursor == cursor)
            #expect(try await reader.data("todos", "b") == nil)
        }
        try await reader.sync()
        #expect(try await reader.data("todos", "b") == todo("b"))
    }
}
