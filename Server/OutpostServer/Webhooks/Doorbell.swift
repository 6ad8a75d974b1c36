import Dispatch
import Foundation
import Synchronization

/// How the commit notifier wakes a webhook deliverer: each commit rings with its space, and
/// the deliverer, when it next waits, takes the spaces rung since its last wait (or
/// "everything", when more spaces rang than it keeps, or the notifier may have missed
/// commits). One waiter at a time; a wait also ends at its deadline or when its task is
/// cancelled.
final class Doorbell: Sendable {
    /// What rang since the last wait.
    struct Rung: Sendable, Equatable {
        var spaces: Set<String> = []
        /// Every space may have commits: scan them all.
        var everything = false
    }

    private struct State {
        var rung = Rung()
        var waiter: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var nextID: UInt64 = 0
    }

    /// The most spaces remembered between two waits; past it the bell says "everything".
    static let maxSpaces = 10_000

    private let state = Mutex(State())
    private static let timers = DispatchQueue(label: "outpost.webhooks.doorbell")

    /// Rings for a commit in `space`, or for every space (nil).
    func ring(_ space: String?) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let space, !s.rung.everything, s.rung.spaces.count < Self.maxSpaces {
                s.rung.spaces.insert(space)
            } else {
                s.rung = Rung(spaces: [], everything: true)
            }
            defer { s.waiter = nil }
            return s.waiter?.continuation
        }
        waiter?.resume()
    }

    /// Waits until the bell rings, the wall clock reaches `deadlineMs` (ms since 1970) or the
    /// task is cancelled, and returns (and forgets) what rang meanwhile.
    func wait(untilMs deadlineMs: Int64) async -> Rung {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waiting = state.withLock { s -> Bool in
                    if !s.rung.spaces.isEmpty || s.rung.everything || Task.isCancelled { return false }
                    s.waiter = (id, continuation)
                    return true
                }
                guard waiting else {
                    continuation.resume()
                    return
                }
                let delay = max(0, min(deadlineMs - Int64(Date().timeIntervalSince1970 * 1000), 86_400_000))
                Self.timers.asyncAfter(deadline: .now() + .milliseconds(Int(delay))) { [weak self] in self?.end(id) }
            }
        } onCancel: {
            end(id)
        }
        return state.withLock { s in
            defer { s.rung = Rung() }
            return s.rung
        }
    }

    /// Ends the wait `id` if it is still the one waiting.
    private func end(_ id: UInt64) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard let w = s.waiter, w.id == id else { return nil }
            s.waiter = nil
            return w.continuation
        }
        waiter?.resume()
    }
}
