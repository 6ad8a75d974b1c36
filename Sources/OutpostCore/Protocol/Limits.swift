/// The server's limits, as `GET /v1/info` reports them (docs/protocol.md section 3). Every one
/// is a server setting; clients read them instead of assuming the defaults.
public struct Limits: Hashable, Sendable {
    /// Largest request body, decompressed, in bytes.
    public var maxRequestBytes: Int = 8 * 1024 * 1024
    /// Most changes in one push.
    public var maxChangesPerPush: Int = 500
    /// Largest encoded `data` of one record, in bytes.
    public var maxRecordBytes: Int = 256 * 1024
    /// Most encoded `changes` bytes in one pull page.
    public var pageBytes: Int = 8 * 1024 * 1024
    /// Most records in one pull page.
    public var maxPageLimit: Int = 5000
    /// Media chunk size in bytes.
    public var chunkSize: Int = 512 * 1024
    /// Largest media file in bytes.
    public var maxMediaBytes: Int = 1024 * 1024 * 1024

    public init() {}

    public init(maxRequestBytes: Int, maxChangesPerPush: Int, maxRecordBytes: Int, pageBytes: Int, maxPageLimit: Int, chunkSize: Int, maxMediaBytes: Int) {
        self.maxRequestBytes = maxRequestBytes
        self.maxChangesPerPush = maxChangesPerPush
        self.maxRecordBytes = maxRecordBytes
        self.pageBytes = pageBytes
        self.maxPageLimit = maxPageLimit
        self.chunkSize = chunkSize
        self.maxMediaBytes = maxMediaBytes
    }

    /// The field names, in the order section 3 lists them, with their key paths.
    public static let fields: [(name: String, keyPath: WritableKeyPath<Limits, Int> & Sendable)] = [
        ("maxRequestBytes", \.maxRequestBytes),
        ("maxChangesPerPush", \.maxChangesPerPush),
        ("maxRecordBytes", \.maxRecordBytes),
        ("pageBytes", \.pageBytes),
        ("maxPageLimit", \.maxPageLimit),
        ("chunkSize", \.chunkSize),
        ("maxMediaBytes", \.maxMediaBytes),
    ]

    /// The pull page byte budget for a requested `maxBytes` (section 5): clamped to between
    /// `maxRecordBytes + 16384` (so the largest record always fits) and `pageBytes`.
    public func pageByteBudget(requested: Int?) -> Int {
        let floor = maxRecordBytes + 16_384
        let ceiling = max(pageBytes, floor)
        guard let requested else { return ceiling }
        return min(max(requested, floor), ceiling)
    }

    /// The page record limit for a requested `limit` (default 1000, clamped to 1...maxPageLimit).
    public func pageLimit(requested: Int?) -> Int {
        min(max(requested ?? 1000, 1), maxPageLimit)
    }
}
