import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import Outpost

#if canImport(OutpostTestSupport)
/// Field kinds (docs/rules.md, "Field kinds"): the rules file declares a counter and a set,
/// the server serves the declarations in its pages, and two devices (real SQLite files)
/// that changed them offline end alike, over a real `outpost-server` on SQLite and on
/// PostgreSQL.
@Suite(.offPoolWhileBlocking) struct FieldKindsClientTests {
    static let rules = #"""
    {"collections": {"items": {"read": "true", "write": "true",
                               "fields": {"stock": "counter", "tags": "set", "totals.weight": "counter"}}},
     "default": {"read": "true", "write": "true"}}
    """#

    /// A server with the rules above, on SQLite or on a PostgreSQL database of its own.
    func server(_ dir: TemporaryDirectory, postgres: Bool) async throws -> ServerProcess {
        try await rulesServer(dir, rules: Self.rules, postgres: postgres, prefix: "kinds")
    }

    func device(_ name: String, _ server: ServerProcess, _ dir: TemporaryDirectory) throws -> OutpostStore {
        var c = OutpostStore.Configuration(space: "team")
        c.clientId = name
        c.durability = .normal
        // Seeded per device: two devices seeded alike made the same change id when both
        // put the same data in the same millisecond, and the server answered the second
        // as a replay of the first (a decrement lost, under load, on PostgreSQL).
        c.randomSeed = World.seed(of: name)
        c.resolver = .mergeFields()
        return try OutpostStore(path: dir.appending("\(name).sqlite"), configuration: c,
                                transport: HTTPSyncTransport(baseURL: server.baseURL, token: try server.token(sub: name, spaces: ["team"])))
    }

    /// Runs `body` with a server (on SQLite or PostgreSQL) and two devices, phone and tablet;
    /// `open` opens a device's store again.
    func withTwoDevices(postgres: Bool, _ body: (_ phone: OutpostStore, _ tablet: OutpostStore, _ open: (String) throws -> OutpostStore) async throws -> Void) async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-kinds")
        defer { dir.remove() }
        let server = try await server(dir, postgres: postgres)
        defer { server.stop() }
        let phone = try device("phone", server, dir), tablet = try device("tablet", server, dir)
        try await body(phone, tablet) { try device($0, server, dir) }
    }

    @Test(arguments: [false, true])
    func twoDevicesDecrementingACounterOfflineBothEndAtSeven(postgres: Bool) async throws {
        try await withTwoDevices(postgres: postgres) { phone, tablet, open in
            try await phone.put(["name": "bolts", "stock": 10, "totals": ["weight": 2.5, "note": "box"]], in: "items", id: "i1")
            try await phone.sync()
            try await tablet.sync()
            #expect(try await tablet.data("items", "i1")?["stock"] == 10)

            // The tablet closes; it must merge by the kinds it pulled before, offline after a restart.
            await tablet.close()
            let reopened = try open("tablet")
            // Offline: the phone takes one, the tablet two (and adds weight on both sides, a double).
            try await phone.put(["name": "bolts", "stock": 9, "totals": ["weight": 3.0, "note": "box"]], in: "items", id: "i1")
            try await reopened.put(["name": "bolts", "stock": 8, "totals": ["weight": 2.5, "note": "crate"]], in: "items", id: "i1")
            try await phone.sync()
            let merged = try await reopened.sync()
            #expect(merged.conflicts == 1)
            try await phone.sync()
            let expected: JSONObject = ["name": "bolts", "stock": 7, "totals": ["weight": 3.0, "note": "crate"]]
            #expect(try await phone.data("items", "i1") == expected)
            #expect(try await reopened.data("items", "i1") == expected)
            #expect(try await reopened.data("items", "i1")?["stock"]?.numberValue?.lexeme == "7", "an integer counter stays an integer")

            // Both take the same count away: each change counts (10 → 9 on both makes 8, not 9).
            try await phone.put(["name": "bolts", "stock": 6, "totals": ["weight": 3.0, "note": "crate"]], in: "items", id: "i1")
            try await reopened.put(["name": "bolts", "stock": 6, "totals": ["weight": 3.0, "note": "crate"]], in: "items", id: "i1")
            let first = try await phone.sync()
            let second = try await reopened.sync()
            let third = try await phone.sync()
            let reports = "phone \(first), tablet \(second), phone \(third)"
            let onPhone = try await phone.data("items", "i1"), onTablet = try await reopened.data("items", "i1")
            #expect(onPhone?["stock"] == 5, "\(onPhone ?? [:]); \(reports)")
            #expect(onTablet?["stock"] == 5, "\(onTablet ?? [:]); \(reports)")
            await phone.close()
            await reopened.close()
        }
    }

    @Test(arguments: [false, true])
    func aSetKeepsTheAdditionsAndRemovalsOfBothDevices(postgres: Bool) async throws {
        try await withTwoDevices(postgres: postgres) { phone, tablet, open in
            try await phone.put(["tags": ["red", "blue", "green"], "title": "crate"], in: "items", id: "i2")
            try await phone.sync()
            try await tablet.sync()
            // The phone removes blue and adds big; the tablet removes green and adds wet and 3.
            try await phone.put(["tags": ["red", "green", "big"], "title": "crate"], in: "items", id: "i2")
            try await tablet.put(["tags": ["wet", "red", "blue", 3], "title": "crate"], in: "items", id: "i2")
            try await phone.sync()
            #expect(try await tablet.sync().conflicts == 1)
            try await phone.sync()
            // The server's order (the phone's copy), then the tablet's additions in its order.
            let expected: JSONObject = ["tags": ["red", "big", "wet", 3], "title": "crate"]
            #expect(try await phone.data("items", "i2") == expected)
            #expect(try await tablet.data("items", "i2") == expected)
            await phone.close()
            await tablet.close()
        }
    }

    /// Without a declaration, the same edits go to last-write-wins: what the kinds change.
    @Test func withoutTheDeclarationTheCounterIsLastWriteWins() async throws {
        try await withTwoDevices(postgres: false) { phone, tablet, open in
            try await phone.put(["stock": 10], in: "plain", id: "p1")
            try await phone.sync()
            try await tablet.sync()
            try await phone.put(["stock": 9], in: "plain", id: "p1")
            try await tablet.put(["stock": 8], in: "plain", id: "p1")
            try await phone.sync()
            try await tablet.sync()
            try await phone.sync()
            let stock = try await phone.data("plain", "p1")?["stock"]
            #expect(stock == 8 || stock == 9)
            await phone.close()
            await tablet.close()
        }
    }
}
#endif

/// The merge by kind, alone (`ConflictResolver.mergeFields` with `Conflict.fields`).
@Suite struct FieldKindsMergeTests {
    func conflict(base: JSONObject, local: JSONObject, server: JSONObject, fields: [String: FieldKind]) -> Conflict {
        Conflict(collection: "items", id: "i", local: LocalEdit(data: local, deleted: false, clientTime: 2, changeId: "c", clientId: "me"),
                 server: RecordState(collection: "items", id: "i", version: Version(epoch: Epoch("e1")!, seq: 2), deleted: false, data: server,
                                     updatedAt: 3, updatedBy: "other", clientTime: 3),
                 base: ConflictBase(data: base, deleted: false, version: Version(epoch: Epoch("e1")!, seq: 1)), fields: fields)
    }

    @Test func countersAddUpIntegersStayIntegersAndAMissingBaseCountsZero() {
        let merge = ConflictResolver.mergeFields()
        let kinds: [String: FieldKind] = ["n": .counter, "a.b": .counter]
        #expect(merge.resolve(conflict(base: ["n": 10], local: ["n": 8], server: ["n": 9], fields: kinds), now: 5) == .write(["n": 7]))
        #expect(merge.resolve(conflict(base: ["n": 10], local: ["n": 9], server: ["n": 9], fields: kinds), now: 5) == .write(["n": 8]))
        #expect(merge.resolve(conflict(base: [:], local: ["n": 2], server: ["n": 3], fields: kinds), now: 5) == .write(["n": 5]))
        #expect(merge.resolve(conflict(base: ["a": ["b": 1.5]], local: ["a": ["b": 2]], server: ["a": ["b": 1]], fields: kinds), now: 5)
                == .write(["a": ["b": 1.5]]))
        // A value of another shape merges as any field would (here: the fallback picks one).
        let odd = merge.resolve(conflict(base: ["n": 10], local: ["n": "x"], server: ["n": 9], fields: kinds), now: 5)
        #expect(odd == .keepLocal || odd == .keepServer)
        #expect(FieldKinds.mergeCounter(base: 0, local: .number(JSONNumber(Int64.max)), server: 1) == .number(JSONNumber(Double(Int64.max) + 1)))
    }

    @Test func setsTakeBothSidesAdditionsAndRemovalsInTheServersOrderThenLocalAdditions() {
        #expect(FieldKinds.mergeSet(base: ["a", "b", "c"], local: ["a", "c", "d"], server: ["c", "a", "e", "b"]) == ["c", "a", "e", "d"])
        #expect(FieldKinds.mergeSet(base: nil, local: ["x", "x", "y"], server: ["y"]) == ["y", "x"])
        #expect(FieldKinds.mergeSet(base: ["a"], local: [], server: []) == [])
        #expect(FieldKinds.mergeSet(base: ["a"], local: "a", server: []) == nil)
    }

    @Test func theWireFormIsReadLenientlyAndDeclarationsAreChecked() throws {
        let kinds = FieldKinds(json: try JSONParser.parse(Array(#"{"items": {"n": "counter", "t": "set", "z": "max", "w": "lww"}, "x": 3}"#.utf8)))
        #expect(kinds == FieldKinds(["items": ["n": .counter, "t": .set]]), "an unknown kind merges as lww")
        #expect(kinds.violation(collection: "items", data: ["n": 1, "t": ["a", 1, true]]) == nil)
        #expect(kinds.violation(collection: "items", data: [:]) == nil, "a declaration does not make a field required")
        #expect(kinds.violation(collection: "items", data: ["n": "1"])?.path == "/n")
        #expect(kinds.violation(collection: "items", data: ["t": ["a", ["b": 1]]])?.path == "/t")
        #expect(kinds.violation(collection: "items", data: ["t": [nil]])?.kind == .set)
        #expect(kinds.violation(collection: "other", data: ["n": "1"]) == nil)
    }
}
