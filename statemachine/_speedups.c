/* The reducer's hot path, compiled: one token of text inside an open harmony item.
 *
 * The module's other parts: the SSE frames of plain events are `_speedups_sse.c`, and the log
 * rows (their frames, and the stores' scans of a batch) `_speedups_rows.c`.
 *
 * Why this exists: `step` runs once per generated token. In Python its hot path (see
 * `HarmonyGrammar.feed` and `_items.grow`) costs 4-6 us per token, nearly all interpreter
 * overhead over about fifteen small operations; here the same work costs well under 1 us
 * (benchmarks/bench_reducer.py measures both).
 *
 * What it does is exactly that Python hot path, nothing more: decode the token's bytes after
 * any pending partial character, make at most one delta event, and return a new OpenItem and a
 * new ResponseState (both NamedTuples, copied, never changed in place). Every other case, a
 * control token, logprobs, misuse such as a finished state or a token outside the vocabulary,
 * is handed to the Python `step` unchanged, which stays the reference: it raises the typed
 * errors and walks the grammar. tests/statemachine/test_speedups.py holds the two equal, event
 * for event and state for state, on generated traces.
 *
 * Everything the C side needs to know about the Python values (field positions, the content
 * phase marker, the delta event classes and their slots) is handed to `configure` by
 * statemachine/_accel.py, so nothing here restates the Python definitions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#include "_speedups.h"

/* Set once by configure(); owned references, kept for the life of the process. */
static PyObject *python_step = NULL;  /* the reference implementation: the general path */
static PyTypeObject *state_type = NULL;  /* ResponseState */
static PyTypeObject *item_type = NULL;   /* OpenItem */
static PyTypeObject *grammar_type = NULL; /* HarmonyGrammar exactly: a subclass may override feed */
static PyObject *content_phase = NULL;   /* HarmonyGrammar's content-phase marker */
static PyObject *reasoning_kind = NULL;  /* "reasoning": its tokens count as reasoning */
static PyObject *delta_specs = NULL;     /* kind -> (cls, 4 slot descriptors, ((descr, value), ...)) | None */
static PyObject *text_bytes_name = NULL; /* "text_bytes", the grammar's table */
static PyObject *logprob_name = NULL;
static PyObject *top_logprobs_name = NULL;
static PyObject *empty_bytes = NULL;
/* The last grammar seen and its `text_bytes` table (strong references): a response steps
 * through one grammar, and the attribute lookup is a tenth of a text step. */
static PyObject *last_grammar = NULL;
static PyObject *last_table = NULL;
/* The last item kind stepped and its entry in `delta_specs` (strong references; cleared by
 * configure): the items of a response are few, their tokens many. */
static PyObject *last_kind = NULL;
static PyObject *last_spec = NULL;

/* Field positions in ResponseState (S_) and OpenItem (I_), and their lengths. */
static Py_ssize_t S_GRAMMAR, S_SEQ, S_OPEN, S_PARSE, S_OUTPUT_TOKENS, S_REASONING_TOKENS,
    S_FINISHED, S_LEN;
static Py_ssize_t I_KIND, I_ITEM_ID, I_OUTPUT_INDEX, I_TEXT, I_PENDING, I_LEN;

/* A copy of a NamedTuple value of `type` (a tuple subclass without slots). */
static PyObject *
copy_tuple(PyTypeObject *type, PyObject *src, Py_ssize_t n)
{
    PyObject *dst = type->tp_alloc(type, n);
    if (dst == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyTuple_GET_ITEM(src, i);
        Py_INCREF(value);
        PyTuple_SET_ITEM(dst, i, value);
    }
    return dst;
}

/* Replace field `i` of a tuple this file just made; steals `value`. */
static void
set_field(PyObject *tuple, Py_ssize_t i, PyObject *value)
{
    PyObject *old = PyTuple_GET_ITEM(tuple, i);
    PyTuple_SET_ITEM(tuple, i, value);
    Py_XDECREF(old);
}

/* One delta event, as `_fast.builder` makes it: a new instance with every slot set through its
 * own descriptor, skipping the frozen class's keyword `__init__`. */
static PyObject *
build_delta(PyObject *spec, PyObject *seq, PyObject *item_id, PyObject *output_index,
            PyObject *text)
{
    PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(spec, 0);
    PyObject *slots = PyTuple_GET_ITEM(spec, 1);
    PyObject *constants = PyTuple_GET_ITEM(spec, 2);
    PyObject *values[4] = {seq, item_id, output_index, text};
    PyObject *event = cls->tp_alloc(cls, 0);
    if (event == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 4; i++) {
        PyObject *descr = PyTuple_GET_ITEM(slots, i);
        if (speedups_descr_set(descr, event, values[i]) < 0) {
            Py_DECREF(event);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(constants); i++) {
        PyObject *pair = PyTuple_GET_ITEM(constants, i);
        PyObject *descr = PyTuple_GET_ITEM(pair, 0);
        if (speedups_descr_set(descr, event, PyTuple_GET_ITEM(pair, 1)) < 0) {
            Py_DECREF(event);
            return NULL;
        }
    }
    return event;
}

static PyObject *
plus(PyObject *number, long n)
{
    if (n == 0) {
        Py_INCREF(number);
        return number;
    }
    Py_ssize_t value = PyLong_AsSsize_t(number);
    if (value == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return PyLong_FromSsize_t(value + n);
}

/* The text-token step's work, in two phases: everything that can fail is made first, then the
 * state is changed, which cannot fail. With `in_place` (the caller holds the only reference to
 * `state`, and `state` the only one to its open item: values nobody else can see) the two
 * tuples are updated where they are; otherwise new ones are made, as `step` must. On success
 * (1) `*new_state` is a new reference to the next state and `*event` the delta event or NULL
 * (none for an empty piece of text); 0 with no error set when the general path must run;
 * -1 with an error set. */
static int
text_step_core(PyObject *state, PyObject *token, int in_place, PyObject **new_state,
               PyObject **event)
{
    *new_state = NULL;
    *event = NULL;
    if (Py_TYPE(state) != state_type || !PyLong_CheckExact(token)) {
        return 0;
    }
    if (PyTuple_GET_ITEM(state, S_FINISHED) != Py_False
        || PyTuple_GET_ITEM(state, S_PARSE) != content_phase) {
        return 0;
    }
    PyObject *item = PyTuple_GET_ITEM(state, S_OPEN);
    if (Py_TYPE(item) != item_type) {
        return 0;
    }
    PyObject *grammar = PyTuple_GET_ITEM(state, S_GRAMMAR);
    PyObject *table;
    if (Py_TYPE(grammar) != grammar_type) {
        return 0;
    }
    if (grammar == last_grammar) {
        table = last_table;
        Py_INCREF(table);
    }
    else {
        table = PyObject_GetAttr(grammar, text_bytes_name);
        if (table == NULL) {
            PyErr_Clear();
            return 0;
        }
        Py_INCREF(grammar);
        Py_XSETREF(last_grammar, grammar);
        Py_INCREF(table);
        Py_XSETREF(last_table, table);
    }
    int outcome = -1;
    PyObject *joined = NULL, *text = NULL, *still_pending = NULL, *rope = NULL, *made = NULL;
    PyObject *next_seq = NULL, *output_tokens = NULL, *reasoning_tokens = NULL;
    Py_ssize_t t = PyLong_AsSsize_t(token);
    if (t == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        outcome = 0;
        goto done;
    }
    if (!PyTuple_CheckExact(table) || t < 0 || t >= PyTuple_GET_SIZE(table)) {
        outcome = 0;
        goto done;
    }
    PyObject *data = PyTuple_GET_ITEM(table, t);
    PyObject *pending = PyTuple_GET_ITEM(item, I_PENDING);
    if (!PyBytes_CheckExact(data) || !PyBytes_CheckExact(pending)) {
        outcome = 0;  /* a control token (None), or a value this path does not know */
        goto done;
    }

    /* Decode the pending partial character and this token, up to the last whole character:
     * codecs.utf_8_decode(data, "replace", False), as `grow` does. */
    const char *buf = PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    Py_ssize_t held = PyBytes_GET_SIZE(pending);
    if (held > 0) {
        joined = PyBytes_FromStringAndSize(NULL, held + size);
        if (joined == NULL) {
            goto done;
        }
        memcpy(PyBytes_AS_STRING(joined), PyBytes_AS_STRING(pending), held);
        memcpy(PyBytes_AS_STRING(joined) + held, buf, size);
        buf = PyBytes_AS_STRING(joined);
        size += held;
    }
    Py_ssize_t used = 0;
    text = PyUnicode_DecodeUTF8Stateful(buf, size, "replace", &used);
    if (text == NULL) {
        goto done;
    }
    still_pending = used < size ? PyBytes_FromStringAndSize(buf + used, size - used)
                                : Py_NewRef(empty_bytes);
    if (still_pending == NULL) {
        goto done;
    }

    PyObject *kind = PyTuple_GET_ITEM(item, I_KIND);
    PyObject *seq = PyTuple_GET_ITEM(state, S_SEQ);
    long sent = 0;
    if (PyUnicode_GET_LENGTH(text) > 0) {
        PyObject *earlier = PyTuple_GET_ITEM(item, I_TEXT);
        rope = PyTuple_Pack(2, earlier, text);
        if (rope == NULL) {
            goto done;
        }
        /* A rope is a chain of (earlier, piece) tuples as long as the answer. CPython untracks a
         * tuple of untracked values only when a collection reaches it, and reaches this chain
         * newest first, so it untracks one node per collection and every collection walks the
         * rest: about half the cost of a step. A tuple of untracked values can never be part
         * of a cycle, so it is untracked here at once, which keeps the whole chain untracked. */
        if ((earlier == Py_None || (PyTuple_CheckExact(earlier) && !PyObject_GC_IsTracked(earlier)))
            && PyUnicode_CheckExact(text)) {
            PyObject_GC_UnTrack(rope);
        }
        PyObject *spec = kind == last_kind ? last_spec : PyDict_GetItemWithError(delta_specs, kind);
        if (spec == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_RuntimeError, "no delta event for item kind %R", kind);
            }
            goto done;
        }
        if (kind != last_kind) {
            speedups_take(&last_kind, kind);
            speedups_take(&last_spec, spec);
        }
        if (spec != Py_None) {
            *event = build_delta(spec, seq, PyTuple_GET_ITEM(item, I_ITEM_ID),
                                 PyTuple_GET_ITEM(item, I_OUTPUT_INDEX), text);
            if (*event == NULL) {
                goto done;
            }
            sent = 1;
        }
    }
    int reasoning = kind == reasoning_kind;
    if (!reasoning && PyUnicode_Check(kind)
        && PyUnicode_GET_LENGTH(kind) == PyUnicode_GET_LENGTH(reasoning_kind)) {
        reasoning = PyUnicode_Compare(kind, reasoning_kind) == 0;
    }
    next_seq = plus(seq, sent);
    output_tokens = next_seq == NULL ? NULL : plus(PyTuple_GET_ITEM(state, S_OUTPUT_TOKENS), 1);
    reasoning_tokens = output_tokens == NULL
                           ? NULL
                           : plus(PyTuple_GET_ITEM(state, S_REASONING_TOKENS), reasoning);
    if (reasoning_tokens == NULL) {
        goto done;
    }
    PyObject *new_item;
    if (in_place) {
        new_item = item;
        made = Py_NewRef(state);
    }
    else {
        new_item = copy_tuple(item_type, item, I_LEN);
        made = new_item == NULL ? NULL : copy_tuple(state_type, state, S_LEN);
        if (made == NULL) {
            Py_XDECREF(new_item);
            goto done;
        }
        set_field(made, S_OPEN, new_item); /* steals the copy; releases its share of `item` */
    }

    /* Nothing below can fail. */
    set_field(new_item, I_PENDING, still_pending);
    still_pending = NULL;
    if (rope != NULL) {
        set_field(new_item, I_TEXT, rope);
        rope = NULL;
    }
    set_field(made, S_SEQ, next_seq);
    set_field(made, S_OUTPUT_TOKENS, output_tokens);
    set_field(made, S_REASONING_TOKENS, reasoning_tokens);
    next_seq = output_tokens = reasoning_tokens = NULL;
    *new_state = made;
    outcome = 1;

done:
    if (outcome != 1) {
        Py_CLEAR(*event);
        if (outcome < 0 && !PyErr_Occurred()) {
            PyErr_NoMemory();
        }
    }
    Py_DECREF(table);
    Py_XDECREF(joined);
    Py_XDECREF(text);
    Py_XDECREF(still_pending);
    Py_XDECREF(rope);
    Py_XDECREF(next_seq);
    Py_XDECREF(output_tokens);
    Py_XDECREF(reasoning_tokens);
    return outcome;
}

/* The text-token step: (new state, events); NULL with no error set when the general path must
 * run. */
static PyObject *
text_step(PyObject *state, PyObject *token)
{
    PyObject *new_state, *event;
    int outcome = text_step_core(state, token, 0, &new_state, &event);
    if (outcome <= 0) {
        return NULL;
    }
    PyObject *events = event == NULL ? PyList_New(0) : PyList_New(1);
    if (events == NULL) {
        Py_DECREF(new_state);
        Py_XDECREF(event);
        return NULL;
    }
    if (event != NULL) {
        PyList_SET_ITEM(events, 0, event); /* steals the event */
    }
    PyObject *result = PyTuple_Pack(2, new_state, events);
    Py_DECREF(new_state);
    Py_DECREF(events);
    return result;
}

static PyObject *
step(PyObject *module, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    (void)module;
    if (python_step == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "streamfold.statemachine._speedups.step used before configure()");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    /* Only step(state, token) with logprob and top_logprobs left out or None is a plain text
     * step; anything else (a stray keyword too, so it raises as Python would) goes general. */
    int plain = nargs >= 2 && nargs + nkw <= 4;
    for (Py_ssize_t i = 2; plain && i < nargs + nkw; i++) {
        plain = args[i] == Py_None;
    }
    for (Py_ssize_t i = 0; plain && i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        plain = PyUnicode_Compare(name, logprob_name) == 0
                || PyUnicode_Compare(name, top_logprobs_name) == 0;
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (plain) {
        PyObject *result = text_step(args[0], args[1]);
        if (result != NULL || PyErr_Occurred()) {
            return result;
        }
    }
    return PyObject_Vectorcall(python_step, args, nargsf, kwnames);
}

static PyObject *token_ids_name, *logprobs_name, *finish_reason_name;

/* 1 when `chunk` is one token without logprobs or a finish reason (its `token_ids` in `*ids`,
 * a new reference), else 0; -1 with an error set when an attribute cannot be read. */
static int
plain_chunk(PyObject *chunk, PyObject **ids)
{
    PyObject *names[3] = {logprobs_name, top_logprobs_name, finish_reason_name};
    *ids = speedups_slot_get(chunk, token_ids_name);
    if (*ids == NULL) {
        return -1;
    }
    if (!PyTuple_CheckExact(*ids) || PyTuple_GET_SIZE(*ids) != 1) {
        return 0;
    }
    for (int k = 0; k < 3; k++) {
        PyObject *value = speedups_slot_get(chunk, names[k]);
        if (value == NULL) {
            return -1;
        }
        Py_DECREF(value);
        if (value != Py_None) {
            return 0;
        }
    }
    return 1;
}

/* step_ready(state, chunks, start, pending) -> (state, stop): steps chunks[start:] for as long
 * as each is one plain token (no logprobs, no finish reason) that takes the compiled text path,
 * appending their events to `pending`. `stop` is the first chunk it left to the caller (one
 * that is not such a token, or whose attributes raised: stepped again the general way, it
 * raises there), or len(chunks). */
static PyObject *
step_ready(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *state, *chunks, *pending;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "OO!nO!:step_ready", &state, &PyList_Type, &chunks, &i,
                          &PyList_Type, &pending)) {
        return NULL;
    }
    if (python_step == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "streamfold.statemachine._speedups.step_ready used before configure()");
        return NULL;
    }
    Py_INCREF(state);
    for (i = i < 0 ? 0 : i; i < PyList_GET_SIZE(chunks); i++) {
        PyObject *ids = NULL;
        int plain = plain_chunk(PyList_GET_ITEM(chunks, i), &ids);
        /* A state this loop made is held here alone, and its open item by it alone: the next
         * token updates both in place instead of copying them (nobody else can see them). */
        int in_place = Py_TYPE(state) == state_type && Py_REFCNT(state) == 1
                       && Py_REFCNT(PyTuple_GET_ITEM(state, S_OPEN)) == 1;
        PyObject *new_state = NULL, *event = NULL;
        int outcome = plain == 1 ? text_step_core(state, PyTuple_GET_ITEM(ids, 0), in_place,
                                                  &new_state, &event)
                                 : -1;
        Py_XDECREF(ids);
        if (outcome <= 0) {
            PyErr_Clear();  /* the caller steps this chunk, and meets the error itself */
            break;
        }
        Py_SETREF(state, new_state);
        if (event != NULL) {
            int failed = PyList_Append(pending, event) < 0;
            Py_DECREF(event);
            if (failed) {
                Py_DECREF(state);
                return NULL;
            }
        }
    }
    return Py_BuildValue("(Nn)", state, i);
}

/* The object slot of `obj` that member descriptor `descr` stands for, or NULL where it is
 * anything else (its own get and set must run): the `__slots__` member of an attrs class or
 * a NamedTuple's field is read and written here directly, as its descriptor would. */
static PyObject **
member_slot(PyObject *descr, PyObject *obj)
{
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        return NULL;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)
        || !PyObject_TypeCheck(obj, PyDescr_TYPE(descr))) {
        return NULL;
    }
    return (PyObject **)((char *)obj + member->offset);
}

/* `descr.__get__(obj)` (a new reference): a set slot read directly (about a third of the
 * descriptor's own instructions), else the descriptor's get, which raises for an unset one. */
PyObject *
speedups_descr_get(PyObject *descr, PyObject *obj)
{
    PyObject **slot = member_slot(descr, obj);
    if (slot != NULL && *slot != NULL) {
        return Py_NewRef(*slot);
    }
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

/* `descr.__set__(obj, value)`, a slot written directly. */
int
speedups_descr_set(PyObject *descr, PyObject *obj, PyObject *value)
{
    PyObject **slot = member_slot(descr, obj);
    if (slot != NULL) {
        Py_XSETREF(*slot, Py_NewRef(value));
        return 0;
    }
    return Py_TYPE(descr)->tp_descr_set(descr, obj, value);
}

/* `getattr(obj, name)` read through the data descriptor (a slot) on obj's type, without the
 * generic lookup's walk (about a fifth of its instructions); any other attribute, or a type
 * with its own `__getattribute__`/`__getattr__`, the generic way. Data descriptors come first
 * in the generic lookup too, so the value is the same. */
PyObject *
speedups_slot_get(PyObject *obj, PyObject *name)
{
    PyTypeObject *type = Py_TYPE(obj);
    if (type->tp_getattro == PyObject_GenericGetAttr) {
        PyObject *descr = _PyType_Lookup(type, name); /* borrowed */
        if (descr != NULL && Py_TYPE(descr)->tp_descr_get != NULL
            && Py_TYPE(descr)->tp_descr_set != NULL) {
            return speedups_descr_get(descr, obj);
        }
    }
    return PyObject_GetAttr(obj, name);
}

/* Keep a strong reference to `value` in `*slot`, releasing what was there. */
void
speedups_take(PyObject **slot, PyObject *value)
{
    Py_XINCREF(value);
    Py_XSETREF(*slot, value);
}

static PyObject *
configure(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *reference, *state_cls, *item_cls, *grammar_cls, *content, *kind, *specs;
    if (!PyArg_ParseTuple(args, "OO!O!O!OUO!(nnnnnnnn)(nnnnnn):configure", &reference,
                          &PyType_Type, &state_cls, &PyType_Type, &item_cls, &PyType_Type,
                          &grammar_cls, &content, &kind,
                          &PyDict_Type, &specs, &S_GRAMMAR, &S_SEQ, &S_OPEN, &S_PARSE,
                          &S_OUTPUT_TOKENS, &S_REASONING_TOKENS, &S_FINISHED, &S_LEN, &I_KIND,
                          &I_ITEM_ID, &I_OUTPUT_INDEX, &I_TEXT, &I_PENDING, &I_LEN)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)state_cls, &PyTuple_Type)
        || !PyType_IsSubtype((PyTypeObject *)item_cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "configure: the state and item types must be NamedTuples");
        return NULL;
    }
    speedups_take(&python_step, reference);
    speedups_take((PyObject **)&state_type, state_cls);
    speedups_take((PyObject **)&item_type, item_cls);
    speedups_take((PyObject **)&grammar_type, grammar_cls);
    speedups_take(&content_phase, content);
    speedups_take(&reasoning_kind, kind);
    speedups_take(&delta_specs, specs);
    speedups_take(&last_kind, NULL);
    speedups_take(&last_spec, NULL);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"step", (PyCFunction)(void (*)(void))step, METH_FASTCALL | METH_KEYWORDS,
     "step(state, token, logprob=None, top_logprobs=None)\n--\n\n"
     "Consume exactly one token id; returns the new state and the events it caused.\n\n"
     "`logprob` and `top_logprobs` (pairs of (token_id, logprob)) are the token's, put on the\n"
     "text deltas it produces. Stepping a finished response, or one with a server-side call\n"
     "pending, or a token id outside the vocabulary raises ReducerUsageError.\n\n"
     "Compiled: one token of text inside an open harmony item is stepped in C; every other\n"
     "call runs streamfold.statemachine._reducer.step, the reference, with equal results."},
    {"step_ready", step_ready, METH_VARARGS,
     "step_ready(state, chunks, start, pending)\n--\n\n"
     "Step the run of one-token text chunks from chunks[start] in C; returns (state, stop)."},
    {"sse_event", speedups_sse_event, METH_O,
     "sse_event(event)\n--\n\n"
     "One event framed for Server-Sent Events: `event: <type>`, `data: <json>`, blank line.\n\n"
     "Compiled: delta and progress events are written in C; others by\n"
     "streamfold.statemachine._wire.sse_event, the reference, with equal bytes."},
    {"configure_sse", speedups_configure_sse, METH_VARARGS,
     "configure_sse(python_sse_event, frame_specs)\n--\n\n"
     "Tell the compiled frame writer the plain events' layouts (statemachine/_accel.py)."},
    {"json_line", speedups_json_line, METH_O,
     "json_line(event)\n--\n\n"
     "`streamfold.statemachine._wire.json_line` with plain events written in C."},
    {"configure_json_line", speedups_configure_json_line, METH_VARARGS,
     "configure_json_line(python_json_line, line_specs)\n--\n\n"
     "Tell the compiled line writer the plain events' layouts (statemachine/_accel.py)."},
    {"event_rows", speedups_event_rows, METH_VARARGS,
     "event_rows(events, row_type, text_of)\n--\n\n"
     "[row_type((e.sequence_number, e.type, text))]: each plain event's text is `json_line`'s "
     "line without its newline, every other's is `text_of(e)`."},
    {"row_frames", speedups_row_frames, METH_O,
     "row_frames(rows)\n--\n\n"
     "b''.join(f'event: {type}\\ndata: {data}\\n\\n'.encode() for _, type, data in rows): the SSE "
     "frames of log rows, one bytes object."},
    {"row_socket_frames", speedups_row_socket_frames, METH_VARARGS,
     "row_socket_frames(rows, suffix)\n--\n\n"
     "The WebSocket text frames (unmasked, final) of log rows, one bytes object: each row's data "
     "as one message, its closing brace replaced by `suffix` when that is not empty."},
    {"rows_numbered", speedups_rows_numbered, METH_VARARGS,
     "rows_numbered(reference, rows, first)\n--\n\n"
     "[row[0] for row in rows] == list(range(first, first + len(rows))), in one pass; "
     "`reference(rows, first)` answers for rows it does not read itself."},
    {"last_of_kinds", speedups_last_of_kinds, METH_VARARGS,
     "last_of_kinds(reference, rows, kinds)\n--\n\n"
     "The index of the last row whose type (row[1]) is in the frozenset `kinds`, or -1; "
     "`reference(rows, kinds)` answers for rows it does not read itself."},
    {"configure", configure, METH_VARARGS,
     "configure(python_step, ResponseState, OpenItem, HarmonyGrammar, content_phase, "
     "reasoning_kind, "
     "delta_specs, state_positions, item_positions)\n--\n\n"
     "Tell the compiled path the Python values it works on (statemachine/_accel.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "The reducer's text-token hot path in C (see statemachine/_accel.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    text_bytes_name = PyUnicode_InternFromString("text_bytes");
    logprob_name = PyUnicode_InternFromString("logprob");
    top_logprobs_name = PyUnicode_InternFromString("top_logprobs");
    empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    token_ids_name = PyUnicode_InternFromString("token_ids");
    logprobs_name = PyUnicode_InternFromString("logprobs");
    finish_reason_name = PyUnicode_InternFromString("finish_reason");
    if (text_bytes_name == NULL || logprob_name == NULL || top_logprobs_name == NULL
        || empty_bytes == NULL || token_ids_name == NULL || logprobs_name == NULL
        || finish_reason_name == NULL) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
