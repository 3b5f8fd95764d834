package embedded

// Kill stops the cluster as a crash of its process would, for tests,
// demos and benchmarks that crash a whole server in one process: every
// node stops at once first (the sequencing replicas lose their memory;
// what their write-ahead logs synced stays, and the shards' stores keep
// what they stored), then the clients, the network, the stores and the
// coordinator close without any further work. Start on the same Dir
// reopens it; with seq.Fsync it resumes with every acknowledged record.
func (c *Cluster) Kill() {
	c.lc.Close()
	c.group.Close()
	c.log.Close()
	c.world.Close()
	c.disk.Close()
	c.closeNC()
	c.nats.Shutdown()
}
