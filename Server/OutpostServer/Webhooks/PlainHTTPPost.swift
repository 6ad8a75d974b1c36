import Foundation
import OutpostHTTP
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One webhook POST to an `http://` receiver over `HTTPClient`, on a thread of its own
/// that sleeps in poll(2) while it waits: URLSession on Linux (FoundationNetworking over
/// libcurl) keeps a core busy for as long as a receiver holds a request without answering
/// (docs/benchmarks.md, "Integrations"), and webhooks wait on slow receivers by design.
/// `https://` receivers stay on URLSession, which brings TLS and the system's roots.
///
/// The request is sent with `Connection: close`; the answer is read up to the end of its
/// head (only the status matters), at most `WebhookHTTPClient.maxAnswerBytes` of it, and
/// interim `1xx` heads are skipped. Connecting, sending and reading together take at most
/// the timeout. Cancelling the calling task ends the wait at once (a byte on a pipe that
/// poll also watches).
///
/// Each address the host resolves to is checked against `policy` before it is connected
/// to, and only an allowed one is: the address judged is the address connected to, so a
/// name that resolves differently from one lookup to the next (DNS rebinding) gains nothing.
enum PlainHTTPPost {
    /// Posts `body` to the `http://` `url` and returns the answer's status, or why there was
    /// none within `timeout` seconds.
    static func post(_ url: URL, body: [UInt8], headers: [(String, String)], timeout: Int, policy: ReceiverAddressPolicy) async -> WebhookHTTPClient.Answer {
        let cancel: Canceller
        do throws(HTTPClientFailure) { cancel = try Canceller() } catch { return .noAnswer(.init(.connectFailed, error.detail)) }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<WebhookHTTPClient.Answer, Never>) in
                Thread.detachNewThread {
                    let answer = send(url, body: body, headers: headers, timeout: timeout, policy: policy, cancel: cancel)
                    cancel.close()
                    continuation.resume(returning: answer)
                }
            }
        } onCancel: {
            cancel.fire()
        }
    }

    /// The blocking exchange, on the calling thread, over `HTTPClient`.
    static func send(_ url: URL, body: [UInt8], headers: [(String, String)], timeout: Int, policy: ReceiverAddressPolicy,
                     cancel: Canceller) -> WebhookHTTPClient.Answer {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeout) * 1_000_000_000
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false), var host = components.host, !host.isEmpty else {
            return .noAnswer(.init(.connectFailed, "the URL has no host"))
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        var target = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        if let query = components.percentEncodedQuery { target += "?" + query }
        var head: [(String, String)] = [("Host", (host.contains(":") ? "[\(host)]" : host) + (components.port.map { ":\($0)" } ?? ""))]
        if let user = components.user {
            let credentials = "\(user):\(components.password ?? "")"
            head.append(("Authorization", "Basic \(Data(credentials.utf8).base64EncodedString())"))
        }
        head += headers
        head += [("Content-Length", String(body.count)), ("Connection", "close")]
        do throws(HTTPClientFailure) {
            let client = try HTTPClient(host: host, port: components.port ?? 80, timeout: Double(timeout), deadline: deadline, cancel: cancel.readEnd,
                                        peer: "the receiver") { address in
                guard let ip = IPAddress(address) else { return "not an IP address" }
                return policy.refusal(ip).map { "\(ip) is \($0)" }
            }
            try client.send(HTTPClient.encode("POST", target, headers: head, body: body))
            return .status(try client.readHead(maxBytes: WebhookHTTPClient.maxAnswerBytes).status)
        } catch {
            return .noAnswer(noAnswer(error))
        }
    }

    /// What the delivery records of a failed exchange.
    private static func noAnswer(_ failure: HTTPClientFailure) -> WebhookHTTPClient.NoAnswer {
        switch failure.kind {
        case .addressRefused: return .init(.addressRefused, failure.detail + " (--webhook-allow-private allows it)")
        case .connectFailed: return .init(.connectFailed, failure.detail)
        case .timeout: return .init(.timeout, failure.detail)
        case .cancelled: return .init(.cancelled, "the delivery was cancelled")
        case .connectionLost: return .init(.connectionLost, failure.detail)
        case .badAnswer: return .init(.badAnswer, failure.detail)
        }
    }

    /// A pipe whose read end poll watches beside the socket: a byte written ends the wait.
    final class Canceller: Sendable {
        let readEnd: Int32
        private let writeEnd: Mutex<Int32>

        init() throws(HTTPClientFailure) {
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { throw HTTPClientFailure(.connectFailed, "pipe: \(String(cString: strerror(errno)))") }
            for fd in ends {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            }
            readEnd = ends[0]
            writeEnd = Mutex(ends[1])
        }

        /// Ends the wait (nothing once the exchange is over).
        func fire() {
            writeEnd.withLock { fd in
                guard fd >= 0 else { return }
                var byte: UInt8 = 1
                _ = Glibc.write(fd, &byte, 1)
            }
        }

        /// Closes the pipe, once the exchange is over.
        func close() {
            writeEnd.withLock { fd in
                guard fd >= 0 else { return }
                Glibc.close(fd)
                fd = -1
            }
            Glibc.close(readEnd)
        }
    }
}
