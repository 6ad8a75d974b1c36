import Foundation
import OutpostCore

/// Every setting of `outpost-server serve`, from flags and `OUTPOST_*` environment
/// variables (flags win). `outpost-server serve --help` prints `Settings.help`.
public struct Settings: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    public var dataDirectory = "./outpost-data"
    /// `sqlite` (default: the embedded store in the data directory) or a `postgres://` /
    /// `postgresql://` URL: several instances share one history (docs/scaling.md).
    public var store = "sqlite"
    /// Where media bytes live; nil means `DATA/media`. Instances on one PostgreSQL
    /// database must all name the same shared directory (docs/scaling.md).
    public var mediaDirectory: String?
    /// Where media bytes live: the directory above, or an S3 bucket.
    public var mediaStore = MediaStoreSettings()
    /// The limits of docs/protocol.md section 3.
    public var limits = Limits()
    /// How long applied change ids are remembered, in days (the protocol asks for at least 7).
    public var changeIdRetentionDays = 30
    /// How long tombstones are kept before compaction purges them, in days.
    public var tombstoneRetentionDays = 90
    /// Hours after its last chunk before an open upload expires.
    public var uploadExpiryHours = 24
    /// The most record bytes a space may hold (`PushRules.recordBytes`: collection, id and
    /// data of its records, tombstones included); 0 for no limit (the default).
    public var spaceRecordBytes: Int64 = 0
    /// The most media bytes a space may hold (its files and its open uploads); 0 for no
    /// limit (the default).
    public var spaceMediaBytes: Int64 = 0
    /// `full` (default: survives power loss) or `normal` (survives a process crash only).
    public var synchronous = "full"
    /// Whether `/metrics` needs an admin token.
    public var metricsRequireAdmin = true
    /// Event-loop threads of the HTTP engine (0: one per core).
    public var eventLoops = 0
    /// Seconds to let requests in flight finish on SIGTERM/SIGINT.
    public var shutdownGraceSeconds = 10
    /// Emit one JSON log line per request on standard error.
    public var accessLog = true
    /// Seconds a request head may take to arrive before `408` (docs/protocol.md section 2: 10).
    public var headerTimeoutSeconds = 10
    /// Seconds a request body may make no progress before `408`.
    public var bodyTimeoutSeconds = 10
    /// Most connections open at once; at the limit new ones wait in the kernel's backlog (0: none).
    public var maxConnections = 16_384
    /// Most connections open at once from one client address (an IPv6 /64); a connection
    /// over it is answered `503` (0: none).
    public var maxConnectionsPerAddress = 1024
    /// A rules file (docs/rules.md): who reads and writes what, and the shape of records.
    /// Nil: a space's tokens read and write everything in it.
    public var rulesPath: String?
    /// An identity provider whose RS256 and ES256 tokens are accepted (`--jwks-url`…).
    public var identityProvider = IdentityProviderSettings()
    /// Webhooks: what committed changes are posted to and how (docs/operating.md, "Webhooks").
    public var webhooks = WebhookSettings()

    public init() {}

    /// A failure to read the settings; the message names the flag or variable.
    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    /// One setting: its flag, its environment variable and how it is applied.
    struct Option: Sendable {
        let flag: String
        let env: String
        let help: String
        /// For a list setting: empties the list. Its environment variable is a
        /// comma-separated list; its flag may be given several times, and the flags given
        /// replace the variable's list.
        var reset: (@Sendable (inout Settings) -> Void)? = nil
        let apply: @Sendable (inout Settings, String) throws -> Void

        init(flag: String, env: String, help: String, reset: (@Sendable (inout Settings) -> Void)? = nil,
             apply: @escaping @Sendable (inout Settings, String) throws -> Void) {
            self.flag = flag
            self.env = env
            self.help = help
            self.reset = reset
            self.apply = apply
        }
    }

    static func int(_ name: String, _ text: String, min: Int = 0) throws -> Int {
        guard let v = Int(text), v >= min else { throw Invalid(description: "\(name) must be an integer of at least \(min), not \"\(text)\"") }
        return v
    }

    static func int(_ name: String, _ text: String, in range: ClosedRange<Int>) throws -> Int {
        guard let v = Int(text), range.contains(v) else {
            throw Invalid(description: "\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), not \"\(text)\"")
        }
        return v
    }

    static func bool(_ name: String, _ text: String) throws -> Bool {
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw Invalid(description: "\(name) must be true or false, not \"\(text)\"")
        }
    }

    static let options: [Option] = {
        var o: [Option] = [
            Option(flag: "--host", env: "OUTPOST_HOST", help: "address to listen on (default 127.0.0.1; 0.0.0.0 for all)") { s, v in s.host = v },
            Option(flag: "--port", env: "OUTPOST_PORT", help: "TCP port (default 8080; 0 picks a free one)") { s, v in
                s.port = try int("--port", v)
                guard s.port <= 65535 else { throw Invalid(description: "--port must be at most 65535") }
            },
            Option(flag: "--data", env: "OUTPOST_DATA", help: "data directory: the SQLite store, media files, the JWT secret (default ./outpost-data)") { s, v in s.dataDirectory = v },
            Option(flag: "--store", env: "OUTPOST_STORE", help: "sqlite (default) or a postgres://user:password@host:port/db URL shared by several instances (needs OUTPOST_JWT_SECRET)") { s, v in
                guard v == "sqlite" || Settings.isPostgresURL(v) else {
                    throw Invalid(description: "--store must be sqlite or a postgres:// or postgresql:// URL")
                }
                s.store = v
            },
            Option(flag: "--rules", env: "OUTPOST_RULES", help: "a rules file (docs/rules.md): per collection, read and write conditions and a schema; SIGHUP reloads it") { s, v in
                s.rulesPath = v.isEmpty ? nil : v
            },
            Option(flag: "--media-dir", env: "OUTPOST_MEDIA_DIR", help: "media directory (default DATA/media); with --store postgres://… every instance must use the same shared directory") { s, v in
                guard !v.isEmpty else { throw Invalid(description: "--media-dir must not be empty") }
                s.mediaDirectory = v
            },
        ]
        o += MediaStoreSettings.options
        let limitHelp: [String: String] = [
            "maxRequestBytes": "largest request body in bytes, after gzip decompression (default 8388608)",
            "maxChangesPerPush": "most changes in one push (default 500)",
            "maxRecordBytes": "largest encoded record data in bytes (default 262144)",
            "pageBytes": "most encoded bytes in one pull page (default 8388608)",
            "maxPageLimit": "most records in one pull page (default 5000)",
            "chunkSize": "media upload chunk size in bytes (default 524288)",
            "maxMediaBytes": "largest media file in bytes (default 1073741824)",
        ]
        for field in Limits.fields {
            let flag = "--" + kebab(field.name)
            let env = "OUTPOST_" + kebab(field.name).uppercased().replacingOccurrences(of: "-", with: "_")
            o.append(Option(flag: flag, env: env, help: limitHelp[field.name] ?? "") { s, v in
                s.limits[keyPath: field.keyPath] = try int(flag, v, min: 1)
            })
        }
        o += [
            Option(flag: "--change-id-retention-days", env: "OUTPOST_CHANGE_ID_RETENTION_DAYS", help: "days an applied change id is remembered for replays (default 30, at least 7)") { s, v in
                s.changeIdRetentionDays = try int("--change-id-retention-days", v, min: 7)
            },
            Option(flag: "--tombstone-retention-days", env: "OUTPOST_TOMBSTONE_RETENTION_DAYS", help: "days a delete's tombstone is kept before compaction purges it and moves the history horizon (default 90)") { s, v in
                s.tombstoneRetentionDays = try int("--tombstone-retention-days", v, min: 1)
            },
            Option(flag: "--upload-expiry-hours", env: "OUTPOST_UPLOAD_EXPIRY_HOURS", help: "hours after its last chunk before an open upload expires (default 24)") { s, v in
                s.uploadExpiryHours = try int("--upload-expiry-hours", v, min: 1)
            },
            Option(flag: "--space-record-bytes", env: "OUTPOST_SPACE_RECORD_BYTES", help: "most bytes of records one space may hold: collection, id and data, tombstones included (default 0: no limit)") { s, v in
                s.spaceRecordBytes = Int64(try int("--space-record-bytes", v))
            },
            Option(flag: "--space-media-bytes", env: "OUTPOST_SPACE_MEDIA_BYTES", help: "most bytes of media one space may hold: its files and open uploads (default 0: no limit)") { s, v in
                s.spaceMediaBytes = Int64(try int("--space-media-bytes", v))
            },
            Option(flag: "--synchronous", env: "OUTPOST_SYNCHRONOUS", help: "full (default: an applied change survives power loss) or normal (survives a process crash only)") { s, v in
                guard v == "full" || v == "normal" else { throw Invalid(description: "--synchronous must be full or normal") }
                s.synchronous = v
            },
            Option(flag: "--metrics-require-admin", env: "OUTPOST_METRICS_REQUIRE_ADMIN", help: "whether /metrics needs an admin token (default true)") { s, v in
                s.metricsRequireAdmin = try bool("--metrics-require-admin", v)
            },
            Option(flag: "--event-loops", env: "OUTPOST_EVENT_LOOPS", help: "HTTP event-loop threads (default 0: one per core)") { s, v in
                s.eventLoops = try int("--event-loops", v)
            },
            Option(flag: "--shutdown-grace", env: "OUTPOST_SHUTDOWN_GRACE", help: "seconds to finish requests in flight on SIGTERM (default 10)") { s, v in
                s.shutdownGraceSeconds = try int("--shutdown-grace", v)
            },
            Option(flag: "--access-log", env: "OUTPOST_ACCESS_LOG", help: "one JSON log line per request on standard error (default true)") { s, v in
                s.accessLog = try bool("--access-log", v)
            },
            Option(flag: "--header-timeout", env: "OUTPOST_HEADER_TIMEOUT", help: "seconds a request head may take before 408 (default 10)") { s, v in
                s.headerTimeoutSeconds = try int("--header-timeout", v, min: 1)
            },
            Option(flag: "--body-timeout", env: "OUTPOST_BODY_TIMEOUT", help: "seconds a request body may make no progress before 408 (default 10)") { s, v in
                s.bodyTimeoutSeconds = try int("--body-timeout", v, min: 1)
            },
            Option(flag: "--max-connections", env: "OUTPOST_MAX_CONNECTIONS", help: "most connections open at once; at the limit new ones wait in the kernel's backlog until one closes (default 16384; 0: no limit)") { s, v in
                s.maxConnections = try int("--max-connections", v)
            },
            Option(flag: "--max-connections-per-address", env: "OUTPOST_MAX_CONNECTIONS_PER_ADDRESS", help: "most connections open at once from one client address (an IPv6 /64); one over it is answered 503 (default 1024; 0: no limit; behind a reverse proxy every connection is the proxy's)") { s, v in
                s.maxConnectionsPerAddress = try int("--max-connections-per-address", v)
            },
        ]
        o += IdentityProviderSettings.options
        o += WebhookSettings.options
        return o
    }()

    static func kebab(_ camel: String) -> String {
        var out = ""
        for c in camel {
            if c.isUppercase { out += "-" + c.lowercased() } else { out.append(c) }
        }
        return out
    }

    /// Reads settings from `environment`, then `arguments` (flags win). Accepts
    /// `--flag value` and `--flag=value`.
    public static func parse(arguments: [String], environment: [String: String]) throws -> Settings {
        var s = Settings()
        for option in options {
            guard let v = environment[option.env] else { continue }
            if let reset = option.reset {
                reset(&s)
                for item in v.split(separator: ",") where !item.trimmingCharacters(in: .whitespaces).isEmpty {
                    try option.apply(&s, item.trimmingCharacters(in: .whitespaces))
                }
            } else {
                try option.apply(&s, v)
            }
        }
        s.mediaStore.readEnvironment(environment)
        var listsGiven: Set<String> = []
        var i = 0
        while i < arguments.count {
            let arg = arguments[i]
            var flag = arg
            var value: String?
            if let eq = arg.firstIndex(of: "="), arg.hasPrefix("--") {
                flag = String(arg[..<eq])
                value = String(arg[arg.index(after: eq)...])
            }
            guard let option = options.first(where: { $0.flag == flag }) else {
                throw Invalid(description: "unknown option \(arg) (see --help)")
            }
            if value == nil {
                i += 1
                guard i < arguments.count else { throw Invalid(description: "\(flag) needs a value") }
                value = arguments[i]
            }
            if let reset = option.reset, listsGiven.insert(option.flag).inserted { reset(&s) }
            try option.apply(&s, value!)
            i += 1
        }
        // With media in S3, chunks default to S3's smallest part (5 MiB), so that each can
        // become a part of the published object inside the store (docs/media.md).
        if s.mediaStore.kind == "s3", environment["OUTPOST_CHUNK_SIZE"] == nil,
           !arguments.contains(where: { $0 == "--chunk-size" || $0.hasPrefix("--chunk-size=") }) {
            s.limits.chunkSize = MediaStoreSettings.s3ChunkSize
        }
        try s.validate()
        return s
    }

    /// True for a `postgres://` or `postgresql://` URL.
    public static func isPostgresURL(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    /// The PostgreSQL URL of `store`, or nil for the embedded SQLite store.
    public var postgresURL: String? { Settings.isPostgresURL(store) ? store : nil }

    /// The per-space limit of record bytes, nil for none.
    public var recordQuota: Int64? { spaceRecordBytes > 0 ? spaceRecordBytes : nil }
    /// The per-space limit of media bytes, nil for none.
    public var mediaQuota: Int64? { spaceMediaBytes > 0 ? spaceMediaBytes : nil }

    /// Checks the limits against each other.
    public func validate() throws {
        guard limits.maxRecordBytes + 16_384 <= limits.maxRequestBytes else {
            throw Invalid(description: "--max-record-bytes must leave room for a change in --max-request-bytes")
        }
        guard limits.chunkSize <= 64 * 1024 * 1024 else { throw Invalid(description: "--chunk-size must be at most 64 MiB") }
        try identityProvider.validate()
        try webhooks.validate()
        try mediaStore.validate()
    }

    /// The text of `outpost-server serve --help`.
    public static var help: String {
        var out = "usage: outpost-server serve [options]\n\nEvery option can also be set by its environment variable; a flag wins.\n\n"
        for o in options {
            out += "  \(o.flag) VALUE".padding(toLength: 34, withPad: " ", startingAt: 0) + "\(o.env)\n      \(o.help)\n"
        }
        out += "  OUTPOST_JWT_SECRET".padding(toLength: 34, withPad: " ", startingAt: 0) + "\n      the HS256 secret for tokens, at least 32 bytes (openssl rand -base64 32); when unset, a random one is created in DATA/jwt-secret (mode 0600)\n"
        out += "  OUTPOST_JWT_PREVIOUS_SECRETS".padding(toLength: 34, withPad: " ", startingAt: 0) + "\n      comma-separated older secrets (each at least 32 bytes, no spaces around the commas) that still verify tokens while they are rotated out\n"
        out += "  OUTPOST_WEBHOOK_SECRET".padding(toLength: 34, withPad: " ", startingAt: 0) + "\n      the secret webhook deliveries are signed with, at least 32 bytes; when unset, a random one is created in DATA/webhook-secret (mode 0600)\n"
        out += "  OUTPOST_LOG_FILE".padding(toLength: 34, withPad: " ", startingAt: 0) + "\n      append the JSON log lines to this file instead of standard error\n"
        return out
    }
}
