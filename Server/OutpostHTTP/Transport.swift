// Where a connection's bytes come from and go to: its socket on an event loop, or in the
// engine's tests a pair of buffers (as swift-nio's EmbeddedChannel stands in for a socket).
import OutpostCLinux
import Glibc

/// The outcome of one transfer.
enum TransportResult: Equatable {
    /// This many bytes moved (0 from `read`: the client shut its side).
    case done(Int)
    /// Nothing can move now; wait for the interest to be reported.
    case wouldBlock
    /// The connection is broken.
    case failed
}

/// A connection's byte stream. `Connection` calls it only from its loop's thread.
protocol ConnectionTransport {
    /// Reads what has arrived into `buffer`.
    mutating func read(into buffer: UnsafeMutableRawBufferPointer) -> TransportResult
    /// Writes from `bytes` as much as fits.
    mutating func write(_ bytes: UnsafeRawBufferPointer) -> TransportResult
    /// Sends up to `count` bytes of the open file `file` from `offset` (0 moved: the file
    /// is shorter than that).
    mutating func send(file: Int32, offset: Int64, count: Int) -> TransportResult
    /// Asks to be woken for what `interest` names (and always for errors).
    mutating func watch(_ interest: ConnectionInterest)
    /// Sends FIN: nothing more will be written.
    mutating func shutdownWrite()
    /// Closes the connection.
    mutating func close()
}

/// A TCP connection registered with its loop's epoll.
struct SocketTransport: ConnectionTransport {
    let fd: Int32
    let epollFD: Int32
    let token: UInt64

    /// epoll's events for `interest`.
    static func events(_ interest: ConnectionInterest) -> UInt32 {
        var events: UInt32 = 0
        if interest.contains(.read) { events |= EPOLLIN.rawValue }
        if interest.contains(.write) { events |= EPOLLOUT.rawValue }
        if interest.contains(.hangUp) { events |= EPOLLRDHUP.rawValue }
        return events
    }

    /// Adds the socket to the loop's epoll with `interest`.
    func register(_ interest: ConnectionInterest) {
        control(EPOLL_CTL_ADD, interest)
    }

    func watch(_ interest: ConnectionInterest) {
        control(EPOLL_CTL_MOD, interest)
    }

    private func control(_ operation: Int32, _ interest: ConnectionInterest) {
        var event = epoll_event()
        event.events = Self.events(interest)
        event.data.u64 = token
        _ = epoll_ctl(epollFD, operation, fd, &event)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> TransportResult {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 { return .done(n) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed
            }
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> TransportResult {
        while true {
            let n = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .done(n) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed
            }
        }
    }

    func send(file: Int32, offset: Int64, count: Int) -> TransportResult {
        while true {
            var off = off_t(offset)
            let n = sendfile(fd, file, &off, count)
            if n >= 0 { return .done(n) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed
            }
        }
    }

    func shutdownWrite() {
        Glibc.shutdown(fd, Int32(SHUT_WR))
    }

    func close() {
        Glibc.close(fd)
    }
}
