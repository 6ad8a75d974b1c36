import OutpostCore

/// docs/rules.md: a server with a rules file judges every write by it and answers each
/// token's pulls with its view. Each check gives the server the field team's rules (below)
/// through the configured hook, and takes them away at its end.
enum RulesChecks {
    /// Workers read and write the jobs assigned to them, never reassign one and never
    /// delete; supervisors do anything; `notes` are open; other collections are closed.
    static let fieldTeam = #"""
    {"collections": {
       "jobs": {
         "read": "data.assignee == auth.sub || 'supervisor' in auth.roles",
         "write": "'supervisor' in auth.roles || (op == 'put' && data.assignee == auth.sub && (prev == null || prev.assignee == auth.sub))",
         "schema": {"type": "object", "required": ["title", "assignee"],
                    "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 200},
                                   "assignee": {"type": "string"}, "status": {"enum": ["open", "done"]}}}},
       "notes": {"read": "true", "write": "true"}}}
    """#

    /// The same, with every job readable by every token.
    static let everyoneReadsJobs = fieldTeam.replacingOccurrences(
        of: #""read": "data.assignee == auth.sub || 'supervisor' in auth.roles""#, with: #""read": "true""#)

    struct Team {
        let space: String
        let w1: String, w2: String, boss: String
        init(_ c: CheckContext) {
            space = c.newSpace()
            w1 = c.token(space, sub: "w1")
            w2 = c.token(space, sub: "w2")
            boss = c.token(space, sub: "boss", claims: ["roles": ["supervisor"]])
        }
    }

    static func job(_ c: CheckContext, _ id: String, _ title: String, _ assignee: String, base: Version? = nil) -> JSONValue {
        ChangeJSON.put(c.unique("chg"), collection: "jobs", id: id, data: ["title": .string(title), "assignee": .string(assignee)], base: base?.text)
    }

    /// Every page from `since` with `token`: the records and revocations, and the last cursor.
    /// `holding`: the pulls say `holding=true` (docs/protocol.md section 5).
    static func pullAll(_ c: CheckContext, _ team: Team, token: String, since: String? = nil, holding: Bool = false) async throws -> (records: [RecordState], revoked: [Revocation], next: String) {
        var cursor = since
        var records: [RecordState] = [], revoked: [Revocation] = []
        for _ in 0..<1_000 {
            let query = (cursor.map { [("since", $0)] } ?? []) + (holding ? [("holding", "true")] : [])
            let page = try await c.pull(team.space, query, token: token).page
            records += page.changes
            revoked += page.revoked
            let next = Cursor(page.next, view: page.view).text
            if !page.hasMore { return (records, revoked, next) }
            cursor = next
        }
        throw CheckFailure("more than 1000 pages; hasMore never became false")
    }

    static let all: [Check] = [
        Check("rules-view-per-token", section: "5", "under rules a pull returns only the records the token's read rule admits, and its cursor names the view", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                let created = try await c.push(t.space, [job(c, "j1", "Fix pump", "w1"), job(c, "j2", "Paint wall", "w2"), job(c, "j3", "Check valve", "w1")], token: t.boss)
                for r in created.results { _ = try expectApplied(r, "a supervisor's new job") }
                let w1 = try await pullAll(c, t, token: t.w1), w2 = try await pullAll(c, t, token: t.w2), boss = try await pullAll(c, t, token: t.boss)
                try expect(w1.records.map(\.id) == ["j1", "j3"], "w1 pulled \(w1.records.map(\.id)), expected its jobs j1, j3")
                try expect(w2.records.map(\.id) == ["j2"], "w2 pulled \(w2.records.map(\.id)), expected j2")
                try expect(boss.records.map(\.id) == ["j1", "j2", "j3"], "the supervisor pulled \(boss.records.map(\.id)), expected every job")
                guard let cursor = Cursor(w1.next), let view = cursor.view else { throw CheckFailure("the cursor \(w1.next) names no view") }
                try expect(Cursor(w2.next)?.view != view, "two workers' views are the same (\(view))")
            }
        },
        Check("rules-write-judged-per-change", section: "4", "under rules a refused write is rejected forbidden beside an applied one in the same push, and nothing refused is stored", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                let created = try await c.push(t.space, [job(c, "j1", "Fix pump", "w1"), job(c, "j2", "Paint wall", "w2")], token: t.boss)
                let v1 = try expectApplied(created.results[0], "j1"), v2 = try expectApplied(created.results[1], "j2")
                let results = try await c.push(t.space, [
                    job(c, "j1", "Fix pump today", "w1", base: v1),
                    job(c, "j2", "Paint it red", "w2", base: v2),
                    job(c, "j1", "Fix pump", "w2"),
                    ChangeJSON.delete(c.unique("chg"), collection: "jobs", id: "j1", base: nil),
                    ChangeJSON.put(c.unique("chg"), collection: "closed", id: "x", data: ["v": 1], base: nil),
                ], token: t.w1).results
                _ = try expectApplied(results[0], "w1's edit of its own job")
                try expectRejected(results[1], "forbidden", "w1's edit of a job it cannot read")
                try expectRejected(results[2], "forbidden", "w1 reassigning a job")
                try expectRejected(results[3], "forbidden", "a worker's delete")
                try expectRejected(results[4], "forbidden", "a write to a collection the rules do not name, without default")
                let all = try await pullAll(c, t, token: t.boss).records
                try expect(all.first { $0.id == "j2" }?.data?["title"] == "Paint wall", "a refused edit changed j2")
                try expect(all.first { $0.id == "j1" }?.data?["assignee"] == "w1", "a refused reassignment changed j1")
            }
        },
        Check("rules-schema-failure-pointer", section: "4", "under rules a put that fails the collection's schema is rejected invalid_change with details.path and details.reason", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                let results = try await c.push(t.space, [
                    job(c, "j1", "", "w1"),
                    ChangeJSON.put(c.unique("chg"), collection: "jobs", id: "j2", data: ["title": "x", "assignee": "w1", "status": "closed"], base: nil),
                    ChangeJSON.put(c.unique("chg"), collection: "jobs", id: "j3", data: ["assignee": "w1"], base: nil),
                ], token: t.w1).results
                for (result, path) in zip(results, ["/title", "/status", "/title"]) {
                    try expectRejected(result, "invalid_change", "a job failing the schema at \(path)")
                    try expect(result.error?.details?["path"] == .string(path), "details.path is \(String(describing: result.error?.details?["path"])), expected \(path)")
                    try expect(result.error?.details?["reason"]?.stringValue?.isEmpty == false, "details.reason is missing at \(path)")
                }
                try expect(try await pullAll(c, t, token: t.boss).records.isEmpty, "a job failing the schema was stored")
            }
        },
        Check("rules-upgrade-required", section: "4", "under rules a write from an app older than the collection's minAppVersion is rejected upgrade_required with details.minimum; a push that names no version is version 0", requires: [.rules]) { c in
            let rules = fieldTeam.replacingOccurrences(of: #""notes": {"read": "true", "write": "true"}"#,
                                                       with: #""notes": {"read": "true", "write": "true", "minAppVersion": 2}"#)
            try await c.withRules(rules) {
                let t = Team(c)
                func note(_ id: String) -> JSONValue { ChangeJSON.put(c.unique("chg"), collection: "notes", id: id, data: ["text": "on site"], base: nil) }
                let none = try await c.push(t.space, [note("n1"), job(c, "j1", "Fix pump", "w1")], token: t.w1).results
                try expectRejected(none[0], "upgrade_required", "a note from a push that names no version")
                try expect(none[0].error?.details?["minimum"]?.int64Value == 2 && none[0].error?.details?["version"]?.int64Value == 0,
                           "details are \(String(describing: none[0].error?.details)), expected minimum 2 and version 0")
                _ = try expectApplied(none[1], "a job: its collection sets no minimum")
                let old = try await c.push(t.space, [note("n2")], token: t.w1, extra: [("appVersion", 1)]).results[0]
                try expectRejected(old, "upgrade_required", "a note from app version 1")
                _ = try expectApplied(try await c.push(t.space, [note("n3")], token: t.w1, extra: [("appVersion", 2)]).results[0], "a note from app version 2")
                _ = try expectApplied(try await c.push(t.space, [note("n4")], token: t.w1, extra: [("appVersion", 1), ("collectionVersions", ["notes": 2])]).results[0],
                                      "a note from version 2 of the notes collection")
                let stored = try await pullAll(c, t, token: t.boss).records.filter { $0.collection == "notes" }.map(\.id)
                try expect(stored == ["n3", "n4"], "the notes stored are \(stored), expected n3 and n4")
            }
        },
        Check("rules-replay-answers-as-first", section: "4", "under rules a replayed change answers as the first time", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                let change = job(c, "j1", "Fix pump", "w1")
                let first = try expectApplied(try await c.push(t.space, [change], token: t.w1).results[0], "w1's new job")
                let again = try await c.push(t.space, [change], token: t.w1).results[0]
                try expect(again.status == .applied && again.replayed && again.version == first, "the replay answered \(again.status) \(String(describing: again.version)), expected applied \(first) replayed")
            }
        },
        Check("rules-revoked-and-delete", section: "5", "a record reassigned away reaches the device that held it as revoked, without data; a delete reaches who could see the record only", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                let created = try await c.push(t.space, [job(c, "j1", "Fix pump", "w1"), job(c, "j3", "Check valve", "w1")], token: t.boss)
                let v1 = try expectApplied(created.results[0], "j1"), v3 = try expectApplied(created.results[1], "j3")
                let w1 = try await pullAll(c, t, token: t.w1), w2 = try await pullAll(c, t, token: t.w2)
                let moved = try expectApplied(try await c.push(t.space, [job(c, "j1", "Fix pump", "w2", base: v1)], token: t.boss).results[0], "the reassignment")
                let lost = try await pullAll(c, t, token: t.w1, since: w1.next)
                try expect(lost.records.isEmpty && lost.revoked == [Revocation(collection: "jobs", id: "j1", version: moved)],
                           "w1 pulled \(lost.records.map(\.id)) and revoked \(lost.revoked), expected only jobs/j1 revoked at \(moved)")
                let gained = try await pullAll(c, t, token: t.w2, since: w2.next)
                try expect(gained.records.map(\.id) == ["j1"] && gained.revoked.isEmpty, "w2 pulled \(gained.records.map(\.id)), expected j1")
                let gone = try expectApplied(try await c.push(t.space, [ChangeJSON.delete(c.unique("chg"), collection: "jobs", id: "j3", base: v3.text)], token: t.boss).results[0], "the delete")
                let w1Delete = try await pullAll(c, t, token: t.w1, since: lost.next)
                try expect(w1Delete.records.map(\.id) == ["j3"] && w1Delete.records.first?.deleted == true, "w1 pulled \(w1Delete.records.map(\.id)) after the delete of its job, expected the tombstone of j3")
                let w2Delete = try await pullAll(c, t, token: t.w2, since: gained.next)
                try expect(w2Delete.records.isEmpty && w2Delete.revoked.isEmpty, "w2 learned of the delete of a job it never saw")
                try expect(Cursor(w2Delete.next)?.version == gone, "w2's cursor \(w2Delete.next) did not move past the delete \(gone)")
            }
        },
        Check("rules-holding-from-the-start", section: "5", "under rules a pull from the start that says holding=true gets the deletes and revocations of records the view admitted; without it, neither", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                let created = try await c.push(t.space, [job(c, "j1", "Fix pump", "w1"), job(c, "j2", "Paint wall", "w1"), job(c, "j3", "Check valve", "w1")],
                                               token: t.boss)
                let v1 = try expectApplied(created.results[0], "j1"), v3 = try expectApplied(created.results[2], "j3")
                let moved = try expectApplied(try await c.push(t.space, [job(c, "j1", "Fix pump", "w2", base: v1)], token: t.boss).results[0], "the reassignment")
                let gone = try expectApplied(try await c.push(t.space, [ChangeJSON.delete(c.unique("chg"), collection: "jobs", id: "j3", base: v3.text)],
                                                              token: t.boss).results[0], "the delete")
                let fresh = try await pullAll(c, t, token: t.w1)
                try expect(fresh.records.map(\.id) == ["j2"] && fresh.revoked.isEmpty,
                           "w1 from the start pulled \(fresh.records.map(\.id)) and revoked \(fresh.revoked), expected only j2")
                let held = try await pullAll(c, t, token: t.w1, holding: true)
                let tombstones = held.records.filter(\.deleted), live = held.records.filter { !$0.deleted }
                try expect(live.map(\.id) == ["j2"], "w1 from the start, holding, pulled live \(live.map(\.id)), expected j2")
                try expect(tombstones.map(\.id) == ["j3"] && tombstones.first?.version == gone,
                           "w1 from the start, holding, pulled tombstones \(tombstones.map(\.id)), expected j3 at \(gone)")
                try expect(held.revoked == [Revocation(collection: "jobs", id: "j1", version: moved)],
                           "w1 from the start, holding, got revoked \(held.revoked), expected jobs/j1 at \(moved)")
                let other = try await pullAll(c, t, token: t.w2, holding: true)
                try expect(other.records.map(\.id) == ["j1"] && other.revoked.isEmpty,
                           "w2 from the start, holding, pulled \(other.records.map(\.id)) and revoked \(other.revoked): it never could see j3")
            }
        },
        Check("rules-cursor-of-another-view", section: "5", "under rules a cursor of another view, or one without a view, is 409 view_changed with details.view", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                _ = try expectApplied(try await c.push(t.space, [job(c, "j1", "Fix pump", "w1")], token: t.boss).results[0], "j1")
                let w1 = try await pullAll(c, t, token: t.w1)
                guard let cursor = Cursor(w1.next) else { throw CheckFailure("\(w1.next) is not a cursor") }
                for (what, since, token) in [("w1's cursor for w2", w1.next, t.w2), ("a cursor without its view", cursor.version.text, t.w1)] {
                    let details = try expectError(try await c.pullResponse(t.space, [("since", since)], token: token), 409, "view_changed", what)
                    try expect(details["view"]?.stringValue.map(Cursor.isValidView) == true, "\(what): details.view is \(String(describing: details["view"]))")
                }
            }
        },
        Check("rules-reload-changes-the-view", section: "5", "new read rules change the view: the old cursor is 409 view_changed and a pull from the start answers the new view", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                _ = try await c.push(t.space, [job(c, "j1", "Fix pump", "w1"), job(c, "j2", "Paint wall", "w2")], token: t.boss)
                let before = try await pullAll(c, t, token: t.w1)
                try await c.replaceRules(everyoneReadsJobs)
                let details = try expectError(try await c.pullResponse(t.space, [("since", before.next)], token: t.w1), 409, "view_changed", "the cursor of the old view")
                let after = try await pullAll(c, t, token: t.w1)
                try expect(after.records.map(\.id) == ["j1", "j2"], "the new view pulled \(after.records.map(\.id)), expected every job")
                try expect(details["view"]?.stringValue == Cursor(after.next)?.view, "details.view \(String(describing: details["view"])) is not the view of the new cursor \(after.next)")
            }
        },
        Check("rules-long-poll-wakes-for-its-view", section: "5", "under rules a long poll is answered by a commit its view admits, not by one outside it", requires: [.rules]) { c in
            try await c.withRules(fieldTeam) {
                let t = Team(c)
                _ = try await c.push(t.space, [job(c, "j1", "Fix pump", "w1")], token: t.boss)
                let start = try await pullAll(c, t, token: t.w1)
                let space = t.space, w1 = t.w1, since = start.next
                let held = Task { try await c.pull(space, [("since", since), ("wait", "20000")], token: w1, timeout: .seconds(40)).page }
                defer { held.cancel() }
                _ = try await c.push(t.space, [job(c, "j2", "Paint wall", "w2")], token: t.boss)
                _ = try await c.push(t.space, [job(c, "j3", "Check valve", "w1")], token: t.boss)
                let page = try await held.value
                try expect(page.changes.map(\.id) == ["j3"], "the long poll answered \(page.changes.map(\.id)), expected j3 (j2 is outside w1's view)")
            }
        },
    ]
}
