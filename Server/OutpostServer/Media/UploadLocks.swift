import Synchronization

/// Per-upload reader-writer locks for async code.
///
/// Chunk writes of one upload take the lock shared, so a client may send chunks over
/// several connections at once; finalize, abort and the expiry sweep take it exclusive,
/// so none of them runs while a chunk is being written, and two finalizes of one upload
/// run one after the other (the second answers from the first's result).
///
/// Waiters are served in arrival order: once an exclusive waiter queues, later shared
/// requests queue behind it, so a steady stream of chunks cannot starve a finalize.
/// Waiting suspends the task and holds no thread. A lock entry exists only while the
/// upload's lock is held or awaited.
final class UploadLocks: Sendable {
    private struct Entry {
        var readers = 0
        var writer = false
        var queue: [(exclusive: Bool, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let entries = Mutex<[UploadID: Entry]>([:])

    init() {}

    /// Runs `body` holding `id`'s lock shared.
    func withShared<T>(_ id: UploadID, _ body: () async throws -> T) async rethrows -> T {
        await acquire(id, exclusive: false)
        defer { release(id, exclusive: false) }
        return try await body()
    }

    /// Runs `body` holding `id`'s lock exclusively.
    func withExclusive<T>(_ id: UploadID, _ body: () async throws -> T) async rethrows -> T {
        await acquire(id, exclusive: true)
        defer { release(id, exclusive: true) }
        return try await body()
    }

    /// Takes `id`'s lock exclusively when nobody holds or awaits it; false otherwise (the
    /// expiry sweep skips an upload in use and tries again next round).
    func tryExclusive(_ id: UploadID) -> Bool {
        entries.withLock { entries in
            if entries[id] != nil { return false }
            entries[id] = Entry(readers: 0, writer: true, queue: [])
            return true
        }
    }

    /// Releases a lock taken by `tryExclusive`.
    func releaseExclusive(_ id: UploadID) {
        release(id, exclusive: true)
    }

    /// True when some task holds or awaits `id`'s lock (for tests and the sweep).
    func isInUse(_ id: UploadID) -> Bool {
        entries.withLock { $0[id] != nil }
    }

    private func acquire(_ id: UploadID, exclusive: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = entries.withLock { entries -> Bool in
                var entry = entries[id] ?? Entry()
                let free = entry.queue.isEmpty && !entry.writer && (!exclusive || entry.readers == 0)
                if free {
                    if exclusive { entry.writer = true } else { entry.readers += 1 }
                } else {
                    entry.queue.append((exclusive, continuation))
                }
                entries[id] = entry
                return free
            }
            if granted { continuation.resume() }
        }
    }

    private func release(_ id: UploadID, exclusive: Bool) {
        let wake = entries.withLock { entries -> [CheckedContinuation<Void, Never>] in
            guard var entry = entries[id] else { preconditionFailure("UploadLocks: release of \(id) without a lock") }
            if exclusive {
                precondition(entry.writer, "UploadLocks: exclusive release without an exclusive hold")
                entry.writer = false
            } else {
                precondition(entry.readers > 0, "UploadLocks: shared release without a shared hold")
                entry.readers -= 1
            }
            // Grant from the head of the queue while compatible.
            var wake: [CheckedContinuation<Void, Never>] = []
            while let head = entry.queue.first {
                if head.exclusive {
                    guard !entry.writer && entry.readers == 0 else { break }
                    entry.writer = true
                } else {
                    guard !entry.writer else { break }
                    entry.readers += 1
                }
                wake.append(head.continuation)
                entry.queue.removeFirst()
                if head.exclusive { break }
            }
            if entry.readers == 0 && !entry.writer && entry.queue.isEmpty {
                entries[id] = nil
            } else {
                entries[id] = entry
            }
            return wake
        }
        for continuation in wake { continuation.resume() }
    }
}
