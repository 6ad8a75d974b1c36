/// Device telemetry (docs/protocol.md section 7, `POST /v1/spaces/{space}/telemetry`): what
/// one device reports of its syncs, so an operator can watch the health of the devices.

/// One sync as the device saw it.
public struct TelemetryEntry: Sendable, Hashable {
    /// When the sync started, by the device's clock (ms since 1970).
    public var startedAt: Int64
    public var durationMs: Int64
    public var bytesSent: Int64 = 0
    public var bytesReceived: Int64 = 0
    public var pushed: Int64 = 0
    public var pulled: Int64 = 0
    /// Requests of the sync that failed and were, or will be, tried again.
    public var retries: Int64 = 0
    public var conflicts: Int64 = 0
    /// Of `conflicts`, those the device's resolver decided (each in its conflict journal);
    /// a count only: no value of the journal leaves the device. Added in 1.1 without a
    /// version change; absent reads as 0.
    public var resolved: Int64 = 0
    public var rejected: Int64 = 0
    /// The code of the error that ended the sync; nil when it succeeded.
    public var lastError: String?
    /// The shortest round trip of the sync's requests.
    public var roundTripMs: Int64?
    /// Changes waiting for the server after the sync.
    public var queueDepth: Int64 = 0
    /// The server's clock minus the device's, as measured (`ClockStatus.offsetMs`).
    public var clockOffsetMs: Int64?
    /// Added without a version change (absent from older SDKs' reports; a server that
    /// predates them ignores them): the app's data version (`Configuration.appVersion`),
    /// the records in the device's quarantine, and the edits it holds for a later app
    /// version (`upgrade_required`), each as they stood after the sync.
    public var appVersion: Int64?
    public var quarantined: Int64?
    public var upgradeRequired: Int64?

    public init(startedAt: Int64, durationMs: Int64) {
        self.startedAt = startedAt
        self.durationMs = durationMs
    }

    /// The most characters of `lastError`.
    public static let maxErrorLength = 200
    /// The largest count: 2^53 - 1, what every JSON reader holds exactly.
    public static let maxCount: Int64 = 9_007_199_254_740_991
    /// The largest count of changes one sync reports (`pushed`, `conflicts`, `resolved`,
    /// `rejected`): 2,000 pushes of the protocol's default 500 changes, more than a
    /// device's sync sends. An entry above it is refused, so no report makes the sums an
    /// operator reads (`GET /v1/admin/conflicts`) meaningless.
    public static let maxChangesPerSync: Int64 = 1_000_000
    /// The counts bounded by `maxChangesPerSync`.
    static let changeCounts: Set<String> = ["pushed", "conflicts", "resolved", "rejected"]

    /// The counting fields by name (key paths are immutable values, safe to share).
    nonisolated(unsafe) static let counts: [(String, WritableKeyPath<TelemetryEntry, Int64>)] = [
        ("durationMs", \.durationMs), ("bytesSent", \.bytesSent), ("bytesReceived", \.bytesReceived), ("pushed", \.pushed), ("pulled", \.pulled),
        ("retries", \.retries), ("conflicts", \.conflicts), ("resolved", \.resolved), ("rejected", \.rejected), ("queueDepth", \.queueDepth),
    ]

    /// The optional counts added without a version change, by name.
    static func optionalCounts(_ e: TelemetryEntry) -> [(String, Int64?)] {
        [("appVersion", e.appVersion), ("quarantined", e.quarantined), ("upgradeRequired", e.upgradeRequired)]
    }

    public var json: JSONValue {
        var o: JSONObject = ["startedAt": .number(JSONNumber(startedAt))]
        for (name, path) in Self.counts { o[name] = .number(JSONNumber(self[keyPath: path])) }
        o["lastError"] = lastError.map { .string($0) } ?? .null
        o["roundTripMs"] = roundTripMs.map { .number(JSONNumber($0)) } ?? .null
        o["clockOffsetMs"] = clockOffsetMs.map { .number(JSONNumber($0)) } ?? .null
        // Left out when unknown, so a report reads as before to a server that predates them.
        for (name, value) in Self.optionalCounts(self) { if let value { o[name] = .number(JSONNumber(value)) } }
        return .object(o)
    }

    /// Reads an entry, or throws `WireError` naming the first bad field (`syncs[i].field`).
    public init(json: JSONValue, at index: Int) throws(WireError) {
        func field(_ name: String) -> String { "syncs[\(index)].\(name)" }
        guard case .object(let o) = json else { throw WireError(field: "syncs[\(index)]", message: "must be an object") }
        // Counts are integers from 0 to 2^53 - 1 (the offset may be negative); only the
        // fields that may be unknown take null.
        func count(_ name: String, required: Bool = false, signed: Bool = false, nullable: Bool = false) throws(WireError) -> Int64? {
            guard let value = o[name], !(nullable && value.isNull) else {
                if required { throw WireError(field: field(name), message: "is required") }
                return nil
            }
            guard let i = value.int64Value, abs(i) <= Self.maxCount, signed || i >= 0 else {
                throw WireError(field: field(name), message: signed ? "must be an integer of at most 2^53 - 1" : "must be a non-negative integer of at most 2^53 - 1")
            }
            return i
        }
        self.init(startedAt: try count("startedAt", required: true)!, durationMs: try count("durationMs", required: true)!)
        for (name, path) in Self.counts where name != "durationMs" {
            guard let value = try count(name) else { continue }
            if Self.changeCounts.contains(name), value > Self.maxChangesPerSync {
                throw WireError(field: field(name), message: "must be at most \(Self.maxChangesPerSync), the most changes one sync reports")
            }
            self[keyPath: path] = value
        }
        roundTripMs = try count("roundTripMs", nullable: true)
        clockOffsetMs = try count("clockOffsetMs", signed: true, nullable: true)
        appVersion = try count("appVersion", nullable: true)
        quarantined = try count("quarantined", nullable: true)
        upgradeRequired = try count("upgradeRequired", nullable: true)
        if let error = o["lastError"], !error.isNull {
            guard let text = error.stringValue, text.count <= Self.maxErrorLength else {
                throw WireError(field: field("lastError"), message: "must be a string of at most \(Self.maxErrorLength) characters, or null")
            }
            lastError = text
        }
    }
}

/// `{"clientId": …, "sdkVersion": …, "syncs": [entry…]}`: one device's report.
public struct TelemetryBatch: Sendable, Hashable {
    public var clientId: String
    public var sdkVersion: String
    public var syncs: [TelemetryEntry]

    /// The most entries of one batch, and the largest body, in bytes.
    public static let maxEntries = 100
    public static let maxBytes = 65_536

    public init(clientId: String, sdkVersion: String, syncs: [TelemetryEntry]) {
        self.clientId = clientId
        self.sdkVersion = sdkVersion
        self.syncs = syncs
    }

    public func encoded() -> [UInt8] {
        JSONValue.object(["clientId": .string(clientId), "sdkVersion": .string(sdkVersion), "syncs": .array(syncs.map(\.json))]).encoded()
    }

    /// Reads a batch, or throws `WireError` naming the first bad field.
    public init(json: JSONValue) throws(WireError) {
        guard case .object(let o) = json else { throw WireError(field: "body", message: "must be a JSON object") }
        guard let clientId = o["clientId"]?.stringValue, Names.isValidClientID(clientId) else {
            throw WireError(field: "clientId", message: "must be 1 to 128 characters of [A-Za-z0-9_.:-]")
        }
        // Characters (Unicode scalars), as JSON Schema's maxLength counts them; it was bytes
        // before, and every string that passed then passes now.
        guard let version = o["sdkVersion"]?.stringValue, (1...64).contains(version.unicodeScalars.count) else {
            throw WireError(field: "sdkVersion", message: "must be a string of 1 to 64 characters")
        }
        guard case .array(let items)? = o["syncs"] else { throw WireError(field: "syncs", message: "must be an array") }
        guard items.count <= Self.maxEntries else { throw WireError(field: "syncs", message: "holds \(items.count) entries; at most \(Self.maxEntries)") }
        var syncs: [TelemetryEntry] = []
        for (i, item) in items.enumerated() { syncs.append(try TelemetryEntry(json: item, at: i)) }
        self.init(clientId: clientId, sdkVersion: version, syncs: syncs)
    }
}
