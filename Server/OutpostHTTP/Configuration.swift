// Every limit and timeout of the engine, in one place (docs/protocol.md section 2).

/// The server's address, threads, limits and timeouts. Defaults follow docs/protocol.md
/// section 2; tests shorten the timeouts.
public struct HTTPServerConfiguration: Sendable {
    /// Address to bind: an IPv4 or IPv6 literal, or `localhost`. Default `127.0.0.1`.
    public var host: String = "127.0.0.1"
    /// Port to bind; 0 picks a free one (read it back from `HTTPServer.port`).
    public var port: Int = 8080
    /// Event-loop threads, each with its own `SO_REUSEPORT` listener and epoll set.
    /// Default: one per core.
    public var eventLoopCount: Int = HTTPServerConfiguration.coreCount
    /// `listen(2)` backlog.
    public var backlog: Int32 = 4096

    // MARK: Connection limits

    /// Most connections open at once in the process. At the limit the listeners stop
    /// accepting (for 100 ms at a time): new connections wait in the kernel's backlog and
    /// are served as soon as one closes, instead of being accepted and dropped. 0: no limit.
    public var maxConnections: Int = 16_384
    /// Most connections open at once from one client address (an IPv6 client counts by its
    /// /64, what one host is given). A connection over it is accepted, and its first
    /// request head is answered `503 unavailable` with `Retry-After` and `Connection: close`.
    /// Behind a reverse proxy every connection comes from the proxy's address. 0: no limit.
    public var maxConnectionsPerAddress: Int = 1024

    // MARK: Size limits

    /// Longest request line (method, target, version) before `414`.
    public var maxRequestLineBytes: Int = 8 * 1024
    /// Most bytes of header fields in all (and of trailer fields) before `431`.
    public var maxHeaderBytes: Int = 16 * 1024
    /// Most header fields before `431`.
    public var maxHeaderCount: Int = 128
    /// Body limit of routes registered without their own.
    public var defaultBodyLimit: Int = 8 * 1024 * 1024
    /// Longest chunk-size line with extensions in a chunked body before `400`.
    public var maxChunkLineBytes: Int = 4 * 1024
    /// Bytes kept of pipelined requests that follow the one being served; reading pauses
    /// above this until the earlier request is answered.
    public var maxPipelineBufferBytes: Int = 64 * 1024

    // MARK: Timeouts (docs/protocol.md section 2: 10 s for headers, a minimum rate for bodies)

    /// A request's head must be complete this long after its first byte, else `408` and close.
    public var headerTimeout: Duration = .seconds(10)
    /// A keep-alive connection with no request in progress is closed (without a response,
    /// RFC 9112 section 9.5) after this long. A new connection that has sent nothing is
    /// closed the same way after `headerTimeout` (when shorter): a socket that connects and
    /// stays silent holds a slot no longer than a slow head would.
    public var idleTimeout: Duration = .seconds(75)
    /// The body makes no progress for this long: `408` and close.
    public var bodyTimeout: Duration = .seconds(10)
    /// After `bodyTimeout` has passed since the body started, its average rate must stay
    /// at least this many bytes per second, else `408` and close. 0 turns the rate check off.
    public var minBodyBytesPerSecond: Int = 1024
    /// A response that makes no write progress (the client does not read) for this long
    /// closes the connection.
    public var sendTimeout: Duration = .seconds(60)
    /// After answering an error before the body was read, the server reads and discards
    /// the rest for at most this long, then closes (so the client reads the answer
    /// instead of a reset).
    public var discardTimeout: Duration = .seconds(1)
    /// ...and at most this many bytes.
    public var discardLimit: Int = 1024 * 1024

    // MARK: Responses

    /// Bodies larger than this are gzip-compressed when the client accepts gzip.
    public var compressionThreshold: Int = 1024
    /// gzip level for responses (1 fast ... 9 small).
    public var compressionLevel: Int32 = 6
    /// A streamed body's writer suspends while more than this many bytes are queued.
    public var streamHighWater: Int = 256 * 1024
    /// Default grace `shutdown()` gives in-flight requests.
    public var shutdownGrace: Duration = .seconds(10)

    /// The defaults.
    public init() {}

    /// The defaults with another host and port.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Online processors (at least 1).
    public static var coreCount: Int {
        max(1, Int(sysconfNumberOfProcessors()))
    }
}

#if canImport(Glibc)
import Glibc
private func sysconfNumberOfProcessors() -> Int { sysconf(Int32(_SC_NPROCESSORS_ONLN)) }
#else
import Darwin
private func sysconfNumberOfProcessors() -> Int { sysconf(_SC_NPROCESSORS_ONLN) }
#endif
