import Foundation
import Testing
import OutpostCore
import OutpostCrypto
import OutpostTestSupport
@testable import OutpostServer

@Suite struct SyncHTTPTests {
    @Test func infoHealthAndReadiness() async throws {
        try await withServer(limits: Limits(maxRequestBytes: 1_000_000, maxChangesPerPush: 50, maxRecordBytes: 10_000, pageBytes: 500_000, maxPageLimit: 100, chunkSize: 65_536, maxMediaBytes: 1 << 20)) { s in
            let info = try ServerInfo.decode(try await httpRequestAsync(port: s.port, "GET", "/v1/info").body)
            #expect(info.protocolVersion == 1)
            #expect(info.server.hasPrefix("outpost/"))
            #expect(info.epoch == s.epoch)
            #expect(info.limits.maxChangesPerPush == 50 && info.limits.maxPageLimit == 100 && info.limits.chunkSize == 65_536)
            let health = try await httpRequestAsync(port: s.port, "GET", "/healthz")
            #expect(health.status == 200 && health.text == #"{"status":"ok"}"#)
            #expect(health.header("Date") != nil && health.header("X-Request-ID") != nil)
            #expect(try await httpRequestAsync(port: s.port, "GET", "/readyz").status == 200)
        }
    }

    @Test func pushThenPullOverHTTP() async throws {
        try await withServer { s in
            let r = try await s.push("team", [put("c1", "a", ["title": "Buy milk"]), put("c2", "b"), Change(changeId: "c3", collection: "todos", id: "a", op: .delete, data: nil, baseVersion: Version(epoch: s.epoch, seq: 1))], clientId: "phone-7f3a")
            #expect(r.status == 200)
            let push = try PushResponse.decode(r.body)
            #expect(push.epoch == s.epoch)
            #expect(push.results.map(\.status) == [.applied, .applied, .applied])
            #expect(push.results.map { $0.version!.seq } == [1, 2, 3])

            let page = try PullPage.decode(try await s.pull("team").body)
            #expect(page.epoch == s.epoch)
            #expect(page.changes.map(\.id) == ["b", "a"])
            #expect(page.changes[1].deleted && page.changes[1].data == nil)
            #expect(page.changes[0].updatedBy == "phone-7f3a")
            #expect(page.changes[0].clientTime == 1_764_430_000_000)
            #expect(page.next == Version(epoch: s.epoch, seq: 3))
            #expect(!page.hasMore)
            // From the last cursor: an empty page whose next is the cursor.
            let empty = try PullPage.decode(try await s.pull("team", query: "since=\(page.next.text)").body)
            #expect(empty.changes.isEmpty && empty.next == page.next)
            // A space nobody wrote: an empty page starting at <epoch>.0.
            let none = try PullPage.decode(try await s.pull("nobody").body)
            #expect(none.changes.isEmpty && none.next == Version.start(of: s.epoch))
        }
    }

    @Test func pagesHonourLimitBytesAndCollections() async throws {
        try await withServer { s in
            var changes: [Change] = []
            for i in 0..<30 {
                changes.append(put("c\(i)", "r\(i)", ["blob": .string(String(repeating: "x", count: 100_000))], collection: i % 3 == 0 ? "notes" : "todos"))
            }
            #expect(try await s.push("sp", changes).status == 200)
            // Values beyond 64 bits are clamped like any large value.
            let huge = try await s.pull("sp", query: "limit=99999999999999999999&maxBytes=99999999999999999999")
            #expect(huge.status == 200)
            #expect(try PullPage.decode(huge.body).changes.count == 30)
            // limit
            let p1 = try PullPage.decode(try await s.pull("sp", query: "limit=7").body)
            #expect(p1.changes.count == 7 && p1.hasMore && p1.next.seq == 7)
            // maxBytes is clamped up to maxRecordBytes + 16384 and holds.
            let raw = try await s.pull("sp", query: "maxBytes=1")
            let p2 = try PullPage.decode(raw.body)
            let budget = Limits().maxRecordBytes + 16_384
            guard case .object(let o) = try json(raw), case .array(let items)? = o["changes"] else { Issue.record("bad page"); return }
            #expect(JSONValue.array(items).encoded().count <= budget)
            #expect(p2.changes.count == 2 && p2.hasMore)
            // collections
            var seen: [String] = []
            var cursor = ""
            while true {
                let p = try PullPage.decode(try await s.pull("sp", query: "collections=notes&limit=3" + cursor).body)
                seen += p.changes.map(\.id)
                #expect(p.changes.allSatisfy { $0.collection == "notes" })
                cursor = "&since=\(p.next.text)"
                if !p.hasMore { break }
            }
            #expect(seen == stride(from: 0, to: 30, by: 3).map { "r\($0)" })
        }
    }

    @Test func authIsCheckedBeforeAnythingElse() async throws {
        try await withServer { s in
            let body = PushRequest(clientId: "p", changes: [put("c1", "a")]).encoded()
            var r = try await s.request("POST", "/v1/spaces/sp/push", token: nil, body: body)
            #expect(r.status == 401 && errorCode(r) == "unauthorized" && r.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
            r = try await s.request("POST", "/v1/spaces/sp/push", token: "not.a.jwt", body: body)
            #expect(r.status == 401)
            // Signed with another secret.
            let forged = JWTAuthority(secret: Array("another-secret-0123456789abcdef-0123".utf8)).sign(Claims(sub: "x", exp: Int64(Date().timeIntervalSince1970) + 60, spaces: ["*"], scope: .write))
            r = try await s.request("POST", "/v1/spaces/sp/push", token: forged, body: body)
            #expect(r.status == 401)
            // alg none
            let header = Base64.encodeURL(Array(#"{"alg":"none","typ":"JWT"}"#.utf8))
            let payload = Base64.encodeURL(Array(#"{"sub":"x","exp":9999999999,"spaces":["*"],"scope":"write"}"#.utf8))
            r = try await s.request("POST", "/v1/spaces/sp/push", token: "\(header).\(payload).", body: body)
            #expect(r.status == 401)
            // Expired.
            r = try await s.request("POST", "/v1/spaces/sp/push", token: s.token(spaces: ["sp"], exp: 1000), body: body)
            #expect(r.status == 401)
            // Another space, read scope.
            r = try await s.request("POST", "/v1/spaces/sp/push", token: s.token(spaces: ["other"]), body: body)
            #expect(r.status == 403 && errorCode(r) == "forbidden")
            r = try await s.request("POST", "/v1/spaces/sp/push", token: s.token(spaces: ["sp"], scope: .read), body: body)
            #expect(r.status == 403)
            #expect(try await s.pull("sp", token: s.token(spaces: ["sp"], scope: .read)).status == 200)
            // Prefixes.
            #expect(try await s.pull("team-a", token: s.token(spaces: ["team-*"], scope: .read)).status == 200)
            #expect(try await s.pull("teamb", token: s.token(spaces: ["team-*"], scope: .read)).status == 403)
            #expect(try await s.request("POST", "/v1/spaces/any/push", token: s.token(spaces: ["*"]), body: body).status == 200)
            // Nothing of the refused pushes was stored.
            #expect(try await s.app.store.head(space: "sp") == 0)
        }
    }

    @Test func malformedBodiesGetTheirCodeAndChangeNothing() async throws {
        try await withServer(limits: Limits(maxRequestBytes: 300_000, maxChangesPerPush: 3, maxRecordBytes: 1000, pageBytes: 1 << 20, maxPageLimit: 100, chunkSize: 65_536, maxMediaBytes: 1 << 20)) { s in
            _ = try await s.push("sp", [put("seed", "a")])
            let token = s.token(spaces: ["sp"])
            func status(_ body: String) async throws -> (Int, String?, String?) {
                let r = try await s.request("POST", "/v1/spaces/sp/push", token: token, body: Array(body.utf8))
                let field: String? = {
                    guard case .object(let o)? = try? json(r), case .object(let e)? = o["error"], case .object(let d)? = e["details"], case .string(let f)? = d["field"] else { return nil }
                    return f
                }()
                return (r.status, errorCode(r), field)
            }
            #expect(try await status("{not json") == (400, "invalid_json", nil))
            #expect(try await status("") == (400, "invalid_json", nil))
            #expect(try await status(#"{"clientId":"p"}"#) == (422, "invalid_request", "changes"))
            #expect(try await status(#"{"clientId":"p","changes":[{"op":"put"}]}"#) == (422, "invalid_request", "changes[0].changeId"))
            #expect(try await status(#"{"clientId":"p","changes":"x"}"#) == (422, "invalid_request", "changes"))
            let four = (0..<4).map { #"{"changeId":"x\#($0)","collection":"t","id":"i","op":"delete","baseVersion":null}"# }.joined(separator: ",")
            let r = try await s.request("POST", "/v1/spaces/sp/push", token: token, body: Array(#"{"clientId":"p","changes":[\#(four)]}"#.utf8))
            #expect(r.status == 413 && errorCode(r) == "too_many_changes")
            #expect(try ErrorEnvelope.decode(r.body).details?["limit"] == 3)
            // A body over maxRequestBytes: 413 with details.limit.
            let big = try await s.request("POST", "/v1/spaces/sp/push", token: token, body: [UInt8](repeating: 0x20, count: 300_001))
            #expect(big.status == 413 && errorCode(big) == "payload_too_large")
            #expect(try ErrorEnvelope.decode(big.body).details?["limit"] == 300_000)
            // Bad query values and cursors.
            let read = s.token(spaces: ["sp"], scope: .read)
            #expect(try await s.pull("sp", query: "since=garbage", token: read).status == 400)
            #expect(errorCode(try await s.pull("sp", query: "since=garbage", token: read)) == "invalid_cursor")
            #expect(try await s.pull("sp", query: "limit=abc", token: read).status == 422)
            #expect(try await s.pull("sp", query: "wait=60001", token: read).status == 422)
            #expect(try await s.pull("sp", query: "collections=a,,b", token: read).status == 422)
            // An invalid space name is a 400 that says the rule, not a 404 (spaces need no creation).
            for name in [".hidden", "-x"] {
                let bad = try await s.request("GET", "/v1/spaces/\(name)/pull", token: s.token(spaces: ["*"]))
                #expect(bad.status == 400 && errorCode(bad) == "invalid_space", "\(name): \(bad.status)")
                let envelope = try ErrorEnvelope.decode(bad.body)
                #expect(envelope.message.contains("is not a space name") && envelope.details?["space"] == .string(name), "\(envelope.message)")
            }
            let media = try await s.request("POST", "/v1/spaces/-x/media/uploads", token: s.token(spaces: ["*"]), body: Array("{}".utf8))
            #expect(media.status == 400 && errorCode(media) == "invalid_space")
            // The store is exactly as it was.
            #expect(try await s.app.store.head(space: "sp") == 1)
            let page = try PullPage.decode(try await s.pull("sp").body)
            #expect(page.changes.map(\.id) == ["a"])
        }
    }

    @Test func rejectionsStayInTheirPlace() async throws {
        try await withServer(limits: Limits(maxRequestBytes: 1 << 20, maxChangesPerPush: 10, maxRecordBytes: 100, pageBytes: 1 << 20, maxPageLimit: 100, chunkSize: 65_536, maxMediaBytes: 1 << 20)) { s in
            let body = """
                {"clientId":"p","changes":[
                 {"changeId":"ok1","collection":"t","id":"a","op":"put","data":{"v":1},"baseVersion":null},
                 {"changeId":"bad","collection":"t/x","id":"a","op":"put","data":{},"baseVersion":null},
                 {"changeId":"big","collection":"t","id":"b","op":"put","data":{"v":"\(String(repeating: "y", count: 200))"},"baseVersion":null},
                 {"changeId":"ok2","collection":"t","id":"c","op":"put","data":{"v":2},"baseVersion":null}]}
                """
            let r = try await s.request("POST", "/v1/spaces/sp/push", token: s.token(spaces: ["sp"]), body: Array(body.utf8))
            let push = try PushResponse.decode(r.body)
            #expect(push.results.map(\.changeId) == ["ok1", "bad", "big", "ok2"])
            #expect(push.results.map(\.status) == [.applied, .rejected, .rejected, .applied])
            #expect(push.results[1].error?.code == "invalid_change")
            #expect(push.results[2].error?.code == "record_too_large")
        }
    }

    @Test func conflictsCarryTheCurrentRecordAndReplaysTheOriginalAnswer() async throws {
        try await withServer { s in
            _ = try await s.push("sp", [put("c1", "a", ["v": 1])], clientId: "phone")
            _ = try await s.push("sp", [put("c2", "a", ["v": 2], base: Version(epoch: s.epoch, seq: 1))], clientId: "laptop")
            let conflict = try PushResponse.decode(try await s.push("sp", [put("c3", "a", ["v": 3], base: Version(epoch: s.epoch, seq: 1))]).body).results[0]
            #expect(conflict.status == .conflict)
            #expect(conflict.current?.version == Version(epoch: s.epoch, seq: 2))
            #expect(conflict.current?.data == ["v": 2])
            #expect(conflict.current?.updatedBy == "laptop")
            let replay = try PushResponse.decode(try await s.push("sp", [put("c1", "a", ["v": 1])], clientId: "phone").body).results[0]
            #expect(replay.status == .applied && replay.replayed && replay.version == Version(epoch: s.epoch, seq: 1))
            #expect(replay.updatedAt != nil, "a replay names the original commit time")
            let reused = try PushResponse.decode(try await s.push("sp", [put("c1", "a", ["v": 9])]).body).results[0]
            #expect(reused.error?.code == "change_id_reused")
            let mismatch = try PushResponse.decode(try await s.push("sp", [put("c4", "a", base: Version("OTHER.2"))]).body).results[0]
            #expect(mismatch.error?.code == "epoch_mismatch")
        }
    }

    @Test func cursorErrors() async throws {
        try await withServer { s in
            _ = try await s.push("sp", [put("c1", "a")])
            var r = try await s.pull("sp", query: "since=ANOTHEREPOCH.1")
            #expect(r.status == 409 && errorCode(r) == "epoch_changed")
            #expect(try ErrorEnvelope.decode(r.body).details?["epoch"] == .string(s.epoch.rawValue))
            r = try await s.pull("sp", query: "since=\(s.epoch.rawValue).5")
            #expect(r.status == 409 && errorCode(r) == "cursor_ahead")
            let details = try ErrorEnvelope.decode(r.body).details
            #expect(details?["head"] == 1 && details?["epoch"] == .string(s.epoch.rawValue))
            #expect(try await s.pull("sp", query: "since=\(s.epoch.rawValue).1").status == 200)
        }
    }

    @Test func longPollIsWokenByACommitAndTimesOutEmpty() async throws {
        try await withServer { s in
            let port = s.port
            let token = s.token(spaces: ["sp"], scope: .read)
            let waiting = OnThread {
                try httpRequest(port: port, "GET", "/v1/spaces/sp/pull?wait=60000", headers: [("Authorization", "Bearer \(token)")])
            }
            // Let the pull reach the server and wait, then commit.
            try await s.registeredWaits("the pull waits", count: 1)
            #expect(s.app.store.notifier.waitingCount == 1)
            _ = try await s.push("sp", [put("c1", "a")])
            let page = try PullPage.decode(try await waiting.value.body)
            #expect(page.changes.map(\.id) == ["a"])
            // Woken by the commit, not answered at the end of its wait: the server counts it.
            #expect(s.app.sync.longPollsWoken.value.load(ordering: .relaxed) == 1)
            // Nothing comes: an empty page after the wait.
            let empty = try PullPage.decode(try await s.pull("sp", query: "since=\(page.next.text)&wait=200").body)
            #expect(empty.changes.isEmpty && empty.next == page.next)
            // A filtered long poll is not answered by a commit to another collection. The
            // empty pull's group stopped before its answer: no wait of it is reported later.
            let before = s.reports.value.registered.count
            let filtered = OnThread {
                try httpRequest(port: port, "GET", "/v1/spaces/sp/pull?collections=notes&since=\(page.next.text)&wait=60000", headers: [("Authorization", "Bearer \(token)")])
            }
            try await s.registeredWaits("the filtered pull waits", count: before + 1)
            #expect(s.app.store.notifier.waitingCount == 1)
            _ = try await s.push("sp", [put("c2", "b")])
            // Woken by the commit to todos, it read again, found nothing of notes and waits on.
            let again = try await s.registeredWaits("the filtered pull waits again after the commit to todos", count: before + 2)
            #expect(again.last == ReportingStore.Wait(space: "sp", afterSeq: 2))
            #expect(s.app.sync.longPollsWoken.value.load(ordering: .relaxed) == 2 && s.app.store.notifier.waitingCount == 1)
            _ = try await s.push("sp", [put("c3", "n", collection: "notes")])
            let notes = try PullPage.decode(try await filtered.value.body)
            #expect(notes.changes.map(\.id) == ["n"])
        }
    }

    /// The long poll of `longPollIsWokenByACommitAndTimesOutEmpty` with every thread of the
    /// test process's cooperative pool held throughout: the pull waits, the push is handled
    /// and the pull woken, all on the server's event loops. With the handlers on the pool,
    /// nothing was handled while the pool was held; held past a pull's wait, its deadline
    /// (a Dispatch timer) ended its group first and it answered its own empty page,
    /// unwoken: the `[] == ["a"]` and `longPollsWoken == 0` of a run on two busy cores.
    @Test func aLongPollIsWokenWhileTheTestPoolIsHeld() async throws {
        try await withServer { s in
            let port = s.port
            let read = s.token(spaces: ["sp"], scope: .read), write = s.token(spaces: ["sp"])
            let notifier = s.app.store.notifier
            let body = PushRequest(clientId: "held", changes: [put("c1", "a")]).encoded()
            let (pushed, woken) = try await whilePoolIsHeld {
                let pull = try TestHTTPClient(port: port)
                try pull.send(TestHTTPClient.encode("GET", "/v1/spaces/sp/pull?wait=60000", headers: [("Authorization", "Bearer \(read)")]))
                try eventuallyBlocking("the pull waits") { notifier.waitingCount == 1 }
                let pushed = try httpRequest(port: port, "POST", "/v1/spaces/sp/push",
                                             headers: [("Authorization", "Bearer \(write)"), ("Content-Type", "application/json")], body: body)
                return (pushed, try pull.readResponse())
            }
            #expect(pushed.status == 200)
            #expect(try PullPage.decode(woken.body).changes.map(\.id) == ["a"])
            #expect(s.app.sync.longPollsWoken.value.load(ordering: .relaxed) == 1)
        }
    }

    @Test func metricsNeedAnAdminToken() async throws {
        try await withServer { s in
            _ = try await s.push("sp", [put("c1", "a")])
            #expect(try await s.request("GET", "/metrics", token: nil).status == 401)
            #expect(try await s.request("GET", "/metrics", token: s.token(spaces: ["*"])).status == 403)
            let r = try await s.request("GET", "/metrics", token: s.token(spaces: [], admin: true))
            #expect(r.status == 200)
            #expect(r.header("Content-Type")?.hasPrefix("text/plain") == true)
            #expect(r.text.contains(#"outpost_changes_total{result="applied"} 1"#))
            #expect(r.text.contains("outpost_http_requests_total{route=\"/v1/spaces/{space}/push\",status=\"200\"} 1"))
            #expect(r.text.contains("# TYPE outpost_http_request_duration_seconds histogram"))
            #expect(r.text.contains("outpost_http_open_connections "))
            // The push was answered, so nothing waits for the writer.
            #expect(r.text.contains("outpost_store_queued_writes 0\n"))
            // Histogram buckets are cumulative and end with +Inf = count.
            let buckets = r.text.split(separator: "\n").filter { $0.hasPrefix("outpost_http_request_duration_seconds_bucket{route=\"/v1/spaces/{space}/push\"") }
            let counts = buckets.compactMap { Int($0.split(separator: " ").last!) }
            #expect(counts == counts.sorted() && counts.last == 1)
        }
        try await withServer(configure: { $0.metricsRequireAdmin = false }, { s in
            let r = try await s.request("GET", "/metrics", token: nil)
            #expect(r.status == 200)
        })
    }

    @Test func manyClientsPushingAtOnceGetUniqueVersions() async throws {
        try await withServer { s in
            let port = s.port
            let token = s.token(spaces: ["sp"])
            let versions = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for c in 0..<8 {
                    group.addTask {
                        try await blocking {
                            let client = try TestHTTPClient(port: port)
                            var seqs: [Int64] = []
                            for b in 0..<10 {
                                let changes = (0..<25).map { put("c\(c)-\(b)-\($0)", "r\(c)-\(b)-\($0)") }
                                let r = try client.request("POST", "/v1/spaces/sp/push", headers: [("Authorization", "Bearer \(token)")], body: PushRequest(clientId: "c\(c)", changes: changes).encoded())
                                seqs += try PushResponse.decode(r.body).results.map { $0.version!.seq }
                            }
                            return seqs
                        }
                    }
                }
                var all: [Int64] = []
                for try await v in group { all += v }
                return all
            }
            #expect(versions.count == 2000)
            #expect(Set(versions).count == 2000)
            #expect(versions.max() == 2000)
        }
    }
}
