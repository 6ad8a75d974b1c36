import OutpostCore

/// How a store talks to a server: the three requests of docs/protocol.md sections 3 to 5.
///
/// Implementations throw only `TransportError`, and must tell apart what they know about a
/// request: `notSent` only when it certainly never reached the server; `noAnswer` or
/// `badAnswer` when it may have (a timeout, a reset, a body cut off, a proxy's HTML 504,
/// an answer that does not decode). Only a push answer that was read and decoded settles
/// a change: everything else leaves it in doubt, and it is sent again under the same
/// changeId. Any other error a custom transport throws is treated as `noAnswer`.
///
/// `HTTPSyncTransport` talks to a real server; `InMemorySyncServer` (the `OutpostTesting`
/// product) plays one in-process.
public protocol SyncTransport: Sendable {
    /// `GET /v1/info`: the epoch and the limits.
    func serverInfo() async throws -> ServerInfo
    /// `POST /v1/spaces/{space}/push`.
    func push(_ request: PushRequest, space: String) async throws -> PushResponse
    /// `GET /v1/spaces/{space}/pull`. Records are decoded one by one, so one the store cannot
    /// use does not cost the page.
    func pull(_ query: PullQuery, space: String) async throws -> PulledPage
    /// The largest answer the transport reads, in bytes. The store asks for pages below it
    /// (`maxBytes`) and halves `limit` when a page is larger anyway.
    var maxResponseBytes: Int { get }
    /// The best reading of the server's clock (the smallest round trip) since the last call,
    /// and forgets it; nil when there was none. The store calls it after each sync to
    /// estimate its clock's offset (`OutpostStore.clockStatus()`).
    func takeServerClockReading() -> ServerClockReading?
    /// The bytes sent and received and the requests that failed since the last call, and
    /// resets them; nil when the transport does not count.
    func takeTraffic() -> TransportTraffic?
    /// `POST /v1/spaces/{space}/telemetry` (docs/protocol.md section 7).
    func sendTelemetry(_ batch: TelemetryBatch, space: String) async throws
}

/// What a transport moved (`SyncTransport.takeTraffic`).
public struct TransportTraffic: Sendable, Hashable {
    public var bytesSent: Int64 = 0
    public var bytesReceived: Int64 = 0
    /// Requests that failed (not sent, no answer, or a 5xx/408/429 answer).
    public var failedRequests: Int64 = 0

    public init(bytesSent: Int64 = 0, bytesReceived: Int64 = 0, failedRequests: Int64 = 0) {
        self.bytesSent = bytesSent
        self.bytesReceived = bytesReceived
        self.failedRequests = failedRequests
    }
}

extension SyncTransport {
    /// 16 MiB.
    public var maxResponseBytes: Int { 16 << 20 }
    /// No readings.
    public func takeServerClockReading() -> ServerClockReading? { nil }
    /// Not counted.
    public func takeTraffic() -> TransportTraffic? { nil }
    /// Not supported: the store keeps its telemetry.
    public func sendTelemetry(_ batch: TelemetryBatch, space: String) async throws {
        throw TransportError.notSent("this transport does not send telemetry")
    }
}

/// One answer's reading of the server's clock: the server wrote `serverTimeMs` at some
/// instant between the request's start and `receivedAt`, `roundTripMs` apart.
public struct ServerClockReading: Sendable, Hashable {
    /// The server's time in ms since 1970 (`X-Server-Time`, or `Date` to the second).
    public var serverTimeMs: Int64
    /// From the request's start to the answer's arrival, by a monotonic clock.
    public var roundTripMs: Int64
    /// How far the reading itself may be off: 0 for `X-Server-Time`, 500 for `Date` (read as
    /// the middle of its second).
    public var resolutionMs: Int64
    /// When the answer arrived, by a monotonic clock.
    public var receivedAt: ContinuousClock.Instant

    public init(serverTimeMs: Int64, roundTripMs: Int64, resolutionMs: Int64, receivedAt: ContinuousClock.Instant) {
        self.serverTimeMs = serverTimeMs
        self.roundTripMs = roundTripMs
        self.resolutionMs = resolutionMs
        self.receivedAt = receivedAt
    }

    /// The half-width of the interval the offset lies in.
    public var uncertaintyMs: Int64 { (roundTripMs + 1) / 2 + resolutionMs }
}

/// Why a request failed.
public enum TransportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The request certainly never reached the server (connection refused, no route, DNS,
    /// offline, cancelled before sending).
    case notSent(String)
    /// It may have reached the server, but no complete answer was read (timeout, reset,
    /// connection lost, body cut off).
    case noAnswer(String)
    /// An answer was read but is not the protocol's: not JSON, the wrong shape, an HTML
    /// error page from a proxy (status given).
    case badAnswer(status: Int, String)
    /// The server answered with a protocol error (`{"error": ...}`).
    case refused(status: Int, ErrorEnvelope)
    /// The answer is larger than the transport reads.
    case answerTooLarge(limit: Int)

    /// Whether a push that failed this way may have been applied. Only a definite answer
    /// says no: `notSent`, or a protocol error with a 4xx status. A 5xx may come after the
    /// commit (or from a proxy), so it says nothing.
    public var pushMayHaveApplied: Bool {
        switch self {
        case .notSent: false
        case .refused(let status, _): status >= 500
        case .noAnswer, .badAnswer, .answerTooLarge: true
        }
    }

    /// The protocol error code, for `refused`.
    public var errorCode: String? {
        if case .refused(_, let envelope) = self { return envelope.code }
        return nil
    }

    /// A short snake_case code.
    public var code: String {
        switch self {
        case .notSent: "not_sent"
        case .noAnswer: "no_answer"
        case .badAnswer: "bad_answer"
        case .refused(_, let e): e.code
        case .answerTooLarge: "answer_too_large"
        }
    }

    /// A sentence for people.
    public var description: String {
        switch self {
        case .notSent(let m): "request not sent: \(m)"
        case .noAnswer(let m): "no answer: \(m)"
        case .badAnswer(let status, let m): "unreadable answer (HTTP \(status)): \(m)"
        case .refused(let status, let e): "HTTP \(status) \(e.code): \(e.message)"
        case .answerTooLarge(let limit): "answer larger than \(limit) bytes"
        }
    }
}

/// A pull page with its records decoded one by one (docs/protocol.md section 5).
public struct PulledPage: Sendable, Hashable {
    /// The page's epoch.
    public var epoch: Epoch
    /// The records, in the page's order.
    public var records: [PulledRecord]
    /// The cursor after the page.
    public var next: Version
    /// The view `next` was made under, on a server with rules (docs/rules.md); nil without.
    public var view: String?
    /// True when records after `next` exist.
    public var hasMore: Bool
    /// The answer's size in bytes (0 when unknown).
    public var byteCount: Int
    /// The space's newest seq when the page was read, if the server said (`PullPage.head`).
    public var head: Int64?
    /// The field kinds the server declares (`PullPage.fields`); nil: none.
    public var fields: FieldKinds?

    /// A page.
    public init(epoch: Epoch, records: [PulledRecord], next: Version, hasMore: Bool, byteCount: Int = 0, head: Int64? = nil, view: String? = nil,
                fields: FieldKinds? = nil) {
        self.fields = fields
        self.epoch = epoch
        self.records = records
        self.next = next
        self.view = view
        self.hasMore = hasMore
        self.byteCount = byteCount
        self.head = head
    }

    /// Decodes a pull answer. The frame (`epoch`, `changes` as an array, `next`, `hasMore`)
    /// must be right, else `TransportError.badAnswer`; each element of `changes` that is
    /// not a valid record becomes `.undecodable` instead of failing the page.
    public static func decode(_ bytes: [UInt8], status: Int = 200) throws(TransportError) -> PulledPage {
        // Records' data may nest 64 levels: page, changes, record, then data. Parsing with
        // that depth bounds every record without measuring each one; a page with a deeper
        // record is parsed again without the bound, and the deep record alone is quarantined.
        let value: JSONValue
        var bounded = true
        do {
            value = try JSONParser(maxDepth: 3 + 64).parse(bytes)
        } catch {
            guard case .tooDeep = error.reason else { throw .badAnswer(status: status, "the page is not JSON (\(error))") }
            do { value = try JSONParser(maxDepth: JSONParser.depthCeiling).parse(bytes) } catch {
                throw .badAnswer(status: status, "the page is not JSON (\(error))")
            }
            bounded = false
        }
        guard case .object(let o) = value else { throw .badAnswer(status: status, "the page is not a JSON object") }
        guard case .string(let e)? = o["epoch"], let epoch = Epoch(e) else { throw .badAnswer(status: status, "the page has no valid epoch") }
        guard case .array(let items)? = o["changes"] else { throw .badAnswer(status: status, "the page has no changes array") }
        guard case .string(let n)? = o["next"], let next = Cursor(n) else { throw .badAnswer(status: status, "the page has no valid next") }
        guard case .bool(let hasMore)? = o["hasMore"] else { throw .badAnswer(status: status, "the page has no hasMore") }
        var records: [PulledRecord] = []
        records.reserveCapacity(items.count)
        for item in items { records.append(PulledRecord(item, checkDepth: !bounded)) }
        // `head` is optional (older servers leave it out); a value that is not a
        // non-negative integer is ignored rather than failing the page.
        var head: Int64?
        if case .number(let number)? = o["head"], let value = number.int64Value, value >= 0 { head = value }
        // `fields` is read leniently too (`FieldKinds.init(json:)`).
        let fields = o["fields"].map(FieldKinds.init(json:))
        return PulledPage(epoch: epoch, records: records, next: next.version, hasMore: hasMore, byteCount: bytes.count, head: head, view: next.view,
                          fields: fields)
    }
}

/// One element of a page's `changes`.
public enum PulledRecord: Sendable, Hashable {
    /// A valid record state.
    case record(RecordState)
    /// Something the store cannot use; it goes to the quarantine.
    case undecodable(UndecodableRecord)
    /// A record whose latest write took it out of the token's view (docs/rules.md).
    case revoked(Revocation)

    /// Decodes one element: valid names, a version, data a JSON object nested at most 64
    /// levels deep (the depth records may have; `checkDepth: false` when the caller's parse
    /// already bounded it).
    public init(_ value: JSONValue, checkDepth: Bool = true) {
        do {
            if value["revoked"] == .bool(true) {
                let revocation = try Revocation(json: value)
                guard Names.isValidCollection(revocation.collection), Names.isValidRecordID(revocation.id) else {
                    throw WireError(field: "id", message: "is not a record id")
                }
                self = .revoked(revocation)
                return
            }
            let state = try RecordState(json: value)
            guard Names.isValidCollection(state.collection) else { throw WireError(field: "collection", message: "is not a collection name") }
            guard Names.isValidRecordID(state.id) else { throw WireError(field: "id", message: "is not a record id") }
            if checkDepth, let data = state.data, JSONValue.object(data).depth > 64 { throw WireError(field: "data", message: "is nested deeper than 64 levels") }
            self = .record(state)
        } catch {
            self = .undecodable(UndecodableRecord(
                raw: value.encoded(), collection: value["collection"]?.stringValue, id: value["id"]?.stringValue,
                version: value["version"]?.stringValue, reason: "\(error)"))
        }
    }
}

/// A pulled element that is not a usable record.
public struct UndecodableRecord: Sendable, Hashable {
    /// The element as it came, re-encoded compactly.
    public var raw: [UInt8]
    /// The collection, when the element names one.
    public var collection: String?
    /// The id, when the element names one.
    public var id: String?
    /// The version, when the element names one.
    public var version: String?
    /// Why it cannot be used.
    public var reason: String

    /// An undecodable element.
    public init(raw: [UInt8], collection: String?, id: String?, version: String?, reason: String) {
        self.raw = raw
        self.collection = collection
        self.id = id
        self.version = version
        self.reason = reason
    }
}

extension JSONValue {
    /// The nesting depth: 0 for a scalar, 1 for `[]` or `{}`.
    var depth: Int {
        switch self {
        case .array(let a): return 1 + (a.map(\.depth).max() ?? 0)
        case .object(let o): return 1 + (o.values.map(\.depth).max() ?? 0)
        default: return 0
        }
    }
}
