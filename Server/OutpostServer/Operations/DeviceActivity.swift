import Foundation
import OutpostCore
import Synchronization

/// What the server itself sees of each device's sync (docs/operating.md, "Devices"): when
/// it last pushed (its push names its clientId) and when it last pulled, with the cursor
/// the pull answered and the view it pulled under (a pull names its clientId in the
/// `X-Outpost-Client-Id` header). Noting one costs a dictionary update under a lock and
/// no write: `DeviceTelemetry.flush` stores what was noted, batched, in the `devices`
/// table (every few seconds, before each admin read of devices, and at shutdown), so a
/// pull's path never waits on the store for it.
final class DeviceActivity: Sendable {
    /// A device as its token names it: a clientId under one subject. A token naming another
    /// subject's clientId is another key, and `flush` lets it change nothing of that device.
    struct Key: Hashable, Sendable {
        var space: String
        var clientId: String
        var subject: String
    }

    /// The newest of each kind of activity since the last flush.
    struct Noted: Sendable {
        var lastPush: Int64?
        var lastPull: Int64?
        /// The cursor the newest pull answered (`next`): its epoch and seq.
        var pullEpoch: String?
        var pullSeq: Int64?
        /// `{"id": "<view id>", "claims": {…}}`: the view the newest pull was read under and
        /// the claims of the token that the rules' read conditions read; nil without rules.
        /// Made by `take` from `readView`, so a pull only keeps a reference.
        var pullView: String?
        var readView: ReadView?
    }

    /// The most devices noted between two flushes; past it a device's activity waits for
    /// the next one (a flush empties the map), so memory stays bounded under a flood of
    /// made-up clientIds.
    static let capacity = 50_000

    /// The longest `pullView` kept, in bytes: past it the claims' values are left out.
    static let maxViewBytes = 4096

    private let noted = Mutex<[Key: Noted]>([:])

    /// A push answered at `now` (ms).
    func push(_ key: Key, now: Int64) {
        update(key) { n in n.lastPush = max(n.lastPush ?? now, now) }
    }

    /// A pull answered at `now` with the cursor `next`, under `view` (nil without rules).
    func pull(_ key: Key, now: Int64, next: Version, view: ReadView?) {
        update(key) { n in
            guard now >= (n.lastPull ?? now) else { return }
            n.lastPull = now
            n.pullEpoch = next.epoch.rawValue
            n.pullSeq = next.seq
            n.readView = view
        }
    }

    /// Takes everything noted since the last call, each view described (outside the lock).
    func take() -> [Key: Noted] {
        var taken = noted.withLock { n in
            defer { n = [:] }
            return n
        }
        for (key, n) in taken {
            guard let view = n.readView else { continue }
            taken[key]?.pullView = Self.describe(view)
            taken[key]?.readView = nil
        }
        return taken
    }

    private func update(_ key: Key, _ change: (inout Noted) -> Void) {
        noted.withLock { n in
            guard n[key] != nil || n.count < Self.capacity else { return }
            change(&n[key, default: Noted()])
        }
    }

    /// The view's id and the claims its read rules read (`ServerRules.viewClaims`), as JSON.
    static func describe(_ view: ReadView) -> String {
        var claims: JSONObject = [:]
        for path in view.rules.viewClaims {
            var value = JSONValue.object(view.auth)
            for name in path {
                guard case .object(let o) = value, let next = o[name] else { value = .null; break }
                value = next
            }
            claims[path.joined(separator: ".")] = value
        }
        let full = JSONValue.object(["id": .string(view.id), "claims": .object(claims)]).encoded(canonical: true)
        if full.count <= maxViewBytes { return String(decoding: full, as: UTF8.self) }
        // Too large to keep whole: the claims' names, without their values.
        let names = JSONValue.object(["id": .string(view.id), "claims": .object(JSONObject(claims.keys.map { ($0, JSONValue.null) })), "truncated": .bool(true)])
        return String(decoding: names.encoded(canonical: true), as: UTF8.self)
    }
}
