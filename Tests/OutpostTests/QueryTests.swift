import Foundation
import OutpostCore
import OutpostSQLite
import OutpostTestSupport
import Testing
@testable import Outpost

/// An inspection, the record type of the query tests.
struct Inspection: Codable, Hashable, Sendable {
    struct Site: Codable, Hashable, Sendable {
        var name: String
        var city: String?
    }

    var title: String
    var status: String
    var priority: Int
    var dueDate: Date
    var site: Site
    var notes: String = ""
    var tags: [String] = []
}

/// Queries on the device (Query/, docs/client.md "Queries"): typed collections, filters and
/// sorts in SQLite, declared indexes, full-text search, live results, dates.
@Suite("Queries")
struct QueryTests {
    static let day: TimeInterval = 86_400
    static let start = Date(timeIntervalSince1970: 1_790_000_000)

    static func schema() -> [String: CollectionSchema] {
        ["inspections": CollectionSchema(indexes: [["status", "dueDate"], ["site.name"]], searchable: ["notes", "site.name"], dates: ["dueDate"])]
    }

    static func inspection(_ i: Int) -> Inspection {
        let statuses = ["open", "closed", "review"]
        let sites = ["São Paulo", "Zürich", "North yard", "south yard"]
        return Inspection(title: "Inspection \(i)", status: statuses[i % 3], priority: i % 5, dueDate: start.addingTimeInterval(Double(i) * day),
                          site: .init(name: sites[i % 4], city: i % 2 == 0 ? "A" : nil), notes: "Check pump \(i) at \(sites[i % 4])", tags: i % 2 == 0 ? ["pump"] : ["roof", "pump"])
    }

    func store(_ dir: TemporaryDirectory, _ name: String = "phone", schema: [String: CollectionSchema] = QueryTests.schema()) throws -> OutpostStore {
        let world = World()
        return try world.device(name, path: dir.appending("\(name).sqlite")) { $0.collections = schema }
    }

    @Test func aFilteredSortedQueryOfATypedCollectionReadsThroughTheDeclaredIndex() async throws {
        try await withTemporaryDirectory { dir in
            let store = try store(dir)
            let inspections = store.collection("inspections", of: Inspection.self)
            for i in 0..<30 { try await inspections.save(Self.inspection(i), id: String(format: "i%02d", i)) }

            let query = inspections.filter { $0.status == "open" && $0.dueDate >= .date(Self.start.addingTimeInterval(3 * Self.day)) }
                .sorted(by: .ascending("dueDate")).limit(4)
            let rows = try await query.fetch()
            #expect(rows.map(\.id) == ["i03", "i06", "i09", "i12"])
            #expect(rows.first?.value == Self.inspection(3))
            #expect(try await query.count() == 9)
            let plan = try await query.explain()
            #expect(plan.index == ["status", "dueDate"], "\(plan)")

            let next = try await query.after(rows.cursor).fetch()
            #expect(next.map(\.id) == ["i15", "i18", "i21", "i24"])

            #expect(try await inspections.filter { $0.site.name.hasPrefix("S") }.count() == 8)
            #expect(try await inspections.filter { $0.tags.contains("roof") }.count() == 15)
            #expect(try await inspections.filter { $0.site.city.isMissing }.count() == 15)
            #expect(try await inspections.search("sao paulo").count() == 8)
            #expect(try await inspections.search("zur").limit(3).fetch().map(\.id) == ["i01", "i05", "i09"])
            #expect(try await inspections.get("i07") == Self.inspection(7))
            try await inspections.delete("i07")
            #expect(try await inspections.get("i07") == nil)
            #expect(try await inspections.search("pump 7").count() == 0)
        }
    }
}
