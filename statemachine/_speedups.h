/* What the two halves of the `_speedups` extension share (see `_speedups.c`). */
#ifndef STREAMFOLD_SPEEDUPS_H
#define STREAMFOLD_SPEEDUPS_H

#include <Python.h>

void speedups_take(PyObject **slot, PyObject *value);
PyObject *speedups_slot_get(PyObject *obj, PyObject *name);
PyObject *speedups_descr_get(PyObject *descr, PyObject *obj);
int speedups_descr_set(PyObject *descr, PyObject *obj, PyObject *value);
PyObject *speedups_sse_event(PyObject *module, PyObject *event);
PyObject *speedups_configure_sse(PyObject *module, PyObject *args);
PyObject *speedups_json_line(PyObject *module, PyObject *event);
PyObject *speedups_configure_json_line(PyObject *module, PyObject *args);
PyObject *speedups_event_rows(PyObject *module, PyObject *args);
PyObject *speedups_row_frames(PyObject *module, PyObject *rows);
PyObject *speedups_row_socket_frames(PyObject *module, PyObject *args);
PyObject *speedups_rows_numbered(PyObject *module, PyObject *args);
PyObject *speedups_last_of_kinds(PyObject *module, PyObject *args);

#endif
