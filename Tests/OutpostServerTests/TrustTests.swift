import Foundation
import OutpostCore
import OutpostCrypto
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// The server's secrets (issue 33): a real `outpost-server` child refuses, at start, a blank
/// or white-space entry of `OUTPOST_JWT_PREVIOUS_SECRETS` and any HS256 secret under 256 bits
/// (RFC 7518 section 3.2), naming which and how to make a good one.
@Suite(.serverLogs, .serialized) struct SecretRulesTests {
    /// A secret of 44 bytes, as `openssl rand -base64 32` makes them.
    static let good = "b3V0cG9zdC10ZXN0LXNlY3JldC0wMTIzNDU2Nzg5YWI="
    static let older = "b2xkZXItb3V0cG9zdC1zZWNyZXQtMDEyMzQ1Njc4OWFi"

    /// Starts a server with `environment` on a fresh data directory: the failure's text
    /// when it refuses to start; else what `whileUp` found wrong while it ran (a server that
    /// starts is stopped).
    static func start(_ environment: [String: String], arguments: [String] = [], secret: String = good,
                      _ whileUp: @escaping @Sendable (ServerProcess) throws -> [String] = { _ in [] }) async throws -> (refusal: String?, found: [String]) {
        try await withTemporaryDirectory { dir in
            try await blocking {
                do {
                    let server = try ServerProcess(dataDirectory: dir.appending("data"), secret: secret, arguments: arguments,
                                                   environment: environment, timeout: 20)
                    defer { server.stop() }
                    return (nil, try whileUp(server))
                } catch let failure as ProcessFailure {
                    return (failure.description, [])
                }
            }
        }
    }

    /// The status of `GET /v1/admin/status` with an admin token signed with `key`.
    static func adminStatus(_ server: ServerProcess, signedWith key: String) throws -> Int {
        let token = JWTAuthority(secret: Array(key.utf8)).sign(Claims(sub: "x", exp: Int64(Date().timeIntervalSince1970) + 60, spaces: [], admin: true))
        return try httpRequest(port: server.port, "GET", "/v1/admin/status", headers: [("Authorization", "Bearer \(token)")]).status
    }

    @Test(arguments: [("\(older), ", 2, 2), ("\(older),\t", 2, 2), (" ,\(older)", 1, 2), ("\(older),,\(older)", 2, 3)])
    func aBlankPreviousSecretIsRefusedAtStartNamingTheEntry(list: String, entry: Int, of count: Int) async throws {
        let (refusal, found) = try await Self.start(["OUTPOST_JWT_PREVIOUS_SECRETS": list]) { server in
            // Before the fix: the blank entry was a key, so anyone signed an admin token with it.
            try [" ", "\t"].map { "an admin token signed with \($0.debugDescription) got \(try Self.adminStatus(server, signedWith: $0))" }
        }
        let text = try #require(refusal, "the server started with OUTPOST_JWT_PREVIOUS_SECRETS=\(list.debugDescription): \(found)")
        #expect(text.contains("OUTPOST_JWT_PREVIOUS_SECRETS entry \(entry) of \(count)"), "\(text)")
    }

    @Test func olderSecretsThatKeepTheRulesStillVerify() async throws {
        let (refusal, found) = try await Self.start(["OUTPOST_JWT_PREVIOUS_SECRETS": "\(Self.older),\(Self.older)x"]) { server in
            let status = try Self.adminStatus(server, signedWith: Self.older)
            return status == 200 ? [] : ["a token signed with an older secret got \(status)"]
        }
        #expect(refusal == nil && found.isEmpty, "\(refusal ?? "") \(found)")
    }

    @Test(arguments: [" ", "a", "secret", "changeme", String(repeating: "x", count: 31)])
    func aWeakJWTSecretIsRefusedAtStart(secret: String) async throws {
        let (refusal, found) = try await Self.start([:], secret: secret) { server in
            ["a token signed with it got \(try Self.adminStatus(server, signedWith: secret))"]
        }
        let text = try #require(refusal, "the server started with OUTPOST_JWT_SECRET=\(secret.debugDescription) (\(secret.utf8.count) bytes): \(found)")
        #expect(text.contains("OUTPOST_JWT_SECRET is \(secret.utf8.count) bytes") && text.contains("at least 32 bytes") && text.contains("openssl rand -base64 32"),
                "\(text)")
    }

    @Test func weakPreviousAndWebhookSecretsAndSecretFilesAreRefused() async throws {
        var text = try #require(try await Self.start(["OUTPOST_JWT_PREVIOUS_SECRETS": "\(Self.older),changeme"]).refusal)
        #expect(text.contains("OUTPOST_JWT_PREVIOUS_SECRETS entry 2 of 2 is 8 bytes"), "\(text)")
        text = try #require(try await Self.start(["OUTPOST_WEBHOOK_SECRET": "changeme"], arguments: ["--webhook", "https://hooks.example.com/outpost"]).refusal)
        #expect(text.contains("OUTPOST_WEBHOOK_SECRET is 8 bytes") && text.contains("openssl rand -base64 32"), "\(text)")

        try await withTemporaryDirectory { dir in
            let data = dir.appending("data")
            // The files the server makes keep the rule: 64 hex digits, 256 bits of randomness.
            let token = try AdminCommands.token(arguments: ["--data", data, "--sub", "u", "--space", "s"], environment: [:])
            let made = try String(contentsOfFile: (data as NSString).appendingPathComponent(JWTSecret.fileName), encoding: .utf8)
            #expect(made.utf8.count == 64 && made.allSatisfy(\.isHexDigit))
            #expect(try JWTSecret.load(environmentValue: nil, dataDirectory: data) == Array(made.utf8))
            #expect(!token.isEmpty)
            let hook = try SecretFile.load(environmentValue: nil, dataDirectory: data, fileName: WebhookService.secretFileName, variable: "OUTPOST_WEBHOOK_SECRET")
            #expect(hook.count == 64)
            // A file an operator wrote too short is refused too, by the server and by `token`.
            let path = (data as NSString).appendingPathComponent(JWTSecret.fileName)
            try Data("changeme\n".utf8).write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
            #expect(throws: Settings.Invalid.self) { try JWTSecret.load(environmentValue: nil, dataDirectory: data) }
            let (status, _) = try await blocking { try ServerProcess.run(["token", "--data", data, "--sub", "u", "--space", "s"]) }
            #expect(status != 0)
            let refused = try await blocking { () -> String? in
                do {
                    let server = try ServerProcess(dataDirectory: data, secret: "", timeout: 20)
                    server.stop()
                    return nil
                } catch let failure as ProcessFailure { return failure.description }
            }
            #expect(refused?.contains("is 8 bytes; an HS256 secret needs at least 32 bytes") == true, "\(refused ?? "the server started")")
        }
    }
}

/// Every file and directory the server creates is readable by its owner only, whatever the
/// umask and however the data directory was made (issue 33), and `check` reports any that
/// others can read.
@Suite(.serverLogs, .serialized) struct PrivateFilesTests {
    enum Store: String, CaseIterable, Sendable { case sqlite, postgres }

    /// `path`'s permission bits.
    static func mode(_ path: String) -> mode_t? {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : nil
    }

    /// One request to a child server, which must answer `expect`.
    static func send(_ server: ServerProcess, _ method: String, _ path: String, headers: [(String, String)], body: [UInt8]?, expect: Int) throws -> TestResponse {
        let r = try httpRequest(port: server.port, method, path, headers: headers, body: body)
        guard r.status == expect else { throw ProcessFailure("\(method) \(path) answered \(r.status): \(r.text.prefix(200))") }
        return r
    }

    /// Every regular file and directory under `root` (not `root`), with its mode.
    static func tree(_ root: String) -> [Entry] {
        var out: [Entry] = []
        for name in ((try? FileManager.default.subpathsOfDirectory(atPath: root)) ?? []).sorted() {
            let path = (root as NSString).appendingPathComponent(name)
            var info = stat()
            guard lstat(path, &info) == 0, [S_IFREG, S_IFDIR].contains(info.st_mode & S_IFMT) else { continue }
            out.append(Entry(path: name, mode: info.st_mode & 0o7777))
        }
        return out
    }

    @Test(arguments: Store.allCases) func everyFileTheServerCreatesIsPrivateInADataDirectoryThatExists(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "private") : nil
        // The umask most systems run with: files 0644 and directories 0755 unless the server
        // says otherwise.
        let previous = umask(0o022)
        defer { umask(previous) }
        try await withTemporaryDirectory { dir in
            // Made beforehand, open to all, as a bind mount or systemd's StateDirectory= makes it.
            let data = dir.appending("data")
            #expect(mkdir(data, 0o755) == 0)
            chmod(data, 0o755)
            let files = try await blocking { try Self.serveAndList(data: data, store: url) }
            if url == nil {
                for name in ["outpost.sqlite", "outpost.sqlite-wal", "outpost.sqlite-shm", "jwt-secret", "outpost.lock", "server.log"] {
                    #expect(files.contains { $0.path == name }, "\(name) is missing: \(files.map(\.path))")
                }
            }
            #expect(files.contains { $0.path.hasPrefix("media/spaces/s/") && $0.path.hasSuffix(SHA256.hex(Array("private bytes".utf8))) }, "\(files.map(\.path))")
            let open = files.filter { $0.mode & 0o077 != 0 }.map { "\($0.path) \(String($0.mode, radix: 8))" }
            #expect(open.isEmpty, "readable by others: \(open)")
            // `check` agrees, on the stopped server's directory.
            if url == nil {
                let report = try CheckCommand.run(dataDirectory: data)
                #expect(report.isPrivate, "\(report.exposed)")
            }
        }
    }

    /// A file or directory and its permission bits.
    struct Entry: Sendable {
        let path: String
        let mode: mode_t
    }

    /// Runs a server child on `data` (on the PostgreSQL `store` when given), writes a record
    /// and a file through it, and lists what the data directory holds while it runs.
    static func serveAndList(data: String, store: String?) throws -> [Entry] {
        // Its log to a file of the data directory, which the server creates too.
        let server = try ServerProcess(dataDirectory: data, secret: store == nil ? "" : SecretRulesTests.good, arguments: store.map { ["--store", $0] } ?? [],
                                       environment: ["OUTPOST_LOG_FILE": (data as NSString).appendingPathComponent("server.log"), "OUTPOST_ACCESS_LOG": "true"])
        defer { server.stop() }
        let auth = ("Authorization", "Bearer \(try server.token(spaces: ["s"]))")
        let push = PushRequest(clientId: "c", changes: [Change(changeId: "c1", collection: "t", id: "a", op: .put, data: ["v": 1], baseVersion: nil)])
        _ = try send(server, "POST", "/v1/spaces/s/push", headers: [auth], body: push.encoded(), expect: 200)
        // A file, through the chunked door, so media/ holds a file and an upload.
        let file = Array("private bytes".utf8)
        let begin = JSONValue.object(["size": .number(JSONNumber(file.count)), "sha256": .string(SHA256.hex(file)), "contentType": "text/plain"]).encoded()
        let started = try send(server, "POST", "/v1/spaces/s/media/uploads", headers: [auth, ("Content-Type", "application/json")], body: begin, expect: 201)
        let upload = try JSONParser.parse(started.body)["uploadId"]?.stringValue ?? ""
        let digest = "sha-256=:\(Base64.encode(SHA256.hash(file))):"
        _ = try send(server, "PUT", "/v1/spaces/s/media/uploads/\(upload)/chunks/0",
                     headers: [auth, ("Content-Digest", digest), ("Content-Type", "application/octet-stream")], body: file, expect: 200)
        _ = try send(server, "POST", "/v1/spaces/s/media/uploads/\(upload)/finalize", headers: [auth], body: nil, expect: 200)
        // While it runs: the store with its -wal and -shm, the secret, the lock, media.
        return tree(data)
    }

    @Test func aStoreLeftOpenIsMadePrivateAtStartAndCheckReportsWhatOthersCanRead() async throws {
        let previous = umask(0o022)
        defer { umask(previous) }
        try await withTemporaryDirectory { dir in
            let data = dir.appending("data")
            try await blocking {
                let server = try ServerProcess(dataDirectory: data)
                server.stop()
            }
            // An earlier version, or a hand, left these open.
            let store = (data as NSString).appendingPathComponent("outpost.sqlite")
            let stray = (data as NSString).appendingPathComponent("notes.txt")
            try Data("x".utf8).write(to: URL(fileURLWithPath: stray))
            chmod(store, 0o644)
            chmod(stray, 0o644)
            let (status, output) = try await blocking { try ServerProcess.run(["check", "--data", data]) }
            #expect(status == 1, "\(output)")
            #expect(output.contains("EXPOSED  \(store) has mode 644: others can read it (chmod 600 \(store))"), "\(output)")
            #expect(output.contains("EXPOSED  \(stray) has mode 644"), "\(output)")
            // (The check's own read of the store made its -wal with the store's mode, 0644.)
            #expect(output.contains("exposed: "), "\(output)")
            // The server takes the group's and others' bits off its store when it opens it.
            try await blocking {
                let server = try ServerProcess(dataDirectory: data)
                server.stop()
            }
            #expect(Self.mode(store) == 0o600)
            for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: store + suffix) {
                #expect(Self.mode(store + suffix)! & 0o077 == 0)
            }
            chmod(stray, 0o600)
            let (after, text) = try await blocking { try ServerProcess.run(["check", "--data", data]) }
            #expect(after == 0 && !text.contains("EXPOSED"), "\(text)")
        }
    }
}

/// docs/security.md names the test that proves each claim: every one it names exists, a
/// Swift Testing test as `Suite.test` (a suite of that name declaring a test function of
/// that name) or a conformance check as `check:name`.
@Suite struct SecurityDocTests {
    /// The text of every Swift file under `directory` of the repository.
    static func sources(under directory: String) throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(directory)
        var text = ""
        for case let file as String in FileManager.default.enumerator(atPath: root.path) ?? FileManager.DirectoryEnumerator() where file.hasSuffix(".swift") {
            text += try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
        }
        return text
    }

    @Test func everyTestTheThreatModelNamesExists() throws {
        let page = try OperatorDocsTests.read("docs/security.md")
        let tests = try Self.sources(under: "Tests"), checks = try Self.sources(under: "Sources/OutpostConformance")
        let names = page.components(separatedBy: "`").enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
        var suites = 0, checked = 0
        for name in names {
            if name.hasPrefix("check:"), name != "check:name" {
                checked += 1
                #expect(checks.contains("Check(\"\(name.dropFirst(6))\""), "docs/security.md names \(name), which the conformance suite lacks")
                continue
            }
            let parts = name.split(separator: ".")
            guard parts.count <= 2, let suite = parts.first, suite.first?.isUppercase == true, suite.hasSuffix("Tests") else { continue }
            suites += 1
            #expect(tests.contains("struct \(suite) ") || tests.contains("extension \(suite) "), "docs/security.md names \(name): no suite \(suite)")
            if parts.count == 2 { #expect(tests.contains("func \(parts[1])("), "docs/security.md names \(name): no test \(parts[1])") }
        }
        #expect(suites > 30 && checked > 10, "docs/security.md names \(suites) tests and \(checked) checks")
    }
}
