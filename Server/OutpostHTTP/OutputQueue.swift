// Bytes and file ranges waiting for a socket, in order.
import Glibc

/// A connection's pending output: byte buffers (small ones coalesced so a head and a
/// small body go out in one write), file ranges sent with sendfile(2), and markers that
/// fire when everything before them was handed to the kernel.
struct OutputQueue {
    enum Segment {
        case bytes([UInt8])
        case file(fd: Int32, offset: Int64, remaining: Int64)
        case marker(HTTPRequestLog, started: Instant)
    }

    enum FlushResult: Equatable {
        /// Everything was written.
        case drained
        /// The socket is full; wait until it has room. `progress`: some bytes went out first.
        case wouldBlock(progress: Bool)
        /// The peer is gone or the file failed: close the connection.
        case failed
    }

    private var segments: [Segment] = []
    private var head = 0
    /// Bytes of `segments[head]` already written.
    private var written = 0
    /// Bytes (and file bytes) not yet written.
    private(set) var pendingBytes = 0

    var isEmpty: Bool { head == segments.count }

    private static let coalesceLimit = 16 * 1024

    mutating func append(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        pendingBytes += bytes.count
        if bytes.count <= OutputQueue.coalesceLimit, segments.count > head,
           case .bytes(var last) = segments[segments.count - 1], last.count < OutputQueue.coalesceLimit {
            segments[segments.count - 1] = .bytes([])  // drop the reference so `last` is unique
            last.append(contentsOf: bytes)
            segments[segments.count - 1] = .bytes(last)
            return
        }
        segments.append(.bytes(bytes))
    }

    mutating func appendFile(fd: Int32, offset: Int64, length: Int64) {
        guard length > 0 else {
            close(fd)
            return
        }
        pendingBytes += Int(length)
        segments.append(.file(fd: fd, offset: offset, remaining: length))
    }

    mutating func appendMarker(_ log: HTTPRequestLog, started: Instant) {
        segments.append(.marker(log, started: started))
    }

    /// Writes as much as the transport takes; `marker` is called for each marker passed.
    mutating func flush<T: ConnectionTransport>(to transport: inout T, marker: (HTTPRequestLog, Instant) -> Void) -> FlushResult {
        var progress = false
        while head < segments.count {
            switch segments[head] {
            case .marker(let log, let started):
                segments[head] = .bytes([])
                head += 1
                marker(log, started)
            case .bytes(let bytes):
                let count = bytes.count - written
                let result = bytes.withUnsafeBytes { raw in
                    transport.write(UnsafeRawBufferPointer(rebasing: raw[written...]))
                }
                guard case .done(let n) = result else { return result == .failed ? .failed : .wouldBlock(progress: progress) }
                pendingBytes -= n
                progress = progress || n > 0
                if n == count {
                    segments[head] = .bytes([])
                    head += 1
                    written = 0
                } else {
                    written += n
                    // A short write means the socket buffer is full.
                    return .wouldBlock(progress: progress)
                }
            case .file(let fd, let offset, let remaining):
                let result = transport.send(file: fd, offset: offset, count: Int(min(remaining, 1 << 30)))
                guard case .done(let n) = result else { return result == .failed ? .failed : .wouldBlock(progress: progress) }
                // Nothing sent: the file shrank under us, and the promised length cannot be sent.
                if n == 0 { return .failed }
                pendingBytes -= n
                progress = true
                if Int64(n) == remaining {
                    close(fd)
                    segments[head] = .bytes([])
                    head += 1
                } else {
                    segments[head] = .file(fd: fd, offset: offset + Int64(n), remaining: remaining - Int64(n))
                }
            }
        }
        segments.removeAll(keepingCapacity: segments.count <= 8)
        head = 0
        written = 0
        return .drained
    }

    /// Closes file descriptors still queued (the connection is going away).
    mutating func discard() {
        for i in head..<segments.count {
            if case .file(let fd, _, _) = segments[i] { close(fd) }
        }
        segments = []
        head = 0
        written = 0
        pendingBytes = 0
    }
}
