// outpost: the command-line client, built on the Outpost SDK, for scripts, operators and
// automated checks. Every command works on a local store file; only `sync` and `upload`
// talk to the server. Output is JSON (one object, or one object per line for lists).
//
// Exit status: 0 success; 2 a sync or an upload failed and can be run again (nothing local
// is lost; an upload resumes); 3 `get` found no live record; 1 any other failure (an upload
// the server refused for good among them); 64 a usage error.
import Foundation
import Outpost
import OutpostCore

let usage = """
    usage: outpost [--store FILE] [--server URL] [--space NAME] [--token TOKEN]
                   [--resolve server-wins|client-wins|last-write-wins]
                   [--key-file FILE [--clear COLLECTION.FIELD]...] [--app-version N] COMMAND
      (or the environment variables OUTPOST_STORE, OUTPOST_SERVER, OUTPOST_SPACE, OUTPOST_TOKEN,
       OUTPOST_KEY_FILE, OUTPOST_APP_VERSION)

    commands:
      put COLLECTION ID JSON   save locally, no network; print the record as JSON
                               (JSON may be - for standard input, or @FILE for a file's contents)
      delete COLLECTION ID     delete locally (tombstone)
      get COLLECTION ID        print the record's data as JSON; exit 3 when absent or deleted
      list [COLLECTION]        one JSON object per line: collection, id, data, version, pending
      query COLLECTION [--where EXPR]... [--sort FIELD[,-FIELD...]] [--search TEXT]
            [--limit N] [--offset N] [--date FIELD]... [--count | --explain]
                               one JSON object per line, in the query's order: id, data,
                               version, pending (see "Queries" below); --count prints
                               {"count": N}, --explain how the store runs the query:
                               {"index": [FIELD...] or null, "search": BOOL, "plan": [...], "sql": ...}
      sync [--progress]        one sync; print a JSON report; exit 2 when it failed
                               (--progress: "pulled N of about M records" lines on standard error)
      sync --all               sync every space the token names (see "Many spaces" below)
      pending                  one JSON line per queued change: changeId, collection, id, op, state
                               (upgrade_required ones add requiredAppVersion)
      status                   JSON: epoch, cursor, pending, upgradeRequired, lastSyncAt, lastError,
                               restoredFrom
      conflicts [--since TIME] one JSON line per decision of the resolver in the store's conflict
                               journal, oldest first: collection, id, local, server, base, result,
                               resolution, resolver, decidedAt (TIME: ms since 1970, or ISO 8601
                               like 2026-12-01T00:00:00Z; default: every entry kept)
      upload FILE [--content-type TYPE]
                               upload a media file (resuming an interrupted upload of the same
                               file); print the media as JSON (in an encrypted store: the sealed
                               file's reference); exit 2 when it failed and can resume
      key create               make the space's first key in --key-file; print its id
      key export [--pbkdf2]    print the space's keys wrapped under the passphrase (scrypt, or
                               PBKDF2-HMAC-SHA256 with --pbkdf2), to import on another device
      key import FILE|-        add the keys of an export to --key-file
      key rotate               a new key for new writes (old copies still open)
      reencrypt                rewrite every record under the current key, as ordinary edits

    --key-file makes the store end-to-end encrypted (docs/encryption.md): records and media
    are sealed on this device under the space key kept in FILE (mode 0600). --clear leaves a
    field in clear for the server's rules. The passphrase of key export and import is read
    from OUTPOST_KEY_PASSPHRASE or from the file --passphrase-file names, never from the
    command line.

    --app-version names the version of the data's schema the pushes are from (docs/rules.md,
    "App versions"); without it none is named, and a server whose rules set a minimum holds
    the changes (upgrade_required) until a sync with a version that meets it.

    Queries: --where takes a filter, e.g. 'status == "open" and (priority >= 3 or tags contains
    "urgent") and not site.name startsWith "Test"': comparisons (== = != < <= > >=), FIELD in [V, ...],
    FIELD contains V, FIELD startsWith "TEXT", FIELD is [not] null, FIELD is [not] missing, pending
    (an edit waits for the server), joined by and (&&), or (||), not (!) and parentheses; values
    are JSON (strings, numbers, true, false, null) or date("2026-12-07T10:00:00Z"); a field is
    a dotted path, a name that is not a plain word in `backquotes`. More than one --where: all
    must hold. --sort takes fields, a leading - for largest first (ties by id). --search finds
    records whose searchable fields (the app's CollectionSchema.searchable) hold every word, the
    last as a prefix, best first unless sorted. --date FIELD compares and sorts FIELD as a time
    (the app's CollectionSchema.dates); without any, the fields the app's indexes hold as dates
    are dates. query reads the app's indexes and search table as the file holds them and never
    changes the file.

    The store file defaults to ./outpost.sqlite; --space is needed when it is created.
    get, list, query, pending, status and conflicts read a store another process has open (an
    app, a sync running) alongside it; the other commands need it to themselves.

    Many spaces: with --space given more than once, or `sync --all` (the token's spaces
    claim), --store names a directory (default .) holding one store per space,
    SPACE.sqlite; sync syncs them in turn, one JSON report line per space
    ({"space": …, "pushed": …} or {"space": …, "error": …}), a failure in one never stopping
    the others; exit 2 when any failed.
    upload guesses the content type from the file's extension (application/octet-stream otherwise).
    The default resolver is last-write-wins with a 5-minute drift limit.
    """

struct UsageError: Error { let message: String }

/// `--help`, `-h` or `help`, before or after the command: the usage on standard output, exit 0.
struct HelpRequested: Error {}

struct Options {
    var store = "outpost.sqlite"
    var server: String?
    var space: String?
    /// Every `--space`, in order (more than one: the many-spaces mode).
    var spaces: [String] = []
    var storeGiven = false
    var token: String?
    var resolve = "last-write-wins"
    var keyFile: String?
    var appVersion: Int?
    var clear: [String: Set<String>] = [:]
    var command: [String] = []
}

func parse(_ arguments: [String], environment: [String: String]) throws -> Options {
    var o = Options()
    if let v = environment["OUTPOST_STORE"], !v.isEmpty { o.store = v }
    if let v = environment["OUTPOST_SERVER"], !v.isEmpty { o.server = v }
    if let v = environment["OUTPOST_SPACE"], !v.isEmpty { o.space = v }
    if let v = environment["OUTPOST_TOKEN"], !v.isEmpty { o.token = v }
    if let v = environment["OUTPOST_KEY_FILE"], !v.isEmpty { o.keyFile = v }
    if let v = environment["OUTPOST_APP_VERSION"], !v.isEmpty { o.appVersion = try appVersion(v) }
    var i = 0
    func value(_ flag: String) throws -> String {
        i += 1
        guard i < arguments.count else { throw UsageError(message: "\(flag) needs a value") }
        return arguments[i]
    }
    while i < arguments.count {
        let arg = arguments[i]
        if arg == "--help" || arg == "-h" || (arg == "help" && o.command.isEmpty) { throw HelpRequested() }
        if !o.command.isEmpty {
            o.command.append(arg)
        } else {
            switch arg {
            case "--store":
                o.store = try value(arg)
                o.storeGiven = true
            case "--server": o.server = try value(arg)
            case "--space":
                o.space = try value(arg)
                o.spaces.append(o.space!)
            case "--token": o.token = try value(arg)
            case "--resolve": o.resolve = try value(arg)
            case "--key-file": o.keyFile = try value(arg)
            case "--app-version": o.appVersion = try appVersion(try value(arg))
            case "--clear":
                let field = try value(arg)
                let parts = field.split(separator: ".", maxSplits: 1).map(String.init)
                guard parts.count == 2, !parts[1].isEmpty else { throw UsageError(message: "--clear takes COLLECTION.FIELD") }
                o.clear[parts[0], default: []].insert(parts[1])
            default:
                if arg.hasPrefix("--") { throw UsageError(message: "unknown option \(arg)") }
                o.command.append(arg)
            }
        }
        i += 1
    }
    guard !o.command.isEmpty else { throw UsageError(message: "no command") }
    return o
}

func json(_ value: JSONValue) -> String { value.description }

func recordJSON(_ r: StoredRecord) -> JSONValue {
    [
        "collection": .string(r.collection), "id": .string(r.id),
        "data": r.data.map { .object($0) } ?? .null,
        "version": r.version.map { .string($0.text) } ?? .null,
        "pending": .bool(r.pending),
    ]
}

/// The store for a command that only reads: opened as usual, or, while another process
/// (an app, a running `sync`) has it open, read alongside it (`OutpostStore.reader`).
func openStoreForReading(_ o: Options) throws -> OutpostStore {
    do {
        return try openStore(o, needsSync: false)
    } catch OutpostError.storeInUse {
        return try openStore(o, needsSync: false, reader: true)
    }
}

/// An app version: an integer from 0 to 2^53 − 1.
func appVersion(_ text: String) throws -> Int {
    guard let v = Int(text), v >= 0, v <= AppVersions.maxVersion else { throw UsageError(message: "--app-version takes an integer from 0 to \(AppVersions.maxVersion)") }
    return v
}

/// The store of `o`, for a command. `collections` declares queries' dates. The file's query
/// indexes and search tables are the app's: the client never reconciles them to its own
/// declarations (`Configuration.reconcilesQueryIndexes`), so a `put` or a `sync` on an
/// app's file keeps them, and keeps them up to date.
func openStore(_ o: Options, needsSync: Bool, reader: Bool = false, collections: [String: CollectionSchema] = [:]) throws -> OutpostStore {
    let space: String
    if let s = o.space {
        space = s
    } else if let stored = try OutpostStore.space(ofStoreAt: o.store) {
        space = stored
    } else {
        throw UsageError(message: "--space (or OUTPOST_SPACE) is needed to create \(o.store)")
    }
    var configuration = OutpostStore.Configuration(space: space)
    configuration.appVersion = o.appVersion
    configuration.collections = collections
    configuration.reconcilesQueryIndexes = false
    switch o.resolve {
    case "server-wins": configuration.resolver = .serverWins
    case "client-wins": configuration.resolver = .clientWins
    case "last-write-wins": configuration.resolver = .lastWriteWins(maxClockDrift: .seconds(300))
    default: throw UsageError(message: "--resolve must be server-wins, client-wins or last-write-wins")
    }
    if let keyFile = o.keyFile { configuration.encryption = .spaceKey(FileKeyStore(path: keyFile), clearFields: o.clear) }
    var transport: HTTPSyncTransport?
    if let server = o.server {
        guard let url = URL(string: server), url.scheme == "http" || url.scheme == "https" else {
            throw UsageError(message: "--server must be an http or https URL")
        }
        transport = HTTPSyncTransport(baseURL: url, token: o.token)
    } else if needsSync {
        throw UsageError(message: "--server (or OUTPOST_SERVER) is needed to sync")
    }
    if reader { return try OutpostStore.reader(path: o.store, configuration: configuration) }
    return try OutpostStore(path: o.store, configuration: configuration, transport: transport)
}

/// The most bytes `put` reads for `-` or `@FILE`: well above any server's record limit
/// (the server refuses what is over its own `maxRecordBytes` when the change is sent).
let maxJSONArgumentBytes = 64 << 20

/// The bytes of `put`'s JSON argument: the argument itself, standard input for `-`, or a
/// file's contents for `@FILE` (a command line holds at most 128 KiB per argument).
func jsonArgument(_ argument: String) throws -> [UInt8] {
    let handle: FileHandle
    let source: String
    if argument == "-" {
        handle = FileHandle.standardInput
        source = "standard input"
    } else if argument.hasPrefix("@") {
        let path = String(argument.dropFirst())
        guard let file = FileHandle(forReadingAtPath: path) else { throw UsageError(message: "cannot read \(path)") }
        handle = file
        source = path
    } else {
        return Array(argument.utf8)
    }
    defer { if argument != "-" { try? handle.close() } }
    var bytes: [UInt8] = []
    while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
        bytes += chunk
        guard bytes.count <= maxJSONArgumentBytes else {
            throw UsageError(message: "\(source) holds more than \(maxJSONArgumentBytes) bytes; a record is far smaller")
        }
    }
    return bytes
}

func run(_ o: Options) async throws -> Int32 {
    let command = o.command[0]
    let args = Array(o.command.dropFirst())
    func expect(_ count: ClosedRange<Int>) throws {
        guard count.contains(args.count) else { throw UsageError(message: "wrong number of arguments for \(command)") }
    }
    switch command {
    case "put":
        try expect(3...3)
        let value: JSONValue
        do { value = try JSONParser.parse(try jsonArgument(args[2])) } catch let usage as UsageError { throw usage } catch { throw UsageError(message: "JSON: \(error)") }
        guard case .object(let object) = value else { throw UsageError(message: "JSON must be an object") }
        let store = try openStore(o, needsSync: false)
        let record = try await store.put(object, in: args[0], id: args[1])
        print(json(recordJSON(record)))
        await store.close()
    case "delete":
        try expect(2...2)
        let store = try openStore(o, needsSync: false)
        let deleted = try await store.delete(from: args[0], id: args[1])
        print(json(["deleted": .bool(deleted)]))
        await store.close()
    case "get":
        try expect(2...2)
        let store = try openStoreForReading(o)
        let record = try await store.record(in: args[0], id: args[1])
        await store.close()
        guard let record, let data = record.data, !record.deleted else { return 3 }
        print(json(.object(data)))
    case "list":
        try expect(0...1)
        let store = try openStoreForReading(o)
        for r in try await store.records(in: args.first) { print(json(recordJSON(r))) }
        await store.close()
    case "query":
        return try await query(o, args)
    case "sync" where args == ["--all"] || o.spaces.count > 1:
        return try await syncSpaces(o, all: args == ["--all"])
    case "sync":
        return try await syncOne(o, args)
    case "pending":
        try expect(0...0)
        try await printPending(o)
    case "status":
        try expect(0...0)
        try await printStatus(o)
    case "conflicts":
        var since: Int64 = 0
        switch args.count {
        case 0: break
        case 2 where args[0] == "--since": since = try sinceArgument(args[1])
        default: throw UsageError(message: "conflicts takes [--since TIME]")
        }
        let store = try openStoreForReading(o)
        for entry in try await store.conflicts(since: Date(timeIntervalSince1970: Double(since) / 1000)) { print(json(entry.json)) }
        await store.close()
    case "upload":
        return try await upload(o, args)
    case "key":
        return try await key(o, args)
    case "reencrypt":
        try expect(0...0)
        let store = try openStore(o, needsSync: false)
        let rewritten = try await store.reencryptAll()
        await store.close()
        print(json(["rewritten": .number(JSONNumber(rewritten)), "kid": store.currentKeyId.map { .string($0) } ?? .null]))
    default:
        throw UsageError(message: "unknown command \(command)")
    }
    return 0
}

/// `sync [--progress]`: one sync of the store's space; the report, or the error and the
/// changes still pending (exit 2).
func syncOne(_ o: Options, _ args: [String]) async throws -> Int32 {
    guard args.isEmpty || args == ["--progress"] else { throw UsageError(message: "usage: sync [--progress] | sync --all") }
    let store = try openStore(o, needsSync: true)
    defer { Task { await store.close() } }
    // --progress: one line on standard error per page the pull applies.
    var progressPrinter: Task<Void, Never>?
    if args == ["--progress"] {
        let activity = await store.syncActivity()
        progressPrinter = Task {
            for await step in activity {
                guard case .pulled(let p) = step else { continue }
                let total = p.approximateTotal.map { " of about \($0)" } ?? ""
                FileHandle.standardError.write(Data("pulled \(p.pulled)\(total) records\n".utf8))
            }
        }
    }
    do {
        let r = try await store.sync()
        // Closing ends the activity stream, so every progress line is out before the report.
        await store.close()
        await progressPrinter?.value
        print(json(.object(reportJSON(r))))
        return 0
    } catch let error as OutpostError {
        let pending = (try? await store.status().pending) ?? 0
        await store.close()
        await progressPrinter?.value
        print(json([
            "error": ["code": .string(error.code), "message": .string(error.description)],
            "pending": .number(JSONNumber(pending)),
        ]))
        FileHandle.standardError.write(Data("outpost: sync failed: \(error)\n".utf8))
        return 2
    }
}

/// `pending`: the queue's changes and the rejected ones, oldest first.
func printPending(_ o: Options) async throws {
    let store = try openStoreForReading(o)
    let changes = try await store.pendingChanges() + store.rejectedChanges()
    for c in changes.sorted(by: { $0.clientTime < $1.clientTime }) {
        var line: JSONObject = [
            "changeId": .string(c.changeId), "collection": .string(c.collection), "id": .string(c.id),
            "op": .string(c.op.rawValue), "state": .string(c.state.rawValue),
        ]
        if c.state == .rejected {
            line["error"] = ["code": .string(c.errorCode ?? "rejected"), "message": .string(c.lastError ?? "")]
        }
        if let required = c.requiredAppVersion, c.state == .upgradeRequired { line["requiredAppVersion"] = .number(JSONNumber(required)) }
        print(json(.object(line)))
    }
    await store.close()
}

/// `status`: the store's epoch, cursor, pending count and last sync.
func printStatus(_ o: Options) async throws {
    let store = try openStoreForReading(o)
    let s = try await store.status()
    print(json([
        "epoch": s.epoch.map { .string($0.rawValue) } ?? .null,
        "cursor": s.cursor.map { .string($0.text) } ?? .null,
        "pending": .number(JSONNumber(s.pending)),
        "upgradeRequired": .number(JSONNumber(s.upgradeRequired)),
        "lastSyncAt": s.lastSyncAt.map { .number(JSONNumber(Int64(($0.timeIntervalSince1970 * 1000).rounded()))) } ?? .null,
        "lastError": s.lastError.map { .string($0) } ?? .null,
        "restoredFrom": s.restoredFrom.map { .string($0) } ?? .null,
    ]))
    await store.close()
}

/// What a query's rows are decoded as: nothing. The rows give the ids in the query's order,
/// and each record's data is then printed as stored (`record(in:id:)`, number lexemes
/// kept); decoding nothing never leaves a record out, as a `JSONValue` decode would one
/// with a number no `Double` holds (`1e400`).
struct QueryRowID: Decodable, Sendable {
    init(from decoder: any Decoder) throws {}
}

/// `query COLLECTION [--where EXPR]... [--sort FIELD[,-FIELD...]] [--search TEXT] [--limit N]
/// [--offset N] [--date FIELD]... [--count | --explain]`: the rows as JSON lines, their count,
/// or the plan.
///
/// The store is always opened as a reader, whether or not another process has it open: a
/// query writes nothing, and reads the app's indexes and search tables as they are.
func query(_ o: Options, _ args: [String]) async throws -> Int32 {
    let a = try QueryArguments(args)
    let (collection, count, explain) = (a.collection, a.count, a.explain)
    guard FileManager.default.fileExists(atPath: o.store) else { throw StoreMissing(path: o.store) }

    let store = try openStore(o, needsSync: false, reader: true,
                              collections: a.dates.isEmpty ? [:] : [collection: CollectionSchema(dates: a.dates)])
    do {
        var q = store.collection(collection, of: QueryRowID.self).query.sorted(by: a.sorts).offset(a.offset).limit(a.limit)
        for filter in a.filters { q = q.filter(filter) }
        if let search = a.search { q = q.search(search) }
        if count {
            print(json(["count": .number(JSONNumber(try await q.count()))]))
        } else if explain {
            let plan = try await q.explain()
            print(json([
                "index": plan.index.map { .array($0.map { .string($0) }) } ?? .null,
                "search": .bool(plan.searches),
                "plan": .array(plan.steps.map { .string($0) }),
                "sql": .string(plan.sql),
            ]))
        } else {
            for row in try await q.fetch() {
                // Deleted since the query read it (by the process that has the store open).
                guard let r = try await store.record(in: collection, id: row.id), let data = r.data, !r.deleted else { continue }
                print(json([
                    "id": .string(r.id), "data": .object(data),
                    "version": r.version.map { .string($0.text) } ?? .null, "pending": .bool(r.pending),
                ]))
            }
        }
    } catch OutpostError.invalidQuery(let message) {
        // A query the store cannot run as asked (a search of a collection without a search
        // table, a field no path can name): the command line's fault, not the file's.
        await store.close()
        throw UsageError(message: "query: \(message)")
    } catch {
        await store.close()
        throw error
    }
    await store.close()
    return 0
}

/// The options of `query`, as parsed from its arguments.
struct QueryArguments {
    var collection = ""
    var filters: [QueryFilter] = []
    var sorts: [QuerySort] = []
    var search: String?
    var limit: Int?
    var offset = 0
    var dates: [String] = []
    var count = false, explain = false

    init(_ args: [String]) throws {
        var named: String?
        var rest = args[...]
        func value(_ flag: String) throws -> String {
            guard let v = rest.popFirst() else { throw UsageError(message: "\(flag) needs a value") }
            return v
        }
        func number(_ flag: String) throws -> Int {
            let text = try value(flag)
            guard let n = Int(text), n >= 0 else { throw UsageError(message: "\(flag) takes a whole number, not \(text)") }
            return n
        }
        while let arg = rest.popFirst() {
            switch arg {
            case "--where":
                do {
                    filters.append(try QueryFilter(parsing: try value(arg)))
                } catch OutpostError.invalidQuery(let message) {
                    throw UsageError(message: "--where: \(message)")
                }
            case "--sort":
                for key in try value(arg).split(separator: ",", omittingEmptySubsequences: false) {
                    let field = key.hasPrefix("-") ? key.dropFirst() : key
                    guard !field.isEmpty else { throw UsageError(message: "--sort takes FIELD[,-FIELD...]") }
                    sorts.append(key.hasPrefix("-") ? .descending(String(field)) : .ascending(String(field)))
                }
            case "--search": search = try value(arg)
            case "--limit": limit = try number(arg)
            case "--offset": offset = try number(arg)
            case "--date": dates.append(try value(arg))
            case "--count": count = true
            case "--explain": explain = true
            default:
                guard named == nil, !arg.hasPrefix("--") else { throw UsageError(message: "query: unexpected \(arg)") }
                named = arg
            }
        }
        guard let named else { throw UsageError(message: "query needs a COLLECTION") }
        guard !(count && explain) else { throw UsageError(message: "query takes --count or --explain, not both") }
        collection = named
    }
}

/// `query` on a path that holds no store: there is nothing to read (and a reader creates
/// nothing).
struct StoreMissing: Error, CustomStringConvertible {
    let path: String
    var description: String { "no store file at \(path)" }
}

/// A time as `conflicts --since` takes it: ms since 1970, or an ISO 8601 date and time.
func sinceArgument(_ text: String) throws -> Int64 {
    if let ms = Int64(text), ms >= 0 { return ms }
    let formatter = ISO8601DateFormatter()
    for options in [ISO8601DateFormatter.Options.withInternetDateTime, [.withInternetDateTime, .withFractionalSeconds], [.withFullDate]] {
        formatter.formatOptions = options
        if let date = formatter.date(from: text) { return Int64((date.timeIntervalSince1970 * 1000).rounded(.down)) }
    }
    throw UsageError(message: "--since takes ms since 1970 or an ISO 8601 time (2026-12-01T00:00:00Z), not \(text)")
}

/// `upload FILE [--content-type TYPE]`: the media JSON on stdout; what happened (resumed,
/// started over) on stderr. Exit 0 done, 2 failed but resumable (run it again), 1 failed
/// for good.
func upload(_ o: Options, _ args: [String]) async throws -> Int32 {
    var file: String?
    var contentType: String?
    var i = 0
    while i < args.count {
        if args[i] == "--content-type" {
            guard i + 1 < args.count else { throw UsageError(message: "--content-type needs a value") }
            contentType = args[i + 1]
            i += 2
        } else if file == nil && !args[i].hasPrefix("--") {
            file = args[i]
            i += 1
        } else {
            throw UsageError(message: "usage: upload FILE [--content-type TYPE]")
        }
    }
    guard let file else { throw UsageError(message: "upload needs a FILE") }
    let url = URL(fileURLWithPath: file)
    let type = contentType ?? guessContentType(url.pathExtension)
    guard UploadRequest.isValidContentType(type) else { throw UsageError(message: "--content-type must be a media type such as image/jpeg") }
    guard let server = o.server.flatMap(URL.init(string:)) else { throw UsageError(message: "--server (or OUTPOST_SERVER) is needed to upload") }
    let store = try openStore(o, needsSync: true)
    let uploader = MediaUploader(store: store, transport: HTTPMediaTransport(baseURL: server, token: o.token))
    do {
        let run = try await uploader.start(file: url, contentType: type, filename: url.lastPathComponent)
        var restarts = 0
        var told = false
        for await p in run.progress {
            if p.restarts > restarts {
                restarts = p.restarts
                FileHandle.standardError.write(Data("outpost: \(file) changed during its upload; starting over with its new content\n".utf8))
            }
            if !told && p.phase == .uploading && p.bytesSent > 0 && p.bytesSent < p.totalBytes {
                told = true
                FileHandle.standardError.write(Data("outpost: resuming \(file): \(p.bytesSent) of \(p.totalBytes) bytes already on the server\n".utf8))
            }
            if p.phase == .uploading { told = true }
        }
        if store.isEncrypted {
            // Sealed on this device as it was sent: the reference is what a record keeps.
            print(json(try JSONValue(encoding: try await run.reference)))
        } else {
            print(json(try await run.media.json))
        }
        await store.close()
        return 0
    } catch let error as MediaError {
        print(json(["error": ["code": .string(error.code), "message": .string(error.description)]]))
        FileHandle.standardError.write(Data("outpost: upload failed: \(error)\n".utf8))
        await store.close()
        return error.isPermanent ? 1 : 2
    }
}

/// The JSON report line of one sync.
func reportJSON(_ r: SyncReport) -> JSONObject {
    [
        "pushed": .number(JSONNumber(r.pushed)), "pulled": .number(JSONNumber(r.pulled)),
        "conflicts": .number(JSONNumber(r.conflicts)), "resolved": .number(JSONNumber(r.resolved)), "rejected": .number(JSONNumber(r.rejected)),
        "upgradeRequired": .number(JSONNumber(r.upgradeRequired)),
        "quarantined": .number(JSONNumber(r.quarantined)),
        "epoch": r.epoch.map { .string($0.rawValue) } ?? .null, "pending": .number(JSONNumber(r.pending)),
    ]
}

/// `--space A --space B sync`, `sync --all`: every space in turn through `OutpostClient`,
/// one line each; exit 2 when any failed.
func syncSpaces(_ o: Options, all: Bool) async throws -> Int32 {
    guard let server = o.server.flatMap(URL.init(string:)) else { throw UsageError(message: "--server (or OUTPOST_SERVER) is needed to sync") }
    let spaces = all ? OutpostClient.spaces(inToken: o.token ?? "") : o.spaces
    guard !spaces.isEmpty else { throw UsageError(message: all ? "the token names no space (wildcards cannot be listed: use --space)" : "no --space") }
    let token = o.token
    let keyFile = o.keyFile, clear = o.clear
    let client = OutpostClient(directory: o.storeGiven ? o.store : ".", baseURL: server, token: { _ in token }) { configuration in
        if let keyFile { configuration.encryption = .spaceKey(FileKeyStore(path: keyFile), clearFields: clear) }
    }
    try await client.attach(spaces: spaces)
    var failed = false
    for line in await client.sync() {
        var out: JSONObject = ["space": .string(line.space)]
        switch line.outcome {
        case .synced(let report):
            for (key, value) in reportJSON(report).elements { out[key] = value }
        case .failed(let error):
            failed = true
            let code = (error as? OutpostError)?.code ?? "failed"
            out["error"] = ["code": .string(code), "message": .string("\(error)")]
        }
        print(json(.object(out)))
    }
    await client.close()
    return failed ? 2 : 0
}

/// `key create|export|import|rotate`: the space's keys in `--key-file`.
func key(_ o: Options, _ args: [String]) async throws -> Int32 {
    guard let keyFile = o.keyFile else { throw UsageError(message: "key commands need --key-file (or OUTPOST_KEY_FILE)") }
    let keys = FileKeyStore(path: keyFile)
    var rest = args.dropFirst()
    var passphraseFile: String?
    var pbkdf2 = false
    var positional: [String] = []
    while let arg = rest.popFirst() {
        switch arg {
        case "--passphrase-file":
            guard let v = rest.popFirst() else { throw UsageError(message: "--passphrase-file needs a value") }
            passphraseFile = v
        case "--pbkdf2": pbkdf2 = true
        default: positional.append(arg)
        }
    }
    func passphrase() throws -> String {
        if let passphraseFile {
            guard let data = FileManager.default.contents(atPath: passphraseFile) else { throw UsageError(message: "cannot read \(passphraseFile)") }
            return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .newlines)
        }
        guard let v = ProcessInfo.processInfo.environment["OUTPOST_KEY_PASSPHRASE"], !v.isEmpty else {
            throw UsageError(message: "the passphrase comes from OUTPOST_KEY_PASSPHRASE or --passphrase-file FILE")
        }
        return v
    }
    func space() throws -> String {
        if let s = o.space { return s }
        if let stored = try OutpostStore.space(ofStoreAt: o.store) { return stored }
        throw UsageError(message: "--space (or OUTPOST_SPACE) is needed")
    }
    switch args.first {
    case "create":
        let key = try SpaceKeys.create(space: try space(), in: keys)
        print(json(["space": .string(try space()), "kid": .string(key.id)]))
    case "export":
        print(try await SpaceKeys.export(space: try space(), from: keys, passphrase: try passphrase(), derivation: pbkdf2 ? .pbkdf2SHA256 : .scrypt))
    case "import":
        guard positional.count == 1 else { throw UsageError(message: "usage: key import FILE|-") }
        let text: String
        if positional[0] == "-" {
            text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        } else {
            guard let data = FileManager.default.contents(atPath: positional[0]) else { throw UsageError(message: "cannot read \(positional[0])") }
            text = String(decoding: data, as: UTF8.self)
        }
        let imported = try await SpaceKeys.import(text, passphrase: try passphrase(), into: keys, space: o.space)
        let ring = try keys.keyring(space: imported)
        print(json(["space": .string(imported), "kid": ring.map { .string($0.current) } ?? .null,
                    "keys": .number(JSONNumber(ring?.keys.count ?? 0))]))
    case "rotate":
        let key = try SpaceKeys.rotate(space: try space(), in: keys)
        print(json(["space": .string(try space()), "kid": .string(key.id)]))
    default:
        throw UsageError(message: "usage: key create|export|import|rotate")
    }
    return 0
}

/// A media type from a file extension; `application/octet-stream` when unknown.
func guessContentType(_ pathExtension: String) -> String {
    switch pathExtension.lowercased() {
    case "jpg", "jpeg": "image/jpeg"
    case "png": "image/png"
    case "gif": "image/gif"
    case "heic": "image/heic"
    case "webp": "image/webp"
    case "mp4", "m4v": "video/mp4"
    case "mov": "video/quicktime"
    case "m4a": "audio/mp4"
    case "mp3": "audio/mpeg"
    case "wav": "audio/wav"
    case "pdf": "application/pdf"
    case "json": "application/json"
    case "txt": "text/plain"
    case "csv": "text/csv"
    default: "application/octet-stream"
    }
}

let status: Int32
do {
    let options = try parse(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
    status = try await run(options)
} catch is HelpRequested {
    print(usage)
    status = 0
} catch let error as UsageError {
    FileHandle.standardError.write(Data("outpost: \(error.message)\n".utf8))
    FileHandle.standardError.write(Data((usage + "\n").utf8))
    status = 64
} catch {
    FileHandle.standardError.write(Data("outpost: \(error)\n".utf8))
    status = 1
}
exit(status)
