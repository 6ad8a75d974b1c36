import Foundation
import OutpostCore
import OutpostCrypto
import OutpostPostgres
import OutpostSQLite
import OutpostTestSupport
import Testing
import OutpostHTTP
@testable import OutpostServer

// tus 1.0.0 uploads (docs/media.md, "tus"): tuspy, a standard client no one here wrote,
// against a real `outpost-server` child; raw HTTP for the protocol's edge cases; the
// parsers and the media schema's upgrade on their own.

// MARK: - tuspy

/// tuspy at the version scripts/install-deps.sh pins, in the venv it makes, driving
/// Tests/OutpostServerTests/tus/tus_client.py. A missing tuspy is a failure, never a skip:
/// `make test` installs it.
enum TusPy {
    static let root = SchemathesisTests.root

    /// The venv's python, checked to import tuspy at the pinned version.
    static func python() throws -> String {
        let version = try PinnedTools.version("tuspy")
        let path = PinnedTools.venvPath("tuspy", version: version, "python")
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw ProcessFailure("tuspy \(version) is not installed at \(path): run scripts/install-deps.sh test")
        }
        let check = try Subprocess.run(path, ["-c", "import importlib.metadata as m, tusclient; print(m.version('tuspy'))"], errorToOutput: true)
        guard check.status == 0, check.output.trimmingCharacters(in: .whitespacesAndNewlines) == version else {
            throw ProcessFailure("\(path) does not have tuspy \(version): \(check.output)")
        }
        return path
    }

    /// What one run of the script printed.
    struct Run: Sendable, CustomStringConvertible {
        let status: String
        let url: String?
        let startOffset: Int?
        let offset: Int?
        let sent: Int
        let patches: Int
        let mediaId: String?
        let httpStatus: Int?
        let raw: String
        var description: String { raw }
    }

    /// Uploads `file` (a path) to `endpoint` with tuspy; blocks until the script ends.
    static func upload(endpoint: String, token: String, file: String, chunkSize: Int, checksum: Bool = true,
                       store: String? = nil, stopAfter: Int? = nil, metadata: [String: String] = [:]) throws -> Run {
        var arguments = [root.appendingPathComponent("Tests/OutpostServerTests/tus/tus_client.py").path,
                         "--endpoint", endpoint, "--token", token, "--file", file, "--chunk-size", String(chunkSize)]
        if checksum { arguments.append("--checksum") }
        if let store { arguments += ["--store", store] }
        if let stopAfter { arguments += ["--stop-after", String(stopAfter)] }
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) { arguments += ["--metadata", "\(key)=\(value)"] }
        let child = try Subprocess(try python(), arguments, output: .capture, error: .capture)
        guard let ended = child.wait(timeout: Double(testDeadlineSeconds)) else {
            child.stop(grace: 5)
            throw ProcessFailure("tus_client.py did not finish within \(testDeadlineSeconds) s")
        }
        child.waitForStreams()
        let out = child.outputText().trimmingCharacters(in: .whitespacesAndNewlines)
        guard let line = out.split(separator: "\n").last, let json = try? JSONParser().parse(Array(line.utf8)) else {
            throw ProcessFailure("tus_client.py (\(ended)) printed no result: \(out) \(child.outputText(2))")
        }
        func int(_ key: String) -> Int? { json[key]?.int64Value.map { Int($0) } }
        return Run(status: json["status"]?.stringValue ?? "", url: json["url"]?.stringValue, startOffset: int("startOffset"),
                   offset: int("offset"), sent: int("sent") ?? -1, patches: int("patches") ?? -1, mediaId: json["mediaId"]?.stringValue,
                   httpStatus: int("httpStatus"), raw: String(line) + (ended == .exited(0) ? "" : " " + child.outputText(2).suffix(600)))
    }
}

/// A tus client over raw HTTP, one connection a request.
struct TusRaw: Sendable {
    let port: Int
    let token: String?

    func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
              version: String? = Tus.version, token: String?? = nil) async throws -> TestResponse {
        var all = headers
        if let version { all.append(("Tus-Resumable", version)) }
        if let bearer = token ?? self.token { all.append(("Authorization", "Bearer \(bearer)")) }
        let fields = all, port = self.port
        return try await blocking { try httpRequest(port: port, method, path, headers: fields, body: body) }
    }

    func create(_ space: String, length: Int, metadata: String? = nil) async throws -> TestResponse {
        var headers = [("Upload-Length", String(length))]
        if let metadata { headers.append(("Upload-Metadata", metadata)) }
        return try await send("POST", "/v1/spaces/\(space)/tus", headers: headers)
    }

    func head(_ location: String) async throws -> TestResponse {
        try await send("HEAD", location)
    }

    func patch(_ location: String, offset: Int, _ bytes: [UInt8], checksum: String? = nil, contentType: String = Tus.patchContentType) async throws -> TestResponse {
        var headers = [("Upload-Offset", String(offset)), ("Content-Type", contentType)]
        if let checksum { headers.append(("Upload-Checksum", checksum)) }
        return try await send("PATCH", location, headers: headers, body: bytes)
    }

    static func sha256Checksum(_ bytes: [UInt8]) -> String {
        "sha256 " + Base64.encode(SHA256.hash(bytes))
    }
}

/// The error envelope's `details.<key>` as an integer.
func detailInt(_ response: TestResponse, _ key: String) -> Int? {
    mediaErrorDetails(response)?[key]?.int64Value.map { Int($0) }
}

/// tuspy against a real `outpost-server` child on a real SQLite file (and, where the
/// store matters, on PostgreSQL); results checked over the media download.
@Suite(.offPoolWhileBlocking, .serverLogs) struct TusClientTests {
    static let chunk = 65536

    /// A server child for space `s`, with a write token, an admin token and a scratch
    /// directory for files and tuspy's URL stores.
    struct Child {
        let server: ServerProcess
        let token: String
        let admin: String
        let scratch: TemporaryDirectory

        var endpoint: String { server.baseURL.absoluteString + "/v1/spaces/s/tus" }
        func endpoint(through proxy: TusProxy) -> String { "http://127.0.0.1:\(proxy.port)/v1/spaces/s/tus" }

        /// Writes `bytes` to a file of the scratch directory and returns its path.
        func file(_ name: String, _ bytes: [UInt8]) throws -> String {
            let path = scratch.appending(name)
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            return path
        }

        func metric(_ series: String) throws -> Double { try server.metric(series, token: admin) ?? 0 }

        /// `GET` of the media over the section 6 download.
        func download(_ mediaId: String) throws -> TestResponse {
            try httpRequest(port: server.port, "GET", "/v1/spaces/s/media/\(mediaId)", headers: [("Authorization", "Bearer \(token)")])
        }

        func head(_ url: String) throws -> TestResponse {
            let path = String(url.dropFirst(url.range(of: "/v1/")!.lowerBound.utf16Offset(in: url)))
            return try httpRequest(port: server.port, "HEAD", path, headers: [("Authorization", "Bearer \(token)"), ("Tus-Resumable", Tus.version)])
        }
    }

    static func withChild(arguments: [String] = [], store: StoreKind = .sqlite, _ body: @escaping @Sendable (Child) throws -> Void) async throws {
        _ = try await blocking { try TusPy.python() }
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "tus") : nil
        try await withTemporaryDirectory(prefix: "outpost-tus") { dir in
            try await blocking {
                let server = try ServerProcess(dataDirectory: dir.appending("data"), arguments: arguments + (url.map { ["--store", $0] } ?? []))
                defer { server.stop() }
                let child = Child(server: server, token: try server.token(spaces: ["s"]), admin: try server.token(spaces: [], admin: true),
                                  scratch: try TemporaryDirectory(prefix: "outpost-tus-files"))
                defer { child.scratch.remove() }
                try body(child)
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func anUploadInChunksWithMetadataAndChecksumsIsTheFileTheDownloadSends(store: StoreKind) async throws {
        try await Self.withChild(store: store) { c in
            let bytes = mediaBytes(5 * Self.chunk - 1234, seed: 1)
            let file = try c.file("photo.jpg", bytes)
            let run = try TusPy.upload(endpoint: c.endpoint, token: c.token, file: file, chunkSize: Self.chunk,
                                       metadata: ["filename": "photo.jpg", "filetype": "image/jpeg"])
            #expect(run.status == "complete" && run.patches == 5 && run.offset == bytes.count, "\(run)")
            #expect(run.mediaId == SHA256.hex(bytes), "\(run)")
            let got = try c.download(SHA256.hex(bytes))
            #expect(got.status == 200 && summary(got.body) == summary(bytes) && got.header("Content-Type") == "image/jpeg", "\(got.status) \(got.text.prefix(200))")
            let state = try c.head(try #require(run.url))
            #expect(state.status == 200 && state.header("Upload-Offset") == String(bytes.count) && state.header(Tus.mediaIDHeader) == SHA256.hex(bytes))
            #expect(state.header("Tus-Resumable") == Tus.version)
            #expect(try c.metric("outpost_tus_bytes_received_total") == Double(bytes.count))
            #expect(try c.metric("outpost_media_uploads_finalized_total") == 1)

            // The same bytes again, as a new upload: the same media item, one file on disk,
            // and the chunked door finds it too.
            let again = try TusPy.upload(endpoint: c.endpoint, token: c.token, file: try c.file("copy.jpg", bytes), chunkSize: 2 * Self.chunk)
            #expect(again.status == "complete" && again.mediaId == run.mediaId && again.url != run.url, "\(again)")
            let sha = SHA256.hex(bytes)
            let directory = c.server.dataDirectory + "/media/spaces/s/\(sha.prefix(2))"
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == [sha])
            let begin = try httpRequest(port: c.server.port, "POST", "/v1/spaces/s/media/uploads",
                                        headers: [("Authorization", "Bearer \(c.token)"), ("Content-Type", "application/json")],
                                        body: UploadRequest(size: Int64(bytes.count), sha256: sha, contentType: "image/jpeg").encoded())
            #expect(begin.status == 200 && (try? UploadComplete.decode(begin.body))?.media.mediaId == sha, "\(begin.text)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: c.server.dataDirectory + "/media/uploads").isEmpty)
        }
    }

    @Test func aPatchCutMidBodyIsResumedFromTheServersOffsetAndOnlyTheRestIsSent() async throws {
        try await Self.withChild { c in
            let proxy = try TusProxy(upstreamPort: c.server.port)
            defer { proxy.stop() }
            let bytes = mediaBytes(5 * Self.chunk + 77, seed: 2)
            let file = try c.file("video.mp4", bytes)
            let urls = c.scratch.appending("urls.json")
            // The third PATCH's connection breaks after 30,000 of its bytes.
            proxy.damage(patch: 3, .cut(afterBodyBytes: 30_000))
            let cut = try TusPy.upload(endpoint: c.endpoint(through: proxy), token: c.token, file: file, chunkSize: Self.chunk, store: urls)
            #expect(cut.status == "failed" && cut.patches == 3 && cut.httpStatus == nil, "\(cut)")
            #expect(proxy.patchBodyBytes == 2 * Self.chunk + 30_000)
            // The server kept the two whole PATCHes and nothing of the cut one.
            let held = try c.head(try #require(cut.url))
            #expect(held.header("Upload-Offset") == String(2 * Self.chunk), "\(held.headers)")
            #expect(try c.metric("outpost_tus_bytes_received_total") == Double(2 * Self.chunk))

            // A new client finds the upload in its URL store, asks the server where it is,
            // and sends only the rest.
            let resumed = try TusPy.upload(endpoint: c.endpoint(through: proxy), token: c.token, file: file, chunkSize: Self.chunk, store: urls)
            #expect(resumed.status == "complete" && resumed.url == cut.url && resumed.startOffset == 2 * Self.chunk, "\(resumed)")
            #expect(resumed.sent == bytes.count - 2 * Self.chunk)
            #expect(proxy.patchBodyBytes == 2 * Self.chunk + 30_000 + bytes.count - 2 * Self.chunk)
            #expect(try c.metric("outpost_tus_bytes_received_total") == Double(bytes.count))
            let got = try c.download(try #require(resumed.mediaId))
            #expect(got.status == 200 && summary(got.body) == summary(bytes))
        }
    }

    @Test func aByteFlippedInTransitIsAChecksumMismatchAndTheOffsetStays() async throws {
        try await Self.withChild { c in
            let proxy = try TusProxy(upstreamPort: c.server.port)
            defer { proxy.stop() }
            let bytes = mediaBytes(3 * Self.chunk, seed: 3)
            let file = try c.file("scan.pdf", bytes)
            let urls = c.scratch.appending("urls.json")
            proxy.damage(patch: 2, .flip(byte: 1000))
            let damaged = try TusPy.upload(endpoint: c.endpoint(through: proxy), token: c.token, file: file, chunkSize: Self.chunk, store: urls)
            #expect(damaged.status == "failed" && damaged.httpStatus == 460 && damaged.patches == 2, "\(damaged)")
            let held = try c.head(try #require(damaged.url))
            #expect(held.header("Upload-Offset") == String(Self.chunk), "\(held.headers)")
            #expect(try c.metric("outpost_tus_checksum_mismatches_total") == 1)
            #expect(try c.metric("outpost_tus_bytes_received_total") == Double(Self.chunk))
            #expect(try FileManager.default.attributesOfItem(atPath: c.server.dataDirectory + "/media/uploads/" + damaged.url!.split(separator: "/").last!)[.size] as? Int == Self.chunk)

            let resumed = try TusPy.upload(endpoint: c.endpoint(through: proxy), token: c.token, file: file, chunkSize: Self.chunk, store: urls)
            #expect(resumed.status == "complete" && resumed.startOffset == Self.chunk && resumed.mediaId == SHA256.hex(bytes), "\(resumed)")
            let got = try c.download(SHA256.hex(bytes))
            #expect(got.status == 200 && summary(got.body) == summary(bytes))
        }
    }

    @Test func terminationForgetsTheUploadAndItsBytes() async throws {
        try await Self.withChild { c in
            let bytes = mediaBytes(4 * Self.chunk, seed: 4)
            let file = try c.file("voice.m4a", bytes)
            let urls = c.scratch.appending("urls.json")
            let partial = try TusPy.upload(endpoint: c.endpoint, token: c.token, file: file, chunkSize: Self.chunk, store: urls, stopAfter: 2)
            #expect(partial.status == "stopped" && partial.offset == 2 * Self.chunk, "\(partial)")
            let url = try #require(partial.url)
            let id = String(url.split(separator: "/").last!)
            #expect(FileManager.default.fileExists(atPath: c.server.dataDirectory + "/media/uploads/" + id))
            let path = "/v1/spaces/s/tus/\(id)"
            let deleted = try httpRequest(port: c.server.port, "DELETE", path, headers: [("Authorization", "Bearer \(c.token)"), ("Tus-Resumable", Tus.version)])
            #expect(deleted.status == 204 && deleted.header("Tus-Resumable") == Tus.version)
            #expect(try c.head(url).status == 404)
            #expect(!FileManager.default.fileExists(atPath: c.server.dataDirectory + "/media/uploads/" + id))
            // tuspy, resuming from its store, learns the upload is gone.
            let after = try TusPy.upload(endpoint: c.endpoint, token: c.token, file: file, chunkSize: Self.chunk, store: urls)
            #expect(after.status == "failed" && after.httpStatus == 404, "\(after)")
        }
    }

    @Test func aFileOverTheMediaLimitIsRefusedAtCreation() async throws {
        try await Self.withChild(arguments: ["--max-media-bytes", "100000"]) { c in
            let over = try TusPy.upload(endpoint: c.endpoint, token: c.token, file: try c.file("big.bin", mediaBytes(100_001, seed: 5)), chunkSize: Self.chunk)
            #expect(over.status == "failed" && over.httpStatus == 413 && over.url == nil, "\(over)")
            #expect(try c.metric("outpost_tus_uploads_created_total") == 0)
            let options = try httpRequest(port: c.server.port, "OPTIONS", "/v1/spaces/s/tus")
            #expect(options.status == 204 && options.header("Tus-Max-Size") == "100000")
            let limit = try TusPy.upload(endpoint: c.endpoint, token: c.token, file: try c.file("fits.bin", mediaBytes(100_000, seed: 5)), chunkSize: Self.chunk)
            #expect(limit.status == "complete" && limit.offset == 100_000, "\(limit)")
        }
    }
}

/// `outpost-server` children killed with SIGKILL while a PATCH's bytes are being written,
/// fsynced, counted or published, then restarted on the same data directory: the offset a
/// HEAD gives is always one the bytes on disk back up, and the upload finishes whole.
@Suite(.offPoolWhileBlocking, .serialized, .serverLogs) struct TusCrashTests {
    @Test func aServerKilledDuringAPatchLeavesAnOffsetItsBytesBackUp() async throws {
        try await withTemporaryDirectory(prefix: "outpost-tus-crash") { dir in
            let data = dir.appending("data")
            let server = try await blocking { try ServerProcess(dataDirectory: data) }
            let token = try server.token(spaces: ["sp"])
            let half = 8 << 20
            // How long after the last PATCH is sent the server is killed, in ms: the kill
            // lands while the body arrives, is written, fsynced, counted or published.
            for (round, delay) in [0, 2, 10, 30, 80, 200].enumerated() {
                let file = mediaBytes(2 * half, seed: UInt64(300 + round))
                var raw = TusRaw(port: server.port, token: token)
                let url = try TusHTTPTests.location(try await raw.create("sp", length: file.count))
                #expect(try await raw.patch(url, offset: 0, Array(file[0..<half])).status == 204)
                let port = server.port
                let last = Array(file[half...])
                try await blocking {
                    let client = try TestHTTPClient(port: port)
                    try client.send(TestHTTPClient.encode("PATCH", url, headers: [
                        ("Authorization", "Bearer \(token)"), ("Tus-Resumable", Tus.version), ("Upload-Offset", String(half)),
                        ("Content-Type", Tus.patchContentType), ("Upload-Checksum", TusRaw.sha256Checksum(last)),
                    ], body: last))
                    usleep(UInt32(delay) * 1000)
                    server.kill9()
                }
                try await blocking { try server.restart() }
                raw = TusRaw(port: server.port, token: token)
                let state = try await raw.head(url)
                let offset = Int(state.header("Upload-Offset") ?? "") ?? -1
                #expect(state.status == 200 && (offset == half || offset == file.count), "round \(round): \(state.status) offset \(offset)")
                let part = data + "/media/uploads/" + String(url.split(separator: "/").last!)
                if offset == half {
                    #expect(try FileManager.default.attributesOfItem(atPath: part)[.size] as? Int == half, "round \(round): bytes past the offset stayed")
                    let done = try await raw.patch(url, offset: half, last)
                    #expect(done.status == 204 && done.header(Tus.mediaIDHeader) == SHA256.hex(file), "round \(round): \(done.text)")
                } else {
                    #expect(state.header(Tus.mediaIDHeader) == SHA256.hex(file), "round \(round): complete without a media id")
                    #expect(!FileManager.default.fileExists(atPath: part))
                }
                let got = try await MediaClient(port: server.port, token: token).download("sp", SHA256.hex(file))
                #expect(got.status == 200 && summary(got.body) == summary(file), "round \(round)")
            }
            _ = try await blocking { server.stop() }
        }
    }
}

// MARK: - Raw HTTP

/// The protocol's edge cases over raw HTTP against an in-process media service on a real
/// socket, its metadata in a real SQLite file or on PostgreSQL, with a clock the test moves.
@Suite struct TusHTTPTests {
    static func location(_ response: TestResponse) throws -> String {
        try #require(response.header("Location"), "no Location: \(response.status) \(response.text)")
    }

    @Test(arguments: StoreKind.allCases) func discoveryNeedsNoTokenAndSaysWhatIsSpoken(store: StoreKind) async throws {
        try await withMediaServer(store: store) { f in
            let raw = TusRaw(port: f.port, token: nil)
            let options = try await raw.send("OPTIONS", "/v1/spaces/sp/tus", version: nil)
            #expect(options.status == 204)
            #expect(options.header("Tus-Resumable") == "1.0.0" && options.header("Tus-Version") == "1.0.0")
            #expect(options.header("Tus-Extension") == "creation,termination,checksum,expiration")
            #expect(options.header("Tus-Max-Size") == String(MediaFixture.limits.maxMediaBytes))
            #expect(options.header("Tus-Checksum-Algorithm") == "sha256")
            let badSpace = try await raw.send("OPTIONS", "/v1/spaces/-x/tus", version: nil)
            #expect(badSpace.status == 400 && mediaErrorCode(badSpace) == "invalid_space" && badSpace.header("Tus-Resumable") == "1.0.0")
        }
    }

    @Test(arguments: MediaSetup.allCases) func createHeadAndPatchesToCompletion(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { f in
            let raw = TusRaw(port: f.port, token: f.token(["sp"]))
            let bytes = mediaBytes(10_000, seed: 10)
            let metadata = "filename \(Base64.encode(Array("a b.png".utf8))),filetype \(Base64.encode(Array("image/png".utf8))),flag"
            let created = try await raw.create("sp", length: bytes.count, metadata: metadata)
            #expect(created.status == 201 && created.header("Tus-Resumable") == "1.0.0", "\(created.text)")
            #expect(created.header("Upload-Expires") == Tus.expires(f.clock.now + 24 * 3_600_000))
            #expect(created.header("Upload-Expires")?.hasSuffix(" GMT") == true)
            let url = try Self.location(created)
            #expect(url.hasPrefix("/v1/spaces/sp/tus/") && url.count == "/v1/spaces/sp/tus/".count + 32)

            let fresh = try await raw.head(url)
            #expect(fresh.status == 200 && fresh.header("Upload-Offset") == "0" && fresh.header("Upload-Length") == "10000")
            #expect(fresh.header("Upload-Metadata") == metadata && fresh.header("Cache-Control") == "no-store")
            #expect(fresh.header(Tus.mediaIDHeader) == nil)

            let first = Array(bytes[0..<4000]), rest = Array(bytes[4000...])
            let one = try await raw.patch(url, offset: 0, first, checksum: TusRaw.sha256Checksum(first))
            #expect(one.status == 204 && one.header("Upload-Offset") == "4000" && one.header(Tus.mediaIDHeader) == nil, "\(one.text)")
            let two = try await raw.patch(url, offset: 4000, rest)
            #expect(two.status == 204 && two.header("Upload-Offset") == "10000" && two.header(Tus.mediaIDHeader) == SHA256.hex(bytes), "\(two.text)")
            #expect(two.header("Upload-Expires") == nil)

            let got = try await f.client().download("sp", SHA256.hex(bytes))
            #expect(got.status == 200 && summary(got.body) == summary(bytes) && got.header("Content-Type") == "image/png")
            let done = try await raw.head(url)
            #expect(done.status == 200 && done.header("Upload-Offset") == "10000" && done.header(Tus.mediaIDHeader) == SHA256.hex(bytes))
            // A client that lost the last answer sends the end again: the same answer.
            let replay = try await raw.patch(url, offset: 10_000, [])
            #expect(replay.status == 204 && replay.header(Tus.mediaIDHeader) == SHA256.hex(bytes))
            let late = try await raw.patch(url, offset: 4000, rest)
            #expect(late.status == 409 && mediaErrorCode(late) == "offset_mismatch" && detailInt(late, "offset") == 10_000)
            #expect(f.uploadFiles().isEmpty)
            #expect(f.metrics.value("outpost_tus_bytes_received_total") == 10_000)
            // Hashed once, as the appends came (docs/media.md, "Hashing once"): completion
            // read nothing back, except with instances sharing the media (no running hash);
            // in a bucket, finalize reads the pieces once more to write the object.
            let hashedAtCompletion = store.store == .sqlite ? 0 : 10_000
            let readByFinalize = store.store == .sqlite && store.place == .directory ? 0 : 10_000
            #expect(f.bytesReadBack == Double(hashedAtCompletion + readByFinalize))
        }
    }

    @Test(arguments: StoreKind.allCases) func refusalsSayWhatIsWrongAndChangeNothing(store: StoreKind) async throws {
        try await withMediaServer(store: store) { f in
            let token = f.token(["sp", "other"])
            let raw = TusRaw(port: f.port, token: token)
            let url = try Self.location(try await raw.create("sp", length: 9000))

            // Version.
            for version in ["0.2.2", "1.0"] {
                let r = try await raw.send("HEAD", url, version: version)
                #expect(r.status == 412 && r.header("Tus-Version") == "1.0.0" && r.header("Tus-Resumable") == "1.0.0")
                let refused = try await raw.send("POST", "/v1/spaces/sp/tus", headers: [("Upload-Length", "5")], version: version)
                #expect(refused.status == 412 && mediaErrorCode(refused) == "unsupported_tus_version")
            }
            // Not tus at all: no Tus-Resumable.
            let untagged = try await raw.send("POST", "/v1/spaces/sp/tus", headers: [("Upload-Length", "5")], version: nil)
            #expect(untagged.status == 400 && mediaErrorDetails(untagged)?["header"] == "Tus-Resumable" && untagged.header("Tus-Version") == "1.0.0")
            // Tokens.
            let noToken = try await raw.send("PATCH", url, headers: [("Upload-Offset", "0"), ("Content-Type", Tus.patchContentType)], body: [1], token: .some(nil))
            #expect(noToken.status == 401 && noToken.header("WWW-Authenticate") != nil && noToken.header("Tus-Resumable") == "1.0.0")
            #expect(try await raw.send("HEAD", url, token: .some(f.token(["sp"], scope: .read))).status == 403)
            #expect(try await raw.send("HEAD", url, token: .some(f.token(["elsewhere"]))).status == 403)
            #expect(try await raw.send("POST", "/v1/spaces/sp/tus", headers: [("Upload-Length", "5")], token: .some(nil)).status == 401)

            // Creation.
            func createRefusal(_ headers: [(String, String)]) async throws -> TestResponse {
                try await raw.send("POST", "/v1/spaces/sp/tus", headers: headers)
            }
            for headers in [[], [("Upload-Length", "-1")], [("Upload-Length", "ten")], [("Upload-Length", "99999999999999999999")],
                            [("Upload-Defer-Length", "1")]] as [[(String, String)]] {
                let r = try await createRefusal(headers)
                #expect(r.status == 400 && mediaErrorCode(r) == "invalid_header", "\(headers): \(r.text)")
            }
            let over = try await raw.create("sp", length: MediaFixture.limits.maxMediaBytes + 1)
            #expect(over.status == 413 && detailInt(over, "limit") == MediaFixture.limits.maxMediaBytes && over.header("Tus-Resumable") == "1.0.0")
            for bad in ["a Zm9v,a YmFy", ",x", "k not-base64!", "filetype \(Base64.encode(Array("nonsense".utf8)))",
                        "filename \(Base64.encode([0xFF, 0xFE]))"] {
                let r = try await raw.create("sp", length: 5, metadata: bad)
                #expect(r.status == 400 && mediaErrorCode(r) == "invalid_header" && mediaErrorDetails(r)?["header"] == "Upload-Metadata", "\(bad): \(r.text)")
            }

            // Appends.
            let bytes = mediaBytes(3000, seed: 11)
            #expect(try await raw.patch(url, offset: 0, bytes).status == 204)
            let wrong = try await raw.patch(url, offset: 1000, bytes)
            #expect(wrong.status == 409 && mediaErrorCode(wrong) == "offset_mismatch" && detailInt(wrong, "offset") == 3000 && wrong.header("Upload-Offset") == "3000")
            let notANumber = try await raw.send("PATCH", url, headers: [("Upload-Offset", "x"), ("Content-Type", Tus.patchContentType)], body: bytes)
            #expect(notANumber.status == 400 && mediaErrorDetails(notANumber)?["header"] == "Upload-Offset")
            let noOffset = try await raw.send("PATCH", url, headers: [("Content-Type", Tus.patchContentType)], body: bytes)
            #expect(noOffset.status == 400 && mediaErrorCode(noOffset) == "invalid_header")
            let wrongType = try await raw.patch(url, offset: 3000, bytes, contentType: "application/octet-stream")
            #expect(wrongType.status == 415 && mediaErrorCode(wrongType) == "unsupported_media_type")
            let md5 = try await raw.patch(url, offset: 3000, bytes, checksum: "md5 " + Base64.encode([UInt8](repeating: 1, count: 16)))
            #expect(md5.status == 400 && mediaErrorCode(md5) == "unsupported_checksum_algorithm")
            let garbled = try await raw.patch(url, offset: 3000, bytes, checksum: "sha256 !!!")
            #expect(garbled.status == 400 && mediaErrorCode(garbled) == "invalid_header" && mediaErrorDetails(garbled)?["header"] == "Upload-Checksum")
            let mismatch = try await raw.patch(url, offset: 3000, bytes, checksum: TusRaw.sha256Checksum(Array(bytes.reversed())))
            #expect(mismatch.status == 460 && mediaErrorCode(mismatch) == "checksum_mismatch" && mismatch.header("Tus-Resumable") == "1.0.0", "\(mismatch.text)")
            let past = try await raw.patch(url, offset: 3000, mediaBytes(6001, seed: 12))
            #expect(past.status == 413 && detailInt(past, "limit") == 6000)
            // None of those moved the offset or left a byte.
            let state = try await raw.head(url)
            #expect(state.header("Upload-Offset") == "3000")
            let part = f.data.mediaPath + "/uploads/" + String(url.split(separator: "/").last!)
            #expect(try FileManager.default.attributesOfItem(atPath: part)[.size] as? Int == 3000)
            #expect(f.metrics.value("outpost_tus_checksum_mismatches_total") == 1)

            // Ids: unknown, malformed, of another space.
            #expect(try await raw.head("/v1/spaces/sp/tus/" + String(repeating: "a", count: 32)).status == 404)
            let malformed = try await raw.patch("/v1/spaces/sp/tus/XYZ", offset: 0, [1])
            #expect(malformed.status == 404 && mediaErrorCode(malformed) == "upload_not_found")
            let elsewhere = try await raw.head(url.replacingOccurrences(of: "/sp/", with: "/other/"))
            #expect(elsewhere.status == 404)
            // A method the resource lacks.
            let get = try await raw.send("GET", url)
            #expect(get.status == 405 && get.header("Allow") == "DELETE, HEAD, PATCH")
        }
    }

    @Test func aPatchBodyOverTheRequestLimitIsRefusedBeforeItIsRead() async throws {
        var limits = MediaFixture.limits
        limits.maxRequestBytes = 16_384
        try await withMediaServer(limits: limits) { f in
            let raw = TusRaw(port: f.port, token: f.token(["sp"]))
            let url = try Self.location(try await raw.create("sp", length: 100_000))
            let big = try await raw.patch(url, offset: 0, mediaBytes(16_385, seed: 13))
            #expect(big.status == 413 && detailInt(big, "limit") == 16_384 && big.header("Tus-Resumable") == "1.0.0", "\(big.headers)")
            let fits = try await raw.patch(url, offset: 0, mediaBytes(16_384, seed: 13))
            #expect(fits.status == 204 && fits.header("Upload-Offset") == "16384")
        }
    }

    @Test(arguments: MediaSetup.allCases) func expiredUploadsAnswer410AndTheSweepRemovesThem(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { f in
            let raw = TusRaw(port: f.port, token: f.token(["sp"]))
            // A PATCH moves the expiry.
            let kept = try Self.location(try await raw.create("sp", length: 5000))
            f.clock.advance(hours: 23)
            #expect(try await raw.patch(kept, offset: 0, mediaBytes(100, seed: 14)).status == 204)
            f.clock.advance(hours: 23)
            #expect(try await raw.head(kept).status == 200)

            let url = try Self.location(try await raw.create("sp", length: 5000))
            #expect(try await raw.patch(url, offset: 0, mediaBytes(1000, seed: 15)).status == 204)
            let id = String(url.split(separator: "/").last!)
            #expect(f.uploadFiles().contains(id))
            f.clock.advance(hours: 24.01)
            let expired = try await raw.patch(url, offset: 1000, mediaBytes(10, seed: 16))
            #expect(expired.status == 410 && mediaErrorCode(expired) == "upload_expired")
            #expect(try await raw.head(url).status == 410)
            #expect(try await raw.head(kept).status == 410)
            let swept = try await f.service.sweep()
            #expect(swept.expired == 2)
            #expect(f.uploadFiles().isEmpty)
            #expect(try await raw.head(url).status == 404)
        }
    }

    @Test(arguments: StoreKind.allCases) func bytesPastTheOffsetAreCutBackAndLostBytesLowerIt(store: StoreKind) async throws {
        try await withMediaServer(store: store) { f in
            let raw = TusRaw(port: f.port, token: f.token(["sp"]))
            let bytes = mediaBytes(10_000, seed: 17)
            let url = try Self.location(try await raw.create("sp", length: bytes.count))
            #expect(try await raw.patch(url, offset: 0, Array(bytes[0..<3000])).status == 204)
            let part = f.data.mediaPath + "/uploads/" + String(url.split(separator: "/").last!)
            // What a kill between an append's write and its commit leaves: bytes on disk
            // that the offset does not count.
            let handle = try #require(FileHandle(forWritingAtPath: part))
            handle.seekToEndOfFile()
            handle.write(Data(mediaBytes(500, seed: 18)))
            handle.closeFile()
            #expect(try FileManager.default.attributesOfItem(atPath: part)[.size] as? Int == 3500)
            let state = try await raw.head(url)
            #expect(state.header("Upload-Offset") == "3000")
            #expect(try FileManager.default.attributesOfItem(atPath: part)[.size] as? Int == 3000)
            // Bytes lost on the disk: the offset goes back to what the file holds.
            #expect(truncate(part, 1000) == 0)
            let lowered = try await raw.head(url)
            #expect(lowered.header("Upload-Offset") == "1000")
            #expect(try await raw.patch(url, offset: 1000, Array(bytes[1000...])).status == 204)
            let got = try await f.client().download("sp", SHA256.hex(bytes))
            #expect(got.status == 200 && summary(got.body) == summary(bytes))
        }
    }

    @Test(arguments: MediaSetup.allCases) func concurrentPatchesOfOneUploadTakeTurns(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { f in
            let raw = TusRaw(port: f.port, token: f.token(["sp"]))
            let url = try Self.location(try await raw.create("sp", length: 20_000))
            let a = mediaBytes(10_000, seed: 19), b = mediaBytes(10_000, seed: 20)
            async let first = raw.patch(url, offset: 0, a)
            async let second = raw.patch(url, offset: 0, b)
            let answers = try await [first, second]
            #expect(answers.map(\.status).sorted() == [204, 409], "\(answers.map(\.status))")
            let winner = answers[0].status == 204 ? a : b
            let loser = answers.first { $0.status == 409 }
            #expect(loser.map { mediaErrorCode($0) } == "offset_mismatch")
            #expect(try await raw.head(url).header("Upload-Offset") == "10000")
            #expect(try f.stagedBytes(String(url.split(separator: "/").last!)).map(summary) == summary(winner))
        }
    }

    @Test(arguments: MediaSetup.allCases) func anEmptyFileIsCompleteAtCreation(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { f in
            let raw = TusRaw(port: f.port, token: f.token(["sp"]))
            let created = try await raw.create("sp", length: 0)
            let empty = SHA256.hex([UInt8]())
            #expect(created.status == 201 && created.header("Upload-Offset") == "0" && created.header(Tus.mediaIDHeader) == empty)
            let got = try await f.client().download("sp", empty)
            #expect(got.status == 200 && got.body.isEmpty)
        }
    }

    @Test(arguments: MediaSetup.allCases) func theSameBytesThroughEitherDoorAreOneMediaItem(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { f in
            let raw = TusRaw(port: f.port, token: f.token(["sp"]))
            let bytes = mediaBytes(9000, seed: 21)
            let (_, chunked) = try await f.client().upload("sp", bytes)
            let url = try Self.location(try await raw.create("sp", length: bytes.count))
            let done = try await raw.patch(url, offset: 0, bytes)
            #expect(done.header(Tus.mediaIDHeader) == chunked.media.mediaId)
            let sha = SHA256.hex(bytes)
            #expect(try f.publishedNames("sp", String(sha.prefix(2))) == [sha])
            let media = try #require(try await f.store.media(space: SpaceName("sp")!, id: MediaID(sha)!))
            #expect(media.contentType == "image/jpeg", "the first upload's row stays")
        }
    }

    @Test(arguments: MediaSetup.allCases) func terminationRemovesAnOpenUploadAndKeepsACompleteOnesMedia(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { f in
            let raw = TusRaw(port: f.port, token: f.token(["sp"]))
            let url = try Self.location(try await raw.create("sp", length: 5000))
            #expect(try await raw.patch(url, offset: 0, mediaBytes(2000, seed: 22)).status == 204)
            let deleted = try await raw.send("DELETE", url)
            #expect(deleted.status == 204 && deleted.header("Tus-Resumable") == "1.0.0")
            #expect(f.uploadFiles().isEmpty)
            #expect(try await raw.head(url).status == 404)
            #expect(try await raw.send("DELETE", url).status == 404)

            let bytes = mediaBytes(700, seed: 23)
            let complete = try Self.location(try await raw.create("sp", length: bytes.count))
            #expect(try await raw.patch(complete, offset: 0, bytes).status == 204)
            #expect(try await raw.send("DELETE", complete).status == 204)
            #expect(try await f.client().download("sp", SHA256.hex(bytes)).status == 200)
        }
    }
}

// MARK: - Parsers and schema

@Suite struct TusUnitTests {
    @Test func sizesAreDigitsUpToTheProtocolsLargestInteger() {
        #expect(Tus.parseSize("0") == 0 && Tus.parseSize("1234") == 1234 && Tus.parseSize("9007199254740991") == 9_007_199_254_740_991)
        for bad in ["", "-1", "+1", "1.0", " 1", "9007199254740992", "1e3", "0x10", "00", "01"] { #expect(Tus.parseSize(bad) == nil, "\(bad)") }
    }

    @Test func metadataPairsAreReadAsTheSpecWritesThem() throws {
        let field = "filename \(Base64.encode(Array("ünï code.txt".utf8))),filetype dGV4dC9wbGFpbg==,empty,is_confidential "
        let metadata = try Tus.parseMetadata("  " + field + " ").get()
        #expect(metadata.field == String(field.dropLast()))
        #expect(metadata.filename == "ünï code.txt" && metadata.contentType == "text/plain")
        #expect(metadata.values["empty"] == [] && metadata.values["is_confidential"] == [])
        #expect(try Tus.parseMetadata("").get() == Tus.Metadata(field: "", values: [:]))
        #expect(try Tus.parseMetadata("name YS5qcGc=").get().filename == "a.jpg")
        #expect(try Tus.parseMetadata("contentType aW1hZ2UvcG5n").get().contentType == "image/png")
        for bad in ["a,a", "a 1,", " , ", "k v v", "k ***", String(repeating: "k", count: 5000), "k\u{7F}", "k YQ", "a YQ==, b",
                    "k YR=="] {
            #expect((try? Tus.parseMetadata(bad).get()) == nil, "\(bad)")
        }
    }

    @Test func checksumsNameTheAlgorithmAndCarryItsDigest() {
        let digest = SHA256.hash(Array("x".utf8))
        #expect(Tus.parseChecksum("sha256 " + Base64.encode(digest)) == .sha256(digest))
        #expect(Tus.parseChecksum("SHA256 " + Base64.encode(digest)) == .sha256(digest))
        #expect(Tus.parseChecksum("sha1 " + Base64.encode([UInt8](repeating: 0, count: 20))) == .unsupported("sha1"))
        for bad in ["sha256", "sha256 " + Base64.encode(digest.prefix(31)), "sha256 a b", "sha256 ###"] {
            if case .malformed = Tus.parseChecksum(bad) {} else { Issue.record("\(bad) was not refused as malformed") }
        }
    }

    @Test func expiryIsAnHTTPDate() {
        #expect(HTTPDate.imfFixdate(secondsSince1970: 784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(Tus.expires(784_111_777_999) == "Sun, 06 Nov 1994 08:49:37 GMT")
    }

    /// A store of media schema 1 (the release before tus) is upgraded to 2 at start, its
    /// uploads in progress kept; a schema newer than the server's refuses the start.
    @Test(arguments: StoreKind.allCases) func mediaSchemaOneIsUpgradedKeepingUploadsInProgress(store: StoreKind) async throws {
        try await withTemporaryDirectory(prefix: "outpost-tus-schema") { dir in
            var configuration = MediaStore.Configuration(databasePath: dir.appending("outpost.sqlite"), mediaDirectory: dir.appending("media"))
            if store == .postgres { configuration.postgresURL = try await PostgresCluster.database(prefix: "tusschema") }
            let config = configuration
            let space = SpaceName("sp")!, sha = MediaID(SHA256.hex(Array("file".utf8)))!
            let first = try await blocking { try MediaStore(configuration: config) }
            let outcome = try await first.begin(space: space, sha256: sha, size: 8192, now: 1, quota: nil) {
                UploadRecord(id: .random(), space: space, sha256: sha, size: 8192, contentType: "image/jpeg", filename: nil,
                             chunkSize: 4096, chunkCount: 2, state: .open, createdAt: 1, expiresAt: 1_000_000)
            }
            guard case .created(let upload) = outcome else { Issue.record("\(outcome)"); return }
            #expect(try await first.recordChunk(upload.id, index: 0, digest: SHA256.hash([1]), now: 2, expiresAt: 1_000_000) == 1)
            await first.close()

            // Back to media schema 1: what the previous release left, and a list of migrations
            // without "media 2".
            try await blocking {
                try Self.sql(config, ["DROP TABLE tus_uploads", "DELETE FROM migrations WHERE name = 'media 2: tus_uploads'",
                                      config.postgresURL == nil
                                      ? "UPDATE meta SET value = '1' WHERE key = 'media_schema_version'"
                                      : "DELETE FROM meta WHERE key = 'media_schema_version'"])
            }
            #expect(try await blocking { try Self.mediaSchemaVersion(config) } == (store == .postgres ? nil : "1"))

            let second = try await blocking { try MediaStore(configuration: config) }
            #expect(try await blocking { try Self.mediaSchemaVersion(config) } == "2")
            #expect(try await second.upload(upload.id) == upload)
            #expect(try await second.receivedChunks(upload.id) == [0])
            let tus = TusUploadRecord(id: .random(), space: space, length: 10, offset: 0, metadata: "k dg==", contentType: "text/plain",
                                      filename: "f.txt", mediaID: nil, state: .open, createdAt: 5, expiresAt: 1_000_000)
            #expect(try await second.createTusUpload(tus, quota: nil) == nil)
            #expect(try await second.tusUpload(tus.id) == tus)
            #expect(try await second.advanceTusUpload(tus.id, from: 0, to: 4, now: 6, expiresAt: 2_000_000))
            #expect(try await second.advanceTusUpload(tus.id, from: 0, to: 8, now: 6, expiresAt: 2_000_000) == false, "only from the offset read")
            #expect(try await second.tusUpload(tus.id)?.offset == 4)
            #expect(try await second.expiredUploads(now: 1_500_000, limit: 10) == [upload.id])
            await second.close()

            // A migration of a newer server refuses the start.
            try await blocking { try Self.sql(config, ["INSERT INTO migrations(name, applied_at) VALUES ('media 3: of a newer server', 1)"]) }
            await #expect(throws: (any Error).self) { _ = try await blocking { try MediaStore(configuration: config) } }
        }
    }

    /// Runs statements on the store's database directly.
    static func sql(_ config: MediaStore.Configuration, _ statements: [String]) throws {
        if let url = config.postgresURL {
            let db = try PostgresConnection(url: url)
            defer { db.close() }
            for s in statements { try db.execute(s) }
        } else {
            let db = try OutpostSQLite.Connection(path: config.databasePath)
            defer { db.close() }
            for s in statements { try db.execute(s) }
        }
    }

    /// `meta.media_schema_version`, nil when absent.
    static func mediaSchemaVersion(_ config: MediaStore.Configuration) throws -> String? {
        if let url = config.postgresURL {
            let db = try PostgresConnection(url: url)
            defer { db.close() }
            let rows = try db.query("SELECT value FROM meta WHERE key = 'media_schema_version'")
            return rows.count == 0 ? nil : rows.text(0, 0)
        }
        let db = try OutpostSQLite.Connection(path: config.databasePath)
        defer { db.close() }
        return try db.scalarText("SELECT value FROM meta WHERE key = 'media_schema_version'")
    }
}
