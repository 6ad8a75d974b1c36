import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import Synchronization

/// The identity provider's keys as the server holds them: the last good JWK Set, fetched
/// at start, again when it goes stale, and when a token names a key it lacks, by the rules
/// of `JWKSRefreshPolicy`. One fetch at a time; every caller that needs it waits for the
/// same one, for at most the fetch timeout.
final class JWKSKeys: Sendable {
    let source: JWKSSource
    let maxBytes: Int
    let timeout: Duration
    private let metrics: Metrics
    private let state: Mutex<State>
    /// Counts the key sets put in use that differ from the one before (by the SHA-256 of
    /// the document): what a cache of verified tokens compares to know its entries were
    /// verified with the keys in use now.
    private let changes = Atomic<UInt64>(0)

    private struct State {
        var policy: JWKSRefreshPolicy
        var set: JSONWebKeySet?
        /// The SHA-256 of the document `set` was parsed from.
        var documentDigest: [UInt8] = []
        /// Why the last fetch failed, while the set is not loaded or stale because of it.
        var lastFailure: String?
        var inFlight: Task<Void, Never>?
        /// The pending scheduled fetch.
        var timer: Task<Void, Never>?
        var stopped = false
    }

    init(source: JWKSSource, maxBytes: Int, timeout: Duration, cooldown: Duration, metrics: Metrics) {
        self.source = source
        self.maxBytes = maxBytes
        self.timeout = timeout
        self.metrics = metrics
        state = Mutex(State(policy: JWKSRefreshPolicy(cooldown: cooldown)))
        metrics.declare("outpost_jwks_fetches_total",
                        help: "Fetches of the identity provider's JWK Set, by result (ok, network, http_error, timeout, too_large, invalid).",
                        kind: "counter")
        metrics.declare("outpost_jwks_unknown_kid_total",
                        help: "Provider tokens naming a key the set lacked, by what followed (fetched, joined a fetch under way, limited by the cooldown).",
                        kind: "counter")
        metrics.gauge("outpost_jwks_keys", help: "Keys of the identity provider's JWK Set that verify tokens (0 until a set loads).") { [weak self] in
            Double(self?.state.withLock { $0.set?.usableCount ?? 0 } ?? 0)
        }
    }

    /// Loads the set once, blocking, for a key set file that must be good at start.
    func loadNow() throws(JWKSFetchError) {
        guard case .file(let path) = source else { return }
        let document = try JWKSFetch.readNow(path, maxBytes: maxBytes).get()
        let set: JSONWebKeySet
        do { set = try JSONWebKeySet(parsing: document.bytes) } catch {
            throw JWKSFetchError(kind: .invalid, description: "\(path): \(error.description)")
        }
        install(set, document: document.bytes, maxAge: document.maxAge)
        metrics.increment("outpost_jwks_fetches_total", .init([("result", "ok")]))
    }

    /// Starts the schedule: a fetch now (unless `loadNow` loaded the set), then whenever the
    /// policy says.
    func start() {
        let loaded = state.withLock { $0.set != nil }
        if loaded { schedule() } else { Task { await refresh() } }
    }

    /// Stops the schedule; a fetch under way finishes on its own.
    func stop() {
        state.withLock { s in
            s.stopped = true
            s.timer?.cancel()
            s.timer = nil
        }
    }

    /// The key `kid` names for a token of `alg`, fetching the set first when it lacks the
    /// kid and the policy allows; refusals are the token's `401`.
    func key(kid: String, alg: String) async throws(TokenError) -> VerificationKey {
        if let found = try lookup(kid: kid, alg: alg) { return found }
        let decision = state.withLock { $0.policy.unknownKey(at: .now) }
        switch decision {
        case .refuse:
            metrics.increment("outpost_jwks_unknown_kid_total", .init([("outcome", "limited")]))
        case .join:
            metrics.increment("outpost_jwks_unknown_kid_total", .init([("outcome", "joined")]))
            await refresh()
        case .fetch:
            metrics.increment("outpost_jwks_unknown_kid_total", .init([("outcome", "fetched")]))
            await refresh()
        }
        if let found = try lookup(kid: kid, alg: alg) { return found }
        let failure = state.withLock { $0.set == nil ? ($0.lastFailure ?? "the first fetch has not finished") : nil }
        if let failure { throw .keysUnavailable(failure) }
        throw .unknownKey(kid)
    }

    /// The set's answer for `kid`: the key, nil when the set lacks it (or none is loaded),
    /// a throw when it holds the kid but that key cannot verify this token.
    private func lookup(kid: String, alg: String) throws(TokenError) -> VerificationKey? {
        guard let set = state.withLock({ $0.set }) else { return nil }
        switch set.lookup(kid: kid, alg: alg) {
        case .found(let key): return key
        case .unknown: return nil
        case .unusable(let why): throw .unusableKey(kid, why)
        }
    }

    /// Fetches the set now, or waits for the fetch under way.
    func refresh() async {
        let task = state.withLock { s -> Task<Void, Never> in
            if let running = s.inFlight { return running }
            s.policy.started()
            // A fetch a request waits for runs on that request's loop, not the pool.
            let task = Task(executorPreference: HTTPServer.currentEventLoop) { await self.fetch() }
            s.inFlight = task
            return task
        }
        await task.value
    }

    /// One fetch: the set replaces the one in use only when it parses; then the next
    /// scheduled fetch is set.
    private func fetch() async {
        let result = await JWKSFetch.fetch(source, maxBytes: maxBytes, timeout: timeout)
        var outcome: Result<(JSONWebKeySet, [UInt8], Duration?), JWKSFetchError>
        switch result {
        case .success(let document):
            do {
                outcome = .success((try JSONWebKeySet(parsing: document.bytes), document.bytes, document.maxAge))
            } catch {
                outcome = .failure(JWKSFetchError(kind: .invalid, description: error.description))
            }
        case .failure(let error):
            outcome = .failure(error)
        }
        switch outcome {
        case .success(let (set, bytes, maxAge)):
            metrics.increment("outpost_jwks_fetches_total", .init([("result", "ok")]))
            install(set, document: bytes, maxAge: maxAge)
        case .failure(let error):
            metrics.increment("outpost_jwks_fetches_total", .init([("result", error.kind.rawValue)]))
            let hadSet = state.withLock { s -> Bool in
                s.policy.failed(at: .now)
                s.lastFailure = error.description
                return s.set != nil
            }
            Log.error(hadSet ? "JWKS fetch failed; the last good keys stay in use" : "JWKS fetch failed; provider tokens are refused until the keys load",
                      ["source": source.description, "result": error.kind.rawValue, "error": error.description])
        }
        state.withLock { $0.inFlight = nil }
        schedule()
    }

    /// The key set generation: it grows each time a set unlike the one before is put in
    /// use, in the same step (so a caller that reads it before looking a key up, and sees it
    /// unchanged after, used the keys of that generation).
    var generation: UInt64 { changes.load(ordering: .acquiring) }

    /// Puts `set`, parsed from `document`, in use and logs what changed.
    private func install(_ set: JSONWebKeySet, document: [UInt8], maxAge: Duration?) {
        let digest = SHA256.hash(document)
        let (previous, recovered) = state.withLock { s -> (Set<String>?, Bool) in
            let previous = s.set.map { Set($0.entries.keys) }
            let recovered = s.lastFailure != nil
            s.set = set
            if digest != s.documentDigest {
                s.documentDigest = digest
                changes.add(1, ordering: .releasing)
            }
            s.lastFailure = nil
            s.policy.succeeded(at: .now, maxAge: maxAge)
            return (previous, recovered)
        }
        let kids = Set(set.entries.keys)
        guard previous != kids || recovered else { return }
        var fields = ["source": source.description, "keys": String(set.usableCount), "kids": kids.sorted().joined(separator: ",")]
        let refusals = set.refusals
        if !refusals.isEmpty {
            fields["unusable"] = refusals.sorted(by: { $0.key < $1.key }).map { "\($0.key): \($0.value)" }.joined(separator: "; ")
        }
        if set.unnamed > 0 { fields["withoutKid"] = String(set.unnamed) }
        Log.info("JWKS loaded", fields)
    }

    /// Sets the one timer for the policy's next scheduled fetch.
    private func schedule() {
        state.withLock { s in
            s.timer?.cancel()
            guard !s.stopped, let due = s.policy.nextFetch else {
                s.timer = nil
                return
            }
            s.timer = Task { [weak self] in
                do { try await Task.sleep(until: due, clock: .continuous) } catch { return }
                await self?.refresh()
            }
        }
    }
}
