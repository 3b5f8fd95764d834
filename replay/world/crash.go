package world

// Abandon stops the world as a crash of its process would, for tests,
// demos and benchmarks that crash a whole server in one process: the
// ticker and the runners stop where they are (no final snapshot, no
// drain), the lineage recorders are dropped without a flush, and the
// snapshot and lineage stores close without writing anything more. What
// the stores had synced stays, as after a crash; reopening Config.Dir with
// Start resumes from it. It returns the newest tick every shard had
// stepped; Hashes stays readable.
func (w *World) Abandon() (lastTick uint64) {
	w.cancelTicker()
	w.cancelSup()
	<-w.tickerDone
	<-w.supDone
	<-w.publishDone
	<-w.trimDone
	w.mu.Lock()
	clear(w.lin) // their unflushed ranges are lost, as in a crash
	w.mu.Unlock()
	w.closeStores()
	return w.Tick()
}
