/* raetsalt._trains: the native profile's per-datagram work in C (docs/native-profile.md).
 *
 * The compiled twin of raetsalt/engine/native/trains.py (PyKernel), which says what every function
 * does; both are tested against each other byte for byte.  Only computation: no sockets,
 * clocks or files.  libsodium is PyNaCl's own copy, reached through the two function
 * pointers that bind() receives (raetsalt/crypto/kernel.py finds them in PyNaCl), so no
 * second libsodium is linked or needed.
 *
 * The layouts below are raetsalt/engine/native/frames.py's (tests/engine/native/
 * test_frames_kernel.py reads these #defines and compares them).
 *
 * Untrusted input (open_train's datagrams) is read only inside the bounds of its buffer;
 * anything that is not exactly the layout the fast path knows is handed back to Python
 * untouched (a RAW or PLAIN entry), where the ordinary parser counts what it drops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int (*box_fn)(unsigned char *, const unsigned char *, unsigned long long,
                      const unsigned char *, const unsigned char *);

static box_fn box_easy = NULL;      /* crypto_box_easy_afternm */
static box_fn box_open_easy = NULL; /* crypto_box_open_easy_afternm */

#define PREFIX 14   /* magic (2), receiver's uid (4), counter (8) */
#define TAG 16
#define KEY 32
#define NONCE_HEAD 16
#define LEAST_SIZE 9 /* 0x03, counter (8) */
#define DATA_SIZE 17 /* 0x01, kind, stream, seq (4), total (4), offset (4), length (2) */
#define PIECE_HEAD (LEAST_SIZE + DATA_SIZE)
#define LEAST_FRAME 3
#define DATA_FRAME 1
#define ACK_FRAME 2
#define ONE_RANGE 18 /* 0x02, range count 1, first counter (8), last counter (8) */
#define ACK_NOW_FRAME 5
#define BATCH_FRAME 4
#define BATCH_HEAD 9 /* 0x04, kind, stream, first seq (4), count (2) */
#define BATCH_LENGTH 2
#define STREAMS 2
#define MAGIC0 0xf5
#define MAGIC1 0x01
#define MAX_DATAGRAM 65535
#define ABI 4 /* raetsalt.engine.native.trains.ABI: a module built from other source is not used */

enum { ENTRY_RUN = 0, ENTRY_PLAIN = 1, ENTRY_RAW = 2, ENTRY_FORGED = 3, ENTRY_MESSAGES = 4 };

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v);
}

static uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get64(const unsigned char *p) {
    return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static int ready(void) {
    if (box_easy == NULL || box_open_easy == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "raetsalt._trains: bind() was not called");
        return 0;
    }
    return 1;
}

/* Checks shared by the functions below: a 32-byte key and a 16-byte nonce head. */
static int key_and_nonce(const Py_buffer *key, const Py_buffer *nonce) {
    if (key->len != KEY || nonce->len != NONCE_HEAD) {
        PyErr_SetString(PyExc_ValueError, "key must be 32 bytes and nonce head 16");
        return 0;
    }
    return 1;
}

static void make_nonce(unsigned char *nonce, const Py_buffer *head, uint64_t counter) {
    memcpy(nonce, head->buf, NONCE_HEAD);
    put64(nonce + NONCE_HEAD, counter);
}

static void put_prefix(unsigned char *p, uint32_t fuid, uint64_t counter) {
    p[0] = MAGIC0; p[1] = MAGIC1;
    put32(p + 2, fuid);
    put64(p + 6, counter);
}

/* bind(easy, open_easy): the addresses of libsodium's crypto_box_easy_afternm and
 * crypto_box_open_easy_afternm (as integers). */
static PyObject *bind(PyObject *self, PyObject *args) {
    unsigned long long easy, open_easy;
    if (!PyArg_ParseTuple(args, "KK:bind", &easy, &open_easy)) return NULL;
    if (!easy || !open_easy) {
        PyErr_SetString(PyExc_ValueError, "null function pointer");
        return NULL;
    }
    box_easy = (box_fn)(uintptr_t)easy;
    box_open_easy = (box_fn)(uintptr_t)open_easy;
    Py_RETURN_NONE;
}

/* seal(key, nonce_head, fuid, counter, parts) -> bytearray: one datagram carrying the
 * concatenation of ``parts`` (bytes-like objects). */
static PyObject *seal(PyObject *self, PyObject *args) {
    Py_buffer key, nonce_head;
    unsigned long fuid;
    unsigned long long counter;
    PyObject *parts, *seq = NULL, *out = NULL;
    if (!ready()) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*kKO:seal", &key, &nonce_head, &fuid, &counter, &parts))
        return NULL;
    if (!key_and_nonce(&key, &nonce_head) || fuid > 0xffffffffUL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "fuid out of range");
        goto done;
    }
    seq = PySequence_Fast(parts, "parts must be a sequence");
    if (seq == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0, i;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_buffer *views = PyMem_Calloc(n ? n : 1, sizeof(Py_buffer));
    if (views == NULL) { PyErr_NoMemory(); goto done; }
    for (i = 0; i < n; i++) {
        if (PyObject_GetBuffer(items[i], &views[i], PyBUF_SIMPLE) < 0) break;
        total += views[i].len;
    }
    if (i == n && total > MAX_DATAGRAM - PREFIX - TAG) {
        PyErr_SetString(PyExc_ValueError, "datagram too large");
    } else if (i == n) {
        out = PyByteArray_FromStringAndSize(NULL, PREFIX + TAG + total);
        if (out != NULL) {
            unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(out);
            unsigned char nonce[24];
            Py_ssize_t pos = PREFIX + TAG;
            put_prefix(p, (uint32_t)fuid, counter);
            for (Py_ssize_t j = 0; j < n; j++) {
                memcpy(p + pos, views[j].buf, views[j].len);
                pos += views[j].len;
            }
            make_nonce(nonce, &nonce_head, counter);
            box_easy(p + PREFIX, p + PREFIX + TAG, (unsigned long long)total, nonce,
                     key.buf);
        }
    }
    for (Py_ssize_t j = 0; j < i; j++) PyBuffer_Release(&views[j]);
    PyMem_Free(views);
done:
    Py_XDECREF(seq);
    PyBuffer_Release(&key);
    PyBuffer_Release(&nonce_head);
    return out;
}

/* open(key, nonce_head, data, counter) -> bytearray | None: the frames of one native
 * datagram (after its prefix), None if the box does not open. */
static PyObject *open_box(PyObject *self, PyObject *args) {
    Py_buffer key, nonce_head, data;
    unsigned long long counter;
    PyObject *out = NULL;
    if (!ready()) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*K:open", &key, &nonce_head, &data, &counter))
        return NULL;
    if (!key_and_nonce(&key, &nonce_head)) goto done;
    if (data.len < PREFIX + TAG) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, data.len - PREFIX - TAG);
    if (out != NULL) {
        unsigned char nonce[24];
        make_nonce(nonce, &nonce_head, counter);
        if (box_open_easy((unsigned char *)PyByteArray_AS_STRING(out),
                          (const unsigned char *)data.buf + PREFIX,
                          (unsigned long long)(data.len - PREFIX), nonce, key.buf) != 0) {
            Py_DECREF(out);
            out = Py_None;
            Py_INCREF(out);
        }
    }
done:
    PyBuffer_Release(&key);
    PyBuffer_Release(&nonce_head);
    PyBuffer_Release(&data);
    return out;
}

/* seal_pieces(key, nonce_head, fuid, counter, least, kind, stream, seq, body, offset,
 *             chunk, count, ack_now, out) -> None
 * ``count`` datagrams back to back in ``out``, the i-th (counters counter + 1 + i) carrying
 * LEAST(least) and the DATA frame of body[offset + i * chunk : + chunk] (message ``seq`` of
 * len(body) bytes); the last one also ACK_NOW when ``ack_now``.  ``out`` must be exactly
 * count * (56 + chunk) + ack_now bytes. */
static PyObject *seal_pieces(PyObject *self, PyObject *args) {
    Py_buffer key, nonce_head, body, out;
    unsigned long fuid, seq;
    unsigned long long counter, least;
    int kind, stream, ack_now;
    Py_ssize_t offset, chunk, count;
    PyObject *result = NULL;
    if (!ready()) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*kKKiiky*nnnpw*:seal_pieces", &key, &nonce_head, &fuid,
                          &counter, &least, &kind, &stream, &seq, &body, &offset, &chunk,
                          &count, &ack_now, &out))
        return NULL;
    Py_ssize_t size = PREFIX + TAG + PIECE_HEAD + chunk;
    if (!key_and_nonce(&key, &nonce_head)) goto done;
    if (fuid > 0xffffffffUL || seq > 0xffffffffUL || kind < 0 || kind > 255 || stream < 0 ||
        stream > 255 || chunk <= 0 || chunk > 0xffff || size > MAX_DATAGRAM || count < 0 ||
        offset < 0 || body.len > 0xffffffffL || offset > body.len ||
        count > (body.len - offset) / chunk || out.len != count * size + (ack_now ? 1 : 0)) {
        PyErr_SetString(PyExc_ValueError, "seal_pieces: arguments out of range");
        goto done;
    }
    unsigned char *p = out.buf;
    const unsigned char *data = body.buf;
    unsigned char nonce[24];
    memcpy(nonce, nonce_head.buf, NONCE_HEAD);
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t c = counter + 1 + (uint64_t)i;
        Py_ssize_t plain = PIECE_HEAD + chunk + ((ack_now && i == count - 1) ? 1 : 0);
        unsigned char *f = p + PREFIX + TAG;
        put_prefix(p, (uint32_t)fuid, c);
        f[0] = LEAST_FRAME;
        put64(f + 1, least);
        f += LEAST_SIZE;
        f[0] = DATA_FRAME; f[1] = (unsigned char)kind; f[2] = (unsigned char)stream;
        put32(f + 3, (uint32_t)seq);
        put32(f + 7, (uint32_t)body.len);
        put32(f + 11, (uint32_t)(offset + i * chunk));
        f[15] = (unsigned char)(chunk >> 8); f[16] = (unsigned char)chunk;
        memcpy(f + DATA_SIZE, data + offset + i * chunk, chunk);
        if (plain > PIECE_HEAD + chunk) f[DATA_SIZE + chunk] = ACK_NOW_FRAME;
        put64(nonce + NONCE_HEAD, c);
        box_easy(p + PREFIX, p + PREFIX + TAG, (unsigned long long)plain, nonce, key.buf);
        p += size;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&key);
    PyBuffer_Release(&nonce_head);
    PyBuffer_Release(&body);
    PyBuffer_Release(&out);
    return result;
}

static int append_entry(PyObject *list, PyObject *entry);

/* seal_batches(key, nonce_head, fuid, counter, least, kind, stream, first_seq, bodies,
 *              start, end, room, budget, limit, most, keep_tail)
 *   -> (list of (datagram, count), asking)
 * Whole messages bodies[start:end] (bytes; the one at index i has seq first_seq + i) in
 * datagrams of consecutive counters from counter + 1, each LEAST(least) and one BATCH
 * frame of as many of the next bodies as fit ``room`` bytes (head, lengths, bodies),
 * at most ``most`` datagrams, as the channel's flush frames them: a datagram goes while
 * the bytes before it stay below ``limit`` (what express frames may have in flight), and
 * one whose size (without ACK_NOW) uses up ``budget`` (the window) carries ACK_NOW, as
 * does every one after it; ``asking`` counts those.  Stops early at a body that does not
 * fit ``room`` alone, and, when ``keep_tail``, before the datagram that would take the
 * last body (the caller fills that one with what follows the run). */
static PyObject *seal_batches(PyObject *self, PyObject *args) {
    Py_buffer key, nonce_head;
    unsigned long fuid, first_seq;
    unsigned long long counter, least;
    int kind, stream;
    Py_ssize_t start, end, room, budget, limit, most;
    int keep_tail;
    PyObject *bodies, *seq = NULL, *list = NULL, *result = NULL;
    if (!ready()) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*kKKiikOnnnnnnp:seal_batches", &key, &nonce_head,
                          &fuid, &counter, &least, &kind, &stream, &first_seq, &bodies, &start,
                          &end, &room, &budget, &limit, &most, &keep_tail))
        return NULL;
    if (!key_and_nonce(&key, &nonce_head)) goto done;
    seq = PySequence_Fast(bodies, "bodies must be a sequence");
    if (seq == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (fuid > 0xffffffffUL || first_seq > 0xffffffffUL || kind < 0 || kind > 255 ||
        stream < 0 || stream > 255 || start < 0 || end > n || start > end || most < 0 ||
        room < BATCH_HEAD || room > MAX_DATAGRAM - PREFIX - TAG - LEAST_SIZE - 1) {
        PyErr_SetString(PyExc_ValueError, "seal_batches: arguments out of range");
        goto done;
    }
    for (Py_ssize_t i = start; i < end; i++) {
        if (!PyBytes_Check(items[i])) {
            PyErr_SetString(PyExc_TypeError, "seal_batches: bodies must be bytes");
            goto done;
        }
    }
    list = PyList_New(0);
    if (list == NULL) goto done;
    unsigned char nonce[24];
    memcpy(nonce, nonce_head.buf, NONCE_HEAD);
    Py_ssize_t index = start, made = 0, spent = 0, asking = 0;
    while (index < end && made < most && limit - spent > 0) {
        Py_ssize_t used = BATCH_HEAD, stop = index;
        while (stop < end) {
            Py_ssize_t need = used + BATCH_LENGTH + PyBytes_GET_SIZE(items[stop]);
            if (need > room || stop - index >= 0xffff) break;
            used = need;
            stop++;
        }
        if (stop == index) break; /* a body too large for a datagram of its own */
        if (keep_tail && stop == end) break;
        Py_ssize_t plain = LEAST_SIZE + used, size = PREFIX + TAG + plain;
        int ack_now = budget - spent - size <= 0;
        PyObject *datagram = PyByteArray_FromStringAndSize(NULL, size + ack_now);
        if (datagram == NULL) goto fail;
        unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(datagram);
        uint64_t c = counter + 1 + (uint64_t)made;
        put_prefix(p, (uint32_t)fuid, c);
        unsigned char *f = p + PREFIX + TAG;
        f[0] = LEAST_FRAME;
        put64(f + 1, least);
        f += LEAST_SIZE;
        Py_ssize_t count = stop - index;
        f[0] = BATCH_FRAME; f[1] = (unsigned char)kind; f[2] = (unsigned char)stream;
        put32(f + 3, (uint32_t)(first_seq + (unsigned long)index));
        f[7] = (unsigned char)(count >> 8); f[8] = (unsigned char)count;
        unsigned char *lengths = f + BATCH_HEAD, *body = lengths + BATCH_LENGTH * count;
        for (Py_ssize_t i = index; i < stop; i++) {
            Py_ssize_t length = PyBytes_GET_SIZE(items[i]);
            lengths[0] = (unsigned char)(length >> 8); lengths[1] = (unsigned char)length;
            lengths += BATCH_LENGTH;
            memcpy(body, PyBytes_AS_STRING(items[i]), length);
            body += length;
        }
        if (ack_now) *body = ACK_NOW_FRAME;
        put64(nonce + NONCE_HEAD, c);
        box_easy(p + PREFIX, p + PREFIX + TAG, (unsigned long long)(plain + ack_now), nonce,
                 key.buf);
        if (append_entry(list, Py_BuildValue("(Nn)", datagram, count)) < 0) goto fail;
        spent += size + ack_now;
        asking += ack_now;
        made++;
        index = stop;
    }
    result = Py_BuildValue("(On)", list, asking);
fail:
    Py_XDECREF(list);
done:
    Py_XDECREF(seq);
    PyBuffer_Release(&key);
    PyBuffer_Release(&nonce_head);
    return result;
}

/* One fast piece: LEAST + DATA (+ ACK_NOW), every field in range. */
typedef struct {
    uint64_t counter, least;
    uint32_t seq, total, offset, length;
    int kind, stream, ack_now;
} piece_t;

static int parse_piece(const unsigned char *plain, Py_ssize_t size, piece_t *pc) {
    if (size < PIECE_HEAD + 1 || plain[0] != LEAST_FRAME || plain[LEAST_SIZE] != DATA_FRAME)
        return 0;
    const unsigned char *d = plain + LEAST_SIZE;
    pc->least = get64(plain + 1);
    pc->kind = d[1];
    pc->stream = d[2];
    pc->seq = get32(d + 3);
    pc->total = get32(d + 7);
    pc->offset = get32(d + 11);
    pc->length = ((uint32_t)d[15] << 8) | d[16];
    Py_ssize_t rest = size - PIECE_HEAD - (Py_ssize_t)pc->length;
    if (pc->stream >= STREAMS || pc->length == 0) return 0;
    if ((uint64_t)pc->offset + pc->length > pc->total) return 0;
    if (rest == 0) pc->ack_now = 0;
    else if (rest == 1 && plain[size - 1] == ACK_NOW_FRAME) pc->ack_now = 1;
    else return 0;
    return 1;
}

/* One datagram of whole messages: LEAST + one BATCH frame (+ ACK_NOW), every field in
 * range, the lengths adding up exactly, and the LEAST not above its own counter. */
typedef struct {
    uint64_t least;
    uint32_t seq;
    int kind, stream, ack_now;
    Py_ssize_t count, lengths, bodies; /* offsets of the lengths and the bodies in plain */
} batch_t;

static int parse_batch(const unsigned char *plain, Py_ssize_t size, uint64_t counter,
                       batch_t *b) {
    if (size < LEAST_SIZE + BATCH_HEAD || plain[0] != LEAST_FRAME ||
        plain[LEAST_SIZE] != BATCH_FRAME)
        return 0;
    const unsigned char *h = plain + LEAST_SIZE;
    b->least = get64(plain + 1);
    b->kind = h[1];
    b->stream = h[2];
    b->seq = get32(h + 3);
    b->count = ((Py_ssize_t)h[7] << 8) | h[8];
    b->lengths = LEAST_SIZE + BATCH_HEAD;
    b->bodies = b->lengths + BATCH_LENGTH * b->count;
    if (b->stream >= STREAMS || b->count == 0 || b->least > counter || b->bodies > size ||
        (uint64_t)b->seq + (uint64_t)b->count > 0xffffffffULL)
        return 0;
    Py_ssize_t total = b->bodies;
    for (Py_ssize_t i = 0; i < b->count; i++) {
        const unsigned char *l = plain + b->lengths + BATCH_LENGTH * i;
        total += ((Py_ssize_t)l[0] << 8) | l[1];
    }
    if (total == size) b->ack_now = 0;
    else if (total + 1 == size && plain[size - 1] == ACK_NOW_FRAME) b->ack_now = 1;
    else return 0;
    return 1;
}

/* The replay window's view of a counter (raetsalt.engine.native's ReplayWindow). */
static int seen(const unsigned char *bits, Py_ssize_t nbits, uint64_t highest, uint64_t c) {
    if (c > highest) return 0;
    if (highest - c >= (uint64_t)nbits) return 1; /* (c + nbits could wrap) */
    uint64_t index = c & (uint64_t)(nbits - 1);
    return (bits[index >> 3] >> (index & 7)) & 1;
}

static int append_entry(PyObject *list, PyObject *entry) {
    if (entry == NULL) return -1;
    int status = PyList_Append(list, entry);
    Py_DECREF(entry);
    return status;
}

typedef struct {
    int open;
    piece_t first;
    uint64_t last_counter;
    uint32_t next_offset, length, chunk, count;
    int ack_now, short_piece;
    Py_ssize_t pos;
} run_t;

/* Datagrams of whole messages with consecutive counters and seqs, one stream and kind,
 * the same least: taken as one entry. */
typedef struct {
    int open;
    batch_t first;
    uint64_t first_counter, last_counter;
    uint32_t next_seq;
    int ack_now;
    Py_ssize_t pos, datagrams;
    PyObject *lengths, *per; /* lists of ints: every message's length, messages per datagram */
} messages_t;

static int flush_messages(PyObject *list, messages_t *m) {
    if (!m->open) return 0;
    m->open = 0;
    PyObject *lengths = m->lengths, *per = m->per;
    m->lengths = m->per = NULL;
    return append_entry(
        list, Py_BuildValue("(iKnKiiiInNN)", ENTRY_MESSAGES, m->first_counter, m->datagrams,
                            m->first.least, m->ack_now, m->first.kind, m->first.stream,
                            m->first.seq, m->pos, lengths, per));
}

static int add_messages(messages_t *m, const batch_t *b, const unsigned char *plain,
                        uint64_t counter, unsigned char *o, Py_ssize_t *wpos) {
    if (!m->open) {
        m->lengths = PyList_New(0);
        m->per = PyList_New(0);
        if (m->lengths == NULL || m->per == NULL) {
            Py_CLEAR(m->lengths);
            Py_CLEAR(m->per);
            return -1;
        }
        m->open = 1;
        m->first = *b;
        m->first_counter = counter;
        m->ack_now = 0;
        m->pos = *wpos;
        m->datagrams = 0;
    }
    for (Py_ssize_t i = 0; i < b->count; i++) {
        const unsigned char *l = plain + b->lengths + BATCH_LENGTH * i;
        PyObject *length = PyLong_FromLong(((long)l[0] << 8) | l[1]);
        if (length == NULL || PyList_Append(m->lengths, length) < 0) {
            Py_XDECREF(length);
            return -1;
        }
        Py_DECREF(length);
    }
    PyObject *count = PyLong_FromSsize_t(b->count);
    if (count == NULL || PyList_Append(m->per, count) < 0) {
        Py_XDECREF(count);
        return -1;
    }
    Py_DECREF(count);
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < b->count; i++) {
        const unsigned char *l = plain + b->lengths + BATCH_LENGTH * i;
        size += ((Py_ssize_t)l[0] << 8) | l[1];
    }
    memcpy(o + *wpos, plain + b->bodies, size);
    *wpos += size;
    m->last_counter = counter;
    m->next_seq = b->seq + (uint32_t)b->count;
    m->ack_now |= b->ack_now;
    m->datagrams += 1;
    return 0;
}

static void drop_messages(messages_t *m) {
    Py_CLEAR(m->lengths);
    Py_CLEAR(m->per);
    m->open = 0;
}

static int flush_run(PyObject *list, run_t *run) {
    if (!run->open) return 0;
    run->open = 0;
    return append_entry(
        list, Py_BuildValue("(iKnKiiiIIInnI)", ENTRY_RUN, run->first.counter, (Py_ssize_t)run->count,
                            run->first.least, run->ack_now, run->first.kind, run->first.stream,
                            run->first.seq, run->first.total, run->first.offset, run->pos,
                            (Py_ssize_t)run->length, run->chunk));
}

/* open_train(key, nonce_head, uid, data, segment, bits, highest, out) -> list
 * The datagrams of ``data`` (``segment`` bytes each, the last may be shorter), in order:
 *   (0, first counter, count, least, ack_now, kind, stream, seq, total, offset, pos,
 *      length, chunk): ``count`` fast pieces with consecutive counters, of one message,
 *      contiguous, all but the last of ``chunk`` bytes; their data is out[pos:pos + length];
 *   (1, counter, pos, length): any other datagram that opened; its frames are
 *      out[pos:pos + length];
 *   (2, start, length): a datagram left to the ordinary path (another uid, a counter seen
 *      or not above the ones before it, not native at all);
 *   (3, counter): a datagram for this uid with a fresh counter whose box does not open;
 *   (4, first counter, count, least, ack_now, kind, stream, seq, pos, lengths, per):
 *      ``count`` datagrams of whole messages (LEAST + one BATCH frame (+ ACK_NOW), the
 *      least not above the counter) with consecutive counters and seqs, one stream, kind
 *      and least; ``lengths`` lists every message's length, ``per`` how many each
 *      datagram carried; the messages are out[pos:pos + sum(lengths)], back to back.
 * ``out`` must have room for len(data) bytes.  Nothing is marked in the window. */
static PyObject *open_train(PyObject *self, PyObject *args) {
    Py_buffer key, nonce_head, data, bits, out;
    unsigned long uid;
    unsigned long long highest;
    Py_ssize_t segment;
    PyObject *list = NULL;
    unsigned char *scratch = NULL;
    if (!ready()) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*ky*ny*Kw*:open_train", &key, &nonce_head, &uid, &data,
                          &segment, &bits, &highest, &out))
        return NULL;
    Py_ssize_t nbits = bits.len * 8;
    if (!key_and_nonce(&key, &nonce_head)) goto done;
    if (segment <= 0 || segment > MAX_DATAGRAM || out.len < data.len || nbits <= 0 ||
        (nbits & (nbits - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "open_train: arguments out of range");
        goto done;
    }
    scratch = PyMem_Malloc(segment);
    list = PyList_New(0);
    if (scratch == NULL || list == NULL) {
        if (scratch == NULL) PyErr_NoMemory();
        Py_CLEAR(list);
        goto done;
    }
    const unsigned char *in = data.buf;
    unsigned char *o = out.buf;
    Py_ssize_t wpos = 0;
    uint64_t top = highest; /* counters must rise through the train to be taken here */
    int any = 0;
    run_t run = {0};
    messages_t msgs = {0};
    unsigned char nonce[24];
    memcpy(nonce, nonce_head.buf, NONCE_HEAD);
    for (Py_ssize_t start = 0; start < data.len; start += segment) {
        Py_ssize_t size = data.len - start < segment ? data.len - start : segment;
        const unsigned char *d = in + start;
        uint64_t c = 0;
        int raw = size < PREFIX + TAG + 1 || d[0] != MAGIC0 || d[1] != MAGIC1 ||
                  get32(d + 2) != (uint32_t)uid;
        if (!raw) {
            c = get64(d + 6);
            raw = (any && c <= top) || seen(bits.buf, nbits, highest, c);
        }
        Py_ssize_t plain = size - PREFIX - TAG;
        if (!raw) {
            put64(nonce + NONCE_HEAD, c);
            if (box_open_easy(scratch, d + PREFIX, (unsigned long long)(size - PREFIX), nonce,
                              key.buf) != 0) {
                if (flush_run(list, &run) < 0 || flush_messages(list, &msgs) < 0 ||
                    append_entry(list, Py_BuildValue("(iK)", ENTRY_FORGED, c)) < 0)
                    goto fail;
                continue;
            }
        }
        if (raw) {
            if (flush_run(list, &run) < 0 || flush_messages(list, &msgs) < 0 ||
                append_entry(list, Py_BuildValue("(inn)", ENTRY_RAW, start, size)) < 0)
                goto fail;
            continue;
        }
        any = 1;
        top = c;
        piece_t pc;
        batch_t bt;
        if (!parse_piece(scratch, plain, &pc)) {
            if (flush_run(list, &run) < 0) goto fail;
            if (parse_batch(scratch, plain, c, &bt)) {
                if (msgs.open && !(c == msgs.last_counter + 1 && bt.least == msgs.first.least &&
                                   bt.kind == msgs.first.kind &&
                                   bt.stream == msgs.first.stream && bt.seq == msgs.next_seq)) {
                    if (flush_messages(list, &msgs) < 0) goto fail;
                }
                if (add_messages(&msgs, &bt, scratch, c, o, &wpos) < 0) goto fail;
                continue;
            }
            if (flush_messages(list, &msgs) < 0) goto fail;
            memcpy(o + wpos, scratch, plain);
            if (append_entry(list, Py_BuildValue("(iKnn)", ENTRY_PLAIN, c, wpos, plain)) < 0)
                goto fail;
            wpos += plain;
            continue;
        }
        pc.counter = c;
        if (flush_messages(list, &msgs) < 0) goto fail;
        if (run.open && !(c == run.last_counter + 1 && !run.short_piece &&
                          pc.least == run.first.least && pc.kind == run.first.kind &&
                          pc.stream == run.first.stream && pc.seq == run.first.seq &&
                          pc.total == run.first.total && pc.offset == run.next_offset &&
                          pc.length <= run.chunk)) {
            if (flush_run(list, &run) < 0) goto fail;
        }
        if (!run.open) {
            run.open = 1;
            run.first = pc;
            run.chunk = pc.length;
            run.length = 0;
            run.count = 0;
            run.ack_now = 0;
            run.short_piece = 0;
            run.pos = wpos;
        }
        memcpy(o + wpos, scratch + PIECE_HEAD, pc.length);
        wpos += pc.length;
        run.last_counter = c;
        run.next_offset = pc.offset + pc.length;
        run.length += pc.length;
        run.count += 1;
        run.ack_now |= pc.ack_now;
        run.short_piece = pc.length < run.chunk;
    }
    if (flush_run(list, &run) < 0 || flush_messages(list, &msgs) < 0) goto fail;
    goto done;
fail:
    drop_messages(&msgs);
    Py_CLEAR(list);
done:
    PyMem_Free(scratch);
    PyBuffer_Release(&key);
    PyBuffer_Release(&nonce_head);
    PyBuffer_Release(&data);
    PyBuffer_Release(&bits);
    PyBuffer_Release(&out);
    return list;
}

/* seal_message(key, nonce_head, fuid, counter, least, with_ack, ack_first, ack_last, kind,
 *              stream, seq, body, ack_now) -> bytearray
 * The datagram of one whole message: LEAST(least), a one-range ACK (ack_first..ack_last)
 * when ``with_ack``, a BATCH frame of the single ``body`` (message ``seq``), and ACK_NOW
 * when ``ack_now``; what the channel's flush frames for a lone request or reply. */
static PyObject *seal_message(PyObject *self, PyObject *args) {
    Py_buffer key, nonce_head, body;
    unsigned long fuid, seq;
    unsigned long long counter, least, ack_first, ack_last;
    int with_ack, kind, stream, ack_now;
    PyObject *out = NULL;
    if (!ready()) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*kKKpKKiiky*p:seal_message", &key, &nonce_head, &fuid,
                          &counter, &least, &with_ack, &ack_first, &ack_last, &kind, &stream,
                          &seq, &body, &ack_now))
        return NULL;
    if (!key_and_nonce(&key, &nonce_head)) goto done;
    Py_ssize_t plain = LEAST_SIZE + (with_ack ? ONE_RANGE : 0) + BATCH_HEAD + BATCH_LENGTH
                       + body.len + (ack_now ? 1 : 0);
    if (fuid > 0xffffffffUL || seq > 0xffffffffUL || kind < 0 || kind > 0xff || stream < 0
        || stream >= STREAMS || body.len > 0xffff || plain > MAX_DATAGRAM - PREFIX - TAG) {
        PyErr_SetString(PyExc_ValueError, "seal_message: arguments out of range");
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, PREFIX + TAG + plain);
    if (out == NULL) goto done;
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(out);
    unsigned char *w = p + PREFIX + TAG, nonce[24];
    put_prefix(p, (uint32_t)fuid, counter);
    w[0] = LEAST_FRAME; put64(w + 1, least); w += LEAST_SIZE;
    if (with_ack) {
        w[0] = ACK_FRAME; w[1] = 1; put64(w + 2, ack_first); put64(w + 10, ack_last);
        w += ONE_RANGE;
    }
    w[0] = BATCH_FRAME; w[1] = (unsigned char)kind; w[2] = (unsigned char)stream;
    put32(w + 3, (uint32_t)seq); w[7] = 0; w[8] = 1;
    w[9] = (unsigned char)(body.len >> 8); w[10] = (unsigned char)body.len;
    w += BATCH_HEAD + BATCH_LENGTH;
    memcpy(w, body.buf, body.len);
    w += body.len;
    if (ack_now) *w = ACK_NOW_FRAME;
    make_nonce(nonce, &nonce_head, counter);
    box_easy(p + PREFIX, p + PREFIX + TAG, (unsigned long long)plain, nonce, key.buf);
done:
    PyBuffer_Release(&key);
    PyBuffer_Release(&nonce_head);
    PyBuffer_Release(&body);
    return out;
}

/* open_message(key, nonce_head, data, counter) -> tuple | bytearray | None
 * None if the box does not open.  A datagram whose frames are exactly, in this order and
 * each at most once, LEAST, a one-range ACK, a BATCH frame of one message (stream in
 * range, its length filling the frame) and ACK_NOW, at least one of the first three, is
 * handed back taken apart: (plain, least, ack_first, ack_last, kind, stream, seq, at,
 * length, ack_now), None for an absent frame's fields (kind None: no message; ``at`` and
 * ``length`` place its body in ``plain``).  Any other datagram's frames: the bytearray,
 * for the ordinary parser. */
static PyObject *open_message(PyObject *self, PyObject *args) {
    PyObject *plain = open_box(self, args), *out = NULL;
    if (plain == NULL || plain == Py_None) return plain;
    const unsigned char *q = (const unsigned char *)PyByteArray_AS_STRING(plain);
    Py_ssize_t end = PyByteArray_GET_SIZE(plain), pos = 0;
    int has_least = 0, has_ack = 0, has_batch = 0, ack_now = 0;
    uint64_t least = 0, first = 0, last = 0;
    uint32_t seq = 0, length = 0;
    int kind = 0, stream = 0;
    Py_ssize_t at = 0;
    if (end - pos >= LEAST_SIZE && q[pos] == LEAST_FRAME) {
        has_least = 1; least = get64(q + pos + 1); pos += LEAST_SIZE;
    }
    if (end - pos >= ONE_RANGE && q[pos] == ACK_FRAME && q[pos + 1] == 1) {
        has_ack = 1; first = get64(q + pos + 2); last = get64(q + pos + 10); pos += ONE_RANGE;
    }
    if (end - pos >= BATCH_HEAD + BATCH_LENGTH && q[pos] == BATCH_FRAME
        && q[pos + 7] == 0 && q[pos + 8] == 1 && q[pos + 2] < STREAMS) {
        length = ((uint32_t)q[pos + 9] << 8) | q[pos + 10];
        if (end - pos - BATCH_HEAD - BATCH_LENGTH >= (Py_ssize_t)length) {
            has_batch = 1; kind = q[pos + 1]; stream = q[pos + 2]; seq = get32(q + pos + 3);
            at = pos + BATCH_HEAD + BATCH_LENGTH;
            pos = at + length;
        }
    }
    if (end - pos == 1 && q[pos] == ACK_NOW_FRAME) { ack_now = 1; pos += 1; }
    if (pos != end || !(has_least || has_ack || has_batch)) return plain;
    out = Py_BuildValue("(NNNNNiIniO)", plain,
        has_least ? PyLong_FromUnsignedLongLong(least) : Py_NewRef(Py_None),
        has_ack ? PyLong_FromUnsignedLongLong(first) : Py_NewRef(Py_None),
        has_ack ? PyLong_FromUnsignedLongLong(last) : Py_NewRef(Py_None),
        has_batch ? PyLong_FromLong(kind) : Py_NewRef(Py_None),
        stream, (unsigned int)seq, at, (int)length, ack_now ? Py_True : Py_False);
    return out;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(easy, open_easy): libsodium's box functions"},
    {"seal", seal, METH_VARARGS, "seal(key, nonce_head, fuid, counter, parts) -> bytearray"},
    {"open", open_box, METH_VARARGS, "open(key, nonce_head, data, counter) -> bytearray | None"},
    {"seal_pieces", seal_pieces, METH_VARARGS, "seal_pieces(...): a train of DATA pieces"},
    {"seal_batches", seal_batches, METH_VARARGS, "seal_batches(...): whole messages in datagrams"},
    {"open_train", open_train, METH_VARARGS, "open_train(...) -> list of entries"},
    {"seal_message", seal_message, METH_VARARGS, "seal_message(...): one whole message's datagram"},
    {"open_message", open_message, METH_VARARGS, "open_message(...) -> tuple | bytearray | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "raetsalt._trains",
    "The native profile's per-datagram work in C (see raetsalt.engine.native.trains).", -1, methods,
};

PyMODINIT_FUNC PyInit__trains(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "ABI", ABI) < 0) Py_CLEAR(m);
    return m;
}
