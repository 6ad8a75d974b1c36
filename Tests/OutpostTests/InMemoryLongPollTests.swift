import Foundation
import Outpost
import OutpostTesting
import OutpostCore
import OutpostTestBasics
import Testing

/// `InMemorySyncServer`'s long poll waits on a signal: a commit to its space wakes it, a
/// commit elsewhere does not, a change of the whole history (a restart, a rotation) wakes
/// it to read again, and a cancelled one ends at once. A commit and a cancellation end a
/// wait synchronously, so each test checks `waitingPulls` right after the event, never a
/// duration: its polls wait the longest the protocol allows, and only a lost signal would
/// leave one waiting.
@Suite struct InMemoryLongPollTests {
    static func change(_ id: String) -> Change {
        Change(changeId: "c-\(id)", collection: "c", id: id, op: .put, data: ["v": 1], baseVersion: nil, clientTime: 1)
    }

    @Test func aCommitToItsSpaceWakesItAndOneElsewhereDoesNot() async throws {
        let server = InMemorySyncServer()
        _ = try await server.push(PushRequest(clientId: "d", changes: [Self.change("a")]), space: "one")
        let head = try await server.pull(PullQuery(), space: "one").next
        let poll = Task { try await server.pull(PullQuery(since: head, waitMs: PullQuery.maxWaitMs), space: "one") }
        try await eventually("the long poll waits") { server.waitingPulls == 1 }
        _ = try await server.push(PushRequest(clientId: "d", changes: [Self.change("b")]), space: "other")
        #expect(server.waitingPulls == 1, "a commit to another space woke it")
        _ = try await server.push(PushRequest(clientId: "d", changes: [Self.change("c")]), space: "one")
        #expect(server.waitingPulls == 0, "the commit to its space did not wake it")
        let page = try await poll.value
        #expect(page.records.count == 1 && page.next.seq == 2)
    }

    @Test func aNewHistoryWakesItToReadAgain() async throws {
        let server = InMemorySyncServer()
        _ = try await server.push(PushRequest(clientId: "d", changes: [Self.change("a")]), space: "one")
        let head = try await server.pull(PullQuery(), space: "one").next
        let poll = Task { try await server.pull(PullQuery(since: head, waitMs: PullQuery.maxWaitMs), space: "one") }
        try await eventually("the long poll waits") { server.waitingPulls == 1 }
        server.rotateEpoch()
        #expect(server.waitingPulls == 0, "the new history did not wake it")
        do {
            let page = try await poll.value
            Issue.record("answered a page of the ended epoch: \(page)")
        } catch TransportError.refused(let status, let envelope) {
            #expect(status == 409 && envelope.code == "epoch_changed")
        }
    }

    @Test func aCancelledLongPollEndsAtOnce() async throws {
        let server = InMemorySyncServer()
        let poll = Task { try await server.pull(PullQuery(waitMs: PullQuery.maxWaitMs), space: "one") }
        try await eventually("the long poll waits") { server.waitingPulls == 1 }
        poll.cancel()
        #expect(server.waitingPulls == 0, "the cancellation did not end the wait")
        let page = try await poll.value
        #expect(page.records.isEmpty)
    }
}
