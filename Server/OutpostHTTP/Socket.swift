// Thin POSIX socket helpers. Every fd made here is non-blocking and close-on-exec.
import OutpostCLinux
import Glibc

/// A failure starting the server.
public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    /// What failed.
    public var operation: String
    /// `errno` at the time.
    public var errno: Int32

    public var description: String {
        "\(operation) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

enum Socket {
    /// Resolves `host` to a numeric socket address for binding.
    static func resolve(host: String, port: Int) throws -> (family: Int32, address: [UInt8]) {
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host == "localhost" ? "127.0.0.1" : host, String(port), &hints, &result)
        guard rc == 0, let info = result else {
            throw HTTPServerError(operation: "resolve \(host)", errno: rc == EAI_SYSTEM ? Glibc.errno : EINVAL)
        }
        defer { freeaddrinfo(result) }
        let bytes = UnsafeRawBufferPointer(start: info.pointee.ai_addr, count: Int(info.pointee.ai_addrlen))
        return (info.pointee.ai_family, Array(bytes))
    }

    /// A listening socket with `SO_REUSEADDR` and `SO_REUSEPORT`, so that each event loop
    /// has its own and the kernel spreads new connections across them.
    ///
    /// The first socket of a server (`joining: false`) binds *without* `SO_REUSEPORT` and
    /// sets it only once bound: a bind without it fails with `EADDRINUSE` while any socket
    /// holds the port, so a second server on a taken port fails to start instead of
    /// silently taking half of the connections. The other loops' sockets (`joining: true`)
    /// bind with it, into the port the first one holds.
    static func listen(family: Int32, address: [UInt8], backlog: Int32, joining: Bool) throws -> Int32 {
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTPServerError(operation: "socket", errno: errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if joining { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) }
        let bound = address.withUnsafeBytes { raw in
            bind(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
        }
        guard bound == 0 else {
            let e = errno
            close(fd)
            throw HTTPServerError(operation: "bind", errno: e)
        }
        if !joining { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) }
        guard Glibc.listen(fd, backlog) == 0 else {
            let e = errno
            close(fd)
            throw HTTPServerError(operation: "listen", errno: e)
        }
        return fd
    }

    /// The port a socket is bound to.
    static func localPort(_ fd: Int32) -> Int {
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return port(of: storage)
    }

    static func port(of storage: sockaddr_storage) -> Int {
        var storage = storage
        let family = Int32(storage.ss_family)
        return withUnsafePointer(to: &storage) { p -> Int in
            if family == AF_INET6 {
                return p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            }
            return p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
        }
    }

    /// `ip:port` (`[ip]:port` for IPv6) of a peer address.
    static func describe(_ storage: sockaddr_storage) -> String {
        var storage = storage
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let family = Int32(storage.ss_family)
        let port = port(of: storage)
        withUnsafePointer(to: &storage) { p in
            if family == AF_INET6 {
                p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { a in
                    var addr = a.pointee.sin6_addr
                    _ = inet_ntop(AF_INET6, &addr, &text, socklen_t(text.count))
                }
            } else {
                p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { a in
                    var addr = a.pointee.sin_addr
                    _ = inet_ntop(AF_INET, &addr, &text, socklen_t(text.count))
                }
            }
        }
        let ip = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return family == AF_INET6 ? "[\(ip)]:\(port)" : "\(ip):\(port)"
    }

    /// Raises the soft open-file limit to the hard limit: each connection is an fd.
    static func raiseOpenFileLimit() {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(resource, &limit)
    }
}
