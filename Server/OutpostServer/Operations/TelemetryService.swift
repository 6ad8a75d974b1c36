import Foundation
import OutpostCore
import OutpostHTTP
import Synchronization

/// `POST /v1/spaces/{space}/telemetry` and `GET /v1/admin/devices` (docs/protocol.md
/// section 7; docs/operating.md, "Devices"): devices report their syncs; an operator sees
/// the last state of each, and which have gone quiet.
public final class TelemetryService: Sendable {
    let telemetry: DeviceTelemetry
    let authorizer: Authorizer
    let metrics: Metrics
    /// What pushes and pulls noted of each device, stored by `flushActivity`.
    let activity: DeviceActivity
    /// The store's epoch now: a cursor of another epoch is not behind, it is of a history
    /// that ended.
    let epoch: @Sendable () -> String
    /// The task that stores the noted activity every `flushInterval`.
    private let flusher = Mutex<Task<Void, Never>?>(nil)

    /// How often noted activity is stored: at most this much of it is lost when the
    /// process is killed (a clean stop stores it all).
    static let flushInterval: Duration = .seconds(5)
    /// The longest `staleAfter`: ten years, in seconds.
    static let maxStaleAfterSeconds = 315_360_000
    /// The most errors a device page shows, from the device's reported syncs.
    static let maxLastErrors = 10

    /// The most devices one page of `GET /v1/admin/devices` lists, and its default.
    static let maxDevicesPerPage = 1000
    static let defaultDevicesPerPage = 100

    init(telemetry: DeviceTelemetry, authorizer: Authorizer, metrics: Metrics, activity: DeviceActivity = DeviceActivity(),
         epoch: @escaping @Sendable () -> String = { "" }) {
        self.telemetry = telemetry
        self.activity = activity
        self.epoch = epoch
        self.authorizer = authorizer
        self.metrics = metrics
        metrics.declare("outpost_telemetry_reports_total", help: "Telemetry batches devices sent.", kind: "counter")
        metrics.declare("outpost_device_syncs_total", help: "Syncs devices reported, by result (ok, failed).", kind: "counter")
        metrics.declare("outpost_device_sync_duration_seconds", help: "How long the syncs devices reported took.", kind: "histogram",
                        buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300])
        metrics.declare("outpost_device_sync_round_trip_seconds", help: "The shortest round trip of each reported sync.", kind: "histogram",
                        buckets: Metrics.latencyBuckets)
    }

    public func register(_ router: inout Router) {
        router.add(.POST, "/v1/spaces/{space}/telemetry", bodyLimit: TelemetryBatch.maxBytes,
                   preBody: { [self] head, parameters in
                       _ = try await authorizer.authorize(head, space: try SyncService.space(parameters), scope: .read)
                   },
                   handler: { [self] request in try await receive(request) })
        router.add(.GET, "/v1/admin/devices", bodyLimit: 0,
                   preBody: { [self] head, _ in _ = try await authorizer.authorizeAdmin(head) },
                   handler: { [self] request in try await list(request.head) })
        router.add(.GET, "/v1/admin/spaces/{space}/devices", bodyLimit: 0,
                   preBody: { [self] head, parameters in
                       _ = try await authorizer.authorizeAdmin(head)
                       _ = try SyncService.space(parameters)
                   },
                   handler: { [self] request in try await spaceDevices(request) })
        router.add(.GET, "/v1/admin/spaces/{space}/devices/{clientId}", bodyLimit: 0,
                   preBody: { [self] head, parameters in
                       _ = try await authorizer.authorizeAdmin(head)
                       _ = try SyncService.space(parameters)
                   },
                   handler: { [self] request in try await device(request) })
        router.add(.GET, "/v1/admin/conflicts", bodyLimit: 0,
                   preBody: { [self] head, _ in _ = try await authorizer.authorizeAdmin(head) },
                   handler: { [self] request in try await conflicts(request.head) })
    }

    func stop() {
        telemetry.stop()
    }

    /// Starts storing the noted activity every `flushInterval`.
    func startFlushing() {
        let task = Task { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.flushInterval)
                await flushActivity()
            }
        }
        flusher.withLock { $0 = task }
    }

    /// Stops the periodic flush and stores what is noted (at shutdown, before `stop`).
    func stopFlushing() async {
        flusher.withLock { $0 }?.cancel()
        await flushActivity()
    }

    /// Stores what pushes and pulls noted since the last flush. A store failure loses that
    /// much activity, never a request: it is logged, and the next pushes and pulls note
    /// it again.
    func flushActivity() async {
        let noted = activity.take()
        guard !noted.isEmpty else { return }
        do {
            try await telemetry.flush(noted, now: Int64(Date().timeIntervalSince1970 * 1000))
        } catch {
            Log.write(level: "error", "device activity not stored", ["devices": .number(JSONNumber(noted.count)), "error": .string("\(error)")])
        }
    }

    /// Stores a batch; `202 {"accepted": n}`.
    func receive(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try SyncService.space(request.pathParameters)
        let claims = try await authorizer.authorize(request.head, space: space, scope: .read)
        let value = try parseJSONBody(request.body, maxDepth: 8)
        let batch: TelemetryBatch
        do { batch = try TelemetryBatch(json: value) } catch { throw HTTPError.invalidRequest(error) }
        guard try await telemetry.record(space: space, subject: claims.sub, batch, now: Int64(Date().timeIntervalSince1970 * 1000)) else {
            throw HTTPError(HTTPStatus(code: 403), .forbidden, "client id \"\(batch.clientId)\" reports under another subject; a device's reports are bound to the subject that pushed under its client id, or before any push to its first reporter")
        }
        metrics.increment("outpost_telemetry_reports_total")
        for entry in batch.syncs {
            metrics.increment("outpost_device_syncs_total", .init([("result", entry.lastError == nil ? "ok" : "failed")]))
            metrics.observe("outpost_device_sync_duration_seconds", .none, Double(entry.durationMs) / 1000)
            if let rtt = entry.roundTripMs { metrics.observe("outpost_device_sync_round_trip_seconds", .none, Double(rtt) / 1000) }
        }
        return HTTPResponse(status: HTTPStatus(code: 202), json: JSONValue.object(["accepted": .number(JSONNumber(batch.syncs.count))]).encoded())
    }

    /// `GET /v1/admin/devices?space=S&after=S/CLIENT&notSeenForHours=H&limit=N` (admin
    /// token): a page of devices in (space, client id) order; `next` is the `after` of the
    /// following page, null on the last one.
    func list(_ head: HTTPRequestHead) async throws -> HTTPResponse {
        let space = head.query("space")
        if let space, !Names.isValidSpace(space) { throw HTTPError.invalidQuery("space", "must be a space name") }
        var after: (String, String)?
        if let text = head.query("after"), !text.isEmpty {
            let parts = text.split(separator: "/", maxSplits: 1).map(String.init)
            guard parts.count == 2, Names.isValidSpace(parts[0]), Names.isValidClientID(parts[1]) else {
                throw HTTPError.invalidQuery("after", "must be the next of a previous page: SPACE/CLIENT")
            }
            after = (parts[0], parts[1])
        }
        let hours = try head.integerQuery("notSeenForHours", min: 0, max: 87_600)
        let limit = try head.integerQuery("limit", min: 1, max: Self.maxDevicesPerPage) ?? Self.defaultDevicesPerPage
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let found = try await telemetry.devices(space: space, after: after, notSeenSince: hours.map { now - Int64($0) * 3_600_000 }, limit: limit + 1)
        let page = found.prefix(limit)
        let devices: [JSONValue] = page.map { d in
            .object([
                "space": .string(d.space), "clientId": .string(d.clientId), "firstSeenAt": .number(JSONNumber(d.firstSeenAt)),
                "lastSeenAt": .number(JSONNumber(d.lastSeenAt)), "lastSyncAt": .number(JSONNumber(d.lastSyncAt)),
                "sdkVersion": .string(d.sdkVersion), "pending": .number(JSONNumber(d.pending)),
                "lastError": d.lastError.map { .string($0) } ?? .null, "clockOffsetMs": d.clockOffsetMs.map { .number(JSONNumber($0)) } ?? .null,
                "reports": .number(JSONNumber(d.reports)),
                "subject": d.subject.map { .string($0) } ?? .null,
                "conflicts": .number(JSONNumber(d.conflicts)), "resolved": .number(JSONNumber(d.resolved)),
            ])
        }
        let next: JSONValue = found.count > limit ? .string("\(page.last!.space)/\(page.last!.clientId)") : .null
        return HTTPResponse(json: JSONValue.object(["devices": .array(devices), "next": next]).encoded())
    }

    /// `GET /v1/admin/conflicts?after=SPACE&limit=N` (admin token): a page of the spaces
    /// whose devices reported, in name order, each with its devices and the conflicts they
    /// reported (`conflicts`) and of them those their resolvers decided (`resolved`); counts
    /// only, as devices report them. `next` is the `after` of the following page.
    func conflicts(_ head: HTTPRequestHead) async throws -> HTTPResponse {
        let after = head.query("after").flatMap { $0.isEmpty ? nil : $0 }
        if let after, !Names.isValidSpace(after) { throw HTTPError.invalidQuery("after", "must be the next of a previous page: a space name") }
        let limit = try head.integerQuery("limit", min: 1, max: Self.maxDevicesPerPage) ?? Self.defaultDevicesPerPage
        let found = try await telemetry.conflictsBySpace(after: after, limit: limit + 1)
        let page = found.prefix(limit)
        let spaces: [JSONValue] = page.map { s in
            .object([
                "space": .string(s.space), "devices": .number(JSONNumber(s.devices)),
                "conflicts": .number(JSONNumber(s.conflicts)), "resolved": .number(JSONNumber(s.resolved)),
            ])
        }
        let next: JSONValue = found.count > limit ? .string(page.last!.space) : .null
        return HTTPResponse(json: JSONValue.object(["spaces": .array(spaces), "next": next]).encoded())
    }

    // MARK: A space's devices

    /// `GET /v1/admin/spaces/{space}/devices?staleAfter=S&after=CURSOR&limit=N` (admin
    /// token): the space's devices, those the server has not seen (no report, push or
    /// pull) for `staleAfter` seconds first, quietest first, then the others by clientId.
    /// `next` is the `after` of the following page, null on the last one; it keeps its
    /// meaning with the same `staleAfter`.
    func spaceDevices(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try SyncService.space(request.pathParameters)
        let head = request.head
        let staleAfter = try head.integerQuery("staleAfter", min: 0, max: Self.maxStaleAfterSeconds) ?? 86_400
        let limit = try head.integerQuery("limit", min: 1, max: Self.maxDevicesPerPage) ?? Self.defaultDevicesPerPage
        var after: (group: Int64, at: Int64, clientId: String)?
        if let text = head.query("after"), !text.isEmpty {
            let parts = text.split(separator: ".", maxSplits: 2).map(String.init)
            guard parts.count == 3, let group = Int64(parts[0]), (0...1).contains(group), let at = Int64(parts[1]), at >= 0,
                  Names.isValidClientID(parts[2]) else {
                throw HTTPError.invalidQuery("after", "must be the next of a previous page: GROUP.TIME.CLIENT")
            }
            after = (group, at, parts[2])
        }
        await flushActivity()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let staleBefore = now - Int64(staleAfter) * 1000
        let found = try await telemetry.spaceDevices(space: space, staleBefore: staleBefore, after: after, limit: limit + 1)
        let page = found.prefix(limit)
        let epoch = self.epoch()
        let devices = page.map { Self.describe($0, epoch: epoch, now: now, staleBefore: staleBefore, lastErrors: nil) }
        var next: JSONValue = .null
        if found.count > limit, let last = page.last {
            let stale = last.lastActive < staleBefore
            next = .string("\(stale ? 0 : 1).\(stale ? last.lastActive : 0).\(last.device.clientId)")
        }
        return HTTPResponse(json: JSONValue.object([
            "space": .string(space), "staleAfter": .number(JSONNumber(staleAfter)), "epoch": .string(epoch),
            "devices": .array(devices), "next": next,
        ]).encoded())
    }

    /// `GET /v1/admin/spaces/{space}/devices/{clientId}` (admin token): one device as the
    /// list shows it, with the errors of its newest reported syncs; `404 device_not_found`
    /// for a clientId the server has not seen in the space.
    func device(_ request: HTTPRequest) async throws -> HTTPResponse {
        let space = try SyncService.space(request.pathParameters)
        guard let clientId = request.pathParameters["clientId"], Names.isValidClientID(clientId) else {
            throw HTTPError.invalidQuery("clientId", "must be 1 to 128 characters of [A-Za-z0-9_.:-]")
        }
        let staleAfter = try request.head.integerQuery("staleAfter", min: 0, max: Self.maxStaleAfterSeconds) ?? 86_400
        await flushActivity()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let staleBefore = now - Int64(staleAfter) * 1000
        guard let found = try await telemetry.spaceDevices(space: space, staleBefore: staleBefore, after: nil, clientId: clientId, limit: 1).first else {
            throw HTTPError(HTTPStatus(code: 404), .deviceNotFound, "no device \(clientId) has reported, pushed or pulled (naming itself) in space \(space)")
        }
        // Its errors, newest first, from the syncs it reported (at most 100 kept).
        let history = try await telemetry.history(space: space, clientId: clientId)
        let errors: [JSONValue] = history.compactMap { entry in
            guard let error = entry["lastError"]?.stringValue, let at = entry["startedAt"] else { return nil }
            return .object(["startedAt": at, "error": .string(error)])
        }
        let described = Self.describe(found, epoch: epoch(), now: now, staleBefore: staleBefore, lastErrors: Array(errors.prefix(Self.maxLastErrors)))
        return HTTPResponse(json: described.encoded())
    }

    /// A device as the space's device routes answer it.
    static func describe(_ d: DeviceTelemetry.SpaceDevice, epoch: String, now: Int64, staleBefore: Int64, lastErrors: [JSONValue]?) -> JSONValue {
        func number(_ value: Int64?) -> JSONValue { value.map { .number(JSONNumber($0)) } ?? .null }
        let newest = d.newest
        func reported(_ name: String) -> JSONValue { newest?[name].flatMap { $0.int64Value }.map { .number(JSONNumber($0)) } ?? .null }
        // Behind the head: only for a cursor of the current epoch (one of an ended history
        // must pull from the start, whatever its seq).
        var behind: JSONValue = .null
        if let seq = d.pullSeq, d.pullEpoch == epoch {
            behind = .object([
                "commits": .number(JSONNumber(max(0, d.head - seq))),
                "ms": d.firstUnpulledAt.map { .number(JSONNumber(max(0, now - $0))) } ?? .number(JSONNumber(0)),
            ])
        }
        var cursor: JSONValue = .null
        if let e = d.pullEpoch, let seq = d.pullSeq { cursor = .string("\(e).\(seq)") }
        var o: JSONObject = [
            "clientId": .string(d.device.clientId), "subject": d.device.subject.map { .string($0) } ?? .null,
            "sdkVersion": d.device.sdkVersion.isEmpty ? .null : .string(d.device.sdkVersion),
            "appVersion": reported("appVersion"),
            "firstSeenAt": number(d.device.firstSeenAt), "lastActiveAt": number(d.lastActive), "stale": .bool(d.lastActive < staleBefore),
            "lastPushAt": number(d.lastPush), "lastPullAt": number(d.lastPull),
            "lastReportAt": d.device.reports > 0 ? number(d.device.lastSeenAt) : .null,
            "lastSyncAt": d.device.reports > 0 ? number(d.device.lastSyncAt) : .null,
            "cursor": cursor, "head": number(d.head), "behind": behind,
            "pending": d.device.reports > 0 ? number(d.device.pending) : .null,
            "rejected": reported("rejected"), "quarantined": reported("quarantined"), "upgradeRequired": reported("upgradeRequired"),
            "conflicts": number(d.device.conflicts), "resolved": number(d.device.resolved),
            "lastError": d.device.lastError.map { .string($0) } ?? .null,
            "clockOffsetMs": number(d.device.clockOffsetMs), "reports": number(d.device.reports),
            "view": d.pullView.flatMap { try? JSONParser.parse($0) } ?? .null,
        ]
        if let lastErrors { o["lastErrors"] = .array(lastErrors) }
        return .object(o)
    }
}
