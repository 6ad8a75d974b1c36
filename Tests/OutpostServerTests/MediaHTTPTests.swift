import Foundation
import OutpostCore
import OutpostCrypto
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// docs/protocol.md section 6 over real sockets against an in-process media service: every
/// route, status and code, plus resume, expiry, isolation and traversal, with the
/// metadata on each store (the rules of `SQLMediaMetadata` over each `SQLSession`).
@Suite struct MediaHTTPTests {
    // MARK: 1. Init

    @Test(arguments: MediaSetup.allCases) func initCreatesAnUploadAndReturnsTheSameOpenUploadAgain(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 1)
            let first = try await client.begin("sp", file: file)
            #expect(first.status == 201)
            let upload = try UploadState.decode(first.body)
            #expect(upload.status == "open")
            #expect(upload.size == 9000)
            #expect(upload.sha256 == SHA256.hex(file))
            #expect(upload.chunkSize == 4096)
            #expect(upload.chunkCount == 3)
            #expect(upload.received == [])
            #expect(upload.expiresAt == server.clock.now + 24 * 3_600_000)
            #expect(UploadID(upload.uploadId) != nil)
            #expect(first.header("Location") == "/v1/spaces/sp/media/uploads/\(upload.uploadId)")

            #expect(try await client.chunk("sp", upload.uploadId, 1, chunked(file, 4096)[1]).status == 200)
            // A client that lost the answer asks again: the same upload, with what it holds.
            let again = try await client.begin("sp", file: file)
            #expect(again.status == 200)
            let resumed = try UploadState.decode(again.body)
            #expect(resumed.uploadId == upload.uploadId)
            #expect(resumed.received == [1])

            // Another size with the same hash is another upload.
            let other = try await client.begin("sp", size: 8000, sha256: SHA256.hex(file))
            #expect(other.status == 201)
            #expect(try UploadState.decode(other.body).uploadId != upload.uploadId)
        }
    }

    @Test(arguments: MediaSetup.allCases) func initOfAFileTheSpaceHasAnswersCompleteAndNothingMoreIsSent(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(10_000, seed: 2)
            let (_, complete) = try await client.upload("sp", file, contentType: "audio/mp4")
            let again = try await client.begin("sp", file: file, contentType: "video/mp4")
            #expect(again.status == 200)
            let answer = try UploadComplete.decode(again.body)
            #expect(answer == complete)
            #expect(answer.media.contentType == "audio/mp4")
        }
    }

    @Test(arguments: StoreKind.allCases) func initRefusesFilesOverTheLimitAndBadBodies(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let tooLarge = try await client.begin("sp", size: (1 << 20) + 1, sha256: String(repeating: "a", count: 64))
            #expect(tooLarge.status == 413)
            #expect(mediaErrorCode(tooLarge) == "payload_too_large")
            #expect(mediaErrorDetails(tooLarge)?["limit"]?.int64Value == 1 << 20)
            // Exactly the limit is fine.
            #expect(try await client.begin("sp", size: 1 << 20, sha256: String(repeating: "a", count: 64)).status == 201)

            let notJSON = try await client.send("POST", "/v1/spaces/sp/media/uploads", body: Array("{nope".utf8))
            #expect(notJSON.status == 400)
            #expect(mediaErrorCode(notJSON) == "invalid_json")

            for (body, field) in [
                (#"{"size":10,"contentType":"image/png"}"#, "sha256"),
                (#"{"size":10,"sha256":"\#(String(repeating: "A", count: 64))","contentType":"image/png"}"#, "sha256"),
                (#"{"size":-1,"sha256":"\#(String(repeating: "a", count: 64))","contentType":"image/png"}"#, "size"),
                (#"{"size":"10","sha256":"\#(String(repeating: "a", count: 64))","contentType":"image/png"}"#, "size"),
                (#"{"size":10,"sha256":"\#(String(repeating: "a", count: 64))","contentType":"png"}"#, "contentType"),
                // `;` alone once trapped and stopped the server.
                (#"{"size":10,"sha256":"\#(String(repeating: "a", count: 64))","contentType":";"}"#, "contentType"),
                (#"{"size":10,"sha256":"\#(String(repeating: "a", count: 64))","contentType":"image/png","filename":"\#(String(repeating: "f", count: 256))"}"#, "filename"),
            ] {
                let r = try await client.send("POST", "/v1/spaces/sp/media/uploads", body: Array(body.utf8))
                #expect(r.status == 422, "\(body)")
                #expect(mediaErrorCode(r) == "invalid_request")
                #expect(mediaErrorDetails(r)?["field"]?.stringValue == field)
            }
        }
    }

    @Test(arguments: MediaSetup.allCases) func anEmptyFileHasNoChunksAndFinalizes(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let started = try await client.begin("sp", file: [], contentType: "text/plain")
            #expect(started.status == 201)
            let upload = try UploadState.decode(started.body)
            #expect(upload.chunkCount == 0)
            let done = try await client.finalize("sp", upload.uploadId)
            #expect(done.status == 200)
            let media = try UploadComplete.decode(done.body).media
            #expect(media.size == 0)
            #expect(media.mediaId == SHA256.hex([UInt8]()))
            let got = try await client.download("sp", media.mediaId)
            #expect(got.status == 200)
            #expect(got.body.isEmpty)
            #expect(got.header("Content-Length") == "0")
            let ranged = try await client.download("sp", media.mediaId, headers: [("Range", "bytes=0-")])
            #expect(ranged.status == 416)
            #expect(ranged.header("Content-Range") == "bytes */0")
        }
    }

    // MARK: 2-4. Chunks, state, finalize

    @Test(arguments: MediaSetup.allCases) func aWholeUploadThenFinalizeAnswersTheSameEveryTime(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 3)
            let pieces = chunked(file, 4096)
            let upload = try UploadState.decode(try await client.begin("sp", file: file, contentType: "image/png").body)
            var counts: [Int] = []
            for index in [2, 0, 1] {
                let r = try await client.chunk("sp", upload.uploadId, index, pieces[index])
                #expect(r.status == 200)
                let receipt = try ChunkReceipt.decode(r.body)
                #expect(receipt.index == index)
                counts.append(receipt.received)
            }
            #expect(counts == [1, 2, 3])
            // Sending a chunk again is harmless.
            let again = try await client.chunk("sp", upload.uploadId, 0, pieces[0])
            #expect(try ChunkReceipt.decode(again.body) == ChunkReceipt(index: 0, received: 3))
            #expect(server.metrics.value("outpost_media_bytes_received_total") == 9000)

            let state = try UploadState.decode(try await client.state("sp", upload.uploadId).body)
            #expect(state.received == [0, 1, 2])
            #expect(state.uploadId == upload.uploadId)

            let done = try await client.finalize("sp", upload.uploadId)
            #expect(done.status == 200)
            let media = try UploadComplete.decode(done.body).media
            #expect(media.mediaId == SHA256.hex(file))
            #expect(media.sha256 == media.mediaId)
            #expect(media.size == 9000)
            #expect(media.contentType == "image/png")
            #expect(media.url == "/v1/spaces/sp/media/\(media.mediaId)")
            #expect(media.createdAt == server.clock.now)

            // Finalize again, and the upload's state, answer the same; a late chunk changes nothing.
            #expect(try UploadComplete.decode(try await client.finalize("sp", upload.uploadId).body).media == media)
            #expect(try UploadComplete.decode(try await client.state("sp", upload.uploadId).body).media == media)
            #expect(try await client.chunk("sp", upload.uploadId, 1, pieces[1]).status == 200)

            let got = try await client.download("sp", media.mediaId)
            #expect(got.status == 200)
            #expect(summary(got.body) == summary(file))
            #expect(server.uploadFiles().isEmpty)
            #expect(try server.isPublished("sp", media.mediaId))
            #expect(server.metrics.value("outpost_media_uploads_finalized_total") == 1)
        }
    }

    @Test(arguments: StoreKind.allCases) func chunkRefusals(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 4)
            let pieces = chunked(file, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId

            let noDigest = try await client.chunk("sp", id, "0", pieces[0], omitDigest: true)
            #expect(noDigest.status == 400)
            #expect(mediaErrorCode(noDigest) == "digest_required")
            for bad in ["sha-256=abc", "sha-256=:not base64!:", "sha-512=:\(Base64.encode(SHA256.hash(pieces[0]) + SHA256.hash(pieces[0]))):",
                        "sha-256=:\(Base64.encode(Array(SHA256.hash(pieces[0]).prefix(16)))):", "SHA-256=:\(Base64.encode(SHA256.hash(pieces[0]))):",
                        "sha-256=:\(Base64.encode(SHA256.hash(pieces[0]))):,"] {
                let r = try await client.chunk("sp", id, "0", pieces[0], digest: bad)
                #expect(r.status == 400, "\(bad)")
                #expect(mediaErrorCode(r) == "digest_required", "\(bad)")
            }

            let mismatch = try await client.chunk("sp", id, 0, pieces[0], digest: contentDigest(pieces[1]))
            #expect(mismatch.status == 422)
            #expect(mediaErrorCode(mismatch) == "digest_mismatch")

            for index in ["3", "99", "-1", "+1", "01", "x", "1e2", "4294967296000"] {
                let r = try await client.chunk("sp", id, index, pieces[0])
                #expect(r.status == 422, "\(index)")
                #expect(mediaErrorCode(r) == "invalid_chunk_index", "\(index)")
            }

            let short = try await client.chunk("sp", id, 0, Array(pieces[0].prefix(4000)))
            #expect(short.status == 422)
            #expect(mediaErrorCode(short) == "invalid_chunk_size")
            #expect(mediaErrorDetails(short)?["expected"]?.int64Value == 4096)
            let lastTooLong = try await client.chunk("sp", id, 2, pieces[2] + [1])
            #expect(lastTooLong.status == 422)
            #expect(mediaErrorCode(lastTooLong) == "invalid_chunk_size")
            // Over the route's limit (chunkSize): 413 before the body is read.
            let huge = try await client.chunk("sp", id, 0, pieces[0] + pieces[0])
            #expect(huge.status == 413)
            #expect(mediaErrorCode(huge) == "payload_too_large")

            for unknown in [String(repeating: "0", count: 32), String(repeating: "A", count: 32), "abc", String(repeating: "a", count: 33)] {
                let r = try await client.chunk("sp", unknown, 0, pieces[0])
                #expect(r.status == 404, "\(unknown)")
                #expect(mediaErrorCode(r) == "upload_not_found")
            }

            // Nothing of any refused chunk was kept.
            let state = try UploadState.decode(try await client.state("sp", id).body)
            #expect(state.received == [])
            #expect(server.metrics.value("outpost_media_bytes_received_total") == 0)
        }
    }

    @Test(arguments: StoreKind.allCases) func digestFieldsWithOtherAlgorithmsParametersAndNoPaddingAreAccepted(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 5)
            let pieces = chunked(file, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            let b64 = Base64.encode(SHA256.hash(pieces[0]))
            let fields = [
                "sha-512=:\(Base64.encode(SHA256.hash(pieces[1]) + SHA256.hash(pieces[1]))):, sha-256=:\(b64):",
                "sha-256=:\(b64.replacingOccurrences(of: "=", with: "")):",
                "  sha-256=:\(b64):;note=\"x, y\" , unixsum=42, id-sha-256=?1",
                "sha-256=:\(Base64.encode(SHA256.hash(pieces[2]))):, sha-256=:\(b64):",
            ]
            for field in fields {
                let r = try await client.chunk("sp", id, "0", pieces[0], digest: field)
                #expect(r.status == 200, "\(field): \(r.text)")
            }
            // Two field lines are one list.
            let twoLines = try await client.send("PUT", "/v1/spaces/sp/media/uploads/\(id)/chunks/1",
                                                 headers: [("Content-Digest", "sha-512=:AAAA:"), ("Content-Digest", contentDigest(pieces[1]))],
                                                 body: pieces[1])
            #expect(twoLines.status == 200)
        }
    }

    @Test(arguments: MediaSetup.allCases) func finalizeWithChunksMissingIs409AndListsThem(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(4096 * 5 + 1, seed: 6)
            let pieces = chunked(file, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            for index in [0, 2, 4] { #expect(try await client.chunk("sp", id, index, pieces[index]).status == 200) }
            let r = try await client.finalize("sp", id)
            #expect(r.status == 409)
            #expect(mediaErrorCode(r) == "upload_incomplete")
            #expect(mediaErrorDetails(r)?["missing"]?.arrayValue?.compactMap(\.int64Value) == [1, 3, 5])
            for index in [1, 3, 5] { #expect(try await client.chunk("sp", id, index, pieces[index]).status == 200) }
            #expect(try await client.finalize("sp", id).status == 200)
            #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
        }
    }

    @Test(arguments: MediaSetup.allCases) func aFileWhoseHashDiffersIs422AndTheUploadIsDiscarded(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 7)
            let claimed = SHA256.hex(mediaBytes(9000, seed: 8))
            let id = try UploadState.decode(try await client.begin("sp", size: 9000, sha256: claimed).body).uploadId
            for (index, piece) in chunked(file, 4096).enumerated() {
                #expect(try await client.chunk("sp", id, index, piece).status == 200)
            }
            let r = try await client.finalize("sp", id)
            #expect(r.status == 422)
            #expect(mediaErrorCode(r) == "checksum_mismatch")
            #expect(mediaErrorDetails(r)?["actual"]?.stringValue == SHA256.hex(file))
            #expect(try await client.state("sp", id).status == 404)
            #expect(try await client.finalize("sp", id).status == 404)
            #expect(server.uploadFiles().isEmpty)
            #expect(try !server.isPublished("sp", claimed))
            #expect(try !server.isPublished("sp", SHA256.hex(file)))
            let download = try await client.download("sp", claimed)
            #expect(download.status == 404)
            #expect(mediaErrorCode(download) == "media_not_found")
        }
    }

    @Test(arguments: StoreKind.allCases) func chunkBytesDamagedOnDiskAreAskedForAgain(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 9)
            let pieces = chunked(file, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            for (index, piece) in pieces.enumerated() { #expect(try await client.chunk("sp", id, index, piece).status == 200) }
            // What a power loss can do to bytes that were not yet on disk: chunk 1 lost, and
            // the server, with what it kept in memory, gone too.
            try await server.afterRestart { server in
                let client = server.client()
                let handle = try #require(FileHandle(forWritingAtPath: server.data.mediaPath + "/uploads/\(id)"))
                try handle.seek(toOffset: 4096)
                try handle.write(contentsOf: [UInt8](repeating: 0, count: 4096))
                try handle.close()
                let r = try await client.finalize("sp", id)
                #expect(r.status == 409)
                #expect(mediaErrorCode(r) == "upload_incomplete")
                #expect(mediaErrorDetails(r)?["missing"]?.arrayValue?.compactMap(\.int64Value) == [1])
                #expect(try UploadState.decode(try await client.state("sp", id).body).received == [0, 2])
                #expect(try await client.chunk("sp", id, 1, pieces[1]).status == 200)
                #expect(try await client.finalize("sp", id).status == 200)
                #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
            }
        }
    }

    // MARK: Hashing once

    /// docs/media.md, "Hashing once": chunks that arrive in order feed the file's SHA-256
    /// from their request's buffer, so finalize reads nothing back; chunks that arrive
    /// early are read back once, when the bytes ahead of them are in. With instances
    /// sharing the media (PostgreSQL) no running hash is kept, and finalize reads the file.
    @Test(arguments: StoreKind.allCases) func finalizeReadsBackOnlyWhatNoRunningHashCovers(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let inOrder = mediaBytes(9000, seed: 40)
            _ = try await client.upload("sp", inOrder)
            #expect(server.bytesReadBack == (store == .sqlite ? 0 : 9000))

            // Chunks 2 and 1 before 0: read back (4,904 bytes) when chunk 0 arrives.
            let early = mediaBytes(9000, seed: 41)
            let pieces = chunked(early, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: early).body).uploadId
            for index in [2, 1, 0] { #expect(try await client.chunk("sp", id, index, pieces[index]).status == 200) }
            #expect(try await client.finalize("sp", id).status == 200)
            #expect(summary(try await client.download("sp", SHA256.hex(early)).body) == summary(early))
            #expect(server.bytesReadBack == (store == .sqlite ? 9000 - 4096 : 18_000))
        }
    }

    /// Chunks sent on four connections at once, in a shuffled order, some of them twice
    /// (the same bytes): whichever request finds the prefix at its chunk feeds it and the
    /// chunks waiting after it, and finalize publishes the file; what is read back is at
    /// most the chunks that came early, never the file twice.
    @Test func chunksInAnyOrderOnSeveralConnectionsGiveTheFileAndAreReadBackAtMostOnce() async throws {
        try await withMediaServer { server in
            let client = server.client()
            for round in 0..<3 {
                let file = mediaBytes(40 * 4096 - 123, seed: 50 + UInt64(round))
                let pieces = chunked(file, 4096)
                let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
                var rng = SplitMix64(seed: 60 + UInt64(round))
                let order = (Array(pieces.indices) + [3, 17, 39]).shuffled(using: &rng)
                let before = server.bytesReadBack
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for lane in 0..<4 {
                        let mine = stride(from: lane, to: order.count, by: 4).map { order[$0] }
                        group.addTask {
                            for index in mine {
                                let r = try await client.chunk("sp", id, index, pieces[index])
                                guard r.status == 200 else { throw MediaTestFailure("chunk \(index) answered \(r.status): \(r.text)") }
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                #expect(try await client.finalize("sp", id).status == 200)
                #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
                #expect(server.bytesReadBack - before < Double(file.count))
            }
        }
    }

    /// A running hash lives with the process that wrote the bytes: after a restart the
    /// upload's finalize reads its whole file, and a chunk written twice with different
    /// bytes leaves the hash unused.
    @Test func aRestartOrAChunkWrittenTwiceMakesFinalizeReadTheFile() async throws {
        try await withMediaServer { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 42)
            let pieces = chunked(file, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            for index in 0..<2 { #expect(try await client.chunk("sp", id, index, pieces[index]).status == 200) }
            try await server.afterRestart { server in
                let client = server.client()
                #expect(try await client.chunk("sp", id, 2, pieces[2]).status == 200)
                #expect(try await client.finalize("sp", id).status == 200)
                #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
                #expect(server.bytesReadBack == 9000)

                let other = mediaBytes(9000, seed: 43)
                let parts = chunked(other, 4096)
                let second = try UploadState.decode(try await client.begin("sp", file: other).body).uploadId
                #expect(try await client.chunk("sp", second, 0, mediaBytes(4096, seed: 44)).status == 200)
                for (index, piece) in parts.enumerated() { #expect(try await client.chunk("sp", second, index, piece).status == 200) }
                #expect(try await client.finalize("sp", second).status == 200)
                #expect(summary(try await client.download("sp", SHA256.hex(other)).body) == summary(other))
                #expect(server.bytesReadBack == 18_000)
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func aLostUploadFileAsksForEveryChunkAgain(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 29)
            let pieces = chunked(file, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            for (index, piece) in pieces.enumerated() { #expect(try await client.chunk("sp", id, index, piece).status == 200) }
            try FileManager.default.removeItem(atPath: server.data.mediaPath + "/uploads/\(id)")
            let r = try await client.finalize("sp", id)
            #expect(r.status == 409)
            #expect(mediaErrorDetails(r)?["missing"]?.arrayValue?.compactMap(\.int64Value) == [0, 1, 2])
            for (index, piece) in pieces.enumerated() { #expect(try await client.chunk("sp", id, index, piece).status == 200) }
            #expect(try await client.finalize("sp", id).status == 200)
            #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
        }
    }

    @Test(arguments: StoreKind.allCases) func theChunkRouteAdmitsOpenUploadsMadeWithALargerChunkSize(store: StoreKind) async throws {
        let directory = try TemporaryDirectory(prefix: "outpost-media-store")
        defer { directory.remove() }
        var configuration = MediaStore.Configuration(databasePath: directory.appending("outpost.sqlite"), mediaDirectory: directory.appending("media"))
        if store == .postgres { configuration.postgresURL = try await PostgresCluster.database(prefix: "media") }
        let first = try MediaStore(configuration: configuration)
        #expect(first.largestOpenChunkSize == 0)
        let space = try #require(SpaceName("sp")), sha = try #require(MediaID(SHA256.hex([1])))
        _ = try await first.begin(space: space, sha256: sha, size: 20_000, now: 0, quota: nil) {
            UploadRecord(id: .random(), space: space, sha256: sha, size: 20_000, contentType: "a/b", filename: nil, chunkSize: 8192,
                         chunkCount: 3, state: .open, createdAt: 0, expiresAt: 1000)
        }
        await first.close()
        let second = try MediaStore(configuration: configuration)
        #expect(second.largestOpenChunkSize == 8192)
        await second.close()
    }

    @Test(arguments: MediaSetup.allCases) func aChunkSentAgainWithOtherBytesReplacesTheFirst(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 10)
            let pieces = chunked(file, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            #expect(try await client.chunk("sp", id, 0, mediaBytes(4096, seed: 11)).status == 200)
            for (index, piece) in pieces.enumerated() { #expect(try await client.chunk("sp", id, index, piece).status == 200) }
            #expect(try await client.finalize("sp", id).status == 200)
            #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
        }
    }

    @Test(arguments: MediaSetup.allCases) func concurrentFinalizesOfOneUploadBothAnswerTheSame(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(4096 * 8, seed: 12)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, piece) in chunked(file, 4096).enumerated() {
                    group.addTask {
                        let r = try await client.chunk("sp", id, index, piece)
                        #expect(r.status == 200)
                    }
                }
                try await group.waitForAll()
            }
            async let a = client.finalize("sp", id)
            async let b = client.finalize("sp", id)
            let (ra, rb) = try await (a, b)
            #expect(ra.status == 200)
            #expect(rb.status == 200)
            #expect(try UploadComplete.decode(ra.body) == UploadComplete.decode(rb.body))
            #expect(server.metrics.value("outpost_media_uploads_finalized_total") == 1)
        }
    }

    // MARK: 5. Abort

    @Test(arguments: MediaSetup.allCases) func abortRemovesTheUploadAndItsBytes(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 15)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            #expect(try await client.chunk("sp", id, 0, chunked(file, 4096)[0]).status == 200)
            #expect(server.uploadFiles() == [id])
            let r = try await client.abort("sp", id)
            #expect(r.status == 204)
            #expect(r.body.isEmpty)
            #expect(server.uploadFiles().isEmpty)
            for response in [try await client.state("sp", id), try await client.abort("sp", id), try await client.finalize("sp", id),
                             try await client.chunk("sp", id, 1, chunked(file, 4096)[1])] {
                #expect(response.status == 404)
                #expect(mediaErrorCode(response) == "upload_not_found")
            }
            // A new init starts over.
            #expect(try await client.begin("sp", file: file).status == 201)
        }
    }

    // MARK: Resume after a cut connection

    @Test(arguments: MediaSetup.allCases) func aChunkCutOffMidBodyIsNotKeptAndIsSentAgain(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(4096 * 3, seed: 16)
            let pieces = chunked(file, 4096)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            #expect(try await client.chunk("sp", id, 0, pieces[0]).status == 200)

            // Chunk 1: the head and half of the body, then the connection drops.
            let port = server.port, token = client.token, half = Array(pieces[1].prefix(2048)), digest = contentDigest(pieces[1])
            try await blocking {
                let raw = try TestHTTPClient(port: port)
                let head = TestHTTPClient.encode("PUT", "/v1/spaces/sp/media/uploads/\(id)/chunks/1", headers: [
                    ("Authorization", "Bearer \(token)"), ("Content-Digest", digest), ("Content-Length", "4096"),
                ])
                try raw.send(head)
                try raw.send(half)
                shutdown(raw.fd, Int32(SHUT_RDWR))
            }
            let state = try UploadState.decode(try await client.state("sp", id).body)
            #expect(state.received == [0])
            let early = try await client.finalize("sp", id)
            #expect(mediaErrorDetails(early)?["missing"]?.arrayValue?.compactMap(\.int64Value) == [1, 2])

            // The client resumes with what `received` lacks.
            for index in [1, 2] { #expect(try await client.chunk("sp", id, index, pieces[index]).status == 200) }
            #expect(try await client.finalize("sp", id).status == 200)
            #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
        }
    }

    @Test(arguments: StoreKind.allCases) func expectContinueIsRefusedBeforeTheBodyIsSent(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 17)
            let id = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            let port = server.port, token = client.token
            // A slow link asks first: a wrong length is refused without sending a byte of body.
            let answer = try await blocking { () -> TestResponse in
                let raw = try TestHTTPClient(port: port)
                try raw.send(TestHTTPClient.encode("PUT", "/v1/spaces/sp/media/uploads/\(id)/chunks/0", headers: [
                    ("Authorization", "Bearer \(token)"), ("Content-Digest", contentDigest([1])), ("Content-Length", "4000"),
                    ("Expect", "100-continue"),
                ]))
                return try raw.readResponse(interim: true)
            }
            #expect(answer.status == 422)
            #expect(mediaErrorCode(answer) == "invalid_chunk_size")
        }
    }

    // MARK: 6. Download

    @Test(arguments: MediaSetup.allCases) func downloadHeadRangesAndConditionals(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(10_000, seed: 18)
            let media = try await client.upload("sp", file, contentType: "video/mp4").complete.media
            let etag = "\"\(media.mediaId)\""

            let whole = try await client.download("sp", media.mediaId)
            #expect(whole.status == 200)
            #expect(summary(whole.body) == summary(file))
            #expect(whole.header("Content-Type") == "video/mp4")
            #expect(whole.header("Content-Length") == "10000")
            #expect(whole.header("ETag") == etag)
            #expect(whole.header("Accept-Ranges") == "bytes")
            #expect(whole.header("Content-Encoding") == nil)

            // Never compressed, even when the client accepts gzip.
            let gz = try await client.download("sp", media.mediaId, headers: [("Accept-Encoding", "gzip")])
            #expect(gz.header("Content-Encoding") == nil)
            #expect(summary(gz.body) == summary(file))

            let head = try await client.download("sp", media.mediaId, method: "HEAD")
            #expect(head.status == 200)
            #expect(head.body.isEmpty)
            #expect(head.header("Content-Length") == "10000")
            #expect(head.header("ETag") == etag)
            #expect(head.header("Content-Type") == "video/mp4")

            let cases: [(String, Int, Range<Int>?)] = [
                ("bytes=0-99", 206, 0..<100),
                ("bytes=9990-", 206, 9990..<10_000),
                ("bytes=-10", 206, 9990..<10_000),
                ("bytes=-20000", 206, 0..<10_000),
                ("bytes=500-99999999999999999999", 206, 500..<10_000),
                ("BYTES = 1-1", 206, 1..<2),
                ("bytes=10000-", 416, nil),
                ("bytes=10000-10005", 416, nil),
                ("bytes=-0", 416, nil),
                ("bytes=0-1,5-9", 200, 0..<10_000),
                ("bytes=9-5", 200, 0..<10_000),
                ("pages=1-2", 200, 0..<10_000),
                ("bytes=a-b", 200, 0..<10_000),
            ]
            for (range, status, bytes) in cases {
                let r = try await client.download("sp", media.mediaId, headers: [("Range", range)])
                #expect(r.status == status, "\(range)")
                if let bytes {
                    #expect(summary(r.body) == summary(Array(file[bytes])), "\(range)")
                    if status == 206 {
                        #expect(r.header("Content-Range") == "bytes \(bytes.lowerBound)-\(bytes.upperBound - 1)/10000", "\(range)")
                        #expect(r.header("Content-Type") == "video/mp4")
                    }
                } else {
                    #expect(r.header("Content-Range") == "bytes */10000", "\(range)")
                    #expect(mediaErrorCode(r) == "range_not_satisfiable")
                }
            }
            // HEAD ignores Range (range handling is defined for GET only).
            #expect(try await client.download("sp", media.mediaId, method: "HEAD", headers: [("Range", "bytes=0-1")]).status == 200)

            for match in [etag, "W/\(etag)", "*", "\"other\", \(etag)"] {
                let r = try await client.download("sp", media.mediaId, headers: [("If-None-Match", match)])
                #expect(r.status == 304, "\(match)")
                #expect(r.body.isEmpty)
                #expect(r.header("ETag") == etag)
            }
            #expect(try await client.download("sp", media.mediaId, method: "HEAD", headers: [("If-None-Match", etag)]).status == 304)
            #expect(try await client.download("sp", media.mediaId, headers: [("If-None-Match", "\"other\"")]).status == 200)
            // If-None-Match wins over Range.
            #expect(try await client.download("sp", media.mediaId, headers: [("If-None-Match", etag), ("Range", "bytes=0-1")]).status == 304)

            let ifRange = try await client.download("sp", media.mediaId, headers: [("Range", "bytes=0-1"), ("If-Range", etag)])
            #expect(ifRange.status == 206)
            let staleIfRange = try await client.download("sp", media.mediaId, headers: [("Range", "bytes=0-1"), ("If-Range", "\"old\"")])
            #expect(staleIfRange.status == 200)
            #expect(summary(staleIfRange.body) == summary(file))

            #expect(server.metrics.value("outpost_media_downloads_total") > 0)
        }
    }

    @Test(arguments: MediaSetup.allCases) func unknownMediaIs404(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            for id in [String(repeating: "a", count: 64), String(repeating: "A", count: 64), String(repeating: "a", count: 63),
                       String(repeating: "a", count: 65), "x"] {
                let r = try await client.download("sp", id)
                #expect(r.status == 404, "\(id)")
                #expect(mediaErrorCode(r) == "media_not_found", "\(id)")
            }
            // `uploads` is the uploads resource, which has no GET: 405 naming its one method.
            let uploads = try await client.download("sp", "uploads")
            #expect(uploads.status == 405)
            #expect(uploads.header("Allow") == "POST")
            #expect(mediaErrorCode(uploads) == "method_not_allowed")
        }
    }

    // MARK: Expiry

    @Test(arguments: MediaSetup.allCases) func abandonedUploadsExpireAndTheSweepRemovesTheirBytes(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client()
            let file = mediaBytes(9000, seed: 19)
            let pieces = chunked(file, 4096)
            let abandoned = try UploadState.decode(try await client.begin("sp", file: file).body)
            let other = try UploadState.decode(try await client.begin("sp", file: mediaBytes(9000, seed: 20)).body)
            let done = try await client.upload("sp", mediaBytes(9000, seed: 21))

            server.clock.advance(hours: 20)
            // A chunk moves the expiry to 24 hours after it.
            let receipt = try await client.chunk("sp", abandoned.uploadId, 0, pieces[0])
            #expect(receipt.status == 200)
            #expect(try UploadState.decode(try await client.state("sp", abandoned.uploadId).body).expiresAt == server.clock.now + 24 * 3_600_000)

            server.clock.advance(hours: 5)
            // `other` is 25 hours old with no chunk: expired, even before a sweep runs.
            let expired = try await client.state("sp", other.uploadId)
            #expect(expired.status == 404)
            #expect(mediaErrorCode(expired) == "upload_not_found")
            #expect(try await client.state("sp", abandoned.uploadId).status == 200)

            let first = try await server.service.sweep()
            #expect(first == MediaService.SweepResult(expired: 2, orphans: 0))  // `other` and the finalized upload's memory
            #expect(server.uploadFiles() == [abandoned.uploadId])
            #expect(try await client.finalize("sp", done.upload.uploadId).status == 404)
            // The published file stays.
            #expect(try await client.download("sp", done.complete.media.mediaId).status == 200)

            server.clock.advance(hours: 20)
            #expect(try await client.chunk("sp", abandoned.uploadId, 1, pieces[1]).status == 404)
            #expect(try await server.service.sweep() == MediaService.SweepResult(expired: 1, orphans: 0))
            #expect(server.uploadFiles().isEmpty)
            #expect(server.metrics.value("outpost_media_uploads_expired_total") == 3)

            // Starting again makes a new upload.
            let again = try await client.begin("sp", file: file)
            #expect(again.status == 201)
            #expect(try UploadState.decode(again.body).uploadId != abandoned.uploadId)
        }
    }

    @Test(arguments: StoreKind.allCases) func theSweepRemovesUploadFilesWithoutARow(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let stray = UploadID.random().rawValue
            #expect(FileManager.default.createFile(atPath: server.data.mediaPath + "/uploads/\(stray)", contents: Data([1, 2, 3])))
            #expect(FileManager.default.createFile(atPath: server.data.mediaPath + "/uploads/README", contents: Data([1])))
            let client = server.client()
            let file = mediaBytes(9000, seed: 22)
            let live = try UploadState.decode(try await client.begin("sp", file: file).body).uploadId
            #expect(try await client.chunk("sp", live, 0, chunked(file, 4096)[0]).status == 200)
            #expect(try await server.service.sweep() == MediaService.SweepResult(expired: 0, orphans: 1))
            #expect(server.uploadFiles() == [live, "README"].sorted())
        }
    }

    // MARK: Isolation, auth, traversal

    @Test(arguments: MediaSetup.allCases) func spacesAreIsolated(store: MediaSetup) async throws {
        try await withMediaServer(store: store) { server in
            let a = server.client(["a"])
            let b = server.client(["b"])
            let file = mediaBytes(9000, seed: 23)
            let (upload, complete) = try await a.upload("a", file)
            let id = complete.media.mediaId

            // B cannot read A's media by id, nor reach A's paths with its token.
            let inB = try await b.download("b", id)
            #expect(inB.status == 404)
            #expect(mediaErrorCode(inB) == "media_not_found")
            #expect(try await b.download("a", id).status == 403)
            #expect(try await b.state("a", upload.uploadId).status == 403)

            // An upload id of A used under B's path is unknown there.
            let openInA = try UploadState.decode(try await a.begin("a", file: mediaBytes(9000, seed: 24)).body).uploadId
            for r in [try await b.state("b", openInA), try await b.finalize("b", openInA), try await b.abort("b", openInA),
                      try await b.chunk("b", openInA, 0, chunked(mediaBytes(9000, seed: 24), 4096)[0])] {
                #expect(r.status == 404)
                #expect(mediaErrorCode(r) == "upload_not_found")
            }
            #expect(try await a.state("a", openInA).status == 200)

            // The same file in B is B's own upload: no dedupe across spaces.
            let inBInit = try await b.begin("b", file: file)
            #expect(inBInit.status == 201)
            let both = try await b.upload("b", mediaBytes(100, seed: 25))
            #expect(both.complete.media.url.hasPrefix("/v1/spaces/b/"))
            // A token for several spaces, one of them by prefix, reads both.
            let wide = server.client(["a", "b*"], scope: .read)
            #expect(try await wide.download("a", id).status == 200)
            #expect(try await wide.download("b", both.complete.media.mediaId).status == 200)
        }
    }

    @Test(arguments: StoreKind.allCases) func tokensAreCheckedBeforeTheBody(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let writer = server.client()
            let reader = server.client(["sp"], scope: .read)
            let file = mediaBytes(9000, seed: 26)
            let media = try await writer.upload("sp", file).complete.media
            let id = try UploadState.decode(try await writer.begin("sp", file: mediaBytes(9000, seed: 27)).body).uploadId

            let anonymous = try await blocking { [port = server.port] in
                try httpRequest(port: port, "GET", "/v1/spaces/sp/media/\(media.mediaId)")
            }
            #expect(anonymous.status == 401)
            #expect(anonymous.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
            #expect(try await writer.download("sp", media.mediaId, token: "not-a-token").status == 401)

            // Read scope downloads but writes nothing.
            #expect(try await reader.download("sp", media.mediaId).status == 200)
            for r in [try await reader.begin("sp", file: file), try await reader.chunk("sp", id, 0, chunked(file, 4096)[0]),
                      try await reader.state("sp", id), try await reader.finalize("sp", id), try await reader.abort("sp", id)] {
                #expect(r.status == 403)
                #expect(mediaErrorCode(r) == "forbidden")
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func traversalAttemptsNeverReachAFile(store: StoreKind) async throws {
        try await withMediaServer(store: store) { server in
            let client = server.client(["*"])
            // Plant files a traversal would want (the SQLite store's file is one already;
            // with the metadata in PostgreSQL, a file of that name stands in for it).
            let secret = server.data.path + "/outpost.sqlite"
            if store == .postgres { #expect(FileManager.default.createFile(atPath: secret, contents: Data("secret".utf8))) }
            #expect(FileManager.default.fileExists(atPath: secret))
            let upload = try UploadState.decode(try await client.begin("sp", file: mediaBytes(9000, seed: 28)).body).uploadId
            let paths = [
                "/v1/spaces/sp/media/..%2F..%2F..%2Foutpost.sqlite",
                "/v1/spaces/sp/media/%2e%2e",
                "/v1/spaces/sp/media/..",
                "/v1/spaces/%2e%2e/media/\(String(repeating: "a", count: 64))",
                "/v1/spaces/sp/media/uploads/..%2F..%2Foutpost.sqlite",
                "/v1/spaces/sp/media/uploads/\(upload)%2F..",
                "/v1/spaces/sp/media/uploads/%2E%2E/finalize",
                "/v1/spaces/sp/media/uploads/\(upload)/chunks/..%2F0",
                "/v1/spaces/sp/media/%00",
                "/v1/spaces/sp%2F..%2F../media/\(String(repeating: "a", count: 64))",
                "/v1/spaces/sp/media/\(String(repeating: "A", count: 64))",
                "/v1/spaces/sp/media/uploads/\(upload.uppercased())",
                "/v1/spaces/.hidden/media/\(String(repeating: "a", count: 64))",
            ]
            for path in paths {
                for method in ["GET", "PUT", "POST", "DELETE"] {
                    let headers = method == "PUT" ? [("Content-Digest", contentDigest([1]))] : []
                    let r = try await client.send(method, path, headers: headers, body: method == "PUT" ? [1] : nil)
                    #expect([400, 404, 405, 422].contains(r.status), "\(method) \(path): \(r.status)")
                    #expect(r.body.count < 1000, "\(method) \(path) sent a body of \(r.body.count) bytes")
                }
            }
            #expect(try UploadState.decode(try await client.state("sp", upload).body).received == [])
        }
    }
}
