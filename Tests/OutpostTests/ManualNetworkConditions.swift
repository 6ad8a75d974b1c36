@testable import Outpost

/// `NetworkConditions` whose state the test sets: the scheduler's streams get each new
/// state as `set(_:)` returns.
final class ManualNetworkConditions: NetworkConditions {
    private let broadcast: NetworkStateBroadcast

    init(_ initial: NetworkState) {
        broadcast = NetworkStateBroadcast(initial)
    }

    var current: NetworkState { broadcast.latest ?? NetworkState() }

    func updates() -> AsyncStream<NetworkState> {
        broadcast.stream()
    }

    func set(_ state: NetworkState) {
        broadcast.update { _ in state }
    }
}

extension NetworkState {
    static let offline = NetworkState(isReachable: false, isWiFi: false)
    static let cellular = NetworkState(isReachable: true, isWiFi: false)
    static let wifi = NetworkState(isReachable: true, isWiFi: true)
}
