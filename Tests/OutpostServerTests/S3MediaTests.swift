import Dispatch
import Foundation
import OutpostCore
import OutpostCrypto
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// The media store on S3 (`S3MediaBytes`) against a real S3 layer (OpenStack Swift's
/// s3api, `S3TestServer`): what only a bucket has (multipart publication, the marker of an
/// interrupted finalize, the start check) and a real `outpost-server` on `--media-store s3`.
/// The section 6 and tus tests run on the bucket too (`MediaSetup`).
@Suite(.serverLogs) struct S3MediaTests {
    /// Chunks of 1 MiB and parts of 5 MiB (S3's smallest), so a file of 11 MiB is three parts.
    static let limits: Limits = {
        var l = Limits()
        l.chunkSize = 1 << 20
        l.maxMediaBytes = 32 << 20
        return l
    }()

    static func deadline() -> UInt64 { DispatchTime.now().uptimeNanoseconds + UInt64(testDeadlineSeconds) * 1_000_000_000 }

    static func s3(_ f: MediaFixture) -> S3MediaBytes { f.store.bytes as! S3MediaBytes }

    @Test(arguments: [StoreKind.sqlite, .postgres])
    func aFileOfSeveralPartsIsPublishedWholeAndServedInRanges(store: StoreKind) async throws {
        try await withMediaServer(limits: Self.limits, store: MediaSetup(store: store, place: .s3)) { f in
            let file = mediaBytes((11 << 20) + 123, seed: 40)
            let (_, complete) = try await f.client().upload("sp", file)
            #expect(complete.media.mediaId == SHA256.hex(file))
            let bucket = Self.s3(f)
            let key = bucket.mediaKey(space: SpaceName("sp")!, id: MediaID(SHA256.hex(file))!)
            try await blocking { () throws in
                #expect(try bucket.bucket.size(of: key, deadline: Self.deadline()) == Int64(file.count))
                #expect(try bucket.bucket.multipartUploads(prefix: "", deadline: Self.deadline()).isEmpty, "no part is left billed")
                #expect(try bucket.partFileIDs().isEmpty, "the staged chunks are removed once published")
            }
            let whole = try await f.client().download("sp", complete.media.mediaId)
            #expect(whole.status == 200 && summary(whole.body) == summary(file))
            // A range across the boundary of the first two parts (5 MiB).
            let from = (5 << 20) - 1000, to = (5 << 20) + 2_000_000
            let range = try await f.client().download("sp", complete.media.mediaId, headers: [("Range", "bytes=\(from)-\(to)")])
            #expect(range.status == 206 && summary(range.body) == summary(Array(file[from...to])))
            #expect(f.metrics.value("outpost_media_s3_requests_total") > 0)
            #expect(f.metrics.value("outpost_media_s3_sent_bytes_total") >= Double(2 * file.count), "staged, then published")
        }
    }

    /// Chunks of 5 MiB (the default with media in S3) are whole parts: finalize publishes
    /// them as copies made inside the store. With the running hash (one process) nothing is
    /// read back and each byte is sent to the store once; without it (PostgreSQL) the
    /// pieces are read once to check the file, and still not written again.
    @Test(arguments: [StoreKind.sqlite, .postgres])
    func chunksOfAWholePartArePublishedByCopiesInsideTheStore(store: StoreKind) async throws {
        var limits = Self.limits
        limits.chunkSize = MediaStoreSettings.s3ChunkSize
        try await withMediaServer(limits: limits, store: MediaSetup(store: store, place: .s3)) { f in
            let file = mediaBytes((11 << 20) + 7, seed: 50)
            let sentBefore = f.metrics.value("outpost_media_s3_sent_bytes_total")
            let (_, complete) = try await f.client().upload("sp", file)
            #expect(complete.media.mediaId == SHA256.hex(file))
            #expect(f.bytesReadBack == (store == .sqlite ? 0 : Double(file.count)))
            let sent = f.metrics.value("outpost_media_s3_sent_bytes_total") - sentBefore
            #expect(sent < Double(file.count) + 100_000, "each byte is sent to the store once (\(sent) bytes sent)")
            let got = try await f.client().download("sp", complete.media.mediaId)
            #expect(summary(got.body) == summary(file))
            let bucket = Self.s3(f)
            try await blocking { () throws in
                #expect(try bucket.bucket.multipartUploads(prefix: "", deadline: Self.deadline()).isEmpty)
                #expect(try bucket.partFileIDs().isEmpty)
            }

            // The same chunks under another declared hash: refused, nothing published.
            let other = mediaBytes((6 << 20) + 1, seed: 51)
            let claimed = SHA256.hex(file)
            let client = f.client(["sp2"])
            let upload = try UploadState.decode(try await client.begin("sp2", size: other.count, sha256: claimed).body)
            for (index, piece) in chunked(other, upload.chunkSize).enumerated() {
                #expect(try await client.chunk("sp2", upload.uploadId, index, piece).status == 200)
            }
            let refused = try await client.finalize("sp2", upload.uploadId)
            #expect(refused.status == 422 && mediaErrorCode(refused) == "checksum_mismatch", "\(refused.text)")
            try await blocking { () throws in
                #expect(try !f.isPublished("sp2", claimed))
                #expect(try bucket.bucket.multipartUploads(prefix: "", deadline: Self.deadline()).isEmpty)
            }
        }
    }

    @Test func aFileOfSeveralPartsWhoseHashDiffersIsAbortedAndNothingIsPublished() async throws {
        try await withMediaServer(limits: Self.limits, store: MediaSetup(store: .sqlite, place: .s3)) { f in
            let file = mediaBytes(6 << 20, seed: 41)
            let claimed = SHA256.hex(mediaBytes(6 << 20, seed: 42))
            let client = f.client()
            let upload = try UploadState.decode(try await client.begin("sp", size: file.count, sha256: claimed).body)
            for (index, piece) in chunked(file, upload.chunkSize).enumerated() {
                #expect(try await client.chunk("sp", upload.uploadId, index, piece).status == 200)
            }
            let done = try await client.finalize("sp", upload.uploadId)
            #expect(done.status == 422 && mediaErrorCode(done) == "checksum_mismatch", "\(done.text)")
            let bucket = Self.s3(f)
            try await blocking { () throws in
                #expect(try bucket.bucket.multipartUploads(prefix: "", deadline: Self.deadline()).isEmpty, "the multipart upload was aborted")
                #expect(try !f.isPublished("sp", claimed))
                #expect(try !f.isPublished("sp", SHA256.hex(file)))
                #expect(try bucket.partFileIDs().isEmpty)
            }
        }
    }

    @Test(arguments: [StoreKind.sqlite, .postgres])
    func anUploadCutByARestartResumesFromTheChunksAcknowledged(store: StoreKind) async throws {
        try await withMediaServer(limits: Self.limits, store: MediaSetup(store: store, place: .s3)) { first in
            let file = mediaBytes((3 << 20) + 7, seed: 43)
            let upload = try UploadState.decode(try await first.client().begin("sp", file: file).body)
            let pieces = chunked(file, upload.chunkSize)
            #expect(try await first.client().chunk("sp", upload.uploadId, 0, pieces[0]).status == 200)
            #expect(try await first.client().chunk("sp", upload.uploadId, 2, pieces[2]).status == 200)
            try await first.afterRestart { second in
                let state = try UploadState.decode(try await second.client().state("sp", upload.uploadId).body)
                #expect(state.received == [0, 2])
                #expect(try await second.client().chunk("sp", upload.uploadId, 1, pieces[1]).status == 200)
                #expect(try await second.client().chunk("sp", upload.uploadId, 3, pieces[3]).status == 200)
                let done = try await second.client().finalize("sp", upload.uploadId)
                #expect(done.status == 200, "\(done.text)")
                let got = try await second.client().download("sp", SHA256.hex(file))
                #expect(summary(got.body) == summary(file))
            }
        }
    }

    @Test func aFinalizeInterruptedMidUploadIsAbortedByTheSweepWhenItsUploadExpires() async throws {
        try await withMediaServer(limits: Self.limits, store: MediaSetup(store: .sqlite, place: .s3)) { f in
            let file = mediaBytes(6 << 20, seed: 44)
            let upload = try UploadState.decode(try await f.client().begin("sp", file: file).body)
            #expect(try await f.client().chunk("sp", upload.uploadId, 0, chunked(file, upload.chunkSize)[0]).status == 200)
            // What a finalize killed after it started the multipart upload leaves: the upload
            // in progress and the marker that names it.
            let bucket = Self.s3(f)
            let id = UploadID(upload.uploadId)!
            let key = bucket.mediaKey(space: SpaceName("sp")!, id: MediaID(SHA256.hex(file))!)
            try await blocking { () throws in
                let multipart = try bucket.bucket.startMultipart(key, contentType: "image/jpeg", deadline: Self.deadline())
                _ = try bucket.bucket.putPart(key, upload: multipart, number: 1, bytes: Array(file[0..<(5 << 20)]), deadline: Self.deadline())
                try bucket.bucket.put(bucket.markerKey(id), bytes: Array("\(key)\n\(multipart)".utf8), deadline: Self.deadline())
                #expect(try bucket.bucket.multipartUploads(prefix: "", deadline: Self.deadline()).count == 1)
            }
            f.clock.advance(hours: 25)
            let swept = try await f.service.sweep()
            #expect(swept.expired == 1)
            try await blocking { () throws in
                #expect(try bucket.bucket.multipartUploads(prefix: "", deadline: Self.deadline()).isEmpty, "its parts are no longer billed")
                #expect(try bucket.partFileIDs().isEmpty)
                #expect(try bucket.bucket.size(of: key, deadline: Self.deadline()) == nil)
            }
        }
    }

    /// Three instances on one PostgreSQL database and one bucket: an upload begun on one
    /// continues on another and is finalized on the third, each chunk acknowledged once;
    /// every instance serves the file, and a second finalize anywhere answers the same.
    @Test func anUploadBegunOnOneInstanceContinuesOnAnotherAndAnyServesIt() async throws {
        try await withMediaServer(limits: Self.limits, store: MediaSetup(store: .postgres, place: .s3)) { a in
            let shared = (postgresURL: a.postgresURL, bucket: a.bucket)
            let b = try await blocking { try MediaFixture(limits: Self.limits, store: .postgres, place: .s3, reopening: (try TemporaryDirectory(prefix: "outpost-media-b"), shared.postgresURL, shared.bucket)) }
            let c = try await blocking { try MediaFixture(limits: Self.limits, store: .postgres, place: .s3, reopening: (try TemporaryDirectory(prefix: "outpost-media-c"), shared.postgresURL, shared.bucket)) }
            do {
                let file = mediaBytes((6 << 20) + 99, seed: 48)
                let upload = try UploadState.decode(try await a.client().begin("sp", file: file).body)
                let pieces = chunked(file, upload.chunkSize)
                for index in 0..<3 { #expect(try await a.client().chunk("sp", upload.uploadId, index, pieces[index]).status == 200) }
                let resumed = try await b.client().begin("sp", file: file)
                let received = try UploadState.decode(resumed.body).received
                #expect(resumed.status == 200 && received == [0, 1, 2], "\(resumed.text)")
                for index in 3..<pieces.count { #expect(try await b.client().chunk("sp", upload.uploadId, index, pieces[index]).status == 200) }
                let done = try await c.client().finalize("sp", upload.uploadId)
                #expect(done.status == 200, "\(done.text)")
                #expect(try await a.client().finalize("sp", upload.uploadId).body == done.body, "finalize is idempotent on any instance")
                for server in [a, b, c] {
                    #expect(summary(try await server.client().download("sp", SHA256.hex(file)).body) == summary(file))
                }
            } catch {
                await b.stop()
                await c.stop()
                throw error
            }
            await b.stop()
            await c.stop()
        }
    }

    /// `--s3-presigned-downloads`: a GET is answered 302 to a presigned URL of the object,
    /// which serves the bytes (and a range) without any token of the client's, and is
    /// refused once changed; HEAD and conditional requests are still answered here.
    @Test func presignedDownloadsRedirectToTheBucketWithoutTheClientsToken() async throws {
        try await withMediaServer(store: MediaSetup(store: .sqlite, place: .s3), presignedDownloadSeconds: 300) { f in
            let file = mediaBytes(9000, seed: 49)
            let (_, complete) = try await f.client().upload("sp", file)
            let client = f.client()
            let answer = try await client.download("sp", complete.media.mediaId)
            #expect(answer.status == 302 && answer.header("Cache-Control") == "no-store", "\(answer.status)")
            let location = try #require(answer.header("Location"))
            #expect(location.contains("X-Amz-Expires=300") && location.contains("X-Amz-Signature="))
            #expect(!location.contains(client.token) && !location.contains(f.token(["sp"]).prefix(20)))
            let url = try #require(URL(string: location))
            let target = url.path + "?" + (url.query ?? "")
            let port = try #require(url.port)
            // As a client following the redirect sends it: the URL's host and port in Host.
            let host = ("Host", "\(url.host ?? "127.0.0.1"):\(port)")
            let got = try await blocking { try httpRequest(port: port, "GET", target, headers: [host]) }
            #expect(got.status == 200 && summary(got.body) == summary(file), "\(got.status) \(got.text.prefix(600))")
            let part = try await blocking { try httpRequest(port: port, "GET", target, headers: [host, ("Range", "bytes=100-199")]) }
            #expect(part.status == 206 && part.body == Array(file[100...199]))
            let tampered = try await blocking { try httpRequest(port: port, "GET", target.replacingOccurrences(of: "X-Amz-Expires=300", with: "X-Amz-Expires=900"), headers: [host]) }
            #expect(tampered.status == 403)
            #expect(try await client.download("sp", complete.media.mediaId, method: "HEAD").status == 200)
            let etag = "\"\(complete.media.mediaId)\""
            #expect(try await client.download("sp", complete.media.mediaId, headers: [("If-None-Match", etag)]).status == 304)
        }
    }

    /// Through `S3FaultProxy`: a burst of `503 SlowDown` and a lost answer on the chunks'
    /// PUTs, a reset in the middle of a part, the answer to the completion lost. Each is
    /// retried within its deadline; every chunk acknowledged is in the file, the file is
    /// published once with the declared bytes, and no part is left billed.
    @Test func theStoresFaultsAreRetriedAndNothingAcknowledgedIsLostOrPublishedWrong() async throws {
        let store = try await blocking { try S3TestServer.shared }
        let proxy = try S3FaultProxy(upstreamPort: store.port)
        defer { proxy.stop() }
        try await withMediaServer(limits: Self.limits, store: MediaSetup(store: .sqlite, place: .s3), s3Endpoint: proxy.endpoint) { f in
            let file = mediaBytes((11 << 20) + 5, seed: 46)
            let isChunk: @Sendable (String) -> Bool = { $0.hasPrefix("PUT ") && $0.contains("/uploads/") }
            proxy.inject([.slowDown, .slowDown, .slowDown, .loseAnswer], where: isChunk)
            proxy.inject([.reset(afterBodyBytes: 100_000)], where: { $0.hasPrefix("PUT ") && $0.contains("partNumber=2&") })
            proxy.inject([.loseAnswer], where: { $0.hasPrefix("POST ") && $0.contains("uploadId=") })
            let (_, complete) = try await f.client().upload("sp", file)
            #expect(complete.media.mediaId == SHA256.hex(file))
            #expect(proxy.faultsInjected.count == 6, "\(proxy.faultsInjected)")
            let got = try await f.client().download("sp", complete.media.mediaId)
            #expect(got.status == 200 && summary(got.body) == summary(file))
            let bucket = Self.s3(f)
            try await blocking { () throws in
                #expect(try bucket.bucket.multipartUploads(prefix: "", deadline: Self.deadline()).isEmpty)
                #expect(try bucket.partFileIDs().isEmpty)
            }
            #expect(f.metrics.value("outpost_media_s3_failures_total") >= 6)
        }
    }

    /// A store that keeps failing past the operation's retries: the client gets the
    /// protocol's `503` envelope, the chunk is not acknowledged, and sent again it is kept.
    @Test func aStoreDownPastTheRetriesIsA503AndTheChunkIsNotAcknowledged() async throws {
        let store = try await blocking { try S3TestServer.shared }
        let proxy = try S3FaultProxy(upstreamPort: store.port)
        defer { proxy.stop() }
        try await withMediaServer(store: MediaSetup(store: .sqlite, place: .s3), s3Endpoint: proxy.endpoint) { f in
            let file = mediaBytes(9000, seed: 47)
            let client = f.client()
            let upload = try UploadState.decode(try await client.begin("sp", file: file).body)
            let pieces = chunked(file, upload.chunkSize)
            proxy.inject(Array(repeating: .slowDown, count: 5), where: { $0.hasPrefix("PUT ") && $0.contains("/uploads/") })
            let refused = try await client.chunk("sp", upload.uploadId, 0, pieces[0])
            #expect(refused.status == 503 && mediaErrorCode(refused) == "unavailable", "\(refused.status) \(refused.text)")
            #expect(try UploadState.decode(try await client.state("sp", upload.uploadId).body).received == [])
            for (index, piece) in pieces.enumerated() { #expect(try await client.chunk("sp", upload.uploadId, index, piece).status == 200) }
            #expect(try await client.finalize("sp", upload.uploadId).status == 200)
            #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
        }
    }

    // MARK: A real server on --media-store s3

    /// `serve` arguments for the bucket `name` of `store`.
    static func arguments(_ store: S3TestServer, bucket name: String, endpoint: String? = nil) -> [String] {
        ["--media-store", "s3", "--s3-endpoint", endpoint ?? store.endpoint, "--s3-bucket", name, "--s3-prefix", "media/"]
    }

    static func credentials(_ store: S3TestServer, secret: String? = nil) -> [String: String] {
        ["AWS_ACCESS_KEY_ID": store.accessKey, "AWS_SECRET_ACCESS_KEY": secret ?? store.secretKey]
    }

    /// The log of a server that refused to start.
    static func refusal(_ dir: TemporaryDirectory, _ arguments: [String], _ environment: [String: String]) throws -> String {
        do {
            let server = try ServerProcess(dataDirectory: dir.appending("data-\(UUID().uuidString)"), arguments: arguments, environment: environment)
            _ = server.stop()
            return "started"
        } catch {
            return "\(error)"
        }
    }

    @Test func theServerRefusesToStartWithoutAUsableBucketAndSaysWhy() async throws {
        let (store, name) = try await S3TestServer.bucket(prefix: "start")
        try await withTemporaryDirectory(prefix: "outpost-s3-start") { dir in
            try await blocking { () throws in
                let missing = try Self.refusal(dir, Self.arguments(store, bucket: "no-such-bucket-here"), Self.credentials(store))
                #expect(missing.contains("the bucket no-such-bucket-here does not exist"), "\(missing)")
                let badSecret = "wrong-secret-\(UUID().uuidString)"
                let refused = try Self.refusal(dir, Self.arguments(store, bucket: name), Self.credentials(store, secret: badSecret))
                #expect(refused.contains("refused these credentials"), "\(refused)")
                #expect(!refused.contains(badSecret), "the secret is never printed")
                let closed = try Self.refusal(dir, Self.arguments(store, bucket: name, endpoint: "http://127.0.0.1:1"), Self.credentials(store))
                #expect(closed.contains("127.0.0.1:1"), "\(closed)")
                let none = try Self.refusal(dir, Self.arguments(store, bucket: name), [:])
                #expect(none.contains("needs credentials"), "\(none)")
            }
        }
    }

    @Test func aServerKeepsMediaInTheBucketWithCredentialsFromAFileAndNeverShowsThem() async throws {
        let (store, name) = try await S3TestServer.bucket(prefix: "serve")
        try await withTemporaryDirectory(prefix: "outpost-s3-serve") { dir in
            try await blocking { () throws in
                let file = dir.appending("s3-credentials")
                try "# media bucket\nAWS_ACCESS_KEY_ID=\(store.accessKey)\nAWS_SECRET_ACCESS_KEY=\(store.secretKey)\n".write(toFile: file, atomically: true, encoding: .utf8)
                chmod(file, 0o644)
                let open = try Self.refusal(dir, Self.arguments(store, bucket: name) + ["--s3-credentials-file", file], [:])
                #expect(open.contains("must be readable by its owner only"), "\(open)")
                chmod(file, 0o600)
                let server = try ServerProcess(dataDirectory: dir.appending("data"), arguments: Self.arguments(store, bucket: name) + ["--s3-credentials-file", file],
                                               environment: ["OUTPOST_ACCESS_LOG": "true"])
                defer { _ = server.stop() }
                let token = try server.token(spaces: ["sp"])
                let bytes = mediaBytes(300_000, seed: 45)
                let begin = try httpRequest(port: server.port, "POST", "/v1/spaces/sp/media/uploads",
                                            headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
                                            body: UploadRequest(size: Int64(bytes.count), sha256: SHA256.hex(bytes), contentType: "image/jpeg").encoded())
                let upload = try UploadState.decode(begin.body)
                for (index, piece) in chunked(bytes, upload.chunkSize).enumerated() {
                    let r = try httpRequest(port: server.port, "PUT", "/v1/spaces/sp/media/uploads/\(upload.uploadId)/chunks/\(index)",
                                            headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/octet-stream"), ("Content-Digest", contentDigest(piece))],
                                            body: piece)
                    #expect(r.status == 200, "\(r.text)")
                }
                let done = try httpRequest(port: server.port, "POST", "/v1/spaces/sp/media/uploads/\(upload.uploadId)/finalize", headers: [("Authorization", "Bearer \(token)")])
                #expect(done.status == 200, "\(done.text)")
                let got = try httpRequest(port: server.port, "GET", "/v1/spaces/sp/media/\(SHA256.hex(bytes))", headers: [("Authorization", "Bearer \(token)")])
                #expect(got.status == 200 && summary(got.body) == summary(bytes))
                let listed = try S3BucketRealStoreTests.bucket(store, name, prefix: "media/").list(prefix: "spaces/", after: nil, deadline: Self.deadline())
                #expect(listed.objects.map(\.key) == ["spaces/sp/\(SHA256.hex(bytes).prefix(2))/\(SHA256.hex(bytes))"])
                let admin = try server.token(spaces: [], admin: true)
                let metrics = try httpRequest(port: server.port, "GET", "/metrics", headers: [("Authorization", "Bearer \(admin)")])
                #expect(metrics.text.contains("outpost_media_s3_requests_total"))
                let everything = metrics.text + server.log.value.joined(separator: "\n") + TestLogs.tail(of: server.logPath)
                #expect(!everything.contains(store.secretKey), "the secret key is never in a log line or /metrics")
                #expect(!everything.contains("AWS_SECRET_ACCESS_KEY"))

                // `check` verifies the bucket against the store's rows, with the same settings.
                let checkArguments = ["check", "--data", server.dataDirectory] + Self.arguments(store, bucket: name)
                let sound = try ServerProcess.run(checkArguments, environment: Self.credentials(store))
                #expect(sound.status == 0 && sound.output.contains("1 media objects in the bucket \(name)"), "\(sound.output)")

                // `backup` keeps the rows and checks the objects, copying no bytes; `restore`
                // takes it back only with the bucket's settings.
                let out = dir.appending("backup")
                let backup = try ServerProcess.run(["backup", "--data", server.dataDirectory, "--out", out] + Self.arguments(store, bucket: name),
                                                   environment: Self.credentials(store))
                #expect(backup.status == 0, "\(backup.output)")
                let manifest = try BackupManifest.read(backup: out)
                #expect(manifest.mediaBucket == "s3:\(name)/media/" && manifest.media.count == 1)
                #expect(!FileManager.default.fileExists(atPath: out + "/media/spaces"), "no media bytes are copied")
                let without = try runToCompletion(BuildProducts.executable("outpost-server"), ["restore", "--from", out, "--data", dir.appending("restored-a")], standardError: true)
                #expect(without.status == 1 && without.output.contains("the backup's media are in the bucket s3:\(name)/media/"), "\(without.output)")
                let restored = try ServerProcess.run(["restore", "--from", out, "--data", dir.appending("restored-b")] + Self.arguments(store, bucket: name),
                                                     environment: Self.credentials(store))
                #expect(restored.status == 0, "\(restored.output)")

                let key = "spaces/sp/\(SHA256.hex(bytes).prefix(2))/\(SHA256.hex(bytes))"
                try S3BucketRealStoreTests.bucket(store, name, prefix: "media/").delete(key, deadline: Self.deadline())
                let damaged = try ServerProcess.run(checkArguments, environment: Self.credentials(store))
                #expect(damaged.status == 1 && damaged.output.contains("media object \(key) is missing from the bucket"), "\(damaged.output)")
                let refused = try runToCompletion(BuildProducts.executable("outpost-server"),
                                                  ["backup", "--data", server.dataDirectory, "--out", dir.appending("backup-2")] + Self.arguments(store, bucket: name),
                                                  environment: Self.credentials(store), standardError: true)
                #expect(refused.status == 1 && refused.output.contains("1 media file(s) that the backup names are not in the bucket"), "\(refused.output)")
            }
        }
    }
}
