// Child processes without Foundation's `Process`: one posix_spawn wrapper for the tests,
// the benchmarks and the conformance suite's hooks.
//
// Why not `Process`: on Linux it crashed at random inside `Process.run()` (a bad pointer
// dereference, then `try!` on an `EINTR` from FileHandle), and it notices a child's exit
// only once every inheritor of the child's pipes has closed them. Here:
// - the child starts with posix_spawn, its signal mask empty and the signals this
//   process ignores (SIGPIPE) back to their defaults, and every descriptor above 2 closed,
//   so it inherits no other child's pipe or server socket;
// - one thread per child blocks in waitpid (EINTR retried) and records the exit;
// - each captured pipe is read to its end on a thread of its own (EINTR retried), so a
//   child never blocks on a full pipe and a caller never deadlocks reading one while the
//   child fills the other;
// - every wait is on a condition that the reaper or a reader signals, with a deadline.
import OutpostCLinux
import Foundation
import Glibc

/// A child process started with posix_spawn, stopped by its own PID.
public final class Subprocess: @unchecked Sendable {
    // @unchecked: every mutable property is read and written under `condition`.

    /// Where the child's standard input comes from.
    public enum Input: Sendable {
        /// `/dev/null`.
        case null
        /// This process's standard input.
        case inherit
        /// These bytes, written on a thread of their own, then end of file.
        case bytes([UInt8])
        /// A pipe this process writes to with `writeInput` (a driver spoken to line by
        /// line), closed by `closeInput` or when this object goes.
        case pipe
    }

    /// Where one of the child's output streams goes.
    public enum Output: Sendable, Equatable {
        /// `/dev/null`.
        case discard
        /// This process's stream of the same number.
        case inherit
        /// This process's standard error (a benchmark's child shows its output beside the
        /// figures without mixing into standard output).
        case standardError
        /// A pipe read to its end on a thread of its own; see `output` and `line`.
        case capture
        /// A file, created or truncated (mode 0600), or appended to.
        case file(String, append: Bool = false)
    }

    /// How the child ended.
    public enum Termination: Sendable, Equatable, CustomStringConvertible {
        case exited(Int32)
        case signaled(Int32)

        /// The exit code, or 128 + the signal (as a shell reports it).
        public var status: Int32 {
            switch self {
            case .exited(let code): code
            case .signaled(let signal): 128 + signal
            }
        }

        public var description: String {
            switch self {
            case .exited(let code): "exit \(code)"
            case .signaled(let signal): "signal \(signal)"
            }
        }
    }

    /// The program and its arguments as started (for messages).
    public let commandLine: [String]
    /// The child's process id.
    public let pid: pid_t

    private let condition = NSCondition()
    private var termination: Termination?
    private var exitWaiters: [CheckedContinuation<Termination, Never>] = []
    private var captured: [Int32: [UInt8]] = [:]
    private var open: Set<Int32> = []
    private var consumedLines: [Int32: Int] = [:]
    /// This end of an `Input.pipe`, -1 once closed (or for other inputs).
    private var inputEnd: Int32 = -1

    /// Starts `path` (a path, or a name looked up on `PATH`) with `arguments`.
    /// `environment` replaces this process's when given. Throws `SubprocessError` when the
    /// program cannot be started; nothing is left running then.
    public init(_ path: String, _ arguments: [String] = [], environment: [String: String]? = nil,
                workingDirectory: String? = nil, input: Input = .null,
                output: Output = .discard, error: Output = .discard, errorToOutput: Bool = false,
                newProcessGroup: Bool = false) throws {
        commandLine = [path] + arguments
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var parentEnds: [(fd: Int32, stream: Int32)] = []
        var childEnds: [Int32] = []
        var inputWriter: (fd: Int32, bytes: [UInt8])?
        var inputPipe: Int32 = -1
        func fail(_ what: String, _ code: Int32) -> SubprocessError {
            for fd in childEnds { close(fd) }
            for end in parentEnds { close(end.fd) }
            if let w = inputWriter { close(w.fd) }
            if inputPipe >= 0 { close(inputPipe) }
            return SubprocessError("\(what) for \(path): \(String(cString: strerror(code)))")
        }

        // Standard input.
        switch input {
        case .null: posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        case .inherit: break
        case .bytes(let bytes):
            var fds: [Int32] = [0, 0]
            guard outpost_pipe_cloexec(&fds) == 0 else { throw fail("pipe", errno) }
            childEnds.append(fds[0])
            inputWriter = (fds[1], bytes)
            posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
        case .pipe:
            var fds: [Int32] = [0, 0]
            guard outpost_pipe_cloexec(&fds) == 0 else { throw fail("pipe", errno) }
            childEnds.append(fds[0])
            inputPipe = fds[1]
            posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
        }
        // Standard output and error.
        for (stream, target) in [(Int32(1), output), (Int32(2), error)] {
            if stream == 2 && errorToOutput {
                posix_spawn_file_actions_adddup2(&actions, 1, 2)
                continue
            }
            switch target {
            case .discard: posix_spawn_file_actions_addopen(&actions, stream, "/dev/null", O_WRONLY, 0)
            case .inherit: break
            case .standardError: posix_spawn_file_actions_adddup2(&actions, 2, stream)
            case .file(let file, let append):
                posix_spawn_file_actions_addopen(&actions, stream, file, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0o600)
            case .capture:
                var fds: [Int32] = [0, 0]
                guard outpost_pipe_cloexec(&fds) == 0 else { throw fail("pipe", errno) }
                childEnds.append(fds[1])
                parentEnds.append((fds[0], stream))
                posix_spawn_file_actions_adddup2(&actions, fds[1], stream)
            }
        }
        if let workingDirectory { outpost_spawn_addchdir(&actions, workingDirectory) }
        outpost_spawn_addclosefrom(&actions, 3)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        Self.startWithDefaultSignals(&attributes, newProcessGroup: newProcessGroup)
        var child: pid_t = 0
        let rc = Self.spawn(&child, commandLine, environment: environment ?? ProcessInfo.processInfo.environment, &actions, &attributes)
        guard rc == 0 else { throw fail("cannot start", rc) }
        pid = child
        for fd in childEnds { close(fd) }

        condition.lock()
        inputEnd = inputPipe
        for end in parentEnds {
            captured[end.stream] = []
            open.insert(end.stream)
        }
        condition.unlock()
        if let writer = inputWriter {
            Self.thread("input of \(child)") { Self.writeAll(writer.fd, writer.bytes) }
        }
        for end in parentEnds {
            Self.thread("stream \(end.stream) of \(child)") { [self] in readToEnd(end.fd, stream: end.stream) }
        }
        Self.thread("reaper of \(child)") { [self] in reap() }
    }

    /// The child starts with no signal blocked and the default action for the signals a
    /// parent may ignore or catch (a server that ignores SIGPIPE, a test runner's handlers).
    /// With `newProcessGroup`, the child leads a process group of its own (its id the
    /// child's PID), so `signalGroup` reaches whatever it starts too.
    private static func startWithDefaultSignals(_ attributes: inout posix_spawnattr_t, newProcessGroup: Bool) {
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        if newProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= POSIX_SPAWN_SETPGROUP
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))
    }

    /// Spawns `commandLine` (its program a path, or a name looked up on `PATH`) with
    /// `environment`; returns posix_spawn's result.
    private static func spawn(_ child: inout pid_t, _ commandLine: [String], environment: [String: String],
                              _ actions: inout posix_spawn_file_actions_t, _ attributes: inout posix_spawnattr_t) -> Int32 {
        let path = commandLine[0]
        let argv: [UnsafeMutablePointer<CChar>?] = commandLine.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.sorted { $0.key < $1.key }.map { strdup($0.key + "=" + $0.value) } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        return path.contains("/")
            ? posix_spawn(&child, path, &actions, &attributes, argv, envp)
            : posix_spawnp(&child, path, &actions, &attributes, argv, envp)
    }

    /// Writes `bytes` to the child's standard input (an `Input.pipe`). Throws when the
    /// child closed it or exited (EPIPE: SIGPIPE is ignored by the processes that use
    /// this), or when the input is not a pipe or was closed.
    public func writeInput(_ bytes: [UInt8]) throws {
        condition.lock()
        let fd = inputEnd
        condition.unlock()
        guard fd >= 0 else { throw SubprocessError("\(commandLine.first ?? "the child")'s input is not an open pipe") }
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { throw SubprocessError("writing to \(commandLine.first ?? "the child"): \(String(cString: strerror(errno)))") }
            offset += n
        }
    }

    /// Closes the child's standard input (an `Input.pipe`): it reads end of file.
    public func closeInput() {
        condition.lock()
        let fd = inputEnd
        inputEnd = -1
        condition.unlock()
        if fd >= 0 { close(fd) }
    }

    deinit {
        if inputEnd >= 0 { close(inputEnd) }
    }

    // MARK: Running to completion

    /// What `run` returns.
    public struct Result: Sendable {
        public var termination: Termination
        /// The bytes of standard output (and of standard error with `errorToOutput`).
        public var outputBytes: [UInt8]
        /// The bytes of standard error.
        public var errorBytes: [UInt8]
        public var status: Int32 { termination.status }
        public var output: String { String(decoding: outputBytes, as: UTF8.self) }
        public var error: String { String(decoding: errorBytes, as: UTF8.self) }
    }

    /// Runs `path` to completion and returns how it ended with its standard output and
    /// standard error (each captured, or merged into the output with `errorToOutput`).
    /// Blocking: call it off the cooperative pool from async code.
    public static func run(_ path: String, _ arguments: [String] = [], environment: [String: String]? = nil,
                           workingDirectory: String? = nil, input: Input = .null, errorToOutput: Bool = false) throws -> Result {
        let child = try Subprocess(path, arguments, environment: environment, workingDirectory: workingDirectory, input: input,
                                   output: .capture, error: errorToOutput ? .discard : .capture, errorToOutput: errorToOutput)
        let termination = child.wait()
        child.waitForStreams()
        return Result(termination: termination, outputBytes: child.output(1), errorBytes: child.output(2))
    }

    /// This process's environment with `adding` set and the variables `removing` names unset.
    public static func environment(adding: [String: String] = [:], removing: (String) -> Bool = { _ in false }) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for key in environment.keys where removing(key) { environment[key] = nil }
        for (key, value) in adding { environment[key] = value }
        return environment
    }

    // MARK: Exit

    /// Whether the child has not exited yet.
    public var isRunning: Bool {
        condition.lock()
        defer { condition.unlock() }
        return termination == nil
    }

    /// How the child ended, once it has.
    public var exit: Termination? {
        condition.lock()
        defer { condition.unlock() }
        return termination
    }

    /// Blocks until the child exits.
    @discardableResult
    public func wait() -> Termination {
        condition.lock()
        defer { condition.unlock() }
        while termination == nil { condition.wait() }
        return termination!
    }

    /// Blocks until the child exits or `timeout` seconds pass (then nil).
    public func wait(timeout: Double) -> Termination? {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while termination == nil {
            if !condition.wait(until: deadline) { break }
        }
        return termination
    }

    /// Suspends until the child exits (no thread is held meanwhile).
    public func exited() async -> Termination {
        await withCheckedContinuation { continuation in
            condition.lock()
            if let termination {
                condition.unlock()
                continuation.resume(returning: termination)
            } else {
                exitWaiters.append(continuation)
                condition.unlock()
            }
        }
    }

    /// Sends `signal` to the child's PID while it has not been reaped.
    public func send(_ signal: Int32) {
        condition.lock()
        defer { condition.unlock() }
        // Reaped: the PID may already belong to another process.
        if termination == nil { kill(pid, signal) }
    }

    /// Sends `signal` to the child's process group (a child started with
    /// `newProcessGroup`: it and what it started) while the child has not been reaped.
    public func signalGroup(_ signal: Int32) {
        condition.lock()
        defer { condition.unlock() }
        if termination == nil { kill(-pid, signal) }
    }

    /// SIGTERM, then SIGKILL when the child has not exited within `grace` seconds; waits.
    @discardableResult
    public func stop(grace: Double = 15) -> Termination {
        send(SIGTERM)
        if let ended = wait(timeout: grace) { return ended }
        send(SIGKILL)
        return wait()
    }

    // MARK: Captured output

    /// The bytes captured so far from `stream` (1 or 2).
    public func output(_ stream: Int32 = 1) -> [UInt8] {
        condition.lock()
        defer { condition.unlock() }
        return captured[stream] ?? []
    }

    /// `output(stream)` as UTF-8 text.
    public func outputText(_ stream: Int32 = 1) -> String {
        String(decoding: output(stream), as: UTF8.self)
    }

    /// Blocks until every captured stream reached its end of file (the child and whatever
    /// it started closed it).
    public func waitForStreams() {
        condition.lock()
        defer { condition.unlock() }
        while !open.isEmpty { condition.wait() }
    }

    /// The next line of `stream` not yet returned by this method, without its newline:
    /// waits for it until `timeout` seconds pass, the stream ends, or the child exits.
    /// Throws, with what the stream held, when no line came.
    public func nextLine(of stream: Int32 = 1, timeout: Double) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while true {
            let bytes = captured[stream] ?? []
            let start = consumedLines[stream] ?? 0
            if let newline = bytes[start...].firstIndex(of: 0x0A) {
                consumedLines[stream] = newline + 1
                return String(decoding: bytes[start..<newline], as: UTF8.self)
            }
            let why: String?
            if !open.contains(stream) {
                why = "its stream \(stream) ended"
            } else if let termination {
                why = "it ended (\(termination))"
            } else if !condition.wait(until: deadline) {
                why = "\(timeout) s passed"
            } else {
                why = nil
            }
            if let why {
                let text = String(decoding: bytes[start...], as: UTF8.self)
                throw SubprocessError("\(commandLine.joined(separator: " ")) printed no line: \(why); it had printed \"\(text.suffix(400))\"")
            }
        }
    }

    /// For an `outpost-server serve` child whose standard output is captured: waits for its
    /// first line, `listening on http://HOST:PORT` (docs/protocol.md section 8), and returns the
    /// URL and the port. Anything else, or no line within `timeout` seconds, stops the
    /// child and throws with what it printed.
    public func listeningAddress(timeout: Double) throws -> (url: String, port: Int) {
        let line: String
        do {
            line = try nextLine(timeout: timeout)
        } catch {
            stop(grace: 5)
            throw error
        }
        let prefix = "listening on "
        guard line.hasPrefix(prefix + "http://"), let port = line.split(separator: ":").last.flatMap({ Int($0) }) else {
            stop(grace: 5)
            throw SubprocessError("\(commandLine.first ?? "the child") printed \"\(line)\" instead of listening on http://HOST:PORT")
        }
        return (String(line.dropFirst(prefix.count)), port)
    }

    // MARK: Threads

    private func reap() {
        var status: Int32 = 0
        var ended: Termination
        while true {
            let rc = waitpid(pid, &status, 0)
            if rc == pid {
                let signal = status & 0x7F
                if signal == 0 {
                    ended = .exited((status >> 8) & 0xFF)
                    break
                }
                if signal != 0x7F {  // not merely stopped
                    ended = .signaled(signal)
                    break
                }
                continue
            }
            if rc == -1 && errno == EINTR { continue }
            // ECHILD: someone else reaped it; its status is lost.
            ended = .exited(-1)
            break
        }
        condition.lock()
        termination = ended
        let waiters = exitWaiters
        exitWaiters = []
        condition.broadcast()
        condition.unlock()
        for waiter in waiters { waiter.resume(returning: ended) }
    }

    private func readToEnd(_ fd: Int32, stream: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            condition.lock()
            captured[stream, default: []].append(contentsOf: buffer[0..<n])
            condition.broadcast()
            condition.unlock()
        }
        close(fd)
        condition.lock()
        open.remove(stream)
        condition.broadcast()
        condition.unlock()
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }  // the child closed its input
            offset += n
        }
        close(fd)
    }

    private static func thread(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread(block: body)
        thread.name = name
        thread.start()
    }
}

/// A child process that could not be started, or did not do what was waited for.
public struct SubprocessError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
