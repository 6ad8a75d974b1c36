import OutpostCore
import OutpostCrypto

/// Section 6: chunked, resumable, SHA-256-verified media.
enum MediaChecks {
    /// A file to upload: its bytes, SHA-256 and chunking.
    struct File: Sendable {
        let bytes: [UInt8]
        let sha256: String
        let contentType: String

        init(_ bytes: [UInt8], contentType: String = "image/jpeg") {
            self.bytes = bytes
            self.sha256 = SHA256.hex(bytes)
            self.contentType = contentType
        }

        /// `count` random bytes.
        static func random(_ count: Int, contentType: String = "image/jpeg") -> File {
            File(SecureRandom.bytes(count), contentType: contentType)
        }

        func chunk(_ index: Int, size: Int) -> [UInt8] {
            let start = index * size
            return Array(bytes[start..<min(bytes.count, start + size)])
        }

        func chunkCount(_ size: Int) -> Int { (bytes.count + size - 1) / size }
    }

    static func uploadsPath(_ space: String, _ rest: String = "") -> String {
        CheckContext.spacePath(space, "media/uploads" + rest)
    }

    /// `Content-Digest: sha-256=:<base64>:` of `bytes` (RFC 9530).
    static func digest(_ bytes: [UInt8]) -> String {
        "sha-256=:" + Base64.encode(SHA256.hash(bytes)) + ":"
    }

    /// `POST …/media/uploads` for `file`.
    static func initResponse(_ c: CheckContext, _ space: String, _ file: File, size: Int? = nil, token: String? = nil) async throws -> RawResponse {
        let body: JSONValue = ["size": .number(JSONNumber(Int64(size ?? file.bytes.count))), "sha256": .string(file.sha256),
                               "contentType": .string(file.contentType), "filename": "conformance.bin"]
        return try await c.postJSON(uploadsPath(space), body, token: token ?? c.writeToken(space))
    }

    /// Starts an upload that must be new (201); returns its state.
    static func begin(_ c: CheckContext, _ space: String, _ file: File) async throws -> UploadState {
        let response = try await initResponse(c, space, file)
        try expectStatus(response, 201, "POST media/uploads of a new file")
        return try decodeUpload(response, "POST media/uploads")
    }

    static func decodeUpload(_ response: RawResponse, _ what: String) throws -> UploadState {
        let json = try response.json()
        do {
            return try UploadState(json: json)
        } catch {
            throw CheckFailure("\(what): the upload does not match section 6: \(error): \(response.bodyPreview)")
        }
    }

    static func decodeComplete(_ response: RawResponse, _ what: String) throws -> MediaInfo {
        let json = try response.json()
        do {
            return try UploadComplete(json: json).media
        } catch {
            throw CheckFailure("\(what): expected {\"status\": \"complete\", \"media\": …}: \(error): \(response.bodyPreview)")
        }
    }

    /// `PUT …/chunks/{index}`; `digest` nil leaves the header out.
    static func putChunk(_ c: CheckContext, _ space: String, _ uploadId: String, _ index: String, _ bytes: [UInt8], digest: String?, token: String? = nil) async throws -> RawResponse {
        var headers = [("Content-Type", "application/octet-stream")]
        if let digest { headers.append(("Content-Digest", digest)) }
        return try await c.send("PUT", uploadsPath(space, "/\(uploadId)/chunks/\(index)"), headers: headers, body: bytes, token: token ?? c.writeToken(space))
    }

    /// Sends chunk `index` of `file` with its digest and expects 200.
    static func send(_ c: CheckContext, _ space: String, _ upload: UploadState, _ file: File, _ index: Int) async throws -> ChunkReceipt {
        let bytes = file.chunk(index, size: upload.chunkSize)
        let response = try await putChunk(c, space, upload.uploadId, String(index), bytes, digest: digest(bytes))
        try expectStatus(response, 200, "PUT chunk \(index)")
        let json = try response.json()
        let receipt: ChunkReceipt
        do {
            receipt = try ChunkReceipt(json: json)
        } catch {
            throw CheckFailure("PUT chunk \(index): expected {\"index\", \"received\"}: \(error): \(response.bodyPreview)")
        }
        try expect(receipt.index == index, "PUT chunk \(index) answered index \(receipt.index)")
        return receipt
    }

    static func finalize(_ c: CheckContext, _ space: String, _ uploadId: String) async throws -> RawResponse {
        try await c.send("POST", uploadsPath(space, "/\(uploadId)/finalize"), body: [], token: c.writeToken(space))
    }

    /// Uploads `file` completely and returns its media.
    static func upload(_ c: CheckContext, _ space: String, _ file: File) async throws -> MediaInfo {
        let upload = try await begin(c, space, file)
        for i in 0..<upload.chunkCount { _ = try await send(c, space, upload, file, i) }
        let response = try await finalize(c, space, upload.uploadId)
        try expectStatus(response, 200, "finalize of a complete upload")
        return try decodeComplete(response, "finalize")
    }

    static func mediaPath(_ space: String, _ mediaId: String) -> String {
        CheckContext.spacePath(space, "media/\(mediaId)")
    }

    /// A file of about two and a half chunks.
    static func multiChunkFile(_ c: CheckContext) async throws -> (File, chunkSize: Int) {
        let chunkSize = try await c.info().limits.chunkSize
        guard chunkSize <= 8 << 20 else { throw CheckSkipped("chunkSize \(chunkSize) is too large to upload cheaply") }
        return (File.random(chunkSize * 2 + chunkSize / 2 + 1), chunkSize)
    }

    static let all: [Check] = [
        Check("media-upload-init-201", section: "6", "a new upload is 201 open with uploadId, size, sha256, chunkSize, chunkCount, received [] and expiresAt") { c in
            let (file, chunkSize) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            try expect(!upload.uploadId.isEmpty, "uploadId is empty")
            try expect(upload.status == "open", "status is \(upload.status), expected open")
            try expect(upload.size == Int64(file.bytes.count) && upload.sha256 == file.sha256, "size/sha256 are \(upload.size)/\(upload.sha256), expected \(file.bytes.count)/\(file.sha256)")
            try expect(upload.chunkSize == chunkSize, "chunkSize is \(upload.chunkSize), expected the server's chunkSize \(chunkSize)")
            try expect(upload.chunkCount == 3, "chunkCount is \(upload.chunkCount) for \(file.bytes.count) bytes in chunks of \(chunkSize), expected 3")
            try expect(upload.received.isEmpty, "received is \(upload.received), expected []")
            try expect(upload.expiresAt > unixNowMs(), "expiresAt \(upload.expiresAt) is not in the future (ms since 1970)")
        },
        Check("media-upload-init-again-returns-open-upload", section: "6", "starting an upload of a file that has an open upload answers 200 with that upload") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let first = try await begin(c, space, file)
            _ = try await send(c, space, first, file, 1)
            let again = try await initResponse(c, space, file)
            try expectStatus(again, 200, "POST media/uploads again for the same sha256 and size")
            let upload = try decodeUpload(again, "second POST media/uploads")
            try expect(upload.uploadId == first.uploadId, "a second init opened upload \(upload.uploadId) instead of returning \(first.uploadId)")
            try expect(upload.received == [1], "the returned upload lists received \(upload.received), expected [1]")
        },
        Check("media-chunks-resume", section: "6", "chunks are accepted in any order and again harmlessly; GET on the upload lists the indexes held, so a client resumes") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            let r2 = try await send(c, space, upload, file, 2)
            try expect(r2.received == 1, "after one chunk received is \(r2.received), expected 1")
            let r0 = try await send(c, space, upload, file, 0)
            try expect(r0.received == 2, "after two chunks received is \(r0.received), expected 2")
            let again = try await send(c, space, upload, file, 0)
            try expect(again.received == 2, "after a chunk was sent again received is \(again.received), expected 2")
            let status = try await c.get(uploadsPath(space, "/\(upload.uploadId)"), token: c.writeToken(space))
            try expectStatus(status, 200, "GET media/uploads/{uploadId}")
            let state = try decodeUpload(status, "GET media/uploads/{uploadId}")
            try expect(Set(state.received) == [0, 2] && state.received.count == 2, "GET lists received \(state.received), expected [0, 2]")
            try expect(state.status == "open" && state.uploadId == upload.uploadId, "GET answered status \(state.status) for \(state.uploadId)")
            _ = try await send(c, space, upload, file, 1)
            let done = try await finalize(c, space, upload.uploadId)
            try expectStatus(done, 200, "finalize after resuming")
        },
        Check("media-finalize-complete", section: "6", "finalize of a complete upload is 200 complete with the media; finalizing again answers the same") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            for i in 0..<upload.chunkCount { _ = try await send(c, space, upload, file, i) }
            let first = try await finalize(c, space, upload.uploadId)
            try expectStatus(first, 200, "finalize")
            let media = try decodeComplete(first, "finalize")
            try expect(media.mediaId == file.sha256 && media.sha256 == file.sha256, "mediaId/sha256 are \(media.mediaId)/\(media.sha256), expected \(file.sha256)")
            try expect(media.size == Int64(file.bytes.count) && media.contentType == file.contentType, "size/contentType are \(media.size)/\(media.contentType)")
            try expect(media.url == "/v1/spaces/\(space)/media/\(file.sha256)", "url is \(media.url), expected /v1/spaces/\(space)/media/\(file.sha256)")
            try expect(abs(media.createdAt - unixNowMs()) < 86_400_000, "createdAt \(media.createdAt) is not ms since 1970")
            let second = try await finalize(c, space, upload.uploadId)
            try expectStatus(second, 200, "finalize again")
            try expect(try decodeComplete(second, "finalize again") == media, "finalizing again answered other media")
        },
        Check("media-dedupe-at-init", section: "6", "starting an upload of a file the space already has answers 200 complete with the media; nothing more to send") { c in
            let file = File.random(1000)
            let space = c.newSpace()
            let media = try await upload(c, space, file)
            let again = try await initResponse(c, space, file)
            try expectStatus(again, 200, "POST media/uploads of a file the space has")
            try expect(try decodeComplete(again, "init of a stored file") == media, "the dedupe answer names other media")
        },
        Check("media-empty-file", section: "6", "a file of size 0 has chunkCount 0 and finalizes without chunks") { c in
            let file = File([], contentType: "text/plain")
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            try expect(upload.chunkCount == 0, "chunkCount is \(upload.chunkCount) for size 0")
            let done = try await finalize(c, space, upload.uploadId)
            try expectStatus(done, 200, "finalize of an empty file")
            let download = try await c.get(mediaPath(space, file.sha256), token: c.readToken(space))
            try expectStatus(download, 200, "GET of the empty media")
            try expect(download.body.isEmpty, "the empty media downloaded \(download.body.count) bytes")
        },
        Check("media-too-large-413", section: "6", "an upload whose size is over maxMediaBytes is 413 payload_too_large") { c in
            let info = try await c.info()
            let space = c.newSpace()
            let response = try await initResponse(c, space, File.random(16), size: info.limits.maxMediaBytes + 1)
            try expectError(response, 413, "payload_too_large", "POST media/uploads with size maxMediaBytes + 1")
        },
        Check("media-digest-required-400", section: "6", "a chunk without Content-Digest is 400 digest_required") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            let response = try await putChunk(c, space, upload.uploadId, "0", file.chunk(0, size: upload.chunkSize), digest: nil)
            try expectError(response, 400, "digest_required", "PUT chunk without Content-Digest")
        },
        Check("media-digest-mismatch-422", section: "6", "a chunk whose Content-Digest does not match is 422 digest_mismatch and is not kept") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            let bytes = file.chunk(0, size: upload.chunkSize)
            let response = try await putChunk(c, space, upload.uploadId, "0", bytes, digest: digest(Array(bytes.reversed())))
            try expectError(response, 422, "digest_mismatch", "PUT chunk with the digest of other bytes")
            let state = try decodeUpload(try await c.get(uploadsPath(space, "/\(upload.uploadId)"), token: c.writeToken(space)), "GET upload")
            try expect(state.received.isEmpty, "a chunk refused for its digest was kept: received \(state.received)")
        },
        Check("media-invalid-chunk-index-422", section: "6", "a chunk index outside 0..<chunkCount is 422 invalid_chunk_index") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            for index in [upload.chunkCount, upload.chunkCount + 100] {
                let bytes = file.chunk(0, size: upload.chunkSize)
                let response = try await putChunk(c, space, upload.uploadId, String(index), bytes, digest: digest(bytes))
                try expectError(response, 422, "invalid_chunk_index", "PUT chunk \(index) of \(upload.chunkCount)")
            }
        },
        Check("media-invalid-chunk-size-422", section: "6", "a chunk of the wrong length is 422 invalid_chunk_size (every chunk is chunkSize but the last)") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            let short = Array(file.chunk(0, size: upload.chunkSize).dropLast())
            try expectError(try await putChunk(c, space, upload.uploadId, "0", short, digest: digest(short)), 422, "invalid_chunk_size", "chunk 0 one byte short")
            let last = upload.chunkCount - 1
            let long = file.chunk(last, size: upload.chunkSize) + [0]
            try expectError(try await putChunk(c, space, upload.uploadId, String(last), long, digest: digest(long)), 422, "invalid_chunk_size", "last chunk one byte long")
        },
        Check("media-upload-not-found-404", section: "6", "an unknown upload is 404 upload_not_found for chunks, status and finalize") { c in
            let space = c.newSpace()
            let unknown = "no-such-upload-" + CheckContext.randomToken(10)
            let bytes: [UInt8] = [1, 2, 3]
            try expectError(try await putChunk(c, space, unknown, "0", bytes, digest: digest(bytes)), 404, "upload_not_found", "PUT chunk of an unknown upload")
            try expectError(try await c.get(uploadsPath(space, "/\(unknown)"), token: c.writeToken(space)), 404, "upload_not_found", "GET of an unknown upload")
            try expectError(try await finalize(c, space, unknown), 404, "upload_not_found", "finalize of an unknown upload")
        },
        Check("media-finalize-incomplete-409", section: "6", "finalize with chunks missing is 409 upload_incomplete with details.missing listing them") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            _ = try await send(c, space, upload, file, 1)
            let details = try expectError(try await finalize(c, space, upload.uploadId), 409, "upload_incomplete", "finalize with chunks 0 and 2 missing")
            let missing = details["missing"]?.arrayValue?.compactMap(\.int64Value) ?? []
            try expect(Set(missing) == [0, 2] && missing.count == 2, "details.missing is \(details["missing"]?.description ?? "absent"), expected [0, 2]")
        },
        Check("media-checksum-mismatch-422-discards", section: "6", "a whole file whose SHA-256 differs from the declared one is 422 checksum_mismatch, and the upload is discarded") { c in
            let (declared, chunkSize) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, declared)
            let actual = File.random(declared.bytes.count)
            for i in 0..<upload.chunkCount {
                let bytes = actual.chunk(i, size: chunkSize)
                try expectStatus(try await putChunk(c, space, upload.uploadId, String(i), bytes, digest: digest(bytes)), 200, "PUT chunk \(i) of other bytes")
            }
            try expectError(try await finalize(c, space, upload.uploadId), 422, "checksum_mismatch", "finalize of bytes whose SHA-256 is not the declared one")
            try expectError(try await c.get(uploadsPath(space, "/\(upload.uploadId)"), token: c.writeToken(space)), 404, "upload_not_found",
                            "GET of an upload discarded for its checksum")
            for sha in [declared.sha256, actual.sha256] {
                try expectError(try await c.get(mediaPath(space, sha), token: c.readToken(space)), 404, "media_not_found", "GET media \(sha.prefix(12))… after a checksum mismatch")
            }
        },
        Check("media-abort-204", section: "6", "DELETE on an open upload aborts it: 204, then the upload is unknown") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            let upload = try await begin(c, space, file)
            _ = try await send(c, space, upload, file, 0)
            let response = try await c.send("DELETE", uploadsPath(space, "/\(upload.uploadId)"), token: c.writeToken(space))
            try expectStatus(response, 204, "DELETE media/uploads/{uploadId}")
            try expect(response.body.isEmpty, "204 came with a body")
            try expectError(try await c.get(uploadsPath(space, "/\(upload.uploadId)"), token: c.writeToken(space)), 404, "upload_not_found", "GET of an aborted upload")
            let fresh = try await initResponse(c, space, file)
            try expectStatus(fresh, 201, "a new init after the abort")
        },
        Check("media-download", section: "6", "GET of a media answers the bytes with Content-Type, Content-Length, ETag \"<sha256>\" and Accept-Ranges: bytes") { c in
            let (file, _) = try await multiChunkFile(c)
            let space = c.newSpace()
            _ = try await upload(c, space, file)
            let response = try await c.get(mediaPath(space, file.sha256), token: c.readToken(space))
            try expectStatus(response, 200, "GET media")
            try expect(response.body == file.bytes, "GET media answered \(response.body.count) bytes that differ from the \(file.bytes.count) uploaded")
            try expect(response.header("Content-Type")?.lowercased().hasPrefix(file.contentType) == true, "Content-Type is \(response.header("Content-Type") ?? "absent"), expected \(file.contentType)")
            try expect(response.header("Content-Length") == String(file.bytes.count), "Content-Length is \(response.header("Content-Length") ?? "absent"), expected \(file.bytes.count)")
            try expect(response.header("ETag") == "\"\(file.sha256)\"", "ETag is \(response.header("ETag") ?? "absent"), expected \"\(file.sha256)\"")
            try expect(response.headerHasToken("Accept-Ranges", "bytes"), "Accept-Ranges is \(response.header("Accept-Ranges") ?? "absent"), expected bytes")
        },
        Check("media-range-206", section: "6", "Range: bytes=a-b answers 206 with Content-Range and just those bytes (open-ended and suffix ranges too)") { c in
            let file = File.random(5000)
            let space = c.newSpace()
            _ = try await upload(c, space, file)
            for (range, lower, upper) in [("bytes=10-19", 10, 19), ("bytes=4990-", 4990, 4999), ("bytes=-7", 4993, 4999), ("bytes=4000-99999", 4000, 4999)] {
                let response = try await c.get(mediaPath(space, file.sha256), token: c.readToken(space), headers: [("Range", range)])
                try expectStatus(response, 206, "GET media with Range: \(range)")
                try expect(response.header("Content-Range") == "bytes \(lower)-\(upper)/5000", "Range \(range): Content-Range is \(response.header("Content-Range") ?? "absent"), expected bytes \(lower)-\(upper)/5000")
                try expect(response.body == Array(file.bytes[lower...upper]), "Range \(range): the body is not bytes \(lower)-\(upper)")
            }
        },
        Check("media-range-416", section: "6", "an unsatisfiable Range is 416") { c in
            let file = File.random(100)
            let space = c.newSpace()
            _ = try await upload(c, space, file)
            for range in ["bytes=100-200", "bytes=5000-"] {
                let response = try await c.get(mediaPath(space, file.sha256), token: c.readToken(space), headers: [("Range", range)])
                try expect(response.status == 416, "GET media of 100 bytes with Range: \(range): expected 416, got \(response.summary)")
                if let contentRange = response.header("Content-Range") {
                    try expect(contentRange == "bytes */100", "416 Content-Range is \(contentRange), expected bytes */100")
                }
            }
        },
        Check("media-if-none-match-304", section: "6", "If-None-Match with the media's ETag answers 304 without a body") { c in
            let file = File.random(300)
            let space = c.newSpace()
            _ = try await upload(c, space, file)
            let response = try await c.get(mediaPath(space, file.sha256), token: c.readToken(space), headers: [("If-None-Match", "\"\(file.sha256)\"")])
            try expectStatus(response, 304, "GET media with If-None-Match: its ETag")
            try expect(response.body.isEmpty, "304 came with a body")
            let other = try await c.get(mediaPath(space, file.sha256), token: c.readToken(space), headers: [("If-None-Match", "\"\(String(repeating: "0", count: 64))\"")])
            try expectStatus(other, 200, "GET media with If-None-Match: another ETag")
        },
        Check("media-head", section: "6", "HEAD of a media answers its headers without a body") { c in
            let file = File.random(2000)
            let space = c.newSpace()
            _ = try await upload(c, space, file)
            let response = try await c.send("HEAD", mediaPath(space, file.sha256), token: c.readToken(space))
            try expectStatus(response, 200, "HEAD media")
            try expect(response.header("Content-Length") == "2000", "HEAD media: Content-Length is \(response.header("Content-Length") ?? "absent"), expected 2000")
            try expect(response.header("ETag") == "\"\(file.sha256)\"", "HEAD media: ETag is \(response.header("ETag") ?? "absent")")
        },
        Check("media-not-found-404", section: "6", "GET of an unknown media is 404 media_not_found") { c in
            let space = c.newSpace()
            let unknown = SHA256.hex(SecureRandom.bytes(16))
            try expectError(try await c.get(mediaPath(space, unknown), token: c.readToken(space)), 404, "media_not_found", "GET of an unknown media")
        },
        Check("media-scopes-and-spaces", section: "6", "uploads need write scope, downloads read scope, and a space sees only its own media") { c in
            let file = File.random(500)
            let space = c.newSpace()
            _ = try await upload(c, space, file)
            try expectError(try await initResponse(c, space, File.random(10), token: c.readToken(space)), 403, "forbidden", "POST media/uploads with a read token")
            let open = try await begin(c, space, File.random(10))
            try expectError(try await c.get(uploadsPath(space, "/\(open.uploadId)"), token: c.readToken(space)), 403, "forbidden", "GET of an upload with a read token")
            let bytes = SecureRandom.bytes(10)
            try expectError(try await putChunk(c, space, open.uploadId, "0", bytes, digest: digest(bytes), token: c.readToken(space)), 403, "forbidden",
                            "PUT chunk with a read token")
            try expectStatus(try await c.get(mediaPath(space, file.sha256), token: c.readToken(space)), 200, "GET media with a read token")
            let other = c.newSpace()
            try expectError(try await c.get(mediaPath(space, file.sha256), token: c.readToken(other)), 403, "forbidden", "GET media with a token for another space")
            try expectError(try await c.get(mediaPath(other, file.sha256), token: c.readToken(other)), 404, "media_not_found", "GET in another space of media it never stored")
            try AuthChecks.expectUnauthorized(try await c.get(mediaPath(space, file.sha256)), "GET media without a token")
        },
    ]
}
