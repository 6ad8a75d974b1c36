import Dispatch
import Glibc
import OutpostCrypto

/// The media bucket's operations, signed (`SigV4Signer`) and retried (`S3RetryPolicy`):
/// the objects the media store keeps, and the multipart uploads that write them. Every call
/// blocks; run it on the media store's file threads. Bodies read back are bounded by the
/// caller (`maxBytes`), so an answer never costs more memory than asked for.
final class S3Bucket: Sendable {
    let location: S3Location
    private let signer: SigV4Signer
    private let exchange: any S3Exchange
    private let retry: S3RetryPolicy
    let counters: S3Counters
    /// Seconds since 1970 now (the signature's time).
    private let clock: @Sendable () -> Int64

    init(location: S3Location, credentials: S3Credentials, exchange: any S3Exchange = PlainS3Exchange(), retry: S3RetryPolicy = S3RetryPolicy(),
         counters: S3Counters = S3Counters(), clock: @escaping @Sendable () -> Int64) {
        self.location = location
        self.counters = counters
        signer = SigV4Signer(credentials: credentials, region: location.region)
        self.exchange = exchange
        self.retry = retry
        self.clock = clock
    }

    /// An error answer's body is read up to this many bytes (its XML names the code).
    static let errorBodyBytes = 64 << 10

    // MARK: The bucket

    /// Checks that the bucket exists and that these credentials may write to it: a HEAD of
    /// the bucket, then a small object written and removed. The failure names which step
    /// failed and why (unreachable endpoint, bad credentials, missing bucket, no write
    /// permission).
    func check(probeKey: String, deadline: UInt64) throws(S3Failure) {
        do {
            _ = try request("HEAD", key: nil, deadline: deadline)
        } catch {
            switch error.kind {
            case .answered(404, _): throw S3Failure(error.kind, "the bucket \(location.bucket) does not exist at \(location.host)")
            case .answered(403, _): throw S3Failure(error.kind, "the S3 store refused these credentials for the bucket \(location.bucket) (HTTP 403)")
            default: throw error
            }
        }
        do {
            try put(probeKey, bytes: Array("outpost write check".utf8), deadline: deadline)
            try delete(probeKey, deadline: deadline)
        } catch {
            throw S3Failure(error.kind, "these credentials cannot write to the bucket \(location.bucket): \(error.detail)")
        }
    }

    // MARK: Objects

    /// Writes `bytes` as the object `key` (its SHA-256 signed, so the store refuses bytes
    /// changed on the way).
    func put(_ key: String, bytes: [UInt8], contentType: String = "application/octet-stream", deadline: UInt64) throws(S3Failure) {
        _ = try request("PUT", key: key, headers: [("content-type", contentType)], body: bytes, deadline: deadline)
    }

    /// The object's size, or nil when there is no such object.
    func size(of key: String, deadline: UInt64) throws(S3Failure) -> Int64? {
        let answer: S3Answer
        do {
            answer = try request("HEAD", key: key, deadline: deadline)
        } catch {
            if case .answered(404, _) = error.kind { return nil }
            throw error
        }
        guard let length = answer.header("content-length").flatMap({ Int64($0) }) else {
            throw S3Failure(.badAnswer, "the S3 store answered a HEAD of \(key) without a Content-Length")
        }
        return length
    }

    /// Bytes `range` of the object (the whole object when nil), at most `maxBytes` of them.
    func get(_ key: String, range: ClosedRange<Int64>? = nil, maxBytes: Int, deadline: UInt64) throws(S3Failure) -> [UInt8] {
        let headers = range.map { [("range", "bytes=\($0.lowerBound)-\($0.upperBound)")] } ?? []
        return try request("GET", key: key, headers: headers, deadline: deadline, maxBodyBytes: maxBytes).body
    }

    /// Removes the object; removing one that is gone is fine (S3 answers 204 either way).
    func delete(_ key: String, deadline: UInt64) throws(S3Failure) {
        _ = try request("DELETE", key: key, deadline: deadline)
    }

    /// One page of the keys under `prefix` (below the location's own prefix) with their
    /// sizes, and the token of the next page.
    func list(prefix: String, after token: String?, deadline: UInt64) throws(S3Failure) -> (objects: [(key: String, size: Int64)], next: String?) {
        var query: [(name: String, value: String)] = [("list-type", "2"), ("prefix", location.prefix + prefix), ("max-keys", "1000")]
        if let token { query.append(("continuation-token", token)) }
        let answer = try request("GET", key: nil, query: query, deadline: deadline, maxBodyBytes: 8 << 20)
        let xml = S3XML(answer.body)
        var objects: [(key: String, size: Int64)] = []
        for contents in xml.elements("Contents") {
            let item = S3XML(contents)
            guard let key = item.text("Key"), key.hasPrefix(location.prefix), let size = item.text("Size").flatMap({ Int64($0) }) else {
                throw S3Failure(.badAnswer, "the S3 store listed an object without a key or size")
            }
            objects.append((String(key.dropFirst(location.prefix.count)), size))
        }
        return (objects, xml.text("IsTruncated") == "true" ? xml.text("NextContinuationToken") : nil)
    }

    /// A URL that lets whoever holds it GET the object for `seconds` (SigV4 query
    /// signing): no credential of the server's but the access key id, no token of anyone's.
    func presignedGet(_ key: String, seconds: Int) -> String {
        let path = location.path(key)
        let query = signer.presignedQuery(method: "GET", path: path, host: location.hostHeader, expires: seconds, secondsSince1970: clock())
        return "\(location.scheme)://\(location.hostHeader)\(SigV4Signer.canonicalURI(path))?\(query)"
    }

    // MARK: Multipart uploads

    /// Starts a multipart upload of `key`; its upload id.
    func startMultipart(_ key: String, contentType: String, deadline: UInt64) throws(S3Failure) -> String {
        let answer = try request("POST", key: key, query: [("uploads", "")], headers: [("content-type", contentType)], deadline: deadline)
        guard let id = S3XML(answer.body).text("UploadId"), !id.isEmpty else {
            throw S3Failure(.badAnswer, "the S3 store started a multipart upload of \(key) without an UploadId")
        }
        return id
    }

    /// Writes part `number` (1-based) of the upload; its ETag. Writing a part again
    /// replaces it, so a retried part is never applied twice.
    func putPart(_ key: String, upload: String, number: Int, bytes: [UInt8], deadline: UInt64) throws(S3Failure) -> String {
        let answer = try request("PUT", key: key, query: [("partNumber", String(number)), ("uploadId", upload)], body: bytes, deadline: deadline)
        guard let etag = answer.header("etag") else { throw S3Failure(.badAnswer, "the S3 store stored part \(number) of \(key) without an ETag") }
        return etag
    }

    /// Makes part `number` of the upload a copy of the object `source` (below the
    /// location's prefix), inside the store: no byte passes through the server. Its ETag.
    func copyPart(_ key: String, upload: String, number: Int, from source: String, deadline: UInt64) throws(S3Failure) -> String {
        let copySource = SigV4Signer.canonicalURI("/" + location.bucket + "/" + location.prefix + source)
        let answer = try request("PUT", key: key, query: [("partNumber", String(number)), ("uploadId", upload)],
                                 headers: [("x-amz-copy-source", copySource)], deadline: deadline)
        // A copy may answer 200 and still fail: the error is then in the body.
        let xml = S3XML(answer.body)
        if let code = xml.errorCode {
            throw S3Failure(.answered(status: answer.status, code: code), "the S3 store did not copy \(source) into part \(number) of \(key): \(code)")
        }
        guard let etag = xml.text("ETag") else { throw S3Failure(.badAnswer, "the S3 store copied part \(number) of \(key) without an ETag") }
        return etag
    }

    /// Publishes the object from its parts, in number order.
    func completeMultipart(_ key: String, upload: String, parts: [(number: Int, etag: String)], deadline: UInt64) throws(S3Failure) {
        var body = "<CompleteMultipartUpload>"
        for part in parts.sorted(by: { $0.number < $1.number }) {
            body += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(S3XML.escape(part.etag))</ETag></Part>"
        }
        body += "</CompleteMultipartUpload>"
        let answer = try request("POST", key: key, query: [("uploadId", upload)], headers: [("content-type", "application/xml")],
                                 body: Array(body.utf8), deadline: deadline)
        // S3 may answer 200 and still fail the completion: the error is then in the body.
        if let code = S3XML(answer.body).errorCode {
            throw S3Failure(.answered(status: answer.status, code: code), "the S3 store did not complete the upload of \(key): \(code)")
        }
    }

    /// Abandons the upload and frees its parts; an upload already gone is fine.
    func abortMultipart(_ key: String, upload: String, deadline: UInt64) throws(S3Failure) {
        do {
            _ = try request("DELETE", key: key, query: [("uploadId", upload)], deadline: deadline)
        } catch {
            guard error.code == "NoSuchUpload" else { throw error }
        }
    }

    /// The multipart uploads in progress under `prefix` (below the location's own
    /// prefix): key and upload id, at most 1,000 (one page).
    func multipartUploads(prefix: String, deadline: UInt64) throws(S3Failure) -> [(key: String, upload: String)] {
        let answer = try request("GET", key: nil, query: [("prefix", location.prefix + prefix), ("uploads", "")], deadline: deadline, maxBodyBytes: 8 << 20)
        var uploads: [(key: String, upload: String)] = []
        for element in S3XML(answer.body).elements("Upload") {
            let item = S3XML(element)
            guard let key = item.text("Key"), key.hasPrefix(location.prefix), let id = item.text("UploadId") else { continue }
            uploads.append((String(key.dropFirst(location.prefix.count)), id))
        }
        return uploads
    }

    // MARK: Sending

    /// Sends one request, signed afresh for each attempt, and retries a transient failure
    /// as `retry` says. A 2xx answer (206 included) is returned; any other throws.
    private func request(_ method: String, key: String?, query: [(name: String, value: String)] = [],
                         headers: [(name: String, value: String)] = [], body: [UInt8] = [],
                         deadline: UInt64, maxBodyBytes: Int = errorBodyBytes) throws(S3Failure) -> S3Answer {
        let path = location.path(key)
        let payloadHash = body.isEmpty ? SigV4Signer.emptyPayloadHash : SHA256.hex(body)
        var target = SigV4Signer.canonicalURI(path)
        let canonicalQuery = SigV4Signer.canonicalQuery(query)
        if !canonicalQuery.isEmpty { target += "?" + canonicalQuery }
        var attempt = 0
        var random = SystemRandomNumberGenerator()
        while true {
            let signed = [("host", location.hostHeader)] + headers
            let request = SigV4Signer.Request(method: method, path: path, query: query, headers: signed)
            let all = signed + signer.sign(request, payloadHash: payloadHash, secondsSince1970: clock())
            let failure: S3Failure
            var counted = false
            do throws(S3Failure) {
                let answer = try exchange.send(method: method, target: target, headers: all, body: body, location: location,
                                               deadline: deadline, maxBodyBytes: max(maxBodyBytes, Self.errorBodyBytes))
                counters.attempt(sent: body.count, received: (200..<300).contains(answer.status) ? answer.body.count : nil)
                counted = true
                if (200..<300).contains(answer.status) {
                    guard answer.body.count <= maxBodyBytes else {
                        throw S3Failure(.badAnswer, "the S3 store answered \(answer.body.count) bytes to \(method) \(path), more than \(maxBodyBytes)")
                    }
                    return answer
                }
                let code = S3XML(answer.body).errorCode ?? Self.code(of: answer.status)
                failure = S3Failure(.answered(status: answer.status, code: code), "the S3 store answered \(answer.status) \(code) to \(method) \(path)")
            } catch {
                if !counted { counters.attempt(sent: body.count, received: nil) }
                failure = error
            }
            let now = DispatchTime.now().uptimeNanoseconds
            let leftMs = deadline > now ? Int64((deadline - now) / 1_000_000) : 0
            guard let wait = retry.delay(after: failure, attempt: attempt, leftMs: leftMs, random: { Int64.random(in: 0..<$0, using: &random) }) else {
                throw failure
            }
            attempt += 1
            S3Bucket.pause(milliseconds: wait)
        }
    }

    /// The code of an error answer without a body (a HEAD's).
    private static func code(of status: Int) -> String {
        switch status {
        case 301, 307: "PermanentRedirect"
        case 403: "AccessDenied"
        case 404: "NotFound"
        case 503: "SlowDown"
        default: "HTTP\(status)"
        }
    }

    /// Blocks the calling file thread for a retry's backoff.
    private static func pause(milliseconds: Int64) {
        guard milliseconds > 0 else { return }
        var request = timespec(tv_sec: Int(milliseconds / 1000), tv_nsec: Int(milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}

/// The few parts of S3's XML answers the bucket reads: an element's text, and the elements
/// of a name. S3's answers are flat and small; entities are the five of XML.
struct S3XML {
    private let text: String

    init(_ bytes: [UInt8]) { text = String(decoding: bytes, as: UTF8.self) }
    init(_ text: Substring) { self.text = String(text) }

    /// The unescaped text of the first element `name`.
    func text(_ name: String) -> String? {
        elements(name).first.map { Self.unescape(String($0)) }
    }

    /// The contents of every element `name`, in order.
    func elements(_ name: String) -> [Substring] {
        var out: [Substring] = []
        var rest = text[...]
        while let open = rest.range(of: "<\(name)>"), let close = rest[open.upperBound...].range(of: "</\(name)>") {
            out.append(rest[open.upperBound..<close.lowerBound])
            rest = rest[close.upperBound...]
        }
        return out
    }

    /// The `Code` of an `<Error>` answer.
    var errorCode: String? {
        text.contains("<Error>") ? text("Code") : nil
    }

    static func escape(_ s: String) -> String {
        s.replacingAll("&", "&amp;").replacingAll("<", "&lt;").replacingAll(">", "&gt;").replacingAll("\"", "&quot;").replacingAll("'", "&apos;")
    }

    static func unescape(_ s: String) -> String {
        s.replacingAll("&quot;", "\"").replacingAll("&apos;", "'").replacingAll("&lt;", "<").replacingAll("&gt;", ">").replacingAll("&amp;", "&")
    }
}

extension String {
    /// Every occurrence of `target` replaced by `replacement`.
    fileprivate func replacingAll(_ target: String, _ replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
