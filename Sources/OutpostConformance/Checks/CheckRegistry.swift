/// Every check, in the order of PROTOCOL.md: operations and routing (sections 2, 3, 7),
/// auth (2), push (4), pull (5), long poll (5), restart and epoch rotation (1, 4, 5, 8),
/// re-offers and lineage (4, 5; protocol 1.1), HTTP behaviour (2), media (6).
enum CheckRegistry {
    static let all: [Check] = {
        let checks = OperationsChecks.all + AuthChecks.all + PushChecks.all + PullChecks.all + LifecycleChecks.longPoll
            + LifecycleChecks.restart + LifecycleChecks.rotation + LineageChecks.all + HTTPChecks.all + MediaChecks.all
        var seen = Set<String>()
        for check in checks {
            precondition(seen.insert(check.name).inserted, "two checks are named \(check.name)")
        }
        return checks
    }()
}
