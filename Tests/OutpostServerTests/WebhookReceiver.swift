import Foundation
import OutpostCore
import OutpostHTTP
import OutpostTestSupport
import Synchronization

/// A webhook receiver for tests: the project's HTTP engine on 127.0.0.1 port 0 with one
/// route, `POST /hook`, that records every request (its raw body and the webhook headers)
/// and answers as it is told: accept (204), fail with a status, or hang (hold the request
/// until `release()`, or until the server gives up and closes the connection). It notes
/// when a request of a space arrives while another of the same space is still in flight.
final class WebhookReceiver: Sendable {
    enum Behaviour: Sendable, Equatable {
        case accept
        case fail(Int)
        case hang
    }

    /// One request as it arrived.
    struct Request: Sendable {
        var body: [UInt8]
        var signature: String?
        var delivery: String?
        var attempt: String?
        var contentType: String?
        /// How it was answered.
        var behaviour: Behaviour
        /// The body's `space`.
        var space: String
        /// Another request of the same space was in flight when it arrived.
        var overlapped: Bool

        var json: JSONValue { (try? JSONParser.parse(body)) ?? .null }
        /// The seqs of its changes, in the order sent.
        var seqs: [Int64] { json["changes"]?.arrayValue?.compactMap { $0["seq"]?.int64Value } ?? [] }
    }

    private struct State {
        var plan: [Behaviour] = []
        var otherwise: Behaviour = .accept
        var requests: [Request] = []
        var inFlight: [String: Int] = [:]
        var hung: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextHung: UInt64 = 0
        /// Hung requests that ended (released, or closed by the client).
        var hungEnded = 0
    }

    private let state = Mutex(State())
    private let http: HTTPServer
    let port: Int

    /// Starts listening; `behaviour` answers every request until `plan` says otherwise.
    init(_ behaviour: Behaviour = .accept) throws {
        var router = Router()
        let box = Box()
        router.add(.POST, "/hook", bodyLimit: 64 * 1024 * 1024) { request in
            try await box.receiver!.receive(request)
        }
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.eventLoopCount = 1
        http = HTTPServer(configuration: configuration, router: router)
        port = try http.start()
        state.withLock { $0.otherwise = behaviour }
        box.receiver = self
    }

    /// The route's handler reaches the receiver through this (set once, before the first request).
    private final class Box: @unchecked Sendable {
        // @unchecked: written once in init, before the server can route a request to it.
        var receiver: WebhookReceiver?
    }

    var url: String { "http://127.0.0.1:\(port)/hook" }

    /// Answers the next requests with `behaviours`, one each, then with `otherwise`.
    func plan(_ behaviours: [Behaviour], otherwise: Behaviour) {
        state.withLock {
            $0.plan = behaviours
            $0.otherwise = otherwise
        }
    }

    /// Every request so far, in arrival order.
    var requests: [Request] { state.withLock { $0.requests } }

    /// The requests answered 2xx.
    var delivered: [Request] { requests.filter { $0.behaviour == .accept } }

    /// Hung requests that ended so far.
    var hungEnded: Int { state.withLock { $0.hungEnded } }

    /// Ends every hung request (with 503).
    func release() {
        let waiting = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            defer { s.hung.removeAll() }
            return Array(s.hung.values)
        }
        for c in waiting { c.resume() }
    }

    func stop() async {
        release()
        await http.shutdown(grace: .seconds(1))
    }

    private func receive(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = (try? JSONParser.parse(request.body))?["space"]?.stringValue ?? ""
        let behaviour = state.withLock { s -> Behaviour in
            let b = s.plan.isEmpty ? s.otherwise : s.plan.removeFirst()
            s.inFlight[space, default: 0] += 1
            s.requests.append(Request(body: request.body, signature: request.header("Outpost-Signature"), delivery: request.header("Outpost-Delivery"),
                                      attempt: request.header("Outpost-Attempt"), contentType: request.header("Content-Type"),
                                      behaviour: b, space: space, overlapped: s.inFlight[space]! > 1))
            return b
        }
        defer { state.withLock { $0.inFlight[space]! -= 1 } }
        switch behaviour {
        case .accept:
            return HTTPResponse(status: HTTPStatus(code: 204))
        case .fail(let code):
            return HTTPResponse(status: HTTPStatus(code: code), text: "refused on purpose")
        case .hang:
            let id = state.withLock { s -> UInt64 in
                s.nextHung += 1
                return s.nextHung
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let cancelled = state.withLock { s -> Bool in
                        if Task.isCancelled { return true }
                        s.hung[id] = c
                        return false
                    }
                    if cancelled { c.resume() }
                }
            } onCancel: {
                let c = state.withLock { $0.hung.removeValue(forKey: id) }
                c?.resume()
            }
            state.withLock { $0.hungEnded += 1 }
            return HTTPResponse(status: HTTPStatus(code: 503), text: "held, then let go")
        }
    }
}
