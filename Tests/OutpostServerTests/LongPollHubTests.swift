import Foundation
import Glibc
import Testing
import OutpostCore
import OutpostTestSupport
@testable import OutpostServer

/// Long polls that would read the same page wait as one group (`LongPollHub`): one store
/// waiter, one read and one answer for all of them, each pull counted and answered.
@Suite struct LongPollHubTests {
    @Test func pullsWithOneCursorShareOneWaiterAndAllGetTheCommit() async throws {
        try await withServer { s in
            let port = s.port
            let token = s.token(spaces: ["sp"], scope: .read)
            let pulls = (0..<3).map { _ in
                OnThread {
                    try httpRequest(port: port, "GET", "/v1/spaces/sp/pull?wait=60000", headers: [("Authorization", "Bearer \(token)")])
                }
            }
            // One group: the store has one waiter for the three pulls (the group's task
            // registers it once it runs). The pulls wait as long as the protocol lets them:
            // this task may wait that long for a thread of the pool to look.
            try await eventually("three pulls waiting in one group") {
                s.app.sync.waitingPulls == 3 && s.app.store.notifier.waitingCount == 1
            }
            _ = try await s.push("sp", [put("c1", "a")])
            var bodies: [[UInt8]] = []
            for pull in pulls {
                let r = try await pull.value
                #expect(r.status == 200)
                #expect(try PullPage.decode(r.body).changes.map(\.id) == ["a"])
                bodies.append(r.body)
            }
            #expect(Set(bodies).count == 1)
            #expect(s.app.sync.longPollsWoken.value.load(ordering: .relaxed) == 3)
            #expect(s.app.sync.waitingPulls == 0)
        }
    }

    @Test func pullsLeaveAtTheirOwnDeadlinesAndTheLastOneOutStopsTheGroup() async throws {
        try await withServer { s in
            // Alone in its group: answered empty at its deadline, and the group's store
            // waiter goes with it.
            #expect(try PullPage.decode(try await s.pull("sp", query: "wait=100").body).changes.isEmpty)
            // The pull left its group, and the group's wait was cancelled, before the answer.
            #expect(s.app.sync.waitingPulls == 0 && s.app.store.notifier.waitingCount == 0, "the group stopped")
            let before = s.reports.value.registered.count

            let port = s.port
            let token = s.token(spaces: ["sp"], scope: .read)
            let long = OnThread {
                try httpRequest(port: port, "GET", "/v1/spaces/sp/pull?wait=60000", headers: [("Authorization", "Bearer \(token)")])
            }
            try await s.registeredWaits("the long pull waiting", count: before + 1)
            #expect(s.app.sync.waitingPulls == 1)
            // The same cursor with a short wait joins the group and leaves it at its own
            // deadline; the long pull waits on and gets the commit.
            #expect(try PullPage.decode(try await s.pull("sp", query: "wait=100").body).changes.isEmpty)
            #expect(s.app.sync.waitingPulls == 1)
            _ = try await s.push("sp", [put("c1", "a")])
            #expect(try PullPage.decode(try await long.value.body).changes.map(\.id) == ["a"])
            #expect(s.app.sync.waitingPulls == 0)
        }
    }

    @Test func aPullWhoseClientLeavesLeavesItsGroupAndTheGroupStops() async throws {
        try await withServer { s in
            let client = try TestHTTPClient(port: s.port)
            try client.send(Array("GET /v1/spaces/sp/pull?wait=60000 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(s.token(spaces: ["sp"], scope: .read))\r\n\r\n".utf8))
            try await s.registeredWaits("the pull waiting", count: 1)
            #expect(s.app.sync.waitingPulls == 1 && s.app.store.notifier.waitingCount == 1)
            // The client goes; no deadline, no commit: the engine tells the hub, which takes
            // the pull out and cancels its group's wait.
            Glibc.shutdown(client.fd, Int32(SHUT_RDWR))
            try await s.endedWaits("the pull left and its group stopped", count: 1)
            #expect(s.app.sync.waitingPulls == 0 && s.app.store.notifier.waitingCount == 0)
        }
    }
}
