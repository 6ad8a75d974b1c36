import OutpostCore

/// Section 5: pull pages, cursors and long polls.
enum PullChecks {
    /// Pushes puts of `ids` (one push per `batch` changes) and returns their versions.
    static func fill(_ c: CheckContext, _ space: String, ids: [String], collection: String = "todos",
                     data: @Sendable (Int) -> JSONObject = { ["n": .number(JSONNumber(Int64($0)))] }, maxBody: Int? = nil) async throws -> [Version] {
        let info = try await c.info()
        let bodyLimit = maxBody ?? info.limits.maxRequestBytes
        var versions: [Version] = []
        var batch: [JSONValue] = []
        var batchBytes = 64
        func flush() async throws {
            guard !batch.isEmpty else { return }
            let reply = try await c.push(space, batch)
            for (i, r) in reply.results.enumerated() { versions.append(try expectApplied(r, "filling the space: change \(i)")) }
            batch = []
            batchBytes = 64
        }
        for (i, id) in ids.enumerated() {
            let change = ChangeJSON.put(c.unique("chg"), collection: collection, id: id, data: data(i), base: nil)
            let size = change.encoded().count + 1
            if batch.count >= min(info.limits.maxChangesPerPush, 500) || batchBytes + size > bodyLimit - 1024 { try await flush() }
            batch.append(change)
            batchBytes += size
        }
        try await flush()
        return versions
    }

    static func ids(_ n: Int, _ prefix: String = "r") -> [String] { (0..<n).map { "\(prefix)\($0)" } }

    static let all: [Check] = [
        Check("pull-empty-space", section: "5", "a pull of a space with no records answers no changes, next \"<epoch>.0\" and hasMore false") { c in
            let info = try await c.info()
            let reply = try await c.pull(c.newSpace())
            try expect(reply.page.changes.isEmpty, "an empty space answered \(reply.page.changes.count) record(s)")
            try expect(reply.page.next == Version.start(of: info.epoch), "next is \(reply.page.next), expected \(info.epoch).0")
            try expect(!reply.page.hasMore, "hasMore is true on an empty space")
            try expect(reply.page.epoch == info.epoch, "page epoch \(reply.page.epoch) is not the current epoch \(info.epoch)")
        },
        Check("pull-seq-order-each-record-once", section: "5", "changes lists records in seq order, each once, at its newest version and data") { c in
            let space = c.newSpace()
            let a = try await PushChecks.create(c, space, id: "a", data: ["v": 1])
            _ = try await PushChecks.create(c, space, id: "b")
            _ = try await PushChecks.create(c, space, id: "c")
            let a2 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "a", data: ["v": 2], base: a.text)]).results[0], "update of a")
            let a3 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "a", data: ["v": 3], base: a2.text)]).results[0], "second update of a")
            let records = try await c.pull(space).page.changes
            try expect(records.map(\.id) == ["b", "c", "a"], "pull order is \(records.map(\.id)), expected [b, c, a] (seq order, a once at its newest version)")
            try expect(records[2].version == a3 && records[2].data == ["v": 3], "a is at \(records[2].version) \(records[2].data?.description ?? ""), expected \(a3) {\"v\":3}")
            try expect(zip(records, records.dropFirst()).allSatisfy { $0.version.seq < $1.version.seq }, "versions are not strictly increasing: \(records.map(\.version.text))")
        },
        Check("pull-tombstones-included", section: "5", "deleted records are in pages as tombstones: deleted true, no data, at the delete's version") { c in
            let space = c.newSpace()
            let x = try await PushChecks.create(c, space, id: "x")
            let first = try await c.pull(space)
            _ = try await PushChecks.create(c, space, id: "y")
            let deletion = try expectApplied(try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "x", base: x.text)]).results[0], "delete of x")
            for (query, what) in [([(String, String)](), "from the start"), ([("since", first.page.next.text)], "from the cursor before the delete")] {
                let reply = try await c.pull(space, query)
                guard let index = reply.page.changes.firstIndex(where: { $0.id == "x" }) else {
                    throw CheckFailure("pull \(what) leaves out the deleted record x: \(reply.page.changes.map(\.id)); absence must never mean deletion")
                }
                let tombstone = reply.page.changes[index]
                try expect(tombstone.deleted && tombstone.version == deletion, "x is \(tombstone.version) deleted=\(tombstone.deleted), expected the tombstone \(deletion)")
                let raw = reply.rawChanges[index].objectValue
                try expect(raw?["data"] == nil, "the tombstone carries data: \(raw?.description ?? "")")
            }
        },
        Check("pull-record-metadata", section: "5", "each record carries updatedAt (server ms), updatedBy (the pushing clientId) and clientTime as pushed or absent") { c in
            let space = c.newSpace()
            let before = unixNowMs()
            try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "timed", data: ["v": 1], base: nil, clientTime: 1_700_000_000_123),
                                     ChangeJSON.put(c.unique("chg"), id: "untimed", data: ["v": 1], base: nil)], clientId: "device-42")
            let reply = try await c.pull(space)
            try expect(reply.page.changes.count == 2, "expected 2 records, got \(reply.page.changes.count)")
            for (record, raw) in zip(reply.page.changes, reply.rawChanges) {
                try expect(record.updatedBy == "device-42", "\(record.id): updatedBy is \(record.updatedBy), expected the clientId device-42")
                try expect(abs(record.updatedAt - before) < 86_400_000, "\(record.id): updatedAt \(record.updatedAt) is not the server's time in ms since 1970 (checker time \(before))")
                if record.id == "timed" {
                    try expect(record.clientTime == 1_700_000_000_123, "timed: clientTime is \(record.clientTime.map(String.init) ?? "absent"), expected 1700000000123")
                } else {
                    try expect(raw["clientTime"] == nil || raw["clientTime"]?.isNull == true, "untimed: clientTime is \(raw["clientTime"]!), expected absent")
                }
            }
        },
        Check("pull-since-absent-is-start", section: "5", "a pull without since is the same as since \"<epoch>.0\"") { c in
            let space = c.newSpace()
            let info = try await c.info()
            _ = try await fill(c, space, ids: ids(3))
            let absent = try await c.pull(space)
            let start = try await c.pull(space, [("since", "\(info.epoch).0")])
            try expect(absent.page.changes == start.page.changes && absent.page.next == start.page.next,
                       "without since: \(absent.page.changes.map(\.id)) next \(absent.page.next); since \(info.epoch).0: \(start.page.changes.map(\.id)) next \(start.page.next)")
            try expect(absent.page.changes.count == 3, "expected 3 records from the start, got \(absent.page.changes.count)")
        },
        Check("pull-since-cursor", section: "5", "since = a version lists only records written after it") { c in
            let space = c.newSpace()
            let versions = try await fill(c, space, ids: ids(5))
            let reply = try await c.pull(space, [("since", versions[1].text)])
            try expect(reply.page.changes.map(\.id) == ["r2", "r3", "r4"], "since \(versions[1]): got \(reply.page.changes.map(\.id)), expected [r2, r3, r4]")
            try expect(reply.page.next == versions[4], "next is \(reply.page.next), expected the last record's version \(versions[4])")
        },
        Check("pull-limit-next-has-more", section: "5", "limit caps records per page; next is the last record's version; hasMore is true exactly while records remain") { c in
            let space = c.newSpace()
            let versions = try await fill(c, space, ids: ids(7))
            var cursor: String?
            var seen: [String] = []
            var pages = 0
            while true {
                var query = [("limit", "3")]
                if let cursor { query.append(("since", cursor)) }
                let reply = try await c.pull(space, query)
                pages += 1
                try expect(reply.page.changes.count <= 3, "limit=3 answered \(reply.page.changes.count) records")
                seen += reply.page.changes.map(\.id)
                if let last = reply.page.changes.last {
                    try expect(reply.page.next == last.version, "next is \(reply.page.next), expected the last record's version \(last.version)")
                }
                let remaining = 7 - seen.count
                try expect(reply.page.hasMore == (remaining > 0), "page \(pages): hasMore is \(reply.page.hasMore) with \(remaining) record(s) left")
                if !reply.page.hasMore { break }
                try expect(pages < 5, "more than 5 pages for 7 records at limit 3")
                cursor = reply.page.next.text
            }
            try expect(seen == ids(7), "paging listed \(seen), expected \(ids(7))")
            try expect(pages == 3, "7 records at limit=3 took \(pages) pages, expected 3")
            let end = try await c.pull(space, [("since", versions[6].text)])
            try expect(end.page.changes.isEmpty && end.page.next == versions[6] && !end.page.hasMore,
                       "pull at the end: expected no changes, next \(versions[6]) and hasMore false; got \(end.page.changes.count) record(s), next \(end.page.next), hasMore \(end.page.hasMore)")
        },
        Check("pull-head", section: "5", "a page's head, when the server sends it, is the space's newest seq: at least next's seq, and equal to the last write's seq on every page") { c in
            let space = c.newSpace()
            let versions = try await fill(c, space, ids: ids(5))
            let newest = versions.map(\.seq).max() ?? 0
            var cursor: String?
            for page in 1...5 {
                var query = [("limit", "2")]
                if let cursor { query.append(("since", cursor)) }
                let reply = try await c.pull(space, query)
                // head is optional: a server that leaves it out passes.
                guard let head = reply.page.head else { return }
                try expect(head >= reply.page.next.seq, "page \(page): head \(head) is below next \(reply.page.next)")
                try expect(head == newest, "page \(page): head is \(head), expected the space's newest seq \(newest)")
                if !reply.page.hasMore { break }
                cursor = reply.page.next.text
            }
            let empty = try await c.pull(c.newSpace())
            try expect(empty.page.head == nil || empty.page.head == 0, "an empty space's head is \(empty.page.head.map(String.init) ?? "absent"), expected 0")
        },
        Check("pull-default-limit-1000", section: "5", "without limit a page holds at most 1000 records (or maxPageLimit when lower)") { c in
            let info = try await c.info()
            let expected = min(1000, info.limits.maxPageLimit)
            let space = c.newSpace()
            let count = expected + 1
            let recordBytes = 200
            guard recordBytes * count < info.limits.pageByteBudget(requested: nil) else {
                throw CheckSkipped("pageBytes \(info.limits.pageBytes) would cut the page before \(expected) records")
            }
            _ = try await fill(c, space, ids: ids(count), data: { _ in [:] })
            let reply = try await c.pull(space)
            try expect(reply.page.changes.count == expected, "pull without limit answered \(reply.page.changes.count) records of \(count), expected \(expected)")
            try expect(reply.page.hasMore, "hasMore is false with a record left")
        },
        Check("pull-limit-clamped-to-max-page-limit", section: "5", "a limit over maxPageLimit is clamped to it, not refused") { c in
            let info = try await c.info()
            let maxLimit = info.limits.maxPageLimit
            guard maxLimit <= 5000 else { throw CheckSkipped("maxPageLimit \(maxLimit) is too large to fill cheaply") }
            guard 200 * (maxLimit + 1) < info.limits.pageByteBudget(requested: nil) else {
                throw CheckSkipped("pageBytes \(info.limits.pageBytes) would cut the page before maxPageLimit records")
            }
            let space = c.newSpace()
            _ = try await fill(c, space, ids: ids(maxLimit + 1), data: { _ in [:] })
            let reply = try await c.pull(space, [("limit", String(maxLimit + 1000))])
            try expect(reply.page.changes.count == maxLimit, "limit=\(maxLimit + 1000) answered \(reply.page.changes.count) records, expected maxPageLimit \(maxLimit)")
            try expect(reply.page.hasMore, "hasMore is false with a record left")
        },
        Check("pull-max-bytes-respected", section: "5", "a page holds at most maxBytes (clamped) bytes of encoded changes, counted on the wire, and paging still reaches every record") { c in
            let info = try await c.info()
            let floor = info.limits.maxRecordBytes + 16_384
            let budget = info.limits.pageByteBudget(requested: floor + floor / 2)
            let recordSize = max(64, min(info.limits.maxRecordBytes, budget / 5))
            let count = budget / recordSize * 2 + 3
            guard count * recordSize <= 64 << 20 else { throw CheckSkipped("the page budget is too large to exceed cheaply") }
            let space = c.newSpace()
            _ = try await fill(c, space, ids: ids(count), data: { _ in PushChecks.padded(recordSize) })
            var cursor: String?
            var seen = 0
            var pages = 0
            while true {
                var query = [("maxBytes", String(floor + floor / 2)), ("limit", "5000")]
                if let cursor { query.append(("since", cursor)) }
                let reply = try await c.pull(space, query)
                pages += 1
                try expect(reply.changesByteCount <= budget,
                           "page \(pages) with maxBytes=\(floor + floor / 2) has \(reply.changesByteCount) bytes of changes (\(reply.page.changes.count) records), over the budget of \(budget)")
                try expect(!reply.page.changes.isEmpty || !reply.page.hasMore, "page \(pages) is empty but says hasMore")
                seen += reply.page.changes.count
                if !reply.page.hasMore { break }
                try expect(pages <= count, "paging does not end")
                cursor = reply.page.next.text
            }
            try expect(seen == count, "paging by bytes listed \(seen) of \(count) records")
            try expect(pages > 1, "\(count) records of \(recordSize) bytes fit one page of budget \(budget)")
        },
        Check("pull-max-bytes-clamped-to-floor", section: "5", "maxBytes below maxRecordBytes + 16384 is raised to it: small records still fill the page") { c in
            let space = c.newSpace()
            _ = try await fill(c, space, ids: ids(5))
            let reply = try await c.pull(space, [("maxBytes", "1")])
            try expect(reply.page.changes.count == 5, "maxBytes=1 answered \(reply.page.changes.count) of 5 small records; it must be clamped up to maxRecordBytes + 16384")
        },
        Check("pull-largest-record-always-fits", section: "5", "a page always holds at least one record: records of maxRecordBytes come one per page with maxBytes=1") { c in
            let info = try await c.info()
            let size = info.limits.maxRecordBytes
            guard size <= 16 << 20 else { throw CheckSkipped("maxRecordBytes \(size) is too large to write cheaply") }
            let space = c.newSpace()
            _ = try await fill(c, space, ids: ids(3), data: { _ in PushChecks.padded(size) })
            var cursor: String?
            var seen = 0
            for page in 1...6 {
                var query = [("maxBytes", "1")]
                if let cursor { query.append(("since", cursor)) }
                let reply = try await c.pull(space, query)
                try expect(!reply.page.changes.isEmpty || seen == 3, "page \(page) is empty with \(3 - seen) record(s) of maxRecordBytes left")
                seen += reply.page.changes.count
                if !reply.page.hasMore { break }
                cursor = reply.page.next.text
            }
            try expect(seen == 3, "paging with maxBytes=1 listed \(seen) of 3 large records")
        },
        Check("pull-page-bytes-ceiling", section: "5", "maxBytes over pageBytes, or none, is capped at pageBytes") { c in
            let info = try await c.info()
            let ceiling = info.limits.pageByteBudget(requested: nil)
            guard ceiling <= 24 << 20 else { throw CheckSkipped("pageBytes \(ceiling) is too large to exceed cheaply") }
            let recordSize = max(64, min(info.limits.maxRecordBytes, 200_000))
            let count = ceiling / recordSize + 3
            let space = c.newSpace()
            _ = try await fill(c, space, ids: ids(count), data: { _ in PushChecks.padded(recordSize) })
            for query in [[("maxBytes", "1000000000000"), ("limit", "5000")], [("limit", "5000")]] {
                let reply = try await c.pull(space, query)
                try expect(reply.changesByteCount <= ceiling,
                           "pull\(HTTPRequestBytes.query(query)): \(reply.changesByteCount) bytes of changes, over pageBytes \(ceiling)")
                try expect(reply.page.hasMore && !reply.page.changes.isEmpty, "pull\(HTTPRequestBytes.query(query)): expected a partial page with hasMore")
            }
        },
        Check("pull-collections-filter", section: "5", "collections=a,b lists only records of those collections, in seq order, and pages through them") { c in
            let space = c.newSpace()
            var expected: [String] = []
            for i in 0..<4 {
                for collection in ["todos", "notes", "tags"] {
                    let id = "\(collection)-\(i)"
                    _ = try await PushChecks.create(c, space, id: id, collection: collection)
                    if collection != "notes" { expected.append(id) }
                }
            }
            let all = try await c.pullAll(space, extra: [("collections", "todos,tags")]).records
            try expect(all.map(\.id) == expected, "collections=todos,tags listed \(all.map(\.id)), expected \(expected)")
            let paged = try await c.pullAll(space, extra: [("collections", "tags,todos"), ("limit", "3")]).records
            try expect(paged.map(\.id) == expected, "collections=tags,todos with limit=3 listed \(paged.map(\.id)), expected \(expected)")
            let none = try await c.pull(space, [("collections", "nothing-here")])
            try expect(none.page.changes.isEmpty && !none.page.hasMore, "a collection without records answered \(none.page.changes.map(\.id))")
        },
        Check("pull-space-isolation", section: "5", "a pull lists the records of its own space only") { c in
            let mine = c.newSpace()
            let other = c.newSpace()
            _ = try await fill(c, other, ids: ["shared-id", "other-only"])
            _ = try await fill(c, mine, ids: ["shared-id", "mine-only"])
            let token = c.token([mine, other], scope: "read")
            let reply = try await c.pull(mine, token: token)
            try expect(reply.page.changes.map(\.id) == ["shared-id", "mine-only"], "pull of one space listed \(reply.page.changes.map(\.id)), expected [shared-id, mine-only]")
            let theirs = try await c.pull(other, token: token)
            try expect(theirs.page.changes.map(\.id) == ["shared-id", "other-only"], "pull of the other space listed \(theirs.page.changes.map(\.id)), expected [shared-id, other-only]")
        },
        Check("pull-epoch-changed-409", section: "5", "since of another epoch is 409 epoch_changed with details.epoch = the current epoch") { c in
            let space = c.newSpace()
            let info = try await c.info()
            _ = try await fill(c, space, ids: ids(2))
            for other in PushChecks.otherEpochs(info.epoch) {
                for cursor in ["\(other).0", "\(other).1"] {
                    let response = try await c.pullResponse(space, [("since", cursor)])
                    let details = try expectError(response, 409, "epoch_changed", "pull since \(cursor) (epoch is \(info.epoch))")
                    try expect(try response.json()["changes"] == nil, "the epoch_changed answer carries changes; nothing else may be in it")
                    try expect(details["epoch"]?.stringValue == info.epoch.rawValue, "epoch_changed details.epoch is \(details["epoch"]?.description ?? "absent"), expected \(info.epoch)")
                }
            }
        },
        Check("pull-cursor-ahead-409", section: "5", "since beyond the space's newest seq is 409 cursor_ahead with details.epoch and details.head") { c in
            let space = c.newSpace()
            let info = try await c.info()
            let versions = try await fill(c, space, ids: ids(2))
            let head = versions.map(\.seq).max()!
            for ahead in [head + 1, head + 1000] {
                let details = try expectError(try await c.pullResponse(space, [("since", "\(info.epoch).\(ahead)")]), 409, "cursor_ahead", "pull since \(info.epoch).\(ahead) (head \(head))")
                try expect(details["epoch"]?.stringValue == info.epoch.rawValue, "cursor_ahead details.epoch is \(details["epoch"]?.description ?? "absent"), expected \(info.epoch)")
                try expect(detailInt(details, "head") == head, "cursor_ahead details.head is \(details["head"]?.description ?? "absent"), expected \(head)")
            }
            let empty = c.newSpace()
            let details = try expectError(try await c.pullResponse(empty, [("since", "\(info.epoch).5")]), 409, "cursor_ahead", "pull of an empty space since \(info.epoch).5")
            try expect(detailInt(details, "head") == 0, "cursor_ahead on an empty space: details.head is \(details["head"]?.description ?? "absent"), expected 0")
        },
        Check("pull-invalid-cursor-400", section: "5", "since that is not a cursor is 400 invalid_cursor") { c in
            let space = c.newSpace()
            let info = try await c.info()
            for cursor in ["garbage", "\(info.epoch)", "\(info.epoch).", ".5", "\(info.epoch).-1", "\(info.epoch).01", "\(info.epoch).x",
                           "bad-epoch!.3", "\(info.epoch).99999999999999999999", ""] {
                try expectError(try await c.pullResponse(space, [("since", cursor)]), 400, "invalid_cursor", "pull since \"\(cursor)\"")
            }
        },
        Check("pull-invalid-query-422", section: "2", "a pull query parameter of the wrong type is 422 invalid_request naming it in details.field") { c in
            let space = c.newSpace()
            for (name, value) in [("limit", "ten"), ("maxBytes", "lots"), ("wait", "soon")] {
                let details = try expectError(try await c.pullResponse(space, [(name, value)]), 422, "invalid_request", "pull with \(name)=\(value)")
                try expect(details["field"]?.stringValue == name, "pull with \(name)=\(value): details.field is \(details["field"]?.description ?? "absent"), expected \(name)")
            }
        },
    ]
}
