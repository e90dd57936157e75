// Command harness compares this library with the seed design, redis_rate and
// x/time/rate: it starts its own redis-server and a fake API on loopback,
// runs replica processes (itself, re-executed) against each implementation
// in several scenarios, and prints a Markdown table.
//
//	cd bench && go run ./cmd/harness            # full run, about 3 minutes
//	cd bench && go run ./cmd/harness -quick     # CI-sized, about a minute
//	go run ./cmd/harness -scenarios saturate,herd -impls throttler,seed -json out.json -svg chart.svg
//	go run ./cmd/harness -scenarios storm,storm10,herd24  # opt-in: run only when named
//	go run ./cmd/harness -scenarios priority,priority-calm -low-share 0.95
//	go run ./cmd/harness -scenarios herd24 -impls throttler -runs 10 -json out.json
//	go run ./cmd/harness -scenarios far-h1,far-h2 -impls throttler -runs 2  # the API 40ms away over HTTPS
//	go run ./cmd/harness -scenarios redis-reset,redis-stall,redis-lopsided   # broken Redis links
//	go run ./cmd/harness -scenarios tenants-flood,tenants-calm,tenants-skewed,tenants-weighted,tenants-skewed-plain  # tenants (issue 43)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-throttler/throttler/bench/internal/harness"
	"github.com/go-throttler/throttler/bench/internal/impls"
)

func main() {
	if os.Getenv(harness.ReplicaEnv) != "" {
		os.Exit(harness.ReplicaMain())
	}
	var (
		quick     = flag.Bool("quick", false, "short CI-sized run")
		scenarios = flag.String("scenarios", "", "comma-separated scenarios to run, of "+strings.Join(harness.ScenarioNames, ",")+" (default all but the opt-in "+strings.Join(harness.OptInNames, ",")+")")
		implList  = flag.String("impls", "", "comma-separated implementations (default all: "+strings.Join(impls.Names, ",")+")")
		duration  = flag.Duration("duration", 0, "override the duration of every timed scenario")
		calls     = flag.Bool("calls", false, "list every call that reached the API in the JSON (attribution.call_list), not only those of the windows over the limit")
		runs      = flag.Int("runs", 1, "run each scenario with each implementation this many times (a row per run, and a summary across runs)")
		buffer    = flag.Duration("buffer", 50*time.Millisecond, "buffer of throttler and seed (admission-to-arrival margin)")
		lowShare  = flag.Float64("low-share", 0.9, "the share of the limit low-priority calls may fill in the priority scenarios (WithPriorityShare)")
		jsonOut   = flag.String("json", "", "write the results as JSON to this file")
		svgOut    = flag.String("svg", "", "write the chart (saturate, herd) as SVG to this file")
		mdOut     = flag.String("md", "", "also write the Markdown tables to this file")
		readme    = flag.String("readme", "", "run nothing: write the benchmark tables of this README.md (between its markers) from -from")
		from      = flag.String("from", "results/results.json", "with -readme: the results to render")
		lowAhead  *time.Duration
		_         = flag.Bool("replica", false, "internal: run as a replica (configured through "+harness.ReplicaEnv+")")
	)
	flag.Func("low-ahead", "give the low-priority calls of the priority scenarios a Throttler of their own in each process, with this reserve-ahead (default: they share the high ones')", func(v string) error {
		d, err := time.ParseDuration(v)
		lowAhead = &d
		return err
	})
	flag.Parse()
	if *readme != "" {
		if err := harness.UpdateReadme(*readme, *from); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	if *runs < 1 {
		fatal(fmt.Errorf("-runs %d: must be at least 1", *runs))
	}
	if !(*lowShare > 0 && *lowShare <= 1) {
		fatal(fmt.Errorf("-low-share %g: must be in (0, 1]", *lowShare))
	}
	all := harness.Scenarios(*quick)
	if *duration > 0 {
		for i := range all {
			if all[i].Kind != harness.KindMemory && all[i].Kind != harness.KindKeys {
				all[i].Duration = *duration
				all[i].Warmup = min(all[i].Warmup, *duration/2)
			}
		}
	}
	sel, err := harness.Select(all, split(*scenarios), split(*implList))
	if err != nil {
		fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := harness.Run(ctx, harness.Options{Scenarios: sel, Buffer: *buffer, LowShare: *lowShare, LowAhead: lowAhead, Quick: *quick, Runs: *runs, Calls: *calls, Progress: os.Stderr})
	if err != nil {
		fatal(err)
	}
	md := rep.Markdown()
	fmt.Print("\n" + md)
	if *mdOut != "" {
		write(*mdOut, []byte(md))
	}
	if *jsonOut != "" {
		b, err := rep.JSON()
		if err != nil {
			fatal(err)
		}
		write(*jsonOut, append(b, '\n'))
	}
	if *svgOut != "" {
		svg := rep.SVG()
		if svg == "" {
			fmt.Fprintln(os.Stderr, "harness: no saturate or herd run, no chart written")
		} else {
			write(*svgOut, []byte(svg))
		}
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func write(path string, b []byte) {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "harness:", err)
	os.Exit(1)
}
