/// What a device's resolver did with a conflict, as its resolved write says it
/// (`Change.resolves`, docs/protocol.md section 4, "Resolutions"; added without a version
/// change). The server keeps it with the state the write stores, beside the version that
/// state replaced (`Resolved`), so the device whose acknowledged write it replaced learns of
/// the decision when it pulls.
public struct ResolutionMark: Hashable, Sendable {
    /// What the resolved write does, as the resolving device saw it: its own edit written
    /// over the server's copy, a merge of the two, or a delete.
    public enum Outcome: String, Hashable, Sendable, CaseIterable {
        case keepLocal
        case write
        case delete
    }

    /// The name of the resolver that decided (`mergeFields(lastWriteWins)`, `person`, …):
    /// 1 to `maxResolverLength` characters.
    public var resolver: String
    public var outcome: Outcome

    /// The longest resolver name the wire carries.
    public static let maxResolverLength = 128

    public init(resolver: String, outcome: Outcome) {
        self.resolver = resolver
        self.outcome = outcome
    }

    /// The mark of a change (`{"resolver": …, "outcome": …}`), or why it is malformed.
    public static func decode(_ value: JSONValue, field: String) -> Result<ResolutionMark, WireError> {
        guard case .object(let o) = value else { return .failure(WireError(field: field, message: "must be an object {resolver, outcome}")) }
        guard case .string(let resolver)? = o["resolver"], !resolver.isEmpty, resolver.count <= maxResolverLength else {
            return .failure(WireError(field: field + ".resolver", message: "must be a string of 1 to \(maxResolverLength) characters"))
        }
        guard case .string(let text)? = o["outcome"], let outcome = Outcome(rawValue: text) else {
            return .failure(WireError(field: field + ".outcome", message: "must be \"keepLocal\", \"write\" or \"delete\""))
        }
        return .success(ResolutionMark(resolver: resolver, outcome: outcome))
    }

    public var json: JSONValue {
        .object(["resolver": .string(resolver), "outcome": .string(outcome.rawValue)])
    }
}

/// A record state written by a resolution (`RecordState.resolved`): the version of the
/// state it replaced, and the resolving device's mark.
public struct Resolved: Hashable, Sendable {
    /// The version of the state the resolved write replaced (the record's version when it
    /// applied).
    public var over: Version
    public var mark: ResolutionMark

    public init(over: Version, mark: ResolutionMark) {
        self.over = over
        self.mark = mark
    }

    public init(json: JSONValue, field: String) throws(WireError) {
        guard case .object(let o) = json else { throw WireError(field: field, message: "must be an object {over, resolver, outcome}") }
        guard case .string(let text)? = o["over"], let v = Version(text), v.seq > 0 else {
            throw WireError(field: field + ".over", message: "is not a version")
        }
        switch ResolutionMark.decode(json, field: field) {
        case .success(let mark): self.init(over: v, mark: mark)
        case .failure(let error): throw error
        }
    }

    public var json: JSONValue {
        .object(["over": .string(over.text), "resolver": .string(mark.resolver), "outcome": .string(mark.outcome.rawValue)])
    }

    /// The compact JSON a store keeps and a page carries as it is (keys sorted).
    public var stored: String {
        var out: [UInt8] = []
        JSONWriter.append(json, to: &out, canonical: true)
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads what a store kept (`stored`); nil when it is not a resolution's form, which
    /// a store never writes.
    public init?(stored: String) {
        guard let value = try? JSONParser.parse(Array(stored.utf8)), let r = try? Resolved(json: value, field: "resolved") else { return nil }
        self = r
    }
}
