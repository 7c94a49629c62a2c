package daemon

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// optionalEvery is how often an optional dependency that answers is checked
// again; while it does not, checks back off from 250ms to this.
const optionalEvery = 5 * time.Second

// Optional watches a dependency that only some task types need (Postgres
// for the transactional ones): check runs until it succeeds, then every few
// seconds. While it fails, types are not ready: a warn line when that
// starts and an info line when it ends, onceq_dependency_up{dependency}
// at 0, and a line on /readyz, which stays 200 because everything else
// runs. The process never exits over it. Call stop before closing what
// check uses.
func (d *Daemon) Optional(name string, types []string, check func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	d.degrade(name, types, "not checked yet") // not ready until the first check answers
	d.Metrics.DependencyUp(name, false)
	log := d.log.With(zap.String("dependency", name), zap.Strings("types", types))
	wg.Go(func() {
		up, delay := false, 250*time.Millisecond
		for first := true; ; first = false {
			cctx, done := context.WithTimeout(ctx, optionalEvery)
			err := check(cctx)
			done()
			if ctx.Err() != nil {
				return
			}
			switch {
			case err == nil && !up:
				log.Info(name + " reachable: its task types are ready")
				d.degrade(name, nil, "")
			case err != nil && (up || first):
				log.Warn(name+" unreachable: its task types are not ready, everything else runs; retrying", zap.Error(err))
				d.degrade(name, types, "unreachable")
			}
			up = err == nil
			d.Metrics.DependencyUp(name, up)
			wait := optionalEvery
			if !up {
				wait, delay = delay, min(2*delay, optionalEvery)
			} else {
				delay = 250 * time.Millisecond
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// degradation is why an optional dependency's task types are not ready.
type degradation struct {
	types []string
	why   string // "not checked yet", "unreachable"
}

// degrade records that name's types are not ready, and why (none: they are).
func (d *Daemon) degrade(name string, types []string, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.degraded == nil {
		d.degraded = map[string]degradation{}
	}
	if types == nil {
		delete(d.degraded, name)
	} else {
		d.degraded[name] = degradation{types, why}
	}
}

// Degraded are /readyz's lines about optional dependencies that do not
// answer: no addresses or driver messages, since anyone may read them.
func (d *Daemon) Degraded() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(d.degraded)) {
		g := d.degraded[name]
		lines = append(lines, name+" "+g.why+": not ready: "+strings.Join(g.types, ", "))
	}
	return lines
}
