import Foundation
import OutpostCore

extension OutpostStore {
    /// How hard a commit is pushed to disk.
    public enum Durability: Sendable, Hashable {
        /// WAL with `synchronous=NORMAL`: a save survives a crash of the app; the last few
        /// may be lost if the device loses power before the next checkpoint.
        case normal
        /// WAL with `synchronous=FULL`: every save is on disk when `save` returns, and
        /// survives power loss. The default: an edit must never be lost. On Apple platforms
        /// it adds `PRAGMA fullfsync`: SQLite syncs with `F_FULLFSYNC`, since `fsync` there
        /// leaves the bytes in the drive's cache.
        case full
    }

    /// The data-protection class of the store's files on iOS, iPadOS, tvOS, visionOS and
    /// Mac Catalyst (`FileProtectionType`): whether they can be opened while the device is
    /// locked. Elsewhere it has no effect.
    public enum FileProtection: Sendable, Hashable {
        /// Readable only while the device is unlocked: a background sync of a locked
        /// phone fails with `OutpostError.storage`.
        case complete
        /// A file open when the device locks stays usable; one that is not cannot be opened
        /// until the next unlock.
        case completeUnlessOpen
        /// Readable from the first unlock after the device starts until it shuts down: a
        /// background sync of a locked phone works. The default.
        case completeUntilFirstUserAuthentication
        /// Never encrypted with a key tied to the passcode.
        case none
    }

    /// Settings of a store, with documented defaults.
    public struct Configuration: Sendable {
        /// The space the store syncs (docs/protocol.md section 1). A file belongs to one space.
        public var space: String
        /// The client id for a new file; nil makes a random `device-…` one. A file keeps the
        /// id it was created with (it is how the server and other devices name this one).
        public var clientId: String?
        /// Decides conflicts. Default: a three-way merge field by field, with last-write-wins
        /// (5-minute drift limit) for a field changed on both sides.
        public var resolver: ConflictResolver = .mergeFields(fallback: .lastWriteWins(maxClockDrift: .seconds(300)))
        /// How long the conflict journal keeps a resolver's decision (`conflicts(since:)`);
        /// older entries are pruned when the store opens and after syncs. Default 30 days.
        public var conflictRetention: Duration = .seconds(30 * 86_400)
        /// Retry schedule of failed and in-doubt changes.
        public var backoff: BackoffPolicy = BackoffPolicy()
        /// Records asked for per pull page (clamped to the server's `maxPageLimit`; halved
        /// while pages come back larger than the transport reads).
        public var pageLimit: Int = 1000
        /// Commit durability. Default `.full`.
        public var durability: Durability = .full
        /// The data-protection class of the store's files (`FileProtection`). Default
        /// `.completeUntilFirstUserAuthentication`, so a background sync can open the store
        /// while the phone is locked.
        public var fileProtection: FileProtection = .completeUntilFirstUserAuthentication
        /// The directory the app keeps its files in. Media uploads of files inside it are
        /// kept by their path relative to it, so they survive the move of the container that
        /// every app update makes; files elsewhere are kept by their absolute path. The
        /// default is the app's home on Apple platforms (its data container; set an App
        /// Group container's URL when the files live there) and nil on Linux (every path
        /// absolute). See docs/client.md, "Files and the app's container".
        public var baseDirectory: URL? = Platform.defaultBaseDirectory
        /// The device's clock. Tests move it.
        public var clock: @Sendable () -> Date = { Date() }
        /// A fixed seed makes change ids and backoff jitter repeatable (tests); nil uses the
        /// system's random source.
        public var randomSeed: UInt64?
        /// Per collection, a check a pulled record's data must pass; a record that fails it
        /// goes to the quarantine instead of the store (see `validate(_:in:)`).
        public var validators: [String: @Sendable (JSONObject) throws -> Void] = [:]
        /// How often the store compacts its file after a sync (`compact()`); nil: only on
        /// demand. Default 7 days. The last compaction's time is kept in the file.
        public var compactionInterval: Duration? = .seconds(7 * 86_400)
        /// Sends the device's sync telemetry (duration, bytes, counts, errors, latency,
        /// queue depth, clock offset) to the server in batches after syncs, for an operator
        /// to watch the devices (docs/client.md, "Telemetry"). Opt-in; default false.
        public var telemetry = false
        /// How far the device's clock may differ from the server's before `clockStatus()`
        /// reports it as an anomaly. Default 2 minutes.
        public var clockThreshold: Duration = .seconds(120)
        /// How long the server's limits from `/v1/info` are reused before being read again.
        public var limitsLifetime: Duration = .seconds(600)
        /// End-to-end encryption of the space's records (docs/encryption.md); nil: records
        /// travel and are stored on the server as the app wrote them.
        public var encryption: Encryption?
        /// The version of the data's schema this build of the app was made for, sent with
        /// every push (docs/rules.md, "App versions"). A server whose rules want a later
        /// version for a collection's writes answers `upgrade_required`: the change is held
        /// in the queue (`SyncStatus.upgradeRequired`) and goes with the first sync after the
        /// store is opened by an app of that version. nil (the default): none is sent, and
        /// the server takes the app for version 0.
        public var appVersion: Int?
        /// Per collection, a version in place of `appVersion` (for a collection whose schema
        /// moves on its own).
        public var collectionVersions: [String: Int] = [:]

        /// Per collection, the indexes, searchable fields and date fields of its queries
        /// (`CollectionSchema`; docs/client.md, "Queries"). The store creates and drops the
        /// indexes as this changes between versions of the app, when it opens.
        public var collections: [String: CollectionSchema] = [:]
        /// Whether opening the store makes the file's query indexes those `collections`
        /// declares (true, an app's store). A tool that opens an app's file without the app's
        /// declarations (the `outpost` command-line client) sets false: the file keeps the
        /// app's indexes and search tables as they are, and keeps them up to date.
        public var reconcilesQueryIndexes = true

        /// What the pushes name (`appVersion`, `collectionVersions`).
        var versions: AppVersions { AppVersions(app: appVersion, collections: collectionVersions) }

        /// A configuration for `space` with the defaults.
        public init(space: String) {
            self.space = space
        }

        /// Pulled records of `collection` must decode as `type` with `decoder` (by default
        /// `RecordCoder.standard`'s, which reads both date forms), else they are quarantined
        /// (`OutpostStore.quarantinedRecords()`) instead of stopping the pull or breaking
        /// `all(_:in:)` later. Pass the decoder the app's collection uses.
        public mutating func validate<T: Decodable & OutpostSendableMetatype>(_ type: T.Type, in collection: String,
                                                                              decoder: JSONDecoder = RecordCoder.standardDecoder()) {
            validators[collection] = { object in _ = try JSONValue.object(object).decode(T.self, decoder: decoder) }
        }
    }

    /// End-to-end encryption of a store's records: `.spaceKey(keys)` seals every put's data
    /// on the device before it is queued, under the space's current key from `keys`, and
    /// opens pulled copies before the app or a resolver sees them (docs/encryption.md).
    public struct Encryption: Sendable {
        /// Where the space's keyring is.
        public let keys: any KeyStore
        /// Per collection, fields that stay in clear beside the sealed part, so that the
        /// server's rules and view index can use them (an `assignee`, say). They are
        /// authenticated with the sealed part: the server cannot change them unnoticed.
        public var clearFields: [String: Set<String>]

        /// Encryption under the keys of the store's space in `keys`.
        public static func spaceKey(_ keys: any KeyStore, clearFields: [String: Set<String>] = [:]) -> Encryption {
            Encryption(keys: keys, clearFields: clearFields)
        }
    }

    /// Jittered exponential backoff: attempt n waits `initial` × 2^(n−1), at most `maximum`,
    /// of which a random `jitter` fraction is drawn (so devices that failed together do not
    /// retry together). The time is stored with the change (`nextAttemptAt`), never
    /// recomputed.
    public struct BackoffPolicy: Sendable, Hashable {
        /// The first delay. Default 1 s.
        public var initial: Duration = .seconds(1)
        /// The longest delay. Default 5 minutes.
        public var maximum: Duration = .seconds(300)
        /// The random fraction of each delay, 0 to 1. Default 0.5.
        public var jitter: Double = 0.5

        /// The defaults.
        public init() {}

        /// A policy.
        public init(initial: Duration, maximum: Duration, jitter: Double = 0.5) {
            self.initial = initial
            self.maximum = maximum
            self.jitter = jitter
        }

        /// The longest delay the policy draws, in ms. A stored retry time further ahead than
        /// this from now was computed before the device's clock was set back.
        var longestDelayMs: Int64 { max(max(1, initial.milliseconds), maximum.milliseconds) }

        /// The delay after the `attempt`-th failure (1-based), in ms.
        func delayMs(attempt: Int, using rng: inout Randomness) -> Int64 {
            let base = max(1, initial.milliseconds)
            let cap = max(base, maximum.milliseconds)
            let shift = min(max(attempt - 1, 0), 40)
            let full = base > cap >> Int64(shift) ? cap : min(cap, base << Int64(shift))
            let j = min(max(jitter, 0), 1)
            let delay = Double(full) * (1 - j) + Double(full) * j * rng.unit()
            return max(1, Int64(delay))
        }
    }
}
