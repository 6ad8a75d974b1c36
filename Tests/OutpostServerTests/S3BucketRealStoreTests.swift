import Dispatch
import Foundation
import OutpostCrypto
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// `S3Bucket` against a real S3 layer (OpenStack Swift's s3api, `S3TestServer`): every
/// operation the media store will need, signed by `SigV4Signer`, over a real socket. A
/// signing or addressing mistake is refused by the store (`SignatureDoesNotMatch`).
@Suite(.serverLogs) struct S3BucketRealStoreTests {
    static func bucket(_ store: S3TestServer, _ name: String, prefix: String = "media/") throws -> S3Bucket {
        S3Bucket(location: try S3Location(endpoint: store.endpoint, bucket: name, prefix: prefix, region: store.region),
                 credentials: S3Credentials(accessKeyId: store.accessKey, secretAccessKey: store.secretKey),
                 clock: { Int64(Date().timeIntervalSince1970) })
    }

    static func deadline() -> UInt64 { DispatchTime.now().uptimeNanoseconds + UInt64(testDeadlineSeconds) * 1_000_000_000 }

    @Test func objectsAreWrittenReadByRangeListedAndRemoved() async throws {
        let (store, name) = try await S3TestServer.bucket(prefix: "objects")
        let bucket = try Self.bucket(store, name)
        let bytes = S3TestServerTests.bytes(count: 100_000, seed: 11)
        try await blocking {
            try bucket.check(probeKey: "check/probe", deadline: Self.deadline())
            // A key with characters a path must encode: the signature covers its encoding.
            try bucket.put("spaces/team one/ab/c+d=e$f", bytes: bytes, deadline: Self.deadline())
            try bucket.put("spaces/team one/ab/second", bytes: [1, 2, 3], deadline: Self.deadline())
            #expect(try bucket.size(of: "spaces/team one/ab/c+d=e$f", deadline: Self.deadline()) == 100_000)
            #expect(try bucket.size(of: "spaces/team one/ab/absent", deadline: Self.deadline()) == nil)
            #expect(try bucket.get("spaces/team one/ab/c+d=e$f", maxBytes: 200_000, deadline: Self.deadline()) == bytes)
            #expect(try bucket.get("spaces/team one/ab/c+d=e$f", range: 70_000...70_009, maxBytes: 10, deadline: Self.deadline()) == Array(bytes[70_000...70_009]))
            let listed = try bucket.list(prefix: "spaces/team one/", after: nil, deadline: Self.deadline())
            #expect(listed.objects.map(\.key) == ["spaces/team one/ab/c+d=e$f", "spaces/team one/ab/second"])
            #expect(listed.objects.map(\.size) == [100_000, 3])
            #expect(listed.next == nil)
            try bucket.delete("spaces/team one/ab/second", deadline: Self.deadline())
            try bucket.delete("spaces/team one/ab/second", deadline: Self.deadline())
            #expect(try bucket.size(of: "spaces/team one/ab/second", deadline: Self.deadline()) == nil)
            #expect(try bucket.list(prefix: "check/", after: nil, deadline: Self.deadline()).objects.isEmpty, "the write check leaves nothing")
        }
    }

    @Test func aMultipartUploadPublishesItsPartsInOrderAndAnAbortLeavesNothing() async throws {
        let (store, name) = try await S3TestServer.bucket(prefix: "multipart")
        let bucket = try Self.bucket(store, name)
        let part1 = S3TestServerTests.bytes(count: 5 << 20, seed: 1), part2 = S3TestServerTests.bytes(count: 1_000, seed: 2)
        try await blocking {
            let upload = try bucket.startMultipart("big", contentType: "image/jpeg", deadline: Self.deadline())
            // Parts sent out of order, one of them twice: the second write replaces the first.
            let e2 = try bucket.putPart("big", upload: upload, number: 2, bytes: part2, deadline: Self.deadline())
            _ = try bucket.putPart("big", upload: upload, number: 1, bytes: Array(part1.reversed()), deadline: Self.deadline())
            let e1 = try bucket.putPart("big", upload: upload, number: 1, bytes: part1, deadline: Self.deadline())
            #expect(try bucket.size(of: "big", deadline: Self.deadline()) == nil, "nothing is published before the completion")
            try bucket.completeMultipart("big", upload: upload, parts: [(2, e2), (1, e1)], deadline: Self.deadline())
            #expect(try bucket.size(of: "big", deadline: Self.deadline()) == Int64(part1.count + part2.count))
            let whole = try bucket.get("big", maxBytes: 6 << 20, deadline: Self.deadline())
            #expect(SHA256.hex(whole) == SHA256.hex(part1 + part2))

            let abandoned = try bucket.startMultipart("abandoned", contentType: "image/jpeg", deadline: Self.deadline())
            _ = try bucket.putPart("abandoned", upload: abandoned, number: 1, bytes: part2, deadline: Self.deadline())
            try bucket.abortMultipart("abandoned", upload: abandoned, deadline: Self.deadline())
            try bucket.abortMultipart("abandoned", upload: abandoned, deadline: Self.deadline())
            #expect {
                try bucket.completeMultipart("abandoned", upload: abandoned, parts: [(1, "\"x\"")], deadline: Self.deadline())
            } throws: { ($0 as? S3Failure)?.code == "NoSuchUpload" }
            #expect(try bucket.size(of: "abandoned", deadline: Self.deadline()) == nil)
        }
    }

    @Test func theCheckNamesAMissingBucketAndBadCredentials() async throws {
        let (store, name) = try await S3TestServer.bucket(prefix: "check")
        try await blocking {
            let missing = try Self.bucket(store, "no-such-bucket-here")
            #expect {
                try missing.check(probeKey: "probe", deadline: Self.deadline())
            } throws: { "\($0)".contains("does not exist") }
            let wrong = S3Bucket(location: try S3Location(endpoint: store.endpoint, bucket: name, region: store.region),
                                 credentials: S3Credentials(accessKeyId: store.accessKey, secretAccessKey: "not-the-secret"),
                                 clock: { Int64(Date().timeIntervalSince1970) })
            #expect {
                try wrong.check(probeKey: "probe", deadline: Self.deadline())
            } throws: { "\($0)".contains("refused these credentials") }
        }
    }
}
