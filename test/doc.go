// Package test holds multi-process tests that run real dssp binaries on
// loopback: the end-to-end test of the node (bootstrap, join by seed,
// training, kill -9 of the busiest shard leader, restart), the model's way
// out and back in (dssp export, dssp eval, checkpoints, --init-from, the
// numpy-only reader), bad input at the command line, and the HTTP surface (/metrics, /status, the dashboard in
// headless Chromium, also opened late on a running mesh, where it draws the run so far:
// DSSP_DASHBOARD_LATE, DSSP_SCREENSHOT_DIR), the logs of a healthy mesh (logs_test.go: at most
// 100 lines per node at info over a minute, no ERROR through a kill -9, a restart and graceful
// stops), a damaged raft.db (storage_test.go: the node refuses its start naming the file and the
// remedy, the remedy rejoins it with every checker clean, every replica damaged refuses every
// node); and the fault-injection suite (docs/reliability.md):
// real nodes killed, paused, partitioned and restarted while they train,
// with checkers run over the history the nodes write.
//
// harness.go is the shared rig: [Binary] builds cmd/dssp once per test
// process, [Cluster] starts, kills and restarts node processes and reads
// their /status, and WaitFor polls a condition under a deadline (the only
// waiting these tests do). Every process a test starts is stopped when it
// ends.
//
// linklab_test.go runs meshes on the link lab (lab/netlab: each node in a
// network namespace, the sites joined by a shaped, delayed link): it cuts
// the link between two sites and heals it (TestLinkSites), and trains
// across three sites 300 ms apart, where raft's timing must follow the
// measured round trip (TestLinkFarSites); both need root.
//
// Long tests, outside CI's time and run with DSSP_LONG=1 (longTest):
// TestMeshStepsAsDDP (the combine rule against DDP, 75 s), TestLinkFarSites
// (37 s) and TestLinkHeal (a heal across the sites' link, timed against
// its bound).
//
// DSSP_TEST_LOGS=<dir> keeps every node's log of every cluster (harness.go),
// copied into dir as <test>-<unix time>-node<i>.log when the cluster ends,
// passed or failed: with a node flag such as --log-level debug, the record
// of a rare failure (a crash's panic alone is printed in the test's output).
//
// The fault suite adds: proxy.go ([FaultNet]: per-node UDP/TCP proxies on
// loopback that cut, drop, duplicate and delay peer traffic), faultcluster.go
// ([FaultCluster]: the verbs Kill, Restart, Stop, Cont, Terminate,
// Partition, Heal on nodes that write --history-dir), checkers.go (the
// history and every checker; shares.go the balance layer's), scenarios.go (one method per fault, each
// leaving the mesh healthy), figures.go (what each fault cost) and
// evidence.go (the nodes' logs and views around each fault that recovered
// slowly, kept so a tail in the figures can be analysed). The fast
// tier is TestFaults (in CI); the long randomized tier is TestChaos behind the chaos
// build tag, and TestChaosSites (chaos_sites_test.go) its goodput on the link
// lab's two sites, faults against none; TestCheckersCatchBrokenBuilds (faultinject tag) shows each
// checker failing on a deliberately broken build. DSSP_FAULT_TRAINER=pytorch
// runs both tiers with a PyTorch trainer beside every training node
// (faulttrainers_test.go, trainers_test.go), adding kill -9 of a trainer
// alone and of a node with its trainer; TestFaultsPyTorch (in CI) runs
// those kills.
//
// hostile.go is a member client that holds the mesh key and misbehaves
// ([Hostile], built on packages mesh and shardapi): TestHostileMember
// tries each attack of docs/security.md's hostile-member suite on a real
// mesh and checks the mesh's state after it; DSSP_HOSTILE_OLD_BINARY runs
// the same cases on a build from before the fixes, where each must
// succeed; DSSP_CHAOS_HOSTILE=1 adds the member to TestChaos.
package test
