import Dispatch
import Synchronization

/// Wakes long-poll pulls when a commit makes a space's history longer
/// (docs/protocol.md section 5, `wait`).
///
/// A waiting pull is a suspended continuation in a dictionary: it holds no thread. Its
/// timeout is a Dispatch timer, not a sleeping task. Every continuation is resumed exactly
/// once, by whichever comes first of commit, timeout and cancellation, because each of
/// them removes the waiter under the lock before resuming it.
public final class CommitNotifier: Sendable {
    private struct Waiter {
        let afterSeq: Int64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        /// The newest committed seq per space seen since start.
        var heads: [String: Int64] = [:]
        var waiters: [String: [UInt64: Waiter]] = [:]
        var nextID: UInt64 = 0
        var count = 0
        var observers: [@Sendable (String?) -> Void] = []
    }

    private let state = Mutex(State())
    private let timerQueue = DispatchQueue(label: "outpost.longpoll.timers")

    public init() {}

    /// How many pulls are waiting now.
    public var waitingCount: Int { state.withLock { $0.count } }

    /// The newest head this process has seen committed in `space`, or nil when it has
    /// seen none since it started.
    public func knownHead(space: String) -> Int64? {
        state.withLock { $0.heads[space] }
    }

    /// Calls `action` after every commit that makes a space's head longer, with the
    /// space's name, and after `wakeAll` with nil (commits may have been missed). It runs on
    /// the committing thread, so it must only hand the news on (the webhook deliverer
    /// rings its doorbell).
    public func observe(_ action: @escaping @Sendable (String?) -> Void) {
        state.withLock { $0.observers.append(action) }
    }

    /// Records a commit that made `space`'s head `head`, and wakes its waiters that wait
    /// for anything after a smaller seq.
    public func committed(space: String, head: Int64) {
        let (woken, observers): ([CheckedContinuation<Bool, Never>], [@Sendable (String?) -> Void]) = state.withLock { s in
            if let known = s.heads[space], known >= head { return ([], []) }
            s.heads[space] = head
            guard var list = s.waiters[space] else { return ([], s.observers) }
            var out: [CheckedContinuation<Bool, Never>] = []
            for (id, waiter) in list where waiter.afterSeq < head {
                out.append(waiter.continuation)
                list[id] = nil
            }
            s.count -= out.count
            s.waiters[space] = list.isEmpty ? nil : list
            return (out, s.observers)
        }
        for c in woken { c.resume(returning: true) }
        for observer in observers { observer(space) }
    }

    /// Wakes every waiting pull (each reads again and waits on if nothing is due). For a
    /// notifier fed from outside the process, after a gap in which commits may have been
    /// missed (`PostgresSyncStore`'s listener reconnecting).
    public func wakeAll() {
        let (woken, observers): ([CheckedContinuation<Bool, Never>], [@Sendable (String?) -> Void]) = state.withLock { s in
            let all = s.waiters.values.flatMap { $0.values.map(\.continuation) }
            s.waiters.removeAll()
            s.count = 0
            return (all, s.observers)
        }
        for c in woken { c.resume(returning: true) }
        for observer in observers { observer(nil) }
    }

    /// Forgets what is known of `space`'s head (after an epoch change the seq may restart).
    public func reset() {
        state.withLock { $0.heads.removeAll() }
    }

    /// Suspends until `space`'s head passes `afterSeq` (true), the deadline passes or the
    /// task is cancelled (false).
    public func wait(space: String, afterSeq: Int64, deadline: ContinuousClock.Instant) async -> Bool {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let immediate: Bool? = state.withLock { s in
                    if let head = s.heads[space], head > afterSeq { return true }
                    if Task.isCancelled || ContinuousClock.now >= deadline { return false }
                    s.waiters[space, default: [:]][id] = Waiter(afterSeq: afterSeq, continuation: continuation)
                    s.count += 1
                    return nil
                }
                if let immediate {
                    continuation.resume(returning: immediate)
                    return
                }
                let delay = ContinuousClock.now.duration(to: deadline)
                let nanos = max(0, delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000)
                timerQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(nanos))) { [weak self] in
                    self?.expire(space: space, id: id)
                }
            }
        } onCancel: {
            expire(space: space, id: id)
        }
    }

    private func expire(space: String, id: UInt64) {
        let waiter: Waiter? = state.withLock { s in
            guard let w = s.waiters[space]?.removeValue(forKey: id) else { return nil }
            if s.waiters[space]?.isEmpty == true { s.waiters[space] = nil }
            s.count -= 1
            return w
        }
        waiter?.continuation.resume(returning: false)
    }
}
