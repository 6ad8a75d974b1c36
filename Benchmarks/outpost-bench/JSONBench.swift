// `outpost-bench json`: how fast OutpostCore's JSON layer parses and writes the bodies the
// sync protocol moves (docs/protocol.md sections 4 and 5), next to Foundation's
// JSONSerialization on the same bytes in the same run.
//
// Targets: the server takes >= 150,000 pushed changes/s and serves >= 400,000 pulled
// records/s; the client applies >= 100,000 records/s; parsing should reach >= 150 MB/s.
import Foundation
import OutpostCore

enum JSONBench {
    /// Runs every measurement and prints one line each. Options: `--seconds S` (time per
    /// measurement and round, default 0.3), `--rounds N` (best of N, default 5).
    static func run(arguments: [String]) async throws {
        var seconds = 0.3
        var rounds = 5
        var index = 0
        while index < arguments.count {
            switch arguments[index] {
            case "--seconds" where index + 1 < arguments.count:
                seconds = Double(arguments[index + 1]) ?? seconds
                index += 1
            case "--rounds" where index + 1 < arguments.count:
                rounds = Int(arguments[index + 1]) ?? rounds
                index += 1
            case "-h", "--help":
                print("usage: outpost-bench json [--seconds S] [--rounds N]")
                return
            default:
                throw BenchUsageError(message: "outpost-bench json: unknown argument \(arguments[index])")
            }
            index += 1
        }
        var bench = Runner(seconds: seconds, rounds: rounds)
        bench.measureAll()
    }

    struct BenchUsageError: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    // MARK: - Inputs

    /// Deterministic text so every run measures the same bytes.
    struct Digits: RandomNumberGenerator {
        var source = SplitMix64(seed: 0x0123_4567_89AB_CDEF)
        mutating func next() -> UInt64 { source.next() }
        mutating func hex(_ count: Int) -> String {
            String((0..<count).map { _ in "0123456789abcdef".randomElement(using: &self)! })
        }
        mutating func uuid() -> String { "\(hex(8))-\(hex(4))-\(hex(4))-\(hex(4))-\(hex(12))" }
        mutating func words(_ count: Int) -> String {
            let words = ["buy", "milk", "call", "mum", "fix", "the", "bike", "before", "Friday", "café", "report",
                         "draft", "send", "invoice", "garden", "water", "plants", "book", "flight", "to", "Zürich"]
            return (0..<count).map { _ in words.randomElement(using: &self)! }.joined(separator: " ")
        }
    }

    /// A record's `data`: about 200 bytes of the usual mix.
    static func recordData(_ digits: inout Digits, _ n: Int) -> String {
        let title = digits.words(4)
        let notes = digits.words(6) + (n % 10 == 0 ? #" \"quoted\"\n"# : "")
        return #"{"title":"\#(title)","done":\#(n % 3 == 0),"priority":\#(n % 5),"#
            + #""tags":["home","errand"],"notes":"\#(notes)","due":\#(1_764_430_000_000 + n * 60_000),"#
            + #""ratio":0.\#(n % 97 + 1),"owner":{"id":"\#(digits.hex(12))","name":"Ana"}}"#
    }

    /// `POST /push` body with `count` changes.
    static func pushBody(count: Int) -> (bytes: [UInt8], dataBytes: Int) {
        var digits = Digits()
        var dataBytes = 0
        var changes: [String] = []
        for n in 0..<count {
            let data = recordData(&digits, n)
            dataBytes += data.utf8.count
            let base = n % 4 == 0 ? "null" : #""01JDQ7ZK3M8X4N2B6C9V0T5R1W.\#(n + 17)""#
            changes.append(#"{"changeId":"\#(digits.uuid())","collection":"todos","id":"\#(digits.uuid())","#
                + #""op":"put","data":\#(data),"baseVersion":\#(base),"clientTime":\#(1_764_430_000_000 + n)}"#)
        }
        let body = #"{"clientId":"phone-7f3a","changes":["# + changes.joined(separator: ",") + "]}"
        return (Array(body.utf8), dataBytes / count)
    }

    /// One pulled record as the server holds it: columns plus the stored `data` bytes.
    struct StoredRecord {
        var collection: String
        var id: String
        var seq: Int64
        var deleted: Bool
        var data: [UInt8]
        var updatedAt: Int64
        var updatedBy: String
        var clientTime: Int64?
    }

    static let epoch = "01JDQ7ZK3M8X4N2B6C9V0T5R1W"

    static func storedRecords(count: Int) -> [StoredRecord] {
        var digits = Digits(source: SplitMix64(seed: 42))
        return (0..<count).map { n in
            StoredRecord(collection: n % 5 == 0 ? "projects" : "todos", id: digits.uuid(), seq: Int64(1000 + n),
                         deleted: n % 50 == 0, data: Array(recordData(&digits, n).utf8),
                         updatedAt: 1_764_430_000_123 + Int64(n), updatedBy: "phone-7f3a",
                         clientTime: n % 7 == 0 ? nil : 1_764_430_000_000 + Int64(n))
        }
    }

    /// `GET /pull` body, written piecewise the way the server writes pages.
    static func writePullPage(_ records: [StoredRecord], into page: inout [UInt8]) {
        page.append(contentsOf: #"{"epoch":"#.utf8)
        JSONWriter.appendString(epoch, to: &page)
        page.append(contentsOf: #","changes":["#.utf8)
        for (n, record) in records.enumerated() {
            if n > 0 { page.append(UInt8(ascii: ",")) }
            page.append(contentsOf: #"{"collection":"#.utf8)
            JSONWriter.appendString(record.collection, to: &page)
            page.append(contentsOf: #","id":"#.utf8)
            JSONWriter.appendString(record.id, to: &page)
            page.append(contentsOf: #","version":""#.utf8)
            page.append(contentsOf: epoch.utf8)
            page.append(UInt8(ascii: "."))
            JSONWriter.appendInt(record.seq, to: &page)
            page.append(contentsOf: #"","deleted":"#.utf8)
            JSONWriter.appendBool(record.deleted, to: &page)
            if !record.deleted {
                page.append(contentsOf: #","data":"#.utf8)
                JSONWriter.appendRaw(record.data, to: &page)
            }
            page.append(contentsOf: #","updatedAt":"#.utf8)
            JSONWriter.appendInt(record.updatedAt, to: &page)
            page.append(contentsOf: #","updatedBy":"#.utf8)
            JSONWriter.appendString(record.updatedBy, to: &page)
            if let clientTime = record.clientTime {
                page.append(contentsOf: #","clientTime":"#.utf8)
                JSONWriter.appendInt(clientTime, to: &page)
            }
            page.append(UInt8(ascii: "}"))
        }
        page.append(contentsOf: #"],"next":""#.utf8)
        page.append(contentsOf: epoch.utf8)
        page.append(UInt8(ascii: "."))
        JSONWriter.appendInt(records.last?.seq ?? 0, to: &page)
        page.append(contentsOf: #"","hasMore":true}"#.utf8)
    }

    // MARK: - Measuring

    struct Runner {
        var seconds: Double
        var rounds: Int
        /// Folded results, printed at the end so the optimizer keeps every piece of work.
        var sink = 0

        /// Best-of-`rounds` seconds per call of `body`.
        mutating func time(_ body: () throws -> Int) rethrows -> Double {
            let clock = ContinuousClock()
            var best = Double.infinity
            for _ in 0..<rounds {
                var calls = 0
                let start = clock.now
                var elapsed = 0.0
                repeat {
                    sink &+= try body()
                    calls += 1
                    elapsed = (clock.now - start).seconds
                } while elapsed < seconds
                best = min(best, elapsed / Double(calls))
            }
            return best
        }

        func line(_ name: String, bytes: Int, items: Int, itemName: String, perCall: Double, versus: Double? = nil) {
            let mbps = Double(bytes) / perCall / 1_000_000
            let rate = Double(items) / perCall
            var text = "\(name.padding(toLength: 44, withPad: " ", startingAt: 0))"
                + "\(format(mbps, 8)) MB/s  \(format(rate, 12)) \(itemName)/s"
            if let versus { text += "   (\(format(versus / perCall, 5))x JSONSerialization)" }
            print(text)
        }

        func format(_ value: Double, _ width: Int) -> String {
            let rounded = value >= 100 ? String(Int(value.rounded())) : String(Double(Int(value * 10)) / 10)
            return String(repeating: " ", count: max(0, width - rounded.count)) + rounded
        }

        /// Builds the inputs, then measures the push body, the server's push path and the
        /// pull page in that order, and prints the checksum that keeps the work alive.
        mutating func measureAll() {
            let (push, dataSize) = JSONBench.pushBody(count: 500)
            let pushData = Data(push)
            let records = JSONBench.storedRecords(count: 1000)
            var pull: [UInt8] = []
            JSONBench.writePullPage(records, into: &pull)
            let pullData = Data(pull)
            print("push body: 500 changes, \(push.count) bytes (data about \(dataSize) bytes each)")
            print("pull page: 1000 records, \(pull.count) bytes")
            print("best of \(rounds) rounds of \(seconds) s each")
            print("")

            let parsed = measurePushBody(push, pushData)
            measureServerPush(push, parsed)
            measurePull(records, pull, pullData)
            print("")
            print("checksum \(sink & 0xFFFF)")
        }

        /// What `measurePushBody` hands on: the push body parsed once, and the two parse times
        /// the server's push path is compared with.
        struct ParsedPush {
            var value: JSONValue
            var parse: Double
            var foundationParse: Double
        }

        /// The push body parsed and written back, by OutpostCore and by Foundation.
        mutating func measurePushBody(_ push: [UInt8], _ pushData: Data) -> ParsedPush {
            // Push: parse.
            let foundationPushParse = time {
                let any = try! JSONSerialization.jsonObject(with: pushData)
                return ((any as! [String: Any])["changes"] as! [Any]).count
            }
            let pushParse = time { try! JSONParser.parse(push)["changes"]!.arrayValue!.count }
            line("parse push body (JSONParser)", bytes: push.count, items: 500, itemName: "changes",
                 perCall: pushParse, versus: foundationPushParse)
            line("parse push body (JSONSerialization)", bytes: push.count, items: 500, itemName: "changes",
                 perCall: foundationPushParse)

            // Push: write the parsed tree back.
            let pushValue = try! JSONParser.parse(push)
            let pushAny = try! JSONSerialization.jsonObject(with: pushData)
            let foundationPushWrite = time { try! JSONSerialization.data(withJSONObject: pushAny).count }
            let pushWrite = time { pushValue.encoded().count }
            line("write push body (JSONWriter)", bytes: push.count, items: 500, itemName: "changes",
                 perCall: pushWrite, versus: foundationPushWrite)
            line("write push body (JSONSerialization)", bytes: push.count, items: 500, itemName: "changes",
                 perCall: foundationPushWrite)
            let canonicalWrite = time { pushValue.encoded(canonical: true).count }
            line("write push body, canonical", bytes: push.count, items: 500, itemName: "changes",
                 perCall: canonicalWrite)
            return ParsedPush(value: pushValue, parse: pushParse, foundationParse: foundationPushParse)
        }

        /// The server's push path on the push body, and the share of it a raw-span parse
        /// mode could save.
        mutating func measureServerPush(_ push: [UInt8], _ parsed: ParsedPush) {
            let pushValue = parsed.value
            let pushParse = parsed.parse
            let foundationPushParse = parsed.foundationParse
            // The server's push hot path: parse once, then per change read the fields and write
            // `data` compact (to store) and the fingerprint material canonical (to hash).
            let serverPush = time {
                let body = try! JSONParser.parse(push)
                var total = 0
                var stored: [UInt8] = []
                var material: [UInt8] = []
                for change in body["changes"]!.arrayValue! {
                    guard case .object(let fields) = change else { continue }
                    total &+= fields["changeId"]!.stringValue!.utf8.count
                    total &+= fields["collection"]!.stringValue!.utf8.count
                    total &+= fields["id"]!.stringValue!.utf8.count
                    total &+= fields["op"]!.stringValue!.utf8.count
                    total &+= fields["baseVersion"]!.isNull ? 0 : 1
                    total &+= Int(fields["clientTime"]!.int64Value! & 1)
                    let data = fields["data"]!.objectValue!
                    stored.removeAll(keepingCapacity: true)
                    JSONWriter.append(data, to: &stored)
                    material.removeAll(keepingCapacity: true)
                    let fingerprinted: JSONObject = [
                        "collection": fields["collection"]!, "id": fields["id"]!, "op": fields["op"]!,
                        "data": .object(data), "baseVersion": fields["baseVersion"]!, "force": false,
                    ]
                    JSONWriter.append(fingerprinted, to: &material, canonical: true)
                    total &+= stored.count &+ material.count
                }
                return total
            }
            line("server push: parse + store + fingerprint", bytes: push.count, items: 500, itemName: "changes",
                 perCall: serverPush, versus: foundationPushParse)
            // What a raw-span parse mode could save at best: the compact write of `data`
            // (the canonical write for the fingerprint is needed either way).
            let compactWrites = time {
                var total = 0
                var stored: [UInt8] = []
                for change in pushValue["changes"]!.arrayValue! {
                    stored.removeAll(keepingCapacity: true)
                    JSONWriter.append(change["data"]!.objectValue!, to: &stored)
                    total &+= stored.count
                }
                return total
            }
            print("  of which parsing \(Int(pushParse / serverPush * 100))%, compact data writes "
                + "\(Int(compactWrites / serverPush * 100))% (the most a raw-span mode could save)")
        }

        /// The pull page written by the server, parsed and written back by OutpostCore and by
        /// Foundation, and applied by the client.
        mutating func measurePull(_ records: [StoredRecord], _ pull: [UInt8], _ pullData: Data) {
            // Pull: server writes a page from stored columns.
            var page: [UInt8] = []
            let serverPull = time {
                page.removeAll(keepingCapacity: true)
                JSONBench.writePullPage(records, into: &page)
                return page.count
            }
            line("server pull: write page (JSONWriter pieces)", bytes: pull.count, items: 1000, itemName: "records",
                 perCall: serverPull)

            // Pull: the client parses the page and applies every record.
            let foundationPullParse = time {
                let any = try! JSONSerialization.jsonObject(with: pullData)
                return ((any as! [String: Any])["changes"] as! [Any]).count
            }
            let pullParse = time { try! JSONParser.parse(pull)["changes"]!.arrayValue!.count }
            line("parse pull page (JSONParser)", bytes: pull.count, items: 1000, itemName: "records",
                 perCall: pullParse, versus: foundationPullParse)
            line("parse pull page (JSONSerialization)", bytes: pull.count, items: 1000, itemName: "records",
                 perCall: foundationPullParse)
            let pullValue = try! JSONParser.parse(pull)
            let pullAny = try! JSONSerialization.jsonObject(with: pullData)
            let foundationPullWrite = time { try! JSONSerialization.data(withJSONObject: pullAny).count }
            let pullWrite = time { pullValue.encoded().count }
            line("write pull page (JSONWriter)", bytes: pull.count, items: 1000, itemName: "records",
                 perCall: pullWrite, versus: foundationPullWrite)
            line("write pull page (JSONSerialization)", bytes: pull.count, items: 1000, itemName: "records",
                 perCall: foundationPullWrite)
            let clientApply = time {
                let body = try! JSONParser.parse(pull)
                var total = 0
                var stored: [UInt8] = []
                for change in body["changes"]!.arrayValue! {
                    total &+= change["id"]!.stringValue!.utf8.count &+ change["version"]!.stringValue!.utf8.count
                    total &+= Int(change["updatedAt"]!.int64Value! & 1)
                    if let data = change["data"]?.objectValue {
                        stored.removeAll(keepingCapacity: true)
                        JSONWriter.append(data, to: &stored)
                        total &+= stored.count
                    }
                }
                return total
            }
            line("client apply: parse + read + store data", bytes: pull.count, items: 1000, itemName: "records",
                 perCall: clientApply, versus: foundationPullParse)
        }
    }
}

extension Duration {
    fileprivate var seconds: Double {
        let (whole, fraction) = components
        return Double(whole) + Double(fraction) / 1e18
    }
}
