import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import OutpostCore
import Synchronization

/// Where the identity provider's JWK Set comes from.
public enum JWKSSource: Sendable, Equatable, CustomStringConvertible {
    /// Fetched with an HTTP GET (`--jwks-url`).
    case url(URL)
    /// Read from a file (`--jwks-file`).
    case file(String)

    /// What logs show: a URL without its credentials, query or fragment.
    public var description: String {
        switch self {
        case .url(let url): url.redacted
        case .file(let path): path
        }
    }
}

/// A JWK Set document as fetched: its bytes and how long its answer said it stays fresh.
struct JWKSDocument: Sendable {
    var bytes: [UInt8]
    var maxAge: Duration?
}

/// Why a fetch of the JWK Set failed; `kind` is the `result` label of
/// `outpost_jwks_fetches_total`.
struct JWKSFetchError: Error, Sendable, CustomStringConvertible {
    enum Kind: String, Sendable, CaseIterable {
        /// No answer: the connection failed or was cut.
        case network
        /// An answer other than `200`.
        case status = "http_error"
        /// No whole answer within the timeout.
        case timeout
        /// A body over the size limit (refused while reading).
        case tooLarge = "too_large"
        /// A body that is not a JWK Set.
        case invalid
    }

    let kind: Kind
    let description: String
}

/// One bounded fetch of a JWK Set: at most `maxBytes` (checked against `Content-Length`
/// before the body is read, and against what has arrived while it is read, so no more than
/// the limit is ever held) within `timeout` (the whole exchange, connecting included).
/// Redirects are not followed: the operator names the URL that serves the keys.
enum JWKSFetch {
    static func fetch(_ source: JWKSSource, maxBytes: Int, timeout: Duration) async -> Result<JWKSDocument, JWKSFetchError> {
        switch source {
        case .url(let url): await get(url, maxBytes: maxBytes, timeout: timeout)
        case .file(let path): await read(path, maxBytes: maxBytes)
        }
    }

    /// Reads a key set file on a Dispatch thread (file I/O never runs on the concurrency pool).
    static func read(_ path: String, maxBytes: Int) async -> Result<JWKSDocument, JWKSFetchError> {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: readNow(path, maxBytes: maxBytes)) }
        }
    }

    /// Reads a key set file, blocking: at most `maxBytes + 1` bytes are read.
    static func readNow(_ path: String, maxBytes: Int) -> Result<JWKSDocument, JWKSFetchError> {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            return .failure(JWKSFetchError(kind: .network, description: "cannot open \(path): \(String(cString: strerror(errno)))"))
        }
        defer { try? handle.close() }
        do {
            let data = try handle.read(upToCount: maxBytes + 1) ?? Data()
            guard data.count <= maxBytes else {
                return .failure(JWKSFetchError(kind: .tooLarge, description: "\(path) is over the limit of \(maxBytes) bytes"))
            }
            return .success(JWKSDocument(bytes: Array(data), maxAge: nil))
        } catch {
            return .failure(JWKSFetchError(kind: .network, description: "cannot read \(path): \(error)"))
        }
    }

    /// `GET url` with URLSession, one session per fetch (fetches are rare: at most one per
    /// refresh or cooldown).
    static func get(_ url: URL, maxBytes: Int, timeout: Duration) async -> Result<JWKSDocument, JWKSFetchError> {
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = seconds
        configuration.timeoutIntervalForResource = seconds
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieStorage = nil
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: seconds)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue("outpost/\(OutpostProtocol.productVersion)", forHTTPHeaderField: "User-Agent")
        let download = BoundedDownload(maxBytes: maxBytes)
        let session = URLSession(configuration: configuration, delegate: download, delegateQueue: nil)
        let task = session.dataTask(with: request)
        // URLSession's own timeouts measure idleness; this one bounds the whole exchange.
        let watchdog = DispatchWorkItem { [download] in download.expire(task) }
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: watchdog)
        let result = await download.run(task)
        watchdog.cancel()
        session.finishTasksAndInvalidate()
        return result
    }
}

/// The delegate of one bounded download: keeps the body up to its limit and resumes the
/// waiting fetch exactly once, with the body or the reason it failed.
final class BoundedDownload: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: every mutable field is inside `state`, a Mutex; URLSession calls the
    // delegate from its own queue, the watchdog from a Dispatch thread.
    private struct State {
        var body: [UInt8] = []
        var response: HTTPURLResponse?
        /// The failure decided here (too large, timeout), which wins over the cancellation
        /// error URLSession then reports.
        var failure: JWKSFetchError?
        var continuation: CheckedContinuation<Result<JWKSDocument, JWKSFetchError>, Never>?
        var finished: Result<JWKSDocument, JWKSFetchError>?
    }

    private let maxBytes: Int
    private let state = Mutex(State())

    init(maxBytes: Int) {
        self.maxBytes = maxBytes
    }

    /// Starts `task` and waits for its end.
    func run(_ task: URLSessionDataTask) async -> Result<JWKSDocument, JWKSFetchError> {
        await withCheckedContinuation { continuation in
            let done = state.withLock { s -> Result<JWKSDocument, JWKSFetchError>? in
                if let finished = s.finished { return finished }
                s.continuation = continuation
                return nil
            }
            if let done {
                continuation.resume(returning: done)
            } else {
                task.resume()
            }
        }
    }

    /// The whole exchange took too long.
    func expire(_ task: URLSessionDataTask) {
        fail(task, JWKSFetchError(kind: .timeout, description: "no whole answer within the timeout"))
    }

    private func fail(_ task: URLSessionTask, _ error: JWKSFetchError) {
        let first = state.withLock { s -> Bool in
            guard s.failure == nil, s.finished == nil else { return false }
            s.failure = error
            return true
        }
        if first { task.cancel() }
    }

    private func finish(_ result: Result<JWKSDocument, JWKSFetchError>) {
        let continuation = state.withLock { s -> CheckedContinuation<Result<JWKSDocument, JWKSFetchError>, Never>? in
            guard s.finished == nil else { return nil }
            s.finished = result
            s.body = []
            defer { s.continuation = nil }
            return s.continuation
        }
        continuation?.resume(returning: result)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @Sendable @escaping (URLSession.ResponseDisposition) -> Void) {
        let http = response as? HTTPURLResponse
        state.withLock { $0.response = http }
        if let http, http.statusCode != 200 {
            fail(dataTask, JWKSFetchError(kind: .status, description: "the JWKS URL answered \(http.statusCode)"))
        } else if response.expectedContentLength > Int64(maxBytes) {
            fail(dataTask, JWKSFetchError(kind: .tooLarge, description: "the answer's Content-Length \(response.expectedContentLength) is over the limit of \(maxBytes) bytes"))
        }
        // FoundationNetworking on Linux ignores the disposition (its documented bug): the
        // refusals above cancel the task themselves.
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let over = state.withLock { s -> Bool in
            guard s.failure == nil else { return false }
            guard s.body.count + data.count <= maxBytes else { return true }
            s.body.append(contentsOf: data)
            return false
        }
        if over { fail(dataTask, JWKSFetchError(kind: .tooLarge, description: "the answer is over the limit of \(maxBytes) bytes")) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @Sendable @escaping (URLRequest?) -> Void) {
        // Nil: the redirect's own answer (a 3xx) is delivered, and refused as not 200.
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        let (failure, response, body) = state.withLock { ($0.failure, $0.response, $0.body) }
        if let failure {
            finish(.failure(failure))
        } else if let error {
            if (error as? URLError)?.code == .timedOut {
                finish(.failure(JWKSFetchError(kind: .timeout, description: "no whole answer within the timeout")))
            } else {
                finish(.failure(JWKSFetchError(kind: .network, description: "the JWKS URL did not answer: \(error.localizedDescription)")))
            }
        } else if let response, response.statusCode == 200 {
            let maxAge = JWKSRefreshPolicy.maxAge(cacheControl: response.value(forHTTPHeaderField: "Cache-Control"),
                                                  age: response.value(forHTTPHeaderField: "Age"))
            finish(.success(JWKSDocument(bytes: body, maxAge: maxAge)))
        } else {
            finish(.failure(JWKSFetchError(kind: .status, description: "the JWKS URL answered \(response?.statusCode ?? 0)")))
        }
    }
}
