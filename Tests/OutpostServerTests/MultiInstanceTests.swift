import Foundation
import Synchronization
import Testing
import OutpostCore
import OutpostCrypto
import OutpostTestSupport
@testable import OutpostServer

/// Three `outpost-server` processes on one PostgreSQL database and one shared media
/// directory, as operators run them behind a load balancer (docs/scaling.md).
@Suite(.offPoolWhileBlocking, .serialized, .serverLogs) struct MultiInstanceTests {
    /// Starts three instances on a fresh database, runs `body`, stops them by PID.
    func withInstances(_ body: @escaping @Sendable ([ServerProcess], String) throws -> Void) async throws {
        let url = try await PostgresCluster.database()
        try await withTemporaryDirectory(prefix: "outpost-multi") { dir in
            let media = dir.appending("shared-media")
            try FileManager.default.createDirectory(atPath: media, withIntermediateDirectories: true)
            try await blocking {
                var servers: [ServerProcess] = []
                defer { for s in servers { s.stop() } }
                for i in 0..<3 {
                    servers.append(try ServerProcess(dataDirectory: dir.appending("instance-\(i)"),
                                                     arguments: ["--store", url, "--media-dir", media]))
                }
                try body(servers, dir.path)
            }
        }
    }

    static func pushBody(_ prefix: String, count: Int) -> [UInt8] {
        let changes = (0..<count).map { put("\(prefix)-\($0)", "\(prefix)-\($0)", ["n": .number(JSONNumber($0))]) }
        return PushRequest(clientId: prefix, changes: changes).encoded()
    }

    /// Writers push through all three instances and pullers follow the space through all
    /// three (long polls included); one instance is killed with SIGKILL in the middle and
    /// its writers carry on through the others, sending their unanswered push again.
    /// Every seq is handed out once, no puller skips or repeats a record, and every write
    /// that was acknowledged is in the history afterwards.
    @Test func manyClientsThroughThreeInstancesKillNineAndPullersMissNothing() async throws {
        try await withInstances { servers, _ in
            let token = try servers[0].token(spaces: ["*"], scope: "write")
            let auth = [("Authorization", "Bearer \(token)")]
            let writers = 6, pushes = 16, perPush = 10
            let total = writers * pushes * perPush
            let acknowledged = Mutex<[String: Int64]>([:])   // record id -> seq
            let pulled = Mutex<[[Int64]]>([])
            let failures = Mutex<[String]>([])
            let killed = Atomic<Bool>(false)
            let group = DispatchGroup()
            for w in 0..<writers {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    do {
                        for p in 0..<pushes {
                            let body = Self.pushBody("w\(w)-p\(p)", count: perPush)
                            // Instance 2 dies at some point: a push it did not answer is
                            // sent again through the next instance (a replay when it had
                            // committed).
                            var target = (w + p) % 3
                            var response: TestResponse?
                            var errors: [String] = []
                            for _ in 0..<3 {
                                if target == 2 && killed.load(ordering: .relaxed) { target = 0 }
                                do {
                                    response = try httpRequest(port: servers[target].port, "POST", "/v1/spaces/storm/push", headers: auth, body: body, timeout: 30)
                                    break
                                } catch {
                                    errors.append("instance \(target): \(error)")
                                    target = (target + 1) % 2
                                }
                            }
                            guard let response, response.status == 200 else {
                                failures.withLock { $0.append("push w\(w) p\(p): \(response?.status ?? 0) \(response?.text.prefix(200) ?? "") \(errors)") }
                                return
                            }
                            let answer = try PushResponse.decode(response.body)
                            acknowledged.withLock { acked in
                                for (i, result) in answer.results.enumerated() where result.status == .applied {
                                    acked["w\(w)-p\(p)-\(i)"] = result.version!.seq
                                }
                            }
                        }
                    } catch {
                        failures.withLock { $0.append("writer \(w): \(error)") }
                    }
                }
            }
            for r in 0..<3 {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    // Pullers on 0 and 1 for the whole run; the one on 2 moves to 0 when 2 dies.
                    var seen: [Int64] = []
                    var since = ""
                    let deadline = Date().addingTimeInterval(180)
                    while seen.count < total && Date() < deadline {
                        let server = servers[r == 2 && killed.load(ordering: .relaxed) ? 0 : r]
                        do {
                            let response = try httpRequest(port: server.port, "GET", "/v1/spaces/storm/pull?limit=37&wait=2000\(since)", headers: auth, timeout: 30)
                            guard response.status == 200 else {
                                failures.withLock { $0.append("pull \(r): \(response.status) \(response.text.prefix(200))") }
                                return
                            }
                            let page = try PullPage.decode(response.body)
                            seen += page.changes.map(\.version.seq)
                            since = "&since=\(page.next.text)"
                        } catch {
                            if server === servers[2] { continue }   // killed under it
                            failures.withLock { $0.append("puller \(r): \(error)") }
                            return
                        }
                    }
                    pulled.withLock { $0.append(seen) }
                }
            }
            // Kill instance 2 once about a third of the writes are in.
            try eventuallyBlocking("a third of the writes acknowledged (or a writer failed)", within: .seconds(180)) {
                acknowledged.withLock { $0.count } >= total / 3 || !failures.withLock { $0.isEmpty }
            }
            servers[2].kill9()
            killed.store(true, ordering: .relaxed)
            group.wait()

            for failure in failures.withLock({ $0 }) { Issue.record(Comment(rawValue: failure)) }
            let acked = acknowledged.withLock { $0 }
            #expect(acked.count == total, "every change was acknowledged once its push was answered")
            #expect(Set(acked.values).count == acked.count, "a seq was handed out twice")
            #expect(Set(acked.values) == Set(1...Int64(total)), "seqs have gaps or go past the writes")
            let lists = pulled.withLock { $0 }
            #expect(lists.count == 3)
            for list in lists {
                #expect(list == Array(1...Int64(total)), "a puller skipped, repeated or reordered records (\(list.count) of \(total))")
            }
            // Every acknowledged write is in the history, at its acknowledged version.
            var records: [String: Int64] = [:]
            var since = ""
            while true {
                let response = try httpRequest(port: servers[1].port, "GET", "/v1/spaces/storm/pull?limit=5000\(since)", headers: auth)
                let page = try PullPage.decode(response.body)
                for r in page.changes { records[r.id] = r.version.seq }
                since = "&since=\(page.next.text)"
                if !page.hasMore { break }
            }
            for (id, seq) in acked { #expect(records[id] == seq, "acknowledged \(id) at \(seq) is \(records[id].map(String.init) ?? "missing")") }
        }
    }

    /// A long poll held by one instance is answered when another commits. Each round the
    /// pull is seen waiting on its instance (its `/metrics`) before the push, and that
    /// instance counts it woken by a commit, which a pull answered at the end of its 30 s
    /// wait is not. The time it takes is `outpost-bench push --store … --instances 1,3`'s
    /// "long poll across instances" line (docs/benchmarks.md).
    @Test func aLongPollOnOneInstanceWakesOnACommitThroughAnother() async throws {
        try await withInstances { servers, _ in
            let token = try servers[0].token(spaces: ["*"], scope: "write")
            let admin = try servers[0].token(spaces: [], admin: true)
            let auth = [("Authorization", "Bearer \(token)")]
            for round in 0..<5 {
                let holder = servers[(round % 2) + 1]
                let head = try PullPage.decode(try httpRequest(port: servers[1].port, "GET", "/v1/spaces/poll/pull", headers: auth).body)
                let wokenBefore = try holder.metric("outpost_long_polls_woken_total", token: admin) ?? 0
                let answer = Mutex<TestResponse?>(nil)
                let answered = DispatchSemaphore(value: 0)
                let waiter = Thread {
                    let r = try? httpRequest(port: holder.port, "GET", "/v1/spaces/poll/pull?wait=30000&since=\(head.next.text)", headers: auth, timeout: 40)
                    answer.withLock { $0 = r }
                    answered.signal()
                }
                waiter.start()
                try eventuallyBlocking("round \(round): the pull waits on instance \((round % 2) + 1)") {
                    try holder.metric("outpost_long_polls_waiting", token: admin) == 1
                }
                let push = try httpRequest(port: servers[0].port, "POST", "/v1/spaces/poll/push", headers: auth, body: Self.pushBody("poll\(round)", count: 1))
                #expect(push.status == 200)
                #expect(answered.wait(timeout: .now() + 45) == .success, "round \(round): the held pull was never answered")
                let page = try PullPage.decode(try #require(answer.withLock { $0 }, "round \(round): the held pull failed").body)
                #expect(page.changes.map(\.id) == ["poll\(round)-0"])
                #expect(try holder.metric("outpost_long_polls_woken_total", token: admin) == wokenBefore + 1,
                        "round \(round): the pull was answered by the commit, not at the end of its wait")
            }
        }
    }

    /// Media across instances: chunks sent through all three, finalize raced on two at
    /// once (both answer the same, the file is published once and whole), the bytes read
    /// through the third.
    @Test func anUploadSpreadOverInstancesFinalizesOnceWhenTwoRace() async throws {
        try await withInstances { servers, dir in
            let token = try servers[0].token(spaces: ["*"], scope: "write")
            let auth = [("Authorization", "Bearer \(token)")]
            let file = mediaBytes(5 * 524_288 + 1234, seed: 7)
            let sha = SHA256.hex(file)
            let begin = try httpRequest(port: servers[0].port, "POST", "/v1/spaces/pics/media/uploads", headers: auth,
                                        body: Array(#"{"size":\#(file.count),"sha256":"\#(sha)","contentType":"image/jpeg"}"#.utf8))
            #expect(begin.status == 201)
            let upload = try UploadState.decode(begin.body)
            // Init again through another instance: the same upload.
            let again = try httpRequest(port: servers[1].port, "POST", "/v1/spaces/pics/media/uploads", headers: auth,
                                        body: Array(#"{"size":\#(file.count),"sha256":"\#(sha)","contentType":"image/jpeg"}"#.utf8))
            #expect(again.status == 200)
            #expect(try UploadState.decode(again.body).uploadId == upload.uploadId)
            for (i, chunk) in chunked(file, upload.chunkSize).enumerated() {
                let r = try httpRequest(port: servers[i % 3].port, "PUT", "/v1/spaces/pics/media/uploads/\(upload.uploadId)/chunks/\(i)",
                                        headers: auth + [("Content-Digest", contentDigest(chunk)), ("Content-Type", "application/octet-stream")], body: chunk)
                #expect(r.status == 200, "chunk \(i): \(r.text)")
            }
            let state = try UploadState.decode(try httpRequest(port: servers[2].port, "GET", "/v1/spaces/pics/media/uploads/\(upload.uploadId)", headers: auth).body)
            #expect(state.received == Array(0..<upload.chunkCount))
            let answers = Mutex<[TestResponse]>([])
            let group = DispatchGroup()
            for s in [1, 2] {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    if let r = try? httpRequest(port: servers[s].port, "POST", "/v1/spaces/pics/media/uploads/\(upload.uploadId)/finalize", headers: auth, body: Array("{}".utf8)) {
                        answers.withLock { $0.append(r) }
                    }
                }
            }
            group.wait()
            let both = answers.withLock { $0 }
            #expect(both.count == 2)
            #expect(both.allSatisfy { $0.status == 200 }, "\(both.map { "\($0.status) \($0.text)" })")
            let completes = try both.map { try UploadComplete.decode($0.body) }
            #expect(completes.map(\.media.mediaId) == [sha, sha])
            #expect(Set(completes.map(\.media.createdAt)).count == 1, "two publishes")
            let download = try httpRequest(port: servers[0].port, "GET", "/v1/spaces/pics/media/\(sha)", headers: auth)
            #expect(download.status == 200)
            #expect(summary(download.body) == summary(file))
            // Nothing is left in the shared uploads directory.
            let left = try FileManager.default.contentsOfDirectory(atPath: dir + "/shared-media/uploads")
            #expect(left.isEmpty, "\(left)")
        }
    }

    /// An instance given another media directory than the one the database's instances
    /// use refuses to start; so does one without a shared token secret.
    @Test func aWrongMediaDirectoryOrNoSharedSecretIsRefusedAtStart() async throws {
        try await withInstances { servers, dir in
            let url = try #require(Self.storeArgument(servers[0]))
            let own = (dir as NSString).appendingPathComponent("own-media")
            #expect(throws: ProcessFailure.self) {
                let s = try ServerProcess(dataDirectory: (dir as NSString).appendingPathComponent("instance-x"), arguments: ["--store", url, "--media-dir", own], timeout: 20)
                s.stop()
            }
            #expect(throws: ProcessFailure.self) {
                let s = try ServerProcess(dataDirectory: (dir as NSString).appendingPathComponent("instance-y"), secret: "",
                                          arguments: ["--store", url, "--media-dir", (dir as NSString).appendingPathComponent("shared-media")], timeout: 20)
                s.stop()
            }
        }
    }

    static func storeArgument(_ server: ServerProcess) -> String? {
        guard let i = server.arguments.firstIndex(of: "--store") else { return nil }
        return server.arguments[i + 1]
    }
}
