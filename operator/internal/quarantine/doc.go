// Package quarantine is quarantine by evidence, the one place the operator puts rails into and
// out of a RailNode's spec.quarantinedRails (operator/README.md "Quarantine by evidence"): a rail
// that fails Policy.Failures times within Policy.Window on one node is quarantined there, so new
// workers keep off the node (the job controller's nodesToAvoid, builder.AvoidNodes) and running
// jobs drain the rail (the job controller's rail steering); it is released once it has been
// healthy and failure-free for Policy.ReleaseAfter, or when an admin removes it from the spec.
//
//   - policy.go: Policy.Judge decides, on explicit times, so it is tested and fuzzed without an
//     API server.
//   - evidence.go: the failure record kept in the RailNode's annotation nezha.io/rail-evidence.
//   - reconciler.go: the RailNode controller that reads the record, judges and writes the spec.
//   - metrics.go: nezha_operator_rail_quarantines_total.
//
// Evidence is the agent's own report: each healthy→unhealthy change of a rail, stamped with the
// agent's status.rails[].lastTransitionTime (so the operator counts each failure once however
// often it reconciles, and an operator restart loses nothing: the evidence lives in the RailNode's
// annotation). Flaps faster than the agent's coalescing window (200 ms by default) count as one,
// and timestamps are whole seconds (the API's time format): two failures within the same second
// count as one.
package quarantine
