// Package groups owns a node's group registry, the Host: on one shared
// Raft port it runs the configuration group 0 (today's cluster.Node,
// unchanged: policies, plans, lists, RLS domains, the node table and the
// groups record) and data groups 1..G, each a cluster.Node of its own
// (Config.Group = g, state in groups/<g>/), and it routes each check to
// the group owning its key's hash slot (hashslot.Map, stored in group 0).
//
// The number of data groups is a bootstrap-time decision: the first leader
// of group 0 bootstraps every data group on itself and records the groups
// in group 0 (cluster.Catalog.PutGroupsRecord); every node compares its
// --data-groups with the record and refuses to serve on a mismatch. Each
// data group has min(3, N) replicas placed by group 0's leader (placement.go
// plans, balance.go applies one change per group at a time) so that
// replicas and leaders per node stay within ±1; a group's leader records
// itself and its replicas in group 0, and a node holding no replica of a
// key's group forwards the check to that recorded leader in one hop
// (cluster.Config.LeaderHint).
//
// The Host implements service.Node (checks split by group, merged in
// order), the Refuser, Bans and quota leases (Leases) per key's group, and
// Policies and Plans fanned out to every group (each group's state machine
// decides with its own copy). Its metrics carry a group label (metrics.go).
// What stays in group 0 only, and what is off in multi-group mode
// (check/all across slots), is in docs/OPERATIONS.md, "Data groups".
package groups
