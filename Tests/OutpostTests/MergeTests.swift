import Foundation
import OutpostCore
import Testing
@testable import Outpost

@Suite("Three-way merge (the default resolver)")
struct MergeTests {
    func conflict(base: JSONObject?, local: JSONObject?, server: JSONObject?, localTime: Int64 = 2_000, serverTime: Int64 = 1_000) -> Conflict {
        Conflict(collection: "c", id: "r",
                 local: LocalEdit(data: local, deleted: local == nil, clientTime: localTime, changeId: "l", clientId: "phone"),
                 server: RecordState(collection: "c", id: "r", version: Version(epoch: Epoch("E")!, seq: 2), deleted: server == nil, data: server,
                                     updatedAt: serverTime, updatedBy: "laptop", clientTime: serverTime),
                 base: base.map { ConflictBase(data: $0, deleted: false, version: Version(epoch: Epoch("E")!, seq: 1)) })
    }

    let merge = ConflictResolver.mergeFields()

    @Test func fieldsChangedOnOneSideKeepThatSidesValue() {
        let c = conflict(base: ["title": "a", "done": false, "n": 1], local: ["title": "a", "done": true, "n": 1], server: ["title": "b", "done": false, "n": 1])
        #expect(merge.resolve(c, now: 5_000) == .write(["title": "b", "done": true, "n": 1]))
    }

    @Test func aFieldChangedOnBothSidesGoesToTheFallback() {
        let base: JSONObject = ["title": "a", "done": false]
        let newerLocal = conflict(base: base, local: ["title": "mine", "done": true], server: ["title": "theirs", "done": false], localTime: 3_000)
        #expect(merge.resolve(newerLocal, now: 5_000) == .keepLocal, "last-write-wins: the local edit is later, and done changed only locally")
        let newerServer = conflict(base: base, local: ["title": "mine", "done": false], server: ["title": "theirs", "done": true], localTime: 500)
        #expect(merge.resolve(newerServer, now: 5_000) == .keepServer)
        let mixed = conflict(base: base, local: ["title": "mine", "done": true], server: ["title": "theirs", "done": false], localTime: 500)
        #expect(merge.resolve(mixed, now: 5_000) == .write(["title": "theirs", "done": true]), "the server wins the title; done changed only locally")
        let custom = ConflictResolver.mergeFields(fallback: .clientWins)
        #expect(custom.resolve(newerServer, now: 5_000) == .write(["title": "mine", "done": true]), "the fallback decides only the title")
    }

    @Test func nestedObjectsMergeAndArraysAreValues() {
        let base: JSONObject = ["address": ["city": "Oslo", "zip": "0150"], "tags": ["a"]]
        let local: JSONObject = ["address": ["city": "Oslo", "zip": "0151"], "tags": ["a", "b"]]
        let server: JSONObject = ["address": ["city": "Bergen", "zip": "0150"], "tags": ["a"]]
        #expect(merge.resolve(conflict(base: base, local: local, server: server), now: 5_000)
                == .write(["address": ["city": "Bergen", "zip": "0151"], "tags": ["a", "b"]]))
    }

    @Test func addedAndRemovedFieldsMerge() {
        let c = conflict(base: ["a": 1, "b": 2], local: ["a": 1, "b": 2, "c": 3], server: ["a": 1])
        #expect(merge.resolve(c, now: 5_000) == .write(["a": 1, "c": 3]), "the server removed b; the device added c")
    }

    @Test func aDeleteAgainstAnEditAndAConflictWithoutABaseGoToTheFallback() {
        #expect(merge.resolve(conflict(base: ["a": 1], local: nil, server: ["a": 2], localTime: 3_000), now: 5_000) == .keepLocal)
        #expect(merge.resolve(conflict(base: ["a": 1], local: ["a": 2], server: nil, localTime: 500), now: 5_000) == .keepServer)
        #expect(merge.resolve(conflict(base: nil, local: ["a": 1, "b": 1], server: ["a": 2, "b": 1], localTime: 500), now: 5_000) == .keepServer)
    }

    /// Two devices edit different fields of one record offline; the second to sync meets a
    /// conflict whose base is the copy both edits were made on, and the merge keeps both.
    @Test func twoDevicesEditingDifferentFieldsBothKeepTheirChange() async throws {
        let world = World()
        let phone = try world.device("phone", resolver: .mergeFields()), laptop = try world.device("laptop", resolver: .mergeFields())
        try await phone.put(["title": "Buy milk", "done": false, "note": ""], in: "todos", id: "t1")
        try await phone.sync()
        try await laptop.sync()
        world.clock.advance(1_000)
        try await phone.put(["title": "Buy milk", "done": true, "note": ""], in: "todos", id: "t1")
        world.clock.advance(1_000)
        try await laptop.put(["title": "Buy oat milk", "done": false, "note": ""], in: "todos", id: "t1")
        try await laptop.sync()
        let report = try await phone.sync()
        #expect(report.conflicts == 1)
        try await laptop.sync()
        let merged: JSONObject = ["title": "Buy oat milk", "done": true, "note": ""]
        #expect(world.serverData("todos", "t1") == merged)
        #expect(try await phone.data("todos", "t1") == merged)
        #expect(try await laptop.data("todos", "t1") == merged)
    }

    #if canImport(OutpostTestSupport)
    /// The same over a real server and a real SQLite file; the base is the copy the edits were
    /// made on even when the edit waited behind another of the device's own edits.
    @Test func overARealServerTheBaseIsTheCopyTheEditsWereMadeOn() async throws {
        let world = try RealWorld()
        let phone = try world.device("phone", resolver: .mergeFields()), laptop = try world.device("laptop", resolver: .mergeFields())
        try await phone.put(["title": "Buy milk", "done": false, "qty": 1], in: "todos", id: "t1")
        try await phone.sync()
        try await laptop.sync()
        try await laptop.put(["title": "Buy milk", "done": false, "qty": 2], in: "todos", id: "t1")
        try await laptop.sync()
        try await phone.put(["title": "Buy bread", "done": false, "qty": 1], in: "todos", id: "t1")
        try await phone.put(["title": "Buy bread", "done": true, "qty": 1], in: "todos", id: "t1")
        let report = try await phone.sync()
        #expect(report.conflicts == 1)
        try await laptop.sync()
        let merged: JSONObject = ["title": "Buy bread", "done": true, "qty": 2]
        #expect(try await phone.data("todos", "t1") == merged)
        #expect(try await laptop.data("todos", "t1") == merged)
    }
    #endif
}
