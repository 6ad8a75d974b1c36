import Foundation
import OutpostCore
import OutpostCrypto
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Synchronization
import Testing
@testable import Outpost
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

#if canImport(OutpostTestSupport)
/// A real `outpost-server` child with 64 KiB chunks, behind a `MediaProxy` that counts
/// chunk PUTs and cuts, loses or holds requests on real sockets. Made with `make()`, which
/// starts the child off the cooperative pool.
final class MediaWorld: Sendable {
    static let chunkSize = 65_536
    let dir: TemporaryDirectory
    let server: ServerProcess
    let proxy: MediaProxy
    let token: String
    let clock = ManualClock()
    let space = "team"

    /// Starts the server (a child process whose first line is awaited) on a thread of its own.
    static func make() async throws -> MediaWorld {
        try await blocking { try MediaWorld() }
    }

    private init() throws {
        dir = try TemporaryDirectory(prefix: "outpost-media-client")
        server = try ServerProcess(dataDirectory: dir.appending("data"), arguments: ["--chunk-size", String(Self.chunkSize)])
        proxy = try MediaProxy(upstreamPort: server.port)
        token = try server.token(spaces: ["team"])
    }

    deinit {
        server.stop()
        proxy.stop()
        dir.remove()
    }

    /// A store file `name`.sqlite on the manual clock, with a fast backoff by default.
    func store(_ name: String, backoff: OutpostStore.BackoffPolicy = .init(initial: .milliseconds(1), maximum: .milliseconds(4))) throws -> OutpostStore {
        var c = OutpostStore.Configuration(space: space)
        c.clientId = name
        c.durability = .normal
        c.randomSeed = World.seed(of: name)
        c.clock = clock.dates()
        c.backoff = backoff
        return try OutpostStore(path: dir.appending("\(name).sqlite"), configuration: c, transport: HTTPSyncTransport(baseURL: proxy.url, token: token))
    }

    /// An uploader through the proxy.
    func uploader(_ store: OutpostStore, concurrent: Int = 1, attempts: Int = 5, pieceBytes: Int = 100_000) -> MediaUploader {
        var o = MediaUploader.Options()
        o.maxConcurrentChunks = concurrent
        o.maxAttempts = attempts
        o.downloadPieceBytes = pieceBytes
        return MediaUploader(store: store, transport: HTTPMediaTransport(baseURL: proxy.url, token: token), options: o)
    }

    /// The server itself, past the proxy.
    var direct: HTTPMediaTransport { HTTPMediaTransport(baseURL: server.baseURL, token: token) }

    /// Writes `size` repeatable bytes to `name` (on a thread of its own).
    func file(_ name: String, size: Int, seed: UInt64) async throws -> (URL, Data) {
        let data = mediaBytes(size, seed: seed)
        let url = dir.url.appendingPathComponent(name)
        try await blocking { try data.write(to: url) }
        return (url, data)
    }

    /// The chunks the server holds of `uploadId`.
    func serverReceived(_ uploadId: String) async throws -> [Int] {
        guard case .open(let state) = try await direct.upload(uploadId, space: space) else { return [] }
        return state.received
    }

    static func chunkCount(_ size: Int) -> Int { (size + chunkSize - 1) / chunkSize }
}
#endif

/// Repeatable bytes (SplitMix64).
func mediaBytes(_ count: Int, seed: UInt64) -> Data {
    var random = SplitMix64(seed: seed)
    return Data(random.bytes(count))
}

func sha256Hex(_ data: Data) -> String { hexString(SHA256.hash(data)) }

/// A file's bytes, read on a thread of its own.
func contents(of url: URL) async throws -> Data {
    try await blocking { try Data(contentsOf: url) }
}

/// Collects an upload's progress values while it runs.
func collect(_ upload: MediaUpload) -> Task<[MediaProgress], Never> {
    Task {
        var values: [MediaProgress] = []
        for await p in upload.progress { values.append(p) }
        return values
    }
}

#if canImport(OutpostTestSupport)
@Suite("Media uploads against a real outpost-server", .offPoolWhileBlocking, .serialized, .serverLogs)
struct MediaTests {
    @Test func anUploadSendsEveryChunkOnceReportsProgressAndDownloadsVerified() async throws {
        let world = try await MediaWorld.make()
        let store = try world.store("phone")
        let uploader = world.uploader(store, concurrent: 3)
        let size = 5 * MediaWorld.chunkSize + 1234
        let (url, data) = try await world.file("photo.jpg", size: size, seed: 1)

        let upload = try await uploader.start(file: url, contentType: "image/jpeg", filename: "photo.jpg")
        let progress = collect(upload)
        let media = try await upload.media
        #expect(media.mediaId == sha256Hex(data))
        #expect(media.size == Int64(size))
        #expect(media.contentType == "image/jpeg")
        #expect(media.url == "/v1/spaces/team/media/\(media.mediaId)")
        #expect(world.proxy.chunkPuts().sorted() == Array(0..<6), "every chunk once")
        #expect(try await uploader.pendingUploads().isEmpty, "a finished upload leaves the store")

        let values = await progress.value
        #expect(values.last == MediaProgress(phase: .complete, bytesHashed: Int64(size), bytesSent: Int64(size), totalBytes: Int64(size)))
        #expect(values.contains { $0.phase == .hashing })
        let sent = values.filter { $0.phase == .uploading }.map(\.bytesSent)
        #expect(sent == sent.sorted(), "bytes sent never go back")
        #expect(sent.contains { $0 > 0 && $0 < Int64(size) })

        // Downloaded in 100 000-byte ranges through the proxy, checked, renamed into place.
        let copy = world.dir.url.appendingPathComponent("copy.jpg")
        try await uploader.download(mediaId: media.mediaId, to: copy)
        #expect(try await contents(of: copy) == data)
        #expect(world.proxy.log.filter { $0.method == "GET" && $0.path.hasSuffix(media.mediaId) }.count == 4)

        // An empty file is a file too (no chunks).
        let (empty, _) = try await world.file("empty.txt", size: 0, seed: 0)
        let none = try await uploader.upload(file: empty, contentType: "text/plain")
        #expect(none.size == 0 && none.mediaId == sha256Hex(Data()))
        let emptyCopy = world.dir.url.appendingPathComponent("empty-copy.txt")
        try await uploader.download(MediaReference(none), to: emptyCopy)
        #expect(try await contents(of: emptyCopy).isEmpty)
        await store.close()
    }

    @Test func aFileTheServerHasIsNotSentAgain() async throws {
        let world = try await MediaWorld.make()
        let store = try world.store("phone")
        let uploader = world.uploader(store, concurrent: 2)
        let (url, data) = try await world.file("a.bin", size: 3 * MediaWorld.chunkSize, seed: 2)
        let first = try await uploader.upload(file: url, contentType: "application/octet-stream")
        #expect(world.proxy.chunkPuts().count == 3)
        let mark = world.proxy.log.count
        let again = try await uploader.upload(file: url, contentType: "application/octet-stream")
        #expect(again == first)
        // The same bytes under another name, from another device.
        let copy = world.dir.url.appendingPathComponent("copy.bin")
        try await blocking { try data.write(to: copy) }
        let other = try world.store("laptop")
        let fromLaptop = try await world.uploader(other).upload(file: copy, contentType: "application/octet-stream")
        #expect(fromLaptop.mediaId == first.mediaId)
        #expect(world.proxy.chunkPuts(since: mark).isEmpty, "init answered complete: no chunk was sent")
        #expect(world.proxy.log.dropFirst(mark).allSatisfy { $0.method == "POST" && $0.path.hasSuffix("/media/uploads") })
        await store.close()
        await other.close()
    }

    @Test func aConnectionCutMidChunkThenResumedSendsOnlyTheMissingChunks() async throws {
        let world = try await MediaWorld.make()
        // A backoff of a minute, and one attempt per call: the cut ends the call.
        let store = try world.store("phone", backoff: .init(initial: .seconds(60), maximum: .seconds(120)))
        let uploader = world.uploader(store, attempts: 1)
        let size = 5 * MediaWorld.chunkSize - 10
        let (url, data) = try await world.file("video.mp4", size: size, seed: 3)
        world.proxy.on("/chunks/2", .cutRequest(afterBodyBytes: 20_000))

        await #expect(throws: MediaError.self) { try await uploader.upload(file: url, contentType: "video/mp4") }
        #expect(world.proxy.chunkPuts() == [0, 1, 2])
        let pending = try #require(try await uploader.pendingUploads().first)
        #expect(pending.state == .waiting && pending.attempts == 1 && pending.chunksAcknowledged == 2 && pending.chunkCount == 5)
        #expect(pending.mediaId == sha256Hex(data) && pending.lastError != nil)
        #expect(pending.nextAttemptAt.milliseconds > world.clock.now, "the retry time is the store's backoff")
        #expect(try await world.serverReceived(try #require(pending.uploadId)) == [0, 1], "nothing of the cut chunk was kept")

        // Not due yet: nothing is sent.
        let mark = world.proxy.log.count
        #expect(try await uploader.resumeUploads().isEmpty)
        #expect(world.proxy.log.count == mark)

        world.clock.advance(121_000)
        let media = try #require(try await uploader.resumeUploads().first)
        #expect(media.mediaId == sha256Hex(data))
        #expect(world.proxy.chunkPuts(since: mark) == [2, 3, 4], "only the chunks the server lacked")
        #expect(try await uploader.pendingUploads().isEmpty)
        let copy = world.dir.url.appendingPathComponent("copy.mp4")
        try await uploader.download(mediaId: media.mediaId, to: copy)
        #expect(try await contents(of: copy) == data)
        await store.close()
    }

    @Test func aChunkWhoseAnswerWasLostIsNotSentAgain() async throws {
        let world = try await MediaWorld.make()
        let store = try world.store("phone")
        let uploader = world.uploader(store)
        let (url, data) = try await world.file("a.wav", size: 4 * MediaWorld.chunkSize, seed: 4)
        world.proxy.on("/chunks/1", .loseAnswer)
        let media = try await uploader.upload(file: url, contentType: "audio/wav")
        #expect(media.mediaId == sha256Hex(data))
        // The retry asked the server (GET of the upload), which held chunk 1 already.
        #expect(world.proxy.chunkPuts() == [0, 1, 2, 3])
        #expect(world.proxy.log.contains { $0.method == "GET" && $0.path.contains("/media/uploads/") })
        await store.close()
    }

    /// The process "dies" while chunk 3's request is held (the store is closed: nothing more
    /// is written), with the server holding chunk 3 (`forward`) or not.
    @Test(arguments: [true, false])
    func anUploaderResumedAfterACrashSendsOnlyTheRemainingChunks(serverGotTheHeldChunk: Bool) async throws {
        let world = try await MediaWorld.make()
        var store = try world.store("phone")
        let size = 6 * MediaWorld.chunkSize - 1000
        let (url, data) = try await world.file("scan.pdf", size: size, seed: 5)
        world.proxy.on("/chunks/3", .hold(forward: serverGotTheHeldChunk))
        let upload = try await world.uploader(store).start(file: url, contentType: "application/pdf")
        try await world.proxy.waitUntilHeld()
        await store.close()
        upload.cancel()
        _ = try? await upload.media
        world.proxy.releaseHeld()
        try await world.proxy.waitUntilQuiet()
        #expect(world.proxy.chunkPuts() == [0, 1, 2, 3])

        store = try world.store("phone")
        let uploader = world.uploader(store)
        let pending = try #require(try await uploader.pendingUploads().first)
        #expect(pending.chunksAcknowledged == 3, "chunks 0 to 2 were acknowledged and recorded")
        let held = try await world.serverReceived(try #require(pending.uploadId))
        #expect(held == (serverGotTheHeldChunk ? [0, 1, 2, 3] : [0, 1, 2]))

        let mark = world.proxy.log.count
        let resumed = try await uploader.resumeUploads()
        #expect(resumed.map(\.mediaId) == [sha256Hex(data)])
        #expect(world.proxy.chunkPuts(since: mark) == (serverGotTheHeldChunk ? [4, 5] : [3, 4, 5]))
        #expect(!world.proxy.log.dropFirst(mark).contains { $0.method == "POST" && $0.path.hasSuffix("/media/uploads") },
                "the known upload was asked for, not a new one begun")
        #expect(try await uploader.pendingUploads().isEmpty)
        await store.close()
    }

    @Test func anUploadTheServerForgotIsBegunAgain() async throws {
        let world = try await MediaWorld.make()
        let store = try world.store("phone", backoff: .init(initial: .milliseconds(1), maximum: .milliseconds(1)))
        let uploader = world.uploader(store, attempts: 1)
        let (url, data) = try await world.file("b.bin", size: 4 * MediaWorld.chunkSize, seed: 6)
        world.proxy.on("/chunks/2", .cutRequest(afterBodyBytes: 100))
        await #expect(throws: MediaError.self) { try await uploader.upload(file: url, contentType: "application/octet-stream") }
        let old = try #require(try await uploader.pendingUploads().first?.uploadId)
        // Expired or aborted: the server answers 404 upload_not_found from now on.
        try await world.direct.abort(old, space: world.space)
        world.clock.advance(10)
        let mark = world.proxy.log.count
        let media = try #require(try await uploader.resumeUploads().first)
        #expect(media.mediaId == sha256Hex(data))
        let after = Array(world.proxy.log.dropFirst(mark))
        #expect(after.first?.method == "GET" && after.first?.path.hasSuffix(old) == true)
        #expect(after.contains { $0.method == "POST" && $0.path.hasSuffix("/media/uploads") }, "init again")
        #expect(world.proxy.chunkPuts(since: mark) == [0, 1, 2, 3], "a new upload: every chunk")
        #expect(!world.proxy.log.dropFirst(mark).contains { $0.chunk != nil && $0.path.contains(old) })
        await store.close()
    }

    @Test func aFileChangedDuringItsUploadStartsOverWithItsNewHash() async throws {
        let world = try await MediaWorld.make()
        let store = try world.store("phone")
        let uploader = world.uploader(store)
        let (url, data) = try await world.file("note.txt", size: 4 * MediaWorld.chunkSize, seed: 7)
        world.proxy.on("/chunks/2", .hold(forward: false))
        let upload = try await uploader.start(file: url, contentType: "text/plain")
        let progress = collect(upload)
        try await world.proxy.waitUntilHeld()
        let extra = mediaBytes(5000, seed: 8)
        try await blocking {
            let handle = try FileHandle(forWritingTo: url)
            try handle.seekToEnd()
            try handle.write(contentsOf: extra)
            try handle.close()
        }
        world.proxy.releaseHeld()
        let media = try await upload.media
        #expect(media.mediaId == sha256Hex(data + extra))
        #expect(media.size == Int64(data.count + extra.count))
        #expect(await progress.value.last?.restarts == 1)
        #expect(world.proxy.log.contains { $0.method == "DELETE" }, "the abandoned upload was aborted")
        #expect(try await uploader.pendingUploads().isEmpty)
    }

    @Test func aFileTouchedBetweenRunsKeepsItsUploadAndOneRewrittenStartsOver() async throws {
        let world = try await MediaWorld.make()
        let store = try world.store("phone")
        let uploader = world.uploader(store, attempts: 1)
        let (url, data) = try await world.file("d.bin", size: 4 * MediaWorld.chunkSize, seed: 12)
        world.proxy.on("/chunks/2", .cutRequest(afterBodyBytes: 10))
        await #expect(throws: MediaError.self) { try await uploader.upload(file: url, contentType: "application/octet-stream") }
        let first = try #require(try await uploader.pendingUploads().first?.uploadId)

        // Touched (a new mtime, the same bytes): hashed again, and the server's upload holds.
        try await blocking { try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: 120)], ofItemAtPath: url.path) }
        world.clock.advance(10)
        var mark = world.proxy.log.count
        let touched = try await uploader.upload(file: url, contentType: "application/octet-stream")
        #expect(touched.mediaId == sha256Hex(data))
        #expect(world.proxy.chunkPuts(since: mark) == [2, 3])
        #expect(world.proxy.log.dropFirst(mark).first.map { $0.method == "GET" && $0.path.hasSuffix(first) } == true)

        // Rewritten between runs: the old upload is aborted and the new bytes start over.
        let (other, _) = try await world.file("e.bin", size: 4 * MediaWorld.chunkSize, seed: 13)
        world.proxy.on("/chunks/1", .cutRequest(afterBodyBytes: 10))
        await #expect(throws: MediaError.self) { try await uploader.upload(file: other, contentType: "application/octet-stream") }
        let abandoned = try #require(try await uploader.pendingUploads().first?.uploadId)
        let rewritten = mediaBytes(4 * MediaWorld.chunkSize, seed: 14)
        try await blocking { try rewritten.write(to: other) }
        world.clock.advance(10)
        mark = world.proxy.log.count
        let run = try await uploader.start(file: other, contentType: "application/octet-stream")
        let progress = collect(run)
        #expect(try await run.media.mediaId == sha256Hex(rewritten))
        #expect(await progress.value.last?.restarts == 1, "the upload says it started over")
        #expect(world.proxy.log.dropFirst(mark).contains { $0.method == "DELETE" && $0.path.hasSuffix(abandoned) })
        #expect(world.proxy.chunkPuts(since: mark) == [0, 1, 2, 3])
        do {
            _ = try await world.direct.upload(abandoned, space: world.space)
            Issue.record("the abandoned upload should be gone")
        } catch let error as TransportError {
            #expect(error.errorCode == "upload_not_found")
        }
        await store.close()
    }

    @Test func aDownloadWhoseBytesDoNotMatchItsIdFailsAndLeavesNothing() async throws {
        let world = try await MediaWorld.make()
        let store = try world.store("phone")
        let uploader = world.uploader(store)
        let (url, _) = try await world.file("c.jpg", size: 150_000, seed: 9)
        let media = try await uploader.upload(file: url, contentType: "image/jpeg")
        // Damage the stored file on the server (same length, one byte flipped).
        let stored = world.server.dataDirectory + "/media/spaces/team/\(media.mediaId.prefix(2))/\(media.mediaId)"
        try await blocking {
            var bytes = try Data(contentsOf: URL(fileURLWithPath: stored))
            bytes[70_000] ^= 0x01
            try bytes.write(to: URL(fileURLWithPath: stored))
        }
        let downloads = world.dir.url.appendingPathComponent("downloads")
        try await blocking { try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true) }
        let destination = downloads.appendingPathComponent("c.jpg")
        let damaged = sha256Hex(try await contents(of: URL(fileURLWithPath: stored)))
        await #expect(throws: MediaError.downloadCorrupt(mediaId: media.mediaId, actual: damaged)) {
            try await uploader.download(mediaId: media.mediaId, to: destination)
        }
        #expect(try await blocking { try FileManager.default.contentsOfDirectory(atPath: downloads.path) }.isEmpty, "no file, no temporary file")

        let unknown = String(repeating: "ab", count: 32)
        await #expect(throws: MediaError.mediaNotFound(mediaId: unknown)) { try await uploader.download(mediaId: unknown, to: destination) }
        await #expect(throws: MediaError.self) { try await uploader.download(mediaId: "not-an-id", to: destination) }
        await store.close()
    }
}
#endif

// MARK: - Answers a real server gives only after losing bytes

/// The media protocol in memory, with the faults of a server that lost chunk bytes (409
/// after every chunk was acknowledged) or joined them wrongly (422 checksum_mismatch).
actor FakeMediaServer: MediaTransport {
    var chunkSize = 4
    /// Chunks finalize finds lost, once.
    var loseOnFinalize: [Int] = []
    /// Every finalize finds another hash.
    var corruptOnJoin = false
    private(set) var puts: [Int] = []
    private var uploads: [String: (request: UploadRequest, chunks: [Int: Data])] = [:]
    private var media: [String: MediaInfo] = [:]
    private var next = 0

    func configure(loseOnFinalize: [Int] = [], corruptOnJoin: Bool = false) {
        self.loseOnFinalize = loseOnFinalize
        self.corruptOnJoin = corruptOnJoin
    }

    private func state(_ id: String) throws -> UploadState {
        guard let u = uploads[id] else { throw Self.refused(404, "upload_not_found") }
        return UploadState(uploadId: id, size: u.request.size, sha256: u.request.sha256, chunkSize: chunkSize,
                           chunkCount: UploadState.chunkCount(size: u.request.size, chunkSize: chunkSize), received: u.chunks.keys.sorted(), expiresAt: 0)
    }

    static func refused(_ status: Int, _ code: String, _ details: JSONObject? = nil) -> TransportError {
        .refused(status: status, ErrorEnvelope(code: code, message: code, details: details))
    }

    func beginUpload(_ request: UploadRequest, space: String) async throws -> UploadAnswer {
        if let m = media[request.sha256] { return .complete(m) }
        if let (id, _) = uploads.first(where: { $0.value.request.sha256 == request.sha256 }) { return .open(try state(id)) }
        next += 1
        let id = String(format: "%032x", next)
        uploads[id] = (request, [:])
        return .open(try state(id))
    }

    func upload(_ uploadId: String, space: String) async throws -> UploadAnswer { .open(try state(uploadId)) }

    func putChunk(_ bytes: Data, digest: [UInt8], index: Int, uploadId: String, space: String) async throws -> ChunkReceipt {
        puts.append(index)
        guard uploads[uploadId] != nil else { throw Self.refused(404, "upload_not_found") }
        guard SHA256.hash(bytes) == digest else { throw Self.refused(422, "digest_mismatch") }
        uploads[uploadId]!.chunks[index] = bytes
        return ChunkReceipt(index: index, received: uploads[uploadId]!.chunks.count)
    }

    func finalize(_ uploadId: String, space: String) async throws -> MediaInfo {
        let s = try state(uploadId)
        if !loseOnFinalize.isEmpty {
            for i in loseOnFinalize { uploads[uploadId]!.chunks[i] = nil }
            loseOnFinalize = []
        }
        let missing = (0..<s.chunkCount).filter { uploads[uploadId]!.chunks[$0] == nil }
        guard missing.isEmpty else {
            throw Self.refused(409, "upload_incomplete", ["missing": .array(missing.map { .number(JSONNumber(Int64($0))) })])
        }
        var joined = Data()
        for i in 0..<s.chunkCount { joined += uploads[uploadId]!.chunks[i]! }
        if corruptOnJoin { joined.append(0) }
        let actual = sha256Hex(joined)
        guard actual == s.sha256 else {
            uploads[uploadId] = nil
            throw Self.refused(422, "checksum_mismatch", ["expected": .string(s.sha256), "actual": .string(actual)])
        }
        let info = MediaInfo(mediaId: s.sha256, sha256: s.sha256, size: s.size, contentType: uploads[uploadId]!.request.contentType,
                             url: "/v1/spaces/\(space)/media/\(s.sha256)", createdAt: 1)
        media[s.sha256] = info
        uploads[uploadId] = nil
        return info
    }

    func abort(_ uploadId: String, space: String) async throws { uploads[uploadId] = nil }

    func mediaSize(_ mediaId: String, space: String) async throws -> Int64 {
        guard let m = media[mediaId] else { throw Self.refused(404, "media_not_found") }
        return m.size
    }

    func mediaBytes(_ mediaId: String, range: Range<Int64>, space: String) async throws -> Data {
        throw Self.refused(404, "media_not_found")
    }
}

@Suite("Media uploader: finalize answers", .offPoolWhileBlocking, .serverLogs)
struct MediaFinalizeTests {
    func setUp(_ dir: TemporaryDirectory) async throws -> (OutpostStore, MediaUploader, FakeMediaServer, URL, Data) {
        var c = OutpostStore.Configuration(space: "team")
        c.randomSeed = 3
        c.backoff = .init(initial: .milliseconds(1), maximum: .milliseconds(1))
        let store = try OutpostStore.inMemory(configuration: c)
        let server = FakeMediaServer()
        var o = MediaUploader.Options()
        o.maxConcurrentChunks = 1
        let uploader = MediaUploader(store: store, transport: server, options: o)
        let data = mediaBytes(18, seed: 11)  // 5 chunks of 4 bytes (the last of 2)
        let url = dir.url.appendingPathComponent("f.bin")
        try await blocking { try data.write(to: url) }
        return (store, uploader, server, url, data)
    }

    @Test func chunksFinalizeFindsMissingAreSentAgain() async throws {
        try await withTemporaryDirectory { dir in
            let (_, uploader, server, url, data) = try await setUp(dir)
            await server.configure(loseOnFinalize: [1, 3])
            let media = try await uploader.upload(file: url, contentType: "application/octet-stream")
            #expect(media.mediaId == sha256Hex(data))
            #expect(await server.puts == [0, 1, 2, 3, 4, 1, 3])
        }
    }

    @Test func aChecksumMismatchFailsForGoodUntilTheFileIsUploadedAgain() async throws {
        try await withTemporaryDirectory { dir in
            let (_, uploader, server, url, data) = try await setUp(dir)
            await server.configure(corruptOnJoin: true)
            do {
                _ = try await uploader.upload(file: url, contentType: "application/octet-stream")
                Issue.record("expected a checksum mismatch")
            } catch let error as MediaError {
                guard case .checksumMismatch(let expected, let actual) = error else { throw error }
                #expect(expected == sha256Hex(data) && actual != nil && actual != expected)
                #expect(error.isPermanent)
            }
            let failed = try #require(try await uploader.pendingUploads().first)
            #expect(failed.state == .failed && failed.errorCode == "checksum_mismatch" && failed.uploadId == nil)
            #expect(try await uploader.resumeUploads().isEmpty, "a failed upload is not resumed")
            #expect(await server.puts.count == 5)
            // Asked again by the app: hashed again, a new upload.
            await server.configure()
            #expect(try await uploader.upload(file: url, contentType: "application/octet-stream").mediaId == sha256Hex(data))
            #expect(try await uploader.pendingUploads().isEmpty)
        }
    }

    @Test func enqueuedFilesHaveTheirReferenceAtOnceAndGoWithResume() async throws {
        try await withTemporaryDirectory { dir in
            let (store, uploader, server, url, data) = try await setUp(dir)
            let reference = try await uploader.enqueue(file: url, contentType: "image/png", filename: "f.png")
            #expect(reference == MediaReference(mediaId: sha256Hex(data), contentType: "image/png", size: 18, filename: "f.png"))
            #expect(await server.puts.isEmpty, "enqueue never touches the network")
            // The record can be saved offline, pointing at the file.
            struct Shot: Codable, Equatable { var image: MediaReference }
            try await store.save(Shot(image: reference), in: "shots", id: "s1")
            #expect(try await store.get(Shot.self, from: "shots", id: "s1") == Shot(image: reference))
            #expect(try await uploader.resumeUploads().map(\.mediaId) == [reference.mediaId])
            #expect(await server.puts == [0, 1, 2, 3, 4])
        }
    }

    @Test func invalidArgumentsAndMissingFilesAreRefused() async throws {
        try await withTemporaryDirectory { dir in
            let (_, uploader, _, url, _) = try await setUp(dir)
            await #expect(throws: MediaError.self) { try await uploader.upload(file: url, contentType: "jpeg") }
            let missing = dir.url.appendingPathComponent("nope.bin")
            do {
                _ = try await uploader.upload(file: missing, contentType: "image/png")
                Issue.record("expected fileUnreadable")
            } catch let error as MediaError {
                guard case .fileUnreadable = error else { throw error }
                #expect(error.isPermanent)
            }
        }
    }

    /// A file a locked device's data protection keeps closed (`EPERM`, `EACCES`) is a wait,
    /// not a failure for good: the upload stays waiting and resumes once it opens. (This
    /// machine runs the tests as root, whom no permission stops, so the rule is checked
    /// where it is decided, on the two codes.)
    @Test func aFileProtectedWhileTheDeviceIsLockedWaitsInsteadOfFailingForGood() {
        for code in [EPERM, EACCES] {
            let error = MediaFiles.readFailure("/photos/roof.jpg", code)
            guard case .fileProtected = error else { Issue.record("\(code) gave \(error)"); continue }
            #expect(!error.isPermanent && error.code == "file_protected")
        }
        #expect(MediaFiles.readFailure("/photos/roof.jpg", ENOENT).isPermanent)
        #expect(MediaFiles.readFailure("/photos/roof.jpg", EISDIR).code == "file_unreadable")
    }
}

// MARK: - The command-line client

#if canImport(OutpostTestSupport)
@Suite("outpost upload", .offPoolWhileBlocking, .serialized, .serverLogs)
struct MediaCLITests {
    struct Run: Sendable {
        var status: Int32
        var stdout: String
        var stderr: String
        var json: JSONValue? { try? JSONParser.parse(stdout.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// The environment of an `outpost` child: none of the CLI's own variables.
    static var cliEnvironment: [String: String] {
        Subprocess.environment { ["OUTPOST_STORE", "OUTPOST_SERVER", "OUTPOST_SPACE", "OUTPOST_TOKEN"].contains($0) }
    }

    /// Runs `outpost ARGS` to completion on a thread of its own.
    static func outpost(_ arguments: [String]) async throws -> Run {
        try await blocking {
            let result = try Subprocess.run(BuildProducts.executable("outpost-cli"), arguments, environment: cliEnvironment)
            return Run(status: result.status, stdout: result.output, stderr: result.error)
        }
    }

    @Test func uploadPrintsTheMediaAndResumesAfterTheClientWasKilled() async throws {
        let world = try await MediaWorld.make()
        let store = world.dir.appending("cli.sqlite")
        let base = ["--store", store, "--space", "team", "--server", world.proxy.url.absoluteString, "--token", world.token]
        let size = 6 * MediaWorld.chunkSize + 77
        let (url, data) = try await world.file("clip.mp4", size: size, seed: 21)

        // Killed (SIGKILL) while chunk 3's request hangs.
        world.proxy.on("/chunks/3", .hold(forward: false))
        let child = try Subprocess(BuildProducts.executable("outpost-cli"), base + ["upload", url.path], environment: Self.cliEnvironment)
        try await world.proxy.waitUntilHeld()
        child.send(SIGKILL)
        let ended = await child.exited()
        try await world.proxy.waitUntilQuiet()
        world.proxy.releaseHeld()
        #expect(ended == .signaled(SIGKILL))

        let left = try OutpostStore(path: store, configuration: .init(space: "team"))
        let pending = try await MediaUploader(store: left, transport: world.direct).pendingUploads()
        await left.close()
        #expect(pending.count == 1 && pending.first?.mediaId == sha256Hex(data) && pending.first?.contentType == "video/mp4")
        let held = try await world.serverReceived(try #require(pending.first?.uploadId))
        #expect(!held.isEmpty && !held.contains(3))

        let mark = world.proxy.log.count
        let resumed = try await Self.outpost(base + ["upload", url.path])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(resumed.json?["mediaId"]?.stringValue == sha256Hex(data))
        #expect(resumed.json?["size"]?.int64Value == Int64(size))
        #expect(resumed.json?["contentType"] == "video/mp4")
        #expect(resumed.stderr.contains("resuming"))
        let sent = world.proxy.chunkPuts(since: mark)
        #expect(sent.sorted() == Array(Set(0..<7).subtracting(held)).sorted(), "only what the server lacked, once each")

        // Again: the server has it; nothing is sent. A missing file fails for good.
        let again = world.proxy.log.count
        let second = try await Self.outpost(base + ["upload", url.path, "--content-type", "video/mp4"])
        #expect(second.status == 0 && second.json?["mediaId"]?.stringValue == sha256Hex(data))
        #expect(world.proxy.chunkPuts(since: again).isEmpty)
        let missing = try await Self.outpost(base + ["upload", world.dir.appending("nope.jpg")])
        #expect(missing.status == 1 && missing.json?["error"]?["code"] == "file_unreadable")
        #expect(try await Self.outpost(base + ["upload"]).status == 64)
        #expect(try await Self.outpost(base + ["upload", url.path, "--content-type", "nonsense"]).status == 64)
        #expect(try await Self.outpost(["--help"]).stdout.contains("upload FILE [--content-type TYPE]"))
    }
}
#endif
