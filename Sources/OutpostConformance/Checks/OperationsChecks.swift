import Foundation
import OutpostCore

/// Sections 3 and 7, and the routing rules of section 2: info, health, readiness, metrics,
/// unknown paths and wrong methods.
enum OperationsChecks {
    static let all: [Check] = [
        Check("info-shape-and-limits", section: "3", "GET /v1/info needs no token and answers protocol 1, outpost/<version>, the epoch and all seven limits as positive integers") { c in
            let response = try await c.get("/v1/info")
            try expectStatus(response, 200, "GET /v1/info without a token")
            try expect(response.header("Content-Type")?.lowercased().hasPrefix("application/json") == true,
                       "GET /v1/info: Content-Type is \(response.header("Content-Type") ?? "absent"), expected application/json")
            let json = try response.json()
            try expect(json["protocol"]?.int64Value == 1, "protocol is \(json["protocol"]?.description ?? "absent"), expected 1")
            let server = json["server"]?.stringValue ?? ""
            try expect(server.hasPrefix("outpost/") && server.count > "outpost/".count, "server is \"\(server)\", expected outpost/<version>")
            try expect(json["epoch"]?.stringValue.flatMap(Epoch.init) != nil, "epoch \(json["epoch"]?.description ?? "absent") does not match ^[A-Za-z0-9]{1,64}$")
            guard let limits = json["limits"]?.objectValue else { throw CheckFailure("limits is not an object: \(response.bodyPreview)") }
            for field in Limits.fields {
                guard let value = limits[field.name]?.numberValue, value.isIntegerLexeme, let n = value.int64Value, n > 0 else {
                    throw CheckFailure("limits.\(field.name) is \(limits[field.name]?.description ?? "absent"), expected a positive integer")
                }
            }
        },
        Check("server-time-header", section: "2", "every answer carries X-Server-Time, the server's clock in ms since 1970, within a second of its Date") { c in
            for (response, what) in [(try await c.get("/v1/info"), "GET /v1/info"), (try await c.get("/v1/no-such-route"), "a 404")] {
                guard let text = response.header("X-Server-Time"), let ms = Int64(text) else {
                    throw CheckFailure("\(what): X-Server-Time is \(response.header("X-Server-Time") ?? "absent"), expected an integer of ms")
                }
                let formatter = DateFormatter()
                formatter.locale = Locale(identifier: "en_US_POSIX")
                formatter.timeZone = TimeZone(identifier: "GMT")
                formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
                guard let date = response.header("Date").flatMap(formatter.date) else { throw CheckFailure("\(what): Date is not an IMF-fixdate") }
                let dateMs = Int64(date.timeIntervalSince1970 * 1000)
                try expect(ms >= dateMs - 1000 && ms < dateMs + 2000, "\(what): X-Server-Time \(ms) is not within the second of Date \(dateMs)")
            }
        },
        Check("compaction-history-compacted", section: "5", "after POST /v1/admin/compact purges a delete, a cursor before it is 409 history_compacted with details.horizon, and the space from the start no longer holds the record") { c in
            let space = c.newSpace()
            let x = try await PushChecks.create(c, space, id: "x")
            _ = try await PushChecks.create(c, space, id: "y")
            let before = try await c.pull(space).page.next
            let deletion = try expectApplied(try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "x", base: x.text)]).results[0], "delete of x")
            let admin = c.token([], scope: "read", admin: true)
            try expectError(try await c.send("POST", "/v1/admin/compact?retentionDays=0", token: c.writeToken(space)), 403, "forbidden", "compact with a token that is not admin")
            let compacted = try await c.send("POST", "/v1/admin/compact?retentionDays=0", token: admin)
            try expectStatus(compacted, 200, "POST /v1/admin/compact?retentionDays=0")
            let horizon = try compacted.json()["horizons"]?[space]?.int64Value
            try expect(horizon == deletion.seq, "the compaction's horizon of the space is \(horizon.map(String.init) ?? "absent"), expected the delete's seq \(deletion.seq)")
            let details = try expectError(try await c.pullResponse(space, [("since", before.text)]), 409, "history_compacted", "pull from a cursor before the purged delete")
            try expect(details["horizon"]?.stringValue == deletion.text, "details.horizon is \(details["horizon"]?.description ?? "absent"), expected \(deletion.text)")
            let whole = try await c.pullAll(space)
            try expect(whole.records.map(\.id) == ["y"], "from the start the space holds \(whole.records.map(\.id)), expected only y (x's tombstone purged)")
            try expectStatus(try await c.pullResponse(space, [("since", deletion.text)]), 200, "pull from the horizon")
        },
        Check("telemetry-limits", section: "7", "POST /v1/spaces/{space}/telemetry takes a batch of at most 100 syncs in 64 KiB (202 accepted), and refuses more (422), a bigger body (413), a bad field (422 with details.field) and a token of another space (403)") { c in
            let space = c.newSpace()
            let path = CheckContext.spacePath(space, "telemetry")
            func batch(_ count: Int) -> JSONValue {
                .object(["clientId": "conformance-device", "sdkVersion": "conformance/1",
                         "syncs": .array((0..<count).map { .object(["startedAt": .number(JSONNumber(1_000 + $0)), "durationMs": 10, "pushed": 1]) })])
            }
            let ok = try await c.postJSON(path, batch(2), token: c.readToken(space))
            try expectStatus(ok, 202, "a telemetry batch of 2 syncs")
            try expect(try ok.json()["accepted"]?.int64Value == 2, "accepted is \(ok.bodyPreview), expected 2")
            try expectError(try await c.postJSON(path, batch(101), token: c.readToken(space)), 422, "invalid_request", "a batch of 101 syncs")
            let bad: JSONValue = .object(["clientId": "d", "sdkVersion": "v", "syncs": .array([.object(["startedAt": 1, "durationMs": "slow"])])])
            let details = try expectError(try await c.postJSON(path, bad, token: c.readToken(space)), 422, "invalid_request", "a sync with a string durationMs")
            try expect(details["field"]?.stringValue == "syncs[0].durationMs", "details.field is \(details["field"]?.description ?? "absent")")
            let big = try await c.send("POST", path, headers: [("Content-Type", "application/json")], body: Array(repeating: UInt8(ascii: " "), count: 65_537),
                                       token: c.readToken(space))
            try expectError(big, 413, "payload_too_large", "a telemetry body over 64 KiB")
            try expectError(try await c.postJSON(path, batch(1), token: c.readToken(c.newSpace())), 403, "forbidden", "telemetry with another space's token")
        },
        Check("admin-devices-auth", section: "7", "GET /v1/admin/devices answers an admin token with the devices page, 401 without a token and 403 for a token that is not admin") { c in
            let space = c.newSpace()
            let reported: JSONValue = .object(["clientId": "conformance-device", "sdkVersion": "conformance/1",
                                               "syncs": .array([.object(["startedAt": 5, "durationMs": 10, "queueDepth": 3])])])
            try expectStatus(try await c.postJSON(CheckContext.spacePath(space, "telemetry"), reported, token: c.readToken(space)), 202, "a telemetry batch")
            let listed = try await c.get("/v1/admin/devices?space=\(space)", token: c.token([], scope: "read", admin: true))
            try expectStatus(listed, 200, "GET /v1/admin/devices with an admin token")
            let devices = try listed.json()["devices"]?.arrayValue ?? []
            try expect(devices.count == 1 && devices[0]["clientId"]?.stringValue == "conformance-device" && devices[0]["pending"]?.int64Value == 3,
                       "the space's devices are \(listed.bodyPreview), expected conformance-device with pending 3")
            try expectError(try await c.get("/v1/admin/devices"), 401, "unauthorized", "GET /v1/admin/devices without a token")
            try expectError(try await c.get("/v1/admin/devices", token: c.token(["*"], scope: "write")), 403, "forbidden", "GET /v1/admin/devices with a token that is not admin")
        },
        Check("healthz", section: "7", "GET /healthz needs no token and answers 200 {\"status\": \"ok\"}") { c in
            let response = try await c.get("/healthz")
            try expectStatus(response, 200, "GET /healthz")
            try expect(try response.json()["status"]?.stringValue == "ok", "GET /healthz body is \(response.bodyPreview), expected {\"status\": \"ok\"}")
        },
        Check("readyz", section: "7", "GET /readyz needs no token and answers 200 while the store is writable") { c in
            let response = try await c.get("/readyz")
            try expectStatus(response, 200, "GET /readyz")
        },
        Check("unknown-path-404", section: "2", "an unknown path is 404 not_found with the error envelope") { c in
            try expectError(try await c.get("/v1/no-such-route"), 404, "not_found", "GET /v1/no-such-route")
            let space = c.newSpace()
            try expectError(try await c.get("/v1/spaces/\(space)/no-such-route", token: c.writeToken(space)), 404, "not_found",
                            "GET /v1/spaces/{space}/no-such-route")
            try expectError(try await c.send("POST", "/v2/info", body: []), 404, "not_found", "POST /v2/info")
        },
        Check("invalid-space-name-400", section: "2", "a space name in a path that breaks the naming rule is 400 invalid_space with details.space, on push, pull and media alike") { c in
            let token = c.writeToken(c.newSpace())
            for name in ["-x", ".hidden", String(repeating: "s", count: 65)] {
                let push = try await c.send("POST", "/v1/spaces/\(name)/push", body: Array(#"{"clientId":"cf","changes":[]}"#.utf8), token: token)
                let details = try expectError(push, 400, "invalid_space", "POST /v1/spaces/\(name.prefix(12))…/push")
                try expect(details["space"]?.stringValue == name, "POST …/push for \(name.prefix(12))…: details.space is \(details["space"]?.description ?? "absent")")
                try expectError(try await c.get("/v1/spaces/\(name)/pull", token: token), 400, "invalid_space", "GET /v1/spaces/\(name.prefix(12))…/pull")
                try expectError(try await c.send("POST", "/v1/spaces/\(name)/media/uploads", body: Array("{}".utf8), token: token), 400, "invalid_space",
                                "POST /v1/spaces/\(name.prefix(12))…/media/uploads")
            }
        },
        Check("wrong-method-405-with-allow", section: "2", "a known path with another method is 405 method_not_allowed with Allow naming the methods") { c in
            let info = try await c.send("DELETE", "/v1/info")
            try expectError(info, 405, "method_not_allowed", "DELETE /v1/info")
            try expect(allowList(info).contains("GET"), "DELETE /v1/info: Allow is \(info.header("Allow") ?? "absent"), expected it to list GET")
            let space = c.newSpace()
            let pull = try await c.send("POST", CheckContext.spacePath(space, "pull"), body: Array("{}".utf8), token: c.writeToken(space))
            try expectError(pull, 405, "method_not_allowed", "POST /v1/spaces/{space}/pull")
            try expect(allowList(pull).contains("GET"), "POST …/pull: Allow is \(pull.header("Allow") ?? "absent"), expected it to list GET")
            let push = try await c.send("GET", CheckContext.spacePath(space, "push"), token: c.writeToken(space))
            try expectError(push, 405, "method_not_allowed", "GET /v1/spaces/{space}/push")
            try expect(allowList(push).contains("POST"), "GET …/push: Allow is \(push.header("Allow") ?? "absent"), expected it to list POST")
        },
        Check("metrics-without-token-401", section: "2", "GET /metrics without a token is 401 unauthorized (unless the operator opened it)") { c in
            let response = try await c.get("/metrics")
            if c.configuration.metricsRequireAdmin {
                try expectError(response, 401, "unauthorized", "GET /metrics without a token")
                try expect(response.header("WWW-Authenticate")?.lowercased().hasPrefix("bearer") == true,
                           "GET /metrics 401 lacks WWW-Authenticate: Bearer")
            } else {
                try expectStatus(response, 200, "GET /metrics (configured open)")
            }
        },
        Check("metrics-non-admin-403", section: "2", "GET /metrics with a valid token that is not admin is 403 forbidden") { c in
            guard c.configuration.metricsRequireAdmin else { throw CheckSkipped("the operator opened /metrics (--metrics-open)") }
            let response = try await c.get("/metrics", token: c.token(["*"], scope: "write"))
            try expectError(response, 403, "forbidden", "GET /metrics with a write token that is not admin")
        },
        Check("metrics-admin-200", section: "7", "GET /metrics with an admin token is 200 in Prometheus text format") { c in
            let response = try await c.get("/metrics", token: c.token([], scope: "read", admin: true))
            try expectStatus(response, 200, "GET /metrics with an admin token")
            let type = response.header("Content-Type")?.lowercased() ?? ""
            try expect(type.hasPrefix("text/plain"), "GET /metrics: Content-Type is \"\(type)\", expected text/plain (Prometheus text format)")
            let text = String(decoding: try response.decodedBody(), as: UTF8.self)
            try expect(text.contains("# TYPE ") || text.split(separator: "\n").contains { !$0.hasPrefix("#") && $0.split(separator: " ").count >= 2 },
                       "GET /metrics body does not look like Prometheus text: \(response.bodyPreview)")
        },
    ]

    /// The methods listed in `Allow`, upper case.
    static func allowList(_ response: RawResponse) -> Set<String> {
        Set(response.headerValues("Allow").flatMap { $0.split(separator: ",").map { $0.trimmedOWS.uppercased() } })
    }
}
