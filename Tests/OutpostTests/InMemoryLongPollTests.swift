import Foundation
import Outpost
import OutpostCore
import Synchronization
import Testing

/// `InMemorySyncServer`'s long poll waits on a signal: a commit to its space wakes it, a
/// commit elsewhere does not, a change of the whole history (a restart, a rotation) wakes
/// it to read again, and a cancelled one ends at once.
@Suite struct InMemoryLongPollTests {
    static func change(_ id: String) -> Change {
        Change(changeId: "c-\(id)", collection: "c", id: id, op: .put, data: ["v": 1], baseVersion: nil, clientTime: 1)
    }

    final class Answered: Sendable {
        let flag = Mutex(false)
    }

    @Test func aCommitToItsSpaceWakesItAndOneElsewhereDoesNot() async throws {
        let server = InMemorySyncServer()
        _ = try await server.push(PushRequest(clientId: "d", changes: [Self.change("a")]), space: "one")
        let head = try await server.pull(PullQuery(), space: "one").next
        let started = ContinuousClock.now
        let answered = Answered()
        let poll = Task {
            defer { answered.flag.withLock { $0 = true } }
            return try await server.pull(PullQuery(since: head, waitMs: 30_000), space: "one")
        }
        try await Task.sleep(for: .milliseconds(200))
        _ = try await server.push(PushRequest(clientId: "d", changes: [Self.change("b")]), space: "other")
        try await Task.sleep(for: .milliseconds(200))
        let early = answered.flag.withLock { $0 }
        #expect(!early, "a commit to another space answered it")
        _ = try await server.push(PushRequest(clientId: "d", changes: [Self.change("c")]), space: "one")
        let page = try await poll.value
        #expect(page.records.count == 1 && page.next.seq == 2)
        #expect(ContinuousClock.now - started < .seconds(10), "woken by the commit, not at its deadline")
    }

    @Test func aNewHistoryWakesItToReadAgain() async throws {
        let server = InMemorySyncServer()
        _ = try await server.push(PushRequest(clientId: "d", changes: [Self.change("a")]), space: "one")
        let head = try await server.pull(PullQuery(), space: "one").next
        let poll = Task { try await server.pull(PullQuery(since: head, waitMs: 30_000), space: "one") }
        try await Task.sleep(for: .milliseconds(200))
        server.rotateEpoch()
        do {
            let page = try await poll.value
            Issue.record("answered a page of the ended epoch: \(page)")
        } catch TransportError.refused(let status, let envelope) {
            #expect(status == 409 && envelope.code == "epoch_changed")
        }
    }

    @Test func aCancelledLongPollEndsAtOnce() async throws {
        let server = InMemorySyncServer()
        let started = ContinuousClock.now
        let poll = Task { try await server.pull(PullQuery(waitMs: 30_000), space: "one") }
        try await Task.sleep(for: .milliseconds(200))
        poll.cancel()
        let page = try await poll.value
        #expect(page.records.isEmpty)
        #expect(ContinuousClock.now - started < .seconds(10))
    }
}
