/* lockstep_server.c: a paced OpenAI-compatible streaming server for redline's benchmarks.

   Not redline's sim (Python, which lags itself at C=1024): a single C file, std + POSIX only,
   built by benchmarks/compiled_server.py when missing (gcc -O2), never needed by the tests.

   It serves, on 127.0.0.1 only:
     GET  /v1/models, /health                the model list, {}
     POST /v1/chat/completions, /v1/completions
          streamed (SSE in chunked encoding, as vLLM writes it: a role chunk first on chat,
          one chunk per token, usage on every chunk with stream_options.continuous_usage_stats,
          a usage-only chunk with include_usage, then data: [DONE]) or not streamed
     GET  /bench/gaps?t0=T0&t1=T1[&raw=1]    its own write-gap figures (below), JSON
     GET  /bench/stats                        steps, late steps, burst times, CPU, JSON
   and 404 for the rest (/metrics, /get_server_info).

   Pacing, like a continuously batching server in lockstep: one decode step every
   STEP + PER_SEQ * b ms (b = the streams running) on an absolute schedule; a request joins at
   the next step (no prefill cost); at the end of each step one chunk (one token) is written to
   every running stream, in one burst, each write stamped just before it with
   clock_gettime(CLOCK_MONOTONIC) (Python's time.perf_counter() on Linux: the same clock in
   every process here). A step that starts more than 1 ms late is counted (`late_steps`) and
   the schedule restarts from then (no catch-up burst).

   Write gap: per stream, the difference between consecutive token chunks' write stamps (the
   first token closes no gap: as ITL), counted at the write of the chunk that closes it.
   /bench/gaps returns the gaps closed in [t0, t1]: count, mean, p50, p90, p99, p99.9, max (ms;
   linear interpolation, numpy's default), and with raw=1 every gap.

   Usage: lockstep_server [--port N] [--pace STEP_MS[+PER_SEQ_MS]] [--port-file PATH]
   It prints "port N" on stdout once listening; SIGTERM or SIGINT ends it. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MODEL "lockstep-server"
#define MAX_EVENTS 1024
#define READ_CHUNK 65536

static const char *WORDS[] = {" the", " a", " of", " model", " token", " and", " to", " in", " server", " is", " load", " it"};
#define NWORDS (sizeof(WORDS) / sizeof(WORDS[0]))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* -- growable buffers ------------------------------------------------------------------------- */
typedef struct { char *p; size_t len, cap; } buf_t;

static void buf_reserve(buf_t *b, size_t more) {
    if (b->len + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) { perror("realloc"); exit(1); }
    b->cap = cap;
}
static void buf_add(buf_t *b, const char *s, size_t n) { buf_reserve(b, n); memcpy(b->p + b->len, s, n); b->len += n; }
#define ADD_LIT(b, s) buf_add((b), (s), sizeof(s) - 1)  /* a string literal, its NUL left out */
static void buf_printf(buf_t *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < room) { b->len += (size_t)n; return; }
        buf_reserve(b, (size_t)n + 1);
    }
}
static void buf_drop(buf_t *b, size_t n) {
    if (n >= b->len) { b->len = 0; return; }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

/* the gaps: (write time, gap) of every token chunk that closed one */
typedef struct { double t, gap; } gap_t;
static gap_t *gaps; static size_t n_gaps, cap_gaps;
static void add_gap(double t, double g) {
    if (n_gaps == cap_gaps) {
        cap_gaps = cap_gaps ? cap_gaps * 2 : 65536;
        gaps = realloc(gaps, cap_gaps * sizeof(gap_t));
        if (!gaps) { perror("realloc"); exit(1); }
    }
    gaps[n_gaps].t = t; gaps[n_gaps].gap = g; n_gaps++;
}

/* burst times (ms): from a step's due time to its last write */
static double *bursts; static size_t n_bursts, cap_bursts;
static void add_burst(double ms) {
    if (n_bursts == cap_bursts) {
        cap_bursts = cap_bursts ? cap_bursts * 2 : 4096;
        bursts = realloc(bursts, cap_bursts * sizeof(double));
        if (!bursts) { perror("realloc"); exit(1); }
    }
    bursts[n_bursts++] = ms;
}

/* -- connections and streams -------------------------------------------------------------------- */
typedef struct conn conn_t;
struct conn {
    int fd;
    buf_t in, out;          /* unparsed request bytes; unsent response bytes */
    int want_out;           /* EPOLLOUT is on */
    int keep_alive;
    int closing;            /* close once `out` is sent */
    /* the stream in progress (streaming == 1) */
    int streaming, chat, usage, continuous;
    long rid, n, n_max, prompt_tokens;
    double last_write;      /* 0: no token written yet */
    int running;            /* in the running list */
    conn_t *next_run;
    conn_t *next_dead;      /* closed: freed after the events of this epoll_wait were handled */
};

static int ep;
static double step_s = 0.040, per_seq_s = 0.0;
static long rid_seq;
static long steps, late_steps, queued_writes, streams_started, streams_done, tokens_written;
static conn_t *pending_head;   /* arrived, join at the next step */
static conn_t *running_head;
static long n_running;
static volatile sig_atomic_t stop_flag;
static int timer_fd;
static double next_due;        /* 0: idle */
static time_t created;
static conn_t *dead_head;      /* closed connections no list holds: freed once the batch is done */

static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static void set_events(conn_t *c) {
    struct epoll_event ev = {0};
    ev.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0);
    ev.data.ptr = c;
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* closed and freed later: after this batch of events (one of them may still name it), and, for
   a stream, once the step loop has dropped it from its list */
static void bury(conn_t *c) { c->next_dead = dead_head; dead_head = c; }

static void conn_close(conn_t *c) {
    if (c->fd < 0) return;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    if (!c->running) bury(c);  /* else the step loop unlinks it, then buries it */
}

static void free_dead(void) {
    while (dead_head) {
        conn_t *c = dead_head;
        dead_head = c->next_dead;
        free(c->in.p); free(c->out.p); free(c);
    }
}

/* write what is buffered; 0 ok, -1 the connection failed (closed) */
static int flush_out(conn_t *c) {
    while (c->out.len) {
        ssize_t n = send(c->fd, c->out.p, c->out.len, MSG_NOSIGNAL);
        if (n > 0) { buf_drop(&c->out, (size_t)n); continue; }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->want_out) { c->want_out = 1; set_events(c); }
            return 0;
        }
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
    if (c->want_out) { c->want_out = 0; set_events(c); }
    if (c->closing) return -1;
    return 0;
}

static void send_bytes(conn_t *c, const char *p, size_t n) {
    if (c->fd < 0) return;
    if (c->out.len) { queued_writes++; buf_add(&c->out, p, n); return; }
    ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { c->closing = 1; return; }
        w = 0;
    }
    if ((size_t)w < n) {
        buf_add(&c->out, p + w, n - (size_t)w);
        if (!c->want_out) { c->want_out = 1; set_events(c); }
    }
}

static void reply_json(conn_t *c, int status, const char *body) {
    const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 400 ? "Bad Request" : "Error";
    buf_t b = {0};
    buf_printf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n",
               status, reason, strlen(body), c->keep_alive ? "" : "Connection: close\r\n");
    buf_add(&b, body, strlen(body));
    send_bytes(c, b.p, b.len);
    free(b.p);
    if (!c->keep_alive) c->closing = 1;
}

/* -- the SSE chunks ------------------------------------------------------------------------------ */
static void chunked(buf_t *b, const char *data, size_t n) {
    buf_printf(b, "%zx\r\n", n);
    buf_add(b, data, n);
    ADD_LIT(b, "\r\n");
}

static void event_head(buf_t *e, conn_t *c) {
    if (c->chat) buf_printf(e, "data: {\"id\":\"chatcmpl-%ld\",\"object\":\"chat.completion.chunk\"", c->rid);
    else buf_printf(e, "data: {\"id\":\"cmpl-%ld\",\"object\":\"text_completion\"", c->rid);
    buf_printf(e, ",\"created\":%ld,\"model\":\"" MODEL "\",\"choices\":", (long)created);
}

static void event_usage(buf_t *e, conn_t *c, long k) {
    buf_printf(e, "\"usage\":{\"prompt_tokens\":%ld,\"total_tokens\":%ld,\"completion_tokens\":%ld}",
               c->prompt_tokens, c->prompt_tokens + k, k);
}

static void add_event(buf_t *out, buf_t *e) {
    ADD_LIT(e, "}\n\n");
    chunked(out, e->p, e->len);
    e->len = 0;
}

/* one token's bytes for c (and, at its last, the end of the stream) */
static void token_bytes(buf_t *out, conn_t *c) {
    static buf_t e;
    c->n++;
    int last = c->n >= c->n_max;
    const char *word = WORDS[c->n % NWORDS];
    const char *fin = last ? "\"length\"" : "null";
    e.len = 0;
    event_head(&e, c);
    if (c->chat) buf_printf(&e, "[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":%s}]", word, fin);
    else buf_printf(&e, "[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":%s}]", word, fin);
    if (c->continuous) { ADD_LIT(&e, ","); event_usage(&e, c, c->n); }
    add_event(out, &e);
    if (last) {
        if (c->usage) {
            event_head(&e, c);
            ADD_LIT(&e, "[],");
            event_usage(&e, c, c->n);
            add_event(out, &e);
        }
        chunked(out, "data: [DONE]\n\n", 14);
        ADD_LIT(out, "0\r\n\r\n");
    }
}

/* -- requests ------------------------------------------------------------------------------------ */
/* the integer after "key": in the body (the first one), or dflt */
static long json_int(const char *body, size_t n, const char *key, long dflt) {
    size_t k = strlen(key);
    for (size_t i = 0; i + k < n; i++) {
        if (body[i] == '"' && memcmp(body + i + 1, key, k) == 0 && body[i + 1 + k] == '"') {
            size_t j = i + 2 + k;
            while (j < n && (body[j] == ' ' || body[j] == ':')) j++;
            if (j < n && (body[j] == '-' || (body[j] >= '0' && body[j] <= '9'))) return strtol(body + j, NULL, 10);
            return dflt;
        }
    }
    return dflt;
}

/* whether "key": true is in the body */
static int json_true(const char *body, size_t n, const char *key) {
    size_t k = strlen(key);
    for (size_t i = 0; i + k < n; i++) {
        if (body[i] == '"' && memcmp(body + i + 1, key, k) == 0 && body[i + 1 + k] == '"') {
            size_t j = i + 2 + k;
            while (j < n && (body[j] == ' ' || body[j] == ':')) j++;
            return j + 4 <= n && memcmp(body + j, "true", 4) == 0;
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(const double *v, size_t n, double q) {  /* linear, numpy's default */
    if (!n) return NAN;
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

static void json_num(buf_t *b, const char *name, double v) {
    if (isnan(v)) buf_printf(b, "\"%s\":null", name);
    else buf_printf(b, "\"%s\":%.6f", name, v);
}

static double query_num(const char *q, const char *name, double dflt) {
    size_t k = strlen(name);
    for (const char *p = q; p && *p; ) {
        if (strncmp(p, name, k) == 0 && p[k] == '=') {
            const char *v = p + k + 1;
            if (strncmp(v, "-inf", 4) == 0) return -INFINITY;
            if (strncmp(v, "inf", 3) == 0) return INFINITY;
            return strtod(v, NULL);
        }
        p = strchr(p, '&');
        if (p) p++;
    }
    return dflt;
}

static void bench_gaps(conn_t *c, const char *query) {
    double t0 = query_num(query, "t0", -INFINITY), t1 = query_num(query, "t1", INFINITY);
    int raw = query_num(query, "raw", 0) != 0;
    size_t n = 0;
    double *v = malloc((n_gaps + 1) * sizeof(double)), sum = 0;
    for (size_t i = 0; i < n_gaps; i++)
        if (gaps[i].t >= t0 && gaps[i].t <= t1) { v[n++] = gaps[i].gap * 1000.0; sum += gaps[i].gap * 1000.0; }
    qsort(v, n, sizeof(double), cmp_double);
    buf_t b = {0};
    buf_printf(&b, "{\"count\":%zu,\"t0\":%.6f,\"t1\":%.6f,", n, isfinite(t0) ? t0 : 0.0, isfinite(t1) ? t1 : 0.0);
    json_num(&b, "mean_ms", n ? sum / (double)n : NAN); ADD_LIT(&b, ",");
    json_num(&b, "p50_ms", quantile(v, n, 0.5)); ADD_LIT(&b, ",");
    json_num(&b, "p90_ms", quantile(v, n, 0.9)); ADD_LIT(&b, ",");
    json_num(&b, "p99_ms", quantile(v, n, 0.99)); ADD_LIT(&b, ",");
    json_num(&b, "p999_ms", quantile(v, n, 0.999)); ADD_LIT(&b, ",");
    json_num(&b, "max_ms", n ? v[n - 1] : NAN);
    if (raw) {
        ADD_LIT(&b, ",\"gaps_ms\":[");
        for (size_t i = 0; i < n; i++) buf_printf(&b, i ? ",%.4f" : "%.4f", v[i]);
        ADD_LIT(&b, "]");
    }
    buf_add(&b, "}", 2);  /* and its NUL: a C string for reply_json */
    reply_json(c, 200, b.p);
    free(b.p);
    free(v);
}

static void bench_stats(conn_t *c) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    double *v = malloc((n_bursts + 1) * sizeof(double));
    memcpy(v, bursts, n_bursts * sizeof(double));
    qsort(v, n_bursts, sizeof(double), cmp_double);
    buf_t b = {0};
    buf_printf(&b, "{\"steps\":%ld,\"late_steps\":%ld,\"queued_writes\":%ld,\"streams_started\":%ld,\"streams_done\":%ld,"
                   "\"running\":%ld,\"tokens_written\":%ld,\"cpu_s\":%.6f,\"step_ms\":%.6f,\"per_seq_ms\":%.6f,",
               steps, late_steps, queued_writes, streams_started, streams_done, n_running, tokens_written, cpu,
               step_s * 1000.0, per_seq_s * 1000.0);
    json_num(&b, "burst_p50_ms", quantile(v, n_bursts, 0.5)); ADD_LIT(&b, ",");
    json_num(&b, "burst_p99_ms", quantile(v, n_bursts, 0.99)); ADD_LIT(&b, ",");
    json_num(&b, "burst_max_ms", n_bursts ? v[n_bursts - 1] : NAN);
    buf_add(&b, "}", 2);  /* and its NUL */
    reply_json(c, 200, b.p);
    free(b.p);
    free(v);
}

static void arm_timer(double due) {
    struct itimerspec its = {0};
    double wait = due - now_s();
    if (wait < 1e-6) wait = 1e-6;
    its.it_value.tv_sec = (time_t)wait;
    its.it_value.tv_nsec = (long)((wait - (double)its.it_value.tv_sec) * 1e9);
    timerfd_settime(timer_fd, 0, &its, NULL);
}

static void start_stream(conn_t *c, int chat, const char *body, size_t n) {
    c->chat = chat;
    c->usage = json_true(body, n, "include_usage");
    c->continuous = c->usage && json_true(body, n, "continuous_usage_stats");
    c->n = 0;
    c->n_max = json_int(body, n, "max_tokens", json_int(body, n, "max_completion_tokens", 16));
    if (c->n_max < 1) c->n_max = 1;
    long words = 1;
    for (size_t i = 0; i < n; i++) words += body[i] == ' ';
    c->prompt_tokens = words;
    c->rid = ++rid_seq;
    c->last_write = 0;
    c->streaming = 1;
    streams_started++;
    buf_t b = {0};
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
    buf_add(&b, head, sizeof head - 1);
    if (chat) {
        buf_t e = {0};
        event_head(&e, c);
        static const char role[] = "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]";
        buf_add(&e, role, sizeof role - 1);
        if (c->continuous) { ADD_LIT(&e, ","); event_usage(&e, c, 0); }
        add_event(&b, &e);
        free(e.p);
    }
    send_bytes(c, b.p, b.len);
    free(b.p);
    c->next_run = pending_head;
    pending_head = c;
    c->running = 1;  /* linked: freed by the step loop */
    if (next_due == 0) { next_due = now_s(); arm_timer(next_due); }
}

static void reply_models(conn_t *c) {
    reply_json(c, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"" MODEL "\",\"object\":\"model\",\"created\":0,\"owned_by\":\"lockstep\"}]}");
}

static void reply_unstreamed(conn_t *c, int chat, const char *body, size_t n) {
    long k = json_int(body, n, "max_tokens", 16);
    if (k < 1) k = 1;
    buf_t words = {0};
    for (long i = 0; i < k; i++) buf_printf(&words, "%s", WORDS[(i + 1) % NWORDS]);
    buf_add(&words, "", 1);
    buf_t b = {0};
    if (chat) buf_printf(&b, "{\"id\":\"x\",\"object\":\"chat.completion\",\"model\":\"" MODEL "\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"%s\"},\"finish_reason\":\"length\"}]", words.p);
    else buf_printf(&b, "{\"id\":\"x\",\"object\":\"text_completion\",\"model\":\"" MODEL "\",\"choices\":[{\"index\":0,\"text\":\"%s\",\"finish_reason\":\"length\"}]", words.p);
    buf_printf(&b, ",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":%ld,\"total_tokens\":%ld}}", k, k + 1);
    reply_json(c, 200, b.p);
    free(b.p);
    free(words.p);
}

/* parse as many whole requests as `in` holds; 0 ok, -1 close */
static int handle_input(conn_t *c) {
    while (!c->streaming && c->in.len) {
        buf_add(&c->in, "", 1); c->in.len--;  /* NUL-terminated for the string searches */
        char *end = strstr(c->in.p, "\r\n\r\n");
        if (!end) return c->in.len > 65536 ? -1 : 0;
        size_t head = (size_t)(end - c->in.p) + 4;
        long clen = 0;
        int close_asked = 0;
        for (char *line = strstr(c->in.p, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
            char *h = line + 2;
            if (strncasecmp(h, "content-length:", 15) == 0) clen = strtol(h + 15, NULL, 10);
            else if (strncasecmp(h, "connection:", 11) == 0) {
                char *v = h + 11;
                while (*v == ' ') v++;
                if (strncasecmp(v, "close", 5) == 0) close_asked = 1;
            }
        }
        if (clen < 0 || c->in.len < head + (size_t)clen) return 0;
        char method[8] = {0}, target[2048] = {0};
        if (sscanf(c->in.p, "%7s %2047s", method, target) != 2) return -1;
        c->keep_alive = !close_asked && strstr(c->in.p, "HTTP/1.1") != NULL;
        char *body = malloc((size_t)clen + 1);
        memcpy(body, c->in.p + head, (size_t)clen);
        body[clen] = 0;
        buf_drop(&c->in, head + (size_t)clen);
        char *query = strchr(target, '?');
        if (query) *query++ = 0; else query = "";
        int post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
        int chat = strcmp(target, "/v1/chat/completions") == 0, compl = strcmp(target, "/v1/completions") == 0;
        if (get && strcmp(target, "/v1/models") == 0) reply_models(c);
        else if (get && strcmp(target, "/health") == 0) reply_json(c, 200, "{}");
        else if (get && strcmp(target, "/bench/gaps") == 0) bench_gaps(c, query);
        else if (get && strcmp(target, "/bench/stats") == 0) bench_stats(c);
        else if (post && (chat || compl)) {
            if (json_true(body, (size_t)clen, "stream")) start_stream(c, chat, body, (size_t)clen);
            else reply_unstreamed(c, chat, body, (size_t)clen);
        } else {
            buf_t b = {0};
            buf_printf(&b, "{\"error\":{\"message\":\"%s: not served here\"}}", target);
            reply_json(c, 404, b.p);
            free(b.p);
        }
        free(body);
        if (c->closing) break;
    }
    return 0;
}

/* -- the decode step ------------------------------------------------------------------------------- */
static void decode_step(void) {
    double due = next_due;
    /* arrivals join now */
    while (pending_head) {
        conn_t *c = pending_head;
        pending_head = c->next_run;
        c->next_run = running_head;
        running_head = c;
        n_running++;
    }
    if (!running_head) { next_due = 0; return; }
    double t = now_s();
    if (t - due > 0.001) { late_steps++; due = t; }
    steps++;
    static buf_t out;
    conn_t **pp = &running_head;
    while (*pp) {
        conn_t *c = *pp;
        if (c->fd < 0) {  /* its client went away */
            *pp = c->next_run; n_running--; streams_done++;
            c->running = 0;
            bury(c);
            continue;
        }
        out.len = 0;
        token_bytes(&out, c);
        double w = now_s();
        if (c->last_write > 0) add_gap(w, w - c->last_write);
        c->last_write = w;
        tokens_written++;
        send_bytes(c, out.p, out.len);
        int done = c->n >= c->n_max;
        if (done || c->closing) {
            *pp = c->next_run; n_running--; streams_done++;
            c->running = 0;
            c->streaming = 0;
            if (!c->keep_alive) c->closing = 1;
            if (c->closing && !c->out.len) { conn_close(c); continue; }
            if (c->in.len && handle_input(c) < 0) { conn_close(c); continue; }  /* a pipelined request */
            continue;
        }
        pp = &c->next_run;
    }
    add_burst((now_s() - due) * 1000.0);
    if (!running_head && !pending_head) { next_due = 0; return; }
    next_due = due + step_s + per_seq_s * (double)n_running;
    arm_timer(next_due);
}

/* -- main ---------------------------------------------------------------------------------------- */
static int parse_pace(const char *s) {
    char *end;
    double a = strtod(s, &end), b = 0;
    if (end == s || a < 0) return -1;
    if (*end == '+') { b = strtod(end + 1, &end); if (b < 0) return -1; }
    if (*end) return -1;
    step_s = a / 1000.0; per_seq_s = b / 1000.0;
    return step_s + per_seq_s > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    int port = 0;
    const char *port_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pace") && i + 1 < argc) {
            if (parse_pace(argv[++i]) < 0) { fprintf(stderr, "--pace %s: expected STEP_MS[+PER_SEQ_MS], e.g. 40 or 20+0.1\n", argv[i]); return 2; }
        } else if (!strcmp(argv[i], "--port-file") && i + 1 < argc) port_file = argv[++i];
        else { fprintf(stderr, "usage: %s [--port N] [--pace STEP_MS[+PER_SEQ_MS]] [--port-file PATH]\n", argv[0]); return 2; }
    }
    created = time(NULL);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  /* loopback only */
    addr.sin_port = htons((uint16_t)port);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(ls, 4096) < 0) { perror("bind/listen"); return 1; }
    socklen_t alen = sizeof addr;
    getsockname(ls, (struct sockaddr *)&addr, &alen);
    port = ntohs(addr.sin_port);

    ep = epoll_create1(0);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct epoll_event ev = {0};
    ev.events = EPOLLIN;
    ev.data.ptr = &ls;
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    ev.data.ptr = &timer_fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, timer_fd, &ev);

    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f) { perror(tmp); return 1; }
        fprintf(f, "%d", port);
        fclose(f);
        rename(tmp, port_file);
    }
    printf("port %d\n", port);
    fflush(stdout);

    struct epoll_event events[MAX_EVENTS];
    char rbuf[READ_CHUNK];
    while (!stop_flag) {
        int n = epoll_wait(ep, events, MAX_EVENTS, 200);
        if (n < 0) { if (errno == EINTR) continue; perror("epoll_wait"); return 1; }
        for (int i = 0; i < n; i++) {
            void *p = events[i].data.ptr;
            if (p == &ls) {
                for (;;) {
                    int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
                    if (fd < 0) break;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn_t *c = calloc(1, sizeof *c);
                    c->fd = fd;
                    c->keep_alive = 1;
                    struct epoll_event ce = {0};
                    ce.events = EPOLLIN;
                    ce.data.ptr = c;
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ce);
                }
                continue;
            }
            if (p == &timer_fd) {
                uint64_t x;
                while (read(timer_fd, &x, sizeof x) > 0) {}
                if (next_due != 0 && now_s() >= next_due - 50e-6) decode_step();
                else if (next_due != 0) arm_timer(next_due);
                continue;
            }
            conn_t *c = p;
            if (c->fd < 0) continue;
            if (events[i].events & EPOLLOUT) {
                if (flush_out(c) < 0) { conn_close(c); continue; }
            }
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                int gone = 0;
                for (;;) {
                    ssize_t r = recv(c->fd, rbuf, sizeof rbuf, 0);
                    if (r > 0) { buf_add(&c->in, rbuf, (size_t)r); continue; }
                    if (r == 0) { gone = 1; break; }
                    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                    if (errno == EINTR) continue;
                    gone = 1;
                    break;
                }
                if (gone) { conn_close(c); continue; }
                if (handle_input(c) < 0 || (c->closing && !c->out.len)) { conn_close(c); continue; }
            }
        }
        free_dead();
    }
    return 0;
}
