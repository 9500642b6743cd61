"""Every tunable number of the engine, in one place."""

# Live view
SNAPSHOT_INTERVAL_S = 0.25  # engine publishes a snapshot this often (UI reads the latest)
RATE_WINDOW_S = 3.0  # live tok/s, req/s, errors/s: tokens that arrived in this window
LATENCY_WINDOW_S = 10.0  # live TTFT/ITL/E2E percentiles: requests that ended in this window
TIMELINE_INTERVAL_S = 1.0  # one timeline row per second (and a session flush)
HARVEST_INTERVAL_S = 0.05  # in-flight requests' new ITLs reach the figures this often (a short pause each)
CLOSE_CATCH_UP_TURNS = 6  # a step's close lets the loop turn this often first: a socket read, its delivery, the request's end
HISTORY_S = 600  # seconds of per-second history the engine keeps for sparklines
# `--workers auto` (engine/load/worker_count.py, docs/scaling-out.md): one process holds as many
# streams as keep its burst of reads (one chunk each, per decode step) within this share of the
# token interval. Stamped by the kernel (plain http:// on Linux) a stream's stamp stays true until
# its next chunk comes (a read a token late is coalesced: benchmarks/itl_gap.py --count-reads, 40 %
# of ITLs at C=1024 in one lagging process): a third, leaving the rest to the loop's own pauses and
# the machine. Stamped when the loop reads (https://) the burst's spread is in the stamps: a tenth
# (its ITL tail read +1.6-2.8 ms above the server's at C=256 in one process, +13-69 at 1024).
STAMP_SHARE_KERNEL = 1 / 3
STAMP_SHARE_LOOP = 1 / 10
# the token interval assumed at start, until the run measures it (the ITL's median): a decode step
# at a large batch; a shorter one is found within seconds and re-planned (more worker processes)
ASSUMED_TOKEN_INTERVAL_S = 0.03
# a token's CPU in a slow Python process (3x this 2-core VM's): below what it says one process holds,
# start-up measures nothing (engine/load/token_cost.py takes ~30 ms)
PESSIMISTIC_TOKEN_S = 50e-6
# The read path's share of a streamed token's whole CPU in a running engine (the rest: listeners,
# the ITL harvest, each request's send and end), as engine/load/token_cost.py measures the read
# path; benchmarks/client_cost.py prints both (paced C=256, issue 47)
READ_PATH_SHARE = 0.25

# Steps
MIN_LIVE_STEP_S = 3.0  # in the TUI, a period at one C shorter than this is not a step
STEADY_TOLERANCE = 0.10  # a steady step's two halves give tok/s within 10 % of each other (no drift)
STEADY_MAX_SE = 0.05  # ... and the standard error of its per-second tok/s is within 5 % of their mean
STEADY_MIN_S = 4  # a step needs this many whole measured seconds to be judged steady
NOISE_SIGMAS = 2.0  # plateau/collapse margin: this many standard errors of the steps' tok/s
DEFAULT_PLATEAU_GAIN = 0.05  # the knee's plateau gain when the preset sets none (engine/rules/knee.py)
SETTLE_MAX_S = 120.0  # warm-up waits at most this long (after warmup_s) for in-flight to reach C
PROBE_MAX_HOLD_S = 600.0  # a probe waits past probe_s for one request's first token at most this long
STALL_S = 10.0  # requests in flight and no output token for this long ends a preset's ramp as "stalled" ([stop] stall_s)
TRACE_FEED_AHEAD_S = 0.25  # --workers: the coordinator feeds each worker the trace rows due this far ahead
TRACE_LEAD_S = 0.05  # a trace replay's first row is due this long after the command (its bookkeeping is not lag)

# Secrets: what a masked credential reads as, wherever redline writes one
SECRET_MASK = "***"

# Concurrency
DEFAULT_MAX_CONCURRENCY = 1024
DEFAULT_CONCURRENCY = 8
DEFAULT_STEP = 8

# Requests
DEFAULT_REQUEST_TIMEOUT_S = 600.0  # a stream silent this long is a stalled stream
CONNECT_TIMEOUT_S = 10.0
TRANSPORTS = ("lean", "aiohttp", "httpx")  # the HTTP client's transports (engine/client/http.py)
DEFAULT_TRANSPORT = "lean"
# A closed loop that rises by hundreds starts this many requests per loop turn. A request's
# send time is stamped when its task first runs (as bench_serving stamps before its POST); its
# bytes leave a few loop turns later (connect, then write). Started all at once, the 1016 new
# requests of 8 -> 1024 in one process each ran ~0.7 ms first, so their bytes left a median of
# 0.3-0.65 s (at most 0.9 s) after their stamps and those TTFTs read that much high; 8 a turn:
# 55-93 ms median (benchmarks/send_burst.py, docs/benchmarks.md), the rise itself slower
# (1.5-3 s against 0.6-1 s on 2 cores: reads go on between batches).
SEND_BATCH = 8
# Before a closed loop's rise starts its requests, the connections they need are opened (no
# request's clock running: engine/client/transport.py preopen), waiting at most this long; what
# is not open by then each request opens itself, inside its TTFT.
PREOPEN_TIMEOUT_S = 2.0
ABORT_WAIT_S = 2.0  # how long abort() waits for cancelled requests to unwind
ERROR_BODY_BYTES = 2000  # how much of an error response body is read for its text
ERROR_TEXT_CHARS = 200

# Workload
DEFAULT_INPUT_LEN = 32
DEFAULT_OUTPUT_LEN = 128
CALIBRATION_WORDS = (64, 512)  # two prompt sizes to fit tokens = a + b * words

# A server answering 429/503 is overloaded: each failing slot waits FAST_FAIL_S doubled per
# consecutive overload answer, up to this, before its next request (reset by a success).
OVERLOAD_BACKOFF_MAX_S = 2.0

# Server health while running (engine/client/server_watch.py). SGLang's /health runs a one-token
# generation: it answers after >= 1 s, and 503 while starting, shutting down or when its scheduler
# gave no output for 20 s. A request that cannot reach the server or whose stream breaks asks
# /health whether the server is gone: each ask has HEALTH_TIMEOUT_S; the server is gone after
# HEALTH_FAILS_GONE asks in a row that got no answer (refused, timed out, a 5xx other than 503).
HEALTH_TIMEOUT_S = 10.0
HEALTH_FAILS_GONE = 2
HEALTH_RECHECK_S = 1.0  # after an answer, a lone failure asks again only this much later ...
GONE_AFTER_CONNECT_ERRORS = 3  # ... unless this many failed in a row since the last ask
NOT_READY_GONE_S = 60.0  # a /health that answers 503 this long: the server is gone, not starting
RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0, 2.0)  # pause between asks while the server is gone or not ready
# This many failed requests in a row (no completed one between them) end a preset's step or
# probe as `errors` and a headless run (engine/core/measurements.py FailureStreak)
CONSECUTIVE_FAILURES_END = 20

# ITL histogram resolution: bins grow by this ratio (percentiles exact to +-0.5 %)
HIST_RATIO = 1.01
HIST_MIN_S = 1e-5
HIST_MAX_S = 1e4

# Percentiles
# a censored figure is a lower bound when its waiting requests, taken as endlessly late, would
# raise it by more than this (engine/measure/histogram.py censored_quantiles)
BOUND_TOLERANCE = 0.02
EXACT_LIMIT = 4096  # a series / the live window keeps exact values up to this many, then log bins

# meta.json's fingerprint (engine/core/provenance.py): how long it waits for telemetry's first GPU reading
FINGERPRINT_GPU_WAIT_S = 15.0

# Presets (engine/preset/, docs/presets.md): each step's hold, and the bounds every key is checked against
DEFAULT_WARMUP_S = 10.0
DEFAULT_HOLD_S = 30.0
DEFAULT_MIN_REQUESTS = 20
DEFAULT_MAX_HOLD_FACTOR = 3.0  # max_hold_s defaults to 3 x hold_s
COUNT_MAX_HOLD_S = 600.0  # a step that counts requests ([ramp] num_requests) measures at most this long by default
MAX_REPEATS = 100  # [ramp] repeats, --repeats
MAX_CONCURRENCY = 100_000  # a sanity bound on one step's concurrency
MAX_STEPS = 10_000  # a sanity bound on the number of steps in a ramp
MAX_SECONDS = 7 * 24 * 3600.0  # a sanity bound on any time value (one week)
MAX_COUNT = 10_000_000  # a sanity bound on a preset's token lengths and request counts
MAX_TURNS = 1000  # [workload] turns
MAX_SEED = 2**63 - 1  # [workload] seed, --seed
RATE_SEARCH_LEVELS = 1000  # a rate search bisects on max/1000 req/s
TRACE_TAIL_S = 60.0  # what the time estimate of a trace step allows for its last answers

# The C helpers (engine/client/_speedups.c, engine/measure/_bins.c): this variable set to one of
# these turns them off, read once at import (every path then runs in Python, to the same values)
SPEEDUPS_ENV = "REDLINE_SPEEDUPS"
SPEEDUPS_OFF = ("0", "off", "no", "false")
