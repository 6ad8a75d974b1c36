import Foundation
import OutpostCore
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// The admin console's subject inspections (docs/operating.md, "Explain a record's rules"
/// and "See what they see"): `POST /v1/admin/spaces/{space}/explain` and `…/view` over an
/// `outpost-server` child with a rules file, on each store. Their verdicts are held to
/// what the server does for a real token with the same claims: the records its pull
/// returns and the answer to its push.
@Suite(.offPoolWhileBlocking, .serverLogs) struct AdminExplainTests {
    enum Store: String, CaseIterable, Sendable { case sqlite, postgres }

    static let space = "field"
    static let collections = ["jobs", "sites", "notes", "logs"]
    static let teams = ["north", "south", "east"]
    static let subjects = ["ann", "bo", "cy"]

    /// Random rules, records and claims (fixed seed): for every claims set and record, the
    /// explanation's read verdict and `inView` are whether the pull of a token with those
    /// claims returns the record, its put verdict is whether a push of that put by the token
    /// is applied (and its refusal's code the push's), and `…/view` returns the pull's records.
    @Test(arguments: Store.allCases) func theExplanationsVerdictsAreTheEnginesOnRandomRulesRecordsAndClaims(store: Store) async throws {
        var random = SplitMix64(seed: 50_0001)
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "explain") : nil
        let storeArguments = url.map { ["--store", $0] } ?? []
        try await withTemporaryDirectory(prefix: "outpost-explain") { dir in
            // The records are written before the rules apply, so some break them (and the schema).
            let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data"), arguments: storeArguments) }
            defer { _ = server.stop() }
            let authority = JWTAuthority(secret: Array(server.secret.utf8))
            func token(_ claims: Claims) -> String { authority.sign(claims) }
            let later = Int64(Date().timeIntervalSince1970) + 3600
            let loader = token(Claims(sub: "loader", exp: later, spaces: [Self.space], scope: .write))
            var changes: [Change] = []
            for n in 0..<36 {
                let collection = Self.collections[n % Self.collections.count]
                var data: JSONObject = ["team": .string(Self.pick(Self.teams, &random)), "level": .number(JSONNumber(Int(random.next() % 7))),
                                        "owner": .string(Self.pick(Self.subjects, &random)), "open": .bool(random.next() % 2 == 0)]
                data["tags"] = .array(Self.teams.filter { _ in random.next() % 3 == 0 }.map { .string($0) })
                changes.append(Change(changeId: "seed-\(n)", collection: collection, id: String(format: "r%02d", n), op: .put, data: data, baseVersion: nil, clientTime: 1))
            }
            let seeded = try await Self.send(server.port, "POST", "/v1/spaces/\(Self.space)/push", token: loader, PushRequest(clientId: "loader", changes: changes).encoded())
            #expect(try PushResponse.decode(seeded.body).results.allSatisfy { $0.status == .applied })

            let rules = Self.rulesFile(&random)
            let rulesPath = dir.appending("rules.json")
            try Data(rules.encoded()).write(to: URL(fileURLWithPath: rulesPath))
            try await blocking { try server.restart(arguments: storeArguments + ["--rules", rulesPath]) }
            let admin = token(Claims(sub: "ops-lead", exp: later, spaces: [], admin: true))

            var checked = 0, admitted = 0, applied = 0
            for round in 0..<8 {
                var extra: JSONObject = ["team": .string(Self.pick(Self.teams, &random)), "level": .number(JSONNumber(Int(random.next() % 7)))]
                extra["roles"] = .array(["lead", "worker"].filter { _ in random.next() % 2 == 0 }.map { .string($0) })
                let subject = Self.pick(Self.subjects, &random)
                let claims = Claims(sub: subject, exp: later, spaces: [Self.space], scope: .write, extra: extra)
                let asked = JSONValue.object(extra)
                let pulled = try await Self.pullAll(server.port, token: token(claims))
                let inPull = Set(pulled.compactMap { $0["id"]?.stringValue })

                // See what they see: the same records as the pull, counted per collection.
                let seen = try json(try await Self.send(server.port, "POST", "/v1/admin/spaces/\(Self.space)/view", token: admin,
                                                             JSONValue.object(["subject": .string(subject), "claims": asked, "pages": 5, "limit": 50]).encoded()))
                let seenIDs = (seen["records"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue }
                #expect(Set(seenIDs) == inPull && seenIDs.count == inPull.count && seen["hasMore"] == false, "round \(round)")
                for name in Self.collections {
                    let expected = pulled.filter { $0["collection"]?.stringValue == name }.count
                    #expect((seen["counts"]?[name]?.int64Value ?? 0) == Int64(expected), "round \(round): \(name)")
                }

                for change in changes {
                    let body = JSONValue.object(["collection": .string(change.collection), "id": .string(change.id), "subject": .string(subject), "claims": asked])
                    let answer = try json(try await Self.send(server.port, "POST", "/v1/admin/spaces/\(Self.space)/explain", token: admin, body.encoded()))
                    let visible = inPull.contains(change.id)
                    let read = answer["read"]
                    #expect(read?["verdict"] == .bool(visible) && answer["inView"] == .bool(visible), "round \(round) \(change.id): \(answer)")
                    // The trace is of the rule itself: its first step is the whole rule, with the verdict as its value.
                    if let first = read?["trace"]?.arrayValue?.first {
                        #expect(first["depth"] == 0 && first["value"] == read?["verdict"], "\(change.id): \(first)")
                    }
                    if visible { admitted += 1 }

                    // The put the explanation judged, pushed by a token with these claims.
                    let put = try #require(answer["put"]?.objectValue)
                    let current = try #require(answer["record"]?["version"]?.stringValue.flatMap { Version($0) })
                    let data = try #require(put["data"]?.objectValue)
                    let push = Change(changeId: "r\(round)-\(change.id)", collection: change.collection, id: change.id, op: .put, data: data, baseVersion: current, clientTime: 2)
                    let pushed = try await Self.send(server.port, "POST", "/v1/spaces/\(Self.space)/push", token: token(claims),
                                                     PushRequest(clientId: "device-\(subject)", changes: [push]).encoded())
                    let result = try #require(try PushResponse.decode(pushed.body).results.first)
                    #expect((result.status == .applied) == (put["verdict"] == true), "round \(round) \(change.id): \(put) vs \(pushed.text)")
                    if result.status == .rejected {
                        #expect(put["refusal"]?["code"]?.stringValue == result.error?.code, "\(change.id): \(put) vs \(pushed.text)")
                    }
                    // Each condition's verdict is its trace's, and all of them pass when the push's judge admits.
                    let conditions = put["conditions"]?.arrayValue ?? []
                    if result.status == .applied { #expect(conditions.allSatisfy { $0["verdict"] == true }, "\(change.id): \(put)") }
                    if result.status == .applied { applied += 1 }
                    checked += 1
                }
            }
            // The fixture exercises both answers of each verdict.
            #expect(checked == 8 * 36 && admitted > 20 && admitted < checked - 20 && applied > 10 && applied < checked - 10, "\(admitted) admitted, \(applied) applied of \(checked)")
            // Each inspection is logged with the admin's subject, never the claims.
            let line = try await server.logLine("an explanation logged", where: ServerProcess.logged("admin console inspected a subject's rules", ["by": "ops-lead"]))
            #expect(!line.contains("team") && !line.contains("roles"), "\(line)")
            try await server.logLine("a view logged", where: ServerProcess.logged("admin console inspected a subject's view", ["by": "ops-lead", "space": Self.space]))
        }
    }

    /// Bad input gets `422 invalid_request` naming the field, an oversized body `413`, and
    /// neither route answers without an admin token; without a rules file the answer says so.
    @Test func badInputIsRefusedAndOnlyAnAdminMayAsk() async throws {
        try await withTemporaryDirectory(prefix: "outpost-explain") { dir in
            let rulesPath = dir.appending("rules.json")
            try Data(#"{"collections": {"jobs": {"read": "data.team == auth.team", "write": "auth.team == 'north'", "schema": {"type": "object", "required": ["team"]}}}}"#.utf8)
                .write(to: URL(fileURLWithPath: rulesPath))
            try await withServer(configure: { $0.rulesPath = rulesPath }) { s in
                let north = s.authority.sign(Claims(sub: "loader", exp: Int64(Date().timeIntervalSince1970) + 3600, spaces: ["field"], scope: .write,
                                                    extra: ["team": "north"]))
                let seeded = try await s.push("field", [put("c1", "j1", ["team": "north"], collection: "jobs")], token: north)
                #expect(try PushResponse.decode(seeded.body).results.map(\.status) == [.applied], "\(seeded.text)")
                let admin = s.token(sub: "ops", spaces: [], admin: true)
                func post(_ route: String, _ body: String, token: String?) async throws -> TestResponse {
                    try await s.request("POST", "/v1/admin/spaces/field/\(route)", token: token, body: Array(body.utf8))
                }
                let longID = String(repeating: "i", count: 257)
                let bigClaims = #"{"pad":""# + String(repeating: "x", count: 17_000) + #""}"#
                for (route, body, field) in [
                    ("explain", #"{"id":"j1","subject":"ann"}"#, "collection"),
                    ("explain", #"{"collection":"-x","id":"j1","subject":"ann"}"#, "collection"),
                    ("explain", #"{"collection":"jobs","subject":"ann"}"#, "id"),
                    ("explain", #"{"collection":"jobs","id":"\#(longID)","subject":"ann"}"#, "id"),
                    ("explain", #"{"collection":"jobs","id":"a\u0001","subject":"ann"}"#, "id"),
                    ("explain", #"{"collection":"jobs","id":"j1"}"#, "subject"),
                    ("explain", #"{"collection":"jobs","id":"j1","subject":"ann\u001b[2J"}"#, "subject"),
                    ("explain", #"{"collection":"jobs","id":"j1","subject":"ann","claims":{"exp":1e300}}"#, "claims.exp"),
                    ("view", #"{"subject":"ann","claims":{"spaces":"field"}}"#, "claims.spaces"),
                    ("view", #"{"subject":"ann","claims":{"admin":1}}"#, "claims.admin"),
                    ("explain", #"{"collection":"jobs","id":"j1","subject":"ann","claims":[1]}"#, "claims"),
                    ("explain", #"{"collection":"jobs","id":"j1","subject":"ann","claims":\#(bigClaims)}"#, "claims"),
                    ("explain", #"{"collection":"jobs","id":"j1","subject":"ann","claims":{"scope":"admin"}}"#, "claims.scope"),
                    ("explain", #"{"collection":"jobs","id":"j1","subject":"ann","appVersion":-1}"#, "appVersion"),
                    ("explain", #"{"collection":"jobs","id":"j1","subject":"ann","data":[]}"#, "data"),
                    ("explain", #"["x"]"#, "body"),
                    ("view", #"{"subject":"ann","pages":6}"#, "pages"),
                    ("view", #"{"subject":"ann","limit":501}"#, "limit"),
                    ("view", #"{"subject":"ann","collections":["-x"]}"#, "collections"),
                    ("view", #"{"subject":""}"#, "subject"),
                ] {
                    let r = try await post(route, body, token: admin)
                    let details = try? ErrorEnvelope.decode(r.body).details
                    #expect(r.status == 422 && details?["field"] == .string(field), "\(route) \(body.prefix(80)): \(r.status) \(r.text.prefix(200))")
                }
                #expect(try await post("explain", "{", token: admin).status == 400)
                let huge = #"{"subject":"ann","claims":{"pad":""# + String(repeating: "x", count: 70_000) + #""}}"#
                #expect(try await post("view", huge, token: admin).status == 413)
                let badSpace = try await s.request("POST", "/v1/admin/spaces/-x/view", token: admin, body: Array(#"{"subject":"ann"}"#.utf8))
                #expect(badSpace.status == 400 && errorCode(badSpace) == "invalid_space")
                let reader = s.token(spaces: ["*"], scope: .write)
                for route in ["explain", "view"] {
                    let body = #"{"collection":"jobs","id":"j1","subject":"ann"}"#
                    #expect(try await post(route, body, token: nil).status == 401)
                    #expect(try await post(route, body, token: reader).status == 403)
                }

                // A record the claims read, a put the schema refuses, and the trace of each.
                let answer = try json(try await post("explain", #"{"collection":"jobs","id":"j1","subject":"ann","claims":{"team":"south"},"data":{"x":1}}"#, token: admin))
                #expect(answer["read"]?["verdict"] == false && answer["inView"] == false && answer["read"]?["rule"] == "data.team == auth.team")
                let steps = answer["read"]?["trace"]?.arrayValue ?? []
                #expect(steps.first?["expression"] == "data.team == auth.team" && steps.first?["compared"] == #""north" == "south""#, "\(steps)")
                #expect(answer["put"]?["verdict"] == false && answer["put"]?["schema"]?["verdict"] == false && answer["put"]?["refusal"]?["code"] == "forbidden")
                #expect(answer["delete"]?["conditions"]?[0]?["verdict"] == false && answer["delete"]?["conditions"]?[0]?["trace"]?[0]?["compared"] == #""south" == "north""#)
                let missing = try json(try await post("explain", #"{"collection":"jobs","id":"none","subject":"ann","claims":{"team":"north"}}"#, token: admin))
                #expect(missing["record"] == .null && missing["inView"] == false && missing["read"]?["note"] == "no such record")
                // A collection the rules close, and no token is made: the answer holds none.
                let closed = try await post("explain", #"{"collection":"secret","id":"x","subject":"ann"}"#, token: admin)
                #expect(try json(closed)["read"]?["note"] == "the rules give no read access to secret" && !closed.text.contains("eyJ"))
                #expect(closed.header("Cache-Control") == "no-store")
            }
        }
        // Without a rules file, a token for the space reads and writes everything.
        try await withServer { s in
            #expect(try await s.push("field", [put("c1", "t1")]).status == 200)
            let admin = s.token(spaces: [], admin: true)
            let answer = try json(try await s.request("POST", "/v1/admin/spaces/field/explain", token: admin,
                                                      body: Array(#"{"collection":"todos","id":"t1","subject":"ann","claims":{"scope":"read"}}"#.utf8)))
            #expect(answer["rules"] == .null && answer["inView"] == true && answer["put"]?["verdict"] == false)
            let seen = try json(try await s.request("POST", "/v1/admin/spaces/field/view", token: admin, body: Array(#"{"subject":"ann"}"#.utf8)))
            #expect(seen["counts"] == ["todos": 1] && seen["view"] == .null)
            let elsewhere = try json(try await s.request("POST", "/v1/admin/spaces/field/view", token: admin, body: Array(#"{"subject":"ann","claims":{"spaces":["other"]}}"#.utf8)))
            #expect(elsewhere["spaceAllowed"] == false && elsewhere["records"] == [])
        }
    }

    // MARK: Fixture

    static func pick<T>(_ items: [T], _ random: inout SplitMix64) -> T { items[Int(random.next() % UInt64(items.count))] }

    /// Read conditions over the records' fields and the claims.
    static let readAtoms = ["data.team == auth.team", "data.owner == auth.sub", "data.level <= auth.level", "auth.team in data.tags",
                            "'lead' in auth.roles", "data.open", "data.open == false", "id < 'r18'", "data.level > 2", "auth.level >= 3",
                            "data.missing == null", "collection == 'jobs'"]
    /// Write conditions add the copy replaced and the operation.
    static let writeAtoms = readAtoms + ["prev.owner == auth.sub", "op == 'put'", "prev == null", "data.level == prev.level", "prev.team == auth.team"]

    static func expression(_ atoms: [String], depth: Int, _ random: inout SplitMix64) -> String {
        if depth == 0 || random.next() % 3 == 0 { return pick(atoms, &random) }
        switch random.next() % 5 {
        case 0: return "!(" + expression(atoms, depth: depth - 1, &random) + ")"
        case 1: return "(" + expression(atoms, depth: depth - 1, &random) + " ? " + expression(atoms, depth: depth - 1, &random) + " : "
            + expression(atoms, depth: depth - 1, &random) + ")"
        case 2, 3: return "(" + expression(atoms, depth: depth - 1, &random) + " || " + expression(atoms, depth: depth - 1, &random) + ")"
        default: return "(" + expression(atoms, depth: depth - 1, &random) + " && " + expression(atoms, depth: depth - 1, &random) + ")"
        }
    }

    /// Three named collections with random rules (one with a schema the seeded levels
    /// sometimes break) and a default that `logs` takes.
    static func rulesFile(_ random: inout SplitMix64) -> JSONValue {
        var named = JSONObject()
        for name in ["jobs", "sites", "notes"] {
            var rules: JSONObject = ["read": .string(expression(readAtoms, depth: 3, &random))]
            let conditions = (0..<(1 + Int(random.next() % 2))).map { i -> JSONValue in
                .object(["rule": .string(expression(writeAtoms, depth: 2, &random)), "reason": .string("condition \(i + 1)")])
            }
            rules["write"] = .array(conditions)
            if name == "sites" { rules["schema"] = .object(["type": "object", "properties": .object(["level": .object(["type": "integer", "maximum": 4])])]) }
            named[name] = .object(rules)
        }
        return .object(["collections": .object(named),
                        "default": .object(["read": .string(expression(readAtoms, depth: 2, &random)), "write": .string(expression(writeAtoms, depth: 2, &random))])])
    }

    static func send(_ port: Int, _ method: String, _ path: String, token: String, _ body: [UInt8]? = nil) async throws -> TestResponse {
        let r = try await httpRequestAsync(port: port, method, path, headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")], body: body)
        guard r.status == 200 else { throw ProcessFailure("\(method) \(path) answered \(r.status): \(r.text)") }
        return r
    }


    /// Every live record a token's pulls from the start return, page by page.
    static func pullAll(_ port: Int, token: String) async throws -> [JSONValue] {
        var records: [JSONValue] = []
        var since: String?
        for _ in 0..<100 {
            let page = try json(try await send(port, "GET", "/v1/spaces/\(space)/pull?limit=7" + (since.map { "&since=\($0)" } ?? ""), token: token))
            records += (page["changes"]?.arrayValue ?? []).filter { $0["deleted"] != true && $0["revoked"] == nil }
            since = page["next"]?.stringValue
            if page["hasMore"] != true { return records }
        }
        throw ProcessFailure("the pull did not end within 100 pages")
    }
}
