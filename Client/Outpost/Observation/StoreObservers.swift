import Foundation
import OutpostCore

/// The observation part of a store, owned by its actor and used only on it: the
/// subscribers of record events (`observe…`), of sync activity (`syncActivity()`) and of
/// conflict decisions (`observeConflicts()`), and the journal entries of the transaction
/// now open, told to the conflict subscribers once it commits.
final class StoreObservers {
    struct RecordObserver {
        enum Filter { case all, collection(String), record(RecordKey) }
        let filter: Filter
        let continuation: AsyncStream<StoreEvent>.Continuation
    }

    private var records: [UUID: RecordObserver] = [:]
    private var activity: [UUID: AsyncStream<SyncActivity>.Continuation] = [:]
    private var conflicts: [UUID: AsyncStream<ConflictEntry>.Continuation] = [:]
    private var journaled: [ConflictEntry] = []

    func add(_ id: UUID, records filter: RecordObserver.Filter, _ continuation: AsyncStream<StoreEvent>.Continuation) {
        records[id] = RecordObserver(filter: filter, continuation: continuation)
    }

    func add(_ id: UUID, activity continuation: AsyncStream<SyncActivity>.Continuation) {
        activity[id] = continuation
    }

    func add(_ id: UUID, conflicts continuation: AsyncStream<ConflictEntry>.Continuation) {
        conflicts[id] = continuation
    }

    /// Drops the subscriber `id`, of whichever kind.
    func remove(_ id: UUID) {
        records[id] = nil
        activity[id] = nil
        conflicts[id] = nil
    }

    /// Tells each record subscriber the keys of `event` its filter admits.
    func notify(_ event: StoreEvent) {
        guard !event.keys.isEmpty else { return }
        for observer in records.values {
            let keys: [RecordKey]
            switch observer.filter {
            case .all: keys = event.keys
            case .collection(let c): keys = event.keys.filter { $0.collection == c }
            case .record(let k): keys = event.keys.filter { $0 == k }
            }
            if !keys.isEmpty { observer.continuation.yield(StoreEvent(origin: event.origin, keys: keys)) }
        }
    }

    func announce(_ event: SyncActivity) {
        for continuation in activity.values { continuation.yield(event) }
    }

    /// Keeps an entry the open transaction journaled, to be told once it commits.
    func journal(_ entry: ConflictEntry) {
        journaled.append(entry)
    }

    /// Tells the conflict subscribers of the entries the committed transaction journaled.
    func announceJournaled() {
        for entry in journaled {
            for continuation in conflicts.values { continuation.yield(entry) }
        }
        journaled.removeAll()
    }

    /// Forgets the entries of a transaction that rolled back: they are never told.
    func forgetJournaled() {
        journaled.removeAll()
    }

    /// Ends every stream (the store closed).
    func finishAll() {
        for observer in records.values { observer.continuation.finish() }
        for continuation in activity.values { continuation.finish() }
        for continuation in conflicts.values { continuation.finish() }
        records.removeAll()
        activity.removeAll()
        conflicts.removeAll()
    }
}
