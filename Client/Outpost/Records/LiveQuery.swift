import Foundation
import Observation
import OutpostCore

/// A query's results as they change (`OutpostQuery.live()`): the results now, then after
/// every committed write to the collection that changes them, each with what changed since
/// the one before, so a list can animate.
///
/// ```swift
/// for try await update in inspections.filter { $0.status == "open" }.sorted(by: .ascending("dueDate")).live() {
///     show(update.results, animating: update.changes)
/// }
/// ```
///
/// How it runs: it reads on the store's read connections, beside the writer, so it never
/// waits for a page being applied, and sees each transaction whole (a pulled page, a
/// save). It reads again only when a transaction that touched its collection commits, and
/// at most once for all those that committed while it read (a first sync runs it once per
/// page applied, not once per record). An update whose rows are the same is not yielded. A
/// record that does not decode is left out and listed in `results.skipped`, never the end
/// of the sequence. While the store is suspended it waits; it ends when the store closes
/// or its task is cancelled, and throws only when the store cannot read (`storage`).
public struct LiveQuery<Value: Decodable & Sendable>: AsyncSequence, Sendable {
    public typealias Element = LiveResults<Value>
    public typealias Failure = any Error

    let query: OutpostQuery<Value>

    public func makeAsyncIterator() -> Iterator { Iterator(query: query) }

    public struct Iterator: AsyncIteratorProtocol {
        let query: OutpostQuery<Value>
        var events: AsyncStream<StoreEvent>.Iterator?
        var previous: [QueryRowData]?

        init(query: OutpostQuery<Value>) { self.query = query }

        public mutating func next() async throws -> LiveResults<Value>? {
            try await next(isolation: nil)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> LiveResults<Value>? {
            let store = query.collection.store
            if events == nil {
                // Subscribed before the first read, so no write between them goes unseen.
                events = await store.changeSignals(collection: query.spec.collection).makeAsyncIterator()
            }
            var first = previous == nil
            while !Task.isCancelled {
                if !first {
                    guard await events?.next(isolation: actor) != nil else { return nil }
                }
                first = false
                let read: QueryRead
                do {
                    read = try await store.queryRead(query.spec, encoder: query.collection.coder.encoder) { d, q in try d.rows(q) }
                } catch OutpostError.suspended {
                    continue
                } catch OutpostError.closed {
                    return nil
                }
                let old = previous
                if let old, old == read.rows { continue }
                previous = read.rows
                let results = query.decode(read)
                return LiveResults(results: results, changes: QueryChanges(from: old ?? [], to: read.rows))
            }
            return nil
        }
    }
}

/// One update of a live query.
public struct LiveResults<Value> {
    /// The results now.
    public let results: QueryResults<Value>
    /// What changed since the update before (the first: every row inserted).
    public let changes: QueryChanges
}

extension LiveResults: Sendable where Value: Sendable {}

/// What changed between two results of a query, by position, in the manner of a table
/// view's batch update: remove `removed` (positions in the old results), insert `inserted`
/// (positions in the new), move each of `moved`, then reload `updated` (positions in the
/// new results of rows still there whose record changed).
public struct QueryChanges: Sendable, Hashable {
    /// A row that stayed but changed place.
    public struct Move: Sendable, Hashable {
        /// Its position in the old results.
        public let from: Int
        /// Its position in the new results.
        public let to: Int
    }

    /// Positions in the old results of rows that left.
    public let removed: [Int]
    /// Positions in the new results of rows that came.
    public let inserted: [Int]
    /// Rows that moved.
    public let moved: [Move]
    /// Positions in the new results of rows whose record changed (content, version or local
    /// state).
    public let updated: [Int]

    /// True when nothing changed.
    public var isEmpty: Bool { removed.isEmpty && inserted.isEmpty && moved.isEmpty && updated.isEmpty }

    /// The changes from `old` to `new` rows: ids that left, came and moved by a diff of the
    /// two orders (`CollectionDifference`, moves inferred), and ids in both whose row differs.
    init(from old: [QueryRowData], to new: [QueryRowData]) {
        let diff = new.map(\.id).difference(from: old.map(\.id)).inferringMoves()
        var removed: [Int] = [], inserted: [Int] = [], moved: [Move] = []
        for change in diff {
            switch change {
            case .remove(let offset, _, let associated):
                if associated == nil { removed.append(offset) }
            case .insert(let offset, _, let associated):
                if let from = associated { moved.append(Move(from: from, to: offset)) } else { inserted.append(offset) }
            }
        }
        var before: [String: QueryRowData] = [:]
        for row in old { before[row.id] = row }
        var updated: [Int] = []
        for (i, row) in new.enumerated() {
            if let was = before[row.id], was.doc != row.doc || was.version != row.version || was.pending != row.pending || was.rejected != row.rejected {
                updated.append(i)
            }
        }
        self.removed = removed.sorted()
        self.inserted = inserted.sorted()
        self.moved = moved.sorted { $0.to < $1.to }
        self.updated = updated
    }
}

/// A live query as an `@Observable` model, for SwiftUI lists (in the manner of
/// `SyncStatusModel`): its rows, what changed last, the records it skipped.
///
/// ```swift
/// @State var model = LiveQueryModel(inspections.filter { $0.status == "open" }.sorted(by: .ascending("dueDate")))
/// List(model.rows) { row in Text(row.value.title) }
///     .task { await model.start() }
///     .searchable(text: $text).onChange(of: text) { model.update(inspections.search(text)) }
/// ```
@MainActor @Observable
public final class LiveQueryModel<Value: Decodable & Sendable> {
    /// The rows now.
    public private(set) var rows: [QueryRow<Value>] = []
    /// What the last update changed.
    public private(set) var changes: QueryChanges?
    /// Records the query left out because they do not decode as `Value`.
    public private(set) var skipped: [SkippedRecord] = []
    /// False until the first results are in.
    public private(set) var isLoaded = false
    /// Why the live query stopped, if it failed.
    public private(set) var error: OutpostError?
    /// The query it follows.
    public private(set) var query: OutpostQuery<Value>

    @ObservationIgnored private var task: Task<Void, Never>?

    /// A model of `query`; it follows it from `start()`.
    public init(_ query: OutpostQuery<Value>) {
        self.query = query
    }

    /// Follows the query until `stop()`, a new `update`, or the store closes. Returns once
    /// the first results are shown.
    public func start() async {
        task?.cancel()
        let (loaded, loadedContinuation) = AsyncStream<Void>.makeStream()
        let live = query.live()
        task = Task { [weak self] in
            do {
                for try await update in live {
                    guard let self else { return }
                    self.apply(update)
                    loadedContinuation.finish()
                }
            } catch {
                self?.error = error as? OutpostError ?? .storage("\(error)")
            }
            loadedContinuation.finish()
        }
        for await _ in loaded {}
    }

    /// Follows `query` instead (a new search text, say), from its first results.
    public func update(_ query: OutpostQuery<Value>) async {
        self.query = query
        await start()
    }

    /// Stops following the query.
    public func stop() {
        task?.cancel()
        task = nil
    }

    private func apply(_ update: LiveResults<Value>) {
        rows = update.results.rows
        skipped = update.results.skipped
        changes = update.changes
        error = nil
        isLoaded = true
    }
}
