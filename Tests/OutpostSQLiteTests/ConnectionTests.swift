import Foundation
import Testing
import OutpostCSQLite
@testable import OutpostSQLite

/// A fresh temporary directory per test, removed afterwards.
func withTemporaryDirectory<T>(_ body: (URL) throws -> T) throws -> T {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-sqlite-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    return try body(dir)
}

@Suite struct ConnectionTests {
    @Test func preparedStatementsBindAndReadEveryType() throws {
        let db = try Connection.inMemory()
        try db.execute("CREATE TABLE t(i INTEGER, r REAL, s TEXT, b BLOB, n)")
        try db.run("INSERT INTO t VALUES (?, ?, ?, ?, ?)", [.integer(Int64.max), .real(2.5), .text("héllo"), .blob([0, 1, 255]), .null])
        let row = try #require(try db.queryOne("SELECT i, r, s, b, n FROM t") { s in
            (s.int64(0), s.double(1), s.text(2), s.blob(3), s.isNull(4), s.value(2))
        })
        #expect(row.0 == Int64.max)
        #expect(row.1 == 2.5)
        #expect(row.2 == "héllo")
        #expect(row.3 == [0, 1, 255])
        #expect(row.4)
        #expect(row.5 == .text("héllo"))
    }

    @Test func emptyBlobIsNotNull() throws {
        let db = try Connection.inMemory()
        try db.execute("CREATE TABLE t(b BLOB)")
        try db.run("INSERT INTO t VALUES (?)", [.blob([])])
        let isNull = try db.queryOne("SELECT b IS NULL FROM t") { $0.int64(0) }
        #expect(isNull == 0)
    }

    @Test func cachedStatementsAreReusedWithFreshBindings() throws {
        let db = try Connection.inMemory()
        try db.execute("CREATE TABLE t(x INTEGER)")
        for i in 0..<100 { try db.run("INSERT INTO t VALUES (?)", [.integer(Int64(i))]) }
        #expect(try db.scalarInt("SELECT count(*) FROM t") == 100)
        #expect(try db.scalarInt("SELECT sum(x) FROM t") == 4950)
        let odd = try db.query("SELECT x FROM t WHERE x % 2 = ? ORDER BY x LIMIT 3", [1]) { $0.int64(0) }
        #expect(odd == [1, 3, 5])
    }

    @Test func transactionCommitsOrRollsBack() throws {
        let db = try Connection.inMemory()
        try db.execute("CREATE TABLE t(x INTEGER PRIMARY KEY)")
        try db.transaction { try db.run("INSERT INTO t VALUES (1)") }
        struct Boom: Error {}
        #expect(throws: Boom.self) {
            try db.transaction {
                try db.run("INSERT INTO t VALUES (2)")
                throw Boom()
            }
        }
        #expect(try db.scalarInt("SELECT count(*) FROM t") == 1)
        #expect(!db.isInTransaction)
    }

    @Test func nestedTransactionsBecomeSavepoints() throws {
        let db = try Connection.inMemory()
        try db.execute("CREATE TABLE t(x INTEGER PRIMARY KEY)")
        struct Inner: Error {}
        try db.transaction {
            try db.run("INSERT INTO t VALUES (1)")
            _ = try? db.transaction {
                try db.run("INSERT INTO t VALUES (2)")
                throw Inner()
            }
            try db.run("INSERT INTO t VALUES (3)")
        }
        #expect(try db.query("SELECT x FROM t ORDER BY x") { $0.int64(0) } == [1, 3])
    }

    @Test func constraintErrorsCarryTheExtendedCodeAndSQLButNotArguments() throws {
        let db = try Connection.inMemory()
        try db.execute("CREATE TABLE t(x TEXT PRIMARY KEY)")
        try db.run("INSERT INTO t VALUES (?)", ["secret-value"])
        do {
            try db.run("INSERT INTO t VALUES (?)", ["secret-value"])
            Issue.record("expected a constraint error")
        } catch {
            #expect(error.code == SQLiteError.constraintPrimaryKey)
            #expect(error.primaryCode == SQLITE_CONSTRAINT)
            #expect(error.isConstraint)
            #expect(error.sql == "INSERT INTO t VALUES (?)")
            #expect(!error.description.contains("secret-value"))
        }
    }

    @Test func syntaxErrorsThrowAtPrepare() throws {
        let db = try Connection.inMemory()
        #expect(throws: SQLiteError.self) { try db.prepare("SELEC nonsense") }
    }

    @Test func walModeOnAFileAndReadersSeeCommittedData() throws {
        try withTemporaryDirectory { dir in
            let path = dir.appendingPathComponent("a.sqlite").path
            let writer = try Connection(path: path)
            try writer.enableWAL(synchronous: .full)
            #expect(try writer.scalarText("PRAGMA journal_mode") == "wal")
            #expect(try writer.scalarInt("PRAGMA synchronous") == 2)
            try writer.execute("CREATE TABLE t(x)")
            let reader = try Connection(path: path, flags: [.readOnly])
            try writer.transaction {
                try writer.run("INSERT INTO t VALUES (1)")
                // Uncommitted: the reader does not see it.
                #expect(try reader.scalarInt("SELECT count(*) FROM t") == 0)
            }
            #expect(try reader.scalarInt("SELECT count(*) FROM t") == 1)
            #expect(try writer.integrityCheck() == ["ok"])
        }
    }

    @Test func onlineBackupCopiesAConsistentSnapshot() throws {
        try withTemporaryDirectory { dir in
            let source = try Connection(path: dir.appendingPathComponent("src.sqlite").path)
            try source.enableWAL(synchronous: .normal)
            try source.execute("CREATE TABLE t(x)")
            try source.transaction { for i in 0..<1000 { try source.run("INSERT INTO t VALUES (?)", [.integer(Int64(i))]) } }
            let copy = try Connection(path: dir.appendingPathComponent("copy.sqlite").path)
            try source.backup(into: copy, pagesPerStep: 1)
            #expect(try copy.scalarInt("SELECT count(*) FROM t") == 1000)
        }
    }

    @Test func openingAMissingFileReadOnlyFails() throws {
        #expect(throws: SQLiteError.self) { try Connection(path: "/nonexistent-dir/x.sqlite", flags: [.readOnly]) }
    }

    @Test func withBytesReadsWithoutCopying() throws {
        let db = try Connection.inMemory()
        let stmt = try db.prepare("SELECT ?")
        try stmt.bind([.blob(Array("abc".utf8))])
        #expect(try stmt.step())
        let count = stmt.withBytes(0) { $0.count }
        #expect(count == 3)
    }
}
