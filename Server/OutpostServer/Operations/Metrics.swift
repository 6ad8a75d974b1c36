import Foundation
import Synchronization

/// Prometheus metrics in the text exposition format 0.0.4 (PROTOCOL.md section 7).
///
/// Label sets are small and fixed (route patterns, status codes), so a dictionary per
/// family behind one mutex is enough; a scrape renders everything in one pass.
public final class Metrics: Sendable {
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

    struct Histogram {
        var buckets: [Int]
        var sum: Double = 0
        var count = 0
    }

    struct Family {
        let name: String
        let help: String
        let kind: Kind
        var values: [Labels: Double] = [:]
        var histograms: [Labels: Histogram] = [:]
        var bounds: [Double] = []
    }

    private let families = Mutex<[String: Family]>([:])
    private let order = Mutex<[String]>([])
    /// Gauges read at scrape time (open connections, waiting pulls).
    private let collectors = Mutex<[(name: String, help: String, read: @Sendable () -> Double)]>([])

    /// Latency buckets in seconds, from 0.5 ms to 10 s.
    public static let latencyBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    public init() {}

    /// Declares a metric family (idempotent).
    public func declare(_ name: String, help: String, kind: String, buckets: [Double] = []) {
        guard let k = Kind(rawValue: kind) else { preconditionFailure("unknown metric kind \(kind)") }
        families.withLock { f in
            guard f[name] == nil else { return }
            var family = Family(name: name, help: help, kind: k)
            family.bounds = buckets
            f[name] = family
            order.withLock { $0.append(name) }
        }
    }

    /// Adds `amount` to a counter.
    public func increment(_ name: String, _ labels: Labels = .none, by amount: Double = 1) {
        families.withLock { f in f[name]?.values[labels, default: 0] += amount }
    }

    /// Sets a gauge.
    public func set(_ name: String, _ labels: Labels = .none, to value: Double) {
        families.withLock { f in f[name]?.values[labels] = value }
    }

    /// Records one observation in a histogram.
    public func observe(_ name: String, _ labels: Labels = .none, _ value: Double) {
        families.withLock { f in
            guard var family = f[name] else { return }
            var h = family.histograms[labels] ?? Histogram(buckets: Array(repeating: 0, count: family.bounds.count))
            for (i, bound) in family.bounds.enumerated() where value <= bound { h.buckets[i] += 1 }
            h.sum += value
            h.count += 1
            family.histograms[labels] = h
            f[name] = family
        }
    }

    /// A gauge whose value is read when metrics are scraped.
    public func gauge(_ name: String, help: String, read: @escaping @Sendable () -> Double) {
        collectors.withLock { $0.append((name, help, read)) }
    }

    /// The current value of a counter or gauge (for tests and the benchmark).
    public func value(_ name: String, _ labels: Labels = .none) -> Double {
        families.withLock { $0[name]?.values[labels] ?? 0 }
    }

    /// Renders every metric in the Prometheus text format.
    public func render() -> String {
        var out = ""
        let snapshot = families.withLock { $0 }
        for name in order.withLock({ $0 }) {
            guard let family = snapshot[name] else { continue }
            out += "# HELP \(name) \(family.help)\n# TYPE \(name) \(family.kind.rawValue)\n"
            switch family.kind {
            case .counter, .gauge:
                for (labels, value) in family.values.sorted(by: { $0.key.render() < $1.key.render() }) {
                    out += "\(name)\(labels.render()) \(Self.format(value))\n"
                }
            case .histogram:
                for (labels, h) in family.histograms.sorted(by: { $0.key.render() < $1.key.render() }) {
                    for (i, bound) in family.bounds.enumerated() {
                        out += "\(name)_bucket\(labels.render(extra: ("le", Self.format(bound)))) \(h.buckets[i])\n"
                    }
                    out += "\(name)_bucket\(labels.render(extra: ("le", "+Inf"))) \(h.count)\n"
                    out += "\(name)_sum\(labels.render()) \(Self.format(h.sum))\n"
                    out += "\(name)_count\(labels.render()) \(h.count)\n"
                }
            }
        }
        for c in collectors.withLock({ $0 }) {
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
