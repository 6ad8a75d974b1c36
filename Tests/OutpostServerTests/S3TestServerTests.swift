import Foundation
import Testing
import OutpostTestSupport

/// The S3 store the media tests write to (`S3TestServer`): its servers start, its bucket
/// holds an object, s3api is in its proxy's pipeline, and stopping a server is an outage.
/// What it offers an S3 client, feature by feature, scripts/s3-smoke.py checks with boto3
/// (docs/testing.md, "The S3 store").
@Suite(.serverLogs) struct S3TestServerTests {
    /// Bytes from a fixed seed (SplitMix64): the same object every run.
    static func bytes(count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<count).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return UInt8(truncatingIfNeeded: z ^ (z >> 31))
        }
    }

    /// An S3 request's SigV4 headers with a signature of zeros: s3api checks it against
    /// the one it computes and refuses it, naming what it signed.
    static func wronglySignedHeaders(accessKey: String, region: String) -> [(String, String)] {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let date = formatter.string(from: Date())
        let scope = "\(date.prefix(8))/\(region)/s3/aws4_request"
        return [("x-amz-date", date), ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
                ("Authorization", "AWS4-HMAC-SHA256 Credential=\(accessKey)/\(scope), SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=\(String(repeating: "0", count: 64))")]
    }

    @Test func anObjectRoundTripsAndTheS3LayerAnswers() async throws {
        let (store, bucket) = try await S3TestServer.bucket(prefix: "roundtrip")
        #expect(store.endpoint == "http://127.0.0.1:\(store.port)")

        // Swift's native API: what is put is what is read, in the bucket just made.
        let object = Self.bytes(count: 70_000, seed: 7)
        let put = try await blocking { try store.native("PUT", "\(bucket)/a/b.bin", body: object) }
        #expect(put.status == 201, "\(put.status) \(put.text.prefix(300))")
        let got = try await blocking { try store.native("GET", "\(bucket)/a/b.bin") }
        #expect(got.status == 200 && got.body == object, "\(got.status), \(got.body.count) bytes")
        let listing = try await blocking { try store.native("GET", bucket) }
        #expect(listing.text.split(separator: "\n") == ["a/b.bin"], "\(listing.text.prefix(300))")

        // s3api: a SigV4 request with a wrong signature is refused with S3's XML error,
        // which names the canonical request s3api signed (what a signing bug is found by).
        let headers = Self.wronglySignedHeaders(accessKey: store.accessKey, region: store.region)
        let s3 = try await httpRequestAsync(port: store.port, "GET", "/\(bucket)", headers: headers)
        #expect(s3.status == 403, "\(s3.status) \(s3.text.prefix(300))")
        #expect(s3.header("Content-Type") == "application/xml")
        #expect(s3.text.contains("<Error><Code>SignatureDoesNotMatch</Code>"), "\(s3.text.prefix(300))")
        #expect(s3.text.contains("<CanonicalRequest>GET\n/\(bucket)\n"), "\(s3.text.prefix(600))")

        // A request with no S3 signature is not S3's: s3api passes it to Swift's native
        // API, which has no account in that path and reads nothing.
        let unsigned = try await httpRequestAsync(port: store.port, "GET", "/\(bucket)")
        #expect(unsigned.status == 412, "\(unsigned.status) \(unsigned.text.prefix(300))")
    }

    /// A store of its own: stopping its object server is an outage of every object read
    /// and write; `stop()` then ends every server and removes the directory.
    @Test func stoppingTheObjectServerIsAnOutageAndStopEndsTheRest() async throws {
        let store = try await S3TestServer.start()
        defer { store.stop() }
        #expect(S3TestServer.Server.allCases.allSatisfy { store.isRunning($0) })
        let object = Self.bytes(count: 1_000, seed: 8)
        let put = try await blocking { try store.native("PUT", "\(store.bucket)/kept", body: object) }
        #expect(put.status == 201, "\(put.status) \(put.text.prefix(300))")

        try await blocking { store.stop(.object) }
        #expect(!store.isRunning(.object))
        let read = try await blocking { try store.native("GET", "\(store.bucket)/kept") }
        #expect(read.status == 503, "\(read.status) \(read.text.prefix(300))")
        let write = try await blocking { try store.native("PUT", "\(store.bucket)/new", body: object) }
        #expect(write.status == 503, "\(write.status) \(write.text.prefix(300))")
        // The other servers still answer: the listing names the stored object.
        let listing = try await blocking { try store.native("GET", store.bucket) }
        #expect(listing.status == 200 && listing.text.split(separator: "\n") == ["kept"], "\(listing.status) \(listing.text.prefix(300))")

        #expect(FileManager.default.fileExists(atPath: store.directory + "/swift.conf"))
        try await blocking { store.stop() }
        for server in S3TestServer.Server.allCases { #expect(!store.isRunning(server), "the \(server) server still runs") }
        #expect(!FileManager.default.fileExists(atPath: store.directory))
    }
}
