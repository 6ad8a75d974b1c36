import Foundation
import OutpostCore

// The observation part of the store's surface: streams of record events, live values, sync
// activity, and the signals live queries read again on. The subscribers are kept by
// `StoreObservers`.
extension OutpostStore {
    /// Events for every change of `collection`: local edits, pulled records, push answers
    /// and resolutions that change what the app sees. Ends when the store closes.
    public func observe(collection: String) -> AsyncStream<StoreEvent> {
        addObserver(.collection(collection))
    }

    /// Events for every change of one record.
    public func observe(collection: String, id: String) -> AsyncStream<StoreEvent> {
        addObserver(.record(RecordKey(collection: collection, id: id)))
    }

    /// Events for every change of the store.
    public func observeAll() -> AsyncStream<StoreEvent> {
        addObserver(.all)
    }

    /// The live records of `collection` decoded as `type` with `decoder`: now, then after
    /// every committed write that changes them (a live query of the whole collection,
    /// ordered by id: `OutpostQuery.live()`). A record that does not decode is left out, not
    /// the end of the stream. Ends when the store closes or the consumer stops. For ids,
    /// filters, order and what changed, use a typed collection's `live()`.
    public nonisolated func values<T: Decodable & Sendable>(_ type: T.Type, in collection: String,
                                                            decoder: JSONDecoder = RecordCoder.standardDecoder()) -> AsyncThrowingStream<[T], any Error> {
        let live = self.collection(collection, of: T.self, coder: RecordCoder(encoder: RecordCoder.standardEncoder(), decoder: decoder)).query.live()
        let (stream, continuation) = AsyncThrowingStream<[T], any Error>.makeStream()
        let task = Task {
            do {
                for try await update in live { continuation.yield(update.results.values) }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// What the store's syncs do from now on: each sync's start, a progress report after
    /// every page its pull applies, and its end. Ends when the store closes.
    public func syncActivity() -> AsyncStream<SyncActivity> {
        subscribe(.bufferingNewest(256)) { $0.add($1, activity: $2) }
    }

    func announce(_ activity: SyncActivity) {
        observers.announce(activity)
    }

    /// A signal after every committed transaction that changed what the app sees of
    /// `collection`, for a reader that reads the collection again on each: signals that
    /// come while it reads are folded into one (the stream keeps only the newest).
    func changeSignals(collection: String) -> AsyncStream<StoreEvent> {
        addObserver(.collection(collection), buffering: .bufferingNewest(1))
    }

    private func addObserver(_ filter: StoreObservers.RecordObserver.Filter,
                             buffering: AsyncStream<StoreEvent>.Continuation.BufferingPolicy = .unbounded) -> AsyncStream<StoreEvent> {
        subscribe(buffering) { $0.add($1, records: filter, $2) }
    }

    /// A stream for a new subscriber: finished at once when the store is closed, else kept
    /// by `register` in the observers under a new id until its consumer stops.
    func subscribe<T: Sendable>(_ buffering: AsyncStream<T>.Continuation.BufferingPolicy,
                                register: (StoreObservers, UUID, AsyncStream<T>.Continuation) -> Void) -> AsyncStream<T> {
        let (stream, continuation) = AsyncStream<T>.makeStream(bufferingPolicy: buffering)
        guard life.hasDatabase else {
            continuation.finish()
            return stream
        }
        let id = UUID()
        register(observers, id, continuation)
        continuation.onTermination = { [weak self] _ in
            Task { await self?.unsubscribe(id) }
        }
        return stream
    }

    private func unsubscribe(_ id: UUID) {
        observers.remove(id)
    }

    func notify(_ event: StoreEvent) {
        observers.notify(event)
    }
}
