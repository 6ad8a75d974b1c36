import OutpostCore
import Synchronization

/// Section 5's long poll, and what must survive a restart or an epoch rotation
/// (sections 1, 4, 5, 8).
enum LifecycleChecks {
    static func milliseconds(_ d: Duration) -> Int64 {
        d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
    }

    /// A long poll in flight on its own connection.
    struct Poll: Sendable {
        let connection: RawConnection
        /// The answer, read on the connection's queue as soon as it comes.
        let answer: RawConnection.PendingResponse
        /// When the request was sent in full (on the connection's queue).
        let sentAt: ContinuousClock.Instant

        /// Whether the answer is in.
        var isFinished: Bool { answer.isDone }

        /// The answer and when it came.
        var value: (RawResponse, ContinuousClock.Instant) {
            get async throws { try await answer.value }
        }
    }

    /// Sends a long poll on its own connection.
    static func startPoll(_ c: CheckContext, _ space: String, _ query: [(String, String)]) async throws -> Poll {
        // Sent, read and timed on the connection's own queue: the times the checks
        // compare are the server's, not the waits of this task for a busy executor.
        let (connection, sentAt, answer) = try await RawConnection.openTimed(
            c.endpoint, sending: c.requestBytes("GET", CheckContext.spacePath(space, "pull") + HTTPRequestBytes.query(query), token: c.readToken(space)),
            responseTimeout: .seconds(75))
        return Poll(connection: connection, answer: answer, sentAt: sentAt)
    }

    static let longPoll: [Check] = [
        Check("long-poll-woken-by-push", section: "5", "a pull with wait held at the head answers as soon as a push commits a change to the space") { c in
            let space = c.newSpace()
            _ = try await PushChecks.create(c, space, id: "before")
            let cursor = try await c.pull(space).page.next
            let poll = try await startPoll(c, space, [("since", cursor.text), ("wait", "20000")])
            defer { poll.connection.close() }
            try await Task.sleep(for: .milliseconds(400))
            let pushStart = ContinuousClock.now
            let version = try await PushChecks.create(c, space, id: "wakes")
            let pushDone = ContinuousClock.now
            let (response, arrived) = try await poll.value
            try expect(arrived >= pushStart, "the long poll answered \(milliseconds(pushStart - arrived)) ms before anything was due: \(response.summary)")
            let reply = try c.decodePull(response, query: [("wait", "20000")])
            try expect(reply.page.changes.map(\.id) == ["wakes"] && reply.page.next == version,
                       "the woken poll answered \(reply.page.changes.map(\.id)) next \(reply.page.next), expected [wakes] next \(version)")
            let latency = max(.zero, arrived - pushDone)
            c.note("answered \(milliseconds(latency)) ms after the push's answer")
            try expect(latency <= c.configuration.longPollWakeLimit,
                       "the long poll answered \(milliseconds(latency)) ms after the push was committed (limit \(milliseconds(c.configuration.longPollWakeLimit)) ms; goal 50 ms)")
        },
        Check("long-poll-times-out-empty", section: "5", "a long poll with nothing due answers an empty page (next = since) when its wait is up", waitsOnServerTimeout: true) { c in
            let space = c.newSpace()
            _ = try await PushChecks.create(c, space, id: "before")
            let cursor = try await c.pull(space).page.next
            let poll = try await startPoll(c, space, [("since", cursor.text), ("wait", "1500")])
            defer { poll.connection.close() }
            let (response, arrived) = try await poll.value
            let elapsed = milliseconds(arrived - poll.sentAt)
            let reply = try c.decodePull(response, query: [("wait", "1500")])
            try expect(reply.page.changes.isEmpty && reply.page.next == cursor && !reply.page.hasMore,
                       "the timed-out poll answered \(reply.page.changes.count) record(s), next \(reply.page.next), hasMore \(reply.page.hasMore); expected none, \(cursor), false")
            try expect(elapsed >= 1400, "wait=1500 answered after \(elapsed) ms: the server did not hold the request")
            try expect(elapsed < 6500, "wait=1500 answered after \(elapsed) ms")
            c.note("answered after \(elapsed) ms")
        },
        Check("long-poll-answers-at-once-when-due", section: "5", "a pull with wait answers at once when records are already due") { c in
            let space = c.newSpace()
            _ = try await PushChecks.create(c, space, id: "due")
            let poll = try await startPoll(c, space, [("wait", "30000")])
            defer { poll.connection.close() }
            let (response, arrived) = try await poll.value
            let reply = try c.decodePull(response, query: [("wait", "30000")])
            try expect(reply.page.changes.map(\.id) == ["due"], "expected the due record, got \(reply.page.changes.map(\.id))")
            try expect(arrived - poll.sentAt < .seconds(3), "a pull with records due and wait=30000 took \(milliseconds(arrived - poll.sentAt)) ms")
        },
        Check("long-poll-errors-answer-at-once", section: "5", "a pull with wait whose cursor is refused (epoch_changed, cursor_ahead, invalid_cursor) is answered at once") { c in
            let space = c.newSpace()
            let info = try await c.info()
            let cases = [("\(PushChecks.otherEpochs(info.epoch)[0]).1", 409, "epoch_changed"), ("\(info.epoch).50", 409, "cursor_ahead"), ("nonsense", 400, "invalid_cursor")]
            for (cursor, status, code) in cases {
                let (response, took) = try await c.timedSend("GET", CheckContext.spacePath(space, "pull") + HTTPRequestBytes.query([("since", cursor), ("wait", "6000")]),
                                                             token: c.readToken(space), timeout: .seconds(15))
                try expectError(response, status, code, "pull since \(cursor) with wait=6000")
                try expect(took < .seconds(3), "pull since \(cursor) with wait=6000 held the refusal for \(milliseconds(took)) ms")
            }
        },
        Check("long-poll-filtered-by-collections", section: "5", "a long poll with collections is answered with records of those collections only, and is woken by one") { c in
            let space = c.newSpace()
            let info = try await c.info()
            var cursor = Version.start(of: info.epoch).text
            var poll = try await startPoll(c, space, [("since", cursor), ("collections", "todos"), ("wait", "20000")])
            try await Task.sleep(for: .milliseconds(300))
            _ = try await PushChecks.create(c, space, id: "note-1", collection: "notes")
            try await Task.sleep(for: .milliseconds(300))
            // A commit to another collection may end the poll early with an empty page;
            // then poll again from where that page left off.
            if poll.isFinished {
                let (response, _) = try await poll.value
                let reply = try c.decodePull(response, query: [("collections", "todos")])
                try expect(reply.page.changes.isEmpty, "a long poll for collections=todos answered records of other collections: \(reply.page.changes.map { "\($0.collection)/\($0.id)" })")
                poll.connection.close()
                cursor = reply.page.next.text
                poll = try await startPoll(c, space, [("since", cursor), ("collections", "todos"), ("wait", "20000")])
                try await Task.sleep(for: .milliseconds(300))
            }
            defer { poll.connection.close() }
            let pushDone = ContinuousClock.now
            _ = try await PushChecks.create(c, space, id: "todo-1", collection: "todos")
            let (response, arrived) = try await poll.value
            let reply = try c.decodePull(response, query: [("collections", "todos")])
            try expect(reply.page.changes.map(\.id) == ["todo-1"], "the filtered poll answered \(reply.page.changes.map { "\($0.collection)/\($0.id)" }), expected [todos/todo-1]")
            try expect(arrived - pushDone <= c.configuration.longPollWakeLimit + .seconds(1),
                       "the filtered poll answered \(milliseconds(arrived - pushDone)) ms after the push")
        },
    ]

    static let restart: [Check] = [
        Check("restart-seqs-continue", section: "1", "after a restart the server never hands out a seq again: new writes get later versions and every record keeps its own", requires: [.restart]) { c in
            let space = c.newSpace()
            var versions: [Version] = []
            for id in ["r1", "r2", "r3"] { versions.append(try await PushChecks.create(c, space, id: id, data: ["id": .string(id)])) }
            try await c.restartServer()
            let after = try await PushChecks.create(c, space, id: "r4", data: ["id": "r4"])
            let newest = versions.map(\.seq).max()!
            try expect(after.epoch == versions[0].epoch, "a restart changed the epoch from \(versions[0].epoch) to \(after.epoch) without a rotation")
            try expect(after.seq > newest, "after the restart a new record got \(after), not later than \(versions.last!) given before it: a seq was handed out twice")
            let records = try await c.pullAll(space).records
            try expect(records.map(\.id) == ["r1", "r2", "r3", "r4"], "after the restart pull lists \(records.map(\.id)), expected [r1, r2, r3, r4]")
            try expect(Set(records.map(\.version)).count == 4, "records share versions after the restart: \(records.map(\.version.text))")
            for record in records { try expect(record.data?["id"]?.stringValue == record.id, "\(record.id) has the data of another record: \(record.data?.description ?? "")") }
        },
        Check("restart-replay-survives", section: "4", "an applied change is still recognised after a restart: replayed with its original version", requires: [.restart]) { c in
            let space = c.newSpace()
            let change = ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)
            let version = try expectApplied(try await c.push(space, [change]).results[0], "first push")
            try await c.restartServer()
            let result = try await c.push(space, [change]).results[0]
            try expect(result.status == .applied && result.version == version && result.replayed,
                       "the change resent after a restart: expected applied \(version) replayed, got \(describe(result))")
        },
    ]

    static let rotation: [Check] = [
        Check("rotate-epoch-old-cursor-epoch-changed", section: "5", "after rotate-epoch the new epoch is later, an old cursor is 409 epoch_changed naming it, and a pull from the start works", requires: [.rotateEpoch]) { c in
            let space = c.newSpace()
            let before = try await c.info().epoch
            _ = try await PushChecks.create(c, space, id: "r1")
            let cursor = try await c.pull(space).page.next
            try await c.rotateEpoch()
            let after = try await c.info().epoch
            try expect(before < after, "rotate-epoch gave epoch \(after), which does not sort after \(before) (longer is later; same length: greater bytes are later)")
            let details = try expectError(try await c.pullResponse(space, [("since", cursor.text)]), 409, "epoch_changed", "pull with the old cursor \(cursor)")
            try expect(details["epoch"]?.stringValue == after.rawValue, "epoch_changed details.epoch is \(details["epoch"]?.description ?? "absent"), expected \(after)")
            let fresh = try await c.pull(space)
            try expect(fresh.page.epoch == after, "a pull from the start answered epoch \(fresh.page.epoch), expected \(after)")
            try expect(fresh.page.changes.allSatisfy { $0.version.epoch == after }, "records pulled after the rotation carry old-epoch versions: \(fresh.page.changes.map(\.version.text))")
            try expect(fresh.page.changes.map(\.id) == ["r1"], "after the rotation the space lists \(fresh.page.changes.map(\.id)), expected the record it had")
        },
        Check("rotate-epoch-old-base-mismatch", section: "4", "after rotate-epoch a change based on an old-epoch version is rejected epoch_mismatch", requires: [.rotateEpoch]) { c in
            let space = c.newSpace()
            let v1 = try await PushChecks.create(c, space, id: "r1")
            try await c.rotateEpoch()
            let reply = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: v1.text)])
            try expectRejected(reply.results[0], "epoch_mismatch", "put with the pre-rotation base \(v1)")
            let info = try await c.info()
            try expect(reply.epoch == info.epoch && reply.epoch != v1.epoch, "push answer's epoch is \(reply.epoch), expected the new epoch \(info.epoch)")
        },
    ]
}
