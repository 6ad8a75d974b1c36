import OutpostCore

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
/// Records are read in seq order by `SyncStore.scan`, at most `limit` per page, and a page
/// may hold fewer entries than records read (even none, with `hasMore`): its cursor still
/// moves past every record read, so no record outside the view is read twice.
struct ViewPager {
    let store: any SyncStore
    let view: ReadView

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

    /// The page after `afterSeq`, for a device whose copies are those of the cursor
    /// `heldAt` (the `since` of its request).
    func page(space: String, afterSeq: Int64, heldAt: Int64, limit: Int, maxBytes: Int, collections: [String]?, epoch: Epoch) async throws -> Page {
        let scan = try await store.scan(PageRequest(space: space, afterSeq: afterSeq, limit: limit, maxBytes: maxBytes, collections: collections))
        enum Decision { case send, outside }
        var decisions: [Decision] = []
        decisions.reserveCapacity(scan.records.count)
        var queries: [DepartureQuery] = []
        for record in scan.records {
            if !record.deleted, let data = record.data, view.admits(collection: record.collection, id: record.id, stored: data) {
                decisions.append(.send)
                continue
            }
            decisions.append(.outside)
            if heldAt > 0 { queries.append(DepartureQuery(key: record.key, after: heldAt, upTo: record.seq)) }
        }
        let departed = queries.isEmpty ? [:] : try await store.departures(space: space, queries)

        var out: [UInt8] = [UInt8(ascii: "[")]
        var count = 0
        var lastSeq: Int64?
        var hasMore = scan.hasMore
        for (record, decision) in zip(scan.records, decisions) {
            let mark = out.count
            if count > 0 { out.append(UInt8(ascii: ",")) }
            switch decision {
            case .send:
                record.append(to: &out, epoch: epoch)
            case .outside:
                // The device held it in view: it learns of the delete, or that it lost it.
                guard let old = departed[record.key], view.admits(collection: record.collection, id: record.id, stored: old) else {
                    out.removeSubrange(mark...)
                    lastSeq = record.seq
                    continue
                }
                if record.deleted {
                    record.append(to: &out, epoch: epoch)
                } else {
                    out.append(contentsOf: Revocation(collection: record.collection, id: record.id,
                                                      version: Version(epoch: epoch, seq: record.seq)).json.encoded())
                }
            }
            // The byte budget counts the whole encoded array; the first entry always fits.
            if count > 0 && out.count + 1 > maxBytes {
                out.removeSubrange(mark...)
                hasMore = true
                break
            }
            count += 1
            lastSeq = record.seq
        }
        out.append(UInt8(ascii: "]"))
        return Page(json: out, count: count, lastSeq: lastSeq, hasMore: hasMore, head: scan.head, bytes: out.count)
    }
}
