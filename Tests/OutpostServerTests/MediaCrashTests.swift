import Foundation
import OutpostCore
import OutpostCrypto
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// `outpost-server` children killed with SIGKILL in the middle of media work, then
/// restarted on the same data directory (docs/protocol.md section 6: a file never appears
/// half-written, even when the server is killed mid-finalize).
@Suite(.offPoolWhileBlocking, .serialized, .serverLogs) struct MediaCrashTests {
    /// The published file, checked with the server dead: absent, or whole and correct.
    static func expectAbsentOrWhole(_ path: String, _ file: [UInt8], round: Int) {
        guard FileManager.default.fileExists(atPath: path) else { return }
        let bytes = FileManager.default.contents(atPath: path).map { [UInt8]($0) }
        #expect(bytes.map(summary) == summary(file), "round \(round): a published file differs from the upload")
    }

    @Test func aServerKilledDuringFinalizeLeavesTheFileAbsentOrWholeAndFinalizeCompletes() async throws {
        try await withTemporaryDirectory(prefix: "outpost-media-crash") { dir in
            let data = dir.appending("data")
            let server = try ServerProcess(dataDirectory: data, arguments: ["--chunk-size", "1048576"])
            let token = try server.token(spaces: ["sp"])
            // How long after sending finalize the server is killed, in ms; -1: the moment
            // the upload's file has been renamed into place (before its row is written).
            // Whichever step each kill lands in, the checks below must hold.
            for (round, delay) in [0, -1, 1, 5, 20, -1, 300].enumerated() {
                let file = mediaBytes(16 << 20, seed: UInt64(100 + round))
                let sha = SHA256.hex(file)
                var client = MediaClient(port: server.port, token: token)
                let upload = try UploadState.decode(try await client.begin("sp", file: file).body)
                for (index, piece) in chunked(file, upload.chunkSize).enumerated() {
                    #expect(try await client.chunk("sp", upload.uploadId, index, piece).status == 200)
                }
                let part = data + "/media/uploads/" + upload.uploadId
                let port = server.port
                try await blocking {
                    let raw = try TestHTTPClient(port: port)
                    try raw.send(TestHTTPClient.encode("POST", "/v1/spaces/sp/media/uploads/\(upload.uploadId)/finalize",
                                                       headers: [("Authorization", "Bearer \(token)")], body: []))
                    if delay < 0 {
                        let deadline = Date().addingTimeInterval(10)
                        while FileManager.default.fileExists(atPath: part) && Date() < deadline { usleep(100) }
                    } else {
                        usleep(UInt32(delay) * 1000)
                    }
                    // Killed with the finalize request still open, as a crash would find it.
                    server.kill9()
                }

                let published = data + "/media/spaces/sp/\(sha.prefix(2))/\(sha)"
                Self.expectAbsentOrWhole(published, file, round: round)

                try server.restart()
                client = MediaClient(port: server.port, token: token)
                let before = try await client.download("sp", sha)
                #expect(before.status == 404 || (before.status == 200 && summary(before.body) == summary(file)), "round \(round): \(before.status)")
                let finalized = try await client.finalize("sp", upload.uploadId)
                #expect(finalized.status == 200, "round \(round): \(finalized.text)")
                #expect(try UploadComplete.decode(finalized.body).media.mediaId == sha)
                let after = try await client.download("sp", sha)
                #expect(after.status == 200)
                #expect(summary(after.body) == summary(file), "round \(round)")
                #expect(!FileManager.default.fileExists(atPath: part))
            }
            server.stop()
        }
    }

    @Test func aServerKilledMidUploadKeepsEveryAcknowledgedChunk() async throws {
        try await withTemporaryDirectory(prefix: "outpost-media-crash") { dir in
            let server = try ServerProcess(dataDirectory: dir.appending("data"))
            let token = try server.token(spaces: ["sp"])
            var client = MediaClient(port: server.port, token: token)
            let file = mediaBytes(6 * 524_288 - 100, seed: 200)
            let pieces = chunked(file, 524_288)
            let upload = try UploadState.decode(try await client.begin("sp", file: file).body)
            for index in [0, 1, 3] { #expect(try await client.chunk("sp", upload.uploadId, index, pieces[index]).status == 200) }
            // Chunk 4 is on the wire, half sent, when the server dies.
            let port = server.port, id = upload.uploadId, half = Array(pieces[4].prefix(200_000)), digest = contentDigest(pieces[4])
            let length = pieces[4].count
            try await blocking {
                let raw = try TestHTTPClient(port: port)
                try raw.send(TestHTTPClient.encode("PUT", "/v1/spaces/sp/media/uploads/\(id)/chunks/4", headers: [
                    ("Authorization", "Bearer \(token)"), ("Content-Digest", digest), ("Content-Length", String(length)),
                ]))
                try raw.send(half)
                server.kill9()
            }
            try server.restart()
            client = MediaClient(port: server.port, token: token)

            let state = try UploadState.decode(try await client.state("sp", upload.uploadId).body)
            #expect(state.received == [0, 1, 3])
            for index in (0..<pieces.count) where !state.received.contains(index) {
                #expect(try await client.chunk("sp", upload.uploadId, index, pieces[index]).status == 200)
            }
            #expect(try await client.finalize("sp", upload.uploadId).status == 200)
            #expect(summary(try await client.download("sp", SHA256.hex(file)).body) == summary(file))
            server.stop()
        }
    }
}
