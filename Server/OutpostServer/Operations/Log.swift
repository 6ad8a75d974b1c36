import Foundation
import OutpostCore
import Synchronization

/// Structured logs: one JSON object per line on standard error, or appended to the file
/// that `OUTPOST_LOG_FILE` names (read once, at the first line). Never given a token or
/// record data: callers pass only ids, routes, statuses and messages.
public enum Log {
    /// The descriptor lines go to: 2, or the `OUTPOST_LOG_FILE` opened for appending (a
    /// file that cannot be opened falls back to 2, with one line saying why).
    private static let lock = Mutex<Int32?>(nil)

    /// Opens `OUTPOST_LOG_FILE`; returns the descriptor and, when it could not, why.
    private static func openDestination() -> (fd: Int32, failure: String?) {
        guard let path = ProcessInfo.processInfo.environment["OUTPOST_LOG_FILE"], !path.isEmpty else { return (2, nil) }
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return (2, "cannot open OUTPOST_LOG_FILE \(path): \(String(cString: strerror(errno))); logging to standard error") }
        return (fd, nil)
    }

    /// Writes one line: `{"ts":…,"level":…,"msg":…,<fields>}`.
    public static func write(level: String, _ message: String, _ fields: [String: JSONValue]) {
        var object: JSONObject = [
            "ts": .number(JSONNumber(Int64(Date().timeIntervalSince1970 * 1000))),
            "level": .string(level),
            "msg": .string(message),
        ]
        for (k, v) in fields.sorted(by: { $0.key < $1.key }) { object[k] = v }
        var line = JSONValue.object(object).encoded()
        line.append(0x0A)
        let failure: String? = lock.withLock { destination in
            var failure: String?
            if destination == nil { (destination, failure) = openDestination() }
            line.withUnsafeBytes { _ = Foundation.write(destination!, $0.baseAddress, $0.count) }
            return failure
        }
        if let failure { write(level: "error", failure, [:]) }
    }

    public static func info(_ message: String, _ fields: [String: String] = [:]) {
        write(level: "info", message, fields.mapValues { .string($0) })
    }

    public static func error(_ message: String, _ fields: [String: String] = [:]) {
        write(level: "error", message, fields.mapValues { .string($0) })
    }
}

extension URL {
    /// The URL as logs, metrics and admin answers show it: scheme, host, port and path,
    /// without the credentials, query or fragment it may carry (a secret often rides in
    /// them): `https://hooks.example.com/outpost`.
    var redacted: String {
        let scheme = self.scheme?.lowercased() ?? ""
        let host = self.host ?? ""
        var shown = "\(scheme)://\(host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host)"
        if let port { shown += ":\(port)" }
        shown += path.isEmpty ? "/" : path
        return shown
    }
}
