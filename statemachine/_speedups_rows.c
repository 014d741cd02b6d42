/* Log rows, `(sequence_number, type, data)` tuples as `event_rows` makes them (the server's
 * `EventRecord`s): their SSE frames in one bytes object (`row_frames`), their WebSocket frames
 * likewise (`row_socket_frames`), and the two scans the
 * stores make of every batch they log (`rows_numbered`, `last_of_kinds`), one pass each
 * without a Python call per row. The scans take their Python reference first (bound once with
 * `functools.partial`, `statemachine/_accel.py`) and hand it any batch holding a row that is
 * not a plain tuple of an int and a str: it then answers for the whole batch, so both give
 * the same result for every input.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_speedups.h"

/* The UTF-8 of a str: its own bytes when it is ASCII, else a new bytes object in `*owned` (no
 * UTF-8 copy is cached on the str, which may be kept for a long time). NULL on error. */
static const char *
utf8_of(PyObject *text, Py_ssize_t *size, PyObject **owned)
{
    *owned = NULL;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "row_frames: a row's type and data must be str, got %.100s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (PyUnicode_IS_ASCII(text)) {
        *size = PyUnicode_GET_LENGTH(text);
        return (const char *)PyUnicode_DATA(text);
    }
    *owned = PyUnicode_AsUTF8String(text);
    if (*owned == NULL) {
        return NULL;
    }
    *size = PyBytes_GET_SIZE(*owned);
    return PyBytes_AS_STRING(*owned);
}

#define FRAME_EVENT "event: "
#define FRAME_DATA "\ndata: "
#define FRAME_END "\n\n"

PyObject *
speedups_row_frames(PyObject *module, PyObject *rows)
{
    (void)module;
    if (!PyList_Check(rows)) {
        PyErr_Format(PyExc_TypeError, "row_frames: the rows must be a list, got %.100s",
                     Py_TYPE(rows)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(rows);
    Py_ssize_t size = 0;
    const Py_ssize_t fixed = sizeof(FRAME_EVENT) - 1 + sizeof(FRAME_DATA) - 1
                             + sizeof(FRAME_END) - 1;
    /* First pass: the size (and every row checked) before anything is written. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 3) {
            PyErr_SetString(PyExc_TypeError,
                            "row_frames: each row must be a (sequence_number, type, data) tuple");
            return NULL;
        }
        for (int column = 1; column <= 2; column++) {
            PyObject *owned;
            Py_ssize_t part;
            if (utf8_of(PyTuple_GET_ITEM(row, column), &part, &owned) == NULL) {
                return NULL;
            }
            Py_XDECREF(owned);
            size += part;
        }
        size += fixed;
    }
    PyObject *frames = PyBytes_FromStringAndSize(NULL, size);
    if (frames == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(frames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        const char *piece[2];
        Py_ssize_t part[2];
        PyObject *owned[2];
        for (int column = 0; column < 2; column++) {
            piece[column] = utf8_of(PyTuple_GET_ITEM(row, column + 1), &part[column],
                                    &owned[column]);
            if (piece[column] == NULL) {  /* cannot happen: the first pass read the same */
                Py_XDECREF(owned[0]);
                Py_DECREF(frames);
                return NULL;
            }
        }
        memcpy(out, FRAME_EVENT, sizeof(FRAME_EVENT) - 1);
        out += sizeof(FRAME_EVENT) - 1;
        memcpy(out, piece[0], part[0]);
        out += part[0];
        memcpy(out, FRAME_DATA, sizeof(FRAME_DATA) - 1);
        out += sizeof(FRAME_DATA) - 1;
        memcpy(out, piece[1], part[1]);
        out += part[1];
        memcpy(out, FRAME_END, sizeof(FRAME_END) - 1);
        out += sizeof(FRAME_END) - 1;
        Py_XDECREF(owned[0]);
        Py_XDECREF(owned[1]);
    }
    return frames;
}

/* The WebSocket frame header of an unmasked, final text frame of `size` payload bytes (RFC
 * 6455 5.2: the length in 7 bits, or 126 and 16 bits, or 127 and 64 bits); its length. */
static Py_ssize_t
socket_header(unsigned char *out, Py_ssize_t size)
{
    out[0] = 0x81;
    if (size < 126) {
        out[1] = (unsigned char)size;
        return 2;
    }
    if (size < 65536) {
        out[1] = 126;
        out[2] = (unsigned char)(size >> 8);
        out[3] = (unsigned char)size;
        return 4;
    }
    out[1] = 127;
    for (int i = 0; i < 8; i++) {
        out[2 + i] = (unsigned char)((unsigned long long)size >> (56 - 8 * i));
    }
    return 10;
}

PyObject *
speedups_row_socket_frames(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *rows, *suffix;
    if (!PyArg_ParseTuple(args, "O!U:row_socket_frames", &PyList_Type, &rows, &suffix)) {
        return NULL;
    }
    PyObject *suffix_owned;
    Py_ssize_t suffix_size;
    const char *suffix_text = utf8_of(suffix, &suffix_size, &suffix_owned);
    if (suffix_text == NULL) {
        return NULL;
    }
    /* With a suffix, each payload is the data less its last character (the JSON object's
     * closing brace, one byte: checked) and then the suffix. */
    Py_ssize_t trim = suffix_size > 0 ? 1 : 0;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    Py_ssize_t size = 0;
    /* First pass: the size (and every row checked) before anything is written. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 3) {
            PyErr_SetString(PyExc_TypeError,
                            "row_socket_frames: each row must be a (sequence_number, type, data) "
                            "tuple");
            goto fail;
        }
        PyObject *data = PyTuple_GET_ITEM(row, 2);
        PyObject *owned;
        Py_ssize_t part;
        if (utf8_of(data, &part, &owned) == NULL) {
            goto fail;
        }
        Py_XDECREF(owned);
        Py_ssize_t length = PyUnicode_GET_LENGTH(data);
        if (trim && (length == 0 || PyUnicode_READ_CHAR(data, length - 1) != '}')) {
            PyErr_SetString(PyExc_ValueError,
                            "row_socket_frames: with a suffix, each row's data must be a JSON "
                            "object (end with '}')");
            goto fail;
        }
        Py_ssize_t payload = part - trim + suffix_size;
        size += payload + (payload < 126 ? 2 : payload < 65536 ? 4 : 10);
    }
    PyObject *frames = PyBytes_FromStringAndSize(NULL, size);
    if (frames == NULL) {
        goto fail;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(frames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *owned;
        Py_ssize_t part;
        const char *data = utf8_of(PyTuple_GET_ITEM(PyList_GET_ITEM(rows, i), 2), &part, &owned);
        if (data == NULL) {  /* cannot happen: the first pass read the same */
            Py_DECREF(frames);
            goto fail;
        }
        part -= trim;
        out += socket_header(out, part + suffix_size);
        memcpy(out, data, part);
        out += part;
        memcpy(out, suffix_text, suffix_size);
        out += suffix_size;
        Py_XDECREF(owned);
    }
    Py_XDECREF(suffix_owned);
    return frames;
fail:
    Py_XDECREF(suffix_owned);
    return NULL;
}

/* A row the scans read themselves: a tuple of at least two items, an exact int and a str. */
static inline int
plain_row(PyObject *row)
{
    return PyTuple_Check(row) && PyTuple_GET_SIZE(row) >= 2
           && PyLong_CheckExact(PyTuple_GET_ITEM(row, 0))
           && PyUnicode_CheckExact(PyTuple_GET_ITEM(row, 1));
}

/* The rows, borrowed into `*items`, when they are a list or tuple of plain rows; else 0 (the
 * scan's reference answers). */
static int
plain_rows(PyObject *rows, PyObject ***items, Py_ssize_t *n)
{
    if (PyList_CheckExact(rows)) {
        *n = PyList_GET_SIZE(rows);
    }
    else if (PyTuple_CheckExact(rows)) {
        *n = PyTuple_GET_SIZE(rows);
    }
    else {
        return 0;
    }
    *items = PySequence_Fast_ITEMS(rows);
    for (Py_ssize_t i = 0; i < *n; i++) {
        if (!plain_row((*items)[i])) {
            return 0;
        }
    }
    return 1;
}

PyObject *
speedups_rows_numbered(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *rows, *first_obj, *reference;
    if (!PyArg_UnpackTuple(args, "rows_numbered", 3, 3, &reference, &rows, &first_obj)) {
        return NULL;
    }
    PyObject **items;
    Py_ssize_t n;
    int overflow = 0;
    long long first = PyLong_CheckExact(first_obj)
                          ? PyLong_AsLongLongAndOverflow(first_obj, &overflow)
                          : 0;
    if (!PyLong_CheckExact(first_obj) || overflow || !plain_rows(rows, &items, &n)
        || first > LLONG_MAX - n) {  /* first + i must not overflow */
        return PyObject_CallFunctionObjArgs(reference, rows, first_obj, NULL);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long number = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(items[i], 0), &overflow);
        if (overflow || number != first + i) {
            if (number == -1 && PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

PyObject *
speedups_last_of_kinds(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *rows, *kinds, *reference;
    if (!PyArg_UnpackTuple(args, "last_of_kinds", 3, 3, &reference, &rows, &kinds)) {
        return NULL;
    }
    PyObject **items;
    Py_ssize_t n;
    if (!PyFrozenSet_CheckExact(kinds) || !plain_rows(rows, &items, &n)) {
        return PyObject_CallFunctionObjArgs(reference, rows, kinds, NULL);
    }
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        int found = PySet_Contains(kinds, PyTuple_GET_ITEM(items[i], 1));
        if (found < 0) {
            return NULL;
        }
        if (found) {
            return PyLong_FromSsize_t(i);
        }
    }
    return PyLong_FromLong(-1);
}
