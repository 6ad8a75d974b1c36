// outpost-driver: the SDK's client driver for `outpost-conformance client`
// (docs/conformance.md, "Client drivers"). It reads one JSON request a line on standard
// input and writes one JSON answer a line on standard output, over a real OutpostStore on
// a real SQLite file and its HTTP transport. The harness starts several, puts a faulty
// proxy between each and the server, and checks what they end up holding.
import Foundation
import Outpost
import OutpostCore

/// One answer line: `{"id": …, "ok": true, …}` with `fields`, flushed at once (the harness
/// waits for it).
func answer(_ id: JSONValue, ok: Bool, _ fields: JSONObject = [:]) {
    var line: JSONObject = ["id": id, "ok": .bool(ok)]
    for (key, value) in fields { line[key] = value }
    FileHandle.standardOutput.write(Data((JSONValue.object(line).description + "\n").utf8))
}

/// A request the driver cannot carry out as asked: answered `ok: false` with this error.
struct RequestError: Error {
    let code: String
    let message: String
}

func string(_ request: JSONObject, _ key: String) throws -> String {
    guard let value = request[key]?.stringValue else { throw RequestError(code: "invalid_request", message: "\(key) must be a string") }
    return value
}

func number(_ n: Int) -> JSONValue { .number(JSONNumber(n)) }

/// A record as the driver reports it: id, data and version.
func recordJSON(_ r: StoredRecord) -> JSONValue {
    ["id": .string(r.id), "data": r.data.map { .object($0) } ?? .null, "version": r.version.map { .string($0.text) } ?? .null]
}

func openStore(_ request: JSONObject) throws -> OutpostStore {
    let path = try string(request, "path"), space = try string(request, "space")
    guard let url = URL(string: try string(request, "server")) else { throw RequestError(code: "invalid_request", message: "server must be a URL") }
    let token = request["token"]?.stringValue
    // The SDK's defaults, as an app has them (the merge-fields resolver among them); a
    // short request timeout, so a proxy that holds an answer costs a run little.
    var options = HTTPSyncTransport.Options()
    options.timeout = .seconds(10)
    let transport = HTTPSyncTransport(baseURL: url, token: token, options: options)
    return try OutpostStore(path: path, configuration: OutpostStore.Configuration(space: space), transport: transport)
}

/// Carries out one request other than `open`, `crash` and `close` and returns the answer's fields.
func perform(_ op: String, _ request: JSONObject, on store: OutpostStore?) async throws -> JSONObject {
    guard let store else { throw RequestError(code: "not_open", message: "no store is open") }
    switch op {
    case "save":
        guard let data = request["data"]?.objectValue else { throw RequestError(code: "invalid_request", message: "data must be an object") }
        let record = try await store.put(data, in: try string(request, "collection"), id: try string(request, "record"))
        return ["version": record.version.map { .string($0.text) } ?? .null]
    case "delete":
        return ["deleted": .bool(try await store.delete(from: try string(request, "collection"), id: try string(request, "record")))]
    case "sync":
        do {
            let r = try await store.sync()
            return ["pushed": number(r.pushed), "pulled": number(r.pulled), "conflicts": number(r.conflicts),
                    "rejected": number(r.rejected), "pending": number(r.pending)]
        } catch let error as OutpostError {
            // A failed sync is an answer too: the harness expects many under its faults.
            throw RequestError(code: error.code, message: error.description)
        }
    case "all":
        let records = try await store.records(in: try string(request, "collection")).filter { !$0.deleted }
        return ["records": .array(records.map(recordJSON))]
    case "get":
        let record = try await store.record(in: try string(request, "collection"), id: try string(request, "record"))
        return ["record": record.flatMap { $0.deleted ? nil : recordJSON($0) } ?? .null]
    case "status":
        let s = try await store.status()
        return ["pending": number(s.pending), "rejected": number(s.rejected)]
    case "rejected":
        let changes = try await store.rejectedChanges()
        return ["changes": .array(changes.map { c in
            ["changeId": .string(c.changeId), "collection": .string(c.collection), "id": .string(c.id),
             "op": .string(c.op.rawValue), "code": .string(c.errorCode ?? "rejected")]
        })]
    default:
        throw RequestError(code: "unknown_op", message: "unknown op \(op)")
    }
}

/// The store the `open` request made; nil before it and after `close`.
var store: OutpostStore?

while let line = readLine(strippingNewline: true) {
    guard !line.isEmpty else { continue }
    guard let request = (try? JSONParser.parse(line))?.objectValue else {
        answer(.null, ok: false, ["error": "invalid_json"])
        continue
    }
    let id = request["id"] ?? .null
    let op = request["op"]?.stringValue ?? ""
    switch op {
    case "crash":
        // As a kill -9 would: no answer, nothing closed, nothing flushed.
        kill(getpid(), SIGKILL)
    case "close":
        await store?.close()
        store = nil
        answer(id, ok: true)
        exit(0)
    default:
        do {
            if op == "open" {
                guard store == nil else { throw RequestError(code: "invalid_request", message: "a store is open") }
                store = try openStore(request)
                answer(id, ok: true)
                continue
            }
            answer(id, ok: true, try await perform(op, request, on: store))
        } catch let error as RequestError {
            answer(id, ok: false, ["error": .string(error.code), "message": .string(error.message)])
        } catch let error as OutpostError {
            answer(id, ok: false, ["error": .string(error.code), "message": .string(error.description)])
        } catch {
            answer(id, ok: false, ["error": "failed", "message": .string("\(error)")])
        }
    }
}
// End of input: the harness went away; close as an app would on its way out.
await store?.close()
