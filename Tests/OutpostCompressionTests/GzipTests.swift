import Foundation
import OutpostSubprocess
import Testing
@testable import OutpostCompression

@Suite struct GzipTests {
    @Test func roundTrip() throws {
        let text = Array(String(repeating: "offline first ", count: 1000).utf8)
        let packed = Gzip.compress(text)
        #expect(packed.count < text.count / 10)
        #expect(Gzip.looksCompressed(packed))
        #expect(try Gzip.decompress(packed, limit: text.count) == text)
    }

    @Test func emptyInputRoundTrips() throws {
        let packed = Gzip.compress([UInt8]())
        #expect(try Gzip.decompress(packed, limit: 0) == [])
    }

    @Test func incompressibleDataRoundTrips() throws {
        var rng = SystemRandomNumberGenerator()
        let data = (0..<200_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        #expect(try Gzip.decompress(Gzip.compress(data), limit: 200_000) == data)
    }

    @Test func decompressionStopsAtTheLimit() throws {
        // A zip bomb in miniature: 64 MiB of zeros packs into about 64 KiB.
        var compressor = GzipCompressor(level: 9)
        var bomb: [UInt8] = []
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        for _ in 0..<64 { bomb += compressor.compress(zeros) }
        bomb += compressor.finish()
        #expect(bomb.count < 200_000)
        #expect(throws: GzipError.limitExceeded(limit: 1_000_000)) { try Gzip.decompress(bomb, limit: 1_000_000) }
        // Exactly at the limit is fine; one byte over is not.
        let exact = Gzip.compress([UInt8](repeating: 7, count: 5000))
        #expect(try Gzip.decompress(exact, limit: 5000).count == 5000)
        #expect(throws: GzipError.limitExceeded(limit: 4999)) { try Gzip.decompress(exact, limit: 4999) }
    }

    @Test func streamingDecompressionFedOneByteAtATime() throws {
        let text = Array(String(repeating: "abcdefgh", count: 500).utf8)
        let packed = Gzip.compress(text)
        var d = GzipDecompressor(limit: text.count)
        var out: [UInt8] = []
        for byte in packed { out += try d.decompress([byte]) }
        try d.finish()
        #expect(out == text)
    }

    @Test func streamingCompressionWithFlushes() throws {
        var c = GzipCompressor()
        var packed: [UInt8] = []
        for i in 0..<50 {
            packed += c.compress(Array("line \(i)\n".utf8))
            packed += c.flush()
        }
        packed += c.finish()
        let expected = (0..<50).map { "line \($0)\n" }.joined()
        #expect(String(decoding: try Gzip.decompress(packed, limit: 10_000), as: UTF8.self) == expected)
    }

    @Test func concatenatedMembersAreOneStream() throws {
        let packed = Gzip.compress(Array("hello ".utf8)) + Gzip.compress(Array("world".utf8))
        #expect(String(decoding: try Gzip.decompress(packed, limit: 100), as: UTF8.self) == "hello world")
    }

    @Test func garbageAndTruncationAreCorrupt() throws {
        #expect(throws: GzipError.self) { try Gzip.decompress(Array("not gzip at all".utf8), limit: 100) }
        let packed = Gzip.compress(Array(String(repeating: "x", count: 100).utf8))
        #expect(throws: GzipError.self) { try Gzip.decompress(packed.dropLast(4), limit: 1000) }
        #expect(throws: GzipError.self) { try Gzip.decompress([UInt8](), limit: 1000) }
    }

    @Test func interoperatesWithTheSystemGzip() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gz-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("a.txt")
        let text = Array(String(repeating: "system gzip ", count: 300).utf8)
        try Data(Gzip.compress(text)).write(to: file.appendingPathExtension("gz"))
        let result = try Subprocess.run("/bin/gzip", ["-d", "-k", file.appendingPathExtension("gz").path])
        #expect(result.status == 0, "\(result.error)")
        #expect(Array(try Data(contentsOf: file)) == text)
    }
}
