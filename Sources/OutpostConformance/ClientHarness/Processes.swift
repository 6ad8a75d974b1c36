import Foundation
import Glibc
import OutpostCore
import OutpostSubprocess

/// One client driver process (docs/conformance.md, "Client drivers"): `/bin/sh -c "exec
/// CMD"` in a process group of its own, spoken to one JSON line at a time. Its standard
/// error goes to a file of the run's directory.
final class DriverProcess {
    let name: String
    let process: Subprocess
    let log: String
    private var nextId = 1

    init(name: String, command: String, log: String) throws {
        self.name = name
        self.log = log
        process = try Subprocess("/bin/sh", ["-c", "exec \(command)"], input: .pipe, output: .capture,
                                 error: .file(log, append: true), newProcessGroup: true)
    }

    /// Sends `{"id": N, "op": op, …fields}` and returns the answer, whose `id` must be N.
    /// Throws when the driver exits, answers something else, or takes over `timeout` seconds.
    func request(_ op: String, _ fields: JSONObject = [:], timeout: Double = 120) throws -> JSONObject {
        let id = nextId
        nextId += 1
        var line: JSONObject = ["id": .number(JSONNumber(id)), "op": .string(op)]
        for (key, value) in fields { line[key] = value }
        let text: String
        do {
            try process.writeInput(Array((JSONValue.object(line).description + "\n").utf8))
            text = try process.nextLine(timeout: timeout)
        } catch {
            // Ended on its own (not killed by the harness): the client crashed.
            if let ended = process.wait(timeout: 5) {
                let errors = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                let fatal = errors.split(separator: "\n").first { $0.contains("Fatal error") || $0.contains("fatal error") }
                throw DriverExited(description: "\(name) ended (\(ended)) without answering \(op)\(fatal.map { ": \($0)" } ?? ""); its standard error: \(log)")
            }
            throw error
        }
        guard let answer = (try? JSONParser.parse(text))?.objectValue else {
            throw HarnessError("\(name) answered \(op) with a line that is not a JSON object: \(text.prefix(200))")
        }
        guard answer["id"]?.int64Value == Int64(id), answer["ok"]?.boolValue != nil else {
            throw HarnessError("\(name) answered \(op) (id \(id)) without its id and ok: \(text.prefix(200))")
        }
        return answer
    }

    /// Kills the driver and what it started, as kill -9 would, and waits for it.
    func kill9() {
        process.signalGroup(SIGKILL)
        process.wait()
    }

    /// Sends `crash` and waits for the driver to be gone (no answer is expected).
    func crash() throws {
        try? process.writeInput(Array(#"{"id":0,"op":"crash"}"#.utf8) + [0x0A])
        guard process.wait(timeout: 60) != nil else {
            kill9()
            throw HarnessError("\(name) did not exit within 60 s of crash")
        }
    }

    /// `close`, then the exit; kill -9 when it does not come.
    func close() {
        _ = try? request("close", timeout: 60)
        process.closeInput()
        if process.wait(timeout: 60) == nil { kill9() }
    }
}

/// A driver that ended by itself in the middle of a request: the client crashed.
struct DriverExited: Error, CustomStringConvertible {
    let description: String
}

/// The `outpost-server serve` child of a run, on an ephemeral port, stopped by its PID. Its
/// log goes to a file of the run's directory.
final class ServerChild {
    let executable: String
    let arguments: [String]
    let environment: [String: String]
    let log: String
    private(set) var process: Subprocess?
    private(set) var port: Int?

    init(executable: String, arguments: [String], secret: String, log: String) {
        self.executable = executable
        self.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["OUTPOST_JWT_SECRET"] = secret
        environment["OUTPOST_ACCESS_LOG"] = "false"
        environment["OUTPOST_LOG_FILE"] = nil
        self.environment = environment
        self.log = log
    }

    /// Starts the server and waits for its `listening on` line.
    func start() throws {
        let child = try Subprocess(executable, ["serve", "--host", "127.0.0.1", "--port", "0"] + arguments,
                                   environment: environment, output: .capture, error: .file(log, append: true))
        do {
            port = try child.listeningAddress(timeout: 120).port
        } catch {
            throw HarnessError("outpost-server did not start: \(error); its log: \(log)")
        }
        process = child
    }

    /// kill -9, and waits for the exit.
    func kill9() {
        process?.send(SIGKILL)
        process?.wait()
        process = nil
        port = nil
    }

    /// SIGTERM (SIGKILL after 30 s), and waits.
    func stop() {
        process?.stop(grace: 30)
        process = nil
        port = nil
    }

    var isRunning: Bool { process != nil }
}

/// GET `path` from the server on `port` with a bearer token; blocking, one request per
/// connection. Returns the status and the body.
func httpGet(port: Int, path: String, token: String) throws -> (status: Int, body: [UInt8]) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = FaultProxy.loopback(port: port)
    let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard connected == 0 else { throw HarnessError("cannot connect to the server on port \(port)") }
    var timeout = timeval(tv_sec: 60, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n".utf8)
    var offset = 0
    while offset < request.count {
        let n = request[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard n > 0 else { throw HarnessError("sending to the server: \(String(cString: strerror(errno)))") }
        offset += n
    }
    var answer: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = recv(fd, &chunk, chunk.count, 0)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        answer += chunk[0..<n]
    }
    let marker = Array("\r\n\r\n".utf8)
    guard answer.count >= 4, let end = (0...(answer.count - 4)).first(where: { answer[$0..<($0 + 4)].elementsEqual(marker) }) else {
        throw HarnessError("the server's answer to GET \(path) has no head")
    }
    let head = String(decoding: answer[..<end], as: UTF8.self).lowercased()
    let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
    var body = Array(answer[(end + 4)...])
    if head.contains("transfer-encoding: chunked") {
        var decoded: [UInt8] = []
        var index = 0
        while let lineEnd = (index..<max(index, body.count - 1)).first(where: { body[$0] == 13 && body[$0 + 1] == 10 }),
              let size = Int(String(decoding: body[index..<lineEnd], as: UTF8.self).split(separator: ";")[0], radix: 16), size > 0,
              lineEnd + 2 + size <= body.count {
            decoded += body[(lineEnd + 2)..<(lineEnd + 2 + size)]
            index = lineEnd + 2 + size + 2
        }
        body = decoded
    }
    return (status, body)
}
