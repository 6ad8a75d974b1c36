import Foundation
import Outpost
import OutpostTesting
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import OutpostServer
import OutpostTestSupport
import Synchronization
import Testing

/// The pull rules (docs/protocol.md section 5, `PullRules`) as one table of pulls and the
/// answers they must get, beside the push rule table (`PushRuleTableTests`), run on each
/// store: SQLite and PostgreSQL behind `SyncService` (no socket: the handler the HTTP
/// route calls), and the SDK's `InMemorySyncServer`. The cursor checks, the page's
/// envelope, its limit and its byte budget, a collection filter and compaction's horizon.
@Suite(.serverLogs) struct PullRuleTableTests {
    /// One server as the table sees it.
    struct Subject: Sendable {
        let epoch: Epoch
        let push: @Sendable ([Change], Int64) async throws -> Void
        let pull: @Sendable (PullQuery) async throws -> Answer
        let compact: @Sendable (_ tombstonesBefore: Int64) async throws -> Void
        let close: @Sendable () async -> Void
    }

    /// What a pull must be answered: a page (the ids of its records in order, the seq of
    /// `next`, `hasMore`, `head`), or a refusal (status and code).
    enum Answer: Equatable {
        case page([String], next: Int64, hasMore: Bool, head: Int64?)
        case refused(Int, String)

        init(_ page: PulledPage) {
            let ids = page.records.map { record -> String in
                switch record {
                case .record(let state): state.id
                case .revoked(let revocation): "revoked " + revocation.id
                case .undecodable(let bad): "undecodable \(bad.reason)"
                }
            }
            self = .page(ids, next: page.next.seq, hasMore: page.hasMore, head: page.head)
        }
    }

    /// Records of 9,000 bytes of data, and limits under which a page holds two of them and
    /// a tombstone but not three: the byte budget is `maxRecordBytes + 16384` whatever is asked.
    static let big = String(repeating: "x", count: 9_000)
    static let limits = Limits(maxRequestBytes: 1 << 20, maxChangesPerPush: 100, maxRecordBytes: 10_000, pageBytes: 26_384,
                               maxPageLimit: 1000, chunkSize: 1 << 16, maxMediaBytes: 1 << 20)

    static func put(_ changeId: String, _ collection: String, _ id: String, _ value: String, base: Int64?, epoch: Epoch) -> Change {
        Change(changeId: changeId, collection: collection, id: id, op: .put, data: ["v": .string(value)],
               baseVersion: base.map { Version(epoch: epoch, seq: $0) }, clientTime: 5)
    }

    /// The writes, at times 1000, 1001, …: r1 (c) written twice, r2 (d), r3 (c) deleted, r4 (c).
    /// Live after them: r2 at 2, r1 at 4, r3's tombstone at 5, r4 at 6.
    static func writes(_ e: Epoch) -> [[Change]] {
        [
            [put("w1", "c", "r1", "small", base: nil, epoch: e)],
            [put("w2", "d", "r2", big, base: nil, epoch: e)],
            [put("w3", "c", "r3", "small", base: nil, epoch: e)],
            [put("w4", "c", "r1", big, base: 1, epoch: e)],
            [Change(changeId: "w5", collection: "c", id: "r3", op: .delete, data: nil, baseVersion: Version(epoch: e, seq: 3), clientTime: 5)],
            [put("w6", "c", "r4", big, base: nil, epoch: e)],
        ]
    }

    /// The pulls before compaction, and after it (compaction purges r3's tombstone and moves
    /// the horizon to 5).
    static func table(_ e: Epoch) -> (before: [(PullQuery, Answer)], after: [(PullQuery, Answer)]) {
        var rng = SplitMix64(seed: 2)
        let other = Epoch.generate(nowMs: 1, after: nil, using: &rng)
        func at(_ seq: Int64) -> Version { Version(epoch: e, seq: seq) }
        let before: [(PullQuery, Answer)] = [
            // From the start: the byte budget ends the page before the third large record.
            (PullQuery(), .page(["r2", "r1", "r3"], next: 5, hasMore: true, head: 6)),
            (PullQuery(since: at(5)), .page(["r4"], next: 6, hasMore: false, head: 6)),
            // The limit ends a page too; each state once, at its newest seq.
            (PullQuery(since: at(0), limit: 2), .page(["r2", "r1"], next: 4, hasMore: true, head: 6)),
            (PullQuery(since: at(4), limit: 1), .page(["r3"], next: 5, hasMore: true, head: 6)),
            // At the head: nothing, and the cursor stays.
            (PullQuery(since: at(6)), .page([], next: 6, hasMore: false, head: 6)),
            // A collection filter: only its records; an empty page keeps the cursor.
            (PullQuery(collections: ["d"]), .page(["r2"], next: 2, hasMore: false, head: 6)),
            (PullQuery(since: at(2), collections: ["d"]), .page([], next: 2, hasMore: false, head: 6)),
            // The cursor checks.
            (PullQuery(since: Version(epoch: other, seq: 3)), .refused(409, "epoch_changed")),
            (PullQuery(since: at(7)), .refused(409, "cursor_ahead")),
            (PullQuery(since: at(2), sinceView: "v1"), .refused(409, "view_changed")),
            (PullQuery(since: at(0), sinceView: "v1"), .page(["r2", "r1", "r3"], next: 5, hasMore: true, head: 6)),
        ]
        let after: [(PullQuery, Answer)] = [
            (PullQuery(since: at(3)), .refused(409, "history_compacted")),
            // Before the horizon (4 < 5) a purged delete may be missed; at it, nothing was.
            (PullQuery(since: at(4)), .refused(409, "history_compacted")),
            (PullQuery(since: at(5)), .page(["r4"], next: 6, hasMore: false, head: 6)),
            // From the start the history is whole.
            (PullQuery(), .page(["r2", "r1"], next: 4, hasMore: true, head: 6)),
            (PullQuery(since: at(0), limit: 5), .page(["r2", "r1"], next: 4, hasMore: true, head: 6)),
            // The cursor checks come before the horizon's.
            (PullQuery(since: at(7)), .refused(409, "cursor_ahead")),
        ]
        return (before, after)
    }

    static func check(_ subject: Subject) async throws {
        for (step, changes) in writes(subject.epoch).enumerated() { try await subject.push(changes, 1000 + Int64(step)) }
        let (before, after) = table(subject.epoch)
        for (query, expected) in before {
            let got = try await subject.pull(query)
            #expect(got == expected, "pull \(query.queryItems): got \(got), expected \(expected)")
        }
        try await subject.compact(1_000_000)
        for (query, expected) in after {
            let got = try await subject.pull(query)
            #expect(got == expected, "after compaction, pull \(query.queryItems): got \(got), expected \(expected)")
        }
        await subject.close()
    }

    /// A server store behind `SyncService`, pulled through its handler.
    static func serverStore(_ store: any SyncStore) -> Subject {
        let service = SyncService(store: store, limits: limits, authorizer: Authorizer(authority: JWTAuthority(secret: Array("table".utf8))),
                                  metrics: Metrics())
        let pushes = PushRuleTableTests.serverStore(store)
        return Subject(epoch: store.epoch, push: { changes, now in
            for result in try await pushes.push(changes, now) where result.status != .applied {
                Issue.record("a write of the table was answered \(result)")
            }
        }, pull: { query in
            let target = "/v1/spaces/table/pull" + (query.queryItems.isEmpty ? "" : "?" + query.queryItems.map { "\($0.0)=\($0.1)" }.joined(separator: "&"))
            do {
                let response = try await service.pull(HTTPRequest(head: HTTPRequestHead(method: .GET, target: target), pathParameters: ["space": "table"]))
                guard case .bytes(let body) = response.body else { return .refused(response.status.code, "no body") }
                return Answer(try PulledPage.decode(body))
            } catch let error as HTTPError {
                return .refused(error.status.code, error.code)
            }
        }, compact: { cutoff in _ = try await store.compact(tombstonesBefore: cutoff) }, close: { await store.close() })
    }

    @Test func sqlite() async throws {
        let directory = try TemporaryDirectory(prefix: "pull-table")
        defer { directory.remove() }
        try await Self.check(Self.serverStore(try SQLiteSyncStore(configuration: .init(path: directory.appending("s.sqlite")))))
    }

    @Test func postgres() async throws {
        let url = try await PostgresCluster.database(prefix: "pulltable")
        try await Self.check(Self.serverStore(try PostgresSyncStore(configuration: .init(url: url))))
    }

    @Test func inMemory() async throws {
        let now = Mutex<Int64>(1_800_000_000_000)
        let server = InMemorySyncServer(limits: Self.limits, clock: { now.withLock { $0 } })
        try await Self.check(Subject(epoch: server.epoch, push: { changes, at in
            now.withLock { $0 = at }
            for result in try await server.push(PushRequest(clientId: "tester", changes: changes), space: "table").results where result.status != .applied {
                Issue.record("a write of the table was answered \(result)")
            }
        }, pull: { query in
            do {
                return Answer(try await server.pull(query, space: "table"))
            } catch TransportError.refused(let status, let envelope) {
                return .refused(status, envelope.code)
            }
        }, compact: { cutoff in server.compact(tombstonesBefore: cutoff) }, close: {}))
    }
}
