import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import Outpost

// Fields an app does not know survive its saves (docs/client.md). Each test uses types and
// collections of its own: what a type reads is kept per process, by type and collection.

/// What one decode of `type` from `json` reads, and the value.
private func recorded<T: Decodable>(_ type: T.Type, _ json: JSONObject, decoder: JSONDecoder = JSONDecoder()) throws -> (T, KnownFields) {
    let r = try JSONValue.object(json).decode(Recorded<T>.self, decoder: decoder)
    return (r.value, r.fields)
}

@Suite("Fields an app does not know: which keys a type reads")
struct KeyRecordingTests {
    struct Site: Codable, Equatable { var name: String; var floor: Int? }
    struct Report: Codable, Equatable {
        var title: String
        var note: String?
        var site: Site
        var backup: Site?
        var tags: [String]
        var counts: [String: Int]
    }

    @Test func nestedObjectsAndOptionalsAreNotedKeyByKey() throws {
        let json: JSONObject = ["title": "Pump", "site": ["name": "North", "gps": "51.5,-0.1"], "tags": ["a"], "counts": ["x": 1],
                                "priority": 2]
        let (value, fields) = try recorded(Report.self, json)
        #expect(value == Report(title: "Pump", note: nil, site: Site(name: "North", floor: nil), backup: nil, tags: ["a"], counts: ["x": 1]))
        // `note` and `backup` were asked for (decodeIfPresent) but absent; `site.floor` too.
        #expect(fields == .keys(["title": .whole, "note": .unopened, "backup": .unopened, "tags": .whole, "counts": .whole,
                                 "site": .keys(["name": .whole, "floor": .unopened])]))
        let (_, withBackup) = try recorded(Report.self, json.merging(["note": "n", "backup": ["name": "South", "floor": 3]]))
        #expect(withBackup == .keys(["title": .whole, "note": .whole, "tags": .whole, "counts": .whole,
                                     "site": .keys(["name": .whole, "floor": .unopened]), "backup": .keys(["name": .whole, "floor": .whole])]))
        #expect(fields.union(withBackup) == withBackup.union(fields))
    }

    /// A custom `init(from:)`: `contains` alone notes the key; a nested keyed container, a
    /// super decoder and an unkeyed container of keyed elements are noted under their keys.
    struct Custom: Decodable, Equatable {
        struct Item: Decodable, Equatable { var sku: String }
        enum Keys: String, CodingKey { case legacy, meta, author, items, unread }
        enum MetaKeys: String, CodingKey { case created }
        var hasLegacy: Bool
        var created: Int
        var author: Site
        var items: [Item]

        init(hasLegacy: Bool, created: Int, author: Site, items: [Item]) {
            (self.hasLegacy, self.created, self.author, self.items) = (hasLegacy, created, author, items)
        }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: Keys.self)
            hasLegacy = c.contains(.legacy)
            created = try c.nestedContainer(keyedBy: MetaKeys.self, forKey: .meta).decode(Int.self, forKey: .created)
            author = try Site(from: c.superDecoder(forKey: .author))
            var list = try c.nestedUnkeyedContainer(forKey: .items)
            var items: [Item] = []
            while !list.isAtEnd { items.append(try list.decode(Item.self)) }
            self.items = items
        }
    }

    @Test func customDecodersAreNotedThroughEveryContainer() throws {
        let json: JSONObject = ["meta": ["created": 5, "by": "x"], "author": ["name": "Ann", "age": 40],
                                "items": [["sku": "a", "qty": 1], ["sku": "b"]], "other": true]
        let (value, fields) = try recorded(Custom.self, json)
        #expect(value == Custom(hasLegacy: false, created: 5, author: Site(name: "Ann", floor: nil), items: [.init(sku: "a"), .init(sku: "b")]))
        // An array is one value: its elements' keys are not noted.
        #expect(fields == .keys(["legacy": .unopened, "meta": .keys(["created": .whole]), "author": .keys(["name": .whole, "floor": .unopened]),
                                 "items": .whole]))
    }

    /// A type that lists `allKeys` reads everything at that level; an enum with associated
    /// values (synthesized) does so.
    enum Shape: Codable, Equatable { case circle(radius: Double), square(side: Double) }
    struct Drawing: Codable, Equatable { var shape: Shape; var label: String }

    @Test func allKeysReadsTheWholeLevel() throws {
        let (value, fields) = try recorded(Drawing.self, ["shape": ["circle": ["radius": 2]], "label": "c", "z": 1])
        #expect(value == Drawing(shape: .circle(radius: 2), label: "c"))
        #expect(fields == .keys(["shape": .whole, "label": .whole]))
    }

    /// A string-keyed dictionary reads every key: a type that is one is read whole, and its
    /// save puts exactly what it encodes.
    @Test func aDictionaryTypeIsReadWhole() throws {
        let (value, fields) = try recorded([String: Int].self, ["a": 1, "b": 2])
        #expect(value == ["a": 1, "b": 2] && fields == .whole)
        let known = TypeFields(fields: fields, keyStrategy: .useDefaultKeys)
        #expect(known.put(["a": 3], over: ["a": 1, "b": 2]).object == ["a": 3])
    }

    /// The app's decoder decodes: its date strategy and key strategy apply as without
    /// recording, and an optional struct and a wrapper around a struct are noted.
    struct Wrapped: Codable, Equatable {
        var inner: Site
        init(inner: Site) { self.inner = inner }
        init(from decoder: any Decoder) throws { inner = try decoder.singleValueContainer().decode(Site.self) }
    }
    struct Dated: Codable, Equatable { var createdAt: Date; var lastSite: Site?; var wrapped: Wrapped }

    @Test func theAppsDecoderStrategiesApply() throws {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        let json: JSONObject = ["created_at": "2026-01-02T03:04:05Z", "last_site": ["name": "N", "floor_no": 1], "wrapped": ["name": "W"]]
        let (value, fields) = try recorded(Dated.self, json, decoder: decoder)
        #expect(value == Dated(createdAt: Date(timeIntervalSince1970: 1_767_323_045), lastSite: Site(name: "N", floor: nil), wrapped: Wrapped(inner: Site(name: "W"))))
        #expect(fields == .keys(["createdAt": .whole, "lastSite": .keys(["name": .whole, "floor": .unopened]),
                                 "wrapped": .keys(["name": .whole, "floor": .unopened])]))
    }

    /// The names a JSON key has under `convertFromSnakeCase` are Foundation's own.
    @Test func snakeCaseNamesAreTheDecodersOwn() throws {
        struct Names: Decodable {
            struct Key: CodingKey {
                var stringValue: String
                var intValue: Int? { nil }
                init?(stringValue: String) { self.stringValue = stringValue }
                init?(intValue: Int) { nil }
            }
            var names: [String]
            init(from decoder: any Decoder) throws { names = try decoder.container(keyedBy: Key.self).allKeys.map(\.stringValue) }
        }
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        for key in ["first_name", "_leading", "trailing_", "__both_x_y__", "already", "camelCase_tail", "URL_value", "a__b", "ALL_CAPS", "_", "", "x_1_y"] {
            let names = try JSONValue.object([key: 1]).decode(Names.self, decoder: decoder).names
            #expect(names == [TypeFields.fromSnakeCase(key)], "\(key)")
        }
    }
}

@Suite("Fields an app does not know: the put of a typed save")
struct FieldMergeTests {
    let known = TypeFields(fields: .keys(["title": .whole, "note": .unopened, "site": .keys(["name": .whole]), "tags": .whole]),
                           keyStrategy: .useDefaultKeys)
    let base: JSONObject = ["title": "Pump", "note": "old", "site": ["name": "North", "gps": "51.5"], "tags": ["a", "b"], "priority": 2]

    @Test func unknownFieldsAreKeptAtEveryLevelAndClearedOnesRemoved() {
        let (put, incomplete) = known.put(["title": "Pump 2", "site": ["name": "North gate"], "tags": ["a"]], over: base)
        #expect(put == ["title": "Pump 2", "site": ["name": "North gate", "gps": "51.5"], "tags": ["a"], "priority": 2])
        #expect(put["note"] == nil, "the type reads note and the app left it out")
        #expect(!incomplete)
        // The app's explicit null wins; an array is the app's.
        #expect(known.put(["title": "T", "note": nil, "site": ["name": "N"], "tags": []], over: base).object
                == ["title": "T", "note": nil, "site": ["name": "N", "gps": "51.5"], "tags": [], "priority": 2])
        // A whole object the app clears goes, with its unknown members.
        #expect(known.put(["title": "T", "tags": []], over: base).object == ["title": "T", "tags": [], "priority": 2])
    }

    @Test func anObjectUnderAKeyNeverOpenedIsKeptAndMarkedIncomplete() {
        let base: JSONObject = ["title": "T", "note": ["text": "x", "by": "y"]]
        let (put, incomplete) = known.put(["title": "T", "note": ["text": "z"]], over: base)
        #expect(put == ["title": "T", "note": ["text": "z", "by": "y"]])
        #expect(incomplete)
    }

    @Test func keyStrategiesNameJSONKeysAsTheType() {
        let snake = TypeFields(fields: .keys(["firstName": .whole, "homeSite": .keys(["roomNo": .whole])]), keyStrategy: .convertFromSnakeCase)
        let base: JSONObject = ["first_name": "A", "last_name": "B", "home_site": ["room_no": 1, "wing": "E"]]
        #expect(snake.put(["home_site": ["room_no": 2]], over: base).object == ["home_site": ["room_no": 2, "wing": "E"], "last_name": "B"])
        let custom = TypeFields(fields: .keys(["a": .keys(["b": .whole])]), keyStrategy: .custom { path in
            TypeFields.PathKey(path.map(\.stringValue).joined(separator: ".") == "a.B" ? "b" : path.last!.stringValue.lowercased())
        })
        #expect(custom.put(["A": ["B": 1]], over: ["A": ["B": 0, "C": 3], "D": 4]).object == ["A": ["B": 1, "C": 3], "D": 4])
    }

    struct Spot: Codable { var name: String; var floor: Int? }
    struct Visit: Codable { var title: String; var backup: Spot? }

    /// What a type reads inside an object it was only ever seen to find absent is learned
    /// from the copy a save is made on, so a member the app clears there goes.
    @Test func aSaveOverAnObjectNeverOpenedLearnsItFromTheStoredCopy() async throws {
        let world = World()
        let a = try world.device("a")
        try await a.put(["title": "T"], in: "learn-inside", id: "r1")
        try await a.put(["title": "T", "backup": ["name": "S", "floor": 3, "gps": "x"]], in: "learn-inside", id: "r2")
        _ = try await a.get(Visit.self, from: "learn-inside", id: "r1")
        #expect(KnownFieldsRegistry.fields(of: Visit.self, in: "learn-inside")?.fields == .keys(["title": .whole, "backup": .unopened]))
        // Only the first decode learns: reading r2 teaches nothing more.
        #expect(try await a.get(Visit.self, from: "learn-inside", id: "r2")?.backup?.floor == 3)
        #expect(KnownFieldsRegistry.fields(of: Visit.self, in: "learn-inside")?.fields == .keys(["title": .whole, "backup": .unopened]))
        try await a.save(Visit(title: "T2", backup: Spot(name: "S", floor: nil)), in: "learn-inside", id: "r2")
        #expect(try await a.data("learn-inside", "r2") == ["title": "T2", "backup": ["name": "S", "gps": "x"]])
        #expect(KnownFieldsRegistry.fields(of: Visit.self, in: "learn-inside")?.fields
                == .keys(["title": .whole, "backup": .keys(["name": .whole, "floor": .whole])]))
    }

    struct Task1: Codable { var title: String }

    /// A field this app does not know, changed meanwhile by another device, is not taken
    /// back by this app's edit made on the older copy: the three-way merge keeps it.
    @Test func anUnknownFieldChangedMeanwhileElsewhereIsKeptByTheMerge() async throws {
        let world = World()
        let newer = try world.device("newer", resolver: .mergeFields(fallback: .lastWriteWins()))
        let older = try world.device("older", resolver: .mergeFields(fallback: .lastWriteWins()))
        try await newer.put(["title": "T", "priority": 1], in: "merge-unknown", id: "r1")
        try await newer.sync()
        try await older.sync()
        let seen = try #require(try await older.get(Task1.self, from: "merge-unknown", id: "r1"))
        try await newer.put(["title": "T", "priority": 5], in: "merge-unknown", id: "r1")
        try await newer.sync()
        try await older.save(Task1(title: seen.title + " edited"), in: "merge-unknown", id: "r1")
        #expect(try await older.sync().conflicts == 1)
        try await newer.sync()
        for store in [older, newer] {
            #expect(try await store.data("merge-unknown", "r1") == ["title": "T edited", "priority": 5])
        }
    }

    struct Seen: Codable { var title: String; var note: String? }
    struct EncodeOnly: Encodable { var title: String }

    /// A save before the store ever decoded the type learns from the stored copy once.
    @Test func aSaveBeforeAnyDecodeLearnsFromTheStoredCopy() async throws {
        let world = World()
        let a = try world.device("a")
        try await a.put(["title": "T", "note": "n", "extra": ["deep": true]], in: "learn-first", id: "r1")
        #expect(KnownFieldsRegistry.fields(of: Seen.self, in: "learn-first") == nil)
        try await a.save(Seen(title: "T2", note: nil), in: "learn-first", id: "r1")
        #expect(try await a.data("learn-first", "r1") == ["title": "T2", "extra": ["deep": true]])
        #expect(KnownFieldsRegistry.fields(of: Seen.self, in: "learn-first")?.fields == .keys(["title": .whole, "note": .whole]))
        // A type the store cannot learn keeps every field it does not write; raw JSON is exact.
        try await a.save(EncodeOnly(title: "T3"), in: "learn-first", id: "r1")
        #expect(try await a.data("learn-first", "r1") == ["title": "T3", "extra": ["deep": true]])
        try await a.put(["title": "T4"], in: "learn-first", id: "r1")
        #expect(try await a.data("learn-first", "r1") == ["title": "T4"])
    }
}

private extension JSONObject {
    func merging(_ other: JSONObject) -> JSONObject {
        var out = self
        for (k, v) in other { out[k] = v }
        return out
    }
}

/// Two versions of one survey app: version 2 added `priority` and `site.gps`.
enum SurveyV1 {
    struct Site: Codable, Equatable { var name: String }
    struct Survey: Codable, Equatable { var title: String; var note: String?; var site: Site }
}

enum SurveyV2 {
    struct Site: Codable, Equatable { var name: String; var gps: String? }
    struct Survey: Codable, Equatable { var title: String; var note: String?; var site: Site; var priority: Int? }
}

#if canImport(OutpostTestSupport)
@Suite("Fields an app does not know survive its saves, over a real server", .offPoolWhileBlocking, .serialized, .serverLogs)
struct UnknownFieldTests {
    @Test(arguments: [false, true])
    func anOlderAppEditsAndTheNewerAppsFieldsSurvive(postgres: Bool) async throws {
        let database = postgres ? try await PostgresCluster.database(prefix: "fields") : nil
        let world = try RealWorld(arguments: database.map { ["--store", $0] } ?? [])
        let collection = postgres ? "surveys-pg" : "surveys"
        let new = try world.device("new-app", direct: true)
        let old = try world.device("old-app", direct: true)
        let written = SurveyV2.Survey(title: "Pump", note: "check the valve", site: .init(name: "North", gps: "51.5,-0.1"), priority: 2)
        try await new.save(written, in: collection, id: "s1")
        #expect(try await new.sync().pushed == 1)
        #expect(try await old.sync().pulled == 1)

        // The old app reads the record, edits a field it knows at each level, saves.
        var seen = try #require(try await old.get(SurveyV1.Survey.self, from: collection, id: "s1"))
        #expect(seen == SurveyV1.Survey(title: "Pump", note: "check the valve", site: .init(name: "North")))
        seen.title = "Pump 2"
        seen.site.name = "North gate"
        try await old.save(seen, in: collection, id: "s1")
        #expect(try await old.sync().pushed == 1)
        #expect(try await new.sync().pulled == 1)
        #expect(try await new.get(SurveyV2.Survey.self, from: collection, id: "s1")
                == SurveyV2.Survey(title: "Pump 2", note: "check the valve", site: .init(name: "North gate", gps: "51.5,-0.1"), priority: 2))

        // The old app clears an optional it knows: it is gone everywhere; the rest stays.
        seen.note = nil
        try await old.save(seen, in: collection, id: "s1")
        try await old.sync()
        try await new.sync()
        let expected: JSONObject = ["title": "Pump 2", "site": ["name": "North gate", "gps": "51.5,-0.1"], "priority": 2]
        #expect(try await world.serverRecords()["s1"]?.data == expected)
        #expect(try await new.data(collection, "s1") == expected)
        #expect(try await new.get(SurveyV2.Survey.self, from: collection, id: "s1")
                == SurveyV2.Survey(title: "Pump 2", note: nil, site: .init(name: "North gate", gps: "51.5,-0.1"), priority: 2))

        // The new app's own edit of its new fields reaches the old app's copy untouched.
        try await new.save(SurveyV2.Survey(title: "Pump 2", note: nil, site: .init(name: "North gate", gps: nil), priority: 3), in: collection, id: "s1")
        try await new.sync()
        try await old.sync()
        #expect(try await old.data(collection, "s1") == ["title": "Pump 2", "site": ["name": "North gate"], "priority": 3])
    }
}
#endif
