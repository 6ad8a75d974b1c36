// outpost-bench <area> [options]: measurements that back the goals in docs/benchmarks.md.
// Run them on a release build: `swift run -c release outpost-bench <area>`.
import Foundation

let usage = """
    usage: outpost-bench <area> [options]

    areas:
      http     the HTTP engine: /healthz under wrk next to nginx, and 10,000 idle connections
      json     OutpostCore's JSON parser and writer next to Foundation
      media    media upload and download next to sha256sum and cp, with the server's RSS
      push     push throughput from 8 clients in batches of 100 and 500, beside raw SQLite
      pull     pull throughput, page time at 10,000 vs 1,000,000 records, long-poll wake-up
      longpoll long-poll wake-up only: --waiters 2000,10000 waiting pulls, one commit, five rounds
      schema   candidate SQLite layouts of the push path, with the store's statements, alternated
      peers    Outpost beside PocketBase (pip-installed): bulk write, paged read, small reads, a 64 MiB upload
      client   the client SDK: local save latency, initial sync, write-to-other-device latency
      query    queries on the device: an indexed query beside hand-written SQL, a count, search, a live
               query during a first sync, a first sync with indexes, walking every result
      transaction  a write block of 10,000 saves beside a hand-written SQLite transaction of the same rows
      rules    what a rules file costs: a partial first sync, a page, a judged push, each beside the same without
      e2e      what end-to-end encryption costs: save + sync, initial sync, media upload, each beside the same in clear
      kdf      the Swift scrypt of key exports beside OpenSSL's EVP_PBE_scrypt at the shipped parameters
      integrations what webhooks, provider tokens and tus cost: pushes with a fast and a hanging webhook receiver,
               pulls with ES256 and RS256 tokens, a tus upload, each beside the same without

    `outpost-bench <area> --help` lists an area's options.
    """

let arguments = Array(CommandLine.arguments.dropFirst())
do {
    switch arguments.first {
    case "http":
        try await HTTPBench.run(arguments: Array(arguments.dropFirst()))
    case "json":
        try await JSONBench.run(arguments: Array(arguments.dropFirst()))
    case "media":
        try await MediaBench.run(arguments: Array(arguments.dropFirst()))
    case "push", "pull", "longpoll":
        try await SyncBench.run(area: arguments[0], arguments: Array(arguments.dropFirst()))
    case "schema":
        try SchemaBench.run(arguments: Array(arguments.dropFirst()))
    case "peers":
        try await PeersBench.run(arguments: Array(arguments.dropFirst()))
    case "client":
        try await ClientBench.run(arguments: Array(arguments.dropFirst()))
    case "query":
        try await QueryBench.run(arguments: Array(arguments.dropFirst()))
    case "transaction":
        try await TransactionBench.run(arguments: Array(arguments.dropFirst()))
    case "rules":
        try await RulesBench.run(arguments: Array(arguments.dropFirst()))
    case "e2e":
        try await E2EBench.run(arguments: Array(arguments.dropFirst()))
    case "kdf":
        try KDFBench.run(arguments: Array(arguments.dropFirst()))
    case "integrations":
        try await IntegrationsBench.run(arguments: Array(arguments.dropFirst()))
    case "-h", "--help", "help":
        print(usage)
    default:
        FileHandle.standardError.write(Data((usage + "\n").utf8))
        exit(64)
    }
} catch {
    FileHandle.standardError.write(Data("outpost-bench: \(error)\n".utf8))
    exit(1)
}
