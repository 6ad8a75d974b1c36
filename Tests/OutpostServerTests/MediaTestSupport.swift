import Dispatch
import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import OutpostTestSupport
import Synchronization
@testable import OutpostServer

/// A clock in ms since 1970 that only moves when a test moves it.
final class MediaTestClock: Sendable {
    private let value: Atomic<Int64>
    init(_ start: Int64) { value = Atomic(start) }
    var now: Int64 { value.load(ordering: .relaxed) }
    func advance(hours: Double) { value.add(Int64(hours * 3_600_000), ordering: .relaxed) }
}

/// Deterministic test bytes (SplitMix64), different for each seed.
func mediaBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var random = SplitMix64(seed: seed &* 0x9E37_79B9_7F4A_7C15 &+ 1)
    return random.bytes(count)
}

/// Bytes as a short comparable text (count and SHA-256), so a failed comparison of two
/// files prints two lines instead of megabytes.
func summary(_ bytes: [UInt8]) -> String {
    "\(bytes.count) bytes, sha256 \(SHA256.hex(bytes))"
}

/// `sha-256=:<base64>:` for `bytes`.
func contentDigest(_ bytes: [UInt8]) -> String {
    "sha-256=:\(Base64.encode(SHA256.hash(bytes))):"
}

/// `bytes` cut into chunks of `size` (the last holds the rest).
func chunked(_ bytes: [UInt8], _ size: Int) -> [[UInt8]] {
    stride(from: 0, to: bytes.count, by: size).map { Array(bytes[$0..<min($0 + size, bytes.count)]) }
}

/// The error envelope's code, or nil when the body is not one.
func mediaErrorCode(_ response: TestResponse) -> String? {
    (try? ErrorEnvelope.decode(response.body))?.code
}

/// The error envelope's details.
func mediaErrorDetails(_ response: TestResponse) -> JSONObject? {
    (try? ErrorEnvelope.decode(response.body))?.details
}

/// Speaks section 6 to a server on `port` over fresh connections (one per request).
struct MediaClient: Sendable {
    let port: Int
    let token: String

    func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8]? = nil, token: String? = nil) async throws -> TestResponse {
        let port = self.port
        var all = headers
        all.append(("Authorization", "Bearer \(token ?? self.token)"))
        let fields = all
        return try await blocking { try httpRequest(port: port, method, path, headers: fields, body: body) }
    }

    func begin(_ space: String, size: Int, sha256: String, contentType: String = "image/jpeg", filename: String? = nil, token: String? = nil) async throws -> TestResponse {
        let body = UploadRequest(size: Int64(size), sha256: sha256, contentType: contentType, filename: filename).encoded()
        return try await send("POST", "/v1/spaces/\(space)/media/uploads", headers: [("Content-Type", "application/json")], body: body, token: token)
    }

    func begin(_ space: String, file: [UInt8], contentType: String = "image/jpeg", token: String? = nil) async throws -> TestResponse {
        try await begin(space, size: file.count, sha256: SHA256.hex(file), contentType: contentType, token: token)
    }

    func chunk(_ space: String, _ uploadId: String, _ index: Int, _ bytes: [UInt8], digest: String? = nil, token: String? = nil) async throws -> TestResponse {
        try await chunk(space, uploadId, String(index), bytes, digest: digest, token: token)
    }

    func chunk(_ space: String, _ uploadId: String, _ index: String, _ bytes: [UInt8], digest: String? = nil, omitDigest: Bool = false, token: String? = nil) async throws -> TestResponse {
        var headers = [("Content-Type", "application/octet-stream")]
        if !omitDigest { headers.append(("Content-Digest", digest ?? contentDigest(bytes))) }
        return try await send("PUT", "/v1/spaces/\(space)/media/uploads/\(uploadId)/chunks/\(index)", headers: headers, body: bytes, token: token)
    }

    func state(_ space: String, _ uploadId: String, token: String? = nil) async throws -> TestResponse {
        try await send("GET", "/v1/spaces/\(space)/media/uploads/\(uploadId)", token: token)
    }

    func finalize(_ space: String, _ uploadId: String, token: String? = nil) async throws -> TestResponse {
        try await send("POST", "/v1/spaces/\(space)/media/uploads/\(uploadId)/finalize", token: token)
    }

    func abort(_ space: String, _ uploadId: String, token: String? = nil) async throws -> TestResponse {
        try await send("DELETE", "/v1/spaces/\(space)/media/uploads/\(uploadId)", token: token)
    }

    func download(_ space: String, _ mediaId: String, method: String = "GET", headers: [(String, String)] = [], token: String? = nil) async throws -> TestResponse {
        try await send(method, "/v1/spaces/\(space)/media/\(mediaId)", headers: headers, token: token)
    }

    /// Init, every chunk, finalize; returns the open upload and the final answer.
    @discardableResult
    func upload(_ space: String, _ file: [UInt8], contentType: String = "image/jpeg") async throws -> (upload: UploadState, complete: UploadComplete) {
        let started = try await begin(space, file: file, contentType: contentType)
        guard started.status == 201 else { throw MediaTestFailure("init answered \(started.status): \(started.text)") }
        let upload = try UploadState.decode(started.body)
        for (index, piece) in chunked(file, upload.chunkSize).enumerated() {
            let r = try await chunk(space, upload.uploadId, index, piece)
            guard r.status == 200 else { throw MediaTestFailure("chunk \(index) answered \(r.status): \(r.text)") }
        }
        let done = try await finalize(space, upload.uploadId)
        guard done.status == 200 else { throw MediaTestFailure("finalize answered \(done.status): \(done.text)") }
        return (upload, try UploadComplete.decode(done.body))
    }
}

struct MediaTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Where a fixture's media bytes live: the media directory, or a bucket of the test run's
/// S3 store (OpenStack Swift's s3api, `S3TestServer`).
enum MediaPlace: String, Sendable {
    case directory
    case s3
}

/// A metadata store and a place for the bytes: the media tests run on each.
struct MediaSetup: Sendable, CaseIterable, CustomStringConvertible {
    let store: StoreKind
    let place: MediaPlace

    static let allCases = [MediaSetup(store: .sqlite, place: .directory), MediaSetup(store: .postgres, place: .directory),
                           MediaSetup(store: .sqlite, place: .s3), MediaSetup(store: .postgres, place: .s3)]
    var description: String { "\(store) \(place)" }
}

/// A media service over a real socket on 127.0.0.1:0, with a data directory in a
/// temporary directory and its metadata in a real SQLite file there or in a fresh database
/// of the test run's PostgreSQL cluster, with a clock the test moves.
final class MediaFixture: Sendable {
    static let secret = "media-test-secret-0123456789abcdef"
    /// Small chunks keep the tests quick; 3 chunks make a 9,000-byte file.
    static let limits: Limits = {
        var l = Limits()
        l.chunkSize = 4096
        l.maxMediaBytes = 1 << 20
        return l
    }()

    let directory: TemporaryDirectory
    let data: DataDirectory
    let store: MediaStore
    let service: MediaService
    let metrics = Metrics()
    let clock = MediaTestClock(1_800_000_000_000)
    let http: HTTPServer
    let port: Int
    let authority = JWTAuthority(secret: Array(MediaFixture.secret.utf8))

    let limits: Limits
    let kind: StoreKind
    let place: MediaPlace
    let postgresURL: String?
    /// The bucket, when the bytes are in S3.
    let bucket: String?
    private let stopped = Atomic<Bool>(false)
    /// Set by `restarted()`: the next server keeps the directory.
    private let handedOn = Atomic<Bool>(false)

    /// A fresh fixture, or, with `reopening`, a server on the data directory and database
    /// of a stopped one.
    init(limits: Limits = MediaFixture.limits, store kind: StoreKind = .sqlite, place: MediaPlace = .directory, partSize: Int = 5 << 20,
         s3Endpoint: String? = nil, presignedDownloadSeconds: Int = 0, reopening previous: (directory: TemporaryDirectory, postgresURL: String?, bucket: String?)? = nil) throws {
        self.limits = limits
        self.kind = kind
        self.place = place
        directory = try previous?.directory ?? TemporaryDirectory(prefix: "outpost-media-test")
        data = try DataDirectory(path: directory.appending("data"))
        var storeConfiguration = MediaStore.Configuration(databasePath: data.storePath, mediaDirectory: data.mediaPath)
        if kind == .postgres { storeConfiguration.postgresURL = try previous?.postgresURL ?? PostgresCluster.shared.createDatabase(prefix: "media") }
        postgresURL = storeConfiguration.postgresURL
        if place == .s3 {
            let s3 = try S3TestServer.shared
            let name = try previous?.bucket ?? s3.createBucket(prefix: "media")
            var settings = S3MediaSettings(location: try S3Location(endpoint: s3Endpoint ?? s3.endpoint, bucket: name, prefix: "outpost/", region: s3.region),
                                           credentials: S3Credentials(accessKeyId: s3.accessKey, secretAccessKey: s3.secretKey))
            settings.partSize = partSize
            settings.presignedDownloadSeconds = presignedDownloadSeconds
            storeConfiguration.s3 = settings
            bucket = name
        } else {
            bucket = nil
        }
        store = try MediaStore(configuration: storeConfiguration)
        let clock = self.clock
        service = MediaService(store: store, limits: limits, authorizer: Authorizer(authority: authority), metrics: metrics,
                               uploadExpiryHours: 24, clock: { clock.now })
        var router = Router()
        service.register(&router)
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.eventLoopCount = 2
        http = HTTPServer(configuration: configuration, router: router)
        port = try http.start()
    }

    func stop() async {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        await http.shutdown(grace: .seconds(2))
        await service.close()
        data.release()
        if !handedOn.load(ordering: .relaxed) { directory.remove() }
    }

    /// This server stopped, and another started on its data directory and database: what
    /// the next start after a crash or a power loss finds, with nothing the first kept
    /// in memory. The caller stops the new one (stopping this one again is harmless).
    func restarted() async throws -> MediaFixture {
        handedOn.store(true, ordering: .relaxed)
        await stop()
        let (limits, kind, place, previous) = (limits, kind, place, (directory: directory, postgresURL: postgresURL, bucket: bucket))
        let partSize = (store.bytes as? S3MediaBytes)?.partSize ?? 5 << 20
        return try await blocking { try MediaFixture(limits: limits, store: kind, place: place, partSize: partSize, reopening: previous) }
    }

    func token(_ spaces: [String], scope: Claims.Scope = .write) -> String {
        authority.sign(Claims(sub: "tester", exp: Int64(Date().timeIntervalSince1970) + 3600, spaces: spaces, scope: scope))
    }

    /// A client with a write token for `spaces`.
    func client(_ spaces: [String] = ["sp"], scope: Claims.Scope = .write) -> MediaClient {
        MediaClient(port: port, token: token(spaces, scope: scope))
    }

    /// The ids of the uploads whose bytes are staged: the names in `DATA/media/uploads`, or
    /// the ids under the bucket's `uploads/`.
    func uploadFiles() -> [String] {
        if let bucket = store.bytes as? S3MediaBytes { return ((try? bucket.partFileIDs()) ?? []).map(\.rawValue) }
        return ((try? FileManager.default.contentsOfDirectory(atPath: data.mediaPath + "/uploads")) ?? []).sorted()
    }

    /// Every staged byte of an upload, from 0 (nil when none is staged): the upload's file,
    /// or its pieces in the bucket.
    func stagedBytes(_ uploadId: String) throws -> [UInt8]? {
        if let bucket = store.bytes as? S3MediaBytes {
            let id = UploadID(uploadId)!
            let pieces = try bucket.pieces(id).pieces
            guard !pieces.isEmpty else { return nil }
            return try bucket.readPart(id, offset: 0, length: Int(S3MediaBytes.contiguous(pieces).covered))
        }
        return FileManager.default.contents(atPath: data.mediaPath + "/uploads/" + uploadId).map { [UInt8]($0) }
    }

    /// The names of the files published for `space` under the two-digit directory `aa`.
    func publishedNames(_ space: String, _ aa: String) throws -> [String] {
        if let bucket = store.bytes as? S3MediaBytes {
            let deadline = DispatchTime.now().uptimeNanoseconds + 30_000_000_000
            let prefix = "spaces/\(space)/\(aa)/"
            return try bucket.bucket.list(prefix: prefix, after: nil, deadline: deadline).objects.map { String($0.key.dropFirst(prefix.count)) }
        }
        return try FileManager.default.contentsOfDirectory(atPath: data.mediaPath + "/spaces/\(space)/\(aa)")
    }

    /// Whether the space's file `sha256` is published where the bytes live.
    func isPublished(_ space: String, _ sha256: String) throws -> Bool {
        if let bucket = store.bytes as? S3MediaBytes {
            let key = bucket.mediaKey(space: SpaceName(space)!, id: MediaID(sha256)!)
            return try bucket.bucket.size(of: key, deadline: DispatchTime.now().uptimeNanoseconds + 30_000_000_000) != nil
        }
        return FileManager.default.fileExists(atPath: publishedPath(space, sha256))
    }

    /// The published file's path for `space` and `sha256`.
    func publishedPath(_ space: String, _ sha256: String) -> String {
        data.mediaPath + "/spaces/\(space)/\(sha256.prefix(2))/\(sha256)"
    }
}

extension MediaFixture {
    /// Runs `body` against `restarted()`, and always stops that server.
    func afterRestart(_ body: (MediaFixture) async throws -> Void) async throws {
        try await runThenStop(try await restarted(), body)
    }

    /// Upload bytes read back from their files to hash them.
    var bytesReadBack: Double { metrics.value("outpost_media_bytes_read_back_total") }
}

/// Runs `body` against a fresh fixture on `setup` and always stops it.
func withMediaServer(limits: Limits = MediaFixture.limits, store setup: MediaSetup, partSize: Int = 5 << 20, s3Endpoint: String? = nil,
                     presignedDownloadSeconds: Int = 0, _ body: (MediaFixture) async throws -> Void) async throws {
    try await runThenStop(try await blocking {
        try MediaFixture(limits: limits, store: setup.store, place: setup.place, partSize: partSize, s3Endpoint: s3Endpoint,
                         presignedDownloadSeconds: presignedDownloadSeconds)
    }, body)
}

/// Runs `body` against a fresh fixture and always stops it.
func withMediaServer(limits: Limits = MediaFixture.limits, store: StoreKind = .sqlite, _ body: (MediaFixture) async throws -> Void) async throws {
    // Made on a thread of its own: the first PostgreSQL fixture waits for the test run's
    // cluster to start (initdb, seconds), and that wait must not hold a thread of the
    // concurrency pool, which the in-process servers of other tests answer on.
    try await runThenStop(try await blocking { try MediaFixture(limits: limits, store: store) }, body)
}

/// Runs `body` against `fixture` and always stops it.
private func runThenStop(_ fixture: MediaFixture, _ body: (MediaFixture) async throws -> Void) async throws {
    do {
        try await body(fixture)
    } catch {
        await fixture.stop()
        throw error
    }
    await fixture.stop()
}
