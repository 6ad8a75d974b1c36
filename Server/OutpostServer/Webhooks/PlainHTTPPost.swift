import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One webhook POST to an `http://` receiver over a POSIX socket, on a thread of its own
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
        do { cancel = try Canceller() } catch { return .noAnswer(.init(.connectFailed, "\(error)")) }
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

    /// Why the exchange ended without a status.
    private struct Failed: Error {
        var noAnswer: WebhookHTTPClient.NoAnswer
        init(_ kind: WebhookHTTPClient.NoAnswer.Kind, _ detail: String) { noAnswer = .init(kind, detail) }
    }

    /// The blocking exchange, on the calling thread.
    static func send(_ url: URL, body: [UInt8], headers: [(String, String)], timeout: Int, policy: ReceiverAddressPolicy,
                     cancel: Canceller) -> WebhookHTTPClient.Answer {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeout) * 1_000_000_000
        do {
            guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false), var host = components.host, !host.isEmpty else {
                throw Failed(.connectFailed, "the URL has no host")
            }
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            let port = components.port ?? 80
            var target = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
            if let query = components.percentEncodedQuery { target += "?" + query }
            var head = "POST \(target) HTTP/1.1\r\nHost: \(host.contains(":") ? "[\(host)]" : host)\(components.port.map { ":\($0)" } ?? "")\r\n"
            if let user = components.user {
                let credentials = "\(user):\(components.password ?? "")"
                head += "Authorization: Basic \(Data(credentials.utf8).base64EncodedString())\r\n"
            }
            for (name, value) in headers { head += "\(name): \(value)\r\n" }
            head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"

            let fd = try connect(host: host, port: port, policy: policy, deadline: deadline, cancel: cancel)
            defer { Glibc.close(fd) }
            try write(fd, Array(head.utf8) + body, deadline: deadline, cancel: cancel)
            return .status(try readStatus(fd, deadline: deadline, cancel: cancel))
        } catch let failed as Failed {
            return .noAnswer(failed.noAnswer)
        } catch {
            return .noAnswer(.init(.connectFailed, "\(error)"))
        }
    }

    /// Waits until `fd` has `events` (true), or throws at the deadline or on cancellation.
    private static func wait(_ fd: Int32, _ events: Int16, deadline: UInt64, cancel: Canceller) throws {
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { throw Failed(.timeout, "no answer within the timeout") }
            let ms = Int32(min((deadline - now + 999_999) / 1_000_000, UInt64(Int32.max)))
            var fds = [pollfd(fd: fd, events: events, revents: 0), pollfd(fd: cancel.readEnd, events: Int16(POLLIN), revents: 0)]
            let n = poll(&fds, 2, ms)
            if n < 0 {
                if errno == EINTR { continue }
                throw Failed(.connectionLost, "poll: \(String(cString: strerror(errno)))")
            }
            if fds[1].revents != 0 { throw Failed(.cancelled, "the delivery was cancelled") }
            if fds[0].revents != 0 { return }
        }
    }

    /// A non-blocking socket connected to `host`:`port`, trying in turn each address it
    /// resolves to that `policy` allows.
    private static func connect(host: String, port: Int, policy: ReceiverAddressPolicy, deadline: UInt64, cancel: Canceller) throws -> Int32 {
        let first: UnsafeMutablePointer<addrinfo>
        switch ReceiverAddressPolicy.lookUp(host, port: port) {
        case .success(let list): first = list
        case .failure(let failure): throw Failed(.connectFailed, failure.why)
        }
        defer { freeaddrinfo(first) }
        var why = "no address"
        var refused: [String] = []
        var tried = 0
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            next = info.pointee.ai_next
            guard let address = info.pointee.ai_addr, let ip = IPAddress(UnsafePointer(address)) else { continue }
            if let refusal = policy.refusal(ip) {
                refused.append("\(ip) is \(refusal)")
                continue
            }
            tried += 1
            let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else {
                why = String(cString: strerror(errno))
                continue
            }
            if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return fd }
            guard errno == EINPROGRESS else {
                why = String(cString: strerror(errno))
                Glibc.close(fd)
                continue
            }
            do {
                try wait(fd, Int16(POLLOUT), deadline: deadline, cancel: cancel)
            } catch {
                Glibc.close(fd)
                throw error
            }
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            if error == 0 { return fd }
            why = String(cString: strerror(error))
            Glibc.close(fd)
        }
        if tried == 0 && !refused.isEmpty {
            throw Failed(.addressRefused, "\(host): \(refused.joined(separator: "; ")) (--webhook-allow-private allows it)")
        }
        throw Failed(.connectFailed, "cannot connect to \(host):\(port): \(why)")
    }

    private static func write(_ fd: Int32, _ bytes: [UInt8], deadline: UInt64, cancel: Canceller) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n >= 0 {
                sent += n
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                try wait(fd, Int16(POLLOUT), deadline: deadline, cancel: cancel)
            } else if errno != EINTR {
                throw Failed(.connectionLost, "the connection failed while sending: \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Reads heads until a final one (not 1xx) and returns its status.
    private static func readStatus(_ fd: Int32, deadline: UInt64, cancel: Canceller) throws -> Int {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            if let end = headEnd(received) {
                let line = String(decoding: received.prefix { $0 != 0x0D && $0 != 0x0A }, as: UTF8.self)
                let parts = line.split(separator: " ", maxSplits: 2)
                guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].utf8.count == 3, let status = Int(parts[1]), (100...599).contains(status) else {
                    throw Failed(.badAnswer, "the receiver did not answer HTTP (\"\(line.prefix(80))\")")
                }
                if status >= 200 { return status }
                received.removeFirst(end)
                continue
            }
            guard received.count < WebhookHTTPClient.maxAnswerBytes else {
                throw Failed(.badAnswer, "the answer's head is longer than \(WebhookHTTPClient.maxAnswerBytes) bytes")
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                received += buffer[0..<n]
            } else if n == 0 {
                throw Failed(.connectionLost, "the receiver closed the connection")
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                try wait(fd, Int16(POLLIN), deadline: deadline, cancel: cancel)
            } else if errno != EINTR {
                throw Failed(.connectionLost, "the connection failed: \(String(cString: strerror(errno)))")
            }
        }
    }

    /// The length of the first head in `bytes` (through its blank line), if complete.
    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 3..<bytes.count where bytes[i] == 0x0A && bytes[i - 1] == 0x0D && bytes[i - 2] == 0x0A && bytes[i - 3] == 0x0D {
            return i + 1
        }
        return nil
    }

    /// A pipe whose read end poll watches beside the socket: a byte written ends the wait.
    final class Canceller: Sendable {
        let readEnd: Int32
        private let writeEnd: Mutex<Int32>

        init() throws {
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { throw Failed(.connectFailed, "pipe: \(String(cString: strerror(errno)))") }
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
