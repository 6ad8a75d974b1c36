// The portable half of the tests' support (temporary directories, polls with deadlines,
// work off the cooperative pool, the test clock, the logs' trait), which builds wherever
// the SDK does: every test that imports this module sees it too.
@_exported import OutpostTestBasics
