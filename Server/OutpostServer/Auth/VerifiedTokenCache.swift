import OutpostCrypto
import Synchronization

/// Provider tokens that verified, with their mapped claims, so that a client sending the
/// same token on every request pays for its signature once (an ES256 check costs about
/// what a whole small request does).
///
/// An entry is keyed by the SHA-256 of the whole token, so a token that differs in any
/// byte is a different entry and is verified on its own. It is served only while the
/// token is within its `exp` and `nbf` (with the leeway verification allows), and only
/// under the key set it was verified with: every change of the provider's key set
/// (`JWKSKeys.generation`) empties the cache, so a removed key stops its tokens at once.
/// At most `capacity` entries: a new one beyond it evicts the one stored first. Only
/// successes are stored; a refused token is checked again each time, with the same answer.
final class VerifiedTokenCache: Sendable {
    /// The entries kept by default.
    static let defaultCapacity = 10_000

    let capacity: Int
    let leewaySeconds: Int64
    private let state: Mutex<State>

    /// The SHA-256 of a token, as four words for cheap hashing.
    struct Key: Hashable {
        let a: UInt64, b: UInt64, c: UInt64, d: UInt64

        init(_ token: [UInt8]) {
            let digest = SHA256.hash(token)
            func word(_ at: Int) -> UInt64 {
                var w: UInt64 = 0
                for i in at..<(at + 8) { w = w << 8 | UInt64(digest[i]) }
                return w
            }
            a = word(0); b = word(8); c = word(16); d = word(24)
        }
    }

    private struct Entry {
        let claims: Claims
        let notBefore: Int64?
        /// When it was stored, to tell it from a later entry of the same key in `order`.
        let sequence: UInt64
    }

    private struct State {
        /// The key set generation every entry was verified under.
        var generation: UInt64 = 0
        var entries: [Key: Entry] = [:]
        /// Keys in the order they were stored, oldest at `head`: a ring of `capacity` slots.
        var order: [(key: Key, sequence: UInt64)?]
        var head = 0
        var used = 0
        var nextSequence: UInt64 = 0

        init(capacity: Int) {
            order = Array(repeating: nil, count: capacity)
        }

        /// Empties the cache for the key set `generation`.
        mutating func reset(to generation: UInt64) {
            self.generation = generation
            entries.removeAll(keepingCapacity: true)
            for i in order.indices { order[i] = nil }
            head = 0
            used = 0
        }
    }

    init(capacity: Int = defaultCapacity, leewaySeconds: Int64) {
        precondition(capacity > 0, "a token cache holds at least one entry")
        self.capacity = capacity
        self.leewaySeconds = leewaySeconds
        state = Mutex(State(capacity: capacity))
    }

    /// The entries held now.
    var count: Int { state.withLock { $0.entries.count } }

    /// The claims of the token `key` at time `now`, when it verified under the key set
    /// `generation` and is still within its `exp` and `nbf`; nil otherwise (an entry out
    /// of its time is dropped).
    func claims(_ key: Key, now: Int64, generation: UInt64) -> Claims? {
        state.withLock { s -> Claims? in
            if s.generation != generation {
                guard generation > s.generation else { return nil }
                s.reset(to: generation)
                return nil
            }
            guard let entry = s.entries[key] else { return nil }
            // `now - leeway`, not `exp + leeway`: a token's exp may be near Int64.max.
            let current = now - leewaySeconds < entry.claims.exp && entry.notBefore.map { now + leewaySeconds >= $0 } ?? true
            guard current else {
                s.entries[key] = nil
                return nil
            }
            return entry.claims
        }
    }

    /// Stores the claims of the token `key`, verified under the key set `generation` (read
    /// before its key was looked up): nothing when the set has changed since.
    func store(_ key: Key, claims: Claims, notBefore: Int64?, generation: UInt64) {
        state.withLock { s in
            if s.generation != generation {
                guard generation > s.generation else { return }
                s.reset(to: generation)
            }
            guard s.entries[key] == nil else { return }
            let capacity = s.order.count
            if s.used == capacity, let oldest = s.order[s.head] {
                if s.entries[oldest.key]?.sequence == oldest.sequence { s.entries[oldest.key] = nil }
                s.order[s.head] = nil
                s.head = (s.head + 1) % capacity
                s.used -= 1
            }
            let sequence = s.nextSequence
            s.nextSequence += 1
            s.entries[key] = Entry(claims: claims, notBefore: notBefore, sequence: sequence)
            s.order[(s.head + s.used) % capacity] = (key, sequence)
            s.used += 1
        }
    }
}
