/// A parameter of a statement, sent in PostgreSQL's binary format with its type, so
/// nothing is escaped or parsed as text on either side.
///
/// Integers are always `bigint` (`int8`): the schema uses `bigint` for every integer
/// column. Arrays are one-dimensional; their elements may be null.
public enum PostgresValue: Sendable, Equatable {
    /// SQL NULL (its type is inferred by the server).
    case null
    /// A `bigint`.
    case int(Int64)
    /// A `text` value, UTF-8.
    case text(String)
    /// A `bytea` value.
    case bytes([UInt8])
    /// A `boolean`.
    case bool(Bool)
    /// A `bigint[]`; nil elements are NULL.
    case intArray([Int64?])
    /// A `text[]`; nil elements are NULL.
    case textArray([String?])
    /// A `bytea[]`; nil elements are NULL.
    case bytesArray([[UInt8]?])
    /// A `boolean[]`.
    case boolArray([Bool])

    /// Type OIDs (`pg_type.oid`), fixed since PostgreSQL 7.
    public enum OID {
        /// The OID of `bool`.
        public static let bool: UInt32 = 16
        /// The OID of `bytea`.
        public static let bytea: UInt32 = 17
        /// The OID of `char`.
        public static let char: UInt32 = 18
        /// The OID of `name`.
        public static let name: UInt32 = 19
        /// The OID of `int8`.
        public static let int8: UInt32 = 20
        /// The OID of `int2`.
        public static let int2: UInt32 = 21
        /// The OID of `int4`.
        public static let int4: UInt32 = 23
        /// The OID of `text`.
        public static let text: UInt32 = 25
        /// The OID of `oid`.
        public static let oid: UInt32 = 26
        /// The OID of `bool[]`.
        public static let boolArray: UInt32 = 1000
        /// The OID of `bytea[]`.
        public static let byteaArray: UInt32 = 1001
        /// The OID of `text[]`.
        public static let textArray: UInt32 = 1009
        /// The OID of `int8[]`.
        public static let int8Array: UInt32 = 1016
        /// The OID of `varchar`.
        public static let varchar: UInt32 = 1043
    }

    /// The type OID announced for the parameter (0 lets the server infer it, for null).
    var oid: UInt32 {
        switch self {
        case .null: return 0
        case .int: return OID.int8
        case .text: return OID.text
        case .bytes: return OID.bytea
        case .bool: return OID.bool
        case .intArray: return OID.int8Array
        case .textArray: return OID.textArray
        case .bytesArray: return OID.byteaArray
        case .boolArray: return OID.boolArray
        }
    }

    /// The binary wire form, or nil for SQL NULL.
    var binary: [UInt8]? {
        switch self {
        case .null: return nil
        case .int(let v): return Self.bigEndian(v)
        case .text(let s): return Array(s.utf8)
        case .bytes(let b): return b
        case .bool(let b): return [b ? 1 : 0]
        case .intArray(let values):
            return Self.array(element: OID.int8, values.map { $0.map(Self.bigEndian) })
        case .textArray(let values):
            return Self.array(element: OID.text, values.map { $0.map { Array($0.utf8) } })
        case .bytesArray(let values):
            return Self.array(element: OID.bytea, values)
        case .boolArray(let values):
            return Self.array(element: OID.bool, values.map { [$0 ? 1 : 0] })
        }
    }

    static func bigEndian(_ v: Int64) -> [UInt8] {
        let u = UInt64(bitPattern: v)
        return (0..<8).map { UInt8(truncatingIfNeeded: u >> (56 - 8 * UInt64($0))) }
    }

    static func appendInt32(_ v: Int32, to out: inout [UInt8]) {
        let u = UInt32(bitPattern: v)
        out.append(UInt8(truncatingIfNeeded: u >> 24))
        out.append(UInt8(truncatingIfNeeded: u >> 16))
        out.append(UInt8(truncatingIfNeeded: u >> 8))
        out.append(UInt8(truncatingIfNeeded: u))
    }

    /// The binary array format (`array_send`): dimensions, null flag, element type, then
    /// each element as a length (-1 for null) and its bytes.
    static func array(element: UInt32, _ items: [[UInt8]?]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(20 + items.reduce(0) { $0 + 4 + ($1?.count ?? 0) })
        if items.isEmpty {
            appendInt32(0, to: &out)                        // no dimensions: an empty array
            appendInt32(0, to: &out)
            appendInt32(Int32(bitPattern: element), to: &out)
            return out
        }
        appendInt32(1, to: &out)                            // one dimension
        appendInt32(items.contains { $0 == nil } ? 1 : 0, to: &out)
        appendInt32(Int32(bitPattern: element), to: &out)
        appendInt32(Int32(items.count), to: &out)           // its length
        appendInt32(1, to: &out)                            // its lower bound
        for item in items {
            if let item {
                appendInt32(Int32(item.count), to: &out)
                out.append(contentsOf: item)
            } else {
                appendInt32(-1, to: &out)
            }
        }
        return out
    }
}
