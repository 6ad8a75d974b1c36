import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import Synchronization

/// Media uploads and downloads (docs/protocol.md section 6), and tus uploads into the same
/// store (`MediaService+Tus.swift`), on a `MediaStore`. Knows HTTP
/// requests and responses but no sockets; decisions are written down in docs/media.md.
///
/// Every id from a path is validated before anything is looked up or built from it, and
/// every lookup is scoped by the space of the path: an upload or file of another space
/// answers exactly like one that does not exist.
public final class MediaService: Sendable {
    /// Where the metadata and the bytes live.
    public let store: MediaStore
    /// The limits of section 3: `chunkSize` for new uploads, `maxMediaBytes`.
    public let limits: Limits
    /// Checks tokens before bodies are read.
    public let authorizer: Authorizer
    /// Where the media counters go.
    public let metrics: Metrics
    /// How long an upload lives after its last chunk (or its creation, or its finalize).
    let uploadExpiryMs: Int64
    /// The most bytes of media (files and open uploads) a space may hold; nil for no limit.
    public let quota: Int64?
    /// Server time in ms since 1970 (tests move it).
    let clock: @Sendable () -> Int64
    let locks = UploadLocks()
    private let sweeper = Mutex<Task<Void, Never>?>(nil)

    /// Largest JSON body of init and finalize.
    static let jsonBodyLimit = 64 * 1024
    /// Most indexes listed in `upload_incomplete`'s `details.missing`.
    static let maxMissingListed = 10_000

    /// A service on `store`. `uploadExpiryHours`: how long an upload lives after its last
    /// chunk; `quota`: the most media bytes a space may hold (nil: no limit); `clock`: the
    /// time in ms since 1970 (tests pass one they move).
    public init(store: MediaStore, limits: Limits, authorizer: Authorizer, metrics: Metrics, uploadExpiryHours: Int, quota: Int64? = nil,
                clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }) {
        self.quota = quota
        self.store = store
        self.limits = limits
        self.authorizer = authorizer
        self.metrics = metrics
        self.uploadExpiryMs = Int64(uploadExpiryHours) * 3_600_000
        self.clock = clock
        metrics.declare("outpost_media_bytes_received_total", help: "Media chunk bytes received, checked and kept.", kind: "counter")
        metrics.declare("outpost_media_uploads_started_total", help: "Uploads created by an init.", kind: "counter")
        metrics.declare("outpost_media_uploads_finalized_total", help: "Uploads finalized into a published file (chunked and tus).", kind: "counter")
        metrics.declare("outpost_media_uploads_expired_total", help: "Uploads (chunked and tus) removed by the expiry sweep.", kind: "counter")
        metrics.declare("outpost_media_downloads_total", help: "Media downloads served (200 and 206).", kind: "counter")
        metrics.declare("outpost_media_download_bytes_total", help: "Media bytes sent by downloads.", kind: "counter")
        metrics.declare("outpost_media_bytes_read_back_total",
                        help: "Upload bytes read back from their files to hash them: at finalize or tus completion what no running hash covers, and chunks that arrived before the bytes ahead of them.",
                        kind: "counter")
        let files = store.bytes
        metrics.counter("outpost_media_bytes_read_back_total", .none) { Double(files.readBack.total) }
        if let bucket = files as? S3MediaBytes { Self.declareS3Metrics(metrics, bucket.bucket.counters) }
        declareTusMetrics()
    }

    /// What the server's requests to the media bucket did.
    private static func declareS3Metrics(_ metrics: Metrics, _ counters: S3Counters) {
        metrics.declare("outpost_media_s3_requests_total", help: "Requests sent to the media bucket (each retry counts).", kind: "counter")
        metrics.declare("outpost_media_s3_failures_total", help: "Requests to the media bucket that failed (no answer, or an error answer).", kind: "counter")
        metrics.declare("outpost_media_s3_sent_bytes_total", help: "Body bytes sent to the media bucket.", kind: "counter")
        metrics.declare("outpost_media_s3_received_bytes_total", help: "Body bytes the media bucket answered.", kind: "counter")
        metrics.counter("outpost_media_s3_requests_total", .none) { Double(counters.requests) }
        metrics.counter("outpost_media_s3_failures_total", .none) { Double(counters.failures) }
        metrics.counter("outpost_media_s3_sent_bytes_total", .none) { Double(counters.bytesSent) }
        metrics.counter("outpost_media_s3_received_bytes_total", .none) { Double(counters.bytesReceived) }
    }

    // MARK: Routes

    /// The media routes (docs/protocol.md section 6).
    public func register(_ router: inout Router) {
        let uploads = "/v1/spaces/{space}/media/uploads"
        router.add(.POST, uploads, bodyLimit: Self.jsonBodyLimit,
                   preBody: { [self] head, parameters in _ = try await authorize(head, parameters, .write) },
                   handler: { [self] request in try await begin(request) })
        router.add(.GET, uploads + "/{uploadId}", bodyLimit: 0,
                   preBody: { [self] head, parameters in _ = try await authorize(head, parameters, .write) },
                   handler: { [self] request in try await uploadState(request) })
        router.add(.DELETE, uploads + "/{uploadId}", bodyLimit: 0,
                   preBody: { [self] head, parameters in _ = try await authorize(head, parameters, .write) },
                   handler: { [self] request in try await abort(request) })
        router.add(.PUT, uploads + "/{uploadId}/chunks/{index}", bodyLimit: max(limits.chunkSize, store.largestOpenChunkSize),
                   preBody: { [self] head, parameters in try await checkChunk(head, parameters) },
                   handler: { [self] request in try await putChunk(request) })
        router.add(.POST, uploads + "/{uploadId}/finalize", bodyLimit: Self.jsonBodyLimit,
                   preBody: { [self] head, parameters in _ = try await authorize(head, parameters, .write) },
                   handler: { [self] request in try await finalize(request) })
        router.add(.GET, "/v1/spaces/{space}/media/{mediaId}", bodyLimit: 0,
                   preBody: { [self] head, parameters in _ = try await authorize(head, parameters, .read) },
                   handler: { [self] request in try await download(request) })
        registerTus(&router)
    }

    // MARK: Parameters and errors

    /// The path's space, checked against the token: `404` for a name that cannot be a
    /// space, `401`/`403` from the authorizer.
    func authorize(_ head: HTTPRequestHead, _ parameters: [String: String], _ scope: Claims.Scope) async throws(HTTPError) -> SpaceName {
        guard let space = parameters["space"].flatMap(SpaceName.init) else { throw .invalidSpace(parameters["space"]) }
        _ = try await authorizer.authorize(head, space: space.rawValue, scope: scope)
        return space
    }

    static func space(_ parameters: [String: String]) throws(HTTPError) -> SpaceName {
        guard let space = parameters["space"].flatMap(SpaceName.init) else { throw .invalidSpace(parameters["space"]) }
        return space
    }

    static func uploadID(_ parameters: [String: String]) throws(HTTPError) -> UploadID {
        guard let id = parameters["uploadId"].flatMap(UploadID.init) else { throw uploadNotFound() }
        return id
    }

    static func chunkIndex(_ parameters: [String: String]) throws(HTTPError) -> Int {
        guard let index = parameters["index"].flatMap(parseChunkIndex) else {
            throw HTTPError(HTTPStatus(code: 422), .invalidChunkIndex, "the chunk index must be a decimal number without sign or leading zeros")
        }
        return index
    }

    static func uploadNotFound() -> HTTPError {
        HTTPError(HTTPStatus(code: 404), .uploadNotFound, "no such upload in this space, or it expired")
    }

    static func mediaNotFound() -> HTTPError {
        HTTPError(HTTPStatus(code: 404), .mediaNotFound, "no such media in this space")
    }

    static func invalidChunkIndex(_ index: Int, _ upload: UploadRecord) -> HTTPError {
        HTTPError(HTTPStatus(code: 422), .invalidChunkIndex, "chunk index \(index) is outside 0..<\(upload.chunkCount)",
                  details: ["chunkCount": .int(upload.chunkCount)])
    }

    static func invalidChunkSize(_ index: Int, got: Int, _ upload: UploadRecord) -> HTTPError {
        let expected = upload.length(ofChunk: index)
        return HTTPError(HTTPStatus(code: 422), .invalidChunkSize, "chunk \(index) must be \(expected) bytes, not \(got)",
                         details: ["expected": .int(expected)])
    }

    /// The declared chunk digest: `400 digest_required` when absent or unusable.
    static func declaredDigest(_ headers: HTTPHeaders) throws(HTTPError) -> [UInt8] {
        switch ContentDigest.sha256(fieldValues: headers.values(name: "Content-Digest")) {
        case .success(let digest): return digest
        case .failure(let problem): throw HTTPError(HTTPStatus(code: 400), .digestRequired, problem.description)
        }
    }

    /// The upload when it exists in `space` and has not expired at `now`.
    func liveUpload(_ upload: UploadRecord?, in space: SpaceName, now: Int64) throws(HTTPError) -> UploadRecord {
        guard let upload, upload.space == space, upload.expiresAt > now else { throw Self.uploadNotFound() }
        return upload
    }

    /// Runs a store call; a failure of the store or the disk becomes `503 unavailable`
    /// with `Retry-After`, never a half-answer (the same rule as the sync routes).
    func storeCall<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await HTTPError.fromStore("media store failure", "the media store cannot serve this request now; retry", body)
    }

    // MARK: 1. Init

    /// `POST /v1/spaces/{space}/media/uploads`.
    func begin(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let body = try decodeBody(UploadRequest.self, request.body)
        guard body.size <= Int64(limits.maxMediaBytes) else {
            throw HTTPError(HTTPStatus(code: 413), .payloadTooLarge, "the file is \(body.size) bytes; the limit is \(limits.maxMediaBytes)",
                            details: ["limit": .int(limits.maxMediaBytes)])
        }
        guard let sha = MediaID(body.sha256) else { throw HTTPError.invalidQuery("sha256", "must be 64 lowercase hex characters") }
        let now = clock()
        let chunkSize = limits.chunkSize
        let expiresAt = now + uploadExpiryMs
        let outcome = try await storeCall {
            try await store.begin(space: space, sha256: sha, size: body.size, now: now, quota: quota) {
                UploadRecord(id: .random(), space: space, sha256: sha, size: body.size, contentType: body.contentType,
                             filename: body.filename, chunkSize: chunkSize,
                             chunkCount: UploadState.chunkCount(size: body.size, chunkSize: chunkSize), state: .open,
                             createdAt: now, expiresAt: expiresAt)
            }
        }
        switch outcome {
        case .existing(let media):
            return HTTPResponse(json: UploadComplete(media: media.info).encoded())
        case .resumed(let upload, let received):
            return HTTPResponse(json: upload.state(received: received).encoded())
        case .overQuota(let used):
            throw Self.quotaExceeded(size: body.size, used: used, limit: quota ?? 0)
        case .created(let upload):
            metrics.increment("outpost_media_uploads_started_total")
            var headers = HTTPHeaders()
            headers.add(name: "Location", value: "/v1/spaces/\(space.rawValue)/media/uploads/\(upload.id.rawValue)")
            return HTTPResponse(status: .created, json: upload.state(received: []).encoded(), headers: headers)
        }
    }

    /// `413 media_quota_exceeded`: an upload of `size` bytes would take its space, which
    /// holds `used` bytes of files and open uploads, over `limit`.
    static func quotaExceeded(size: Int64, used: Int64, limit: Int64) -> HTTPError {
        HTTPError(HTTPStatus(code: 413), .mediaQuotaExceeded,
                  "the space holds \(used) bytes of media (files and open uploads) and this file is \(size); the space's limit is \(limit)",
                  details: ["limit": .int(Int(limit)), "used": .int(Int(used))])
    }

    // MARK: 2. Chunks

    /// Checks done before a chunk's body is read, so a client on a slow link learns of a
    /// refusal before it sends half a megabyte: token, ids, `Content-Digest` present, the
    /// upload live, the index in range and, when `Content-Length` says it, the length.
    func checkChunk(_ head: HTTPRequestHead, _ parameters: [String: String]) async throws {
        let space = try await authorize(head, parameters, .write)
        let id = try Self.uploadID(parameters)
        let index = try Self.chunkIndex(parameters)
        _ = try Self.declaredDigest(head.headers)
        let upload = try liveUpload(try await storeCall { try await store.upload(id) }, in: space, now: clock())
        guard index < upload.chunkCount else { throw Self.invalidChunkIndex(index, upload) }
        let coded = head.headers.tokens(name: "Content-Encoding").contains { $0.lowercased() != "identity" }
        if !coded, let text = head.headers["Content-Length"], let length = Int(text), length != upload.length(ofChunk: index) {
            throw Self.invalidChunkSize(index, got: length, upload)
        }
    }

    /// `PUT /v1/spaces/{space}/media/uploads/{uploadId}/chunks/{index}`.
    ///
    /// The digest is checked on the bytes in memory before anything is written. Under the
    /// upload's shared lock, the bytes go to their offset in the upload's file, then the
    /// receipt is committed; the chunk counts as received only from that commit on, so a
    /// chunk cut off mid-body, or written when the server was killed, is simply not
    /// received and is sent again.
    func putChunk(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let id = try Self.uploadID(request.pathParameters)
        let index = try Self.chunkIndex(request.pathParameters)
        let declared = try Self.declaredDigest(request.headers)
        let bytes = request.body
        let digest = SHA256.hash(bytes)
        guard digest == declared else {
            throw HTTPError(HTTPStatus(code: 422), .digestMismatch, "the chunk's SHA-256 is not the one Content-Digest declares; nothing was kept",
                            details: ["sha256": .string(Base64.encode(digest))])
        }
        return try await locks.withShared(id) { try await storeCall { try await store.withUploadLock(id, exclusive: false) {
            let now = clock()
            guard let (found, recorded) = try await storeCall({ try await store.upload(id, chunk: index) }) else { throw Self.uploadNotFound() }
            let upload = try liveUpload(found, in: space, now: now)
            guard index < upload.chunkCount else { throw Self.invalidChunkIndex(index, upload) }
            guard bytes.count == upload.length(ofChunk: index) else { throw Self.invalidChunkSize(index, got: bytes.count, upload) }
            if upload.state == .complete {
                // Finalized already: a late resend is harmless and changes nothing.
                return HTTPResponse(json: ChunkReceipt(index: index, received: upload.chunkCount).encoded())
            }
            if recorded != digest {
                if recorded != nil {
                    // Other bytes than those held: forget the old ones first, so a kill
                    // mid-write leaves the chunk missing, never mixed.
                    try await storeCall { try await store.forgetChunks(id, [index]) }
                }
                store.noteChunk(id, index: index, digest: digest)
                try await storeCall { try await store.writeChunk(id, offset: Int64(index) * Int64(upload.chunkSize), bytes: bytes) }
                metrics.increment("outpost_media_bytes_received_total", by: Double(bytes.count))
            }
            guard let received = try await storeCall({
                try await store.recordChunk(id, index: index, digest: digest, now: now, expiresAt: now + uploadExpiryMs)
            }) else { throw Self.uploadNotFound() }
            // Only bytes this request wrote feed the file's running hash.
            if recorded != digest { await store.chunkHeld(upload, index: index, bytes: bytes, digest: digest) }
            return HTTPResponse(json: ChunkReceipt(index: index, received: received).encoded())
        } } }
    }

    // MARK: 3. Upload state

    /// `GET /v1/spaces/{space}/media/uploads/{uploadId}`: the open upload with the chunks
    /// held, or, after finalize, the same answer finalize gave.
    func uploadState(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let id = try Self.uploadID(request.pathParameters)
        let upload = try liveUpload(try await storeCall { try await store.upload(id) }, in: space, now: clock())
        if upload.state == .complete {
            return try await completeAnswer(upload)
        }
        let received = try await storeCall { try await store.receivedChunks(id) }
        return HTTPResponse(json: upload.state(received: received).encoded())
    }

    private func completeAnswer(_ upload: UploadRecord) async throws -> HTTPResponse {
        guard let media = try await storeCall({ try await store.media(space: upload.space, id: upload.sha256) }) else {
            throw Self.uploadNotFound()
        }
        return HTTPResponse(json: UploadComplete(media: media.info).encoded())
    }

    // MARK: 4. Finalize

    /// `POST /v1/spaces/{space}/media/uploads/{uploadId}/finalize`.
    ///
    /// Under the upload's exclusive lock (no chunk is being written; a second finalize
    /// waits and then answers from the first's result): every chunk held, the file's
    /// SHA-256 checked, the file fsynced and renamed into place with its directory
    /// fsynced, and only then the media row committed. See `MediaFiles.finalize` for what
    /// a kill at each step leaves.
    func finalize(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let id = try Self.uploadID(request.pathParameters)
        return try await locks.withExclusive(id) { try await storeCall { try await store.withUploadLock(id, exclusive: true) {
            let upload = try liveUpload(try await storeCall { try await store.upload(id) }, in: space, now: clock())
            if upload.state == .complete { return try await completeAnswer(upload) }
            let digests = try await storeCall { try await store.chunkDigests(id) }
            let missing = (0..<upload.chunkCount).filter { digests[$0] == nil }
            guard missing.isEmpty else { throw Self.incomplete(missing) }
            let ordered = (0..<upload.chunkCount).map { digests[$0]! }
            switch try await publishFile(upload, digests: ordered, prefix: store.hashedPrefix(id, digests: ordered)) {
            case .published(let media):
                return HTTPResponse(json: UploadComplete(media: media.info).encoded())
            case .checksumMismatch(let actual):
                try await storeCall {
                    try await store.deleteUpload(id)
                    try await store.removeFile(id)
                }
                throw HTTPError(HTTPStatus(code: 422), .checksumMismatch,
                                "the file's SHA-256 is \(actual), not the declared \(upload.sha256); the upload was discarded",
                                details: ["expected": .string(upload.sha256.rawValue), "actual": .string(actual)])
            case .damagedChunks(let damaged):
                Log.error("media chunks damaged on disk; asking for them again", ["upload": id.rawValue, "count": String(damaged.count)])
                try await storeCall { try await store.forgetChunks(id, damaged) }
                throw Self.incomplete(damaged)
            }
        } } }
    }

    /// What publishing an upload's file came to.
    enum PublishOutcome: Sendable {
        case published(MediaRecord)
        /// Every chunk is as recorded, but the whole file hashes to `actual`.
        case checksumMismatch(actual: String)
        /// These chunks' bytes differ from their recorded digests.
        case damagedChunks([Int])
    }

    /// Steps 2 to 5 of finalize, for an upload whose every chunk is held, under its
    /// exclusive lock: the file checked against `upload.sha256` and the chunk digests,
    /// fsynced and renamed into place (`MediaFiles.finalize`), then the media row and the
    /// upload's completion committed (`publish`). A tus upload completes through here too.
    /// `prefix`: the running hash of the file's first bytes, when one is kept
    /// (`RunningHashes`), so that only the bytes past it are read.
    func publishFile(_ upload: UploadRecord, digests: [[UInt8]], prefix: ResumableSHA256?) async throws -> PublishOutcome {
        let outcome = try await storeCall { try await store.finalizeFile(upload, digests: digests, prefix: prefix) }
        switch outcome {
        case .published, .alreadyPublished:
            let now = clock()
            let media = try await storeCall { try await store.publish(upload, now: now, expiresAt: now + uploadExpiryMs) }
            metrics.increment("outpost_media_uploads_finalized_total")
            return .published(media)
        case .checksumMismatch(let actual):
            return .checksumMismatch(actual: actual)
        case .damagedChunks(let damaged):
            return .damagedChunks(damaged)
        }
    }

    static func incomplete(_ missing: [Int]) -> HTTPError {
        HTTPError(HTTPStatus(code: 409), .uploadIncomplete, "\(missing.count) chunks are missing",
                  details: ["missing": .ints(Array(missing.prefix(maxMissingListed))), "missingCount": .int(missing.count)])
    }

    // MARK: 5. Abort

    /// `DELETE /v1/spaces/{space}/media/uploads/{uploadId}`: `204`; the upload's bytes are
    /// removed (a finalized upload's published file stays).
    func abort(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let id = try Self.uploadID(request.pathParameters)
        return try await locks.withExclusive(id) { try await storeCall { try await store.withUploadLock(id, exclusive: true) {
            _ = try liveUpload(try await storeCall { try await store.upload(id) }, in: space, now: clock())
            try await storeCall {
                try await store.deleteUpload(id)
                try await store.removeFile(id)
            }
            return HTTPResponse(status: .noContent)
        } } }
    }

    // MARK: 6. Download

    /// `GET` and `HEAD /v1/spaces/{space}/media/{mediaId}`: the file sent from disk with
    /// `sendfile(2)` (never read into memory, never compressed), `ETag`, `Range` (one
    /// range; see `ByteRangeRequest`), `If-Range`, `If-None-Match`, and the fields that
    /// keep a browser from running it (`ServedMedia`).
    func download(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        guard let id = request.parameter("mediaId").flatMap(MediaID.init) else { throw Self.mediaNotFound() }
        guard let media = try await storeCall({ try await store.media(space: space, id: id) }) else { throw Self.mediaNotFound() }
        let etag = "\"\(id.rawValue)\""
        var headers = HTTPHeaders()
        headers.add(name: "ETag", value: etag)
        // Content-addressed: the bytes under this URL never change.
        headers.add(name: "Cache-Control", value: "private, max-age=31536000, immutable")
        ServedMedia.addHeaders(contentType: media.contentType, to: &headers)
        // RFC 9110 section 13.2.2: If-None-Match is evaluated before Range.
        let noneMatch = request.headers.values(name: "If-None-Match")
        if !noneMatch.isEmpty, EntityTags.noneMatchSatisfied(noneMatch.joined(separator: ","), etag: etag) {
            return HTTPResponse(status: .notModified, headers: headers)
        }
        if request.method == .GET, let url = store.redirect(space: space, id: id) {
            // To the bucket itself (a CDN in front of it): the URL expires, so it is never
            // cached; the client sends its Range there.
            headers.replaceOrAdd(name: "Cache-Control", value: "no-store")
            headers.add(name: "Location", value: url)
            countDownload(request, bytes: 0)
            return HTTPResponse(status: HTTPStatus(code: 302), headers: headers)
        }
        headers.add(name: "Accept-Ranges", value: "bytes")
        // Range is defined for GET only (RFC 9110 section 14.2); If-Range that does not
        // match means the whole file.
        var range = ByteRangeRequest.whole
        if request.method == .GET, let field = request.header("Range") {
            if let ifRange = request.header("If-Range"), !EntityTags.ifRangeMatches(ifRange, etag: etag) {
                range = .whole
            } else {
                range = ByteRangeRequest.evaluate(field, size: media.size)
            }
        }
        switch range {
        case .unsatisfiable:
            headers.add(name: "Content-Range", value: "bytes */\(media.size)")
            throw HTTPError(HTTPStatus(code: 416), .rangeNotSatisfiable, "the range is outside the file's \(media.size) bytes",
                            details: ["size": .int(Int(media.size))], headers: headers)
        case .partial(let offset, let length):
            headers.add(name: "Content-Type", value: media.contentType)
            headers.add(name: "Content-Range", value: "bytes \(offset)-\(offset + length - 1)/\(media.size)")
            countDownload(request, bytes: length)
            return HTTPResponse(status: .partialContent, headers: headers, body: store.body(space: space, id: id, offset: offset, length: length))
        case .whole:
            headers.add(name: "Content-Type", value: media.contentType)
            countDownload(request, bytes: media.size)
            return HTTPResponse(status: .ok, headers: headers, body: store.body(space: space, id: id, offset: 0, length: media.size))
        }
    }

    private func countDownload(_ request: HTTPRequest, bytes: Int64) {
        guard request.method == .GET else { return }
        metrics.increment("outpost_media_downloads_total")
        metrics.increment("outpost_media_download_bytes_total", by: Double(bytes))
    }

    // MARK: Expiry

    /// What one sweep removed.
    public struct SweepResult: Sendable, Equatable {
        /// Expired uploads whose rows and bytes were removed.
        public var expired: Int
        /// Upload files without an upload row (left by a crash between the two deletes).
        public var orphans: Int
    }

    /// Removes uploads expired at the clock's `now` (rows, then bytes) and upload files
    /// that have no row. Uploads in use (a chunk being written, a finalize) are skipped
    /// and taken by a later sweep.
    @discardableResult
    public func sweep() async throws -> SweepResult {
        var result = SweepResult(expired: 0, orphans: 0)
        let now = clock()
        var skipped: Set<UploadID> = []
        while true {
            let batch = try await store.expiredUploads(now: now, limit: 500 + skipped.count).filter { !skipped.contains($0) }
            if batch.isEmpty { break }
            for id in batch {
                guard locks.tryExclusive(id) else {
                    skipped.insert(id)
                    continue
                }
                defer { locks.releaseExclusive(id) }
                // Another instance may be using it (a shared media directory): skip it too.
                let removed = try await store.tryUploadLock(id) { () async throws -> Bool in
                    guard try await store.deleteUpload(id, expiredAt: now) else { return false }
                    try await store.removeFile(id)
                    return true
                }
                if removed == true {
                    result.expired += 1
                } else {
                    skipped.insert(id)
                }
            }
        }
        let onDisk = try await store.uploadFileIDs()
        if !onDisk.isEmpty {
            let known = try await store.existingUploads(onDisk)
            for id in onDisk where !known.contains(id) {
                guard locks.tryExclusive(id) else { continue }
                defer { locks.releaseExclusive(id) }
                let removed = try await store.tryUploadLock(id) { () async throws -> Bool in
                    try await store.removeFile(id)
                    return true
                }
                if removed == true { result.orphans += 1 }
            }
        }
        if result.expired > 0 { metrics.increment("outpost_media_uploads_expired_total", by: Double(result.expired)) }
        return result
    }

    /// Starts the background sweep: now, then every `interval`.
    public func startSweeper(every interval: Duration = .seconds(300)) {
        let task = Task.detached(priority: .background) { [self] in
            while !Task.isCancelled {
                do {
                    let result = try await sweep()
                    if result.expired + result.orphans > 0 {
                        Log.info("removed expired uploads", ["expired": String(result.expired), "orphans": String(result.orphans)])
                    }
                } catch {
                    Log.error("media expiry sweep failed", ["error": "\(error)"])
                }
                try? await Task.sleep(for: interval)
            }
        }
        sweeper.withLock { previous in
            previous?.cancel()
            previous = task
        }
    }

    /// Stops the sweep and closes the store.
    public func close() async {
        let task = sweeper.withLock { task -> Task<Void, Never>? in
            defer { task = nil }
            return task
        }
        task?.cancel()
        await task?.value
        await store.close()
    }
}
