import OutpostCore
import OutpostSyncRules

/// Where a page of records comes from: the records after a cursor (`SyncStore.page` and
/// `scan`), or those a view index scan finds (`viewPage` and `viewScan`). Each store reads
/// either in its one read of a page (`SQLiteReader.read`, `PostgresReader.read`), which
/// hands the rows to a `RecordSink`.
enum RecordSource {
    case after(PageRequest)
    case view(ViewScanRequest)

    var space: String {
        switch self {
        case .after(let request): request.space
        case .view(let request): request.space
        }
    }

    /// Whether the source can find no record (a view scan with no lookup and nothing held).
    var isEmpty: Bool {
        if case .view(let request) = self { return request.isEmpty }
        return false
    }

    /// The scan of only the records departed since the view request's `heldAt`, for a
    /// page that is whole only when there is none after its start; nil when the source
    /// needs no such check.
    var departures: ViewScanRequest? {
        guard case .view(let request) = self, request.heldAt != nil else { return nil }
        return request.departedOnly
    }
}

/// The space's counters a page read in the same snapshot as its records.
struct PageEnd {
    var head: Int64
    var horizon: Int64
}

/// What a store's read of a page makes of its rows (`RecordRow`'s columns), handed over in
/// seq order, one more than the page's limit at most: the encoded page of a pull
/// (`PageSink`) or the records a pull under rules decides (`ScanSink`).
protocol RecordSink {
    /// Takes the record in `row`, whose columns `codec` places; false when the sink is
    /// full (the record left out) and the read stops.
    mutating func take<Row: SQLRow>(_ row: Row, _ codec: RecordRow) -> Bool
}

/// The records encoded straight from the rows into a page's JSON (`PullRules.Page`): a
/// pull without rules, and a view's page whose every record found is sent.
struct PageSink: RecordSink {
    private var page: PullRules.Page
    private let epoch: Epoch

    init(limit: Int, maxBytes: Int, epoch: Epoch) {
        page = PullRules.Page(limit: limit, maxBytes: maxBytes)
        self.epoch = epoch
    }

    mutating func take<Row: SQLRow>(_ row: Row, _ codec: RecordRow) -> Bool {
        let epoch = self.epoch
        return page.add(seq: codec.seq(row)) { codec.appendJSON(row, to: &$0, epoch: epoch) }
    }

    /// The page, read at `end`.
    mutating func finish(_ end: PageEnd) -> PageData {
        PageData(epoch: epoch, changesJSON: page.finish(), count: page.count, lastSeq: page.lastSeq, hasMore: page.hasMore,
                 head: end.head, horizon: end.horizon)
    }
}

/// The records of the rows, at most `limit` of them, for a pull under rules to decide
/// (`ViewPager`): the byte budget is the pager's.
struct ScanSink: RecordSink {
    private let limit: Int
    private var records: [StoredRecord] = []
    private var hasMore = false

    init(limit: Int) {
        self.limit = limit
    }

    mutating func take<Row: SQLRow>(_ row: Row, _ codec: RecordRow) -> Bool {
        guard records.count < limit else {
            hasMore = true
            return false
        }
        records.append(codec.record(row))
        return true
    }

    /// The scan, read at `end`.
    func finish(_ end: PageEnd) -> RecordScan {
        RecordScan(records: records, hasMore: hasMore, head: end.head)
    }
}

/// A store's reader of pages: its one read of a page of records (`read`), and the four
/// reads the `SyncStore` asks for, each a source and a sink of it.
protocol PageReader {
    var epoch: Epoch { get }

    /// The space's head and horizon and the rows of `source` (`limit + 1` at most, so the
    /// sink learns whether more follow) in one snapshot, the rows handed to `sink` until
    /// it is full. With `wholeOnly`, nil and no record read when a record departed since
    /// the view request's `heldAt` follows its start (that page needs each record decided).
    func read<Sink: RecordSink>(_ source: RecordSource, into sink: inout Sink, wholeOnly: Bool) throws -> PageEnd?
}

extension PageReader {
    /// A pull's page of the records after the cursor.
    func page(_ request: PageRequest) throws -> PageData {
        var sink = PageSink(limit: request.limit, maxBytes: request.maxBytes, epoch: epoch)
        // Only a `wholeOnly` read answers nil.
        let end = try read(.after(request), into: &sink, wholeOnly: false)!
        return sink.finish(end)
    }

    /// The records of a pull under rules after the cursor.
    func scan(_ request: PageRequest) throws -> RecordScan {
        var sink = ScanSink(limit: request.limit)
        let end = try read(.after(request), into: &sink, wholeOnly: false)!
        return sink.finish(end)
    }

    /// The records of a page under rules that the view index finds.
    func viewScan(_ request: ViewScanRequest) throws -> RecordScan {
        var sink = ScanSink(limit: request.limit)
        let end = try read(.view(request), into: &sink, wholeOnly: false)!
        return sink.finish(end)
    }

    /// The page of the records a view index scan finds, encoded from the rows: for a view
    /// whose lookups are exact, from the start, where every record found is sent; nil when
    /// a record departed since `heldAt` follows its start.
    func viewPage(_ request: ViewScanRequest, maxBytes: Int) throws -> PageData? {
        var sink = PageSink(limit: request.limit, maxBytes: maxBytes, epoch: epoch)
        guard let end = try read(.view(request), into: &sink, wholeOnly: true) else { return nil }
        return sink.finish(end)
    }
}
