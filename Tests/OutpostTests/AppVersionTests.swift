import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// App versions (docs/rules.md, "App versions") over a real `outpost-server` with a rules
/// file, on SQLite and PostgreSQL: a change from an app older than the rules' minimum is
/// answered `upgrade_required`, held in the queue (never dropped, never sent again by the old
/// app), shown in `status()` and `SyncStatusModel`, and sent by the first sync after the
/// store is opened by an updated app; pulls keep working for the old app.
@Suite struct AppVersionTests {
    /// Surveys need version 2 of the app for writes; every other collection version 1 (the
    /// space's minimum).
    static let rules = #"""
    {"minAppVersion": 1,
     "collections": {"surveys": {"read": "true", "write": "true", "minAppVersion": 2}},
     "default": {"read": "true", "write": "true"}}
    """#

    func device(_ name: String, _ server: ServerProcess, _ dir: TemporaryDirectory, token: String, appVersion: Int?) throws -> OutpostStore {
        try serverDevice(name, server, dir, token: token, space: "team", seed: 7) { $0.appVersion = appVersion }
    }

    @Test(arguments: [false, true])
    func anOldAppsChangeIsHeldShownAndSentOnceTheAppIsUpdated(postgres: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-app-versions")
        defer { dir.remove() }
        let path = dir.appending("rules.json")
        try Data(Self.rules.utf8).write(to: URL(fileURLWithPath: path))
        let database = postgres ? try await PostgresCluster.database(prefix: "appversions") : nil
        let server = try await blocking {
            try ServerProcess(dataDirectory: dir.appending("data"), arguments: ["--rules", path] + (database.map { ["--store", $0] } ?? []))
        }
        defer { server.stop() }
        let admin = try server.token(spaces: [], admin: true)
        let token = try server.token(sub: "w1", spaces: ["team"])
        let office = try device("office", server, dir, token: token, appVersion: 2)
        _ = try await office.put(["q1": "yes"], in: "surveys", id: "s1")
        try await office.sync()

        // Last month's app (version 1) edits the survey and writes a note.
        var phone = try device("phone", server, dir, token: token, appVersion: 1)
        try await phone.sync()
        _ = try await phone.put(["q1": "no"], in: "surveys", id: "s1")
        _ = try await phone.put(["text": "on site"], in: "notes", id: "n1")
        let first = try await phone.sync()
        #expect(first.upgradeRequired == 1)
        #expect(first.rejected == 0)
        #expect(first.pushed == 1, "the note goes: notes need the space's minimum, 1")
        var status = try await phone.status()
        #expect(status.upgradeRequired == 1)
        #expect(status.pending == 1, "the held change stays in the queue")
        let held = try await phone.pendingChanges()
        #expect(held.count == 1)
        #expect(held.first?.state == .upgradeRequired)
        #expect(held.first?.requiredAppVersion == 2)
        #expect(held.first?.lastError?.contains("upgrade_required") == true)
        #expect(try await phone.rejectedChanges().isEmpty, "never dropped into the rejected list")
        #expect(try await phone.record(in: "surveys", id: "s1")?.data?["q1"] == "no", "the app keeps seeing its edit")
        #expect(try await phone.nextRetryAt() == nil, "a held change asks the scheduler for no retry")
        let model = await SyncStatusModel(store: phone)
        await model.start()
        #expect(await model.upgradeRequired == 1)
        #expect(await model.pending == 1)
        await model.stop()

        // The old app syncs again: the held change is not sent again, and pulls still work.
        _ = try await office.put(["q1": "maybe"], in: "surveys", id: "s2")
        try await office.sync()
        let again = try await phone.sync()
        #expect(again.upgradeRequired == 0, "not sent again")
        #expect(again.pulled == 1)
        #expect(try await phone.record(in: "surveys", id: "s2")?.data?["q1"] == "maybe")
        let refusals = try await blocking { try server.metric("outpost_rejections_total{code=\"upgrade_required\"}", token: admin) }
        #expect(refusals == 1, "the server saw the old app's change once")

        // A restart of the same old app: still held, still not sent.
        await phone.close()
        phone = try device("phone", server, dir, token: token, appVersion: 1)
        #expect(try await phone.status().upgradeRequired == 1, "the hold is kept in the file")
        #expect(try await phone.sync().upgradeRequired == 0)
        #expect(try await phone.pendingChanges().first?.state == .upgradeRequired)

        // The app is updated: the same file opens with version 2 and the next sync sends it.
        await phone.close()
        phone = try device("phone", server, dir, token: token, appVersion: 2)
        status = try await phone.status()
        #expect(status.upgradeRequired == 0)
        #expect(try await phone.pendingChanges().first?.state == .failed, "queued again, to be sent")
        let updated = try await phone.sync()
        #expect(updated.pushed == 1)
        #expect(try await phone.status().pending == 0)
        try await office.sync()
        #expect(try await office.record(in: "surveys", id: "s1")?.data?["q1"] == "no", "the held edit reached the server and the office")
        await phone.close()
        await office.close()
    }

    /// A 1.1 client names no version: the server takes it for version 0, and its change to a
    /// collection with a minimum is rejected `upgrade_required` with the minimum in the details.
    @Test func aPushThatNamesNoVersionIsVersionZero() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-app-versions-raw")
        defer { dir.remove() }
        let path = dir.appending("rules.json")
        try Data(Self.rules.utf8).write(to: URL(fileURLWithPath: path))
        let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data"), arguments: ["--rules", path]) }
        defer { server.stop() }
        let token = try server.token(sub: "w1", spaces: ["team"])
        func push(_ versions: String) async throws -> JSONValue {
            let body = #"{"clientId": "old", \#(versions) "changes": [{"changeId": "c-\#(versions.count)", "collection": "surveys", "id": "s1", "op": "put", "data": {"q1": "no"}, "baseVersion": null}]}"#
            let r = try await httpRequestAsync(port: server.port, "POST", "/v1/spaces/team/push",
                                               headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")], body: Array(body.utf8))
            #expect(r.status == 200, "\(r.text)")
            return try JSONParser.parse(r.body)["results"]![0]!
        }
        let none = try await push("")
        #expect(none["status"] == "rejected")
        #expect(none["error"]?["code"] == "upgrade_required")
        #expect(none["error"]?["details"]?["minimum"] == 2)
        #expect(none["error"]?["details"]?["version"] == 0)
        // One number for the app is not enough for surveys; a version for the collection is.
        #expect(try await push(#""appVersion": 1,"#)["error"]?["details"]?["version"] == 1)
        #expect(try await push(#""appVersion": 1, "collectionVersions": {"surveys": 2},"#)["status"] == "applied")
        // A version that is no integer refuses the request as a whole.
        let bad = try await httpRequestAsync(port: server.port, "POST", "/v1/spaces/team/push",
                                             headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
                                             body: Array(#"{"clientId": "old", "appVersion": "2", "changes": []}"#.utf8))
        #expect(bad.status == 422)
        #expect(bad.text.contains("appVersion"))
    }

    /// The command-line client: `--app-version` names the version; `sync`, `pending` and
    /// `status` show what is held.
    @Test func theCommandLineClientNamesItsVersionAndShowsHeldChanges() async throws {
        let rulesDir = try TemporaryDirectory(prefix: "outpost-app-versions-cli")
        defer { rulesDir.remove() }
        let path = rulesDir.appending("rules.json")
        try Data(Self.rules.utf8).write(to: URL(fileURLWithPath: path))
        let server = try await blocking { try ServerProcess(dataDirectory: rulesDir.appending("data"), arguments: ["--rules", path]) }
        defer { server.stop() }
        let token = try server.token(spaces: ["team"])
        let args = ["--store", rulesDir.appending("cli.sqlite"), "--space", "team", "--server", server.baseURL.absoluteString, "--token", token]
        func outpost(_ more: [String]) async throws -> CLITests.Run { try await blocking { try CLITests.outpost(args + more) } }
        #expect(try await outpost(["put", "surveys", "s1", #"{"q1": "no"}"#]).status == 0)
        let old = try await outpost(["--app-version", "1", "sync"])
        #expect(old.status == 0 && old.json?["upgradeRequired"] == 1 && old.json?["pushed"] == 0, "\(old.stdout) \(old.stderr)")
        let pending = try await outpost(["--app-version", "1", "pending"])
        #expect(pending.lines.first?["state"] == "upgrade_required", "\(pending.stdout)")
        #expect(pending.lines.first?["requiredAppVersion"] == 2)
        #expect(try await outpost(["--app-version", "1", "status"]).json?["upgradeRequired"] == 1)
        #expect(try await outpost(["--app-version", "x", "status"]).status == 64)
        let updated = try await outpost(["--app-version", "2", "sync"])
        #expect(updated.json?["pushed"] == 1, "\(updated.stdout) \(updated.stderr)")
        #expect(try await outpost(["--app-version", "2", "status"]).json?["upgradeRequired"] == 0)
    }
}
#endif
