import Foundation
import OutpostCore
import OutpostSQLite
import OutpostTestBasics
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

/// Queries on the device (Records/, docs/client.md "Queries"): typed collections, filters and
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
            // Rows come in the index's order and stop at the limit: nothing is sorted.
            #expect(!plan.steps.contains { $0.contains("TEMP B-TREE") }, "\(plan)")
            #expect(try await query.after(rows.cursor).explain().steps.contains { $0.contains("TEMP B-TREE") } == false)

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

    @Test func aLiveQueryYieldsEachCommittedChangeWithWhatChangedAndSkipsWhatDoesNotDecode() async throws {
        try await withTemporaryDirectory { dir in
            let store = try store(dir)
            let inspections = store.collection("inspections", of: Inspection.self)
            for i in 0..<4 { try await inspections.save(Self.inspection(i), id: "i\(i)") }
            let open = inspections.filter { $0.status != "closed" }.sorted(by: .ascending("priority")).withLocalState()
            let live = try await LiveRecorder.start(open.live())

            let first = try await live.next()
            #expect(first.results.map(\.id) == ["i0", "i2", "i3"])
            #expect(first.changes.inserted == [0, 1, 2] && first.changes.removed.isEmpty)
            #expect(first.results.first?.localState == LocalState(pending: true, rejected: false))

            // A write to another collection is not seen; a new record is inserted in place.
            try await store.put(["title": "x"], in: "other", id: "o1")
            try await inspections.save(Self.inspection(5), id: "i5")
            let inserted = try await live.next()
            #expect(inserted.results.map(\.id) == ["i0", "i5", "i2", "i3"])
            #expect(inserted.changes.inserted == [1] && inserted.changes.moved.isEmpty && inserted.changes.updated.isEmpty)

            // An edit that moves a record; one that leaves the view; a deletion.
            var moved = Self.inspection(3)
            moved.priority = -1
            try await inspections.save(moved, id: "i3")
            let after = try await live.next()
            #expect(after.results.map(\.id) == ["i3", "i0", "i5", "i2"])
            #expect(after.changes.moved == [QueryChanges.Move(from: 3, to: 0)] && after.changes.updated == [0])
            var closed = Self.inspection(0)
            closed.status = "closed"
            try await inspections.save(closed, id: "i0")
            #expect(try await live.next().changes.removed == [1])
            try await inspections.delete("i5")
            let deleted = try await live.next()
            #expect(deleted.results.map(\.id) == ["i3", "i2"] && deleted.changes.removed == [1])

            // A record that does not decode is left out and reported, and the query goes on.
            try await store.put(["title": "broken", "status": "open", "priority": "high"], in: "inspections", id: "i9")
            let broken = try await live.next()
            #expect(broken.results.map(\.id) == ["i3", "i2"])
            #expect(broken.results.skipped.map(\.id) == ["i9"])
            try await inspections.save(Self.inspection(9), id: "i9")
            #expect(try await live.next().results.map(\.id) == ["i3", "i2", "i9"])
            await store.close()
            #expect(try await live.end() == nil)
        }
    }

    @Test func aLiveQueryDuringASyncSeesWholePagesOnly() async throws {
        try await withTemporaryDirectory { dir in
            let world = World()
            let tablet = try world.device("tablet")
            for i in 0..<60 { try await tablet.put(["n": .number(JSONNumber(i)), "status": "open"], in: "jobs", id: String(format: "j%02d", i)) }
            try await tablet.sync()
            let phone = try world.device("phone", path: dir.appending("phone.sqlite")) { $0.pageLimit = 10 }
            let jobs = phone.collection("jobs", of: JSONValue.self)
            let live = try await LiveRecorder.start(jobs.filter { $0.status == "open" }.live())
            #expect(try await live.next().results.isEmpty)
            try await phone.sync()
            // Pages of 10 records, each applied in one transaction: every update the query
            // yields holds whole pages, and the last one all 60.
            var counts: [Int] = []
            while counts.last != 60 {
                let update = try await live.next()
                counts.append(update.results.count)
                #expect(update.results.count % 10 == 0, "an update shows a page in part: \(update.results.count) rows")
            }
            #expect(counts.count <= 6 && counts == counts.sorted())
        }
    }

    @Test func indexesFollowTheDeclarationsOfEachAppVersionWithoutARebuildAtEveryOpen() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("phone.sqlite")
            let world = World()
            func open(_ schema: CollectionSchema) throws -> OutpostStore {
                try world.device("phone", path: path) { $0.collections = ["inspections": schema] }
            }
            func catalog() throws -> [String] {
                let c = try Connection(path: path, flags: [.readOnly])
                defer { c.close() }
                return try c.query("SELECT number || ' ' || definition FROM query_indexes ORDER BY number") { $0.text(0) }
            }
            // Version 1 of the app: an index on status.
            var store = try open(CollectionSchema(indexes: [["status"]]))
            let v1 = store.collection("inspections", of: Inspection.self)
            for i in 0..<40 { try await v1.save(Self.inspection(i), id: String(format: "i%02d", i)) }
            #expect(try await v1.filter { $0.status == "review" }.explain().index == ["status"])
            await store.close()
            let before = try catalog()

            // Version 2: status with the due date, a site index, search; status alone is gone.
            let v2Schema = CollectionSchema(indexes: [["status", "dueDate"], ["site.name"]], searchable: ["notes"], dates: ["dueDate"])
            store = try open(v2Schema)
            let after = try catalog()
            #expect(after.count == 3 && !after.contains(before[0]))
            let v2 = store.collection("inspections", of: Inspection.self)
            let query = v2.filter { $0.status == "review" }.sorted(by: .descending("dueDate")).limit(3)
            #expect(try await query.explain().index == ["status", "dueDate"])
            #expect(try await query.fetch().map(\.id) == ["i38", "i35", "i32"])
            #expect(try await v2.search("pump 17").fetch().map(\.id) == ["i17"])
            await store.close()

            // The same declarations again: nothing is rebuilt.
            store = try open(v2Schema)
            #expect(try catalog() == after)
            // An index no one declares any more still answers nothing wrong: a query of an
            // older app (no declarations) reads the collection.
            await store.close()
            store = try open(CollectionSchema())
            #expect(try catalog().isEmpty)
            #expect(try await store.collection("inspections", of: Inspection.self).filter { $0.status == "review" }.explain().index == nil)
            #expect(try await store.collection("inspections", of: Inspection.self).filter { $0.status == "review" }.count() == 13)
            await #expect(throws: OutpostError.invalidQuery("inspections declares no searchable field (CollectionSchema.searchable)")) {
                try await store.collection("inspections", of: Inspection.self).search("pump").fetch()
            }
        }
    }

    @Test func datesAreRFC3339TextAndRecordsInTheOldFormDecodeAndSortWithThem() async throws {
        try await withTemporaryDirectory { dir in
            let store = try store(dir)
            let inspections = store.collection("inspections", of: Inspection.self)
            let due = Date(timeIntervalSince1970: 1_790_000_000.25)
            var a = Self.inspection(1)
            a.dueDate = due
            try await inspections.save(a, id: "new")
            // What another system reads: RFC 3339 text in UTC with milliseconds.
            #expect(try await store.record(in: "inspections", id: "new")?.data?["dueDate"] == .string("2026-09-21T14:13:20.250Z"))

            // A record an older app saved with Foundation's default encoder (seconds since 2001).
            var old = Self.inspection(2)
            old.dueDate = due.addingTimeInterval(-3600)
            let legacy = JSONEncoder()
            try await store.save(old, in: "inspections", id: "old", encoder: legacy, decoder: JSONDecoder())
            guard case .number? = try await store.record(in: "inspections", id: "old")?.data?["dueDate"] else {
                Issue.record("the old form is a number")
                return
            }
            #expect(try await inspections.get("old")?.dueDate == old.dueDate)
            // Another time zone's text, one hour later than the new record.
            try await store.put(["title": "tz", "status": "open", "priority": 1, "dueDate": "2026-09-21T17:13:20.250+02:00",
                                 "site": ["name": "x"], "notes": "", "tags": []], in: "inspections", id: "tz")
            let order = try await inspections.sorted(by: .ascending("dueDate")).fetch().map(\.id)
            #expect(order == ["old", "new", "tz"])
            #expect(try await inspections.filter { $0.dueDate < .date(due) }.fetch().map(\.id) == ["old"])
            #expect(try await inspections.filter { $0.dueDate == "2026-09-21T14:13:20.250Z" }.fetch().map(\.id) == ["new"])
            #expect(try await inspections.filter { $0.dueDate.hasPrefix("2026-09-21T15") }.fetch().map(\.id) == ["tz"])

            // The values stream and the validator take the collection's decoder.
            var seen: [Inspection] = []
            for try await values in store.values(Inspection.self, in: "inspections") {
                seen = values
                break
            }
            #expect(seen.count == 3)
        }
    }

    @MainActor @Test func theObservableModelFollowsItsQueryAndANewSearch() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-query-model")
        defer { dir.remove() }
        let store = try store(dir)
        let inspections = store.collection("inspections", of: Inspection.self)
        for i in 0..<12 { try await inspections.save(Self.inspection(i), id: String(format: "i%02d", i)) }
        let model = LiveQueryModel(inspections.filter { $0.status == "open" }.sorted(by: .ascending("dueDate")))
        #expect(!model.isLoaded)
        await model.start()
        #expect(model.isLoaded && model.rows.map(\.id) == ["i00", "i03", "i06", "i09"])
        await model.update(inspections.search("zurich"))
        #expect(model.rows.map(\.id) == ["i01", "i05", "i09"])
        var gone = Self.inspection(5)
        gone.notes = "moved"
        gone.site.name = "elsewhere"
        try await inspections.save(gone, id: "i05")
        // The model changes on the main actor, from the live query's task.
        let deadline = ContinuousClock.now + .seconds(testDeadlineSeconds)
        while model.rows.map(\.id) != ["i01", "i09"] {
            guard ContinuousClock.now < deadline else { throw NotReached("the model did not show the edit") }
            try await Task.sleep(for: .milliseconds(2))
        }
        #expect(model.changes?.removed == [1])
        model.stop()
        await store.close()
    }

    @Test func badQueriesAreRefusedAndNothingIsRead() async throws {
        try await withTemporaryDirectory { dir in
            let store = try store(dir)
            let inspections = store.collection("inspections", of: Inspection.self)
            await #expect(throws: OutpostError.self) { try await inspections.filter { $0["a\"b"] == 1 }.fetch() }
            await #expect(throws: OutpostError.self) { try await inspections.query.limit(-1).fetch() }
            let other = inspections.sorted(by: .descending("priority"))
            try await inspections.save(Self.inspection(1), id: "i1")
            let cursor = try await inspections.query.fetch().cursor
            await #expect(throws: OutpostError.invalidQuery("the cursor was taken in another order than this query's")) {
                try await other.after(cursor).fetch()
            }
            await #expect(throws: OutpostError.self) { try await store.collection("bad name!", of: Inspection.self).query.fetch() }
        }
    }
}

/// Takes a live query's updates in a task of its own, for a test to read one by one, each
/// within the tests' deadline.
actor LiveRecorder<Value: Decodable & Sendable> {
    private var buffered: [LiveResults<Value>] = []
    private var waiter: CheckedContinuation<LiveResults<Value>?, any Error>?
    /// Counts the waits, so a deadline ends only its own.
    private var waits = 0
    private var finished = false
    private var failure: (any Error)?
    private var task: Task<Void, Never>?

    static func start(_ live: LiveQuery<Value>) async throws -> LiveRecorder {
        let recorder = LiveRecorder()
        await recorder.run(live)
        return recorder
    }

    private func run(_ live: LiveQuery<Value>) {
        task = Task {
            do {
                for try await update in live { self.deliver(update) }
                self.end(nil)
            } catch {
                self.end(error)
            }
        }
    }

    private func deliver(_ update: LiveResults<Value>) {
        if let waiter {
            self.waiter = nil
            waiter.resume(returning: update)
        } else {
            buffered.append(update)
        }
    }

    private func end(_ error: (any Error)?) {
        finished = true
        failure = error
        if let waiter {
            self.waiter = nil
            if let error { waiter.resume(throwing: error) } else { waiter.resume(returning: nil) }
        }
    }

    private func expire(_ what: String, wait: Int) {
        guard wait == waits, let waiter else { return }
        self.waiter = nil
        waiter.resume(throwing: NotReached("no live update within \(testDeadlineSeconds) s: \(what)"))
    }

    /// The next update, or nil when the query ended.
    func nextOrEnd(_ what: String) async throws -> LiveResults<Value>? {
        if !buffered.isEmpty { return buffered.removeFirst() }
        if finished {
            if let failure { throw failure }
            return nil
        }
        waits += 1
        let wait = waits
        let deadline = Task { [weak self] in
            guard (try? await Task.sleep(for: .seconds(testDeadlineSeconds))) != nil else { return }
            await self?.expire(what, wait: wait)
        }
        defer { deadline.cancel() }
        return try await withCheckedThrowingContinuation { waiter = $0 }
    }

    /// The next update; fails when the query ended.
    func next(_ what: String = "the next update", fileID: String = #fileID, line: Int = #line) async throws -> LiveResults<Value> {
        guard let update = try await nextOrEnd("\(what) (\(fileID):\(line))") else { throw NotReached("the live query ended before \(what)") }
        return update
    }

    /// Waits for the end of the query: nil when it ended with no further update.
    func end() async throws -> LiveResults<Value>? {
        try await nextOrEnd("the end of the query")
    }
}
