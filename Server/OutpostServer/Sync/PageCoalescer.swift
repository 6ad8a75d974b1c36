import OutpostHTTP
import Synchronization

/// Shares one page read among identical pulls that are served at the same moment.
///
/// Many devices that pull at once from the same cursor (their first read, before a long
/// poll waits; or after a push they all heard of) would otherwise read the same page as
/// many times through a few reader threads. Pulls already waiting are grouped by
/// `LongPollHub`, which reads once per group. Pulls share a read
/// only when everything that shapes the page is equal *and* the space's newest committed
/// head known to this process is the same: a read that started after head H was known
/// includes H, so a pull never gets a page older than a commit it could have seen (in
/// particular, one sent after its own push's answer; stores update the head before
/// answering a push). With no known head nothing is shared.
final class PageCoalescer: Sendable {
    /// A page as pulls ask for it: where it starts, its limits and filter, and the head it
    /// was asked at (shared with `LongPollHub`, whose groups wait for such a page).
    struct Key: Hashable {
        let space: String
        let afterSeq: Int64
        let limit: Int
        let maxBytes: Int
        let collections: [String]?
        let head: Int64
    }

    private let inflight = Mutex<[Key: Task<PageData, any Error>]>([:])
    /// Counts the pulls served by a read that another pull had started: the reads saved
    /// (`outpost_pull_pages_shared_total`).
    let shared: Metrics.Counter

    init(shared: Metrics.Counter = Metrics.Counter()) {
        self.shared = shared
    }

    /// The page for `request`, read by `read` or by an identical read already running.
    func page(_ request: PageRequest, knownHead: Int64?, read: @escaping @Sendable () async throws -> PageData) async throws -> PageData {
        guard let knownHead else { return try await read() }
        let key = Key(space: request.space, afterSeq: request.afterSeq, limit: request.limit, maxBytes: request.maxBytes,
                      collections: request.collections, head: knownHead)
        let (task, owner) = inflight.withLock { running -> (Task<PageData, any Error>, Bool) in
            if let task = running[key] { return (task, false) }
            // On the loop of the pull that started the read (nil off the loops: the pool).
            let task = Task(executorPreference: HTTPServer.currentEventLoop) { try await read() }
            running[key] = task
            return (task, true)
        }
        if owner {
            defer { inflight.withLock { _ = $0.removeValue(forKey: key) } }
            return try await task.value
        }
        shared.add()
        return try await task.value
    }
}
