/* The compiled SSE frame of a plain event: the `sse_event` half of `_speedups` (the module and
 * its `step` half are in `_speedups.c`), and its sibling `json_line`.
 *
 * A plain event (a delta or a progress event: only str and int fields, see `_wire.plain_plan`)
 * is written straight to its frame, `event: T\ndata: {...}\n\n`, in the generic path's field
 * order and with json.dumps's escaping (ensure_ascii=False: `"`, `\`, and control characters
 * below U+0020; everything else as UTF-8). Anything else goes to the Python `sse_event`.
 * `json_line` writes the same JSON as one line, `{...}\n` (what `streamfold replay` prints),
 * from its own table of heads, with `_wire.json_line` as its Python reference.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_speedups.h"

/* One way to frame a plain event: the Python reference for everything else, the layouts, and
 * what closes the frame. */
typedef struct {
    PyObject *reference;
    PyObject *specs;  /* type -> (head, ((prefix, descr | None, kind), ...)) */
    const char *tail;
    Py_ssize_t tail_size;
    const char *name;
} Framer;

static Framer sse_framer = {NULL, NULL, "}\n\n", 3, "sse_event"};
static Framer line_framer = {NULL, NULL, "}\n", 2, "json_line"};

enum { FIELD_LITERAL = 0, FIELD_INT = 1, FIELD_STR = 2, FIELD_EMPTY_LIST = 3 };
#define MAX_PLAIN_FIELDS 16

/* Whether any of the 8 bytes of `word` is a control character, `"` or `\\` (may say yes for a
 * word that has none, never no for one that has one: the byte-wise loop then decides). */
static inline int
word_needs_escape(uint64_t word)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = word ^ (ones * '"'), backslash = word ^ (ones * '\\');
    uint64_t control = (word - ones * 0x20) & ~word;
    return ((((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | control) & highs) != 0;
}

/* Write `src` as the inside of a JSON string; returns the end of what was written. */
static char *
escape_json(char *dst, const char *src, Py_ssize_t size)
{
    static const char hex[] = "0123456789abcdef";
    Py_ssize_t i = 0;
    /* Most text needs no escape: copy it 8 bytes at a time until a word might. */
    for (; i + 8 <= size; i += 8) {
        uint64_t word;
        memcpy(&word, src + i, 8);
        if (word_needs_escape(word)) {
            break;
        }
        memcpy(dst, &word, 8);
        dst += 8;
    }
    for (; i < size; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *dst++ = (char)c;
            continue;
        }
        *dst++ = '\\';
        switch (c) {
        case '"': *dst++ = '"'; break;
        case '\\': *dst++ = '\\'; break;
        case '\b': *dst++ = 'b'; break;
        case '\f': *dst++ = 'f'; break;
        case '\n': *dst++ = 'n'; break;
        case '\r': *dst++ = 'r'; break;
        case '\t': *dst++ = 't'; break;
        default:
            *dst++ = 'u';
            *dst++ = '0';
            *dst++ = '0';
            *dst++ = hex[c >> 4];
            *dst++ = hex[c & 0xf];
        }
    }
    return dst;
}

/* Write `value` in decimal; returns the end of what was written (sprintf costs more than the
 * rest of a frame). */
static char *
write_int(char *dst, long long value)
{
    char digits[24];
    int n = 0;
    unsigned long long magnitude = value < 0 ? 0ULL - (unsigned long long)value
                                             : (unsigned long long)value;
    do {
        digits[n++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude != 0);
    if (value < 0) {
        *dst++ = '-';
    }
    while (n > 0) {
        *dst++ = digits[--n];
    }
    return dst;
}

/* The last layout written: its fields' kinds as C numbers and the size of its fixed parts (head
 * and prefixes), read once per run of events of one class instead of once per event. Holds a
 * strong reference to the spec, so the address cannot be reused by another. */
static PyObject *layout_spec = NULL;
static long layout_kinds[MAX_PLAIN_FIELDS];
static Py_ssize_t layout_fixed;

static int
read_layout(PyObject *spec)
{
    PyObject *fields = PyTuple_GET_ITEM(spec, 1);
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    Py_ssize_t fixed = PyBytes_GET_SIZE(PyTuple_GET_ITEM(spec, 0));
    long kinds[MAX_PLAIN_FIELDS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *field = PyTuple_GET_ITEM(fields, i);
        kinds[i] = PyLong_AsLong(PyTuple_GET_ITEM(field, 2));
        if (kinds[i] == -1 && PyErr_Occurred()) {
            return -1;  /* the cache keeps the last layout, whole */
        }
        fixed += PyBytes_GET_SIZE(PyTuple_GET_ITEM(field, 0));
    }
    memcpy(layout_kinds, kinds, n * sizeof(long));
    layout_fixed = fixed;
    speedups_take(&layout_spec, spec);
    return 0;
}

/* The frame of a plain event as bytes, or (`as_text`) as a str without the frame's last byte
 * (a JSON line's text); NULL with no error set when the general path must write it. */
static PyObject *
frame_plain(PyObject *event, PyObject *spec, const Framer *framer, int as_text)
{
    PyObject *head = PyTuple_GET_ITEM(spec, 0);
    PyObject *fields = PyTuple_GET_ITEM(spec, 1);
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    if (n > MAX_PLAIN_FIELDS) {
        return NULL;
    }
    if (spec != layout_spec && read_layout(spec) < 0) {
        return NULL;
    }
    /* Copied before anything can run Python code (a descriptor, a collection's finalizer)
     * that frames another layout and replaces the cache. */
    long kinds[MAX_PLAIN_FIELDS];
    memcpy(kinds, layout_kinds, n * sizeof(long));
    Py_ssize_t fixed = layout_fixed;
    PyObject *values[MAX_PLAIN_FIELDS];
    PyObject *encoded[MAX_PLAIN_FIELDS];  /* UTF-8 of non-ASCII strings */
    for (Py_ssize_t i = 0; i < n; i++) {  /* only the fields used: no memset of the arrays */
        values[i] = encoded[i] = NULL;
    }
    const char *text[MAX_PLAIN_FIELDS];
    Py_ssize_t text_size[MAX_PLAIN_FIELDS];
    long long number[MAX_PLAIN_FIELDS];
    PyObject *result = NULL;
    int general = 0;
    Py_ssize_t size = fixed + framer->tail_size;

    for (Py_ssize_t i = 0; i < n && !general; i++) {
        PyObject *field = PyTuple_GET_ITEM(fields, i);
        PyObject *descr = PyTuple_GET_ITEM(field, 1);
        long kind = kinds[i];
        if (kind == FIELD_LITERAL) {
            continue;
        }
        PyObject *value = speedups_descr_get(descr, event);
        if (value == NULL) {
            goto done;
        }
        values[i] = value;
        if (kind == FIELD_INT) {
            int overflow = 0;
            number[i] = PyLong_CheckExact(value) ? PyLong_AsLongLongAndOverflow(value, &overflow)
                                                 : (general = 1, 0);
            general |= overflow != 0;
            size += 24;
        }
        else if (kind == FIELD_STR) {
            if (!PyUnicode_CheckExact(value)) {
                general = 1;
            }
            else if (PyUnicode_IS_ASCII(value)) {
                text[i] = (const char *)PyUnicode_DATA(value);
                text_size[i] = PyUnicode_GET_LENGTH(value);
            }
            else {
                encoded[i] = PyUnicode_AsUTF8String(value);
                if (encoded[i] == NULL) {
                    PyErr_Clear();  /* a lone surrogate: let Python say what is wrong */
                    general = 1;
                }
                else {
                    text[i] = PyBytes_AS_STRING(encoded[i]);
                    text_size[i] = PyBytes_GET_SIZE(encoded[i]);
                }
            }
            if (!general) {
                size += 2 + 6 * text_size[i];
            }
        }
        else {  /* FIELD_EMPTY_LIST: a delta without logprobs */
            general = !((PyTuple_CheckExact(value) && PyTuple_GET_SIZE(value) == 0)
                        || (PyList_CheckExact(value) && PyList_GET_SIZE(value) == 0));
            size += 2;
        }
    }
    if (general) {
        goto done;
    }

    /* Written here, then copied once into an object of the exact size (no resize). */
    char stack[2048];
    char *buffer = size <= (Py_ssize_t)sizeof(stack) ? stack : PyMem_Malloc(size);
    if (buffer == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    char *out = buffer;
    memcpy(out, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head));
    out += PyBytes_GET_SIZE(head);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *field = PyTuple_GET_ITEM(fields, i);
        PyObject *prefix = PyTuple_GET_ITEM(field, 0);
        long kind = kinds[i];
        memcpy(out, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix));
        out += PyBytes_GET_SIZE(prefix);
        if (kind == FIELD_INT) {
            out = write_int(out, number[i]);
        }
        else if (kind == FIELD_STR) {
            *out++ = '"';
            out = escape_json(out, text[i], text_size[i]);
            *out++ = '"';
        }
        else if (kind == FIELD_EMPTY_LIST) {
            *out++ = '[';
            *out++ = ']';
        }
    }
    memcpy(out, framer->tail, framer->tail_size);
    out += framer->tail_size;
    result = as_text ? PyUnicode_DecodeUTF8(buffer, out - buffer - 1, "strict")
                     : PyBytes_FromStringAndSize(buffer, out - buffer);
    if (buffer != stack) {
        PyMem_Free(buffer);
    }

done:
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(values[i]);
        Py_XDECREF(encoded[i]);
    }
    return result;
}

static PyObject *
frame_event(const Framer *framer, PyObject *event)
{
    if (framer->reference == NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "streamfold.statemachine._speedups.%s used before it was configured",
                     framer->name);
        return NULL;
    }
    PyObject *spec = PyDict_GetItemWithError(framer->specs, (PyObject *)Py_TYPE(event));
    if (spec != NULL) {
        PyObject *frame = frame_plain(event, spec, framer, 0);
        if (frame != NULL || PyErr_Occurred()) {
            return frame;
        }
    }
    else if (PyErr_Occurred()) {
        return NULL;
    }
    return PyObject_CallOneArg(framer->reference, event);
}

PyObject *
speedups_sse_event(PyObject *module, PyObject *event)
{
    (void)module;
    return frame_event(&sse_framer, event);
}

PyObject *
speedups_json_line(PyObject *module, PyObject *event)
{
    (void)module;
    return frame_event(&line_framer, event);
}

static PyObject *sequence_number_name, *type_name;

PyObject *
speedups_event_rows(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *events, *row_type, *text_of;
    if (!PyArg_ParseTuple(args, "OO!O:event_rows", &events, &PyType_Type, &row_type, &text_of)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)row_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "event_rows: the row type must be a NamedTuple");
        return NULL;
    }
    if (line_framer.reference == NULL || sequence_number_name == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "streamfold.statemachine._speedups.event_rows used before json_line "
                        "was configured");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(events, "event_rows: the events must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *rows = PyList_New(n);
    if (rows == NULL) {
        goto fail;
    }
    /* A batch is mostly deltas of one class: its `type` (fixed per plain class, as the frame's
     * head is) and its number's descriptor are looked up once per run of that class. */
    PyTypeObject *plain_class = NULL;
    PyObject *plain_type = NULL, *number_descr = NULL, *plain_spec = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *event = items[i];
        PyObject *text = NULL;
        PyObject *spec = Py_TYPE(event) == plain_class
                             ? plain_spec
                             : PyDict_GetItemWithError(line_framer.specs,
                                                       (PyObject *)Py_TYPE(event));
        if (spec != NULL) {
            text = frame_plain(event, spec, &line_framer, 1);
        }
        int plain = text != NULL;
        if (text == NULL) {
            if (PyErr_Occurred()) {
                goto fail;
            }
            text = PyObject_CallOneArg(text_of, event);
            if (text == NULL) {
                goto fail;
            }
        }
        if (plain && Py_TYPE(event) != plain_class) {
            Py_XSETREF(plain_type, speedups_slot_get(event, type_name));
            /* Held: `text_of` runs Python code between two events, which may change the class. */
            Py_XSETREF(number_descr, Py_XNewRef(_PyType_Lookup(Py_TYPE(event),
                                                               sequence_number_name)));
            plain_class = plain_type == NULL ? NULL : Py_TYPE(event);
            Py_XSETREF(plain_spec, Py_NewRef(spec));
            if (plain_type == NULL) {
                Py_DECREF(text);
                goto fail;
            }
        }
        PyObject *number, *type;
        if (plain && number_descr != NULL && Py_TYPE(number_descr)->tp_descr_get != NULL) {
            number = speedups_descr_get(number_descr, event);
            type = number == NULL ? NULL : Py_NewRef(plain_type);
        }
        else {
            number = speedups_slot_get(event, sequence_number_name);
            type = number == NULL ? NULL : speedups_slot_get(event, type_name);
        }
        PyObject *row = type == NULL ? NULL : ((PyTypeObject *)row_type)->tp_alloc(
                                                  (PyTypeObject *)row_type, 3);
        if (row == NULL) {
            Py_XDECREF(number);
            Py_XDECREF(type);
            Py_DECREF(text);
            goto fail;
        }
        PyTuple_SET_ITEM(row, 0, number);
        PyTuple_SET_ITEM(row, 1, type);
        PyTuple_SET_ITEM(row, 2, text);
        PyList_SET_ITEM(rows, i, row);
    }
    Py_DECREF(seq);
    Py_XDECREF(plain_type);
    Py_XDECREF(plain_spec);
    Py_XDECREF(number_descr);
    return rows;

fail:
    Py_DECREF(seq);
    Py_XDECREF(rows);
    Py_XDECREF(plain_type);
    Py_XDECREF(plain_spec);
    Py_XDECREF(number_descr);
    return NULL;
}

static PyObject *
configure_framer(Framer *framer, PyObject *args, const char *format)
{
    PyObject *reference, *specs;
    if (!PyArg_ParseTuple(args, format, &reference, &PyDict_Type, &specs)) {
        return NULL;
    }
    speedups_take(&framer->reference, reference);
    speedups_take(&framer->specs, specs);
    Py_RETURN_NONE;
}

PyObject *
speedups_configure_sse(PyObject *module, PyObject *args)
{
    (void)module;
    return configure_framer(&sse_framer, args, "OO!:configure_sse");
}

PyObject *
speedups_configure_json_line(PyObject *module, PyObject *args)
{
    (void)module;
    if (sequence_number_name == NULL) {
        sequence_number_name = PyUnicode_InternFromString("sequence_number");
        type_name = PyUnicode_InternFromString("type");
        if (sequence_number_name == NULL || type_name == NULL) {
            return NULL;
        }
    }
    return configure_framer(&line_framer, args, "OO!:configure_json_line");
}
