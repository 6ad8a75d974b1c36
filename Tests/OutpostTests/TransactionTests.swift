import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import Outpost

/// The write block (`OutpostStore.transaction`): many saves and deletes in one commit, all or
/// nothing, in order, observers told once; over a real SQLite file and a real server.
@Suite("Write blocks", .offPoolWhileBlocking, .serverLogs)
struct TransactionTests {
    struct Item: Codable, Hashable, Sendable {
        var name: String
        var quantity: Int
    }

    /// A value that does not encode as a JSON object.
    struct NotAnObject: Encodable, Sendable {
        func encode(to encoder: any Encoder) throws {
            var c = encoder.singleValueContainer()
            try c.encode(3)
        }
    }

    static func key(_ c: String, _ id: String) -> RecordKey { RecordKey(collection: c, id: id) }

    @Test func aBlockCommitsEveryEditAtOnceInOrderAndTellsObserversOnce() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("app.sqlite")
            var configuration = OutpostStore.Configuration(space: "team")
            configuration.durability = .normal
            let store = try OutpostStore(path: path, configuration: configuration)
            let items = store.collection("items", of: Item.self)
            try await store.put(["name": "old draft"], in: "drafts", id: "d1")
            var events = await store.observe(collection: "items").makeAsyncIterator()
            var drafts = await store.observe(collection: "drafts").makeAsyncIterator()

            let made = try await store.transaction { tx in
                for i in 0..<5 { try tx.save(Item(name: "item \(i)", quantity: i), id: "i\(i)", in: items) }
                try tx.put(["title": "count"], in: "counts", id: "c1")
                try tx.delete(from: "drafts", id: "d1")
                try tx.delete(from: "drafts", id: "never-there")
                try tx.save(Item(name: "item 0, again", quantity: 10), id: "i0", in: items)
                return tx.count
            }
            #expect(made == 9)

            let event = await events.next()
            #expect(event?.origin == .local)
            #expect(event?.keys == (0..<5).map { Self.key("items", "i\($0)") }, "one event, each record once, in the block's order")
            #expect(await drafts.next()?.keys == [Self.key("drafts", "d1")])
            // The next events are the next saves': the block told observers once.
            try await store.put(["name": "after"], in: "drafts", id: "d2")
            try await items.save(Item(name: "after", quantity: 0), id: "i9")
            #expect(await events.next()?.keys == [Self.key("items", "i9")])
            #expect(await drafts.next()?.keys == [Self.key("drafts", "d2")])

            #expect(try await items.get("i0") == Item(name: "item 0, again", quantity: 10))
            #expect(try await store.record(in: "drafts", id: "d1") == nil)
            let queue = try await store.pendingChanges()
            #expect(queue.map { "\($0.collection)/\($0.id)/\($0.op)" } == (0..<5).map { "items/i\($0)/put" } + ["counts/c1/put", "drafts/d2/put", "items/i9/put"],
                    "queue order is the block's (i0's second save folds into its first); a draft never sent and deleted leaves nothing")
            await store.close()

            // The file holds it all after a reopen.
            let reopened = try OutpostStore(path: path, configuration: configuration)
            #expect(try await reopened.collection("items", of: Item.self).count() == 6)
            #expect(try await reopened.pendingChanges().count == queue.count)
            await reopened.close()
        }
    }

    @Test func aBlockThatThrowsOrCannotEncodeWritesNothing() async throws {
        struct Stop: Error {}
        try await withTemporaryDirectory { dir in
            let store = try OutpostStore(path: dir.appending("app.sqlite"), configuration: .init(space: "team"))
            let items = store.collection("items", of: Item.self)
            try await items.save(Item(name: "kept", quantity: 1), id: "k")
            let before = try await store.pendingChanges()

            await #expect(throws: Stop.self) {
                try await store.transaction { tx in
                    try tx.save(Item(name: "lost", quantity: 2), id: "k", in: items)
                    try tx.save(Item(name: "new", quantity: 3), id: "n", in: items)
                    throw Stop()
                }
            }
            await #expect(throws: OutpostError.self) {
                try await store.transaction { tx in
                    try tx.save(Item(name: "lost", quantity: 2), id: "k", in: items)
                    try tx.save(NotAnObject(), in: "items", id: "bad")
                }
            }
            await #expect(throws: OutpostError.invalidName("invalid record id: 1 to 256 bytes of UTF-8, no control characters")) {
                try await store.transaction { tx in
                    try tx.delete(from: "items", id: "k")
                    try tx.put(["a": 1], in: "items", id: "")
                }
            }
            #expect(try await items.get("k") == Item(name: "kept", quantity: 1))
            #expect(try await items.get("n") == nil)
            #expect(try await store.pendingChanges() == before)
            await store.close()
        }
    }

    /// A typed save in a block keeps the fields the app's type does not know, as `save`.
    @Test func aTypedSaveInABlockKeepsFieldsTheTypeDoesNotKnow() async throws {
        try await withTemporaryDirectory { dir in
            let store = try OutpostStore(path: dir.appending("app.sqlite"), configuration: .init(space: "team"))
            try await store.put(["name": "pump", "quantity": 1, "addedByV2": "keep me"], in: "items", id: "p")
            let items = store.collection("items", of: Item.self)
            _ = try await items.get("p")
            try await store.transaction { tx in try tx.save(Item(name: "pump", quantity: 2), id: "p", in: items) }
            #expect(try await store.record(in: "items", id: "p")?.data == ["name": "pump", "quantity": 2, "addedByV2": "keep me"])
            await store.close()
        }
    }

    #if canImport(OutpostTestSupport)
    /// The block's edits reach another device through a real server, all of them.
    @Test func aBlocksEditsSyncToAnotherDevice() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-transaction")
        defer { dir.remove() }
        let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data")) }
        defer { server.stop() }
        let token = try server.token(sub: "u", spaces: ["team"])
        let phone = try serverDevice("phone", server, dir, token: token, space: "team", seed: 5)
        let laptop = try serverDevice("laptop", server, dir, token: token, space: "team", seed: 5)
        let items = phone.collection("items", of: Item.self)
        try await phone.transaction { tx in
            for i in 0..<300 { try tx.save(Item(name: "item \(i)", quantity: i), id: String(format: "i%03d", i), in: items) }
            try tx.delete(from: "items", id: "i007")
        }
        let report = try await phone.sync()
        #expect(report.pushed == 299, "a create deleted before it was sent is never sent")
        try await laptop.sync()
        let there = try await laptop.collection("items", of: Item.self).sorted(by: .descending("quantity")).limit(2).fetch()
        #expect(there.map(\.id) == ["i299", "i298"])
        #expect(try await laptop.collection("items", of: Item.self).count() == 299)
        await phone.close()
        await laptop.close()
    }
    #endif
}
