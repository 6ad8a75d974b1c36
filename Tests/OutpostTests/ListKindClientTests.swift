import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Synchronization
import Testing
@testable import Outpost

/// The keyed list's merge alone (`FieldKinds.mergeList`, and through
/// `ConflictResolver.mergeFields` with `Conflict.fields`): docs/rules.md, "Field kinds".
@Suite struct ListKindMergeTests {
    /// An item of a checklist.
    func item(_ id: JSONValue, done: Bool = false, note: String = "") -> JSONValue {
        ["id": id, "done": .bool(done), "note": .string(note)]
    }

    /// `mergeList` keyed by `id`, where a member changed on both sides goes to `localWins`
    /// (and fails the test when none should).
    func merged(_ base: JSONValue?, _ local: JSONValue, _ server: JSONValue, localWins: Bool? = nil,
                sourceLocation: SourceLocation = #_sourceLocation) -> JSONValue? {
        FieldKinds.mergeList(key: "id", base: base, local: local, server: server) {
            guard let localWins else {
                Issue.record("no member changed on both sides here", sourceLocation: sourceLocation)
                return false
            }
            return localWins
        }
    }

    @Test func additionsOfBothSidesAreKeptInTheServersOrderThenTheLocalOrder() {
        let base: JSONValue = [item("a")]
        #expect(merged(base, [item("a"), item("b"), item("c")], [item("x"), item("a"), item("y")])
                == [item("x"), item("a"), item("y"), item("b"), item("c")])
        // Without a base (the field is new on both sides), everything is an addition.
        #expect(merged(nil, [item("b")], [item("a")]) == [item("a"), item("b")])
    }

    @Test func aRemovalTakesAnElementTheOtherSideLeftAlone() {
        let base: JSONValue = [item("a"), item("b"), item("c")]
        // Removed locally.
        #expect(merged(base, [item("a"), item("c")], [item("a"), item("b"), item("c"), item("d")]) == [item("a"), item("c"), item("d")])
        // Removed on the server.
        #expect(merged(base, [item("a"), item("b"), item("c"), item("e")], [item("c"), item("a")]) == [item("c"), item("a"), item("e")])
        // Removed on both sides, and everything removed.
        #expect(merged(base, [item("a")], [item("a"), item("c")]) == [item("a")])
        #expect(merged(base, [], [item("b"), item("x")]) == [item("x")])
    }

    /// An edit made without seeing a removal survives it, on either side, as its side has it.
    @Test func aRemovalAgainstAnEditKeepsTheEditedElement() {
        let base: JSONValue = [item("a"), item("b"), item("c")]
        // The server ticked b, the local side removed it (and added d): b stays, ticked, where the server has it.
        #expect(merged(base, [item("a"), item("c"), item("d")], [item("a"), item("b", done: true), item("c")])
                == [item("a"), item("b", done: true), item("c"), item("d")])
        // The local side ticked b, the server removed it: b comes back after the server's list.
        #expect(merged(base, [item("a"), item("b", done: true), item("c")], [item("c"), item("a"), item("x")])
                == [item("c"), item("a"), item("x"), item("b", done: true)])
    }

    @Test func anElementBothChangedMergesMemberByMember() {
        let base: JSONValue = [item("a"), item("b")]
        // Different members of one element: both kept, and no member changed on both sides.
        #expect(merged(base, [item("a", done: true), item("b")], [item("a", note: "loose bolt"), item("b")])
                == [item("a", done: true, note: "loose bolt"), item("b")])
        // A member added on one side and one removed on the other.
        let extra: JSONValue = ["id": "a", "done": false, "note": "", "photo": "m1"]
        let noNote: JSONValue = ["id": "a", "done": false]
        #expect(merged(base, [extra, item("b")], [noNote, item("b")]) == [["id": "a", "done": false, "photo": "m1"], item("b")])
        // The same member changed on both sides: the fallback's answer, for each such member.
        let local: JSONValue = [item("a", note: "mine"), item("b", done: true, note: "mine too")]
        let server: JSONValue = [item("a", note: "theirs"), item("b", note: "theirs too")]
        #expect(merged(base, local, server, localWins: true) == [item("a", note: "mine"), item("b", done: true, note: "mine too")])
        #expect(merged(base, local, server, localWins: false) == [item("a", note: "theirs"), item("b", done: true, note: "theirs too")])
        // Both sides added the same key: an addition on each, merged the same way (against no base).
        #expect(merged([], [item("n", done: true)], [item("n", note: "x")], localWins: false) == [["id": "n", "done": false, "note": "x"]])
        // Nested objects in an element merge recursively, like a record's.
        let nb: JSONValue = [["id": "a", "at": ["lat": 1, "lon": 2]]]
        #expect(merged(nb, [["id": "a", "at": ["lat": 5, "lon": 2]]], [["id": "a", "at": ["lat": 1, "lon": 6]]])
                == [["id": "a", "at": ["lat": 5, "lon": 6]]])
    }

    @Test func aListOneSideLeftAloneIsTheOtherSidesOrderAndAll() {
        let base: JSONValue = [item("a"), item("b"), item("c")]
        // The local side only reordered (the server did not touch the list): its order stands.
        #expect(merged(base, [item("c"), item("a"), item("b")], base) == [item("c"), item("a"), item("b")])
        #expect(merged(base, base, [item("b"), item("a", done: true)]) == [item("b"), item("a", done: true)])
        // Both changed it: the server's order wins, a local reordering of shared elements does not.
        #expect(merged(base, [item("c"), item("b"), item("a"), item("d")], [item("a"), item("b"), item("c", done: true)])
                == [item("a"), item("b"), item("c", done: true), item("d")])
    }

    /// Keys compare as JSON values: numbers by their text (`1` and `1.0` are two keys), a
    /// number never equal to a string.
    @Test func numericKeysNameElementsByTheirText() {
        let base: JSONValue = [item(1), item(2), item("2")]
        #expect(merged(base, [item(1, done: true), item("2"), item(3)], [item(1, note: "x"), item(2), item("2", done: true), item(1.0)])
                == [item(1, done: true, note: "x"), item("2", done: true), item(1.0), item(3)])
        // A big integer and a fraction are keys too.
        #expect(merged([], [item(.number(JSONNumber(lexeme: "12345678901234567890")!))], [item(0.5)])
                == [item(0.5), item(.number(JSONNumber(lexeme: "12345678901234567890")!))])
    }

    @Test func aSideThatIsNoKeyedListMergesAsAnyValue() {
        #expect(merged([], ["a"], [item("a")]) == nil)
        #expect(merged([], [item("a")], [["done": true]]) == nil, "an element without its key")
        #expect(merged([], [item("a"), item("a")], []) == nil, "a key twice")
        #expect(merged([], [item(true)], []) == nil, "a key that is neither a string nor a number")
        #expect(merged([], "a", []) == nil)
        // A base of another shape counts only the elements it can name.
        #expect(merged(["x", item("a"), ["id": nil]], [item("b")], [item("a")]) == [item("b")], "a: left alone locally, removed")
    }

    // MARK: Through the resolver

    func conflict(base: JSONObject, local: JSONObject, server: JSONObject, fields: [String: FieldKind] = ["checklist": .list(key: "id")]) -> Conflict {
        Conflict(collection: "inspections", id: "i", local: LocalEdit(data: local, deleted: false, clientTime: 2, changeId: "c", clientId: "me"),
                 server: RecordState(collection: "inspections", id: "i", version: Version(epoch: Epoch("e1")!, seq: 2), deleted: false, data: server,
                                     updatedAt: 3, updatedBy: "other", clientTime: 3),
                 base: ConflictBase(data: base, deleted: false, version: Version(epoch: Epoch("e1")!, seq: 1)), fields: fields)
    }

    /// `.mergeFields` merges a declared list by element, asking its fallback once for every
    /// member changed on both sides, of the list's elements and of the record alike.
    @Test func mergeFieldsMergesADeclaredListAndAsksItsFallbackOnce() {
        let asked = AskCount()
        let merge = ConflictResolver.mergeFields(fallback: .custom { _ in asked.add(); return .keepServer })
        let base: JSONObject = ["title": "pump", "checklist": [item("a"), item("b")]]
        let local: JSONObject = ["title": "pump A", "checklist": [item("a", done: true, note: "mine"), item("b"), item("c")]]
        let server: JSONObject = ["title": "pump B", "checklist": [item("a", note: "theirs"), item("d")]]
        #expect(merge.resolve(conflict(base: base, local: local, server: server), now: 5)
                == .write(["title": "pump B", "checklist": [item("a", done: true, note: "theirs"), item("d"), item("c")]]))
        #expect(asked.value == 1, "one answer for the title and the note")
        // Without the declaration, the list is one value changed on both sides: the fallback's.
        #expect(merge.resolve(conflict(base: base, local: local, server: server, fields: [:]), now: 5) == .keepServer)
        // Nothing changed on both sides: the fallback is not asked.
        let quiet = AskCount()
        let merge2 = ConflictResolver.mergeFields(fallback: .custom { _ in quiet.add(); return .keepServer })
        #expect(merge2.resolve(conflict(base: base, local: ["title": "pump", "checklist": [item("a", done: true), item("b")]],
                                        server: ["title": "pump", "checklist": [item("a", note: "n"), item("b")]]), now: 5)
                == .write(["title": "pump", "checklist": [item("a", done: true, note: "n"), item("b")]]))
        #expect(quiet.value == 0)
    }

    @Test func theWireFormIsReadLenientlyAndWrittenAsTheRulesFileSpellsIt() throws {
        let text = #"{"i": {"c": {"list": "id"}, "n": "counter", "x": {"list": 3}, "y": {"list": ""}, "z": {"list": "id", "order": "asc"}, "w": {"map": "id"}}}"#
        let kinds = FieldKinds(json: try JSONParser.parse(Array(text.utf8)))
        #expect(kinds == FieldKinds(["i": ["c": .list(key: "id"), "n": .counter]]), "an object form this version does not know merges as lww")
        #expect(String(decoding: kinds.encoded(), as: UTF8.self) == #"{"i":{"c":{"list":"id"},"n":"counter"}}"#)
        #expect(FieldKinds(json: kinds.json) == kinds)
        #expect(FieldKind(json: "list") == nil, "a list needs its key")
        #expect(kinds.violation(collection: "i", data: ["c": [["id": "a"], ["id": 1]]]) == nil)
        let repeated = kinds.violation(collection: "i", data: ["c": [["id": "a"], ["id": "a"]]])
        #expect(repeated?.path == "/c/1/id" && repeated?.kind == .list(key: "id") && repeated?.reason == "repeats the key of /c/0: a list's keys are unique")
    }
}

/// A count the fallback's closure can raise from a `@Sendable` closure.
final class AskCount: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

#if canImport(OutpostTestSupport)
/// A keyed list over a real `outpost-server` on SQLite and on PostgreSQL: two inspectors
/// (real SQLite files) tick different items of one checklist and edit the same item
/// offline, one of them restarting before it syncs; both end with every edit.
@Suite(.offPoolWhileBlocking) struct ListKindClientTests {
    static let rules = #"""
    {"collections": {"inspections": {"read": "true", "write": "true", "fields": {"checklist": {"list": "id"}}}},
     "default": {"read": "true", "write": "true"}}
    """#

    func server(_ dir: TemporaryDirectory, postgres: Bool) async throws -> ServerProcess {
        try await rulesServer(dir, rules: Self.rules, postgres: postgres, prefix: "lists")
    }

    func device(_ name: String, _ server: ServerProcess, _ dir: TemporaryDirectory) throws -> OutpostStore {
        var c = OutpostStore.Configuration(space: "team")
        c.clientId = name
        c.durability = .normal
        c.randomSeed = World.seed(of: name)
        // The fallback of a member both changed is serverWins here: an edit's time is the
        // server's clock as each device measured it, a few milliseconds apart between two
        // devices, so last-write-wins between edits made a millisecond apart is a race.
        c.resolver = .mergeFields(fallback: .serverWins)
        return try OutpostStore(path: dir.appending("\(name).sqlite"), configuration: c,
                                transport: HTTPSyncTransport(baseURL: server.baseURL, token: try server.token(sub: name, spaces: ["team"])))
    }

    func item(_ id: String, done: Bool = false, note: String = "") -> JSONValue {
        ["id": .string(id), "done": .bool(done), "note": .string(note)]
    }

    @Test(arguments: [false, true])
    func twoInspectorsTickingOneChecklistOfflineLoseNothing(postgres: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-lists")
        defer { dir.remove() }
        let server = try await server(dir, postgres: postgres)
        defer { server.stop() }
        let phone = try device("phone", server, dir)
        var tablet = try device("tablet", server, dir)

        let start: JSONObject = ["site": "pump 4", "checklist": [item("a"), item("b"), item("c"), item("f"), item("g")]]
        try await phone.put(start, in: "inspections", id: "i1")
        try await phone.sync()
        try await tablet.sync()
        #expect(try await tablet.data("inspections", "i1") == start)

        // Offline. The phone ticks a, notes c, notes g, removes f and adds d.
        try await phone.put(["site": "pump 4", "checklist": [item("a", done: true), item("b"), item("c", note: "loose bolt"),
                                                               item("g", note: "check again"), item("d")]], in: "inspections", id: "i1")
        // The tablet ticks b and c (the item the phone noted), removes g (which the phone
        // noted meanwhile) and adds e; then it restarts, and merges by the kinds it keeps.
        try await tablet.put(["site": "pump 4", "checklist": [item("a"), item("b", done: true), item("c", done: true), item("f"), item("e")]],
                             in: "inspections", id: "i1")
        await tablet.close()
        tablet = try device("tablet", server, dir)

        try await phone.sync()
        #expect(try await tablet.sync().conflicts == 1)
        try await phone.sync()
        // The server's order (the phone's list), then the tablet's addition; f removed by the
        // phone, g kept with the phone's note though the tablet removed it.
        let expected: JSONObject = ["site": "pump 4", "checklist": [item("a", done: true), item("b", done: true),
                                                                    item("c", done: true, note: "loose bolt"), item("g", note: "check again"),
                                                                    item("d"), item("e")]]
        #expect(try await phone.data("inspections", "i1") == expected)
        #expect(try await tablet.data("inspections", "i1") == expected)

        // Both note the same item: that member goes to the fallback (the server's: the
        // phone's, pushed first); the tablet's tick of another item stays, and the phone's.
        var phoneEdit = expected, tabletEdit = expected
        phoneEdit["checklist"] = [item("a", done: true, note: "phone"), item("b", done: true), item("c", done: true, note: "loose bolt"),
                                  item("g", done: true, note: "check again"), item("d"), item("e")]
        tabletEdit["checklist"] = [item("a", done: true, note: "tablet"), item("b", done: true), item("c", done: true, note: "loose bolt"),
                                   item("g", note: "check again"), item("d"), item("e", done: true)]
        try await phone.put(phoneEdit, in: "inspections", id: "i1")
        try await tablet.put(tabletEdit, in: "inspections", id: "i1")
        try await phone.sync()
        #expect(try await tablet.sync().conflicts == 1)
        try await phone.sync()
        var final = expected
        final["checklist"] = [item("a", done: true, note: "phone"), item("b", done: true), item("c", done: true, note: "loose bolt"),
                              item("g", done: true, note: "check again"), item("d"), item("e", done: true)]
        let onPhone = try await phone.data("inspections", "i1"), onTablet = try await tablet.data("inspections", "i1")
        #expect(onPhone == final, "\(onPhone ?? [:])")
        #expect(onTablet == final, "\(onTablet ?? [:])")

        // What converged is what the files hold: the phone reopened reads the same.
        await phone.close()
        let reopened = try device("phone", server, dir)
        #expect(try await reopened.data("inspections", "i1") == final)
        #expect(try await reopened.sync().conflicts == 0)
        await reopened.close()
        await tablet.close()
    }
}
#endif
