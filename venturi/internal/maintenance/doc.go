// Package maintenance holds venturi's housekeeping services: the rescue of runs whose
// lease expired ([Rescuer]), the promotion of due scheduled jobs ([Promoter]), the
// retention of finished jobs and events ([Pruner]), the sweep of idle gates
// ([GateSweeper]), the stats sample the dashboard's counts read ([Sampler]) and the
// firing of cron schedules ([CronFirer]); and the machinery that
// runs them: a [Duty] does batches of steps in one transaction under a
// transaction-scoped advisory lock, so that one worker at a time does it, repeated while
// batches come back full until it catches up or its time budget runs out; a [Maintainer]
// runs the duties on their loops.
//
// Each service is a struct built by a constructor from a config struct and the
// generated queries (internal/dbsqlc); it knows nothing of package venturi, whose worker
// translates its Config into these configs and composes the services.
package maintenance
