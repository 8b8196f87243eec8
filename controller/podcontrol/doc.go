// Package podcontrol holds what every controller that owns pods shares (ReplicaSet,
// ReplicationController, Job, and the workload controllers after them): claiming pods by
// selector (adopting orphans, releasing pods that stopped matching), making a pod from a
// template, ranking pods for deletion, creating in slow-start batches, and the expectations
// that keep a lagging cache from causing extra creations or deletions.
package podcontrol
