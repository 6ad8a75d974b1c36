import Dispatch
import Foundation
import OutpostTestSupport
import Synchronization
import Testing
@testable import OutpostServer

/// The S3 bucket's client (`S3Bucket`): its settings, its reading of S3's XML, its retry
/// policy, and, over a real socket to a scripted store on a thread of its own, what it
/// sends and how it answers the store's faults.
@Suite("S3: the bucket's client")
struct S3BucketTests {
    @Test func endpointsAndBucketsAreCheckedAndAddressed() throws {
        let path = try S3Location(endpoint: "http://127.0.0.1:9000/", bucket: "media", prefix: "outpost/")
        #expect(path.host == "127.0.0.1" && path.port == 9000 && path.hostHeader == "127.0.0.1:9000")
        #expect(path.path("spaces/a/b") == "/media/outpost/spaces/a/b")
        #expect(path.path(nil) == "/media")
        let virtual = try S3Location(endpoint: "https://s3.eu-west-1.amazonaws.com", bucket: "team.media", region: "eu-west-1", pathStyle: false)
        #expect(virtual.port == 443 && virtual.hostHeader == "team.media.s3.eu-west-1.amazonaws.com")
        #expect(virtual.path("k") == "/k")
        for (endpoint, bucket) in [("ftp://host", "media"), ("http://host/path", "media"), ("http://user@host", "media"), ("host:9000", "media"),
                                   ("http://host", "Media"), ("http://host", "m"), ("http://host", "under_score")] {
            #expect(throws: S3Failure.self, "\(endpoint) \(bucket)") { try S3Location(endpoint: endpoint, bucket: bucket) }
        }
    }

    @Test func answersAreReadFromTheirXML() {
        let list = S3XML(Array("""
            <?xml version="1.0" encoding="UTF-8"?><ListBucketResult><IsTruncated>true</IsTruncated>\
            <Contents><Key>p/a&amp;b</Key><Size>12</Size></Contents><Contents><Key>p/c</Key><Size>0</Size></Contents>\
            <NextContinuationToken>tok&lt;1&gt;</NextContinuationToken></ListBucketResult>
            """.utf8))
        #expect(list.elements("Contents").compactMap { S3XML($0).text("Key") } == ["p/a&b", "p/c"])
        #expect(list.text("NextContinuationToken") == "tok<1>")
        #expect(list.errorCode == nil)
        #expect(S3XML(Array("<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>".utf8)).errorCode == "SlowDown")
        #expect(S3XML.escape("\"a\"&<b>") == "&quot;a&quot;&amp;&lt;b&gt;")
    }

    @Test func onlyTransientFailuresAreRetriedWithinTheDeadline() {
        let policy = S3RetryPolicy()
        let slowDown = S3Failure(.answered(status: 503, code: "SlowDown"), "")
        let denied = S3Failure(.answered(status: 403, code: "AccessDenied"), "")
        let noSuchKey = S3Failure(.answered(status: 404, code: "NoSuchKey"), "")
        let timedOut = S3Failure(.answered(status: 400, code: "RequestTimeout"), "")
        let highest: (Int64) -> Int64 = { $0 - 1 }
        #expect(policy.delay(after: slowDown, attempt: 0, leftMs: 60_000, random: highest) == 100)
        #expect(policy.delay(after: slowDown, attempt: 3, leftMs: 60_000, random: highest) == 800)
        #expect(policy.delay(after: S3Failure(.unreachable, ""), attempt: 3, leftMs: 60_000, random: { _ in 0 }) == 0, "full jitter may not wait")
        #expect(policy.delay(after: timedOut, attempt: 0, leftMs: 60_000, random: highest) == 100)
        #expect(policy.delay(after: slowDown, attempt: 4, leftMs: 60_000, random: highest) == nil, "five attempts in all")
        #expect(policy.delay(after: slowDown, attempt: 2, leftMs: 300, random: highest) == nil, "a wait past the deadline")
        #expect(policy.delay(after: denied, attempt: 0, leftMs: 60_000, random: highest) == nil)
        #expect(policy.delay(after: noSuchKey, attempt: 0, leftMs: 60_000, random: highest) == nil)
        var capped = S3RetryPolicy()
        capped.attempts = 40
        #expect(capped.delay(after: slowDown, attempt: 30, leftMs: 60_000, random: highest) == 5_000)
    }

    @Test func aSlowDownIsRetriedAndEveryAttemptIsSignedAfresh() throws {
        let store = try ScriptedStore([.status(503, code: "SlowDown"), .status(500, code: "InternalError"), .ok([:], "")])
        defer { store.stop() }
        let bucket = store.bucket()
        try bucket.put("spaces/a/file", bytes: Array("hello".utf8), deadline: Self.deadline())
        let heads = store.requests()
        #expect(heads.count == 3)
        for head in heads {
            #expect(head.line == "PUT /media/spaces/a/file HTTP/1.1")
            #expect(head.field("authorization")?.hasPrefix("AWS4-HMAC-SHA256 Credential=test:tester/") == true)
            #expect(head.field("x-amz-content-sha256") == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
            #expect(head.body == Array("hello".utf8))
        }
    }

    @Test func refusalsAreNotRetriedAndNameTheirCode() throws {
        let store = try ScriptedStore([.status(403, code: "AccessDenied")])
        defer { store.stop() }
        #expect {
            try store.bucket().put("k", bytes: [1], deadline: Self.deadline())
        } throws: { ($0 as? S3Failure)?.kind == .answered(status: 403, code: "AccessDenied") }
        #expect(store.requests().count == 1)
    }

    @Test func aMissingObjectHasNoSizeAndAnAnswerTooLargeIsRefusedUnread() throws {
        let store = try ScriptedStore([.headNotFound, .ok(["Content-Length": "11"], ""), .ok([:], String(repeating: "x", count: 4096))])
        defer { store.stop() }
        let bucket = store.bucket()
        #expect(try bucket.size(of: "gone", deadline: Self.deadline()) == nil)
        #expect(try bucket.size(of: "here", deadline: Self.deadline()) == 11)
        #expect {
            try bucket.get("big", maxBytes: 1024, deadline: Self.deadline())
        } throws: { ($0 as? S3Failure)?.kind == .badAnswer }
        #expect(store.requests().map(\.line) == ["HEAD /media/gone HTTP/1.1", "HEAD /media/here HTTP/1.1", "GET /media/big HTTP/1.1"])
    }

    @Test func aMultipartUploadIsStartedFilledAndCompletedInPartOrder() throws {
        let started = "<InitiateMultipartUploadResult><Bucket>media</Bucket><Key>k</Key><UploadId>up/1+2</UploadId></InitiateMultipartUploadResult>"
        let store = try ScriptedStore([.ok([:], started), .ok(["ETag": "\"e2\""], ""), .ok(["ETag": "\"e1\""], ""),
                                       .ok([:], "<CompleteMultipartUploadResult><Key>k</Key></CompleteMultipartUploadResult>")])
        defer { store.stop() }
        let bucket = store.bucket()
        let upload = try bucket.startMultipart("k", contentType: "image/jpeg", deadline: Self.deadline())
        #expect(upload == "up/1+2")
        let e2 = try bucket.putPart("k", upload: upload, number: 2, bytes: [2], deadline: Self.deadline())
        let e1 = try bucket.putPart("k", upload: upload, number: 1, bytes: [1], deadline: Self.deadline())
        try bucket.completeMultipart("k", upload: upload, parts: [(2, e2), (1, e1)], deadline: Self.deadline())
        let heads = store.requests()
        #expect(heads.map(\.line) == ["POST /media/k?uploads= HTTP/1.1", "PUT /media/k?partNumber=2&uploadId=up%2F1%2B2 HTTP/1.1",
                                      "PUT /media/k?partNumber=1&uploadId=up%2F1%2B2 HTTP/1.1", "POST /media/k?uploadId=up%2F1%2B2 HTTP/1.1"])
        #expect(String(decoding: heads[3].body, as: UTF8.self) == "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag></Part>"
                + "<Part><PartNumber>2</PartNumber><ETag>&quot;e2&quot;</ETag></Part></CompleteMultipartUpload>")
    }

    @Test func aCompletionFailedInsideA200IsAFailure() throws {
        let store = try ScriptedStore([.ok([:], "<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>")])
        defer { store.stop() }
        #expect {
            try store.bucket().completeMultipart("k", upload: "u", parts: [(1, "\"e\"")], deadline: Self.deadline())
        } throws: { ($0 as? S3Failure)?.code == "InternalError" }
    }

    static func deadline() -> UInt64 { DispatchTime.now().uptimeNanoseconds + UInt64(testDeadlineSeconds) * 1_000_000_000 }
}

/// A store that answers each request with the next of its scripted answers, on a thread
/// of its own, and keeps what it was sent.
final class ScriptedStore: Sendable {
    enum Answer: Sendable {
        case status(Int, code: String)
        case headNotFound
        case ok([String: String], String)

        var bytes: [UInt8] {
            switch self {
            case .status(let status, let code):
                let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>\(code)</Code><Message>scripted</Message></Error>"
                return Array("HTTP/1.1 \(status) Scripted\r\nContent-Type: application/xml\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)".utf8)
            case .headNotFound:
                return Array("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".utf8)
            case .ok(let headers, let body):
                var head = "HTTP/1.1 200 OK\r\n"
                for (name, value) in headers.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
                if headers["Content-Length"] == nil { head += "Content-Length: \(body.utf8.count)\r\n" }
                return Array((head + "\r\n" + body).utf8)
            }
        }
    }

    struct Received: Sendable {
        var line: String
        var fields: [String]
        var body: [UInt8]

        func field(_ name: String) -> String? {
            fields.first { $0.lowercased().hasPrefix(name + ":") }.map { String($0.dropFirst(name.count + 1)).trimmingCharacters(in: .whitespaces) }
        }
    }

    private final class Log: Sendable {
        let state: Mutex<(answers: [Answer], received: [Received])>
        init(_ answers: [Answer]) { state = Mutex((answers, [])) }
    }

    private let log: Log
    private let listener: LoopbackListener

    init(_ answers: [Answer]) throws {
        let log = Log(answers)
        self.log = log
        listener = try LoopbackListener { fd in
            guard let (head, rest) = ProxySocket.readHead(fd) else { return }
            let lines = head.components(separatedBy: "\r\n")
            let isHead = lines.first?.hasPrefix("HEAD ") == true
            let body = ProxySocket.readBody(fd, rest, isHead ? 0 : ProxySocket.contentLength(lines)) ?? []
            let answer = log.state.withLock { s -> Answer? in
                s.received.append(Received(line: lines.first ?? "", fields: Array(lines.dropFirst()), body: body))
                return s.answers.isEmpty ? nil : s.answers.removeFirst()
            }
            ProxySocket.writeAll(fd, answer?.bytes ?? Array("HTTP/1.1 599 Unscripted\r\nContent-Length: 0\r\n\r\n".utf8))
        }
    }

    func bucket() -> S3Bucket {
        var retry = S3RetryPolicy()
        retry.baseMs = 1
        return S3Bucket(location: try! S3Location(endpoint: "http://127.0.0.1:\(listener.port)", bucket: "media"),
                        credentials: S3Credentials(accessKeyId: "test:tester", secretAccessKey: "testing"), retry: retry,
                        clock: { Int64(Date().timeIntervalSince1970) })
    }

    func requests() -> [Received] { log.state.withLock { $0.received } }

    func stop() { listener.stop() }
}
