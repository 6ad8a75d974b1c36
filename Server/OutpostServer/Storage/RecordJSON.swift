import OutpostCore

/// Writes one record of a pull page or a push conflict straight into a byte buffer, from
/// the stored columns, without building a `JSONValue`. Every store encodes records here,
/// so the wire form of a record exists in one place (docs/protocol.md section 5).
public enum RecordJSON {
    /// Appends `{"collection":…,"id":…,"version":…,"deleted":…,"data":…,"updatedAt":…,
    /// "updatedBy":…,"clientTime":…,"lineage":…,"sameAs":…,"resolved":…}`. `data` is the stored compact
    /// JSON object, written as it is; it is left out for a tombstone. `lineage` and `sameAs`
    /// are the stored `"<epoch>.<seq>"` texts (protocol 1.1), each left out when the state
    /// has none. `resolved` is the stored mark of a resolved write (`Resolved.stored`: compact
    /// JSON the server itself wrote), written as it is; left out when the state has none.
    /// With `subject` (the authenticated subject of the push that wrote the state:
    /// for operators, in the admin console and webhooks, never in a pull), `"subject":…`
    /// follows.
    public static func append(
        to out: inout [UInt8], collection: String, id: String, epoch: Epoch, seq: Int64, deleted: Bool,
        data: UnsafeRawBufferPointer?, updatedAt: Int64, updatedBy: String, clientTime: Int64?, lineage: String?, sameAs: String?,
        resolved: String? = nil, subject: String? = nil
    ) {
        out.append(contentsOf: #"{"collection":"#.utf8)
        JSONWriter.appendString(collection, to: &out)
        out.append(contentsOf: #","id":"#.utf8)
        JSONWriter.appendString(id, to: &out)
        out.append(contentsOf: #","version":""#.utf8)
        out.append(contentsOf: epoch.rawValue.utf8)
        out.append(UInt8(ascii: "."))
        JSONWriter.appendInt(seq, to: &out)
        if deleted {
            out.append(contentsOf: #"","deleted":true"#.utf8)
        } else {
            out.append(contentsOf: #"","deleted":false,"data":"#.utf8)
            if let data, data.count > 0 {
                out.append(contentsOf: data)
            } else {
                out.append(contentsOf: "{}".utf8)
            }
        }
        out.append(contentsOf: #","updatedAt":"#.utf8)
        JSONWriter.appendInt(updatedAt, to: &out)
        out.append(contentsOf: #","updatedBy":"#.utf8)
        JSONWriter.appendString(updatedBy, to: &out)
        if let clientTime {
            out.append(contentsOf: #","clientTime":"#.utf8)
            JSONWriter.appendInt(clientTime, to: &out)
        }
        if let lineage {
            out.append(contentsOf: #","lineage":"#.utf8)
            JSONWriter.appendString(lineage, to: &out)
        }
        if let sameAs {
            out.append(contentsOf: #","sameAs":"#.utf8)
            JSONWriter.appendString(sameAs, to: &out)
        }
        if let resolved {
            out.append(contentsOf: #","resolved":"#.utf8)
            out.append(contentsOf: resolved.utf8)
        }
        if let subject {
            out.append(contentsOf: #","subject":"#.utf8)
            JSONWriter.appendString(subject, to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }
}
