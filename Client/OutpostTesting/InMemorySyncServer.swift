import Outpost
import OutpostCore
import OutpostCrypto
import OutpostSyncRules
import Synchronization

/// An Outpost server in process, for tests and previews: two stores on one
/// `InMemorySyncServer` play two devices.
///
/// It implements docs/protocol.md sections 3 to 5 itself (it never links the server modules),
/// as a protocol 1.1 server: epochs and seqs, pushes applied in order with optimistic
/// concurrency and idempotency by changeId and SHA-256 fingerprint, re-offers judged by
/// the sameAs of the state they would replace, tombstones, pages with a record limit, a byte budget,
/// `hasMore`/`next`, cursor errors (`epoch_changed`, `cursor_ahead`, `view_changed`,
/// `history_compacted`), long polls woken by commits, and the limits of section 3. The
/// rules are the server's own, written once in `OutpostSyncRules` (`PushRules`, `PullRules`);
/// this server only keeps the rows in memory. It is the `OutpostTesting` product, apart from
/// the SDK, so an app that links only `Outpost` carries none of the server's rules: link it
/// from a test target, or from the target that holds an app's SwiftUI previews. Every answer goes through the same encoding
/// and decoding as over HTTP, so a cut-off body fails where it would fail for real.
///
/// Operators' actions and faults make the situations a real deployment meets:
///
/// ```swift
/// import OutpostTesting
///
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
        /// Set when a resolved write stored it over another state (`RecordState.resolved`).
        var resolved: Resolved?
        /// The bytes of its data as stored (canonical JSON; 0 for a tombstone).
        var dataBytes: Int64 = 0
    }

    struct SpaceHistory: Sendable {
        var head: Int64 = 0
        var records: [RecordKey: StoredState] = [:]
        /// Every write in seq order; an entry is stale when its record has a later seq.
        var log: [(seq: Int64, key: RecordKey)] = []
        var applied: [String: PushRules.Applied] = [:]
        /// The newest seq of a tombstone compaction purged (`compact`): a cursor before it
        /// may have missed a delete.
        var horizon: Int64 = 0

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
                                                 clientTime: w.clientTime, lineage: w.lineage, sameAs: w.sameAs, resolved: w.resolved,
                                                 dataBytes: Int64(w.data?.count ?? 0))
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
                    // The version a resolution replaced is of the history that ends.
                    spaces[name]!.records[key]!.resolved = nil
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

    /// A long poll waiting for a commit (`waitForCommit`).
    private struct Waiter: Sendable {
        var space: String
        var afterSeq: Int64
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State: Sendable {
        var history: History
        var faults: [ArmedFault] = []
        /// Makes the epochs: the same seed, the same epochs.
        var rng: SplitMix64
        var pushes = 0
        var pulls = 0
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
        /// Counts the changes of the whole history (`changeHistory`), so that a long poll
        /// can tell one happened since it read its page.
        var generation: UInt64 = 0

        /// Takes the waiters a commit that made `space`'s head `head` wakes (all of them
        /// for nil: the history itself changed).
        mutating func wake(space: String?, head: Int64 = 0) -> [CheckedContinuation<Bool, Never>] {
            let woken = waiters.filter { space == nil || ($0.value.space == space && $0.value.afterSeq < head) }
            for id in woken.keys { waiters[id] = nil }
            return woken.values.map(\.continuation)
        }
    }

    private let state: Mutex<State>
    /// The server's limits (section 3).
    public let limits: Limits
    private let clock: @Sendable () -> Int64

    /// A server with `limits`, a clock for `updatedAt`, and a seed for its epochs.
    public init(limits: Limits = Limits(), clock: @escaping @Sendable () -> Int64 = systemMilliseconds, seed: UInt64 = 1) {
        var rng = SplitMix64(seed: seed)
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

    /// Long polls waiting for a commit now (the server's `outpost_long_polls_waiting`).
    public var waitingPulls: Int { state.withLock { $0.waiters.count } }

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
        changeHistory { s in
            let now = clock()
            let epoch = Epoch.generate(nowMs: now, after: s.history.epoch, using: &s.rng)
            s.history = History(epoch: epoch, now: now)
        }
    }

    /// `outpost-server rotate-epoch`: same data, a new epoch; every record's lineage becomes
    /// its version in the epoch that ended.
    public func rotateEpoch() {
        changeHistory { s in
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
        changeHistory { s in
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
        changeHistory { $0.history = snapshot.history }
    }

    /// Compaction (docs/operating.md, "Compaction"): purges the tombstones last written
    /// before `cutoff` (ms since 1970), and moves each space's history horizon up to the
    /// newest seq it purged, so a pull from a cursor before it is answered
    /// `history_compacted`. Returns how many tombstones it purged.
    @discardableResult
    public func compact(tombstonesBefore cutoff: Int64) -> Int {
        state.withLock { s in
            var purged = 0
            for name in Array(s.history.spaces.keys) {
                var space = s.history.spaces[name]!
                let gone = space.records.filter { $0.value.deleted && $0.value.updatedAt < cutoff }
                guard !gone.isEmpty else { continue }
                for (key, state) in gone {
                    space.records[key] = nil
                    space.horizon = max(space.horizon, state.seq)
                }
                space.log.removeAll { space.records[$0.key]?.seq != $0.seq }
                purged += gone.count
                s.history.spaces[name] = space
            }
            return purged
        }
    }

    /// Changes the history under the lock, then wakes every long poll: each reads again,
    /// and learns of a new epoch or a shorter history as any pull would.
    private func changeHistory(_ change: (inout State) -> Void) {
        let woken = state.withLock { s in
            change(&s)
            s.generation += 1
            return s.wake(space: nil)
        }
        for continuation in woken { continuation.resume(returning: true) }
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
        // A sleep ends early, by throwing, when the task is cancelled.
        while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
        throw TransportError.noAnswer("cancelled while waiting for the answer")
    }

    // MARK: Push

    func push(_ request: PushRequest, space: String, device: String?, maxResponseBytes: Int = 16 << 20) async throws -> PushResponse {
        let faults = takeFaults(.push, device: device)
        state.withLock { $0.pushes += 1 }
        for fault in faults { try await Self.failEarly(fault) }
        let decoded = try decodePush(request, space: space)
        let conflictAll = faults.contains { if case .conflictEveryChange = $0 { true } else { false } }
        let now = clock()
        var stale: History?
        for fault in faults { if case .staleHistory(let snapshot) = fault { stale = snapshot.history } }
        let (outcome, woken): (Result<(Epoch, [PushResult]), any Error>, [CheckedContinuation<Bool, Never>]) = state.withLock { s in
            var target = stale ?? s.history
            let epoch = target.epoch
            var history = target.spaces[space] ?? SpaceHistory()
            // What the server's handler refuses before the store sees a change.
            let items = decoded.changes.map { decoded -> PushRules.Item in
                switch PushRules.check(decoded, epoch: epoch, maxRecordBytes: limits.maxRecordBytes) {
                case .refused(let result): .rejected(result)
                case .admitted(let change, let data):
                    .change(PushRules.Input(change: change, fingerprint: SHA256.hash(change.fingerprintMaterial(canonicalData: data)), data: data))
                }
            }
            let results: [PushResult]
            if conflictAll {
                results = items.map { item in
                    switch item {
                    case .rejected(let result): result
                    case .change(let input):
                        .conflict(input.change.changeId, current: history.current(PushRules.Key(collection: input.change.collection, id: input.change.id), epoch: epoch))
                    }
                }
            } else {
                var storage = MemoryPushStorage(space: history, epoch: epoch, epochs: target.past)
                // It has no tokens: a device's subject is the clientId it pushes as.
                let context = PushRules.Context(epoch: epoch, clientId: decoded.clientId, subject: decoded.clientId, now: now)
                var counters = PushRules.Space(head: history.head, recordBytes: 0)
                do {
                    results = try PushRules.apply(items: items, context: context, space: &counters, storage: &storage)
                } catch {
                    return (.failure(error), [])
                }
                history = storage.space
            }
            target.spaces[space] = history
            guard stale == nil else { return (.success((epoch, results)), []) }
            s.history = target
            // The commit wakes the long polls it answers.
            return (.success((epoch, results)), s.wake(space: space, head: history.head))
        }
        for continuation in woken { continuation.resume(returning: true) }
        let (epoch, results): (Epoch, [PushResult])
        switch outcome {
        case .success(let answer): (epoch, results) = answer
        case .failure(let error):
            throw TransportError.refused(status: 503, ErrorEnvelope(code: ErrorCode.unavailable.rawValue, message: "\(error)"))
        }
        return try await answer(PushResponse(epoch: epoch, results: results), faults: faults, maxResponseBytes: maxResponseBytes)
    }

    /// What the server's handler refuses of a push request before its changes (a bad space
    /// name, a body over the limit, too many changes, bad JSON), as its envelope; else the
    /// request decoded.
    private func decodePush(_ request: PushRequest, space: String) throws -> (clientId: String, changes: [DecodedChange], versions: AppVersions) {
        guard Names.isValidSpace(space) else {
            throw TransportError.refused(status: 400, ErrorEnvelope(code: ErrorCode.invalidSpace.rawValue, message: Names.invalidSpaceMessage(space),
                                                                     details: ["space": .string(String(space.prefix(80)))]))
        }
        let body = request.encoded()
        guard body.count <= limits.maxRequestBytes else {
            throw TransportError.refused(status: 413, ErrorEnvelope(code: ErrorCode.payloadTooLarge.rawValue, message: "the body is over \(limits.maxRequestBytes) bytes",
                                                                     details: ["limit": .number(JSONNumber(limits.maxRequestBytes))]))
        }
        do {
            return try PushRequest.decodeForServer(JSONParser.parse(body), maxChanges: limits.maxChangesPerPush)
        } catch PushDecodeError.tooManyChanges(let count, let limit) {
            throw TransportError.refused(status: 413, ErrorEnvelope(code: ErrorCode.tooManyChanges.rawValue, message: "\(count) changes in one push; the limit is \(limit)",
                                                                     details: ["limit": .number(JSONNumber(limit))]))
        } catch {
            throw TransportError.refused(status: 422, ErrorEnvelope(code: ErrorCode.invalidRequest.rawValue, message: "\(error)"))
        }
    }

    /// The push's answer as the device reads it, through the faults that act on answers
    /// (lost, a gateway's 504 after the commit, cut off, hung) and its response size limit.
    private func answer(_ answer: PushResponse, faults: [Fault], maxResponseBytes: Int) async throws -> PushResponse {
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

    static func recordState(_ key: RecordKey, _ s: StoredState, epoch: Epoch) -> RecordState {
        RecordState(collection: key.collection, id: key.id, version: Version(epoch: epoch, seq: s.seq), deleted: s.deleted,
                    data: s.deleted ? nil : s.data, updatedAt: s.updatedAt, updatedBy: s.updatedBy, clientTime: s.clientTime, lineage: s.lineage,
                    sameAs: s.sameAs, resolved: s.resolved)
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
        // A long poll (section 5, `wait`): an empty page waits for a commit after its head,
        // and is read again when one comes (a filtered page may still be empty, and waits on).
        let deadline = ContinuousClock.now + .milliseconds(query.waitMs)
        var (history, generation) = state.withLock { ($0.history, $0.generation) }
        var answer = try page(query, space: space, from: stale ?? history, ignoreBudget: ignoreBudget)
        while answer.count == 0, query.waitMs > 0, stale == nil,
              await waitForCommit(space: space, afterSeq: answer.head, generation: generation, deadline: deadline) {
            (history, generation) = state.withLock { ($0.history, $0.generation) }
            answer = try page(query, space: space, from: history, ignoreBudget: ignoreBudget)
        }
        var body = answer.body
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

    /// The answer to `query` from `history`, by `PullRules`: its bytes, how many records it
    /// holds, and the space's head.
    private func page(_ query: PullQuery, space: String, from history: History, ignoreBudget: Bool) throws -> (body: [UInt8], count: Int, head: Int64) {
        let epoch = history.epoch
        let spaceHistory = history.spaces[space] ?? SpaceHistory()
        let since: Version
        do {
            since = try PullRules.start(query.since, epoch: epoch)
            try PullRules.checkView(since, sinceView: query.sinceView, view: nil)
            try PullRules.check(since, head: spaceHistory.head, horizon: spaceHistory.horizon)
        } catch {
            throw TransportError.refused(status: PullRules.Refusal.status, error.envelope)
        }
        var page = PullRules.Page(limit: limits.pageLimit(requested: query.limit),
                                  maxBytes: ignoreBudget ? Int.max : limits.pageByteBudget(requested: query.maxBytes))
        let collections = query.collections.map(Set.init)
        // First log entry after `since` (the log is in seq order).
        var low = 0, high = spaceHistory.log.count
        while low < high {
            let mid = (low + high) / 2
            if spaceHistory.log[mid].seq <= since.seq { low = mid + 1 } else { high = mid }
        }
        for (seq, key) in spaceHistory.log[low...] {
            guard let stored = spaceHistory.records[key], stored.seq == seq else { continue }
            if let collections, !collections.contains(key.collection) { continue }
            guard page.add(seq: seq, { $0.append(contentsOf: Self.recordState(key, stored, epoch: epoch).encoded()) }) else { break }
        }
        let next = page.lastSeq.map { Version(epoch: epoch, seq: $0) } ?? since
        let body = PullRules.envelope(epoch: epoch, changes: page.finish(), next: Cursor(next), hasMore: page.hasMore, head: spaceHistory.head)
        return (body, page.count, spaceHistory.head)
    }

    /// Suspends until a commit makes `space`'s head pass `afterSeq`, or the history itself
    /// changes or has changed since `generation` (true), or until `deadline` or the task's
    /// cancellation (false). Holds no thread: the commit resumes it.
    private func waitForCommit(space: String, afterSeq: Int64, generation: UInt64, deadline: ContinuousClock.Instant) async -> Bool {
        let id = state.withLock { s in
            s.nextWaiter += 1
            return s.nextWaiter
        }
        let timer = Task {
            try? await Task.sleep(until: deadline)
            self.expire(id)
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now: Bool? = state.withLock { s in
                    if s.generation != generation || (s.history.spaces[space]?.head ?? 0) > afterSeq { return true }
                    if Task.isCancelled || ContinuousClock.now >= deadline { return false }
                    s.waiters[id] = Waiter(space: space, afterSeq: afterSeq, continuation: continuation)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            expire(id)
        }
    }

    /// Ends the wait `id` unwoken (its deadline passed, or its task was cancelled).
    private func expire(_ id: UInt64) {
        state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: false)
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
