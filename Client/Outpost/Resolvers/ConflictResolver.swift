import OutpostCore

/// Two versions of one record that a push found in conflict (docs/protocol.md section 4), and
/// the state the local edit was made on.
///
/// A conflict whose server version already holds what the local change wants settles
/// without a resolver. A copy offered again to a new history meets the resolver when the
/// history's copy does not descend from it (see `docs/client.md`). `server` is never older
/// than the version the store holds.
public struct Conflict: Sendable, Hashable {
    /// The record's collection.
    public let collection: String
    /// The record's id.
    public let id: String
    /// The local edit: the newest one queued for the record.
    public let local: LocalEdit
    /// The newest server version known.
    public let server: RecordState
    /// The changeId that wrote `server`, when this device wrote it (else nil: the server
    /// does not send changeIds with records).
    public let serverChangeId: String?
    /// What the app showed when it made the local edit: the common ancestor of `local`
    /// and `server`, for a three-way merge. Nil when the edit created the record, or when
    /// the local side is a copy offered again to a new history.
    public let base: ConflictBase?
    /// The field kinds the server declares for the collection (docs/rules.md, "Field
    /// kinds"), by dotted path, as the store last pulled them: `.mergeFields` merges a
    /// `counter` as server + local − base, a `set` as a set and a `list` element by element.
    /// Empty: every field is `lww`.
    public let fields: [String: FieldKind]

    /// A conflict (for custom resolvers' tests).
    public init(collection: String, id: String, local: LocalEdit, server: RecordState, serverChangeId: String? = nil, base: ConflictBase? = nil,
                fields: [String: FieldKind] = [:]) {
        self.fields = fields
        self.collection = collection
        self.id = id
        self.local = local
        self.server = server
        self.serverChangeId = serverChangeId
        self.base = base
    }
}

/// The state a local edit was made on.
public struct ConflictBase: Sendable, Hashable {
    /// Its data; nil for a tombstone.
    public let data: JSONObject?
    /// True for a tombstone.
    public let deleted: Bool
    /// Its server version; nil when it was this device's own edit, not yet on the server.
    public let version: Version?

    public init(data: JSONObject?, deleted: Bool, version: Version?) {
        self.data = data
        self.deleted = deleted
        self.version = version
    }
}

/// The local side of a conflict.
public struct LocalEdit: Sendable, Hashable {
    /// The edit's data; nil for a delete.
    public let data: JSONObject?
    /// True for a delete.
    public let deleted: Bool
    /// The device's time of the edit (ms since 1970).
    public let clientTime: Int64
    /// The change's id.
    public let changeId: String
    /// This installation's client id.
    public let clientId: String

    /// A local edit (for custom resolvers' tests).
    public init(data: JSONObject?, deleted: Bool, clientTime: Int64, changeId: String, clientId: String) {
        self.data = data
        self.deleted = deleted
        self.clientTime = clientTime
        self.changeId = changeId
        self.clientId = clientId
    }
}

/// What a resolver decides.
public enum Resolution: Sendable, Hashable {
    /// The server's version stands; the local edit is dropped.
    case keepServer
    /// The local edit is written again on top of the server's version.
    case keepLocal
    /// This data (a merge) is written on top of the server's version.
    case write(JSONObject)
    /// A delete is written on top of the server's version.
    case delete
    /// Neither now: the record keeps the local edit, shown and marked in conflict, the
    /// server's version kept beside it, and waits for a person to settle it
    /// (`OutpostStore.unsettledConflicts()`, `settleConflict(in:id:_:)`). Nothing of the
    /// record is sent meanwhile; every other record syncs on. Not a resolution a person
    /// settles with (`settleConflict` ignores it).
    case leaveForPerson
}

/// Decides conflicts. A resolved write is a new change with a new changeId whose base is
/// the server's version; it counts as a failed attempt of the record, so a server that
/// answers every push with a conflict meets growing backoff instead of a busy loop.
///
/// ```swift
/// var configuration = OutpostStore.Configuration(space: "team")
/// configuration.resolver = .mergeFields(fallback: .lastWriteWins())   // the default
/// configuration.resolver = .lastWriteWins(maxClockDrift: .seconds(300))
/// configuration.resolver = .custom { conflict in
///     var merged = conflict.server.data ?? [:]
///     for (key, value) in conflict.local.data ?? [:] { merged[key] = value }
///     return .write(merged)
/// }
/// ```
public struct ConflictResolver: Sendable {
    indirect enum Kind: Sendable {
        case mergeFields(fallback: ConflictResolver)
        case serverWins
        case clientWins
        case lastWriteWins(driftMs: Int64)
        case custom(name: String, @Sendable (Conflict) -> Resolution)
        case leaveForPerson
    }

    let kind: Kind

    /// The server's version always stands.
    public static let serverWins = ConflictResolver(kind: .serverWins)
    /// The local edit always wins.
    public static let clientWins = ConflictResolver(kind: .clientWins)
    /// Every conflict is left for a person (`Resolution.leaveForPerson`): the app lists them
    /// and settles each. A custom resolver can leave some and decide others.
    public static let leaveForPerson = ConflictResolver(kind: .leaveForPerson)

    /// The later edit wins, by the devices' clocks, with three guards:
    ///
    /// - A time ahead of the reference clock by more than `maxClockDrift` counts only up to
    ///   it: the local edit's `clientTime` is capped at the device's now + drift; the server
    ///   version's `clientTime` (its `updatedAt` when it has none) at min(its `updatedAt`,
    ///   now) + drift, because the server's commit time bounds when the edit was really
    ///   made. A device clock a year ahead therefore wins nothing it should not.
    /// - Ties go to the greater `updatedBy` (the local side's is this client id), compared
    ///   byte by byte, then to the greater changeId, so every device picks the same winner.
    /// - A delete is an edit like any other: it wins or loses by the same rule.
    public static func lastWriteWins(maxClockDrift: Duration = .seconds(300)) -> ConflictResolver {
        ConflictResolver(kind: .lastWriteWins(driftMs: max(0, maxClockDrift.milliseconds)))
    }

    /// A three-way merge, field by field, against the state the local edit was made on
    /// (`Conflict.base`); the default resolver, because it loses the least:
    ///
    /// - a field changed only locally keeps the local value, one changed only on the server
    ///   keeps the server's, and one changed on both sides to different values goes to
    ///   `fallback`, which decides once for all such fields of the record;
    /// - a field the server declares a `counter` (`Conflict.fields`) merges as server +
    ///   local − base when both sides hold numbers, and a `set` as the additions and
    ///   removals of both sides when both hold arrays (`FieldKinds.mergeCounter`,
    ///   `mergeSet`), whether one side changed it or both; the fallback is not asked for them;
    /// - a field declared a keyed `list` merges element by element when both sides hold
    ///   such lists (`FieldKinds.mergeList`): additions of both sides kept, a removal taking
    ///   only an element the other side left alone, an element both changed merged member
    ///   by member, a member both changed decided by the same fallback answer as a field;
    /// - nested objects merge the same way, recursively; other arrays are values;
    /// - a delete against an edit, or a conflict without a base (a create, or a copy
    ///   offered again to a new history), is decided by `fallback` as a whole.
    ///
    /// The default fallback is last-write-wins with its drift cap and tie-break.
    public static func mergeFields(fallback: ConflictResolver = .lastWriteWins()) -> ConflictResolver {
        ConflictResolver(kind: .mergeFields(fallback: fallback))
    }

    /// The app decides. Called on the store's actor: keep it fast and free of I/O. `name`
    /// is how the conflict journal names it (`ConflictEntry.resolver`).
    public static func custom(name: String = "custom", _ resolve: @escaping @Sendable (Conflict) -> Resolution) -> ConflictResolver {
        ConflictResolver(kind: .custom(name: name, resolve))
    }

    /// The resolver as the conflict journal names it: `serverWins`, `clientWins`,
    /// `lastWriteWins`, a custom resolver's name (`custom` unless it was given one), or
    /// `mergeFields(<fallback>)`.
    public var name: String {
        switch kind {
        case .mergeFields(let fallback): "mergeFields(\(fallback.name))"
        case .serverWins: "serverWins"
        case .clientWins: "clientWins"
        case .lastWriteWins: "lastWriteWins"
        case .custom(let name, _): name
        case .leaveForPerson: "leaveForPerson"
        }
    }

    /// The decision for `conflict` when the device's clock reads `now` (ms since 1970).
    public func resolve(_ conflict: Conflict, now: Int64) -> Resolution {
        switch kind {
        case .mergeFields(let fallback): return Self.mergeFields(conflict, fallback: fallback, now: now)
        case .serverWins: return .keepServer
        case .clientWins: return .keepLocal
        case .custom(_, let body): return body(conflict)
        case .leaveForPerson: return .leaveForPerson
        case .lastWriteWins(let drift): return Self.lastWriteWins(conflict, now: now, driftMs: drift)
        }
    }

    /// The effective times last-write-wins compares: (local, server).
    static func effectiveTimes(_ conflict: Conflict, now: Int64, driftMs: Int64) -> (local: Int64, server: Int64) {
        let local = min(conflict.local.clientTime, now &+ driftMs)
        let server = conflict.server
        let reference = min(server.updatedAt, now)
        let serverTime = min(server.clientTime ?? server.updatedAt, reference &+ driftMs)
        return (local, serverTime)
    }

    static func lastWriteWins(_ conflict: Conflict, now: Int64, driftMs: Int64) -> Resolution {
        let (local, server) = effectiveTimes(conflict, now: now, driftMs: driftMs)
        if local != server { return local > server ? .keepLocal : .keepServer }
        let mine = conflict.local.clientId, theirs = conflict.server.updatedBy
        if mine != theirs { return bytewiseLess(theirs, mine) ? .keepLocal : .keepServer }
        if let serverChange = conflict.serverChangeId, serverChange != conflict.local.changeId {
            return bytewiseLess(serverChange, conflict.local.changeId) ? .keepLocal : .keepServer
        }
        // The same device wrote both and the server's changeId is unknown: the queued
        // edit was made after what this device pushed before, so it is the later one.
        return .keepLocal
    }

    static func mergeFields(_ conflict: Conflict, fallback: ConflictResolver, now: Int64) -> Resolution {
        guard let base = conflict.base, !base.deleted, let baseData = base.data, !conflict.local.deleted, let localData = conflict.local.data,
              !conflict.server.deleted, let serverData = conflict.server.data else {
            return fallback.resolve(conflict, now: now)
        }
        // The fallback is asked once, and only when some field changed on both sides.
        var decision: Resolution?
        func localWinsBoth() -> Bool {
            if decision == nil { decision = fallback.resolve(conflict, now: now) }
            switch decision! {
            case .keepLocal: return true
            case .keepServer, .write, .delete, .leaveForPerson: return false
            }
        }
        // One implementation for the record and for a keyed list's elements (OutpostCore).
        let merged = FieldKinds.mergeObject(base: baseData, local: localData, server: serverData, kinds: conflict.fields, localWins: localWinsBoth)
        if let decision, case .write = decision { return decision }
        if let decision, case .delete = decision { return decision }
        // A field changed on both sides that the fallback leaves for a person leaves the
        // record for a person: the fields that merge alone wait with it.
        if let decision, case .leaveForPerson = decision { return decision }
        if merged == serverData { return .keepServer }
        if merged == localData { return .keepLocal }
        return .write(merged)
    }
}

extension ConflictResolver {
    /// The resolver a resolved write names (`ResolutionMark.resolver`): `name`, cut to the
    /// length the wire carries (`custom` when it is empty), so no name of the app's choosing
    /// makes the server refuse the write.
    var markName: String {
        name.isEmpty ? "custom" : String(name.prefix(ResolutionMark.maxResolverLength))
    }

    /// The name of a person's decision on a conflict left for them (`OutpostStore.settleConflict`).
    static let personName = "person"
}
