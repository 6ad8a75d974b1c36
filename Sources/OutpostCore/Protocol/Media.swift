/// `POST /v1/spaces/{space}/media/uploads` request body (docs/protocol.md section 6).
public struct UploadRequest: Hashable, Sendable, JSONWireType {
    public var size: Int64
    /// The whole file's SHA-256, 64 lowercase hex characters.
    public var sha256: String
    public var contentType: String
    public var filename: String?

    public init(size: Int64, sha256: String, contentType: String, filename: String? = nil) {
        self.size = size
        self.sha256 = sha256
        self.contentType = contentType
        self.filename = filename
    }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        size = try r.int64("size")
        guard size >= 0 else { throw r.invalid("size", "must not be negative") }
        sha256 = try r.string("sha256")
        guard Names.isValidMediaID(sha256) else { throw r.invalid("sha256", "must be 64 lowercase hex characters") }
        contentType = try r.string("contentType")
        guard Self.isValidContentType(contentType) else { throw r.invalid("contentType", "must be a media type such as image/jpeg") }
        filename = try r.optionalString("filename")
        if let filename, let problem = Self.filenameProblem(filename) { throw r.invalid("filename", problem) }
    }

    public var json: JSONValue {
        var o: JSONObject = [
            "size": .number(JSONNumber(size)),
            "sha256": .string(sha256),
            "contentType": .string(contentType),
        ]
        if let filename { o["filename"] = .string(filename) }
        return .object(o)
    }

    /// Why `name` cannot be a file name, or nil when it can: UTF-8 of at most 255 bytes
    /// with no control character (U+0000 to U+001F, U+007F to U+009F), no line or paragraph
    /// separator (U+2028, U+2029) and no bidirectional formatting character (U+061C,
    /// U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069, which can make `gpj.exe` show as
    /// `exe.jpg`). A name is shown in the console, in downloads and in logs: nothing in it
    /// may end a line, end a string or reorder what follows. The tus `filename` follows the
    /// same rule.
    public static func filenameProblem(_ name: String) -> String? {
        if name.utf8.count > 255 { return "must be at most 255 bytes" }
        for scalar in name.unicodeScalars {
            let v = scalar.value
            if v < 0x20 || (0x7F...0x9F).contains(v) { return "must not contain control characters (U+\(hex4(v)) is one)" }
            if v == 0x2028 || v == 0x2029 { return "must not contain line or paragraph separators" }
            if v == 0x061C || v == 0x200E || v == 0x200F || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v) {
                return "must not contain bidirectional formatting characters (U+\(hex4(v)) is one)"
            }
        }
        return nil
    }

    /// `type/subtype` with optional parameters, printable ASCII only, at most 255 bytes
    /// (it is echoed in a response header, so nothing that could split a header passes).
    /// The `type/subtype` is everything before the first `;`, spaces around it trimmed; it
    /// must be there (`;` alone or `;a/b` is refused). openapi/outpost.yaml states the same
    /// rule as `UploadRequest.contentType`'s pattern.
    public static func isValidContentType(_ text: String) -> Bool {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= 255, utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return false }
        // Empty pieces kept: the first is what precedes the first `;`, even when that is
        // nothing (omitting them would make `;` alone split into no pieces at all).
        let main = text.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0].trimmingSpaces
        let parts = main.split(separator: "/", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty && !main.contains(" ")
    }
}

/// `v` as four or more uppercase hex digits, as U+ notation writes a code point.
private func hex4(_ v: UInt32) -> String {
    let digits = String(v, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}

extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}

/// An upload in progress (docs/protocol.md section 6, steps 1 and 3).
public struct UploadState: Hashable, Sendable, JSONWireType {
    public var uploadId: String
    /// `"open"` while chunks are expected.
    public var status: String
    public var size: Int64
    public var sha256: String
    public var chunkSize: Int
    public var chunkCount: Int
    /// Indexes of the chunks the server holds, ascending.
    public var received: [Int]
    /// When the upload expires if no chunk arrives, in ms since 1970.
    public var expiresAt: Int64

    public init(uploadId: String, status: String = "open", size: Int64, sha256: String, chunkSize: Int, chunkCount: Int, received: [Int], expiresAt: Int64) {
        self.uploadId = uploadId
        self.status = status
        self.size = size
        self.sha256 = sha256
        self.chunkSize = chunkSize
        self.chunkCount = chunkCount
        self.received = received
        self.expiresAt = expiresAt
    }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        uploadId = try r.string("uploadId")
        status = try r.string("status")
        size = try r.int64("size")
        sha256 = try r.string("sha256")
        chunkSize = try r.int("chunkSize")
        chunkCount = try r.int("chunkCount")
        var received: [Int] = []
        for (i, v) in try r.array("received").enumerated() {
            guard let n = v.int64Value else { throw WireError(field: "received[\(i)]", message: "must be an integer") }
            received.append(Int(n))
        }
        self.received = received
        expiresAt = try r.int64("expiresAt")
    }

    public var json: JSONValue {
        .object([
            "uploadId": .string(uploadId),
            "status": .string(status),
            "size": .number(JSONNumber(size)),
            "sha256": .string(sha256),
            "chunkSize": .number(JSONNumber(Int64(chunkSize))),
            "chunkCount": .number(JSONNumber(Int64(chunkCount))),
            "received": .array(received.map { .number(JSONNumber(Int64($0))) }),
            "expiresAt": .number(JSONNumber(expiresAt)),
        ])
    }

    /// Number of chunks for a file of `size` bytes.
    public static func chunkCount(size: Int64, chunkSize: Int) -> Int {
        size == 0 ? 0 : Int((size + Int64(chunkSize) - 1) / Int64(chunkSize))
    }
}

/// A stored media file (docs/protocol.md section 6, `<media>`).
public struct MediaInfo: Hashable, Sendable, JSONWireType {
    public var mediaId: String
    public var sha256: String
    public var size: Int64
    public var contentType: String
    public var url: String
    public var createdAt: Int64

    public init(mediaId: String, sha256: String, size: Int64, contentType: String, url: String, createdAt: Int64) {
        self.mediaId = mediaId
        self.sha256 = sha256
        self.size = size
        self.contentType = contentType
        self.url = url
        self.createdAt = createdAt
    }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        mediaId = try r.string("mediaId")
        sha256 = try r.string("sha256")
        size = try r.int64("size")
        contentType = try r.string("contentType")
        url = try r.string("url")
        createdAt = try r.int64("createdAt")
    }

    public var json: JSONValue {
        .object([
            "mediaId": .string(mediaId),
            "sha256": .string(sha256),
            "size": .number(JSONNumber(size)),
            "contentType": .string(contentType),
            "url": .string(url),
            "createdAt": .number(JSONNumber(createdAt)),
        ])
    }
}

/// `{"status": "complete", "media": <media>}`: answer of an init that found the file, and
/// of finalize.
public struct UploadComplete: Hashable, Sendable, JSONWireType {
    public var media: MediaInfo

    public init(media: MediaInfo) { self.media = media }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        guard try r.string("status") == "complete" else { throw r.invalid("status", "must be \"complete\"") }
        media = try MediaInfo(json: .object(try r.object("media")))
    }

    public var json: JSONValue { .object(["status": "complete", "media": media.json]) }
}

/// `PUT .../chunks/{index}` answer.
public struct ChunkReceipt: Hashable, Sendable, JSONWireType {
    public var index: Int
    /// How many distinct chunks the server holds.
    public var received: Int

    public init(index: Int, received: Int) {
        self.index = index
        self.received = received
    }

    public init(json: JSONValue) throws(WireError) {
        let r = try FieldReader(json)
        index = try r.int("index")
        received = try r.int("received")
    }

    public var json: JSONValue {
        .object(["index": .number(JSONNumber(Int64(index))), "received": .number(JSONNumber(Int64(received)))])
    }
}
