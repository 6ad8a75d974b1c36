import Foundation
import Outpost
import OutpostTesting
import OutpostConformance
import OutpostCore
import OutpostHTTP
import OutpostServer
import Synchronization

/// The SDK's `InMemorySyncServer` on a real socket, so the conformance suite checks it over
/// HTTP as it checks the real server.
///
/// The face is the project's HTTP engine with the real server's routes for sync, and the
/// real server's own request handling in front of the in-memory server: tokens verified by
/// `Authorizer` (HS256, with the suite's secret), the space name by `SyncService.space`, a
/// push body by `SyncService.decodePush` (`PushRequest.decodeForServer`), a pull query by
/// `SyncService.pullQuery`. What is left, the protocol itself (applying changes, pages,
/// cursors, epochs, long polls, lineage), is the in-memory server's: the face hands it the
/// decoded request and answers what it answers, its refusals in the protocol's error
/// envelope. It serves `GET /v1/info`, `POST /v1/spaces/{space}/push`,
/// `GET /v1/spaces/{space}/pull`, and `GET /readyz` (the suite waits on it after a restart
/// or an epoch rotation); nothing of media or operations.
///
/// It "restarts" the way the in-memory server can: the face stops and starts again on a
/// new port over the same `InMemorySyncServer`, whose memory is its data directory; an epoch
/// rotation is `InMemorySyncServer.rotateEpoch()` between the stop and the start.
final class InMemoryHTTPFace: Sendable {
    /// The server behind the face.
    let server: InMemorySyncServer
    /// The HS256 secret the face verifies tokens with (the suite signs with it).
    let secret = "in-memory-conformance-" + UUID().uuidString
    private let authorizer: Authorizer
    private let running = Mutex<(engine: HTTPServer, port: Int)?>(nil)

    /// A face over `server`, listening on an ephemeral port of 127.0.0.1.
    init(server: InMemorySyncServer) throws {
        self.server = server
        authorizer = Authorizer(authority: JWTAuthority(secret: Array(secret.utf8)))
        try start()
    }

    /// `http://127.0.0.1:PORT` of the running face.
    var baseURL: String {
        "http://127.0.0.1:\(running.withLock { $0!.port })"
    }

    /// The suite's configuration for the face, with its restart and rotate-epoch hooks.
    func configuration() -> OutpostConformance.Configuration {
        var configuration = OutpostConformance.Configuration(baseURL: baseURL, secret: secret)
        configuration.restart = .closure("restart the in-memory server's HTTP face") { [self] in
            await stopServing()
            try start()
            return baseURL
        }
        configuration.rotateEpoch = .closure("stop the face, InMemorySyncServer.rotateEpoch(), start it") { [self] in
            await stopServing()
            server.rotateEpoch()
            try start()
            return baseURL
        }
        return configuration
    }

    /// Stops the face; the in-memory server keeps its state.
    func stop() async {
        await stopServing()
    }

    private func start() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.eventLoopCount = 1
        configuration.defaultBodyLimit = server.limits.maxRequestBytes
        configuration.shutdownGrace = .seconds(1)
        let engine = HTTPServer(configuration: configuration, router: router())
        let port = try engine.start()
        running.withLock { $0 = (engine, port) }
    }

    private func stopServing() async {
        guard let current = running.withLock({ state -> (engine: HTTPServer, port: Int)? in
            defer { state = nil }
            return state
        }) else { return }
        await current.engine.shutdown(grace: .seconds(1))
    }

    // MARK: Routes

    private func router() -> Router {
        var router = Router()
        let server = self.server, authorizer = self.authorizer
        router.add(.GET, "/v1/info", bodyLimit: 0, handler: { _ in
            HTTPResponse(json: try await Self.answering { try await server.serverInfo() }.encoded())
        })
        router.add(.GET, "/readyz", bodyLimit: 0, inline: { _ in HTTPResponse(json: Array(#"{"status":"ready"}"#.utf8)) })
        // As the real server: the space name and the token are checked before the body is read.
        router.add(.POST, "/v1/spaces/{space}/push", bodyLimit: server.limits.maxRequestBytes,
                   preBody: { head, parameters in _ = try await authorizer.authorize(head, space: SyncService.space(parameters), scope: .write) },
                   handler: { request in try await Self.push(request, to: server) })
        router.add(.GET, "/v1/spaces/{space}/pull", bodyLimit: 0,
                   preBody: { head, parameters in _ = try await authorizer.authorize(head, space: SyncService.space(parameters), scope: .read) },
                   handler: { request in try await Self.pull(request, from: server) })
        return router
    }

    /// `POST /v1/spaces/{space}/push`: the body decoded as the real server decodes it; the
    /// valid changes go to the in-memory server in order, and a change that did not decode
    /// is answered `rejected invalid_change` in its place, as the real server answers it
    /// (it writes nothing, so leaving it out changes nothing the others see).
    static func push(_ request: HTTPRequest, to server: InMemorySyncServer) async throws -> HTTPResponse {
        let space = try SyncService.space(request.pathParameters)
        let decoded = try SyncService.decodePush(request.body, maxChanges: server.limits.maxChangesPerPush)
        let valid = decoded.changes.compactMap { item -> Change? in
            if case .valid(let change) = item { change } else { nil }
        }
        let answer = try await answering { try await server.push(PushRequest(clientId: decoded.clientId, changes: valid), space: space) }
        guard answer.results.count == valid.count else {
            // One result per change is the protocol; anything else is the in-memory server's bug.
            throw HTTPError.internalError()
        }
        var fromServer = answer.results.makeIterator()
        let results = decoded.changes.map { item -> PushResult in
            switch item {
            case .valid: fromServer.next()!
            case .invalid(let changeId, let message): .rejected(changeId, .invalidChange, message)
            }
        }
        return HTTPResponse(json: PushResponse(epoch: answer.epoch, results: results).encoded())
    }

    /// `GET /v1/spaces/{space}/pull`: the query parsed as the real server parses it, the
    /// page the in-memory server answers (long polls included), encoded again.
    static func pull(_ request: HTTPRequest, from server: InMemorySyncServer) async throws -> HTTPResponse {
        let space = try SyncService.space(request.pathParameters)
        let query = try SyncService.pullQuery(request.head)
        let page = try await answering { try await server.pull(query, space: space) }
        var records: [RecordState] = []
        for record in page.records {
            // The in-memory server encodes its own records; one it cannot read back is its bug.
            guard case .record(let state) = record else { throw HTTPError.internalError() }
            records.append(state)
        }
        return HTTPResponse(json: PullPage(epoch: page.epoch, changes: records, next: page.next, hasMore: page.hasMore, head: page.head).encoded())
    }

    /// Runs a call on the in-memory server; a protocol error it answers
    /// (`TransportError.refused`) becomes the same status and error envelope over HTTP. Any
    /// other error is a bug of the in-memory server here (no faults are armed) and goes to
    /// the engine, which answers `500 internal_error`.
    static func answering<T: Sendable>(_ call: () async throws -> T) async throws -> T {
        do {
            return try await call()
        } catch TransportError.refused(let status, let envelope) {
            throw HTTPError(HTTPStatus(code: status), code: envelope.code, message: envelope.message, details: details(envelope.details))
        }
    }

    /// An envelope's details as the engine's error details: strings, integers, Booleans
    /// and arrays of them, the kinds the protocol's details have; any other value is sent
    /// as its JSON text.
    static func details(_ object: JSONObject?) -> [String: HTTPErrorDetail] {
        var out: [String: HTTPErrorDetail] = [:]
        for (key, value) in object?.elements ?? [] {
            if let text = value.stringValue {
                out[key] = .string(text)
            } else if let number = value.int64Value {
                out[key] = .int(Int(number))
            } else if let flag = value.boolValue {
                out[key] = .bool(flag)
            } else if let items = value.arrayValue, items.allSatisfy({ $0.int64Value != nil }) {
                out[key] = .ints(items.map { Int($0.int64Value!) })
            } else if let items = value.arrayValue, items.allSatisfy({ $0.stringValue != nil }) {
                out[key] = .strings(items.map { $0.stringValue! })
            } else {
                out[key] = .string(String(decoding: value.encoded(), as: UTF8.self))
            }
        }
        return out
    }
}
