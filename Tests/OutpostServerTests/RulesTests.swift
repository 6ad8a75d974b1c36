import Foundation
import Testing
import OutpostCore
import OutpostTestSupport
@testable import OutpostServer

/// The rules file of docs/rules.md for a field team: workers see the jobs assigned to
/// them, supervisors see all; a worker creates and edits only their own jobs, never
/// reassigns one, and never deletes.
let fieldTeamRules = #"""
{
  "collections": {
    "jobs": {
      "read": "data.assignee == auth.sub || 'supervisor' in auth.roles",
      "write": "'supervisor' in auth.roles || (op == 'put' && data.assignee == auth.sub && (prev == null || prev.assignee == auth.sub))",
      "schema": {"type": "object", "required": ["title", "assignee"],
                 "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 200},
                                "assignee": {"type": "string"}, "status": {"enum": ["open", "done"]}},
                 "additionalProperties": true}
    }
  },
  "default": {"read": "true", "write": "true"}
}
"""#

/// The rules file: parsing and checking, with the place of every fault.
@Suite struct RulesFileTests {
    func refusal(_ text: String) -> RulesError? {
        do {
            _ = try ServerRules.parse(Array(text.utf8), path: "rules.json")
            return nil
        } catch {
            return error
        }
    }

    @Test func theFieldTeamExampleChecks() throws {
        let rules = try ServerRules.parse(Array(fieldTeamRules.utf8), path: "rules.json")
        #expect(rules.rules(for: "jobs")?.schema != nil)
        #expect(rules.rules(for: "notes")?.read?.source == "true", "an unnamed collection gets default")
        #expect(rules.rules(for: "jobs")?.readDataPaths == [["assignee"]])
    }

    @Test func faultsAreRefusedWithTheirLineAndColumn() throws {
        let json = try #require(refusal("{\n  \"collections\": {\n    \"jobs\": {\"read\": \"true\",}\n  }\n}"))
        #expect(json.line == 3 && json.reason.contains("not JSON"), "\(json)")
        // Inside an expression: the place of the fault in the file, not in the string.
        let expression = try #require(refusal("{\"collections\": {\n  \"jobs\": {\"read\": \"data.a == == 1\"}}}"))
        #expect(expression.line == 2 && expression.column == 31, "\(expression)")
        #expect(expression.description.hasPrefix("rules.json:2:31: "))
        let prev = try #require(refusal(#"{"collections": {"jobs": {"read": "prev.a == 1"}}}"#))
        #expect(prev.reason.contains("read rule cannot use prev") && prev.line == 1 && prev.column == 35, "\(prev)")
        let unknown = try #require(refusal(#"{"collections": {"jobs": {"reed": "true"}}}"#))
        #expect(unknown.reason.contains("unknown key \"reed\"") && unknown.column == 35, "\(unknown)")
        let top = try #require(refusal(#"{"colections": {}}"#))
        #expect(top.reason.contains("unknown key \"colections\""))
        let schema = try #require(refusal(#"{"collections": {"jobs": {"schema": {"properties": {"a": {"format": "email"}}}}}}"#))
        #expect(schema.reason.contains("format") && schema.column == 69, "\(schema)")
        let literal = try #require(refusal(#"{"default": {"read": "'yes'"}}"#))
        #expect(literal.reason.contains("must be a condition"))
        let name = try #require(refusal(#"{"collections": {"no such": {"read": "true"}}}"#))
        #expect(name.reason.contains("not a collection name"))
        #expect(refusal(#"{"collections": {"jobs": {"read": "true"}}}"#) == nil)
    }

    /// `minAppVersion`: a collection's own, else `default`'s for the collections it covers,
    /// else the space's; an integer from 0 to 2^53 − 1.
    @Test func minimumAppVersionsApplyPerCollectionOrForTheSpace() throws {
        let rules = try ServerRules.parse(Array(#"""
            {"minAppVersion": 2, "collections": {"surveys": {"minAppVersion": 5, "write": "true"}, "jobs": {"write": "true"}},
             "default": {"read": "true", "write": "true", "minAppVersion": 3}}
            """#.utf8), path: "rules.json")
        #expect(rules.rules(for: "surveys")?.minAppVersion == 5)
        #expect(rules.rules(for: "jobs")?.minAppVersion == 2, "a named collection without its own takes the space's")
        #expect(rules.rules(for: "notes")?.minAppVersion == 3, "default's, for the collections it covers")
        #expect(try ServerRules.parse(Array(#"{"default": {"read": "true", "write": "true"}}"#.utf8), path: "r").rules(for: "x")?.minAppVersion == nil)
        for bad in [#""2""#, "-1", "1.5", "9007199254740992", "null"] {
            let refused = try #require(refusal(#"{"collections": {"jobs": {"minAppVersion": \#(bad)}}}"#), "\(bad)")
            #expect(refused.reason.contains("must be an integer") && refused.column == 44, "\(refused)")
        }
        let top = try #require(refusal(#"{"minAppVersion": true}"#))
        #expect(top.reason.contains("must be an integer"))
        // The judge: a change from an older app is `upgrade_required`, with the minimum.
        let claims = Claims(sub: "w1", exp: 2_000_000_000, spaces: ["t"], scope: .write)
        let change = Change(changeId: "c1", collection: "surveys", id: "s1", op: .delete, data: nil, baseVersion: nil)
        for (versions, refused) in [(AppVersions(), true), (AppVersions(app: 4), true), (AppVersions(app: 9, collections: ["surveys": 4]), true),
                                    (AppVersions(app: 5), false), (AppVersions(app: 1, collections: ["surveys": 5]), false)] {
            let reason = RulesJudge(view: rules.view(for: claims), versions: versions).judge(change, current: nil, deletedCopy: nil)
            #expect((reason?.code == "upgrade_required") == refused, "\(versions)")
            if refused {
                #expect(reason?.details?["minimum"] == 5)
                #expect(reason?.details?["version"]?.int64Value == Int64(versions.version(for: "surveys")))
            }
        }
    }

    /// `write` as a list of conditions: all must admit a change; the first that refuses gives
    /// its reason, in the message and as `details.reason`.
    @Test func writeConditionsGiveTheirReasons() throws {
        let rules = try ServerRules.parse(Array(#"""
            {"collections": {"forms": {"read": "true", "write": [
               {"rule": "op == 'put'", "reason": "forms are never deleted"},
               {"rule": "prev.status != 'approved'", "reason": "approved forms are settled"},
               {"rule": "data.n != 3"}]}}}
            """#.utf8), path: "rules.json")
        let judge = RulesJudge(view: rules.view(for: Claims(sub: "w1", exp: 2_000_000_000, spaces: ["t"], scope: .write)))
        func judged(_ op: ChangeOp, _ data: JSONObject?, prev: JSONObject?) -> PushResult.RejectReason? {
            let current = prev.map { RecordState(collection: "forms", id: "f", version: Version(epoch: Epoch("E1")!, seq: 1), deleted: false, data: $0, updatedAt: 1, updatedBy: "x", clientTime: nil) }
            return judge.judge(Change(changeId: "c", collection: "forms", id: "f", op: op, data: data, baseVersion: current?.version), current: current, deletedCopy: nil)
        }
        #expect(judged(.put, ["status": "draft"], prev: nil) == nil)
        #expect(judged(.delete, nil, prev: ["status": "draft"])?.details?["reason"] == "forms are never deleted")
        let settled = judged(.put, ["status": "draft"], prev: ["status": "approved"])
        #expect(settled?.code == "forbidden" && settled?.message.hasSuffix(": approved forms are settled") == true, "\(String(describing: settled))")
        let plain = judged(.put, ["n": 3], prev: nil)
        #expect(plain?.code == "forbidden" && plain?.details == nil, "a condition without a reason gives the generic message")
        #expect(rules.rules(for: "forms")?.judgedKeys == ["status", "n"], "the judge keeps what every condition reads")
        // Faults, placed in the file.
        let empty = try #require(refusal(#"{"collections": {"forms": {"write": []}}}"#))
        #expect(empty.reason.contains("at least one"))
        let noRule = try #require(refusal(#"{"collections": {"forms": {"write": [{"reason": "x"}]}}}"#))
        #expect(noRule.reason.contains("needs a rule") && noRule.column == 38, "\(noRule)")
        let badRule = try #require(refusal(#"{"collections": {"forms": {"write": [{"rule": "true"}, {"rule": "data.a == == 1"}]}}}"#))
        #expect(badRule.column == 76, "\(badRule)")
        let unknown = try #require(refusal(#"{"collections": {"forms": {"write": [{"rule": "true", "why": "x"}]}}}"#))
        #expect(unknown.reason.contains("unknown key \"why\""))
        let reason = try #require(refusal(#"{"collections": {"forms": {"write": [{"rule": "true", "reason": ""}]}}}"#))
        #expect(reason.reason.contains("1 to 500 bytes"))
    }

    @Test func aFileTooLargeOrMissingIsRefusedBeforeItIsRead() throws {
        let directory = try TemporaryDirectory(prefix: "outpost-rules-size")
        defer { directory.remove() }
        let path = directory.appending("rules.json")
        try Data(repeating: 0x20, count: ServerRules.maxFileBytes + 1).write(to: URL(fileURLWithPath: path))
        #expect(throws: RulesError.self) { _ = try ServerRules.load(path: path) }
        do { _ = try ServerRules.load(path: path) } catch { #expect(error.reason.contains("at most") && error.line == nil, "\(error)") }
        do { _ = try ServerRules.load(path: directory.appending("none.json")) } catch { #expect(error.reason.contains("cannot be read"), "\(error)") }
    }

    /// The rules files that README.md and docs/rules.md show are files the server takes.
    @Test func theDocumentedExamplesCheck() throws {
        for file in ["README.md", "docs/rules.md"] {
            let text = try OperatorDocsTests.read(file)
            let blocks = text.components(separatedBy: "```json\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
            let rulesFiles = blocks.filter { $0.contains("\"collections\"") }
            #expect(!rulesFiles.isEmpty, "\(file) shows no rules file")
            for block in rulesFiles {
                #expect(throws: Never.self, "\(file): \(block.prefix(60))") { _ = try ServerRules.parse(Array(block.utf8), path: file) }
            }
        }
    }

    @Test func aViewDependsOnTheReadRulesAndTheClaimsTheyRead() throws {
        let rules = try ServerRules.parse(Array(fieldTeamRules.utf8), path: "rules.json")
        let w1 = Claims(sub: "w1", exp: 2_000_000_000, spaces: ["t"], scope: .write)
        let again = Claims(sub: "w1", exp: 2_100_000_000, spaces: ["t", "u"], scope: .read, extra: ["team": "north"])
        let w2 = Claims(sub: "w2", exp: 2_000_000_000, spaces: ["t"], scope: .write)
        let boss = Claims(sub: "w1", exp: 2_000_000_000, spaces: ["t"], scope: .write, extra: ["roles": ["supervisor"]])
        #expect(rules.view(for: w1).id == rules.view(for: again).id, "claims the read rules do not read change nothing")
        #expect(rules.view(for: w1).id != rules.view(for: w2).id)
        #expect(rules.view(for: w1).id != rules.view(for: boss).id)
        #expect(Cursor.isValidView(rules.view(for: w1).id))
        // Another write rule or schema keeps the views; another read rule changes them.
        let writeOnly = fieldTeamRules.replacingOccurrences(of: "'supervisor' in auth.roles || (op", with: "'lead' in auth.roles || (op")
        #expect(try ServerRules.parse(Array(writeOnly.utf8), path: "r").view(for: w1).id == rules.view(for: w1).id)
        let readAll = fieldTeamRules.replacingOccurrences(of: "\"read\": \"data.assignee == auth.sub || 'supervisor' in auth.roles\"", with: "\"read\": \"true\"")
        #expect(try ServerRules.parse(Array(readAll.utf8), path: "r").view(for: w1).id != rules.view(for: w1).id)
    }
}

/// A server with the field team's rules, over a real socket, on each store.
@Suite struct RulesHTTPTests {
    /// Runs `body` with a server on `store` whose rules file is `rules` (written to a file
    /// of the test's directory, whose path is passed too, for reloads).
    func withRulesServer(_ store: StoreKind, rules: String = fieldTeamRules, _ body: (TestServer, String) async throws -> Void) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "rules") : nil
        let directory = try TemporaryDirectory(prefix: "outpost-rules")
        defer { directory.remove() }
        let path = directory.appending("rules.json")
        try Data(rules.utf8).write(to: URL(fileURLWithPath: path))
        try await withServer(configure: { settings in
            settings.rulesPath = path
            if let url { settings.store = url }
        }) { server in try await body(server, path) }
    }

    func token(_ s: TestServer, _ sub: String, supervisor: Bool = false) -> String {
        s.authority.sign(Claims(sub: sub, exp: Int64(Date().timeIntervalSince1970) + 3600, spaces: ["team"], scope: .write,
                                extra: supervisor ? ["roles": ["supervisor"]] : [:]))
    }

    func job(_ changeId: String, _ id: String, _ title: String, _ assignee: String, base: Version? = nil) -> Change {
        Change(changeId: changeId, collection: "jobs", id: id, op: .put, data: ["title": .string(title), "assignee": .string(assignee)],
               baseVersion: base, clientTime: 1_764_430_000_000)
    }

    func pull(_ s: TestServer, _ token: String, since: String? = nil) async throws -> PullPage {
        let r = try await s.pull("team", query: since.map { "since=\($0)" } ?? "", token: token)
        #expect(r.status == 200, "\(r.text)")
        return try PullPage.decode(r.body)
    }

    func pushed(_ s: TestServer, _ token: String, _ changes: [Change]) async throws -> [PushResult] {
        let r = try await s.push("team", changes, token: token)
        #expect(r.status == 200, "\(r.text)")
        return try PushResponse.decode(r.body).results
    }

    @Test(arguments: StoreKind.allCases)
    func twoWorkersAndASupervisorEachSeeTheirJobsAndAReassignmentMovesOne(store: StoreKind) async throws {
        try await withRulesServer(store) { s, _ in
            let w1 = token(s, "w1"), w2 = token(s, "w2"), boss = token(s, "boss", supervisor: true)
            let created = try await pushed(s, boss, [job("b1", "j1", "Fix pump", "w1"), job("b2", "j2", "Paint wall", "w2"),
                                                     job("b3", "j3", "Check valve", "w1")])
            #expect(created.map(\.status) == [.applied, .applied, .applied])

            let first1 = try await pull(s, w1), first2 = try await pull(s, w2), all = try await pull(s, boss)
            #expect(first1.changes.map(\.id) == ["j1", "j3"] && first1.revoked.isEmpty)
            #expect(first2.changes.map(\.id) == ["j2"])
            #expect(all.changes.map(\.id) == ["j1", "j2", "j3"])
            let view1 = try #require(first1.view, "a cursor under rules carries its view")
            #expect(first1.next.seq == 3 && first2.view != view1)

            // The supervisor reassigns j1 to w2: it leaves w1's phone and reaches w2's.
            let moved = try await pushed(s, boss, [job("b4", "j1", "Fix pump", "w2", base: created[0].version)])
            #expect(moved.map(\.status) == [.applied])
            let after1 = try await pull(s, w1, since: Cursor(first1.next, view: first1.view).text)
            #expect(after1.changes.isEmpty)
            #expect(after1.revoked == [Revocation(collection: "jobs", id: "j1", version: moved[0].version!)])
            let after2 = try await pull(s, w2, since: Cursor(first2.next, view: first2.view).text)
            #expect(after2.changes.map(\.id) == ["j1"] && after2.changes[0].data?["assignee"] == "w2" && after2.revoked.isEmpty)

            // A delete reaches who could see the record, and nobody else.
            let gone = try await pushed(s, boss, [Change(changeId: "b5", collection: "jobs", id: "j3", op: .delete, data: nil,
                                                         baseVersion: created[2].version, clientTime: 1)])
            #expect(gone.map(\.status) == [.applied])
            let deleted1 = try await pull(s, w1, since: Cursor(after1.next, view: after1.view).text)
            #expect(deleted1.changes.map(\.id) == ["j3"] && deleted1.changes[0].deleted)
            let deleted2 = try await pull(s, w2, since: Cursor(after2.next, view: after2.view).text)
            #expect(deleted2.changes.isEmpty && deleted2.revoked.isEmpty && deleted2.next.seq == gone[0].version!.seq)

            // A cursor is good for its own view only.
            let foreign = try await s.pull("team", query: "since=\(Cursor(first1.next, view: first1.view).text)", token: w2)
            #expect(foreign.status == 409 && errorCode(foreign) == "view_changed")
            let bare = try await s.pull("team", query: "since=\(first1.next.text)", token: w1)
            #expect(bare.status == 409 && errorCode(bare) == "view_changed", "a cursor without a view is from before the rules")
        }
    }

    @Test(arguments: StoreKind.allCases)
    func aForbiddenWriteBesideAnAllowedOneAndSchemaFailuresWithTheirPointers(store: StoreKind) async throws {
        try await withRulesServer(store) { s, _ in
            let w1 = token(s, "w1"), boss = token(s, "boss", supervisor: true)
            let created = try await pushed(s, boss, [job("b1", "j1", "Fix pump", "w1"), job("b2", "j2", "Paint wall", "w2")])
            let results = try await pushed(s, w1, [
                job("w1-1", "j1", "Fix pump today", "w1", base: created[0].version),   // own job: allowed
                job("w1-2", "j2", "Paint it red", "w2", base: created[1].version),     // cannot read it
                job("w1-3", "j1", "Fix pump", "w2"),                                   // reassigning: refused
                job("w1-4", "j4", "Mine", "w1"),                                       // a new job of its own
                Change(changeId: "w1-5", collection: "jobs", id: "j4", op: .delete, data: nil, baseVersion: nil, clientTime: 1),
                job("w1-6", "j5", "", "w1"),                                           // schema: title too short
                Change(changeId: "w1-7", collection: "jobs", id: "j6", op: .put, data: ["title": "Mine too", "assignee": "w1", "status": "closed"],
                       baseVersion: nil, clientTime: 1),                               // schema: status not allowed
                Change(changeId: "w1-8", collection: "notes", id: "n1", op: .put, data: ["x": 1], baseVersion: nil, clientTime: 1),
            ])
            #expect(results.map(\.status) == [.applied, .rejected, .rejected, .applied, .rejected, .rejected, .rejected, .applied])
            #expect(results[1].error?.code == "forbidden" && results[2].error?.code == "forbidden" && results[4].error?.code == "forbidden")
            #expect(results[5].error?.code == "invalid_change" && results[5].error?.details?["path"] == "/title", "\(String(describing: results[5].error))")
            #expect(results[6].error?.code == "invalid_change" && results[6].error?.details?["path"] == "/status")
            #expect(results[5].error?.details?["reason"]?.stringValue?.isEmpty == false)
            // Nothing refused was stored, and the refused edit of j2 left it as it was.
            let all = try await pull(s, boss)
            #expect(all.changes.first { $0.id == "j2" }?.data?["title"] == "Paint wall")
            #expect(all.changes.map(\.id).sorted() == ["j1", "j2", "j4", "n1"])
            // A replay answers as the first time.
            let replay = try await pushed(s, w1, [job("w1-1", "j1", "Fix pump today", "w1", base: created[0].version)])
            #expect(replay[0].status == .applied && replay[0].replayed && replay[0].version == results[0].version)
        }
    }

    @Test(arguments: StoreKind.allCases)
    func aReloadThatChangesAViewSendsTheDeviceBackToTheStartAndABadOneChangesNothing(store: StoreKind) async throws {
        try await withRulesServer(store) { s, path in
            let w1 = token(s, "w1"), boss = token(s, "boss", supervisor: true)
            _ = try await pushed(s, boss, [job("b1", "j1", "Fix pump", "w1"), job("b2", "j2", "Paint wall", "w2")])
            let before = try await pull(s, w1)
            #expect(before.changes.map(\.id) == ["j1"])
            let cursor = Cursor(before.next, view: before.view).text

            // A file that does not check: refused with its place; the rules stay.
            try Data("{\"collections\": {\"jobs\": {\"read\": \"data.assignee ==\"}}}".utf8).write(to: URL(fileURLWithPath: path))
            guard case .failure(let error) = s.app.reloadRules() else { Issue.record("a bad rules file was accepted"); return }
            #expect(error.path == path && error.line == 1 && error.column != nil, "\(error)")
            #expect(try await pull(s, w1, since: cursor).changes.isEmpty, "the cursor still holds")

            // Workers now read every job: their views changed.
            let readAll = fieldTeamRules.replacingOccurrences(of: "\"read\": \"data.assignee == auth.sub || 'supervisor' in auth.roles\"", with: "\"read\": \"true\"")
            try Data(readAll.utf8).write(to: URL(fileURLWithPath: path))
            guard case .success = s.app.reloadRules() else { Issue.record("the new rules were refused"); return }
            let stale = try await s.pull("team", query: "since=\(cursor)", token: w1)
            #expect(stale.status == 409 && errorCode(stale) == "view_changed")
            let details = try ErrorEnvelope.decode(stale.body).details
            let again = try await pull(s, w1)
            #expect(details?["view"]?.stringValue == again.view && again.view != before.view)
            #expect(again.changes.map(\.id) == ["j1", "j2"])
        }
    }

    /// A rule the view index cannot serve (here a comparison) reads the scope in seq
    /// order and filters it, at most ten times the page's limit per request.
    @Test func pagesUnderRulesKeepTheirLimitsAndMovePastWhatTheyDoNotSend() async throws {
        let unindexed = fieldTeamRules.replacingOccurrences(of: "data.assignee == auth.sub ||", with: "(data.assignee >= auth.sub && data.assignee <= auth.sub) ||")
        #expect(unindexed != fieldTeamRules)
        try await withRulesServer(.sqlite, rules: unindexed) { s, _ in
            try await eventually("the view index is built") { s.app.sync.viewIndex.isReady(s.app.rules.rules!.index) }
            let w1 = token(s, "w1"), boss = token(s, "boss", supervisor: true)
            // 2,500 jobs, every 1,000th of them w1's; the others a supervisor's only.
            for batch in 0..<25 {
                let jobs = (0..<100).map { i -> Change in
                    let n = batch * 100 + i
                    return job("c\(n)", "j\(n)", "Job \(n)", n % 1_000 == 0 ? "w1" : "w2")
                }
                #expect(try await pushed(s, boss, jobs).allSatisfy { $0.status == .applied })
            }
            var since: String?
            var seen: [String] = []
            var requests = 0
            while true {
                requests += 1
                let r = try await s.pull("team", query: "limit=100" + (since.map { "&since=\($0)" } ?? ""), token: w1)
                let page = try PullPage.decode(r.body)
                #expect(page.changes.count <= 100)
                seen += page.changes.map(\.id)
                since = Cursor(page.next, view: page.view).text
                if !page.hasMore { break }
                #expect(requests < 10, "more requests than the scan budget allows")
            }
            #expect(seen == ["j0", "j1000", "j2000"])
            #expect(requests == 3, "1,000 records read per request at most: \(requests) requests")
            // A token that sees everything gets full pages of `limit`, in order, with no gap.
            since = nil
            var ids: [String] = []
            for _ in 0..<4 {
                let r = try await s.pull("team", query: "limit=7" + (since.map { "&since=\($0)" } ?? ""), token: boss)
                let page = try PullPage.decode(r.body)
                #expect(page.changes.count == 7 && page.hasMore)
                ids += page.changes.map(\.id)
                since = Cursor(page.next, view: page.view).text
            }
            #expect(ids == (0..<28).map { "j\($0)" })
        }
    }

    @Test func aLongPollUnderRulesWakesOnlyForWhatItsViewAdmits() async throws {
        try await withRulesServer(.sqlite) { s, _ in
            let w1 = token(s, "w1"), boss = token(s, "boss", supervisor: true)
            _ = try await pushed(s, boss, [job("b1", "j1", "Fix pump", "w1")])
            let first = try await pull(s, w1)
            let since = Cursor(first.next, view: first.view).text
            let port = s.port
            let held = OnThread { try httpRequest(port: port, "GET", "/v1/spaces/team/pull?since=\(since)&wait=60000", headers: [("Authorization", "Bearer \(w1)")]) }
            // A commit outside the view, then one inside it: the pull answers with the second only.
            try await s.registeredWaits("the pull waits on the store", count: 1)
            #expect(s.app.store.notifier.waitingCount == 1)
            _ = try await pushed(s, boss, [job("b2", "j2", "Paint wall", "w2")])
            let waits = try await s.registeredWaits("the pull woke for the commit outside its view and waits again", count: 2)
            #expect(waits.last == ReportingStore.Wait(space: "team", afterSeq: 2))
            #expect(s.app.metrics.value("outpost_long_polls_woken_total") >= 1 && s.app.store.notifier.waitingCount == 1)
            _ = try await pushed(s, boss, [job("b3", "j3", "Check valve", "w1")])
            let answer = try PullPage.decode(try await held.value.body)
            #expect(answer.changes.map(\.id) == ["j3"] && answer.next.seq == 3)
        }
    }
}

/// The rules file of a real `outpost-server` process: refused at start, reloaded by SIGHUP.
@Suite(.offPoolWhileBlocking) struct RulesProcessTests {
    /// docs/examples/supervisor-rules.json over a real server: a token whose `roles` claim
    /// is the string "not-a-supervisor" (as `token --claim roles=not-a-supervisor` mints it)
    /// has a list of one role, so `'supervisor' in auth.roles` is false and it cannot delete
    /// an approved submission; a token whose `roles` is the string "supervisor" can.
    @Test func aStringRolesClaimIsAListOfOneNeverASubstringTest() async throws {
        try await withTemporaryDirectory(prefix: "outpost-roles") { dir in
            try await blocking {
                let server = try ServerProcess(dataDirectory: dir.appending("data"),
                                               arguments: ["--rules", SchemaMigrationTests.repositoryPath("docs/examples/supervisor-rules.json")])
                defer { server.stop() }
                func push(_ token: String, _ change: Change) throws -> PushResult {
                    let body = PushRequest(clientId: "c-\(change.changeId)", changes: [change]).encoded()
                    let r = try httpRequest(port: server.port, "POST", "/v1/spaces/survey/push",
                                            headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")], body: body)
                    #expect(r.status == 200, "\(r.text)")
                    return try PushResponse.decode(r.body).results[0]
                }
                let boss = try server.token(sub: "sup", spaces: ["survey"], claims: [#"roles=["supervisor"]"#])
                let approved = try push(boss, Change(changeId: "a1", collection: "submissions", id: "f1", op: .put,
                                                     data: ["worker": "w1", "status": "approved", "answers": .object([:]), "approvedBy": "sup"],
                                                     baseVersion: nil, clientTime: 1))
                #expect(approved.status == .applied)
                let pretender = try server.token(sub: "mallory", spaces: ["survey"], claims: ["roles=not-a-supervisor"])
                let refused = try push(pretender, Change(changeId: "d1", collection: "submissions", id: "f1", op: .delete, data: nil,
                                                         baseVersion: approved.version, clientTime: 2))
                #expect(refused.status == .rejected && refused.error?.code == "forbidden", "\(refused)")
                let single = try server.token(sub: "sup2", spaces: ["survey"], claims: ["roles=supervisor"])
                let deleted = try push(single, Change(changeId: "d2", collection: "submissions", id: "f1", op: .delete, data: nil,
                                                      baseVersion: approved.version, clientTime: 3))
                #expect(deleted.status == .applied, "a single role as a string is a list of that one role")
            }
        }
    }

    /// An `in` whose right side is always a string is refused when the rules load, with
    /// its place in the file.
    @Test func inOnAStringIsRefusedAtLoad() throws {
        do {
            _ = try ServerRules.parse(Array(#"{"collections": {"jobs": {"read": "true", "write": "'sup' in 'supervisor'"}}}"#.utf8), path: "rules.json")
            Issue.record("an in on two strings loaded")
        } catch {
            #expect(error.reason.contains("always a string") && error.line == 1, "\(error)")
        }
    }

    @Test func aMalformedRulesFileIsRefusedAtStartAndSIGHUPReloads() async throws {
        try await withTemporaryDirectory(prefix: "outpost-rules") { dir in
            try await blocking {
                let path = dir.appending("rules.json")
                try Data("{\n  \"default\": {\"read\": \"auth.sub ==\"}\n}".utf8).write(to: URL(fileURLWithPath: path))
                let refused = try runToCompletion(BuildProducts.executable("outpost-server"),
                                                  ["serve", "--port", "0", "--data", dir.appending("data"), "--rules", path],
                                                  environment: ["OUTPOST_JWT_SECRET": "s3cret-s3cret-s3cret-s3cret-s3cret"], standardError: true)
                #expect(refused.status != 0)
                #expect(refused.output.contains("\(path):2:"), "\(refused.output)")

                try Data(fieldTeamRules.utf8).write(to: URL(fileURLWithPath: path))
                let server = try ServerProcess(dataDirectory: dir.appending("data"), arguments: ["--rules", path])
                defer { server.stop() }
                let admin = try server.token(spaces: [], admin: true)
                let w1 = try server.token(sub: "w1", spaces: ["team"])
                let note = PushRequest(clientId: "w1", changes: [Change(changeId: "n1", collection: "notes", id: "n1", op: .put, data: ["t": "x"],
                                                                       baseVersion: nil, clientTime: 1)]).encoded()
                let pushed = try httpRequest(port: server.port, "POST", "/v1/spaces/team/push",
                                             headers: [("Authorization", "Bearer \(w1)"), ("Content-Type", "application/json")], body: note)
                #expect(pushed.status == 200)
                let cursor = try PullPage.decode(try httpRequest(port: server.port, "GET", "/v1/spaces/team/pull", headers: [("Authorization", "Bearer \(w1)")]).body)
                #expect(cursor.next.seq == 1, "a cursor past the start: one at the start holds nothing, whatever its view")
                let since = Cursor(cursor.next, view: cursor.view).text
                try Data(#"{"default": {"read": "auth.sub == 'w2'", "write": "true"}}"#.utf8).write(to: URL(fileURLWithPath: path))
                server.process.send(SIGHUP)
                try eventuallyBlocking("the server reloaded its rules") {
                    try server.metric("outpost_rules_reloads_total{result=\"applied\"}", token: admin) == 1
                }
                let stale = try httpRequest(port: server.port, "GET", "/v1/spaces/team/pull?since=\(since)", headers: [("Authorization", "Bearer \(w1)")])
                #expect(stale.status == 409 && (try? ErrorEnvelope.decode(stale.body))?.code == "view_changed")
            }
        }
    }
}
