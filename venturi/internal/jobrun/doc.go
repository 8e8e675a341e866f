// Package jobrun is the in-memory model of a worker's runs, shared by the services that
// handle them: a claimed job ([Job]) with its stop signal ([Stop]), the end of its run as
// it is to be written ([End]), and the [Tracker], the only owner of the set of runs whose
// result is not yet durable.
//
// A run's life through the worker: the fetcher claims jobs and adds them to the tracker
// ([Tracker.Add]); the executor starts each ([Tracker.Begin]), runs its handler, marks it
// ended ([Tracker.Ended]) and hands its [End] to the completer (internal/completer), which
// writes it and removes the run ([Tracker.Remove]) once it is durable or discarded. The
// lease extender (internal/leases) extends the leases of the tracked runs that are not
// being written ([Tracker.Leased], [Tracker.Extended]) and has the runs cancelled whose
// lease is lost or that ran too long ([Tracker.Enforce]).
//
// The package knows nothing of package venturi: events are plain strings, metadata a
// map[string]string, journal entries internal/journalenc's [journalenc.Entry], and the
// cancellation causes the tracker uses are given to [NewTracker].
package jobrun
