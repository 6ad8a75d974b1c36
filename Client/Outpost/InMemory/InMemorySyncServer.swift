import OutpostCore
import OutpostCrypto
import Synchronization

/// An Outpost server in process, for tests and previews: two stores on one
/// `InMemorySyncServer` play two devices.
///
/// It implements docs/protocol.md sections 3 to 5 itself (it never links the server modules),
/// as a protocol 1.1 server: epochs and seqs, pushes applied in order with optimistic
/// concurrency and idempotency by changeId and SHA-256 fingerprint, re-offers judged by
/// the sameAs of the state they would replace, tombstones, pages with a record limit, a byte budget,
/// `hasMore`/`next`, cursor errors (`epoch_changed`, `cursor_ahead`), long polls, and the
/// limits of section 3. Every answer goes through the same encoding and decoding as over
/// HTTP, so a cut-off body fails where it would fail for real.
///
/// Operators' actions and faults make the situations a real deployment meets:
///
/// ```swift
/// let server = InMemorySyncServer()
/// let phone = try OutpostStore.inMemory(configuration: .init(space: "team"), transport: server.transport(device: "phone"))
/// server.inject(.loseAnswer, on: .push)          // applied, answer lost
/// server.restartEmpty()                           // data directory lost: new epoch, nothing kept
/// let backup = server.snapshot(); server.restore(backup)  // restore + rotate-epoch
/// ```
public final class InMemorySyncServer: SyncTransport, Sendable {
    /// Which requests a fault affects.
    public enum RequestKind: Sendable, Hashable {
        case push, pull, info, any
    }

    /// Something going wrong between a device and the server.
    public enum Fault: Sendable {
        /// Push: applied, then the answer is lost. Pull: the answer is lost.
        case loseAnswer
        /// A proxy answers `504` with an HTML page. For a push, `applied` says whether the
        /// server had applied it before the proxy gave up.
        case gatewayTimeout(applied: Bool)
        /// The answer is cut off half-way (a push is applied first).
        case cutOff
        /// The connection is refused: the request never reaches the server.
        case refuseConnection
        /// `503 unavailable` from the server itself, nothing applied.
        case unavailable
        /// Push: every change is answered `conflict` with the record as it is.
        case conflictEveryChange
        /// Answered by another, stale history (a lagging replica or a cache). A push is
        /// judged against that history and changes nothing on the real one.
        case staleHistory(Snapshot)
        /// Pull: pages are cut by record count only, ignoring `maxBytes`.
        case ignorePageBudget
        /// Pull: the page's bytes are rewritten before the device decodes them.
        case rewritePage(@Sendable ([UInt8]) -> [UInt8])
        /// The request never gets an answer until the caller's task is cancelled (a push is
        /// applied first).
        case hang
    }

    /// A copy of the server's whole state (its "data directory").
    public struct Snapshot: Sendable {
        fileprivate let history: History
        /// The snapshot's epoch.
        public var epoch: Epoch { history.epoch }
    }

    struct StoredState: Sendable {
        var seq: Int64
        var deleted: Bool
        var data: JSONObject?
        var updatedAt: Int64
        var updatedBy: String
        var clientTime: Int64?
        /// The earlier-history version this state descends from (protocol 1.1).
        var lineage: Version?
        /// The earlier-history version this state is, with nothing written on it since
        /// (protocol 1.1); re-offers are admitted by it.
        var sameAs: Version?
        /// The bytes of its data as stored (canonical JSON; 0 for a tombstone).
        var dataBytes: Int64 = 0
    }

    struct SpaceHistory: Sendable {
        var head: Int64 = 0
        var records: [RecordKey: StoredState] = [:]
        /// Every write in seq order; an entry is stale when its record has a later seq.
        var log: [(seq: Int64, key: RecordKey)] = []
        var applied: [String: PushRules.Applied] = [:]

        /// The whole state of `key` in this space, as a conflict answer shows it.
        func current(_ key: PushRules.Key, epoch: Epoch) -> RecordState? {
            let k = RecordKey(collection: key.collection, id: key.id)
            return records[k].map { InMemorySyncServer.recordState(k, $0, epoch: epoch) }
        }
    }

    /// `PushRules`' storage over one space's history, changed in place under the server's lock.
    struct MemoryPushStorage: PushStorage {
        var space: SpaceHistory
        let epoch: Epoch
        /// The server's epoch history.
        let epochs: PushRules.EpochHistory

        func epochHistory() -> PushRules.EpochHistory { epochs }

        func applied(_ changeIds: [String]) -> [String: PushRules.Applied] {
            var out: [String: PushRules.Applied] = [:]
            for id in changeIds { if let known = space.applied[id] { out[id] = known } }
            return out
        }

        func heads(_ keys: [PushRules.Key]) -> [PushRules.Key: PushRules.Head] {
            var out: [PushRules.Key: PushRules.Head] = [:]
            for key in keys {
                if let s = space.records[RecordKey(collection: key.collection, id: key.id)] {
                    out[key] = PushRules.Head(seq: s.seq, lineage: s.lineage, sameAs: s.sameAs, dataBytes: s.dataBytes)
                }
            }
            return out
        }

        func currents(_ keys: [PushRules.Key]) -> [PushRules.Key: RecordState] {
            var out: [PushRules.Key: RecordState] = [:]
            for key in keys { out[key] = space.current(key, epoch: epoch) }
            return out
        }

        mutating func write(_ writes: [PushRules.Write], remember: [PushRules.Remember], space counters: PushRules.Space) throws {
            for w in writes {
                let key = RecordKey(collection: w.key.collection, id: w.key.id)
                var data: JSONObject?
                if let bytes = w.data {
                    guard case .object(let o) = try JSONParser.parse(bytes) else { throw PushRulesError.notAnObject(key.collection, key.id) }
                    data = o
                }
                space.records[key] = StoredState(seq: w.seq, deleted: w.deleted, data: data, updatedAt: w.updatedAt, updatedBy: w.updatedBy,
                                                 clientTime: w.clientTime, lineage: w.lineage, sameAs: w.sameAs, dataBytes: Int64(w.data?.count ?? 0))
                space.log.append((w.seq, key))
                space.head = max(space.head, w.seq)
            }
            for r in remember {
                space.applied[r.changeId] = PushRules.Applied(fingerprint: r.fingerprint, version: Version(epoch: epoch, seq: r.seq), appliedAt: r.appliedAt)
            }
        }
    }

    fileprivate struct History: Sendable {
        var epoch: Epoch
        var spaces: [String: SpaceHistory] = [:]
        /// When it began and the epochs it ended (docs/protocol.md section 4, "Re-offers", rule 3).
        var past: PushRules.EpochHistory

        /// A new history (an empty data directory) that begins at `now` with `epoch`.
        init(epoch: Epoch, now: Int64) {
            self.epoch = epoch
            past = PushRules.EpochHistory(began: now)
        }

        /// Gives every record (tombstones included) the lineage and sameAs `<ending>.<seq>`,
        /// its own version in the history that ends, on which nothing is written yet
        /// (docs/protocol.md section 4, added in 1.1).
        mutating func recordLineage(endingEpoch ending: Epoch) {
            for name in Array(spaces.keys) {
                for key in Array(spaces[name]!.records.keys) {
                    let version = Version(epoch: ending, seq: spaces[name]!.records[key]!.seq)
                    spaces[name]!.records[key]!.lineage = version
                    spaces[name]!.records[key]!.sameAs = version
                }
            }
        }
    }

    private struct ArmedFault: Sendable {
        var fault: Fault
        var kind: RequestKind
        var device: String?
        var remaining: Int?
        var skip: Int
    }

    private struct State: Sendable {
        var history: History
        var faults: [ArmedFault] = []
        var rng: Randomness
        var pushes = 0
        var pulls = 0
    }

    private let state: Mutex<State>
    /// The server's limits (section 3).
    public let limits: Limits
    private let clock: @Sendable () -> Int64

    /// A server with `limits`, a clock for `updatedAt`, and a seed for its epochs.
    public init(limits: Limits = Limits(), clock: @escaping @Sendable () -> Int64 = systemMilliseconds, seed: UInt64 = 1) {
        var rng = Randomness(seed: seed)
        let now = clock()
        let epoch = Epoch.generate(nowMs: now, after: nil, using: &rng)
        state = Mutex(State(history: History(epoch: epoch, now: now), rng: rng))
        self.limits = limits
        self.clock = clock
    }

    /// A transport for one device. Faults can be aimed at a device by its name;
    /// `maxResponseBytes` plays the largest answer that device's transport reads.
    public func transport(device: String, maxResponseBytes: Int = 16 << 20) -> InMemorySyncTransport {
        InMemorySyncTransport(server: self, device: device, maxResponseBytes: maxResponseBytes)
    }

    // MARK: Inspection

    /// The current epoch.
    public var epoch: Epoch { state.withLock { $0.history.epoch } }

    /// Push requests received (answered or not).
    public var pushRequests: Int { state.withLock { $0.pushes } }

    /// Pull requests received.
    public var pullRequests: Int { state.withLock { $0.pulls } }

    /// The newest seq of `space` in the current epoch.
    public func head(space: String) -> Int64 {
        state.withLock { $0.history.spaces[space]?.head ?? 0 }
    }

    /// Every record of `space` (tombstones included), in seq order.
    public func records(space: String) -> [RecordState] {
        state.withLock { s in
            let epoch = s.history.epoch
            return (s.history.spaces[space]?.records ?? [:])
                .map { Self.recordState($0.key, $0.value, epoch: epoch) }
                .sorted { $0.version.seq < $1.version.seq }
        }
    }

    /// One record of `space`, or nil.
    public func record(space: String, collection: String, id: String) -> RecordState? {
        state.withLock { s in
            let key = RecordKey(collection: collection, id: id)
            return s.history.spaces[space]?.records[key].map { Self.recordState(key, $0, epoch: s.history.epoch) }
        }
    }

    // MARK: Operators' actions

    /// The server restarts with an empty data directory: a new epoch, no records, no
    /// memory of changeIds.
    public func restartEmpty() {
        state.withLock { s in
            let now = clock()
            let epoch = Epoch.generate(nowMs: now, after: s.history.epoch, using: &s.rng)
            s.history = History(epoch: epoch, now: now)
        }
    }

    /// `outpost-server rotate-epoch`: same data, a new epoch; every record's lineage becomes
    /// its version in the epoch that ended.
    public func rotateEpoch() {
        state.withLock { s in
            let ending = s.history.epoch
            let now = clock()
            s.history.epoch = Epoch.generate(nowMs: now, after: ending, using: &s.rng)
            s.history.past.end([ending: now])
            s.history.recordLineage(endingEpoch: ending)
        }
    }

    /// A copy of the data directory.
    public func snapshot() -> Snapshot {
        state.withLock { Snapshot(history: $0.history) }
    }

    /// Restores a copy of the data directory, then `rotate-epoch`, as an operator must.
    public func restore(_ snapshot: Snapshot) {
        state.withLock { s in
            var history = snapshot.history
            let now = clock()
            history.epoch = Epoch.generate(nowMs: now, after: max(s.history.epoch, snapshot.history.epoch), using: &s.rng)
            // The backup's epoch and the replaced one (with the epochs it had ended) join the
            // restored history, as `outpost-server restore` does.
            history.past.end(s.history.past.ended)
            history.past.end([snapshot.history.epoch: now])
            history.past.end([s.history.epoch: now])
            history.recordLineage(endingEpoch: snapshot.history.epoch)
            s.history = history
        }
    }

    /// Restores a copy of the data directory and forgets `rotate-epoch`: the history goes
    /// back without a new epoch (an operator's mistake; devices meet `cursor_ahead`).
    public func restoreKeepingEpoch(_ snapshot: Snapshot) {
        state.withLock { $0.history = snapshot.history }
    }

    // MARK: Faults

    /// Arms `fault` for `times` requests of `kind` (nil: until `clearFaults()`), from every
    /// device or only `device`, after letting `skip` such requests through.
    public func inject(_ fault: Fault, on kind: RequestKind, times: Int? = 1, device: String? = nil, skip: Int = 0) {
        state.withLock { $0.faults.append(ArmedFault(fault: fault, kind: kind, device: device, remaining: times, skip: skip)) }
    }

    /// Disarms every fault.
    public func clearFaults() {
        state.withLock { $0.faults.removeAll() }
    }

    /// Takes the faults that apply to one request.
    private func takeFaults(_ kind: RequestKind, device: String?) -> [Fault] {
        state.withLock { s in
            var taken: [Fault] = []
            for i in s.faults.indices where s.faults[i].kind == kind || s.faults[i].kind == .any {
                if let d = s.faults[i].device, d != device { continue }
                if s.faults[i].skip > 0 {
                    s.faults[i].skip -= 1
                    continue
                }
                taken.append(s.faults[i].fault)
                if let r = s.faults[i].remaining { s.faults[i].remaining = r - 1 }
            }
            s.faults.removeAll { ($0.remaining ?? 1) <= 0 }
            return taken
        }
    }

    // MARK: SyncTransport (as an anonymous device)

    /// `GET /v1/info`.
    public func serverInfo() async throws -> ServerInfo {
        try await serverInfo(device: nil)
    }

    /// A push from an anonymous device.
    public func push(_ request: PushRequest, space: String) async throws -> PushResponse {
        try await push(request, space: space, device: nil)
    }

    /// A pull from an anonymous device.
    public func pull(_ query: PullQuery, space: String) async throws -> PulledPage {
        try await pull(query, space: space, device: nil, maxResponseBytes: maxResponseBytes)
    }

    func serverInfo(device: String?) async throws -> ServerInfo {
        for fault in takeFaults(.info, device: device) { try await Self.failEarly(fault) }
        let info = ServerInfo(epoch: epoch, limits: limits)
        do { return try ServerInfo.decode(info.encoded()) } catch { throw TransportError.badAnswer(status: 200, "\(error)") }
    }

    /// Faults that stop a request before the server sees it.
    private static func failEarly(_ fault: Fault) async throws {
        switch fault {
        case .refuseConnection: throw TransportError.notSent("connection refused")
        case .unavailable:
            throw TransportError.refused(status: 503, ErrorEnvelope(code: ErrorCode.unavailable.rawValue, message: "the store cannot serve this request now; retry"))
        case .gatewayTimeout(applied: false): throw TransportError.badAnswer(status: 504, "<html><body>504 Gateway Time-out</body></html>")
        default: break
        }
    }

    private static func hang() async throws -> Never {
        while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(5)) }
        throw TransportError.noAnswer("cancelled while waiting for the answer")
    }

    // MARK: Push

    func push(_ request: PushRequest, space: String, device: String?, maxResponseBytes: Int = 16 << 20) async throws -> PushResponse {
        let faults = takeFaults(.push, device: device)
        state.withLock { $0.pushes += 1 }
        for fault in faults { try await Self.failEarly(fault) }
        guard Names.isValidSpace(space) else {
            throw TransportError.refused(status: 400, ErrorEnvelope(code: ErrorCode.invalidSpace.rawValue, message: Names.invalidSpaceMessage(space),
                                                                     details: ["space": .string(String(space.prefix(80)))]))
        }
        let body = request.encoded()
        guard body.count <= limits.maxRequestBytes else {
            throw TransportError.refused(status: 413, ErrorEnvelope(code: ErrorCode.payloadTooLarge.rawValue, message: "the body is over \(limits.maxRequestBytes) bytes",
                                                                     details: ["limit": .number(JSONNumber(limits.maxRequestBytes))]))
        }
        let decoded: (clientId: String, changes: [DecodedChange], versions: AppVersions)
        do {
            decoded = try PushRequest.decodeForServer(JSONParser.parse(body), maxChanges: limits.maxChangesPerPush)
        } catch PushDecodeError.tooManyChanges(let count, let limit) {
            throw TransportError.refused(status: 413, ErrorEnvelope(code: ErrorCode.tooManyChanges.rawValue, message: "\(count) changes in one push; the limit is \(limit)",
                                                                     details: ["limit": .number(JSONNumber(limit))]))
        } catch {
            throw TransportError.refused(status: 422, ErrorEnvelope(code: ErrorCode.invalidRequest.rawValue, message: "\(error)"))
        }
        let conflictAll = faults.contains { if case .conflictEveryChange = $0 { true } else { false } }
        let now = clock()
        var stale: History?
        for fault in faults { if case .staleHistory(let snapshot) = fault { stale = snapshot.history } }
        let outcome: Result<(Epoch, [PushResult]), any Error> = state.withLock { s in
            var target = stale ?? s.history
            let epoch = target.epoch
            var history = target.spaces[space] ?? SpaceHistory()
            var results: [PushResult] = []
            var inputs: [PushRules.Input] = []
            var order: [Int?] = []
            for item in decoded.changes {
                guard case .valid(let change) = item else {
                    if case .invalid(let id, let message) = item { results.append(.rejected(id, .invalidChange, message)) }
                    order.append(nil)
                    continue
                }
                if let refused = Self.refusal(of: change, epoch: epoch, limits: limits) {
                    results.append(refused)
                    order.append(nil)
                    continue
                }
                order.append(inputs.count)
                results.append(.rejected(change.changeId, .invalidChange, ""))
                inputs.append(PushRules.Input(change: change, fingerprint: SHA256.hash(change.fingerprintMaterial()), data: change.canonicalData()))
            }
            let decided: [PushResult]
            if conflictAll {
                decided = inputs.map { .conflict($0.change.changeId, current: history.current(PushRules.Key(collection: $0.change.collection, id: $0.change.id), epoch: epoch)) }
            } else {
                var storage = MemoryPushStorage(space: history, epoch: epoch, epochs: target.past)
                // It has no tokens: a device's subject is the clientId it pushes as.
                let context = PushRules.Context(epoch: epoch, clientId: decoded.clientId, subject: decoded.clientId, now: now)
                var counters = PushRules.Space(head: history.head, recordBytes: 0)
                do {
                    decided = try PushRules.apply(inputs, context: context, space: &counters, storage: &storage)
                } catch {
                    return .failure(error)
                }
                history = storage.space
            }
            for (index, slot) in order.enumerated() { if let slot { results[index] = decided[slot] } }
            target.spaces[space] = history
            if stale == nil { s.history = target }
            return .success((epoch, results))
        }
        let (epoch, results): (Epoch, [PushResult])
        switch outcome {
        case .success(let answer): (epoch, results) = answer
        case .failure(let error):
            throw TransportError.refused(status: 503, ErrorEnvelope(code: ErrorCode.unavailable.rawValue, message: "\(error)"))
        }
        let answer = PushResponse(epoch: epoch, results: results)
        for fault in faults {
            switch fault {
            case .loseAnswer: throw TransportError.noAnswer("the connection was reset before the answer was read")
            case .gatewayTimeout(applied: true): throw TransportError.badAnswer(status: 504, "<html><body>504 Gateway Time-out</body></html>")
            case .cutOff:
                let bytes = answer.encoded()
                do { return try PushResponse.decode(Array(bytes.prefix(bytes.count / 2))) } catch {
                    throw TransportError.noAnswer("the answer was cut off after \(bytes.count / 2) bytes")
                }
            case .hang: try await Self.hang()
            default: break
            }
        }
        let bytes = answer.encoded()
        guard bytes.count <= maxResponseBytes else { throw TransportError.answerTooLarge(limit: maxResponseBytes) }
        do { return try PushResponse.decode(bytes) } catch { throw TransportError.badAnswer(status: 200, "\(error)") }
    }

    /// What the handler of a real server refuses before the push rules see a change
    /// (docs/protocol.md section 4): a lineage a re-offer cannot have, a record over the limit.
    private static func refusal(of change: Change, epoch: Epoch, limits: Limits) -> PushResult? {
        if let problem = Lineage.problem(of: change, serverEpoch: epoch) {
            return .rejected(change.changeId, .invalidChange, problem)
        }
        if let data = change.data {
            let size = JSONValue.object(data).encoded().count
            if size > limits.maxRecordBytes {
                return .rejected(change.changeId, .recordTooLarge, "data is \(size) bytes encoded; the limit is \(limits.maxRecordBytes)")
            }
        }
        return nil
    }

    static func recordState(_ key: RecordKey, _ s: StoredState, epoch: Epoch) -> RecordState {
        RecordState(collection: key.collection, id: key.id, version: Version(epoch: epoch, seq: s.seq), deleted: s.deleted,
                    data: s.deleted ? nil : s.data, updatedAt: s.updatedAt, updatedBy: s.updatedBy, clientTime: s.clientTime, lineage: s.lineage,
                    sameAs: s.sameAs)
    }

    // MARK: Pull

    func pull(_ query: PullQuery, space: String, device: String?, maxResponseBytes: Int) async throws -> PulledPage {
        let faults = takeFaults(.pull, device: device)
        state.withLock { $0.pulls += 1 }
        for fault in faults { try await Self.failEarly(fault) }
        // A pull names its space as a push does, and the same rule refuses it (section 1).
        guard Names.isValidSpace(space) else {
            throw TransportError.refused(status: 400, ErrorEnvelope(code: ErrorCode.invalidSpace.rawValue, message: Names.invalidSpaceMessage(space),
                                                                     details: ["space": .string(String(space.prefix(80)))]))
        }
        if faults.contains(where: { if case .hang = $0 { true } else { false } }) { try await Self.hang() }
        var stale: History?
        var ignoreBudget = false
        for fault in faults {
            if case .staleHistory(let snapshot) = fault { stale = snapshot.history }
            if case .ignorePageBudget = fault { ignoreBudget = true }
        }
        var bytes = try page(query, space: space, from: stale, ignoreBudget: ignoreBudget)
        if bytes == nil, query.waitMs > 0, stale == nil {
            // Long poll: hold the request until a write arrives or the time is up.
            let deadline = ContinuousClock.now + .milliseconds(query.waitMs)
            while bytes == nil, ContinuousClock.now < deadline, !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(2))
                bytes = try page(query, space: space, from: nil, ignoreBudget: ignoreBudget, emptyIsNil: true)
            }
        }
        var body = try bytes ?? page(query, space: space, from: stale, ignoreBudget: ignoreBudget, emptyIsNil: false)!
        for fault in faults {
            switch fault {
            case .loseAnswer: throw TransportError.noAnswer("the connection was reset before the answer was read")
            case .cutOff: body = Array(body.prefix(body.count / 2))
            case .rewritePage(let rewrite): body = rewrite(body)
            default: break
            }
        }
        guard body.count <= maxResponseBytes else { throw TransportError.answerTooLarge(limit: maxResponseBytes) }
        return try PulledPage.decode(body)
    }

    /// The encoded page for `query`; nil when it would be empty and `emptyIsNil`.
    private func page(_ query: PullQuery, space: String, from stale: History?, ignoreBudget: Bool, emptyIsNil: Bool = true) throws -> [UInt8]? {
        let history = stale ?? state.withLock { $0.history }
        let epoch = history.epoch
        let since = query.since ?? .start(of: epoch)
        guard since.epoch == epoch else {
            throw TransportError.refused(status: 409, ErrorEnvelope(code: ErrorCode.epochChanged.rawValue,
                                                                     message: "the server's history is now epoch \(epoch); pull again from its start",
                                                                     details: ["epoch": .string(epoch.rawValue)]))
        }
        let spaceHistory = history.spaces[space] ?? SpaceHistory()
        guard since.seq <= spaceHistory.head else {
            throw TransportError.refused(status: 409, ErrorEnvelope(code: ErrorCode.cursorAhead.rawValue, message: "since is beyond the space's newest version",
                                                                     details: ["epoch": .string(epoch.rawValue), "head": .number(JSONNumber(spaceHistory.head))]))
        }
        let limit = limits.pageLimit(requested: query.limit)
        let maxBytes = ignoreBudget ? Int.max : limits.pageByteBudget(requested: query.maxBytes)
        let collections = query.collections.map(Set.init)
        // First log entry after `since` (the log is in seq order).
        var low = 0, high = spaceHistory.log.count
        while low < high {
            let mid = (low + high) / 2
            if spaceHistory.log[mid].seq <= since.seq { low = mid + 1 } else { high = mid }
        }
        var records: [UInt8] = [UInt8(ascii: "[")]
        var count = 0
        var last: Int64?
        var hasMore = false
        var i = low
        while i < spaceHistory.log.count {
            let (seq, key) = spaceHistory.log[i]
            i += 1
            guard let stored = spaceHistory.records[key], stored.seq == seq else { continue }
            if let collections, !collections.contains(key.collection) { continue }
            if count == limit { hasMore = true; break }
            let encoded = Self.recordState(key, stored, epoch: epoch).encoded()
            if count > 0 && records.count + 1 + encoded.count + 1 > maxBytes { hasMore = true; break }
            if count > 0 { records.append(UInt8(ascii: ",")) }
            records.append(contentsOf: encoded)
            count += 1
            last = seq
        }
        records.append(UInt8(ascii: "]"))
        if count == 0 && emptyIsNil && query.waitMs > 0 { return nil }
        let next = last.map { Version(epoch: epoch, seq: $0) } ?? since
        var out = Array(#"{"epoch":""#.utf8)
        out += epoch.rawValue.utf8
        out += #"","changes":"#.utf8
        out += records
        out += #","next":""#.utf8
        out += next.text.utf8
        out += (hasMore ? #"","hasMore":true,"head":"# : #"","hasMore":false,"head":"#).utf8
        out += String(spaceHistory.head).utf8
        out.append(UInt8(ascii: "}"))
        return out
    }
}

/// One device's connection to an `InMemorySyncServer`.
public struct InMemorySyncTransport: SyncTransport {
    /// The server.
    public let server: InMemorySyncServer
    /// The device's name (faults can aim at it).
    public let device: String
    /// The largest answer this device reads.
    public let maxResponseBytes: Int

    /// `GET /v1/info`.
    public func serverInfo() async throws -> ServerInfo {
        try await server.serverInfo(device: device)
    }

    /// A push.
    public func push(_ request: PushRequest, space: String) async throws -> PushResponse {
        try await server.push(request, space: space, device: device, maxResponseBytes: maxResponseBytes)
    }

    /// A pull.
    public func pull(_ query: PullQuery, space: String) async throws -> PulledPage {
        try await server.pull(query, space: space, device: device, maxResponseBytes: maxResponseBytes)
    }
}
