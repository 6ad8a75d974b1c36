import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP

/// tus 1.0.0 uploads (https://tus.io/protocols/resumable-upload) into the media store:
/// the same limits, tokens, files and finalize as section 6's chunked uploads; only the
/// front door differs (docs/media.md, "tus").
///
/// ```
/// OPTIONS /v1/spaces/{space}/tus              discovery, no token
/// POST    /v1/spaces/{space}/tus              creation: Upload-Length, Upload-Metadata → 201 Location
/// HEAD    /v1/spaces/{space}/tus/{uploadId}   Upload-Offset, Upload-Length (Outpost-Media-Id once complete)
/// PATCH   /v1/spaces/{space}/tus/{uploadId}   bytes at Upload-Offset (Upload-Checksum: sha256 …) → 204
/// DELETE  /v1/spaces/{space}/tus/{uploadId}   termination → 204
/// ```
///
/// An upload's offset counts only bytes that are on disk: a PATCH's bytes are appended
/// to the upload's file and fsynced, and only then is the new offset committed. A kill
/// in between leaves bytes past the stored offset, which the next HEAD or PATCH cuts off
/// (`MediaFiles.settleTusPart`) before it answers. When the offset reaches the length,
/// the file's SHA-256 is recorded and the upload is published by section 6's finalize
/// (`publishFile`): the same checked, fsynced rename and the same media row, so the same
/// bytes uploaded twice, by either door, are one media item.
///
/// HEAD, PATCH and DELETE of one upload hold its exclusive lock (`UploadLocks`, and the
/// cross-instance lock on PostgreSQL), so PATCHes run one at a time: one that waited finds
/// the offset moved and is answered `409 offset_mismatch`.
extension MediaService {
    /// Every answer of the tus routes carries it (tus 1.0.0: "every request and response").
    static let tusAnswerHeaders: HTTPHeaders = ["Tus-Resumable": Tus.version]

    func declareTusMetrics() {
        metrics.declare("outpost_tus_uploads_created_total", help: "tus uploads created (POST).", kind: "counter")
        metrics.declare("outpost_tus_bytes_received_total", help: "tus PATCH bytes checked, fsynced and counted in an upload's offset.", kind: "counter")
        metrics.declare("outpost_tus_checksum_mismatches_total", help: "tus PATCHes answered 460: the body did not match its Upload-Checksum.", kind: "counter")
    }

    /// The tus routes. A PATCH body is held in memory like any request body, so it is
    /// bounded by `maxRequestBytes` (refused with 413 before it is read); tus clients are
    /// set to send chunks of at most that size.
    func registerTus(_ router: inout Router) {
        let collection = "/v1/spaces/{space}/tus"
        let upload = collection + "/{uploadId}"
        let answer = Self.tusAnswerHeaders
        router.add(.OPTIONS, collection, bodyLimit: 0, answerHeaders: answer,
                   handler: { [self] request in try tusOptions(request) })
        router.add(.POST, collection, bodyLimit: 0, answerHeaders: answer,
                   preBody: { [self] head, parameters in _ = try await tusCreation(head, parameters) },
                   handler: { [self] request in try await tusCreate(request) })
        router.add(.HEAD, upload, bodyLimit: 0, answerHeaders: answer,
                   preBody: { [self] head, parameters in _ = try await tusAuthorize(head, parameters) },
                   handler: { [self] request in try await tusState(request) })
        router.add(.PATCH, upload, bodyLimit: limits.maxRequestBytes, answerHeaders: answer,
                   preBody: { [self] head, parameters in try await checkTusAppend(head, parameters) },
                   handler: { [self] request in try await tusAppend(request) })
        router.add(.DELETE, upload, bodyLimit: 0, answerHeaders: answer,
                   preBody: { [self] head, parameters in _ = try await tusAuthorize(head, parameters) },
                   handler: { [self] request in try await tusTerminate(request) })
    }

    // MARK: Headers and errors

    /// The request speaks tus 1.0.0 (OPTIONS is exempt, tus 1.0.0 "Tus-Resumable"): another
    /// version is `412` (the spec's answer), no `Tus-Resumable` at all `400 invalid_header`
    /// (a request that is not tus); both say `Tus-Version`.
    static func checkTusVersion(_ head: HTTPRequestHead) throws(HTTPError) {
        guard let sent = head.headers["Tus-Resumable"]?.trimmingSpacesAndTabs else {
            var error = invalidHeader("Tus-Resumable", "is required: send Tus-Resumable: \(Tus.version)")
            error.headers.add(name: "Tus-Version", value: Tus.version)
            throw error
        }
        guard sent != Substring(Tus.version) else { return }
        throw HTTPError(HTTPStatus(code: 412), .unsupportedTusVersion,
                        "tus version \(sent.prefix(40)) is not spoken here; send Tus-Resumable: \(Tus.version)",
                        headers: ["Tus-Version": Tus.version])
    }

    /// The version checked, then the token for the path's space with write scope.
    func tusAuthorize(_ head: HTTPRequestHead, _ parameters: [String: String]) async throws(HTTPError) -> SpaceName {
        try Self.checkTusVersion(head)
        return try await authorize(head, parameters, .write)
    }

    static func invalidHeader(_ name: String, _ reason: String) -> HTTPError {
        HTTPError(HTTPStatus(code: 400), .invalidHeader, "\(name) \(reason)", details: ["header": .string(name)])
    }

    /// `Upload-Offset` of a PATCH.
    static func tusOffset(_ headers: HTTPHeaders) throws(HTTPError) -> Int64 {
        guard let text = headers["Upload-Offset"] else { throw invalidHeader("Upload-Offset", "is required") }
        guard let offset = Tus.parseSize(String(text.trimmingSpacesAndTabs)) else {
            throw invalidHeader("Upload-Offset", "must be a non-negative integer of at most 2^53 - 1")
        }
        return offset
    }

    /// A PATCH's body must be `application/offset+octet-stream` (parameters ignored).
    static func checkPatchContentType(_ headers: HTTPHeaders) throws(HTTPError) {
        let type = headers["Content-Type"].map { $0.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0].trimmingSpacesAndTabs.lowercased() }
        guard type == Tus.patchContentType else {
            throw HTTPError(HTTPStatus(code: 415), .unsupportedMediaType, "a PATCH body must be Content-Type: \(Tus.patchContentType)")
        }
    }

    /// The SHA-256 an `Upload-Checksum` declares, nil without one.
    static func tusChecksum(_ headers: HTTPHeaders) throws(HTTPError) -> [UInt8]? {
        let fields = headers.values(name: "Upload-Checksum")
        guard !fields.isEmpty else { return nil }
        guard fields.count == 1 else { throw invalidHeader("Upload-Checksum", "must be sent once") }
        switch Tus.parseChecksum(fields[0]) {
        case .sha256(let digest): return digest
        case .unsupported(let name):
            throw HTTPError(HTTPStatus(code: 400), .unsupportedChecksumAlgorithm,
                            "Upload-Checksum algorithm \(name.prefix(40)) is not offered; Tus-Checksum-Algorithm lists \(Tus.checksumAlgorithm)",
                            details: ["header": .string("Upload-Checksum")])
        case .malformed(let problem): throw invalidHeader("Upload-Checksum", problem.reason)
        }
    }

    static func offsetMismatch(_ upload: TusUploadRecord) -> HTTPError {
        HTTPError(HTTPStatus(code: 409), .offsetMismatch,
                  "Upload-Offset must be \(upload.offset), the bytes the server holds; HEAD the upload and send from there",
                  details: ["offset": .int(Int(upload.offset))], headers: ["Upload-Offset": String(upload.offset)])
    }

    static func pastLength(_ upload: TusUploadRecord) -> HTTPError {
        let remaining = Int(upload.length - upload.offset)
        return HTTPError(HTTPStatus(code: 413), .payloadTooLarge,
                         "the body would take the upload past its Upload-Length of \(upload.length); \(remaining) bytes remain",
                         details: ["limit": .int(remaining)])
    }

    /// The upload when it exists in `space`: `404 upload_not_found` otherwise, `410
    /// upload_expired` when its time ran out (until the sweep removes it).
    func liveTus(_ upload: TusUploadRecord?, in space: SpaceName, now: Int64) throws(HTTPError) -> TusUploadRecord {
        guard let upload, upload.space == space else { throw Self.uploadNotFound() }
        guard upload.expiresAt > now else {
            throw HTTPError(HTTPStatus(code: 410), .uploadExpired, "the upload expired; create a new one")
        }
        return upload
    }

    /// `Upload-Offset`, and `Upload-Expires` while open or `Outpost-Media-Id` once complete.
    static func tusHeaders(_ upload: TusUploadRecord) -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.add(name: "Upload-Offset", value: String(upload.offset))
        if upload.state == .complete, let media = upload.mediaID {
            headers.add(name: Tus.mediaIDHeader, value: media.rawValue)
        } else {
            headers.add(name: "Upload-Expires", value: Tus.expires(upload.expiresAt))
        }
        return headers
    }

    /// Runs `body` holding the upload's exclusive lock, in this process and across
    /// instances.
    func withTusLock<T: Sendable>(_ id: UploadID, _ body: () async throws -> T) async throws -> T {
        try await locks.withExclusive(id) { try await storeCall { try await store.withUploadLock(id, exclusive: true) { try await body() } } }
    }

    // MARK: OPTIONS

    /// `OPTIONS /v1/spaces/{space}/tus`: what this server speaks; no token needed.
    func tusOptions(_ request: HTTPRequest) throws -> HTTPResponse {
        _ = try Self.space(request.pathParameters)
        var headers = HTTPHeaders()
        headers.add(name: "Tus-Version", value: Tus.version)
        headers.add(name: "Tus-Extension", value: Tus.extensions)
        headers.add(name: "Tus-Max-Size", value: String(limits.maxMediaBytes))
        headers.add(name: "Tus-Checksum-Algorithm", value: Tus.checksumAlgorithm)
        return HTTPResponse(status: .noContent, headers: headers)
    }

    // MARK: Creation

    /// What a creation asks for, checked before anything is stored: version, token,
    /// `Upload-Length` (at most `maxMediaBytes`, else 413) and `Upload-Metadata`.
    func tusCreation(_ head: HTTPRequestHead, _ parameters: [String: String]) async throws(HTTPError) -> (SpaceName, Int64, Tus.Metadata) {
        let space = try await tusAuthorize(head, parameters)
        if head.headers.contains(name: "Upload-Defer-Length") {
            throw Self.invalidHeader("Upload-Defer-Length", "is not supported (no creation-defer-length); send Upload-Length")
        }
        guard let text = head.headers["Upload-Length"] else { throw Self.invalidHeader("Upload-Length", "is required") }
        guard let length = Tus.parseSize(String(text.trimmingSpacesAndTabs)) else {
            throw Self.invalidHeader("Upload-Length", "must be a non-negative integer of at most 2^53 - 1")
        }
        guard length <= Int64(limits.maxMediaBytes) else {
            throw HTTPError(HTTPStatus(code: 413), .payloadTooLarge, "the file is \(length) bytes; the limit (Tus-Max-Size) is \(limits.maxMediaBytes)",
                            details: ["limit": .int(limits.maxMediaBytes)])
        }
        switch Tus.parseMetadata(head.headers.values(name: "Upload-Metadata").joined(separator: ",")) {
        case .success(let metadata): return (space, length, metadata)
        case .failure(let problem): throw Self.invalidHeader("Upload-Metadata", problem.reason)
        }
    }

    /// `POST /v1/spaces/{space}/tus`: `201` with `Location`. An empty file is complete at
    /// once and published like any other.
    func tusCreate(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (space, length, metadata) = try await tusCreation(request.head, request.pathParameters)
        let now = clock()
        let upload = TusUploadRecord(id: .random(), space: space, length: length, offset: 0, metadata: metadata.field,
                                     contentType: metadata.contentType ?? Tus.defaultContentType, filename: metadata.filename,
                                     mediaID: nil, state: .open, createdAt: now, expiresAt: now + uploadExpiryMs)
        if let used = try await storeCall({ try await store.createTusUpload(upload, quota: quota) }) {
            throw Self.quotaExceeded(size: length, used: used, limit: quota ?? 0)
        }
        metrics.increment("outpost_tus_uploads_created_total")
        var created = upload
        if length == 0 {
            created = try await withTusLock(upload.id) { try await completeTus(upload) }
        }
        var headers = Self.tusHeaders(created)
        headers.add(name: "Location", value: "/v1/spaces/\(space.rawValue)/tus/\(upload.id.rawValue)")
        return HTTPResponse(status: .created, headers: headers)
    }

    // MARK: HEAD

    /// `HEAD /v1/spaces/{space}/tus/{uploadId}`: the offset the client resumes from.
    func tusState(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let id = try Self.uploadID(request.pathParameters)
        return try await withTusLock(id) {
            let upload = try await settle(try liveTus(try await storeCall { try await store.tusUpload(id) }, in: space, now: clock()))
            var headers = Self.tusHeaders(upload)
            headers.add(name: "Upload-Length", value: String(upload.length))
            if !upload.metadata.isEmpty { headers.add(name: "Upload-Metadata", value: upload.metadata) }
            headers.add(name: "Cache-Control", value: "no-store")
            return HTTPResponse(status: .ok, headers: headers)
        }
    }

    // MARK: PATCH

    /// Checks done before a PATCH's body is read: version, token, headers, the upload live,
    /// the offset its own and, from `Content-Length`, the body within the length.
    func checkTusAppend(_ head: HTTPRequestHead, _ parameters: [String: String]) async throws {
        let space = try await tusAuthorize(head, parameters)
        let id = try Self.uploadID(parameters)
        let offset = try Self.tusOffset(head.headers)
        try Self.checkPatchContentType(head.headers)
        _ = try Self.tusChecksum(head.headers)
        let upload = try liveTus(try await storeCall { try await store.tusUpload(id) }, in: space, now: clock())
        guard offset == upload.offset else { throw Self.offsetMismatch(upload) }
        let coded = head.headers.tokens(name: "Content-Encoding").contains { $0.lowercased() != "identity" }
        if !coded, let text = head.headers["Content-Length"], let length = Int64(text), length > upload.length - upload.offset {
            throw Self.pastLength(upload)
        }
    }

    /// `PATCH /v1/spaces/{space}/tus/{uploadId}`: `204` with the new `Upload-Offset` (and
    /// `Outpost-Media-Id` when the upload is complete).
    ///
    /// The checksum is checked on the bytes in memory first: a mismatch is `460` and
    /// nothing is written. Then, under the upload's lock: the offset checked against the
    /// stored one, the bytes appended and fsynced, the offset committed; at the length,
    /// the upload is published.
    func tusAppend(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let id = try Self.uploadID(request.pathParameters)
        let offset = try Self.tusOffset(request.headers)
        try Self.checkPatchContentType(request.headers)
        let bytes = request.body
        if let declared = try Self.tusChecksum(request.headers) {
            let digest = SHA256.hash(bytes)
            guard digest == declared else {
                metrics.increment("outpost_tus_checksum_mismatches_total")
                throw HTTPError(HTTPStatus(code: 460, reason: "Checksum Mismatch"), .checksumMismatch,
                                "the body's SHA-256 is not the one Upload-Checksum declares; nothing of it was kept",
                                details: ["sha256": .string(Base64.encode(digest))])
            }
        }
        return try await withTusLock(id) {
            let now = clock()
            var upload = try await settle(try liveTus(try await storeCall { try await store.tusUpload(id) }, in: space, now: now))
            guard offset == upload.offset else { throw Self.offsetMismatch(upload) }
            guard Int64(bytes.count) <= upload.length - upload.offset else { throw Self.pastLength(upload) }
            if !bytes.isEmpty {
                let expiresAt = now + uploadExpiryMs
                try await storeCall { try await store.appendTusPart(id, offset: offset, bytes: bytes) }
                let to = offset + Int64(bytes.count)
                guard try await storeCall({ try await store.advanceTusUpload(id, from: offset, to: to, now: now, expiresAt: expiresAt) }) else {
                    throw Self.uploadNotFound()
                }
                store.tusAppended(id, offset: offset, bytes: bytes)
                metrics.increment("outpost_tus_bytes_received_total", by: Double(bytes.count))
                upload.offset = to
                upload.expiresAt = expiresAt
                if upload.offset == upload.length { upload = try await completeTus(upload) }
            }
            return HTTPResponse(status: .noContent, headers: Self.tusHeaders(upload))
        }
    }

    // MARK: DELETE

    /// `DELETE /v1/spaces/{space}/tus/{uploadId}` (termination): `204`; the upload and its
    /// bytes are gone (a complete upload's media stays).
    func tusTerminate(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try Self.space(request.pathParameters)
        let id = try Self.uploadID(request.pathParameters)
        return try await withTusLock(id) {
            _ = try liveTus(try await storeCall { try await store.tusUpload(id) }, in: space, now: clock())
            try await storeCall {
                try await store.deleteUpload(id)
                try await store.removeFile(id)
            }
            return HTTPResponse(status: .noContent)
        }
    }

    // MARK: Under the lock

    /// Makes an open upload's file agree with its stored offset before anything is
    /// answered from it: bytes past the offset (an append cut before its commit) are cut
    /// off; when the file holds fewer (lost on the disk), the offset is lowered to them.
    /// An upload whose offset reached its length but that is not published yet (a crash
    /// or failure mid-completion) is completed now.
    func settle(_ upload: TusUploadRecord) async throws -> TusUploadRecord {
        guard upload.state == .open else { return upload }
        var upload = upload
        if upload.mediaID == nil {
            let held = try await storeCall { try await store.settleTusPart(upload.id, offset: upload.offset) }
            if held < upload.offset {
                Log.error("tus upload bytes missing on disk; its offset goes back to them",
                          ["upload": upload.id.rawValue, "offset": String(upload.offset), "held": String(held)])
                try await storeCall { try await store.lowerTusOffset(upload.id, to: held) }
                upload.offset = held
            }
        }
        if upload.offset == upload.length { upload = try await completeTus(upload) }
        return upload
    }

    /// Publishes an upload whose every byte is held: the file's SHA-256 recorded in its
    /// row (durably, before the file moves), then section 6's finalize and publish of
    /// that hash. An upload already hashed (its row has the media id) is not hashed again:
    /// its file may already be in place.
    func completeTus(_ upload: TusUploadRecord) async throws -> TusUploadRecord {
        var upload = upload
        let sha: MediaID
        // The running hash of the appends, when this process saw every one of them: the
        // bytes are not read again, neither to learn their hash nor to check it.
        let running = upload.mediaID == nil ? store.tusHash(upload.id, length: upload.length) : nil
        if let known = upload.mediaID {
            sha = known
        } else {
            let hashed: MediaID?
            if let running {
                hashed = MediaID(Hex.encode(running.digest()))
            } else {
                hashed = try await storeCall { try await store.hashPart(upload.id, length: upload.length) }
            }
            guard let hashed else {
                throw HTTPError.unavailable(retryAfterSeconds: 1, "the upload's bytes cannot be read now; retry")
            }
            try await storeCall { try await store.assembleTusUpload(upload.id, mediaID: hashed) }
            sha = hashed
        }
        switch try await publishFile(upload.finalizable(sha256: sha), digests: [Hex.decode(sha.rawValue) ?? []], prefix: running) {
        case .published(let media):
            upload.state = .complete
            upload.mediaID = media.id
            return upload
        case .checksumMismatch, .damagedChunks:
            // The bytes are not those that were hashed: only the disk changes them under
            // the lock. Forget the hash; the next request checks the file and hashes again.
            Log.error("tus upload bytes changed on disk before they were published", ["upload": upload.id.rawValue])
            try await storeCall { try await store.assembleTusUpload(upload.id, mediaID: nil) }
            throw HTTPError.unavailable(retryAfterSeconds: 1, "the upload's bytes could not be published now; retry")
        }
    }
}
