// `outpost-bench media`: media upload and download through the release `outpost-server`
// (docs/protocol.md section 6), beside the machine's own ceilings measured in the same run.
//
// 1. Writes a file of random bytes (256 MiB by default) in a temporary directory, which
//    also holds the server's data directory: the same disk.
// 2. Ceilings: `sha256sum` of the file (the server hashes every byte twice, from the
//    request's buffer: each chunk's Content-Digest and the file's running SHA-256, so
//    finalize reads nothing back; docs/media.md, "Hashing once") and `cp` of the file, also
//    with the copy fsynced (the server fsyncs the file it publishes). Best of two each.
// 3. Starts `outpost-server serve --port 0` on that data directory, then:
//    upload: init + every chunk (PUT with Content-Digest, several keep-alive connections)
//    + finalize, timed from the init request to the finalize answer. The client's
//    digests (the file's SHA-256 and each chunk's) are computed before the clock starts,
//    as an app computes them when it captures the file.
//    download: GET of the whole file, read and discarded, best of three; then one more
//    GET whose bytes are hashed and compared with the file.
// 4. Samples the server's VmRSS and VmHWM from /proc every 5 ms during both.
//
// Goals (docs/benchmarks.md): upload >= 0.9 x sha256sum's MB/s, download >= 1 GB/s over
// loopback, server RSS growth < 64 MB. MB is 10^6 bytes throughout.
import Foundation
import OutpostSubprocess
import Glibc
import OutpostCore
import OutpostCrypto
import OutpostServer
import Synchronization

enum MediaBench {
    struct Options {
        var megabytes = 256
        var connections = 4
        var server: String?
        var directory: String?
        var s3Endpoint: String?
        var s3Bucket: String?
        var boto3Python: String?
    }

    static let help = """
        usage: outpost-bench media [--size-mb 256] [--connections 4] [--server PATH] [--dir DIR]
          --size-mb      the file's size in MiB
          --connections  keep-alive connections the chunks are spread over
          --server       the outpost-server binary (default: the one next to outpost-bench)
          --dir          where the file and the data directory go (default: a new directory in $TMPDIR)
          --s3-endpoint URL --s3-bucket NAME
                         also run a server whose media live in that bucket (credentials from
                         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), against the directory's figures
          --boto3 PYTHON a python with boto3: time boto3's multipart upload of the file to the
                         bucket as the S3 ceiling (scripts/bench-boto3-upload.py)
          scripts/bench-media-s3.sh runs all of it against a throwaway S3 store
        """

    static func run(arguments: [String]) async throws {
        var o = Options()
        var options = OptionReader(arguments, help: help)
        while let option = options.next() {
            switch option {
            case "--size-mb": o.megabytes = try options.number(atLeast: 1)
            case "--connections": o.connections = try options.number(atLeast: 1)
            case "--server": o.server = try options.value()
            case "--dir": o.directory = try options.value()
            case "--s3-endpoint": o.s3Endpoint = try options.value()
            case "--s3-bucket": o.s3Bucket = try options.value()
            case "--boto3": o.boto3Python = try options.value()
            case "-h", "--help":
                print(help)
                return
            default: throw options.unknown(option)
            }
        }
        try await bench(o)
    }

    // MARK: The run

    static func bench(_ o: Options) async throws {
        let serverPath = try HTTPBench.locateServer(o.server)
        let work: String
        if let dir = o.directory {
            work = dir + "/outpost-media-bench-\(getpid())"
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        } else {
            work = try HTTPBench.makeTemporaryDirectory()
        }
        defer { try? FileManager.default.removeItem(atPath: work) }
        let size = Int64(o.megabytes) << 20
        let filePath = work + "/media.bin"
        let data = work + "/data"
        print("outpost-bench media: a \(o.megabytes) MiB file, \(o.connections) upload connections; file and data directory in \(work)")
        print("machine: \(ProcessInfo.processInfo.activeProcessorCount) cores; server: \(serverPath); MB = 10^6 bytes")

        try writeRandomFile(filePath, size: size)
        var figures = try measureCeilings(filePath: filePath, work: work)

        let directory = try await measure(serverPath: serverPath, data: data, extra: [], filePath: filePath, size: size, connections: o.connections)
        figures.apply(directory)
        var s3: Run?
        var boto3: Double?
        if let endpoint = o.s3Endpoint, let bucket = o.s3Bucket {
            // The same file through a server whose media live in the bucket, then the same
            // file by boto3's multipart upload to the same bucket: the S3 ceiling.
            s3 = try await measure(serverPath: serverPath, data: work + "/data-s3",
                                   extra: ["--media-store", "s3", "--s3-endpoint", endpoint, "--s3-bucket", bucket, "--s3-prefix", "bench-\(getpid())/"],
                                   filePath: filePath, size: size, connections: o.connections)
            if let python = o.boto3Python {
                boto3 = try best(of: 2) { try boto3Upload(python: python, endpoint: endpoint, bucket: bucket, filePath: filePath, threads: o.connections) }
            }
        }

        // In-process SHA-256 (libcrypto), for reference: the server hashes with it.
        figures.libcrypto = try best(of: 2) { try hashSeconds(filePath, size: size) }
        report(figures, size: size)
        if let s3 { reportS3(s3, directory: directory, boto3: boto3, size: size) }
    }

    /// Seconds boto3's multipart upload of the file took, as the script measures it (its
    /// interpreter's start and imports left out).
    static func boto3Upload(python: String, endpoint: String, bucket: String, filePath: String, threads: Int) throws -> Double {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let result = try Subprocess.run(python, [root + "/scripts/bench-boto3-upload.py", "--endpoint", endpoint, "--bucket", bucket,
                                                 "--key", "bench-\(getpid())/boto3/media.bin", "--file", filePath, "--threads", String(threads)],
                                        errorToOutput: true)
        guard result.status == 0, let line = result.output.split(separator: "\n").last(where: { $0.hasPrefix("seconds ") }),
              let seconds = Double(line.dropFirst("seconds ".count)) else {
            throw HTTPBench.BenchError("the boto3 upload failed: \(result.output.suffix(2000))")
        }
        return seconds
    }

    /// One server's upload and downloads of the file.
    struct Run {
        var clientHashing = 0.0
        var uploadSeconds = 0.0, chunksSeconds = 0.0, finalizeSeconds = 0.0, downloadSeconds = 0.0
        var uploadCPU = MemorySampler.CPU(), downloadCPU = MemorySampler.CPU()
        var baseline = MemorySampler.Sample(), uploadPeak = MemorySampler.Sample(), downloadPeak = MemorySampler.Sample()
    }

    /// Starts `outpost-server` on `data` with `extra` flags, uploads the file (init, every
    /// chunk, finalize) and downloads it (best of three, then once verified), sampling the
    /// server's memory and CPU.
    static func measure(serverPath: String, data: String, extra: [String], filePath: String, size: Int64, connections: Int) async throws -> Run {
        var run = Run()
        let server = try HTTPBench.ServerChild.start(path: serverPath, data: data, eventLoops: 0, extra: extra)
        defer { server.stop() }
        let secret = try JWTSecret.load(environmentValue: ProcessInfo.processInfo.environment["OUTPOST_JWT_SECRET"], dataDirectory: data)
        let token = JWTAuthority(secret: secret).sign(Claims(sub: "bench", exp: Int64(Date().timeIntervalSince1970) + 3600, spaces: ["bench"], scope: .write))
        let chunkSize = try readChunkSize(port: server.port)
        // The client's digests, before the clock (an app has them from capture time).
        let hashStart = ContinuousClock.now
        let (fileSHA, chunkDigests) = try digests(filePath, size: size, chunkSize: chunkSize)
        run.clientHashing = seconds(ContinuousClock.now - hashStart)

        let sampler = MemorySampler(pid: server.pid)
        run.baseline = MemorySampler.read(pid: server.pid)
        sampler.begin()
        let cpuBeforeUpload = MemorySampler.cpu(pid: server.pid)
        let uploadStart = ContinuousClock.now
        let uploadId = try initUpload(port: server.port, token: token, size: size, sha256: fileSHA)
        try await sendChunks(port: server.port, token: token, uploadId: uploadId, filePath: filePath, size: size,
                             chunkSize: chunkSize, digests: chunkDigests, connections: connections)
        let chunksDone = ContinuousClock.now
        try finalize(port: server.port, token: token, uploadId: uploadId)
        let uploadEnd = ContinuousClock.now
        run.uploadPeak = sampler.end()
        run.uploadSeconds = seconds(uploadEnd - uploadStart)
        run.uploadCPU = MemorySampler.cpu(pid: server.pid) - cpuBeforeUpload
        run.chunksSeconds = seconds(chunksDone - uploadStart)
        run.finalizeSeconds = seconds(uploadEnd - chunksDone)

        sampler.begin()
        let cpuBeforeDownload = MemorySampler.cpu(pid: server.pid)
        var downloadSeconds = Double.infinity
        for _ in 0..<3 {
            downloadSeconds = min(downloadSeconds, try await download(port: server.port, token: token, mediaId: fileSHA, size: size, verify: false).seconds)
        }
        run.downloadPeak = sampler.end()
        run.downloadCPU = MemorySampler.cpu(pid: server.pid) - cpuBeforeDownload
        run.downloadSeconds = downloadSeconds
        let verified = try await download(port: server.port, token: token, mediaId: fileSHA, size: size, verify: true)
        guard verified.sha256 == fileSHA else { throw HTTPBench.BenchError("the downloaded file's SHA-256 is \(verified.sha256 ?? "-"), not \(fileSHA)") }
        return run
    }

    /// The S3 store beside the directory and beside boto3's own multipart upload of the
    /// same file to the same bucket.
    static func reportS3(_ s3: Run, directory: Run, boto3: Double?, size: Int64) {
        func mbps(_ seconds: Double) -> Double { Double(size) / seconds / 1e6 }
        func f(_ v: Double) -> String { String(format: "%.0f", v) }
        func mb(_ bytes: Int) -> String { String(format: "%.1f MB", Double(bytes) / 1e6) }
        let upload = mbps(s3.uploadSeconds), dirUpload = mbps(directory.uploadSeconds)
        print("")
        print("media in S3 (--media-store s3), the same file:")
        print(pad("upload (init+chunks+finalize)", 34) + pad(f(upload), 10)
              + "x\(String(format: "%.2f", upload / dirUpload)) of the directory store (goal >= 0.7: \(verdict(upload >= 0.7 * dirUpload))); "
              + "chunks \(String(format: "%.2f", s3.chunksSeconds)) s, finalize \(String(format: "%.2f", s3.finalizeSeconds)) s")
        if let boto3 {
            print(pad("boto3 multipart upload (ceiling)", 34) + pad(f(mbps(boto3)), 10)
                  + "outpost's upload is x\(String(format: "%.2f", upload / mbps(boto3))) of it (goal >= 1.0: \(verdict(upload >= mbps(boto3))))")
        }
        print(pad("download (GET, best of 3)", 34) + pad(f(mbps(s3.downloadSeconds)), 10)
              + "x\(String(format: "%.2f", mbps(s3.downloadSeconds) / mbps(directory.downloadSeconds))) of the directory store")
        print("server CPU: upload \(s3.uploadCPU.text), three downloads \(s3.downloadCPU.text)")
        let growth = max(s3.uploadPeak.rss, s3.downloadPeak.rss) - s3.baseline.rss
        print("server RSS: \(mb(s3.baseline.rss)) before; peak \(mb(s3.uploadPeak.rss)) during upload, \(mb(s3.downloadPeak.rss)) during download; "
              + "growth \(mb(growth)) for one upload (goal < 16.8 MB, 16 MiB: \(verdict(growth < 16 << 20)))")
    }

    /// What `bench` measured, in seconds, CPU times and memory samples, for `report`.
    struct Figures {
        var sha256sum = 0.0, cp = 0.0, cpSync = 0.0, libcrypto = 0.0
        var clientHashing = 0.0
        var uploadSeconds = 0.0, chunksSeconds = 0.0, finalizeSeconds = 0.0, downloadSeconds = 0.0
        var uploadCPU = MemorySampler.CPU(), downloadCPU = MemorySampler.CPU()
        var baseline = MemorySampler.Sample(), uploadPeak = MemorySampler.Sample(), downloadPeak = MemorySampler.Sample()

        mutating func apply(_ run: Run) {
            clientHashing = run.clientHashing
            (uploadSeconds, chunksSeconds, finalizeSeconds, downloadSeconds) = (run.uploadSeconds, run.chunksSeconds, run.finalizeSeconds, run.downloadSeconds)
            (uploadCPU, downloadCPU) = (run.uploadCPU, run.downloadCPU)
            (baseline, uploadPeak, downloadPeak) = (run.baseline, run.uploadPeak, run.downloadPeak)
        }
    }

    /// The machine's ceilings, in the same run and on the same disk: `sha256sum` of the
    /// file, `cp` of it, and `cp` with the copy fsynced, best of two each.
    static func measureCeilings(filePath: String, work: String) throws -> Figures {
        var figures = Figures()
        figures.sha256sum = try best(of: 2) { try timeCommand("/usr/bin/env", ["sha256sum", filePath]) }
        let copyPath = work + "/copy.bin"
        figures.cp = try best(of: 2) {
            defer { unlink(copyPath) }
            return try timeCommand("/usr/bin/env", ["cp", filePath, copyPath])
        }
        figures.cpSync = try best(of: 2) {
            defer { unlink(copyPath) }
            let start = ContinuousClock.now
            _ = try timeCommand("/usr/bin/env", ["cp", filePath, copyPath])
            let fd = open(copyPath, O_RDONLY)
            guard fd >= 0, fsync(fd) == 0 else { throw HTTPBench.BenchError("fsync of the copy failed: errno \(errno)") }
            close(fd)
            return seconds(ContinuousClock.now - start)
        }
        return figures
    }

    /// The table of MB/s against the ceilings, the goals, the server's CPU and RSS.
    static func report(_ figures: Figures, size: Int64) {
        func mbps(_ seconds: Double) -> Double { Double(size) / seconds / 1e6 }
        func ratio(_ a: Double, _ b: Double) -> String { String(format: "%.2f", a / b) }
        func f(_ v: Double) -> String { String(format: "%.0f", v) }
        func mb(_ bytes: Int) -> String { String(format: "%.1f MB", Double(bytes) / 1e6) }
        let (sha256sum, cp) = (figures.sha256sum, figures.cp)
        let (baseline, uploadPeak, downloadPeak) = (figures.baseline, figures.uploadPeak, figures.downloadPeak)
        let upload = mbps(figures.uploadSeconds), download = mbps(figures.downloadSeconds)
        print("")
        print(pad("", 34) + pad("MB/s", 10) + "notes")
        print(pad("sha256sum (upload ceiling)", 34) + pad(f(mbps(sha256sum)), 10) + "coreutils, one core")
        print(pad("SHA-256 in process (libcrypto)", 34) + pad(f(mbps(figures.libcrypto)), 10) + "what the server hashes with")
        print(pad("cp (disk ceiling)", 34) + pad(f(mbps(cp)), 10) + "page cache, no fsync")
        print(pad("cp + fsync of the copy", 34) + pad(f(mbps(figures.cpSync)), 10) + "the server fsyncs what it publishes")
        print(pad("upload (init+chunks+finalize)", 34) + pad(f(upload), 10)
              + "x\(ratio(upload, mbps(sha256sum))) of sha256sum (goal >= 0.9: \(verdict(upload >= 0.9 * mbps(sha256sum)))); "
              + "chunks \(String(format: "%.2f", figures.chunksSeconds)) s, finalize \(String(format: "%.2f", figures.finalizeSeconds)) s")
        print(pad("download (GET, best of 3)", 34) + pad(f(download), 10)
              + "goal >= 1000: \(verdict(download >= 1000)); x\(ratio(download, mbps(cp))) of cp")
        print("server CPU: upload \(figures.uploadCPU.text), three downloads \(figures.downloadCPU.text); load average \(loadAverage())")
        print("client digests before the upload (not timed): \(String(format: "%.2f", figures.clientHashing)) s")
        let growth = max(uploadPeak.rss, downloadPeak.rss) - baseline.rss
        print("server RSS: \(mb(baseline.rss)) before; peak \(mb(uploadPeak.rss)) during upload, \(mb(downloadPeak.rss)) during download; "
              + "VmHWM \(mb(max(uploadPeak.hwm, downloadPeak.hwm))); growth \(mb(growth)) (goal < 64 MB: \(verdict(growth < 64_000_000)))")
    }

    // MARK: Files and hashes

    /// Random bytes (SplitMix64; the file must not compress or dedupe), written in 8 MiB blocks.
    static func writeRandomFile(_ path: String, size: Int64) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw HTTPBench.BenchError("cannot create \(path): errno \(errno)") }
        defer { close(fd) }
        var random = SplitMix64(seed: UInt64(truncatingIfNeeded: Int(bitPattern: UInt(UInt32(truncatingIfNeeded: time(nil))))) | 1)
        var block = [UInt64](repeating: 0, count: (8 << 20) / 8)
        var written: Int64 = 0
        while written < size {
            for i in block.indices {
                block[i] = random.next()
            }
            let n = Int(min(Int64(block.count * 8), size - written))
            let w = block.withUnsafeBytes { write(fd, $0.baseAddress, n) }
            guard w == n else { throw HTTPBench.BenchError("write \(path): errno \(errno)") }
            written += Int64(n)
        }
    }

    /// The file's SHA-256 (hex) and, unless `chunks` is false, each chunk's `Content-Digest`,
    /// the file read once.
    static func digests(_ path: String, size: Int64, chunkSize: Int, chunks withChunks: Bool = true) throws -> (String, [String]) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw HTTPBench.BenchError("cannot open \(path)") }
        defer { close(fd) }
        var whole = SHA256()
        var chunks: [String] = []
        var buffer = [UInt8](repeating: 0, count: chunkSize)
        var offset: Int64 = 0
        while offset < size {
            let n = Int(min(Int64(chunkSize), size - offset))
            try preadFully(fd, &buffer, count: n, offset: offset)
            let piece = buffer[0..<n]
            whole.update(piece)
            if withChunks { chunks.append(contentDigest(piece)) }
            offset += Int64(n)
        }
        return (Hex.encode(whole.finalize()), chunks)
    }

    static func hashSeconds(_ path: String, size: Int64) throws -> Double {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw HTTPBench.BenchError("cannot open \(path)") }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        let start = ContinuousClock.now
        var hasher = SHA256()
        var offset: Int64 = 0
        while offset < size {
            let n = Int(min(Int64(buffer.count), size - offset))
            try preadFully(fd, &buffer, count: n, offset: offset)
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            offset += Int64(n)
        }
        _ = hasher.finalize()
        return seconds(ContinuousClock.now - start)
    }

    static func preadFully(_ fd: Int32, _ buffer: inout [UInt8], count: Int, offset: Int64) throws {
        var done = 0
        while done < count {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done)) }
            guard n > 0 else { throw HTTPBench.BenchError("pread: errno \(errno)") }
            done += n
        }
    }

    // MARK: Protocol steps

    static func readChunkSize(port: Int) throws -> Int {
        let response = try probe(port: port, "/v1/info")
        guard response.status == 200, let info = try? ServerInfo.decode(response.body) else {
            throw HTTPBench.BenchError("/v1/info answered \(response.status)")
        }
        return info.limits.chunkSize
    }

    static func initUpload(port: Int, token: String, size: Int64, sha256: String, space: String = "bench") throws -> String {
        let connection = try BenchConnection(port: port)
        let body = UploadRequest(size: size, sha256: sha256, contentType: "video/mp4", filename: "bench.mp4").encoded()
        let response = try connection.request("POST", "/v1/spaces/\(space)/media/uploads",
                                              headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")], body: body)
        guard response.status == 201, let state = try? UploadState.decode(response.body) else {
            throw HTTPBench.BenchError("init answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
        }
        return state.uploadId
    }

    /// `Content-Digest: sha-256=:<base64>:` of `bytes`.
    static func contentDigest(_ bytes: ArraySlice<UInt8>) -> String {
        "sha-256=:\(Base64.encode(SHA256.hash(bytes))):"
    }

    /// Every chunk, spread over `connections` keep-alive connections (each takes the next
    /// index not yet taken), each on a thread of its own, into `space`. `digests`: each
    /// chunk's `Content-Digest`, computed before; nil: each is computed from the chunk's
    /// bytes just before it is sent, as the SDK's `MediaUploader` does.
    static func sendChunks(port: Int, token: String, uploadId: String, filePath: String, size: Int64, chunkSize: Int,
                           digests: [String]?, connections: Int, space: String = "bench") async throws {
        let cursor = ChunkCursor()
        let count = digests?.count ?? Int((size + Int64(chunkSize) - 1) / Int64(chunkSize))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<connections {
                group.addTask {
                    try await onThread {
                        let fd = open(filePath, O_RDONLY | O_CLOEXEC)
                        guard fd >= 0 else { throw HTTPBench.BenchError("cannot open \(filePath)") }
                        defer { close(fd) }
                        // A chunk to a bucket waits for the store's answer: longer than 10 s
                        // on a loaded machine.
                        let connection = try BenchConnection(port: port, receiveTimeout: 120)
                        var buffer = [UInt8](repeating: 0, count: chunkSize)
                        while true {
                            let index = cursor.take()
                            guard index < count else { return }
                            let offset = Int64(index) * Int64(chunkSize)
                            let n = Int(min(Int64(chunkSize), size - offset))
                            try preadFully(fd, &buffer, count: n, offset: offset)
                            let response = try connection.request(
                                "PUT", "/v1/spaces/\(space)/media/uploads/\(uploadId)/chunks/\(index)",
                                headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/octet-stream"),
                                          ("Content-Digest", digests?[index] ?? contentDigest(buffer[0..<n]))],
                                body: buffer, bodyCount: n)
                            guard response.status == 200 else {
                                throw HTTPBench.BenchError("chunk \(index) answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    static func finalize(port: Int, token: String, uploadId: String, space: String = "bench") throws {
        // Publishing to a bucket reads the staged chunks back and writes the parts: minutes
        // for a large file on a slow store.
        let connection = try BenchConnection(port: port, receiveTimeout: 600)
        let response = try connection.request("POST", "/v1/spaces/\(space)/media/uploads/\(uploadId)/finalize",
                                              headers: [("Authorization", "Bearer \(token)")], body: [])
        guard response.status == 200 else {
            throw HTTPBench.BenchError("finalize answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
        }
    }

    /// One GET of the whole file; the body is read into a 1 MiB buffer and dropped, or
    /// hashed when `verify`.
    static func download(port: Int, token: String, mediaId: String, size: Int64, verify: Bool) async throws -> (seconds: Double, sha256: String?) {
        try await onThread {
            let connection = try BenchConnection(port: port)
            let start = ContinuousClock.now
            var hasher = SHA256()
            let received = try connection.download("/v1/spaces/bench/media/\(mediaId)", headers: [("Authorization", "Bearer \(token)")]) { piece in
                if verify { hasher.update(piece) }
            }
            let elapsed = seconds(ContinuousClock.now - start)
            guard received == size else { throw HTTPBench.BenchError("download got \(received) of \(size) bytes") }
            return (elapsed, verify ? Hex.encode(hasher.finalize()) : nil)
        }
    }

    // MARK: Helpers

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    static func best(of rounds: Int, _ body: () throws -> Double) throws -> Double {
        var best = Double.infinity
        for _ in 0..<rounds { best = min(best, try body()) }
        return best
    }

    /// Runs a command to completion (output discarded) and returns its wall time.
    static func timeCommand(_ path: String, _ arguments: [String]) throws -> Double {
        let start = ContinuousClock.now
        let p = try Subprocess(path, arguments, error: .inherit)
        let ended = p.wait()
        let elapsed = seconds(ContinuousClock.now - start)
        guard ended.status == 0 else { throw HTTPBench.BenchError("\(arguments.joined(separator: " ")) exited \(ended.status)") }
        return elapsed
    }

    /// The 1-minute load average: other work on the machine skews every figure.
    static func loadAverage() -> String {
        (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").first.map(String.init) ?? "?"
    }

    static func pad(_ s: String, _ n: Int) -> String { s.padding(toLength: max(n, s.count + 1), withPad: " ", startingAt: 0) }

    /// Runs blocking socket work on a thread of its own, not on the concurrency pool.
    static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }
}

/// Hands out chunk indexes to the upload threads, each once.
final class ChunkCursor: Sendable {
    private let next = Atomic<Int>(0)
    func take() -> Int { next.wrappingAdd(1, ordering: .relaxed).oldValue }
}

/// Samples a process's VmRSS and VmHWM every 5 ms between `begin` and `end`.
final class MemorySampler: Sendable {
    struct Sample: Sendable {
        var rss = 0
        var hwm = 0
    }

    let pid: Int32
    private let peak = Mutex(Sample())
    private let running = Atomic<Bool>(false)
    private let stopped = Mutex<CheckedContinuation<Void, Never>?>(nil)

    init(pid: Int32) { self.pid = pid }

    /// VmRSS and VmHWM from /proc/PID/status, in bytes.
    static func read(pid: Int32) -> Sample {
        var sample = Sample()
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return sample }
        for line in text.split(separator: "\n") {
            let kb = { line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) } ?? 0 }
            if line.hasPrefix("VmRSS:") { sample.rss = kb() * 1024 }
            if line.hasPrefix("VmHWM:") { sample.hwm = kb() * 1024 }
        }
        return sample
    }

    /// CPU time the process has used, user and system, from /proc/PID/stat, in seconds.
    struct CPU {
        var user = 0.0
        var system = 0.0
        var total: Double { user + system }
        static func - (a: CPU, b: CPU) -> CPU { CPU(user: a.user - b.user, system: a.system - b.system) }
        var text: String { String(format: "%.2f s (user %.2f, system %.2f)", total, user, system) }
    }

    static func cpu(pid: Int32) -> CPU {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return CPU() }
        // Fields after the command name: state is field 3; utime and stime are 14 and 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return CPU() }
        let tick = Double(sysconf(Int32(_SC_CLK_TCK)))
        return CPU(user: user / tick, system: system / tick)
    }

    /// Starts sampling on a thread of its own.
    func begin() {
        peak.withLock { $0 = MemorySampler.read(pid: pid) }
        running.store(true, ordering: .sequentiallyConsistent)
        let thread = Thread { [self] in
            while running.load(ordering: .sequentiallyConsistent) {
                let s = MemorySampler.read(pid: pid)
                peak.withLock { p in
                    p.rss = max(p.rss, s.rss)
                    p.hwm = max(p.hwm, s.hwm)
                }
                usleep(5000)
            }
        }
        thread.start()
    }

    /// Stops sampling (after one last sample) and returns the peaks seen.
    func end() -> Sample {
        running.store(false, ordering: .sequentiallyConsistent)
        let last = MemorySampler.read(pid: pid)
        return peak.withLock { p in
            p.rss = max(p.rss, last.rss)
            p.hwm = max(p.hwm, last.hwm)
            return p
        }
    }
}
