import Foundation
import OutpostCore
import OutpostTestBasics
import Synchronization
import Testing
@testable import Outpost
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// The `outpost` command-line client, run as a child process.
@Suite("outpost command-line client", .offPoolWhileBlocking, .serialized, .serverLogs)
struct CLITests {
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
        var lines: [JSONValue] { stdout.split(separator: "\n").compactMap { try? JSONParser.parse(String($0)) } }
        var json: JSONValue? { try? JSONParser.parse(stdout.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    static func outpost(_ arguments: [String], environment: [String: String] = [:], input: Subprocess.Input = .null) throws -> Run {
        let env = Subprocess.environment(adding: environment) {
            ["OUTPOST_STORE", "OUTPOST_SERVER", "OUTPOST_SPACE", "OUTPOST_TOKEN", "OUTPOST_KEY_FILE", "OUTPOST_KEY_PASSPHRASE"].contains($0)
        }
        let result = try Subprocess.run(BuildProducts.executable("outpost-cli"), arguments, environment: env, input: input)
        return Run(status: result.status, stdout: result.output, stderr: result.error)
    }

    /// A record larger than one command-line argument may be (128 KiB) comes from standard
    /// input (`-`) or a file (`@FILE`) and syncs; one over the server's maxRecordBytes is
    /// rejected at sync with a message that names the limit.
    @Test func putTakesLargeRecordsFromStandardInputAndFiles() async throws {
        let world = try RealWorld()
        let store = world.dir.appending("big.sqlite")
        let base = ["--store", store, "--space", "team", "--server", world.server.baseURL.absoluteString, "--token", world.token]
        let big = #"{"text":""# + String(repeating: "x", count: 200 * 1024) + #""}"#
        let fromInput = try Self.outpost(base + ["put", "notes", "n1", "-"], input: .bytes(Array(big.utf8)))
        #expect(fromInput.status == 0, "\(fromInput.stderr)")
        let file = world.dir.appending("note.json")
        try big.replacingOccurrences(of: "\"x", with: "\"y").write(toFile: file, atomically: true, encoding: .utf8)
        let fromFile = try Self.outpost(base + ["put", "notes", "n2", "@" + file])
        #expect(fromFile.status == 0, "\(fromFile.stderr)")
        #expect(try Self.outpost(base + ["put", "notes", "n3", "@" + world.dir.appending("absent.json")]).status == 64)
        let sync = try Self.outpost(base + ["sync"])
        #expect(sync.status == 0 && sync.json?["pushed"] == 2, "\(sync.stdout) \(sync.stderr)")

        let huge = #"{"text":""# + String(repeating: "z", count: 300 * 1024) + #""}"#
        #expect(try Self.outpost(base + ["put", "notes", "n4", "-"], input: .bytes(Array(huge.utf8))).status == 0)
        _ = try Self.outpost(base + ["sync"])
        let pending = try Self.outpost(["--store", store, "pending"])
        let rejected = try #require(pending.lines.first { $0["id"] == "n4" }, "\(pending.stdout)")
        #expect(rejected["state"] == "rejected", "\(rejected)")
        let reason = rejected.description
        #expect(reason.contains("record_too_large") && reason.contains("262144"), "\(reason)")
    }

    /// `key create|export|import|rotate`, `--key-file` on every other command, `reencrypt`,
    /// and an encrypted upload, across two stores with their own key files.
    @Test func keyCommandsMoveASpaceKeyAndEncryptedStoresSyncThroughTheCLI() async throws {
        let world = try RealWorld()
        let url = world.server.baseURL.absoluteString
        let phoneKeys = world.dir.appending("phone.keys"), laptopKeys = world.dir.appending("laptop.keys")
        let phone = ["--store", world.dir.appending("cli-phone.sqlite"), "--space", "team", "--server", url, "--token", world.token, "--key-file", phoneKeys]
        let laptop = ["--store", world.dir.appending("cli-laptop.sqlite"), "--space", "team", "--server", url, "--token", world.token, "--key-file", laptopKeys]
        let created = try Self.outpost(phone + ["key", "create"])
        #expect(created.status == 0 && created.json?["kid"]?.stringValue?.hasPrefix("k-") == true, "\(created.stderr)")
        #expect(try Self.outpost(phone + ["key", "export"]).status == 64, "no passphrase: a usage error")
        let passphrase = ["OUTPOST_KEY_PASSPHRASE": "a long passphrase"]
        let export = try Self.outpost(phone + ["key", "export", "--pbkdf2"], environment: passphrase)
        #expect(export.status == 0, "\(export.stderr)")
        let exportFile = world.dir.appending("team.export")
        try export.stdout.write(toFile: exportFile, atomically: true, encoding: .utf8)
        let wrong = try Self.outpost(laptop + ["key", "import", exportFile], environment: ["OUTPOST_KEY_PASSPHRASE": "not it"])
        #expect(wrong.status == 1 && wrong.stderr.contains("wrong passphrase"), "\(wrong.stderr)")
        let imported = try Self.outpost(laptop + ["key", "import", exportFile], environment: passphrase)
        #expect(imported.status == 0 && imported.json?["kid"] == created.json?["kid"], "\(imported.stdout) \(imported.stderr)")

        #expect(try Self.outpost(phone + ["put", "notes", "n1", #"{"text":"CLI-MARKER"}"#]).status == 0)
        let photo = world.dir.appending("photo.jpg")
        try String(repeating: "CLI-PHOTO ", count: 1000).write(toFile: photo, atomically: true, encoding: .utf8)
        let upload = try Self.outpost(phone + ["upload", photo])
        #expect(upload.status == 0 && upload.json?["contentType"] == "image/jpeg" && upload.json?["encryption"]?["kid"] == created.json?["kid"],
                "\(upload.stdout) \(upload.stderr)")
        #expect(try Self.outpost(phone + ["sync"]).json?["pushed"] == 1)
        #expect(try Self.outpost(laptop + ["sync"]).json?["pulled"] == 1)
        #expect(try Self.outpost(laptop + ["get", "notes", "n1"]).json == ["text": "CLI-MARKER"])
        let withoutKeys = try Self.outpost(["--store", world.dir.appending("cli-laptop.sqlite"), "list"])
        #expect(withoutKeys.status == 1 && withoutKeys.stderr.contains("end-to-end encrypted"), "\(withoutKeys.stderr)")

        let rotated = try Self.outpost(phone + ["key", "rotate"])
        #expect(rotated.status == 0 && rotated.json?["kid"] != created.json?["kid"])
        let reencrypt = try Self.outpost(phone + ["reencrypt"])
        #expect(reencrypt.json?["rewritten"] == 1 && reencrypt.json?["kid"] == rotated.json?["kid"], "\(reencrypt.stdout)")
        #expect(try Self.outpost(phone + ["sync"]).json?["pushed"] == 1)
        let kids = Set(try await world.serverRecords().values.compactMap { $0.data?["$e2e"]?["kid"]?.stringValue })
        #expect(kids == [try #require(rotated.json?["kid"]?.stringValue)])
    }

    @Test func localCommandsSyncAndExitStatuses() async throws {
        let world = try RealWorld()
        let store = world.dir.appending("cli.sqlite")
        let base = ["--store", store, "--space", "team"]
        let put = try Self.outpost(base + ["put", "todos", "t1", #"{"title":"Buy milk","done":false}"#])
        #expect(put.status == 0)
        #expect(put.json?["version"] == .null)
        #expect(put.json?["pending"] == .bool(true))
        #expect(try Self.outpost(base + ["put", "todos", "t2", #"{"title":"Walk"}"#]).status == 0)
        #expect(try Self.outpost(base + ["put", "todos", "t3", "[1]"]).status == 64, "JSON must be an object")
        let pending = try Self.outpost(["--store", store, "pending"])
        #expect(pending.lines.count == 2)
        #expect(pending.lines.allSatisfy { $0["state"] == "pending" && $0["op"] == "put" && $0["changeId"]?.stringValue != nil })
        // Sync through the environment variables.
        let env = ["OUTPOST_STORE": store, "OUTPOST_SERVER": world.server.baseURL.absoluteString, "OUTPOST_TOKEN": world.token]
        let sync = try Self.outpost(["sync"], environment: env)
        #expect(sync.status == 0)
        #expect(sync.json?["pushed"] == 2)
        #expect(sync.json?["pending"] == 0)
        #expect(sync.json?["epoch"]?.stringValue != nil)
        let list = try Self.outpost(["list", "todos"], environment: env)
        #expect(list.lines.map { $0["id"] } == ["t1", "t2"])
        #expect(list.lines.allSatisfy { $0["pending"] == false && $0["version"]?.stringValue != nil })
        let get = try Self.outpost(["get", "todos", "t1"], environment: env)
        #expect(get.json == ["title": "Buy milk", "done": false])
        #expect(try Self.outpost(["delete", "todos", "t1"], environment: env).status == 0)
        #expect(try Self.outpost(["get", "todos", "t1"], environment: env).status == 3, "deleted")
        #expect(try Self.outpost(["get", "todos", "nope"], environment: env).status == 3, "absent")
        let status = try Self.outpost(["status"], environment: env)
        #expect(status.json?["pending"] == 1)
        #expect(status.json?["lastError"] == .null)
        #expect(status.json?["cursor"]?.stringValue != nil)
        // A failed sync: exit 2, nothing lost.
        world.server.stop()
        let failed = try Self.outpost(["sync"], environment: env)
        #expect(failed.status == 2)
        #expect(failed.json?["error"]?["code"] == "not_sent")
        #expect(try Self.outpost(["pending"], environment: env).lines.map { $0["op"] } == ["delete"])
        #expect(try Self.outpost(["status"], environment: env).json?["lastError"]?.stringValue != nil)
        #expect(try Self.outpost(["frobnicate"], environment: env).status == 64)
        #expect(try Self.outpost(["--resolve", "coin-flip", "list"], environment: env).status == 64)
        #expect(try Self.outpost(["--help"]).stdout.contains("upload FILE"), "media upload is offered")
    }

    @Test func rejectedChangesAreListedWithTheirError() async throws {
        let world = try RealWorld(arguments: ["--max-record-bytes", "100"])
        let store = world.dir.appending("cli.sqlite")
        let args = ["--store", store, "--space", "team", "--server", world.server.baseURL.absoluteString, "--token", world.token]
        _ = try Self.outpost(args + ["put", "todos", "big", "{\"title\":\"\(String(repeating: "x", count: 200))\"}"])
        let sync = try Self.outpost(args + ["sync"])
        #expect(sync.status == 0)
        #expect(sync.json?["rejected"] == 1)
        let pending = try Self.outpost(args + ["pending"])
        #expect(pending.lines.first?["state"] == "rejected")
        #expect(pending.lines.first?["error"]?["code"] == "record_too_large")
    }

    /// A command that writes needs the store to itself; one that only reads reads it
    /// alongside the process that holds it.
    @Test func aSecondProcessCannotWriteAStoreThatIsOpenAndReadsItAlongside() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("held.sqlite")
            let held = try OutpostStore(path: path, configuration: .init(space: "team"))
            try await held.put(["title": "held"], in: "todos", id: "t1")
            let other = try Self.outpost(["--store", path, "put", "todos", "t2", "{}"])
            #expect(other.status == 1)
            #expect(other.stderr.contains("already open"))
            let listed = try Self.outpost(["--store", path, "list"])
            #expect(listed.status == 0 && listed.lines.map { $0["id"] } == ["t1"], "\(listed.stdout) \(listed.stderr)")
            await held.close()
            #expect(try Self.outpost(["--store", path, "put", "todos", "t2", "{}"]).status == 0)
        }
    }

    /// `outpost query` on a store an app made with declared indexes, dates and searchable
    /// fields: the CLI declares nothing and reads the file's index and search table, beside
    /// the app while it has the store open and alone after, and leaves them as they are.
    @Test func queryFiltersSortsPagesCountsExplainsAndSearchesAnAppsStore() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("app.sqlite")
            var configuration = OutpostStore.Configuration(space: "team")
            configuration.collections = ["inspections": CollectionSchema(indexes: [["status", "priority"]], searchable: ["notes"], dates: ["due"])]
            let app = try OutpostStore(path: path, configuration: configuration)
            let records = [
                "i1": #"{"status":"open","priority":3,"due":"2026-12-07T10:00:00Z","notes":"Check the pump at Zürich","cost":1.50}"#,
                "i2": #"{"status":"open","priority":1,"due":"2026-12-01T08:00:00.000Z","notes":"Roof leak","cost":1e400}"#,
                "i3": #"{"status":"closed","priority":5,"due":"2026-12-09T00:00:00Z","notes":"Pump replaced"}"#,
                "i4": #"{"status":"open","priority":5,"due":"2026-12-07T13:00:00+05:00","notes":"Fence"}"#,
                "i5": #"{"status":"review","priority":2,"notes":"pumping station"}"#,
            ]
            for (id, text) in records {
                guard case .object(let data) = try JSONParser.parse(text) else { Issue.record("not an object"); return }
                try await app.put(data, in: "inspections", id: id)
            }
            let query = ["--store", path, "query", "inspections"]

            // Beside the app, which has the store open.
            let open = try Self.outpost(query + ["--where", #"status == "open""#, "--sort", "-priority,due", "--limit", "2"])
            #expect(open.status == 0 && open.lines.map { $0["id"] } == ["i4", "i1"], "\(open.stdout) \(open.stderr)")
            let i1 = try JSONParser.parse(records["i1"]!)
            #expect(open.lines.last == ["id": "i1", "data": i1, "version": .null, "pending": true])
            #expect(open.stdout.contains(#""cost":1.50"#), "the data as stored: \(open.stdout)")
            await app.close()

            // Alone.
            let page = try Self.outpost(query + ["--sort", "priority", "--offset", "1", "--limit", "2"])
            #expect(page.lines.map { $0["id"] } == ["i5", "i1"], "\(page.stdout) \(page.stderr)")
            let all = try Self.outpost(query + ["--where", "cost > 1"])
            #expect(all.lines.map { $0["id"] } == ["i1", "i2"], "a number no Double holds is not left out: \(all.stdout) \(all.stderr)")
            #expect(all.stdout.contains(#""cost":1e400"#), "\(all.stdout)")
            let count = try Self.outpost(query + ["--where", #"status == "open" and priority >= 3"#, "--count"])
            #expect(count.status == 0 && count.json == ["count": 2], "\(count.stdout) \(count.stderr)")

            // `due` is no index's date here, so without --date it compares as text;
            // --date due compares times (13:00+05:00 is 08:00 UTC).
            let before = ["--where", #"due < date("2026-12-07T12:00:00Z")"#, "--sort", "due"]
            #expect(try Self.outpost(query + before).lines.map { $0["id"] } == ["i2", "i1"])
            let dated = try Self.outpost(query + before + ["--date", "due"])
            #expect(dated.lines.map { $0["id"] } == ["i2", "i4", "i1"], "\(dated.stdout) \(dated.stderr)")

            let plan = try Self.outpost(query + ["--where", #"status == "open""#, "--sort", "priority", "--explain"])
            #expect(plan.status == 0, "\(plan.stderr)")
            #expect(plan.json?["index"] == ["status", "priority"], "the app's index, used and kept: \(plan.stdout)")
            #expect(plan.json?["search"] == false)
            #expect(plan.json?["plan"]?.arrayValue?.isEmpty == false && plan.json?["sql"]?.stringValue?.contains("SELECT") == true, "\(plan.stdout)")

            // Search through the file's search table; the CLI declares no searchable field.
            let pump = try Self.outpost(query + ["--search", "pump"])
            #expect(pump.status == 0 && Set(pump.lines.compactMap { $0["id"]?.stringValue }) == ["i1", "i3", "i5"], "\(pump.stdout) \(pump.stderr)")
            #expect(try Self.outpost(query + ["--search", "zur"]).lines.map { $0["id"] } == ["i1"], "accents ignored")
            #expect(try Self.outpost(query + ["--search", "pump", "--where", #"status != "closed""#, "--count"]).json == ["count": 2])
            let searchPlan = try Self.outpost(query + ["--search", "pump", "--explain"])
            #expect(searchPlan.json?["search"] == true && searchPlan.json?["index"] == .null, "\(searchPlan.stdout)")

            // Usage errors: exit 64, the parser's message on standard error.
            let bad = try Self.outpost(query + ["--where", "status =="])
            #expect(bad.status == 64 && bad.stdout.isEmpty, "\(bad.stdout)")
            #expect(bad.stderr.contains("--where: at character 10: expected a value"), "\(bad.stderr)")
            #expect(try Self.outpost(query + ["--limit", "-1"]).status == 64)
            #expect(try Self.outpost(query + ["--sort", "a,,b"]).status == 64)
            #expect(try Self.outpost(query + ["--count", "--explain"]).status == 64)
            #expect(try Self.outpost(["--store", path, "query"]).status == 64)
            #expect(try Self.outpost(["--store", path, "query", "todos", "--search", "x"]).status == 64, "no search table in todos")
            #expect(try Self.outpost(["--store", dir.appending("absent.sqlite"), "query", "todos"]).status == 1)
            #expect(try Self.outpost(["--help"]).stdout.contains("query COLLECTION"))

            // A write by the client (support staff fixing a record) keeps the app's index and
            // search table, and keeps them up to date: the client declares neither.
            let put = try Self.outpost(["--store", path, "put", "inspections", "i6", #"{"status":"open","priority":4,"notes":"Pump seal"}"#])
            #expect(put.status == 0, "\(put.stderr)")
            #expect(try Self.outpost(query + ["--search", "seal"]).lines.map { $0["id"] } == ["i6"])

            // The app's index and search table are still there for the app, rebuilt by nothing.
            let reopened = try OutpostStore(path: path, configuration: configuration)
            let inspections = reopened.collection("inspections", of: JSONValue.self)
            #expect(try await inspections.filter { $0.status == "open" }.sorted(by: .ascending("priority")).explain().index == ["status", "priority"])
            #expect(try await inspections.search("pump").count() == 4)
            #expect(try await inspections.filter { $0.status == "open" && $0.priority >= 4 }.count() == 2)
            await reopened.close()
        }
    }

    /// Starts `outpost sync` (its server is `proxy`) and SIGKILLs it once the proxy has
    /// received the sync's `request`-th request (1: its first), which is then in flight;
    /// returns whether it was killed before it finished (a sync that ends with fewer
    /// requests is not).
    static func killedSync(_ arguments: [String], through proxy: FaultyProxy, atRequest request: Int) async throws -> Bool {
        // Killed from the proxy's thread the moment the server has answered its request
        // number `request`, before the answer reaches it: no poll from this task (which may
        // wait for a pool thread) decides when the kill lands.
        let kill = Mutex<(process: Subprocess?, due: Bool)>((nil, false))
        proxy.whenAnswered(request: proxy.requestsReceived + request) {
            kill.withLock { k in
                k.due = true
                k.process?.send(SIGKILL)
            }
        }
        let process = try Subprocess(BuildProducts.executable("outpost-cli"), arguments + ["sync"])
        kill.withLock { k in
            k.process = process
            if k.due { process.send(SIGKILL) }
        }
        // A sync that ended before its request `request` was not killed.
        let termination = await process.exited()
        proxy.whenAnswered(request: 0) {}
        return termination == .signaled(SIGKILL)
    }

    @Test func aClientKilledInTheMiddleOfASyncLosesNothingAndAppliesNothingTwice() async throws {
        let world = try RealWorld()
        let path = world.dir.appending("big.sqlite")
        let count = 6_000
        do {
            var c = OutpostStore.Configuration(space: "team")
            c.durability = .normal
            let store = try OutpostStore(path: path, configuration: c)
            for i in 0..<count { try await store.put(["n": .number(JSONNumber(i)), "text": .string("record \(i)")], in: "items", id: "i\(i)") }
            await store.close()
        }
        // Through the proxy, which counts the requests. A sync asks for /v1/info, pushes the
        // 6,000 changes 500 at a time, then pulls them back 1,000 a page: the kills land
        // with a push in flight at first, and later with a pull in flight.
        let args = ["--store", path, "--server", world.proxy.url.absoluteString, "--token", world.token]
        var kills = 0
        for request in [2, 3, 4, 5, 6, 8, 10] {
            if try await Self.killedSync(args, through: world.proxy, atRequest: request) { kills += 1 }
            // After every kill the file opens and holds every record.
            let list = try Self.outpost(["--store", path, "list", "items"])
            #expect(list.lines.count == count)
        }
        #expect(kills > 0, "at least one sync was killed while running")
        let finish = try Self.outpost(args + ["sync"])
        #expect(finish.status == 0, "\(finish.stdout) \(finish.stderr)")
        #expect(try Self.outpost(["--store", path, "pending"]).lines.isEmpty)
        let server = try await world.serverRecords()
        #expect(server.count == count)
        let maxSeq = server.values.map(\.version.seq).max() ?? 0
        #expect(maxSeq == Int64(count), "every change applied exactly once (replays do not take a seq)")
        #expect(server["i4321"]?.data == ["n": 4321, "text": "record 4321"])

        // And a device killed while pulling it all resumes from its last page.
        let reader = world.dir.appending("reader.sqlite")
        let readerArgs = ["--store", reader, "--space", "team", "--server", world.proxy.url.absoluteString, "--token", world.token]
        _ = try Self.outpost(readerArgs + ["status"])
        var readerKills = 0
        for request in [2, 4, 6] {
            if try await Self.killedSync(readerArgs, through: world.proxy, atRequest: request) { readerKills += 1 }
        }
        #expect(readerKills > 0, "at least one pulling sync was killed while running")
        #expect(try Self.outpost(readerArgs + ["sync"]).status == 0)
        let pulled = try Self.outpost(readerArgs + ["list", "items"]).lines
        #expect(pulled.count == count)
        #expect(pulled.allSatisfy { $0["pending"] == false })
    }
}
#endif
