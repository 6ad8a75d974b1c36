import Foundation
import OutpostCrypto

/// The webhook settings of `outpost-server serve` (docs/deploying.md, docs/operating.md
/// "Webhooks"): where committed changes are posted, and how deliveries are timed, retried
/// and batched.
public struct WebhookSettings: Sendable, Equatable {
    /// The receivers, in the order given (`--webhook`, `OUTPOST_WEBHOOKS`).
    public var urls: [String] = []
    /// Seconds one delivery may take, from connecting to the end of the answer's head.
    public var timeoutSeconds = 10
    /// Deliveries of one batch before it becomes a dead letter.
    public var attempts = 10
    /// The delay before the first retry, in milliseconds; each later one doubles it, up to
    /// `maxRetryDelayMs`, less a random part of up to half (jitter).
    public var retryDelayMs = 1000
    /// Most changes in one batch. High by default: under a sustained push load a space gets
    /// one batch per commit of its writer (the next is claimed only once the previous one
    /// is delivered), so a batch must carry what a commit wrote to keep up; the bytes bound
    /// what a receiver gets in one request (docs/benchmarks.md, "Integrations").
    public var batchChanges = 10_000
    /// Most bytes of changes in one batch (a batch always holds at least one change).
    public var batchBytes = 1_048_576
    /// Deliver also to loopback, private, link-local, shared, unspecified, multicast and
    /// reserved addresses and to this server's own (`--webhook-allow-private`): off, such a
    /// receiver is refused at start when its URL names the address, and at each delivery
    /// when its name resolves to one (`ReceiverAddressPolicy`).
    public var allowPrivate = false

    /// The longest wait between two deliveries of a batch.
    public static let maxRetryDelayMs = 300_000
    /// The most webhooks a server posts to.
    public static let maxWebhooks = 16

    public init() {}

    /// The receivers as targets, in order.
    public var targets: [WebhookTarget] { urls.compactMap(WebhookTarget.init) }

    /// Which receiver addresses deliveries may connect to.
    var addressPolicy: ReceiverAddressPolicy { ReceiverAddressPolicy(allowPrivate: allowPrivate) }

    /// Checks every URL (http or https, with a host, not at an address the policy refuses)
    /// and that none is given twice.
    func validate() throws {
        guard urls.count <= Self.maxWebhooks else {
            throw Settings.Invalid(description: "--webhook is given \(urls.count) times; at most \(Self.maxWebhooks) webhooks are supported")
        }
        var seen: Set<String> = []
        for url in urls {
            guard WebhookTarget(url) != nil else {
                throw Settings.Invalid(description: "--webhook must be an http:// or https:// URL with a host and no fragment, not \"\(url)\"")
            }
            guard seen.insert(url).inserted else { throw Settings.Invalid(description: "--webhook \(url) is given twice") }
        }
        let policy = addressPolicy
        for target in targets {
            if let host = target.url.host, let why = policy.refusal(literalHost: host) {
                throw Settings.Invalid(description: "--webhook \(target.name) is refused: \(host) is \(why); webhooks reach only public addresses unless --webhook-allow-private true is set")
            }
        }
    }

    static let options: [Settings.Option] = [
        Settings.Option(flag: "--webhook", env: "OUTPOST_WEBHOOKS",
                        help: "a URL (http or https) that every committed change is posted to, in signed batches; repeat the flag for several (OUTPOST_WEBHOOKS: a comma-separated list); none by default",
                        reset: { $0.webhooks.urls = [] }) { s, v in
            s.webhooks.urls.append(v)
        },
        Settings.Option(flag: "--webhook-timeout", env: "OUTPOST_WEBHOOK_TIMEOUT", help: "seconds one webhook delivery may take before it counts as failed (default 10)") { s, v in
            s.webhooks.timeoutSeconds = try Settings.int("--webhook-timeout", v, in: 1...300)
        },
        Settings.Option(flag: "--webhook-attempts", env: "OUTPOST_WEBHOOK_ATTEMPTS", help: "deliveries of a batch before it becomes a dead letter (default 10)") { s, v in
            s.webhooks.attempts = try Settings.int("--webhook-attempts", v, in: 1...100)
        },
        Settings.Option(flag: "--webhook-retry-delay-ms", env: "OUTPOST_WEBHOOK_RETRY_DELAY_MS", help: "milliseconds before a failed delivery's first retry, doubled for each later one up to 5 minutes, with jitter (default 1000)") { s, v in
            s.webhooks.retryDelayMs = try Settings.int("--webhook-retry-delay-ms", v, in: 1...WebhookSettings.maxRetryDelayMs)
        },
        Settings.Option(flag: "--webhook-batch-changes", env: "OUTPOST_WEBHOOK_BATCH_CHANGES", help: "most changes in one webhook batch, 1 to 10000 (default 10000: the bytes bound a batch first)") { s, v in
            s.webhooks.batchChanges = try Settings.int("--webhook-batch-changes", v, in: 1...10_000)
        },
        Settings.Option(flag: "--webhook-allow-private", env: "OUTPOST_WEBHOOK_ALLOW_PRIVATE", help: "true: webhooks may also reach loopback, private, link-local and other non-public addresses and this server's own (default false: such receivers are refused)") { s, v in
            s.webhooks.allowPrivate = try Settings.bool("--webhook-allow-private", v)
        },
        Settings.Option(flag: "--webhook-batch-bytes", env: "OUTPOST_WEBHOOK_BATCH_BYTES", help: "most bytes of changes in one webhook batch; a batch always holds one change (default 1048576)") { s, v in
            s.webhooks.batchBytes = try Settings.int("--webhook-batch-bytes", v, in: 1...(64 * 1024 * 1024))
        },
    ]
}

/// One configured webhook.
public struct WebhookTarget: Sendable, Equatable {
    /// The URL as configured (it may hold credentials or a token in its query).
    public let url: URL
    /// What the store, the metrics and the admin endpoints call it: 16 hex digits of the
    /// URL's SHA-256, so nothing secret in the URL is written anywhere.
    public let key: String
    /// The URL without credentials, query or fragment: `https://hooks.example.com/outpost`.
    public let name: String

    /// Nil unless `text` is an http or https URL with a host and no fragment.
    public init?(_ text: String) {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host, !host.isEmpty, url.fragment == nil, !text.contains(" ") else { return nil }
        self.url = url
        key = String(SHA256.hex(Array(text.utf8)).prefix(16))
        name = url.redacted
    }
}
