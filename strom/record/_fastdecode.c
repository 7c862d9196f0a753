/*
 * strom.record._fastdecode: the records of uncompressed v2 record blocks as the buffers of Arrow columns.
 *
 * An optional accelerator of strom.consumer.internals.arrow_decoder (the consumer's columnar read path,
 * KafkaConsumer.poll_arrow, and so the Spark source): two C passes instead of numpy's gathers. The first reads
 * every record (checks it, sizes the columns, writes offsets and timestamps and notes where the key, value and
 * headers are); the second copies the fields into the column buffers without reading a varint again, but for
 * headers.
 * When it is not built (no C compiler at install time) the numpy path does the same job.
 *
 * decode_blocks(data, blocks, allocate) -> tuple | None
 *   data:   any object with the buffer protocol (the fetched bytes).
 *   blocks: a list of (start, end, count, base_offset, base_timestamp, log_append_time | None), each the records
 *           section [start, end) of one record batch holding `count` records.
 *   allocate: allocate(n) returns an object with a writable buffer of at least n bytes (pyarrow.allocate_buffer).
 *   Returns None whenever anything does not add up (a length prefix that does not match its record, a varint
 *   that runs on, a block not consumed exactly, a null header key, columns over 2 GiB): the caller then decodes
 *   the batches with the record decoder, which reports corruption. Otherwise a tuple of the buffers allocate made,
 *   those of the columns (little-endian, Arrow's layout; validity bitmaps None when nothing is null):
 *     (n, offsets int64[n], timestamps int64[n],
 *      key_offsets int32[n+1], key_data, key_validity | None,
 *      value_offsets int32[n+1], value_data, value_validity | None,
 *      header_list_offsets int32[n+1] | None (None: no record has headers),
 *      header_key_offsets int32[h+1], header_key_data, header_value_offsets int32[h+1], header_value_data,
 *      header_value_validity | None)
 *   Header keys are not checked to be UTF-8 here (the caller validates the string column).
 *
 * decode_records(data, start, end, count, base_timestamp) -> tuple | None
 *   The per-record path (strom.consumer.internals.record_decoder, KafkaConsumer.poll): the `count` records of
 *   one uncompressed v2 batch at data[start:end] as Python lists, for a batch whose offset deltas are 0..count-1
 *   (the caller checks the header's lastOffsetDelta), whose values are all non-null and whose keys are all
 *   non-null or all null. Returns (timestamps, keys | None, values, header_runs | None, position after the last
 *   record); keys None: no record has a key; header_runs None: no record has headers, else a list of
 *   (first, stop, keys, columns): records first..stop-1 (a run with the same header keys in the same order) have
 *   the header keys `keys` (a tuple of str) and `columns[j][i - first]` is record i's value of header j (bytes or
 *   None); records in no run have no headers. Returns None for any other shape or anything that does not add
 *   up (a length prefix that does not match its record, a varint that runs on, an offset delta that is not the
 *   record's index, a null header key, a record past `end`): the caller then uses the Python decoders, which
 *   report corruption. A header key that is not UTF-8 is decoded with U+FFFD for what does not decode (as Java's
 *   new String(bytes, UTF_8) in Kafka's consumer). Whether the records end exactly at `end` is the caller's
 *   check (the returned position).
 *
 * scan_records(data, count) -> int
 *   The broker's check of a produced records block (uncompressed, or a compressed batch's once decompressed), every
 *   field as Kafka's DefaultRecord.readFrom reads it: each record's length within the block, its varints ending in
 *   time, key and value lengths negative (null) or within the record, a header count of at least 0, each header key
 *   of at least 0 bytes, each header value negative or within the record, and nothing in the record's length that no
 *   field took; exactly `count` records and nothing after them. Returns flags when they do (0, or 1 when some offset
 *   delta is not the record's index, the caller renumbering where Kafka does, plus 2 when some key is null, which a
 *   compacted topic refuses); -(i + 1) when record i does not parse; -(count + 1) when bytes follow the last record.
 *
 * The record layout (Kafka's DefaultRecord): length varint, attributes int8, timestampDelta varlong,
 * offsetDelta varint, key length varint (-1 null) and bytes, value length varint (-1 null) and bytes, header
 * count varint, then per header: key length varint and bytes, value length varint (-1 null) and bytes.
 * Varints are zigzag-encoded. The GIL is released while the records are read and copied (the buffer stays
 * exported, so a bytearray cannot be resized meanwhile).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_ssize_t start, end, count;
    int64_t base_offset, base_timestamp, log_append_time;
    int has_log_append_time;
} Block;

/* A zigzag varint of at most max_bytes bytes at *p (before end); 0 on success. */
static inline int read_varint(const uint8_t **p, const uint8_t *end, int max_bytes, int64_t *out) {
    const uint8_t *q = *p;
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (q >= end)
            return -1;
        uint8_t b = *q++;
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* A length-prefixed byte field at *p (before end): its bytes at *at, its length in *len (negative: null, allowed
 * down to -nullable); 0 on success. */
static inline int read_field(const uint8_t **p, const uint8_t *end, int64_t nullable, const uint8_t **at,
                             int64_t *len) {
    if (read_varint(p, end, 5, len) < 0 || *len < -nullable || *len > end - *p)
        return -1;
    *at = *p;
    if (*len > 0)
        *p += *len;
    return 0;
}

/* A binary column: the first pass sums its bytes and notes a null; the second fills its buffers. */
typedef struct {
    Py_ssize_t bytes;
    int nulls;
    uint8_t *data, *valid; /* valid: NULL when the column has no null */
    int32_t *offsets;
    Py_ssize_t pos;
} Column;

/* First pass: a field of `len` bytes (-1: null) counted into its column's size. */
static inline void size_field(Column *c, int64_t len) {
    if (len >= 0)
        c->bytes += len;
    else
        c->nulls = 1;
}

/* Second pass: field i copied into its column's buffers. */
static inline void copy_field(Column *c, Py_ssize_t i, const uint8_t *at, int64_t len) {
    if (len >= 0) {
        memcpy(c->data + c->pos, at, (size_t)len);
        c->pos += len;
        if (c->valid)
            c->valid[i >> 3] |= (uint8_t)(1u << (i & 7));
    }
    c->offsets[i + 1] = (int32_t)c->pos;
}

typedef struct {
    Py_ssize_t n, headers;
    Column key, value, hkey, hvalue;
    int64_t *offsets, *timestamps;
    int32_t *header_offsets; /* NULL when no record has headers */
} Out;

/* Where the first pass found one record's fields (positions from the start of the data; lengths -1: null), so
 * that the second pass copies them without reading a varint again. */
typedef struct {
    uint32_t key, value, headers;
    int32_t key_len, value_len, header_count;
} Slot;

#define FAIL_IF(cond) do { if (cond) return -1; } while (0)

/* The first pass, over every record of every block: checks the records, sizes the columns, writes each record's
 * offset and timestamp (o->offsets and o->timestamps hold the blocks' record counts) and where its fields are
 * (slots, as many). 0 on success, -1 when the blocks do not add up. */
static int scan(const uint8_t *data, Py_ssize_t size, const Block *blocks, Py_ssize_t nblocks, Out *o,
                Slot *slots) {
    Py_ssize_t row = 0, header = 0;
    for (Py_ssize_t b = 0; b < nblocks; b++) {
        const Block *blk = &blocks[b];
        FAIL_IF(blk->start < 0 || blk->end > size || blk->start > blk->end || blk->count < 0);
        const uint8_t *p = data + blk->start, *end = data + blk->end;
        for (Py_ssize_t i = 0; i < blk->count; i++) {
            int64_t length, ts_delta, offset_delta, klen, vlen, nheaders;
            const uint8_t *key, *value;
            FAIL_IF(read_varint(&p, end, 5, &length));
            FAIL_IF(length < 1 || length > end - p);
            const uint8_t *rec_end = p + length;
            p++; /* attributes (unused, as in Kafka) */
            FAIL_IF(read_varint(&p, rec_end, 10, &ts_delta));
            FAIL_IF(read_varint(&p, rec_end, 5, &offset_delta));
            FAIL_IF(read_field(&p, rec_end, 1, &key, &klen));
            FAIL_IF(read_field(&p, rec_end, 1, &value, &vlen));
            FAIL_IF(read_varint(&p, rec_end, 5, &nheaders));
            FAIL_IF(nheaders < 0 || nheaders > rec_end - p);
            Slot *s = &slots[row];
            s->key = (uint32_t)(key - data);
            s->value = (uint32_t)(value - data);
            s->headers = (uint32_t)(p - data);
            s->key_len = (int32_t)klen;
            s->value_len = (int32_t)vlen;
            s->header_count = (int32_t)nheaders;
            o->offsets[row] = blk->base_offset + offset_delta;
            o->timestamps[row] = blk->has_log_append_time ? blk->log_append_time : blk->base_timestamp + ts_delta;
            size_field(&o->key, klen);
            size_field(&o->value, vlen);
            for (int64_t h = 0; h < nheaders; h++) {
                const uint8_t *hkey, *hvalue;
                int64_t hklen, hvlen;
                FAIL_IF(read_field(&p, rec_end, 0, &hkey, &hklen)); /* a null key: the record decoder's error */
                FAIL_IF(read_field(&p, rec_end, 1, &hvalue, &hvlen));
                size_field(&o->hkey, hklen);
                size_field(&o->hvalue, hvlen);
                header++;
            }
            FAIL_IF(p != rec_end);
            row++;
        }
        FAIL_IF(p != end);
    }
    o->n = row;
    o->headers = header;
    FAIL_IF(o->key.bytes > INT32_MAX || o->value.bytes > INT32_MAX || o->hkey.bytes > INT32_MAX ||
            o->hvalue.bytes > INT32_MAX || row > INT32_MAX || header > INT32_MAX);
    return 0;
}

/* The second pass: copies the fields the first pass found into the column buffers (allocated by its sizes);
 * only headers are read again, from where the first pass left them (already checked there). */
static void fill(const uint8_t *data, Py_ssize_t size, const Slot *slots, Out *o) {
    Py_ssize_t header = 0;
    for (Py_ssize_t row = 0; row < o->n; row++) {
        const Slot *s = &slots[row];
        copy_field(&o->key, row, data + s->key, s->key_len);
        copy_field(&o->value, row, data + s->value, s->value_len);
        if (s->header_count) {
            const uint8_t *p = data + s->headers, *end = data + size;
            for (int32_t h = 0; h < s->header_count; h++) {
                const uint8_t *hkey, *hvalue;
                int64_t hklen, hvlen;
                read_field(&p, end, 0, &hkey, &hklen);
                read_field(&p, end, 1, &hvalue, &hvlen);
                copy_field(&o->hkey, header, hkey, hklen);
                copy_field(&o->hvalue, header, hvalue, hvlen);
                header++;
            }
        }
        if (o->header_offsets)
            o->header_offsets[row + 1] = (int32_t)header;
    }
}

/* allocate(n), an object with a writable buffer of n bytes (e.g. pyarrow.allocate_buffer: Arrow's memory pool
 * keeps freed memory, where malloc hands fetch-sized blocks back to the kernel and faults them in again); its
 * memory in *at, zero-filled when asked. The view is kept in *view until release. */
static PyObject *new_buffer(PyObject *allocate, Py_ssize_t n, Py_buffer *view, void **at, int zero) {
    PyObject *b = PyObject_CallFunction(allocate, "n", n);
    if (!b)
        return NULL;
    if (PyObject_GetBuffer(b, view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    if (view->len < n) {
        PyBuffer_Release(view);
        Py_DECREF(b);
        PyErr_SetString(PyExc_ValueError, "allocate(n) returned a buffer smaller than n bytes");
        return NULL;
    }
    *at = view->buf;
    if (zero)
        memset(*at, 0, (size_t)n);
    return b;
}

/* The blocks argument into *blocks (allocated here, freed by the caller whatever the outcome). */
static int parse_blocks(PyObject *list, Block **blocks, Py_ssize_t *nblocks) {
    PyObject *seq = PySequence_Fast(list, "blocks must be a sequence");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    *blocks = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Block));
    if (!*blocks) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Block *b = &(*blocks)[i];
        PyObject *lat = NULL;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "nnnLLO;a block is (start, end, count, "
                              "base_offset, base_timestamp, log_append_time)", &b->start, &b->end, &b->count,
                              &b->base_offset, &b->base_timestamp, &lat)) {
            Py_DECREF(seq);
            return -1;
        }
        if (lat != Py_None) {
            b->log_append_time = PyLong_AsLongLong(lat);
            if (b->log_append_time == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return -1;
            }
            b->has_log_append_time = 1;
        }
    }
    Py_DECREF(seq);
    *nblocks = n;
    return 0;
}

enum { N_OUT = 15 };

/* The smallest record: its length varint, attributes, timestamp delta, offset delta, key length, value length
 * and header count, one byte each. */
enum { MIN_RECORD = 7 };

static PyObject *decode_blocks(PyObject *self, PyObject *args) {
    PyObject *data_obj, *blocks_obj, *allocate;
    if (!PyArg_ParseTuple(args, "OOO:decode_blocks", &data_obj, &blocks_obj, &allocate))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data_obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Block *blocks = NULL;
    Py_ssize_t nblocks = 0;
    PyObject *items[N_OUT] = {NULL};
    Py_buffer views[N_OUT];
    int nviews = 0;
    PyObject *result = NULL;
    Slot *slots = NULL;
    if (parse_blocks(blocks_obj, &blocks, &nblocks) < 0)
        goto done;
    /* The records the blocks claim, for the buffers the first pass writes: a record takes at least MIN_RECORD
     * bytes, so a count its block cannot hold (a corrupt header) is refused before anything is allocated. */
    Py_ssize_t count = 0;
    if (view.len > (Py_ssize_t)UINT32_MAX) { /* the slots' positions are 32-bit */
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (Py_ssize_t b = 0; b < nblocks; b++) {
        const Block *blk = &blocks[b];
        if (blk->count < 0 || blk->start < 0 || blk->end < blk->start ||
            blk->count > (blk->end - blk->start) / MIN_RECORD || blk->count > INT32_MAX - count) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        count += blk->count;
    }
    Out out;
    memset(&out, 0, sizeof(out));
    void *at;
    int i = 0;
#define ALLOC(size, field, zero) \
    do { \
        if (!(items[i++] = new_buffer(allocate, (size), &views[nviews], &at, (zero)))) goto done; \
        nviews++; \
        field = at; \
    } while (0)
#define NONE() do { items[i++] = Py_NewRef(Py_None); } while (0)
#define COLUMN(c, rows, nullable) \
    do { \
        ALLOC(4 * ((rows) + 1), (c).offsets, 0); \
        (c).offsets[0] = 0; \
        ALLOC((c).bytes, (c).data, 0); \
        if ((c).nulls) ALLOC(((rows) + 7) / 8, (c).valid, 1); else if (nullable) NONE(); \
    } while (0)
    i = 1; /* items[0], the row count, once the first pass has counted them */
    ALLOC(8 * count, out.offsets, 0);
    ALLOC(8 * count, out.timestamps, 0);
    slots = PyMem_RawMalloc((size_t)(count ? count : 1) * sizeof(Slot));
    if (!slots) {
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan((const uint8_t *)view.buf, view.len, blocks, nblocks, &out, slots);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t n = out.n, h = out.headers;
    if (!(items[0] = PyLong_FromSsize_t(n)))
        goto done;
    COLUMN(out.key, n, 1);
    COLUMN(out.value, n, 1);
    if (h) {
        ALLOC(4 * (n + 1), out.header_offsets, 0);
        out.header_offsets[0] = 0;
        COLUMN(out.hkey, h, 0); /* (header keys are never null: no validity buffer in the tuple) */
        COLUMN(out.hvalue, h, 1);
    } else {
        for (int k = 0; k < 6; k++)
            NONE();
    }
#undef COLUMN
#undef ALLOC
#undef NONE
    Py_BEGIN_ALLOW_THREADS
    fill((const uint8_t *)view.buf, view.len, slots, &out);
    Py_END_ALLOW_THREADS
    result = PyTuple_New(N_OUT);
    if (result) {
        for (int k = 0; k < N_OUT; k++) {
            PyTuple_SET_ITEM(result, k, items[k]);
            items[k] = NULL;
        }
    }
done:
    PyMem_RawFree(slots);
    for (int k = 0; k < nviews; k++)
        PyBuffer_Release(&views[k]);
    for (int k = 0; k < N_OUT; k++)
        Py_XDECREF(items[k]);
    PyMem_Free(blocks);
    PyBuffer_Release(&view);
    return result;
}

/* One header of a record, as found in the data. */
typedef struct {
    const uint8_t *key, *value;
    int64_t key_len, value_len; /* value_len -1: null */
} RawHeader;

/* Grow *arr (of *cap elements of `size` bytes) to hold at least n; 0 on success. */
static int ensure_capacity(void **arr, Py_ssize_t *cap, Py_ssize_t n, size_t size) {
    if (n <= *cap)
        return 0;
    Py_ssize_t want = *cap ? *cap : 4;
    while (want < n)
        want *= 2;
    void *grown = PyMem_Realloc(*arr, (size_t)want * size);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *arr = grown;
    *cap = want;
    return 0;
}

/* Close the open header run (records run_first..stop-1) into runs; 0 on success. */
static int close_run(PyObject *runs, Py_ssize_t run_first, Py_ssize_t stop, PyObject **run_keys,
                     PyObject **run_columns) {
    PyObject *item = Py_BuildValue("(nnOO)", run_first, stop, *run_keys, *run_columns);
    Py_CLEAR(*run_keys);
    Py_CLEAR(*run_columns);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(runs, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "decode_records() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if (stop == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    long long base_ts = PyLong_AsLongLong(args[4]);
    if (base_ts == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL, *tss = NULL, *keys = NULL, *values = NULL, *runs = NULL;
    PyObject *run_keys = NULL, *run_columns = NULL; /* the open header run */
    Py_ssize_t run_first = 0, run_n = 0;
    RawHeader *hs = NULL, *run_raw = NULL; /* this record's headers; the open run's keys */
    Py_ssize_t hs_cap = 0, run_raw_cap = 0;
    int fallback = 0;
    if (start < 0 || stop > view.len || start > stop || count <= 0 || count > stop - start) {
        fallback = 1;
        goto done;
    }
    const uint8_t *data = (const uint8_t *)view.buf, *p = data + start, *end = data + stop;
    tss = PyList_New(count);
    values = PyList_New(count);
    if (tss == NULL || values == NULL)
        goto done;
    int keyed = -1; /* unknown until the first record */
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len, header_count;
        const uint8_t *key_at, *value_at;
        if (read_varint(&p, end, 5, &length) < 0 || length < 0 || length > end - p) {
            fallback = 1;
            goto done;
        }
        const uint8_t *rec_end = p + length;
        if (p >= rec_end) {
            fallback = 1;
            goto done;
        }
        p++; /* attributes */
        if (read_varint(&p, rec_end, 10, &ts_delta) < 0 || read_varint(&p, rec_end, 5, &offset_delta) < 0 ||
            offset_delta != i || read_field(&p, rec_end, 1, &key_at, &key_len) < 0 ||
            read_field(&p, rec_end, 1, &value_at, &value_len) < 0 || value_len < 0 ||
            read_varint(&p, rec_end, 5, &header_count) < 0 || header_count < 0 || header_count > rec_end - p) {
            fallback = 1;
            goto done;
        }
        if (keyed < 0) {
            keyed = key_len >= 0;
            if (keyed && (keys = PyList_New(count)) == NULL)
                goto done;
        } else if (keyed != (key_len >= 0)) {
            fallback = 1; /* keys in some records only */
            goto done;
        }
        if (ensure_capacity((void **)&hs, &hs_cap, header_count, sizeof(RawHeader)) < 0)
            goto done;
        for (int64_t j = 0; j < header_count; j++) {
            if (read_field(&p, rec_end, 0, &hs[j].key, &hs[j].key_len) < 0 ||
                read_field(&p, rec_end, 1, &hs[j].value, &hs[j].value_len) < 0) {
                fallback = 1;
                goto done;
            }
        }
        if (p != rec_end) {
            fallback = 1;
            goto done;
        }
        /* Headers: continue the open run when the keys are the same, else close it (and open another). */
        int same = run_keys != NULL && run_n == header_count;
        for (int64_t j = 0; same && j < header_count; j++)
            same = run_raw[j].key_len == hs[j].key_len && memcmp(run_raw[j].key, hs[j].key, (size_t)hs[j].key_len) == 0;
        if (!same && run_keys != NULL) {
            if (runs == NULL && (runs = PyList_New(0)) == NULL)
                goto done;
            if (close_run(runs, run_first, i, &run_keys, &run_columns) < 0)
                goto done;
        }
        if (!same && header_count > 0) {
            if (ensure_capacity((void **)&run_raw, &run_raw_cap, header_count, sizeof(RawHeader)) < 0)
                goto done;
            run_keys = PyTuple_New(header_count);
            run_columns = PyList_New(header_count);
            if (run_keys == NULL || run_columns == NULL)
                goto done;
            for (int64_t j = 0; j < header_count; j++) {
                /* what is not UTF-8 becomes U+FFFD, as Java's new String(bytes, UTF_8) in Kafka's consumer */
                PyObject *k = PyUnicode_DecodeUTF8((const char *)hs[j].key, hs[j].key_len, "replace");
                if (k == NULL)
                    goto done;
                PyTuple_SET_ITEM(run_keys, j, k);
                PyObject *column = PyList_New(0);
                if (column == NULL)
                    goto done;
                PyList_SET_ITEM(run_columns, j, column);
                run_raw[j] = hs[j];
            }
            run_first = i;
            run_n = header_count;
        }
        for (int64_t j = 0; j < header_count; j++) {
            PyObject *v = hs[j].value_len < 0 ? Py_NewRef(Py_None)
                                              : PyBytes_FromStringAndSize((const char *)hs[j].value, hs[j].value_len);
            if (v == NULL)
                goto done;
            int rc = PyList_Append(PyList_GET_ITEM(run_columns, j), v);
            Py_DECREF(v);
            if (rc < 0)
                goto done;
        }
        long long timestamp;
        if (__builtin_add_overflow(base_ts, (long long)ts_delta, &timestamp)) {
            fallback = 1; /* (beyond int64: Python's ints in the Python decoders) */
            goto done;
        }
        PyObject *ts = PyLong_FromLongLong(timestamp);
        if (ts == NULL)
            goto done;
        PyList_SET_ITEM(tss, i, ts);
        if (keyed) {
            PyObject *k = PyBytes_FromStringAndSize((const char *)key_at, key_len);
            if (k == NULL)
                goto done;
            PyList_SET_ITEM(keys, i, k);
        }
        PyObject *v = PyBytes_FromStringAndSize((const char *)value_at, value_len);
        if (v == NULL)
            goto done;
        PyList_SET_ITEM(values, i, v);
    }
    if (run_keys != NULL) {
        if (runs == NULL && (runs = PyList_New(0)) == NULL)
            goto done;
        if (close_run(runs, run_first, count, &run_keys, &run_columns) < 0)
            goto done;
    }
    result = Py_BuildValue("(OOOOn)", tss, keys ? keys : Py_None, values, runs ? runs : Py_None,
                           (Py_ssize_t)(p - data));
done:
    PyMem_Free(hs);
    PyMem_Free(run_raw);
    Py_XDECREF(run_keys);
    Py_XDECREF(run_columns);
    Py_XDECREF(tss);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(runs);
    PyBuffer_Release(&view);
    if (fallback && !PyErr_Occurred())
        Py_RETURN_NONE;
    return result;
}

/* One record of a records block at *p (before end), walked as Kafka's DefaultRecord.readFrom reads it; its offset
 * delta in *offset_delta and whether its key is null in *null_key. 0 on success, -1 when it does not parse. */
static inline int walk_record(const uint8_t **p, const uint8_t *end, int64_t *offset_delta, int *null_key) {
    int64_t length, ts_delta, count, len;
    const uint8_t *at;
    if (read_varint(p, end, 5, &length) < 0 || length <= 0 || length > end - *p)
        return -1;
    const uint8_t *rec_end = *p + length, *q = *p + 1; /* past attributes */
    if (read_varint(&q, rec_end, 10, &ts_delta) < 0 || read_varint(&q, rec_end, 5, offset_delta) < 0)
        return -1;
    /* Any negative key, value or header value length is null (Kafka's readFrom); a header key may not be. */
    if (read_field(&q, rec_end, INT32_MAX, &at, &len) < 0) /* key */
        return -1;
    *null_key = len < 0;
    if (read_field(&q, rec_end, INT32_MAX, &at, &len) < 0) /* value */
        return -1;
    if (read_varint(&q, rec_end, 5, &count) < 0 || count < 0)
        return -1;
    for (int64_t h = 0; h < count; h++) /* each header takes at least two bytes: bounded by the record */
        if (read_field(&q, rec_end, 0, &at, &len) < 0 || read_field(&q, rec_end, INT32_MAX, &at, &len) < 0)
            return -1;
    if (q != rec_end) /* bytes left in the record's length that no field took */
        return -1;
    *p = rec_end;
    return 0;
}

static PyObject *scan_records(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "On", &obj, &count))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t result = 0;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t offset_delta;
        int null_key;
        if (walk_record(&p, end, &offset_delta, &null_key) < 0) {
            result = -(i + 1);
            break;
        }
        if (offset_delta != i)
            result |= 1;
        if (null_key)
            result |= 2;
    }
    if (result >= 0 && p != end)
        result = -(count + 1);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(result);
}

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(data, count) -> flags (1: some offset delta is not the record's index, 2: some key is null) "
     "when data holds exactly count records that parse; -(i + 1) when record i does not, -(count + 1) for bytes "
     "after them."},
    {"decode_blocks", decode_blocks, METH_VARARGS,
     "decode_blocks(data, blocks, allocate) -> the column buffers of the records of uncompressed v2 record blocks, or None "
     "when they do not add up (see the module's source for the tuple's layout)."},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     "decode_records(data, start, end, count, base_timestamp) -> (timestamps, keys, values, header_runs, end) of one "
     "batch's records as lists, or None for a shape the Python decoders handle (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastdecode",
    "The records of uncompressed v2 record blocks as Arrow column buffers (optional C accelerator).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastdecode(void) { return PyModule_Create(&module); }
