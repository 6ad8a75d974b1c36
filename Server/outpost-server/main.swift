// outpost-server: serve, token, rotate-epoch (docs/protocol.md section 8), backup, restore, check, healthcheck. The commands live
// in OutpostServer.ServerApp so tests can run them in-process.
import Foundation
import OutpostServer

exit(await ServerApp.main(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment))
