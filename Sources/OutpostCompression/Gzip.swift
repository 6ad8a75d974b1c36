import OutpostCZlib

/// A gzip failure.
public enum GzipError: Error, Equatable, Sendable {
    /// The decompressed output would exceed the caller's limit (a zip bomb, or simply too
    /// large). Decompression stopped at the limit; no more output was produced.
    case limitExceeded(limit: Int)
    /// The input is not a valid gzip stream, or it ended early.
    case corrupt(String)
}

/// gzip (RFC 1952) compression and capped decompression over zlib.
public enum Gzip {
    /// Compresses `input` into one gzip member.
    public static func compress<Bytes: Collection>(_ input: Bytes, level: Int32 = 6) -> [UInt8] where Bytes.Element == UInt8 {
        var compressor = GzipCompressor(level: level)
        var out = compressor.compress(input)
        out += compressor.finish()
        return out
    }

    /// Decompresses a whole gzip stream, stopping with `GzipError.limitExceeded` as soon as
    /// the output would pass `limit` bytes. Memory used is bounded by `limit`, however
    /// well the input compresses.
    public static func decompress<Bytes: Collection>(_ input: Bytes, limit: Int) throws(GzipError) -> [UInt8] where Bytes.Element == UInt8 {
        var decompressor = GzipDecompressor(limit: limit)
        var out = try decompressor.decompress(input)
        try decompressor.finish()
        if out.isEmpty { out = [] }
        return out
    }

    /// True when `bytes` start with the gzip magic number.
    public static func looksCompressed<Bytes: Collection>(_ bytes: Bytes) -> Bool where Bytes.Element == UInt8 {
        var it = bytes.makeIterator()
        return it.next() == 0x1F && it.next() == 0x8B
    }
}

/// Streaming gzip compressor: feed pieces, then `finish()`. Used for responses that are
/// streamed and never held whole.
public struct GzipCompressor: ~Copyable {
    private var stream: UnsafeMutablePointer<z_stream>
    private var finished = false

    public init(level: Int32 = 6) {
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        // windowBits 15 + 16 selects the gzip wrapper. deflateInit2 is a macro; call the
        // function behind it with the version and struct size it passes.
        let rc = deflateInit2_(stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        precondition(rc == Z_OK, "deflateInit2 failed: \(rc)")
    }

    deinit {
        deflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Compresses a piece; returns whatever compressed bytes are ready.
    public mutating func compress<Bytes: Collection>(_ input: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        precondition(!finished, "GzipCompressor used after finish()")
        if input.isEmpty { return [] }
        if let out = input.withContiguousStorageIfAvailable({ run($0, flush: Z_NO_FLUSH) }) { return out }
        return Array(input).withUnsafeBufferPointer { run($0, flush: Z_NO_FLUSH) }
    }

    /// Flushes what is buffered so a reader can decode everything fed so far (used when a
    /// streamed response must reach the client before it ends).
    public mutating func flush() -> [UInt8] {
        precondition(!finished, "GzipCompressor used after finish()")
        return run(UnsafeBufferPointer(start: nil, count: 0), flush: Z_SYNC_FLUSH)
    }

    /// Ends the stream and returns its last bytes (including the gzip trailer).
    public mutating func finish() -> [UInt8] {
        precondition(!finished, "GzipCompressor finished twice")
        finished = true
        return run(UnsafeBufferPointer(start: nil, count: 0), flush: Z_FINISH)
    }

    private mutating func run(_ input: UnsafeBufferPointer<UInt8>, flush: Int32) -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: max(16_384, input.count / 2 + 64))
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
        stream.pointee.avail_in = UInt32(input.count)
        while true {
            let produced: Int = chunk.withUnsafeMutableBufferPointer { buf in
                stream.pointee.next_out = buf.baseAddress
                stream.pointee.avail_out = UInt32(buf.count)
                let rc = deflate(stream, flush)
                precondition(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, "deflate failed: \(rc)")
                return buf.count - Int(stream.pointee.avail_out)
            }
            out.append(contentsOf: chunk[0..<produced])
            // Done when deflate left output space unused (it had nothing more to give).
            if stream.pointee.avail_out != 0 && stream.pointee.avail_in == 0 { break }
        }
        stream.pointee.next_in = nil
        return out
    }
}

/// Streaming gzip decompressor with an output cap. Feed compressed pieces as they arrive;
/// it throws `limitExceeded` the moment total output would pass the limit, so a small
/// request body can never make the server allocate more than the route allows.
/// Concatenated gzip members (RFC 1952 section 2.2) are accepted.
public struct GzipDecompressor: ~Copyable {
    private var stream: UnsafeMutablePointer<z_stream>
    /// The most output bytes this stream may produce.
    public let limit: Int
    /// Output produced so far.
    public private(set) var produced = 0
    private var memberEnded = false
    private var sawInput = false

    public init(limit: Int) {
        self.limit = limit
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let rc = inflateInit2_(stream, 15 + 16, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        precondition(rc == Z_OK, "inflateInit2 failed: \(rc)")
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Decompresses a piece of input and returns the output it yields.
    public mutating func decompress<Bytes: Collection>(_ input: Bytes) throws(GzipError) -> [UInt8] where Bytes.Element == UInt8 {
        if input.isEmpty { return [] }
        sawInput = true
        let result: Result<[UInt8], GzipError>
        if let r = input.withContiguousStorageIfAvailable({ run($0) }) {
            result = r
        } else {
            result = Array(input).withUnsafeBufferPointer { run($0) }
        }
        return try result.get()
    }

    /// Checks that the stream ended cleanly (the last member's trailer was read).
    public mutating func finish() throws(GzipError) {
        guard sawInput else { throw GzipError.corrupt("empty gzip stream") }
        guard memberEnded else { throw GzipError.corrupt("gzip stream ended early") }
    }

    private mutating func run(_ input: UnsafeBufferPointer<UInt8>) -> Result<[UInt8], GzipError> {
        var out: [UInt8] = []
        var offset = 0
        while offset < input.count {
            if memberEnded {
                // Another member follows; start over for it.
                inflateReset(stream)
                memberEnded = false
            }
            stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress! + offset)
            stream.pointee.avail_in = UInt32(input.count - offset)
            let room = limit - produced
            // One byte more than the room left: if inflate fills it, the limit is exceeded.
            var chunk = [UInt8](repeating: 0, count: min(max(room + 1, 1), 65_536))
            var rc: Int32 = Z_OK
            while true {
                let wrote: Int = chunk.withUnsafeMutableBufferPointer { buf in
                    stream.pointee.next_out = buf.baseAddress
                    stream.pointee.avail_out = UInt32(buf.count)
                    rc = inflate(stream, Z_NO_FLUSH)
                    return buf.count - Int(stream.pointee.avail_out)
                }
                if rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR {
                    let message = stream.pointee.msg.map { String(cString: $0) } ?? "inflate error \(rc)"
                    return .failure(.corrupt(message))
                }
                if produced + wrote > limit {
                    return .failure(.limitExceeded(limit: limit))
                }
                produced += wrote
                out.append(contentsOf: chunk[0..<wrote])
                if rc == Z_STREAM_END { memberEnded = true; break }
                if stream.pointee.avail_in == 0 && stream.pointee.avail_out != 0 { break }
                if rc == Z_BUF_ERROR && wrote == 0 { break }
                let remaining = limit - produced
                if chunk.count > remaining + 1 { chunk = [UInt8](repeating: 0, count: max(remaining + 1, 1)) }
            }
            let consumed = (input.count - offset) - Int(stream.pointee.avail_in)
            offset += consumed
            if !memberEnded && stream.pointee.avail_in == 0 { break }
            if consumed == 0 && !memberEnded { break }
        }
        stream.pointee.next_in = nil
        return .success(out)
    }
}
