import Foundation
import Testing
import OutpostCore
import OutpostTestSupport
@testable import OutpostServer

/// Found by the simulation (`outpost-sim --list-kind --seed 40`; not a bug of the list
/// kind): a page decided a deleted record by the first departure after *its own* cursor,
/// but a device's copy of a record whose newest version lies past that cursor is the view's
/// as of where the pull began: the earlier pages send each record only at its newest seq.
/// When the record's departure (its delete) came before the page's cursor and a later
/// delete over the tombstone departs nothing, no page sent the tombstone, and the device
/// kept its live copy for good. The rule now: a page looks for departures after the seq the
/// pull began from, which the cursors of a pull with more pages carry (`PulledView`).
@Suite struct PagedDepartureTests {
    let http = RulesHTTPTests()

    func change(_ id: String, _ changeId: String, delete: Bool = false, base: Version? = nil) -> Change {
        Change(changeId: changeId, collection: "notes", id: id, op: delete ? .delete : .put, data: delete ? nil : ["t": "x"], baseVersion: base,
               clientTime: 1_764_430_000_000)
    }

    @Test(arguments: StoreKind.allCases)
    func aDeleteOverATombstoneReachesADeviceWhosePullIsPaged(store: StoreKind) async throws {
        try await http.withRulesServer(store, rules: #"{"default": {"read": "true", "write": "true"}}"#) { s, _ in
            let t = http.token(s, "w1")
            // The device pulls notes/n0 (seq 1); then n0 is deleted (2, a departure), two
            // other notes are written (3, 4), and n0 is deleted again over its tombstone (5).
            let created = try await http.pushed(s, t, [change("n0", "c1")])
            let first = try await http.pull(s, t)
            let deleted = try await http.pushed(s, t, [change("n0", "c2", delete: true, base: created[0].version)])
            _ = try await http.pushed(s, t, [change("a", "c3"), change("b", "c4")])
            let again = try await http.pushed(s, t, [change("n0", "c5", delete: true, base: deleted[0].version)])
            #expect(again.map(\.status) == [.applied])

            /// What the device's pull from `first` brings, `limit` records a page.
            func pulled(limit: Int) async throws -> [String] {
                var since = Cursor(first.next, view: first.view).text
                var seen: [String] = []
                for _ in 0..<5 {
                    let r = try await s.pull("team", query: "since=\(since)&limit=\(limit)", token: t)
                    #expect(r.status == 200, "\(r.text)")
                    let page = try PullPage.decode(r.body)
                    seen += page.changes.map { "\($0.id)@\($0.version.seq)\($0.deleted ? " deleted" : "")" }
                    since = Cursor(page.next, view: page.view).text
                    if !page.hasMore { break }
                }
                return seen
            }
            #expect(try await pulled(limit: 10) == ["a@3", "b@4", "n0@5 deleted"])
            // In pages of two, the second page (after seq 4) looks for n0's departure in
            // (4, 5] only and passes the tombstone over.
            let paged = try await pulled(limit: 2)
            #expect(paged.contains("n0@5 deleted"), "\(paged)")
        }
    }

    @Test func aCursorsViewPartCarriesWhereAPagedPullBegan() {
        let view = "0123456789abcdef"
        #expect(PulledView("\(view)h42") == PulledView(view: view, began: 42))
        #expect(PulledView(view) == PulledView(view: view) && PulledView(nil) == PulledView(view: nil))
        #expect(PulledView("\(view)hx").view == "\(view)hx", "a part that does not split is a view, which matches none")
        #expect(PulledView.next(view: view, heldAt: 7, holding: false, hasMore: true).text == "\(view)h7")
        #expect(PulledView.next(view: view, heldAt: 7, holding: false, hasMore: false).text == view, "the last page's cursor is the view's")
        #expect(PulledView.next(view: view, heldAt: 0, holding: true, hasMore: true).text == view, "a holding pull reads from the start anyway")
        #expect(PulledView.next(view: view, heldAt: nil, holding: false, hasMore: true).text == view, "a first page from the start holds nothing")
        #expect(PulledView(view: view, began: 7).heldAt(since: 20, holding: false) == 7)
        #expect(PulledView(view: view, began: 30).heldAt(since: 20, holding: false) == 20, "never later than the page's cursor")
        #expect(PulledView(view: view).heldAt(since: 20, holding: false) == 20 && PulledView(view: view).heldAt(since: 0, holding: false) == nil)
        #expect(PulledView(view: view, began: 7).heldAt(since: 20, holding: true) == 0)
        #expect(Cursor.isValidView("\(view)h\(Int64(9_007_199_254_740_991))"), "the longest carried part is still a view on the wire")
    }
}
