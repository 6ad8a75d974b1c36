extension StringProtocol {
    /// The text without leading and trailing spaces and tabs (HTTP's optional white space).
    var trimmedOWS: String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return String(s)
    }
}
