#if !canImport(OutpostTestSupport)
import Testing

/// Where the test support is not built (Apple platforms: it needs Linux), `.offPool` marks a
/// CPU-bound test and changes nothing: there the suite runs without the load the trait
/// protects the Linux run from.
struct OffPoolElsewhere: SuiteTrait, TestTrait {
    var isRecursive: Bool { true }
}

extension Trait where Self == OffPoolElsewhere {
    static var offPool: Self { OffPoolElsewhere() }
}
#endif
