import Foundation
import OutpostCore
import OutpostSyncRules
import OutpostServer
import Synchronization

/// A real store with one of the store's bugs (`ServerMutation.isInStore`): it rewrites
/// what goes into the store and what comes out, so that the answers are those of a store
/// with the bug. Works on any `SyncStore` (SQLite, PostgreSQL).
public final class MutantSyncStore: SyncStore {
    public let base: any SyncStore
    public let mutation: ServerMutation
    /// For `reuseSeqAfterRestart`: the head of each space when this store (this start of
    /// the server) first saw it.
    private let headsAtOpen = Mutex<[String: Int64]>([:])

    public init(base: any SyncStore, mutation: ServerMutation) {
        self.base = base
        self.mutation = mutation
    }

    public var epoch: Epoch { base.epoch }
    public var notifier: CommitNotifier { base.notifier }
    public var queuedWrites: Int { base.queuedWrites }

    public func push(space: String, clientId: String, subject: String, items: [PushItem], now: Int64, judge: (any PushJudge)?) async throws -> [PushResult] {
        switch mutation {
        case .forgetIdempotency:
            // Every change gets an id never seen, so nothing is looked up or remembered.
            let renamed = items.map { item -> PushItem in
                guard case .change(var c) = item else { return item }
                c.change.changeId += "~" + UUID().uuidString
                return .change(c)
            }
            return try await base.push(space: space, clientId: clientId, subject: subject, items: renamed, now: now, judge: judge).map { result in
                var result = result
                if let cut = result.changeId.range(of: "~", options: .backwards) { result.changeId = String(result.changeId[..<cut.lowerBound]) }
                return result
            }
        case .applyOutOfOrder:
            return try await base.push(space: space, clientId: clientId, subject: subject, items: items.reversed(), now: now, judge: judge).reversed()
        case .staleCurrentOnConflict:
            return try await base.push(space: space, clientId: clientId, subject: subject, items: items, now: now, judge: judge).map { result in
                var result = result
                if result.status == .conflict, let current = result.current, current.version.seq > 1 {
                    result.current!.version = Version(epoch: current.version.epoch, seq: current.version.seq - 1)
                }
                return result
            }
        case .ignoreBaseVersion:
            return try await base.push(space: space, clientId: clientId, subject: subject, items: items.map { item in
                guard case .change(var c) = item else { return item }
                c.change.force = true
                return .change(c)
            }, now: now, judge: judge)
        case .reofferAsEdit:
            return try await base.push(space: space, clientId: clientId, subject: subject, items: items.map { item in
                guard case .change(var c) = item else { return item }
                c.change.lineage = nil
                return .change(c)
            }, now: now, judge: judge)
        case .reofferJudgedByLineage:
            // A re-offer at its base over a state whose lineage admits it goes in whatever
            // that state's sameAs says (forced, which keeps its lineage as the rules do).
            let records = try await allRecords(space)
            return try await base.push(space: space, clientId: clientId, subject: subject, items: items.map { item in
                guard case .change(var c) = item, let lineage = c.change.lineage, let base = c.change.baseVersion,
                      let current = records.first(where: { $0.collection == c.change.collection && $0.id == c.change.id }),
                      current.version.seq == base.seq, lineage.admits(current: current.lineage) else { return item }
                c.change.force = true
                return .change(c)
            }, now: now, judge: judge)
        case .reuseSeqAfterRestart:
            // A store that lost its seqs since the start hands out the newest one again.
            let known = headsAtOpen.withLock { $0[space] }
            let atOpen: Int64
            if let known { atOpen = known } else {
                atOpen = try await base.head(space: space)
                headsAtOpen.withLock { $0[space] = atOpen }
            }
            return try await base.push(space: space, clientId: clientId, subject: subject, items: items, now: now, judge: judge).map { result in
                var result = result
                if atOpen > 0, result.status == .applied, !result.replayed, let v = result.version {
                    result.version = Version(epoch: v.epoch, seq: v.seq - 1)
                }
                return result
            }
        default:
            return try await base.push(space: space, clientId: clientId, subject: subject, items: items, now: now, judge: judge)
        }
    }

    /// Pulls under rules read through the base store unchanged: the mutations are of the
    /// rules-free protocol.
    public func scan(_ request: PageRequest) async throws -> RecordScan {
        try await base.scan(request)
    }

    public func departures(space: String, _ queries: [DepartureQuery]) async throws -> [PushRules.Key: [UInt8]] {
        try await base.departures(space: space, queries)
    }

    public func viewScan(_ request: ViewScanRequest) async throws -> RecordScan {
        try await base.viewScan(request)
    }

    public func viewPage(_ request: ViewScanRequest, maxBytes: Int) async throws -> PageData? {
        try await base.viewPage(request, maxBytes: maxBytes)
    }

    public func viewIndexSpec() async throws -> String? {
        try await base.viewIndexSpec()
    }

    public func buildViewIndex(spec: String, keys: @escaping @Sendable (String, [UInt8]) -> [PushRules.IndexKey]) async throws -> Int {
        try await base.buildViewIndex(spec: spec, keys: keys)
    }

    public func forgetViewIndex() async throws {
        try await base.forgetViewIndex()
    }

    public func page(_ request: PageRequest) async throws -> PageData {
        switch mutation {
        case .pageOverBudget:
            var request = request
            request.maxBytes = Int.max
            return try await base.page(request)
        case .dropTombstones:
            var page = try await base.page(request)
            let kept = try Self.records(page.changesJSON).filter { $0.objectValue?["deleted"] != .bool(true) }
            page.changesJSON = JSONValue.array(kept).encoded()
            page.count = kept.count
            return page
        case .leakOtherSpaces:
            var page = try await base.page(request)
            var all = try Self.records(page.changesJSON)
            for other in try await base.spaces(after: "", limit: 1000) where other.name != request.space {
                var theirs = request
                theirs.space = other.name
                all += try Self.records(try await base.page(theirs).changesJSON)
            }
            page.changesJSON = JSONValue.array(all).encoded()
            page.count = all.count
            return page
        default:
            return try await base.page(request)
        }
    }

    public func head(space: String) async throws -> Int64 { try await base.head(space: space) }

    public func waitForCommit(space: String, afterSeq: Int64, deadline: ContinuousClock.Instant) async -> Bool {
        await base.waitForCommit(space: space, afterSeq: afterSeq, deadline: deadline)
    }

    public func sweepChangeIDs(appliedBefore cutoff: Int64) async throws -> Int { try await base.sweepChangeIDs(appliedBefore: cutoff) }
    public func compact(tombstonesBefore cutoff: Int64) async throws -> Compaction { try await base.compact(tombstonesBefore: cutoff) }
    public func horizon(space: String) async throws -> Int64 { try await base.horizon(space: space) }
    public func isWritable() async -> Bool { await base.isWritable() }
    public func spaces(after: String, limit: Int) async throws -> [SpaceSummary] { try await base.spaces(after: after, limit: limit) }
    public func close() async { await base.close() }

    /// Every record of `space`, read page by page.
    private func allRecords(_ space: String) async throws -> [RecordState] {
        var out: [RecordState] = []
        var after: Int64 = 0
        while true {
            let page = try await base.page(PageRequest(space: space, afterSeq: after, limit: 1000, maxBytes: 16 << 20, collections: nil))
            out += try Self.records(page.changesJSON).map { try RecordState(json: $0) }
            guard page.hasMore, let last = page.lastSeq else { return out }
            after = last
        }
    }

    private static func records(_ json: [UInt8]) throws -> [JSONValue] {
        guard case .array(let items) = try JSONParser.parse(json) else { throw StoreError("a page's changes are not an array") }
        return items
    }
}
