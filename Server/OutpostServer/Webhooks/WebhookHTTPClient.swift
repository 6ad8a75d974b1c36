import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// Posts webhook deliveries: to `http://` receivers over a socket of the project's own
/// (`PlainHTTPPost`, which waits in poll(2)), to `https://` ones over URLSession
/// (FoundationNetworking on Linux, with the system's certificate roots; it keeps a core
/// busy while a receiver holds a request unanswered). A delivery is bounded twice: the whole
/// request, from connecting to the end of the answer, takes at most its timeout, and at most
/// `maxAnswerBytes` of the answer's body are read (only its status matters). Redirects are
/// not followed: a 3xx is a failed delivery, as a receiver that moved must be configured
/// again. Receivers at addresses `policy` refuses are never connected to
/// (`ReceiverAddressPolicy`).
final class WebhookHTTPClient: Sendable {
    /// What became of one request.
    enum Answer: Sendable, Equatable {
        /// The receiver answered with this status.
        case status(Int)
        /// No answer: a refused address, no connection, a reset, or nothing within the timeout.
        case noAnswer(NoAnswer)

        var delivered: Bool {
            if case .status(let code) = self { return (200..<300).contains(code) }
            return false
        }

        /// Why a delivery failed, as the dead-letter list and the replay answer say it: a
        /// coarse class (`http_status 500`, `connect_failed`, `timeout`...), so that what an
        /// admin reads of a receiver is no finer than whether it answered HTTP, and never
        /// works as a port scanner.
        var failure: String {
            switch self {
            case .status(let code): "http_status \(code)"
            case .noAnswer(let why): why.kind.rawValue
            }
        }

        /// The failure with its details, for the server's own log.
        var detail: String {
            switch self {
            case .status(let code): "the receiver answered HTTP \(code)"
            case .noAnswer(let why): "\(why.kind.rawValue): \(why.detail)"
            }
        }
    }

    /// Why there was no answer: the class the dead letter keeps, and the details the log does.
    struct NoAnswer: Sendable, Equatable {
        enum Kind: String, Sendable {
            /// Every address of the receiver is one `ReceiverAddressPolicy` refuses.
            case addressRefused = "address_refused"
            /// The name did not resolve, or no connection was made (refused, unreachable,
            /// reset, or for `https://` no TLS session).
            case connectFailed = "connect_failed"
            /// No whole answer within the timeout.
            case timeout
            /// The connection failed or was closed after it was made, before a status came.
            case connectionLost = "connection_lost"
            /// The receiver answered something that is not an HTTP answer.
            case badAnswer = "bad_answer"
            /// The delivery was cancelled (the server is stopping).
            case cancelled
        }

        var kind: Kind
        var detail: String

        init(_ kind: Kind, _ detail: String) {
            self.kind = kind
            self.detail = detail
        }
    }

    /// The most bytes of an answer's body read before the rest is dropped.
    static let maxAnswerBytes = 65_536

    private let session: URLSession
    private let delegate: Delegate
    private let policy: ReceiverAddressPolicy
    private static let timers = DispatchQueue(label: "outpost.webhooks.timeouts")

    init(policy: ReceiverAddressPolicy) {
        self.policy = policy
        let delegate = Delegate()
        self.delegate = delegate
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    /// Cancels what is in flight; the client cannot be used after.
    func close() {
        session.invalidateAndCancel()
    }

    /// Posts `body` to `url` with `headers`, and returns the answer's status, or why there
    /// was none within `timeout` seconds. Cancelling the calling task cancels the request.
    func post(_ url: URL, body: [UInt8], headers: [(String, String)], timeout: Int) async -> Answer {
        if url.scheme?.lowercased() == "http" {
            return await PlainHTTPPost.post(url, body: body, headers: headers, timeout: timeout, policy: policy)
        }
        // URLSession makes its own connection: the name is resolved and checked first.
        if let host = url.host, let refused = await policy.check(host: host, port: url.port ?? 443) {
            return .noAnswer(refused)
        }
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: TimeInterval(timeout))
        request.httpMethod = "POST"
        request.httpBody = Data(body)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let task = session.dataTask(with: request)
        let id = task.taskIdentifier
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Answer, Never>) in
                delegate.register(id, continuation)
                Self.timers.asyncAfter(deadline: .now() + .seconds(timeout)) { [delegate] in
                    if delegate.expire(id) { task.cancel() }
                }
                task.resume()
            }
        } onCancel: {
            task.cancel()
        }
    }

    /// URLSession's delegate: keeps each task's status and how much of its body came, and
    /// resumes its waiter exactly once, when the task completes.
    private final class Delegate: NSObject, URLSessionDataDelegate, Sendable {
        struct Pending {
            var continuation: CheckedContinuation<Answer, Never>
            var status: Int?
            var received = 0
            /// The body went past `maxAnswerBytes`: the task was cancelled, the status stands.
            var enough = false
            var timedOut = false
        }

        private let tasks = Mutex<[Int: Pending]>([:])

        func register(_ id: Int, _ continuation: CheckedContinuation<Answer, Never>) {
            tasks.withLock { $0[id] = Pending(continuation: continuation) }
        }

        /// Marks the task as out of time; true when it was still running.
        func expire(_ id: Int) -> Bool {
            tasks.withLock { tasks in
                guard tasks[id] != nil else { return false }
                tasks[id]?.timedOut = true
                return true
            }
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
            let status = (response as? HTTPURLResponse)?.statusCode
            tasks.withLock { $0[dataTask.taskIdentifier]?.status = status }
            completionHandler(.allow)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            let enough = tasks.withLock { tasks -> Bool in
                let id = dataTask.taskIdentifier
                guard let received = tasks[id]?.received else { return false }
                tasks[id]?.received = received + data.count
                if received + data.count > WebhookHTTPClient.maxAnswerBytes, tasks[id]?.enough == false {
                    tasks[id]?.enough = true
                    return true
                }
                return false
            }
            if enough { dataTask.cancel() }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
            completionHandler(nil)
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            guard let pending = tasks.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
            let answer: Answer
            if pending.timedOut {
                answer = .noAnswer(.init(.timeout, "no answer within the timeout"))
            } else if let status = pending.status, error == nil || pending.enough {
                answer = .status(status)
            } else {
                answer = .noAnswer(Self.noAnswer(error))
            }
            pending.continuation.resume(returning: answer)
        }

        /// The class of a URLSession failure.
        static func noAnswer(_ error: (any Error)?) -> NoAnswer {
            let detail = error.map { $0.localizedDescription } ?? "no answer"
            switch (error as? URLError)?.code {
            case .timedOut?: return .init(.timeout, detail)
            case .cancelled?: return .init(.cancelled, detail)
            case .networkConnectionLost?: return .init(.connectionLost, detail)
            case .badServerResponse?, .cannotParseResponse?: return .init(.badAnswer, detail)
            default: return .init(.connectFailed, detail)
            }
        }
    }
}
