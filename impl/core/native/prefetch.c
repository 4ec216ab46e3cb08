/* impl.core._prefetch: ask the CPU for the objects of a batch before the loop over it runs.
 *
 * The compiled build's memory-latency hint for the block pool. Touching or freeing a batch of
 * blocks reads and writes the first cache lines of every block; once the pool outgrows the
 * caches each block is a miss, and a compiled loop body is long enough that the CPU overlaps
 * only a couple of them. Issuing a prefetch for every block of the batch first lets the
 * misses run together. It changes no state: the objects are not read here, only their
 * addresses (the list's item pointers) are.
 *
 * prefetch(objects: list, start: int, stop: int) -> None
 *   Prefetches, for writing, objects[start:stop] (clamped to the list): the cache line holding
 *   each object's start and the line 48 bytes further (a block's reference count and links lie
 *   in its first 48 bytes, which cross a line boundary for about half the blocks of a pool).
 *   A caller walking a long list asks for the next stretch while it works on this one: a few
 *   dozen lines in flight is what the CPU can overlap, and lines asked for much earlier would
 *   be evicted again before their turn.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { HOT_BYTES = 48 };

static PyObject *prefetch(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "prefetch(objects, start, stop): 3 arguments");
        return NULL;
    }
    PyObject *objects = args[0];
    if (!PyList_CheckExact(objects)) {
        PyErr_Format(PyExc_TypeError, "prefetch: expected a list, got %.80s",
                     Py_TYPE(objects)->tp_name);
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || stop == -1) && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(objects);
    if (start < 0) {
        start = 0;
    }
    if (stop > count) {
        stop = count;
    }
    PyObject **items = PySequence_Fast_ITEMS(objects);
    for (Py_ssize_t i = start; i < stop; i++) {
        const char *object = (const char *)items[i];
        __builtin_prefetch(object, 1, 3);
        __builtin_prefetch(object + HOT_BYTES, 1, 3);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"prefetch", (PyCFunction)(void (*)(void))prefetch, METH_FASTCALL,
     "prefetch(objects: list, start: int, stop: int) -> None: prefetch the first cache lines "
     "of objects[start:stop] for writing."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef prefetch_module = {
    PyModuleDef_HEAD_INIT, "_prefetch",
    "Cache-line prefetch of a batch of objects (impl/core/native/prefetch.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__prefetch(void) { return PyModule_Create(&prefetch_module); }
