import OutpostCore
import Testing
@testable import Outpost

@Suite("Two and three devices on the in-memory server")
struct TwoDeviceTests {
    @Test func phoneWritesLaptopReceives() async throws {
        let world = World()
        let phone = try world.device("phone")
        let laptop = try world.device("laptop")
        try await phone.save(Todo(title: "Buy milk"), in: "todos", id: "t1")
        #expect(world.server.pushRequests == 0, "a save never touches the network")
        let pushed = try await phone.sync()
        #expect(pushed.pushed == 1)
        let pulled = try await laptop.sync()
        #expect(pulled.pulled == 1)
        #expect(try await laptop.get(Todo.self, from: "todos", id: "t1") == Todo(title: "Buy milk"))
        let record = try #require(try await laptop.record(in: "todos", id: "t1"))
        #expect(record.version == world.server.record(space: "team", collection: "todos", id: "t1")?.version)
        #expect(record.pending == false)
        #expect(try await phone.pendingChanges().isEmpty)
    }

    @Test func threeDevicesConvergeOnEditsAndTombstones() async throws {
        let world = World()
        let a = try world.device("a"), b = try world.device("b"), c = try world.device("c")
        for i in 0..<5 { try await a.put(todo("a\(i)"), in: "todos", id: "a\(i)") }
        for i in 0..<5 { try await b.put(todo("b\(i)"), in: "todos", id: "b\(i)") }
        try await a.sync(); try await b.sync(); try await c.sync(); try await a.sync()
        try await c.delete(from: "todos", id: "a0")
        try await c.put(todo("b1 edited"), in: "todos", id: "b1")
        try await c.sync(); try await a.sync(); try await b.sync()
        for store in [a, b, c] {
            let ids = try await store.records(in: "todos").map(\.id)
            #expect(ids == ["a1", "a2", "a3", "a4", "b0", "b1", "b2", "b3", "b4"])
            #expect(try await store.data("todos", "b1") == todo("b1 edited"))
            let tomb = try #require(try await store.record(in: "todos", id: "a0"))
            #expect(tomb.deleted)
        }
    }
}
