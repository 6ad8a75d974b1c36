extension Router {
    /// Every registered route, as (method, pattern), sorted by pattern then method. Used to
    /// hold `openapi/outpost.yaml` and the code to the same set of routes.
    public var routes: [(method: HTTPMethod, pattern: String)] {
        var out: [(method: HTTPMethod, pattern: String)] = []
        func walk(_ node: Node) {
            for route in node.routes.values { out.append((route.method, route.pattern)) }
            for child in node.literals.values { walk(child) }
            for child in node.parameter { walk(child) }
        }
        walk(root)
        return out.sorted { ($0.pattern, $0.method.rawValue) < ($1.pattern, $1.method.rawValue) }
    }
}
