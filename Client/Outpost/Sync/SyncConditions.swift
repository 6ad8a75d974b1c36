import Synchronization

/// The device's connectivity and power, as far as syncing cares.
public struct NetworkState: Sendable, Hashable {
    /// A route to the network exists. It says nothing about whether the server answers:
    /// a sync can still fail, and backs off as usual.
    public var isReachable: Bool
    /// The route is Wi-Fi or wired, and the system marks it neither expensive (a phone's
    /// personal hotspot, though reached over Wi-Fi) nor constrained (Low Data Mode).
    public var isWiFi: Bool
    /// Low Power Mode is on.
    public var isLowPower: Bool

    /// A state; the defaults are a device on Wi-Fi, not in Low Power Mode.
    public init(isReachable: Bool = true, isWiFi: Bool = true, isLowPower: Bool = false) {
        self.isReachable = isReachable
        self.isWiFi = isWiFi
        self.isLowPower = isLowPower
    }
}

/// Where a `SyncScheduler` learns the device's `NetworkState`.
///
/// The platform's implementation is `SyncScheduler.platformConditions()`:
/// `PathMonitorConditions` on Apple platforms, `AlwaysReachableConditions` elsewhere. An app
/// can give its own (a setting "sync on cellular" read from its preferences, say).
public protocol NetworkConditions: Sendable {
    /// The state now, as far as it is known.
    var current: NetworkState { get }
    /// The state as it changes: first the state at the call (as soon as it is known), then
    /// each change. The stream ends when its reader stops (or the task reading it is
    /// cancelled); it may also end on its own, and the last state it gave then stays.
    func updates() -> AsyncStream<NetworkState>
}

/// The conditions a `SyncScheduler` syncs under (`SyncScheduler.Options.conditions`).
/// While they do not hold it neither syncs nor holds a long poll; once they hold again it
/// syncs at once.
public struct SyncConditions: Sendable, Hashable {
    /// Sync only while the network is reachable. Default true.
    public var requiresNetwork: Bool
    /// Sync only on Wi-Fi or wired networks (`NetworkState.isWiFi`), not on cellular or
    /// other metered ones. Implies `requiresNetwork`. Default false.
    public var wifiOnly: Bool
    /// Pause while Low Power Mode is on. Default false.
    public var pausesInLowPowerMode: Bool

    /// Conditions; the defaults sync on any network, in any power mode.
    public init(requiresNetwork: Bool = true, wifiOnly: Bool = false, pausesInLowPowerMode: Bool = false) {
        self.requiresNetwork = requiresNetwork
        self.wifiOnly = wifiOnly
        self.pausesInLowPowerMode = pausesInLowPowerMode
    }

    /// Why a sync waits.
    public enum Unmet: Sendable, Hashable, CustomStringConvertible {
        /// No network is reachable.
        case noNetwork
        /// The network is reachable but not Wi-Fi (or wired), and `wifiOnly` is set.
        case notOnWiFi
        /// Low Power Mode is on, and `pausesInLowPowerMode` is set.
        case lowPowerMode

        /// In words, for a status line.
        public var description: String {
            switch self {
            case .noNetwork: "waiting for a network connection"
            case .notOnWiFi: "waiting for Wi-Fi"
            case .lowPowerMode: "paused in Low Power Mode"
            }
        }
    }

    /// The first condition `state` does not meet (network, then Wi-Fi, then power), or nil
    /// when a sync may run.
    public func unmet(in state: NetworkState) -> Unmet? {
        if (requiresNetwork || wifiOnly) && !state.isReachable { return .noNetwork }
        if wifiOnly && !state.isWiFi { return .notOnWiFi }
        if pausesInLowPowerMode && state.isLowPower { return .lowPowerMode }
        return nil
    }
}

/// Conditions that always hold: reachable, Wi-Fi, not in Low Power Mode. The default
/// where the Network framework is missing (Linux, Windows): those platforms have no
/// portable reachability API, so the scheduler tries and a sync fails and backs off when
/// the network is down.
public struct AlwaysReachableConditions: NetworkConditions {
    /// The conditions.
    public init() {}

    /// Reachable, on Wi-Fi, not in Low Power Mode.
    public var current: NetworkState { NetworkState() }

    /// The one state, then the end.
    public func updates() -> AsyncStream<NetworkState> {
        AsyncStream { continuation in
            continuation.yield(NetworkState())
            continuation.finish()
        }
    }
}

extension SyncScheduler {
    /// The platform's conditions: `PathMonitorConditions` (NWPathMonitor and Low Power
    /// Mode) where the Network framework exists, `AlwaysReachableConditions` elsewhere.
    public static func platformConditions() -> any NetworkConditions {
        #if canImport(Network)
        PathMonitorConditions()
        #else
        AlwaysReachableConditions()
        #endif
    }
}

/// The newest `NetworkState` and the streams that follow it: the shared part of a
/// `NetworkConditions` whose state arrives from callbacks.
final class NetworkStateBroadcast: Sendable {
    private struct State {
        var latest: NetworkState?
        var streams: [Int: AsyncStream<NetworkState>.Continuation] = [:]
        var nextId = 0
    }

    private let state: Mutex<State>

    /// A broadcast that knows `initial` (nil: nothing yet).
    init(_ initial: NetworkState? = nil) {
        state = Mutex(State(latest: initial))
    }

    /// The newest state, or nil before the first.
    var latest: NetworkState? { state.withLock { $0.latest } }

    /// Replaces the state with `change(latest)` under the lock (nil: no change), so two
    /// sources that each set part of it never undo each other; the streams get the new
    /// state when it differs.
    func update(_ change: (NetworkState?) -> NetworkState?) {
        state.withLock { s in
            guard let new = change(s.latest), new != s.latest else { return }
            s.latest = new
            for stream in s.streams.values { stream.yield(new) }
        }
    }

    /// A stream of the state: the newest one (when there is one), then each change. Only
    /// the newest unread state is kept for a slow reader: a state that was replaced no
    /// longer matters.
    func stream() -> AsyncStream<NetworkState> {
        let (stream, continuation) = AsyncStream.makeStream(of: NetworkState.self, bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { s -> Int in
            let id = s.nextId
            s.nextId += 1
            s.streams[id] = continuation
            if let latest = s.latest { continuation.yield(latest) }
            return id
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.streams.removeValue(forKey: id) }
        }
        return stream
    }

    /// Ends every stream.
    func finish() {
        let streams = state.withLock { s in
            defer { s.streams = [:] }
            return Array(s.streams.values)
        }
        for stream in streams { stream.finish() }
    }
}
