import Foundation
import Synchronization
import Testing
import OutpostCore
import OutpostCrypto
import OutpostSQLite
import OutpostTestSupport
@testable import OutpostServer

/// An acknowledged change and the moment (monotonic ns) its answer arrived.
struct Ack: Sendable {
    let id: String
    let seq: Int64
    let at: UInt64
}

/// A flag one thread sets and others poll.
final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .relaxed) }
    func set() { value.store(true, ordering: .relaxed) }
}

/// `outpost-server backup`, `restore`, `check` and `healthcheck` as an operator runs them:
/// child processes on real data directories, with a real server under load.
@Suite(.offPoolWhileBlocking, .serialized, .serverLogs) struct OperatorCommandTests {
    /// What a finished `outpost-server` command printed.
    struct CommandResult: CustomStringConvertible {
        let status: Int32
        let stdout: String
        let stderr: String
        var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
    }

    /// Runs `outpost-server ARGS` to completion, keeping both outputs, with none of this
    /// process's `OUTPOST_` variables.
    /// Runs `outpost-server` to completion, off the concurrency pool (see `blocking`).
    static func run(_ arguments: [String], in dir: TemporaryDirectory, environment: [String: String] = [:]) async throws -> CommandResult {
        try await blocking { try runBlocking(arguments, in: dir, environment: environment) }
    }

    /// `run`, for code already on a thread of its own.
    static func runBlocking(_ arguments: [String], in dir: TemporaryDirectory, environment: [String: String] = [:]) throws -> CommandResult {
        let env = Subprocess.environment(adding: environment) { $0.hasPrefix("OUTPOST_") }
        let result = try Subprocess.run(BuildProducts.executable("outpost-server"), arguments, environment: env)
        return CommandResult(status: result.status, stdout: result.output, stderr: result.error)
    }

    static func push(_ port: Int, _ token: String, _ space: String, _ changes: [Change], client: TestHTTPClient? = nil) throws -> TestResponse {
        let body = PushRequest(clientId: "ops-test", changes: changes).encoded()
        let headers = [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")]
        if let client { return try client.request("POST", "/v1/spaces/\(space)/push", headers: headers, body: body) }
        return try httpRequest(port: port, "POST", "/v1/spaces/\(space)/push", headers: headers, body: body)
    }

    static func pullAll(_ port: Int, _ token: String, _ space: String) throws -> (Epoch, [RecordState]) {
        var records: [RecordState] = []
        var since = ""
        while true {
            let r = try httpRequest(port: port, "GET", "/v1/spaces/\(space)/pull?limit=5000\(since)", headers: [("Authorization", "Bearer \(token)")])
            guard r.status == 200 else { throw ProcessFailure("pull answered \(r.status): \(r.text)") }
            let page = try PullPage.decode(r.body)
            records += page.changes
            since = "&since=\(page.next.text)"
            if !page.hasMore { return (page.epoch, records) }
        }
    }

    /// Init, every chunk, finalize over blocking requests; returns the media id.
    static func upload(_ port: Int, _ token: String, _ space: String, _ file: [UInt8], finalize: Bool = true) throws -> (uploadId: String, mediaId: String) {
        let auth = ("Authorization", "Bearer \(token)")
        let body = UploadRequest(size: Int64(file.count), sha256: SHA256.hex(file), contentType: "image/png").encoded()
        let started = try httpRequest(port: port, "POST", "/v1/spaces/\(space)/media/uploads", headers: [auth, ("Content-Type", "application/json")], body: body)
        guard started.status == 201 else { throw ProcessFailure("init answered \(started.status): \(started.text)") }
        let state = try UploadState.decode(started.body)
        let chunks = chunked(file, state.chunkSize)
        for (index, piece) in chunks.enumerated() where finalize || index == 0 {
            let r = try httpRequest(port: port, "PUT", "/v1/spaces/\(space)/media/uploads/\(state.uploadId)/chunks/\(index)",
                                    headers: [auth, ("Content-Type", "application/octet-stream"), ("Content-Digest", contentDigest(piece))], body: piece)
            guard r.status == 200 else { throw ProcessFailure("chunk \(index) answered \(r.status): \(r.text)") }
        }
        guard finalize else { return (state.uploadId, state.sha256) }
        let done = try httpRequest(port: port, "POST", "/v1/spaces/\(space)/media/uploads/\(state.uploadId)/finalize", headers: [auth])
        guard done.status == 200 else { throw ProcessFailure("finalize answered \(done.status): \(done.text)") }
        return (state.uploadId, try UploadComplete.decode(done.body).media.mediaId)
    }

    static func mediaPath(_ data: String, _ space: String, _ id: String) -> String {
        "\(data)/media/spaces/\(space)/\(id.prefix(2))/\(id)"
    }

    static func flipByte(_ path: String, at offset: Int) throws {
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        bytes[offset] ^= 0x01
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    static func monotonicNanos() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    // MARK: Backup under load, restore, serve

    /// Every executable and every command answers `--help` (and `-h`, and `help COMMAND`)
    /// on standard output with exit 0; no command and an unknown one are usage errors (64).
    @Test func everyCommandAnswersHelpWithExitZero() async throws {
        try await withTemporaryDirectory(prefix: "outpost-help") { dir in
            for flag in ["--help", "-h"] {
                let top = try await Self.run([flag], in: dir)
                #expect(top.status == 0 && top.stdout.hasPrefix("usage: outpost-server COMMAND"), "\(flag): \(top.status) \(top.stderr)")
            }
            for command in ["serve", "token", "rotate-epoch", "backup", "restore", "check", "healthcheck"] {
                for arguments in [[command, "--help"], [command, "-h"], ["help", command], [command, "--data", dir.appending("d"), "--help"]] {
                    let r = try await Self.run(arguments, in: dir)
                    #expect(r.status == 0, "\(arguments): exit \(r.status), \(r.stderr)")
                    #expect(r.stdout.hasPrefix("usage: outpost-server \(command)"), "\(arguments): \(r.stdout.prefix(80))")
                }
            }
            #expect(try await Self.run([], in: dir).status == 64)
            #expect(try await Self.run(["frobnicate"], in: dir).status == 64)
            #expect(try await Self.run(["help", "frobnicate"], in: dir).status == 64)
            // The other executables.
            // The command-line client's binary is `outpost-cli`; it is installed, and named in
            // its usage, as `outpost`.
            for (binary, name, arguments) in [("outpost-cli", "outpost", ["--help"]), ("outpost-cli", "outpost", ["sync", "--help"]),
                                              ("outpost-cli", "outpost", ["help"]), ("outpost-conformance", "outpost-conformance", ["--help"]),
                                              ("outpost-sim", "outpost-sim", ["--help"])] {
                let r = try await blocking { try Subprocess.run(BuildProducts.executable(binary), arguments) }
                #expect(r.status == 0 && r.output.hasPrefix("usage: \(name)"), "\(binary) \(arguments): \(r.status) \(r.error.prefix(200))")
            }
        }
    }

    @Test func aBackupTakenDuringAPushLoadRestoresEveryChangeAcknowledgedBeforeItUnderANewEpoch() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            try await blocking {
                let data = dir.appending("data")
                let server = try ServerProcess(dataDirectory: data, arguments: ["--chunk-size", "4096"])
                defer { server.stop() }
                let token = try server.token(spaces: ["load", "pics"], scope: "write")
                let port = server.port
                // A published file (5 chunks) and an open upload, before the load.
                let picture = mediaBytes(18_000, seed: 7)
                let (_, mediaId) = try Self.upload(port, token, "pics", picture)
                let (openUpload, _) = try Self.upload(port, token, "pics", mediaBytes(9_000, seed: 8), finalize: false)
                // And an open tus upload, with bytes.
                let tusHeaders = [("Authorization", "Bearer \(token)"), ("Tus-Resumable", "1.0.0")]
                let tus = try #require(try httpRequest(port: port, "POST", "/v1/spaces/pics/tus", headers: tusHeaders + [("Upload-Length", "5000")]).header("Location"))
                let appended = try httpRequest(port: port, "PATCH", tus, headers: tusHeaders + [("Upload-Offset", "0"), ("Content-Type", "application/offset+octet-stream")],
                                               body: mediaBytes(1000, seed: 9))
                #expect(appended.status == 204)

                let first = try PushResponse.decode(try Self.push(port, token, "load", [put("first", "first")]).body)
                let oldEpoch = first.epoch
                let acks = ThreadSafeList<Ack>()
                // 1 KiB records: the store grows to megabytes, so the copy takes a while.
                let filler = String(repeating: "outpost ", count: 128)
                acks.append(Ack(id: "first", seq: first.results[0].version!.seq, at: Self.monotonicNanos()))

                // Four pushers until told to stop; each acknowledged change with the moment
                // its answer arrived (the commit happened before that).
                let stop = StopFlag()
                let group = DispatchGroup()
                for w in 0..<4 {
                    group.enter()
                    Thread.detachNewThread {
                        defer { group.leave() }
                        guard let client = try? TestHTTPClient(port: port, timeout: 30) else { return }
                        var batch = 0
                        while !stop.isSet {
                            let changes = (0..<10).map { put("w\(w)-\(batch)-\($0)", "w\(w)-\(batch)-\($0)", ["text": .string(filler)]) }
                            batch += 1
                            guard let r = try? Self.push(port, token, "load", changes, client: client), r.status == 200,
                                  let response = try? PushResponse.decode(r.body) else { return }
                            let at = Self.monotonicNanos()
                            for result in response.results where result.status == .applied {
                                acks.append(Ack(id: result.changeId, seq: result.version!.seq, at: at))
                            }
                        }
                    }
                }
                do {
                    try eventuallyBlocking("5,000 changes acknowledged before the backup", within: .seconds(120)) { acks.count >= 5_000 }
                } catch {
                    stop.set()
                    group.wait()
                    throw ProcessFailure("the pushers stopped after \(acks.count) acknowledged changes: \(error)")
                }
                let backupPath = dir.appending("backups/first")
                let backupBegan = Self.monotonicNanos()
                let backup = try Self.runBlocking(["backup", "--data", data, "--out", backupPath], in: dir)
                let backupEnded = Self.monotonicNanos()
                let countAfterBackup = acks.count
                // The load goes on after the backup, too: it never stopped the server.
                let goneOn = Result { try eventuallyBlocking("200 more changes acknowledged after the backup", within: .seconds(60)) { acks.count >= countAfterBackup + 200 } }
                stop.set()
                group.wait()
                try goneOn.get()
                #expect(backup.status == 0, "\(backup)")
                #expect(acks.count >= countAfterBackup + 200, "pushes kept being acknowledged during and after the backup")
                let before = acks.all.filter { $0.at < backupBegan }
                let during = acks.all.filter { $0.at >= backupBegan && $0.at <= backupEnded }
                print("backup under load: \(before.count) changes acknowledged before it began, \(during.count) while it ran (\((backupEnded - backupBegan) / 1_000_000) ms), \(acks.count) in all")
                #expect(before.count >= 5_000)
                #expect(server.stop() == 0)

                // The manifest describes the snapshot: the epoch, the file, no open upload.
                let manifest = try BackupManifest.read(backup: backupPath)
                #expect(manifest.epoch == oldEpoch.rawValue)
                #expect(manifest.media == [BackupManifest.MediaFile(space: "pics", sha256: mediaId, size: Int64(picture.count))])
                #expect(manifest.openUploadsLeftOut == 2)
                #expect(!manifest.includesSecret && !FileManager.default.fileExists(atPath: backupPath + "/jwt-secret"))
                #expect(manifest.counts.records >= Int64(before.count))
                let storeMode = try FileManager.default.attributesOfItem(atPath: backupPath + "/outpost.sqlite")[.posixPermissions] as? Int
                #expect(storeMode == 0o600)
                #expect(try Self.runBlocking(["check", "--data", data], in: dir).status == 0)

                // Restore into a fresh directory: a new, later epoch, printed alone.
                let restoredData = dir.appending("restored")
                let restore = try Self.runBlocking(["restore", "--from", backupPath, "--data", restoredData], in: dir)
                #expect(restore.status == 0, "\(restore)")
                let newEpoch = try #require(Epoch(restore.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(restore)")
                #expect(oldEpoch < newEpoch)
                let check = try Self.runBlocking(["check", "--data", restoredData], in: dir)
                #expect(check.status == 0, "\(check)")

                // A server on the restored directory serves every change acknowledged before
                // the backup began, at the seq it was acknowledged with, under the new epoch.
                let restored = try ServerProcess(dataDirectory: restoredData, arguments: ["--chunk-size", "4096"])
                defer { restored.stop() }
                let info = try JSONParser.parse(try httpRequest(port: restored.port, "GET", "/v1/info").body)
                #expect(info["epoch"]?.stringValue == newEpoch.rawValue)
                let (epoch, records) = try Self.pullAll(restored.port, token, "load")
                #expect(epoch == newEpoch)
                let stored = Dictionary(uniqueKeysWithValues: records.map { ($0.id, $0.version.seq) })
                let missing = before.filter { stored[$0.id] != $0.seq }
                #expect(missing.isEmpty, "\(missing.count) changes acknowledged before the backup are missing, e.g. \(missing.prefix(3).map(\.id))")
                // A snapshot, not a mix: its records are exactly the first N seqs.
                let seqs = records.map(\.version.seq).sorted()
                #expect(seqs == Array(1...Int64(seqs.count)))
                // Devices holding the old history are told so.
                let old = try httpRequest(port: restored.port, "GET", "/v1/spaces/load/pull?since=\(oldEpoch.rawValue).1", headers: [("Authorization", "Bearer \(token)")])
                #expect(old.status == 409 && errorCode(old) == "epoch_changed")
                // Writes continue after the restored head.
                let next = try PushResponse.decode(try Self.push(restored.port, token, "load", [put("after-restore", "after-restore")]).body)
                #expect(next.epoch == newEpoch && next.results[0].version!.seq == Int64(seqs.count) + 1)
                // The media file is back and downloadable; the open upload is not.
                let download = try httpRequest(port: restored.port, "GET", "/v1/spaces/pics/media/\(mediaId)", headers: [("Authorization", "Bearer \(token)")])
                #expect(download.status == 200 && download.body == picture)
                let upload = try httpRequest(port: restored.port, "GET", "/v1/spaces/pics/media/uploads/\(openUpload)", headers: [("Authorization", "Bearer \(token)")])
                #expect(upload.status == 404 && errorCode(upload) == "upload_not_found")
                #expect(try httpRequest(port: restored.port, "HEAD", tus, headers: tusHeaders).status == 404)
            }
        }
    }

    @Test func restoreIsRefusedOnARunningServerAndOverAStoreWithoutForceAndStaysAheadOfTheReplacedEpoch() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            try await blocking {
                let data = dir.appending("data")
                let server = try ServerProcess(dataDirectory: data)
                defer { server.stop() }
                let token = try server.token(spaces: ["sp"], scope: "write")
                #expect(try Self.push(server.port, token, "sp", [put("c1", "a"), put("c2", "b")]).status == 200)
                let backupPath = dir.appending("bk")
                let backup = try Self.runBlocking(["backup", "--data", data, "--out", backupPath], in: dir)
                #expect(backup.status == 0, "\(backup)")
                let backupEpoch = try #require(Epoch(try BackupManifest.read(backup: backupPath).epoch))
                // Backing up into an existing path is a usage error; nothing is touched.
                #expect(try Self.runBlocking(["backup", "--data", data, "--out", backupPath], in: dir).status == 64)

                // The running server holds the directory's lock: restore fails and says why.
                let refused = try Self.runBlocking(["restore", "--from", backupPath, "--data", data, "--force"], in: dir)
                #expect(refused.status == 1 && refused.stderr.contains("in use"), "\(refused)")
                #expect(try httpRequest(port: server.port, "GET", "/readyz").status == 200)
                #expect(server.stop() == 0)

                // Over an existing store: only with --force.
                let noForce = try Self.runBlocking(["restore", "--from", backupPath, "--data", data], in: dir)
                #expect(noForce.status == 1 && noForce.stderr.contains("--force"), "\(noForce)")

                // The store being replaced has an epoch later than any the clock would make
                // (a clock that went backwards, or a history from the future): the restored
                // epoch must still sort after it, and after the backup's.
                let future = Epoch("ZZZZZZZZZZ0000000000000000")!
                do {
                    let db = try Connection(path: data + "/outpost.sqlite")
                    defer { db.close() }
                    try db.run("UPDATE meta SET value = ? WHERE key = 'epoch'", [.text(future.rawValue)])
                }
                let forced = try Self.runBlocking(["restore", "--from", backupPath, "--data", data, "--force"], in: dir)
                #expect(forced.status == 0, "\(forced)")
                let newEpoch = try #require(Epoch(forced.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
                #expect(future < newEpoch && backupEpoch < newEpoch)
                do {
                    let db = try Connection(path: data + "/outpost.sqlite", flags: [.readOnly])
                    defer { db.close() }
                    // Both join the restored store's history (docs/protocol.md section 4, "Re-offers").
                    let ended = Set(try SQLiteSyncStore.endedEpochs(db).map(\.0))
                    #expect(ended.contains(future) && ended.contains(backupEpoch), "\(ended)")
                }
                try server.restart()
                let (epoch, records) = try Self.pullAll(server.port, token, "sp")
                #expect(epoch == newEpoch && records.map(\.id).sorted() == ["a", "b"])
                // Each restored state is its version in the backup's history (protocol 1.1).
                for record in records {
                    let own = Version(epoch: backupEpoch, seq: record.version.seq)
                    #expect(record.lineage == own && record.sameAs == own, "\(record.id): lineage \(record.lineage?.text ?? "none"), sameAs \(record.sameAs?.text ?? "none")")
                }
            }
        }
    }

    @Test func aDamagedBackupIsRefusedBeforeTheDirectoryIsTouched() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            try await blocking {
                let data = dir.appending("data")
                let server = try ServerProcess(dataDirectory: data)
                let token = try server.token(spaces: ["pics"], scope: "write")
                let file = mediaBytes(3_000, seed: 3)
                let (_, mediaId) = try Self.upload(server.port, token, "pics", file)
                #expect(server.stop() == 0)
                let backupPath = dir.appending("bk")
                #expect(try Self.runBlocking(["backup", "--data", data, "--out", backupPath, "--include-secret"], in: dir).status == 1,
                        "no jwt-secret file: the server was given OUTPOST_JWT_SECRET")
                #expect(!FileManager.default.fileExists(atPath: backupPath), "a failed backup leaves nothing at PATH")
                #expect(try Self.runBlocking(["backup", "--data", data, "--out", backupPath], in: dir).status == 0)

                // A flipped byte in the backup's copy of the media file.
                let copy = Self.mediaPath(backupPath, "pics", mediaId)
                try Self.flipByte(copy, at: 100)
                let target = dir.appending("target")
                let damagedMedia = try Self.runBlocking(["restore", "--from", backupPath, "--data", target], in: dir)
                #expect(damagedMedia.status == 1 && damagedMedia.stderr.contains(mediaId), "\(damagedMedia)")
                #expect(!FileManager.default.fileExists(atPath: target + "/outpost.sqlite"))
                try Self.flipByte(copy, at: 100)

                // A flipped byte in the backup's store.
                try Self.flipByte(backupPath + "/outpost.sqlite", at: 5_000)
                let damagedStore = try Self.runBlocking(["restore", "--from", backupPath, "--data", target], in: dir)
                #expect(damagedStore.status == 1 && damagedStore.stderr.contains("damaged"), "\(damagedStore)")
                #expect(!FileManager.default.fileExists(atPath: target + "/outpost.sqlite"))
                #expect(try Self.runBlocking(["restore", "--from", dir.appending("nothing-here"), "--data", target], in: dir).status == 1)
                #expect(try Self.runBlocking(["restore", "--data", target], in: dir).status == 64)
            }
        }
    }

    @Test func backupIncludesTheSecretFileOnlyWhenAskedAndRestoreKeepsAnExistingOne() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            let data = dir.appending("data")
            // A store and a secret file, as a server without OUTPOST_JWT_SECRET leaves them.
            let app = try OutpostApplication(settings: { var s = Settings(); s.dataDirectory = data; s.accessLog = false; return s }(), environment: [:])
            await app.close()
            let secret = try String(contentsOfFile: data + "/jwt-secret", encoding: .utf8)
            let manifest = try BackupCommand.run(dataDirectory: data, output: dir.appending("bk"), includeSecret: true)
            #expect(manifest.includesSecret)
            #expect(try String(contentsOfFile: dir.appending("bk/jwt-secret"), encoding: .utf8) == secret)

            let fresh = dir.appending("fresh")
            let report = try RestoreCommand.run(backup: dir.appending("bk"), dataDirectory: fresh)
            #expect(report.restoredSecret && report.replacedEpoch == nil)
            #expect(try String(contentsOfFile: fresh + "/jwt-secret", encoding: .utf8) == secret)
            let mode = try FileManager.default.attributesOfItem(atPath: fresh + "/jwt-secret")[.posixPermissions] as? Int
            #expect(mode == 0o600)

            // A directory with its own secret keeps it.
            let own = dir.appending("own")
            try FileManager.default.createDirectory(atPath: own, withIntermediateDirectories: true)
            _ = FileManager.default.createFile(atPath: own + "/jwt-secret", contents: Data("their-own".utf8), attributes: [.posixPermissions: 0o600])
            let second = try RestoreCommand.run(backup: dir.appending("bk"), dataDirectory: own)
            #expect(!second.restoredSecret)
            #expect(try String(contentsOfFile: own + "/jwt-secret", encoding: .utf8) == "their-own")
            #expect(report.backupEpoch < report.epoch && second.backupEpoch < second.epoch)
        }
    }

    // MARK: check

    @Test func checkFindsAFlippedByteAMissingFileADamagedOrphanAndATruncatedStore() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            try await blocking {
                let data = dir.appending("data")
                let server = try ServerProcess(dataDirectory: data, arguments: ["--chunk-size", "4096"])
                defer { server.stop() }
                let token = try server.token(spaces: ["pics", "notes"], scope: "write")
                let file = mediaBytes(10_000, seed: 11)
                let (_, mediaId) = try Self.upload(server.port, token, "pics", file)
                for b in 0..<20 {
                    let changes = (0..<50).map { put("n\(b)-\($0)", "n\(b)-\($0)", ["text": .string(String(repeating: "x", count: 200))]) }
                    #expect(try Self.push(server.port, token, "notes", changes).status == 200)
                }
                // Read-only and lock-free: it runs beside the server.
                let running = try Self.runBlocking(["check", "--data", data], in: dir)
                #expect(running.status == 0, "\(running)")
                #expect(server.stop() == 0)

                let sound = try Self.runBlocking(["check", "--data", data], in: dir)
                #expect(sound.status == 0, "\(sound)")
                #expect(sound.stdout.contains("integrity_check ok") && sound.stdout.hasSuffix("sound\n"))

                // One flipped byte in the published file.
                let path = Self.mediaPath(data, "pics", mediaId)
                try Self.flipByte(path, at: 4_321)
                let flipped = try Self.runBlocking(["check", "--data", data], in: dir)
                #expect(flipped.status == 1, "\(flipped)")
                #expect(flipped.stdout.contains("DAMAGED  media file \(path) is damaged"), "\(flipped)")
                #expect(flipped.stdout.contains("damaged: 1 problem"))
                try Self.flipByte(path, at: 4_321)

                // The file gone.
                try FileManager.default.moveItem(atPath: path, toPath: dir.appending("aside"))
                let gone = try Self.runBlocking(["check", "--data", data], in: dir)
                #expect(gone.status == 1 && gone.stdout.contains("\(path) is missing"), "\(gone)")
                try FileManager.default.moveItem(atPath: dir.appending("aside"), toPath: path)

                // A whole file without a row is a warning; a damaged one is damage (a finalize
                // of that hash would adopt it).
                let orphan = mediaBytes(500, seed: 12)
                let orphanPath = Self.mediaPath(data, "pics", SHA256.hex(orphan))
                // (Private, as the server writes them: `check` reports files others can read.)
                try FileManager.default.createDirectory(atPath: (orphanPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
                try Data(orphan).write(to: URL(fileURLWithPath: orphanPath))
                chmod(orphanPath, 0o600)
                let warned = try Self.runBlocking(["check", "--data", data], in: dir)
                #expect(warned.status == 0 && warned.stdout.contains("warning  media file \(orphanPath) has no row"), "\(warned)")
                try Self.flipByte(orphanPath, at: 0)
                let badOrphan = try Self.runBlocking(["check", "--data", data], in: dir)
                #expect(badOrphan.status == 1 && badOrphan.stdout.contains("DAMAGED  media file \(orphanPath)"), "\(badOrphan)")
                try FileManager.default.removeItem(atPath: orphanPath)

                // A truncated store (a copy of the directory, the store cut in half).
                let cut = dir.appending("cut")
                try FileManager.default.copyItem(atPath: data, toPath: cut)
                let store = cut + "/outpost.sqlite"
                let size = try #require(try FileManager.default.attributesOfItem(atPath: store)[.size] as? Int)
                #expect(size > 64 * 1024)
                #expect(truncate(store, off_t(size / 2)) == 0)
                let truncated = try Self.runBlocking(["check", "--data", cut], in: dir)
                #expect(truncated.status == 1, "\(truncated)")
                #expect(truncated.stdout.contains("DAMAGED  store \(store)"), "\(truncated)")
                #expect(truncated.stdout.contains("integrity_check") || truncated.stdout.contains("malformed"), "\(truncated)")

                // And the original is still sound; usage mistakes are 64.
                #expect(try Self.runBlocking(["check", "--data", data], in: dir).status == 0)
                #expect(try Self.runBlocking(["check", "--data", dir.appending("no-such-dir")], in: dir).status == 64)
                #expect(try Self.runBlocking(["check", "--data", data, "--bogus"], in: dir).status == 64)
            }
        }
    }

    @Test func checkReportsStoreInvariantsInProcess() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            let data = dir.appending("data")
            let app = try OutpostApplication(settings: { var s = Settings(); s.dataDirectory = data; s.accessLog = false; return s }(), environment: ["OUTPOST_JWT_SECRET": String(repeating: "k", count: 32)])
            _ = try await app.store.push(space: "sp", clientId: "c", items: [prepared("c1", id: "a", base: nil), prepared("c2", id: "b", base: nil)], now: 1)
            await app.close()
            #expect(try CheckCommand.run(dataDirectory: data).isSound)
            do {
                let db = try Connection(path: data + "/outpost.sqlite")
                defer { db.close() }
                // A head below a record's seq: the next push would hand that seq out again.
                try db.run("UPDATE spaces SET head_seq = 1")
                try db.run("UPDATE meta SET value = 'not an epoch!' WHERE key = 'epoch'")
            }
            let report = try CheckCommand.run(dataDirectory: data)
            #expect(!report.isSound)
            #expect(report.problems.contains { $0.contains("space sp: a record has seq 2 above the space's head 1") }, "\(report.problems)")
            #expect(report.problems.contains { $0.contains("meta.epoch") }, "\(report.problems)")
            #expect(throws: AdminCommands.Usage.self) { try CheckCommand.run(dataDirectory: dir.appending("absent")) }
        }
    }

    // MARK: healthcheck

    @Test func healthcheckExitsZeroOnlyWhileTheServerIsReady() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            try await blocking {
                let server = try ServerProcess(dataDirectory: dir.appending("data"))
                let url = "http://127.0.0.1:\(server.port)/readyz"
                let ready = try Self.runBlocking(["healthcheck", "--url", url], in: dir)
                #expect(ready.status == 0 && ready.stdout.contains(": 200"), "\(ready)")
                let missing = try Self.runBlocking(["healthcheck", "--url", "http://127.0.0.1:\(server.port)/no-such-path"], in: dir)
                #expect(missing.status == 1 && missing.stdout.contains(": 404"), "\(missing)")
                #expect(server.stop() == 0)
                let down = try Self.runBlocking(["healthcheck", "--url", url, "--timeout", "2"], in: dir)
                #expect(down.status == 1 && down.stderr.contains("cannot connect"), "\(down)")
                #expect(try Self.runBlocking(["healthcheck", "--url", "https://127.0.0.1/readyz"], in: dir).status == 64)
            }
        }
        #expect(HealthCheckCommand.defaultURL(environment: [:]) == "http://127.0.0.1:8080/readyz")
        #expect(HealthCheckCommand.defaultURL(environment: ["OUTPOST_HOST": "0.0.0.0", "OUTPOST_PORT": "9000"]) == "http://127.0.0.1:9000/readyz")
        #expect(HealthCheckCommand.defaultURL(environment: ["OUTPOST_HOST": "::"]) == "http://[::1]:8080/readyz")
        #expect(HealthCheckCommand.defaultURL(environment: ["OUTPOST_HOST": "10.0.0.5"]) == "http://10.0.0.5:8080/readyz")
    }

    @Test func unknownCommandsAndOptionsAreUsageErrors() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            let none = try await Self.run(["frobnicate"], in: dir)
            #expect(none.status == 64)
            for command in ["backup", "restore", "check", "healthcheck"] { #expect(none.stderr.contains(command)) }
            #expect(try await Self.run(["backup", "--data", dir.path], in: dir).status == 64, "--out is required")
            #expect(try await Self.run(["backup", "--data", dir.appending("nothing"), "--out", dir.appending("b")], in: dir).status == 64)
            #expect(try await Self.run(["restore", "--from"], in: dir).status == 64)
            // A PostgreSQL store is backed up with PostgreSQL's tools, and said so.
            let postgres = try await Self.run(["backup", "--data", dir.path, "--out", dir.appending("b")], in: dir, environment: ["OUTPOST_STORE": "postgres://u@localhost/outpost"])
            #expect(postgres.status == 64 && postgres.stderr.contains("pg_dump"), "\(postgres)")
            #expect(try await Self.run(["check", "--data", dir.path, "--store", "postgresql://h/db"], in: dir).status == 64)
        }
    }

    @Test func aMediaDirectoryOutsideTheDataDirectoryIsBackedUpRestoredAndChecked() async throws {
        try await withTemporaryDirectory(prefix: "outpost-ops") { dir in
            let data = dir.appending("data"), media = dir.appending("shared-media")
            let app = try OutpostApplication(settings: { var s = Settings(); s.dataDirectory = data; s.mediaDirectory = media; s.accessLog = false; return s }(),
                                             environment: ["OUTPOST_JWT_SECRET": String(repeating: "k", count: 32)])
            await app.close()
            // A published file and its row, as finalize leaves them.
            let file = mediaBytes(2_000, seed: 21)
            let id = SHA256.hex(file)
            let path = "\(media)/spaces/sp/\(id.prefix(2))/\(id)"
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(file).write(to: URL(fileURLWithPath: path))
            do {
                let db = try Connection(path: data + "/outpost.sqlite")
                defer { db.close() }
                try db.run("INSERT INTO media(space, media_id, size, content_type, filename, created_at) VALUES ('sp', ?, ?, 'image/png', NULL, 1)",
                           [.text(id), .integer(Int64(file.count))])
            }
            #expect(try CheckCommand.run(dataDirectory: data, mediaDirectory: media).isSound)
            #expect(!(try CheckCommand.run(dataDirectory: data).isSound), "without the media directory the file is missing")
            let manifest = try BackupCommand.run(dataDirectory: data, output: dir.appending("bk"), mediaDirectory: media)
            #expect(manifest.media.map(\.sha256) == [id])
            #expect(FileManager.default.contents(atPath: dir.appending("bk/media/spaces/sp/\(id.prefix(2))/\(id)")) == Data(file))
            let restoredMedia = dir.appending("restored-media")
            _ = try RestoreCommand.run(backup: dir.appending("bk"), dataDirectory: dir.appending("restored"), mediaDirectory: restoredMedia)
            #expect(FileManager.default.contents(atPath: restoredMedia + "/spaces/sp/\(id.prefix(2))/\(id)") == Data(file))
            #expect(try CheckCommand.run(dataDirectory: dir.appending("restored"), mediaDirectory: restoredMedia).isSound)
        }
    }
}
