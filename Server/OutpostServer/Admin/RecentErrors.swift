import Foundation
import OutpostHTTP
import Synchronization

/// The last error answers the server gave (status 400 and up), newest first, in a ring of
/// fixed size held in memory: what the admin console's overview lists
/// (`GET /v1/admin/errors`). An entry holds the time, method, route pattern, status, the
/// envelope's code and message as the server keeps it (`HTTPFailure.message`: the kind of
/// error and where, with the text the client sent cut), and the request id; never a
/// header, a token, a query or a body, so no record data. A message is cut at
/// `maxMessageCharacters`.
public final class RecentErrors: Sendable {
    /// One error answer.
    public struct Entry: Sendable, Equatable {
        /// Server time (ms since 1970) when the answer was written.
        public var at: Int64
        public var method: String?
        /// The matched route's pattern (`/v1/spaces/{space}/pull`), nil when none matched.
        public var route: String?
        public var status: Int
        public var code: String
        public var message: String
        public var requestID: String
    }

    /// Entries kept.
    public let capacity: Int
    /// The longest message kept; longer ones are cut and end in "…".
    static let maxMessageCharacters = 300

    private struct Ring {
        var entries: [Entry] = []
        /// Where the next entry goes once the ring is full.
        var next = 0
    }

    private let ring = Mutex(Ring())

    public init(capacity: Int = 200) {
        precondition(capacity > 0, "a ring of errors needs room for one")
        self.capacity = capacity
    }

    /// Keeps `log` when it reports an error answer; called for every finished request, on
    /// an event-loop thread, so it only takes a short lock.
    public func record(_ log: HTTPRequestLog, at now: Int64) {
        guard log.status >= 400, let failure = log.failure else { return }
        var message = failure.message
        if message.count > Self.maxMessageCharacters { message = String(message.prefix(Self.maxMessageCharacters - 1)) + "…" }
        let entry = Entry(at: now, method: log.method?.rawValue, route: log.route, status: log.status, code: failure.code,
                          message: message, requestID: log.requestID)
        ring.withLock { r in
            if r.entries.count < capacity {
                r.entries.append(entry)
            } else {
                r.entries[r.next] = entry
            }
            r.next = (r.next + 1) % capacity
        }
    }

    /// At most `limit` entries, newest first.
    public func latest(_ limit: Int) -> [Entry] {
        ring.withLock { r in
            let count = r.entries.count
            guard count > 0 else { return [] }
            // The newest entry is just before `next` (the ring wraps once full).
            return (0..<min(limit, count)).map { r.entries[(r.next - 1 - $0 + count) % count] }
        }
    }
}
