import OutpostCore
import OutpostSyncRules

/// One page of a pull under rules (docs/rules.md): the records after the cursor that the
/// token's view admits, a `revoked` entry for each record whose latest write took it out of
/// the view, and nothing of the others.
///
/// Whether the device holds a record it can no longer read is told by the record's
/// departures: a write that may move a record out of a view keeps the state it replaced
/// (`PushRules.Departure`). The first departure after the cursor holds what the read rule
/// read of the device's copy (no write before it changed that), so the copy was in view
/// exactly when the rule admits that departure. A device at the start of the history holds
/// nothing, so its pulls skip that lookup.
///
/// Records are read in seq order by `SyncStore.scan`, `limit` at a time and at most
/// `scanBudget × limit` for one page, and a page may hold fewer entries than records read
/// (even none, with `hasMore`): its cursor still moves past every record decided, so no
/// record outside the view is read twice.
///
/// With the view index built for the rules (`indexed`), the records come from
/// `SyncStore.viewScan` instead: those the view's lookups find and those that departed
/// since the cursor, which are all that can give an entry, so a page reads no record the
/// device cannot see and, once they are read, its cursor moves to the head.
struct ViewPager {
    let store: any SyncStore
    let view: ReadView
    var indexed = false

    /// What a page holds and where it ends.
    struct Page {
        var json: [UInt8]
        var count: Int
        /// The seq of the last record decided (sent or skipped); nil when none was read.
        var lastSeq: Int64?
        var hasMore: Bool
        var head: Int64
        var bytes: Int
    }

    /// Records read for one page at most, as a multiple of its entry limit: a device that
    /// sees little of a space gets pages of its own records in a tenth of the requests,
    /// and no request reads without bound.
    static let scanBudget = 10

    /// The page after `afterSeq`, for a device whose copies are those of the view at seq
    /// `heldAt` (the `since` of its request, or 0 for a device that keeps copies from
    /// before the start; nil: it holds nothing): at most `limit` entries and `maxBytes`
    /// bytes, from at most `scanBudget × limit` records read.
    func page(space: String, afterSeq: Int64, heldAt: Int64?, limit: Int, maxBytes: Int, collections: [String]?, epoch: Epoch) async throws -> Page {
        var entries = PullRules.Page(limit: limit, maxBytes: maxBytes)
        var head: Int64 = 0
        var after = afterSeq, read = 0
        let (lookups, exact) = indexed ? view.lookups(collections: collections) : ([], [])
        // For a device that holds nothing, every record an exact lookup finds is in the
        // view; otherwise the departures' records are found too and each is checked.
        let admitted = heldAt == nil ? exact : []
        if indexed && lookups.allSatisfy({ exact.contains($0.scope) }),
           let found = try await store.viewPage(ViewScanRequest(space: space, afterSeq: afterSeq, heldAt: heldAt, limit: limit, lookups: lookups,
                                                                collections: collections), maxBytes: maxBytes) {
            // Every record found is sent, and nothing departed after the page's start: the
            // store encodes the records as it reads them.
            var page = Page(json: found.changesJSON, count: found.count, lastSeq: found.lastSeq, hasMore: found.hasMore, head: found.head,
                            bytes: found.changesJSON.count)
            if !found.hasMore && found.head > (found.lastSeq ?? afterSeq) { page.lastSeq = found.head }
            return page
        }
        while true {
            let scan = indexed
                ? try await store.viewScan(ViewScanRequest(space: space, afterSeq: after, heldAt: heldAt, limit: limit, lookups: lookups, collections: collections))
                : try await store.scan(PageRequest(space: space, afterSeq: after, limit: limit, maxBytes: maxBytes, collections: collections))
            head = max(head, scan.head)
            read += scan.records.count
            if try await !add(scan.records, to: &entries, space: space, heldAt: heldAt, epoch: epoch, admitted: admitted) { break }
            guard scan.hasMore else {
                // The index found every record up to the head that can give an entry: the
                // others are decided without being read.
                if indexed && scan.head > (entries.lastSeq ?? after) { entries.lastSeq = scan.head }
                break
            }
            if read >= Self.scanBudget * limit { entries.hasMore = true; break }
            after = entries.lastSeq ?? after
        }
        let json = entries.finish()
        return Page(json: json, count: entries.count, lastSeq: entries.lastSeq, hasMore: entries.hasMore, head: head, bytes: json.count)
    }

    /// Decides `records` (read in seq order) and adds their entries to `page`; false when
    /// the page filled (by entries or bytes) before the last of them was decided.
    /// Records of a scope in `admitted` are in the view without a check.
    private func add(_ records: [StoredRecord], to page: inout PullRules.Page, space: String, heldAt: Int64?,
                     epoch: Epoch, admitted: Set<String>) async throws -> Bool {
        enum Decision { case send, outside }
        var decisions: [Decision] = []
        decisions.reserveCapacity(records.count)
        var queries: [DepartureQuery] = []
        for record in records {
            if !record.deleted, !admitted.isEmpty, admitted.contains(view.rules.index.scope(of: record.collection)) {
                decisions.append(.send)
                continue
            }
            if !record.deleted, let data = record.data, view.admits(collection: record.collection, id: record.id, stored: data) {
                decisions.append(.send)
                continue
            }
            decisions.append(.outside)
            if let heldAt { queries.append(DepartureQuery(key: record.key, after: heldAt, upTo: record.seq)) }
        }
        let departed = queries.isEmpty ? [:] : try await store.departures(space: space, queries)

        for (record, decision) in zip(records, decisions) {
            let added: Bool
            switch decision {
            case .send:
                added = page.add(seq: record.seq) { record.append(to: &$0, epoch: epoch) }
            case .outside:
                // The device held it in view: it learns of the delete, or that it lost it.
                guard let old = departed[record.key], view.admits(collection: record.collection, id: record.id, stored: old) else {
                    added = page.pass(seq: record.seq)
                    break
                }
                if record.deleted {
                    added = page.add(seq: record.seq) { record.append(to: &$0, epoch: epoch) }
                } else {
                    let revocation = Revocation(collection: record.collection, id: record.id, version: Version(epoch: epoch, seq: record.seq))
                    added = page.add(seq: record.seq) { $0.append(contentsOf: revocation.json.encoded()) }
                }
            }
            if !added { return false }
        }
        return true
    }
}
