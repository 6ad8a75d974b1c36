// One epoll event loop per thread. Connections live on exactly one loop and are touched
// only by its thread; handler tasks run on that thread too (the loop is their task
// executor), and other threads talk to a loop by posting messages and jobs.
import OutpostCLinux
import Dispatch
import Glibc
import Synchronization

typealias ConnectionID = UInt64

/// What handler tasks and the server tell a loop.
enum LoopMessage: Sendable {
    /// A pre-body check finished (nil: passed).
    case checkDone(ConnectionID, serial: Int, error: HTTPError?)
    /// A handler's response is ready.
    case response(ConnectionID, serial: Int, PreparedResponse)
    /// A streamed body's writer has data (or finished).
    case streamReady(ConnectionID)
    /// Stop accepting; finish current requests with `Connection: close`.
    case drain
    /// Close everything and end the thread.
    case stop

    /// Frees resources of a message that will not be handled.
    func release() {
        if case .response(_, _, let prepared) = self { prepared.release() }
    }
}

/// State every loop shares with the server.
final class ServerShared: Sendable {
    let configuration: HTTPServerConfiguration
    let router: Router
    let openConnections = Atomic<Int>(0)
    let runningLoops = Atomic<Int>(0)
    /// Open connections by client address (only with a per-address limit).
    let connectionsByAddress = Mutex<[ClientAddress: Int]>([:])
    /// Times a loop stopped accepting because `maxConnections` were open.
    let acceptPauses = Atomic<Int>(0)
    /// Connections over `maxConnectionsPerAddress`, answered `503` and closed.
    let refusedOverAddressLimit = Atomic<Int>(0)
    /// New connections closed at the header timeout without having sent a byte.
    let closedSilent = Atomic<Int>(0)
    /// The completion hook, boxed: a bare closure in a Mutex is re-wrapped in a
    /// reabstraction thunk on every `withLock` (the inout access writes it back), so the
    /// chain grew with each request until the stack overflowed. A class reference is
    /// read as is.
    let onRequestComplete = Mutex<CompletionHook?>(nil)

    init(configuration: HTTPServerConfiguration, router: Router) {
        self.configuration = configuration
        self.router = router
    }

    /// The hook now (loop threads read it for every finished request).
    func completionHook() -> CompletionHook? {
        onRequestComplete.withLock { $0 }
    }

    /// Counts a new connection from `address`; false when that puts the address over its limit.
    func admit(_ address: ClientAddress) -> Bool {
        let open = connectionsByAddress.withLock { counts -> Int in
            let n = counts[address, default: 0] + 1
            counts[address] = n
            return n
        }
        return open <= configuration.maxConnectionsPerAddress
    }

    /// A connection `admit` counted has closed.
    func release(_ address: ClientAddress) {
        connectionsByAddress.withLock { counts in
            let n = counts[address, default: 1] - 1
            counts[address] = n > 0 ? n : nil
        }
    }
}

/// A client's address as the per-address limit counts it: an IPv4 address (also when it
/// reaches an IPv6 listener as `::ffff:a.b.c.d`), or the /64 prefix of an IPv6 one.
struct ClientAddress: Hashable, Sendable {
    var high: UInt64
    var low: UInt64

    init(_ storage: sockaddr_storage) {
        var storage = storage
        var bytes = [UInt8](repeating: 0, count: 16)
        withUnsafePointer(to: &storage) { p in
            if Int32(p.pointee.ss_family) == AF_INET6 {
                p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { a in
                    withUnsafeBytes(of: a.pointee.sin6_addr) { for i in 0..<16 { bytes[i] = $0[i] } }
                }
            } else {
                // As ::ffff:a.b.c.d, so both forms of one IPv4 client count together.
                p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { a in
                    bytes[10] = 0xFF
                    bytes[11] = 0xFF
                    withUnsafeBytes(of: a.pointee.sin_addr) { for i in 0..<4 { bytes[12 + i] = $0[i] } }
                }
            }
        }
        high = bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
        low = bytes[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
        let mapped = high == 0 && low >> 32 == 0xFFFF
        if !mapped { low = 0 }
    }
}

/// Holds the request-completion callback.
final class CompletionHook: Sendable {
    let call: @Sendable (HTTPRequestLog) -> Void
    init(_ call: @escaping @Sendable (HTTPRequestLog) -> Void) { self.call = call }
}

/// The thread-safe face of a loop: its epoll and wake-up fds, its inbox, and the task
/// executor that runs handler tasks on the loop's thread.
///
/// As swift-nio runs a channel's handlers on its event loop, a request's handler task is
/// created with this loop as its executor preference (SE-0417), so it runs here, between
/// epoll rounds, and never waits for Swift's cooperative pool (which other work in the
/// process, such as a test suite's CPU-bound tests, may hold). Under that preference the
/// task's nonisolated code, the default actors it calls, its child tasks (`async let`,
/// task groups) and every continuation resumed from another thread run here too; an
/// unstructured `Task {}` does not inherit it (`HTTPServer.currentEventLoop` gives the
/// executor to pass on). A job enqueued from the loop's own thread is queued with no
/// system call; from another thread, one eventfd write wakes the loop per batch.
final class EventLoop: TaskExecutor, Sendable {
    struct Inbox {
        var messages: [LoopMessage] = []
        var jobs: [UnownedJob] = []
        var wakePending = false
        var closed = false

        var isEmpty: Bool { messages.isEmpty && jobs.isEmpty }
    }

    let epollFD: Int32
    let wakeFD: Int32
    private let inbox = Mutex(Inbox())

    init() throws {
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw HTTPServerError(operation: "epoll_create1", errno: errno) }
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard wakeFD >= 0 else {
            let e = errno
            Glibc.close(epollFD)
            throw HTTPServerError(operation: "eventfd", errno: e)
        }
    }

    // MARK: The loop's thread

    /// Holds, on each loop thread, the loop that thread runs (unretained: the runner keeps
    /// it alive for as long as the thread runs).
    private static let threadKey: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "pthread_key_create failed")
        return key
    }()

    /// Marks the calling thread as this loop's (the runner, when its thread starts).
    func adoptCurrentThread() {
        pthread_setspecific(Self.threadKey, Unmanaged.passUnretained(self).toOpaque())
    }

    /// The loop whose thread is running the caller, or nil on any other thread.
    static var current: EventLoop? {
        guard let raw = pthread_getspecific(threadKey) else { return nil }
        return Unmanaged<EventLoop>.fromOpaque(raw).takeUnretainedValue()
    }

    /// True on this loop's own thread.
    var inLoop: Bool { pthread_getspecific(Self.threadKey) == Unmanaged.passUnretained(self).toOpaque() }

    // MARK: Inbox

    /// Queues a message for the loop thread; from another thread, wakes it (one eventfd
    /// write per batch).
    func post(_ message: LoopMessage) {
        if !add({ $0.messages.append(message) }) { message.release() }
    }

    /// Queues messages in order, with one wake-up for all of them.
    func post(contentsOf messages: [LoopMessage]) {
        if !add({ $0.messages.append(contentsOf: messages) }) { for m in messages { m.release() } }
    }

    /// Runs a job of a task that prefers this executor: queued for the loop thread, or,
    /// once the loop has stopped, on a Dispatch thread (a job must never be dropped: its
    /// task, a cancelled handler finishing, would never end).
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        if !add({ $0.jobs.append(job) }) { runElsewhere(job) }
    }

    /// Puts something in the inbox under its lock and, from another thread, wakes the loop.
    /// False once the loop has stopped.
    private func add(_ put: (inout Inbox) -> Void) -> Bool {
        let local = inLoop
        return inbox.withLock { box in
            if box.closed { return false }
            put(&box)
            if !local { wake(&box) }
            return true
        }
    }

    private func runElsewhere(_ job: UnownedJob) {
        DispatchQueue.global().async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Written under the inbox's lock so the loop cannot close the fd in between.
    private func wake(_ box: inout Inbox) {
        guard !box.wakePending else { return }
        box.wakePending = true
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Consumes the eventfd's wake-up (loop thread, when epoll reports it).
    func consumeWakeUp() {
        var drained: UInt64 = 0
        _ = read(wakeFD, &drained, 8)
    }

    /// Takes the queued jobs and messages (loop thread).
    func takeWork() -> (jobs: [UnownedJob], messages: [LoopMessage]) {
        inbox.withLock { box in
            box.wakePending = false
            defer {
                box.jobs = []
                box.messages = []
            }
            return (box.jobs, box.messages)
        }
    }

    /// True when jobs or messages wait (loop thread, before it blocks in epoll_wait).
    var hasWork: Bool { inbox.withLock { !$0.isEmpty } }

    /// Refuses further messages, sends further jobs elsewhere, and closes the fds (loop
    /// thread, at exit). Jobs still queued run elsewhere.
    func close() {
        let (messages, jobs) = inbox.withLock { box in
            box.closed = true
            defer {
                box.messages = []
                box.jobs = []
            }
            Glibc.close(wakeFD)
            return (box.messages, box.jobs)
        }
        for m in messages { m.release() }
        for job in jobs { runElsewhere(job) }
        Glibc.close(epollFD)
    }
}

/// A min-heap of connection deadlines. Entries are never removed early: a popped entry
/// that no longer matches the connection's scheduled deadline is ignored.
struct TimerHeap {
    private struct Entry: Comparable {
        var deadline: Instant
        var id: ConnectionID
        static func < (a: Entry, b: Entry) -> Bool { a.deadline < b.deadline }
    }

    private var heap = Heap<Entry>()

    var isEmpty: Bool { heap.isEmpty }
    var first: Instant? { heap.first?.deadline }
    var count: Int { heap.count }

    mutating func push(_ deadline: Instant, _ id: ConnectionID) {
        heap.push(Entry(deadline: deadline, id: id))
    }

    mutating func pop() -> (deadline: Instant, id: ConnectionID)? {
        heap.pop().map { ($0.deadline, $0.id) }
    }
}

private let listenerToken: UInt64 = 0
private let wakeToken: UInt64 = 1

/// The loop thread's own state. Created on, and only ever used from, its thread.
final class LoopRunner {
    let loop: EventLoop
    let shared: ServerShared
    let configuration: HTTPServerConfiguration
    let timeouts: ConnectionTimeouts
    let parserLimits: HTTPParserLimits
    private var listenFD: Int32
    private var listenerPausedUntil: Instant?
    private var connections: [ConnectionID: Connection] = [:]
    private var nextID: ConnectionID = 2
    private var timers = TimerHeap()
    private var running = true
    private(set) var draining = false
    /// The monotonic clock (`Instant.now`; a test's own clock in the engine's tests).
    let clock: () -> Instant
    /// The loop's time, read from `clock` once per wake-up.
    private(set) var now: Instant
    var dateCache = DateCache()
    var requestIDs = RequestIDGenerator()
    /// The completion hook as of this wake-up: read once per epoll round instead of
    /// twice per request, so the loops do not contend on its lock.
    private(set) var hook: CompletionHook?
    /// Scratch space for reads; connections keep only bytes they have not parsed.
    var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)

    /// A runner for `loop`, accepting on `listenFD` (-1: none; connections are adopted).
    init(loop: EventLoop, listenFD: Int32, shared: ServerShared, clock: @escaping () -> Instant = Instant.now) {
        self.loop = loop
        self.listenFD = listenFD
        self.shared = shared
        self.clock = clock
        self.now = clock()
        self.configuration = shared.configuration
        self.timeouts = ConnectionTimeouts(shared.configuration)
        self.parserLimits = HTTPParserLimits(shared.configuration)
    }

    func run() {
        loop.adoptCurrentThread()
        register(fd: loop.wakeFD, events: EPOLLIN.rawValue, token: wakeToken)
        register(fd: listenFD, events: EPOLLIN.rawValue, token: listenerToken)
        let maxEvents = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: maxEvents)
        defer { events.deallocate() }
        while running {
            // Work queued by the last round (a job that queued another, say) must not wait.
            let timeout = loop.hasWork ? 0 : waitTimeoutMillis()
            let n = epoll_wait(loop.epollFD, events, Int32(maxEvents), timeout)
            readClock()
            hook = shared.completionHook()
            if n < 0 {
                if errno == EINTR { continue }
                fatalError("epoll_wait failed: \(String(cString: strerror(errno)))")
            }
            for i in 0..<Int(n) {
                let event = events[i]
                switch event.data.u64 {
                case wakeToken: loop.consumeWakeUp()
                case listenerToken: acceptConnections()
                default: handle(events: event.events, for: event.data.u64)
                }
            }
            fireTimers()
            runQueuedWork()
        }
        for connection in Array(connections.values) { connection.closeNow() }
        if listenFD >= 0 { close(listenFD) }
        loop.close()
    }

    /// Reads the clock: the loop's time for what follows.
    func readClock() {
        now = clock()
    }

    /// Hands what epoll reported for a connection's socket to the connection.
    func handle(events: UInt32, for id: ConnectionID) {
        var ready: ConnectionInterest = []
        if events & EPOLLIN.rawValue != 0 { ready.insert(.read) }
        if events & EPOLLOUT.rawValue != 0 { ready.insert(.write) }
        if events & EPOLLRDHUP.rawValue != 0 { ready.insert(.hangUp) }
        handle(ready, error: events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0, for: id)
    }

    /// Tells a connection what its transport is ready for (`error`: it failed).
    func handle(_ ready: ConnectionInterest, error: Bool, for id: ConnectionID) {
        guard let connection = connections[id] else { return }
        connection.handle(ready, error: error)
        if !connection.isClosed { schedule(connection) }
    }

    /// Runs the jobs of handler tasks and handles the messages queued for this loop. The
    /// responses those jobs post are handled in the same round; a few rounds at most, so
    /// tasks that keep queueing work cannot starve the sockets.
    func runQueuedWork() {
        for _ in 0..<4 {
            let (jobs, messages) = loop.takeWork()
            if jobs.isEmpty && messages.isEmpty { return }
            let executor = loop.asUnownedTaskExecutor()
            for job in jobs { job.runSynchronously(on: executor) }
            if !jobs.isEmpty { readClock() }
            handle(messages)
        }
    }

    private func waitTimeoutMillis() -> Int32 {
        var deadline = timers.first
        if let paused = listenerPausedUntil { deadline = deadline.map { min($0, paused) } ?? paused }
        guard let deadline else { return -1 }
        let ns = deadline.nanoseconds - clock().nanoseconds
        if ns <= 0 { return 0 }
        return Int32(min((ns + 999_999) / 1_000_000, 60_000))
    }

    // MARK: epoll registration

    func register(fd: Int32, events: UInt32, token: UInt64) {
        var ev = epoll_event()
        ev.events = events
        ev.data.u64 = token
        _ = epoll_ctl(loop.epollFD, EPOLL_CTL_ADD, fd, &ev)
    }

    // MARK: Accepting

    private func acceptConnections() {
        guard listenFD >= 0, !draining else { return }
        let limit = configuration.maxConnections
        for _ in 0..<128 {
            // A slot is taken before accepting, so loops racing for the last one cannot
            // pass the limit together.
            let open = shared.openConnections.add(1, ordering: .relaxed).newValue
            if limit > 0 && open > limit {
                shared.openConnections.subtract(1, ordering: .relaxed)
                shared.acceptPauses.add(1, ordering: .relaxed)
                pauseAccepting()
                return
            }
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    outpost_accept4(listenFD, $0, &length, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
                }
            }
            if fd < 0 {
                let failure = errno
                shared.openConnections.subtract(1, ordering: .relaxed)
                switch failure {
                case EAGAIN, EWOULDBLOCK: return
                case EINTR, ECONNABORTED, EPROTO: continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Out of descriptors: pending clients wait in the backlog.
                    pauseAccepting()
                    return
                default: return
                }
            }
            var one: Int32 = 1
            // Responses are written whole; Nagle would only delay the last segment.
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let id = nextConnectionID()
            var address: ClientAddress?
            var overAddressLimit = false
            if configuration.maxConnectionsPerAddress > 0 {
                let key = ClientAddress(storage)
                address = key
                overAddressLimit = !shared.admit(key)
                if overAddressLimit { shared.refusedOverAddressLimit.add(1, ordering: .relaxed) }
            }
            let transport = SocketTransport(fd: fd, epollFD: loop.epollFD, token: id)
            let connection = adopt(transport, id: id, remoteAddress: Socket.describe(storage), clientAddress: address, overAddressLimit: overAddressLimit)
            transport.register(connection.interest)
        }
    }

    /// Takes on a connection accepted on `transport`.
    func adopt(_ transport: any ConnectionTransport, id: ConnectionID, remoteAddress: String, clientAddress: ClientAddress? = nil, overAddressLimit: Bool = false) -> Connection {
        let connection = Connection(
            id: id, transport: transport, remoteAddress: remoteAddress, clientAddress: clientAddress,
            overAddressLimit: overAddressLimit, runner: self)
        connections[id] = connection
        schedule(connection)
        return connection
    }

    /// An id for a connection `adopt` will take on.
    func nextConnectionID() -> ConnectionID {
        defer { nextID += 1 }
        return nextID
    }

    /// Stops polling the listener for 100 ms (it stays readable, so polling would spin):
    /// pending clients wait in the kernel's backlog meanwhile.
    private func pauseAccepting() {
        _ = epoll_ctl(loop.epollFD, EPOLL_CTL_DEL, listenFD, nil)
        listenerPausedUntil = now + .milliseconds(100)
    }

    // MARK: Messages

    private func handle(_ messages: [LoopMessage]) {
        for message in messages {
            switch message {
            case .checkDone(let id, let serial, let error):
                if let c = connections[id] {
                    c.checkFinished(serial: serial, error: error)
                    if !c.isClosed { schedule(c) }
                }
            case .response(let id, let serial, let prepared):
                if let c = connections[id] {
                    c.deliver(serial: serial, prepared)
                    if !c.isClosed { schedule(c) }
                } else {
                    prepared.release()
                }
            case .streamReady(let id):
                if let c = connections[id] {
                    c.streamReady()
                    if !c.isClosed { schedule(c) }
                }
            case .drain:
                beginDraining()
            case .stop:
                running = false
            }
        }
    }

    private func beginDraining() {
        guard !draining else { return }
        draining = true
        if listenFD >= 0 {
            _ = epoll_ctl(loop.epollFD, EPOLL_CTL_DEL, listenFD, nil)
            close(listenFD)
            listenFD = -1
        }
        listenerPausedUntil = nil
        for connection in Array(connections.values) {
            connection.beginDraining()
            if !connection.isClosed { schedule(connection) }
        }
    }

    // MARK: Timers

    /// Makes sure a timer fires no later than the connection's next deadline.
    func schedule(_ connection: Connection) {
        guard let deadline = connection.machine.nextDeadline() else { return }
        if let scheduled = connection.scheduledDeadline, scheduled <= deadline, scheduled >= now { return }
        connection.scheduledDeadline = deadline
        timers.push(deadline, connection.id)
    }

    /// Closes connections whose deadlines have passed (and resumes accepting after a pause).
    func fireTimers() {
        if let paused = listenerPausedUntil, paused <= now {
            listenerPausedUntil = nil
            if listenFD >= 0 { register(fd: listenFD, events: EPOLLIN.rawValue, token: listenerToken) }
        }
        while let first = timers.first, first <= now {
            let (deadline, id) = timers.pop()!
            guard let connection = connections[id], connection.scheduledDeadline == deadline else { continue }
            connection.scheduledDeadline = nil
            connection.timerFired()
            if !connection.isClosed { schedule(connection) }
        }
    }

    // MARK: Connection bookkeeping

    func removed(_ connection: Connection) {
        connections[connection.id] = nil
        if let address = connection.clientAddress { shared.release(address) }
        shared.openConnections.subtract(1, ordering: .relaxed)
    }

    func report(_ log: HTTPRequestLog) {
        hook?.call(log)
    }

    var hasCompletionHook: Bool { hook != nil }
}
