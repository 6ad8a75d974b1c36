// Apple platforms only: the Network framework's path monitor and Foundation's Low Power
// Mode. Elsewhere the scheduler's default is `AlwaysReachableConditions`.
#if canImport(Network)
import Foundation
import Network

/// `NetworkConditions` from the system: reachability and the kind of network from an
/// `NWPathMonitor`, Low Power Mode from `ProcessInfo.isLowPowerModeEnabled` and its
/// `NSProcessInfoPowerStateDidChange` notification.
///
/// A path is reachable when its status is `.satisfied`; it counts as Wi-Fi when it uses a
/// Wi-Fi or wired interface and is neither expensive (a personal hotspot) nor constrained
/// (Low Data Mode). Monitoring runs from `init` until the object is released.
///
/// It is `@unchecked Sendable` because `NWPathMonitor` and the notification token are
/// touched only in `init` and `deinit`; the state lives in a `Mutex`.
public final class PathMonitorConditions: NetworkConditions, @unchecked Sendable {
    private let monitor: NWPathMonitor
    private let broadcast: NetworkStateBroadcast
    private let observer: any NSObjectProtocol

    /// Starts monitoring. The first path arrives moments later; until then `current` reads
    /// as unreachable and `updates()` gives nothing yet.
    public init() {
        let monitor = NWPathMonitor()
        let broadcast = NetworkStateBroadcast()
        monitor.pathUpdateHandler = { path in
            let reachable = path.status == .satisfied
            let wifi = reachable && (path.usesInterfaceType(.wifi) || path.usesInterfaceType(.wiredEthernet))
                && !path.isExpensive && !path.isConstrained
            // Low Power Mode is read under the broadcast's lock, so a power notification
            // on another thread never has its newer value replaced by an older one.
            broadcast.update { _ in
                NetworkState(isReachable: reachable, isWiFi: wifi, isLowPower: ProcessInfo.processInfo.isLowPowerModeEnabled)
            }
        }
        observer = NotificationCenter.default.addObserver(forName: .NSProcessInfoPowerStateDidChange, object: nil, queue: nil) { _ in
            broadcast.update { latest in
                guard var state = latest else { return nil }
                state.isLowPower = ProcessInfo.processInfo.isLowPowerModeEnabled
                return state
            }
        }
        self.monitor = monitor
        self.broadcast = broadcast
        monitor.start(queue: DispatchQueue(label: "Outpost.PathMonitorConditions"))
    }

    deinit {
        monitor.cancel()
        NotificationCenter.default.removeObserver(observer)
        broadcast.finish()
    }

    /// The newest state; unreachable before the monitor's first path.
    public var current: NetworkState {
        broadcast.latest ?? NetworkState(isReachable: false, isWiFi: false, isLowPower: ProcessInfo.processInfo.isLowPowerModeEnabled)
    }

    /// The newest state (once the first path is known), then each change.
    public func updates() -> AsyncStream<NetworkState> {
        broadcast.stream()
    }
}
#endif
