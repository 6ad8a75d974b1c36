/// A JSON object: members in the sender's order, each key at most once.
///
/// Lookup is a linear scan while the object is small (records usually have a handful of
/// fields, where a scan beats hashing) and goes through a hash index once it has more than
/// `JSONObject.indexThreshold` members. Keys are compared byte for byte (see `utf8Equal`).
///
/// Equality ignores member order, as JSON object semantics do; `keys` and iteration keep it.
///
/// ```swift
/// var todo: JSONObject = ["title": "Buy milk", "done": false]
/// todo["done"] = true          // replaces in place, order kept
/// todo["due"] = 1764430000000  // appends
/// todo["title"] = nil          // removes
/// ```
public struct JSONObject: Sendable {
    /// One member.
    public typealias Element = (key: String, value: JSONValue)

    /// How members are stored: a struct rather than the public tuple, so arrays of members
    /// get specialized copy and destroy code instead of the runtime's generic tuple paths.
    @usableFromInline
    struct Member: Sendable {
        @usableFromInline var key: String
        @usableFromInline var value: JSONValue
        @inlinable init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    /// Objects with more members than this get a hash index.
    static let indexThreshold = 12

    @usableFromInline var members: [Member]
    /// Key → position in `members`; `nil` while `members.count <= indexThreshold`.
    @usableFromInline var index: [UTF8Key: Int]?

    /// An empty object.
    public init() {
        members = []
        index = nil
    }

    /// An object with `pairs` in order. Keys must be distinct: a repeated key is a
    /// programming error and traps (use `subscript(_:)` to merge).
    public init(_ pairs: some Sequence<(String, JSONValue)>) {
        var members: [Member] = []
        members.reserveCapacity(pairs.underestimatedCount)
        for (key, value) in pairs { members.append(Member(key: key, value: value)) }
        if members.count > JSONObject.indexThreshold {
            let index = JSONObject.buildIndex(members)
            precondition(index.count == members.count, "JSONObject: duplicate keys in \(members.map(\.key))")
            self.init(uncheckedMembers: members, index: index)
        } else {
            members.withUnsafeBufferPointer { members in
                for later in members.indices {
                    for earlier in 0..<later where utf8Equal(members[earlier].key, members[later].key) {
                        preconditionFailure("JSONObject: duplicate key \"\(members[later].key)\"")
                    }
                }
            }
            self.init(uncheckedMembers: members, index: nil)
        }
    }

    /// Builds from members the parser has already checked for duplicates.
    init(uncheckedMembers: [Member], index: [UTF8Key: Int]?) {
        members = uncheckedMembers
        self.index = uncheckedMembers.count > JSONObject.indexThreshold ? index ?? JSONObject.buildIndex(uncheckedMembers) : nil
    }

    static func buildIndex(_ members: [Member]) -> [UTF8Key: Int] {
        var index = [UTF8Key: Int](minimumCapacity: members.count)
        for (position, member) in members.enumerated() { index[UTF8Key(member.key)] = position }
        return index
    }

    /// The number of members.
    public var count: Int { members.count }

    /// Whether there are no members.
    public var isEmpty: Bool { members.isEmpty }

    /// The keys in order.
    public var keys: [String] { members.map(\.key) }

    /// The values in key order.
    public var values: [JSONValue] { members.map(\.value) }

    /// The members in order.
    public var elements: [Element] { members.map { ($0.key, $0.value) } }

    /// The position of `key` in the member order, or `nil`.
    public func index(forKey key: String) -> Int? {
        if let index { return index[UTF8Key(key)] }
        return members.withUnsafeBufferPointer { members in
            members.firstIndex { utf8Equal($0.key, key) }  // compares lengths first
        }
    }

    /// The value for `key`, or `nil` when absent. Setting a value replaces it in place or
    /// appends a new member; setting `nil` removes the member.
    public subscript(key: String) -> JSONValue? {
        get {
            guard let position = index(forKey: key) else { return nil }
            return members[position].value
        }
        set {
            if let newValue {
                if let position = index(forKey: key) {
                    members[position].value = newValue
                } else {
                    append(key: key, value: newValue)
                }
            } else {
                removeValue(forKey: key)
            }
        }
    }

    /// Removes `key`'s member and returns its value; later members keep their order. O(n).
    @discardableResult
    public mutating func removeValue(forKey key: String) -> JSONValue? {
        guard let position = index(forKey: key) else { return nil }
        let removed = members.remove(at: position).value
        index = members.count > JSONObject.indexThreshold ? JSONObject.buildIndex(members) : nil
        return removed
    }

    private mutating func append(key: String, value: JSONValue) {
        members.append(Member(key: key, value: value))
        if index != nil {
            index![UTF8Key(key)] = members.count - 1
        } else if members.count > JSONObject.indexThreshold {
            index = JSONObject.buildIndex(members)
        }
    }
}

extension JSONObject: RandomAccessCollection {
    /// Positions are `0..<count`, in member order.
    public var startIndex: Int { 0 }
    /// `count`.
    public var endIndex: Int { members.count }
    /// The member at `position`.
    public subscript(position: Int) -> Element {
        let member = members[position]
        return (member.key, member.value)
    }
}

extension JSONObject: Hashable {
    /// Same keys (byte for byte) with equal values, in any order.
    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.count == rhs.count else { return false }
        for member in lhs.members {
            guard let other = rhs[member.key], other == member.value else { return false }
        }
        return true
    }

    /// Order-independent: member hashes are combined by addition.
    public func hash(into hasher: inout Hasher) {
        var sum: UInt = 0
        for member in members {
            var memberHasher = Hasher()
            utf8Hash(member.key, into: &memberHasher)
            member.value.hash(into: &memberHasher)
            sum &+= UInt(bitPattern: memberHasher.finalize())
        }
        hasher.combine(members.count)
        hasher.combine(sum)
    }
}

extension JSONObject: ExpressibleByDictionaryLiteral {
    /// `["title": "Buy milk", "done": false]`, in the order written. Keys must be distinct.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init(elements)
    }
}

extension JSONObject: CustomStringConvertible {
    /// The compact JSON text.
    public var description: String { JSONValue.object(self).description }
}
