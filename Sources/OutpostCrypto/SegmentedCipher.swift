/// Chunked authenticated encryption for files: the STREAM construction of Hoang,
/// Reyhanitabar, Rogaway and Vizár ("Online Authenticated-Encryption and its Nonce-Reuse
/// Misuse-Resistance", CRYPTO 2015) over AES-256-GCM.
///
/// A file is cut into segments of `segmentSize` plaintext bytes, and segment i is sealed
/// with nonce = prefix (7 random bytes per file) || i (4 bytes, big-endian) || last flag
/// (1 byte: 1 for the final segment, else 0), and with the caller's header as associated
/// data (which should carry the prefix and the segment size, so that they are bound too).
/// Because every segment's position and finality are in its nonce, reordering, dropping,
/// truncating or appending segments all fail authentication, and a file can be encrypted
/// and decrypted in bounded memory without ever being held whole.
///
/// Segmentation rule: there are always `plainLength / segmentSize + 1` segments, and the
/// final one holds the remaining 0 ..< segmentSize bytes, so a plaintext that is an exact
/// multiple of `segmentSize` (or empty) ends with an empty final segment. A sealed segment
/// of exactly `segmentSize + 16` bytes is therefore never the final one, and the decryptor
/// can open each full segment as soon as it has it, without holding one back.
public enum SegmentedCipher {
    public static let prefixByteCount = 7
    public static let defaultSegmentSize = 65536

    /// The 12-byte nonce of segment `index`: prefix || index (big-endian) || last flag.
    /// `prefix` must be `prefixByteCount` bytes.
    public static func nonce(prefix: [UInt8], index: UInt32, last: Bool) -> [UInt8] {
        precondition(prefix.count == prefixByteCount, "SegmentedCipher.nonce: the prefix must be \(prefixByteCount) bytes")
        var nonce = prefix
        nonce.reserveCapacity(AESGCM.nonceByteCount)
        nonce.append(contentsOf: [UInt8(truncatingIfNeeded: index >> 24), UInt8(truncatingIfNeeded: index >> 16),
                                  UInt8(truncatingIfNeeded: index >> 8), UInt8(truncatingIfNeeded: index), last ? 1 : 0])
        return nonce
    }

    /// The sealed length of a plaintext of `plainLength` bytes: `plainLength` plus a
    /// 16-byte tag for each of the `plainLength / segmentSize + 1` segments.
    public static func sealedLength(plainLength: Int64, segmentSize: Int = defaultSegmentSize) -> Int64 {
        precondition(plainLength >= 0 && segmentSize > 0, "SegmentedCipher.sealedLength: negative length or empty segments")
        let segments = plainLength / Int64(segmentSize) + 1
        return plainLength + Int64(AESGCM.tagByteCount) * segments
    }

    /// The largest segment size accepted, so that a sealed segment's length fits in the
    /// `int` that libcrypto takes.
    static let maximumSegmentSize = 1 << 30

    /// The nonce bytes with the index and flag still zero, after checking the parameters.
    fileprivate static func startNonce(prefix: [UInt8], segmentSize: Int) throws -> [UInt8] {
        guard prefix.count == prefixByteCount else {
            throw CryptoError.invalidInput("the nonce prefix must be \(prefixByteCount) bytes, not \(prefix.count)")
        }
        guard segmentSize > 0, segmentSize <= maximumSegmentSize else {
            throw CryptoError.invalidInput("segment size \(segmentSize) is outside 1...\(maximumSegmentSize)")
        }
        return prefix + [0, 0, 0, 0, 0]
    }

    /// Cuts a stream fed in pieces into whole segments of `size` bytes and passes each to
    /// `whole`: from the input itself when it holds one, without a copy, else from
    /// `pending` (room for one segment; `pendingCount` bytes held), which keeps the rest.
    fileprivate static func wholeSegments(of bytes: UnsafeRawBufferPointer, size: Int, pending: UnsafeMutableRawBufferPointer, pendingCount: inout Int,
                                          _ whole: (UnsafeRawBufferPointer) throws -> Void) throws {
        var rest = bytes
        while !rest.isEmpty {
            if pendingCount == 0 && rest.count >= size {
                try whole(UnsafeRawBufferPointer(rebasing: rest[0..<size]))
                rest = UnsafeRawBufferPointer(rebasing: rest[size...])
                continue
            }
            let take = min(size - pendingCount, rest.count)
            (pending.baseAddress! + pendingCount).copyMemory(from: rest.baseAddress!, byteCount: take)
            pendingCount += take
            rest = UnsafeRawBufferPointer(rebasing: rest[take...])
            if pendingCount == size {
                pendingCount = 0
                try whole(UnsafeRawBufferPointer(pending))
            }
        }
    }

    /// Writes segment `index` and the last flag into the nonce's final five bytes.
    fileprivate static func setSegment(_ nonce: inout [UInt8], index: UInt32, last: Bool) {
        nonce[7] = UInt8(truncatingIfNeeded: index >> 24)
        nonce[8] = UInt8(truncatingIfNeeded: index >> 16)
        nonce[9] = UInt8(truncatingIfNeeded: index >> 8)
        nonce[10] = UInt8(truncatingIfNeeded: index)
        nonce[11] = last ? 1 : 0
    }

    /// Incremental encryptor: feed plaintext in pieces of any size and it emits each
    /// sealed segment as soon as the segment is whole; `finish()` emits the final segment
    /// (short, possibly empty) with the last flag set. It holds at most one segment.
    ///
    /// The buffer passed to `emit` is valid only during the call. Not thread-safe; one
    /// instance per stream, used from one thread, task or actor.
    public final class Encryptor {
        private let key: AESGCMKey
        private let aad: [UInt8]
        private let segmentSize: Int
        private var nonce: [UInt8]
        private var index: UInt32 = 0
        /// Plaintext of the segment being filled.
        private let pending: UnsafeMutableRawBufferPointer
        private var pendingCount = 0
        /// Where each sealed segment is written before it is emitted.
        private let output: UnsafeMutableRawBufferPointer
        private var finished = false

        /// `key` is 32 bytes; `prefix` is the file's 7 random nonce bytes (never reuse a
        /// prefix under one key); `aad` is authenticated with every segment.
        public init(key: [UInt8], prefix: [UInt8], aad: [UInt8], segmentSize: Int = SegmentedCipher.defaultSegmentSize) throws {
            nonce = try SegmentedCipher.startNonce(prefix: prefix, segmentSize: segmentSize)
            self.key = try AESGCMKey(key)
            self.aad = aad
            self.segmentSize = segmentSize
            pending = .allocate(byteCount: segmentSize, alignment: 16)
            output = .allocate(byteCount: segmentSize + AESGCM.tagByteCount, alignment: 16)
        }

        deinit {
            cleanse(pending)
            pending.deallocate()
            output.deallocate()
        }

        /// Takes the next plaintext bytes, emitting every segment they complete.
        public func update(_ bytes: UnsafeRawBufferPointer, _ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
            guard !finished else { throw CryptoError.invalidInput("update after finish") }
            // Every whole segment is not the final one (the final one is always shorter).
            try SegmentedCipher.wholeSegments(of: bytes, size: segmentSize, pending: pending, pendingCount: &pendingCount) {
                try seal($0, last: false, emit)
            }
        }

        /// Emits the final segment: the bytes not yet sealed (fewer than `segmentSize`,
        /// possibly none) with the last flag set. The encryptor cannot be used afterwards.
        public func finish(_ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
            guard !finished else { throw CryptoError.invalidInput("finish called twice") }
            finished = true
            defer { cleanse(pending) }
            try seal(UnsafeRawBufferPointer(rebasing: pending[0..<pendingCount]), last: true, emit)
            pendingCount = 0
        }

        private func seal(_ plaintext: UnsafeRawBufferPointer, last: Bool, _ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
            // A non-final segment must leave an index for the final one after it.
            guard last || index < UInt32.max else {
                throw CryptoError.invalidInput("the stream has more segments than a 32-bit index can number")
            }
            SegmentedCipher.setSegment(&nonce, index: index, last: last)
            let written = try nonce.withUnsafeBytes { n in
                try aad.withUnsafeBytes { a in try key.seal(plaintext, into: output, nonce: n, aad: a) }
            }
            if !last { index += 1 }
            try emit(UnsafeRawBufferPointer(rebasing: output[0..<written]))
        }
    }

    /// Incremental decryptor: feed sealed bytes in pieces of any size and it emits the
    /// plaintext of each segment once that segment has authenticated, never before.
    /// `finish()` opens the final segment, which must carry the last flag, and throws
    /// `.authenticationFailed` when the stream was truncated, extended or altered. It
    /// holds at most one sealed segment.
    ///
    /// Plaintext emitted by `update` is authentic but not yet known to be complete: only a
    /// successful `finish()` proves that nothing was cut off the end. After an
    /// authentication failure every further call throws it again. The buffer passed to
    /// `emit` is valid only during the call. Not thread-safe; one instance per stream.
    public final class Decryptor {
        private let key: AESGCMKey
        private let aad: [UInt8]
        private let sealedSegmentSize: Int
        private var nonce: [UInt8]
        private var index: UInt32 = 0
        /// Sealed bytes of the segment being filled.
        private let pending: UnsafeMutableRawBufferPointer
        private var pendingCount = 0
        /// Where each segment's plaintext is decrypted before it is emitted.
        private let output: UnsafeMutableRawBufferPointer
        private var finished = false
        private var failed = false

        /// The same `key`, `prefix`, `aad` and `segmentSize` the stream was sealed with.
        public init(key: [UInt8], prefix: [UInt8], aad: [UInt8], segmentSize: Int = SegmentedCipher.defaultSegmentSize) throws {
            nonce = try SegmentedCipher.startNonce(prefix: prefix, segmentSize: segmentSize)
            self.key = try AESGCMKey(key)
            self.aad = aad
            sealedSegmentSize = segmentSize + AESGCM.tagByteCount
            pending = .allocate(byteCount: sealedSegmentSize, alignment: 16)
            output = .allocate(byteCount: segmentSize, alignment: 16)
        }

        deinit {
            cleanse(output)
            pending.deallocate()
            output.deallocate()
        }

        /// Takes the next sealed bytes, emitting the plaintext of every full segment they
        /// complete once it has authenticated.
        public func update(_ bytes: UnsafeRawBufferPointer, _ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
            try checkUsable()
            // A full sealed segment is never the final one.
            try SegmentedCipher.wholeSegments(of: bytes, size: sealedSegmentSize, pending: pending, pendingCount: &pendingCount) {
                try open($0, last: false, emit)
            }
        }

        /// Opens the bytes held back as the final segment and emits its plaintext. Throws
        /// `.authenticationFailed` when fewer than a tag's worth of bytes remain (the
        /// final segment was dropped or cut) or when they do not open as the final
        /// segment. The decryptor cannot be used afterwards.
        public func finish(_ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
            try checkUsable()
            finished = true
            guard pendingCount >= AESGCM.tagByteCount else {
                failed = true
                throw CryptoError.authenticationFailed
            }
            let count = pendingCount
            pendingCount = 0
            try open(UnsafeRawBufferPointer(rebasing: pending[0..<count]), last: true, emit)
        }

        private func checkUsable() throws {
            guard !failed else { throw CryptoError.authenticationFailed }
            guard !finished else { throw CryptoError.invalidInput("the decryptor has finished") }
        }

        private func open(_ sealed: UnsafeRawBufferPointer, last: Bool, _ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
            // An encryptor never numbers a non-final segment UInt32.max.
            guard last || index < UInt32.max else {
                failed = true
                throw CryptoError.authenticationFailed
            }
            SegmentedCipher.setSegment(&nonce, index: index, last: last)
            let written: Int
            do {
                written = try nonce.withUnsafeBytes { n in
                    try aad.withUnsafeBytes { a in try key.open(sealed, into: output, nonce: n, aad: a) }
                }
            } catch {
                failed = true
                throw error
            }
            if !last { index += 1 }
            try emit(UnsafeRawBufferPointer(rebasing: output[0..<written]))
        }
    }
}

extension SegmentedCipher {
    /// Seals `count` segments of a stream from segment `firstIndex` on, at random, from their
    /// plaintext: the same bytes the `Encryptor` of that key, prefix and additional data
    /// emits for them, so any range of a sealed stream can be made again from its plaintext
    /// without keeping the sealed stream. Every segment but the stream's final one
    /// (`lastIndex`) is `segmentSize` bytes of `plaintext`; the final one is what is left
    /// (fewer than `segmentSize` bytes, possibly none).
    public static func sealSegments(_ plaintext: UnsafeRawBufferPointer, firstIndex: UInt32, count: Int, lastIndex: UInt32, key: AESGCMKey,
                                    prefix: [UInt8], aad: [UInt8], segmentSize: Int) throws -> [UInt8] {
        var nonce = try startNonce(prefix: prefix, segmentSize: segmentSize)
        guard count > 0, UInt64(firstIndex) + UInt64(count) - 1 <= UInt64(lastIndex) else {
            throw CryptoError.invalidInput("segments \(firstIndex) to \(UInt64(firstIndex) + UInt64(count) - 1) are not in a stream of \(UInt64(lastIndex) + 1)")
        }
        var out = [UInt8](repeating: 0, count: plaintext.count + count * AESGCM.tagByteCount)
        var written = 0
        var offset = 0
        for n in 0..<count {
            let index = firstIndex + UInt32(n)
            let last = index == lastIndex
            let length = last ? plaintext.count - offset : segmentSize
            guard length >= 0, offset + length <= plaintext.count, !last || length < segmentSize else {
                throw CryptoError.invalidInput("the plaintext does not fill segments \(firstIndex) to \(index) of \(segmentSize) bytes")
            }
            setSegment(&nonce, index: index, last: last)
            written += try out.withUnsafeMutableBytes { o in
                try key.seal(UnsafeRawBufferPointer(rebasing: plaintext[offset..<offset + length]),
                             into: UnsafeMutableRawBufferPointer(rebasing: o[written...]), nonce: nonce, aad: aad)
            }
            offset += length
        }
        guard offset == plaintext.count else { throw CryptoError.invalidInput("\(plaintext.count - offset) plaintext bytes past the segments") }
        return out
    }
}
