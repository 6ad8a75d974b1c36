import Foundation
import Outpost
import OutpostCore
import OutpostHTTP
import OutpostServer
import Synchronization

/// What the simulation's task and the devices' transports share: the network's random
/// stream and faults, the server's service, the devices' crash state, the oracle and the
/// step log. Everything sits behind one lock, taken briefly and never across an `await`.
final class RunWorld: Sendable {
    let state: Mutex<WorldState>
    let clock: VirtualClock
    let limits: Limits
    let token: String

    init(state: WorldState, clock: VirtualClock, limits: Limits, token: String) {
        self.state = Mutex(state)
        self.clock = clock
        self.limits = limits
        self.token = token
    }

    func log(_ line: String) {
        state.withLock { $0.log.append(line) }
    }
}

/// A push held in the network (delayed), delivered later, after other requests.
struct HeldPush: Sendable {
    let device: Int
    let request: PushRequest
    let body: [UInt8]
    let step: Int
}

/// The files of a device's store at the instant it crashed.
struct FileSnapshot: Sendable {
    let database: Data?
    let wal: Data?

    init(path: String) {
        database = FileManager.default.contents(atPath: path)
        wal = FileManager.default.contents(atPath: path + "-wal")
    }

    /// Puts the files back as they were (the shared-memory index is rebuilt on open).
    func restore(path: String) throws {
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            try FileManager.default.removeItem(atPath: path + suffix)
        }
        if let database { try database.write(to: URL(fileURLWithPath: path)) }
        if let wal { try wal.write(to: URL(fileURLWithPath: path + "-wal")) }
    }
}

/// A device's state as the network sees it.
struct DeviceRuntime: Sendable {
    let path: String
    /// The process died in the middle of a sync: nothing it sends leaves any more.
    var dead = false
    /// Crash at the next request.
    var crashArmed = false
    /// The store's files at the instant of the crash (a crash while a push was being sent).
    var snapshot: FileSnapshot?
}

struct WorldState: Sendable {
    var rng: SimRandom
    var oracle: Oracle
    var log: [String] = []
    var service: SyncService?
    var down = false
    var networkFaults: Bool
    var healed = false
    var held: [HeldPush] = []
    var devices: [DeviceRuntime]
    var mergeCount = 0
    var callsInProgress = 0
    var finished = false
    var requests = 0
    var faultsInjected = 0
    /// A broken part's engine whose queue waits behind held conflicts (`BrokenPart.holdsPush`).
    var holdsPush: (@Sendable (_ device: Int, _ held: Int) -> Bool)?
}

/// The network's decision about one request.
private enum Plan {
    case notSent(String)
    /// A proxy answers 504 without passing the request on.
    case gateway
    case crash(deliver: Bool)
    case hold
    case deliver(times: Int, then: AfterFault?)
}

/// What goes wrong after the server answered.
private enum AfterFault {
    case loseAnswer
    case gatewayTimeout
    case cutOff(Double)
}

private let gatewayPage = "<html><head><title>504 Gateway Time-out</title></head><body><h1>504 Gateway Time-out</h1></body></html>"

extension WorldState {
    /// Decides what happens to a request of `kind` from `device`.
    fileprivate mutating func plan(_ kind: String, device: Int, changes: Int = 0) -> Plan {
        requests += 1
        let what = kind == "push" ? "push of \(changes) change(s)" : kind
        if devices[device].dead { return .notSent("the device's process is gone") }
        if devices[device].crashArmed && !healed {
            devices[device].crashArmed = false
            devices[device].dead = true
            faultsInjected += 1
            if kind == "push" {
                devices[device].snapshot = FileSnapshot(path: devices[device].path)
                let deliver = rng.chance(0.5)
                log.append("      d\(device) crashes while sending a \(what)\(deliver ? " (after the server applied it)" : " (before it left)")")
                return .crash(deliver: deliver)
            }
            log.append("      d\(device) crashes during a \(what)")
            return .crash(deliver: false)
        }
        if down {
            log.append("      d\(device) \(what): connection refused (server down)")
            return .notSent("connection refused")
        }
        guard networkFaults && !healed && rng.chance(0.22) else { return .deliver(times: 1, then: nil) }
        faultsInjected += 1
        let choice = rng.below(kind == "info" ? 2 : (kind == "push" ? 8 : 5))
        switch choice {
        case 0:
            log.append("      net: d\(device) \(what) lost on the way (not sent)")
            return .notSent("the connection could not be made")
        case 1:
            log.append("      net: d\(device) \(what) answered 504 by a proxy\(kind == "push" ? ", not applied" : "")")
            return .gateway
        case 2:
            log.append("      net: d\(device) \(what): answer lost")
            return .deliver(times: 1, then: .loseAnswer)
        case 3:
            let fraction = rng.unit()
            log.append("      net: d\(device) \(what): answer cut off at \(Int(fraction * 100))%")
            return .deliver(times: 1, then: .cutOff(fraction))
        case 4:
            if kind == "push" {
                log.append("      net: d\(device) \(what) answered 504 by a proxy after the server applied it")
                return .deliver(times: 1, then: .gatewayTimeout)
            }
            log.append("      net: d\(device) \(what) delayed until the device gave up")
            return .deliver(times: 1, then: .loseAnswer)
        case 5:
            log.append("      net: d\(device) \(what) duplicated")
            return .deliver(times: 2, then: nil)
        case 6:
            log.append("      net: d\(device) \(what) delayed (held in the network; the device times out)")
            return .hold
        default:
            log.append("      net: d\(device) \(what) duplicated, the first answer lost")
            return .deliver(times: 2, then: nil)
        }
    }
}

/// The SDK's transport to the in-process server through the simulated network: each call
/// becomes the `HTTPRequest` the HTTP engine would hand the real handler (with a signed
/// token), and its answer is mapped back the way `HTTPSyncTransport` maps it (a JSON answer
/// decoded, an error envelope as `refused` with its status, anything else `badAnswer`),
/// with faults in between.
struct SimulatedTransport: SyncTransport {
    let world: RunWorld
    let device: Int

    func serverInfo() async throws -> ServerInfo {
        try await world.info(device: device)
    }

    func push(_ request: PushRequest, space: String) async throws -> PushResponse {
        try await world.push(request, device: device)
    }

    func pull(_ query: PullQuery, space: String) async throws -> PulledPage {
        try await world.pull(query, device: device)
    }
}

extension RunWorld {
    /// Starts a transport call: the plan, and the service to deliver to.
    private func begin(_ kind: String, device: Int, changes: Int = 0) -> (Plan, SyncService?)? {
        state.withLock { s in
            guard !s.finished else { return nil }
            s.callsInProgress += 1
            if s.callsInProgress > 1 {
                s.oracle.fail(.harness, "two requests of the run were in progress at once: the run is not sequential and may not replay")
            }
            return (s.plan(kind, device: device, changes: changes), s.service)
        }
    }

    private func end() {
        state.withLock { $0.callsInProgress -= 1 }
    }

    /// A non-2xx answer as `HTTPSyncTransport` reads it.
    static func failure(_ status: Int, _ body: [UInt8]) -> TransportError {
        if let envelope = try? ErrorEnvelope.decode(body) { return .refused(status: status, envelope) }
        let snippet = String(decoding: body.prefix(200), as: UTF8.self)
        return .badAnswer(status: status, snippet.isEmpty ? "HTTP \(status) without a body" : snippet)
    }

    func info(device: Int) async throws -> ServerInfo {
        guard let (plan, service) = begin("info", device: device) else { throw TransportError.notSent("the run is over") }
        defer { end() }
        switch plan {
        case .notSent(let m): throw TransportError.notSent(m)
        case .gateway: throw TransportError.badAnswer(status: 504, gatewayPage)
        case .crash: throw TransportError.noAnswer("the device's process is gone")
        case .hold: throw TransportError.noAnswer("timed out")
        case .deliver(_, let after):
            guard let service else { throw TransportError.notSent("connection refused") }
            if case .loseAnswer? = after { throw TransportError.noAnswer("the connection was reset") }
            let bytes = ServerInfo(epoch: service.store.epoch, limits: limits).encoded()
            if case .cutOff(let f)? = after {
                do { return try ServerInfo.decode(Array(bytes.prefix(Int(Double(bytes.count) * f)))) } catch {
                    throw TransportError.badAnswer(status: 200, "the answer is not a valid ServerInfo: \(error)")
                }
            }
            return try ServerInfo.decode(bytes)
        }
    }

    /// Delivers a push to the server; the oracle learns what the server applied.
    private func deliver(_ service: SyncService, _ body: [UInt8], _ request: PushRequest, device: Int) async -> (Int, [UInt8]) {
        let (status, bytes) = await SimServer.push(service, body: body, token: token, limits: limits)
        let time = clock.now
        state.withLock { s in
            guard status == 200, let response = try? PushResponse.decode(bytes) else {
                s.log.append("      d\(device) → push of \(request.changes.count): HTTP \(status)")
                return
            }
            for (change, result) in zip(request.changes, response.results) {
                let content = change.op == .delete ? "delete" : "put \(tag(of: change.data) ?? "?")"
                var outcome = result.status.rawValue
                if let v = result.version { outcome += " \(v)" + (result.replayed ? " (replayed)" : "") }
                if let c = result.current { outcome += " with \(c.version) \(c.deleted ? "deleted" : tag(of: c.data) ?? "?")" }
                if let e = result.error { outcome += " \(e.code)" }
                s.log.append("      d\(device) → \(change.collection)/\(change.id) \(content) on \(change.baseVersion?.text ?? "nothing") [\(change.changeId.suffix(6))]: \(outcome)")
            }
            s.oracle.serverApplied(device: device, request: request, response: response, time: time)
        }
        return (status, bytes)
    }

    func push(_ request: PushRequest, device: Int) async throws -> PushResponse {
        let body = request.encoded()
        let blocked = state.withLock { s -> Bool in
            s.oracle.pushed(device: device, changes: request.changes)
            return s.holdsPush?(device, s.oracle.heldConflicts[device].count) ?? false
        }
        if blocked { throw TransportError.notSent("the queue waits behind a conflict left for a person") }
        guard let (plan, service) = begin("push", device: device, changes: request.changes.count) else {
            throw TransportError.notSent("the run is over")
        }
        defer { end() }
        switch plan {
        case .notSent(let m):
            throw TransportError.notSent(m)
        case .gateway:
            throw TransportError.badAnswer(status: 504, gatewayPage)
        case .crash(let deliverFirst):
            if deliverFirst, let service { _ = await deliver(service, body, request, device: device) }
            throw TransportError.noAnswer("the device's process is gone")
        case .hold:
            state.withLock { s in s.held.append(HeldPush(device: device, request: request, body: body, step: s.oracle.step)) }
            throw TransportError.noAnswer("timed out waiting for the answer")
        case .deliver(let times, let after):
            guard let service else { throw TransportError.notSent("connection refused") }
            var answer: (Int, [UInt8]) = (0, [])
            for _ in 0..<times { answer = await deliver(service, body, request, device: device) }
            let status = answer.0
            var bytes = answer.1
            switch after {
            case .loseAnswer?: throw TransportError.noAnswer("the connection was reset before the answer was read")
            case .gatewayTimeout?: throw TransportError.badAnswer(status: 504, gatewayPage)
            case .cutOff(let f)?: bytes = Array(bytes.prefix(Int(Double(bytes.count) * f)))
            case nil: break
            }
            guard (200..<300).contains(status) else { throw Self.failure(status, bytes) }
            let response: PushResponse
            do { response = try PushResponse.decode(bytes) } catch {
                throw TransportError.badAnswer(status: status, "the answer is not a valid PushResponse: \(error)")
            }
            state.withLock { $0.oracle.answerRead(device: device, request: request, response: response) }
            return response
        }
    }

    func pull(_ query: PullQuery, device: Int) async throws -> PulledPage {
        // A page fetched ahead by a sync that was cancelled must not draw from the stream.
        if Task.isCancelled { throw TransportError.notSent("cancelled") }
        guard let (plan, service) = begin("pull", device: device) else { throw TransportError.notSent("the run is over") }
        defer { end() }
        switch plan {
        case .notSent(let m): throw TransportError.notSent(m)
        case .gateway: throw TransportError.badAnswer(status: 504, gatewayPage)
        case .crash: throw TransportError.noAnswer("the device's process is gone")
        case .hold: throw TransportError.noAnswer("timed out")
        case .deliver(_, let after):
            guard let service else { throw TransportError.notSent("connection refused") }
            var (status, bytes) = await SimServer.pull(service, query: query, token: token)
            switch after {
            case .loseAnswer?: throw TransportError.noAnswer("the connection was reset before the answer was read")
            case .gatewayTimeout?: throw TransportError.badAnswer(status: 504, gatewayPage)
            case .cutOff(let f)?: bytes = Array(bytes.prefix(Int(Double(bytes.count) * f)))
            case nil: break
            }
            guard status == 200 else { throw Self.failure(status, bytes) }
            return try PulledPage.decode(bytes, status: status)
        }
    }

    /// Delivers a held push now (its answer goes nowhere: the device gave up on it).
    func deliverHeld(at index: Int) async {
        guard let (push, service) = state.withLock({ s -> (HeldPush, SyncService?)? in
            guard s.held.indices.contains(index) else { return nil }
            let push = s.held.remove(at: index)
            s.log.append("      net: d\(push.device)'s push of \(push.request.changes.count) change(s) held since step \(push.step) arrives now")
            return (push, s.service)
        }) else { return }
        guard let service else { return }
        _ = await deliver(service, push.body, push.request, device: push.device)
    }

    // MARK: Resolvers

    /// The custom resolver: a new record naming both sides (the local edit's tag and the
    /// server version's), so every merge is a write the oracle can follow.
    func merge(device: Int, _ conflict: Conflict) -> Resolution {
        state.withLock { s in
            s.mergeCount += 1
            let t = "m\(device).\(s.mergeCount)"
            let local = conflict.local.deleted ? "deleted" : tag(of: conflict.local.data) ?? "?"
            let server = conflict.server.deleted ? "deleted" : tag(of: conflict.server.data) ?? "?"
            let data: JSONObject = ["t": .string(t), "l": .string(local), "s": .string(server)]
            let key = Key(conflict.collection, conflict.id)
            s.oracle.merge(device: device, key: key, server: conflict.server.version, data: data)
            s.log.append("      d\(device) resolver: \(key) \(local) + \(conflict.server.version) \(server) → \(t)")
            return .write(data)
        }
    }
}
