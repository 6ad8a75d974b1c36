import OutpostCore
import Testing
@testable import OutpostCrypto

/// Runs a whole stream through an encryptor or decryptor in pieces of random sizes
/// (including empty pieces), collecting what it emits.
struct Stream {
    var key: [UInt8]
    var prefix: [UInt8]
    var aad: [UInt8]
    var segmentSize: Int

    static func random(seed: UInt64, segmentSize: Int) -> Stream {
        var rng = SplitMix64(seed: seed)
        return Stream(
            key: (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) },
            prefix: (0..<7).map { _ in UInt8.random(in: 0...255, using: &rng) },
            aad: Array("file header \(seed)".utf8), segmentSize: segmentSize)
    }

    func seal(_ plaintext: [UInt8], rng: inout SplitMix64) throws -> [UInt8] {
        let encryptor = try SegmentedCipher.Encryptor(key: key, prefix: prefix, aad: aad, segmentSize: segmentSize)
        var out: [UInt8] = []
        try feed(plaintext, rng: &rng) { piece in try encryptor.update(piece) { out.append(contentsOf: $0) } }
        try encryptor.finish { out.append(contentsOf: $0) }
        return out
    }

    /// The plaintext emitted, and the error that stopped the stream if one did.
    func open(_ sealed: [UInt8], rng: inout SplitMix64, key: [UInt8]? = nil, prefix: [UInt8]? = nil, aad: [UInt8]? = nil,
              segmentSize: Int? = nil) -> (plain: [UInt8], error: CryptoError?) {
        var out: [UInt8] = []
        do {
            let decryptor = try SegmentedCipher.Decryptor(
                key: key ?? self.key, prefix: prefix ?? self.prefix, aad: aad ?? self.aad, segmentSize: segmentSize ?? self.segmentSize)
            try feed(sealed, rng: &rng) { piece in try decryptor.update(piece) { out.append(contentsOf: $0) } }
            try decryptor.finish { out.append(contentsOf: $0) }
            return (out, nil)
        } catch let error as CryptoError {
            return (out, error)
        } catch {
            Issue.record("unexpected error \(error)")
            return (out, nil)
        }
    }

    private func feed(_ bytes: [UInt8], rng: inout SplitMix64, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        var offset = 0
        while offset < bytes.count {
            // Mostly small pieces, sometimes empty, sometimes several segments at once.
            let n = UInt64.random(in: 0..<4, using: &rng) == 0
                ? Int.random(in: 0...(3 * segmentSize + 40), using: &rng)
                : Int.random(in: 0...(segmentSize / 2 + 1), using: &rng)
            let end = min(bytes.count, offset + n)
            try bytes[offset..<end].withUnsafeBytes(body)
            offset = end
        }
        try [UInt8]().withUnsafeBytes(body)
    }

    /// The sealed segments of a stream, cut by the segmentation rule.
    func segments(_ sealed: [UInt8]) -> [[UInt8]] {
        let full = segmentSize + 16
        var out: [[UInt8]] = []
        var i = 0
        while sealed.count - i >= full {
            out.append(Array(sealed[i..<i + full]))
            i += full
        }
        out.append(Array(sealed[i...]))
        return out
    }
}

@Suite struct SegmentedCipherTests {
    @Test func nonceLayout() {
        #expect(SegmentedCipher.nonce(prefix: [1, 2, 3, 4, 5, 6, 7], index: 0x0A0B_0C0D, last: true)
            == [1, 2, 3, 4, 5, 6, 7, 0x0A, 0x0B, 0x0C, 0x0D, 1])
        #expect(SegmentedCipher.nonce(prefix: [0, 0, 0, 0, 0, 0, 0], index: 1, last: false) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0])
        #expect(SegmentedCipher.nonce(prefix: [9, 9, 9, 9, 9, 9, 9], index: .max, last: false).suffix(5) == [0xFF, 0xFF, 0xFF, 0xFF, 0])
    }

    @Test func sealedLengthFollowsTheSegmentationRule() {
        #expect(SegmentedCipher.sealedLength(plainLength: 0) == 16)
        #expect(SegmentedCipher.sealedLength(plainLength: 1) == 17)
        #expect(SegmentedCipher.sealedLength(plainLength: 65535) == 65551)
        #expect(SegmentedCipher.sealedLength(plainLength: 65536) == 65536 + 32)   // ends with an empty segment
        #expect(SegmentedCipher.sealedLength(plainLength: 65537) == 65537 + 32)
        #expect(SegmentedCipher.sealedLength(plainLength: 64, segmentSize: 64) == 96)
        #expect(SegmentedCipher.sealedLength(plainLength: 3 * 64 + 5, segmentSize: 64) == 3 * 64 + 5 + 64)
        #expect(SegmentedCipher.sealedLength(plainLength: 1 << 40) == (1 << 40) + 16 * ((1 << 24) + 1))
    }

    @Test(arguments: [0, 1, 63, 64, 65, 128, 3 * 64 + 5])
    func roundTripInRandomPieces(length: Int) throws {
        for seed in UInt64(1)...6 {
            var rng = SplitMix64(seed: seed &* 1000 &+ UInt64(length))
            let stream = Stream.random(seed: seed, segmentSize: 64)
            let plain = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let sealed = try stream.seal(plain, rng: &rng)
            #expect(Int64(sealed.count) == SegmentedCipher.sealedLength(plainLength: Int64(length), segmentSize: 64))
            let opened = stream.open(sealed, rng: &rng)
            #expect(opened.error == nil)
            #expect(opened.plain == plain)

            // The wire format, checked segment by segment with the one-shot cipher:
            // segment i under prefix || i || last flag, the header as AAD.
            let segments = stream.segments(sealed)
            #expect(segments.count == length / 64 + 1)
            var rebuilt: [UInt8] = []
            for (i, segment) in segments.enumerated() {
                let last = i == segments.count - 1
                let nonce = SegmentedCipher.nonce(prefix: stream.prefix, index: UInt32(i), last: last)
                rebuilt += try AESGCM.open(segment, key: stream.key, nonce: nonce, aad: stream.aad)
                #expect(throws: CryptoError.authenticationFailed) {
                    try AESGCM.open(segment, key: stream.key, nonce: SegmentedCipher.nonce(prefix: stream.prefix, index: UInt32(i), last: !last), aad: stream.aad)
                }
            }
            #expect(rebuilt == plain)
        }
    }

    @Test func defaultSegmentSizeOverAMebibyte() throws {
        var rng = SplitMix64(seed: 99)
        let stream = Stream.random(seed: 99, segmentSize: SegmentedCipher.defaultSegmentSize)
        for length in [(1 << 20) + 123, 1 << 20] {
            let plain = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let sealed = try stream.seal(plain, rng: &rng)
            #expect(Int64(sealed.count) == SegmentedCipher.sealedLength(plainLength: Int64(length)))
            let opened = stream.open(sealed, rng: &rng)
            #expect(opened.error == nil)
            #expect(opened.plain == plain)
            // Fed whole, in one update call.
            let decryptor = try SegmentedCipher.Decryptor(key: stream.key, prefix: stream.prefix, aad: stream.aad)
            var out: [UInt8] = []
            try sealed.withUnsafeBytes { b in try decryptor.update(b) { out += $0 } }
            try decryptor.finish { out += $0 }
            #expect(out == plain)
        }
    }

    /// The plaintext emitted before a failure is exactly that of the segments before the
    /// first bad one: nothing unverified is ever emitted.
    func expectFailure(_ stream: Stream, _ sealed: [UInt8], plain: [UInt8], verifiedSegments: Int,
                       key: [UInt8]? = nil, prefix: [UInt8]? = nil, aad: [UInt8]? = nil, segmentSize: Int? = nil,
                       sourceLocation: SourceLocation = #_sourceLocation) {
        for seed in UInt64(1)...3 {
            var rng = SplitMix64(seed: seed)
            let result = stream.open(sealed, rng: &rng, key: key, prefix: prefix, aad: aad, segmentSize: segmentSize)
            #expect(result.error == .authenticationFailed, sourceLocation: sourceLocation)
            #expect(result.plain == Array(plain.prefix(verifiedSegments * stream.segmentSize)), sourceLocation: sourceLocation)
        }
    }

    @Test func tamperingIsDetected() throws {
        var rng = SplitMix64(seed: 5)
        let stream = Stream.random(seed: 5, segmentSize: 64)
        let plain = (0..<(3 * 64 + 5)).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let sealed = try stream.seal(plain, rng: &rng)
        let segments = stream.segments(sealed)
        #expect(segments.map(\.count) == [80, 80, 80, 21])

        // One flipped bit anywhere fails at the segment that holds it.
        for position in [0, 40, 79, 80, 150, 160, 239, 240, 250, 260] {
            var bad = sealed
            bad[position] ^= 0x04
            expectFailure(stream, bad, plain: plain, verifiedSegments: position / 80)
        }
        // Dropping the final segment, or the final two.
        expectFailure(stream, Array(sealed.prefix(240)), plain: plain, verifiedSegments: 3)
        expectFailure(stream, Array(sealed.prefix(160)), plain: plain, verifiedSegments: 2)
        // Swapping two segments; moving the final one earlier.
        expectFailure(stream, segments[1] + segments[0] + segments[2] + segments[3], plain: plain, verifiedSegments: 0)
        expectFailure(stream, segments[0] + segments[2] + segments[1] + segments[3], plain: plain, verifiedSegments: 1)
        expectFailure(stream, segments[0] + segments[3], plain: plain, verifiedSegments: 1)
        // Appending: a byte, a copy of a segment, or a segment sealed for the next index.
        expectFailure(stream, sealed + [0], plain: plain, verifiedSegments: 3)
        expectFailure(stream, sealed + segments[3], plain: plain, verifiedSegments: 3)
        let next = try AESGCM.seal([1, 2, 3], key: stream.key, nonce: SegmentedCipher.nonce(prefix: stream.prefix, index: 4, last: true), aad: stream.aad)
        expectFailure(stream, sealed + next, plain: plain, verifiedSegments: 3)
        expectFailure(stream, sealed + segments[0], plain: plain, verifiedSegments: 3)
        // Wrong header, prefix, key or segment size.
        expectFailure(stream, sealed, plain: plain, verifiedSegments: 0, aad: stream.aad + [0])
        expectFailure(stream, sealed, plain: plain, verifiedSegments: 0, aad: [])
        var prefix = stream.prefix
        prefix[6] ^= 1
        expectFailure(stream, sealed, plain: plain, verifiedSegments: 0, prefix: prefix)
        var key = stream.key
        key[0] ^= 1
        expectFailure(stream, sealed, plain: plain, verifiedSegments: 0, key: key)
        expectFailure(stream, sealed, plain: plain, verifiedSegments: 0, segmentSize: 32)
        expectFailure(stream, sealed, plain: plain, verifiedSegments: 0, segmentSize: 128)
    }

    /// Every truncation of a stream fails, wherever it cuts.
    @Test(arguments: [0, 5, 64, 3 * 64 + 5])
    func everyTruncationFails(length: Int) throws {
        var rng = SplitMix64(seed: UInt64(length) + 17)
        let stream = Stream.random(seed: 17, segmentSize: 64)
        let plain = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let sealed = try stream.seal(plain, rng: &rng)
        for cut in 0..<sealed.count {
            let result = stream.open(Array(sealed.prefix(cut)), rng: &rng)
            #expect(result.error == .authenticationFailed, "cut at \(cut) of \(sealed.count)")
            #expect(result.plain == Array(plain.prefix(cut / 80 * 64)), "cut at \(cut) of \(sealed.count)")
        }
    }

    /// An empty file is one empty final segment, and that segment is still required.
    /// Any run of segments sealed at random from its plaintext is the encryptor's output for
    /// them, so a range of a sealed stream can be made again without keeping the stream.
    @Test(arguments: [0, 1, 64, 65, 3 * 64 + 5])
    func segmentsSealedAtRandomAreTheStreamsBytes(_ length: Int) throws {
        var rng = SplitMix64(seed: UInt64(length) + 40)
        let stream = Stream.random(seed: 3, segmentSize: 64)
        let plaintext = rng.bytes(length)
        let sealed = try stream.seal(plaintext, rng: &rng)
        let lastIndex = length / 64
        let context = try AESGCMKey(stream.key)
        for first in 0...lastIndex {
            for count in 1...(lastIndex - first + 1) {
                let start = first * 64, end = min(length, (first + count) * 64)
                let made = try Array(plaintext[start..<end]).withUnsafeBytes {
                    try SegmentedCipher.sealSegments($0, firstIndex: UInt32(first), count: count, lastIndex: UInt32(lastIndex), key: context,
                                                     prefix: stream.prefix, aad: stream.aad, segmentSize: 64)
                }
                let sealedStart = first * 80
                #expect(made == Array(sealed[sealedStart..<min(sealed.count, sealedStart + made.count)]), "segments \(first)..<\(first + count) of \(length) bytes")
            }
        }
        // A short plaintext for a segment that is not the last is refused.
        if lastIndex >= 1 {
            #expect(throws: CryptoError.self) {
                try [UInt8](repeating: 0, count: 10).withUnsafeBytes {
                    try SegmentedCipher.sealSegments($0, firstIndex: 0, count: 1, lastIndex: UInt32(lastIndex), key: context, prefix: stream.prefix, aad: stream.aad, segmentSize: 64)
                }
            }
        }
    }

    @Test func emptyStream() throws {
        var rng = SplitMix64(seed: 8)
        let stream = Stream.random(seed: 8, segmentSize: 64)
        let sealed = try stream.seal([], rng: &rng)
        #expect(sealed.count == 16)
        #expect(stream.open(sealed, rng: &rng) == ([], nil))
        #expect(stream.open([], rng: &rng).error == .authenticationFailed)
        #expect(stream.open(sealed, rng: &rng, aad: [1]).error == .authenticationFailed)
    }

    @Test func misuseIsRefused() throws {
        let key = [UInt8](repeating: 1, count: 32), prefix = [UInt8](repeating: 2, count: 7)
        for bad in [6, 8, 12] {
            let prefixError = #expect(throws: CryptoError.self) {
                try SegmentedCipher.Encryptor(key: key, prefix: [UInt8](repeating: 0, count: bad), aad: [])
            }
            #expect(prefixError.map(isInvalidInput) == true)
            let decryptorError = #expect(throws: CryptoError.self) {
                try SegmentedCipher.Decryptor(key: key, prefix: [UInt8](repeating: 0, count: bad), aad: [])
            }
            #expect(decryptorError.map(isInvalidInput) == true)
        }
        for size in [0, -1, (1 << 30) + 1] {
            let error = #expect(throws: CryptoError.self) { try SegmentedCipher.Encryptor(key: key, prefix: prefix, aad: [], segmentSize: size) }
            #expect(error.map(isInvalidInput) == true)
        }
        #expect(throws: CryptoError.invalidKeyLength(31)) { try SegmentedCipher.Encryptor(key: Array(key.prefix(31)), prefix: prefix, aad: []) }
        #expect(throws: CryptoError.invalidKeyLength(31)) { try SegmentedCipher.Decryptor(key: Array(key.prefix(31)), prefix: prefix, aad: []) }

        let encryptor = try SegmentedCipher.Encryptor(key: key, prefix: prefix, aad: [], segmentSize: 64)
        var sealed: [UInt8] = []
        try encryptor.finish { sealed += $0 }
        let afterFinish = #expect(throws: CryptoError.self) { try [UInt8](repeating: 0, count: 3).withUnsafeBytes { try encryptor.update($0) { _ in } } }
        #expect(afterFinish.map(isInvalidInput) == true)
        #expect((#expect(throws: CryptoError.self) { try encryptor.finish { _ in } }).map(isInvalidInput) == true)

        // After an authentication failure the decryptor keeps refusing, even good input.
        let decryptor = try SegmentedCipher.Decryptor(key: key, prefix: prefix, aad: [], segmentSize: 64)
        var bad = sealed
        bad[0] ^= 1
        try bad.withUnsafeBytes { try decryptor.update($0) { _ in Issue.record("emitted unverified bytes") } }
        #expect(throws: CryptoError.authenticationFailed) { try decryptor.finish { _ in } }
        #expect(throws: CryptoError.authenticationFailed) { try sealed.withUnsafeBytes { try decryptor.update($0) { _ in } } }
        #expect(throws: CryptoError.authenticationFailed) { try decryptor.finish { _ in } }
    }

    /// Errors thrown by `emit` reach the caller unchanged.
    @Test func emitErrorsPropagate() throws {
        struct Stop: Error, Equatable {}
        let key = [UInt8](repeating: 1, count: 32), prefix = [UInt8](repeating: 2, count: 7)
        let encryptor = try SegmentedCipher.Encryptor(key: key, prefix: prefix, aad: [], segmentSize: 16)
        #expect(throws: Stop()) {
            try [UInt8](repeating: 0, count: 40).withUnsafeBytes { try encryptor.update($0) { _ in throw Stop() } }
        }
    }
}
