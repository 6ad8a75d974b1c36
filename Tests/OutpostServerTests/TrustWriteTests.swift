import Foundation
import OutpostCore
import OutpostCrypto
import OutpostPostgres
import OutpostSQLite
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// Writes that cannot forge history (issue 33), over a real socket on each store: a
/// re-offer's lineage holds only a commit time its epoch could have had in the server's
/// history (docs/protocol.md section 4, "Re-offers", rule 3).
@Suite(.serverLogs, .serialized) struct LineageTimeTests {
    static func reoffer(_ changeId: String, _ id: String, lineage: String, updatedAt: Int64, base: Version? = nil) -> Change {
        Change(changeId: changeId, collection: "todos", id: id, op: .put, data: ["v": 1], baseVersion: base, clientTime: 1,
               lineage: Lineage(version: Version(lineage)!, updatedAt: updatedAt))
    }

    @Test(arguments: StoreKind.allCases) func aForgedCommitTimeIsRefusedAndNothingIsWritten(store: StoreKind) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "forged") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let earlier = String(s.epoch.rawValue.dropLast())
            let hourFromNow = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
            // The push: an invented epoch 0 that sorts before every real one, in 2100.
            let r = try await s.push("sp", [Self.reoffer("f1", "a", lineage: "0.5", updatedAt: 4_102_444_800_000),
                                            Self.reoffer("f2", "b", lineage: "\(earlier).3", updatedAt: hourFromNow),
                                            Self.reoffer("f3", "c", lineage: "\(earlier).3", updatedAt: -5),
                                            Self.reoffer("ok", "d", lineage: "\(earlier).3", updatedAt: 1_700_000_000_000)])
            #expect(r.status == 200, "\(r.text)")
            let results = try PushResponse.decode(r.body).results
            #expect(results.map(\.status) == [.rejected, .rejected, .rejected, .applied], "\(r.text)")
            for result in results.prefix(3) {
                #expect(result.error?.code == "invalid_change" && result.error?.details?["field"] == "lineage.updatedAt", "\(result)")
            }
            let page = try PullPage.decode(try await s.pull("sp").body)
            #expect(page.changes.map(\.id) == ["d"] && page.changes.first?.updatedAt == 1_700_000_000_000, "\(page.changes)")
        }
    }

    /// An epoch the store ended bounds the times of its copies by when it ended; one a
    /// restore replaced without the store seeing it (a backup put in place, then
    /// `rotate-epoch`, as an operator restores by hand) lies between the epochs the store
    /// knows, and is bounded by when the store moved past it: devices that synced with the
    /// replaced history still offer their copies back.
    @Test func anEpochOfAReplacedHistoryIsBoundedByTheRestore() async throws {
        try await withTemporaryDirectory(prefix: "lineage-restore") { dir in
            let path = dir.appending("outpost.sqlite"), backup = dir.appending("backup.sqlite")
            func open() throws -> SQLiteSyncStore { try SQLiteSyncStore(configuration: .init(path: path)) }
            func item(_ change: Change) -> PushItem {
                .change(PreparedChange(change: change, fingerprint: SHA256.hash(change.fingerprintMaterial()), data: change.canonicalData()))
            }
            var store = try open()
            let first = store.epoch
            _ = try await store.push(space: "sp", clientId: "d", items: [item(put("c1", "a"))], now: 1_000)
            await store.close()
            try FileManager.default.copyItem(atPath: path, toPath: backup)
            // The live history goes on: a rotation, and a record devices acknowledge.
            let replaced = try SQLiteSyncStore.rotateEpoch(path: path)
            store = try open()
            let made = try await store.push(space: "sp", clientId: "d", items: [item(put("c2", "b"))], now: 2_000)
            #expect(made == [.applied("c2", version: Version(epoch: replaced, seq: 2), updatedAt: 2_000)])
            await store.close()
            // Restored by hand: the backup in place of the store, then rotate-epoch.
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            try FileManager.default.copyItem(atPath: backup, toPath: path)
            let restoredAt = Int64(Date().timeIntervalSince1970 * 1000)
            let restored = try SQLiteSyncStore.rotateEpoch(path: path)
            #expect(first < replaced && replaced < restored)
            store = try open()
            // A device offers back b, which the restored history lacks.
            let late = try await store.push(space: "sp", clientId: "d", items: [item(LineageTimeTests.reoffer("r1", "b", lineage: "\(replaced).2", updatedAt: restoredAt + 3_600_000))], now: 3_000)
            #expect(late.map(\.status) == [.rejected] && late[0].error?.details?["field"] == "lineage.updatedAt", "\(late)")
            let back = try await store.push(space: "sp", clientId: "d", items: [item(LineageTimeTests.reoffer("r2", "b", lineage: "\(replaced).2", updatedAt: 2_000))], now: 3_000)
            #expect(back == [.applied("r2", version: Version(epoch: restored, seq: 2), updatedAt: 2_000)], "\(back)")
            await store.close()
        }
    }
}

/// Under rules, a tombstone is state like any other: a token that cannot read the record it
/// deleted learns nothing of it, not even from a conflict (issue 33).
@Suite(.serverLogs, .serialized) struct HiddenTombstoneTests {
    @Test(arguments: StoreKind.allCases) func aConflictNeverShowsATombstoneOutsideTheView(store: StoreKind) async throws {
        let rules = RulesHTTPTests()
        try await rules.withRulesServer(store) { s, _ in
            let boss = rules.token(s, "boss", supervisor: true)
            let made = try await rules.pushed(s, boss, [rules.job("s1", "j1", "Fix the pump", "w2")])
            let version = try #require(made[0].version)
            let deleted = try await rules.pushed(s, boss, [Change(changeId: "s2", collection: "jobs", id: "j1", op: .delete, data: nil, baseVersion: version, clientTime: 1)])
            #expect(deleted.map(\.status) == [.applied])
            // w1 never could read j1: creating it answers forbidden, with nothing of the tombstone.
            let r = try await s.push("team", [rules.job("w1a", "j1", "Mine", "w1")], token: rules.token(s, "w1"))
            #expect(r.status == 200)
            let answer = try JSONParser.parse(r.body)["results"]?.arrayValue?.first
            #expect(answer?["status"] == "rejected" && answer?["error"]?["code"] == "forbidden", "\(r.text)")
            #expect(answer?["current"] == nil, "the answer shows the tombstone: \(r.text)")
            #expect(!r.text.contains("boss") && !r.text.contains("\"deleted\""), "\(r.text)")
            // w2 could read it (it was theirs): the conflict shows the tombstone as a pull would.
            let w2 = try await rules.pushed(s, rules.token(s, "w2"), [rules.job("w2a", "j1", "Again", "w2")])
            #expect(w2[0].status == .conflict && w2[0].current?.deleted == true && w2[0].current?.updatedBy == "test-client", "\(w2)")
        }
    }
}

extension HiddenTombstoneTests {
    /// Rules filter records, not files: any read token of the space downloads a file by its
    /// digest (docs/rules.md, "Media"), which it learns only from a record it may read.
    @Test(arguments: StoreKind.allCases) func filesStayPerSpaceUnderRules(store: StoreKind) async throws {
        let rules = RulesHTTPTests()
        try await rules.withRulesServer(store) { s, _ in
            let file = mediaBytes(3_000, seed: 33)
            let (_, complete) = try await MediaClient(port: s.port, token: rules.token(s, "boss", supervisor: true)).upload("team", file, contentType: "image/png")
            let got = try await MediaClient(port: s.port, token: rules.token(s, "w1")).download("team", complete.media.mediaId)
            #expect(got.status == 200 && got.body == file)
        }
    }
}

/// Who wrote, as no device can claim it (issue 33): the token's subject is kept with every
/// record state, shown to operators (the console's record routes, webhooks, the log) and
/// never to devices; a device's telemetry is bound to the subject of its first report.
@Suite(.serverLogs, .serialized) struct SubjectTests {
    @Test(arguments: StoreKind.allCases) func theSubjectOfEveryWriteIsKeptAndShownToOperatorsOnly(store: StoreKind) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "subject") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            // alice's token, a device that says it is bob's phone.
            let alice = s.token(sub: "alice", spaces: ["sp"])
            let r = try await s.push("sp", [put("c1", "a")], clientId: "bob-phone", token: alice)
            #expect(try PushResponse.decode(r.body).results.map(\.status) == [.applied])
            let admin = s.token(spaces: [], admin: true)
            let record = try json(try await s.request("GET", "/v1/admin/spaces/sp/collections/todos/record?id=a", token: admin))
            #expect(record["updatedBy"] == "bob-phone" && record["subject"] == "alice", "\(record)")
            let list = try json(try await s.request("GET", "/v1/admin/spaces/sp/collections/todos/records", token: admin))
            #expect(list["records"]?.arrayValue?.first?["subject"] == "alice", "\(list)")
            // Devices never see it: not in a pull, not in a conflict.
            let pulled = try await s.pull("sp")
            #expect(!pulled.text.contains("subject") && !pulled.text.contains("alice"), "\(pulled.text)")
            let conflict = try await s.push("sp", [put("c2", "a")], token: s.token(sub: "carol", spaces: ["sp"]))
            #expect(!conflict.text.contains("alice") && conflict.text.contains("\"conflict\""), "\(conflict.text)")
        }
    }

    @Test(arguments: StoreKind.allCases) func webhooksAndTheLogNameTheSubject(store: StoreKind) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "subjecthook") : nil
        try await WebhookTests.withReceiver { receiver in
            try await withTemporaryDirectory(prefix: "outpost-subject") { dir in
                let secret = SecretRulesTests.good
                let environment = ["OUTPOST_ACCESS_LOG": "true", "OUTPOST_WEBHOOK_SECRET": secret]
                try await WebhookTests.withServer(dir.appending("data"), arguments: ["--webhook", receiver.url] + (url.map { ["--store", $0] } ?? []),
                                                  environment: environment) { server in
                    let token = try await blocking { try server.token(sub: "alice", spaces: ["team"]) }
                    _ = try await WebhookTests.push(server, token: token, "team", [put("c1", "a")], clientId: "bob-phone")
                    let delivered = try await receiver.until("the change delivered") { !$0.delivered.isEmpty }.delivered
                    let change = delivered[0].json["changes"]?.arrayValue?.first
                    #expect(change?["updatedBy"] == "bob-phone" && change?["subject"] == "alice", "\(change ?? .null)")
                    // The log: one `write` line per push that wrote, with the subject.
                    let line = try await server.logLine("the write logged", where: ServerProcess.logged("write"))
                    let logged = try JSONParser.parse(Array(line.utf8))
                    #expect(logged["subject"] == "alice" && logged["clientId"] == "bob-phone" && logged["space"] == "team" && logged["applied"] == 1, "\(line)")
                }
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func aDevicesReportsAreBoundToTheSubjectOfItsFirst(store: StoreKind) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "telemetrysub") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            func send(_ sub: String, _ pending: Int64) async throws -> TestResponse {
                let batch = TelemetryBatch(clientId: "phone-1", sdkVersion: "outpost-swift/0.1.0", syncs: [TelemetryTests.entry(1_000 + pending, pending: pending)])
                return try await s.request("POST", "/v1/spaces/team/telemetry", token: s.token(sub: sub, spaces: ["team"], scope: .read), body: batch.encoded())
            }
            #expect(try await send("alice", 3).status == 202)
            // Another subject naming alice's client id changes nothing.
            let other = try await send("mallory", 99)
            #expect(other.status == 403 && errorCode(other) == "forbidden", "\(other.text)")
            #expect(try await send("alice", 4).status == 202)
            let devices = try json(try await s.request("GET", "/v1/admin/devices", token: s.token(spaces: [], admin: true)))["devices"]?.arrayValue ?? []
            #expect(devices.count == 1 && devices[0]["subject"] == "alice" && devices[0]["pending"] == 4 && devices[0]["reports"] == 2, "\(devices)")
            #expect(try await s.app.telemetry.telemetry.history(space: "team", clientId: "phone-1").count == 2)
        }
    }
}

/// Per-space limits of record bytes and media bytes (issue 33), enforced in the store's
/// transaction (records) and under the space's lock (uploads) before anything is spent,
/// under concurrent writers, on each store; reported by the admin spaces list.
@Suite(.serverLogs, .serialized) struct QuotaTests {
    /// A change whose record counts `bytes` (collection "todos", a 2-byte id, data padded).
    static func sized(_ changeId: String, _ id: String, bytes: Int, base: Version? = nil) -> Change {
        // {"p":"…"} is 8 bytes around the padding; "todos" and the id add theirs.
        let padding = bytes - 8 - "todos".utf8.count - id.utf8.count
        return Change(changeId: changeId, collection: "todos", id: id, op: .put, data: ["p": .string(String(repeating: "x", count: padding))],
                      baseVersion: base, clientTime: 1)
    }

    static func spaceRow(_ s: TestServer, _ space: String) async throws -> JSONValue? {
        try json(try await s.request("GET", "/v1/admin/spaces", token: s.token(spaces: [], admin: true)))["spaces"]?.arrayValue?.first { $0["name"]?.stringValue == space }
    }

    @Test(arguments: StoreKind.allCases) func aSpaceIsRefusedRecordBytesOverItsLimitAndCanStillShrink(store: StoreKind) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "quota") : nil
        try await withServer(configure: { s in
            if let url { s.store = url }
            s.spaceRecordBytes = 1_000
        }) { s in
            let first = try PushResponse.decode(try await s.push("q", [Self.sized("c1", "r1", bytes: 400), Self.sized("c2", "r2", bytes: 400),
                                                                       Self.sized("c3", "r3", bytes: 400)]).body).results
            #expect(first.map(\.status) == [.applied, .applied, .rejected], "\(first)")
            #expect(first[2].error?.code == "record_quota_exceeded" && first[2].error?.details?["limit"] == 1_000 && first[2].error?.details?["used"] == 800,
                    "\(first[2])")
            // A smaller put and a delete apply however full the space is; the bytes freed are
            // available again.
            let shrunk = try PushResponse.decode(try await s.push("q", [Self.sized("c4", "r1", bytes: 300, base: first[0].version),
                                                                        Change(changeId: "c5", collection: "todos", id: "r2", op: .delete, data: nil,
                                                                               baseVersion: first[1].version, clientTime: 1)]).body).results
            #expect(shrunk.map(\.status) == [.applied, .applied], "\(shrunk)")
            var row = try #require(try await Self.spaceRow(s, "q"))
            // r1 300, r2's tombstone its collection and id (7).
            #expect(row["recordBytes"] == 307 && row["recordBytesLimit"] == 1_000 && row["mediaBytesLimit"] == .null, "\(row)")
            #expect(try PushResponse.decode(try await s.push("q", [Self.sized("c6", "r3", bytes: 600)]).body).results.map(\.status) == [.applied])
            // Compaction purges the tombstone and its bytes.
            let compacted = try await s.request("POST", "/v1/admin/compact?retentionDays=0", token: s.token(spaces: [], admin: true))
            #expect(compacted.status == 200, "\(compacted.text)")
            row = try #require(try await Self.spaceRow(s, "q"))
            #expect(row["recordBytes"] == 900, "\(row)")
            // Another space has a limit of its own.
            #expect(try PushResponse.decode(try await s.push("other", [Self.sized("o1", "r1", bytes: 900)]).body).results.map(\.status) == [.applied])
        }
    }

    @Test(arguments: StoreKind.allCases) func concurrentPushesNeverTakeASpaceOverItsLimit(store: StoreKind) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "quotarace") : nil
        try await withServer(configure: { s in
            if let url { s.store = url }
            s.spaceRecordBytes = 5_000
        }) { s in
            // 24 pushes of 500 bytes at once, from their own devices: exactly 10 fit.
            let results = try await withThrowingTaskGroup(of: PushResult.self) { group in
                for i in 0..<24 {
                    group.addTask {
                        let id = String(format: "%02d", i)
                        return try PushResponse.decode(try await s.push("race", [Self.sized("c\(id)", id, bytes: 500)], clientId: "device-\(id)").body).results[0]
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.filter { $0.status == .applied }.count == 10, "\(results.map(\.status))")
            #expect(results.filter { $0.error?.code == "record_quota_exceeded" }.count == 14)
            let row = try #require(try await Self.spaceRow(s, "race"))
            #expect(row["recordBytes"] == 5_000 && row["records"] == 10, "\(row)")
        }
    }

    @Test(arguments: StoreKind.allCases) func uploadsOverASpacesMediaLimitAreRefusedBeforeAnyByte(store: StoreKind) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "mediaquota") : nil
        try await withServer(configure: { s in
            if let url { s.store = url }
            s.spaceMediaBytes = 10_000
        }) { s in
            let media = MediaClient(port: s.port, token: s.token(spaces: ["m", "n"]))
            // A record, so the admin list has the space (it lists the spaces written to).
            #expect(try await s.push("m", [put("c1", "a")]).status == 200)
            let file = mediaBytes(4_000, seed: 1)
            // A published file and an open upload count: 8,000 held.
            _ = try await media.upload("m", file, contentType: "image/png")
            let open = try await media.begin("m", file: mediaBytes(4_000, seed: 2))
            #expect(open.status == 201, "\(open.text)")
            // The same file again costs nothing (it is complete).
            #expect(try await media.begin("m", file: file).status == 200)
            let over = try await media.begin("m", file: mediaBytes(2_001, seed: 3))
            #expect(over.status == 413 && mediaErrorCode(over) == "media_quota_exceeded", "\(over.text)")
            #expect(mediaErrorDetails(over)?["limit"] == 10_000 && mediaErrorDetails(over)?["used"] == 8_000, "\(over.text)")
            // tus counts the same way, and nothing is created for a refused one.
            let tus = try await s.request("POST", "/v1/spaces/m/tus", token: s.token(spaces: ["m"]),
                                          headers: [("Tus-Resumable", "1.0.0"), ("Upload-Length", "2001")])
            #expect(tus.status == 413 && errorCode(tus) == "media_quota_exceeded", "\(tus.text)")
            let fits = try await s.request("POST", "/v1/spaces/m/tus", token: s.token(spaces: ["m"]),
                                           headers: [("Tus-Resumable", "1.0.0"), ("Upload-Length", "2000")])
            #expect(fits.status == 201, "\(fits.text)")
            let row = try #require(try await Self.spaceRow(s, "m"))
            #expect(row["mediaBytes"] == 4_000 && row["mediaUploadBytes"] == 6_000 && row["mediaBytesLimit"] == 10_000, "\(row)")
            // Uploads begun at once never hold more than the limit together.
            let sizes = try await withThrowingTaskGroup(of: Int.self) { group in
                for seed in 10..<20 {
                    group.addTask { try await media.begin("n", file: mediaBytes(3_000, seed: UInt64(seed))).status }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(sizes.filter { $0 == 201 }.count == 3 && sizes.filter { $0 == 413 }.count == 7, "\(sizes)")
        }
    }
}

/// The schema changes of issue 33 on a store from before them: the epoch history from the
/// retired epochs, the subject columns, and each space's record bytes counted from its
/// records. (The SQLite file of that release is `SchemaMigrationTests`' fixture "s8-m2".)
@Suite(.serverLogs, .serialized) struct TrustMigrationTests {
    @Test func aPostgresDatabaseAtMigrationNineIsUpgradedWithItsBytesAndItsEpochs() async throws {
        let url = try await PostgresCluster.database(prefix: "trustmigrate")
        let db = try PostgresConnection(url: url)
        defer { db.close() }
        for version in 1...9 { try db.execute(PostgresSchema.migrations.list[version - 1].sql) }
        try db.run("INSERT INTO meta(key, value) VALUES ('epoch', 'NEWEPOCH'), ('retired_epochs', 'OLD1,OLD2')")
        try db.run("INSERT INTO spaces(name, head_seq) VALUES ('sp', 2)")
        try db.run("""
            INSERT INTO records(space_id, collection, id, seq, deleted, data, updated_at, updated_by, client_time)
            SELECT space_id, 'todos', v.id, v.seq, v.seq = 2, CASE WHEN v.seq = 1 THEN '{"v":1}'::bytea END, 10, 'p', NULL
              FROM spaces, (VALUES ('a', 1), ('bb', 2)) AS v(id, seq) WHERE name = 'sp'
            """)
        let store = try PostgresSyncStore(configuration: .init(url: url))
        #expect(try PostgresSchema.pending(db) == [])
        // a: "todos", "a", {"v":1}; bb's tombstone: "todos", "bb".
        #expect(try db.query("SELECT record_bytes FROM spaces WHERE name = 'sp'").int64(0, 0) == 13 + 7)
        #expect(try db.query("SELECT count(*) FROM epoch_history WHERE epoch IN ('OLD1', 'OLD2')").int64(0, 0) == 2)
        #expect(try db.query("SELECT count(*) FROM meta WHERE key = 'history_began_at'").int64(0, 0) == 1)
        // A re-offer of a retired epoch with a time before the upgrade applies; after, it does not.
        let reoffer = { (id: String, time: Int64) -> PushItem in
            let c = LineageTimeTests.reoffer(id, id, lineage: "OLD2.9", updatedAt: time)
            return .change(PreparedChange(change: c, fingerprint: SHA256.hash(c.fingerprintMaterial()), data: c.canonicalData()))
        }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let r = try await store.push(space: "sp", clientId: "d", items: [reoffer("x", 1_000), reoffer("y", now + 3_600_000)], now: now)
        #expect(r.map(\.status) == [.applied, .rejected], "\(r)")
        await store.close()
    }
}
