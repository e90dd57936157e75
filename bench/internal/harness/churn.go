package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-throttler/throttler/bench/internal/fakeapi"
	"github.com/go-throttler/throttler/bench/internal/impls"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// The churn scenario (issue 43: "1,000 tenants that each send a few calls
// and leave: Redis memory back to its baseline within two windows"). A
// steady tenant's open-loop calls run throughout, so that the key lives
// and is trimmed as a shared key is. First, Warm tenants come and go as
// the churning ones will, over WarmSpan: the key grows past Redis's
// listpack encoding into a skiplist, as it will under the churn, and the
// tenants' scripts are loaded; then only the steady tenant calls, until
// the warm tenants' calls have been trimmed, and the baseline is read
// over the last window before Start. From Start, Tenants tenants come,
// evenly over Span, each making Calls calls Gap apart, on the replicas in
// turn, and leave. The harness reads Redis's memory every churnEvery
// throughout (see memSample); the figures compare the baseline with the
// peak and with one and two windows after the last churning call reached
// the API.

// TenantChurn is a churn scenario's tenants that come and go.
type TenantChurn struct {
	Tenants  int           `json:"tenants"`
	Calls    int           `json:"calls"`
	Gap      time.Duration `json:"gap"`
	Start    time.Duration `json:"start"`
	Span     time.Duration `json:"span"`
	Warm     int           `json:"warm"`
	WarmSpan time.Duration `json:"warm_span"`
}

// churnEvery is how often the harness reads Redis's memory in a churn run.
const churnEvery = 50 * time.Millisecond

// minChurnTolerance is the least tolerance of used_memory over its
// baseline (see ChurnFigures.ToleranceBytes): the steady tenant's members
// come and go by a few (about 150 bytes each in a skiplist, with its
// dict entry), and the clients' buffers (the harness's and 3 replicas',
// several connections each) grow and shrink with each pipeline.
const minChurnTolerance = 4 << 10

// Tenant name prefixes of the churn scenario's tenants.
const (
	churnPrefix = "churn-"
	warmPrefix  = "warm-"
	steadyName  = "steady"
)

// churnCall is one call of a tenant that comes and goes: when (after the
// run's start), whose, and on which replica.
type churnCall struct {
	at      time.Duration
	tenant  string
	replica int
}

// calls lists the scenario's calls of the tenants that come and go, warm
// ones first, in the order they are made, on procs replicas.
func (c TenantChurn) calls(procs int) []churnCall {
	var out []churnCall
	add := func(prefix string, n int, from, span time.Duration) {
		for i := range n {
			come := from + time.Duration(int64(span)*int64(i)/int64(n))
			for k := range c.Calls {
				out = append(out, churnCall{at: come + time.Duration(k)*c.Gap, tenant: fmt.Sprintf("%s%04d", prefix, i), replica: (i + k) % procs})
			}
		}
	}
	add(warmPrefix, c.Warm, 0, c.WarmSpan)
	add(churnPrefix, c.Tenants, c.Start, c.Span)
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// lastCall is when the last churning tenant's last call is made.
func (c TenantChurn) lastCall() time.Duration {
	return c.Start + c.Span + time.Duration(c.Calls-1)*c.Gap
}

// runChurn makes this replica's calls of the tenants that come and go, each
// at its time after start in a goroutine of its own (see arrive), until
// runCtx ends; each call waits at most until grace ends. It returns their
// records, warm and churning tenants apart, once every call has returned.
func runChurn(runCtx, grace context.Context, start time.Time, cfg ReplicaConfig, w impls.Waiter, client *http.Client, warmEnd time.Time) []tenantCalls {
	warm, churn := tenantCalls{name: "warm"}, tenantCalls{name: "churn"}
	var wg sync.WaitGroup
	for _, c := range cfg.Churn.calls(cfg.Procs) {
		if c.replica != cfg.Index {
			continue
		}
		if sleepCtx(runCtx, time.Until(start.Add(c.at))); runCtx.Err() != nil {
			break
		}
		l := &goroutineLog{}
		if strings.HasPrefix(c.tenant, warmPrefix) {
			warm.logs = append(warm.logs, l)
		} else {
			churn.logs = append(churn.logs, l)
		}
		ctx := tenantCtx(grace, c.tenant, cfg.Untagged)
		wg.Go(func() { arrive(ctx, cfg, w, client, warmEnd, l) })
	}
	wg.Wait()
	return []tenantCalls{warm, churn}
}

// memSample is Redis's memory at one moment of a churn run: INFO memory's
// used_memory and mem_clients_normal (the clients' buffers and structs,
// which follow how many connections the replicas' pools hold, not the
// tenants), the key's MEMORY USAGE (SAMPLES 0: every member counted), its
// members, and how many of them are calls of tenants other than the
// steady one.
type memSample struct {
	at                 time.Duration // after the run's start
	used, clients, key int64
	members, tens      int64
	// The Lua scripts EVAL cached (used_memory_scripts_eval and
	// number_of_cached_scripts), the keys (DBSIZE), and how many commands
	// Redis has run at all (INFO commandstats' lines): Redis keeps some
	// memory for each command once run.
	scripts, cached, keys, commands int64
}

// data is used_memory less the clients' memory.
func (s memSample) data() int64 { return s.used - s.clients }

// sampleMemory reads Redis's memory every churnEvery until ctx ends, and
// returns the samples.
func sampleMemory(ctx context.Context, rdb *redis.Client, key string, t0 time.Time) []memSample {
	steady := redisstore.TenantTag(redisstore.TenantSuffix(steadyName, 1))
	var out []memSample
	tick := time.NewTicker(churnEvery)
	defer tick.Stop()
	for {
		s := memSample{at: time.Since(t0)}
		info, err1 := memoryInfo(ctx, rdb, "used_memory", "mem_clients_normal", "used_memory_scripts_eval", "number_of_cached_scripts")
		bytes, err2 := rdb.MemoryUsage(ctx, key, 0).Result()
		members, err3 := rdb.ZRange(ctx, key, 0, -1).Result()
		keys, err4 := rdb.DBSize(ctx).Result()
		stats, err5 := rdb.Info(ctx, "commandstats").Result()
		if err1 == nil && (err2 == nil || errors.Is(err2, redis.Nil)) && err3 == nil && err4 == nil && err5 == nil {
			s.commands = int64(strings.Count(stats, "cmdstat_"))
			s.used, s.clients, s.key, s.members = info["used_memory"], info["mem_clients_normal"], bytes, int64(len(members))
			s.scripts, s.cached, s.keys = info["used_memory_scripts_eval"], info["number_of_cached_scripts"], keys
			for _, m := range members {
				if redisstore.TenantSuffixOf(m) != "" && redisstore.TenantTag(m) != steady {
					s.tens++
				}
			}
			out = append(out, s)
		}
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// ChurnScenario is the churn scenario's name.
const ChurnScenario = "tenants-churn"

// MemPoint is Redis's memory at one moment of a churn run (see
// memSample), or over a span (the baseline: the medians).
type MemPoint struct {
	AtS          float64 `json:"at_s"` // after the run's start
	UsedMemory   int64   `json:"used_memory"`
	ClientsBytes int64   `json:"mem_clients_normal"`
	// DataBytes is used_memory less mem_clients_normal: what the
	// target compares.
	DataBytes int64 `json:"data_bytes"`
	KeyBytes  int64 `json:"key_bytes"`
	// ScriptsBytes and Scripts: the Lua scripts EVAL cached (bytes,
	// count); Keys: DBSIZE.
	ScriptsBytes int64 `json:"used_memory_scripts_eval"`
	Scripts      int64 `json:"number_of_cached_scripts"`
	Keys         int64 `json:"keys"`
	Commands     int64 `json:"commands"` // run at all since Redis started
	Members      int64 `json:"members"`
	ChurnMembers int64 `json:"churn_members"` // calls of tenants other than the steady one
}

// ChurnFigures is what a churn run measured of Redis's memory.
type ChurnFigures struct {
	Tenants int     `json:"tenants"`
	Calls   int     `json:"calls"` // per tenant
	GapS    float64 `json:"gap_s"`
	// Made and Admitted: the churning tenants' calls, all replicas.
	Made     int64 `json:"made"`
	Admitted int64 `json:"admitted"`
	// WindowS is the key's window; ToleranceBytes how far above the
	// baseline (its median) used_memory less the clients' memory counts
	// as back to it: as far as it rose over the baseline's own window
	// (allocator noise, with the steady tenant alone), and at least
	// minChurnTolerance.
	WindowS        float64 `json:"window_s"`
	ToleranceBytes int64   `json:"tolerance_bytes"`
	// Baseline is the medians over the window before the churn, and
	// BaselineSpread its DataBytes' highest less lowest over it.
	Baseline       MemPoint `json:"baseline"`
	BaselineSpread int64    `json:"baseline_spread"`
	// Peak is each figure's highest during the churn (not all at once).
	Peak MemPoint `json:"peak"`
	// LastCallS is when the last churning call reached the API; After1W
	// and After2W the first samples one and two windows after it.
	LastCallS float64   `json:"last_call_s"`
	After1W   *MemPoint `json:"after_1w,omitempty"`
	After2W   *MemPoint `json:"after_2w,omitempty"`
	// BackAfterS is how long after the last call DataBytes was first
	// back within the tolerance of the baseline with no churning
	// tenant's member left; nil: not before the run ended.
	BackAfterS *float64 `json:"back_after_s,omitempty"`
	Samples    int      `json:"samples"`
}

// churnFigures measures a churn run from its memory samples, the API's
// arrivals (the last churning call's) and the replicas' counts.
func churnFigures(sc Scenario, t0 time.Time, samples []memSample, arrivals []fakeapi.Arrival, results []ReplicaResult) *ChurnFigures {
	c := sc.Churn
	f := &ChurnFigures{Tenants: c.Tenants, Calls: c.Calls, GapS: c.Gap.Seconds(), WindowS: sc.Interval.Seconds(), Samples: len(samples)}
	for _, r := range results {
		for _, tr := range r.Tenants {
			if tr.Name == "churn" {
				f.Made += tr.Made
				f.Admitted += tr.Admitted
			}
		}
	}
	var last time.Duration
	for _, a := range arrivals {
		if strings.HasPrefix(a.Tenant, churnPrefix) {
			last = max(last, a.At.Sub(t0))
		}
	}
	f.LastCallS = last.Seconds()
	var base []memSample
	for _, s := range samples {
		switch {
		case s.at >= c.Start-sc.Interval && s.at < c.Start:
			base = append(base, s)
		case s.at >= c.Start && s.at <= last:
			f.Peak = maxPoint(f.Peak, s.point())
		}
	}
	var highest int64
	f.Baseline, f.BaselineSpread, highest = medianPoint(base)
	f.ToleranceBytes = max(highest-f.Baseline.DataBytes, minChurnTolerance)
	for _, s := range samples {
		if s.at < last {
			continue
		}
		if f.After1W == nil && s.at >= last+sc.Interval {
			f.After1W = ptr(s.point())
		}
		if f.After2W == nil && s.at >= last+2*sc.Interval {
			f.After2W = ptr(s.point())
		}
		if f.BackAfterS == nil && s.tens == 0 && s.data() <= f.Baseline.DataBytes+f.ToleranceBytes {
			f.BackAfterS = ptr((s.at - last).Seconds())
		}
	}
	return f
}

func (s memSample) point() MemPoint {
	return MemPoint{AtS: s.at.Seconds(), UsedMemory: s.used, ClientsBytes: s.clients, DataBytes: s.data(), KeyBytes: s.key, Members: s.members, ChurnMembers: s.tens,
		ScriptsBytes: s.scripts, Scripts: s.cached, Keys: s.keys, Commands: s.commands}
}

// maxPoint is each figure's higher of a and b.
func maxPoint(a, b MemPoint) MemPoint {
	return MemPoint{AtS: max(a.AtS, b.AtS), UsedMemory: max(a.UsedMemory, b.UsedMemory), ClientsBytes: max(a.ClientsBytes, b.ClientsBytes),
		DataBytes: max(a.DataBytes, b.DataBytes), KeyBytes: max(a.KeyBytes, b.KeyBytes),
		Members: max(a.Members, b.Members), ChurnMembers: max(a.ChurnMembers, b.ChurnMembers),
		ScriptsBytes: max(a.ScriptsBytes, b.ScriptsBytes), Scripts: max(a.Scripts, b.Scripts), Keys: max(a.Keys, b.Keys), Commands: max(a.Commands, b.Commands)}
}

// medianPoint is each figure's median over samples, and the spread
// (highest less lowest) and highest of their DataBytes.
func medianPoint(samples []memSample) (_ MemPoint, spread, highest int64) {
	if len(samples) == 0 {
		return MemPoint{}, 0, 0
	}
	median := func(get func(memSample) int64) int64 {
		v := make([]int64, len(samples))
		for i, s := range samples {
			v[i] = get(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	byData := func(a, b memSample) int { return int(a.data() - b.data()) }
	lo, hi := slices.MinFunc(samples, byData).data(), slices.MaxFunc(samples, byData).data()
	return MemPoint{AtS: samples[len(samples)/2].at.Seconds(), UsedMemory: median(func(s memSample) int64 { return s.used }),
		ClientsBytes: median(func(s memSample) int64 { return s.clients }), DataBytes: median(memSample.data),
		KeyBytes: median(func(s memSample) int64 { return s.key }),
		Members:  median(func(s memSample) int64 { return s.members }), ChurnMembers: median(func(s memSample) int64 { return s.tens }),
		ScriptsBytes: median(func(s memSample) int64 { return s.scripts }), Scripts: median(func(s memSample) int64 { return s.cached }),
		Keys: median(func(s memSample) int64 { return s.keys }), Commands: median(func(s memSample) int64 { return s.commands })}, hi - lo, hi
}

// memoryRun is a churn run's memory sampler (nil for other runs).
type memoryRun struct {
	cancel  context.CancelFunc
	done    chan struct{}
	samples []memSample
}

// startMemory starts reading Redis's memory for a churn run (see
// sampleMemory); nil when sc has no churn.
func startMemory(ctx context.Context, sc Scenario, rdb *redis.Client, key string, t0 time.Time) *memoryRun {
	if sc.Churn == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &memoryRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.samples = sampleMemory(ctx, rdb, key, t0)
	}()
	return m
}

// stop ends the sampler and returns its samples (none for nil).
func (m *memoryRun) stop() []memSample {
	if m == nil {
		return nil
	}
	m.cancel()
	<-m.done
	return m.samples
}

// churnTargets is issue 43's churn target as f measured it: two windows
// after the last churning call, used_memory at most the tolerance above
// the baseline, and no churning tenant's member left in the key.
func churnTargets(at TenantTarget, f *ChurnFigures) []TenantTarget {
	if f.After2W == nil {
		return nil
	}
	a := *f.After2W
	mem, left := at, at
	mem.What, mem.Unit = "used_memory less the clients' two windows after the last churning call, over the baseline", "bytes"
	mem.Value, mem.Limit = float64(a.DataBytes-f.Baseline.DataBytes), float64(f.ToleranceBytes)
	mem.Detail = fmt.Sprintf("%s; baseline spread %d B; back within the tolerance %s after the last call", f.memory(), f.BaselineSpread, f.backAfter())
	left.What, left.Unit = "churning tenants' members left in the key two windows after their last call", "count"
	left.Value, left.Limit = float64(a.ChurnMembers), 0
	left.Detail = fmt.Sprintf("%d members in all (%d at the baseline); key %d B (%d at the baseline)", a.Members, f.Baseline.Members, a.KeyBytes, f.Baseline.KeyBytes)
	return []TenantTarget{mem, left}
}

// memory says used_memory less the clients' at the baseline, the peak
// and one and two windows after the last call.
func (f *ChurnFigures) memory() string {
	at := func(p *MemPoint) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf("%d B", p.DataBytes)
	}
	return fmt.Sprintf("used_memory less the clients' %d B at the baseline, %d B at the peak, %s one window after, %s two after", f.Baseline.DataBytes, f.Peak.DataBytes, at(f.After1W), at(f.After2W))
}

// backAfter says when memory was back, in seconds and windows.
func (f *ChurnFigures) backAfter() string {
	if f.BackAfterS == nil {
		return "never within the run"
	}
	return fmt.Sprintf("%.2fs (%.2f windows)", *f.BackAfterS, *f.BackAfterS/f.WindowS)
}

// summary is the churn in one line, for progress output.
func (f *ChurnFigures) summary() string {
	return fmt.Sprintf("churn: %d/%d calls admitted, %s; back %s after the last call", f.Admitted, f.Made, f.memory(), f.backAfter())
}

// writeChurn writes the churn runs' memory, one line per moment.
func writeChurn(b *strings.Builder, rows []Row, multi bool) {
	header := false
	for _, row := range rows {
		if row.Tenants == nil || row.Tenants.Churn == nil {
			continue
		}
		if !header {
			header = true
			b.WriteString(runCols("| tenants churn | impl | moment | at (s) | used_memory | mem_clients_normal | the rest | over the baseline | key MEMORY USAGE | members | churning tenants' members | EVAL scripts cached | keys | commands run |\n",
				"|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", 1, multi))
		}
		f := row.Tenants.Churn
		for _, m := range []struct {
			what string
			p    *MemPoint
		}{{"baseline (medians over the window before the churn)", &f.Baseline}, {"peak (each figure's highest)", &f.Peak},
			{"one window after the last call", f.After1W}, {"two windows after the last call", f.After2W}} {
			if m.p == nil {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %s | %.2f | %d | %d | %d | %+d | %d | %d | %d | %d (%d B) | %d | %d |\n", row.Scenario, row.impl(multi), m.what, m.p.AtS,
				m.p.UsedMemory, m.p.ClientsBytes, m.p.DataBytes, m.p.DataBytes-f.Baseline.DataBytes, m.p.KeyBytes, m.p.Members, m.p.ChurnMembers,
				m.p.Scripts, m.p.ScriptsBytes, m.p.Keys, m.p.Commands)
		}
		fmt.Fprintf(b, "\n%s: %d tenants x %d calls, %d of %d admitted; last call at %.2fs; baseline spread %d B, tolerance %d B; back %s after the last call.\n\n",
			row.Scenario, f.Tenants, f.Calls, f.Admitted, f.Made, f.LastCallS, f.BaselineSpread, f.ToleranceBytes, f.backAfter())
	}
}
