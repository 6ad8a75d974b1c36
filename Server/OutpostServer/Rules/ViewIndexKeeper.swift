import Foundation
import OutpostCore
import Synchronization

/// Keeps the store's view index built for the rules in force (docs/rules.md, "Cost").
///
/// The index's spec (`ViewIndex.spec`) says what it holds. When the rules in force want
/// another spec than the store's index was built for (a first start with rules, a reload
/// that changes what the read rules compare), the keeper rebuilds it in the background;
/// until the build records the spec, pages under rules read the space in seq order and
/// filter it (`ViewPager` without `indexed`), which gives the same entries at a higher
/// cost. Writes keep the index from the moment their judge has the new rules, so the
/// build and the writes during it leave it whole.
///
/// A server without rules keeps no index: it marks the store's index as not built, so a
/// later start with rules rebuilds it.
public final class ViewIndexKeeper: Sendable {
    private struct State {
        /// The spec of the index as the store holds it whole, when known.
        var built: String?
        /// The index the rules in force want.
        var wanted: ViewIndex?
        var building = false
    }

    private let store: any SyncStore
    private let metrics: Metrics
    private let state = Mutex(State())

    public init(store: any SyncStore, metrics: Metrics) {
        self.store = store
        self.metrics = metrics
        metrics.declare("outpost_view_index_builds_total", help: "Builds of the view index for the rules in force, by result (built, failed).", kind: "counter")
        metrics.declare("outpost_view_index_records", help: "Records indexed by the last build of the view index.", kind: "gauge")
        metrics.gauge("outpost_view_index_ready", help: "1 when pages under rules read the view index, 0 while it is built or without rules.") { [weak self] in
            self?.state.withLock { $0.wanted != nil && $0.built == $0.wanted?.spec ? 1 : 0 } ?? 0
        }
    }

    /// Whether pages under rules with `index` may read the store's index.
    func isReady(_ index: ViewIndex) -> Bool {
        state.withLock { $0.built == index.spec }
    }

    /// Makes the index follow `rules` (nil: no rules), building it in the background when
    /// the store's is not built for them.
    public func follow(_ rules: ServerRules?) {
        guard let index = rules?.index else {
            state.withLock { $0.wanted = nil; $0.built = nil }
            let store = self.store
            Task {
                do { if try await store.viewIndexSpec() != nil { try await store.forgetViewIndex() } } catch { Log.error("the view index could not be marked as not kept", ["error": "\(error)"]) }
            }
            return
        }
        let start = state.withLock { s -> Bool in
            s.wanted = index
            guard !s.building else { return false }
            s.building = true
            return true
        }
        if start { Task { await self.build() } }
    }

    /// Builds what `wanted` names until the index is built for the latest of them.
    private func build() async {
        while true {
            guard let want = state.withLock({ $0.wanted }) else {
                state.withLock { $0.building = false }
                return
            }
            do {
                if try await store.viewIndexSpec() != want.spec {
                    Log.info("building the view index for the rules in force", ["spec": want.spec])
                    let records = try await store.buildViewIndex(spec: want.spec) { want.keys(collection: $0, stored: $1) }
                    metrics.increment("outpost_view_index_builds_total", .init([("result", "built")]))
                    metrics.set("outpost_view_index_records", to: Double(records))
                    Log.info("view index built", ["spec": want.spec, "records": String(records)])
                }
            } catch {
                metrics.increment("outpost_view_index_builds_total", .init([("result", "failed")]))
                Log.error("the view index could not be built; pages under rules read the space whole until a reload or restart builds it",
                          ["error": "\(error)"])
                state.withLock { $0.building = false }
                return
            }
            let done = state.withLock { s -> Bool in
                s.built = want.spec
                guard s.wanted?.spec != want.spec else { s.building = false; return true }
                return false
            }
            if done { return }
        }
    }
}
