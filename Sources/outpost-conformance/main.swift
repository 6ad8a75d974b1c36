// outpost-conformance: checks a live Outpost server against docs/protocol.md over HTTP.
import Foundation
import OutpostConformance

let usage = """
    usage: outpost-conformance --url URL [--secret SECRET | --secret-file PATH | --data DIR] [options]

    Checks the server at URL against the Outpost protocol, one line per check
    (PASS, FAIL with the reason, or SKIP with the reason), then "N passed, N failed".
    Exits 0 only when no check failed. `outpost-conformance client --help`: the checks of
    a client (docs/conformance.md).

      --url URL                      the server's base URL, http://HOST:PORT[/PREFIX]
      --secret SECRET                the server's HS256 token secret (OUTPOST_JWT_SECRET);
                                     or set OUTPOST_JWT_SECRET, or --secret-file PATH
      --secret-file PATH             read the secret from a file (trailing newline ignored)
      --data DIR                     read the secret from DIR/jwt-secret, the file the server
                                     made in its data directory (default $OUTPOST_DATA, else
                                     ./outpost-data: where `make run` serves from)
      --category NAME[,NAME...]      run only the checks of these categories (repeatable):
                                     operations, auth, push, pull, lifecycle, lineage, http, media, rules
      --only NAME[,NAME...]          run only these checks (repeatable)
      --skip NAME[,NAME...]          skip these checks (repeatable)
      --restart-command CMD          shell command that restarts the server on the same
                                     data; checks that need it are skipped without it
      --rotate-epoch-command CMD     shell command that stops the server, runs
                                     `outpost-server rotate-epoch --data DIR` and starts it
      --rules-command CMD            shell command that makes the server serve with the rules file
                                     $CONFORMANCE_RULES (docs/rules.md), or with none when
                                     it is empty, on the same data; the rules checks are
                                     skipped without it
      --header-timeout SECONDS       the server's header timeout (default 10)
      --body-timeout SECONDS         the server's body timeout (default 10)
      --metrics-open                 /metrics was opened by the operator (no admin token)
      --long-poll-limit MS           fail a woken long poll slower than this (default 1000)
      --list                         print every check's name, section and rule, and exit
    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("outpost-conformance: \(message)\n".utf8))
    exit(64)
}

/// The command line, parsed.
struct Options {
    var url: String?
    var secret = ProcessInfo.processInfo.environment["OUTPOST_JWT_SECRET"]
    var data = ProcessInfo.processInfo.environment["OUTPOST_DATA"].flatMap { $0.isEmpty ? nil : $0 } ?? "./outpost-data"
    var categories: Set<Check.Category> = []
    var only: [String] = []
    var skip: [String] = []
    var restart: String?
    var rotate: String?
    var rules: String?
    var headerTimeout = 10.0
    var bodyTimeout = 10.0
    var metricsOpen = false
    var longPollLimitMs = 1000
    var list = false

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var index = 0
        func value(_ flag: String) -> String {
            index += 1
            guard index < arguments.count else { fail("\(flag) needs a value") }
            return arguments[index]
        }
        func names(_ text: String) -> [String] {
            text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        func seconds(_ flag: String, _ text: String) -> Double {
            guard let v = Double(text), v > 0 else { fail("\(flag) must be a positive number of seconds") }
            return v
        }
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--url": options.url = value(argument)
            case "--secret": options.secret = value(argument)
            case "--secret-file": options.secret = readSecret(value(argument))
            case "--data": options.data = value(argument)
            case "--category":
                for name in names(value(argument)) {
                    guard let category = Check.Category(rawValue: name) else {
                        fail("unknown category \(name); the categories are \(Check.Category.allCases.map(\.rawValue).joined(separator: ", "))")
                    }
                    options.categories.insert(category)
                }
            case "--only": options.only += names(value(argument))
            case "--skip": options.skip += names(value(argument))
            case "--restart-command": options.restart = value(argument)
            case "--rotate-epoch-command": options.rotate = value(argument)
            case "--rules-command": options.rules = value(argument)
            case "--header-timeout": options.headerTimeout = seconds(argument, value(argument))
            case "--body-timeout": options.bodyTimeout = seconds(argument, value(argument))
            case "--metrics-open": options.metricsOpen = true
            case "--long-poll-limit":
                guard let v = Int(value(argument)), v > 0 else { fail("--long-poll-limit must be a positive number of milliseconds") }
                options.longPollLimitMs = v
            case "--list": options.list = true
            case "--help", "-h":
                print(usage)
                exit(0)
            default: fail("unknown option \(argument)\n\n\(usage)")
            }
            index += 1
        }
        return options
    }
}

/// The secret in the file at `path`, without its trailing newline.
func readSecret(_ path: String) -> String {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { fail("cannot read \(path)") }
    return text.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Writes a line to standard output at once (no buffering), so progress shows as it runs.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

if CommandLine.arguments.dropFirst().first == "client" { runClientHarness(Array(CommandLine.arguments.dropFirst(2))) }
let options = Options.parse(Array(CommandLine.arguments.dropFirst()))

if options.list {
    for check in Conformance.checks {
        var needs = check.requirements.map(\.rawValue).sorted().joined(separator: ", ")
        if !needs.isEmpty { needs = " [needs \(needs)]" }
        emit("\(check.name)  §\(check.section)\(needs)  \(check.summary)")
    }
    exit(0)
}
guard let url = options.url else { fail("--url is required\n\n\(usage)") }
// Without a secret given, the one the server made in its data directory.
let secretFile = (options.data as NSString).appendingPathComponent("jwt-secret")
let secret = options.secret.flatMap { $0.isEmpty ? nil : $0 }
    ?? (FileManager.default.fileExists(atPath: secretFile) ? readSecret(secretFile) : nil)
guard let secret else {
    fail("no secret: \(secretFile) does not exist; give --data DIR (the server's data directory), --secret-file PATH, --secret SECRET or OUTPOST_JWT_SECRET")
}

var configuration = Configuration(baseURL: url, secret: secret)
configuration.restart = options.restart.map(ServerHook.shell)
configuration.rotateEpoch = options.rotate.map(ServerHook.shell)
configuration.rules = options.rules.map(RulesHook.shell)
configuration.headerTimeout = .milliseconds(Int(options.headerTimeout * 1000))
configuration.bodyTimeout = .milliseconds(Int(options.bodyTimeout * 1000))
configuration.metricsRequireAdmin = !options.metricsOpen
configuration.longPollWakeLimit = .milliseconds(options.longPollLimitMs)

do {
    let report = try await Conformance.run(configuration, categories: options.categories, only: options.only, skip: options.skip) { result in
        emit(result.line)
    }
    emit(report.summaryLine)
    exit(report.allPassed ? 0 : 1)
} catch {
    fail("\(error)")
}
