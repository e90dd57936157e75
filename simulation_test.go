package throttler

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/go-throttler/throttler/internal/sim"
)

// The simulation runs the real library (every replica, one Redis, faults)
// in virtual time, one seed per run; see internal/sim.
//
//	go test -run '^TestSimulation$' .                      the regression seeds
//	go test -run '^TestSimulation$' -sim.ci -timeout 40m .   the CI seed set
//	go test -run '^TestSimulation$' -sim.seeds 100000 -timeout 0 .   a long run
//	go test -run '^TestSimulation$' -sim.seed 4242 -v .    one seed, with its trace
var (
	simCI    = flag.Bool("sim.ci", false, "simulation: run the CI seed set (seeds 1-1,000 and the regression seeds found beyond)")
	simSeeds = flag.Int("sim.seeds", 0, "simulation: how many seeds to run (0: the regression seeds, or the CI set with -sim.ci)")
	simFirst = flag.Uint64("sim.first", 1, "simulation: the first seed to run")
	simSeed  = flag.Uint64("sim.seed", 0, "simulation: run only this seed and print its trace")
	simWall  = flag.Duration("sim.wall", 15*time.Minute, "simulation: end the run, naming the seed, when one seed runs longer than this in wall time (0: no bound)")
	simTrace = flag.String("sim.traces", "", "simulation: write the trace of each seed that fails to seed-N.txt in this directory (a failure that depends on how the seeds beside it ran may not come back alone)")
)

// simCase is a seed and the bug it found.
type simCase struct {
	seed uint64
	bug  string
}

// simRegressions are seeds that found a bug, kept as regression cases once
// it was fixed. Each runs in every `go test`.
var simRegressions = []simCase{
	{37, "a local clock step: scores and the trim came from a stale estimate of the server's clock, and the trim deleted every replica's live members"},
	{66, "a round that planned PEXPIRE but sent nothing put off the next one: the key expired under members that still counted"},
	{35, "FallbackLocal(1/R) with a limit below R gave each replica one call per window: R calls in all"},
	{20, "a zero buffer: two replicas converted the same score to local times up to 2µs apart (365 calls in a window of 358)"},
	{11, "FallbackLocal's local share ignored every limit but New's: 986 calls in a window of a WithLimit limit of 440"},
	{57, "a flush healed by write-backs: replicas sleeping toward slots reserved minutes ahead never wrote theirs back (723 in a window of 525)"},
	{14, "the same with 45 replicas: write-backs came after the 800ms grace (71 in a window of 43)"},
	{31, "AllowN under FailOpen admitted through a Redis failure without marking the process degraded"},
	{85, "false heals: the probe was looked up in the first key after that key had trimmed it (a longer WithLimit window kept it in the journal)"},
	{64, "one process on 8 per 2.9s used 83% of the quota: the pause after a fair share let burst slots come due unreserved"},
	{8, "the same with three processes and a 94ms reserve-ahead: a third of each burst went 53ms late"},
	{310, "AllowN admitted a call whose reply came back 10.7ms late with a 4ms buffer: the call went past the margin"},
	{63, "a killed replica's worker, retrying its local calls for a 45-minute window, outlived the run"},
	{377, "a clock step seen first by another round trip: this one's reply agreed with the restarted estimate, and a claim scored 7.8s ahead by the old one was admitted at once"},
	{663, "a process idle for two hours trimmed 'an hour past the server's last reading': every live member of every replica"},
	{803, "a reply that came back sooner than the stall-inflated round trip it was planned with: the call was admitted at once, a second before its score"},
	{406, "a clock stepped 3.3s ahead, past the key's TTL: a flushed window looked expired, not lost; and a member scored by the stepped estimate, applied by a round trip whose reply was lost, was never given back"},
	{153, "a round trip straddled a local clock step back: the estimate restarted from its sample kept the old offset, and the heal pause it computed ended before it began (1860 units in a window of 1463)"},
	{2370, "a flush lost a second limit's 27s window after the first key's 7s TTL had passed: the missing marker looked like an expired key (28 calls in a window of 21)"},
	{1230, "the same loss of a longer WithLimit window under FallbackLocal (8278 units in a window of 6243)"},
	{1401, "the same with a 473ms second window (9 in a window of 8)"},
	{762, "a pipeline sent again after a timed-out read ran the lease script twice: the second run refused the place the first had granted, left taken until its lease expired"},
	{2996, "29 replicas x 4 callers: turns near the limit went to whichever process woke first, and one fell behind for 19.7s against an 18.3s bound"},
	{242, "replies 201ms late (a lopsided link) and a local clock step back of 548ms: the estimate's error bound (100ms) passed half the 50ms buffer, and calls placed by estimates 100ms apart went within an interval at the API (58 in a window of 52); fixed by the margin (internal/core's margin.go)"},
	{384, "a fleet's cold start: margins asked for by its loose first estimates stayed in force after it, and a calm run's wait bound counted them as the library's (237ms against 89ms); the bound now starts once they are over (startCost)"},
	{567, "a local clock (readings with a monotonic part) stepped back 543ms while a call slept toward its slot: the timer ran its course, the stepped clock said early, and the call slept on and went 543ms late (4 in a window of 3); a sleeper whose timer outran its clock now samples the server's clock"},
	{875, "a process restarted after a failover to a copy behind, before any replica noticed the loss (the others had fallen back): it cannot tell the lost window from a new key, as docs/guarantees.md states; the checker now exempts such a blind process until it learns of the heal's pause"},
	{1307, "FallbackLocal, a clock step of 3.2s during the outage: the calls admitted locally were scored for their write-back with the stepped estimate (members 3.2s beyond reserve-ahead; write-backs now scored on the runtime's clock), and the local share, kept on the stepped clock, aged out at once and admitted a second share (the window over the limit, as 5417)"},
	{1907, "a round trip that timed out on a closed connection during a 2.4s stall was applied after the give-back sent on a newer one: its member, scored 3.8s ahead, stayed in the set; what a failed round trip wrote is now given back again by a round trip planned after one succeeded (owed.recheck)"},
	{3013, "FallbackLocal, one replica, replies delayed by up to 2.9s: a member left 10.7s ahead, beyond reserve-ahead; passes 48 runs of 48 since the fixes of 1907 and 5417 (by its symptom the late write of 1907, not traced)"},
	{5417, "FallbackLocal with a local clock that stepped 156ms: the local share's log was kept on the stepped clock, so its calls aged out of the window at once and a second share went (81 units in a window of 74); the share now counts real time (the runtime's clock)"},
	{3513, "FailOpen, a cap of 6 in flight: the place of a waiter gone while its round trip was out, given back by the keeper after the reply, was still on its way (requests delayed) when the check read the set; the keeper now exits once it has written its last give-back, and the check waits for it"},
	{5669, "the same as 3513: a cold fleet's delayed round trips, a cap of 16"},
	{1723, "a process killed with a call of 32s in flight whose lease, granted 3s before the kill, lapsed 27s after its grant: the checker counted the dead process's call past its lease, which WithInFlight does not promise; it now stops counting a killed process's call when its lease leaves the set"},
	{4149, "a think time of 35m begun just before the traffic ended outlasted the bound on a hang (0 calls running); callers now stop thinking when the traffic ends. (Its first failure, 5282 round trips for 66 admissions, did not come back in 36 runs.)"},
	{5046, "FailOpen, a cap of 1 in flight, three processes killed while in the line for places: each took a wake with it when it reached the head, made up a third of the ttl later (five waiters kept 29s); a release now passes over a process silent in line for a ttl"},
	{6960, "one process, 3 per 11ms with 1.5ms reserve-ahead: the jitter span was the limit's spacing (3.8ms), longer than reserve-ahead, and wakes came after their slots were due (0.917 of the quota against 0.99); the span is now at most half of reserve-ahead"},
	{6384, "below target by the checker's measure only: 54 per 2m6s and 140 per 4m39s, where the second's first window fills before the first's rate is reached; the run used 0.925 of the first's rate, all the limits allow (bestUtilization), against a target of 0.94 of the rate"},
	{7905, "FailOpen, a clock step of 1.6s, failovers: a round trip planned with the stepped estimate failed, and FailOpen admitted its calls and kept their members, scored 1.6s ahead, beyond reserve-ahead, where they counted at the wrong time; FailOpen now gives them back and counts the calls anew, at the time they go, on the runtime's clock"},
	{5268, "a calm run, 43 processes x 1 caller on 35 per 3.5 minutes: a caller waited 18m32s against a bound of 15m46s. The slots free in a burst at each window's start, every waiting process wakes for them at a random point of the jitter span, and r28 lost four turns in a row to the draw; a process that lost k turns in a row now wakes in a band of the span ahead of every process that lost fewer (turnJitter)"},
	{8891, "a failover at 72ms to a copy synced before the first call: r3's one round trip before it had found the key without its marker (the others had not written it yet), so r3 could not tell the lost window from a new key and admitted 2 calls into a window whose 5 were lost (7 in a window of 5); a process now writes the marker with every round trip until a reply vouches for the key"},
	{10362, "priorities with a low share of 0.5 on 3 per 11m9s, 35 replicas x 4 callers: once the others were served, the low calls went at their cap of 1 a window, as WithPriorityShare says, and the last waited 17h34m against a hang bound of 16h48m computed from the whole limit; the checker's bound now drains the queue at low's cap when priorities are on"},
	{10793, "FailOpen, a round trip whose reply was lost, then a local clock step of 4.8s: the worker gave up the failed round trips' members to give back at once, its deadline on the stepped clock, and one a later failed round trip had scored 4.8s ahead stayed (2 runs in 40); the deadline is now on the runtime's clock, and a member scored further ahead than reserve-ahead is kept until its own score has left the window"},
	{12197, "FallbackLocal, one replica, replies dropped after apply and a local clock step of 1.6s: a member scored 1.6s ahead by a failed round trip was given up by the stepped clock, as in 10793 (fails 20 of 20 on the commit before; 0 of 40 since)"},
	{13407, "FallbackLocal, a failure and then a local clock step back of 7.2s: the second without Redis was counted on the stepped clock, so Redis went untried for 8s and the process stayed busy with 1,409 admissions to write back (6 runs of 6); the deadline is now on the runtime's clock"},
	{2840, "two limits of near-equal rates and weighted calls of up to 90 units used 0.888 of the tightest rate against 0.9135: of what the limits allow (0.902, bestUtilization), 0.984"},
	{1, "compacted windows of 14m12s in 59 buckets: CompactScript kept its per-bucket tables keyed by bucket number, which gopher-lua (miniredis's Lua) stores as an array up to that number (10^10 / width entries): the CI set grew past 20 GB; the tables are keyed by the bucket's digits"},
	{32, "a compacted window whose cut ran through a bucket: the tails ranked every member above every compacted call, but the count placed the bucket's calls at its end, after some members; the slot worked out from such a member was refused by the count, again and again, without virtual time moving (a livelock). The tails now rank members and compacted calls together, where the counts place them"},
	{390, "a failover to a copy 947ms behind, on a compacted window: the simulator's copy shared miniredis's live sorted sets (only hashes were copied), so the calls compacted after the copy were in neither the restored set nor the restored buckets (6 in a window of 3). A simulator bug, not the library's: failovers before it lost no member of a sorted set at all; the copy is now a copy"},
	{174, "a flush right after a process started: the new process wrote the marker again (it cannot tell an empty key from a new one), and the probes of the round trips after the flush had been settled away in flight, so they could not tell; the next probes were calls written after the flush and found them (595 in a window of 532). Seen only under CPU load (GOMAXPROCS=4 beside a CPU hog: 1 in 25 runs; 0 in 100 since). Each round trip whose newest probe could not tell is now owed a check: the round trips after it also probe, in turn, the newest call added before each owed one"},
	{18728, "two limits (12 per 284.6ms, 16 per 359.4ms), 5 replicas x 11 callers: 0.917-0.940 of the tightest rate against 0.942 in 4-6 runs of 12. A claim at a free slot behind the tail was refused because its (g-w, g+w) count held members on both sides that no one window holds together, and no replica planned there again; exact rounds now read each score's peak window (PeakScript)"},
	{30111, "FallbackLocal, a failover to a copy 76ms behind: r1's calls were all in the copy, so its probes found them and it admitted 2 calls into a window whose 3 calls by r0 and r2 were lost, before those two (fallen back on the closed connections) could notice; no process can tell the loss of calls it never saw: the checker now exempts a process none of whose calls a failover lost until it learns of the heal's pause, and docs/guarantees.md states the limit (2 runs in 6 on the code before)"},
	{30244, "a calm run on a window compacted in 38 buckets used 0.9876 of the quota against a 0.99 target: a compacted window counts its buckets whole and gives up to a bucket's share, as documented; the target now allows it"},
	{30269, "a failover to a copy behind brought back a place in flight given back after the copy's last sync, taken until its lease expires: the leftover-place check no longer applies to runs with a failover (also seed 30215)"},
	{477, "a connection-setup fault (sim.ConnSetup) on one replica of 16 Transport callers, 4 per 16ms, a 3.6ms buffer: two requests admitted at their slots were written 5.3ms and 6.0ms later on new connections, and the next window's four on idle ones (6 in a window of 4 at the API); the Transport now holds a request at GotConn and takes a new slot when its connection came past the slot's allowance (sendgate.go)"},
	{55, "the same through the Transport and Do, 5 replicas on 3 per 332ms, a 50ms buffer: a request written 108ms after its slot on a new connection, with the next window's three (4 in a window of 3 at the API)"},
	{547, "FallbackLocal, a failover at 22.6ms to a copy synced at 2.3ms: r2-r4's calls reserved before it for 27.8ms were lost, while r0's lost calls had all been given back (their deadlines passed after a clock step) or had left the window; resent at once on a fresh connection (issue 40) where it had failed and fallen back, r0's round trip found the copy holding every call it still held and admitted 2136 units into a window of 2144 whose 996 were lost. No call of r0's could tell it of the loss, as for a process none of whose calls a failover lost (30111): the checker now exempts a process holding none of its lost calls that still count, until it learns of the heal's pause (5 runs of 12 failed since the resend, 0 of 12 after). Under load (CI) the round trip could come before those give-backs: r0's clock, stepped 120ms ahead, had trimmed its journal, and with it the probes of its lost calls scored ahead; the journal is now trimmed by the server's time a reply last read (TestClockStepKeepsProbes; 2 runs of 20 failed under two busy cores before, 0 of 160 after)"},
	{1934, "FailOpen, two flushes 33s apart, the second erasing the heal's pause before anyone read it: r12, whose last round trip was 7m23s earlier (the key's TTL is 5m7s), found the key empty and admitted a call into a window of 1 per 5m4s whose call was lost (2 at the API). docs/guarantees.md's limit (a process idle for a whole TTL cannot tell a lost window from a new key); before round trips were resent on a fresh connection (issue 40), its round trip failed on a connection the flush had closed and FailOpen exempted the call. The checker now exempts a process idle for a TTL across a loss until it learns of the heal's pause (simReplica.idleBlind)"},
	{21213, "a process cut off from Redis for good (killed, its callers still waiting) through 3h of a 5-replica FallbackLocal run on windows of 46m and 2h52m: the run had not finished after 55 minutes of wall time (-sim.wall named it; the tree before issue 41 did not finish it in 40). Every failed round trip resent every member earlier failures had left in doubt (owed.recheck), which only an idle queue aged out, and each requeued call kept the members of every attempt it made (reservation.stale): each failure cost more than the last. Now a round trip carries those members only once one after the failures succeeded (or as a probe, with nothing else to send), 1,024 at a time; each leaves the list when it counts nowhere; a requeued call keeps its last attempt's members; the seed runs in 13s"},
	{20155, "FailOpen, 3 replicas on 8 per 1.728s, compacted windows in 43 buckets (all but the newest calls moved): a failover at 3.995s to a copy synced at 2.764s lost 5 of the 8 calls admitted at 3.578s, 3 of them r1's or r2's. A round trip after the failover compacted the copy's 3 calls of that slot into their bucket, and every lost call's probe, missing from the set but scored in a bucket that held calls, read as moved there: no process noticed, and one reserved 5 calls at once into the window (13 in a window of 8; 12 runs of 20 failed, also on 874392b). The first key now holds a tally (redisstore.TallyMember) that every round trip adding calls increments and every round trip reads: one that finds it below what the replies before it read has found a copy behind, and heals (TestFailoverBehindIntoCompactedBucketIsNoticed; 0 runs of 20 fail)"},
	{20137, "FallbackLocal, 6 replicas on two limits, Transport callers with a connection-setup fault, and r2's clock stepped 4.2s ahead at 2.920s: a request of r2's held at its connection as the step came found its slot 4.2s behind, gave it back, and could not wait for a new one (its context ended), so it was written as debt, scored at the server's now by the stepped estimate: 4.2s ahead, where it counted in windows the call never went in, and stayed in Redis past reserve-ahead (member at 7.1s at the end; 11 runs of 300 failed, half of them under GOMAXPROCS=1). Debt of a call written off its slot is now scored by the runtime's clock from the last sample, as FailOpen's and FallbackLocal's admissions are (debtNow, TestLateSendDebtIgnoresAClockStep)"},
	{21200, "FallbackLocal, 3 replicas x 23 callers on 28 per 70.2ms and 20 per 18.8ms, windows compacted in 48 buckets: 12 calm runs of 500 fell short, most using 0.950-0.957 of the tightest rate against 0.969. At 124ms a claim of 2 at 159.209ms, where every window had room, was refused under the second limit: its (g-w, g+w) count held the 14 calls at 141.139ms and 2 another replica had just claimed at 159.934ms, 18.795ms apart, which no one window holds together (22 of 20); a compacted window read no peaks (seed 18728's fix covered logs only), and no replica planned behind the tail again, so 2 slots stayed free for 51ms. CountScript now reads a compacted window's peaks as PeakScript reads a log's (TestCompactedPeaksMatchBruteForce; 4 runs of 1,000 fall short since, by 0.0002-0.001, of three replicas racing for the last 2 slots, a loser's retry refused by the other loser's members not yet given back)"},
	{344, "tenants t0 and t1 backlogged beside a light tenant, 3 replicas on 25 per 405ms and 18 per 85ms, compacted: a CI-set run used 0.7697 of the limit against 0.7711. The checker allowed the tenants a spare of 2% (spareShare), where the library leaves 5 units within 5% (spareOf: 5% at a limit of 25); it now allows spareOf. A checker's bug; the seed passed alone 5 runs of 5"},
	{25031, "FallbackLocal(1/R), 3 replicas on 1771 per 1.788s with a 19ms buffer, Transport callers with a connection-setup fault: r2, cut off from 3.105s to 5.105s, spent 586 units of its share of 590 at 3.105s, and its next local slots came a share's window (interval plus buffer) later, at 4.911s; the Transport handed those requests on ahead of their slots by its lead (33.8ms, what recent dials took), but a call admitted without Redis has no score for the send gate to hold it to, so 17 were written as they were handed on, 20-34ms before their slots, into the window that still held the 586 (2372 units in a window of 2361 at the API: the 1771 limit plus r2's share; the calls Redis counted there, 1769 units, and the share's slots, 586, both fit). Only a slot reserved through Redis is now handed on ahead; a call admitted without it returns at its slot (waiter.leadFor, TestTransportSendsALocalAdmissionAtItsSlot; 17 runs of 20 failed before, 0 of 30 after)"},
	{580, "tenants t0-t3 backlogged beside a light tenant, calls of up to 82 units, 2 replicas on 3982 per 34.7s: the shares held (each backlogged tenant within 2% of its fair share) but a CI run used 0.8202 of the limit against the calm target of 0.8467 (runs alone use 0.96-0.98): the caps leave the light tenants their most in a window lately besides the spare, as designed, and a light tenant with calls that large swings far above its mean. The checker now allows that swing, measured on the run (sim.LightSwing; target 0.7899 on a run alone)"},
	{30220, "tenants t0, t1 and t2 backlogged, t1 leaving at 7m2.8s, 3 replicas on 1506 per 3m43.7s: t1's calls, flagged as having waited, kept it counted as backlogged until they left the window, so t0 and t2 stayed capped at a third each while a fifth of the window stayed empty (0.8495-0.8533 against 0.8581, beside other runs). Fixed by water-filling in core.FairLevel; issue 43"},
	{34192, "1 replica on 192 per 2.36s, calls of up to 5 units, tenants t0 and t1, t1 from 1.7s to 5.6s: the calm run used 0.8586-0.8828 of the limit against a target of 0.8910, alone, 10 runs of 12 (on 0364671). In the window that opened at 7.08s, t1 (gone) took its last 24-28 units and t0, capped at half, 93: the other 71 stayed free until t0's next round, which its cap had set to sleep toward the slot the cap left it (a window on), so a Quiet (500ms) later, and a scan in that round raised the cap but the round, which claimed nothing, kept the sleep it had planned, another Quiet in most runs. A round whose scan raises a cap now plans again at once (TenantShares.Looser), and while calls of a capped tenant are queued and a scan saw a tenant short of its share, a round sleeps no longer than until the next scan (TestTenantThatLeavesGivesItsShareAtOnce); 0.8967-0.9190 in 6 runs of 6 since (0.9441-0.9558 when every capped wait woke for scans, which cost tenants-skewed 2.3-2.5x the round trips). Later 1 run in about 8 used 0.84-0.86: t0, 2 units under its cap with a call of 5 queued, was taken as asking for less beside t1 (gone), and the cap stayed; a tenant with calls queued in the scanning process is never short now (core.TenantUse.Queued), 0.8922-0.9063 in 16 runs of 16. Then 0.8903 in b500900's CI and 1 run of 24 alone: the round that claimed t1's last queued calls scanned before t1's calls of a window ago left, and the next slept 547ms toward t0's slot; a round now wakes for the next scan while a capped tenant whose calls waited here at the last scan has none queued (core.TenantShares.Queued), 0.9248-0.9328 in 24 runs of 24; issue 43"},
	{36420, "a tenant with one caller on each of 5 replicas never had a call wait behind its own, so it was never capped: it held 255 units of 328 while a flood of 15 callers got 49, and one waited 11.6s against a bound of 11.4s (FairMemory.Heavy)"},
	{30688, "tenants t0 and t2 backlogged, t1 from 5.2s to 12.8s, 2 replicas on 4801 per 6.29s, calls of up to 107 units: first, t1's last calls went with the next window's and a scan saw it backlogged with a third of its share, holding t0 and t2 to a third each (mended by water-filling in core.FairLevel, f9dd2d5); then, with 4 runs at once, 7 of 16 still failed: t2's head call of 65 units waited most of a window behind the 64 known slots, and every call behind it, for each round that would have learned more slept until a capped tenant's slot came within reach (a request the known slots are too few for now has the round learn enough for it, TestPlanLearnsSlotsBesideACappedTenant; 1 of 16 failed after, 0.8782 against 0.8811). The rest was seed 34192's: a capped tenant slept toward the slot its cap left while a scan had raised the cap; with that fixed, 3 runs of 3 used 0.9502-0.9641; issue 43"},
	{40248, "tenants t0, t1 and t2 backlogged at their fair 99 units beside a light tenant, 4 replicas x 7 callers on 121 per 5m37s, calls of up to 4 units, every window's slots freed at one instant: in the further seeds' run (40001-40250) a call of t0's of 4 units waited 41m34s, past the bound of 40m42s, while its replica's later calls of t0 of 1 to 3 units went ahead of it. The store refused a claim over its tenant's cap and kept smaller ones behind it, and a round trip that took the whole queue started the fair order afresh, so that calls joining while it was out went ahead of those it sent back; the store now refuses every claim of a tenant behind a refused one, and the fair order starts afresh only when no call waits, queued or out (TestFairOrderKeepsTenantOrderAcrossRoundTrips). Alone it passed before, waiting up to 32m33s; since, 16m16s-24m42s in 16 runs; issue 43"},
	{45216, "5 replicas on 174 per 2.68s, buffer 50ms, FailOpen, windows compacted in 34 buckets keeping only the newest 8 calls, tenants t0, t1, a flood and a light one: the calm run used 0.53-0.69 of the limit against 0.78-0.81 in 6 runs of 8. Each burst's round trips, claiming at the soonest slot, were refused 15-62 units at a time, and their members given back plainly (a ZREM) by the next round trip; another process's compaction had moved them into their bucket first, so the ZREM found nothing and they stayed counted, 153 units of phantoms in a window of 174, and every process learned its next free slots a window away. A refused claim now goes back as written for sure (GiveBackScript takes it out of its bucket), by owed alone (TestRefusedClaimCompactedIsGivenBack); 0.995-1.000 of what the limits allow in 10 runs of 10; issue 43"},
	{50717, "5 replicas x 2 callers on 4502 per 36m9s, FallbackLocal(1/R) (no Redis error in the run), at most 2 in flight (ttl 4s, calls up to 8s), r4's clock stepped by -7.9s at 47m18s while r4 held a place for a slot 37m ahead: the keeper timed its renewals on the local clock, so the step put the next one off 9.3s, past the lease's expiry, and set the renewed expiry by the estimate of the server's clock, 7.9s short until a round trip showed the step; the lease lapsed, r4 kept renewing (XX) a place Redis no longer held, and at 1h21m46s its call went on it beside the two places Redis had granted since: 3 in flight against a cap of 2. The keeper now renews on the runtime's clock, to an expiry set by the server's (RenewScript)"},
	{53917, "6 replicas x 16 callers on 29 per 122ms and 12 per 334ms, buffer 5.5ms, FailOpen, HTTP callers, the API 28ms away; r5's clock stepped back 407ms at 316ms: 14 units in a window of 12 on the second key at the API (further seeds 53751-54000, on 8515d4a; b500900 failed it too). r5 reserved 2 calls at 230ms for score 339ms; after the step its local clock said they were 407ms early, so they waited until it read 339ms (746ms), and then, by the local clock and an estimate no round trip had corrected, looked on time. offScore now also judges lateness by the runtime's clock from the last sample (core.Clock.ServerByRuntime), which never steps: the calls go back and reserve again (TestLateByTheRuntimeClockAfterALocalStepBack); issue 43"},
	{53268, "5 replicas x 5 callers on 1 per 39.3s, buffer 1.5s, at most 1 call in flight (ttl 3s, calls up to 4.1s), settle 0.70, priorities, tenants t0, t1 and a light one: 25 calls still waiting 2h after the traffic ended, after 17,620 round trips (further seeds 53251-53500, on ca0df2c; b500900 fails it too, 8 runs of 10). A low-priority call held the one place, granted with a claim the reply refused, and was queued again; every round of its replica claimed the one free slot for its higher-priority calls, queued ahead of it, which lacked a place and gave the slot back, round after round, while the plan kept the holder behind them. The places a process holds for calls not gone yet now go to the round's claims in the queue's order (leases.handOver; TestInFlightPlaceFollowsTheClaim): 12 runs of 12 pass; issue 43"},
	{55708, "5 replicas x 25 callers on 22 per 22.8s, buffer 0, FailOpen, tenants t0 (everywhere), t1 (r1-r4), t2 (17-51s) and a flood of 3 callers on r1 (to 43s), a run of 73s: the calm run used 0.67-0.75 of the limit against a target of 0.7582 in 4 runs of 8 (further seeds 55501-55750, on b47c384; b500900 fails it too, 0.56 in 1 run of 3). A build logging each scan showed the window after the flood left hold 15 of 22 for a window: t2, light at 40s (4 calls, none waited), was backlogged from 45s, and the light tenants' most (4), remembered for two windows, kept 4 units from the three backlogged tenants (level 4.6, caps of 4) on top of their shares. The most light held now gives way once every tenant that was light then is backlogged (core.Known.LearnTenants; TestLearnTenantsLightGivesWayWhenItsTenantsAreBacklogged): 8 runs of 8 pass; issue 43"},
	{55600, "4 replicas x 7 callers on 63 per 280ms, buffer 3.2ms, FailOpen, tenants t0 (everywhere), t1 (on r1, leaving at 493ms) and a flood (289-597ms), a run of 969ms: the calm run used 0.75-0.78 of the limit against a target of 0.8924, in every run (further seeds 55501-55750, on b47c384; b500900 fails it too, 0.67-0.68 in 3 runs of 3). Attributed in part: t1's last calls were claimed for the window's burst at 560ms; t1 holds its share until its calls of the window before leave (566ms), and its room (17 units of 63) goes to the others only two scans after that, at 760ms: the scans come every 100ms at the least, 0.7 of this window, and only the replica t1 drained from (r1) wakes for them; the others slept toward their capped tenants' next slots, 840ms. Fixed (issue 43): scans come every tenth of the window but at least 25ms apart, not 100ms (minScanEvery); the second that sees a tenant short a quarter of that after the first (scanGap); the rounds of capped calls wake for a scan as the oldest call of a capped tenant queued elsewhere leaves the window (core.TenantShares.Drops: the flood's last 27 units left over a window while every process slept toward t0's next slot, 11 units of 63 free), and as the newest call of a tenant taken as asking for less leaves the window (Leaves). 16 runs of 16 pass; issue 43"},
	{56044, "2 replicas x 6 callers on 323 per 222ms, buffer 0, reserve ahead 163ms, calls of up to 7 units, FailOpen, tenants t0 (weight 0.5), t1, t2 (76-424ms) and a flood (to 350ms), a run of 694ms: the calm run used 0.69-0.74 of the limit against a target of 0.8647, in every run (7 of 7; further seeds 56001-56250, on b47c384). The same shape as 55600: a short window (scans every 100ms, 0.45 of it) and two tenants leaving inside a run of three windows; the window after the flood left held 244 of 323. A build logging each round showed the rest: the claims for the burst at 443.7ms were placed 163ms ahead, while t2 still held its share; the burst held 241 of 323, and both processes slept toward their capped tenants' next slots a window on, with no scan to raise the caps. Fixed (issue 43): a round of capped calls wakes for the next scan while the free slots it knows of leave room past what the caps leave free on purpose (capsLeaveRoom); 6 runs of 6 pass; issue 43"},
	{56932, "1 replica x 22 callers on 42 per 2.15s, buffer 0, FallbackLocal, tenants t0 (weight 2) and t1 (weight 3, 1.82-4.61s), a run of 7.4s: the calm run used 0.8836 of the limit against a target of 0.8924, in every run (further seeds 56751-57000, on b47c384). The same shape as 55600: t1's queued calls went until 6.45s, the scan after them saw it short (6.52s), the next (6.73s) gave its room to t0, 280ms after its last call; fixed with 55600 (the second scan a quarter of a scan's time after the first): 6 runs of 6 pass; issue 43"},
	{58184, "2 replicas x 11 callers on 1411 per 140ms, buffer 50ms, FailClosed, calls of up to 39 units, tenants t0 (weight 0.5) and t1 (weight 2, leaving at 474ms), a run of 769ms: the calm run used 0.65-0.68 of the limit against 0.8878, 3 runs of 3 (further seeds 58001-58250, on d5f77c6; b47c384 fails it too): the leaving-tenant shape of 55600, fixed with it; 6 runs of 6 pass; issue 43"},
	{59224, "2 replicas x 6 callers on 323 per 145ms, buffer 16ms, reserve ahead 99ms, FallbackLocal, calls of up to 9 units, tenants t0, t1 (on r0, leaving at 396ms) and a flood of 15 callers on r1 (94-447ms), a run of 621ms: the calm run used 0.81-0.84 of the limit against 0.8616, 3 runs of 3 (further seeds 59001-59250, on d5f77c6; b47c384 fails it too): the leaving-tenant shape of 55600, fixed with it; 6 runs of 6 pass; issue 43"},
	{812, "4 replicas x 6 callers on 3 per 3.41s, buffer 0, tenants t0 (weight 0.5, on every replica), t1 (r0 and r3), t2 (weight 3, on every replica, taken as light: at most 2 calls waiting in the fleet) and a light one, a run of 17s: a call of t2's waited 22.9s, over its bound of 22.17s, in 3 runs of 5,400 (and 7 of 1,200 with two wake changes since dropped). Every window's 3 units left at one instant, so a scan that came after t0's left saw t0 nowhere, or alone: it was not capped, took whole windows from the processes where only its calls waited, and its call held back by its cap since 0s went ahead of t2's in r0's fair order. Fixed: a scan counts the tenants whose calls wait in its process though none is in the window (markQueued), and the calls of the tenants not held to a cap go ahead of a capped tenant's (uncappedFirst); 600 runs of the wake changes' code, which failed 1 run in 50, all pass; issue 43"},
	{60797, "5 replicas x 6 callers on 7 per 11.2ms, FallbackLocal(1/R), HTTP callers: Redis stalled for 2.06s from 121ms, and r3's clock stepped +8.43s at 124ms (back at 158ms). A request of r3's held at a new connection took a new slot at 134.5ms, scored 8.43s ahead by the stepped clock; its round trip timed out in the stall, and the stalled server applied it after the two newer round trips that gave it back (owed.recheck), so the member stayed, 8.4s beyond reserve-ahead (9 runs of 20). What a failed round trip scored further ahead than reserve-ahead now goes again every Quiet until it counts nowhere (owed.far); 40 runs of 40 pass. Since 6a6b409 it goes again every 500ms for 5s after the first success (owed.farTail), or until it counts nowhere if sooner: with a window of an hour, giving back until then kept the worker sending for an hour; 20 runs of 20 pass"},
	{64760, "2 replicas x 6 callers on 2 per 31.4s, buffer 726ms, FallbackLocal(1/R); tenants t0 (steady on both), t1 and t2 (steady on r0), a flood of 12 callers on r0 from 30.9s to 1m49s and a light caller on r0: a light call of t2's waited 4m40s-7m15s against a bound of 4m25s (11 runs of 30 alone, on ce4bde6; found in the further seeds 64371-65370). A build that logged each round showed why: the flood's 12 calls, not capped while no scan had seen it, went ahead of t0's, t1's and t2's calls, which their caps held (uncappedFirst); once the flood was capped too, all were held, and heldLast kept each part's order, so the flood's calls stayed ahead of older calls with earlier start tags and took every other slot of r0's for minutes. Fixed: heldLast sorts the held calls in their fair order (the others keep theirs, for seed 812); 90 runs pass, TestHeldPartsMergeInFairOrder fails on the code before; issue 43"},
	{63877, "4 replicas x 3 callers on two limits (3362 per 2m33s, 4418 per 11m14s), at most 7 calls in flight (a lease of 17s, calls of up to 9.6s), settling, FailOpen; r3's next 4 requests applied and their replies lost from 2m18s: 8 calls in flight at once at 2m43s against 7 (3 runs of 20 alone, on ce4bde6; found in the further seeds 63371-64370). A build that logged r3's requests showed why: its renewal at 2m21.67 was applied and its reply lost, and the next two renewals never reached Redis (the handshakes of their new connections took the other lost replies); the next renewal, at 2m38.67, came as the leases lapsed, and found them gone. Meanwhile, at 2m35.37, r3's three waiters went on those places, whose last renewal known to be applied was 19s old. A waiter now goes on its place only within the ttl of the last round trip known to have granted or renewed it, else it gives it back and reserves again (leases.live); 80 runs pass, TestInFlightPlaceNotRenewedIsNotLive pins it; issue 43"},
	{66276, "4 replicas x 6 callers on 26 per 45m29s, buffer 58s, FailClosed, clock skews up to 4.2s, tenants t0 and t3 (every replica), t1 (r0-r2) and t2 (r0, r3), all backlogged, every window's slots freed at one instant: a call of t0's on r2 waited 3h58m, 5 windows, against a bound of 3h52m while t0 had its share (14 runs of 30, on the code of 8a6f9f7 too; found in the further seeds 65371-66370, on fd2b294). A build that logged each round showed r2's t0 calls placed a yield (capYield, 2m16s) past each window's burst, when every slot was taken again, and refused: when t0's cap fell from 7 to 6 r2 held none of t0's members, and the room the others freed stayed theirs first. A process that would hold less than its part of the cap takes that room at once, but the part was rounded down: 6/4 is 1, and none held plus a claim of 1 was not less. Fixed: the part is not rounded (TenantMembers.yield); 80 runs pass, TestYieldOnlyAtItsPart fails on the code before; issue 43"},
	{68690, "6 replicas x 25 callers on one place in flight (ttl 7s, calls of up to 2.98s), 1707 per 2.93s, FailOpen, two failovers to copies behind and a kill: a checker's bug, not the library's. 72 calls still waited for the place 66s after the traffic ended, and the hang check called it a hang; the place went from call to call every 1.3s (the calls' mean is 1.49s), and the last waiter got it 2m57s into the run. The bound on a hang allowed two calls' time for the place whatever the calls waiting for it: it now allows one turn per call running as the traffic ends, InFlight at a time (hangBound). 10 runs of 10 failed before, on 8a6f9f7's code too (found in the further seeds 68371-69370, on 6b65006); issue 43"},
}

// simOpen are seeds that found a bug not fixed yet. The CI set skips them,
// saying so; -sim.seed runs one. Each is in docs/simulator.md's open problems.
//
// None fails on every run: goroutines that run at the same virtual instant
// run in the order Go's scheduler picks, so a seed's trace can differ
// between runs; each must be run a few times to reproduce (seed 5046, now
// fixed: 6 failures in 20 runs).
var simOpen = []simCase{
	{752, "4 replicas on two limits (2431 per 4.78s and 1775 per 1.89s, buffer 2.2s), tenants t0-t2 with t2 leaving at 15.4s and a flood from 5.2s to 17.8s, FailOpen: the calm run used 0.7827 and 0.8092 of the limit against a target of 0.8128 in both CI-set runs of this session (on f9dd2d5, and with the planner's fix for 30688), where it passed in the CI runs of earlier sessions; alone it uses 0.857-0.968 (72 runs, up to 8 at once, before and after f9dd2d5), and passed 2 runs of 700-799 together. Not attributed; the water-filling of f9dd2d5 is a suspect. -sim.traces keeps the trace of such a run; issue 43"},
	{37551, "3 replicas x 16 callers on 2017 per 7.75s, priorities, tenants t0-t3 steady and a flood of 20 callers on every replica from 5.35s to 13.92s, a cold fleet and delayed requests on r1: in the further seeds' run (37501-37750) the livelock watchdog fired, 5,001 requests from r1 within one virtual millisecond at 15.49s, by its trace a capped tenant's claim refused and claimed again at once (the tenants' claims at 15.45-15.48s all placed ahead, at 15.60-15.63s). It has not come back since: 188 runs alone and beside its neighbours with a build logging every round, 3 runs on the tree of 45216's fix. Not attributed; issue 43"},
	{77308, "6 replicas x 3 callers on 507 per 41.0ms, buffer 1.3ms, tenants t0 everywhere and t1 on r1 and r4 until 69.8ms, a run of 137.8ms, every window's calls in one burst: the calm run used 0.862-0.877 of the limit against 0.901 (18 runs of 20 on c052ec0, 38 of 40 on 71df11b; found in the further seeds 76361-77360). Attributed: t1's room (237 units free at the burst of 84.6ms, t0 held to its cap of 248) went to t0 13.1ms later, at the second scan that saw t1 short, scans coming at least 25ms apart (0.6 of this window); the target allows nothing for the two-scan rule. Not fixed: docs/simulator.md; issue 43"},
	{80677, "2 replicas x 24 callers on 816 per 53.2ms, buffer 0.86ms, FallbackLocal(1/R), settled costs, cancels, compacted windows, tenants t0 and t1 (weight 3, until 203.9ms), r0's clock stepped by 6.75s at 30ms, a cold fleet and r1's requests delayed up to 1.15s from 141.7ms: the safety check found a member scored at 6.804s, beyond reserve-ahead (53ms). Found in the further seeds 80361-81360 on 71df11b (1 run of 10 there); it fails on c052ec0 too (5 runs of 30), so it predates 71df11b. Not attributed yet; issue 43"},
	{30704, "tenants t0, t1, t2 backlogged at weights 3, 2 and 0.5, a light tenant with calls of up to 90 units on r0, 4 replicas on 2963 per 8m41s, clocks skewed up to 3.3s, FallbackLocal: a light call of 61 units waited 34m33s, past the bound of 27m49s, in the further seeds' run (passes alone, 2 runs of 2); not yet attributed; issue 43"},
}

// simFoundBeforeClockFaults are the seeds of simRegressions and simOpen
// found before the simulator drew faults on the clock estimate (delayed
// requests, delays drawn per round trip, cold starts: see sim.Generate).
// Those faults came on a share of the seeds, from a source of their own,
// leaving every other draw as it was; these seeds run without them, in the
// world they were found in, so that they still reproduce what they found.
// A seed found later runs with whatever it drew.
var simFoundBeforeClockFaults = []uint64{8, 11, 14, 20, 31, 35, 37, 57, 63, 64, 66, 85, 153, 242, 310,
	377, 406, 663, 762, 803, 1230, 1401, 2370, 2996}

// simFoundBeforeConnSetup are the seeds of simRegressions and simOpen
// that draw the connection-setup fault (sim.ConnSetup) but were found
// before it existed: they run without it and its HTTP callers, in the
// world they were found in (the fault draws from a source of its own,
// and leaves every other draw as it was).
var simFoundBeforeConnSetup = []uint64{1, 66, 174, 390, 567, 762, 803, 875, 1230, 4149, 8891, 10793, 12197}

// simFoundBeforeTenants are the seeds of simRegressions that draw
// tenants (sim.Tenant) but were found before they existed: they run
// without them, in the world they were found in (the tenants draw from a
// source of their own, and leave every other draw as it was).
var simFoundBeforeTenants = []uint64{8, 32, 55, 63, 64, 242, 384, 406, 663, 875, 1307, 1401, 1934, 2840, 4149,
	5268, 5669, 6384, 18728, 21200, 30244, 30269}

// simScenario is seed's scenario as TestSimulation runs it.
func simScenario(seed uint64) sim.Scenario {
	sc := sim.Generate(seed)
	if slices.Contains(simFoundBeforeClockFaults, seed) {
		sc = sc.WithoutClockFaults()
	}
	if slices.Contains(simFoundBeforeConnSetup, seed) {
		sc = sc.WithoutConnSetup()
	}
	if slices.Contains(simFoundBeforeTenants, seed) {
		sc = sc.WithoutTenants()
	}
	return sc
}

// simCISet is how many seeds, from 1, make the CI seed set. Any run of
// ten consecutive seeds schedules every fault kind of the cycle, and the
// faults on the clock estimate come on a share of the seeds (see
// sim.Generate).
const simCISet = 1000

// TestSimulation runs the seeds the flags name. Without flags it runs the
// regression seeds only, so that a plain go test stays a few minutes long;
// with -sim.ci, the CI seed set: seeds 1 to 1,000, and the regression seeds
// found beyond. Under the race detector, which makes each run several
// times slower, it runs every third regression seed, with or without
// -sim.ci: CI runs all of them, and the whole set, in a run of its own
// without it (see .ci/run).
func TestSimulation(t *testing.T) {
	first, n := *simFirst, uint64(*simSeeds)
	if *simSeed != 0 {
		first, n = *simSeed, 1
	}
	if n == 0 && (raceEnabled || !*simCI) {
		for i, r := range simRegressions {
			if raceEnabled && i%3 != 0 {
				continue
			}
			t.Run(fmt.Sprint(r.seed), func(t *testing.T) {
				t.Parallel()
				runSimulation(t, simScenario(r.seed), false)
			})
		}
		return
	}
	if n == 0 {
		first, n = 1, simCISet
	}
	// The runs are mostly miniredis sorting sets: fewer collections make
	// the set some 12% faster, for some 150MB at most.
	gc := debug.SetGCPercent(400)
	t.Cleanup(func() { debug.SetGCPercent(gc) })
	// In batches of the CI set's size, so that a long run holds a
	// thousand parallel subtests at a time, not a goroutine per seed.
	for batch := first; batch < first+n; batch += simCISet {
		last := min(first+n, batch+simCISet) - 1
		t.Run(fmt.Sprintf("%d-%d", batch, last), func(t *testing.T) {
			for seed := batch; seed <= last; seed++ {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					if i := slices.IndexFunc(simOpen, func(o simCase) bool { return o.seed == seed }); i >= 0 && *simSeed == 0 {
						t.Skipf("open bug, not fixed yet: %s", simOpen[i].bug)
					}
					t.Parallel()
					runSimulation(t, simScenario(seed), *simSeed != 0)
				})
			}
		})
	}
	if *simSeeds == 0 && *simSeed == 0 {
		t.Run("regressions", func(t *testing.T) {
			for _, r := range simRegressions {
				if r.seed > simCISet {
					t.Run(fmt.Sprint(r.seed), func(t *testing.T) {
						t.Parallel()
						runSimulation(t, simScenario(r.seed), false)
					})
				}
			}
		})
	}
}

// runSimulation runs one scenario in a bubble and checks it. A seed still
// running after -sim.wall of wall time ends the whole run, naming the seed,
// with every goroutine's stack: a world whose virtual time creeps on
// without a flood of requests (which the network's watchdog would name)
// would otherwise run on unnamed until go test's timeout, or for ever
// under -timeout 0.
func runSimulation(t *testing.T, sc sim.Scenario, verbose bool) {
	if *simWall > 0 {
		start := time.Now()
		stuck := time.AfterFunc(*simWall, func() {
			buf := make([]byte, 64<<20)
			buf = buf[:runtime.Stack(buf, true)]
			panic(fmt.Sprintf("seed %d: still running after %s of wall time (-sim.wall); run it alone with -sim.seed %d\n%s\n\n%s",
				sc.Seed, time.Since(start).Round(time.Second), sc.Seed, sc, buf))
		})
		defer stuck.Stop()
	}
	synctest.Test(t, func(t *testing.T) {
		w := newSimWorld(t, sc)
		defer w.close()
		w.run()
		if msg := w.net.Livelock(); msg != "" {
			// Every request failed since: the checks would only count
			// the failures.
			t.Errorf("seed %d: %s", sc.Seed, msg)
		} else {
			w.check()
		}
		if verbose || t.Failed() {
			t.Logf("%s\n%s\nfaults: %s", sc, w.summary(), strings.Join(sc.FaultLines(), "; "))
		}
		if t.Failed() {
			t.Logf("replay: go test -run '^TestSimulation$' -sim.seed %d -v .", sc.Seed)
			w.writeTrace(*simTrace)
			for _, r := range simRegressions {
				if r.seed == sc.Seed {
					t.Logf("seed %d once found: %s", r.seed, r.bug)
				}
			}
		}
		if verbose {
			for _, e := range w.rec.Events() {
				t.Log(e)
			}
		}
	})
}

// writeTrace writes the run's summary and trace to seed-N.txt in dir,
// unless dir is "".
func (w *simWorld) writeTrace(dir string) {
	if dir == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\nfaults: %s\n", w.sc, w.summary(), strings.Join(w.sc.FaultLines(), "; "))
	for _, e := range w.rec.Events() {
		fmt.Fprintln(&b, e)
	}
	path := filepath.Join(dir, fmt.Sprintf("seed-%d.txt", w.sc.Seed))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		w.t.Errorf("writing the trace: %v", err)
		return
	}
	w.t.Logf("trace written to %s", path)
}

// simWorld is one run: the store, the network, the replicas and their
// callers, and what they were admitted.
type simWorld struct {
	t     *testing.T
	sc    sim.Scenario
	store *sim.Store
	net   *sim.Network
	rec   *sim.Recorder
	tl    sim.TenantLog     // the calls of tenants (sc.Tenants)
	names map[string]string // by tag (redisstore.TenantTag), each tenant's name, for the trace
	api   *sim.API          // where HTTP callers' requests go (nil: no HTTP callers)
	reps  []*simReplica     // each replica's process now
	old   []*simReplica     // processes replaced by a restart (ColdStart)
	lost  atomic.Bool       // Redis lost the window (a flush, a failover to a copy behind)

	stop   chan struct{}      // closed when the run's traffic ends
	ctx    context.Context    // every call's parent: cancelled to unstick a hung run
	cancel context.CancelFunc // cancels ctx
	wg     sync.WaitGroup     // callers

	mu          sync.Mutex
	outstanding map[*simCall]struct{}
	errs        map[string]int // call outcomes that were not admissions, by kind
	longest     time.Duration  // the longest wait of a call without deadline
	// Calls holding a place in flight (WithInFlight) now, the most at
	// once, and when.
	calls, mostCalls int
	mostCallsAt      time.Duration
}

// simReplica is one replica process: its clock, client, Throttler and the
// members it holds in Redis as far as its hooks tell. A replica's first
// process is numbered as the replica; one that replaces it after a restart
// (ColdStart) takes the number its fault gives, after the replicas'.
type simReplica struct {
	id    int // the process's number: in the trace, and its admissions'
	link  int // the replica it runs as: its machine's clock and network link
	clock *sim.Clock
	rdb   *redis.Client
	th    *Throttler
	// HTTP callers' clients (with a sim.API): through a Transport on th,
	// and straight to the API (Do's function's).
	transport, plain *http.Client
	dead             atomic.Bool
	// FailOpen's exemption: the replica is, or was, degraded.
	degraded atomic.Bool
	flips    atomic.Int64
	// docs/guarantees.md's limit on healing a lost window: a process that made no
	// round trip before Redis lost the window (one started after it), or
	// none of whose calls a failover to a copy behind lost, cannot tell
	// the loss from a new key, and its calls may exceed the limit until it
	// learns of the heal's pause.
	blind atomic.Bool
	// The same limit for a process idle across the loss: one whose last
	// round trip that vouched for the key came a whole key TTL or more
	// before its next one cannot tell the missing marker from a key that
	// expired (seed 1934). From this server time on (µs; 0: none), until it
	// learns of the heal's pause, its calls are exempt.
	idleBlind atomic.Int64

	mu       sync.Mutex
	admitted map[string]int64 // members admitted through Redis and not given back, by score
	// The calls of the replica's that a loss took and that it still held
	// then (nil: none, or it has learned of the heal's pause): one that
	// has given them all back since, or whose lost calls all stopped
	// counting, holds no call that could tell it of the loss, as one none
	// of whose calls were lost (see blind; seed 547).
	lostHeld map[string]bool

	flights map[*simFlight]struct{} // its calls holding a place in flight, guarded by simWorld.mu
}

// simFlight is a call holding a place in flight, counted until it ends.
type simFlight struct {
	lease string
	ended bool
	lapse *time.Timer // its killed process's lease lapses
}

// simCall is a call in progress, for the report of a hang.
type simCall struct {
	replica int
	what    string // "WaitN", or how an HTTP call went
	n       int
	start   time.Duration
	limit   time.Time // the deadline, or zero
}

func newSimWorld(t *testing.T, sc sim.Scenario) *simWorld {
	ctx, cancel := context.WithCancel(context.Background())
	w := &simWorld{t: t, sc: sc, store: sim.NewStore(), rec: sim.NewRecorder(),
		stop: make(chan struct{}), ctx: ctx, cancel: cancel,
		outstanding: map[*simCall]struct{}{}, errs: map[string]int{}, names: tenantNames(sc)}
	w.net = sim.NewNetwork(w.store, sc.Replicas)
	w.net.SetLatency(sc.Latency)
	w.net.Seed(sc.Seed)
	if sc.Send+sc.SendDo > 0 {
		w.api = sim.NewAPI(w.rec, sc.Replicas, sc.APIOneWay, sc.Seed)
	}
	for i := range sc.Replicas {
		w.reps = append(w.reps, w.newReplica(i, i, 0, sim.NewClock(sc.Skew[i])))
	}
	return w
}

// newReplica starts process id, replica link's gen-th, on the machine's
// clock.
func (w *simWorld) newReplica(link, id, gen int, clock *sim.Clock) *simReplica {
	sc := w.sc
	i := id
	r := &simReplica{id: id, link: link, clock: clock, admitted: map[string]int64{}}
	r.rdb = redis.NewClient(&redis.Options{
		// An IP literal: go-redis resolves a host name in NewClient, and a
		// DNS lookup cannot run in the bubble. The Dialer ignores it.
		Addr: "127.0.0.1:6379",
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return w.net.Dial(link, gen)
		},
		ContextTimeoutEnabled: sc.CtxClient[link],
		// No identity handshake: miniredis answers HELLO, but a real
		// replica's CLIENT SETINFO would only add noise to the trace.
		DisableIdentity: true,
	})
	opts := []Option{
		WithBuffer(sc.Buffer),
		WithClock(r.clock.Now),
		WithLogger(slog.New(&traceHandler{rec: w.rec, replica: i})),
		WithObserver(Observer{
			Degraded: func(on bool) {
				r.degraded.Store(on)
				r.flips.Add(1)
				w.rec.Note(i, "degraded=%v (%s)", on, sc.Policy)
			},
			Paused: func(until time.Time) {
				r.blind.Store(false)
				r.idleBlind.Store(0)
				r.mu.Lock()
				r.lostHeld = nil
				r.mu.Unlock()
				w.rec.Note(i, "paused until %s local", until.Format("15:04:05.000000"))
			},
			LimitChanged: func(limit int) {
				w.rec.Note(i, "limit in force now %d", limit)
			},
		}),
	}
	if sc.Ahead >= 0 {
		opts = append(opts, WithReserveAhead(sc.Ahead))
	}
	if sc.Timeout > 0 {
		opts = append(opts, WithRedisTimeout(sc.Timeout))
	}
	switch sc.Policy {
	case sim.FailOpen:
		opts = append(opts, WithFailurePolicy(FailOpen()))
	case sim.FallbackLocal:
		opts = append(opts, WithFailurePolicy(FallbackLocal(1/float64(sc.Replicas))))
	}
	for _, l := range sc.Limits[1:] {
		opts = append(opts, WithLimit(l.Key, l.Limit, l.Interval))
	}
	if sc.InFlight > 0 {
		opts = append(opts, WithInFlight(simInFlightKey, sc.InFlight, sc.LeaseTTL))
	}
	if sc.Priorities {
		opts = append(opts, WithPriorityShare(PriorityLow, sc.LowShare))
	}
	opts = append(opts, w.tenantOptions()...)
	if len(sc.CompactFrom) > 0 {
		// A restarted process (numbered after the replicas) compacts as
		// the first replica does.
		from := sc.CompactFrom[min(i, len(sc.CompactFrom)-1)]
		opts = append(opts, func(o *options) error {
			o.compact = compactOptions{from: from, buckets: sc.Buckets, keep: sc.Keep}
			return nil
		})
	}
	l := sc.Limits[0]
	th, err := New(r.rdb, l.Key, l.Limit, l.Interval, opts...)
	if err != nil {
		w.t.Fatalf("New: %v", err)
	}
	start := w.rec.Start()
	// The library's own randomness drawn from the seed: a replay makes
	// the same choices.
	th.worker.rng = rand.New(rand.NewPCG(uint64(sc.Seed), uint64(i)))
	// A subscription polls for Close every 250ms, and each poll costs real
	// time here: seed 216 (callers queued for 63 virtual hours) took 115s
	// of it, and 6s with a poll of a minute. Close may take a virtual
	// minute here.
	th.st.(*redisstore.Store).Poll = time.Minute
	th.hooks.onAdmit = func(score int64, members []string) {
		r.mu.Lock()
		for _, m := range members {
			r.admitted[m] = score
		}
		r.mu.Unlock()
		w.rec.Note(i, "reserved n=%d at score %s%s%s", len(members), time.UnixMicro(score).Sub(start), placed(th, r.clock, score), w.tenantNote(members[0]))
	}
	if w.api != nil {
		base := w.api.Base(id, link, func() bool { return !r.dead.Load() })
		r.transport = &http.Client{Transport: &Transport{Route: th.Route(), Base: base}}
		r.plain = &http.Client{Transport: base}
	}
	th.hooks.onRelease = func(members []string) {
		r.mu.Lock()
		for _, m := range members {
			delete(r.admitted, m)
		}
		r.mu.Unlock()
		w.rec.Note(i, "gave back n=%d", len(members))
	}
	r.th = th
	return r
}

// placed says where th's estimate of the server's clock places a call
// scored at score: when, on the server's clock, the local time it converts
// the score to comes (on the local clock as it is now), if that is off the
// score by 100µs or more. The simulation knows the true offset: the
// server's clock is the bubble's, a replica's is off it by its skew.
func placed(th *Throttler, clock *sim.Clock, score int64) string {
	off := time.Duration(th.clock.Local(score).Add(-clock.Skew()).UnixMicro()-score) * time.Microsecond
	switch {
	case off >= 100*time.Microsecond:
		return fmt.Sprintf(" (the clock estimate sends it %s late)", off)
	case off <= -100*time.Microsecond:
		return fmt.Sprintf(" (the clock estimate sends it %s early)", -off)
	}
	return ""
}

// run starts the callers and the faults, ends the traffic at the scenario's
// end and waits for every call to return.
func (w *simWorld) run() {
	sc := w.sc
	// A fleet's cold start acts from the first round trip on, and a
	// connection-setup fault at 0 from the first request.
	for _, f := range sc.Faults {
		switch {
		case f.Kind == sim.ColdFleet:
			w.rec.Note(sim.World, "FAULT %s", f)
			for i := range sc.Replicas {
				w.net.Load(i, f.Span, f.D)
			}
		case f.Kind == sim.ConnSetup && f.At == 0:
			w.rec.Note(sim.World, "FAULT %s", f)
			w.apply(f)
		}
	}
	for _, r := range w.reps {
		w.startCallers(r)
	}
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		w.inject()
	}()
	time.Sleep(sc.Run)
	close(w.stop)
	w.rec.Note(sim.World, "traffic ends")
	<-faults

	w.mu.Lock()
	waiting := len(w.outstanding)
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	bound := w.hangBound(waiting)
	select {
	case <-done:
	case <-time.After(bound):
		w.mu.Lock()
		var lines []string
		for c := range w.outstanding {
			lines = append(lines, fmt.Sprintf("  r%d %s(%d) since %s, deadline %v", c.replica, c.what, c.n, c.start, !c.limit.IsZero()))
		}
		w.mu.Unlock()
		slices.Sort(lines)
		w.t.Errorf("hang: %d calls still running %s after the traffic ended:\n%s", len(lines), bound, strings.Join(lines, "\n"))
		w.cancel()
		<-done
	}
}

// startCallers starts r's callers.
func (w *simWorld) startCallers(r *simReplica) {
	for g := range w.sc.Goroutines {
		rng := rand.New(rand.NewPCG(w.sc.Seed, uint64(r.id*1000+g)))
		via := simViaWait
		if w.api != nil {
			// From a source of its own: the caller's own draws stay.
			switch x := rand.New(rand.NewPCG(w.sc.Seed, 0x68747470<<16|uint64(r.id*1000+g))).Float64(); {
			case x < w.sc.Send:
				via = simViaTransport
			case x < w.sc.Send+w.sc.SendDo:
				via = simViaDo
			}
		}
		w.wg.Go(func() { w.caller(r, rng, via, simWho{g: g}) })
	}
	w.startTenants(r)
}

// simVia is how a caller makes its calls.
type simVia int

const (
	simViaWait      simVia = iota // WaitN, AllowN or Acquire, then the call at once
	simViaTransport               // an HTTP request through a Transport on its Throttler
	simViaDo                      // Do, whose function makes an HTTP request with Do's context
)

func (v simVia) String() string { return [...]string{"WaitN", "Transport", "Do"}[v] }

// hangBound is how long calls may still run once traffic ends, waiting
// calls then waiting for their admission: the longest wait a call may
// have (see maxWait) plus a Redis timeout for each retry.
//
// With a cap on calls in flight, a waiter may also wait out the places
// the cap holds: a place whose give-back Redis did not take (a cut
// connection) or whose holder was killed, until its lease expires
// (LeaseTTL), plus a third of it for a wake lost with a dead process
// (seed 91: a place left to expire for 27s); and the calls of up to
// CallTime each that hold the places in turn: those holding them as the
// traffic ends (a turn), then the waiting ones, InFlight at a time. (Two turns
// were allowed whatever the calls waiting: seed 68690, 150 callers on one
// place and calls of up to 2.98s, had 72 calls still waiting 66s after
// the traffic ended, one place handed on every 1.3s.)
func (w *simWorld) hangBound(waiting int) time.Duration {
	b := w.maxWait() + 10*w.redisTimeout() + 10*time.Second
	if sc := w.sc; sc.InFlight > 0 {
		turns := 1 + (waiting+sc.InFlight-1)/sc.InFlight
		b += sc.LeaseTTL + sc.LeaseTTL/3 + time.Duration(max(2, turns))*sc.CallTime
	}
	return b
}

func (w *simWorld) redisTimeout() time.Duration {
	if w.sc.Timeout > 0 {
		return w.sc.Timeout
	}
	return time.Second
}

// caller makes calls until the traffic ends, its replica dies or it has
// made its share of the run's calls: a few times what the limits can admit
// in the run, so that a policy that admits without limit (FailOpen) cannot
// make a run endless. An admitted call then takes up to the spacing of the
// limit (the API call itself), so that no caller spins in zero virtual
// time, while the callers together still ask for more than the limit.
//
// Except in a calm run with fewer callers than a limit: there each caller
// serves several slots of every window in turn, and a call that takes
// longer than the gap to its caller's next slot leaves that slot unasked
// for, so the workload, not the library, would decide the utilization the
// run is held to (seed 728: one caller, 3 per 62ms, used 0.966 of its
// quota). There admitted calls take no time: every call waits for a slot,
// so none spins.
func (w *simWorld) caller(r *simReplica, rng *rand.Rand, via simVia, who simWho) {
	sc := w.sc
	if !w.tenantArrives(who) {
		return
	}
	spacing := max(time.Microsecond, sc.W()/time.Duration(sc.Limits[0].Limit))
	callTime := spacing
	if sc.Calm() && sc.Replicas*sc.Goroutines < sc.MaxLimit() {
		callTime = 0
	}
	if sc.InFlight > 0 {
		callTime = sc.CallTime
	}
	for range w.budget() {
		select {
		case <-w.stop:
			return
		default:
		}
		if r.dead.Load() || w.tenantLeft(who) {
			return
		}
		n := 1 + rng.IntN(sc.MaxN)
		if via != simViaWait {
			n = 1 // a request is a call
		}
		ctx, tenant, start := w.ctx, w.tenantOf(r, who), w.rec.Since()
		if tenant != "" {
			ctx = ContextWithTenant(ctx, tenant)
		}
		if sc.Priorities {
			ctx = ContextWithPriority(ctx, w.priority(r, n, rng))
		}
		admitted, end := false, func() {}
		switch {
		case via != simViaWait:
			admitted = w.send(ctx, r, via, rng)
		case rng.Float64() < sc.Allow:
			admitted = w.allow(ctx, r, n, spacing)
		default:
			admitted, end = w.wait(ctx, r, n, rng)
		}
		w.tenantCall(r, tenant, start, n, admitted)
		if admitted && callTime > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(callTime))))
		}
		end()
		if !w.tenantPause(who, rng) {
			return
		}
		if sc.Think > 0 {
			// Not past the traffic's end: a think time of half an hour
			// begun just before it would outlast the bound on a hang
			// (seed 4149: 0 calls running after an hour).
			think := time.NewTimer(time.Duration(rng.Int64N(int64(sc.Think))))
			select {
			case <-think.C:
			case <-w.stop:
				think.Stop()
				return
			}
		}
	}
}

// budget is how many calls one caller makes at most.
func (w *simWorld) budget() int {
	sc := w.sc
	units := float64(sc.Limits[0].Limit) * (float64(sc.Run)/float64(sc.W()) + 1)
	calls := 4 * units / (float64(sc.MaxN+1) / 2)
	return 2 + int(calls)/(sc.Replicas*sc.Goroutines)
}

// priority draws a call's priority: low only when n fits low's share of
// every limit, as r's Throttler checks it.
func (w *simWorld) priority(r *simReplica, n int, rng *rand.Rand) Priority {
	p := Priority(rng.IntN(3) - 1)
	if p == PriorityLow && r.th.checkN("WaitN", n, p) != nil {
		return PriorityNormal
	}
	return p
}

func (w *simWorld) allow(ctx context.Context, r *simReplica, n int, spacing time.Duration) bool {
	flips, wasDegraded := r.flips.Load(), r.degraded.Load()
	res, err := r.th.AllowN(ctx, n)
	switch {
	case err != nil:
		w.outcome(r, err)
		time.Sleep(spacing)
	case res.Allowed:
		w.admit(r, n, 0, flips, wasDegraded, false)
		return true
	default:
		w.count("allow refused")
		time.Sleep(max(res.RetryAfter, spacing))
	}
	return false
}

// wait makes one WaitN, or a Acquire when the call settles or holds a place
// in flight; end is called when the call is over.
func (w *simWorld) wait(ctx context.Context, r *simReplica, n int, rng *rand.Rand) (admitted bool, end func()) {
	end = func() {}
	sc := w.sc
	ctx, cancel := w.callContext(ctx, rng)
	defer cancel()
	c := &simCall{replica: r.id, what: "WaitN", n: n, start: w.rec.Since()}
	c.limit, _ = ctx.Deadline()
	w.mu.Lock()
	w.outstanding[c] = struct{}{}
	w.mu.Unlock()
	flips, wasDegraded := r.flips.Load(), r.degraded.Load()
	var (
		permit *Permit
		err    error
	)
	settling := rng.Float64() < sc.Settle
	if settling || sc.InFlight > 0 {
		permit, err = r.th.Acquire(ctx, n)
	} else {
		err = r.th.WaitN(ctx, n)
	}
	waited := w.rec.Since() - c.start
	w.mu.Lock()
	delete(w.outstanding, c)
	if err == nil && c.limit.IsZero() && ctx.Err() == nil {
		// A fleet's cold start slows the calls made during it: a calm
		// run's bound holds from its end (see checkProgress).
		w.longest = max(w.longest, w.rec.Since()-max(c.start, w.startCost()))
	}
	w.mu.Unlock()
	if err != nil {
		w.outcome(r, err)
		return false, end
	}
	if permit != nil && permit.lease != "" && !r.dead.Load() {
		// A killed process's callers make no calls (see admit).
		end = w.inFlight(r, permit)
	}
	if !settling {
		w.admit(r, n, waited, flips, wasDegraded, c.limit.IsZero())
		return true, end
	}
	// A cost known after the call: anywhere from nothing to twice the
	// estimate. What the call held within its estimate counts against the
	// limit; an excess is debt, which the guarantee lets a window exceed
	// the limit by (see Permit.Settle): the invariant skips it, the
	// utilization counts it.
	actual := rng.IntN(2*n + 1)
	if held := min(actual, n); held > 0 {
		w.admit(r, held, waited, flips, wasDegraded, c.limit.IsZero())
	}
	if debt := actual - n; debt > 0 && !r.dead.Load() {
		w.rec.Admit(sim.Admission{Replica: r.id, N: debt, Debt: true})
	}
	settle := func() {
		if err := permit.Settle(w.ctx, actual); err != nil && !errors.Is(err, ErrRedis) {
			w.t.Errorf("r%d: Settle failed with an undocumented error: %v", r.id, err)
		}
	}
	if sc.InFlight == 0 {
		settle()
		return true, end
	}
	// With a cap, the call ends when it is settled.
	ended := end
	return true, func() {
		ended()
		if !r.dead.Load() {
			settle()
		}
	}
}

// callContext draws a call's deadline or cancellation; cancel releases
// them.
func (w *simWorld) callContext(ctx context.Context, rng *rand.Rand) (_ context.Context, cancel func()) {
	sc := w.sc
	if rng.Float64() < sc.Deadline {
		return context.WithTimeout(ctx, time.Duration(rng.Int64N(int64(2*sc.W())+1)))
	}
	if rng.Float64() < sc.Cancel {
		ctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(time.Duration(rng.Int64N(int64(2*sc.W())+1)), cancel)
		return ctx, func() { timer.Stop(); cancel() }
	}
	return ctx, func() {}
}

// send makes one call as an HTTP request to the API: through r's
// Transport, or with Do, whose function sends it straight to the API's
// transport with the context Do passes (so that whatever Do puts there,
// net/http sees). Each write of the request is recorded as an arrival at
// the API, whatever the caller was told (a request written and then
// abandoned still reached the API), unless the process died before it.
func (w *simWorld) send(ctx context.Context, r *simReplica, via simVia, rng *rand.Rand) (admitted bool) {
	ctx, cancel := w.callContext(ctx, rng)
	defer cancel()
	c := &simCall{replica: r.id, what: via.String(), n: 1, start: w.rec.Since()}
	c.limit, _ = ctx.Deadline()
	w.mu.Lock()
	w.outstanding[c] = struct{}{}
	w.mu.Unlock()
	flips, wasDegraded := r.flips.Load(), r.degraded.Load()
	call := &sim.HTTPCall{}
	ctx = sim.WithHTTPCall(ctx, call)
	var err error
	switch via {
	case simViaTransport:
		err = simGet(ctx, r.transport)
	case simViaDo:
		err = r.th.Do(ctx, func(ctx context.Context) error { return simGet(ctx, r.plain) })
	}
	waited := w.rec.Since() - c.start
	w.mu.Lock()
	delete(w.outstanding, c)
	w.mu.Unlock()
	handed, _ := call.Handed()
	fellBack := wasDegraded || r.degraded.Load() || r.flips.Load() != flips
	for _, at := range call.Wrote() {
		w.rec.Arrived(sim.Admission{At: handed, Arrive: at + w.api.OneWay(), Replica: r.id, N: 1,
			Waited: waited, NoLimit: c.limit.IsZero(), Debt: simSentAsDebt(call),
			Exempt: w.sc.Policy == sim.FailOpen && fellBack || r.isBlind(),
			Local:  w.sc.Policy == sim.FallbackLocal && fellBack})
	}
	switch {
	case err != nil && r.dead.Load():
		return false // a killed process's callers are gone: what they see is no one's
	case err != nil:
		w.outcome(r, err)
		return false
	}
	return true
}

// simGet sends a GET to the API through client, with ctx, and closes the
// answer's body.
func simGet(ctx context.Context, client *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.sim/call", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// simInFlightKey is the key of WithInFlight's places.
const simInFlightKey = "{sim}:inflight"

// inFlight counts a call holding a place in flight, from now until the
// end it returns is called: the call is over at the API then, even if
// its replica was killed meanwhile (it then gives nothing back). Or until
// the killed replica's lease lapses, if sooner (see kill): WithInFlight
// states that a killed process loses its places at most ttl after its
// last renewal, so a call it left running at the API longer than that is
// not the cap's (seed 1723: a call of 32s, a ttl of 27s, granted 3s before
// the kill and not renewed since). The most calls in flight at once is
// checked against the cap.
func (w *simWorld) inFlight(r *simReplica, p *Permit) (end func()) {
	f := &simFlight{lease: p.lease}
	w.mu.Lock()
	w.calls++
	now := w.calls
	if w.calls > w.mostCalls {
		w.mostCalls, w.mostCallsAt = w.calls, w.rec.Since()
	}
	if r.flights == nil {
		r.flights = map[*simFlight]struct{}{}
	}
	r.flights[f] = struct{}{}
	w.mu.Unlock()
	w.rec.Note(r.id, "call in flight (%d at once)", now)
	return func() {
		w.endFlight(r, f)
		if !r.dead.Load() {
			p.Done()
		}
	}
}

// endFlight stops counting f, once.
func (w *simWorld) endFlight(r *simReplica, f *simFlight) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !f.ended {
		f.ended = true
		w.calls--
	}
	if f.lapse != nil {
		f.lapse.Stop()
	}
	delete(r.flights, f)
}

// kill marks r's process dead: its calls in flight stop counting when
// their leases lapse, as the store holds them now (a renewal still on its
// way can only make them last longer), or at once if they are gone.
func (w *simWorld) kill(r *simReplica) {
	r.dead.Store(true)
	expiry := map[string]time.Time{}
	for _, m := range w.store.Members(simInFlightKey) {
		expiry[m.Name] = time.UnixMicro(int64(m.Score))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for f := range r.flights {
		f.lapse = time.AfterFunc(max(0, time.Until(expiry[f.lease])), func() { w.endFlight(r, f) })
	}
}

// admit records an admission, unless the replica is dead: a killed
// process's callers make no calls.
func (w *simWorld) admit(r *simReplica, n int, waited time.Duration, flips int64, wasDegraded, noDeadline bool) {
	if r.dead.Load() {
		return
	}
	// Admitted while the replica fell back, or may have: FailOpen's calls
	// count nowhere, FallbackLocal's against the replica's share.
	// A process blind to a lost window (see simReplica.blind) is exempt
	// as docs/guarantees.md states.
	fellBack := wasDegraded || r.degraded.Load() || r.flips.Load() != flips
	w.rec.Admit(sim.Admission{Replica: r.id, N: n, Waited: waited, NoLimit: noDeadline,
		Exempt: w.sc.Policy == sim.FailOpen && fellBack || r.isBlind(),
		Local:  w.sc.Policy == sim.FallbackLocal && fellBack})
}

// outcome checks that a call that was not admitted failed as documented.
func (w *simWorld) outcome(r *simReplica, err error) {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		w.count("deadline")
	case errors.Is(err, context.Canceled):
		w.count("cancelled")
	case errors.Is(err, ErrRedis):
		w.count("ErrRedis")
	case errors.Is(err, ErrInvalidArgument) && strings.Contains(err.Error(), "lowered"):
		w.count("over a lowered limit")
	default:
		w.t.Errorf("r%d: a call failed with an undocumented error: %v", r.id, err)
	}
	if !r.dead.Load() {
		w.rec.Note(r.id, "call failed: %v", err)
	}
}

func (w *simWorld) count(what string) {
	w.mu.Lock()
	w.errs[what]++
	w.mu.Unlock()
}

// inject applies the scenario's events at their times.
func (w *simWorld) inject() {
	type step struct {
		at time.Duration
		do func()
	}
	var steps []step
	for _, f := range w.sc.Faults {
		f := f
		switch f.Kind {
		case sim.ColdFleet:
			continue // armed before the callers start (see run)
		case sim.ConnSetup:
			if f.At == 0 {
				continue // likewise
			}
			steps = append(steps, step{f.At, func() { w.apply(f) }})
		case sim.Failover:
			var snap sim.Snapshot
			steps = append(steps,
				step{max(0, f.At-f.Lag), func() {
					snap = w.store.Snapshot()
					w.rec.Note(sim.World, "the copy failover will use syncs for the last time")
				}},
				step{f.At, func() {
					before := w.callMembers()
					w.net.CloseAll()
					w.store.Restore(snap)
					w.loseSome(before)
				}})
		default:
			steps = append(steps, step{f.At, func() { w.apply(f) }})
		}
		steps[len(steps)-1].do = func(do func()) func() {
			return func() { w.rec.Note(sim.World, "FAULT %s", f); do() }
		}(steps[len(steps)-1].do)
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	for _, s := range steps {
		if d := s.at - w.rec.Since(); d > 0 {
			time.Sleep(d)
		}
		s.do()
	}
}

func (w *simWorld) apply(f sim.Fault) {
	if f.Kind == sim.ConnSetup {
		// On the link of a replica (its machine's), or of every one.
		for i := range w.sc.Replicas {
			if f.Replica == sim.World || f.Replica == i {
				w.api.ConnSetup(i, f.Span, f.D, f.K)
			}
		}
		return
	}
	r := w.reps[f.Replica]
	switch f.Kind {
	case sim.Delay:
		if f.Jitter {
			w.net.JitterReplies(f.Replica, f.Span, f.D)
		} else {
			w.net.DelayReplies(f.Replica, f.Span, f.D)
		}
	case sim.DelayRequests:
		w.net.DelayRequests(f.Replica, f.Span, f.D, f.Jitter)
	case sim.ColdStart:
		w.restart(f)
	case sim.DropBefore:
		w.net.DropBefore(f.Replica, f.K)
	case sim.DropAfter:
		w.net.DropAfter(f.Replica, f.K)
	case sim.Stall:
		w.net.Stall(f.D)
	case sim.Flush:
		w.net.CloseAll()
		w.store.Flush()
		w.lose()
	case sim.Kill:
		w.kill(r)
		w.net.Kill(f.Replica)
	case sim.ClockStep:
		r.clock.Step(f.D)
	case sim.Pause:
		if !r.dead.Load() {
			err := r.th.PauseUntil(w.ctx, r.clock.Now().Add(f.D))
			w.rec.Note(f.Replica, "PauseUntil: %v", err)
		}
	case sim.Lower:
		if !r.dead.Load() {
			err := r.th.LowerLimit(w.ctx, f.K, f.D)
			w.rec.Note(f.Replica, "LowerLimit(%d, %s): %v", f.K, f.D, err)
		}
	}
}

// lose notes that Redis lost the window (a flush, a failover to a copy
// behind): the processes that made no round trip yet are blind to it.
func (w *simWorld) lose() { w.loseSome(nil) }

// loseSome notes that Redis lost the window but kept some of its calls (a
// failover to a copy behind): before holds the calls' members in the
// windows' sets before the loss. A process none of whose calls was lost is
// blind to the loss as well: its probes (its newest call, the marker) are
// all there, and the calls it could not know were lost are the others'.
func (w *simWorld) loseSome(before map[string]bool) {
	w.lost.Store(true)
	after := w.callMembers()
	lostOne := map[*simReplica]bool{}
	for m := range before {
		if !after[m] {
			r := w.owner(m)
			lostOne[r] = true
			if r == nil {
				continue
			}
			r.mu.Lock()
			if _, held := r.admitted[m]; held {
				if r.lostHeld == nil {
					r.lostHeld = map[string]bool{}
				}
				r.lostHeld[m] = true
			}
			r.mu.Unlock()
		}
	}
	for _, r := range w.reps {
		if r.th.Stats().Redis.RoundTrips == 0 || before != nil && !lostOne[r] {
			r.blind.Store(true)
		}
		r.th.mu.Lock()
		seen := r.th.health.lastSeen
		r.th.mu.Unlock()
		if seen > 0 {
			r.idleBlind.Store(seen + r.th.rules.TTL().Microseconds())
		}
	}
}

// isBlind reports that r cannot tell a lost window from a new key now
// (see simReplica.blind, idleBlind and lostHeld).
func (r *simReplica) isBlind() bool {
	at := r.idleBlind.Load()
	return r.blind.Load() || at > 0 && time.Now().UnixMicro() >= at || r.holdsNoLost()
}

// holdsNoLost reports that r holds none of its calls a loss took that
// still count (see simReplica.lostHeld): each was given back since, or
// its score has left the longest window (the process's journal, whose
// calls it probes, drops it then).
func (r *simReplica) holdsNoLost() bool {
	w := r.th.rules.LongestW()
	now := time.Now().UnixMicro()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lostHeld) == 0 {
		return false
	}
	for m := range r.lostHeld {
		if score, held := r.admitted[m]; held && score > now-w {
			return false
		}
	}
	return true
}

// callMembers returns the calls' members (scored above zero) in every
// window's sorted set.
func (w *simWorld) callMembers() map[string]bool {
	ms := map[string]bool{}
	for _, l := range w.sc.Limits {
		for _, m := range w.store.Members(l.Key) {
			if m.Score > 0 {
				ms[m.Name] = true
			}
		}
	}
	return ms
}

// restart replaces replica f.Replica's process, killed as Kill kills one
// (its callers abandoned), by a new one: a new client and Throttler (a
// fresh estimate of the server's clock, new member ids) and new callers,
// on the machine's clock, whose round trips are slow and lopsided for
// f.Span (a machine loaded by the start).
func (w *simWorld) restart(f sim.Fault) {
	old := w.reps[f.Replica]
	w.kill(old)
	gen := w.net.Restart(f.Replica)
	w.net.Load(f.Replica, f.Span, f.D)
	r := w.newReplica(f.Replica, f.K, gen, old.clock)
	r.blind.Store(w.lost.Load())
	w.old = append(w.old, old)
	w.reps[f.Replica] = r
	w.rec.Note(r.id, "started as replica r%d, whose process r%d was killed", f.Replica, old.id)
	w.startCallers(r)
}

// check asserts what every run must hold once its calls have returned,
// and a calm run's progress.
func (w *simWorld) check() {
	w.checkSafety()
	w.checkTenants()
	if w.sc.Calm() {
		w.checkProgress(w.rec.Admissions())
	}
}

// checkSafety asserts the invariant, that every Throttler goes idle and
// that no member is left behind.
//
// With HTTP callers (sim.API), the invariant is also judged where the
// promise is made, at the API: no window of interval there holds more
// than limit arrivals, with the admission check's exceptions (FailOpen's
// and blind processes' exempt calls, debt, FallbackLocal's shares). With
// no tolerance: WithBuffer promises that calls that reach the API within
// half the buffer of their slots, early or late, cannot put more than
// limit calls into one window of the API, since every slot holds its
// window for interval plus the buffer. The way from a write to the API
// is the same for every call of the run (a call made with Wait goes that
// way from its admission), so it moves every arrival alike and no window
// gains or loses a call by it: judging arrivals is judging writes. A
// request here is written in the instant GotConn returns, as net/http
// writes it right after. So a Transport (or Do) that writes within its
// allowance of its slot is held to exactly what a Wait is held to by the
// admission check, which has no tolerance either; the time a connection
// takes to set up is the library's to keep within that allowance (by
// holding the connection and waiting for a new slot), not the checker's
// to forgive.
func (w *simWorld) checkSafety() {
	adms := w.rec.Admissions()
	for _, l := range w.sc.Limits {
		share := 0 // FallbackLocal(1/R)'s share of this limit, as New rounds it
		if w.sc.Policy == sim.FallbackLocal {
			share = int(math.Floor(float64(l.Limit) * (1 / float64(w.sc.Replicas))))
		}
		if v := sim.Overfull(l.Key, adms, l.Interval, l.Limit, share); v != nil {
			w.t.Errorf("invariant broken, seed %d\n%s", w.sc.Seed, w.rec.Trace(v, w.sc.FaultLines()))
		}
		if w.api == nil {
			continue
		}
		// At the API, with no tolerance (see above).
		if v := sim.OverfullAtAPI(l.Key, adms, l.Interval, l.Limit, share, w.api.OneWay()); v != nil {
			w.t.Errorf("invariant broken at the API, seed %d\n%s", w.sc.Seed, w.rec.Trace(v, w.sc.FaultLines()))
		}
	}
	w.checkIdle()
	w.checkMembers()
	w.checkInFlight()
}

// checkInFlight holds the calls in flight to the cap, and looks for places
// left taken by a live replica that saw no Redis error. A Redis that lost
// the places (a flush, a failover to a copy behind) forgets the calls in
// flight then, as docs/guarantees.md states: such runs are not held to the cap.
func (w *simWorld) checkInFlight() {
	sc := w.sc
	if sc.InFlight == 0 {
		return
	}
	if w.mostCalls > sc.InFlight && !sc.Has(sim.Flush) && !sc.Has(sim.Failover) {
		w.t.Errorf("in-flight cap broken, seed %d: %d calls in flight at once at %s, cap %d\nfaults: %v",
			sc.Seed, w.mostCalls, w.mostCallsAt, sc.InFlight, sc.FaultLines())
	}
	if sc.Has(sim.Failover) {
		// A failover to a copy behind brings back the places given back
		// after the copy's last sync, taken until their lease expires, as
		// docs/guarantees.md states (seeds 30215 and 30269).
		return
	}
	for _, m := range w.store.Members(simInFlightKey) {
		r := w.owner(m.Name)
		if r == nil || r.dead.Load() || r.th.Stats().Redis.Errors > 0 {
			continue
		}
		w.t.Errorf("r%d left a place in flight taken after every call ended", r.id)
	}
}

// checkIdle waits for every live Throttler to go idle (no worker, nothing
// queued, no keeper of places in flight): an idle Throttler holds no
// goroutine, and has written every place it gave back. Faults may outlast the
// traffic (replies delayed for minutes): a Throttler retrying what it owes
// Redis until they end is not stuck (seed 1833). Nor is one whose retries,
// once a second, meet requests a fault cuts, however late it makes them
// (seed 2175: 9 cut requests met after the traffic ended).
func (w *simWorld) checkIdle() {
	from := time.Now()
	cuts := 0
	for _, f := range w.sc.Faults {
		from = maxTime(from, w.rec.Start().Add(f.End()))
		if f.Kind == sim.DropBefore || f.Kind == sim.DropAfter {
			cuts += f.K
		}
	}
	deadline := from.Add(3*time.Second + 2*w.redisTimeout() + time.Duration(cuts)*(time.Second+w.redisTimeout()))
	// Nor is one giving back a member a stepped clock scored far ahead,
	// until it counts nowhere or for farTail after a success (owed.far;
	// seed 60797). The store's clock is the virtual one.
	for _, r := range w.reps {
		if r.dead.Load() {
			continue
		}
		r.th.mu.Lock()
		until, farEnd := r.th.owed.farLast()
		r.th.mu.Unlock()
		if until > 0 {
			end := time.UnixMicro(until)
			if !farEnd.IsZero() && farEnd.Before(end) {
				end = farEnd
			}
			deadline = maxTime(deadline, end.Add(farEvery+time.Second))
		}
	}
	for {
		busy := ""
		for _, r := range w.reps {
			if r.dead.Load() {
				// A killed process holds nothing: its abandoned worker
				// runs out on its own (see close).
				continue
			}
			r.th.mu.Lock()
			keeper := r.th.lease != nil && r.th.lease.keeper
			if r.th.worker.running || len(r.th.worker.queue) > 0 || keeper {
				busy += fmt.Sprintf(" r%d(running=%v queue=%d giveBack=%d replay=%d keeper=%v)", r.id,
					r.th.worker.running, len(r.th.worker.queue), len(r.th.owed.giveBack), len(r.th.owed.replay), keeper)
			}
			r.th.mu.Unlock()
		}
		if busy == "" {
			return
		}
		if time.Now().After(deadline) {
			w.t.Errorf("not idle after the traffic ended:%s", busy)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkMembers looks for members left in Redis: a live replica that saw no
// Redis error must hold only members of calls it admitted, and no member
// may lie further ahead than reserve-ahead.
func (w *simWorld) checkMembers() {
	now := time.Now().UnixMicro()
	ahead := w.reps[0].th.rules.Ahead.Microseconds()
	for _, l := range w.sc.Limits {
		for _, m := range w.store.Members(l.Key) {
			if m.Score <= 0 {
				continue // the marker or a meta value, not a call (whose member may begin with any byte)
			}
			if int64(m.Score) > now+ahead+int64(time.Second/time.Microsecond) {
				w.t.Errorf("%s: member at %s, beyond reserve-ahead (%s)", l.Key,
					time.UnixMicro(int64(m.Score)).Sub(w.rec.Start()), w.reps[0].th.rules.Ahead)
			}
			r := w.owner(m.Name)
			if r == nil || r.dead.Load() || r.th.Stats().Redis.Errors > 0 || w.sc.Policy != sim.FailClosed {
				continue
			}
			r.mu.Lock()
			_, ok := r.admitted[m.Name]
			r.mu.Unlock()
			if !ok {
				w.t.Errorf("%s: r%d left a member at %s that no call of its holds (never admitted, or given back)",
					l.Key, r.id, time.UnixMicro(int64(m.Score)).Sub(w.rec.Start()))
			}
		}
	}
}

// owner is the replica whose Throttler wrote member.
func (w *simWorld) owner(member string) *simReplica {
	for _, r := range w.reps {
		if strings.HasPrefix(member, string(r.th.ids.prefix[:])) {
			return r
		}
	}
	return nil
}

// checkProgress holds a calm run (no fault, no deadline) to its targets:
// steady-state utilization of at least 0.99 of what the limits allow, and
// no call waiting longer than maxWait.
//
// A fleet's cold start (sim.ColdFleet: every replica's first round trips
// slow and lopsided) leaves a run calm, with the same workload: it is how
// a calm fleet starts, not a fault that keeps it from its quota for good.
// The targets hold once it is over: utilization counts the windows that
// start a window after its last delayed round trip, and a call's wait is
// counted from then if it began before (see wait). What the slow start
// costs is not held to a target; what it leaves behind (members placed by
// estimates from its samples) is. Its costs include the margins its loose
// clock estimates asked for, which stay in force a while after it (see
// startCost).
func (w *simWorld) checkProgress(adms []sim.Admission) {
	if len(adms) == 0 {
		w.t.Errorf("calm run admitted nothing")
		return
	}
	// With permits settled below their estimate, a unit held until the
	// settle and given back then was reserved and not used: the target,
	// which assumes every reserved unit goes, does not apply (seeds 32,
	// 372 and 784, limits of 2 to 6 per window, used 86-98%).
	if w.sc.InFlight > 0 || w.sc.Priorities {
		// The cap on calls in flight, not the rate, may bind; low calls
		// may fill only their share, and wait behind the others: the
		// rate's targets do not apply. Every call's return is checked
		// (the hang check).
		return
	}
	if u, ok := w.utilization(adms); ok && w.sc.Settle == 0 {
		if target := w.utilizationTarget() * w.bestUtilization(adms[0].At); u < target {
			w.t.Errorf("utilization %.4f < %.4f of limit*interval/(interval+buffer)", u, target)
		}
	}
	if w.longest > w.maxWait() {
		w.t.Errorf("a call without deadline waited %s > the bound %s", w.longest, w.maxWait())
	}
}

// startCost is when what a fleet's cold start costs is over (zero without
// one): its last delayed round trip, and then the margins its samples
// asked for (see the margin.go of internal/core): round trips late by up to D one
// way put an estimate off by up to D/2, and a margin of that much stays in
// force for reserve-ahead, the longest window, six times itself and twice
// the buffer.
func (w *simWorld) startCost() time.Duration {
	sc := w.sc
	end := sc.StartLoad()
	if end == 0 {
		return 0
	}
	var d time.Duration
	for _, f := range sc.Faults {
		if f.Kind == sim.ColdFleet {
			d = max(d, f.D)
		}
	}
	return end + w.reps[0].th.rules.Ahead + w.longestW() + 3*d + 2*sc.Buffer
}

// utilization is the admitted units over what the limits allow, averaged
// over every window of steady state: windows of the tightest limit's
// interval + buffer starting from one window after the first admission (or
// after a fleet's cold start) to one window before the traffic ends. A
// sliding window frees slots in the pattern it filled them in, often
// bursts, so a single window cut (or a whole number of them) over- or
// under-counts by where its edges fall; the average over every start point
// does not: it weighs each admission by the share of windows that hold it.
func (w *simWorld) utilization(adms []sim.Admission) (float64, bool) {
	sc := w.sc
	if len(adms) == 0 {
		return 0, false
	}
	span, limit := sc.W(), sc.Limits[0].Limit
	for _, l := range sc.Limits[1:] {
		wl := l.Interval + sc.Buffer
		if float64(l.Limit)/float64(wl) < float64(limit)/float64(span) {
			span, limit = wl, l.Limit
		}
	}
	from, to := max(adms[0].At, w.startCost())+span, sc.Run-span // window starts
	if to-from < span {
		return 0, false
	}
	held := 0.0 // units times the length of start points whose window holds them
	for _, a := range adms {
		lo, hi := max(from, a.At-span), min(to, a.At)
		if hi > lo {
			held += float64(a.N) * float64(hi-lo)
		}
	}
	return held / (float64(limit) * float64(to-from)), true
}

// bestUtilization is what the limits themselves let a run use of the
// tightest rate, measured as utilization measures it: the utilization of
// the earliest schedule, with callers always waiting from the first
// admission on (each unit admitted at the earliest instant every limit's
// window has room for it). At most 1. Below 1 when a longer limit binds
// over the run although its rate is the looser (seed 6384: 54 per 2m6s
// and 140 per 4m39s, where three windows of the first would hold 162: the
// second's first window fills, and no schedule reaches the first's rate
// in a run of three of its windows; 0.925 of it).
func (w *simWorld) bestUtilization(first time.Duration) float64 {
	sc := w.sc
	var adms []sim.Admission
	inWindow := func(i int, at time.Duration) (held int, frees time.Duration) {
		wl := sc.Limits[i].Interval + sc.Buffer
		frees = -1
		for j := len(adms) - 1; j >= 0 && adms[j].At > at-wl; j-- {
			held += adms[j].N
			frees = adms[j].At + wl // the oldest in the window, once it leaves
		}
		return held, frees
	}
	for at := first; at < sc.Run; {
		room, next := math.MaxInt, time.Duration(math.MaxInt64)
		for i, l := range sc.Limits {
			held, frees := inWindow(i, at)
			room = min(room, l.Limit-held)
			if held >= l.Limit {
				next = min(next, frees)
			}
		}
		if room > 0 {
			adms = append(adms, sim.Admission{At: at, N: room})
			continue
		}
		at = next
	}
	u, ok := w.utilization(adms)
	if !ok {
		return 1
	}
	return min(1, u)
}

// utilizationTarget is what a calm run must use of what its limits allow
// (see bestUtilization): 0.99 for calls of one unit. Calls of up to MaxN
// units are served first come first served, so the head of a queue that
// needs n units leaves up to n-1 free slots unused until the n-th frees: up
// to (MaxN-1)/limit of a window. (Several limits had 5% less before
// bestUtilization showed how much of the tightest rate they allow at all:
// seeds 2840 and 6384 used 0.98-1.00 of it.)
func (w *simWorld) utilizationTarget() float64 {
	sc := w.sc
	target := 0.99 - float64(sc.MaxN-1)/float64(sc.MinLimit())
	if slices.ContainsFunc(sc.CompactFrom, func(n int) bool { return n > 0 && n <= sc.MaxLimit() }) {
		// A compacted window counts its buckets whole: a saturated key
		// loses up to a bucket's share of the window, as the README says
		// (seed 30244: 38 buckets, 0.9876).
		target -= 1 / float64(sc.Buckets)
	}
	return target - w.tenantShortfall()
}

// maxWait bounds the wait of a call without deadline in a calm run. Every
// caller keeps at most one call in flight, so at most callers*MaxN units
// are ever queued ahead of a call; the limits admit limit units per window
// (interval + buffer), so, were all processes served first come first
// served, a call would be admitted within the windows those units take,
// plus one for its own, plus reserve-ahead and a window of slack for the
// jitter that spreads the replicas' wake-ups. Processes are not served in
// one order, though: each takes shares of the free slots in turn, so one
// can fall behind its share for a while. Half as many windows again
// covers that: the worst seen over seeds 1-400 was 1.03 times the
// first-come bound, and seed 40 (95 callers, 4 units at most, 122 per
// 16ms) once in seven runs waited 7.0 windows where that bound is 6.
// With priorities, the low calls' cap stands for the limit (seed 10362).
func (w *simWorld) maxWait() time.Duration {
	sc := w.sc
	callers := sc.Replicas*sc.Goroutines + w.tenantCallers()
	worst := time.Duration(0)
	for _, l := range sc.Limits {
		wl := l.Interval + sc.Buffer
		capacity := l.Limit
		if sc.Priorities {
			// Low calls may fill only their share of a window, behind
			// the others: at worst, the queue drains at low's cap.
			capacity = w.reps[0].th.rules.Caps(l.Limit)[PriorityLow.level()]
		}
		windows := (3*callers*sc.MaxN + 2*capacity - 1) / (2 * capacity) // ceil(3/2 * queued / capacity)
		windows = max(windows, w.tenantWindows(capacity))
		worst = max(worst, time.Duration(windows+2)*wl)
	}
	return worst + w.reps[0].th.rules.Ahead
}

// longestW is the longest any admission counts: interval plus buffer of
// the longest limit.
func (w *simWorld) longestW() time.Duration {
	var d time.Duration
	for _, l := range w.sc.Limits {
		d = max(d, l.Interval+w.sc.Buffer)
	}
	return d
}

func (w *simWorld) summary() string {
	adms := w.rec.Admissions()
	units := 0
	for _, a := range adms {
		units += a.N
	}
	var rt, errs uint64
	for _, r := range slices.Concat(w.old, w.reps) {
		s := r.th.Stats()
		rt += s.Redis.RoundTrips
		errs += s.Redis.Errors
	}
	s := fmt.Sprintf("admitted %d calls (%d units); round trips %d; commands %d; redis errors %d; other outcomes %v; longest wait without deadline %s (bound %s)",
		len(adms), units, rt, w.net.Commands(), errs, w.errs, w.longest, w.maxWait())
	if u, ok := w.utilization(adms); ok {
		best := w.bestUtilization(adms[0].At)
		s += fmt.Sprintf("; utilization %.4f (the limits allow %.4f; a calm run's target %.4f)", u, best, w.utilizationTarget()*best)
	}
	if w.api != nil {
		s += "; " + w.api.String() + simSendStats(slices.Concat(w.old, w.reps))
	}
	return s + w.tenantSummary()
}

// close ends the run: callers are gone; clients and the store close, and
// every goroutine of the bubble must then exit (synctest fails otherwise).
func (w *simWorld) close() {
	w.cancel()
	for _, r := range slices.Concat(w.old, w.reps) {
		r.rdb.Close()
	}
	w.net.CloseAll()
	w.store.Close()
	// Virtual time stops once the bubble's function returns: let go-redis's
	// dial back-offs and the library's last timers run out first. A killed
	// replica's worker, abandoned with local calls it could not write back
	// (FallbackLocal), retries them until they no longer count: for up to
	// the longest window after the last of them.
	time.Sleep(time.Minute + w.longestW())
	synctest.Wait()
}

// traceHandler sends the library's log lines to the run's trace.
type traceHandler struct {
	rec     *sim.Recorder
	replica int
	attrs   string
}

func (h *traceHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *traceHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("log: " + r.Message + h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "key" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	})
	h.rec.Note(h.replica, "%s", b.String())
	return nil
}

func (h *traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	for _, a := range as {
		c.attrs += fmt.Sprintf(" %s=%v", a.Key, a.Value)
	}
	return &c
}

func (h *traceHandler) WithGroup(string) slog.Handler { return h }
