// The public server: event-loop threads, start, graceful shutdown, gauges and hooks.
import OutpostCLinux
import Glibc
import Synchronization

/// An HTTP/1.1 server on non-blocking sockets and epoll, one event loop per core.
///
/// ```swift
/// var router = Router()
/// router.add(.GET, "/healthz", inline: { _ in HTTPResponse(json: Array(#"{"status":"ok"}"#.utf8)) })
/// let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0), router: router)
/// server.onRequestComplete = { log in metrics.record(log) }
/// let port = try server.start()
/// ...
/// await server.shutdown(grace: .seconds(10))
/// ```
///
/// Threads: `eventLoopCount` loop threads do all socket work; a connection belongs to
/// one loop for its life. Async handlers and pre-body checks run as tasks whose executor
/// is that loop (SE-0417's task executor preference): they run on the loop's thread
/// between epoll rounds, never on Swift's cooperative pool, so the server answers
/// whatever else the process's tasks are doing; suspended, they hold no thread, so
/// thousands of idle or long-polling connections cost memory only. Handlers must not
/// block (blocking work belongs on threads of its own, awaited through a continuation).
/// Inline handlers run on the loop thread directly.
/// The server ignores `SIGPIPE` process-wide (a write to a closed socket must be an
/// error, not a signal) and raises `RLIMIT_NOFILE` to its hard limit when started.
public final class HTTPServer: Sendable {
    private enum State {
        case idle
        case running(loops: [EventLoop], port: Int)
        case stopping(port: Int)
        case stopped
    }

    /// The configuration the server was created with.
    public let configuration: HTTPServerConfiguration
    let shared: ServerShared
    private let state = Mutex(State.idle)

    /// Creates a server; nothing is bound until `start()`.
    public init(configuration: HTTPServerConfiguration, router: Router) {
        precondition(configuration.eventLoopCount >= 1, "eventLoopCount must be at least 1")
        self.configuration = configuration
        self.shared = ServerShared(configuration: configuration, router: router)
    }

    /// Binds, listens and starts the event loops. Returns the bound port (the real one
    /// when the configuration says 0). When it returns, connections are accepted.
    @discardableResult
    public func start() throws -> Int {
        try state.withLock { state in
            guard case .idle = state else { preconditionFailure("HTTPServer.start() called twice") }
            Socket.raiseOpenFileLimit()
            signal(SIGPIPE, SIG_IGN)
            let (family, address) = try Socket.resolve(host: configuration.host, port: configuration.port)
            var listeners: [Int32] = []
            var loops: [EventLoop] = []
            do {
                // The first listener binds alone: a port another process holds fails here.
                let first = try Socket.listen(family: family, address: address, backlog: configuration.backlog, joining: false)
                listeners.append(first)
                let port = Socket.localPort(first)
                // The other loops join the same port (SO_REUSEPORT): the kernel spreads
                // connections across the listeners, with no shared accept lock.
                let (_, sameAddress) = try Socket.resolve(host: configuration.host, port: port)
                for _ in 1..<configuration.eventLoopCount {
                    listeners.append(try Socket.listen(family: family, address: sameAddress, backlog: configuration.backlog, joining: true))
                }
                for _ in 0..<configuration.eventLoopCount { loops.append(try EventLoop()) }
                for (index, (loop, fd)) in zip(loops, listeners).enumerated() {
                    let shared = self.shared
                    shared.runningLoops.add(1, ordering: .sequentiallyConsistent)
                    do {
                        try spawnThread(name: "outpost-loop-\(index)") {
                            LoopRunner(loop: loop, listenFD: fd, shared: shared).run()
                            shared.runningLoops.subtract(1, ordering: .sequentiallyConsistent)
                        }
                    } catch {
                        shared.runningLoops.subtract(1, ordering: .sequentiallyConsistent)
                        throw error
                    }
                    // From here the loop thread owns its listener and closes it.
                    listeners[index] = -1
                }
                state = .running(loops: loops, port: port)
                return port
            } catch {
                for fd in listeners where fd >= 0 { close(fd) }
                for loop in loops { loop.post(.stop) }
                throw error
            }
        }
    }

    /// The executor of the event loop whose thread runs the caller (a handler, or a task
    /// it started with this preference), or nil off the loops. An unstructured task that a
    /// handler starts does not inherit the handler's executor: pass this one
    /// (`Task(executorPreference: HTTPServer.currentEventLoop) { ... }`) to keep its work
    /// on the loop too; nil means the global pool.
    public static var currentEventLoop: (any TaskExecutor)? { EventLoop.current }

    /// The bound port while running (nil before `start()` and after shutdown).
    public var port: Int? {
        state.withLock { state in
            switch state {
            case .running(_, let port), .stopping(let port): port
            default: nil
            }
        }
    }

    /// Connections open now (a gauge for metrics).
    public var openConnections: Int {
        shared.openConnections.load(ordering: .relaxed)
    }

    /// What the connection limits and the header timeout did since `start()` (counters for
    /// metrics; `HTTPServerConfiguration.maxConnections` and `maxConnectionsPerAddress`).
    public struct ConnectionCounts: Sendable, Equatable {
        /// Times an event loop stopped accepting for a moment because `maxConnections` were open.
        public var acceptPauses: Int
        /// Connections over `maxConnectionsPerAddress`, answered `503` and closed.
        public var refusedOverAddressLimit: Int
        /// New connections closed at the header timeout without having sent a byte.
        public var closedSilent: Int
    }

    /// The counts now.
    public var connectionCounts: ConnectionCounts {
        ConnectionCounts(
            acceptPauses: shared.acceptPauses.load(ordering: .relaxed),
            refusedOverAddressLimit: shared.refusedOverAddressLimit.load(ordering: .relaxed),
            closedSilent: shared.closedSilent.load(ordering: .relaxed))
    }

    /// Called once per request after its response was handed to the kernel, or with
    /// status 0 when the connection ended first. Runs on an event-loop thread: keep it
    /// short and non-blocking. Set it before or after `start()`.
    public var onRequestComplete: (@Sendable (HTTPRequestLog) -> Void)? {
        get { shared.onRequestComplete.withLock { $0?.call } }
        set { shared.onRequestComplete.withLock { $0 = newValue.map(CompletionHook.init) } }
    }

    /// Graceful shutdown: stop accepting at once; requests in flight finish (their
    /// responses, and any new request on a kept-alive connection, carry
    /// `Connection: close`) for up to `grace` (default `configuration.shutdownGrace`);
    /// then every connection is closed, running handlers are cancelled and the loop
    /// threads end. Returns when they have. Calling it again, or before `start()`, does nothing.
    public func shutdown(grace: Duration? = nil) async {
        let loops: [EventLoop] = state.withLock { state in
            guard case .running(let loops, let port) = state else { return [] }
            state = .stopping(port: port)
            return loops
        }
        guard !loops.isEmpty else { return }
        for loop in loops { loop.post(.drain) }
        let deadline = ContinuousClock.now + (grace ?? configuration.shutdownGrace)
        while shared.openConnections.load(ordering: .relaxed) > 0 && ContinuousClock.now < deadline {
            await pause(milliseconds: 5)
        }
        for loop in loops { loop.post(.stop) }
        while shared.runningLoops.load(ordering: .sequentiallyConsistent) > 0 {
            await pause(milliseconds: 2)
        }
        state.withLock { $0 = .stopped }
    }
}

/// Sleeps without throwing; in a cancelled task (where `Task.sleep` returns at once)
/// it blocks briefly instead of spinning.
private func pause(milliseconds: Int) async {
    do {
        try await Task.sleep(for: .milliseconds(milliseconds))
    } catch {
        usleep(UInt32(milliseconds) * 1000)
    }
}

/// Carries a thread's body through pthread_create's untyped argument.
private final class ThreadStart: Sendable {
    let name: String
    let body: @Sendable () -> Void
    init(name: String, body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }
}

/// Starts a detached OS thread (event loops are long-lived threads of their own, outside
/// Swift's cooperative pool, because they block in epoll_wait).
private func spawnThread(name: String, _ body: @escaping @Sendable () -> Void) throws {
    let context = Unmanaged.passRetained(ThreadStart(name: name, body: body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { raw in
        let start = Unmanaged<ThreadStart>.fromOpaque(raw!).takeRetainedValue()
        outpost_set_thread_name(String(start.name.prefix(15)))
        start.body()
        return nil
    }, context)
    guard rc == 0 else {
        Unmanaged<ThreadStart>.fromOpaque(context).release()
        throw HTTPServerError(operation: "pthread_create", errno: rc)
    }
    pthread_detach(thread)
}
