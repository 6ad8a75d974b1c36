import Foundation
import OutpostCore

/// The server's commands besides `serve` (docs/protocol.md section 8), as functions the
/// executable calls, so tests can drive them without a process.
public enum AdminCommands {
    /// A command-line mistake; the executable prints it with the usage and exits 64.
    public struct Usage: Error, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    /// `outpost-server token --data DIR --sub USER --space SPACE [--space ...]
    /// [--scope read|write] [--admin] [--ttl SECONDS] [--claim NAME=VALUE ...]`: returns
    /// the signed token. A claim's value is JSON when it parses as JSON (`roles=["a"]`,
    /// `level=3`), else a string (`team=north`); the rules read it as `auth.NAME`.
    public static func token(arguments: [String], environment: [String: String], now: Int64 = Int64(Date().timeIntervalSince1970)) throws -> String {
        var data = environment["OUTPOST_DATA"] ?? "./outpost-data"
        var sub: String?
        var spaces: [String] = []
        var scope = Claims.Scope.read
        var admin = false
        var ttl: Int64 = 86_400
        var extra: JSONObject = [:]
        var i = 0
        func value() throws -> String {
            i += 1
            guard i < arguments.count else { throw Usage("\(arguments[i - 1]) needs a value") }
            return arguments[i]
        }
        while i < arguments.count {
            switch arguments[i] {
            case "--data": data = try value()
            case "--sub": sub = try value()
            case "--space": spaces.append(try value())
            case "--scope":
                let v = try value()
                guard let s = Claims.Scope(rawValue: v) else { throw Usage("--scope must be read or write") }
                scope = s
            case "--admin": admin = true
            case "--claim":
                let v = try value()
                guard let eq = v.firstIndex(of: "="), eq > v.startIndex else { throw Usage("--claim must be NAME=VALUE") }
                let name = String(v[..<eq]), text = String(v[v.index(after: eq)...])
                guard !Claims.standardNames.contains(name) else { throw Usage("--claim cannot set \(name); it has an option of its own") }
                extra[name] = (try? JSONParser.parse(Array(text.utf8))) ?? .string(text)
            case "--ttl":
                guard let v = Int64(try value()), v > 0 else { throw Usage("--ttl must be a positive number of seconds") }
                ttl = v
            default: throw Usage("unknown option \(arguments[i])")
            }
            i += 1
        }
        guard let sub, !sub.isEmpty else { throw Usage("--sub USER is required") }
        for space in spaces {
            let valid = space == "*" || Names.isValidSpace(space)
                || (space.hasSuffix("*") && Names.isValidSpace(String(space.dropLast()) + "a"))
            guard valid else { throw Usage("--space \(space) is not a space name (or a prefix ending in *)") }
        }
        guard !spaces.isEmpty || admin else { throw Usage("at least one --space is required (or --admin)") }
        let claims = Claims(sub: sub, exp: now + ttl, spaces: spaces, scope: scope, admin: admin, extra: extra)
        if let claim = claims.claimWithControlCharacter { throw Usage("the \(claim) claim must not hold a control character") }
        let secret = try JWTSecret.load(environmentValue: environment["OUTPOST_JWT_SECRET"], dataDirectory: data)
        return JWTAuthority(secret: secret).sign(claims)
    }

    /// `outpost-server rotate-epoch --data DIR`: gives the store a new, later epoch and
    /// returns it. Refused while a server owns the directory.
    ///
    /// `outpost-server rotate-epoch --store postgres://…` (or `OUTPOST_STORE`) rotates a
    /// PostgreSQL store's epoch; running instances notice and shut down, to be started
    /// again on the new epoch (docs/scaling.md).
    public static func rotateEpoch(arguments: [String], environment: [String: String]) throws -> Epoch {
        var store = environment["OUTPOST_STORE"]
        var rest: [String] = []
        var i = 0
        while i < arguments.count {
            if arguments[i] == "--store" {
                guard i + 1 < arguments.count else { throw Usage("--store needs a value") }
                store = arguments[i + 1]
                i += 2
            } else {
                rest.append(arguments[i])
                i += 1
            }
        }
        if let store, Settings.isPostgresURL(store) {
            return try PostgresSyncStore.rotateEpoch(url: store)
        }
        let data = try dataArgument(rest, environment)
        let directory = try DataDirectory(path: data)
        guard FileManager.default.fileExists(atPath: directory.storePath) else {
            throw Usage("no store at \(directory.storePath)")
        }
        return try SQLiteSyncStore.rotateEpoch(path: directory.storePath)
    }

    static func dataArgument(_ arguments: [String], _ environment: [String: String]) throws -> String {
        var data = environment["OUTPOST_DATA"] ?? "./outpost-data"
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--data":
                guard i + 1 < arguments.count else { throw Usage("--data needs a value") }
                data = arguments[i + 1]
                i += 2
            default: throw Usage("unknown option \(arguments[i])")
            }
        }
        return data
    }
}
