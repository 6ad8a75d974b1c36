import Foundation
import OutpostCore
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// `GET /v1/admin/spaces` over a real socket, on each store: the operator's page of spaces
/// with their counts, for admin tokens only.
@Suite(.serverLogs) struct AdminSpacesTests {
    enum Store: String, CaseIterable, Sendable { case sqlite, postgres }

    @Test(arguments: Store.allCases) func anAdminTokenListsSpacesWithCountsByPage(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database() : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let made = try PushResponse.decode(try await s.push("beta", [put("b1", "b1"), put("b2", "b2")]).body)
            let del = Change(changeId: "b3", collection: "todos", id: "b1", op: .delete, data: nil, baseVersion: made.results[0].version, clientTime: 1)
            #expect(try PushResponse.decode(try await s.push("beta", [del]).body).results.map(\.status) == [.applied])
            #expect(try await s.push("alpha", [put("a1", "a1")]).status == 200)
            #expect(try await s.push("gamma", [put("g1", "g1")]).status == 200)

            let admin = s.token(spaces: [], admin: true)
            let first = try await s.request("GET", "/v1/admin/spaces?limit=2", token: admin)
            #expect(first.status == 200, "\(String(decoding: first.body, as: UTF8.self))")
            let body = try json(first)
            let spaces = body["spaces"]?.arrayValue ?? []
            #expect(spaces.map { $0["name"]?.stringValue } == ["alpha", "beta"])
            #expect(spaces[1]["records"] == 1 && spaces[1]["tombstones"] == 1 && spaces[1]["head"] == 3)
            #expect(spaces[0]["lastWriteAt"]?.int64Value ?? 0 > 1_700_000_000_000)
            #expect(body["next"] == "beta")
            let second = try json(try await s.request("GET", "/v1/admin/spaces?limit=2&after=beta", token: admin))
            #expect(second["spaces"]?.arrayValue?.map { $0["name"]?.stringValue } == ["gamma"])
            #expect(second["next"] == .null)

            // Not an admin token: 403; no token: 401; a bad page size or cursor: 422.
            #expect(try await s.request("GET", "/v1/admin/spaces", token: s.token(spaces: ["*"])).status == 403)
            #expect(try await s.request("GET", "/v1/admin/spaces", token: nil).status == 401)
            #expect(try await s.request("GET", "/v1/admin/spaces?limit=0", token: admin).status == 422)
            #expect(try await s.request("GET", "/v1/admin/spaces?limit=1001", token: admin).status == 422)
            #expect(try await s.request("GET", "/v1/admin/spaces?after=-x", token: admin).status == 422)
            // An admin token lists spaces but does not read their records.
            #expect(try await s.pull("beta", token: admin).status == 403)
        }
    }
}
