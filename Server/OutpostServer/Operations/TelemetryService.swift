import Foundation
import OutpostCore
import OutpostHTTP

/// `POST /v1/spaces/{space}/telemetry` and `GET /v1/admin/devices` (docs/protocol.md
/// section 7; docs/operating.md, "Devices"): devices report their syncs; an operator sees
/// the last state of each, and which have gone quiet.
public final class TelemetryService: Sendable {
    let telemetry: DeviceTelemetry
    let authorizer: Authorizer
    let metrics: Metrics

    /// The most devices one page of `GET /v1/admin/devices` lists, and its default.
    static let maxDevicesPerPage = 1000
    static let defaultDevicesPerPage = 100

    init(telemetry: DeviceTelemetry, authorizer: Authorizer, metrics: Metrics) {
        self.telemetry = telemetry
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
        router.add(.GET, "/v1/admin/conflicts", bodyLimit: 0,
                   preBody: { [self] head, _ in _ = try await authorizer.authorizeAdmin(head) },
                   handler: { [self] request in try await conflicts(request.head) })
    }

    func stop() {
        telemetry.stop()
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
}
