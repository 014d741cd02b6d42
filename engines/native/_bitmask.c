/* The token bitmask applied to float32 logits on the CPU, in one pass over the mask's words.
 *
 * Why this exists: a step of the native engine masks every constrained row before sampling.
 * With numpy and torch (engines/native/bitmask.py, the reference and the fallback) the work is
 * several whole-mask passes (compare, nonzero, gather, unpack) and a gather/scatter of every
 * 32-token block that is not all allowed: about 0.5 ms at 16 rows of gpt-oss's 201,088 tokens,
 * as much as the rest of the constraint's cost together. Here one sequential read of the words
 * skips the all-ones ones (free text: all but a few hundred a row, four at a time) and writes
 * -inf only where a bit is clear, so the logits that stay are never touched. (Finding the
 * blocks to mask 32 at a time and prefetching them before writing was tried: slower in JSON
 * rows, no faster in free text, against this file built by setup.py.)
 *
 * apply_f32(logits_ptr, words_ptr, rows, width, vocab, row_stride): logits is float32
 * [rows, >= vocab] with `row_stride` floats between rows; words is int32 [rows, width],
 * contiguous, llguidance's layout (bit j of word w allows token 32 * w + j; bits past `vocab`
 * are ignored). The caller (bitmask.py) checks the shapes, dtypes and devices; the GIL is
 * released for the loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static void mask_rows(float *logits, const uint32_t *words, Py_ssize_t rows, Py_ssize_t width,
                      Py_ssize_t vocab, Py_ssize_t row_stride) {
    const float ninf = -INFINITY;
    for (Py_ssize_t r = 0; r < rows; r++) {
        float *row = logits + r * row_stride;
        const uint32_t *w = words + r * width;
        for (Py_ssize_t i = 0; i < width; i++) {
            /* Free text: nearly every word is all ones; four at a time are skipped with two
             * 64-bit reads (the scan was half the pass: 16 rows of all ones took 50 us). */
            if ((i & 3) == 0 && i + 4 <= width) {
                uint64_t a, b;
                memcpy(&a, w + i, 8);
                memcpy(&b, w + i + 2, 8);
                if ((a & b) == ~(uint64_t)0) {
                    i += 3;
                    continue;
                }
            }
            uint32_t bits = w[i];
            if (bits == 0xFFFFFFFFu) {
                continue;
            }
            Py_ssize_t base = i * 32;
            Py_ssize_t n = vocab - base < 32 ? vocab - base : 32;
            if (n <= 0) {
                break;
            }
            float *block = row + base;
            if (bits == 0) {
                for (Py_ssize_t j = 0; j < n; j++) {
                    block[j] = ninf;
                }
                continue;
            }
            uint32_t off = ~bits;
            if (n < 32) {
                off &= (1u << n) - 1u;
            }
#if defined(__GNUC__) || defined(__clang__)
            while (off) {
                block[__builtin_ctz(off)] = ninf;
                off &= off - 1u;
            }
#else
            for (int j = 0; off; j++, off >>= 1) {
                if (off & 1u) {
                    block[j] = ninf;
                }
            }
#endif
        }
    }
}

static PyObject *apply_f32(PyObject *self, PyObject *args) {
    unsigned long long logits_ptr, words_ptr;
    Py_ssize_t rows, width, vocab, row_stride;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKnnnn", &logits_ptr, &words_ptr, &rows, &width, &vocab,
                          &row_stride)) {
        return NULL;
    }
    if (rows < 0 || width < 0 || vocab < 0 || vocab > width * 32 || row_stride < vocab) {
        PyErr_SetString(PyExc_ValueError, "apply_f32: inconsistent shapes");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    mask_rows((float *)(uintptr_t)logits_ptr, (const uint32_t *)(uintptr_t)words_ptr, rows,
              width, vocab, row_stride);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"apply_f32", apply_f32, METH_VARARGS,
     "Set to -inf each float32 logit whose bit in the int32 bitmask is clear (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bitmask", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bitmask(void) { return PyModule_Create(&module); }
