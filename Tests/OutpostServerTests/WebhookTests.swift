import Foundation
import Testing
import OutpostCore
import OutpostPostgres
import OutpostSQLite
import OutpostSubprocess
import OutpostTestSupport
@testable import OutpostServer

/// Webhooks end to end (docs/operating.md, "Webhooks"): real `outpost-server` children on a
/// real SQLite file (and on PostgreSQL), posting to a receiver this test runs on an
/// ephemeral port (`WebhookReceiver`), which records every request and fails or hangs when
/// told. Every wait is on something the receiver or the server reports, with a deadline.
@Suite(.serverLogs) struct WebhookTests {
    // MARK: Helpers

    /// Runs `body` with a receiver answering `behaviour`, and always stops it.
    static func withReceiver(_ behaviour: WebhookReceiver.Behaviour = .accept, _ body: (WebhookReceiver) async throws -> Void) async throws {
        let receiver = try WebhookReceiver(behaviour)
        do {
            try await body(receiver)
        } catch {
            await receiver.stop()
            throw error
        }
        await receiver.stop()
    }

    /// Runs `body` with an `outpost-server` child on `data`, and always stops it by its PID.
    /// The receivers are on loopback, so deliveries to them are allowed
    /// (`OUTPOST_WEBHOOK_ALLOW_PRIVATE`) unless `allowPrivate` is false.
    static func withServer(_ data: String, arguments: [String], environment: [String: String] = [:], allowPrivate: Bool = true,
                           _ body: (ServerProcess) async throws -> Void) async throws {
        var environment = environment
        if allowPrivate { environment["OUTPOST_WEBHOOK_ALLOW_PRIVATE"] = "true" }
        let server = try await blocking { [environment] in try ServerProcess(dataDirectory: data, arguments: arguments, environment: environment) }
        do {
            try await body(server)
        } catch {
            _ = try? await blocking { server.stop() }
            throw error
        }
        _ = try await blocking { server.stop() }
    }

    static func token(_ server: ServerProcess, admin: Bool = false) async throws -> String {
        try await blocking { try server.token(spaces: admin ? [] : ["*"], admin: admin) }
    }

    static func metric(_ server: ServerProcess, _ series: String, token: String) async throws -> Double? {
        try await blocking { try server.metric(series, token: token) }
    }

    /// Pushes `changes` to `space` and returns the seqs applied, in order; any status but
    /// 200, or a change not applied, fails.
    static func push(_ server: ServerProcess, token: String, _ space: String, _ changes: [Change], clientId: String = "tester") async throws -> [Int64] {
        let r = try await httpRequestAsync(port: server.port, "POST", "/v1/spaces/\(space)/push",
                                           headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
                                           body: PushRequest(clientId: clientId, changes: changes).encoded())
        guard r.status == 200 else { throw ProcessFailure("push to \(space) answered \(r.status): \(r.text)") }
        let answer = try PushResponse.decode(r.body)
        guard answer.results.allSatisfy({ $0.status == .applied }) else { throw ProcessFailure("push to \(space) was not applied: \(r.text)") }
        return answer.results.compactMap { $0.version?.seq }
    }

    static func request(_ server: ServerProcess, _ method: String, _ target: String, token: String?) async throws -> TestResponse {
        try await httpRequestAsync(port: server.port, method, target, headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [])
    }

    /// The seqs delivered (answered 2xx) per space, in the order they arrived.
    static func deliveredSeqs(_ receiver: WebhookReceiver) -> [String: [Int64]] {
        deliveredSeqs(receiver.delivered)
    }

    /// The seqs of `delivered` per space, in the order they arrived.
    static func deliveredSeqs(_ delivered: [WebhookReceiver.Request]) -> [String: [Int64]] {
        var out: [String: [Int64]] = [:]
        for r in delivered { out[r.space, default: []] += r.seqs }
        return out
    }

    /// The receiver's verification code of docs/operating.md ("Webhooks"), run by Python on
    /// the bytes as they arrived: true when it accepts `signature` for `body`.
    static func pythonVerifies(secret: [UInt8], signature: String, body: [UInt8], in dir: TemporaryDirectory) async throws -> Bool {
        let doc = try DockerfileTests.read("docs/operating.md")
        let section = try #require(doc.range(of: "## Webhooks").map { doc[$0.upperBound...] })
        let start = try #require(section.range(of: "```python\n"))
        let end = try #require(section[start.upperBound...].range(of: "```"))
        let script = String(section[start.upperBound..<end.lowerBound]) + """

            import sys
            secret = open(sys.argv[1], "rb").read()
            body = open(sys.argv[3], "rb").read()
            sys.exit(0 if verify(secret, sys.argv[2], body) else 3)
            """
        let name = UUID().uuidString.prefix(8)
        try Data(script.utf8).write(to: URL(fileURLWithPath: dir.appending("verify-\(name).py")))
        try Data(secret).write(to: URL(fileURLWithPath: dir.appending("secret-\(name)")))
        try Data(body).write(to: URL(fileURLWithPath: dir.appending("body-\(name)")))
        let arguments = [dir.appending("verify-\(name).py"), dir.appending("secret-\(name)"), signature, dir.appending("body-\(name)")]
        let (status, output) = try await blocking { try runToCompletion("/usr/bin/python3", arguments, standardError: true) }
        guard status == 0 || status == 3 else { throw ProcessFailure("python3 exited \(status): \(output)") }
        return status == 0
    }

    /// The secret the server created in its data directory: mode 0600, and as the server
    /// reads it (trailing white space left out).
    static func secret(of server: ServerProcess) throws -> [UInt8] {
        let path = (server.dataDirectory as NSString).appendingPathComponent(WebhookService.secretFileName)
        let mode = (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue
        #expect(mode == 0o600, "\(path) has mode \(String(mode ?? 0, radix: 8))")
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        while let last = bytes.last, last == 0x0A || last == 0x20 { bytes.removeLast() }
        return bytes
    }

    // MARK: Settings

    @Test func theWebhookSettingsAreReadFromFlagsAndTheEnvironmentAndChecked() throws {
        let env = Settings.parse
        #expect(try env([], ["OUTPOST_WEBHOOKS": "http://a.example/h, https://b.example:8443/x"]).webhooks.urls == ["http://a.example/h", "https://b.example:8443/x"])
        // Flags replace the variable's list.
        let both = try env(["--webhook", "http://c.example/1", "--webhook=http://d.example/2"], ["OUTPOST_WEBHOOKS": "http://a.example/h"])
        #expect(both.webhooks.urls == ["http://c.example/1", "http://d.example/2"])
        let defaults = try env([], [:]).webhooks
        #expect(defaults == WebhookSettings() && defaults.urls.isEmpty && defaults.attempts == 10 && defaults.retryDelayMs == 1000 && defaults.timeoutSeconds == 10)
        #expect(defaults.batchChanges == 10_000 && defaults.batchBytes == 1_048_576)
        #expect(try env(["--webhook-batch-changes", "10000"], [:]).webhooks.batchChanges == 10_000)
        let tuned = try env(["--webhook-attempts", "3", "--webhook-retry-delay-ms", "20", "--webhook-timeout", "1",
                             "--webhook-batch-changes", "7", "--webhook-batch-bytes", "4096"], [:]).webhooks
        #expect(tuned.attempts == 3 && tuned.retryDelayMs == 20 && tuned.timeoutSeconds == 1 && tuned.batchChanges == 7 && tuned.batchBytes == 4096)
        for (arguments, named) in [(["--webhook", "ftp://a.example/x"], "--webhook must be an http:// or https:// URL"),
                                   (["--webhook", "http:///nohost"], "--webhook must be"),
                                   (["--webhook", "http://a.example/x#frag"], "--webhook must be"),
                                   (["--webhook", "http://a.example/x", "--webhook", "http://a.example/x"], "is given twice"),
                                   (["--webhook-attempts", "0"], "--webhook-attempts must be an integer from 1 to 100"),
                                   (["--webhook-timeout", "301"], "--webhook-timeout must be"),
                                   (["--webhook-batch-changes", "x"], "--webhook-batch-changes must be"),
                                   (["--webhook-batch-changes", "10001"], "--webhook-batch-changes must be an integer from 1 to 10000")] {
            do {
                _ = try env(arguments, [:])
                Issue.record("\(arguments) was accepted")
            } catch let error as Settings.Invalid {
                #expect(error.description.contains(named), "\(arguments): \(error.description)")
            }
        }
        #expect(throws: Settings.Invalid.self) { try env([], ["OUTPOST_WEBHOOKS": "http://a.example/h,nope"]) }
        #expect(Settings.help.contains("--webhook VALUE") && Settings.help.contains("OUTPOST_WEBHOOK_SECRET"))
        // Nothing secret in the URL reaches the store, the metrics or the admin list.
        let target = try #require(WebhookTarget("https://user:pw@hooks.example.com:8443/outpost?token=abc"))
        #expect(target.name == "https://hooks.example.com:8443/outpost" && target.key.count == 16 && !target.key.contains("abc"))
    }

    /// Instances on one PostgreSQL store must sign alike: webhooks there need the secret in
    /// the environment, and the server refuses to start without it.
    @Test func webhooksOnPostgreSQLNeedTheSecretInTheEnvironment() async throws {
        try await withTemporaryDirectory(prefix: "outpost-webhook-secret") { dir in
            var settings = Settings()
            settings.dataDirectory = dir.appending("data")
            settings.store = "postgres://127.0.0.1:1/none"
            settings.webhooks.urls = ["http://127.0.0.1:1/hook"]
            settings.webhooks.allowPrivate = true
            do {
                _ = try OutpostApplication(settings: settings, environment: ["OUTPOST_JWT_SECRET": String(repeating: "j", count: 32)])
                Issue.record("the server started without OUTPOST_WEBHOOK_SECRET")
            } catch let error as Settings.Invalid {
                #expect(error.description.contains("OUTPOST_WEBHOOK_SECRET"))
            }
        }
    }

    // MARK: Receivers the server refuses

    /// Without `--webhook-allow-private`, receivers whose names resolve to loopback are
    /// never connected to, over `http://` and `https://`: each batch becomes a dead letter
    /// whose `lastError` is the class `address_refused`, and the receiver sees nothing. A
    /// receiver that is allowed but refuses connections leaves `connect_failed`, never the
    /// system's words for it (which would tell a closed port from a filtered one).
    @Test func receiversAtRefusedAddressesGetNothingAndErrorsStayCoarse() async throws {
        try await Self.withReceiver { receiver in
            try await withTemporaryDirectory(prefix: "outpost-webhooks") { dir in
                let arguments = ["--webhook", "http://localhost:\(receiver.port)/hook", "--webhook", "https://localhost:\(receiver.port)/hook",
                                 "--webhook-attempts", "1"]
                try await Self.withServer(dir.appending("data"), arguments: arguments, allowPrivate: false) { server in
                    let letters = try await Self.deadLettersOfOnePush(server, count: 2)
                    #expect(Set(letters.compactMap { $0["webhook"]?.stringValue }) == ["http://localhost:\(receiver.port)/hook", "https://localhost:\(receiver.port)/hook"])
                    #expect(letters.allSatisfy { $0["lastError"]?.stringValue == "address_refused" }, "\(letters)")
                    #expect(receiver.requests.isEmpty)
                }
            }
        }
        // Allowed, but nobody listens: the class only.
        let (fd, port) = try ProxySocket.listen()
        ProxySocket.closeListener(fd)
        try await withTemporaryDirectory(prefix: "outpost-webhooks") { dir in
            let arguments = ["--webhook", "http://127.0.0.1:\(port)/hook", "--webhook-attempts", "1"]
            try await Self.withServer(dir.appending("data"), arguments: arguments) { server in
                let letters = try await Self.deadLettersOfOnePush(server, count: 1)
                #expect(letters.first?["lastError"]?.stringValue == "connect_failed", "\(letters)")
            }
        }
    }

    /// Pushes one change, then waits until the dead-letter list holds `count` entries, and
    /// returns them.
    static func deadLettersOfOnePush(_ server: ServerProcess, count: Int) async throws -> [JSONValue] {
        let token = try await Self.token(server)
        #expect(try await Self.push(server, token: token, "d", [put("c1", "a")]) == [1])
        return try await deadLetters(server, count: count)
    }

    /// Waits for the server's log lines of `count` dead letters (each written once its
    /// dead letter is stored), and returns the dead-letter list, expected to hold them.
    static func deadLetters(_ server: ServerProcess, count: Int) async throws -> [JSONValue] {
        _ = try await server.logLines("\(count) dead letters", count: count, where: ServerProcess.logged("webhook batch is a dead letter after its last attempt"))
        let admin = try await Self.token(server, admin: true)
        let r = try await Self.request(server, "GET", "/v1/admin/webhooks/dead-letters", token: admin)
        let letters = try JSONParser.parse(r.body)["deadLetters"]?.arrayValue ?? []
        #expect(letters.count == count, "\(r.text)")
        return letters
    }

    /// A receiver URL that names a refused address stops the server at start, with the
    /// flag named.
    @Test func aLiteralRefusedReceiverStopsTheServerAtStart() async throws {
        try await withTemporaryDirectory(prefix: "outpost-webhooks") { dir in
            let (ended, output) = try await blocking {
                let child = try Subprocess(BuildProducts.executable("outpost-server"),
                                           ["serve", "--data", dir.appending("data"), "--port", "0", "--webhook", "http://10.0.0.7/hook"],
                                           environment: Subprocess.environment(adding: ["OUTPOST_JWT_SECRET": String(repeating: "k", count: 48)]),
                                           output: .capture, error: .discard, errorToOutput: true)
                // A server that started anyway is stopped by its PID, and the test fails.
                let ended = child.wait(timeout: Double(testDeadlineSeconds)) ?? child.stop(grace: 5)
                child.waitForStreams()
                return (ended, child.outputText())
            }
            #expect(ended == .exited(64), "\(output)")
            #expect(output.contains("a private address (RFC 1918)") && output.contains("--webhook-allow-private true"), "\(output)")
        }
    }

    // MARK: Delivery

    /// Every commit arrives, in batches of one space and epoch, in seq order, signed: the
    /// documented receiver code accepts each delivery from its raw body and the secret,
    /// and refuses a body or signature changed by one byte. Delivered rows leave the outbox.
    @Test func deliveriesAreSignedAndCarryEveryCommitInOrder() async throws {
        try await Self.withReceiver { receiver in
            try await withTemporaryDirectory(prefix: "outpost-webhooks") { dir in
                try await Self.withServer(dir.appending("data"), arguments: ["--webhook", receiver.url, "--webhook-batch-changes", "3"]) { server in
                    let token = try await Self.token(server)
                    var acknowledged: [String: [Int64]] = [:]
                    acknowledged["team", default: []] += try await Self.push(server, token: token, "team", [put("c1", "a", ["title": "milk"]), put("c2", "b")])
                    acknowledged["depot", default: []] += try await Self.push(server, token: token, "depot", [put("c3", "x", ["n": 1])])
                    let info = try JSONParser.parse(try await Self.request(server, "GET", "/v1/info", token: nil).body)
                    let epoch = try #require(info["epoch"]?.stringValue.flatMap(Epoch.init))
                    acknowledged["team", default: []] += try await Self.push(server, token: token, "team", [
                        put("c4", "a", ["title": "oat milk"], base: Version(epoch: epoch, seq: 1)),
                        Change(changeId: "c5", collection: "todos", id: "b", op: .delete, data: nil, baseVersion: Version(epoch: epoch, seq: 2)),
                    ], clientId: "phone-2")
                    // Delivered rows are pruned when the delivery is recorded, and the lag is
                    // back to 0 once a claim finds nothing left.
                    let expected = acknowledged
                    let store = (server.dataDirectory as NSString).appendingPathComponent("outpost.sqlite")
                    let admin = try await Self.token(server, admin: true)
                    let label = "webhook=\"\(receiver.url)\""
                    try await eventually("every acknowledged commit delivered, its rows pruned and the lag 0") {
                        guard Self.deliveredSeqs(receiver) == expected else { return false }
                        let pruned = try await blocking {
                            let db = try Connection(path: store, flags: [.readOnly])
                            defer { db.close() }
                            return try db.scalarInt("SELECT count(*) FROM webhook_outbox") == 0
                        }
                        guard pruned else { return false }
                        return try await Self.metric(server, "outpost_webhook_lag_seconds{\(label)}", token: admin) == 0
                    }
                    #expect(acknowledged == ["team": [1, 2, 3, 4], "depot": [1]])

                    let secret = try Self.secret(of: server)
                    for request in receiver.requests {
                        #expect(request.behaviour == .accept && request.contentType == "application/json" && request.attempt == "1")
                        #expect(request.delivery?.count == 32 && request.delivery?.allSatisfy(\.isHexDigit) == true)
                        #expect(request.json["epoch"]?.stringValue == epoch.rawValue && !request.overlapped)
                        let signature = try #require(request.signature)
                        #expect(signature.hasPrefix("t=") && signature.contains(",v1="))
                        #expect(try await Self.pythonVerifies(secret: secret, signature: signature, body: request.body, in: dir), "\(signature)")
                        var tampered = request.body
                        tampered[tampered.count / 2] ^= 0x01
                        #expect(try await !Self.pythonVerifies(secret: secret, signature: signature, body: tampered, in: dir))
                        var forged = Array(signature.utf8)
                        forged[forged.count - 1] = forged[forged.count - 1] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
                        #expect(try await !Self.pythonVerifies(secret: secret, signature: String(decoding: forged, as: UTF8.self), body: request.body, in: dir))
                        #expect(try await !Self.pythonVerifies(secret: Array("another secret".utf8), signature: signature, body: request.body, in: dir))
                    }
                    // The records as a pull page has them, with their seq, in commit order.
                    let team = receiver.delivered.filter { $0.space == "team" }.flatMap { $0.json["changes"]?.arrayValue ?? [] }
                    #expect(team.map { $0["seq"]?.int64Value } == [1, 2, 3, 4])
                    #expect(team.map { $0["version"]?.stringValue } == (1...4).map { "\(epoch.rawValue).\($0)" })
                    #expect(team.first?["data"]?["title"]?.stringValue == "milk" && team.dropFirst(2).first?["data"]?["title"]?.stringValue == "oat milk")
                    #expect(team.last?["deleted"]?.boolValue == true && team.last?["data"] == nil && team.last?["updatedBy"]?.stringValue == "phone-2")
                    #expect(team.first?["collection"]?.stringValue == "todos" && team.first?["id"]?.stringValue == "a" && team.first?["updatedAt"]?.int64Value != nil)
                    #expect(team.first?["clientTime"]?.int64Value == 1_764_430_000_000)

                    // The metrics count what happened.
                    #expect(try await Self.metric(server, "outpost_webhook_deliveries_total{\(label),result=\"delivered\"}", token: admin) == Double(receiver.requests.count))
                    #expect(try await Self.metric(server, "outpost_webhook_changes_delivered_total{\(label)}", token: admin) == 5)
                }
            }
        }
    }

    /// A receiver that answers 500 three times, then hangs past the timeout, then recovers:
    /// pushes made meanwhile are answered as always, and every commit arrives, in order per
    /// space, one request per space at a time; a batch that failed is sent again as it was
    /// (same delivery id and body, the attempt counted). When to retry is the model's
    /// (`WebhookDeliveryModelTests`); this is the whole path over a socket.
    @Test func aFailingThenHangingReceiverGetsEveryCommitInOrderOnceItRecovers() async throws {
        try await Self.withReceiver { receiver in
            try await withTemporaryDirectory(prefix: "outpost-webhooks") { dir in
                try await Self.withServer(dir.appending("data"), arguments: [
                    "--webhook", receiver.url, "--webhook-timeout", "1", "--webhook-retry-delay-ms", "20", "--webhook-attempts", "100",
                    "--webhook-batch-changes", "2",
                ]) { server in
                    let token = try await Self.token(server)
                    var acknowledged: [String: [Int64]] = [:]
                    var n = 0
                    func pushBoth() async throws {
                        for space in ["north", "south"] {
                            n += 1
                            acknowledged[space, default: []] += try await Self.push(server, token: token, space, [put("c\(n)", "r\(n)"), put("d\(n)", "s\(n)")])
                        }
                    }
                    receiver.plan([.fail(500), .fail(500), .fail(500), .hang], otherwise: .accept)
                    // Pushes while the deliveries fail and hang.
                    for _ in 0..<3 { try await pushBoth() }
                    let expected = acknowledged
                    let admin = try await Self.token(server, admin: true)
                    let label = "webhook=\"\(receiver.url)\""
                    try await eventually("every acknowledged commit delivered and the lag back to 0") {
                        guard Self.deliveredSeqs(receiver) == expected else { return false }
                        return try await Self.metric(server, "outpost_webhook_lag_seconds{\(label)}", token: admin) == 0
                    }
                    #expect(acknowledged["north"] == Array(1...6) && acknowledged["south"] == Array(1...6))
                    let requests = receiver.requests
                    #expect(requests.contains { $0.behaviour == .fail(500) } && requests.contains { $0.behaviour == .hang })
                    #expect(!requests.contains { $0.overlapped }, "two requests of one space were in flight at once")
                    // Each batch went out until delivered, always the same.
                    for (delivery, sent) in Dictionary(grouping: requests, by: { $0.delivery ?? "" }) {
                        #expect(sent.map(\.attempt) == (1...sent.count).map { String($0) }, "attempts of \(delivery)")
                        #expect(Set(sent.map(\.body)).count == 1 && sent.last?.behaviour == .accept)
                        #expect(sent.dropLast().allSatisfy { $0.behaviour != .accept })
                    }
                    #expect(try await Self.metric(server, "outpost_webhook_deliveries_total{\(label),result=\"failed\"}", token: admin) == 3)
                    #expect(try await Self.metric(server, "outpost_webhook_deliveries_total{\(label),result=\"no_answer\"}", token: admin) == 1)
                    #expect(try await Self.metric(server, "outpost_webhook_dead_letters_total{\(label)}", token: admin) == nil)
                }
            }
        }
    }

    /// One commit of many changes is claimed as a run of batches in one claim, each batch
    /// recorded in the store with its delivery id before it is sent; they go out one at a
    /// time, in order, under distinct ids; a failing batch of the run is sent again as it
    /// was. While the receiver holds a delivery, later commits wait and the lag, measured at
    /// the scrape, is past 0. A delivered batch is recorded with the next write, not at once:
    /// the server killed (SIGKILL) while the receiver holds a batch and later commits wait,
    /// a new server process on the same data directory sends again the batch delivered but
    /// not recorded and the one that was in flight, as they were (same delivery ids and
    /// bodies, first attempts), then the rest: every acknowledged commit arrives.
    @Test func oneCommitIsClaimedAsARunOfBatchesThatARestartSendsOnAsClaimed() async throws {
        try await Self.withReceiver { receiver in
            try await withTemporaryDirectory(prefix: "outpost-webhooks") { dir in
                let arguments = ["--webhook", receiver.url, "--webhook-batch-changes", "3", "--webhook-timeout", "300",
                                 "--webhook-retry-delay-ms", "20", "--webhook-attempts", "100"]
                try await Self.withServer(dir.appending("data"), arguments: arguments) { server in
                    let token = try await Self.token(server)
                    // The first batch is accepted, the second refused once and then accepted,
                    // the third held.
                    receiver.plan([.accept, .fail(500), .accept, .hang], otherwise: .accept)
                    #expect(try await Self.push(server, token: token, "big", (1...10).map { put("c\($0)", "r\($0)") }) == Array(1...10))
                    try await receiver.until("the third batch held by the receiver") { $0.requests.count == 4 }
                    let held = receiver.requests
                    #expect(held.map(\.seqs) == [[1, 2, 3], [4, 5, 6], [4, 5, 6], [7, 8, 9]])
                    #expect(held.map(\.attempt) == ["1", "1", "2", "1"])
                    #expect(held[1].delivery == held[2].delivery && held[1].body == held[2].body)
                    #expect(Set(held.map(\.delivery)).count == 3)
                    // A commit made while the delivery is held waits; the lag shows it.
                    #expect(try await Self.push(server, token: token, "big", [put("c11", "r11"), put("c12", "r12")]) == [11, 12])
                    let admin = try await Self.token(server, admin: true)
                    #expect(try await Self.metric(server, "outpost_webhook_lag_seconds{webhook=\"\(receiver.url)\"}", token: admin) ?? 0 > 0)
                    // The run's batches are claimed, the last one too, which was never sent;
                    // the cursor is past the first batch only (recorded with the second's
                    // failure): the second's delivery is not recorded yet.
                    let store = (server.dataDirectory as NSString).appendingPathComponent("outpost.sqlite")
                    let (claimed, cursor) = try await blocking {
                        let db = try Connection(path: store, flags: [.readOnly])
                        defer { db.close() }
                        let ids: [String?] = try db.query("SELECT delivery_id FROM webhook_batches ORDER BY last_id") { $0.text(0) }
                        return (ids, try db.scalarInt("SELECT delivered_id FROM webhook_cursors"))
                    }
                    #expect(claimed.count == 3 && Array(claimed.prefix(2)) == [held[1].delivery, held[3].delivery], "\(claimed)")
                    #expect(cursor == 3)

                    try await blocking { server.kill9() }
                    try await receiver.until("the held request ended with the killed server") { $0.hungEnded == 1 }
                    try await blocking { try server.restart() }
                    let expected: [Int64] = [1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8, 9, 10, 11, 12]
                    try await receiver.until("every batch delivered after the restart") { Self.deliveredSeqs($0.delivered)["big"] == expected }
                    let after = Array(receiver.requests.dropFirst(4))
                    #expect(after.map(\.seqs) == [[4, 5, 6], [7, 8, 9], [10], [11, 12]])
                    #expect(Array(after.map(\.delivery).prefix(3)) == claimed && after.allSatisfy { $0.behaviour == .accept })
                    #expect(after[0].body == held[1].body && after[1].body == held[3].body && after[1].attempt == "1")
                    #expect(!receiver.requests.contains { $0.overlapped }, "two requests of one space were in flight at once")
                    #expect(Set(receiver.requests.map(\.delivery)).count == 5)
                }
            }
        }
    }

    /// A space written to while its batches go out: each run's next claim is made while its
    /// last batch is on the wire and picks up the commits made meanwhile. Every commit
    /// arrives once (no server stopped, so no batch is sent twice), in order, one request
    /// of the space at a time, each batch under an id of its own.
    @Test func aSpaceWrittenWhileItsBatchesGoOutGetsEveryCommitOnceInOrder() async throws {
        try await Self.withReceiver { receiver in
            try await withTemporaryDirectory(prefix: "outpost-webhooks") { dir in
                try await Self.withServer(dir.appending("data"), arguments: ["--webhook", receiver.url, "--webhook-batch-changes", "2"]) { server in
                    let token = try await Self.token(server)
                    var acknowledged: [Int64] = []
                    for i in 0..<20 {
                        acknowledged += try await Self.push(server, token: token, "busy", (0..<5).map { put("c\(i)-\($0)", "r\(i)-\($0)") })
                    }
                    let expected = acknowledged
                    try await receiver.until("every commit delivered") { Self.deliveredSeqs($0.delivered)["busy"] == expected }
                    #expect(expected == Array(1...100))
                    let requests = receiver.requests
                    #expect(requests.allSatisfy { $0.behaviour == .accept && $0.attempt == "1" && $0.seqs.count <= 2 })
                    #expect(Set(requests.map(\.delivery)).count == requests.count)
                    #expect(!requests.contains { $0.overlapped }, "two requests of one space were in flight at once")
                }
            }
        }
    }

    /// After its last attempt a batch is a dead letter that the admin list shows; the
    /// space's later commits go on without it; a replay that fails keeps it; a server
    /// without its webhook refuses to replay it; a replay that is delivered sends the batch
    /// as it was and removes it.
    @Test func aBatchOutOfAttemptsIsADeadLetterThatAReplayDelivers() async throws {
        try await Self.withReceiver { receiver in
            try await withTemporaryDirectory(prefix: "outpost-webhooks") { dir in
                let arguments = ["--webhook", receiver.url, "--webhook-attempts", "3", "--webhook-retry-delay-ms", "10", "--webhook-batch-changes", "2"]
                try await Self.withServer(dir.appending("data"), arguments: arguments) { server in
                    let token = try await Self.token(server)
                    let admin = try await Self.token(server, admin: true)
                    // The first batch is refused at each of its attempts; the later commit, a
                    // batch of its own, is accepted.
                    receiver.plan([.fail(500), .fail(500), .fail(500)], otherwise: .accept)
                    #expect(try await Self.push(server, token: token, "d", [put("c1", "a"), put("c2", "b")]) == [1, 2])
                    #expect(try await Self.push(server, token: token, "d", [put("c3", "c")]) == [3])
                    func list(_ query: String = "") async throws -> JSONValue {
                        let r = try await Self.request(server, "GET", "/v1/admin/webhooks/dead-letters\(query)", token: admin)
                        guard r.status == 200 else { throw ProcessFailure("the dead-letter list answered \(r.status): \(r.text)") }
                        return try JSONParser.parse(r.body)
                    }
                    func replay(_ id: String, token: String? = admin) async throws -> TestResponse {
                        try await Self.request(server, "POST", "/v1/admin/webhooks/dead-letters/\(id)/replay", token: token)
                    }
                    try await receiver.until("the later commit delivered") { Self.deliveredSeqs($0.delivered)["d"] == [3] }
                    _ = try await Self.deadLetters(server, count: 1)
                    let page = try await list()
                    #expect(page["next"] == .null)
                    let letter = try #require(page["deadLetters"]?[0])
                    let sent = receiver.requests.filter { $0.behaviour != .accept }
                    #expect(sent.count == 3 && sent.map(\.attempt) == ["1", "2", "3"] && Set(sent.map(\.delivery)).count == 1)
                    #expect(letter["space"]?.stringValue == "d" && letter["firstSeq"]?.int64Value == 1 && letter["lastSeq"]?.int64Value == 2)
                    #expect(letter["changes"]?.int64Value == 2 && letter["attempts"]?.int64Value == 3 && letter["webhook"]?.stringValue == receiver.url)
                    #expect(letter["deliveryId"]?.stringValue == sent.first?.delivery && letter["bytes"]?.int64Value == sent.first.map { Int64($0.body.count) })
                    #expect(letter["lastError"]?.stringValue == "http_status 500" && letter["epoch"]?.stringValue != nil)
                    let id = try #require(letter["id"]?.int64Value)
                    #expect(try await Self.metric(server, "outpost_webhook_dead_letters_total{webhook=\"\(receiver.url)\"}", token: admin) == 1)

                    // A replay while the receiver fails: answered, not delivered, kept.
                    receiver.plan([.fail(500)], otherwise: .accept)
                    let failed = try JSONParser.parse(try await replay("\(id)").body)
                    #expect(failed["delivered"]?.boolValue == false && failed["status"]?.int64Value == 500 && failed["error"]?.stringValue == "http_status 500")
                    #expect(try await list()["deadLetters"]?[0]?["attempts"]?.int64Value == 4)

                    // The dead letter is not sent by itself.
                    #expect(Self.deliveredSeqs(receiver)["d"] == [3] && receiver.requests.count == 5)

                    // Admin only, and ids that name no dead letter.
                    #expect(try await replay("\(id)", token: token).status == 403)
                    #expect(try await replay("\(id)", token: nil).status == 401)
                    #expect(try await Self.request(server, "GET", "/v1/admin/webhooks/dead-letters", token: token).status == 403)
                    for bad in ["\(id + 100)", "0", "01", "abc", "99999999999999999"] {
                        let r = try await replay(bad)
                        #expect(r.status == 404 && errorCode(r) == "dead_letter_not_found", "\(bad): \(r.status) \(r.text)")
                    }
                    for query in ["?after=-1", "?limit=0", "?limit=1001", "?after=x"] {
                        let r = try await Self.request(server, "GET", "/v1/admin/webhooks/dead-letters\(query)", token: admin)
                        #expect(r.status == 422 && errorCode(r) == "invalid_request", "\(query): \(r.status)")
                    }
                    #expect(try await list("?after=\(id)")["deadLetters"]?.arrayValue?.isEmpty == true)

                    // A server without that webhook cannot replay it.
                    try await blocking { try server.restart(arguments: []) }
                    let elsewhere = try await replay("\(id)")
                    #expect(elsewhere.status == 409 && errorCode(elsewhere) == "webhook_not_configured", "\(elsewhere.text)")
                    #expect(try await list()["deadLetters"]?.arrayValue?.count == 1)

                    // Back with it: the replay sends the batch as it was, and removes it.
                    try await blocking { try server.restart(arguments: arguments) }
                    let replayed = try JSONParser.parse(try await replay("\(id)").body)
                    #expect(replayed["delivered"]?.boolValue == true && replayed["status"]?.int64Value == 204 && replayed["error"] == .null && replayed["id"]?.int64Value == id)
                    let last = try #require(receiver.requests.last)
                    #expect(last.behaviour == .accept && last.delivery == sent.first?.delivery && last.body == sent.first?.body && last.attempt == "5")
                    #expect(try await list()["deadLetters"]?.arrayValue?.isEmpty == true)
                    let gone = try await replay("\(id)")
                    #expect(gone.status == 404 && errorCode(gone) == "dead_letter_not_found")
                }
            }
        }
    }

    /// On PostgreSQL, with two instances delivering to the same webhook: each push's outbox
    /// rows are there when the push is answered (a conflict writes none, an instance without
    /// webhooks none); every commit is delivered once the receiver answers, in order per
    /// space, never two requests of one space at once; the delivered rows are pruned.
    @Test func onPostgreSQLTwoInstancesDeliverEveryCommitInOrderAndPrune() async throws {
        let url = try await PostgresCluster.database(prefix: "webhooks")
        try await Self.withReceiver(.fail(503)) { receiver in
            try await withTemporaryDirectory(prefix: "outpost-webhooks-pg") { dir in
                // Instances of one database share one media directory.
                let media = dir.appending("shared-media")
                try FileManager.default.createDirectory(atPath: media, withIntermediateDirectories: true)
                let arguments = ["--store", url, "--media-dir", media, "--webhook", receiver.url, "--webhook-retry-delay-ms", "20",
                                 "--webhook-attempts", "100", "--webhook-batch-changes", "3"]
                let environment = ["OUTPOST_WEBHOOK_SECRET": "shared-webhook-secret-0123456789abcdef"]
                try await Self.withServer(dir.appending("a"), arguments: arguments, environment: environment) { a in
                    try await Self.withServer(dir.appending("b"), arguments: arguments, environment: environment) { b in
                        try await Self.withServer(dir.appending("c"), arguments: ["--store", url, "--media-dir", media]) { c in
                            try await Self.deliverOnPostgreSQL(url: url, receiver: receiver, a: a, b: b, withoutWebhooks: c)
                        }
                    }
                }
            }
        }
    }

    static func deliverOnPostgreSQL(url: String, receiver: WebhookReceiver, a: ServerProcess, b: ServerProcess, withoutWebhooks c: ServerProcess) async throws {
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        func rows() throws -> Int64 { try db.query("SELECT count(*) FROM webhook_outbox").int64(0, 0) }
        let token = try await Self.token(a)
        var acknowledged: [String: [Int64]] = [:]
        acknowledged["p", default: []] += try await Self.push(a, token: token, "p", [put("c1", "a"), put("c2", "b"), put("c3", "c")])
        // In the push's transaction: there as soon as the push is answered, with the
        // versions it answered.
        #expect(try rows() == 3)
        let queued = try db.query("SELECT seq, record_id FROM webhook_outbox ORDER BY id")
        #expect((0..<queued.count).map { queued.int64($0, 0) } == [1, 2, 3] && (0..<queued.count).map { queued.text($0, 1) } == ["a", "b", "c"])
        // A conflict writes nothing; nor does an instance without webhooks.
        let conflict = try await httpRequestAsync(port: b.port, "POST", "/v1/spaces/p/push", headers: [("Authorization", "Bearer \(token)")],
                                                  body: PushRequest(clientId: "t", changes: [put("c4", "a")]).encoded())
        #expect(try PushResponse.decode(conflict.body).results.map(\.status) == [.conflict])
        _ = try await Self.push(c, token: token, "elsewhere", [put("c5", "e")])
        #expect(try rows() == 3)

        // The outbox's rows stay until delivered: refused deliveries are sent again once the
        // receiver answers.
        try await receiver.until("refused deliveries") { $0.requests.count >= 2 }
        receiver.plan([], otherwise: .accept)
        for i in 0..<6 {
            let space = i % 2 == 0 ? "p" : "q"
            acknowledged[space, default: []] += try await Self.push(i % 2 == 0 ? a : b, token: token, space, [put("e\(i)", "r\(i)"), put("f\(i)", "s\(i)")])
        }
        let expected = acknowledged
        try await eventually("every commit through the instances with webhooks delivered and pruned") {
            try Self.deliveredSeqs(receiver) == expected && rows() == 0
        }
        #expect(acknowledged["p"] == Array(1...9) && acknowledged["q"] == Array(1...6))
        #expect(!receiver.requests.contains { $0.overlapped }, "two requests of one space were in flight at once")
        #expect(!receiver.requests.contains { $0.space == "elsewhere" })
        #expect(try db.query("SELECT count(*) FROM webhook_dead_letters").int64(0, 0) == 0)
        #expect(try db.query("SELECT count(*) FROM webhooks").int64(0, 0) == 1)
    }
}
