// The long-poll wake-up of `outpost-bench pull --waiters N` and `outpost-bench longpoll`:
// N pulls held open with `wait=60000` on N keep-alive connections to one `outpost-server`,
// then one commit; the time from sending that push to each held pull's answer arriving.
//
// A fleet (docs/deploying.md, "A fleet of waiting devices"): the connections come from
// several loopback source addresses (127.0.0.2, .3, …; each has its own ~28,000 ephemeral
// ports), the server is started with `--max-connections` and
// `--max-connections-per-address` sized for them, and the client side is raw sockets read
// by a few epoll threads (no task, no buffer per connection), so that it costs little
// beside the server on the same cores. The server's RSS is read before the connections
// open, with every pull waiting, and at its peak while they are answered.
import Foundation
import OutpostCLinux
import Glibc
import OutpostCore
import OutpostServer
import Synchronization

enum LongPollBench {
    /// Connections per source address: well within its ephemeral ports (32768-60999 by default).
    static let perAddress = 20_000
    /// Descriptors each process keeps for other uses (the server's store, listeners, logs).
    static let reserve = 100

    /// How many source addresses `waiters` connections need.
    static func addresses(for waiters: Int) -> Int { max(1, (waiters + perAddress - 1) / perAddress) }

    /// The server's settings for a fleet of `waiters`: the process cap above it, the
    /// per-address cap above each source address's share (issue 33's defaults, 16384 and
    /// 1024, would refuse most of them).
    static func serverArguments(waiters: Int) -> [String] {
        let share = (waiters + addresses(for: waiters) - 1) / addresses(for: waiters)
        return ["--max-connections", String(waiters + 1024), "--max-connections-per-address", String(max(1024, share + 64))]
    }

    /// The most connections one process may hold here: the open-file limit's hard value,
    /// which the bench and the server raise their soft limit to, less a reserve.
    static func capacity() -> (connections: Int, hardLimit: Int) {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (0, 0) }
        let hard = Int(clamping: limit.rlim_max)
        return (hard - reserve, hard)
    }

    /// `waiters`, or the most this machine's open-file limit allows, said out loud.
    static func feasible(_ waiters: Int) -> Int {
        let (connections, hard) = capacity()
        guard waiters > connections else { return waiters }
        print("""
            NOTE: \(waiters) waiting pulls need \(waiters) descriptors in the server and in this client, but the open-file \
            limit here is \(hard) (hard; raising it needs CAP_SYS_RESOURCE or a higher limit from the system: docs/deploying.md, \
            "A fleet of waiting devices"). Running \(connections) instead.
            """)
        return connections
    }

    /// Opens `count` connections to `port`, from 127.0.0.2 on, `perAddress` per address,
    /// on `threads` threads at once, and sends `first` on each as soon as it is open (a
    /// connection that stays silent is closed at the server's header timeout).
    static func openFleet(port: Int, count: Int, first: [UInt8], threads: Int = 4) throws -> [Int32] {
        let addresses = addresses(for: count)
        let sockets = Mutex([Int32](repeating: -1, count: count))
        let failure = Mutex<String?>(nil)
        let group = DispatchGroup()
        for t in 0..<threads {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                for i in stride(from: t, to: count, by: threads) {
                    do {
                        let fd = try HTTPBench.connectTo(port: port, from: "127.0.0.\(2 + i % addresses)")
                        sockets.withLock { $0[i] = fd }
                        try send(first, on: fd)
                    } catch {
                        failure.withLock { $0 = $0 ?? "connection \(i): \(error)" }
                        return
                    }
                }
            }
        }
        group.wait()
        let fds = sockets.withLock { $0 }
        if let f = failure.withLock({ $0 }) {
            for fd in fds where fd >= 0 { close(fd) }
            throw HTTPBench.BenchError(f)
        }
        return fds
    }

    static func send(_ bytes: [UInt8], on fd: Int32) throws {
        guard bytes.withUnsafeBytes({ Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == bytes.count else {
            throw HTTPBench.BenchError("sending a pull failed: errno \(errno)")
        }
    }

    /// The cursor at the end of `space`.
    static func end(of space: String, epoch: String, control: BenchConnection, token: String) throws -> String {
        var since = "\(epoch).0"
        while true {
            let (_, b) = try control.exchange(method: "GET", path: "/v1/spaces/\(space)/pull?limit=5000&since=\(since)", token: token, body: nil)
            since = SyncBench.field("next", in: b) ?? since
            if !SyncBench.hasMore(b) { return since }
        }
    }

    static func pullRequest(space: String, since: String, token: String) -> [UInt8] {
        Array("GET /v1/spaces/\(space)/pull?wait=60000&since=\(since) HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer \(token)\r\n\r\n".utf8)
    }

    /// `waiters` pulls held open with `wait=60000`; one push; the time from sending the push
    /// to each pull's answer arriving (stamped when epoll reports it readable, on
    /// `threads` threads, so reading one answer does not delay the stamp of the next).
    /// `rounds` commits. A round's push is sent only once the server's
    /// `outpost_long_polls_waiting` gauge shows every pull waiting, so no pull is still on
    /// its first read.
    static func run(port: Int, token: String, waiters: Int, epoch: String, serverPID: Int32, space: String,
                    rounds: Int = 5, threads: Int = 2, perf: PerfControl? = nil) throws {
        let control = try BenchConnection(port: port)
        let admin = benchToken(secret: SyncBench.secret, sub: "bench-admin", admin: true)
        let rssBefore = MemorySampler.read(pid: serverPID).rss
        let opened = Date()
        let connections = try openFleet(port: port, count: waiters,
                                        first: pullRequest(space: space, since: try end(of: space, epoch: epoch, control: control, token: token), token: token))
        defer { for fd in connections { close(fd) } }
        let openSeconds = Date().timeIntervalSince(opened)
        let sampler = MemorySampler(pid: serverPID)
        sampler.begin()
        var rssWaiting = 0
        var lat: [Double] = []
        var perRound: [(p50: Double, p99: Double, max: Double)] = []
        var wakeCPU = 0.0
        for round in 0..<rounds {
            if round > 0 {
                // The next pulls, from the end of the space (the first round's went out as the connections opened).
                let pull = pullRequest(space: space, since: try end(of: space, epoch: epoch, control: control, token: token), token: token)
                for fd in connections { try send(pull, on: fd) }
            }
            try waitUntilWaiting(waiters, control: control, admin: admin, within: 30 + Double(waiters) / 2_000)
            if round == 0 { rssWaiting = MemorySampler.read(pid: serverPID).rss }
            // Let the loops settle after the burst of first reads.
            usleep(200_000)
            let (these, cpu) = try wake(connections, round: round, control: control, token: token, space: space,
                                        serverPID: serverPID, threads: threads, perf: perf)
            wakeCPU += cpu
            perRound.append((these[these.count / 2], these[these.count * 99 / 100], these.last!))
            lat += these
        }
        let peak = sampler.end()
        lat.sort()
        let mb = { (bytes: Int) in Double(bytes) / 1e6 }
        print(String(format: "long-poll wake-up, %d waiting pulls x %d commits: p50 %.1f ms, p99 %.1f ms, max %.1f ms (server CPU %.0f us per woken pull; load average %@)",
                     waiters, rounds, lat[lat.count / 2] * 1000, lat[lat.count * 99 / 100] * 1000, lat.last! * 1000, wakeCPU / Double(lat.count) * 1e6, HTTPBench.loadAverage()))
        print("  rounds (p50 / p99 / max ms): " + perRound.map { String(format: "%.1f / %.1f / %.1f", $0.p50 * 1000, $0.p99 * 1000, $0.max * 1000) }.joined(separator: "; "))
        print(String(format: "  server RSS: %.1f MB before the %d connections (from %d source addresses, opened in %.1f s), %.1f MB with every pull waiting, peak %.1f MB: growth %.1f MB (%.0f bytes per waiting pull)",
                     mb(rssBefore), waiters, addresses(for: waiters), openSeconds, mb(rssWaiting), mb(max(peak.rss, rssWaiting)),
                     mb(max(peak.rss, rssWaiting) - rssBefore), Double(max(peak.rss, rssWaiting) - rssBefore) / Double(waiters)))
    }

    /// One round's wake-up, every pull already waiting: readers on `threads` threads (each
    /// stamps its share of `connections` as epoll reports them), then the push of one
    /// change on `control`; each answer's arrival in seconds from just before
    /// the push, sorted, and the server's CPU time from the push to the last answer.
    static func wake(_ connections: [Int32], round: Int, control: BenchConnection, token: String, space: String,
                     serverPID: Int32, threads: Int, perf: PerfControl?) throws -> ([Double], Double) {
        let stamps = Mutex<[Double]>([])
        let failure = Mutex<String?>(nil)
        let group = DispatchGroup()
        let t0 = Date()
        for t in 0..<threads {
            let mine = Owned(stride(from: t, to: connections.count, by: threads).map { connections[$0] })
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                // One-shot registrations report each socket once, without a removal
                // call per answer; answers are read straight from the socket and checked
                // by their bytes (status 200, the whole Content-Length), so the client's
                // share of the cores stays small.
                let mine = mine.value
                let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
                defer { close(ep) }
                for (i, fd) in mine.enumerated() {
                    var ev = epoll_event()
                    ev.events = EPOLLIN.rawValue | EPOLLONESHOT.rawValue
                    ev.data.u64 = UInt64(i)
                    _ = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)
                }
                var events = [epoll_event](repeating: epoll_event(), count: 1024)
                var scratch = [UInt8](repeating: 0, count: 16 * 1024)
                var left = mine.count
                var local: [Double] = []
                local.reserveCapacity(mine.count)
                while left > 0 {
                    let n = epoll_wait(ep, &events, Int32(events.count), 10_000)
                    guard n > 0 else {
                        failure.withLock { $0 = "\(left) long polls not answered within 10 s" }
                        return
                    }
                    let now = Date().timeIntervalSince(t0)
                    for e in events[0..<Int(n)] {
                        local.append(now)
                        left -= 1
                        guard SyncBench.readWholeAnswer(fd: mine[Int(e.data.u64)], scratch: &scratch) else {
                            failure.withLock { $0 = "a long poll did not answer 200" }
                            return
                        }
                    }
                }
                for fd in mine { _ = epoll_ctl(ep, EPOLL_CTL_DEL, fd, nil) }
                stamps.withLock { $0 += local }
            }
        }
        try perf?.send("enable")
        let cpuBefore = MemorySampler.cpu(pid: serverPID)
        let (status, _) = try control.exchange(method: "POST", path: "/v1/spaces/\(space)/push", token: token, body: SyncBench.pushBody(space: space, prefix: "poll-\(round)", count: 1))
        guard status == 200 else { throw HTTPBench.BenchError("push answered \(status)") }
        group.wait()
        let cpu = (MemorySampler.cpu(pid: serverPID) - cpuBefore).total
        try perf?.send("disable")
        if let f = failure.withLock({ $0 }) { throw HTTPBench.BenchError(f) }
        return (stamps.withLock { $0 }.sorted(), cpu)
    }

    /// Polls `/metrics` until `outpost_long_polls_waiting` reaches `count`.
    static func waitUntilWaiting(_ count: Int, control: BenchConnection, admin: String, within seconds: Double) throws {
        let deadline = Date().addingTimeInterval(seconds)
        var seen = -1
        while Date() < deadline {
            let (status, body) = try control.exchange(method: "GET", path: "/metrics", token: admin, body: nil)
            guard status == 200 else { throw HTTPBench.BenchError("/metrics answered \(status)") }
            for line in String(decoding: body, as: UTF8.self).split(separator: "\n") where line.hasPrefix("outpost_long_polls_waiting ") {
                seen = Int(Double(line.split(separator: " ").last ?? "") ?? -1)
            }
            if seen >= count { return }
            usleep(20_000)
        }
        throw HTTPBench.BenchError("only \(seen) of \(count) long polls were waiting after \(Int(seconds)) s")
    }
}
