import Foundation
import OutpostCore
import OutpostTestSupport
import Testing
@testable import Outpost

/// The SDK's own gzip writer, checked by the system's `gzip -d` and by a real server.
@Suite("gzip request bodies", .serverLogs)
struct GzipTests {
    static func gunzip(_ bytes: [UInt8]) throws -> [UInt8] {
        let result = try Subprocess.run("gzip", ["-dc"], input: .bytes(bytes))
        #expect(result.status == 0, "\(result.error)")
        return result.outputBytes
    }

    @Test func gzipDecompressesWhatTheWriterWrites() throws {
        var rng = Randomness(seed: 3)
        let random = (0..<70_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        var json: [UInt8] = []
        for i in 0..<3_000 { json += Array(#"{"changeId":"c-\#(i)","collection":"todos","id":"t\#(i)","op":"put","data":{"title":"item \#(i)"},"baseVersion":null},"#.utf8) }
        let runs = [UInt8](repeating: 0x61, count: 100_000)
        for input in [[], [1], Array("abcabcabcabc".utf8), random, json, runs] {
            let compressed = Gzip.compress(input)
            #expect(try Self.gunzip(compressed) == input)
            if input.count > 10_000 && input != random { #expect(compressed.count * 3 < input.count, "JSON and runs shrink") }
        }
    }

    @Test func aRealServerAcceptsCompressedPushes() async throws {
        let world = try RealWorld()
        let transport = HTTPSyncTransport(baseURL: world.server.baseURL, token: world.token)
        let changes = (0..<400).map { Change(changeId: "g\($0)", collection: "todos", id: "t\($0)", op: .put, data: todo("item \($0) " + String(repeating: "z", count: 100)), baseVersion: nil) }
        #expect(PushRequest(clientId: "gz", changes: changes).encoded().count > 16 * 1024)
        let answer = try await transport.push(PushRequest(clientId: "gz", changes: changes), space: "team")
        #expect(answer.results.allSatisfy { $0.status == .applied })
        #expect(try await world.serverRecords().count == 400)
    }
}
