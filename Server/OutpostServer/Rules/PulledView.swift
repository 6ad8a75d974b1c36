import OutpostCore

/// The third part of a pull cursor under rules (docs/rules.md, "Paged pulls"): the view it
/// was made under (16 hex digits), and, while a pull has more pages, where that pull began
/// (`h` and a seq). The client sends it back as it got it (it is opaque to clients,
/// docs/protocol.md section 5).
///
/// Why the pull's beginning travels with its pages: a device's copies of the records the
/// pull has not sent yet are those of the view at the seq its pull began from, not at the
/// page's own cursor. Each page looks for a record's departure (a delete, a revocation)
/// after the seq the device's copy was taken at; from the page's cursor it passed over a
/// departure that came between the pull's beginning and that cursor, and the device kept a
/// deleted record's live copy (simulation `--list-kind --seed 40`, `PagedDepartureTests`).
struct PulledView: Equatable {
    /// The view the cursor was made under.
    var view: String?
    /// The seq the pull began from, carried while it has more pages; nil: the cursor is a
    /// pull's beginning.
    var began: Int64?

    /// The separator between the view and the seq: not a hex digit, so no view has it.
    static let separator: Character = "h"

    init(view: String?, began: Int64? = nil) {
        self.view = view
        self.began = began
    }

    /// Reads a cursor's third part: `<view>` or `<view>h<seq>`. A part that does not split
    /// so is taken whole as a view (and then differs from every view: `view_changed`).
    init(_ text: String?) {
        guard let text, let mark = text.firstIndex(of: Self.separator), let seq = Int64(text[text.index(after: mark)...]), seq >= 0 else {
            self.init(view: text)
            return
        }
        self.init(view: String(text[..<mark]), began: seq)
    }

    /// The cursor's third part as sent.
    var text: String? {
        guard let view else { return nil }
        return began.map { "\(view)\(Self.separator)\($0)" } ?? view
    }

    /// The seq at which the device's copies are the view's, for a page after `since`: 0
    /// when it says it keeps copies from before the start (`holding`); where its pull began
    /// when a page before told it (never later than `since`); else `since` itself when past
    /// the start; nil (it holds nothing) for a pull from the start.
    func heldAt(since: Int64, holding: Bool) -> Int64? {
        if holding { return 0 }
        if let began { return min(began, since) }
        return since > 0 ? since : nil
    }

    /// The third part of the cursor that ends a page of `view` made for a device holding
    /// the view at `heldAt`: the pull's beginning goes with it while more pages follow and
    /// the device holds something a later page must account for.
    static func next(view: String, heldAt: Int64?, holding: Bool, hasMore: Bool) -> PulledView {
        guard hasMore, !holding, let heldAt, heldAt > 0 else { return PulledView(view: view) }
        return PulledView(view: view, began: heldAt)
    }
}
