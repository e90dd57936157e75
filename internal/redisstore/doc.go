// Package redisstore is the throttler's only route to Redis: it applies
// the core's attempts as pipelines and transactions on a go-redis client,
// holds the Lua scripts (places in flight, an API's counters, the
// published margin), encodes what a key keeps beside its calls as members
// with negated scores, publishes and subscribes to news and wakes, and
// bounds every call but a subscription by its context's deadline, give or
// take one socket write and read where the client's own timeouts end it
// (see Store.inline).
//
// The layout of a key: calls are members scored by the server time (µs)
// they are admitted at; the members that are not calls (Marker,
// PauseMember, LimitMember, ...) have negative scores, where no window
// counts them and no trim reaches them.
//
// # The round trip
//
// Store.Reserve applies one core.Attempt in one round trip. Each limit's
// key is written and read as its form says (see keyForm: a log, or
// compacted); the round trip sequences them, the optional parts queued
// only when the attempt asks for them. It sends:
//
//	MULTI                                (exact attempts, and those with
//	                                      calls written for sure to give
//	                                      back: see pipelined)
//	EVAL <LeaseScript> <lease keys> ...  (places in flight asked for)
//	EVAL <WideScript> key <margin> ...   (a round that publishes a margin)
//	ZREM key <given back>...             (when there are any)
//	EVAL <GiveBackScript> key <buckets>  (calls written for sure given
//	                                      back, on a compacted window: see
//	                                      giveback.go; ZREM on the others)
//	EVAL <CompactScript> key <buckets>   (when the attempt trims a
//	                                      compacted window, or its last
//	                                      compaction moved a whole batch,
//	                                      or this process added Keep calls
//	                                      since: see compact.go)
//	EVAL <TrimScript> key <w+slack> <1h> (when the attempt trims: the
//	                                      members past the window and
//	                                      core.TrimSlack, and an hour
//	                                      ahead, by the server's TIME as
//	                                      it runs: see trim.go)
//	ZADD LT key -<end> <pause>           (a heal: first key only, with the
//	PUBLISH key <news>                    news of its pause)
//	ZADD key <g1> <m1> <g1> <m2> ... [-1 <marker>]
//	ZINCRBY key -1 <tally>               (first key only, after its ZADD:
//	                                      see TallyMember)
//	ZCOUNT key (<g-w> (<g+w>             (once per distinct score g)
//	EVAL <PeakScript> key <w> <g>...     (instead, in exact attempts with
//	                                      several limits or while a tenant
//	                                      is held to a cap)
//	EVAL <TenantPeakScript> key <w> ...  (instead, on the first key, when
//	                                      such an attempt claims for a
//	                                      capped tenant: the capped
//	                                      tenants' claims checked against
//	                                      their caps, the refused removed
//	                                      under one limit, then the peaks
//	                                      and their members, and
//	                                      TenantScript's scan when due,
//	                                      in one read; the first key's
//	                                      ZRANGE below then goes before it)
//	EVAL <PlaceScript> <keys> ...        (instead of the claims' ZADD, the
//	                                      ZCOUNTs and the peaks, once for
//	                                      every key after their writes, in
//	                                      exact attempts that let the
//	                                      store place their claims while
//	                                      every window is read as a log:
//	                                      see place.go)
//	ZRANGE key -(limit+adds) -(limit-k+1) WITHSCORES
//	                                     (rounds that learn k slots: once
//	                                      more per capped priority's cap)
//	ZMSCORE key <stamp> <bucketed>       (a compacted window after the
//	                                      first, not the probes', with a
//	                                      copy of its buckets, in rounds
//	                                      that learn no slots: see
//	                                      buckets.go)
//	EVAL <CountScript> key <buckets> ... (a compacted window in rounds that
//	                                      learn slots, or one whose flag
//	                                      was seen: in place of the
//	                                      ZCOUNTs, the peaks and the tails)
//	ZMSCORE key <bucketed>               (keys after the first that are
//	                                      read as a log, not compacted)
//	ZADD key -1 <keeper>                 (keys after the first, with their
//	                                      PEXPIRE: see KeeperMember)
//	PEXPIRE key <ttl>                    (a second after the last, on a new
//	                                      key, and with a heal's pause)
//	... the same for the key of every other limit (WithLimit) ...
//	PUBLISH <news channel> t <name> <g>...  (exact attempts that announce
//	                                      the slots they claim: see
//	                                      core.Known.Announce)
//	EVAL <TenantScoresScript> key <from> <w> <drop> <own> <caps>...
//	                                     (with claims of tenants held to a
//	                                      cap: the claims checked against
//	                                      their caps, the refused removed
//	                                      under one limit, and the tenants'
//	                                      members; not when
//	                                      TenantPeakScript does it)
//	EVAL <TenantScript> key <from> <w>   (every tenth of the window, at
//	                                      least 25ms apart, sooner when a
//	                                      tenant may have left, while calls of tenants
//	                                      wait near the limit or under a
//	                                      cap: their calls by tenant, and
//	                                      the light tenants' most; after
//	                                      the refused claims left, under
//	                                      one limit; not when
//	                                      TenantPeakScript scans)
//	ZMSCORE key <marker> <pause> <limit> <limit-end> <wide> <wide-end> <bucketed> <tally> [<probes>] [<stamp>]
//	                                     (the stamp when the first window
//	                                      counts from a copy)
//	ZMSCORE <longest key> <bucketed> [<probes>] [<stamp>]
//	                                     (the longest window not the first,
//	                                      unless compacted with neither
//	                                      probes nor a copy, or read by
//	                                      CountScript, which reads the
//	                                      probes)
//	TIME                                 (250ms after the last; on every
//	                                      round trip while the estimate
//	                                      is unsampled or loose, or the
//	                                      local clock not monotonic)
//	ZMSCORE key <stamp> <bucketed>       (per compacted window read
//	HMGET <buckets> b lo hi n base cut <k>...
//	                                      without CountScript that has no
//	                                      copy of its buckets, or compacts;
//	                                      and with a recount: see
//	                                      buckets.go)
//	EXEC                                 (with MULTI)
//
// Adding before counting makes the decision safe without atomicity: two
// clients adding at once each count the other, so a race can only refuse
// a call that would have fitted, never admit one too many. Far from the
// limit, where such races cost nothing, an attempt is a plain pipeline of
// ZADD, ZCOUNT and ZMSCORE. Near the limit, MULTI buys exactness and
// progress: the count sees exactly the state its own insert produced, so
// of two callers racing for the last slot exactly one wins, and the free
// slots read (for waiters to reserve without polling) agree with that
// count. A reply that shows the flag of a key read as a log (another
// process compacts it) costs a second round trip, which reads that key
// again with CountScript (see Store.recount); so does a compacted key read
// without it whose copy of its buckets went stale, or a probe missing
// from its set but not before its cut (see compactedKey.countFromCopy).
package redisstore
