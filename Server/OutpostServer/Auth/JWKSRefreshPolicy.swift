import Foundation

/// When the server fetches its identity provider's JWK Set: a value with no clock of its
/// own, told what happened and when, so tests drive it with instants of their choosing.
///
/// - A schedule: the first fetch at start; after a success, again when the set goes stale
///   (the answer's `Cache-Control: max-age`, less its `Age`, within
///   `minimumMaxAge...maximumMaxAge`, `defaultMaxAge` without one); after a failure, again
///   after a delay that doubles from `firstRetry` to `longestRetry`. A failure keeps the
///   last good set, stale or not: a provider that is down does not log everyone out.
/// - A token naming a key the set lacks (a provider that rotated its keys, or no set
///   loaded yet) may cause a fetch at once, but at most one per `cooldown`; tokens that
///   come while a fetch is under way wait for it instead. So a flood of tokens with random
///   `kid`s costs the provider at most one fetch per cooldown.
struct JWKSRefreshPolicy: Sendable, Equatable {
    typealias Instant = ContinuousClock.Instant

    static let defaultMaxAge: Duration = .seconds(600)
    static let minimumMaxAge: Duration = .seconds(60)
    static let maximumMaxAge: Duration = .seconds(86_400)
    static let firstRetry: Duration = .seconds(1)
    static let longestRetry: Duration = .seconds(300)

    /// The least time between two fetches caused by unknown keys.
    let cooldown: Duration
    /// True once a set has loaded.
    private(set) var loaded = false
    /// Failures since the last success.
    private(set) var failures = 0
    /// When the schedule fetches next; nil before the first fetch has ended (the start's
    /// fetch is due at once).
    private(set) var nextFetch: Instant?
    /// When an unknown key last caused a fetch.
    private(set) var lastUnknownKeyFetch: Instant?
    /// True while a fetch is under way.
    private(set) var fetching = false

    init(cooldown: Duration) {
        self.cooldown = cooldown
    }

    /// What a token with a key the set lacks does.
    enum UnknownKey: Equatable {
        /// Wait for the fetch under way, then look again.
        case join
        /// Start a fetch, wait for it, then look again.
        case fetch
        /// Refuse the token now: a fetch for an unknown key came less than a cooldown ago.
        case refuse
    }

    /// A token named a key the set lacks, at `now`.
    mutating func unknownKey(at now: Instant) -> UnknownKey {
        if fetching { return .join }
        if let last = lastUnknownKeyFetch, now - last < cooldown { return .refuse }
        lastUnknownKeyFetch = now
        return .fetch
    }

    /// A fetch started.
    mutating func started() {
        fetching = true
    }

    /// The fetch ended with a set, fresh for `maxAge` (nil: the answer said nothing).
    mutating func succeeded(at now: Instant, maxAge: Duration?) {
        fetching = false
        loaded = true
        failures = 0
        nextFetch = now + Self.freshness(maxAge)
    }

    /// The fetch failed; the set in use, if any, stays.
    mutating func failed(at now: Instant) {
        fetching = false
        failures += 1
        nextFetch = now + Self.retryDelay(afterFailures: failures)
    }

    /// How long a set stays fresh: `maxAge` within the bounds, or the default.
    static func freshness(_ maxAge: Duration?) -> Duration {
        guard let maxAge else { return defaultMaxAge }
        return min(max(maxAge, minimumMaxAge), maximumMaxAge)
    }

    /// The wait before the next scheduled fetch after `failures` failures in a row.
    static func retryDelay(afterFailures failures: Int) -> Duration {
        var delay = firstRetry
        for _ in 1..<max(failures, 1) {
            delay = delay * 2
            if delay >= longestRetry { return longestRetry }
        }
        return min(delay, longestRetry)
    }

    /// The freshness an HTTP answer gives (RFC 9111 section 4.2.1): `max-age` of its
    /// `Cache-Control` less its `Age`; zero for `no-store` or `no-cache` (the bounds then
    /// make it the minimum); nil when it says nothing.
    static func maxAge(cacheControl: String?, age: String?) -> Duration? {
        guard let cacheControl else { return nil }
        var seconds: Int?
        for directive in cacheControl.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard let name = parts.first else { continue }
            switch name {
            case "no-store", "no-cache":
                return .zero
            case "max-age" where parts.count == 2:
                let value = parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { continue }
                // A number too long for an Int is as good as forever, and the bounds cut it.
                seconds = Int(value) ?? Int.max
            default:
                continue
            }
        }
        guard var seconds else { return nil }
        if let age, let ageSeconds = Int(age.trimmingCharacters(in: .whitespaces)), ageSeconds > 0 {
            seconds = max(0, seconds - min(ageSeconds, seconds))
        }
        return .seconds(min(seconds, 10 * 365 * 86_400))
    }
}
