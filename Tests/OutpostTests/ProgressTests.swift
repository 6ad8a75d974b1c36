import Foundation
import Observation
import Synchronization
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import Outpost

/// A long first sync reports how far it has come (pages carry the space's head seq), and
/// the `@Observable` status model follows a store's syncs.
@Suite("Sync progress and the status model", .serverLogs)
struct ProgressTests {
    /// Every activity of `store` until a sync ends, collected while `body` runs.
    static func activity(of store: OutpostStore, during body: () async throws -> Void) async throws -> [SyncActivity] {
        let stream = await store.syncActivity()
        let collector = Task { () -> [SyncActivity] in
            var seen: [SyncActivity] = []
            for await step in stream {
                seen.append(step)
                if case .finished = step { break }
                if case .failed = step { break }
            }
            return seen
        }
        try await body()
        return await collector.value
    }

    @Test func aFirstSyncReportsPulledOfAboutTheTotalOnEveryPage() async throws {
        let world = World()
        let writer = try world.device("writer")
        for i in 0..<2_500 { try await writer.put(["n": .number(JSONNumber(i))], in: "items", id: "i\(i)") }
        try await writer.sync()
        let fresh = try world.device("fresh") { $0.pageLimit = 500 }
        let steps = try await Self.activity(of: fresh) { try await fresh.sync() }
        #expect(steps.first == .started)
        let progress = steps.compactMap { step -> SyncProgress? in if case .pulled(let p) = step { p } else { nil } }
        #expect(progress.map(\.pulled) == [500, 1000, 1500, 2000, 2500], "\(progress)")
        #expect(progress.allSatisfy { $0.approximateTotal == 2_500 }, "\(progress)")
        #expect(progress.last?.fraction == 1)
        guard case .finished(let report)? = steps.last else { Issue.record("the sync did not finish: \(steps)"); return }
        #expect(report.pulled == 2_500)
    }

    #if canImport(OutpostTestSupport)
    /// Over a real socket and a real server: `outpost sync --progress` prints a line per page.
    @Test func theCommandLinePrintsProgressPerPage() async throws {
        let world = try RealWorld()
        let writer = try world.device("writer", direct: true)
        for i in 0..<1_200 { try await writer.put(["n": .number(JSONNumber(i))], in: "items", id: "i\(i)") }
        try await writer.sync()
        await writer.close()
        let arguments = ["--store", world.dir.appending("cli.sqlite"), "--space", "team", "--server", world.server.baseURL.absoluteString,
                         "--token", world.token, "sync", "--progress"]
        let run = try await blocking {
            try Subprocess.run(BuildProducts.executable("outpost-cli"), arguments, environment: Subprocess.environment { $0.hasPrefix("OUTPOST_") })
        }
        #expect(run.status == 0, "\(run.error)")
        let lines = run.error.split(separator: "\n").filter { $0.hasPrefix("pulled ") }
        #expect(lines.count >= 2 && lines.last == "pulled 1200 of about 1200 records", "\(run.error)")
    }
    #endif

    /// Waits until `condition` holds for `model`, woken by Observation (never a sleep); fails
    /// with `what` after `timeout` seconds.
    @MainActor
    static func wait(for model: SyncStatusModel, _ what: String, timeout: Double = Double(testDeadlineSeconds), _ condition: @escaping @MainActor (SyncStatusModel) -> Bool) async {
        let deadline = ContinuousClock.now + .seconds(timeout)
        while !condition(model) {
            var timer: Task<Void, Never>?
            let changed = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let once = OnceFlag()
                withObservationTracking {
                    _ = (model.pending, model.lastSyncAt, model.lastError, model.phase, model.progress, model.rejected)
                } onChange: {
                    if once.set() { continuation.resume(returning: true) }
                }
                // The deadline: a timer resumes the wait if nothing changes before it.
                timer = Task {
                    try? await Task.sleep(until: deadline)
                    if once.set() { continuation.resume(returning: false) }
                }
            }
            timer?.cancel()
            if !changed && !condition(model) {
                Issue.record("the status model never showed \(what) (pending \(model.pending), phase \(model.phase), lastError \(model.lastError ?? "nil"))")
                return
            }
        }
    }

    @MainActor
    @Test func theStatusModelFollowsEditsSyncsAndFailures() async throws {
        let world = World()
        let store = try world.device("phone")
        let model = SyncStatusModel(store: store)
        await model.start()
        defer { model.stop() }
        #expect(model.pending == 0 && model.lastSyncAt == nil && model.phase == .idle)
        for i in 0..<3 { try await store.put(todo("t\(i)"), in: "todos", id: "t\(i)") }
        await Self.wait(for: model, "3 pending edits") { $0.pending == 3 }

        world.server.inject(.refuseConnection, on: .push)
        await #expect(throws: OutpostError.self) { try await store.sync() }
        await Self.wait(for: model, "the failure") { $0.lastError != nil && $0.phase == .idle }
        #expect(model.pending == 3)

        try await store.sync()
        await Self.wait(for: model, "the sync's end") { $0.pending == 0 && $0.lastSyncAt != nil && $0.lastError == nil && $0.phase == .idle && $0.progress == nil }
        #expect(model.epoch == world.server.epoch)
    }
}

/// True for the first caller of `set()` only.
final class OnceFlag: Sendable {
    private let flag = Mutex(false)
    func set() -> Bool { flag.withLock { was in defer { was = true }; return !was } }
}
