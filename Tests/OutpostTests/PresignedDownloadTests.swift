import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import OutpostCrypto
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import Outpost

#if canImport(OutpostTestSupport)
/// The SDK's downloader against a real `outpost-server` whose media live in an S3 bucket
/// (OpenStack Swift's s3api, `S3TestServer`) with presigned downloads on: every range is
/// answered `302` to the bucket, followed with its `Range` and without the server's token.
@Suite("Presigned media downloads", .offPoolWhileBlocking, .serverLogs)
struct PresignedDownloadTests {
    @Test func theDownloaderFollowsThePresignedRedirectWithItsRangeAndWithoutTheToken() async throws {
        let (s3, bucket) = try await S3TestServer.bucket(prefix: "presigned")
        let dir = try TemporaryDirectory(prefix: "outpost-presigned")
        defer { dir.remove() }
        let server = try await blocking {
            try ServerProcess(dataDirectory: dir.appending("data"),
                              arguments: ["--chunk-size", "65536", "--media-store", "s3", "--s3-endpoint", s3.endpoint, "--s3-bucket", bucket,
                                          "--s3-presigned-downloads", "120"],
                              environment: ["AWS_ACCESS_KEY_ID": s3.accessKey, "AWS_SECRET_ACCESS_KEY": s3.secretKey])
        }
        defer { _ = server.stop() }
        let token = try await blocking { try server.token(spaces: ["team"]) }
        var c = OutpostStore.Configuration(space: "team")
        c.clientId = "phone"
        c.durability = .normal
        let store = try OutpostStore(path: dir.appending("phone.sqlite"), configuration: c, transport: HTTPSyncTransport(baseURL: server.baseURL, token: token))
        var o = MediaUploader.Options()
        o.downloadPieceBytes = 100_000
        let uploader = MediaUploader(store: store, transport: HTTPMediaTransport(baseURL: server.baseURL, token: token), options: o)

        let data = mediaBytes(250_000, seed: 71)
        let url = dir.url.appendingPathComponent("photo.jpg")
        try await blocking { try data.write(to: url) }
        let media = try await uploader.upload(file: url, contentType: "image/jpeg")
        let copy = dir.url.appendingPathComponent("copy.jpg")
        try await uploader.download(mediaId: media.mediaId, to: copy)
        #expect(try await contents(of: copy) == data)

        // Three ranges, each redirected: the server counted the downloads and sent no byte.
        let admin = try await blocking { try server.token(spaces: [], admin: true) }
        let downloads = try await blocking { try server.metric("outpost_media_downloads_total", token: admin) }
        let bytes = try await blocking { try server.metric("outpost_media_download_bytes_total", token: admin) }
        #expect(downloads == 3 && (bytes ?? 0) == 0, "downloads \(String(describing: downloads)), bytes \(String(describing: bytes))")
    }

    @Test func aRedirectToAnotherOriginDropsTheTokenAndKeepsTheRange() throws {
        var original = URLRequest(url: URL(string: "http://outpost.example:8080/v1/spaces/team/media/abc")!)
        original.setValue("Bearer secret-token", forHTTPHeaderField: "Authorization")
        original.setValue("bytes=0-99", forHTTPHeaderField: "Range")
        let away = MediaSessionDelegate.redirected(URLRequest(url: URL(string: "http://bucket.example:9000/b/k?X-Amz-Signature=1")!), from: original)
        #expect(away.value(forHTTPHeaderField: "Authorization") == nil)
        #expect(away.value(forHTTPHeaderField: "Range") == "bytes=0-99")
        var same = URLRequest(url: URL(string: "http://outpost.example:8080/v1/other")!)
        same.setValue("Bearer secret-token", forHTTPHeaderField: "Authorization")
        #expect(MediaSessionDelegate.redirected(same, from: original).value(forHTTPHeaderField: "Authorization") == "Bearer secret-token")
        var otherPort = URLRequest(url: URL(string: "http://outpost.example:9090/v1/x")!)
        otherPort.setValue("Bearer secret-token", forHTTPHeaderField: "Authorization")
        #expect(MediaSessionDelegate.redirected(otherPort, from: original).value(forHTTPHeaderField: "Authorization") == nil)
    }
}
#endif
