// A binary min-heap: the event loops' connection deadlines, and the deadlines of held
// requests that their keepers time out (long polls).

/// A binary min-heap: `push` and `pop` in O(log n), the least element in O(1).
public struct Heap<Element: Comparable> {
    private var items: [Element] = []

    /// An empty heap.
    public init() {}

    /// The least element, nil when empty.
    public var first: Element? { items.first }
    /// How many elements it holds.
    public var count: Int { items.count }
    public var isEmpty: Bool { items.isEmpty }

    /// Adds an element.
    public mutating func push(_ element: Element) {
        items.append(element)
        var i = items.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            if !(items[i] < items[parent]) { break }
            items.swapAt(parent, i)
            i = parent
        }
    }

    /// Removes and returns the least element.
    public mutating func pop() -> Element? {
        guard !items.isEmpty else { return nil }
        let top = items[0]
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var i = 0
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < items.count && items[l] < items[m] { m = l }
                if r < items.count && items[r] < items[m] { m = r }
                if m == i { break }
                items.swapAt(i, m)
                i = m
            }
        }
        return top
    }
}

extension Heap: Sendable where Element: Sendable {}
