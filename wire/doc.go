// Package wire owns limitd's HTTP JSON wire format: the decision object, the
// error body, the batch and check/all envelopes, the string escaping they
// use, and the request scan (ScanRequest) that refuses what encoding/json
// would silently misread (invalid UTF-8, repeated members), with the field
// paths (JoinField) every error names. The server (api) writes them, the Go client and the load
// generator (bench) read them, all through this one package, so the schema
// has one encoder and one parser; testdata/answers.golden holds the
// canonical bytes every side is tested against.
//
// Encoders append into the caller's buffer and parsers read without
// reflection on the fixed shapes, because both sit on the per-check path:
// reflection-based encoding/json would cost more than the rest of the work
// per check. Anything a parser does not expect (escapes, unknown fields,
// floats) goes to encoding/json instead, so a server that adds a field costs
// speed, not correctness.
//
// It imports nothing of limitd's but algo (for algo.Never), so that the
// client stays free of the server's dependencies.
package wire
