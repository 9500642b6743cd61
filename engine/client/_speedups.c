/* redline.engine.client._speedups: the per-token path of an OpenAI stream in C (optional).

   One call per socket read does what engine/client/sse.py (SSEDecoder) and
   engine/client/api_formats.py (OpenAIDecoder) do in Python for each event of the read: split
   the SSE events, read each chunk's JSON (a strict parser: choices[0].delta.content /
   reasoning_content / reasoning on chat, choices[0].text on completions, usage.prompt_tokens,
   completion_tokens, prompt_tokens_details.cached_tokens, sim_t), and append each content
   chunk's stamp and tokens to the record's arrays, as engine/client/request.py does.

   It judges only what it reads exactly as Python would; anything else (an "error" key, a type
   it does not expect, a duplicate key, bad UTF-8, non-JSON, a number out of range, NaN, ...)
   stops it at that event: the event and every later one of the read come back as payloads for
   the Python decoder, in order. So Python stays the reference (tests/test_speedups.py feeds both
   the same inputs) and this module is only a faster road to the same values.

   Built by setuptools when a C compiler is there (setup.py: optional); without it redline runs
   the Python path. REDLINE_SPEEDUPS=0 turns it off (engine/client/fast_path.py). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <limits.h>
#include <stdint.h>
#if defined(__linux__)
#include <sys/socket.h>
#include <time.h>
#define HAVE_RECV_STAMPED 1
#endif
#include <stdlib.h>
#include <string.h>

#define MODE_CHAT 0
#define MODE_COMPLETIONS 1

#define F_DONE 1
#define F_CONTENT 2
#define F_ANSWER 4
#define F_TOO_BIG 8

#define MAX_DEPTH 64

/* -- the JSON reader ------------------------------------------------------------------------ */
typedef struct {
    const unsigned char *p, *end;
    int ok;  /* 0: not judged here (the Python decoder judges it) */
} rd_t;

static inline void ws(rd_t *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* one UTF-8 sequence starting at p (p[0] >= 0x80), as Python's strict decoder accepts it:
   its length, or 0 when invalid (overlong, surrogate, past U+10FFFF, cut) */
static inline int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (end - p < 2 || (p[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* a surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;  /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* past U+10FFFF */
        return 4;
    }
    return 0;
}

/* a string at r->p (on its opening quote); *empty: it is "". Sets the key span when asked. */
static void str_(rd_t *r, int *empty, const unsigned char **s, Py_ssize_t *n) {
    const unsigned char *p = r->p + 1, *end = r->end;
    const unsigned char *start = p;
    int raw = 1;  /* no escape: the bytes are the text (for keys) */
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') {
            if (empty) *empty = p == start;
            if (s) { *s = raw ? start : NULL; *n = p - start; }
            r->p = p + 1;
            return;
        }
        if (c < 0x20) { r->ok = 0; return; }  /* strict: no control character */
        if (c == '\\') {
            raw = 0;
            if (p + 1 >= end) { r->ok = 0; return; }
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6 || hexval(p[2]) < 0 || hexval(p[3]) < 0 || hexval(p[4]) < 0 || hexval(p[5]) < 0) { r->ok = 0; return; }
                p += 6;
                continue;
            }
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't') { r->ok = 0; return; }
            p += 2;
            continue;
        }
        if (c >= 0x80) {
            int k = utf8_len(p, end);
            if (!k) { r->ok = 0; return; }
            p += k;
            continue;
        }
        p++;
    }
    r->ok = 0;  /* no closing quote */
}

/* a number: *is_int (no fraction, no exponent), *iv its value when it is a non-negative int
   that fits (else *iv = -1, and *big when out of range), *dv its double */
static void num(rd_t *r, int *is_int, long long *iv, int *big, double *dv) {
    const unsigned char *p = r->p, *end = r->end, *s = p;
    int neg = 0, integral = 1;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end) { r->ok = 0; return; }
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < end && *p >= '0' && *p <= '9') p++; }
    else { r->ok = 0; return; }
    if (p < end && *p == '.') {
        integral = 0; p++;
        if (p >= end || *p < '0' || *p > '9') { r->ok = 0; return; }
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integral = 0; p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') { r->ok = 0; return; }
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    r->p = p;
    if (is_int) *is_int = integral;
    if (big) *big = 0;
    if (iv) {
        *iv = -1;
        if (integral) {
            long long v = 0;
            const unsigned char *q = s + neg;
            int over = 0;
            for (; q < p; q++) {
                int d = *q - '0';
                if (v > (LLONG_MAX - d) / 10) { over = 1; break; }
                v = v * 10 + d;
            }
            if (neg) *iv = (!over && v == 0) ? 0 : -1;  /* -0 is the int 0 in Python; below 0: no count */
            else if (over) { if (big) *big = 1; }
            else *iv = v;
        }
    }
    if (dv) {
        char buf[64];
        Py_ssize_t len = p - s;
        if (len >= (Py_ssize_t)sizeof buf) { r->ok = 0; return; }  /* a 64-character number: Python judges */
        memcpy(buf, s, (size_t)len);
        buf[len] = 0;
        *dv = strtod(buf, NULL);
    }
}

static int lit(rd_t *r, const char *word, size_t n) {
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) { r->ok = 0; return 0; }
    r->p += n;
    return 1;
}

/* any value, checked and skipped */
static void skip(rd_t *r, int depth) {
    ws(r);
    if (r->p >= r->end) { r->ok = 0; return; }
    unsigned char c = *r->p;
    if (c == '"') { str_(r, NULL, NULL, NULL); return; }
    if (c == '{' || c == '[') {
        if (depth >= MAX_DEPTH) { r->ok = 0; return; }
        unsigned char close = c == '{' ? '}' : ']';
        r->p++;
        ws(r);
        if (r->p < r->end && *r->p == close) { r->p++; return; }
        for (;;) {
            if (c == '{') {
                ws(r);
                if (r->p >= r->end || *r->p != '"') { r->ok = 0; return; }
                str_(r, NULL, NULL, NULL);
                if (!r->ok) return;
                ws(r);
                if (r->p >= r->end || *r->p != ':') { r->ok = 0; return; }
                r->p++;
            }
            skip(r, depth + 1);
            if (!r->ok) return;
            ws(r);
            if (r->p >= r->end) { r->ok = 0; return; }
            if (*r->p == ',') { r->p++; continue; }
            if (*r->p == close) { r->p++; return; }
            r->ok = 0;
            return;
        }
    }
    if (c == 't') { lit(r, "true", 4); return; }
    if (c == 'f') { lit(r, "false", 5); return; }
    if (c == 'n') { lit(r, "null", 4); return; }
    if (c == '-' || (c >= '0' && c <= '9')) { num(r, NULL, NULL, NULL, NULL); return; }
    r->ok = 0;  /* NaN, Infinity, anything else: the Python decoder judges */
}

/* iterate an object's members: call with r->p on '{'; *key the member's key (raw bytes, NULL
   when it holds an escape), r->p on its value. Returns 1 per member, 0 at the end or a fault. */
typedef struct { int first; } obj_it;

static int obj_next(rd_t *r, obj_it *it, const unsigned char **key, Py_ssize_t *klen) {
    if (it->first) {
        it->first = 0;
        r->p++;  /* '{' */
        ws(r);
        if (r->p < r->end && *r->p == '}') { r->p++; return 0; }
    } else {
        ws(r);
        if (r->p >= r->end) { r->ok = 0; return 0; }
        if (*r->p == '}') { r->p++; return 0; }
        if (*r->p != ',') { r->ok = 0; return 0; }
        r->p++;
        ws(r);
    }
    if (r->p >= r->end || *r->p != '"') { r->ok = 0; return 0; }
    str_(r, NULL, key, klen);
    if (!r->ok) return 0;
    ws(r);
    if (r->p >= r->end || *r->p != ':') { r->ok = 0; return 0; }
    r->p++;
    ws(r);
    if (r->p >= r->end) { r->ok = 0; return 0; }
    return 1;
}

#define KEY_IS(k, n, s) ((k) != NULL && (n) == (Py_ssize_t)(sizeof(s) - 1) && memcmp((k), (s), sizeof(s) - 1) == 0)

/* a key that holds an escape could spell one we read ("\u0063ontent"): not judged here */
#define ESCAPED_KEY(k) ((k) == NULL)

/* a text value (content, reasoning, text): 1 a non-empty string, 0 "" or null; else not judged */
static int text_value(rd_t *r) {
    if (*r->p == '"') {
        int empty = 1;
        str_(r, &empty, NULL, NULL);
        return empty ? 0 : 1;
    }
    if (*r->p == 'n') { lit(r, "null", 4); return 0; }
    r->ok = 0;
    return 0;
}

/* a token count (usage): a non-negative integer, else -1 (Python's _count: None); a number
   too large for 64 bits is not judged here (Python keeps it) */
static long long count_value(rd_t *r, int depth) {
    unsigned char c = *r->p;
    if (c == '-' || (c >= '0' && c <= '9')) {
        int is_int = 0, big = 0;
        long long v = -1;
        num(r, &is_int, &v, &big, NULL);
        if (big) r->ok = 0;
        return is_int ? v : -1;
    }
    skip(r, depth);
    return -1;
}

typedef struct {
    int content, answer;
    long long prompt_tokens, completion_tokens, cached_tokens;  /* -1: none (-2 for cached: not said) */
    int has_sim_t;
    double sim_t;
} chunk_t;

static void read_delta(rd_t *r, chunk_t *ev, int depth) {
    if (*r->p == 'n') { lit(r, "null", 4); return; }
    if (*r->p != '{') { r->ok = 0; return; }  /* Python ignores a non-dict delta; rare: not judged here */
    obj_it it = {1};
    const unsigned char *k; Py_ssize_t n;
    int seen_c = 0, seen_r = 0, seen_rc = 0, reason = 0;
    while (obj_next(r, &it, &k, &n)) {
        if (ESCAPED_KEY(k)) { r->ok = 0; return; }
        if (KEY_IS(k, n, "content")) {
            if (seen_c++) { r->ok = 0; return; }
            ev->answer = text_value(r);
        } else if (KEY_IS(k, n, "reasoning_content")) {
            if (seen_rc++) { r->ok = 0; return; }
            reason |= text_value(r);
        } else if (KEY_IS(k, n, "reasoning")) {
            if (seen_r++) { r->ok = 0; return; }
            reason |= text_value(r);
        } else {
            skip(r, depth + 1);
        }
        if (!r->ok) return;
    }
    ev->content = ev->answer || reason;
}

static void read_choice0(rd_t *r, chunk_t *ev, int mode, int depth) {
    if (*r->p != '{') { r->ok = 0; return; }  /* choices[0] not an object: Python calls it malformed */
    obj_it it = {1};
    const unsigned char *k; Py_ssize_t n;
    int seen = 0, seen_f = 0;
    while (obj_next(r, &it, &k, &n)) {
        if (ESCAPED_KEY(k)) { r->ok = 0; return; }
        if (KEY_IS(k, n, "finish_reason")) {  /* "abort": the server ended it in the stream (Python judges it) */
            if (seen_f++) { r->ok = 0; return; }
            if (*r->p == '"') {
                const unsigned char *v; Py_ssize_t vn;
                str_(r, NULL, &v, &vn);
                if (r->ok && (v == NULL || (vn == 5 && memcmp(v, "abort", 5) == 0))) r->ok = 0;  /* escaped, or abort */
            } else {
                skip(r, depth + 1);
            }
        } else if (mode == MODE_CHAT && KEY_IS(k, n, "delta")) {
            if (seen++) { r->ok = 0; return; }
            read_delta(r, ev, depth + 1);
        } else if (mode == MODE_COMPLETIONS && KEY_IS(k, n, "text")) {
            if (seen++) { r->ok = 0; return; }
            ev->content = ev->answer = text_value(r);
        } else {
            skip(r, depth + 1);
        }
        if (!r->ok) return;
    }
}

static void read_choices(rd_t *r, chunk_t *ev, int mode, int depth) {
    if (*r->p == 'n') { lit(r, "null", 4); return; }
    if (*r->p != '[') { r->ok = 0; return; }
    r->p++;
    ws(r);
    if (r->p < r->end && *r->p == ']') { r->p++; return; }  /* [] : no choice, no content */
    int i = 0;
    for (;;) {
        ws(r);
        if (r->p >= r->end) { r->ok = 0; return; }
        if (i++ == 0) read_choice0(r, ev, mode, depth + 1);
        else skip(r, depth + 1);
        if (!r->ok) return;
        ws(r);
        if (r->p >= r->end) { r->ok = 0; return; }
        if (*r->p == ',') { r->p++; continue; }
        if (*r->p == ']') { r->p++; return; }
        r->ok = 0;
        return;
    }
}

static void read_details(rd_t *r, chunk_t *ev, int depth) {
    if (*r->p != '{') { skip(r, depth); return; }  /* not a dict: Python ignores it */
    obj_it it = {1};
    const unsigned char *k; Py_ssize_t n;
    int seen = 0;
    ev->cached_tokens = -1;  /* a dict: cached_tokens is said (None when not a count) */
    while (obj_next(r, &it, &k, &n)) {
        if (ESCAPED_KEY(k)) { r->ok = 0; return; }
        if (KEY_IS(k, n, "cached_tokens")) {
            if (seen++) { r->ok = 0; return; }
            ev->cached_tokens = count_value(r, depth + 1);
        } else {
            skip(r, depth + 1);
        }
        if (!r->ok) return;
    }
}

static void read_usage(rd_t *r, chunk_t *ev, int depth) {
    if (*r->p != '{') { skip(r, depth); return; }  /* not a dict: Python ignores it */
    obj_it it = {1};
    const unsigned char *k; Py_ssize_t n;
    int seen_p = 0, seen_c = 0, seen_d = 0;
    while (obj_next(r, &it, &k, &n)) {
        if (ESCAPED_KEY(k)) { r->ok = 0; return; }
        if (KEY_IS(k, n, "prompt_tokens")) {
            if (seen_p++) { r->ok = 0; return; }
            ev->prompt_tokens = count_value(r, depth + 1);
        } else if (KEY_IS(k, n, "completion_tokens")) {
            if (seen_c++) { r->ok = 0; return; }
            ev->completion_tokens = count_value(r, depth + 1);
        } else if (KEY_IS(k, n, "prompt_tokens_details")) {
            if (seen_d++) { r->ok = 0; return; }
            read_details(r, ev, depth + 1);
        } else {
            skip(r, depth + 1);
        }
        if (!r->ok) return;
    }
}

/* one chunk's JSON: 1 when judged here (ev set), 0 when the Python decoder must judge it */
static int read_chunk(const unsigned char *p, Py_ssize_t len, int mode, chunk_t *ev) {
    rd_t r = {p, p + len, 1};
    memset(ev, 0, sizeof *ev);
    ev->prompt_tokens = ev->completion_tokens = -1;
    ev->cached_tokens = -2;
    ws(&r);
    if (r.p >= r.end || *r.p != '{') return 0;
    obj_it it = {1};
    const unsigned char *k; Py_ssize_t n;
    int seen_ch = 0, seen_u = 0, seen_s = 0;
    while (obj_next(&r, &it, &k, &n)) {
        if (ESCAPED_KEY(k)) return 0;
        if (KEY_IS(k, n, "choices")) {
            if (seen_ch++) return 0;
            read_choices(&r, ev, mode, 1);
        } else if (KEY_IS(k, n, "usage")) {
            if (seen_u++) return 0;
            read_usage(&r, ev, 1);
        } else if (KEY_IS(k, n, "sim_t")) {
            if (seen_s++) return 0;
            unsigned char c = *r.p;
            if (c == '-' || (c >= '0' && c <= '9')) {
                double v = 0;
                num(&r, NULL, NULL, NULL, &v);
                if (r.ok && isfinite(v)) { ev->has_sim_t = 1; ev->sim_t = v; }
            } else {
                skip(&r, 1);  /* a string, null, ...: Python ignores it (true/false: not a number there either) */
            }
        } else if (KEY_IS(k, n, "error")) {
            if (*r.p != 'n') return 0;  /* an error (or a falsy value Python reads as none): Python judges */
            lit(&r, "null", 4);
        } else {
            skip(&r, 1);
        }
        if (!r.ok) return 0;
    }
    if (!r.ok) return 0;
    ws(&r);
    return r.p == r.end;  /* nothing after the object */
}

/* -- the SSE splitter + the per-read path ------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    int mode;
    Py_ssize_t max_event;
    char *buf;           /* the unfinished line */
    Py_ssize_t buf_len, buf_cap;
    char *data;          /* the event's data lines so far, joined with \n */
    Py_ssize_t data_len, data_cap;
    Py_ssize_t data_lines;
    /* the usage of the reads feed_tokens answered with their tokens alone (the latest of each,
       -1: none since the last full answer): the next full answer carries it, or usage() */
    long long pend_prompt, pend_completion, pend_cached;
    Py_ssize_t pend_events;  /* ... and how many events they held */
} Splitter;

static PyObject *frombytes_name;

static int grow(char **p, Py_ssize_t *cap, Py_ssize_t need) {
    if (need <= *cap) return 0;
    Py_ssize_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *q = PyMem_Realloc(*p, (size_t)c);
    if (!q) { PyErr_NoMemory(); return -1; }
    *p = q;
    *cap = c;
    return 0;
}

static void Splitter_dealloc(Splitter *self) {
    PyMem_Free(self->buf);
    PyMem_Free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Splitter_init(Splitter *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"mode", "max_event", NULL};
    int mode = 0;
    Py_ssize_t max_event = 8 << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|in", kwlist, &mode, &max_event)) return -1;
    if (mode != MODE_CHAT && mode != MODE_COMPLETIONS) {
        PyErr_Format(PyExc_ValueError, "mode %d: expected 0 (chat) or 1 (completions)", mode);
        return -1;
    }
    self->mode = mode;
    self->max_event = max_event;
    self->buf_len = self->data_len = self->data_lines = 0;
    self->pend_prompt = self->pend_completion = self->pend_cached = -1;
    self->pend_events = 0;
    return 0;
}

typedef struct {
    /* the read's totals */
    long long counted, new_tokens;
    Py_ssize_t events;
    int flags;
    long long prompt_tokens, completion_tokens, cached_tokens;
    PyObject *lags;   /* list of sim_t, or NULL */
    PyObject *rest;   /* payloads for Python, or NULL: once set, every later event goes there */
    PyObject *times, *tokens, *t_obj;
    double t;
    /* the read's content chunks, appended to the record's arrays in one call each (flush) */
    double *ts; long *ks;
    Py_ssize_t n_chunks, cap_chunks;
    double ts0[32]; long ks0[32];
} read_t;

/* the chunks taken so far onto rec.chunk_times ('d') and rec.chunk_tokens ('l'): one
   frombytes call each, where an append per chunk cost two method calls a token */
static int flush(read_t *rd) {
    if (!rd->n_chunks) return 0;
    PyObject *a = PyMemoryView_FromMemory((char *)rd->ts, rd->n_chunks * (Py_ssize_t)sizeof(double), PyBUF_READ);
    PyObject *b = a ? PyMemoryView_FromMemory((char *)rd->ks, rd->n_chunks * (Py_ssize_t)sizeof(long), PyBUF_READ) : NULL;
    PyObject *r1 = b ? PyObject_CallMethodOneArg(rd->times, frombytes_name, a) : NULL;
    PyObject *r2 = r1 ? PyObject_CallMethodOneArg(rd->tokens, frombytes_name, b) : NULL;
    Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(r1);
    rd->n_chunks = 0;
    if (!r2) return -1;
    Py_DECREF(r2);
    return 0;
}

static int take_chunk(read_t *rd, long long k) {
    if (rd->n_chunks == rd->cap_chunks) {
        Py_ssize_t cap = rd->cap_chunks * 2;
        double *ts = PyMem_Malloc((size_t)cap * sizeof(double));
        long *ks = PyMem_Malloc((size_t)cap * sizeof(long));
        if (!ts || !ks) { PyMem_Free(ts); PyMem_Free(ks); PyErr_NoMemory(); return -1; }
        memcpy(ts, rd->ts, (size_t)rd->n_chunks * sizeof(double));
        memcpy(ks, rd->ks, (size_t)rd->n_chunks * sizeof(long));
        if (rd->ts != rd->ts0) { PyMem_Free(rd->ts); PyMem_Free(rd->ks); }
        rd->ts = ts; rd->ks = ks; rd->cap_chunks = cap;
    }
    if (k > LONG_MAX) { PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to C long"); return -1; }
    rd->ts[rd->n_chunks] = rd->t;
    rd->ks[rd->n_chunks] = (long)k;
    rd->n_chunks++;
    return 0;
}

/* an event's payload: judged here, or (once one was not) handed to Python in order */
static int dispatch(Splitter *self, read_t *rd, const char *p, Py_ssize_t n) {
    rd->events++;
    if (rd->rest == NULL) {
        if (n == 6 && memcmp(p, "[DONE]", 6) == 0) { rd->flags |= F_DONE; return 0; }
        chunk_t ev;
        if (read_chunk((const unsigned char *)p, n, self->mode, &ev)) {
            if (ev.has_sim_t) {
                if (rd->lags == NULL && !(rd->lags = PyList_New(0))) return -1;
                PyObject *f = PyFloat_FromDouble(ev.sim_t);
                if (!f || PyList_Append(rd->lags, f) < 0) { Py_XDECREF(f); return -1; }
                Py_DECREF(f);
            }
            if (ev.prompt_tokens >= 0) rd->prompt_tokens = ev.prompt_tokens;
            if (ev.cached_tokens >= 0) rd->cached_tokens = ev.cached_tokens;
            long long k;
            if (ev.completion_tokens >= 0) {
                rd->completion_tokens = ev.completion_tokens;
                long long so_far = rd->counted + rd->new_tokens;
                k = ev.completion_tokens > so_far ? ev.completion_tokens - so_far : 0;
            } else {
                k = ev.content ? 1 : 0;
            }
            if (ev.content) {
                rd->flags |= F_CONTENT | (ev.answer ? F_ANSWER : 0);
                if (take_chunk(rd, k) < 0) return -1;
            }
            rd->new_tokens += k;
            return 0;
        }
        if (!(rd->rest = PyList_New(0))) return -1;
    }
    PyObject *b = PyBytes_FromStringAndSize(p, n);
    if (!b || PyList_Append(rd->rest, b) < 0) { Py_XDECREF(b); return -1; }
    Py_DECREF(b);
    return 0;
}

/* one line (without its \n; a trailing \r dropped), as SSEDecoder reads it */
static int line(Splitter *self, read_t *rd, const char *p, Py_ssize_t n) {
    if (n && p[n - 1] == '\r') n--;
    if (n == 0) {
        if (self->data_lines) {
            int rc = dispatch(self, rd, self->data, self->data_len);
            self->data_len = self->data_lines = 0;
            return rc;
        }
        return 0;
    }
    if (n >= 5 && memcmp(p, "data:", 5) == 0) {
        p += 5; n -= 5;
        if (n && *p == ' ') { p++; n--; }
        Py_ssize_t need = self->data_len + (self->data_lines ? 1 : 0) + n;
        if (grow(&self->data, &self->data_cap, need + 1) < 0) return -1;
        if (self->data_lines) self->data[self->data_len++] = '\n';
        memcpy(self->data + self->data_len, p, (size_t)n);
        self->data_len += n;
        self->data_lines++;
    }
    return 0;  /* comments (:...) and other fields: ignored */
}

static PyObject *do_feed(Splitter *self, PyObject *const *args, Py_ssize_t nargs, int brief) {
    /* feed(data, t, counted, times, tokens) -> (new, events, flags, prompt, completion, cached, lags, rest);
       brief (feed_tokens): `new` alone where that is all the read says to Python (no [DONE], no
       lag, nothing left to the Python road), its usage kept for the next full answer */
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "feed(data, t, counted, times, tokens)"); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    read_t rd = {0};
    rd.counted = PyLong_AsLongLong(args[2]);
    if (rd.counted == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) { PyBuffer_Release(&view); return NULL; }
        PyErr_Clear();  /* a server's absurd count: every event of the read to the Python road */
        rd.counted = 0;
        if (!(rd.rest = PyList_New(0))) { PyBuffer_Release(&view); return NULL; }
    }
    rd.prompt_tokens = rd.completion_tokens = rd.cached_tokens = -1;
    rd.t_obj = args[1];
    rd.t = PyFloat_AsDouble(args[1]);
    if (rd.t == -1.0 && PyErr_Occurred()) { PyBuffer_Release(&view); Py_XDECREF(rd.rest); return NULL; }
    rd.times = args[3];
    rd.tokens = args[4];
    rd.ts = rd.ts0; rd.ks = rd.ks0; rd.cap_chunks = 32;
    const char *p = view.buf, *end = p + view.len;
    int rc = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {  /* the unfinished tail */
            Py_ssize_t n = end - p;
            if (grow(&self->buf, &self->buf_cap, self->buf_len + n) < 0) { rc = -1; break; }
            memcpy(self->buf + self->buf_len, p, (size_t)n);
            self->buf_len += n;
            break;
        }
        if (self->buf_len) {  /* the tail of the last read ends here */
            Py_ssize_t n = nl - p;
            if (grow(&self->buf, &self->buf_cap, self->buf_len + n) < 0) { rc = -1; break; }
            memcpy(self->buf + self->buf_len, p, (size_t)n);
            Py_ssize_t total = self->buf_len + n;
            self->buf_len = 0;
            rc = line(self, &rd, self->buf, total);
        } else {
            rc = line(self, &rd, p, nl - p);
        }
        if (rc < 0) break;
        p = nl + 1;
    }
    PyBuffer_Release(&view);
    if (rc == 0) rc = flush(&rd);  /* before Python takes the rest: the chunks stay in order */
    if (rd.ts != rd.ts0) { PyMem_Free(rd.ts); PyMem_Free(rd.ks); }
    if (rc < 0) { Py_XDECREF(rd.lags); Py_XDECREF(rd.rest); return NULL; }
    if (self->buf_len > self->max_event || self->data_len > self->max_event) {  /* as SSEDecoder: a non-SSE body */
        self->buf_len = self->data_len = self->data_lines = 0;
        rd.flags |= F_TOO_BIG;
    }
    if (brief && !(rd.flags & (F_DONE | F_TOO_BIG)) && !rd.lags && !rd.rest) {
        if (rd.prompt_tokens >= 0) self->pend_prompt = rd.prompt_tokens;
        if (rd.completion_tokens >= 0) self->pend_completion = rd.completion_tokens;
        if (rd.cached_tokens >= 0) self->pend_cached = rd.cached_tokens;
        self->pend_events += rd.events;
        return PyLong_FromLongLong(rd.new_tokens);
    }
    /* a full answer: the usage of brief reads before it, where this read's own says none */
    if (rd.prompt_tokens < 0) rd.prompt_tokens = self->pend_prompt;
    if (rd.completion_tokens < 0) rd.completion_tokens = self->pend_completion;
    if (rd.cached_tokens < 0) rd.cached_tokens = self->pend_cached;
    rd.events += self->pend_events;
    self->pend_prompt = self->pend_completion = self->pend_cached = -1;
    self->pend_events = 0;
    PyObject *lags = rd.lags ? rd.lags : Py_NewRef(Py_None);
    PyObject *rest = rd.rest ? rd.rest : Py_NewRef(Py_None);
    return Py_BuildValue("(LniLLLNN)", rd.new_tokens, rd.events, rd.flags, rd.prompt_tokens, rd.completion_tokens,
                         rd.cached_tokens, lags, rest);
}

static PyObject *Splitter_feed(Splitter *self, PyObject *const *args, Py_ssize_t nargs) {
    return do_feed(self, args, nargs, 0);
}

static PyObject *Splitter_feed_tokens(Splitter *self, PyObject *const *args, Py_ssize_t nargs) {
    return do_feed(self, args, nargs, 1);
}

static PyObject *Splitter_usage(Splitter *self, PyObject *Py_UNUSED(unused)) {
    /* the usage brief reads kept (the latest since the last full answer), and forget it */
    PyObject *out = Py_BuildValue("(LLLn)", self->pend_prompt, self->pend_completion, self->pend_cached, self->pend_events);
    self->pend_prompt = self->pend_completion = self->pend_cached = -1;
    self->pend_events = 0;
    return out;
}

static PyObject *Splitter_close(Splitter *self, PyObject *Py_UNUSED(unused)) {
    /* the end of the body: an unfinished event's payloads (SSEDecoder.close), for Python */
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    if (self->buf_len || self->data_lines) {
        read_t rd = {0};
        rd.rest = out;  /* every payload goes to Python */
        int rc = 0;
        if (self->buf_len) {
            Py_ssize_t n = self->buf_len;
            self->buf_len = 0;
            rc = line(self, &rd, self->buf, n);
        }
        if (rc == 0) rc = line(self, &rd, "", 0);
        if (rc < 0) { Py_DECREF(out); return NULL; }
    }
    self->buf_len = self->data_len = self->data_lines = 0;
    return out;
}

static PyObject *Splitter_pending(Splitter *self, PyObject *Py_UNUSED(unused)) {
    /* bytes held for the next read (the unfinished line, the event's data so far) */
    return PyLong_FromSsize_t(self->buf_len + self->data_len);
}

static PyMethodDef Splitter_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))Splitter_feed, METH_FASTCALL,
     "feed(data, t, counted, times, tokens) -> (new, events, flags, prompt_tokens, completion_tokens, cached_tokens, lags, rest)"},
    {"feed_tokens", (PyCFunction)(void (*)(void))Splitter_feed_tokens, METH_FASTCALL,
     "feed_tokens(data, t, counted, times, tokens) -> the read's new tokens (int) where that is all it says, else feed()'s tuple"},
    {"usage", (PyCFunction)Splitter_usage, METH_NOARGS,
     "usage() -> (prompt_tokens, completion_tokens, cached_tokens, events) of the brief reads since the last full answer (-1: none)"},
    {"close", (PyCFunction)Splitter_close, METH_NOARGS, "close() -> the payloads of an unfinished event (for Python to decode)"},
    {"pending", (PyCFunction)Splitter_pending, METH_NOARGS, "pending() -> bytes held for the next read"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SplitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "redline.engine.client._speedups.Splitter",
    .tp_basicsize = sizeof(Splitter),
    .tp_dealloc = (destructor)Splitter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An OpenAI stream's SSE splitter and chunk reader, one call per socket read (see the module).",
    .tp_methods = Splitter_methods,
    .tp_init = (initproc)Splitter_init,
    .tp_new = PyType_GenericNew,
};

/* read_chunk on its own, for the tests: (content, answer, prompt, completion, cached, sim_t) or None */
static PyObject *py_read_chunk(PyObject *Py_UNUSED(mod), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "read_chunk(payload, mode)"); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    int mode = (int)PyLong_AsLong(args[1]);
    chunk_t ev;
    int ok = read_chunk(view.buf, view.len, mode, &ev);
    PyBuffer_Release(&view);
    if (!ok) Py_RETURN_NONE;
    PyObject *sim = ev.has_sim_t ? PyFloat_FromDouble(ev.sim_t) : Py_NewRef(Py_None);
    return Py_BuildValue("(OOLLLN)", ev.content ? Py_True : Py_False, ev.answer ? Py_True : Py_False,
                         ev.prompt_tokens, ev.completion_tokens, ev.cached_tokens, sim);
}

/* recv_stamped(fd, size): one read of a non-blocking socket with SO_TIMESTAMPNS on, as
   engine/client/kstamp.py RawTransport._read does it in Python: (data, t), t on the
   time.perf_counter() clock (CLOCK_MONOTONIC), the kernel's receive time where the read carries
   one no older than max_age_ns (else the time of the read). OSError as socket.recvmsg raises it
   (BlockingIOError when nothing is there); b"" at the end of the stream. */
#ifdef HAVE_RECV_STAMPED
static char recv_buf[65536];  /* used under the GIL only */

static PyObject *py_recv_stamped(PyObject *Py_UNUSED(mod), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "recv_stamped(fd, size, max_age_ns)"); return NULL; }
    int fd = (int)PyLong_AsLong(args[0]);
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    long long max_age = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (size <= 0 || size > (Py_ssize_t)sizeof recv_buf) size = sizeof recv_buf;
    union { char buf[CMSG_SPACE(sizeof(struct timespec))]; struct cmsghdr align; } control;
    struct iovec iov = {recv_buf, (size_t)size};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t n = recvmsg(fd, &msg, 0);
    if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
    struct timespec rt, mono;
    clock_gettime(CLOCK_REALTIME, &rt);  /* the two clocks back to back, realtime first: never an early stamp */
    clock_gettime(CLOCK_MONOTONIC, &mono);
    long long mono_ns = (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec;
    double t = (double)mono_ns / 1e9;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            long long age = ((long long)rt.tv_sec - (long long)ts.tv_sec) * 1000000000LL + ((long long)rt.tv_nsec - (long long)ts.tv_nsec);
            if (age >= 0 && age < max_age) t = (double)(mono_ns - age) / 1e9;
            break;
        }
    }
    PyObject *data = PyBytes_FromStringAndSize(recv_buf, n);
    if (!data) return NULL;
    PyObject *tf = PyFloat_FromDouble(t);
    if (!tf) { Py_DECREF(data); return NULL; }
    PyObject *out = PyTuple_Pack(2, data, tf);
    Py_DECREF(data);
    Py_DECREF(tf);
    return out;
}
#endif

static PyMethodDef module_methods[] = {
#ifdef HAVE_RECV_STAMPED
    {"recv_stamped", (PyCFunction)(void (*)(void))py_recv_stamped, METH_FASTCALL,
     "recv_stamped(fd, size, max_age_ns) -> (data, t): one read and its kernel receive time on the perf_counter() clock"},
#endif
    {"read_chunk", (PyCFunction)(void (*)(void))py_read_chunk, METH_FASTCALL,
     "read_chunk(payload, mode) -> (content, answer, prompt_tokens, completion_tokens, cached_tokens, sim_t) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "The per-token path of an OpenAI stream in C (see engine/client/_speedups.c).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (PyType_Ready(&SplitterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    frombytes_name = PyUnicode_InternFromString("frombytes");
    if (!frombytes_name) return NULL;
    Py_INCREF(&SplitterType);
    if (PyModule_AddObject(m, "Splitter", (PyObject *)&SplitterType) < 0) return NULL;
    PyModule_AddIntConstant(m, "MODE_CHAT", MODE_CHAT);
    PyModule_AddIntConstant(m, "MODE_COMPLETIONS", MODE_COMPLETIONS);
    PyModule_AddIntConstant(m, "DONE", F_DONE);
    PyModule_AddIntConstant(m, "CONTENT", F_CONTENT);
    PyModule_AddIntConstant(m, "ANSWER", F_ANSWER);
    PyModule_AddIntConstant(m, "TOO_BIG", F_TOO_BIG);
    return m;
}
