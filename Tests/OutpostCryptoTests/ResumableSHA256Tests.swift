#if os(Linux)
import OutpostCore
import Testing
@testable import OutpostCrypto

/// The server's resumable SHA-256: saved at any point, restored, and gone on with, it gives
/// the one-shot digest; a damaged state is refused, never resumed.
@Suite struct ResumableSHA256Tests {
    static let data: [UInt8] = {
        var rng = SplitMix64(seed: 35)
        return (0..<5000).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }()

    @Test(arguments: [0, 1, 55, 56, 63, 64, 65, 127, 128, 1000, 4999, 5000])
    func savedAndRestoredAtAnySplitItGivesTheOneShotDigest(split: Int) throws {
        let data = Self.data
        var first = ResumableSHA256()
        first.update(Array(data[0..<split]))
        #expect(first.byteCount == Int64(split))
        #expect(first.digest() == SHA256.hash(data[0..<split]))
        let saved = first.savedState
        #expect(saved.count == 45 + split % 64)
        var resumed = try #require(ResumableSHA256(savedState: saved))
        #expect(resumed.byteCount == Int64(split))
        resumed.update(Array(data[split...]))
        #expect(resumed.digest() == SHA256.hash(data))
        // `digest` leaves the hash going: the original goes on to the same digest.
        first.update(Array(data[split...]))
        #expect(first.digest() == SHA256.hash(data))
    }

    @Test func aStateThatIsNotOneIsRefused() {
        var h = ResumableSHA256()
        h.update(Array(Self.data[0..<100]))
        let saved = h.savedState
        #expect(ResumableSHA256(savedState: []) == nil)
        #expect(ResumableSHA256(savedState: Array(saved.dropLast())) == nil)
        #expect(ResumableSHA256(savedState: saved + [0]) == nil)
        var otherVersion = saved
        otherVersion[0] = 2
        #expect(ResumableSHA256(savedState: otherVersion) == nil)
        // A length that disagrees with the unfinished block.
        var wrongLength = saved
        wrongLength[1 + 8 * 4] &+= 8
        #expect(ResumableSHA256(savedState: wrongLength) == nil)
    }
}
#endif
