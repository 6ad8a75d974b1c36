import Foundation
import Synchronization

/// A TCP listener on 127.0.0.1 and an ephemeral port whose connections are each served on
/// a thread of their own, never on the test process's cooperative pool: a peer a test
/// stands up (a proxy, a webhook receiver) then answers on time however busy the pool is
/// with the other tests running beside it. `ProxySocket` has the calls to read and write.
public final class LoopbackListener: Sendable {
    public let port: Int
    private let listener: Int32
    private let stopped = StopFlag()

    /// Set once by `stop`, read by the accept loop when `accept` fails.
    private final class StopFlag: Sendable {
        let value = Atomic(false)
    }

    /// Starts listening; `serve` gets each accepted connection, on a new thread, and the
    /// listener closes the connection when `serve` returns.
    public init(serve: @escaping @Sendable (Int32) -> Void) throws {
        (listener, port) = try ProxySocket.listen()
        let fd = listener, stopped = self.stopped
        Thread.detachNewThread {
            ProxySocket.acceptLoop(fd, stopped: { stopped.value.load(ordering: .acquiring) }) { client in
                defer { close(client) }
                serve(client)
            }
        }
    }

    /// Stops accepting (connections being served go on until their `serve` returns).
    public func stop() {
        guard !stopped.value.exchange(true, ordering: .acquiringAndReleasing) else { return }
        ProxySocket.closeListener(listener)
    }
}
