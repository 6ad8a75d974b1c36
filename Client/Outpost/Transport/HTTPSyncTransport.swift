import Foundation
import OutpostCompression
import OutpostCore
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The transport to a real Outpost server, on URLSession (FoundationNetworking on Linux).
///
/// - Auth: `Authorization: Bearer <token>` from a provider the app supplies; on `401` it is
///   asked once more with `refresh: true` and the request is sent again once.
/// - Bodies over `gzipRequestsAbove` go gzip-compressed (zlib through
///   `OutpostCompression`, the module the server uses); answers come gzip-compressed
///   (decoded by URLSession) except from a loopback server.
/// - Answers are read into memory up to `maxResponseBytes`; a larger one is cut off there
///   and reported as `answerTooLarge` (for a page, the store then asks for fewer records).
/// - Failures are told apart as `SyncTransport` requires: a connection that was never made
///   (refused, no route, DNS, offline, a token that could not be had) is `notSent`;
///   timeouts, resets and lost connections are `noAnswer`; a body that is not the
///   protocol's (a proxy's HTML 504, a cut-off JSON) is `badAnswer`; a protocol error
///   envelope is `refused` with its status.
///
/// ```swift
/// let transport = HTTPSyncTransport(baseURL: URL(string: "https://sync.example.com")!) { refresh in
///     try await session.accessToken(forceRefresh: refresh)
/// }
/// ```
public final class HTTPSyncTransport: SyncTransport, Sendable {
    /// Settings.
    public struct Options: Sendable {
        /// The largest answer read. Default 16 MiB.
        public var maxResponseBytes = 16 << 20
        /// How long a request may take (a long poll gets its wait on top). Default 30 s.
        public var timeout: Duration = .seconds(30)
        /// Whether answers may come gzip-compressed (`Accept-Encoding: gzip`). nil, the
        /// default, asks for them except from a loopback server (`localhost`, 127.0.0.0/8,
        /// `::1`), where compressing costs both sides CPU and saves nothing.
        public var compressedAnswers: Bool?
        /// Request bodies larger than this many bytes are sent gzip-compressed
        /// (`Content-Encoding: gzip`, docs/protocol.md section 2); nil never compresses.
        /// Default 16 KiB. A server that answers `415` gets plain bodies from then on.
        public var gzipRequestsAbove: Int? = 16 * 1024
        /// The defaults.
        public init() {}
    }

    /// Where the server is (`/v1/...` is appended).
    public let baseURL: URL
    /// Settings.
    public let options: Options
    /// The token provider (shared with `HTTPMediaTransport(sharing:)`).
    let token: @Sendable (_ refresh: Bool) async throws -> String?
    private let session: URLSession
    private let delegate: SessionDelegate
    /// Set when the server refused a gzip body (415): plain bodies from then on.
    private let clockReading = Mutex<ServerClockReading?>(nil)
    private let traffic = Mutex(TransportTraffic())
    private let plainBodies = Mutex(false)

    /// A transport to `baseURL`. `token` gives the bearer token (nil: send none); it is
    /// called with `refresh: true` after a `401`, once per request.
    public init(baseURL: URL, options: Options = Options(), token: @escaping @Sendable (_ refresh: Bool) async throws -> String?) {
        self.baseURL = baseURL
        self.options = options
        self.token = token
        let delegate = SessionDelegate(maxBytes: options.maxResponseBytes)
        self.delegate = delegate
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpShouldSetCookies = false
        configuration.timeoutIntervalForResource = 600
        session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    /// Whether answers are asked for gzip-compressed (see `Options.compressedAnswers`).
    private var compressedAnswers: Bool {
        if let explicit = options.compressedAnswers { return explicit }
        let host = (baseURL.host ?? "").lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return !(host == "localhost" || host.hasPrefix("127.") || host == "::1")
    }

    /// A transport with a fixed token (or none).
    public convenience init(baseURL: URL, token: String?, options: Options = Options()) {
        self.init(baseURL: baseURL, options: options) { _ in token }
    }

    deinit {
        session.invalidateAndCancel()
    }

    /// The largest answer read.
    public var maxResponseBytes: Int { options.maxResponseBytes }

    // MARK: SyncTransport

    /// `GET /v1/info`.
    public func serverInfo() async throws -> ServerInfo {
        let (status, body) = try await send("GET", path: "/v1/info", authorized: false)
        return try Self.decode(status, body, as: ServerInfo.self)
    }

    /// `POST /v1/spaces/{space}/push`.
    public func push(_ request: PushRequest, space: String) async throws -> PushResponse {
        let (status, body) = try await send("POST", path: "/v1/spaces/\(Self.escape(space))/push", body: request.encoded())
        return try Self.decode(status, body, as: PushResponse.self)
    }

    /// `POST /v1/spaces/{space}/telemetry`.
    public func sendTelemetry(_ batch: TelemetryBatch, space: String) async throws {
        let (status, body) = try await send("POST", path: "/v1/spaces/\(Self.escape(space))/telemetry", body: batch.encoded())
        guard status == 202 || status == 200 else { throw Self.failure(status, body) }
    }

    public func takeTraffic() -> TransportTraffic? {
        traffic.withLock { t in
            defer { t = TransportTraffic() }
            return t
        }
    }

    /// `GET /v1/spaces/{space}/pull`.
    public func pull(_ query: PullQuery, space: String) async throws -> PulledPage {
        let items = query.queryItems.map { "\(Self.escape($0.0))=\(Self.escape($0.1))" }.joined(separator: "&")
        let path = "/v1/spaces/\(Self.escape(space))/pull" + (items.isEmpty ? "" : "?" + items)
        let (status, body) = try await send("GET", path: path, extraWaitMs: query.waitMs,
                                            headers: query.clientId.map { [PullQuery.clientIdHeader: $0] } ?? [:])
        guard status == 200 else { throw Self.failure(status, body) }
        return try PulledPage.decode(body, status: status)
    }

    // MARK: Requests

    private static func decode<T: JSONWireType>(_ status: Int, _ body: [UInt8], as type: T.Type) throws -> T {
        guard (200..<300).contains(status) else { throw failure(status, body) }
        do { return try T.decode(body) } catch {
            throw TransportError.badAnswer(status: status, "the answer is not a valid \(T.self): \(error)")
        }
    }

    /// A non-2xx answer: the protocol's error envelope, or something else (a proxy's page).
    private static func failure(_ status: Int, _ body: [UInt8]) -> TransportError {
        if let envelope = try? ErrorEnvelope.decode(body) { return .refused(status: status, envelope) }
        let snippet = String(decoding: body.prefix(200), as: UTF8.self)
        return .badAnswer(status: status, snippet.isEmpty ? "HTTP \(status) without a body" : snippet)
    }

    private static func escape(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    /// Sends one request (again once with a refreshed token after a 401).
    private func send(_ method: String, path: String, body: [UInt8]? = nil, authorized: Bool = true, extraWaitMs: Int = 0,
                      headers: [String: String] = [:]) async throws -> (Int, [UInt8]) {
        guard let url = URL(string: baseURL.absoluteString.trimmingSuffix("/") + path) else {
            throw TransportError.notSent("invalid URL \(baseURL.absoluteString)\(path)")
        }
        var refresh = false
        var compress = body != nil && options.gzipRequestsAbove.map { body!.count > $0 } == true && !plainBodies.withLock { $0 }
        while true {
            var request = URLRequest(url: url)
            request.httpMethod = method
            request.timeoutInterval = Double(options.timeout.milliseconds + Int64(extraWaitMs)) / 1000
            request.setValue("application/json", forHTTPHeaderField: "Accept")
            if !compressedAnswers { request.setValue("identity", forHTTPHeaderField: "Accept-Encoding") }
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            if authorized {
                let bearer: String?
                do { bearer = try await token(refresh) } catch {
                    throw TransportError.notSent("no token: \(error)")
                }
                if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
            }
            if let body {
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                if compress {
                    request.setValue("gzip", forHTTPHeaderField: "Content-Encoding")
                    request.httpBody = Data(Gzip.compress(body))
                } else {
                    request.httpBody = Data(body)
                }
            }
            let started = ContinuousClock.now
            let sent = Int64(request.httpBody?.count ?? 0)
            let (status, answer, serverTime): (Int, [UInt8], (ms: Int64, resolutionMs: Int64)?)
            do {
                (status, answer, serverTime) = try await perform(request)
            } catch {
                traffic.withLock { $0.bytesSent += sent; $0.failedRequests += 1 }
                throw error
            }
            traffic.withLock { t in
                t.bytesSent += sent
                t.bytesReceived += Int64(answer.count)
                if status >= 500 || status == 408 || status == 429 { t.failedRequests += 1 }
            }
            if let serverTime { keepClockReading(serverTime, started: started) }
            if status == 401 && authorized && !refresh {
                refresh = true
                continue
            }
            if status == 415 && compress {
                // Refused before it was read (unsupported encoding): send it plain.
                plainBodies.withLock { $0 = true }
                compress = false
                continue
            }
            return (status, answer)
        }
    }

    /// Keeps the reading of an answer that arrived now, if it is the best since the last take.
    private func keepClockReading(_ serverTime: (ms: Int64, resolutionMs: Int64), started: ContinuousClock.Instant) {
        let arrived = ContinuousClock.now
        let (seconds, attoseconds) = (arrived - started).components
        let reading = ServerClockReading(serverTimeMs: serverTime.ms, roundTripMs: seconds * 1000 + attoseconds / 1_000_000_000_000_000,
                                         resolutionMs: serverTime.resolutionMs, receivedAt: arrived)
        clockReading.withLock { best in
            if best.map({ reading.uncertaintyMs <= $0.uncertaintyMs }) ?? true { best = reading }
        }
    }

    public func takeServerClockReading() -> ServerClockReading? {
        clockReading.withLock { best in
            defer { best = nil }
            return best
        }
    }

    private func perform(_ request: URLRequest) async throws -> (Int, [UInt8], (ms: Int64, resolutionMs: Int64)?) {
        let task = session.dataTask(with: request)
        let id = task.taskIdentifier
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<(Int, [UInt8], (ms: Int64, resolutionMs: Int64)?), any Error>) in
                delegate.register(id, continuation)
                task.resume()
            }
        } onCancel: {
            task.cancel()
        }
    }
}

/// URLSession's delegate: collects each task's answer up to the cap and resumes its waiter.
private final class SessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
    struct Pending {
        var continuation: CheckedContinuation<(Int, [UInt8], (ms: Int64, resolutionMs: Int64)?), any Error>
        var status = 0
        /// The server's clock from `X-Server-Time` (or `Date`, to the second).
        var serverTime: (ms: Int64, resolutionMs: Int64)?
        var body: [UInt8] = []
        var tooLarge = false
    }

    private let tasks = Mutex<[Int: Pending]>([:])
    private let maxBytes: Int

    init(maxBytes: Int) {
        self.maxBytes = maxBytes
    }

    func register(_ id: Int, _ continuation: CheckedContinuation<(Int, [UInt8], (ms: Int64, resolutionMs: Int64)?), any Error>) {
        tasks.withLock { $0[id] = Pending(continuation: continuation) }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        let http = response as? HTTPURLResponse
        let status = http?.statusCode ?? 0
        let serverTime = http.flatMap(Self.serverTime)
        let cap = maxBytes
        let tooLarge = tasks.withLock { tasks -> Bool in
            tasks[dataTask.taskIdentifier]?.status = status
            tasks[dataTask.taskIdentifier]?.serverTime = serverTime
            if response.expectedContentLength > Int64(cap) {
                tasks[dataTask.taskIdentifier]?.tooLarge = true
                return true
            }
            return false
        }
        completionHandler(tooLarge ? .cancel : .allow)
    }

    /// `X-Server-Time` (ms), else `Date` (IMF-fixdate, to the second).
    static func serverTime(_ response: HTTPURLResponse) -> (ms: Int64, resolutionMs: Int64)? {
        if let text = response.value(forHTTPHeaderField: "X-Server-Time"), let ms = Int64(text), ms > 0 { return (ms, 0) }
        guard let text = response.value(forHTTPHeaderField: "Date") else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = formatter.date(from: text) else { return nil }
        // The second it names began up to 1 s before the server wrote it.
        return (Int64(date.timeIntervalSince1970 * 1000) + 500, 500)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let cap = maxBytes
        // Mutated in place through the dictionary's subscript: copying `Pending` out and
        // back would copy the body so far at every chunk.
        let overflow = tasks.withLock { tasks -> Bool in
            let id = dataTask.taskIdentifier
            guard let count = tasks[id]?.body.count else { return false }
            if count + data.count > cap {
                tasks[id]?.tooLarge = true
                return true
            }
            if count == 0, case let expected = dataTask.response?.expectedContentLength ?? -1, expected > 0 {
                tasks[id]?.body.reserveCapacity(Int(min(expected, Int64(cap))))
            }
            tasks[id]?.body.append(contentsOf: data)
            return false
        }
        if overflow { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let pending = tasks.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        if pending.tooLarge {
            pending.continuation.resume(throwing: TransportError.answerTooLarge(limit: maxBytes))
        } else if let error {
            pending.continuation.resume(throwing: TransportError.classifying(error))
        } else {
            pending.continuation.resume(returning: (pending.status, pending.body, pending.serverTime))
        }
    }
}

extension TransportError {
    /// A URLSession failure as a transport error: `notSent` only for failures that happen
    /// before a request can leave; anything else may have reached the server (`noAnswer`).
    static func classifying(_ error: any Error) -> TransportError {
        let code = (error as? URLError)?.code.rawValue ?? (error as NSError).code
        // Local network privacy (iOS 14, macOS 15): a request to a server on the LAN that
        // the user has not allowed fails as if offline; only the error's network path
        // (its underlying error) says why.
        if (error as NSError).description.contains("Local network prohibited") {
            return .notSent("the app may not reach the local network: the user allows it in Settings, Privacy & Security, Local Network, after the app's prompt, which Info.plist's NSLocalNetworkUsageDescription explains (docs/client.md): \(error.localizedDescription)")
        }
        switch code {
        case NSURLErrorAppTransportSecurityRequiresSecureConnection:
            // The app's own setting refused it, before any byte left: say which.
            return .notSent("App Transport Security refused a plain http:// request (use https, or allow the host with an NSAppTransportSecurity exception in Info.plist; docs/client.md): \(error.localizedDescription)")
        case NSURLErrorCannotConnectToHost, NSURLErrorCannotFindHost, NSURLErrorDNSLookupFailed, NSURLErrorNotConnectedToInternet,
             NSURLErrorBadURL, NSURLErrorUnsupportedURL, NSURLErrorSecureConnectionFailed, NSURLErrorServerCertificateUntrusted,
             NSURLErrorServerCertificateHasBadDate, NSURLErrorServerCertificateHasUnknownRoot, NSURLErrorServerCertificateNotYetValid,
             NSURLErrorClientCertificateRejected, NSURLErrorClientCertificateRequired,
             NSURLErrorInternationalRoamingOff, NSURLErrorDataNotAllowed:
            return .notSent(error.localizedDescription)
        default:
            return .noAnswer(error.localizedDescription)
        }
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}
