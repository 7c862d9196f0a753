/*
 * strom.record._fastencode: one record of a v2 record batch, encoded straight into the batch's buffer.
 *
 * An optional accelerator of MemoryRecordsBuilder.try_append (strom/record/builder.py), the producer's per-record
 * path: the Python path builds the record with table look-ups and one bytes format, then copies it into the
 * pooled buffer; this writes the same bytes in place. When it is not built (no C compiler at install time) the
 * Python path does the same job.
 *
 * encode_record(target, pos, room, timestamp_delta, offset_delta, key, value, headers) -> int
 *   target:  a writable buffer (the batch's pooled bytearray, or a memoryview of it).
 *   pos:     where the record starts in target (0 <= pos <= len(target)).
 *   room:    the most bytes the record may take under the batch's write limit (may be negative).
 *   timestamp_delta: int64 (varlong); offset_delta: int32 (varint).
 *   key, value: None (null) or any bytes-like object.
 *   headers: the record's headers already in their wire form (the count varint, then each header), bytes-like.
 *   Returns the record's size once written at pos; -1 (nothing written) when it would take more than room bytes;
 *   -2 (nothing written) when it fits the write limit but not the buffer (the caller grows its buffer).
 *   Raises TypeError for a key, value or headers that is not bytes-like, BufferError for a target that is not
 *   writable, ValueError for a pos outside the target or an offset delta that is not an int32, OverflowError for
 *   a timestamp delta that is not an int64.
 *
 * encode_records(target, pos, room, timestamp_delta, offset_delta, keys, values, start, stop)
 *     -> (count, size, why, largest)
 *   The bulk path (MemoryRecordsBuilder.try_append_many): records start..stop-1 of the lists `values` and `keys`
 *   (None: no keys), all with `timestamp_delta` and no headers, offset deltas from `offset_delta` on, written one
 *   after the other at pos while each fits: `room` is what the batch's write limit leaves (the first record of a
 *   batch, offset delta 0, always fits it), and each must also fit the buffer. Returns how many were written,
 *   their bytes, why it stopped and the size of the largest one written: 0 all written, 1 the next one is over room (the batch is full), 2 the next
 *   one fits room but not the buffer (the caller grows its buffer), 3 the next key or value is neither bytes nor
 *   None (the caller's general path takes it). Raises TypeError for lists that are not lists, BufferError for a
 *   target that is not writable, ValueError for a position or range outside the buffer or the lists.
 *
 * encode_headers(headers) -> EncodedHeaders | None
 *   headers: a list or tuple of (key, value) pairs (tuples, NamedTuples included) with a str key and a bytes or
 *   None value: the headers in their wire form (the count varint, then each key's length varint and UTF-8 bytes and
 *   each value's length varint, -1 for null, and bytes), as strom.record.sizes.encode_headers makes them, in one
 *   allocation of the type given to set_encoded_headers_type. Returns None for any other shape (a list pair, a
 *   str subclass key, a str or bytearray value, a key that is not valid UTF-8...): the Python encoder converts,
 *   or raises its error, for those. Raises RuntimeError when the type was never set.
 *
 * The record layout (Kafka's DefaultRecord): length varint, attributes int8 (0), timestampDelta varlong,
 * offsetDelta varint, key length varint (-1 null) and bytes, value length varint (-1 null) and bytes, then the
 * headers. Varints are zigzag-encoded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Bytes of the unsigned varint of v. */
static inline Py_ssize_t uvarint_size(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_uvarint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint64_t zigzag(int64_t v) {
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/* A key or value: None (null, length -1) or a bytes-like object (its buffer in *view). */
typedef struct {
    Py_buffer view;
    int held;
    uint64_t zz; /* the zigzag length */
} Field;

static int get_field(PyObject *obj, Field *f, const char *what) {
    f->held = 0;
    if (obj == Py_None) {
        f->zz = 1; /* zigzag(-1) */
        return 0;
    }
    if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "a bytes-like object or None is required for the record's %s, not '%.100s'",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    f->held = 1;
    if (f->view.len > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "the record's %s is longer than 2 GiB", what);
        return -1;
    }
    f->zz = (uint64_t)f->view.len << 1;
    return 0;
}

static inline Py_ssize_t field_size(const Field *f) {
    return uvarint_size(f->zz) + (f->held ? f->view.len : 0);
}

static inline uint8_t *put_field(uint8_t *p, const Field *f) {
    p = put_uvarint(p, f->zz);
    if (f->held && f->view.len) {
        memcpy(p, f->view.buf, (size_t)f->view.len);
        p += f->view.len;
    }
    return p;
}

/* The arguments both encoders start with, after the target: pos, room, timestamp delta, offset delta. */
static int position_args(PyObject *const *args, Py_ssize_t *pos, long long *room, long long *ts_delta,
                         long long *offset_delta) {
    *pos = PyLong_AsSsize_t(args[1]);
    if (*pos == -1 && PyErr_Occurred())
        return -1;
    *room = PyLong_AsLongLong(args[2]);
    if (*room == -1 && PyErr_Occurred())
        return -1;
    *ts_delta = PyLong_AsLongLong(args[3]);
    if (*ts_delta == -1 && PyErr_Occurred())
        return -1;
    *offset_delta = PyLong_AsLongLong(args[4]);
    if (*offset_delta == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

static PyObject *encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "encode_record() takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos;
    long long room, ts_delta, offset_delta;
    if (position_args(args, &pos, &room, &ts_delta, &offset_delta) < 0)
        return NULL;
    if (offset_delta < INT32_MIN || offset_delta > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the offset delta is not an int32");
        return NULL;
    }
    Field key, value, headers;
    key.held = value.held = headers.held = 0;
    Py_buffer target;
    int target_held = 0;
    PyObject *result = NULL;
    if (get_field(args[5], &key, "key") < 0 || get_field(args[6], &value, "value") < 0)
        goto done;
    if (PyObject_GetBuffer(args[7], &headers.view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "the record's encoded headers must be bytes-like, not '%.100s'",
                     Py_TYPE(args[7])->tp_name);
        goto done;
    }
    headers.held = 1;
    if (PyObject_GetBuffer(args[0], &target, PyBUF_WRITABLE) < 0)
        goto done; /* (BufferError or TypeError, from the object itself) */
    target_held = 1;
    if (pos < 0 || pos > target.len) {
        PyErr_Format(PyExc_ValueError, "position %zd is outside the %zd-byte buffer", pos, target.len);
        goto done;
    }
    uint64_t ts_zz = zigzag((int64_t)ts_delta), od_zz = zigzag((int64_t)offset_delta);
    Py_ssize_t body = 1 + uvarint_size(ts_zz) + uvarint_size(od_zz) + field_size(&key) + field_size(&value) +
                      headers.view.len;
    if (body > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the record is longer than 2 GiB");
        goto done;
    }
    Py_ssize_t total = uvarint_size((uint64_t)body << 1) + body;
    if ((long long)total > room) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    if (total > target.len - pos) {
        result = PyLong_FromLong(-2);
        goto done;
    }
    uint8_t *p = (uint8_t *)target.buf + pos;
    p = put_uvarint(p, (uint64_t)body << 1);
    *p++ = 0; /* attributes */
    p = put_uvarint(p, ts_zz);
    p = put_uvarint(p, od_zz);
    p = put_field(p, &key);
    p = put_field(p, &value);
    if (headers.view.len)
        memcpy(p, headers.view.buf, (size_t)headers.view.len);
    result = PyLong_FromSsize_t(total);
done:
    if (target_held)
        PyBuffer_Release(&target);
    if (headers.held)
        PyBuffer_Release(&headers.view);
    if (value.held)
        PyBuffer_Release(&value.view);
    if (key.held)
        PyBuffer_Release(&key.view);
    return result;
}

enum { RUN_DONE = 0, RUN_FULL = 1, RUN_BUFFER = 2, RUN_OTHER = 3 };

static PyObject *encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "encode_records() takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos;
    long long room, ts_delta, offset_delta;
    if (position_args(args, &pos, &room, &ts_delta, &offset_delta) < 0)
        return NULL;
    PyObject *keys = args[5], *values = args[6];
    Py_ssize_t start = PyLong_AsSsize_t(args[7]);
    Py_ssize_t stop = start == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[8]);
    if (stop == -1 && PyErr_Occurred())
        return NULL;
    if (!PyList_Check(values) || (keys != Py_None && !PyList_Check(keys))) {
        PyErr_SetString(PyExc_TypeError, "encode_records() takes lists of keys (or None) and values");
        return NULL;
    }
    if (start < 0 || stop < start || stop > PyList_GET_SIZE(values) ||
        (keys != Py_None && stop > PyList_GET_SIZE(keys))) {
        PyErr_Format(PyExc_ValueError, "records %zd..%zd are outside the lists", start, stop);
        return NULL;
    }
    if (offset_delta < 0 || offset_delta + (stop - start) > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the offset deltas are not int32s");
        return NULL;
    }
    Py_buffer target;
    if (PyObject_GetBuffer(args[0], &target, PyBUF_WRITABLE) < 0)
        return NULL;
    if (pos < 0 || pos > target.len) {
        PyErr_Format(PyExc_ValueError, "position %zd is outside the %zd-byte buffer", pos, target.len);
        PyBuffer_Release(&target);
        return NULL;
    }
    /* Only bytes and None are read here, and nothing here runs Python code: the lists cannot change meanwhile. */
    uint64_t ts_zz = zigzag((int64_t)ts_delta);
    Py_ssize_t ts_size = uvarint_size(ts_zz), written = 0, largest = 0, i = start;
    int why = RUN_DONE;
    uint8_t *base = (uint8_t *)target.buf + pos;
    Py_ssize_t space = target.len - pos;
    for (; i < stop; i++) {
        PyObject *key = keys == Py_None ? Py_None : PyList_GET_ITEM(keys, i), *value = PyList_GET_ITEM(values, i);
        if ((key != Py_None && !PyBytes_CheckExact(key)) || (value != Py_None && !PyBytes_CheckExact(value))) {
            why = RUN_OTHER;
            break;
        }
        Py_ssize_t klen = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
        Py_ssize_t vlen = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
        uint64_t od_zz = zigzag(offset_delta + (i - start));
        Py_ssize_t body = 1 + ts_size + uvarint_size(od_zz) + uvarint_size(zigzag(klen)) + (klen > 0 ? klen : 0) +
                          uvarint_size(zigzag(vlen)) + (vlen > 0 ? vlen : 0) + 1;
        if (body > INT32_MAX) {
            why = RUN_OTHER; /* (the general path raises) */
            break;
        }
        Py_ssize_t total = uvarint_size((uint64_t)body << 1) + body;
        if (offset_delta + (i - start) > 0 && (long long)(written + total) > room) {
            why = RUN_FULL;
            break;
        }
        if (written + total > space) {
            why = RUN_BUFFER;
            break;
        }
        uint8_t *p = base + written;
        p = put_uvarint(p, (uint64_t)body << 1);
        *p++ = 0; /* attributes */
        p = put_uvarint(p, ts_zz);
        p = put_uvarint(p, od_zz);
        p = put_uvarint(p, zigzag(klen));
        if (klen > 0) {
            memcpy(p, PyBytes_AS_STRING(key), (size_t)klen);
            p += klen;
        }
        p = put_uvarint(p, zigzag(vlen));
        if (vlen > 0) {
            memcpy(p, PyBytes_AS_STRING(value), (size_t)vlen);
            p += vlen;
        }
        *p = 0; /* no headers */
        written += total;
        if (total > largest)
            largest = total;
    }
    PyBuffer_Release(&target);
    return Py_BuildValue("(nnin)", i - start, written, why, largest);
}

/* The bytes subclass strom.record.sizes.EncodedHeaders (set once at import by sizes.py). */
static PyTypeObject *encoded_headers_type = NULL;

static PyObject *set_encoded_headers_type(PyObject *self, PyObject *arg) {
    if (!PyType_Check(arg) || !PyType_IsSubtype((PyTypeObject *)arg, &PyBytes_Type)) {
        PyErr_SetString(PyExc_TypeError, "set_encoded_headers_type() takes a subclass of bytes");
        return NULL;
    }
    Py_INCREF(arg);
    Py_XSETREF(encoded_headers_type, (PyTypeObject *)arg);
    Py_RETURN_NONE;
}

static PyObject *encode_headers(PyObject *self, PyObject *headers) {
    if (encoded_headers_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "encode_headers(): set_encoded_headers_type() was not called");
        return NULL;
    }
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers))
        Py_RETURN_NONE;
    /* Two passes over the items: sizes, then bytes. Keys' UTF-8 is the str's own (ASCII) or cached in it. */
    Py_ssize_t n = PySequence_Fast_GET_SIZE(headers);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    Py_ssize_t size = uvarint_size(zigzag(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
            Py_RETURN_NONE;
        PyObject *key = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value)))
            Py_RETURN_NONE;
        Py_ssize_t klen;
        if (PyUnicode_AsUTF8AndSize(key, &klen) == NULL) {
            PyErr_Clear(); /* (not encodable: the Python encoder raises its own error) */
            Py_RETURN_NONE;
        }
        size += uvarint_size(zigzag(klen)) + klen;
        size += value == Py_None ? 1 : uvarint_size(zigzag(PyBytes_GET_SIZE(value))) + PyBytes_GET_SIZE(value);
    }
    /* What bytes.__new__ does for a subclass: allocate the subtype's object, fill it, no hash cached yet. */
    PyObject *out = encoded_headers_type->tp_alloc(encoded_headers_type, size);
    if (out == NULL)
        return NULL;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    ((PyBytesObject *)out)->ob_shash = -1;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    /* The subclass is a GC type: its allocation may run a collection, and a finalizer may change a list. So the
     * second pass reads the items afresh and checks every one again; anything changed: the Python encoder. */
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out), *end = p + size;
    if (PySequence_Fast_GET_SIZE(headers) != n)
        goto changed;
    items = PySequence_Fast_ITEMS(headers);
    p = put_uvarint(p, zigzag(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
            goto changed;
        PyObject *key = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value)))
            goto changed;
        Py_ssize_t klen, vlen = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
        const char *kbuf = PyUnicode_AsUTF8AndSize(key, &klen);
        if (kbuf == NULL) {
            PyErr_Clear();
            goto changed;
        }
        if (end - p < uvarint_size(zigzag(klen)) + klen + uvarint_size(zigzag(vlen)) + (vlen > 0 ? vlen : 0))
            goto changed;
        p = put_uvarint(p, zigzag(klen));
        memcpy(p, kbuf, (size_t)klen);
        p += klen;
        p = put_uvarint(p, zigzag(vlen));
        if (vlen > 0) {
            memcpy(p, PyBytes_AS_STRING(value), (size_t)vlen);
            p += vlen;
        }
    }
    if (p != end)
        goto changed;
    *p = 0; /* (bytes keep a NUL after their last byte) */
    return out;
changed:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "encode_records(target, pos, room, timestamp_delta, offset_delta, keys, values, start, stop) -> (count, size, "
     "why, largest): the bulk path's records written at pos while they fit (see the C source)."},
    {"set_encoded_headers_type", set_encoded_headers_type, METH_O,
     "set_encoded_headers_type(type): the bytes subclass encode_headers returns."},
    {"encode_headers", encode_headers, METH_O,
     "encode_headers(headers) -> EncodedHeaders | None: (str, bytes | None) pairs in their wire form; None for any "
     "other shape."},
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL,
     "encode_record(target, pos, room, timestamp_delta, offset_delta, key, value, headers) -> int: one v2 record "
     "written at pos; -1 when it takes more than room bytes, -2 when it does not fit the buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastencode",
                                    "One v2 record encoded into a batch's buffer (see the C source).", -1, methods};

PyMODINIT_FUNC PyInit__fastencode(void) {
    return PyModule_Create(&module);
}
