import Foundation
import OutpostCore
import OutpostHTTP
import OutpostSQLite
import Synchronization

/// One Outpost server: settings, data directory, store, services and routes, wired
/// together. `outpost-server serve` builds one and hands its router to the HTTP engine;
/// tests build one in-process the same way.
public final class OutpostApplication: Sendable {
    public let settings: Settings
    public let dataDirectory: DataDirectory
    /// The sync store: `SQLiteSyncStore`, or `PostgresSyncStore` with `--store postgres://…`.
    public let store: any SyncStore
    public let metrics: Metrics
    public let authorizer: Authorizer
    /// The identity provider whose tokens are accepted beside HS256 ones (`--jwks-url`,
    /// `--jwks-file`), nil without one.
    public let identityProvider: ProviderTokens?
    public let sync: SyncService
    /// The rules file in force (`--rules`), reloaded by `reloadRules` (SIGHUP).
    public let rules: RulesHolder
    public let operations: OperationsService
    /// Media uploads and downloads (docs/protocol.md section 6; docs/media.md).
    public let media: MediaService
    /// Device telemetry and the devices list (docs/operating.md, "Devices").
    public let telemetry: TelemetryService
    /// The admin console and its routes (docs/operating.md, "Admin console").
    public let admin: AdminService
    /// The last error answers, which the admin console lists.
    public let errors = RecentErrors()
    /// Webhook deliveries and their dead letters (docs/operating.md, "Webhooks").
    public let webhooks: WebhookService
    public let router: Router
    private let sweeper: Task<Void, Never>
    private let epochChangeHandler = EpochChangeHook()
    /// The series `record` updates, resolved once each (created on first use, as before).
    private let requestSeries = Mutex(RequestSeries())

    /// Wraps parts of the application as it builds them, before any service uses them:
    /// instrumentation around the store, an audit of token checks, or a test's decorator.
    /// Each closure gets the part the settings made and returns the one to use.
    public struct Parts: Sendable {
        /// The sync store.
        public var store: @Sendable (any SyncStore) -> any SyncStore = { $0 }
        /// The verifier of bearer tokens.
        public var tokens: @Sendable (any TokenVerifier) -> any TokenVerifier = { $0 }
        public init() {}
    }

    /// Opens the data directory (taking its lock) and the store, and builds the routes,
    /// with `parts` wrapping the store and the token verifier.
    public init(settings: Settings, environment: [String: String] = ProcessInfo.processInfo.environment, parts: Parts = Parts()) throws {
        self.settings = settings
        // Settings built in code are not parsed: their webhooks are checked here.
        try settings.webhooks.validate()
        // A rules file that does not check refuses the start, before anything is opened.
        rules = try RulesHolder(path: settings.rulesPath)
        dataDirectory = try DataDirectory(path: settings.dataDirectory)
        let secrets = try Secrets(settings: settings, environment: environment)
        let opened = try Self.openStore(settings, dataDirectory, parts: parts, onEpochChange: epochChangeHandler)
        store = opened.store
        let sessions = DatabaseSessions(settings: settings, dataDirectory: dataDirectory)

        metrics = Metrics()
        Self.declareHTTPMetrics(metrics)
        let shared = JWTAuthority(secret: secrets.jwt, previousSecrets: secrets.previous)
        // Without a provider the verifier is the HS256 authority alone, as it always was.
        identityProvider = settings.identityProvider.isConfigured ? try ProviderTokens(settings: settings.identityProvider, metrics: metrics) : nil
        let tokens: any TokenVerifier = identityProvider.map { ServerTokens(shared: shared, provider: $0) } ?? shared
        authorizer = Authorizer(authority: parts.tokens(tokens))
        sync = SyncService(store: store, limits: settings.limits, authorizer: authorizer, metrics: metrics, rules: rules, audit: settings.accessLog)
        sync.viewIndex.follow(rules.rules)
        Self.declareSyncMetrics(metrics, sync: sync, store: store)
        let compactor = Compactor(store: store, metrics: metrics, retentionDays: settings.tombstoneRetentionDays)
        // Device telemetry in the store's database, on a session of its own.
        // Pushes and pulls note each device's activity in memory (`sync.devices`); the
        // telemetry service stores it beside the devices' reports.
        let syncStore = store
        telemetry = TelemetryService(telemetry: try DeviceTelemetry(name: sessions.name, open: sessions.open(readOnly: false)),
                                     authorizer: authorizer, metrics: metrics, activity: sync.devices, epoch: { syncStore.epoch.rawValue })
        // Webhooks in the store's database.
        webhooks = try WebhookService(settings: settings.webhooks, secret: secrets.webhook, authorizer: authorizer, metrics: metrics,
                                      soleOwner: settings.postgresURL == nil, store: opened.webhookSQL(), reads: opened.webhookReads)
        var mediaConfiguration = MediaStore.Configuration(databasePath: dataDirectory.storePath,
                                                          mediaDirectory: settings.mediaDirectory ?? dataDirectory.mediaPath)
        mediaConfiguration.synchronous = sessions.synchronous
        mediaConfiguration.postgresURL = settings.postgresURL
        mediaConfiguration.s3 = try settings.mediaStore.s3()
        media = MediaService(store: try MediaStore(configuration: mediaConfiguration), limits: settings.limits, authorizer: authorizer,
                             metrics: metrics, uploadExpiryHours: settings.uploadExpiryHours, quota: settings.mediaQuota)
        operations = OperationsService(store: store, limits: settings.limits, metrics: metrics, authorizer: authorizer,
                                       metricsRequireAdmin: settings.metricsRequireAdmin, compactor: compactor, media: media.store,
                                       quotas: (settings.recordQuota, settings.mediaQuota))
        // The admin console reads records on a session of its own (read-only on SQLite).
        let browser = try RecordBrowser(name: sessions.name, epoch: store.epoch, open: sessions.open(readOnly: true))
        let signer = JWTAuthority(secret: secrets.jwt)
        admin = AdminService(browser: browser, sync: sync, media: media, authorizer: authorizer, metrics: metrics, errors: errors,
                             storeKind: settings.postgresURL == nil ? "sqlite" : "postgresql",
                             startedAt: Int64(Date().timeIntervalSince1970 * 1000), sign: { signer.sign($0) })
        var router = Router()
        operations.register(&router)
        sync.register(&router)
        media.register(&router)
        telemetry.register(&router)
        admin.register(&router)
        webhooks.register(&router)
        self.router = router
        media.startSweeper()
        telemetry.startFlushing()
        webhooks.start(notifier: store.notifier)
        if let identityProvider { Self.start(identityProvider, settings.identityProvider) }
        sweeper = Self.startSweeper(store: store, compactor: compactor, changeIdRetentionDays: settings.changeIdRetentionDays)
    }

    /// The secrets, read before any store is opened: a missing, blank or weak one refuses
    /// the start. The webhook secret only when there is something to sign.
    private struct Secrets {
        let jwt: [UInt8]
        let previous: [[UInt8]]
        let webhook: [UInt8]?

        init(settings: Settings, environment: [String: String]) throws {
            if settings.postgresURL != nil {
                // Instances behind one load balancer must verify each other's tokens.
                guard let secret = environment["OUTPOST_JWT_SECRET"], !secret.isEmpty else {
                    throw Settings.Invalid(description: "--store postgres://… needs OUTPOST_JWT_SECRET: every instance on the database must sign and verify tokens with the same secret")
                }
                if !settings.webhooks.urls.isEmpty, (environment["OUTPOST_WEBHOOK_SECRET"] ?? "").isEmpty {
                    throw Settings.Invalid(description: "--webhook with --store postgres://… needs OUTPOST_WEBHOOK_SECRET: every instance on the database must sign deliveries with the same secret")
                }
            }
            jwt = try JWTSecret.load(environmentValue: environment["OUTPOST_JWT_SECRET"], dataDirectory: settings.dataDirectory)
            previous = try JWTSecret.previous(environment["OUTPOST_JWT_PREVIOUS_SECRETS"])
            webhook = try settings.webhooks.urls.isEmpty ? nil
                : SecretFile.load(environmentValue: environment["OUTPOST_WEBHOOK_SECRET"], dataDirectory: settings.dataDirectory,
                                  fileName: WebhookService.secretFileName, variable: "OUTPOST_WEBHOOK_SECRET")
        }
    }

    /// The sync store the settings name, wrapped by `parts`, and where the webhook outbox's
    /// SQL runs: on PostgreSQL a session of its own, on SQLite the store's writer thread
    /// (and its readers for a batch's rows).
    private static func openStore(_ settings: Settings, _ dataDirectory: DataDirectory, parts: Parts, onEpochChange: EpochChangeHook) throws
        -> (store: any SyncStore, webhookSQL: () throws -> any SQLRunner, webhookReads: (any SQLRunner)?) {
        if let url = settings.postgresURL {
            var configuration = PostgresSyncStore.Configuration(url: url)
            configuration.outbox = !settings.webhooks.urls.isEmpty
            configuration.recordQuota = settings.recordQuota
            configuration.onEpochChange = { _ in onEpochChange.run() }
            let store = parts.store(try PostgresSyncStore(configuration: configuration))
            return (store, { try SQLSessionJob.thread(name: "webhooks", open: { PostgresSession(db: try PostgresSyncStore.open(url)) }) }, nil)
        }
        var configuration = SQLiteSyncStore.Configuration(path: dataDirectory.storePath)
        configuration.synchronous = DatabaseSessions.synchronous(settings)
        configuration.outbox = !settings.webhooks.urls.isEmpty
        configuration.recordQuota = settings.recordQuota
        let sqlite = try SQLiteSyncStore(configuration: configuration)
        return (parts.store(sqlite), { sqlite.writerSessions }, sqlite.readerSessions)
    }

    /// Sessions of their own on the store's database, for the parts that keep tables there
    /// beside the sync store (telemetry, the console's record browser).
    private struct DatabaseSessions {
        let name: String
        let synchronous: Connection.Synchronous
        let postgresURL: String?
        let path: String

        init(settings: Settings, dataDirectory: DataDirectory) {
            postgresURL = settings.postgresURL
            name = settings.postgresURL == nil ? "outpost" : "pg"
            synchronous = Self.synchronous(settings)
            path = dataDirectory.storePath
        }

        static func synchronous(_ settings: Settings) -> Connection.Synchronous {
            settings.synchronous == "normal" ? .normal : .full
        }

        /// Opens one session; `readOnly` on SQLite (PostgreSQL sessions are the store's role's).
        func open(readOnly: Bool) -> @Sendable () throws -> any SQLSession {
            let (url, path, synchronous) = (postgresURL, path, synchronous)
            if let url { return { PostgresSession(db: try PostgresSyncStore.open(url)) } }
            return { try SQLiteSession(path: path, flags: readOnly ? [.readOnly] : [.readWrite, .create], durableSynchronous: synchronous) }
        }
    }

    /// The gauges of the sync service and its store.
    private static func declareSyncMetrics(_ metrics: Metrics, sync: SyncService, store: any SyncStore) {
        metrics.declare("outpost_rules_reloads_total", help: "Reloads of the rules file, by result (applied, refused).", kind: "counter")
        // Pulls, not the store's waiters: the pulls of one group share one store waiter.
        metrics.gauge("outpost_long_polls_waiting", help: "Pull requests held open by a long poll.") { Double(sync.waitingPulls) }
        metrics.gauge("outpost_store_queued_writes", help: "Pushes and other writes waiting for the store's writer; one that keeps growing means writes arrive faster than commits.") {
            Double(store.queuedWrites)
        }
    }

    /// Starts refreshing the identity provider's keys, warning first when they come over
    /// plain http from another host.
    private static func start(_ provider: ProviderTokens, _ settings: IdentityProviderSettings) {
        if case .url(let url) = settings.source, url.scheme?.lowercased() == "http", !isLoopback(url.host ?? "") {
            Log.error("the JWKS URL is plain http: anyone on the path can swap the provider's keys; use https", ["url": url.redacted])
        }
        provider.start()
    }

    /// Forgets applied change ids older than their retention, and purges tombstones older
    /// than theirs (Compactor), at start and every hour.
    private static func startSweeper(store: any SyncStore, compactor: Compactor, changeIdRetentionDays: Int) -> Task<Void, Never> {
        let retentionMs = Int64(changeIdRetentionDays) * 86_400_000
        return Task.detached(priority: .background) {
            while !Task.isCancelled {
                let cutoff = Int64(Date().timeIntervalSince1970 * 1000) - retentionMs
                do {
                    let removed = try await store.sweepChangeIDs(appliedBefore: cutoff)
                    if removed > 0 { Log.info("forgot old change ids", ["count": String(removed)]) }
                } catch {
                    Log.error("change id sweep failed", ["error": "\(error)"])
                }
                do { try await compactor.run() } catch {
                    Log.error("compaction failed", ["error": "\(error)"])
                }
                try? await Task.sleep(for: .seconds(3600))
            }
        }
    }

    /// Reads the rules file again (SIGHUP). A file that does not check is refused with
    /// its path, line, column and reason, and the rules in force stay.
    @discardableResult
    public func reloadRules() -> Result<Void, RulesError> {
        guard let path = rules.path else { return .success(()) }
        do {
            try rules.reload()
            sync.viewIndex.follow(rules.rules)
            metrics.increment("outpost_rules_reloads_total", .init([("result", "applied")]))
            Log.info("rules reloaded", ["path": path])
            return .success(())
        } catch {
            metrics.increment("outpost_rules_reloads_total", .init([("result", "refused")]))
            Log.error("rules reload refused; the rules in force stay", ["error": error.description])
            return .failure(error)
        }
    }

    /// The HTTP series by route and status (routes are the router's patterns, a few dozen).
    struct RequestSeries {
        struct Route {
            var duration: Metrics.Histogram?
            var statuses: [Int: Metrics.Counter] = [:]
        }
        var routes: [String: Route] = [:]
        var received: Metrics.Counter?
        var sent: Metrics.Counter?
    }

    static func declareHTTPMetrics(_ metrics: Metrics) {
        metrics.declare("outpost_http_requests_total", help: "HTTP requests by route and status.", kind: "counter")
        metrics.declare("outpost_http_request_duration_seconds", help: "HTTP request latency by route.", kind: "histogram", buckets: Metrics.latencyBuckets)
        metrics.declare("outpost_http_bytes_received_total", help: "Request bytes received.", kind: "counter")
        metrics.declare("outpost_http_bytes_sent_total", help: "Response bytes sent.", kind: "counter")
    }

    /// Records one finished request in the metrics and, when enabled, the access log (one
    /// JSON line: method, route, status, duration, request id, bytes; never a token or
    /// record data).
    public func record(_ log: HTTPRequestLog) {
        if log.status >= 400 { errors.record(log, at: Int64(Date().timeIntervalSince1970 * 1000)) }
        let route = log.route ?? "unmatched"
        let seconds = Double(log.duration.components.seconds) + Double(log.duration.components.attoseconds) / 1e18
        // One lock and two small lookups per request instead of four trips through the
        // registry (each building and hashing its labels): the event loops call this for
        // every answer they write.
        let metrics = self.metrics
        let (requests, duration, received, sent) = requestSeries.withLock { c in
            if c.received == nil {
                c.received = metrics.counter("outpost_http_bytes_received_total")
                c.sent = metrics.counter("outpost_http_bytes_sent_total")
            }
            if c.routes[route] == nil {
                c.routes[route] = RequestSeries.Route(duration: metrics.histogram("outpost_http_request_duration_seconds", .init([("route", route)])))
            }
            let counter: Metrics.Counter
            if let known = c.routes[route]!.statuses[log.status] {
                counter = known
            } else {
                counter = metrics.counter("outpost_http_requests_total", .init([("route", route), ("status", String(log.status))]))
                c.routes[route]!.statuses[log.status] = counter
            }
            return (counter, c.routes[route]!.duration, c.received!, c.sent!)
        }
        requests.add()
        duration?.observe(seconds)
        received.add(log.bytesIn)
        sent.add(log.bytesOut)
        guard settings.accessLog else { return }
        Log.write(level: "info", "request", [
            "method": .string(log.method?.rawValue ?? "-"),
            "route": .string(route),
            "status": .number(JSONNumber(log.status)),
            "durationMs": .number(JSONNumber((seconds * 1000 * 1000).rounded() / 1000)),
            "requestId": .string(log.requestID),
            "bytesIn": .number(JSONNumber(log.bytesIn)),
            "bytesOut": .number(JSONNumber(log.bytesOut)),
            "remote": .string(log.remoteAddress),
        ])
    }

    /// Sets what happens when the PostgreSQL store sees its epoch rotated by an operator
    /// (the store already refuses requests by then): `outpost-server serve` shuts down so
    /// that its supervisor starts it again on the new epoch.
    public func onEpochChange(_ handler: @escaping @Sendable () -> Void) {
        epochChangeHandler.set(handler)
    }

    /// True for a host name or address of this machine's loopback interface.
    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }

    /// The server is shutting down: `/readyz` answers 503, and waiting long polls are
    /// answered now (`SyncService.beginDraining`).
    public func beginDraining() {
        operations.beginDraining()
        sync.beginDraining()
    }

    /// Stops background work and closes the store.
    public func close() async {
        sweeper.cancel()
        identityProvider?.stop()
        await webhooks.stop()
        await media.close()
        await telemetry.stopFlushing()
        let telemetry = self.telemetry, admin = self.admin
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            // Joins their threads: off the cooperative pool.
            DispatchQueue.global().async {
                telemetry.stop()
                admin.stop()
                c.resume()
            }
        }
        await store.close()
        dataDirectory.release()
    }
}

/// The action `OutpostApplication.onEpochChange` sets, read by the store's thread.
final class EpochChangeHook: Sendable {
    private let handler = Mutex<(@Sendable () -> Void)?>(nil)

    func set(_ action: @escaping @Sendable () -> Void) {
        handler.withLock { $0 = action }
    }

    func run() {
        handler.withLock { $0 }?()
    }
}
