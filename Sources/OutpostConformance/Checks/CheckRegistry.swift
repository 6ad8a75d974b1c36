/// Every check, in the order of docs/protocol.md: operations and routing (sections 2, 3, 7),
/// auth (2), push (4), pull (5), long poll (5), restart and epoch rotation (1, 4, 5, 8),
/// re-offers and lineage (4, 5; protocol 1.1), HTTP behaviour (2), media (6); each filed
/// under the category of its group.
enum CheckRegistry {
    static let all: [Check] = {
        let groups: [(Check.Category, [Check])] = [
            (.operations, OperationsChecks.all), (.auth, AuthChecks.all), (.push, PushChecks.all), (.pull, PullChecks.all),
            (.lifecycle, LifecycleChecks.longPoll + LifecycleChecks.restart + LifecycleChecks.rotation),
            (.lineage, LineageChecks.all), (.http, HTTPChecks.all), (.media, MediaChecks.all), (.rules, RulesChecks.all),
        ]
        var checks: [Check] = []
        var seen = Set<String>()
        for (category, group) in groups {
            for var check in group {
                precondition(seen.insert(check.name).inserted, "two checks are named \(check.name)")
                check.category = category
                checks.append(check)
            }
        }
        return checks
    }()
}
