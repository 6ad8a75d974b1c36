import Foundation
import Synchronization
import Testing
import OutpostCore
import OutpostTestSupport
@testable import OutpostServer

/// The `outpost-server` executable as operators and the conformance suite drive it
/// (docs/protocol.md section 8), over real sockets and a real SQLite file.
@Suite(.offPoolWhileBlocking, .serialized, .serverLogs) struct ServerProcessTests {
    func push(_ server: ServerProcess, _ token: String, _ space: String, _ changes: [Change], client: TestHTTPClient? = nil) throws -> TestResponse {
        let body = PushRequest(clientId: "proc-test", changes: changes).encoded()
        let headers = [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")]
        if let client { return try client.request("POST", "/v1/spaces/\(space)/push", headers: headers, body: body) }
        return try httpRequest(port: server.port, "POST", "/v1/spaces/\(space)/push", headers: headers, body: body)
    }

    func pullAll(_ server: ServerProcess, _ token: String, _ space: String) throws -> (Epoch, [RecordState]) {
        var records: [RecordState] = []
        var since = ""
        var epoch: Epoch?
        while true {
            let r = try httpRequest(port: server.port, "GET", "/v1/spaces/\(space)/pull?limit=5000\(since)", headers: [("Authorization", "Bearer \(token)")])
            let page = try PullPage.decode(r.body)
            epoch = page.epoch
            records += page.changes
            since = "&since=\(page.next.text)"
            if !page.hasMore { return (epoch!, records) }
        }
    }

    @Test func serveAnswersAndTheTokenCommandSignsForIt() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let server = try ServerProcess(dataDirectory: dir.appending("data"))
                defer { server.stop() }
                let health = try httpRequest(port: server.port, "GET", "/healthz")
                #expect(health.status == 200)
                #expect(try httpRequest(port: server.port, "GET", "/readyz").status == 200)
                #expect(try httpRequest(port: server.port, "GET", "/v1/info").status == 200)
                let token = try server.token(spaces: ["sp"], scope: "write")
                #expect(token.split(separator: ".").count == 3)
                #expect(try push(server, token, "sp", [put("c1", "a")]).status == 200)
                let read = try server.token(spaces: ["sp"], scope: "read")
                #expect(try push(server, read, "sp", [put("c2", "b")]).status == 403)
                #expect(server.stop() == 0)
            }
        }
    }

    /// Two servers on one port: the second fails to start, as for a port another program
    /// holds, and every request still reaches the first (one epoch, one store). Each event
    /// loop of a server has its own SO_REUSEPORT listener, and before the first listener
    /// bound without it, the second server joined the port and took half the connections.
    @Test func aSecondServerOnATakenPortFailsAndTheFirstKeepsEveryRequest() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let first = try ServerProcess(dataDirectory: dir.appending("first"), arguments: ["--event-loops", "2"])
                defer { first.stop() }
                let second = try Subprocess.run(
                    BuildProducts.executable("outpost-server"),
                    ["serve", "--host", "127.0.0.1", "--port", String(first.port), "--data", dir.appending("second"), "--event-loops", "2"],
                    environment: Subprocess.environment(adding: ["OUTPOST_JWT_SECRET": first.secret]) { $0 == "OUTPOST_LOG_FILE" })
                #expect(second.status != 0, "the second server started: \(second.output)")
                #expect(!second.output.contains("listening on"), "\(second.output)")
                #expect(second.error.contains("Address already in use"), "\(second.error)")
                var epochs: Set<String> = []
                for _ in 0..<20 {
                    let info = try httpRequest(port: first.port, "GET", "/v1/info")
                    #expect(info.status == 200)
                    if case .object(let object)? = try? JSONParser.parse(info.body), let epoch = object["epoch"]?.stringValue { epochs.insert(epoch) }
                }
                #expect(epochs.count == 1, "\(epochs)")
            }
        }
    }

    /// A newcomer's first start: under the listening line, the server says how to issue a
    /// token for this data directory (a command that works as printed), where /v1/info is
    /// and where the secret lives; a second start on the same directory prints only the
    /// listening line.
    @Test func theFirstStartSaysWhatToDoNextAndLaterStartsDoNot() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let data = dir.appending("data")
                let server = BuildProducts.executable("outpost-server")
                let environment = Subprocess.environment { $0.hasPrefix("OUTPOST_") }
                func start() throws -> (Subprocess, Int) {
                    let child = try Subprocess(server, ["serve", "--port", "0", "--data", data, "--access-log", "false"],
                                               environment: environment, output: .capture, error: .file(TestLogs.newFile(named: "first-start")))
                    return (child, try child.listeningAddress(timeout: 30).port)
                }
                let (first, port) = try start()
                var note: [String] = []
                try eventuallyBlocking("the first start's note, up to its \"first start only\" line") {
                    note.append(try first.nextLine(timeout: 30))
                    return note.last!.contains("first start only")
                }
                let text = note.joined(separator: "\n")
                #expect(text.contains("curl http://127.0.0.1:\(port)/v1/info"), "\(text)")
                #expect(text.contains(data + "/jwt-secret"), "\(text)")
                // The token command as printed, run by a shell, signs a token this server takes.
                let command = try #require(note.first { $0.contains("TOKEN=$(") }, "\(text)")
                let script = command.trimmingCharacters(in: .whitespaces) + #"; printf %s "$TOKEN""#
                let token = try Subprocess.run("/bin/sh", ["-c", script], environment: environment)
                #expect(token.status == 0, "\(token.error)")
                let pull = try httpRequest(port: port, "GET", "/v1/spaces/demo/pull", headers: [("Authorization", "Bearer \(token.output)")])
                #expect(pull.status == 200, "\(String(decoding: pull.body, as: UTF8.self))")
                #expect(first.stop(grace: 30) == .exited(0))

                let (second, again) = try start()
                #expect(try httpRequest(port: again, "GET", "/healthz").status == 200)
                #expect(second.stop(grace: 30) == .exited(0))
                second.waitForStreams()
                #expect(second.outputText() == "listening on http://127.0.0.1:\(again)\n")
            }
        }
    }

    @Test func theSecretFileIsCreatedOwnerOnlyAndReused() async throws {
        try await withTemporaryDirectory { dir in
            let data = dir.appending("data")
            let first = try AdminCommands.token(arguments: ["--data", data, "--sub", "u", "--space", "s"], environment: [:])
            let path = (data as NSString).appendingPathComponent(JWTSecret.fileName)
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let secret = try JWTSecret.load(environmentValue: nil, dataDirectory: data)
            #expect(try JWTAuthority(secret: secret).verify(first, now: Int64(Date().timeIntervalSince1970)).spaces == ["s"])
            // A readable-by-others secret is refused rather than trusted.
            chmod(path, 0o644)
            #expect(throws: (any Error).self) { try JWTSecret.load(environmentValue: nil, dataDirectory: data) }
            #expect(throws: AdminCommands.Usage.self) { try AdminCommands.token(arguments: ["--data", data, "--space", "s"], environment: [:]) }
            #expect(throws: AdminCommands.Usage.self) { try AdminCommands.token(arguments: ["--data", data, "--sub", "u", "--space", "../x"], environment: ["OUTPOST_JWT_SECRET": String(repeating: "k", count: 32)]) }
        }
    }

    /// The executable sets its umask to 077 before anything else, so what libraries create
    /// on their own (Foundation's caches under $HOME, which in the image is the data volume)
    /// is private too; the container test found such directories, mode 755, in /data.
    @Test func theServerRunsWithAPrivateUmask() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let server = try ServerProcess(dataDirectory: dir.appending("data"))
                defer { _ = server.stop() }
                let status = try String(contentsOfFile: "/proc/\(server.pid)/status", encoding: .utf8)
                let umask = status.split(separator: "\n").first { $0.hasPrefix("Umask:") }
                #expect(umask?.split(separator: "\t").last == "0077", "\(umask ?? "no Umask line")")
            }
        }
    }

    @Test func aKilledServerLosesNoAcknowledgedChangeAndReusesNoSeq() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let server = try ServerProcess(dataDirectory: dir.appending("data"))
                defer { server.kill9() }
                let token = try server.token(spaces: ["storm"], scope: "write")
                let port = server.port
                // Four writers push until the server dies; every acknowledged version is kept.
                let acknowledged = ThreadSafeList<(String, Int64)>()
                let group = DispatchGroup()
                for w in 0..<4 {
                    group.enter()
                    Thread.detachNewThread {
                        defer { group.leave() }
                        guard let client = try? TestHTTPClient(port: port, timeout: 10) else { return }
                        for b in 0..<100_000 {
                            let changes = (0..<20).map { put("w\(w)-\(b)-\($0)", "w\(w)-\(b)-\($0)") }
                            guard let r = try? push(server, token, "storm", changes, client: client), r.status == 200,
                                  let response = try? PushResponse.decode(r.body) else { return }
                            for result in response.results where result.status == .applied {
                                acknowledged.append((result.changeId, result.version!.seq))
                            }
                        }
                    }
                }
                try eventuallyBlocking("2,000 changes acknowledged before the kill", within: .seconds(120)) { acknowledged.count >= 2_000 }
                server.kill9()
                group.wait()
                let acked = acknowledged.all
                #expect(acked.count >= 2_000)

                try server.restart()
                let (epoch, records) = try pullAll(server, token, "storm")
                let stored = Dictionary(uniqueKeysWithValues: records.map { ($0.id, $0.version.seq) })
                var missing = 0
                for (changeId, seq) in acked where stored[changeId] != seq { missing += 1 }
                #expect(missing == 0, "acknowledged changes lost after kill -9: \(missing)")
                #expect(Set(records.map(\.version.seq)).count == records.count)
                // New writes continue after every seq handed out before the crash.
                let maxSeq = records.map(\.version.seq).max() ?? 0
                let after = try PushResponse.decode(try push(server, token, "storm", [put("after-crash", "after-crash")]).body)
                #expect(after.results[0].version!.seq > maxSeq)
                #expect(after.epoch == epoch)
                // A replay of an acknowledged change answers its original version.
                let (id, seq) = acked[acked.count / 2]
                let replay = try PushResponse.decode(try push(server, token, "storm", [put(id, id)]).body).results[0]
                #expect(replay.status == .applied && replay.replayed == true)
                #expect(replay.version == Version(epoch: epoch, seq: seq))
            }
        }
    }

    @Test func rotateEpochIsRefusedWhileServingAndGivesALaterEpoch() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let data = dir.appending("data")
                let server = try ServerProcess(dataDirectory: data)
                defer { server.stop() }
                let token = try server.token(spaces: ["sp"], scope: "write")
                _ = try push(server, token, "sp", [put("c1", "a")])
                let (before, _) = try pullAll(server, token, "sp")
                let refused = try ServerProcess.run(["rotate-epoch", "--data", data])
                #expect(refused.status != 0)
                #expect(server.stop() == 0)
                let rotated = try ServerProcess.run(["rotate-epoch", "--data", data])
                #expect(rotated.status == 0)
                let after = try #require(Epoch(rotated.output.trimmingCharacters(in: .whitespacesAndNewlines)))
                #expect(before < after)
                try server.restart()
                // The old cursor names a history that is gone.
                let old = try httpRequest(port: server.port, "GET", "/v1/spaces/sp/pull?since=\(before.rawValue).1", headers: [("Authorization", "Bearer \(token)")])
                #expect(old.status == 409)
                #expect(try ErrorEnvelope.decode(old.body).code == "epoch_changed")
                // The records are still there, under the new epoch, and a base of the old one is refused.
                let (epoch, records) = try pullAll(server, token, "sp")
                #expect(epoch == after && records.map(\.id) == ["a"])
                let stale = try PushResponse.decode(try push(server, token, "sp", [put("c2", "a", base: Version(epoch: before, seq: 1))]).body)
                #expect(stale.results[0].error?.code == "epoch_mismatch")
            }
        }
    }

    @Test func aSecondServerOnTheSameDataDirectoryIsRefused() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let data = dir.appending("data")
                let server = try ServerProcess(dataDirectory: data)
                defer { server.stop() }
                #expect(throws: (any Error).self) { _ = try ServerProcess(dataDirectory: data, timeout: 10) }
                #expect(try httpRequest(port: server.port, "GET", "/healthz").status == 200)
            }
        }
    }

    /// A data directory the server's user cannot write (a volume or host directory owned by
    /// root, as a container's unprivileged user meets it), or a store file in it owned by
    /// another user: the start is refused at once, exit 1, with one message that says what
    /// is not writable by whom and what to do, and nothing listens. scripts/container-test.sh
    /// checks the same in the image. Root writes anywhere, so as root the server runs as
    /// `nobody` (runuser); as another user, its own directory is made read-only.
    @Test func aDataDirectoryTheServerCannotWriteIsRefusedWithWhatToDo() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let asRoot = getuid() == 0
                if asRoot { chmod(dir.path, 0o755) }
                func start(_ data: String) throws -> Subprocess.Result {
                    let serve = [BuildProducts.executable("outpost-server"), "serve", "--host", "127.0.0.1", "--port", "0", "--data", data]
                    let environment = Subprocess.environment { $0.hasPrefix("OUTPOST_") }
                    return asRoot
                        ? try Subprocess.run("/usr/sbin/runuser", ["-u", "nobody", "--"] + serve, environment: environment, workingDirectory: "/")
                        : try Subprocess.run(serve[0], Array(serve.dropFirst()), environment: environment)
                }
                let user = asRoot ? "uid 65534" : "uid \(getuid())"

                // The directory itself: made by root (or read-only for its owner).
                let data = dir.appending("data")
                try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: false, attributes: [.posixPermissions: asRoot ? 0o755 : 0o500])
                let refused = try start(data)
                #expect(refused.status == 1, "exit \(refused.status): \(refused.error)")
                #expect(!refused.output.contains("listening on"), "\(refused.output)")
                #expect(refused.error.contains("data directory \(data) is not writable by this process (\(user)"), "\(refused.error)")
                #expect(refused.error.contains("mode 755 (Permission denied)") || refused.error.contains("mode 500 (Permission denied)"), "\(refused.error)")
                #expect(refused.error.contains("chown -R"), "\(refused.error)")
                #expect(!FileManager.default.fileExists(atPath: data + "/outpost.lock"))

                // A writable directory whose store file the user may not write.
                guard asRoot else { return }
                let owned = dir.appending("owned")
                try FileManager.default.createDirectory(atPath: owned, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
                chown(owned, 65534, 65534)
                #expect(FileManager.default.createFile(atPath: owned + "/outpost.sqlite", contents: Data(), attributes: [.posixPermissions: 0o644]))
                let store = try start(owned)
                #expect(store.status == 1, "exit \(store.status): \(store.error)")
                #expect(store.error.contains("data directory \(owned) is not writable by this process (uid 65534, gid 65534): \(owned)/outpost.sqlite in it is owned by uid 0"), "\(store.error)")
            }
        }
    }

    /// SIGTERM while a long poll waits: the pull is answered at once (an empty page, as at
    /// its deadline) and the server exits 0 without waiting out its grace period. Before,
    /// the drain held the shutdown until the grace ended and then cut the pull without an
    /// answer (with a container engine's stop timeout equal to the grace, the server was
    /// killed). Here the grace (120 s) and the pull's wait (60 s) are both longer than the
    /// test waits for the exit, so only an answered pull lets the server end in time.
    @Test func sigtermAnswersAWaitingLongPollAndEndsWithoutWaitingOutTheGrace() async throws {
        try await withTemporaryDirectory { dir in
            try await blocking {
                let server = try ServerProcess(dataDirectory: dir.appending("data"), arguments: ["--shutdown-grace", "120"])
                defer { server.stop() }
                let token = try server.token(spaces: ["sp"], scope: "read")
                let admin = try server.token(spaces: [], admin: true)
                let answer = Mutex<Result<TestResponse, any Error>?>(nil)
                let answered = DispatchSemaphore(value: 0)
                let port = server.port
                Thread {
                    let r = Result { try httpRequest(port: port, "GET", "/v1/spaces/sp/pull?wait=60000", headers: [("Authorization", "Bearer \(token)")], timeout: 90) }
                    answer.withLock { $0 = r }
                    answered.signal()
                }.start()
                try eventuallyBlocking("the pull waits") { try server.metric("outpost_long_polls_waiting", token: admin) == 1 }
                server.process.send(SIGTERM)
                let exit = server.process.wait(timeout: 45)
                #expect(exit?.status == 0, "the server did not exit 0 within 45 s of SIGTERM (grace 120 s): \(String(describing: exit))")
                #expect(answered.wait(timeout: .now() + 10) == .success, "the waiting pull was never answered")
                let response = try #require(answer.withLock { $0 }).get()
                #expect(response.status == 200, "\(response.status): \(response.text)")
                let page = try PullPage.decode(response.body)
                #expect(page.changes.isEmpty && !page.hasMore)
            }
        }
    }

    @Test func serveHelpListsEverySetting() async throws {
        let (status, output) = try await blocking { try ServerProcess.run(["serve", "--help"]) }
        #expect(status == 0)
        for option in Settings.options { #expect(output.contains(option.flag) && output.contains(option.env)) }
        #expect(output.contains("OUTPOST_JWT_SECRET"))
        let bad = try await blocking { try ServerProcess.run(["serve", "--max-changes-per-push", "zero"]) }
        #expect(bad.status == 64)
    }
}

/// An append-only list shared by threads.
final class ThreadSafeList<Element: Sendable>: Sendable {
    private let items = Mutex<[Element]>([])
    func append(_ e: Element) { items.withLock { $0.append(e) } }
    var count: Int { items.withLock { $0.count } }
    var all: [Element] { items.withLock { $0 } }
}
