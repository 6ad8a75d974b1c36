// `outpost-bench integrations`: what the integrations cost, through the release
// `outpost-server`, each figure beside the same work without them in the same run.
//
// 1. Webhooks never slow pushes: 8 keep-alive clients push --changes (100,000) new records
//    in pushes of --batch (500) to three servers started side by side: one without
//    webhooks (the baseline), one with `--webhook` pointing at an in-process receiver that
//    answers 200 at once, one pointing at a listener that accepts the connection and never
//    answers (`--webhook-timeout` 2 s, so deliveries fail and are retried during the run).
//    Rounds alternate the servers' order; after the fast receiver's server the bench waits
//    until the receiver has every change, so its deliveries never overlap another server's
//    round. Goal: each webhook server's push time ≤ 1.3 × the baseline's. Information: the
//    changes the fast receiver had when the pushes ended, `outpost_webhook_lag_seconds`
//    then, the time to catch up, and each change's delivery lag (arrival − `updatedAt`).
// 2. Provider tokens cost little: one server with `--jwks-file` (an ES256 and an RS256 key)
//    and `--jwt-issuer`; a pull of one record from the middle of a space of 10,000 in a
//    closed loop on 64 connections (`LoadLoop`, as `peers` (c)), authenticated by an HS256
//    token (the baseline), an ES256 and an RS256 token, alternated. Goal: ES256 and RS256
//    ≥ 0.8 × HS256's requests/s. Information: pushes of one change on 8 connections per
//    token; the token check in this process (`Authorizer.claims`, what the server runs for
//    every request: the same token again, so a provider token is served from the cache of
//    verified tokens) and the signature alone.
// 3. tus against the native chunked upload: a --media-mib (64) MiB file of random bytes in
//    --chunk-mib (4) MiB pieces either way (the server runs with `--chunk-size` of that
//    size): native init + chunks with `Content-Digest` + finalize (`MediaBench`'s steps) on
//    one connection and on two, and tus creation + PATCHes with `Upload-Checksum` (one at a
//    time, as tus requires). Digests are computed before the clock. Each upload goes to a
//    space of its own (the same file twice in a space is one media item), three rounds
//    alternated, medians. Goal: tus ≥ 0.8 × native on one connection (the same requests one
//    after another); the ratio to two connections is printed too.
import Foundation
import Glibc
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import OutpostServer
import OutpostSignatures
import Synchronization

enum IntegrationsBench {
    static let secret = "outpost-bench-integrations-secret"

    struct Options {
        var server: String?
        var parts: Set<Int> = [1, 2, 3]
        var changes = 100_000
        var batch = 500
        var rounds = 2
        var webhookTimeout = 2
        /// `--webhook-batch-changes` and `--webhook-batch-bytes` for both webhook servers; nil:
        /// the server's defaults.
        var webhookBatchChanges: Int?
        var webhookBatchBytes: Int?
        var seconds = 3
        var mediaMiB = 64
        var chunkMiB = 4
        var uploadRounds = 3
    }

    static let help = """
        usage: outpost-bench integrations [--server PATH] [--parts 1,2,3]
                 [--changes 100000] [--batch 500] [--rounds 2] [--webhook-timeout 2]   (1: webhooks)
                 [--webhook-batch-changes N] [--webhook-batch-bytes N]                  (1: the servers' batch bounds)
                 [--seconds 3]                                                          (2: provider tokens; --rounds too)
                 [--media-mib 64] [--chunk-mib 4] [--upload-rounds 3]                   (3: tus)
        """

    static func run(arguments: [String]) async throws {
        var o = Options()
        var reader = OptionReader(arguments, help: help)
        while let option = reader.next() {
            switch option {
            case "--server": o.server = try reader.value()
            case "--parts": o.parts = Set(try reader.value().split(separator: ",").compactMap { Int($0) })
            case "--changes": o.changes = try reader.number(atLeast: 8)
            case "--batch": o.batch = try reader.number(atLeast: 1)
            case "--rounds": o.rounds = try reader.number(atLeast: 1)
            case "--webhook-timeout": o.webhookTimeout = try reader.number(atLeast: 1)
            case "--webhook-batch-changes": o.webhookBatchChanges = try reader.number(atLeast: 1)
            case "--webhook-batch-bytes": o.webhookBatchBytes = try reader.number(atLeast: 1)
            case "--seconds": o.seconds = try reader.number(atLeast: 1)
            case "--media-mib": o.mediaMiB = try reader.number(atLeast: 1)
            case "--chunk-mib": o.chunkMiB = try reader.number(atLeast: 1)
            case "--upload-rounds": o.uploadRounds = try reader.number(atLeast: 1)
            case "-h", "--help":
                print(help)
                return
            default: throw reader.unknown(option)
            }
        }
        HTTPBench.raiseOpenFileLimit()
        let path = try HTTPBench.locateServer(o.server)
        let work = try HTTPBench.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: work) }
        setenv("OUTPOST_JWT_SECRET", secret, 1)
        let start = ContinuousClock.now
        print("outpost-bench integrations: \(ProcessInfo.processInfo.activeProcessorCount) cores, load average \(HTTPBench.loadAverage()); server \(path)")
        if o.parts.contains(1) { try await webhooks(path: path, work: work, o: o) }
        if o.parts.contains(2) { try await providerTokens(path: path, work: work, o: o) }
        if o.parts.contains(3) { try await tus(path: path, work: work, o: o) }
        print(String(format: "\nload average at the end %@; the run took %.0f s", HTTPBench.loadAverage(), MediaBench.seconds(ContinuousClock.now - start)))
    }

    /// An HS256 token of the server's secret for every space.
    static func hsToken(admin: Bool = false) -> String { benchToken(secret: secret, admin: admin) }

    static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

    static func mean(_ values: [Double]) -> Double { values.reduce(0, +) / Double(max(values.count, 1)) }

    /// The samples of `name` in the server's `/metrics`: each series' labels and value.
    static func metric(_ name: String, port: Int, admin: String) throws -> [(labels: String, value: Double)] {
        let answer = try probe(port: port, "/metrics", token: admin)
        guard answer.status == 200 else { throw HTTPBench.BenchError("/metrics answered \(answer.status)") }
        var out: [(String, Double)] = []
        for line in answer.text.split(separator: "\n") where line.hasPrefix(name) {
            let rest = line.dropFirst(name.count)
            guard rest.first == " " || rest.first == "{", let value = Double(rest.split(separator: " ").last ?? "") else { continue }
            out.append((rest.hasPrefix("{") ? String(rest.prefix { $0 != "}" }.dropFirst()) : "", value))
        }
        return out
    }

    // MARK: 1. Webhooks

    static func webhooks(path: String, work: String, o: Options) async throws {
        let clients = 8
        let perClient = max(1, o.changes / o.batch / clients)
        let total = perClient * clients * o.batch
        print("\n1. webhooks never slow pushes: \(clients) clients, pushes of \(o.batch) new records (~200 bytes of data), \(total) changes per server per round, \(o.rounds) rounds")
        let fast = try WebhookReceiver()
        let hang = try HangingReceiver()
        defer { hang.stop() }
        let plain = try HTTPBench.ServerChild.start(path: path, data: work + "/webhooks-none", eventLoops: 0)
        defer { plain.stop() }
        let bounds = (o.webhookBatchChanges.map { ["--webhook-batch-changes", String($0)] } ?? [])
            + (o.webhookBatchBytes.map { ["--webhook-batch-bytes", String($0)] } ?? [])
        let fastServer = try HTTPBench.ServerChild.start(path: path, data: work + "/webhooks-fast", eventLoops: 0,
                                                         extra: ["--webhook", fast.url, "--webhook-allow-private", "true"] + bounds)
        defer { fastServer.stop() }
        let hangServer = try HTTPBench.ServerChild.start(path: path, data: work + "/webhooks-hang", eventLoops: 0,
                                                         extra: ["--webhook", hang.url, "--webhook-timeout", String(o.webhookTimeout),
                                                                 "--webhook-allow-private", "true"] + bounds)
        defer { hangServer.stop() }
        let token = hsToken(), admin = hsToken(admin: true)
        let servers: [(name: String, server: HTTPBench.ServerChild)] = [
            ("no webhook (baseline)", plain), ("fast receiver (200)", fastServer), ("hanging receiver", hangServer),
        ]
        if !bounds.isEmpty { print("webhook servers: \(bounds.joined(separator: " "))") }
        print("servers: none pid \(plain.pid), fast pid \(fastServer.pid) -> \(fast.url), hanging pid \(hangServer.pid) -> \(hang.url) (--webhook-timeout \(o.webhookTimeout))")
        func bodies(_ space: String, perClient: Int) -> [[[UInt8]]] {
            (0..<clients).map { c in (0..<perClient).map { r in SyncBench.pushBody(space: space, prefix: "\(space)-c\(c)-r\(r)", count: o.batch) } }
        }

        // Warm-up on every server, and the fast receiver caught up before the clock.
        var expected = 0
        for (_, server) in servers {
            let warm = try SyncBench.drive(port: server.port, token: token, space: "warmup", bodies: bodies("warmup", perClient: 2))
            if server === fastServer { expected += warm.counted }
        }
        guard try await fast.waitFor(expected, timeout: 60) != nil else { throw HTTPBench.BenchError("the fast receiver did not get the warm-up's changes within 60 s") }
        fast.reset()
        expected = 0

        var runs: [String: [WebhookRun]] = [:]
        var deliveries: [String] = []
        for round in 0..<o.rounds {
            let order = round % 2 == 0 ? servers : Array(servers.reversed())
            for (name, server) in order {
                let space = "push\(round)"
                let cpu0 = MemorySampler.cpu(pid: server.pid).total
                let r: DriveResult
                do { r = try SyncBench.drive(port: server.port, token: token, space: space, bodies: bodies(space, perClient: perClient)) } catch {
                    throw HTTPBench.BenchError("\(name), round \(round + 1): \(error)")
                }
                let cpu = MemorySampler.cpu(pid: server.pid).total - cpu0
                guard r.counted == total else { throw HTTPBench.BenchError("\(name): only \(r.counted) of \(total) changes applied") }
                runs[name, default: []].append(WebhookRun(rate: Double(r.counted) / r.seconds, p50: r.p50, p99: r.p99, cpuPerChange: cpu / Double(r.counted)))
                if server === fastServer {
                    expected += total
                    let had = fast.changes - (expected - total)
                    let lag = try metric("outpost_webhook_lag_seconds", port: server.port, admin: admin).first?.value ?? .nan
                    let caughtUp = try await fast.waitFor(expected, timeout: 120)
                    deliveries.append(String(format: "round %d: the receiver had %d of %d changes when the pushes ended (outpost_webhook_lag_seconds %.0f); all %@",
                                             round + 1, had, total, lag, caughtUp.map { String(format: "%.1f s later", $0) } ?? "NOT within 120 s"))
                }
            }
        }

        printWebhookReport(runs: runs, names: servers.map(\.name), deliveries: deliveries, fast: fast)
        let hangDeliveries = try metric("outpost_webhook_deliveries_total", port: hangServer.port, admin: admin)
            .map { "\($0.labels.split(separator: ",").last ?? ""): \(Int($0.value))" }.joined(separator: ", ")
        let hangLag = try metric("outpost_webhook_lag_seconds", port: hangServer.port, admin: admin).first?.value ?? .nan
        print(String(format: "hanging receiver: %d connections accepted, deliveries %@, outpost_webhook_lag_seconds %.0f at the end",
                     hang.connections, hangDeliveries.isEmpty ? "none" : hangDeliveries, hangLag))
        await fast.stop()
    }

    /// One webhook push round of one server: its rate, latency per push and CPU per change.
    struct WebhookRun { var rate: Double; var p50: Double; var p99: Double; var cpuPerChange: Double }

    /// The webhook servers' table beside the baseline (`names[0]`), and what the fast
    /// receiver got.
    static func printWebhookReport(runs: [String: [WebhookRun]], names: [String], deliveries: [String], fast: WebhookReceiver) {
        let base = runs[names[0]]!
        let baseRate = mean(base.map(\.rate)), baseP50 = mean(base.map(\.p50))
        print("\n" + MediaBench.pad("", 24) + MediaBench.pad("changes/s", 11) + MediaBench.pad("p50 / p99 per push", 21) + MediaBench.pad("server CPU", 14) + "push time × baseline (p50 × baseline)")
        for name in names {
            let rs = runs[name]!
            let rate = mean(rs.map(\.rate)), p50 = mean(rs.map(\.p50)), p99 = mean(rs.map(\.p99))
            let ratio = baseRate / rate
            let judged = name == names[0] ? "1.00" : String(format: "%.2f × (%.2f ×); goal ≤ 1.3 ×: %@", ratio, p50 / baseP50, verdict(ratio <= 1.3))
            print(MediaBench.pad(name, 24) + MediaBench.pad(String(format: "%.0f", rate), 11)
                  + MediaBench.pad(String(format: "%.1f / %.1f ms", p50 * 1000, p99 * 1000), 21)
                  + MediaBench.pad(String(format: "%.1f us/change", mean(rs.map(\.cpuPerChange)) * 1e6), 14) + judged)
            print("    rounds: " + rs.map { String(format: "%.0f/s, p50 %.1f ms, p99 %.1f ms", $0.rate, $0.p50 * 1000, $0.p99 * 1000) }.joined(separator: "; "))
        }
        print("fast receiver: " + deliveries.joined(separator: "\n               "))
        let lags = fast.lags.sorted()
        if !lags.isEmpty {
            print(String(format: "fast receiver: %d changes in %d batches; delivery lag (arrival − updatedAt) p50 %.0f ms, p99 %.0f ms, max %.0f ms",
                         fast.changes, fast.batches, lags[lags.count / 2], lags[min(lags.count - 1, lags.count * 99 / 100)], lags.last!))
        }
    }

    // MARK: 2. Provider tokens

    static func providerTokens(path: String, work: String, o: Options) async throws {
        print("\n2. provider tokens cost little: a pull of one record (limit=1, from the middle of 10,000), closed loop on 64 connections, \(o.seconds) s per token per round, \(o.rounds) rounds")
        let keys = try ProviderKeys(work: work)
        let tokens = keys.tokens
        let server = try HTTPBench.ServerChild.start(path: path, data: work + "/tokens", eventLoops: 0, extra: ["--jwks-file", keys.jwksPath, "--jwt-issuer", keys.issuer])
        defer { server.stop() }

        // A space of 10,000 records, and one pull per token that must answer one record.
        let connection = try BenchConnection(port: server.port)
        let pull = try seedOneRecordPull(on: connection, space: "tokens", token: tokens[0].token)
        for (alg, token) in tokens {
            let (status, body) = try connection.exchange(method: "GET", path: pull, token: token, body: nil)
            guard status == 200, SyncBench.count(#""collection":"#, in: body) == 1 else {
                throw HTTPBench.BenchError("the \(alg) pull answered \(status): \(String(decoding: body.prefix(300), as: UTF8.self))")
            }
        }

        let (checkCost, signatureCost) = try await tokenCheckCosts(keys, pull: pull)

        func wire(_ token: String) -> [UInt8] { Array("GET \(pull) HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer \(token)\r\n\r\n".utf8) }
        for (_, token) in tokens { _ = try LoadLoop.run(port: server.port, request: wire(token), connections: 64, threads: 2, seconds: 1) }
        var runs: [String: [TokenRun]] = [:]
        for round in 0..<o.rounds {
            for (alg, token) in round % 2 == 0 ? tokens : Array(tokens.reversed()) {
                let (r, cpu) = try withCPU(of: server.pid) {
                    try LoadLoop.run(port: server.port, request: wire(token), connections: 64, threads: 2, seconds: Double(o.seconds))
                }
                guard r.failures == 0 else { throw HTTPBench.BenchError("\(alg): \(r.failures) pulls were not answered 200") }
                let bodies = (0..<8).map { c in (0..<100).map { i in SyncBench.pushBody(space: "tokpush", prefix: "\(alg)-r\(round)-c\(c)-\(i)", count: 1) } }
                let p = try driveClients(bodies, port: { _ in server.port }) { connection, _, body in
                    try SyncBench.push(body, on: connection, path: "/v1/spaces/tokpush/push", token: token)
                }
                guard p.counted == 800 else { throw HTTPBench.BenchError("\(alg): only \(p.counted) of 800 pushes applied") }
                runs[alg, default: []].append(TokenRun(rate: r.rate, p50: r.p50, p99: r.p99, cpu: cpu / Double(max(r.count, 1)), pushRate: Double(p.counted) / p.seconds, pushP99: p.p99))
            }
        }

        printTokenReport(runs: runs, tokens: tokens, checkCost: checkCost, signatureCost: signatureCost)
    }

    /// One provider-token round of one algorithm: the pulls' rate, latency and server CPU
    /// per pull, and the pushes' rate and p99.
    struct TokenRun { var rate: Double; var p50: Double; var p99: Double; var cpu: Double; var pushRate: Double; var pushP99: Double }

    /// Each algorithm's row beside HS256's, then the tokens' sizes.
    static func printTokenReport(runs: [String: [TokenRun]], tokens: [(alg: String, token: String)],
                                 checkCost: [String: Double], signatureCost: [String: Double]) {
        let baseRate = mean(runs["HS256"]!.map(\.rate)), basePush = mean(runs["HS256"]!.map(\.pushRate))
        print("\n" + MediaBench.pad("", 7) + MediaBench.pad("pulls/s", 10) + MediaBench.pad("p50 / p99", 18) + MediaBench.pad("server CPU", 16)
              + MediaBench.pad("check here / signature", 24) + MediaBench.pad("× HS256", 34) + "pushes of 1 change/s, 8 connections (× HS256)")
        for (alg, _) in tokens {
            let rs = runs[alg]!
            let rate = mean(rs.map(\.rate)), ratio = rate / baseRate, push = mean(rs.map(\.pushRate))
            print(MediaBench.pad(alg, 7) + MediaBench.pad(String(format: "%.0f", rate), 10)
                  + MediaBench.pad(String(format: "%.2f / %.2f ms", mean(rs.map(\.p50)) * 1000, mean(rs.map(\.p99)) * 1000), 18)
                  + MediaBench.pad(String(format: "%.1f us/pull", mean(rs.map(\.cpu)) * 1e6), 16)
                  + MediaBench.pad(String(format: "%.1f / %.1f us", checkCost[alg]! * 1e6, signatureCost[alg]! * 1e6), 24)
                  + MediaBench.pad(alg == "HS256" ? "1.00" : String(format: "%.2f; goal ≥ 0.8: %@", ratio, verdict(ratio >= 0.8)), 34)
                  + String(format: "%.0f (%.2f), p99 %.1f ms", push, push / basePush, mean(rs.map(\.pushP99)) * 1000))
            print("    rounds: " + rs.map { String(format: "%.0f pulls/s, %.1f us/pull", $0.rate, $0.cpu * 1e6) }.joined(separator: "; "))
        }
        print("tokens: " + tokens.map { "\($0.alg) \($0.token.utf8.count) bytes" }.joined(separator: ", ")
              + "; a provider token that verified is cached until its exp or a change of the key set (VerifiedTokenCache); HS256 is verified on every request")
    }

    /// An ES256 and an RS256 key of a provider, its key set in `work`/jwks.json, and a token of
    /// each beside an HS256 token of the server's secret.
    struct ProviderKeys {
        let issuer = "https://idp.bench.example/"
        let ec: P256PrivateKey
        let rsa: RSAPrivateKey
        let jwksPath: String
        var tokens: [(alg: String, token: String)] = []

        init(work: String) throws {
            ec = try P256PrivateKey.generate()
            rsa = try RSAPrivateKey.generate(bits: 2048)
            let jwks = #"{"keys":[{"kty":"EC","kid":"bench-es256","use":"sig","alg":"ES256","crv":"P-256","x":"\#(Base64.encodeURL(ec.x))","y":"\#(Base64.encodeURL(ec.y))"},"#
                + #"{"kty":"RSA","kid":"bench-rs256","use":"sig","alg":"RS256","n":"\#(Base64.encodeURL(rsa.modulus))","e":"\#(Base64.encodeURL(rsa.publicExponent))"}]}"#
            jwksPath = work + "/jwks.json"
            try Data(jwks.utf8).write(to: URL(fileURLWithPath: jwksPath))
            let exp = Int64(Date().timeIntervalSince1970) + 86_400
            // A provider's space names are literal (no `*`): the spaces part 2 pulls and pushes.
            let payload = Base64.encodeURL(Array(#"{"iss":"\#(issuer)","sub":"bench","exp":\#(exp),"spaces":["tokens","tokpush"],"scope":"write"}"#.utf8))
            func provider(_ alg: String, _ kid: String, _ sign: ([UInt8]) throws -> [UInt8]) throws -> String {
                let input = Base64.encodeURL(Array(#"{"alg":"\#(alg)","typ":"JWT","kid":"\#(kid)"}"#.utf8)) + "." + payload
                return input + "." + Base64.encodeURL(try sign(Array(input.utf8)))
            }
            let (ec, rsa) = (self.ec, self.rsa)
            tokens = [
                ("HS256", hsToken()),
                ("ES256", try provider("ES256", "bench-es256") { try ec.signES256($0) }),
                ("RS256", try provider("RS256", "bench-rs256") { try rsa.signRS256($0) }),
            ]
        }
    }

    /// The seconds per token of each algorithm: the whole check in this process and the
    /// signature alone.
    static func tokenCheckCosts(_ keys: ProviderKeys, pull: String) async throws -> (check: [String: Double], signature: [String: Double]) {
        // The token check in this process, as the server runs it for every request
        // (`Authorizer.claims`: the header, the split, the signature, the claims), and the
        // signature alone (HMAC-SHA256, ECDSA P-256, RSA-2048 through OutpostCrypto).
        let tokens = keys.tokens
        var settings = IdentityProviderSettings()
        settings.jwksFile = keys.jwksPath
        settings.issuer = keys.issuer
        let authorizer = Authorizer(authority: ServerTokens(shared: JWTAuthority(secret: Array(secret.utf8)),
                                                            provider: try ProviderTokens(settings: settings, metrics: Metrics())))
        let (ecPublic, rsaPublic) = (try keys.ec.publicKey(), try keys.rsa.publicKey())
        var checkCost: [String: Double] = [:], signatureCost: [String: Double] = [:]
        for (alg, token) in tokens {
            let n = alg == "HS256" ? 20_000 : 2_000
            var headers = HTTPHeaders()
            headers.add(name: "Authorization", value: "Bearer \(token)")
            let head = HTTPRequestHead(method: .GET, target: pull, headers: headers)
            var t0 = ContinuousClock.now
            for _ in 0..<n { _ = try await authorizer.claims(head) }
            checkCost[alg] = MediaBench.seconds(ContinuousClock.now - t0) / Double(n)
            let input = Array(token.utf8.prefix(through: token.utf8.lastIndex(of: UInt8(ascii: "."))!).dropLast())
            guard let signature = Base64.decodeURL(String(token.split(separator: ".").last!)) else { throw HTTPBench.BenchError("\(alg): signature is not base64url") }
            var valid = true
            t0 = ContinuousClock.now
            for _ in 0..<n {
                switch alg {
                case "ES256": valid = valid && ecPublic.isValidES256Signature(signature, for: input)
                case "RS256": valid = valid && rsaPublic.isValidRS256Signature(signature, for: input)
                default: valid = valid && HMACSHA256.authenticate(input, key: Array(secret.utf8)) == signature
                }
            }
            signatureCost[alg] = MediaBench.seconds(ContinuousClock.now - t0) / Double(n)
            guard valid else { throw HTTPBench.BenchError("\(alg): the signature did not verify in this process") }
        }
        return (checkCost, signatureCost)
    }

    // MARK: 3. tus

    static func tus(path: String, work: String, o: Options) async throws {
        let chunkSize = o.chunkMiB << 20
        let size = Int64(o.mediaMiB) << 20
        print("\n3. tus against the native chunked upload: a \(o.mediaMiB) MiB file of random bytes in \(o.chunkMiB) MiB pieces, \(o.uploadRounds) rounds alternated (medians)")
        let server = try HTTPBench.ServerChild.start(path: path, data: work + "/tus", eventLoops: 0, extra: ["--chunk-size", String(chunkSize)])
        defer { server.stop() }
        guard try MediaBench.readChunkSize(port: server.port) == chunkSize else { throw HTTPBench.BenchError("the server's chunk size is not \(chunkSize)") }
        let file = work + "/tus-upload.bin"
        try MediaBench.writeRandomFile(file, size: size)
        defer { unlink(file) }
        // Before the clock, as an app has them from capture time (the reads also warm the page cache).
        let (sha, digests) = try MediaBench.digests(file, size: size, chunkSize: chunkSize)
        let checksums = digests.map { "sha256 " + $0.dropFirst("sha-256=:".count).dropLast() }
        let token = hsToken()

        func native(_ space: String, connections: Int) async throws -> Upload {
            let t0 = ContinuousClock.now
            let id = try MediaBench.initUpload(port: server.port, token: token, size: size, sha256: sha, space: space)
            try await MediaBench.sendChunks(port: server.port, token: token, uploadId: id, filePath: file, size: size, chunkSize: chunkSize,
                                            digests: digests, connections: connections, space: space)
            let t1 = ContinuousClock.now
            try MediaBench.finalize(port: server.port, token: token, uploadId: id, space: space)
            let t2 = ContinuousClock.now
            return Upload(seconds: MediaBench.seconds(t2 - t0), last: MediaBench.seconds(t2 - t1), cpu: 0)
        }
        func tusUpload(_ space: String) async throws -> Upload {
            try await IntegrationsBench.tusUpload(port: server.port, token: token, file: file, size: size, chunkSize: chunkSize,
                                                  checksums: checksums, sha: sha, space: space)
        }
        let kinds: [(name: String, run: (String) async throws -> Upload)] = [
            ("native, 1 connection", { try await native($0, connections: 1) }),
            ("native, 2 connections", { try await native($0, connections: 2) }),
            ("tus (PATCHes in order)", { try await tusUpload($0) }),
        ]
        // Warm-up: one of each, untimed.
        for (k, kind) in kinds.enumerated() { _ = try await kind.run("warm-\(k)") }
        var uploads: [String: [Upload]] = [:]
        for round in 0..<o.uploadRounds {
            let order = round % 2 == 0 ? Array(kinds.enumerated()) : Array(kinds.enumerated()).reversed()
            for (k, kind) in order {
                let cpu0 = MemorySampler.cpu(pid: server.pid).total
                var u = try await kind.run("up-\(k)-\(round)")
                u.cpu = MemorySampler.cpu(pid: server.pid).total - cpu0
                uploads[kind.name, default: []].append(u)
            }
        }
        printUploadReport(uploads, names: kinds.map(\.name), mib: Double(o.mediaMiB))
    }

    /// One upload: its seconds from the first request to the last answer, the seconds of
    /// its last step, and the server's CPU seconds.
    struct Upload { var seconds: Double; var last: Double; var cpu: Double }

    /// A tus creation and its PATCHes, one at a time on one connection, each piece read from
    /// `file` before its PATCH goes.
    static func tusUpload(port: Int, token: String, file: String, size: Int64, chunkSize: Int, checksums: [String], sha: String,
                          space: String) async throws -> Upload {
        try await MediaBench.onThread {
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw HTTPBench.BenchError("cannot open \(file)") }
            defer { close(fd) }
            var buffer = [UInt8](repeating: 0, count: chunkSize)
            let connection = try BenchConnection(port: port)
            let auth = ("Authorization", "Bearer \(token)"), version = ("Tus-Resumable", "1.0.0")
            let t0 = ContinuousClock.now
            let created = try connection.request("POST", "/v1/spaces/\(space)/tus", headers: [
                auth, version, ("Upload-Length", String(size)),
                ("Upload-Metadata", "filename \(Base64.encode(Array("bench.mp4".utf8))),filetype \(Base64.encode(Array("video/mp4".utf8)))"),
            ], body: [])
            guard created.status == 201, let location = created.header("Location") else {
                throw HTTPBench.BenchError("tus creation answered \(created.status): \(String(decoding: created.body.prefix(300), as: UTF8.self))")
            }
            var offset: Int64 = 0
            var lastStart = t0
            for (index, checksum) in checksums.enumerated() {
                let n = Int(min(Int64(chunkSize), size - offset))
                try MediaBench.preadFully(fd, &buffer, count: n, offset: offset)
                if index == checksums.count - 1 { lastStart = ContinuousClock.now }
                let answer = try connection.request("PATCH", location, headers: [
                    auth, version, ("Upload-Offset", String(offset)), ("Content-Type", "application/offset+octet-stream"), ("Upload-Checksum", checksum),
                ], body: buffer, bodyCount: n)
                offset += Int64(n)
                guard answer.status == 204, answer.header("Upload-Offset") == String(offset) else {
                    throw HTTPBench.BenchError("PATCH at \(offset - Int64(n)) answered \(answer.status): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
                }
                if offset == size && answer.header("Outpost-Media-Id") != sha {
                    throw HTTPBench.BenchError("the last PATCH named media \(answer.header("Outpost-Media-Id") ?? "none"), not \(sha)")
                }
            }
            let t2 = ContinuousClock.now
            return Upload(seconds: MediaBench.seconds(t2 - t0), last: MediaBench.seconds(t2 - lastStart), cpu: 0)
        }
    }

    /// The three kinds' MiB/s, server CPU and notes, tus beside native.
    static func printUploadReport(_ uploads: [String: [Upload]], names: [String], mib: Double) {
        func rate(_ name: String) -> Double { mib / median(uploads[name]!.map(\.seconds)) }
        let one = rate(names[0]), two = rate(names[1])
        print("\n" + MediaBench.pad("", 25) + MediaBench.pad("MiB/s", 8) + MediaBench.pad("server CPU", 12) + "notes")
        for (k, name) in names.enumerated() {
            let us = uploads[name]!
            let r = rate(name)
            var note = String(format: "%@ %.2f s of %.2f s (median); rounds %@", k == 2 ? "last PATCH (append, hash, publish)" : "finalize",
                              median(us.map(\.last)), median(us.map(\.seconds)), us.map { String(format: "%.0f", mib / $0.seconds) }.joined(separator: ", "))
            if k == 2 {
                note = String(format: "%.2f × native on 1 connection; goal ≥ 0.8: %@; %.2f × native on 2. ", r / one, verdict(r / one >= 0.8), r / two) + note
            }
            print(MediaBench.pad(name, 25) + MediaBench.pad(String(format: "%.0f", r), 8) + MediaBench.pad(String(format: "%.2f s", median(us.map(\.cpu))), 12) + note)
        }
    }
}

/// A webhook receiver in this process: an `HTTPServer` answering every POST to `/hook` with
/// 200 at once, counting the changes it got and each one's delivery lag (arrival − the
/// change's `updatedAt`, both this machine's clock).
final class WebhookReceiver: Sendable {
    private struct Tally {
        var changes = 0
        var batches = 0
        var lags: [Double] = []
    }

    /// The tally, shared by the server's handler and the bench.
    private final class Shared: Sendable {
        let tally = Mutex(Tally())
    }

    private let shared = Shared()
    private let http: HTTPServer
    let port: Int
    var url: String { "http://127.0.0.1:\(port)/hook" }

    init() throws {
        var router = Router()
        let shared = self.shared
        router.add(.POST, "/hook", bodyLimit: 8 << 20, handler: { request in
            let now = Date().timeIntervalSince1970 * 1000
            let stamps = WebhookReceiver.updatedAts(request.body)
            shared.tally.withLock { t in
                t.changes += stamps.count
                t.batches += 1
                for s in stamps { t.lags.append(now - s) }
            }
            return HTTPResponse(json: Array(#"{"ok":true}"#.utf8))
        })
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.eventLoopCount = 1
        http = HTTPServer(configuration: configuration, router: router)
        port = try http.start()
    }

    var changes: Int { shared.tally.withLock { $0.changes } }
    var batches: Int { shared.tally.withLock { $0.batches } }
    var lags: [Double] { shared.tally.withLock { $0.lags } }

    func reset() { shared.tally.withLock { $0 = Tally() } }

    /// Waits until `count` changes arrived since the last reset: the seconds it took, nil
    /// after `timeout`.
    func waitFor(_ count: Int, timeout: Double) async throws -> Double? {
        let start = ContinuousClock.now
        while MediaBench.seconds(ContinuousClock.now - start) < timeout {
            if changes >= count { return MediaBench.seconds(ContinuousClock.now - start) }
            try await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    /// The `"updatedAt":` values of a batch's body, one per change.
    static func updatedAts(_ body: [UInt8]) -> [Double] {
        let key = Array(#""updatedAt":"#.utf8)
        var out: [Double] = []
        var i = 0
        while i + key.count < body.count {
            if body[i] == key[0] && body[i..<(i + key.count)].elementsEqual(key) {
                var j = i + key.count
                var v = 0.0
                while j < body.count && body[j] >= 0x30 && body[j] <= 0x39 { v = v * 10 + Double(body[j] - 0x30); j += 1 }
                out.append(v)
                i = j
            } else {
                i += 1
            }
        }
        return out
    }

    func stop() async { await http.shutdown(grace: .seconds(1)) }
}

/// A webhook receiver that accepts every connection and never reads or answers it: each
/// delivery waits for the server's `--webhook-timeout`.
final class HangingReceiver: Sendable {
    let port: Int
    private let listener: Int32
    private let accepted = Mutex<(fds: [Int32], count: Int, stopped: Bool)>(([], 0, false))

    init() throws {
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw HTTPBench.BenchError("socket: errno \(errno)") }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let fd = listener
        let ok = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard ok, listen(listener, 64) == 0 else {
            close(listener)
            throw HTTPBench.BenchError("cannot listen for the hanging receiver: errno \(errno)")
        }
        port = Int(UInt16(bigEndian: addr.sin_port))
        Thread.detachNewThread { [self] in acceptForever() }
    }

    var url: String { "http://127.0.0.1:\(port)/hook" }
    var connections: Int { accepted.withLock { $0.count } }

    private func acceptForever() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                close(listener)
                return
            }
            let keep = accepted.withLock { a -> Bool in
                guard !a.stopped else { return false }
                a.fds.append(fd)
                a.count += 1
                return true
            }
            if !keep { close(fd) }
        }
    }

    /// Wakes the accepting thread (which then closes the listener) and closes every
    /// connection it holds.
    func stop() {
        let fds = accepted.withLock { a -> [Int32] in
            a.stopped = true
            defer { a.fds = [] }
            return a.fds
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in fds { close(fd) }
    }
}
