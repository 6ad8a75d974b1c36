import OutpostCore

// Device telemetry (docs/client.md, "Telemetry"): with `Configuration.telemetry`, each sync
// leaves one entry in the store's outbox (`telemetry_outbox`, the newest `outboxLimit`),
// and after the sync the outbox goes to the server in batches of at most
// `TelemetryBatch.maxEntries`, in a task of its own: the sync has returned by then, and a
// batch that fails stays for the next sync. Nothing of it can fail or hold up a sync.

extension OutpostStore {
    /// Entries kept while the server cannot be reached; older ones are dropped.
    static let outboxLimit = 500

    /// The SDK's version in telemetry.
    static let sdkVersion = "outpost-swift/\(OutpostProtocol.productVersion)"

    /// Stores the entry of the sync that just ended and starts sending the outbox.
    func recordTelemetry(_ transport: any SyncTransport, startedAt: Int64, started: ContinuousClock.Instant, report: SyncReport, failure: OutpostError?) {
        guard configuration.telemetry, life.hasDatabase, failure != .closed else { return }
        let (seconds, attoseconds) = (ContinuousClock.now - started).components
        var entry = TelemetryEntry(startedAt: startedAt, durationMs: seconds * 1000 + attoseconds / 1_000_000_000_000_000)
        let traffic = transport.takeTraffic()
        entry.bytesSent = traffic?.bytesSent ?? 0
        entry.bytesReceived = traffic?.bytesReceived ?? 0
        entry.retries = traffic?.failedRequests ?? 0
        // Change counts stop at the protocol's ceiling for one sync, which a server refuses
        // past (docs/protocol.md section 7): a sync of more changes still reports.
        let ceiling = TelemetryEntry.maxChangesPerSync
        entry.pushed = min(Int64(report.pushed), ceiling)
        entry.pulled = Int64(report.pulled)
        entry.conflicts = min(Int64(report.conflicts), ceiling)
        entry.resolved = min(Int64(report.resolved), ceiling)
        entry.rejected = min(Int64(report.rejected), ceiling)
        entry.lastError = failure.map { String($0.code.prefix(TelemetryEntry.maxErrorLength)) }
        entry.roundTripMs = readings.lastRoundTripMs
        entry.queueDepth = Int64((try? read { try $0.count(deliveries: ["queued", "sent"]) }) ?? report.pending)
        entry.clockOffsetMs = readings.clockOffset
        // What only the device knows, for the operator's device page (docs/operating.md,
        // "Devices"): the app's data version and what waits on the device after the sync.
        entry.appVersion = configuration.appVersion.map { Int64($0) }
        let versions = configuration.versions
        if let (quarantined, held) = try? read({ (try $0.quarantineCount(), try $0.heldCount(versions)) }) {
            entry.quarantined = Int64(quarantined)
            entry.upgradeRequired = Int64(held)
        }
        let bytes = entry.json.encoded()
        try? write(durability: .normal) { d in
            try d.db.run("INSERT INTO telemetry_outbox(entry) VALUES (?)", [.blob(bytes)])
            try d.db.run("DELETE FROM telemetry_outbox WHERE number <= (SELECT max(number) FROM telemetry_outbox) - ?", [.integer(Int64(Self.outboxLimit))])
        }
        guard !readings.sendingTelemetry else { return }
        readings.sendingTelemetry = true
        Task { await self.sendTelemetry(transport) }
    }

    /// Sends the outbox, batch after batch, until it is empty (entries recorded meanwhile
    /// included) or a batch fails.
    private func sendTelemetry(_ transport: any SyncTransport) async {
        defer { readings.sendingTelemetry = false }
        while true {
            guard let rows = try? read({ d in
                try d.db.query("SELECT number, entry FROM telemetry_outbox ORDER BY number LIMIT ?", [.integer(Int64(TelemetryBatch.maxEntries))]) {
                    ($0.int64(0), $0.blob(1))
                }
            }), !rows.isEmpty else { return }
            let entries = rows.enumerated().compactMap { i, row in (try? JSONParser.parse(row.1)).flatMap { try? TelemetryEntry(json: $0, at: i) } }
            let batch = TelemetryBatch(clientId: clientId, sdkVersion: Self.sdkVersion, syncs: entries)
            do { try await transport.sendTelemetry(batch, space: space) } catch { return }
            let last = rows.last!.0
            // Entries a sync added while this batch was out go in the next round.
            guard (try? write(durability: .normal, { try $0.db.run("DELETE FROM telemetry_outbox WHERE number <= ?", [.integer(last)]) })) != nil else { return }
        }
    }

    /// Entries waiting in the outbox.
    public func pendingTelemetry() throws -> Int {
        try read { Int(try $0.db.scalarInt("SELECT count(*) FROM telemetry_outbox") ?? 0) }
    }
}
