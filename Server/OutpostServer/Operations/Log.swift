import Foundation
import OutpostCore
import Synchronization

/// Structured logs: one JSON object per line on standard error. Never given a token or
/// record data: callers pass only ids, routes, statuses and messages.
public enum Log {
    private static let lock = Mutex(())

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
        lock.withLock { _ in
            line.withUnsafeBytes { _ = Foundation.write(2, $0.baseAddress, $0.count) }
        }
    }

    public static func info(_ message: String, _ fields: [String: String] = [:]) {
        write(level: "info", message, fields.mapValues { .string($0) })
    }

    public static func error(_ message: String, _ fields: [String: String] = [:]) {
        write(level: "error", message, fields.mapValues { .string($0) })
    }
}
