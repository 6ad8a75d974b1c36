import Foundation
import OutpostCore

/// How a collection's values become records and back: one `JSONEncoder` and one
/// `JSONDecoder`, used by every call of a typed collection (`OutpostCollection`).
///
/// The default, `RecordCoder.standard`, writes a `Date` as RFC 3339 text in UTC with
/// milliseconds (`2026-12-07T06:51:02.123Z`): what the console, the rules, webhooks, other
/// clients and people read as that time, and text whose order is the order of the times, so a
/// query sorts it right. It reads that form, any RFC 3339 time with an offset or more or fewer
/// fraction digits, and the number Foundation's default encoder writes (seconds since
/// 2001-01-01, the form of records saved before this default): records written in either
/// form decode (docs/client.md, "Dates").
///
/// A `Date` keeps its millisecond: the written text is the date rounded to the nearest
/// millisecond.
public struct RecordCoder: Sendable {
    /// Encodes a value into a record.
    public let encoder: JSONEncoder
    /// Decodes a record into a value.
    public let decoder: JSONDecoder

    /// A coder of the app's own encoder and decoder (their date strategies are theirs: a
    /// query compares a `Date` as `encoder` writes it).
    public init(encoder: JSONEncoder, decoder: JSONDecoder) {
        self.encoder = encoder
        self.decoder = decoder
    }

    /// RFC 3339 dates in UTC with milliseconds; reads both date forms (see the type).
    public static var standard: RecordCoder {
        RecordCoder(encoder: standardEncoder(), decoder: standardDecoder())
    }

    /// A `JSONEncoder` that writes dates as `RecordCoder.standard` does.
    public static func standardEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(isoText(date))
        }
        return encoder
    }

    /// A `JSONDecoder` that reads dates as `RecordCoder.standard` does.
    public static func standardDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            if let text = try? container.decode(String.self) {
                guard let ms = milliseconds(iso: text) else {
                    throw DecodingError.dataCorruptedError(in: container, debugDescription: "\"\(text)\" is not an RFC 3339 date and time")
                }
                return Date(timeIntervalSince1970: Double(ms) / 1000)
            }
            // The form of Foundation's default encoder: seconds since 2001-01-01.
            return Date(timeIntervalSinceReferenceDate: try container.decode(Double.self))
        }
        return decoder
    }

    // MARK: RFC 3339 text

    /// `date` as `yyyy-MM-ddTHH:mm:ss.SSSZ` in UTC, rounded to the millisecond.
    static func isoText(_ date: Date) -> String {
        isoText(milliseconds: Int64((date.timeIntervalSince1970 * 1000).rounded()))
    }

    /// The text of a time in ms since 1970 (years 0 to 9999; others are clamped).
    static func isoText(milliseconds ms: Int64) -> String {
        let clamped = min(max(ms, -62_167_219_200_000), 253_402_300_799_999)
        var days = clamped / 86_400_000
        var rest = clamped % 86_400_000
        if rest < 0 { rest += 86_400_000; days -= 1 }
        let (y, m, d) = CivilCalendar.date(days: days)
        func pad(_ v: Int64, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(rest / 3_600_000, 2)):\(pad(rest / 60_000 % 60, 2)):\(pad(rest / 1000 % 60, 2)).\(pad(rest % 1000, 3))Z"
    }

    /// Milliseconds since 1970 of an RFC 3339 date-time (`2026-12-07T08:00:00.5+02:00`; a
    /// space for `T`, seconds and the offset optional (UTC without one), any number of
    /// fraction digits, rounded to the millisecond), or of a date alone (`2026-12-07`,
    /// midnight UTC); nil for other text. These are the forms SQLite's date functions read,
    /// which turn a declared date field's text into its sort key (`SortKey`), so a query's
    /// date and a stored one are read alike.
    static func milliseconds(iso text: String) -> Int64? {
        let b = Array(text.utf8)
        var i = 0
        func digits(_ n: Int) -> Int64? {
            guard i + n <= b.count else { return nil }
            var v: Int64 = 0
            for k in i..<(i + n) {
                guard b[k] >= 0x30, b[k] <= 0x39 else { return nil }
                v = v * 10 + Int64(b[k] - 0x30)
            }
            i += n
            return v
        }
        func expect(_ c: UInt8) -> Bool {
            guard i < b.count, b[i] == c else { return false }
            i += 1
            return true
        }
        guard let year = digits(4), expect(0x2D), let month = digits(2), expect(0x2D), let day = digits(2),
              (1...12).contains(month), (1...CivilCalendar.daysIn(month: month, year: year)).contains(day) else { return nil }
        let dayMs = CivilCalendar.days(year: year, month: month, day: day) * 86_400_000
        if i == b.count { return dayMs }
        guard expect(0x54) || expect(0x20) else { return nil }
        guard let hour = digits(2), expect(0x3A), let minute = digits(2), hour < 24, minute < 60 else { return nil }
        var second: Int64 = 0
        var fraction = 0.0
        if expect(0x3A) {
            guard let s = digits(2), s < 60 else { return nil }
            second = s
            if expect(0x2E) {
                var scale = 0.1
                let start = i
                while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                    fraction += Double(b[i] - 0x30) * scale
                    scale /= 10
                    i += 1
                }
                guard i > start else { return nil }
            }
        }
        var offsetMinutes: Int64 = 0
        if expect(0x5A) || expect(0x7A) {
        } else if i < b.count, b[i] == 0x2B || b[i] == 0x2D {
            let sign: Int64 = b[i] == 0x2D ? -1 : 1
            i += 1
            guard let oh = digits(2), expect(0x3A), let om = digits(2), oh < 24, om < 60 else { return nil }
            offsetMinutes = sign * (oh * 60 + om)
        }
        guard i == b.count else { return nil }
        return dayMs + hour * 3_600_000 + minute * 60_000 + second * 1000 + Int64((fraction * 1000).rounded()) - offsetMinutes * 60_000
    }
}
