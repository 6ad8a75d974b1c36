import Foundation
import OutpostCrypto
import Synchronization
import Testing
@testable import OutpostServer

/// The media service's parsers and locks on their own: Content-Digest (RFC 9530 over
/// RFC 8941), Range (RFC 9110 section 14), entity tags, ids.
@Suite struct MediaUnitTests {
    static let digest = SHA256.hash(Array("chunk".utf8))
    static let b64 = Base64.encode(digest)

    @Test func contentDigestAcceptsDictionaries() {
        let b64 = Self.b64
        let accepted = [
            "sha-256=:\(b64):",
            " sha-256=:\(b64):  ",
            "sha-256=:\(b64.replacingOccurrences(of: "=", with: "")):",
            "sha-512=:AAAA:, sha-256=:\(b64):",
            "sha-256=:\(b64):;a=1;b=?0;c=\"x,y\";d=tok/en:x;e=1.5",
            "md5=(1 2 \"three\" :AA==:);p=1, sha-256=:\(b64):",
            "sha-256=:AAAA:, sha-256=:\(b64):",  // a repeated key keeps the last value
            "flag, sha-256=:\(b64):,\tother=-12",
        ]
        for field in accepted {
            #expect(ContentDigest.sha256(fieldValues: [field]) == .success(Self.digest), "\(field)")
        }
        #expect(ContentDigest.sha256(fieldValues: ["sha-512=:AAAA:", "sha-256=:\(b64):"]) == .success(Self.digest))
    }

    @Test func contentDigestRefusals() {
        let b64 = Self.b64
        let cases: [([String], ContentDigest.Problem)] = [
            ([], .missing),
            (["sha-256=\(b64)"], .malformed),
            (["sha-256=:\(b64)"], .malformed),
            (["sha-256=:\(b64):,"], .malformed),
            (["SHA-256=:\(b64):"], .malformed),
            (["sha-256=:\(b64):;"], .malformed),
            (["sha-256=:ab$d:"], .malformed),
            (["sha-256=\"x"], .malformed),
            (["sha-256=:\(b64): junk"], .malformed),
            (["sha-512=:\(b64):"], .noSHA256),
            ([""], .noSHA256),
            (["sha-256=?1"], .invalidSHA256),
            (["sha-256"], .invalidSHA256),
            (["sha-256=:AAAA:"], .invalidSHA256),
            (["sha-256=\"\(b64)\""], .invalidSHA256),
        ]
        for (fields, problem) in cases {
            #expect(ContentDigest.sha256(fieldValues: fields) == .failure(problem), "\(fields)")
        }
    }

    @Test func byteRanges() {
        let size: Int64 = 1000
        let cases: [(String?, ByteRangeRequest)] = [
            (nil, .whole),
            ("bytes=0-0", .partial(offset: 0, length: 1)),
            ("bytes=0-999", .partial(offset: 0, length: 1000)),
            ("bytes=0-5000", .partial(offset: 0, length: 1000)),
            ("bytes=999-", .partial(offset: 999, length: 1)),
            ("bytes=-1", .partial(offset: 999, length: 1)),
            ("bytes=-1000000", .partial(offset: 0, length: 1000)),
            ("bytes= 10-19 ", .partial(offset: 10, length: 10)),
            ("bytes=10-19,", .partial(offset: 10, length: 10)),
            ("Bytes=10-19", .partial(offset: 10, length: 10)),
            ("bytes=1000-", .unsatisfiable),
            ("bytes=1000-1000", .unsatisfiable),
            ("bytes=99999999999999999999999-", .unsatisfiable),
            ("bytes=-0", .unsatisfiable),
            ("bytes=5-4", .whole),
            ("bytes=0-1,3-4", .whole),
            ("bytes=1000-,0-1", .whole),
            ("items=0-1", .whole),
            ("bytes=x-1", .whole),
            ("bytes=+1-2", .whole),
            ("bytes=", .whole),
            ("bytes", .whole),
            ("bytes=1", .whole),
        ]
        for (field, expected) in cases {
            #expect(ByteRangeRequest.evaluate(field, size: size) == expected, "\(field ?? "nil")")
        }
        #expect(ByteRangeRequest.evaluate("bytes=-5", size: 0) == .unsatisfiable)
        #expect(ByteRangeRequest.evaluate("bytes=0-", size: 0) == .unsatisfiable)
    }

    @Test func entityTags() {
        let etag = "\"abc\""
        #expect(EntityTags.noneMatchSatisfied("\"abc\"", etag: etag))
        #expect(EntityTags.noneMatchSatisfied("W/\"abc\"", etag: etag))
        #expect(EntityTags.noneMatchSatisfied(" * ", etag: etag))
        #expect(EntityTags.noneMatchSatisfied("\"x\", W/\"y\" ,\"abc\"", etag: etag))
        #expect(!EntityTags.noneMatchSatisfied("\"abcd\"", etag: etag))
        #expect(!EntityTags.noneMatchSatisfied("abc", etag: etag))
        #expect(!EntityTags.noneMatchSatisfied("\"abc", etag: etag))
        #expect(!EntityTags.noneMatchSatisfied("*, \"x\"", etag: etag))
        #expect(EntityTags.ifRangeMatches(" \"abc\"", etag: etag))
        #expect(!EntityTags.ifRangeMatches("W/\"abc\"", etag: etag))
        #expect(!EntityTags.ifRangeMatches("Sun, 06 Nov 1994 08:49:37 GMT", etag: etag))
    }

    @Test func idsAndIndexes() {
        #expect(parseChunkIndex("0") == 0)
        #expect(parseChunkIndex("123456789") == 123_456_789)
        for bad in ["", "00", "01", "-1", "+1", "1.0", " 1", "1234567890", "١"] {
            #expect(parseChunkIndex(bad) == nil, "\(bad)")
        }
        #expect(UploadID(String(repeating: "a", count: 32)) != nil)
        for bad in [String(repeating: "A", count: 32), String(repeating: "a", count: 31), String(repeating: "g", count: 32), "../" + String(repeating: "a", count: 29)] {
            #expect(UploadID(bad) == nil, "\(bad)")
        }
        #expect(UploadID.random() != UploadID.random())
        #expect(MediaID(String(repeating: "0", count: 64))?.prefix == "00")
        #expect(MediaID(String(repeating: "F", count: 64)) == nil)
        #expect(SpaceName("..") == nil)
        #expect(SpaceName(".") == nil)
        #expect(SpaceName("a/b") == nil)
        let files = MediaFiles(root: "/data/media")
        let path = files.mediaPath(space: SpaceName("team-1")!, id: MediaID(String(repeating: "ab", count: 32))!)
        #expect(path == "/data/media/spaces/team-1/ab/" + String(repeating: "ab", count: 32))
        #expect(files.partPath(UploadID(String(repeating: "c", count: 32))!) == "/data/media/uploads/" + String(repeating: "c", count: 32))
    }

    @Test func uploadLocksExcludeWritersFromEverything() async {
        let locks = UploadLocks()
        let id = UploadID.random()
        let other = UploadID.random()
        await locks.withShared(id) {
            await locks.withShared(id) {
                #expect(!locks.tryExclusive(id))
                #expect(locks.tryExclusive(other))
                locks.releaseExclusive(other)
            }
        }
        #expect(!locks.isInUse(id))
        #expect(locks.tryExclusive(id))
        locks.releaseExclusive(id)

        // An exclusive holder runs alone: a counter touched under the lock never sees
        // another holder inside.
        let inside = Counter()
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<200 {
                group.addTask {
                    if i % 4 == 0 {
                        await locks.withExclusive(id) {
                            #expect(inside.enter(exclusive: true))
                            await Task.yield()
                            inside.leave(exclusive: true)
                        }
                    } else {
                        await locks.withShared(id) {
                            #expect(inside.enter(exclusive: false))
                            await Task.yield()
                            inside.leave(exclusive: false)
                        }
                    }
                }
            }
        }
        #expect(!locks.isInUse(id))
    }
}

/// Who is inside a lock: shared holders may overlap, an exclusive holder may not.
private final class Counter: Sendable {
    private let state = Mutex((shared: 0, exclusive: 0))

    func enter(exclusive: Bool) -> Bool {
        state.withLock { s in
            if exclusive {
                s.exclusive += 1
                return s.exclusive == 1 && s.shared == 0
            }
            s.shared += 1
            return s.exclusive == 0
        }
    }

    func leave(exclusive: Bool) {
        state.withLock { s in
            if exclusive { s.exclusive -= 1 } else { s.shared -= 1 }
        }
    }
}
