import Foundation
import OutpostCore
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What the server answers to an init or to `GET` of an upload (docs/protocol.md section 6,
/// steps 1 and 3).
public enum UploadAnswer: Sendable, Hashable {
    /// The space has the file: nothing more to send.
    case complete(MediaInfo)
    /// An open upload, with the chunks the server holds.
    case open(UploadState)
}

/// How a `MediaUploader` talks to a server: the media requests of docs/protocol.md section 6.
/// Narrow on purpose, so tests can fake it.
///
/// Implementations throw `TransportError` only, telling failures apart as `SyncTransport`
/// does (`notSent`, `noAnswer`, `badAnswer`, `refused(status, envelope)` with the
/// protocol's error code and `details`).
public protocol MediaTransport: Sendable {
    /// `POST /v1/spaces/{space}/media/uploads`.
    func beginUpload(_ request: UploadRequest, space: String) async throws -> UploadAnswer
    /// `GET /v1/spaces/{space}/media/uploads/{uploadId}`.
    func upload(_ uploadId: String, space: String) async throws -> UploadAnswer
    /// `PUT …/uploads/{uploadId}/chunks/{index}` with `Content-Digest: sha-256=:<base64 of digest>:`.
    func putChunk(_ bytes: Data, digest: [UInt8], index: Int, uploadId: String, space: String) async throws -> ChunkReceipt
    /// `POST …/uploads/{uploadId}/finalize`.
    func finalize(_ uploadId: String, space: String) async throws -> MediaInfo
    /// `DELETE …/uploads/{uploadId}`.
    func abort(_ uploadId: String, space: String) async throws
    /// `HEAD /v1/spaces/{space}/media/{mediaId}`: the file's size.
    func mediaSize(_ mediaId: String, space: String) async throws -> Int64
    /// `GET /v1/spaces/{space}/media/{mediaId}` with `Range: bytes=a-b`: exactly the bytes
    /// of `range` (`range` is never empty).
    func mediaBytes(_ mediaId: String, range: Range<Int64>, space: String) async throws -> Data
}

/// The media requests over HTTP, on URLSession (FoundationNetworking on Linux).
///
/// Shares the base URL and token provider of an `HTTPSyncTransport`
/// (`HTTPMediaTransport(sharing:)`): `Authorization: Bearer`, asked again with
/// `refresh: true` after a `401`, once per request. Chunks go as `application/octet-stream`
/// with their `Content-Digest` and, by default, `Expect: 100-continue` (a refusal arrives
/// before the body on a slow link); media is never compressed. Answers are read into
/// memory up to a cap (1 MiB for JSON, the range's length for a download piece).
public final class HTTPMediaTransport: MediaTransport, Sendable {
    /// Settings.
    public struct Options: Sendable {
        /// How long a request may go without progress. Default 120 s: a 512 KiB chunk on a
        /// 64 kbit/s link takes over a minute.
        public var timeout: Duration = .seconds(120)
        /// Send `Expect: 100-continue` with chunks. Default true.
        public var expectContinue = true
        /// The defaults.
        public init() {}
    }

    /// Where the server is (`/v1/...` is appended).
    public let baseURL: URL
    /// Settings.
    public let options: Options
    private let token: @Sendable (_ refresh: Bool) async throws -> String?
    private let session: URLSession
    private let delegate: MediaSessionDelegate

    /// A transport to `baseURL`; `token` gives the bearer token (nil: none), asked again with
    /// `refresh: true` after a `401`.
    public init(baseURL: URL, options: Options = Options(), token: @escaping @Sendable (_ refresh: Bool) async throws -> String?) {
        self.baseURL = baseURL
        self.options = options
        self.token = token
        let delegate = MediaSessionDelegate()
        self.delegate = delegate
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpShouldSetCookies = false
        configuration.timeoutIntervalForResource = 24 * 3600
        session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    /// A transport with a fixed token (or none).
    public convenience init(baseURL: URL, token: String?, options: Options = Options()) {
        self.init(baseURL: baseURL, options: options) { _ in token }
    }

    /// A transport to the same server as `transport`, with its token provider.
    public convenience init(sharing transport: HTTPSyncTransport, options: Options = Options()) {
        self.init(baseURL: transport.baseURL, options: options, token: transport.token)
    }

    deinit {
        session.invalidateAndCancel()
    }

    // MARK: MediaTransport

    /// `POST /v1/spaces/{space}/media/uploads`.
    public func beginUpload(_ request: UploadRequest, space: String) async throws -> UploadAnswer {
        let answer = try await send("POST", "\(uploadsPath(space))", body: Data(request.encoded()), contentType: "application/json")
        return try Self.uploadAnswer(answer)
    }

    /// `GET /v1/spaces/{space}/media/uploads/{uploadId}`.
    public func upload(_ uploadId: String, space: String) async throws -> UploadAnswer {
        try Self.uploadAnswer(try await send("GET", "\(uploadsPath(space))/\(Self.escape(uploadId))"))
    }

    /// `PUT …/chunks/{index}`.
    public func putChunk(_ bytes: Data, digest: [UInt8], index: Int, uploadId: String, space: String) async throws -> ChunkReceipt {
        var headers = ["Content-Digest": "sha-256=:\(Data(digest).base64EncodedString()):"]
        if options.expectContinue && !bytes.isEmpty { headers["Expect"] = "100-continue" }
        let answer = try await send("PUT", "\(uploadsPath(space))/\(Self.escape(uploadId))/chunks/\(index)", body: bytes,
                                    contentType: "application/octet-stream", headers: headers)
        return try Self.decode(answer, as: ChunkReceipt.self)
    }

    /// `POST …/finalize`.
    public func finalize(_ uploadId: String, space: String) async throws -> MediaInfo {
        let answer = try await send("POST", "\(uploadsPath(space))/\(Self.escape(uploadId))/finalize", body: Data(), contentType: "application/json")
        return try Self.decode(answer, as: UploadComplete.self).media
    }

    /// `DELETE …/uploads/{uploadId}` (`204`).
    public func abort(_ uploadId: String, space: String) async throws {
        let answer = try await send("DELETE", "\(uploadsPath(space))/\(Self.escape(uploadId))")
        guard (200..<300).contains(answer.status) else { throw Self.failure(answer) }
    }

    /// `HEAD /v1/spaces/{space}/media/{mediaId}`.
    public func mediaSize(_ mediaId: String, space: String) async throws -> Int64 {
        let answer = try await send("HEAD", mediaPath(mediaId, space))
        guard answer.status == 200 else {
            if answer.status == 404 { throw TransportError.refused(status: 404, ErrorEnvelope(code: "media_not_found", message: "no media \(mediaId)")) }
            throw Self.failure(answer)
        }
        guard let text = answer.headers["content-length"], let size = Int64(text), size >= 0 else {
            throw TransportError.badAnswer(status: answer.status, "HEAD without a Content-Length")
        }
        return size
    }

    /// `GET /v1/spaces/{space}/media/{mediaId}` with a `Range`.
    public func mediaBytes(_ mediaId: String, range: Range<Int64>, space: String) async throws -> Data {
        precondition(!range.isEmpty, "an empty range")
        let length = Int(range.count)
        let answer = try await send("GET", mediaPath(mediaId, space), headers: ["Range": "bytes=\(range.lowerBound)-\(range.upperBound - 1)"],
                                    accept: "*/*", cap: length)
        switch answer.status {
        case 206:
            let expected = "bytes \(range.lowerBound)-\(range.upperBound - 1)/"
            guard answer.headers["content-range"]?.hasPrefix(expected) == true, answer.body.count == length else {
                throw TransportError.badAnswer(status: 206, "the range answered is not bytes \(range.lowerBound)-\(range.upperBound - 1)")
            }
            return answer.body
        case 200 where range.lowerBound == 0 && answer.body.count == length:
            return answer.body  // the server sent the whole file, which is exactly the range
        case 200:
            throw TransportError.badAnswer(status: 200, "the server ignored the range")
        default:
            throw Self.failure(answer)
        }
    }

    // MARK: Requests

    private func uploadsPath(_ space: String) -> String { "/v1/spaces/\(Self.escape(space))/media/uploads" }

    private func mediaPath(_ mediaId: String, _ space: String) -> String {
        "/v1/spaces/\(Self.escape(space))/media/\(Self.escape(mediaId))"
    }

    private static func uploadAnswer(_ answer: Answer) throws -> UploadAnswer {
        guard (200..<300).contains(answer.status) else { throw failure(answer) }
        do {
            let value = try JSONParser.parse(Array(answer.body))
            if value["status"]?.stringValue == "complete" { return .complete(try UploadComplete(json: value).media) }
            return .open(try UploadState(json: value))
        } catch {
            throw TransportError.badAnswer(status: answer.status, "the answer is not an upload: \(error)")
        }
    }

    private static func decode<T: JSONWireType>(_ answer: Answer, as type: T.Type) throws -> T {
        guard (200..<300).contains(answer.status) else { throw failure(answer) }
        do { return try T.decode(Array(answer.body)) } catch {
            throw TransportError.badAnswer(status: answer.status, "the answer is not a valid \(T.self): \(error)")
        }
    }

    /// A non-2xx answer: the protocol's error envelope, or something else (a proxy's page).
    private static func failure(_ answer: Answer) -> TransportError {
        if let envelope = try? ErrorEnvelope.decode(Array(answer.body)) { return .refused(status: answer.status, envelope) }
        let snippet = String(decoding: answer.body.prefix(200), as: UTF8.self)
        return .badAnswer(status: answer.status, snippet.isEmpty ? "HTTP \(answer.status) without a body" : snippet)
    }

    private static func escape(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    struct Answer: Sendable {
        var status: Int
        /// Lowercased names.
        var headers: [String: String]
        var body: Data
    }

    /// Sends one request (again once with a refreshed token after a 401).
    private func send(_ method: String, _ path: String, body: Data? = nil, contentType: String? = nil, headers: [String: String] = [:],
                      accept: String = "application/json", cap: Int = 1 << 20) async throws -> Answer {
        let base = baseURL.absoluteString.hasSuffix("/") ? String(baseURL.absoluteString.dropLast()) : baseURL.absoluteString
        guard let url = URL(string: base + path) else { throw TransportError.notSent("invalid URL \(base)\(path)") }
        var refresh = false
        while true {
            var request = URLRequest(url: url)
            request.httpMethod = method
            request.timeoutInterval = Double(options.timeout.milliseconds) / 1000
            request.setValue(accept, forHTTPHeaderField: "Accept")
            request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
            let bearer: String?
            do { bearer = try await token(refresh) } catch { throw TransportError.notSent("no token: \(error)") }
            if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
            if let contentType { request.setValue(contentType, forHTTPHeaderField: "Content-Type") }
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            if let body { request.httpBody = body }
            let answer = try await perform(request, cap: cap)
            if answer.status == 401 && !refresh {
                refresh = true
                continue
            }
            return answer
        }
    }

    private func perform(_ request: URLRequest, cap: Int) async throws -> Answer {
        let task = session.dataTask(with: request)
        let id = task.taskIdentifier
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Answer, any Error>) in
                delegate.register(id, cap: cap, continuation)
                task.resume()
            }
        } onCancel: {
            task.cancel()
        }
    }
}

/// URLSession's delegate for media requests: collects each task's status, headers and body
/// (up to the task's cap) and resumes its waiter.
final class MediaSessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
    struct Pending {
        var continuation: CheckedContinuation<HTTPMediaTransport.Answer, any Error>
        var cap: Int
        var status = 0
        var headers: [String: String] = [:]
        var body = Data()
        var tooLarge = false
    }

    private let tasks = Mutex<[Int: Pending]>([:])

    func register(_ id: Int, cap: Int, _ continuation: CheckedContinuation<HTTPMediaTransport.Answer, any Error>) {
        tasks.withLock { $0[id] = Pending(continuation: continuation, cap: cap) }
    }

    /// A download the server redirects to a presigned URL of its bucket (docs/media.md,
    /// "Presigned downloads") is followed with its `Range`, but never with the server's
    /// token: a request to another origin goes without `Authorization`.
    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        completionHandler(Self.redirected(request, from: task.originalRequest))
    }

    /// `next` as it is sent: without `Authorization` unless it goes to the origin (scheme,
    /// host and port) of `original`.
    static func redirected(_ next: URLRequest, from original: URLRequest?) -> URLRequest {
        var request = next
        let from = original?.url, to = next.url
        let sameOrigin = from?.scheme == to?.scheme && from?.host == to?.host && from?.port == to?.port
        if !sameOrigin { request.setValue(nil, forHTTPHeaderField: "Authorization") }
        if let range = original?.value(forHTTPHeaderField: "Range"), request.value(forHTTPHeaderField: "Range") == nil {
            request.setValue(range, forHTTPHeaderField: "Range")
        }
        return request
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        let http = response as? HTTPURLResponse
        var headers: [String: String] = [:]
        for name in ["content-length", "content-range", "content-type", "etag"] {
            if let value = http?.value(forHTTPHeaderField: name) { headers[name] = value }
        }
        let tooLarge = tasks.withLock { tasks -> Bool in
            let id = dataTask.taskIdentifier
            guard let cap = tasks[id]?.cap else { return false }
            tasks[id]?.status = http?.statusCode ?? 0
            tasks[id]?.headers = headers
            // A HEAD answer announces the file's length without sending it.
            if dataTask.originalRequest?.httpMethod != "HEAD", response.expectedContentLength > Int64(cap) {
                tasks[id]?.tooLarge = true
                return true
            }
            return false
        }
        completionHandler(tooLarge ? .cancel : .allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let overflow = tasks.withLock { tasks -> Bool in
            let id = dataTask.taskIdentifier
            guard let pending = tasks[id] else { return false }
            if pending.body.count + data.count > pending.cap {
                tasks[id]?.tooLarge = true
                return true
            }
            tasks[id]?.body.append(data)
            return false
        }
        if overflow { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let pending = tasks.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        if pending.tooLarge {
            pending.continuation.resume(throwing: TransportError.answerTooLarge(limit: pending.cap))
        } else if let error {
            pending.continuation.resume(throwing: TransportError.classifying(error))
        } else {
            pending.continuation.resume(returning: HTTPMediaTransport.Answer(status: pending.status, headers: pending.headers, body: pending.body))
        }
    }
}
