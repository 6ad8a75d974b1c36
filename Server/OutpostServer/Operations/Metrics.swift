import Foundation
import Synchronization

/// Prometheus metrics in the text exposition format 0.0.4 (docs/protocol.md section 7).
///
/// Every request updates several series from event-loop threads and handler tasks at
/// once, so updates must not serialize on one lock: each series keeps its value in
/// atomics (a histogram, its own small lock), and the registry's lock is held only to
/// find or create a series. Hot paths resolve their series once (`counter(_:_:)`) and
/// then update it without any lookup.
public final class Metrics: Sendable {
    /// A metric's label set, in the order given.
    public struct Labels: Hashable, Sendable {
        let pairs: [(String, String)]
        public init(_ pairs: [(String, String)]) { self.pairs = pairs }
        public static let none = Labels([])
        public static func == (a: Labels, b: Labels) -> Bool {
            a.pairs.count == b.pairs.count && zip(a.pairs, b.pairs).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        }
        public func hash(into h: inout Hasher) {
            for (k, v) in pairs { h.combine(k); h.combine(v) }
        }
        func render(extra: (String, String)? = nil) -> String {
            var all = pairs
            if let extra { all.append(extra) }
            guard !all.isEmpty else { return "" }
            return "{" + all.map { "\($0.0)=\"\(Metrics.escape($0.1))\"" }.joined(separator: ",") + "}"
        }
    }

    enum Kind: String { case counter, gauge, histogram }

    /// A counter or gauge series: one atomic integer. Every counter Outpost keeps counts
    /// whole things (requests, changes, bytes).
    public final class Counter: Sendable {
        let value = Atomic<Int>(0)
        /// Adds `amount`.
        public func add(_ amount: Int = 1) { value.add(amount, ordering: .relaxed) }
        /// Sets the value (gauges).
        public func set(_ amount: Int) { value.store(amount, ordering: .relaxed) }
    }

    /// A histogram series.
    final class Histogram: Sendable {
        struct State {
            var buckets: [Int]
            var sum = 0.0
            var count = 0
        }
        let bounds: [Double]
        let state: Mutex<State>
        init(bounds: [Double]) {
            self.bounds = bounds
            state = Mutex(State(buckets: Array(repeating: 0, count: bounds.count)))
        }
        func observe(_ value: Double) {
            // The bucket index is found outside the lock; the lock guards three stores.
            let index = bounds.firstIndex { value <= $0 }
            state.withLock { s in
                if let index { s.buckets[index] += 1 }
                s.sum += value
                s.count += 1
            }
        }
    }

    struct Family {
        let name: String
        let help: String
        let kind: Kind
        let bounds: [Double]
        var counters: [Labels: Counter] = [:]
        var histograms: [Labels: Histogram] = [:]
        /// Gauge series whose value is read when metrics are scraped.
        var readers: [Labels: @Sendable () -> Double] = [:]
    }

    private struct Registry {
        var families: [String: Family] = [:]
        var order: [String] = []
        var collectors: [(name: String, help: String, read: @Sendable () -> Double)] = []
    }

    private let registry = Mutex(Registry())

    /// Latency buckets in seconds, from 0.5 ms to 10 s.
    public static let latencyBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    public init() {}

    /// Declares a metric family (idempotent).
    public func declare(_ name: String, help: String, kind: String, buckets: [Double] = []) {
        guard let k = Kind(rawValue: kind) else { preconditionFailure("unknown metric kind \(kind)") }
        registry.withLock { r in
            guard r.families[name] == nil else { return }
            r.families[name] = Family(name: name, help: help, kind: k, bounds: buckets.sorted())
            r.order.append(name)
        }
    }

    /// The counter or gauge series `name{labels}`, created on first use. Keep it to
    /// update it without a lookup. A name that was never declared gets a detached series
    /// that is never rendered (a programming error that must not crash a server).
    public func counter(_ name: String, _ labels: Labels = .none) -> Counter {
        registry.withLock { r in
            guard r.families[name] != nil else { return Counter() }
            if let c = r.families[name]!.counters[labels] { return c }
            let c = Counter()
            r.families[name]!.counters[labels] = c
            return c
        }
    }

    func histogram(_ name: String, _ labels: Labels) -> Histogram? {
        registry.withLock { r in
            guard let family = r.families[name], family.kind == .histogram else { return nil }
            if let h = family.histograms[labels] { return h }
            let h = Histogram(bounds: family.bounds)
            r.families[name]!.histograms[labels] = h
            return h
        }
    }

    /// Adds `amount` to a counter.
    public func increment(_ name: String, _ labels: Labels = .none, by amount: Double = 1) {
        counter(name, labels).add(Int(amount))
    }

    /// Sets a gauge.
    public func set(_ name: String, _ labels: Labels = .none, to value: Double) {
        counter(name, labels).set(Int(value))
    }

    /// Records one observation in a histogram.
    public func observe(_ name: String, _ labels: Labels = .none, _ value: Double) {
        histogram(name, labels)?.observe(value)
    }

    /// A gauge whose value is read when metrics are scraped.
    public func gauge(_ name: String, help: String, read: @escaping @Sendable () -> Double) {
        registry.withLock { $0.collectors.append((name, help, read)) }
    }

    /// A series `name{labels}` of a declared gauge whose value `read` gives when metrics
    /// are scraped (a value that changes with time, not with events).
    public func gauge(_ name: String, _ labels: Labels, read: @escaping @Sendable () -> Double) {
        reader(name, .gauge, labels, read)
    }

    /// A series `name{labels}` of a declared counter that another part keeps (the HTTP
    /// engine's counts), read when metrics are scraped.
    public func counter(_ name: String, _ labels: Labels, read: @escaping @Sendable () -> Double) {
        reader(name, .counter, labels, read)
    }

    private func reader(_ name: String, _ kind: Kind, _ labels: Labels, _ read: @escaping @Sendable () -> Double) {
        registry.withLock { r in
            guard r.families[name]?.kind == kind else { return }
            r.families[name]!.readers[labels] = read
        }
    }

    /// The current value of a counter or gauge (for tests and the benchmark).
    public func value(_ name: String, _ labels: Labels = .none) -> Double {
        let (counter, reader) = registry.withLock { ($0.families[name]?.counters[labels], $0.families[name]?.readers[labels]) }
        if let reader { return reader() }
        return Double(counter?.value.load(ordering: .relaxed) ?? 0)
    }

    /// Renders every metric in the Prometheus text format.
    public func render() -> String {
        let (families, order, collectors) = registry.withLock { ($0.families, $0.order, $0.collectors) }
        var out = ""
        for name in order {
            guard let family = families[name] else { continue }
            out += "# HELP \(name) \(family.help)\n# TYPE \(name) \(family.kind.rawValue)\n"
            switch family.kind {
            case .counter, .gauge:
                var series = family.counters.filter { family.readers[$0.key] == nil }.map { ($0.key.render(), "\($0.value.value.load(ordering: .relaxed))") }
                series += family.readers.map { ($0.key.render(), Self.format($0.value())) }
                for (labels, value) in series.sorted(by: { $0.0 < $1.0 }) {
                    out += "\(name)\(labels) \(value)\n"
                }
            case .histogram:
                for (labels, histogram) in family.histograms.sorted(by: { $0.key.render() < $1.key.render() }) {
                    let s = histogram.state.withLock { $0 }
                    var cumulative = 0
                    for (i, bound) in family.bounds.enumerated() {
                        cumulative += s.buckets[i]
                        out += "\(name)_bucket\(labels.render(extra: ("le", Self.format(bound)))) \(cumulative)\n"
                    }
                    out += "\(name)_bucket\(labels.render(extra: ("le", "+Inf"))) \(s.count)\n"
                    out += "\(name)_sum\(labels.render()) \(Self.format(s.sum))\n"
                    out += "\(name)_count\(labels.render()) \(s.count)\n"
                }
            }
        }
        for c in collectors {
            out += "# HELP \(c.name) \(c.help)\n# TYPE \(c.name) gauge\n\(c.name) \(Self.format(c.read()))\n"
        }
        return out
    }

    static func format(_ v: Double) -> String {
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }

    static func escape(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }
}
